//! `POST /v1/responses`: the OpenAI Responses API, the default of openai-agents, the
//! Vercel AI SDK's `openai()` provider and `client.responses.create`.
//!
//! A request is translated into a Chat Completions request (the same validation,
//! template, constraint and generation: [`super::openai`]) and the turn back into
//! Responses output items: a `reasoning` item (the template's reasoning block, as a
//! summary), a `message` with `output_text`, and a `function_call` per call. Streamed,
//! the documented event sequence: `response.created`, `response.in_progress`, per item
//! `response.output_item.added` … `done` with `response.output_text.delta` /
//! `response.function_call_arguments.delta` / `response.reasoning_summary_text.delta`
//! in between, then `response.completed` (or `response.incomplete` when the token
//! budget ran out).
//!
//! Responses are not stored: `store` is accepted and answered `false`, and
//! `previous_response_id` is a 400 saying to send the conversation in `input`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{stream, StreamExt};
use serde_json::{json, Map, Value};

use super::openai::{timings_json, ChatRequest};
use super::{now, read_body, ApiError, AppState, Msg, Running};
use crate::engine::chat::ChatTurn;
use crate::tools::stream::StreamEvent;

/// The Chat Completions body for a Responses body, and the fields the response echoes.
fn to_chat(body: &[u8]) -> Result<(Value, Map<String, Value>), ApiError> {
    let req: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}"), None))?;
    let obj = req.as_object().ok_or_else(|| ApiError::bad("the body must be a JSON object", None))?;
    if obj.get("previous_response_id").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad(
            "toolgate does not store responses: send the whole conversation in `input` (and `store: false`)",
            Some("previous_response_id"),
        ));
    }
    let mut chat = Map::new();
    let mut messages = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(ApiError::bad("`instructions` must be a string", Some("instructions"))),
    }
    match obj.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(item, &mut messages)
                    .map_err(|e| ApiError::bad(format!("input[{i}]: {e}"), Some("input")))?;
            }
        }
        _ => return Err(ApiError::bad("`input` must be a string or an array of items", Some("input"))),
    }
    chat.insert("messages".into(), Value::Array(messages));
    for (from, to) in [
        ("model", "model"),
        ("stream", "stream"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("max_output_tokens", "max_completion_tokens"),
        ("top_logprobs", "top_logprobs"),
    ] {
        if let Some(v) = obj.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    if let Some(effort) = obj.get("reasoning").and_then(|r| r.get("effort")).filter(|v| !v.is_null()) {
        chat.insert("reasoning_effort".into(), effort.clone());
    }
    if let Some(tools) = obj.get("tools").and_then(Value::as_array) {
        let tools = tools
            .iter()
            .enumerate()
            .map(|(i, t)| match t.get("type").and_then(Value::as_str) {
                Some("function") => {
                    let mut f = t.as_object().cloned().unwrap_or_default();
                    f.remove("type");
                    Ok(json!({"type": "function", "function": f}))
                }
                other => Err(ApiError::bad(
                    format!("tools[{i}]: only function tools are served, not {}", other.unwrap_or("an untyped tool")),
                    Some("tools"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        chat.insert("tools".into(), Value::Array(tools));
    }
    match obj.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            chat.insert("tool_choice".into(), json!(s));
        }
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad("`tool_choice` of type function needs a `name`", Some("tool_choice")))?;
            chat.insert("tool_choice".into(), json!({"type": "function", "function": {"name": name}}));
        }
        Some(other) => {
            return Err(ApiError::bad(format!("unsupported `tool_choice` {other}"), Some("tool_choice")));
        }
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")).filter(|f| !f.is_null()) {
        let rf = match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => json!({"type": "json_schema", "json_schema": {
                "name": format.get("name").cloned().unwrap_or(json!("response")),
                "schema": format.get("schema").cloned().unwrap_or(Value::Null),
                "strict": format.get("strict").cloned().unwrap_or(Value::Null)}}),
            Some(t @ ("json_object" | "text")) => json!({"type": t}),
            _ => {
                return Err(ApiError::bad(
                    "`text.format.type` must be \"text\", \"json_object\" or \"json_schema\"",
                    Some("text"),
                ))
            }
        };
        chat.insert("response_format".into(), rf);
    }
    if obj
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "message.output_text.logprobs"))
    {
        chat.insert("logprobs".into(), json!(true));
    }
    let mut echo = Map::new();
    for k in [
        "instructions",
        "max_output_tokens",
        "metadata",
        "reasoning",
        "text",
        "tool_choice",
        "tools",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "user",
    ] {
        echo.insert(k.into(), obj.get(k).cloned().unwrap_or(Value::Null));
    }
    Ok((Value::Object(chat), echo))
}

/// The text of a message's content: a string, or `input_text` / `output_text` parts.
fn content_text(content: &Value) -> Result<String, String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                (Some("input_text" | "output_text" | "text"), Some(t)) => Ok(t.to_string()),
                (t, _) => Err(format!("content parts of type {} are not served (text only)", t.unwrap_or("?"))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.concat()),
        other => Err(format!("message content must be a string or parts, not {other}")),
    }
}

/// Append one `input` item to the chat messages: a message, a `function_call` (joined
/// to the assistant message before it) or a `function_call_output`.
fn input_item(item: &Value, messages: &mut Vec<Value>) -> Result<(), String> {
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        Some("message") | None if item.get("role").is_some() => {
            let role = match item["role"].as_str() {
                Some("developer" | "system") => "system",
                Some(r @ ("user" | "assistant")) => r,
                other => return Err(format!("unknown role {other:?}")),
            };
            let text = content_text(item.get("content").unwrap_or(&Value::Null))?;
            messages.push(json!({"role": role, "content": text}));
        }
        Some("function_call") => {
            let field =
                |k: &str| item.get(k).and_then(Value::as_str).ok_or_else(|| format!("function_call needs `{k}`"));
            let call = json!({"id": field("call_id")?, "type": "function",
                "function": {"name": field("name")?, "arguments": field("arguments")?}});
            match messages.last_mut() {
                Some(m) if m["role"] == "assistant" => {
                    if !m["tool_calls"].is_array() {
                        m["tool_calls"] = json!([]);
                    }
                    if let Some(calls) = m["tool_calls"].as_array_mut() {
                        calls.push(call);
                    }
                }
                _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            let call_id = item.get("call_id").and_then(Value::as_str).ok_or("function_call_output needs `call_id`")?;
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(parts @ Value::Array(_)) => content_text(parts)?,
                _ => return Err("function_call_output needs an `output` string".into()),
            };
            messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        // Earlier reasoning is the model's own: templates drop it from the history.
        Some("reasoning") => {}
        other => return Err(format!("items of type {} are not served", other.unwrap_or("?"))),
    }
    Ok(())
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}", rand::random::<u64>())
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

/// The Responses object around `output`.
fn response(
    id: &str,
    created: u64,
    model: &str,
    echo: &Map<String, Value>,
    output: Vec<Value>,
    turn: Option<&ChatTurn>,
) -> Value {
    let (status, incomplete) = match turn.map(|t| t.finish_reason) {
        None => ("in_progress", Value::Null),
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(_) => ("completed", Value::Null),
    };
    let mut r = json!({"id": id, "object": "response", "created_at": created, "status": status,
        "error": null, "incomplete_details": incomplete, "model": model, "output": output,
        "previous_response_id": null, "store": false, "truncation": "disabled"});
    for (k, v) in echo {
        r[k] = v.clone();
    }
    for (k, default) in [
        ("tools", json!([])),
        ("tool_choice", json!("auto")),
        ("parallel_tool_calls", json!(true)),
        ("metadata", json!({})),
        ("text", json!({"format": {"type": "text"}})),
        ("reasoning", json!({})),
    ] {
        if r[k].is_null() {
            r[k] = default;
        }
    }
    r["usage"] = turn.map_or(Value::Null, |t| {
        json!({"input_tokens": t.prompt_tokens, "input_tokens_details": {"cached_tokens": t.cached_tokens},
            "output_tokens": t.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": t.prompt_tokens + t.completion_tokens})
    });
    if let Some(t) = turn {
        // Not in OpenAI's object: where the turn's time went (as chat completions give it).
        r["timings"] = timings_json(t);
    }
    r
}

/// The output items of a whole turn: reasoning, the message, then the calls.
fn output_items(turn: &ChatTurn) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = turn.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
        out.push(reasoning_item(&new_id("rs"), r));
    }
    if !turn.content.is_empty() {
        out.push(message_item(&new_id("msg"), &turn.content, "completed"));
    }
    for c in &turn.tool_calls {
        out.push(call_item(&new_id("fc"), &c.id, &c.function.name, &c.function.arguments, "completed"));
    }
    out
}

/// The item being streamed.
enum Open {
    None,
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, arguments: String },
}

/// Turns a turn's stream events into Responses events, keeping the items for the
/// final `response.completed`.
struct Streamer {
    seq: u64,
    open: Open,
    done: Vec<Value>,
}

impl Streamer {
    fn event(&mut self, kind: &str, mut body: Value) -> Event {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq);
        self.seq += 1;
        Event::default().event(kind).data(body.to_string())
    }

    /// Close the open item (its `…done` events).
    fn close(&mut self) -> Vec<Event> {
        let index = self.done.len();
        let mut out = Vec::new();
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => return out,
            Open::Reasoning { id, text } => {
                let part = json!({"type": "summary_text", "text": text});
                out.push(self.event(
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                ));
                out.push(self.event(
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                ));
                self.done.push(reasoning_item(&id, &text));
            }
            Open::Message { id, text } => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                ));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                self.done.push(message_item(&id, &text, "completed"));
            }
            Open::Call { id, call_id, name, arguments } => {
                out.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}),
                ));
                self.done.push(call_item(&id, &call_id, &name, &arguments, "completed"));
            }
        }
        let item = self.done[index].clone();
        out.push(self.event("response.output_item.done", json!({"output_index": index, "item": item})));
        out
    }

    fn on(&mut self, e: StreamEvent) -> Vec<Event> {
        let index = self.done.len();
        let mut out = Vec::new();
        match e {
            StreamEvent::Reasoning(r) => {
                if !matches!(self.open, Open::Reasoning { .. }) {
                    out.extend(self.close());
                    let id = new_id("rs");
                    let index = self.done.len();
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": {"type": "reasoning", "id": id, "summary": []}}),
                    ));
                    out.push(self.event(
                        "response.reasoning_summary_part.added",
                        json!({"item_id": id,
                        "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
                    ));
                    self.open = Open::Reasoning { id, text: String::new() };
                }
                let index = self.done.len();
                if let Open::Reasoning { id, text } = &mut self.open {
                    text.push_str(&r);
                    let id = id.clone();
                    out.push(self.event(
                        "response.reasoning_summary_text.delta",
                        json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": r}),
                    ));
                }
            }
            StreamEvent::Content(c) => {
                if !matches!(self.open, Open::Message { .. }) {
                    out.extend(self.close());
                    let id = new_id("msg");
                    let index = self.done.len();
                    let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
                    out.push(self.event("response.output_item.added", json!({"output_index": index, "item": item})));
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index,
                        "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
                    ));
                    self.open = Open::Message { id, text: String::new() };
                }
                let index = self.done.len();
                if let Open::Message { id, text } = &mut self.open {
                    text.push_str(&c);
                    let id = id.clone();
                    out.push(self.event(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": index, "content_index": 0, "delta": c, "logprobs": []}),
                    ));
                }
            }
            StreamEvent::CallStart { id: call_id, name, .. } => {
                out.extend(self.close());
                let id = new_id("fc");
                let index = self.done.len();
                let item = call_item(&id, &call_id, &name, "", "in_progress");
                out.push(self.event("response.output_item.added", json!({"output_index": index, "item": item})));
                self.open = Open::Call { id, call_id, name, arguments: String::new() };
            }
            StreamEvent::Arguments { fragment, .. } => {
                if let Open::Call { id, arguments, .. } = &mut self.open {
                    arguments.push_str(&fragment);
                    let id = id.clone();
                    out.push(self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": fragment}),
                    ));
                }
            }
        }
        out
    }
}

/// The handler.
pub(crate) async fn responses(State(s): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(&s, req).await?;
    let (chat, echo) = to_chat(&body)?;
    let mut r = ChatRequest::parse(&s, chat.to_string().as_bytes())?;
    let stream = r.stream;
    let params = std::mem::take(&mut r.params);
    let tools = r.tools.clone();
    let prepare = move |e: &mut crate::engine::Engine, st: &AppState| {
        r.prepare(e, st).map_err(|e| super::in_request_shape(e, &tools, ".parameters"))
    };
    let running = Running::start(&s, prepare, params, stream).await?;
    let (id, created, model) = (new_id("resp"), now(), s.model_id.clone());
    if !stream {
        let turn = running.finish().await?;
        return Ok(Json(response(&id, created, &model, &echo, output_items(&turn), Some(&turn))).into_response());
    }
    let mut st = Streamer { seq: 0, open: Open::None, done: Vec::new() };
    let start = response(&id, created, &model, &echo, vec![], None);
    let first = vec![
        st.event("response.created", json!({"response": start})),
        st.event("response.in_progress", json!({"response": start})),
    ];
    let events = stream::unfold(Some((running, st)), move |state| {
        let (id, model, echo) = (id.clone(), model.clone(), echo.clone());
        async move {
            let (mut running, mut st) = state?;
            let (batch, go_on) = match running.next().await {
                Some(Msg::Event(e)) => (st.on(e), true),
                Some(Msg::Done(turn)) => {
                    let mut b = st.close();
                    let r = response(&id, created, &model, &echo, st.done.clone(), Some(&turn));
                    let kind =
                        if turn.finish_reason == "length" { "response.incomplete" } else { "response.completed" };
                    b.push(st.event(kind, json!({"response": r})));
                    (b, false)
                }
                Some(Msg::Failed(e)) => {
                    let err = e.body()["error"].clone();
                    (
                        vec![st.event(
                            "error",
                            json!({"code": err["type"], "message": err["message"], "param": err["param"]}),
                        )],
                        false,
                    )
                }
                Some(Msg::Logprob(_) | Msg::Started(_)) => (vec![], true),
                None => (vec![], false),
            };
            let next = go_on.then_some((running, st));
            Some((stream::iter(batch.into_iter().map(Ok::<Event, Infallible>)), next))
        }
    })
    .flatten();
    Ok(Sse::new(stream::iter(first.into_iter().map(Ok)).chain(events)).into_response())
}
