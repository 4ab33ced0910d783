//! The HTTP server: OpenAI-compatible `/v1/chat/completions` with tools, plus
//! `/v1/models`, `/props` and `/health`, on axum.
//!
//! One model per process; requests run one at a time on a blocking thread (the
//! engine holds a single KV cache). Every error is an OpenAI error object with the
//! right status. Not yet here (see the issue tracker): streaming, the Anthropic
//! endpoint, queue limits with 429, metrics.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};

use crate::engine::chat::{prepare_text_turn, prepare_turn, ChatTurn, PreparedTurn, ToolMode};
use crate::engine::{Engine, GenerateParams};
use crate::grammar::schema::Mode;
use crate::sampling::SamplingParams;
use crate::template::ChatSetup;
use crate::tools::stream::StreamEvent;
use crate::tools::{Tool, ToolChoice};
use crate::Error;

/// Request bodies larger than this get 413.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// What the server serves.
pub struct AppState {
    engine: Mutex<Engine>,
    setup: ChatSetup,
    model_id: String,
    tool_mode: ToolMode,
}

impl AppState {
    /// Serve `engine` (which passed the gate with `setup`) as `model_id`.
    pub fn new(engine: Engine, setup: ChatSetup, model_id: String, tool_mode: ToolMode) -> Self {
        Self { engine: Mutex::new(engine), setup, model_id, tool_mode }
    }
}

/// An OpenAI-style error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
}

impl ApiError {
    fn bad(message: impl Into<String>, param: Option<&str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(String::from),
        }
    }
}

impl ApiError {
    fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": null}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::ContextOverflow { .. }
            | Error::InvalidParameter { .. }
            | Error::Schema { .. }
            | Error::Template { .. } => ApiError::bad(e.to_string(), None),
            other => {
                tracing::error!("internal error: {other}");
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    kind: "server_error",
                    message: "internal error while generating".into(),
                    param: None,
                }
            }
        }
    }
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/v1/models", get(models))
        .route("/props", get(props))
        .route("/v1/chat/completions", post(chat_completions))
        .with_state(state)
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": s.model_id, "object": "model", "owned_by": "toolgate",
        "caps": s.setup.report.caps, "chat_format": s.setup.family,
    }]}))
}

async fn props(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "model": s.model_id,
        "caps": s.setup.report.caps,
        "reasons": s.setup.report.reasons,
        "template_source": s.setup.source.to_string(),
        "chat_format": s.setup.family,
        "tool_mode": s.tool_mode,
        "conversation_policy": s.setup.policy,
    }))
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Read a request body of at most [`MAX_BODY_BYTES`]: 413 as soon as the headers
/// announce more (the body is never read), or once a chunked body passes the limit.
async fn read_body(req: Request) -> Result<axum::body::Bytes, ApiError> {
    let too_large = || ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        kind: "invalid_request_error",
        message: format!("request body is larger than {MAX_BODY_BYTES} bytes"),
        param: None,
    };
    let announced = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES).await.map_err(|_| too_large())
}

/// A validated `/v1/chat/completions` request.
struct ChatRequest {
    messages: Vec<Value>,
    tools: Vec<Tool>,
    choice: ToolChoice,
    parallel: bool,
    schema: Option<(Value, Mode)>,
    params: GenerateParams,
    stream: bool,
    include_usage: bool,
}

impl ChatRequest {
    fn parse(s: &AppState, body: &[u8]) -> Result<Self, ApiError> {
        let req: Value =
            serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}"), None))?;
        let obj = req.as_object().ok_or_else(|| ApiError::bad("the body must be a JSON object", None))?;
        if let Some(m) = obj.get("model").and_then(Value::as_str) {
            if m != s.model_id && m != "default" {
                return Err(ApiError {
                    status: StatusCode::NOT_FOUND,
                    kind: "invalid_request_error",
                    message: format!("model `{m}` not found (this server serves `{}`)", s.model_id),
                    param: Some("model".into()),
                });
            }
        }
        let stream = match obj.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::bad("`stream` must be a boolean", Some("stream"))),
        };
        let include_usage = req.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
        if obj.get("n").and_then(Value::as_u64).is_some_and(|n| n != 1) {
            return Err(ApiError::bad("only n=1 is supported", Some("n")));
        }
        let messages = obj
            .get("messages")
            .and_then(Value::as_array)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ApiError::bad("`messages` must be a non-empty array", Some("messages")))?
            .clone();
        let tools: Vec<Tool> = match obj.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(t) => serde_json::from_value(t.clone())
                .map_err(|e| ApiError::bad(format!("invalid `tools`: {e}"), Some("tools")))?,
        };
        let choice = match obj.get("tool_choice") {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(v) => ToolChoice::from_json(v).map_err(|e| ApiError::bad(e.to_string(), Some("tool_choice")))?,
        };
        let parallel = obj.get("parallel_tool_calls").and_then(Value::as_bool).unwrap_or(true);
        let max_tokens =
            obj.get("max_completion_tokens").or_else(|| obj.get("max_tokens")).and_then(Value::as_u64).unwrap_or(512)
                as usize;
        let sampling = SamplingParams {
            temperature: obj.get("temperature").and_then(Value::as_f64).unwrap_or(1.0) as f32,
            top_p: obj.get("top_p").and_then(Value::as_f64).unwrap_or(1.0) as f32,
            presence_penalty: obj.get("presence_penalty").and_then(Value::as_f64).unwrap_or(0.0) as f32,
            frequency_penalty: obj.get("frequency_penalty").and_then(Value::as_f64).unwrap_or(0.0) as f32,
            seed: obj.get("seed").and_then(Value::as_u64).unwrap_or_else(now),
            ..SamplingParams::greedy()
        };
        sampling.validate().map_err(ApiError::from)?;
        let stop = match obj.get("stop") {
            None | Some(Value::Null) => vec![],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(String::from).collect(),
            Some(_) => return Err(ApiError::bad("`stop` must be a string or an array of strings", Some("stop"))),
        };
        let schema = match obj.get("response_format") {
            Some(rf) if rf.get("type").and_then(Value::as_str) == Some("json_schema") => Some((
                rf.pointer("/json_schema/schema")
                    .cloned()
                    .ok_or_else(|| ApiError::bad("json_schema.schema is missing", Some("response_format")))?,
                if rf.pointer("/json_schema/strict").and_then(Value::as_bool) == Some(true) {
                    Mode::Strict
                } else {
                    Mode::Lenient
                },
            )),
            Some(rf) if rf.get("type").and_then(Value::as_str) == Some("json_object") => {
                Some((json!({"type": "object", "additionalProperties": true}), Mode::Lenient))
            }
            _ => None,
        };
        let params = GenerateParams { max_tokens, sampling, stop, ..GenerateParams::default() };
        Ok(Self { messages, tools, choice, parallel, schema, params, stream, include_usage })
    }

    /// Render, tokenize and compile: every request error surfaces here, before a
    /// stream starts.
    fn prepare(&mut self, engine: &mut Engine, s: &AppState) -> crate::Result<PreparedTurn> {
        let messages = std::mem::take(&mut self.messages);
        if !self.tools.is_empty() && self.choice != ToolChoice::None {
            prepare_turn(engine, &s.setup, messages, &self.tools, &self.choice, self.parallel, s.tool_mode)
        } else {
            prepare_text_turn(engine, &s.setup, messages, self.schema.as_ref().map(|(v, m)| (v, *m)))
        }
    }
}

/// What the generation thread tells the request.
enum Msg {
    Started,
    Event(StreamEvent),
    Done(ChatTurn),
    Failed(ApiError),
}

/// Sets the generation's cancel flag when the request goes away (client gone).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn internal(message: &str) -> ApiError {
    ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, kind: "server_error", message: message.into(), param: None }
}

fn usage_json(turn: &ChatTurn) -> Value {
    json!({"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens})
}

fn message_json(turn: &ChatTurn) -> Value {
    let content =
        if turn.content.is_empty() && !turn.tool_calls.is_empty() { Value::Null } else { json!(turn.content) };
    let mut msg = json!({"role": "assistant", "content": content});
    if !turn.tool_calls.is_empty() {
        msg["tool_calls"] = serde_json::to_value(&turn.tool_calls).unwrap_or(Value::Null);
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
    }
}

/// One `chat.completion.chunk` event.
fn chunk(head: &Value, delta: Value, finish: Option<&str>) -> Event {
    let mut v = head.clone();
    v["choices"] = json!([{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]);
    Event::default().data(v.to_string())
}

async fn chat_completions(State(s): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(req).await?;
    let mut r = ChatRequest::parse(&s, &body)?;
    let (stream, include_usage) = (r.stream, r.include_usage);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Msg>();
    let cancel = Arc::new(AtomicBool::new(false));
    let guard = CancelOnDrop(cancel.clone());
    let state = s.clone();
    tokio::task::spawn_blocking(move || {
        let mut engine = state.engine.lock().unwrap_or_else(|p| p.into_inner());
        if cancel.load(Ordering::Relaxed) {
            return; // the client left while queued
        }
        let prepared = match r.prepare(&mut engine, &state) {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Msg::Failed(e.into()));
                return;
            }
        };
        let _ = tx.send(Msg::Started);
        let params = GenerateParams { cancel: Some(cancel.clone()), ..r.params.clone() };
        let result = prepared.run(&mut engine, &params, |e| {
            if stream && tx.send(Msg::Event(e)).is_err() {
                cancel.store(true, Ordering::Relaxed);
            }
        });
        let _ = tx.send(match result {
            Ok(turn) => Msg::Done(turn),
            Err(e) => Msg::Failed(e.into()),
        });
    });
    match rx.recv().await {
        Some(Msg::Started) => {}
        Some(Msg::Failed(e)) => return Err(e),
        _ => return Err(internal("generation task failed")),
    }
    let id = format!("chatcmpl-{:016x}", rand::random::<u64>());
    let (created, model) = (now(), s.model_id.clone());
    if !stream {
        let _guard = guard;
        return loop {
            match rx.recv().await {
                Some(Msg::Done(turn)) => {
                    break Ok(Json(json!({
                        "id": id, "object": "chat.completion", "created": created, "model": model,
                        "choices": [{"index": 0, "message": message_json(&turn), "finish_reason": turn.finish_reason,
                            "logprobs": null}],
                        "usage": usage_json(&turn),
                    }))
                    .into_response())
                }
                Some(Msg::Failed(e)) => break Err(e),
                Some(_) => continue,
                None => break Err(internal("generation task failed")),
            }
        };
    }
    let head = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model});
    let first = chunk(&head, json!({"role": "assistant", "content": ""}), None);
    let events = stream::unfold(Some((rx, guard, head)), move |st| async move {
        let (mut rx, guard, head) = st?;
        let (batch, go_on) = match rx.recv().await {
            Some(Msg::Event(e)) => (vec![chunk(&head, delta_json(&e), None)], true),
            Some(Msg::Done(turn)) => {
                let mut b = vec![chunk(&head, json!({}), Some(turn.finish_reason))];
                if include_usage {
                    let mut v = head.clone();
                    v["choices"] = json!([]);
                    v["usage"] = usage_json(&turn);
                    b.push(Event::default().data(v.to_string()));
                }
                b.push(Event::default().data("[DONE]"));
                (b, false)
            }
            Some(Msg::Failed(e)) => {
                (vec![Event::default().data(e.body().to_string()), Event::default().data("[DONE]")], false)
            }
            Some(Msg::Started) => (vec![], true),
            None => (vec![], false),
        };
        let next = go_on.then_some((rx, guard, head));
        Some((stream::iter(batch.into_iter().map(Ok::<Event, Infallible>)), next))
    })
    .flatten();
    Ok(Sse::new(stream::iter([Ok(first)]).chain(events)).into_response())
}

/// Serve until SIGINT/SIGTERM, then finish the request in flight and return.
///
/// # Errors
/// [`Error::Io`] if the address cannot be bound.
pub async fn serve(state: Arc<AppState>, host: &str, port: u16) -> crate::Result<()> {
    let addr = format!("{host}:{port}");
    let listener =
        tokio::net::TcpListener::bind(&addr).await.map_err(|e| Error::Io { path: addr.clone().into(), source: e })?;
    let local = listener.local_addr().map_err(|e| Error::Io { path: addr.clone().into(), source: e })?;
    eprintln!("toolgate serving {} on http://{local}", state.model_id);
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            let ctrl_c = tokio::signal::ctrl_c();
            #[cfg(unix)]
            {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
                tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            }
            #[cfg(not(unix))]
            let _ = ctrl_c.await;
        })
        .await
        .map_err(|e| Error::Io { path: addr.into(), source: e })
}
