//! One chat turn: a request's messages and tools → the prompt ([`super::prompt`]) →
//! the constraint its `tool_choice` asks for → generation → text and parsed tool
//! calls ([`ChatTurn`]); [`ChatRequest`], the typed request of the embedding API.

use serde_json::Value;

use std::sync::Arc;

use serde::Serialize;

use super::prompt::{encode_chat_within, prefill_text, TurnPrompt};
use super::{Constraint, Engine, FinishReason, GenerateParams, Generation, LazyConstraint};
use crate::grammar::schema::Mode as SchemaMode;
use crate::grammar::{Grammar, TokenVocab};
use crate::sampling::TokenLogprob;
use crate::template::source::GgufTemplates;
use crate::template::ChatSetup;
use crate::tools::recovery::{RecoveringParser, Recovery};
use crate::tools::stream::{StreamEvent, StreamParser};
use crate::tools::{self, format, Tool, ToolCall, ToolChoice};
use crate::{Error, Result};

/// Constrained (the default) or native tool calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Calls are forced to be valid for the declared schemas.
    #[default]
    Constrained,
    /// Free generation, then the family's parser: what the model does on its own.
    Native,
}

/// One assistant turn.
#[derive(Debug, Clone, Serialize)]
pub struct ChatTurn {
    /// Text outside tool calls.
    pub content: String,
    /// The reasoning block (`<think>…</think>`) of a reasoning model, split off the
    /// content; `None` when the turn had none.
    pub reasoning_content: Option<String>,
    /// Parsed calls.
    pub tool_calls: Vec<ToolCall>,
    /// `"tool_calls"`, `"stop"`, `"length"` or `"cancelled"`. `"length"` also when
    /// `max_tokens` cut a call ([`ChatTurn::cut_call`]): in constrained mode the cut call
    /// is not in `tool_calls` (complete calls before it are) and its text is not in
    /// `content`; in native mode a call whose arguments had begun is kept with its
    /// arguments cut short, as OpenAI does.
    pub finish_reason: &'static str,
    /// `max_tokens` (or the context window) ended the turn inside a call the
    /// constraint had opened, which was dropped rather than completed with values the
    /// model did not write.
    pub cut_call: bool,
    /// The stop string that ended the turn, if one did (the request's or the
    /// template's `stop_strings`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    /// Call blocks that did not parse (native mode only; always 0 when constrained).
    pub parse_failures: usize,
    /// Calls read from a near-miss form in `auto` ([`crate::tools::recovery`]).
    pub recovered_calls: usize,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Leading prompt tokens reused from the cache of an earlier turn (not prefilled).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Where the time went.
    pub timings: TurnTimings,
    /// Each generated token's log-probability, when the turn's
    /// [`GenerateParams::logprobs`] asked for them (text and calls alike, in order);
    /// otherwise empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<TokenLogprob>,
}

/// Time spent in one turn's generation.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct TurnTimings {
    /// Prefill up to the first generated token.
    #[serde(serialize_with = "secs")]
    pub prompt: std::time::Duration,
    /// The remaining tokens.
    #[serde(serialize_with = "secs")]
    pub decode: std::time::Duration,
    /// Computing constraint masks (inside `prompt` and `decode`).
    #[serde(serialize_with = "secs")]
    pub mask: std::time::Duration,
    /// Generated tokens jump-forward decoding fed in chunks instead of one decode step
    /// each ([`GenerateParams::jump_forward`]).
    pub forced_tokens: usize,
    /// Drafts of forced text jump-forward fed ([`Generation::forced_chunks`]).
    pub forced_chunks: usize,
    /// Draft tokens fed but not taken ([`Generation::rejected_tokens`]).
    pub rejected_tokens: usize,
}

fn secs<S: serde::Serializer>(d: &std::time::Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

enum TurnConstraint {
    Free,
    Lazy(LazyConstraint),
    /// The grammar from the first token; the bytes the prompt already wrote into it
    /// (a layout whose prompt opens the first call: its marker).
    Full(Arc<Grammar>, Arc<TokenVocab>, Vec<u8>),
}

/// A turn rendered, tokenized and checked against the context window, with its
/// constraint compiled: everything that can fail on the request's content has failed
/// (or not) by now, so a server can still answer with a plain error. Run it with
/// [`PreparedTurn::run`].
pub struct PreparedTurn {
    prompt: Vec<u32>,
    constraint: TurnConstraint,
    parser: RecoveringParser,
    calls_possible: bool,
    /// Stop strings the template declares, added to the request's.
    stops: Vec<String>,
    /// Tokens of the shortest output the constraint allows, when it applies from the
    /// first token; measured on the first [`PreparedTurn::check_budget`] that needs it.
    shortest: std::cell::OnceCell<Option<usize>>,
}

impl std::fmt::Debug for PreparedTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedTurn").field("prompt_tokens", &self.prompt.len()).finish_non_exhaustive()
    }
}

/// A template with reasoning markers: split the block off the turn (the output starts
/// inside it when the rendered prompt already opened it).
fn with_reasoning(parser: StreamParser, setup: &ChatSetup, prompt_text: &str) -> StreamParser {
    match setup.reasoning {
        Some((start, end)) => parser.with_reasoning(start, end, prompt_text.trim_end().ends_with(start)),
        None => parser,
    }
}

/// The template's reasoning markers when the rendered prompt opens the block itself
/// (Qwen 3.5's `<think>\n`): the turn starts inside it.
fn opened_reasoning(setup: &ChatSetup, prompt_text: &str) -> Option<(&'static str, &'static str)> {
    setup.reasoning.filter(|(start, _)| prompt_text.trim_end().ends_with(start))
}

pub(super) fn check_context(engine: &Engine, prompt: &[u32]) -> Result<()> {
    let ctx = engine.context_length();
    if prompt.len() >= ctx {
        return Err(Error::ContextOverflow { prompt_tokens: prompt.len(), context_length: ctx });
    }
    Ok(())
}

fn id_seed(prompt: &[u32]) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    prompt.iter().fold(nanos as u64 ^ 0xcbf29ce484222325, |h, &t| (h ^ t as u64).wrapping_mul(0x100000001b3))
}

/// Prepare a turn with tools: render with the tools, tokenize, and (in
/// [`ToolMode::Constrained`]) compile the calls grammar for `choice` — lazy behind the
/// family's call marker for `auto`, from the first token for `required` or a named
/// tool. `tool_choice: none` or no tools: plain text.
///
/// Cost: one template render, one tokenization, and for constrained calls one schema →
/// automaton compile per tool (sub-millisecond for typical schemas).
///
/// # Errors
/// [`Error::InvalidParameter`] when the family has no format file, the named tool
/// does not exist, or a forced call follows an assistant prefill; [`Error::Schema`] for a tool schema that cannot be compiled;
/// [`Error::ContextOverflow`]; template and tokenizer errors.
pub fn prepare_turn(
    engine: &mut Engine,
    setup: &ChatSetup,
    prompt: impl Into<TurnPrompt>,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    mode: ToolMode,
) -> Result<PreparedTurn> {
    prepare_tools(engine, setup, prompt.into(), ToolTurn { tools, choice, parallel, mode }, None)
}

/// [`prepare_turn`] for `tool_choice: auto` with a response format
/// (`response_format: json_schema` beside tools): in [`ToolMode::Constrained`] the
/// turn is constrained from its first token to either the calls (the family's layout,
/// and the bare JSON calls [`Recovery`] reads when call recovery is on) or one JSON
/// value of `answer`, so a text answer follows the format and a call its tool. A
/// prompt that opened a reasoning block lets the model finish it first. In
/// [`ToolMode::Native`] nothing is constrained: the same as [`prepare_turn`].
///
/// Cost: as [`prepare_turn`], plus one schema compile for `answer`.
///
/// # Errors
/// As [`prepare_turn`]; [`Error::Schema`] for an `answer` schema that cannot be
/// compiled or admits no value.
pub fn prepare_turn_answering(
    engine: &mut Engine,
    setup: &ChatSetup,
    prompt: impl Into<TurnPrompt>,
    tools: &[Tool],
    parallel: bool,
    mode: ToolMode,
    answer: (&Value, SchemaMode),
) -> Result<PreparedTurn> {
    let turn = ToolTurn { tools, choice: &ToolChoice::Auto, parallel, mode };
    prepare_tools(engine, setup, prompt.into(), turn, Some(answer))
}

/// What a turn with tools may call, and how calls are read.
#[derive(Clone, Copy)]
struct ToolTurn<'a> {
    tools: &'a [Tool],
    choice: &'a ToolChoice,
    parallel: bool,
    mode: ToolMode,
}

/// [`prepare_turn`], and with `answer` [`prepare_turn_answering`] (only for `auto`).
fn prepare_tools(
    engine: &mut Engine,
    setup: &ChatSetup,
    prompt: TurnPrompt,
    turn: ToolTurn<'_>,
    answer: Option<(&Value, SchemaMode)>,
) -> Result<PreparedTurn> {
    let ToolTurn { tools, choice, parallel, mode } = turn;
    let calls_possible = !tools.is_empty() && *choice != ToolChoice::None;
    let fmt = if calls_possible {
        Some(setup.layout.format.clone().ok_or_else(|| Error::InvalidParameter {
            name: "tools",
            reason: format!(
                "this model's chat template gives no tool-call layout toolgate can read ({}); choose one with \
                 --tool-format (formats: {}) or use --tool-fallback generic",
                setup.layout.round_trip,
                format::all()
                    .map(|a| a.into_iter().map(|f| f.family).collect::<Vec<_>>().join(", "))
                    .unwrap_or_default()
            ),
        })?)
    } else {
        None
    };
    let tool_json: Option<Vec<Value>> =
        calls_possible.then(|| tools.iter().map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).collect());
    // Borrowed, not cloned: a tokenizer clone (its vocabulary maps) cost 25-30 ms of
    // every request's time to first token on SmolLM2's 49k vocabulary.
    let engine: &Engine = engine;
    let tok = engine.tokenizer();
    let prefilled = prefill_text(&prompt.messages).is_some();
    let (text, prompt) =
        encode_chat_within(setup, tok, prompt.messages, tool_json, prompt.vars, engine.context_length())?;
    check_context(engine, &prompt)?;
    if let (Some(fmt), ToolMode::Constrained) = (&fmt, mode) {
        tools::check_vocabulary(fmt, tok)?;
    }
    let opened = opened_reasoning(setup, &text);
    // A layout whose prompt opens the first call, and a prompt that does end with its
    // marker: the output is read, and constrained, as if the marker came first.
    let opened_call = fmt.as_ref().filter(|f| f.prompt_opens_call && text.trim_end().ends_with(f.trigger()));
    let call_prefix = opened_call.map(|f| tools::marker_bytes(f.trigger(), tok)).unwrap_or_default();
    let constraint = match (&fmt, mode, choice, answer) {
        (None, ..) | (_, ToolMode::Native, ..) => TurnConstraint::Free,
        (Some(fmt), ToolMode::Constrained, ToolChoice::Auto, None) => {
            let calls = tools::calls_grammar(fmt, tools, choice, parallel, tok)?;
            let recovery = if setup.call_recovery && fmt.trigger() != Recovery::TRIGGER {
                // One call at a time: after it the model goes on freely (see
                // `recover_again`), so JSON it writes next is not forced into a call.
                let bare = tools::calls_grammar(&Recovery::grammar_format(), tools, choice, false, tok)?;
                Some(engine.grammar(&bare)?)
            } else {
                None
            };
            TurnConstraint::Lazy(LazyConstraint {
                grammar: engine.grammar(&calls)?,
                vocab: engine.token_vocab(),
                trigger: tools::marker_bytes(fmt.trigger(), tok),
                recovery,
                recover_again: parallel,
                reasoning: setup.reasoning.map(|(start, end)| {
                    (tools::marker_bytes(start, tok), tools::marker_bytes(end, tok), opened.is_some())
                }),
                opened: opened_call.is_some(),
                text_start: tools::marker_bytes(&fmt.text_start, tok),
            })
        }
        (Some(_), ToolMode::Constrained, _, _) if prefilled => return Err(prefill_conflict()),
        (Some(fmt), ToolMode::Constrained, _, answer) => {
            let mut calls = match answer {
                Some(answer) => tools::calls_or_answer(fmt, tools, parallel, setup.call_recovery, answer, tok)?,
                None => tools::calls_grammar(fmt, tools, choice, parallel, tok)?,
            };
            // After an opened reasoning block: the model finishes it, then must call
            // (or answer).
            if let Some((_, end)) = opened {
                calls = tools::after_reasoning(end, calls, tok);
            }
            // Where the prompt opened the call, the grammar starts after its marker (an
            // answer then follows the layout's text start: `tools::calls_or_answer`).
            TurnConstraint::Full(engine.grammar(&calls)?, engine.token_vocab(), call_prefix)
        }
    };
    let incremental = mode == ToolMode::Constrained;
    let mut parser = StreamParser::new(fmt.clone(), incremental, id_seed(&prompt)).with_tools(tools);
    if opened_call.is_some() {
        parser = parser.opened_by_prompt();
    }
    let parser = with_reasoning(parser, setup, &text);
    // Near-miss calls are read in `auto` only: a forced call is in the layout already.
    let recovery = (setup.call_recovery && calls_possible && *choice == ToolChoice::Auto)
        .then(|| Recovery::new(tools, mode == ToolMode::Constrained));
    let parser = RecoveringParser::new(parser, recovery);
    let stops = setup.stop_strings.clone();
    Ok(PreparedTurn { prompt, constraint, parser, calls_possible, stops, shortest: Default::default() })
}

/// An assistant prefill under a constraint from the first token: the constrained
/// output would have to start after text it cannot see as its own.
fn prefill_conflict() -> Error {
    Error::InvalidParameter {
        name: "messages",
        reason: "a final assistant message (a prefill) cannot be continued when the turn must call a tool or \
                 answer in a response format: remove the prefill, or let the model choose (tool_choice auto, no \
                 response format)"
            .into(),
    }
}

/// Tokens the shortest output a constraint from the first token accepts takes (the
/// shortest call for `required` or a named tool), spelled with the longest vocabulary
/// tokens; `None` for free text, a lazy constraint, or a completion the search bound
/// did not reach.
fn shortest_output(constraint: &TurnConstraint) -> Option<usize> {
    match constraint {
        TurnConstraint::Full(grammar, vocab, prefix) => grammar
            .matcher_with_prefix(vocab.clone(), prefix)
            .ok()?
            .completion_plan(super::CLOSE_MAX_BYTES)
            .map(|p| p.len()),
        _ => None,
    }
}

/// Prepare a turn without tools whose text is `schema`-constrained JSON
/// (`response_format: json_schema`), or free text for `schema: None`.
///
/// # Errors
/// [`Error::Schema`] for a schema that cannot be compiled; [`Error::InvalidParameter`]
/// for an assistant prefill ([`prefill_text`]) with a schema; [`Error::ContextOverflow`];
/// template and tokenizer errors.
pub fn prepare_text_turn(
    engine: &mut Engine,
    setup: &ChatSetup,
    prompt: impl Into<TurnPrompt>,
    schema: Option<(&Value, SchemaMode)>,
) -> Result<PreparedTurn> {
    let engine: &Engine = engine;
    let TurnPrompt { messages, vars } = prompt.into();
    if schema.is_some() && prefill_text(&messages).is_some() {
        return Err(prefill_conflict());
    }
    let tok = engine.tokenizer();
    let (text, prompt) = encode_chat_within(setup, tok, messages, None, vars, engine.context_length())?;
    check_context(engine, &prompt)?;
    let opened = opened_reasoning(setup, &text);
    let constraint = match schema {
        Some(answer) => {
            let answer = tools::answer_grammar(answer)?;
            // A prompt that opened a reasoning block: the model finishes it, then answers.
            let answer = match opened {
                Some((_, end)) => tools::after_reasoning(end, answer, tok),
                None => answer,
            };
            TurnConstraint::Full(engine.grammar(&answer)?, engine.token_vocab(), Vec::new())
        }
        None => TurnConstraint::Free,
    };
    let parser = RecoveringParser::new(with_reasoning(StreamParser::new(None, false, 0), setup, &text), None);
    let stops = setup.stop_strings.clone();
    Ok(PreparedTurn { prompt, constraint, parser, calls_possible: false, stops, shortest: Default::default() })
}

impl PreparedTurn {
    /// A turn of free text after `prompt` (token ids), read as text whatever it
    /// spells: no calls, no reasoning block, no template stop strings. For raw
    /// completion ([`super::completion`]).
    pub(super) fn free_text(prompt: Vec<u32>) -> Self {
        let parser = RecoveringParser::new(StreamParser::new(None, false, 0).verbatim(), None);
        Self {
            prompt,
            constraint: TurnConstraint::Free,
            parser,
            calls_possible: false,
            stops: Vec::new(),
            shortest: Default::default(),
        }
    }

    /// Whether `max_tokens` can hold the shortest output this turn must produce: a
    /// turn that must call (`tool_choice` required or a named tool, Anthropic `any`) or
    /// answer in a schema, given fewer tokens than its shortest call or instance takes,
    /// would end at the budget with nothing (a 200 with `finish_reason: length` and no
    /// call); it is refused instead. [`Self::run`] checks it first; a server checks it
    /// before its answer starts.
    ///
    /// Cost: none for a budget of [`super::CLOSE_MAX_BYTES`] tokens or more (no
    /// completion searched is longer); below it, once per turn, one breadth-first
    /// search over the grammar's states.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `max_tokens`, with the count needed.
    pub fn check_budget(&self, max_tokens: usize) -> Result<()> {
        if max_tokens >= super::CLOSE_MAX_BYTES {
            return Ok(());
        }
        match *self.shortest.get_or_init(|| shortest_output(&self.constraint)) {
            Some(n) if n > max_tokens => Err(Error::InvalidParameter {
                name: "max_tokens",
                reason: format!(
                    "{max_tokens} is too few: this request must {} and the shortest one takes {n} tokens",
                    if self.calls_possible { "call a tool" } else { "answer in its schema" }
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Tokens in the prompt.
    pub fn prompt_tokens(&self) -> usize {
        self.prompt.len()
    }

    /// The prompt's token ids.
    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// Generate the turn, calling `on_event` with each delta as it is decided (see
    /// [`StreamEvent`]); the returned turn is exactly the aggregate of the deltas.
    /// `params.keep_special_text` is forced on so control-token markers are seen.
    ///
    /// Cost: one generation of at most `params.max_tokens` tokens.
    ///
    /// # Errors
    /// Model and constraint errors during generation.
    pub fn run(
        self,
        engine: &mut Engine,
        params: &GenerateParams,
        on_event: impl FnMut(StreamEvent),
    ) -> Result<ChatTurn> {
        self.run_with_logprobs(engine, params, on_event, |_| {})
    }

    /// [`Self::run`], also calling `on_logprob` with each generated token's
    /// log-probability (when `params.logprobs` asks for them) just before the deltas
    /// that token's text produces; the returned turn has them all in
    /// [`ChatTurn::logprobs`].
    ///
    /// # Errors
    /// As [`Self::run`]; [`Error::InvalidParameter`] for more than
    /// [`crate::sampling::MAX_TOP_LOGPROBS`] alternatives.
    pub fn run_with_logprobs(
        self,
        engine: &mut Engine,
        params: &GenerateParams,
        mut on_event: impl FnMut(StreamEvent),
        mut on_logprob: impl FnMut(&TokenLogprob),
    ) -> Result<ChatTurn> {
        self.check_budget(params.max_tokens)?;
        let PreparedTurn { prompt, constraint, mut parser, calls_possible, stops, .. } = self;
        let mut stop = params.stop.clone();
        stop.extend(stops.into_iter().filter(|s| !params.stop.contains(s)));
        let params = GenerateParams { keep_special_text: calls_possible, stop, ..params.clone() };
        let mut feed = |text: &str| parser.push(text).into_iter().for_each(&mut on_event);
        let gen: Generation = match constraint {
            TurnConstraint::Free => {
                engine.generate_with(&prompt, &params, Constraint::None, &mut feed, &mut on_logprob)?
            }
            TurnConstraint::Lazy(lazy) => {
                engine.generate_with(&prompt, &params, Constraint::lazy(lazy), &mut feed, &mut on_logprob)?
            }
            TurnConstraint::Full(grammar, vocab, prefix) => {
                let mut m = grammar.matcher_with_prefix(vocab, &prefix)?;
                engine.generate_with(&prompt, &params, Constraint::Always(&mut m), &mut feed, &mut on_logprob)?
            }
        };
        // Stopped on an end-of-generation token (never shown as text): it may be what
        // closes the open call (gpt-oss's `<|call|>`).
        if let (FinishReason::Stop, Some(&last)) = (gen.finish_reason, gen.tokens.last()) {
            if engine.tokenizer().eog_tokens().contains(&last) {
                let marker = engine.tokenizer().decode(&[last], false);
                parser.end_of_turn(&marker).into_iter().for_each(&mut on_event);
            }
        }
        // Cut inside a call: drop it, never complete it with invented values.
        if calls_possible && gen.finish_reason == FinishReason::Length {
            match &gen.unfinished {
                Some(text) => parser.cut(text),
                None => parser.budget_ended(),
            }
        }
        parser.finish().into_iter().for_each(&mut on_event);
        let cut_call = parser.dropped_cut_call();
        let (out, recovered_calls) = parser.into_output();
        let finish_reason = match gen.finish_reason {
            FinishReason::Cancelled => "cancelled",
            _ if out.truncated => "length",
            _ if !out.calls.is_empty() => "tool_calls",
            r => r.as_str(),
        };
        Ok(ChatTurn {
            reasoning_content: (!out.reasoning.is_empty()).then_some(out.reasoning),
            content: out.content,
            tool_calls: out.calls,
            finish_reason,
            cut_call,
            stop_sequence: gen.stop_sequence,
            parse_failures: out.failures,
            recovered_calls,
            prompt_tokens: gen.prompt_tokens,
            cached_tokens: gen.cached_tokens,
            completion_tokens: gen.completion_tokens,
            timings: TurnTimings {
                prompt: gen.prompt_time,
                decode: gen.decode_time,
                mask: gen.mask_time,
                forced_tokens: gen.forced_tokens,
                forced_chunks: gen.forced_chunks,
                rejected_tokens: gen.rejected_tokens,
            },
            logprobs: gen.logprobs,
        })
    }
}

/// Run one assistant turn with tools: [`prepare_turn`] then [`PreparedTurn::run`]
/// without watching the deltas.
///
/// # Errors
/// As [`prepare_turn`] and [`PreparedTurn::run`].
#[allow(clippy::too_many_arguments)]
pub fn tool_turn(
    engine: &mut Engine,
    setup: &ChatSetup,
    messages: Vec<Value>,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    mode: ToolMode,
    params: &GenerateParams,
) -> Result<ChatTurn> {
    prepare_turn(engine, setup, messages, tools, choice, parallel, mode)?.run(engine, params, |_| {})
}

/// One chat request for [`Engine::chat`]: OpenAI-shaped messages, the declared tools and
/// how calls are made. Built with [`ChatRequest::new`] / [`ChatRequest::user`] and the
/// setters below; the fields are public for everything else.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The conversation so far, OpenAI-shaped (`role`, `content`, `tool_calls`, …).
    pub messages: Vec<Value>,
    /// Declared tools (none: a plain chat turn).
    pub tools: Vec<Tool>,
    /// `auto` (default), `none`, `required` or one named function.
    pub tool_choice: ToolChoice,
    /// Allow several calls in the turn (default `true`).
    pub parallel_tool_calls: bool,
    /// Constrained (default) or native calls.
    pub mode: ToolMode,
    /// Sampling, `max_tokens`, stop strings (default: greedy, 256 tokens).
    pub params: GenerateParams,
    /// What to do with a model whose template cannot do tools (default: refuse).
    pub fallback: crate::template::ToolFallback,
}

impl ChatRequest {
    /// A request for these messages, with the defaults above.
    pub fn new(messages: Vec<Value>) -> Self {
        Self {
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            mode: ToolMode::Constrained,
            params: GenerateParams { sampling: crate::sampling::SamplingParams::greedy(), ..GenerateParams::default() },
            fallback: crate::template::ToolFallback::None,
        }
    }

    /// A request with one user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(vec![serde_json::json!({"role": "user", "content": text.into()})])
    }

    /// Declare tools ([`Tool`]s or [`crate::tools::definition::ToolDefinition`]s).
    pub fn tools<T: Into<Tool>>(mut self, tools: impl IntoIterator<Item = T>) -> Self {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Set `tool_choice`.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Serve a model whose template cannot do tools with this fallback.
    pub fn fallback(mut self, fallback: crate::template::ToolFallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Set the token budget.
    pub fn max_tokens(mut self, n: usize) -> Self {
        self.params.max_tokens = n;
        self
    }
}

impl Engine {
    /// The model's chat setup: its chat template through the tool-calling gate.
    ///
    /// Cost: the template's capability probe (a few renders, milliseconds).
    ///
    /// # Errors
    /// [`Error::NotToolCapable`] when the template cannot do tools and `fallback` is
    /// [`crate::template::ToolFallback::None`]; template errors.
    pub fn chat_setup(&self, fallback: crate::template::ToolFallback) -> Result<ChatSetup> {
        let templates = GgufTemplates::from_gguf(self.gguf())?;
        let arch = self.gguf().architecture().ok().map(str::to_string);
        let name = self.gguf().path().file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        crate::template::gate(&name, &templates, arch.as_deref(), None, fallback)
    }

    /// Answer one chat request: render it with the model's gated template, generate the
    /// assistant's turn (calls constrained to the tools' schemas in
    /// [`ToolMode::Constrained`]) and parse it.
    ///
    /// ```no_run
    /// use toolgate::engine::{chat::ChatRequest, Engine};
    /// use toolgate::model::DeviceChoice;
    /// use toolgate::template::ToolFallback;
    /// use toolgate::tools::definition::{Schema, ToolDefinition};
    /// use toolgate::tools::ToolChoice;
    ///
    /// let mut engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", DeviceChoice::Cpu)?;
    /// let weather = ToolDefinition::new("get_weather").parameter("city", Schema::string()).required(["city"]);
    /// let request = ChatRequest::user("Weather in Paris?")
    ///     .tools([weather])
    ///     .tool_choice(ToolChoice::Required)
    ///     .fallback(ToolFallback::Generic);
    /// let turn = engine.chat(&request)?;
    /// println!("{}({})", turn.tool_calls[0].function.name, turn.tool_calls[0].function.arguments);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    ///
    /// Cost: [`Self::chat_setup`], one render and one generation. To keep a
    /// conversation, [`super::conversation::ToolConversation`] gates once and holds
    /// the history.
    ///
    /// # Errors
    /// As [`Self::chat_setup`], [`prepare_turn`] and [`PreparedTurn::run`].
    pub fn chat(&mut self, request: &ChatRequest) -> Result<ChatTurn> {
        self.chat_stream(request, |_| {})
    }

    /// [`Self::chat`], calling `on_event` with each delta as it is generated (content,
    /// then per call its name and argument fragments); the returned turn is their
    /// aggregate.
    ///
    /// # Errors
    /// As [`Self::chat`].
    pub fn chat_stream(&mut self, request: &ChatRequest, on_event: impl FnMut(StreamEvent)) -> Result<ChatTurn> {
        let setup = self.chat_setup(request.fallback)?;
        prepare_turn(
            self,
            &setup,
            request.messages.clone(),
            &request.tools,
            &request.tool_choice,
            request.parallel_tool_calls,
            request.mode,
        )?
        .run(self, &request.params, on_event)
    }
}
