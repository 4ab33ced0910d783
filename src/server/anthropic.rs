//! `POST /v1/messages`: the Anthropic Messages API with tools and streaming.
//!
//! The request is translated to the chat messages the template renders (`system`,
//! `tool_use` blocks → assistant `tool_calls`, `tool_result` blocks → `tool`
//! messages) and runs through the same turn as the OpenAI endpoint; the answer comes
//! back as `text` and `tool_use` content blocks, or as the Messages streaming events
//! (`message_start`, `content_block_start`, `content_block_delta` with `text_delta` or
//! `input_json_delta`, `content_block_stop`, `message_delta`, `message_stop`). Errors
//! are Anthropic error objects (`{"type":"error","error":{…}}`).
//!
//! Also: `thinking` (the template's reasoning block as `thinking` content blocks and
//! `thinking_delta` events when enabled; `enable_thinking` passed to the template),
//! `output_config.format` (structured output: the text is one JSON value of the
//! schema), and an assistant prefill (a final assistant message is continued).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{stream, StreamExt};
use serde_json::{json, Map, Value};

use super::openai::timings_json;
use super::{read_body, validate, ApiError, AppState, Msg, Running};
use crate::engine::chat::ChatTurn;
use crate::engine::prompt::{encode_chat, TurnPrompt};
use crate::engine::GenerateParams;
use crate::grammar::schema::Mode;
use crate::sampling::SamplingParams;
use crate::tools::stream::StreamEvent;
use crate::tools::{FunctionDef, Tool, ToolChoice};

/// An error in Anthropic's shape.
pub(crate) struct AnthropicError(ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl AnthropicError {
    fn body(&self) -> Value {
        let kind = match self.0.status {
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::METHOD_NOT_ALLOWED => "invalid_request_error",
            StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            _ => "api_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": self.0.message}})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        super::with_retry_after(self.0.status, (self.0.status, Json(self.body())).into_response())
    }
}

fn bad(message: impl Into<String>) -> AnthropicError {
    AnthropicError(ApiError::bad(message, None))
}

/// Text of a `content` that is a string or a list of `text` blocks.
fn text_of(v: &Value, what: &str) -> Result<String, AnthropicError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => block_text(b, what),
                Some(kind) if MEDIA_BLOCKS.contains(&kind) => Err(bad(validate::text_only(what, kind))),
                t => Err(bad(format!("{what}: content blocks of type {t:?} are not supported (text only)"))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|parts| parts.join("\n")),
        _ => Err(bad(format!("{what} must be a string or an array of content blocks"))),
    }
}

/// Blocks that carry something other than text.
const MEDIA_BLOCKS: [&str; 3] = ["image", "document", "search_result"];

/// The `text` of a `text` block: a string, or a 400.
fn block_text(b: &Value, at: &str) -> Result<String, AnthropicError> {
    match b.get("text") {
        Some(Value::String(t)) => Ok(t.clone()),
        other => {
            Err(bad(format!("{at}: a text block's `text` must be a string, not {}", other.unwrap_or(&Value::Null))))
        }
    }
}

/// Anthropic `messages` (+ `system`) → OpenAI-shaped chat messages.
fn to_chat_messages(system: Option<&Value>, messages: &[Value]) -> Result<Vec<Value>, AnthropicError> {
    let mut out = Vec::new();
    if let Some(sys) = system {
        let text = text_of(sys, "system")?;
        if !text.is_empty() {
            out.push(json!({"role": "system", "content": text}));
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if role != "user" && role != "assistant" {
            return Err(bad(format!("messages.{i}.role must be \"user\" or \"assistant\"")));
        }
        let blocks = match m.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(a)) => a.clone(),
            _ => return Err(bad(format!("messages.{i}.content must be a string or an array of content blocks"))),
        };
        let mut text = Vec::new();
        let mut calls = Vec::new();
        let mut thinking = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            match (role, b.get("type").and_then(Value::as_str)) {
                (_, Some("text")) => text.push(block_text(b, &at)?),
                (_, Some(kind)) if MEDIA_BLOCKS.contains(&kind) => return Err(bad(validate::text_only(&at, kind))),
                // Earlier reasoning goes back to the template as `reasoning_content`
                // (templates that keep it render it; the others drop it).
                ("assistant", Some("thinking")) => match b.get("thinking") {
                    Some(Value::String(t)) => thinking.push(t.clone()),
                    _ => return Err(bad(format!("{at}: a thinking block's `thinking` must be a string"))),
                },
                ("assistant", Some("redacted_thinking")) => {}
                ("assistant", Some("tool_use")) => {
                    let (Some(id), Some(name)) =
                        (b.get("id").and_then(Value::as_str), b.get("name").and_then(Value::as_str))
                    else {
                        return Err(bad(format!("{at}: tool_use needs `id` and `name`")));
                    };
                    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    calls.push(json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": input.to_string()}}));
                }
                ("user", Some("tool_result")) => {
                    let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                        return Err(bad(format!("{at}: tool_result needs `tool_use_id`")));
                    };
                    let mut content = text_of(b.get("content").unwrap_or(&Value::Null), &at)?;
                    if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                        content = format!("Error: {content}");
                    }
                    out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                }
                (_, t) => return Err(bad(format!("{at}: content blocks of type {t:?} are not supported here"))),
            }
        }
        if role == "assistant" {
            let mut msg = json!({"role": "assistant", "content": text.join("\n")});
            if !thinking.is_empty() {
                msg["reasoning_content"] = json!(thinking.join("\n"));
            }
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        } else if !text.is_empty() {
            out.push(json!({"role": "user", "content": text.join("\n")}));
        }
    }
    Ok(out)
}

/// Anthropic's `stop_reason` and `stop_sequence`: `stop_sequence` when one of the
/// request's `stop_sequences` ended the turn (a stop string of the template's own is
/// the end of the turn).
fn stop_reason(turn: &ChatTurn, stops: &[String]) -> (&'static str, Option<String>) {
    match turn.finish_reason {
        "tool_calls" => ("tool_use", None),
        "length" => ("max_tokens", None),
        _ => match turn.stop_sequence.as_ref().filter(|s| stops.contains(s)) {
            Some(s) => ("stop_sequence", Some(s.clone())),
            None => ("end_turn", None),
        },
    }
}

/// What a request asked of the model's reasoning (`thinking`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Thinking {
    /// Not asked: the template's default; reasoning is not returned.
    Unset,
    /// `disabled`: `enable_thinking: false` for the template.
    Disabled,
    /// `enabled` or `adaptive`: `enable_thinking: true`, reasoning returned as
    /// `thinking` blocks (empty with `display: "omitted"`).
    Shown { omitted: bool },
}

impl Thinking {
    fn parse(obj: &Map<String, Value>) -> Result<Self, AnthropicError> {
        let Some(cfg) = obj.get("thinking").filter(|v| !v.is_null()) else { return Ok(Self::Unset) };
        let omitted = cfg.get("display").and_then(Value::as_str) == Some("omitted");
        match cfg.get("type").and_then(Value::as_str) {
            Some("disabled") => Ok(Self::Disabled),
            Some("enabled") => match cfg.get("budget_tokens") {
                Some(n) if n.as_u64().is_some() => Ok(Self::Shown { omitted }),
                _ => Err(bad("thinking.budget_tokens: a non-negative integer is required for type \"enabled\"")),
            },
            Some("adaptive") => Ok(Self::Shown { omitted }),
            t => Err(bad(format!("thinking.type must be \"enabled\", \"adaptive\" or \"disabled\", not {t:?}"))),
        }
    }

    /// The template variables it sets.
    fn vars(self) -> Map<String, Value> {
        let mut vars = Map::new();
        match self {
            Self::Unset => {}
            Self::Disabled => _ = vars.insert("enable_thinking".into(), json!(false)),
            Self::Shown { .. } => _ = vars.insert("enable_thinking".into(), json!(true)),
        }
        vars
    }

    fn shown(self) -> bool {
        matches!(self, Self::Shown { .. })
    }

    /// The text a `thinking` block carries for `reasoning`.
    fn text(self, reasoning: &str) -> &str {
        match self {
            Self::Shown { omitted: false } => reasoning,
            _ => "",
        }
    }
}

/// The `signature` of a thinking block: opaque to clients, who send it back with the
/// block. toolgate does not verify it (the reasoning is re-rendered by the template,
/// which keeps or drops it); it is a digest of the reasoning text.
fn signature(reasoning: &str) -> String {
    let h = reasoning.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("toolgate-{h:016x}")
}

/// The structured output a request asks for: `output_config.format` (or the beta's
/// top-level `output_format`) of type `json_schema`, strict as Anthropic's is.
fn output_format(obj: &Map<String, Value>) -> Result<Option<Value>, AnthropicError> {
    let format = match obj.get("output_config").filter(|v| !v.is_null()) {
        Some(Value::Object(cfg)) => cfg.get("format"),
        Some(_) => return Err(bad("output_config must be an object")),
        None => obj.get("output_format"),
    };
    let Some(format) = format.filter(|v| !v.is_null()) else { return Ok(None) };
    match (format.get("type").and_then(Value::as_str), format.get("schema")) {
        (Some("json_schema"), Some(schema)) if schema.is_object() => Ok(Some(schema.clone())),
        (Some("json_schema"), _) => Err(bad("output_config.format.schema: a JSON Schema object is required")),
        (t, _) => Err(bad(format!("output_config.format.type must be \"json_schema\", not {t:?}"))),
    }
}

/// `content` blocks of a finished turn: the reasoning (when shown), the text, the
/// calls. A call cut by `max_tokens` whose arguments are not complete JSON gets
/// `input: {}` (its text is in the streamed deltas).
fn content_blocks(turn: &ChatTurn, thinking: Thinking) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(r) = turn.reasoning_content.as_deref().filter(|_| thinking.shown()) {
        blocks.push(json!({"type": "thinking", "thinking": thinking.text(r), "signature": signature(r)}));
    }
    if !turn.content.is_empty() {
        blocks.push(json!({"type": "text", "text": turn.content}));
    }
    for c in &turn.tool_calls {
        let input: Value = serde_json::from_str(&c.function.arguments).unwrap_or_else(|_| json!({}));
        blocks.push(json!({"type": "tool_use", "id": tool_use_id(&c.id), "name": c.function.name, "input": input}));
    }
    blocks
}

fn tool_use_id(call_id: &str) -> String {
    format!("toolu_{}", call_id.trim_start_matches("call_"))
}

/// The kind of the content block being streamed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    ToolUse,
}

/// Turns stream events into Messages streaming events, opening and closing content
/// blocks as the kind of delta changes.
struct BlockWriter {
    open: Option<(usize, Block)>,
    next: usize,
    thinking: Thinking,
    /// The reasoning streamed so far (its signature closes the block).
    reasoning: String,
}

fn sse(kind: &str, data: Value) -> Event {
    Event::default().event(kind).data(data.to_string())
}

impl BlockWriter {
    fn new(thinking: Thinking) -> Self {
        Self { open: None, next: 0, thinking, reasoning: String::new() }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if let Some((index, kind)) = self.open.take() {
            if kind == Block::Thinking {
                out.push(sse(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": signature(&self.reasoning)}}),
                ));
            }
            out.push(sse("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        }
    }

    fn open(&mut self, block: Value, kind: Block, out: &mut Vec<Event>) -> usize {
        self.close(out);
        let index = self.next;
        self.next += 1;
        self.open = Some((index, kind));
        out.push(sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }

    fn event(&mut self, e: &StreamEvent, out: &mut Vec<Event>) {
        match e {
            StreamEvent::Content(t) => {
                let index = match self.open {
                    Some((i, Block::Text)) => i,
                    _ => self.open(json!({"type": "text", "text": ""}), Block::Text, out),
                };
                out.push(sse(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
                ));
            }
            StreamEvent::CallStart { id, name, .. } => {
                self.open(
                    json!({"type": "tool_use", "id": tool_use_id(id), "name": name, "input": {}}),
                    Block::ToolUse,
                    out,
                );
            }
            StreamEvent::Arguments { fragment, .. } => {
                if let Some((index, Block::ToolUse)) = self.open {
                    out.push(sse(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                    ));
                }
            }
            // Reasoning the request did not ask to see stays out of the answer.
            StreamEvent::Reasoning(_) if !self.thinking.shown() => {}
            StreamEvent::Reasoning(t) => {
                let index = match self.open {
                    Some((i, Block::Thinking)) => i,
                    _ => self.open(json!({"type": "thinking", "thinking": "", "signature": ""}), Block::Thinking, out),
                };
                self.reasoning.push_str(t);
                let shown = self.thinking.text(t);
                if !shown.is_empty() {
                    out.push(sse(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "thinking_delta", "thinking": shown}}),
                    ));
                }
            }
        }
    }
}

/// The model a request names must be the one served (or `default`).
fn check_model(obj: &Map<String, Value>, s: &AppState) -> Result<(), AnthropicError> {
    if let Some(m) = validate::opt_str(obj, "model")? {
        if m != s.model_id && m != "default" {
            return Err(AnthropicError(ApiError {
                status: StatusCode::NOT_FOUND,
                kind: "not_found_error",
                message: format!("model `{m}` not found (this server serves `{}`)", s.model_id),
                param: Some("model".into()),
            }));
        }
    }
    Ok(())
}

/// The request's custom tools as function tools.
fn parse_tools(obj: &Map<String, Value>) -> Result<Vec<Tool>, AnthropicError> {
    obj.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let name =
                t.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("tools.{i}.name is required")))?;
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("custom");
            if kind != "custom" {
                return Err(bad(format!(
                    "tools.{i}: server tools (type {kind:?}) are not available; declare custom tools"
                )));
            }
            let Some(schema) = t.get("input_schema").filter(|v| v.is_object()) else {
                return Err(bad(format!("tools.{i}.input_schema: a JSON Schema object is required")));
            };
            Ok(Tool {
                kind: "function".into(),
                function: FunctionDef {
                    name: name.into(),
                    description: t.get("description").and_then(Value::as_str).map(String::from),
                    parameters: schema.clone(),
                    strict: t.get("strict").and_then(Value::as_bool),
                },
            })
        })
        .collect::<Result<_, AnthropicError>>()
}

/// A Messages request's body: its fields, its `system` + `messages` as chat messages
/// with the template variables its `thinking` sets, and its tools as function tools
/// (checked), once the model is the served one.
async fn read_request(
    s: &AppState,
    req: Request,
) -> Result<(Map<String, Value>, TurnPrompt, Vec<Tool>), AnthropicError> {
    let body = read_body(s, req).await?;
    let req: Value = serde_json::from_slice(&body).map_err(|e| bad(format!("malformed JSON body: {e}")))?;
    let Value::Object(obj) = req else { return Err(bad("the body must be a JSON object")) };
    check_model(&obj, s)?;
    let raw_messages = obj
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| bad("messages: a non-empty array is required"))?;
    let messages = to_chat_messages(obj.get("system"), raw_messages)?;
    let tools = parse_tools(&obj)?;
    validate::tools(&tools, "tools")?;
    let vars = Thinking::parse(&obj)?.vars();
    Ok((obj, TurnPrompt { messages, vars }, tools))
}

/// `POST /v1/messages/count_tokens`: the prompt's token count for a Messages request
/// (`system`, `messages`, `tools`, `tool_choice`), rendered exactly as
/// `/v1/messages` renders it, so it equals that turn's `usage.input_tokens`.
pub(crate) async fn count_tokens(State(s): State<Arc<AppState>>, req: Request) -> Result<Response, AnthropicError> {
    let (obj, prompt, tools) = read_request(&s, req).await?;
    let none = obj.get("tool_choice").and_then(|c| c.get("type")).and_then(Value::as_str) == Some("none");
    let tool_json: Option<Vec<Value>> = (!tools.is_empty() && !none)
        .then(|| tools.iter().map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).collect());
    let state = s.clone();
    let counted = tokio::task::spawn_blocking(move || {
        // The schemas are checked as `/v1/messages` checks them: a request it refuses
        // is refused here too, with the same error.
        if let (Some(fmt), false) = (&state.setup.layout.format, tools.is_empty() || none) {
            crate::tools::calls_grammar(fmt, &tools, &ToolChoice::Auto, true, &state.tokenizer)
                .map_err(|e| super::in_request_shape(e, &tools, ".input_schema"))?;
        }
        encode_chat(&state.setup, &state.tokenizer, prompt.messages, tool_json, prompt.vars).map(|(_, ids)| ids.len())
    })
    .await
    .map_err(|_| AnthropicError(super::internal("the token count task failed")))?
    .map_err(|e| AnthropicError(e.into()))?;
    Ok(Json(json!({"input_tokens": counted})).into_response())
}

/// The handler.
pub(crate) async fn messages(State(s): State<Arc<AppState>>, req: Request) -> Result<Response, AnthropicError> {
    let (obj, prompt, tools) = read_request(&s, req).await?;
    let obj = &obj;
    let thinking = Thinking::parse(obj)?;
    let schema = output_format(obj)?;
    let max_tokens = validate::opt_int(obj, "max_tokens", 1, i64::MAX)?
        .ok_or_else(|| bad("max_tokens: a positive integer is required"))?;
    let max_tokens = usize::try_from(max_tokens).unwrap_or(usize::MAX);
    let stream = validate::opt_bool(obj, "stream")?.unwrap_or(false);
    let tc = obj.get("tool_choice");
    let choice = match tc.and_then(|c| c.get("type")).and_then(Value::as_str) {
        None | Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => ToolChoice::Named(
            tc.and_then(|c| c.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tool_choice.name is required for type \"tool\""))?
                .into(),
        ),
        Some(t) => return Err(bad(format!("tool_choice.type {t:?} is not one of auto, any, tool, none"))),
    };
    let parallel = !tc.and_then(|c| c.get("disable_parallel_tool_use")).and_then(Value::as_bool).unwrap_or(false);
    let sampling = SamplingParams {
        temperature: validate::opt_number(obj, "temperature", 0.0, 1.0)?.unwrap_or(1.0) as f32,
        top_p: validate::opt_number(obj, "top_p", 0.0, 1.0)?.unwrap_or(1.0) as f32,
        top_k: validate::opt_int(obj, "top_k", 0, i64::from(u32::MAX))?.unwrap_or(0) as usize,
        seed: rand::random(),
        ..SamplingParams::greedy()
    };
    sampling.validate().map_err(|e| AnthropicError(e.into()))?;
    let stop = validate::stop_strings(obj, "stop_sequences", false)?;
    let stops = stop.clone();
    let params = GenerateParams { max_tokens, sampling, stop, ..GenerateParams::default() };
    let prepare = move |e: &mut crate::engine::Engine, st: &AppState| {
        let answer = schema.as_ref().map(|s| (s, Mode::Strict));
        super::openai::prepare_chat(e, st, prompt, (&tools, &choice, parallel), answer)
            .map_err(|e| super::in_request_shape(e, &tools, ".input_schema"))
    };
    let running = Running::start(&s, prepare, params, stream).await?;
    let id = format!("msg_{:024x}", rand::random::<u128>() >> 32);
    let model = s.model_id.clone();
    if !stream {
        let turn = running.finish().await?;
        let (stop_reason, stop_sequence) = stop_reason(&turn, &stops);
        return Ok(Json(json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": content_blocks(&turn, thinking), "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens,
                "cache_read_input_tokens": turn.cached_tokens},
            // Not in Anthropic's API (clients ignore it): where the turn's time went, as
            // in the OpenAI-style answers.
            "timings": timings_json(&turn),
        }))
        .into_response());
    }
    let start = sse(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": running.prompt_tokens, "output_tokens": 0}}}),
    );
    let writer = BlockWriter::new(thinking);
    let events = stream::unfold(Some((running, writer)), move |st| {
        let stops = stops.clone();
        async move {
        let (mut running, mut w) = st?;
        let mut batch = Vec::new();
        let go_on = match running.next().await {
            Some(Msg::Event(e)) => {
                w.event(&e, &mut batch);
                true
            }
            Some(Msg::Done(turn)) => {
                w.close(&mut batch);
                let (stop_reason, stop_sequence) = stop_reason(&turn, &stops);
                batch.push(sse(
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                        "usage": {"output_tokens": turn.completion_tokens}, "timings": timings_json(&turn)}),
                ));
                batch.push(sse("message_stop", json!({"type": "message_stop"})));
                false
            }
            Some(Msg::Failed(e)) => {
                batch.push(sse("error", AnthropicError(e).body()));
                false
            }
            // The Messages API has no log-probabilities; none are asked for here.
            Some(Msg::Started(_) | Msg::Logprob(_)) => true,
            None => false,
        };
        let next = go_on.then_some((running, w));
        Some((stream::iter(batch.into_iter().map(Ok::<Event, Infallible>)), next))
        }
    })
    .flatten();
    Ok(Sse::new(stream::iter([Ok(start)]).chain(events)).into_response())
}
