//! The generation loop and the embedding API.
//!
//! [`Engine`] owns a loaded model and its tokenizer. [`Engine::generate`] runs
//! prefill (in chunks) and decode, samples each token through the
//! [`crate::sampling`] pipeline, streams text as it becomes complete, and stops on an
//! end-of-generation token, a stop string, `max_tokens` or the context limit.
//! [`Engine::into_batched`] splits one engine into several that generate at the same
//! time on one copy of the weights, their decode steps batched ([`batch`]).

pub mod batch;
pub mod chat;
pub mod conversation;
pub mod stop;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::gguf::GgufFile;
use crate::model::{self, DeviceChoice, LoadOptions, Model};
use crate::sampling::{log_probs, Sampler, SamplingParams, TokenLogprob, MAX_TOP_LOGPROBS};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

use stop::StopMatcher;

/// Return the allocator's free pages to the system (glibc's `malloc_trim`): loading
/// frees many small allocations (GGUF metadata values, tokenizer build tables) that
/// would otherwise stay resident. Nothing elsewhere.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: `malloc_trim` only releases memory glibc's allocator holds free; it is
        // thread-safe and has no preconditions.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// A constraint that switches on when its trigger appears in the output.
#[derive(Debug, Clone)]
pub struct LazyConstraint {
    /// The grammar of the constrained region, trigger included.
    pub grammar: std::sync::Arc<crate::grammar::Grammar>,
    /// The vocabulary's token bytes.
    pub vocab: std::sync::Arc<crate::grammar::TokenVocab>,
    /// The bytes that switch the constraint on (special tokens as `0xFF`+text).
    pub trigger: Vec<u8>,
}

/// How a generation is constrained (the engine's internal form of the public
/// `generate*` entry points).
pub(crate) enum Constraint<'a> {
    None,
    Always(&'a mut crate::grammar::Matcher),
    /// The lazy constraint, its matcher once triggered, and the bytes generated so far.
    Lazy(LazyConstraint, Option<Box<crate::grammar::Matcher>>, Vec<u8>),
}

impl Constraint<'_> {
    /// A lazy constraint, not yet triggered.
    pub(crate) fn lazy(lazy: LazyConstraint) -> Self {
        Constraint::Lazy(lazy, None, Vec::new())
    }

    fn active(&mut self) -> Option<&mut crate::grammar::Matcher> {
        match self {
            Constraint::None => None,
            Constraint::Always(m) => Some(m),
            Constraint::Lazy(_, Some(m), _) => Some(m),
            Constraint::Lazy(_, None, _) => None,
        }
    }

    /// Record a freely sampled token; switch the constraint on if the trigger is now
    /// in the output.
    fn observe(&mut self, token: u32) -> Result<()> {
        let Constraint::Lazy(lazy, slot @ None, seen) = self else { return Ok(()) };
        seen.extend_from_slice(lazy.vocab.token_bytes(token));
        if let Some(at) = find(seen, &lazy.trigger) {
            // If the text after the trigger cannot start a call, stay free.
            if let Ok(m) = lazy.grammar.matcher_with_prefix(lazy.vocab.clone(), &seen[at..]) {
                *slot = Some(Box::new(m));
            }
            seen.clear();
        }
        Ok(())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Prompt tokens processed per forward pass during prefill.
pub const PREFILL_CHUNK: usize = 256;

/// With this many tokens or fewer left in the budget, a constrained generation checks
/// each step how many tokens the shortest completion needs
/// ([`crate::grammar::Matcher::completion_plan`]).
pub const CLOSE_LOOKAHEAD: usize = 96;

/// Closing starts when the shortest completion plus this margin no longer fits the
/// remaining budget (one token can open several structures at once).
pub const CLOSE_MARGIN: usize = 8;

/// Longest completion searched for, in bytes.
pub const CLOSE_MAX_BYTES: usize = 512;

/// Parameters of one generation.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    /// Maximum new tokens.
    pub max_tokens: usize,
    /// Sampling pipeline settings.
    pub sampling: SamplingParams,
    /// Stop when the generated text contains any of these (the stop string is not
    /// returned).
    pub stop: Vec<String>,
    /// Stop on the model's end-of-generation tokens (EOS, end-of-turn).
    pub stop_on_eog: bool,
    /// Keep the text of control tokens (other than the end-of-generation tokens that
    /// stop generation) in the streamed and returned text — needed where a family's
    /// call marker is a control token (Qwen's `<tool_call>`). Default `false`.
    pub keep_special_text: bool,
    /// Set to `true` from anywhere to stop the generation before its next token
    /// ([`FinishReason::Cancelled`]); the server sets it when a client disconnects.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Record each generated token's log-probability and this many most likely
    /// alternatives (0 to [`crate::sampling::MAX_TOP_LOGPROBS`]) in
    /// [`Generation::logprobs`]; `None` (the default) records nothing. Costs one
    /// log-softmax over the vocabulary per token.
    pub logprobs: Option<usize>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            stop_on_eog: true,
            keep_special_text: false,
            cancel: None,
            logprobs: None,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` or the context window was reached.
    Length,
    /// [`GenerateParams::cancel`] was set.
    Cancelled,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The result of one generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated text (stop string and end-of-turn token excluded).
    pub text: String,
    /// Generated token ids (the end-of-generation token, if any, included).
    pub tokens: Vec<u32>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Leading prompt tokens whose keys and values were already cached (not prefilled).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Wall time of prefill (prompt processing up to the first sampled token).
    pub prompt_time: Duration,
    /// Wall time of decoding the remaining tokens.
    pub decode_time: Duration,
    /// Time spent computing constraint masks (part of prompt and decode time).
    pub mask_time: Duration,
    /// With [`GenerateParams::logprobs`]: one entry per generated token, in order (the
    /// end-of-generation token that ended the turn excluded); otherwise empty.
    pub logprobs: Vec<TokenLogprob>,
}

impl Generation {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }

    /// Decode tokens per second (tokens after the first, over decode time).
    pub fn decode_tps(&self) -> f64 {
        self.completion_tokens.saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// A loaded model with its tokenizer.
pub struct Engine {
    model: Box<dyn Model>,
    tokenizer: Arc<Tokenizer>,
    gguf: Arc<GgufFile>,
    /// The tokens whose keys and values are in the model's cache, in order: the next
    /// generation skips prefilling the prefix its prompt shares with them.
    cached: Vec<u32>,
    /// The vocabulary trie constrained generation masks with, built on first use.
    /// Shared by the engines [`Engine::into_batched`] makes, like the grammars.
    vocab: Arc<OnceLock<Arc<crate::grammar::TokenVocab>>>,
    /// Compiled grammars by regex, so requests with the same tools or schema share one
    /// (and its warm masks).
    grammars: Arc<Mutex<std::collections::HashMap<String, Arc<crate::grammar::Grammar>>>>,
}

/// Grammars kept by [`Engine::grammar`] before the cache starts over.
pub const GRAMMAR_CACHE_ENTRIES: usize = 16;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("gguf", &self.gguf).field("tokenizer", &self.tokenizer).finish()
    }
}

impl Engine {
    /// Load a GGUF model file with default options on `device`.
    ///
    /// # Errors
    /// Any GGUF, tokenizer, architecture or device error.
    pub fn load(path: impl AsRef<Path>, device: DeviceChoice) -> Result<Self> {
        Self::load_with(path, &LoadOptions { device, ..LoadOptions::default() })
    }

    /// Load a GGUF model file.
    ///
    /// # Errors
    /// Any GGUF, tokenizer, architecture or device error.
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        let mut gguf = GgufFile::open(path)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        // The tokenizer holds the vocabulary now; building it also left freed memory
        // behind (SentencePiece's merge candidates): give both back before the weights
        // arrive, so they do not add to the peak.
        gguf.release_vocabulary();
        release_freed_memory();
        let model = model::load(&gguf, opts)?;
        release_freed_memory();
        if model.vocab_size() < tokenizer.vocab_size() {
            return Err(Error::Tensor {
                path: gguf.path().to_path_buf(),
                name: "output.weight".into(),
                reason: format!("{} logits for {} tokens", model.vocab_size(), tokenizer.vocab_size()),
            });
        }
        Ok(Self {
            model,
            tokenizer: Arc::new(tokenizer),
            gguf: Arc::new(gguf),
            cached: Vec::new(),
            vocab: Default::default(),
            grammars: Default::default(),
        })
    }

    /// Split into `n` engines that generate at the same time, each on its own thread,
    /// sharing this one's weights, tokenizer, constraint vocabulary and grammar cache;
    /// each holds one sequence (its own KV cache and cached prefix). Their one-token
    /// decode steps run batched: a step waits until every engine that is decoding has
    /// its next token, then decodes them all in one pass over the weights
    /// ([`batch::Batcher`]). The returned [`batch::BatchStats`] counts the steps.
    ///
    /// ```no_run
    /// use toolgate::engine::{Engine, GenerateParams};
    /// use toolgate::model::DeviceChoice;
    /// let engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", DeviceChoice::Cpu)?;
    /// let (engines, stats) = engine.into_batched(2)?;
    /// let texts: Vec<String> = std::thread::scope(|s| {
    ///     let handles: Vec<_> = engines
    ///         .into_iter()
    ///         .zip(["The capital of France is", "Once upon a time"])
    ///         .map(|(mut e, p)| s.spawn(move || e.generate_text(p, &GenerateParams::default(), |_| {}).map(|g| g.text)))
    ///         .collect();
    ///     handles.into_iter().map(|h| h.join().unwrap()).collect::<toolgate::Result<_>>()
    /// })?;
    /// println!("{texts:?}, mean batch {:.2}", stats.rows() as f64 / stats.steps() as f64);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    ///
    /// Cost: no copy of the weights; each sequence's KV cache grows as it is used.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `n = 0` or a model that holds one sequence only.
    pub fn into_batched(self, n: usize) -> Result<(Vec<Engine>, batch::BatchStats)> {
        let Engine { model, tokenizer, gguf, vocab, grammars, .. } = self;
        let (slots, stats) = batch::Batcher::split(model, n)?;
        let engines = slots
            .into_iter()
            .map(|m| Engine {
                model: Box::new(m),
                tokenizer: tokenizer.clone(),
                gguf: gguf.clone(),
                cached: Vec::new(),
                vocab: vocab.clone(),
                grammars: grammars.clone(),
            })
            .collect();
        Ok((engines, stats))
    }

    /// Tell the model this engine's sequence is not decoding any more (see
    /// [`Model::finish_sequence`]). Every generation does this when it ends, however it
    /// ends; call it after catching a panic that unwound out of one, so the engines it
    /// is batched with do not wait for it.
    pub fn finish_sequence(&mut self) {
        self.model.finish_sequence();
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The GGUF file (metadata such as the chat template).
    pub fn gguf(&self) -> &GgufFile {
        &self.gguf
    }

    /// The model. Using it directly may change its cache, so the engine forgets its
    /// cached prefix (the next generation prefills its whole prompt).
    pub fn model(&mut self) -> &mut dyn Model {
        self.cached.clear();
        self.model.as_mut()
    }

    /// The vocabulary as the constraint engine walks it (token bytes in a trie).
    ///
    /// Cost: built once per engine on first call (42 ms for SmolLM2's 49k tokens, about
    /// 0.5 s for Gemma 3's 262k), then shared by every constrained request.
    pub fn token_vocab(&self) -> std::sync::Arc<crate::grammar::TokenVocab> {
        self.vocab.get_or_init(|| Arc::new(crate::grammar::TokenVocab::from_tokenizer(&self.tokenizer))).clone()
    }

    /// The compiled grammar of `regex` and the `rules` it references
    /// ([`crate::grammar::Grammar::from_rules`]), from the engine's cache of the last
    /// [`GRAMMAR_CACHE_ENTRIES`] grammars or compiled now. A cached grammar keeps the
    /// masks earlier requests computed, so the same tools cost a mask walk per DFA state
    /// once, not once per request.
    ///
    /// Cost: a hash of the grammar's text; on a miss, the compile.
    ///
    /// # Errors
    /// As [`crate::grammar::Grammar::from_rules`].
    pub fn grammar(
        &self,
        regex: &str,
        rules: &crate::grammar::regex::Rules,
    ) -> Result<std::sync::Arc<crate::grammar::Grammar>> {
        // Each part prefixed by its length: the key names one grammar.
        let sets = format!("{:?}", rules.sets());
        let key: String = std::iter::once(regex)
            .chain(rules.bodies().iter().map(String::as_str))
            .chain(std::iter::once(sets.as_str()))
            .map(|part| format!("{}:{part}", part.len()))
            .collect();
        let mut cache = self.grammars.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = cache.get(&key) {
            return Ok(g.clone());
        }
        let g = Arc::new(crate::grammar::Grammar::from_rules(regex, rules)?);
        if cache.len() >= GRAMMAR_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, g.clone());
        Ok(g)
    }

    /// The model's context window, in tokens.
    pub fn context_length(&self) -> usize {
        self.model.context_length()
    }

    /// Tokens whose keys and values this engine's sequence holds (what the next prompt
    /// can reuse a prefix of).
    pub fn cached_len(&self) -> usize {
        self.cached.len()
    }

    /// How many leading tokens of `prompt` the next generation would not need to
    /// prefill, because the model's cache already holds them (a shared system prompt
    /// and tool list, the earlier turns of a conversation). At least one prompt token is
    /// always run, for its logits.
    pub fn reusable_prefix(&self, prompt: &[u32]) -> usize {
        let common = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        common.min(prompt.len().saturating_sub(1))
    }

    /// Generate from a raw text prompt (BOS added if the model wants it; special-token
    /// text in `prompt` is text unless `parse_special`).
    ///
    /// # Errors
    /// As [`Engine::generate`].
    pub fn generate_text(
        &mut self,
        prompt: &str,
        params: &GenerateParams,
        on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        let ids = self.tokenizer.encode_prompt(prompt, false)?;
        self.generate(&ids, params, on_text)
    }

    /// Generate a continuation of `prompt` (token ids), calling `on_text` with each
    /// piece of text as soon as it is complete and cannot be part of a stop string.
    ///
    /// The KV cache keeps the prefix this prompt shares with the previous call's
    /// tokens ([`Engine::reusable_prefix`]) and prefills only the rest: a repeated
    /// system prompt and tool list, or the earlier turns of a conversation, cost
    /// nothing the second time. The output is what a full prefill gives, up to
    /// floating-point rounding in the last prompt position.
    ///
    /// # Errors
    /// [`Error::ContextOverflow`] if the prompt does not fit; [`Error::InvalidParameter`]
    /// for bad sampling parameters or an empty prompt; model errors.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        self.generate_with(prompt, params, Constraint::None, on_text, &mut |_| {})
    }

    /// Generate freely until the bytes of `lazy.trigger` appear (a tool-call marker),
    /// then constrain the rest with `lazy.grammar`, which must start with the trigger.
    /// This is `tool_choice: auto`: text stays free, a call that starts is always valid.
    ///
    /// # Errors
    /// As [`Engine::generate`].
    pub fn generate_lazy(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        lazy: LazyConstraint,
        on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        self.generate_with(prompt, params, Constraint::lazy(lazy), on_text, &mut |_| {})
    }

    /// Like [`Engine::generate`], with every token constrained by `matcher` (a grammar
    /// compiled from a JSON Schema): only tokens the grammar allows are sampled,
    /// end-of-turn only where the output is complete, and tokens the grammar forces
    /// are appended without sampling. Generation ends when the grammar is complete.
    ///
    /// # Errors
    /// As [`Engine::generate`]; [`Error::InvalidParameter`] if the grammar allows no
    /// token (it cannot, for a grammar built from a satisfiable schema).
    pub fn generate_constrained(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        matcher: &mut crate::grammar::Matcher,
        on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        self.generate_with(prompt, params, Constraint::Always(matcher), on_text, &mut |_| {})
    }

    /// The one generation loop. `on_token` sees each token's log-probability (with
    /// [`GenerateParams::logprobs`]) before `on_text` sees its text. However it ends,
    /// the model is told the sequence stopped decoding.
    pub(crate) fn generate_with(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        constraint: Constraint<'_>,
        on_text: impl FnMut(&str),
        on_token: &mut dyn FnMut(&TokenLogprob),
    ) -> Result<Generation> {
        let out = self.generation_loop(prompt, params, constraint, on_text, on_token);
        self.model.finish_sequence();
        out
    }

    fn generation_loop(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        mut constraint: Constraint<'_>,
        mut on_text: impl FnMut(&str),
        on_token: &mut dyn FnMut(&TokenLogprob),
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::InvalidParameter { name: "prompt", reason: "empty prompt".into() });
        }
        if params.logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
            return Err(Error::InvalidParameter {
                name: "top_logprobs",
                reason: format!("must be between 0 and {MAX_TOP_LOGPROBS}"),
            });
        }
        let ctx = self.model.context_length();
        if prompt.len() >= ctx {
            return Err(Error::ContextOverflow { prompt_tokens: prompt.len(), context_length: ctx });
        }
        let mut sampler = Sampler::new(params.sampling.clone())?;
        for &t in prompt {
            sampler.accept(t);
        }
        let started = Instant::now();
        // Prefix reuse: keep the cached keys/values of the prefix this prompt shares
        // with the previous sequence and prefill only the rest.
        let reuse = self.reusable_prefix(prompt);
        self.model.truncate(reuse);
        self.cached.truncate(reuse);
        let mut logits = Vec::new();
        for chunk in prompt[reuse..].chunks(PREFILL_CHUNK) {
            logits = self.model.forward(chunk)?;
            self.cached.extend_from_slice(chunk);
        }
        let eog = self.tokenizer.eog_tokens().to_vec();
        let mut detok = self.tokenizer.detokenizer(!params.keep_special_text);
        let mut stops = StopMatcher::new(&params.stop);
        let mut tokens = Vec::new();
        let mut prompt_time = Duration::ZERO;
        let mut mask_time = Duration::ZERO;
        let mut finish = FinishReason::Length;
        let mut stop_hit = false;
        let mut closing = false;
        let (mut last_accept, mut span): (Option<usize>, usize) = (None, 0);
        let mut active_since: Option<usize> = None;
        let mut decode_started = Instant::now();
        let mut mask = crate::sampling::TokenMask::new(self.tokenizer.vocab_size());
        let (mut logprobs, mut step_logprobs) = (Vec::new(), Vec::new());
        while tokens.len() < params.max_tokens {
            if params.cancel.as_ref().is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                finish = FinishReason::Cancelled;
                break;
            }
            let remaining = params.max_tokens - tokens.len();
            // The model's own distribution, before the sampler changes `logits`.
            let top = params.logprobs.map(|k| log_probs(&logits, k, &mut step_logprobs));
            let next = match constraint.active() {
                Some(m) => {
                    if m.is_finished() {
                        finish = FinishReason::Stop;
                        break;
                    }
                    let t = Instant::now();
                    // Near the end of the budget, the shortest way to close the
                    // constrained region.
                    let plan =
                        if closing || remaining <= CLOSE_LOOKAHEAD { m.completion_plan(CLOSE_MAX_BYTES) } else { None };
                    // A closing point: complete, or one token from it (the `]` of a list
                    // of calls). With less budget left than the longest stretch between
                    // two closing points took (one more call), close here rather than
                    // start something the budget would cut.
                    let since = *active_since.get_or_insert(tokens.len());
                    let closing_point = match &plan {
                        Some(p) => p.len() <= 1,
                        None => m.is_accepting(),
                    };
                    if closing_point {
                        let j = last_accept.unwrap_or(since);
                        if tokens.len() > j + 1 {
                            span = span.max(tokens.len() - j);
                        }
                        last_accept = Some(tokens.len());
                        if span > 0 && remaining < span + CLOSE_MARGIN {
                            closing = true;
                        }
                    }
                    let mut closing_token = None;
                    match plan {
                        _ if closing && m.is_accepting() => {
                            mask_time += t.elapsed();
                            break; // closed; the budget is spent
                        }
                        Some(plan) if !plan.is_empty() && (closing || plan.len() + CLOSE_MARGIN >= remaining) => {
                            closing = true;
                            closing_token = Some(plan[0]);
                        }
                        _ => {}
                    }
                    match closing_token.or_else(|| m.forced_token()) {
                        Some(tok) => {
                            mask_time += t.elapsed();
                            tok
                        }
                        None => {
                            m.fill_mask(&mut mask)?;
                            mask_time += t.elapsed();
                            sampler.sample(&mut logits, Some(&mask))?
                        }
                    }
                }
                None => sampler.sample(&mut logits, None)?,
            };
            if let Some(m) = constraint.active() {
                let t = Instant::now();
                m.commit(next)?;
                mask_time += t.elapsed();
            } else {
                constraint.observe(next)?;
            }
            if tokens.is_empty() {
                prompt_time = started.elapsed();
                decode_started = Instant::now();
            }
            tokens.push(next);
            sampler.accept(next);
            if params.stop_on_eog && eog.contains(&next) {
                finish = FinishReason::Stop;
                break;
            }
            if let Some(top) = top {
                let entry = TokenLogprob { token: next, logprob: step_logprobs[next as usize], top };
                on_token(&entry);
                logprobs.push(entry);
            }
            let piece = detok.push(next);
            let (emit, hit) = stops.push(&piece);
            if !emit.is_empty() {
                on_text(&emit);
            }
            if hit {
                finish = FinishReason::Stop;
                stop_hit = true;
                break;
            }
            if tokens.len() >= params.max_tokens || self.model.position() + 1 >= ctx {
                break;
            }
            logits = self.model.forward(&[next])?;
            self.cached.push(next);
        }
        if !stop_hit {
            let tail = detok.finish();
            let (emit, _) = stops.push(&tail);
            let rest = stops.flush();
            for s in [emit, rest] {
                if !s.is_empty() {
                    on_text(&s);
                }
            }
        }
        let decode_time = if tokens.is_empty() { Duration::ZERO } else { decode_started.elapsed() };
        Ok(Generation {
            text: stops.text().to_string(),
            completion_tokens: tokens.len(),
            tokens,
            prompt_tokens: prompt.len(),
            cached_tokens: reuse,
            finish_reason: finish,
            prompt_time,
            decode_time,
            mask_time,
            logprobs,
        })
    }
}
