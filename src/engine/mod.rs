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
pub(crate) mod closer;
pub mod completion;
mod constraint;
pub mod conversation;
mod jump;
pub mod perplexity;
pub mod prompt;
pub(crate) mod stop;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::gguf::GgufFile;
use crate::grammar::spec::Spec;
use crate::grammar::Grammar;
use crate::model::{self, DeviceChoice, LoadOptions, Model};
use crate::sampling::{log_probs, Sampler, SamplingParams, TokenLogprob, MAX_TOP_LOGPROBS};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

use closer::{next_step, Boundary, Step};
pub(crate) use constraint::Constraint;
pub use constraint::LazyConstraint;
use jump::{forced_run, Draft};
use stop::StopMatcher;

/// Return the allocator's free pages to the system (glibc's `malloc_trim`): loading
/// frees many small allocations (GGUF metadata values, tokenizer build tables), and a
/// large request its parsed body and prompt, that would otherwise stay resident. A
/// no-op off glibc.
pub(crate) fn release_freed_memory() {
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

/// Prompt tokens processed per forward pass during prefill.
pub const PREFILL_CHUNK: usize = 256;

pub use closer::CLOSE_MAX_BYTES;

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
    /// Reuse the cached keys and values of the prefix this prompt shares with the
    /// sequence before it (default `true`). `false` prefills the whole prompt: slower,
    /// but the answer does not depend on what ran before. Prefilling a suffix after a
    /// cached prefix rounds differently from prefilling the whole prompt (the kernels
    /// pick their path by chunk size), so at temperature 0 a reused prefix can change
    /// a close choice between two tokens.
    pub reuse_prefix: bool,
    /// Jump-forward decoding: where the constraint allows exactly one continuation for
    /// the next bytes (a call's keys, `", "`, closing braces, a named tool's name), those
    /// bytes are tokenized into a draft (`forced_run` in `engine/mod.rs`) that goes
    /// through the model as one chunk at prefill speed, behind the token before it,
    /// instead of one decode step per token. Every token is still decided as without
    /// the jump — the sampler (or greedy choice) over the masked logits of the chunk's
    /// row for its position — so the output is the plain decode's, up to the chunk's
    /// rounding: where the model spells the forced text otherwise than the tokenizer
    /// (`t` + `ool` for `tool`, `",` across a run's end), its token is kept and the
    /// draft's unverified rest leaves the cache. The chunk scores at each position
    /// only the tokens the constraint allows there ([`Model::forward_scored`]; whole
    /// rows with `logprobs`). Default `false`.
    pub jump_forward: bool,
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
            reuse_prefix: true,
            jump_forward: false,
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
    /// The stop string of [`GenerateParams::stop`] that ended it, if one did.
    pub stop_sequence: Option<String>,
    /// Wall time of prefill (prompt processing up to the first sampled token).
    pub prompt_time: Duration,
    /// Wall time of decoding the remaining tokens.
    pub decode_time: Duration,
    /// Time spent computing constraint masks (part of prompt and decode time).
    pub mask_time: Duration,
    /// With [`GenerateParams::logprobs`]: one entry per generated token, in order (the
    /// end-of-generation token that ended the turn excluded); otherwise empty.
    pub logprobs: Vec<TokenLogprob>,
    /// The generation ended (on `max_tokens` or the context window) inside a
    /// constrained region it had not completed — a tool call, or a schema instance —
    /// and this is that region's text so far (special tokens as their text). The
    /// budget never completes a region with values the model did not write
    /// (`closer`): the caller decides what a cut region means (the chat layer
    /// drops a cut call). `None` when no region was open or the open one was complete.
    pub unfinished: Option<String>,
    /// Tokens jump-forward decoding emitted without a decode step of their own
    /// ([`GenerateParams::jump_forward`]): forced by the constraint, fed to the model
    /// in chunks and chosen by the model from the chunk's rows. Included in `tokens`.
    pub forced_tokens: usize,
    /// Drafts jump-forward fed: chunks of forced text behind a generated token.
    pub forced_chunks: usize,
    /// Draft tokens fed but not taken — the model chose another token there, or the
    /// turn ended first — and cut from the cache again: jump-forward's waste.
    pub rejected_tokens: usize,
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

    /// `prompt N tokens, X tok/s | decode M tokens, Y tok/s | finish: REASON`, as the
    /// CLI prints it.
    pub fn speed_line(&self) -> String {
        format!(
            "prompt {} tokens, {:.1} tok/s | decode {} tokens, {:.1} tok/s | finish: {}",
            self.prompt_tokens,
            self.prompt_tps(),
            self.completion_tokens,
            self.decode_tps(),
            self.finish_reason.as_str()
        )
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
    /// Compiled grammars by what they were compiled from, so requests with the same
    /// tools or schema share one (and its warm masks).
    grammars: Arc<Mutex<std::collections::HashMap<Spec, Arc<Grammar>>>>,
    /// Where the model runs.
    device: DeviceChoice,
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
        let mut model = model::load(&gguf, opts)?;
        if model.vocab_size() < tokenizer.vocab_size() {
            return Err(Error::Tensor {
                path: gguf.path().to_path_buf(),
                name: "output.weight".into(),
                reason: format!("{} logits for {} tokens", model.vocab_size(), tokenizer.vocab_size()),
            });
        }
        // One token through the model, so that what is made at first use (scratch
        // buffers, GPU kernels) belongs to loading, not to the first request's latency;
        // the weights' tiles were made by the loader. Token 0, not an id the file names:
        // nothing read from the file indexes the embedding before the shapes above are
        // checked.
        model.forward(&[0])?;
        model.truncate(0);
        release_freed_memory();
        Ok(Self {
            model,
            tokenizer: Arc::new(tokenizer),
            gguf: Arc::new(gguf),
            cached: Vec::new(),
            vocab: Default::default(),
            grammars: Default::default(),
            device: opts.device,
        })
    }

    /// The device the model runs on (`/props` and `/v1/models` report it).
    pub fn device(&self) -> DeviceChoice {
        self.device
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
        let Engine { model, tokenizer, gguf, vocab, grammars, device, .. } = self;
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
                device,
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

    /// The tokenizer, shared (no copy): for work beside the engine, such as counting
    /// a request's tokens while it generates.
    pub fn shared_tokenizer(&self) -> Arc<Tokenizer> {
        self.tokenizer.clone()
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
        self.vocab.get_or_init(|| Arc::new(self.tokenizer.token_vocab())).clone()
    }

    /// The compiled grammar of `spec` ([`crate::grammar::spec::Spec::compile`]), from
    /// the engine's cache of the last [`GRAMMAR_CACHE_ENTRIES`] grammars or compiled
    /// now. The cache is keyed by the spec itself (equal specs compile to the same
    /// grammar): requests with the same tools, layout and response format share one
    /// grammar and the masks earlier requests computed, so the same tools cost a mask
    /// walk per DFA state once, not once per request.
    ///
    /// Cost: a hash of the spec's texts; on a miss, the compile and a copy of the spec.
    ///
    /// # Errors
    /// As [`crate::grammar::spec::Spec::compile`].
    pub fn grammar(&self, spec: &Spec) -> Result<Arc<Grammar>> {
        let mut cache = self.grammars.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = cache.get(spec) {
            return Ok(g.clone());
        }
        let g = Arc::new(spec.compile()?);
        if cache.len() >= GRAMMAR_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(spec.clone(), g.clone());
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
        let reuse = if params.reuse_prefix { self.reusable_prefix(prompt) } else { 0 };
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
        let mut decode_started = Instant::now();
        let mut boundary = Boundary::default();
        let mut mask = crate::grammar::TokenMask::new(self.tokenizer.vocab_size());
        let (mut logprobs, mut step_logprobs) = (Vec::new(), Vec::new());
        // Jump-forward: each emitted token is fed with the text the constraint forces
        // after it (a draft) as one chunk, and `rows[i]` is the logits after `draft[i]`.
        // Every draft token is still decided by the step below as a plain decode
        // decides it, from its row instead of a decode step of its own; at the first
        // token the model chooses otherwise the unverified rest leaves the cache.
        let mut draft = Draft::default();
        let mut jumped = 0;
        while tokens.len() < params.max_tokens {
            if params.cancel.as_ref().is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                finish = FinishReason::Cancelled;
                break;
            }
            // The model's own distribution, before the sampler changes `logits`.
            let top = params.logprobs.map(|k| log_probs(&logits, k, &mut step_logprobs));
            let remaining = params.max_tokens - tokens.len();
            if constraint.release_recovered_call() {
                // A complete recovered call where more may follow: free again, and the
                // next call's boundaries are its own.
                boundary = Boundary::default();
            }
            let next = match constraint.active() {
                Some(m) => {
                    let t = Instant::now();
                    boundary.observe(m, tokens.len());
                    let step = next_step(m);
                    if step == Step::Sample {
                        m.fill_mask(&mut mask)?;
                    }
                    mask_time += t.elapsed();
                    match step {
                        Step::Force(tok) => tok,
                        Step::Sample => {
                            let tok = sampler.sample(&mut logits, Some(&mask))?;
                            let t = Instant::now();
                            let ends = boundary.ends_here(m, tok, remaining, &eog)?;
                            mask_time += t.elapsed();
                            if ends {
                                // Every call complete; the one this token would start
                                // cannot fit the budget: the turn ends here.
                                finish = FinishReason::Stop;
                                break;
                            }
                            tok
                        }
                        Step::Finished => {
                            finish = FinishReason::Stop;
                            break;
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
            // Fed already when the draft's chunk holds it.
            let verified = draft.take(next, self.model.as_mut(), &mut self.cached);
            if params.stop_on_eog && eog.contains(&next) {
                finish = FinishReason::Stop;
                break;
            }
            if let Some(top) = top {
                let e = TokenLogprob { token: next, logprob: step_logprobs[next as usize], top };
                on_token(&e);
                logprobs.push(e);
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
            // Positions fed before `next` (the draft's chunk may hold `next` and more).
            let fed = self.model.position() - draft.ahead() - usize::from(verified.is_some());
            if tokens.len() >= params.max_tokens || fed + 1 >= ctx {
                break;
            }
            logits = match verified {
                Some(row) => {
                    jumped += 1;
                    row
                }
                None => {
                    // `next` goes to the model; with jump-forward, together with the
                    // text the constraint forces after it, as one chunk that scores at
                    // each position the tokens the constraint allows there (every logit
                    // when log-probabilities are asked for).
                    let t = Instant::now();
                    let mut candidates = None;
                    if let Some(m) = constraint.active().filter(|_| params.jump_forward) {
                        let room = (params.max_tokens - tokens.len()).min(ctx.saturating_sub(fed + 3));
                        draft.tokens.extend(forced_run(&self.tokenizer, m, room));
                        if !draft.tokens.is_empty() && params.logprobs.is_none() {
                            candidates = Some(draft.candidates(m, &mut mask)?);
                        }
                    }
                    mask_time += t.elapsed();
                    draft.feed(next, self.model.as_mut(), &mut self.cached, candidates)?
                }
            };
        }
        // Drop the draft's tokens the loop fed but did not reach from the cache.
        draft.drop_unverified(self.model.as_mut(), &mut self.cached);
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
        // Cut by the budget or the window inside a region the constraint had not
        // completed: say so, with the region's text (special tokens' `0xFF` marks off).
        let unfinished = match constraint.active() {
            Some(m) if finish == FinishReason::Length => (!m.is_accepting()).then(|| {
                let bytes: Vec<u8> = m.bytes().iter().copied().filter(|&b| b != 0xFF).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }),
            _ => None,
        };
        Ok(Generation {
            text: stops.text().to_string(),
            completion_tokens: tokens.len(),
            tokens,
            prompt_tokens: prompt.len(),
            cached_tokens: reuse,
            finish_reason: finish,
            stop_sequence: stops.matched().map(str::to_string),
            prompt_time,
            decode_time,
            mask_time,
            logprobs,
            unfinished,
            forced_tokens: jumped,
            forced_chunks: draft.chunks,
            rejected_tokens: draft.rejected,
        })
    }
}
