//! `POST /v1/chat/completions`: the OpenAI Chat Completions API with tools,
//! `response_format` and streaming (`chat.completion.chunk` server-sent events with
//! per-index `tool_calls` deltas, `stream_options.include_usage`, `data: [DONE]`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};

use super::{now, read_body, validate, ApiError, AppState, Msg, Running};
use crate::engine::chat::{prepare_text_turn, prepare_turn, prepare_turn_answering, ChatTurn, PreparedTurn};
use crate::engine::prompt::TurnPrompt;
use crate::engine::{Engine, GenerateParams};
use crate::grammar::schema::Mode;
use crate::grammar::TokenVocab;
use crate::sampling::{SamplingParams, TokenLogprob, MAX_TOP_LOGPROBS};
use crate::template::caps::REASONING_EFFORT_VARS;
use crate::tools::stream::StreamEvent;
use crate::tools::{Tool, ToolChoice};

/// A validated `/v1/chat/completions` request.
pub(crate) struct ChatRequest {
    prompt: TurnPrompt,
    pub(super) tools: Vec<Tool>,
    choice: ToolChoice,
    parallel: bool,
    schema: Option<(Value, Mode)>,
    pub(super) params: GenerateParams,
    pub(super) stream: bool,
    include_usage: bool,
    /// `logprobs: true`: report each token's log-probability (and `top_logprobs`).
    logprobs: bool,
}

impl ChatRequest {
    pub(super) fn parse(s: &AppState, body: &[u8]) -> Result<Self, ApiError> {
        let req: Value =
            serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}"), None))?;
        let obj = req.as_object().ok_or_else(|| ApiError::bad("the body must be a JSON object", None))?;
        check_model(obj, s)?;
        let stream = validate::opt_bool(obj, "stream")?.unwrap_or(false);
        let include_usage = include_usage(obj)?;
        if validate::opt_int(obj, "n", 1, 1).is_err() {
            return Err(ApiError::bad("only n=1 is supported", Some("n")));
        }
        let messages = obj
            .get("messages")
            .and_then(Value::as_array)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ApiError::bad("`messages` must be a non-empty array", Some("messages")))?
            .clone();
        validate::openai_messages(&messages)?;
        let prompt = TurnPrompt { messages, vars: template_vars(obj)? };
        let tools: Vec<Tool> = match obj.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(t) => serde_json::from_value(t.clone())
                .map_err(|e| ApiError::bad(format!("invalid `tools`: {e}"), Some("tools")))?,
        };
        validate::tools(&tools, "tools")?;
        let choice = match obj.get("tool_choice") {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(v) => ToolChoice::from_json(v).map_err(|e| ApiError::bad(e.to_string(), Some("tool_choice")))?,
        };
        let parallel = validate::opt_bool(obj, "parallel_tool_calls")?.unwrap_or(true);
        let max_tokens = match validate::opt_int(obj, "max_completion_tokens", 1, i64::MAX)? {
            Some(n) => Some(n),
            None => validate::opt_int(obj, "max_tokens", 1, i64::MAX)?,
        };
        let max_tokens = max_tokens.map_or(512, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let sampling = sampling(obj)?;
        let stop = validate::stop_strings(obj, "stop", true)?;
        let schema = match obj.get("response_format") {
            None | Some(Value::Null) => None,
            Some(rf) => match rf.get("type").and_then(Value::as_str) {
                Some("json_schema") => Some((
                    rf.pointer("/json_schema/schema")
                        .cloned()
                        .ok_or_else(|| ApiError::bad("json_schema.schema is missing", Some("response_format")))?,
                    if rf.pointer("/json_schema/strict").and_then(Value::as_bool) == Some(true) {
                        Mode::Strict
                    } else {
                        Mode::Lenient
                    },
                )),
                Some("json_object") => Some((json!({"type": "object", "additionalProperties": true}), Mode::Lenient)),
                Some("text") => None,
                _ => {
                    return Err(ApiError::bad(
                        format!(
                            "`response_format.type` must be \"text\", \"json_object\" or \"json_schema\"; got {rf}"
                        ),
                        Some("response_format"),
                    ))
                }
            },
        };
        let logprobs = validate::opt_bool(obj, "logprobs")?.unwrap_or(false);
        let top_logprobs = match obj.get("top_logprobs") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64().filter(|&k| k as usize <= MAX_TOP_LOGPROBS) {
                Some(_) if !logprobs => {
                    return Err(ApiError::bad("`top_logprobs` needs `logprobs: true`", Some("top_logprobs")))
                }
                Some(k) => Some(k as usize),
                None => {
                    return Err(ApiError::bad(
                        format!("`top_logprobs` must be an integer from 0 to {MAX_TOP_LOGPROBS}"),
                        Some("top_logprobs"),
                    ))
                }
            },
        };
        let params = GenerateParams {
            max_tokens,
            sampling,
            stop,
            logprobs: logprobs.then(|| top_logprobs.unwrap_or(0)),
            // llama.cpp's name for it: `false` prefills the whole prompt.
            reuse_prefix: validate::opt_bool(obj, "cache_prompt")?.unwrap_or(true),
            ..GenerateParams::default()
        };
        Ok(Self { prompt, tools, choice, parallel, schema, params, stream, include_usage, logprobs })
    }

    /// Render, tokenize and compile: every request error surfaces here, before a
    /// stream starts.
    pub(super) fn prepare(self, engine: &mut Engine, s: &AppState) -> crate::Result<PreparedTurn> {
        let answer = self.schema.as_ref().map(|(v, m)| (v, *m));
        prepare_chat(engine, s, self.prompt, (&self.tools, &self.choice, self.parallel), answer)
    }
}

/// The events that end an OpenAI stream: the finishing chunk, a chunk with the usage
/// when asked for (`stream_options.include_usage`), and `data: [DONE]`.
pub(super) fn stream_end(head: &Value, finishing: Event, usage: Option<Value>) -> Vec<Event> {
    let mut events = vec![finishing];
    if let Some(usage) = usage {
        let mut v = head.clone();
        v["choices"] = json!([]);
        v["usage"] = usage;
        events.push(Event::default().data(v.to_string()));
    }
    events.push(Event::default().data("[DONE]"));
    events
}

/// An error in the middle of an OpenAI stream, then `data: [DONE]`.
pub(super) fn stream_error(e: &ApiError) -> Vec<Event> {
    vec![Event::default().data(e.body().to_string()), Event::default().data("[DONE]")]
}

/// The model a request names must be the one served (or `default`): a 404 otherwise.
pub(super) fn check_model(obj: &serde_json::Map<String, Value>, s: &AppState) -> Result<(), ApiError> {
    match validate::opt_str(obj, "model")? {
        Some(m) if m != s.model_id && m != "default" => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            message: format!("model `{m}` not found (this server serves `{}`)", s.model_id),
            param: Some("model".into()),
        }),
        _ => Ok(()),
    }
}

/// `stream_options.include_usage`: a final chunk with the usage.
pub(super) fn include_usage(obj: &serde_json::Map<String, Value>) -> Result<bool, ApiError> {
    match obj.get("stream_options") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Object(o)) => Ok(validate::opt_bool(o, "include_usage")?.unwrap_or(false)),
        Some(v) => Err(ApiError::bad(format!("`stream_options` must be an object, not {v}"), Some("stream_options"))),
    }
}

/// The sampling parameters of an OpenAI request (`temperature`, `top_p`,
/// `presence_penalty`, `frequency_penalty`, `seed`), range-checked.
pub(super) fn sampling(obj: &serde_json::Map<String, Value>) -> Result<SamplingParams, ApiError> {
    let number = |name, min, max, default: f64| -> Result<f32, ApiError> {
        Ok(validate::opt_number(obj, name, min, max)?.unwrap_or(default) as f32)
    };
    let sampling = SamplingParams {
        temperature: number("temperature", 0.0, 2.0, 1.0)?,
        top_p: number("top_p", 0.0, 1.0, 1.0)?,
        presence_penalty: number("presence_penalty", -2.0, 2.0, 0.0)?,
        frequency_penalty: number("frequency_penalty", -2.0, 2.0, 0.0)?,
        seed: validate::opt_int(obj, "seed", i64::MIN, i64::MAX)?.map_or_else(now, |n| n as u64),
        ..SamplingParams::greedy()
    };
    sampling.validate().map_err(ApiError::from)?;
    Ok(sampling)
}

/// The template variables a Chat Completions request sets: its `chat_template_kwargs`
/// (as llama.cpp's server and vLLM read them: `enable_thinking`, …) and its
/// `reasoning_effort` (read by templates that take one, gpt-oss's, under both names
/// templates read it by: [`REASONING_EFFORT_VARS`]).
fn template_vars(obj: &serde_json::Map<String, Value>) -> Result<serde_json::Map<String, Value>, ApiError> {
    let mut vars = match obj.get("chat_template_kwargs") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => {
            return Err(ApiError::bad(
                format!("`chat_template_kwargs` must be an object, not {v}"),
                Some("chat_template_kwargs"),
            ))
        }
    };
    if let Some(effort) = validate::opt_str(obj, "reasoning_effort")? {
        for name in REASONING_EFFORT_VARS {
            vars.insert(name.into(), json!(effort));
        }
    }
    Ok(vars)
}

/// Render, tokenize and compile one chat turn of any API: calls of `tools` as
/// `choice` says (with `answer`, a text answer in that schema or a call, for `auto`),
/// or a text turn (in `answer`'s schema when given).
pub(super) fn prepare_chat(
    engine: &mut Engine,
    s: &AppState,
    prompt: TurnPrompt,
    (tools, choice, parallel): (&[Tool], &ToolChoice, bool),
    answer: Option<(&Value, Mode)>,
) -> crate::Result<PreparedTurn> {
    if tools.is_empty() || *choice == ToolChoice::None {
        return prepare_text_turn(engine, &s.setup, prompt, answer);
    }
    match (answer, choice) {
        // A text answer in the response format, or a call.
        (Some(answer), ToolChoice::Auto) => {
            prepare_turn_answering(engine, &s.setup, prompt, tools, parallel, s.tool_mode, answer)
        }
        _ => prepare_turn(engine, &s.setup, prompt, tools, choice, parallel, s.tool_mode),
    }
}

/// One `logprobs.content` entry: the token's text (lossy where it is part of a UTF-8
/// character), its bytes and log-probability, and the alternatives in the same shape.
pub(crate) fn logprob_json(vocab: &TokenVocab, l: &TokenLogprob) -> Value {
    let entry = |id: u32, logprob: f32| {
        let b = vocab.token_bytes(id);
        // Control tokens are stored as 0xFF + their text.
        let b = b.strip_prefix(&[0xFF]).unwrap_or(b);
        json!({"token": String::from_utf8_lossy(b), "logprob": logprob, "bytes": b})
    };
    let mut v = entry(l.token, l.logprob);
    v["top_logprobs"] = l.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
    v
}

/// The `logprobs` field of a choice: `null` unless the request asked for them.
fn logprobs_field(asked: bool, content: Vec<Value>) -> Value {
    if asked {
        json!({"content": content, "refusal": null})
    } else {
        Value::Null
    }
}

fn usage_json(turn: &ChatTurn) -> Value {
    json!({"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": turn.cached_tokens}})
}

/// Where a turn's time went, in llama.cpp server's names: the prompt tokens prefilled
/// (those not reused from the cache) and the time to the first generated token, the
/// generated tokens and the time after it, and toolgate's own: the tokens jump-forward
/// fed in chunks and the time spent computing constraint masks.
pub(super) fn timings_json(turn: &ChatTurn) -> Value {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let t = &turn.timings;
    json!({"prompt_n": turn.prompt_tokens - turn.cached_tokens.min(turn.prompt_tokens), "prompt_ms": ms(t.prompt),
        "predicted_n": turn.completion_tokens, "predicted_ms": ms(t.decode),
        "forced_n": t.forced_tokens, "mask_ms": ms(t.mask)})
}

fn message_json(turn: &ChatTurn) -> Value {
    let content =
        if turn.content.is_empty() && !turn.tool_calls.is_empty() { Value::Null } else { json!(turn.content) };
    let mut msg = json!({"role": "assistant", "content": content});
    if !turn.tool_calls.is_empty() {
        msg["tool_calls"] = serde_json::to_value(&turn.tool_calls).unwrap_or(Value::Null);
    }
    if let Some(r) = &turn.reasoning_content {
        msg["reasoning_content"] = json!(r);
    }
    msg
}

/// The OpenAI `delta` of one stream event.
fn delta_json(e: &StreamEvent) -> Value {
    match e {
        StreamEvent::Content(c) => json!({"content": c}),
        StreamEvent::CallStart { index, id, name } => json!({"tool_calls": [{"index": index, "id": id,
            "type": "function", "function": {"name": name, "arguments": ""}}]}),
        StreamEvent::Arguments { index, fragment } => {
            json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        }
        StreamEvent::Reasoning(r) => json!({"reasoning_content": r}),
    }
}

/// One `chat.completion.chunk` event.
fn chunk(head: &Value, delta: Value, finish: Option<&str>, logprobs: Value) -> Event {
    Event::default().data(chunk_json(head, delta, finish, logprobs).to_string())
}

/// The JSON of one `chat.completion.chunk`.
fn chunk_json(head: &Value, delta: Value, finish: Option<&str>, logprobs: Value) -> Value {
    let mut v = head.clone();
    v["choices"] = json!([{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]);
    v
}

/// The handler.
pub(crate) async fn chat_completions(State(s): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(&s, req).await?;
    let mut r = ChatRequest::parse(&s, &body)?;
    let (stream, include_usage, asked) = (r.stream, r.include_usage, r.logprobs);
    // A turn that must call starts with `content: null`, as OpenAI's does; a turn that
    // may answer in text starts with `""`.
    let must_call = !r.tools.is_empty() && matches!(r.choice, ToolChoice::Required | ToolChoice::Named(_));
    let params = std::mem::take(&mut r.params);
    let running = Running::start(&s, move |e, st| r.prepare(e, st), params, stream).await?;
    let id = format!("chatcmpl-{:016x}", rand::random::<u64>());
    let (created, model) = (now(), s.model_id.clone());
    if !stream {
        let (turn, logprobs) = running.finish_with_logprobs().await?;
        return Ok(Json(json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message_json(&turn), "finish_reason": turn.finish_reason,
                "logprobs": logprobs_field(asked, logprobs)}],
            "usage": usage_json(&turn),
            "timings": timings_json(&turn),
        }))
        .into_response());
    }
    let head = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model});
    let content = if must_call { Value::Null } else { json!("") };
    let first = chunk(&head, json!({"role": "assistant", "content": content}), None, logprobs_field(asked, vec![]));
    // Log-probabilities wait for the next chunk: the one carrying their token's text
    // (or the finishing chunk, for tokens whose text produced no delta).
    let events = stream::unfold(Some((running, head, Vec::new())), move |st| async move {
        let (mut running, head, mut pending) = st?;
        let (batch, go_on) = match running.next().await {
            Some(Msg::Logprob(v)) => {
                pending.push(v);
                (vec![], true)
            }
            Some(Msg::Event(e)) => {
                (vec![chunk(&head, delta_json(&e), None, logprobs_field(asked, std::mem::take(&mut pending)))], true)
            }
            Some(Msg::Done(turn)) => {
                let lp = logprobs_field(asked, std::mem::take(&mut pending));
                // The finishing chunk carries the turn's timings, as llama.cpp's server's does.
                let mut last = chunk_json(&head, json!({}), Some(turn.finish_reason), lp);
                last["timings"] = timings_json(&turn);
                let last = Event::default().data(last.to_string());
                (stream_end(&head, last, include_usage.then(|| usage_json(&turn))), false)
            }
            Some(Msg::Failed(e)) => (stream_error(&e), false),
            Some(Msg::Started(_)) => (vec![], true),
            None => (vec![], false),
        };
        let next = go_on.then_some((running, head, pending));
        Some((stream::iter(batch.into_iter().map(Ok::<Event, Infallible>)), next))
    })
    .flatten();
    Ok(Sse::new(stream::iter([Ok(first)]).chain(events)).into_response())
}
