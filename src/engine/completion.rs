//! Raw text completion (the legacy `/v1/completions`): a prompt of text or token ids
//! continued as it is, no chat template, or — with a suffix — fill-in-the-middle for
//! a model whose vocabulary has FIM tokens ([`crate::tokenizer::FimTokens`]).

use super::chat::{check_context, PreparedTurn};
use super::Engine;
use crate::{Error, Result};

/// What a completion continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompletionPrompt {
    /// Text, tokenized as the model expects a raw prompt: BOS when the GGUF asks for
    /// it, control tokens spelled in it recognised (`<|im_start|>` is the token), as
    /// llama.cpp's server reads a prompt.
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
}

impl CompletionPrompt {
    fn text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(t),
            Self::Tokens(_) => None,
        }
    }

    /// The prompt's token ids. For fill-in-the-middle (`suffix` given):
    /// `prefix_token PROMPT suffix_token SUFFIX middle_token` (the
    /// prefix-suffix-middle order Qwen 2.5 Coder, StarCoder and CodeLlama are trained
    /// on; BOS first when the GGUF asks for it); the model's output is the middle.
    ///
    /// Cost: one tokenization of the prompt (and suffix).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] (`suffix`) when the vocabulary has no FIM tokens, or
    /// (`prompt`) for a token id outside the vocabulary; [`Error::ContextOverflow`] for
    /// text that certainly does not fit the window; tokenizer errors.
    pub fn token_ids(&self, engine: &Engine, suffix: Option<&str>) -> Result<Vec<u32>> {
        let tok = engine.tokenizer();
        let vocab = tok.vocab_size();
        if let Self::Tokens(ids) = self {
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(Error::InvalidParameter {
                    name: "prompt",
                    reason: format!("token id {bad} is outside the vocabulary ({vocab} tokens)"),
                });
            }
        }
        // Bounded by the window, not the body: text that certainly does not fit is
        // refused before it is tokenized in full (as a chat prompt is).
        let context = engine.context_length();
        for text in [self.text(), suffix].into_iter().flatten() {
            if let Some(at_least) = tok.certainly_exceeds(text, crate::tokenizer::EncodeOptions::TEMPLATE, context)? {
                return Err(Error::ContextOverflow { prompt_tokens: at_least, context_length: context });
            }
        }
        let Some(suffix) = suffix else {
            return match self {
                Self::Text(t) => tok.encode_prompt(t, true),
                Self::Tokens(ids) => Ok(ids.clone()),
            };
        };
        let fim = tok.fim().ok_or_else(|| Error::InvalidParameter {
            name: "suffix",
            reason: "this model's vocabulary has no fill-in-the-middle tokens (a coder model such as Qwen 2.5 \
                     Coder, StarCoder or CodeLlama has them); send the prompt without `suffix`"
                .into(),
        })?;
        let text = crate::tokenizer::EncodeOptions::TEXT;
        let mut ids = Vec::new();
        if let (true, Some(bos)) = (tok.add_bos(), tok.bos()) {
            ids.push(bos);
        }
        ids.push(fim.prefix);
        match self {
            Self::Text(t) => ids.extend(tok.encode(t, text)?),
            Self::Tokens(t) => ids.extend(t.iter().copied().filter(|&id| Some(id) != tok.bos())),
        }
        ids.push(fim.suffix);
        ids.extend(tok.encode(suffix, text)?);
        ids.push(fim.middle);
        Ok(ids)
    }
}

/// Prepare a raw completion of `prompt` (fill-in-the-middle with `suffix`): its
/// output is free text, ended by an end-of-generation token, a stop string of the
/// request or `max_tokens`. Run it with [`PreparedTurn::run`]; the turn's `content` is
/// the completion.
///
/// ```no_run
/// use toolgate::engine::completion::{prepare_completion, CompletionPrompt};
/// use toolgate::engine::{Engine, GenerateParams};
/// use toolgate::model::DeviceChoice;
///
/// let mut engine = Engine::load("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", DeviceChoice::Cpu)?;
/// let prompt = CompletionPrompt::Text("def add(a, b):\n    ".into());
/// let turn = prepare_completion(&mut engine, &prompt, Some("\n\nprint(add(1, 2))\n"))?
///     .run(&mut engine, &GenerateParams::default(), |_| {})?;
/// println!("{}", turn.content);
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: one tokenization.
///
/// # Errors
/// As [`CompletionPrompt::token_ids`]; [`Error::InvalidParameter`] for an empty
/// prompt; [`Error::ContextOverflow`].
pub fn prepare_completion(
    engine: &mut Engine,
    prompt: &CompletionPrompt,
    suffix: Option<&str>,
) -> Result<PreparedTurn> {
    let ids = prompt.token_ids(engine, suffix)?;
    if ids.is_empty() {
        return Err(Error::InvalidParameter { name: "prompt", reason: "the prompt is empty".into() });
    }
    check_context(engine, &ids)?;
    Ok(PreparedTurn::free_text(ids))
}
