//! The HTTP server on axum: OpenAI-compatible `/v1/chat/completions`
//! ([`openai`]) and Anthropic-compatible `/v1/messages` ([`anthropic`]), both with
//! tools and streaming, plus `/v1/models`, `/props` and `/health`.
//!
//! One model per process. Up to `parallel` requests generate at the same time, each
//! on its own long-lived generation thread with its own sequence slot of the model,
//! their decode steps batched ([`crate::engine::batch`]); the rest wait in arrival
//! order. A request goes to the free slot whose cache already holds the longest prefix
//! of its prompt (an agent's system prompt, tools and earlier turns are not prefilled
//! again). A client that disconnects cancels its generation before the next token. At
//! most `max_queue` requests wait for or hold a slot; past that, 429 with
//! `Retry-After`. Every error is an error object in the endpoint's own style with the
//! right status. `GET /metrics` exposes Prometheus metrics (`metrics`).

pub mod anthropic;
mod completions;
mod listen;
pub(crate) mod metrics;
pub mod openai;
pub mod responses;
mod state;
mod validate;

pub use listen::ConnLimits;
pub use state::{AppState, DEFAULT_MAX_QUEUE, DEFAULT_PARALLEL, MAX_PARALLEL};
use state::{Job, QueueSlot};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::chat::{ChatTurn, PreparedTurn};
use crate::engine::{Engine, GenerateParams};
use crate::tools::stream::StreamEvent;
use crate::Error;
use metrics::RequestLabels;

/// Request bodies larger than this get 413.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// An OpenAI-style error response.
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
    pub(crate) param: Option<String>,
}

impl ApiError {
    pub(crate) fn bad(message: impl Into<String>, param: Option<&str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(String::from),
        }
    }
}

impl ApiError {
    pub(crate) fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": null}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        with_retry_after(self.status, (self.status, Json(self.body())).into_response())
    }
}

/// 429s tell the client when to come back.
pub(crate) fn with_retry_after(status: StatusCode, mut r: Response) -> Response {
    if status == StatusCode::TOO_MANY_REQUESTS {
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    }
    r
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidParameter { name, .. } => ApiError::bad(e.to_string(), Some(name)),
            // The schema's pointer (`tools[get_weather].function.parameters/properties/x`)
            // is the OpenAI error's `param`.
            Error::Schema { ref pointer, .. } => ApiError::bad(e.to_string(), Some(pointer)),
            Error::ContextOverflow { .. } | Error::Template { .. } => ApiError::bad(e.to_string(), None),
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

/// A schema error's pointer in the request's own shape. The library names a tool's
/// schema `tools[NAME].function.parameters…` (Chat Completions' shape); the Responses
/// and Messages APIs declare tools flat, so there it becomes `tools[I]{field}…` — `I`
/// the tool's index in the request, `field` `.parameters` or `.input_schema`. Other
/// errors pass unchanged.
pub(crate) fn in_request_shape(e: Error, tools: &[crate::tools::Tool], field: &str) -> Error {
    let Error::Schema { pointer, kind, reason } = e else { return e };
    let pointer = tools
        .iter()
        .enumerate()
        .find_map(|(i, t)| {
            let own = format!("tools[{}].function.parameters", t.function.name);
            pointer.strip_prefix(&own).map(|rest| format!("tools[{i}]{field}{rest}"))
        })
        .unwrap_or(pointer);
    Error::Schema { pointer, kind, reason }
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/ready", get(ready))
        .route("/v1/models", get(models))
        .route("/props", get(props))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::responses))
        .route("/metrics", get(metrics_text))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), count_requests))
        .fallback(|req: Request| async move { route_error(&req, StatusCode::NOT_FOUND) })
        .method_not_allowed_fallback(|req: Request| async move { route_error(&req, StatusCode::METHOD_NOT_ALLOWED) })
        .with_state(state)
}

/// An unknown route or method: a JSON error in the API's shape (Anthropic's under
/// `/v1/messages`, OpenAI's elsewhere), never an empty body an SDK can only call
/// "Error code: 404".
fn route_error(req: &Request, status: StatusCode) -> Response {
    let (method, path) = (req.method(), req.uri().path());
    let message = if status == StatusCode::NOT_FOUND {
        format!(
            "no route {method} {path}: toolgate serves POST /v1/chat/completions, /v1/completions, /v1/responses, \
             /v1/messages, /v1/messages/count_tokens, /tokenize and /detokenize, GET /v1/models, /props, /health, /ready and /metrics"
        )
    } else {
        format!("{method} is not allowed on {path}")
    };
    let e = ApiError { status, kind: "invalid_request_error", message, param: None };
    if path.starts_with("/v1/messages") {
        anthropic::AnthropicError::from(e).into_response()
    } else {
        e.into_response()
    }
}

/// `POST /tokenize`, as llama.cpp's server has it: `{"content": TEXT, "add_special":
/// false, "parse_special": false, "with_pieces": false}` → `{"tokens": [ids]}`, or
/// `[{"id", "piece"}]` with `with_pieces` (a piece that is part of a UTF-8 character is
/// its bytes as a list).
async fn tokenize(State(s): State<Arc<AppState>>, req: Request) -> Result<Json<Value>, ApiError> {
    let body = read_body(&s, req).await?;
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}"), None))?;
    let obj = v.as_object().ok_or_else(|| ApiError::bad("the body must be a JSON object", None))?;
    let content = validate::opt_str(obj, "content")?
        .ok_or_else(|| ApiError::bad("`content` (a string) is required", Some("content")))?;
    let opts = crate::tokenizer::EncodeOptions {
        // As llama.cpp: `add_special` adds BOS only where the GGUF asks for it.
        add_bos: validate::opt_bool(obj, "add_special")?.unwrap_or(false) && s.tokenizer.add_bos(),
        parse_special: validate::opt_bool(obj, "parse_special")?.unwrap_or(false),
    };
    let with_pieces = validate::opt_bool(obj, "with_pieces")?.unwrap_or(false);
    let ids = s.tokenizer.encode(content, opts).map_err(ApiError::from)?;
    let tokens: Vec<Value> = if with_pieces {
        ids.iter()
            .map(|&id| {
                let text = s.tokenizer.decode(&[id], false);
                let piece = if text.contains('\u{FFFD}') {
                    json!(s.tokenizer.token_bytes().get(id as usize).unwrap_or_default())
                } else {
                    json!(text)
                };
                json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(Json(json!({"tokens": tokens})))
}

/// `POST /detokenize`, as llama.cpp's server has it: `{"tokens": [ids]}` →
/// `{"content": TEXT}` (control tokens spelled out). An id outside the vocabulary is
/// a 400.
async fn detokenize(State(s): State<Arc<AppState>>, req: Request) -> Result<Json<Value>, ApiError> {
    let body = read_body(&s, req).await?;
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}"), None))?;
    let n = s.tokenizer.vocab_size();
    let ids = v
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad("`tokens` (an array of token ids) is required", Some("tokens")))?
        .iter()
        .map(|t| t.as_u64().filter(|&id| (id as usize) < n).map(|id| id as u32))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| ApiError::bad(format!("`tokens` must be token ids below {n}"), Some("tokens")))?;
    Ok(Json(json!({"content": s.tokenizer.decode(&ids, false)})))
}

async fn count_requests(State(s): State<Arc<AppState>>, req: Request, next: axum::middleware::Next) -> Response {
    let endpoint = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_default();
    let large = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n >= LARGE_BODY_BYTES);
    let resp = next.run(req).await;
    s.metrics.requests.get_or_create(&RequestLabels { endpoint, status: resp.status().as_u16() }).inc();
    if large {
        // Its parsed body, rendered prompt and tool schemas are freed by now.
        // glibc keeps what a large request freed in its arenas: eight 4 MB requests at
        // once left the server 440 MB above where it started; trimmed, it returns near it.
        tokio::task::spawn_blocking(crate::engine::release_freed_memory);
    }
    resp
}

/// Bodies from this size on give their memory back to the system when answered.
const LARGE_BODY_BYTES: usize = 1 << 20;

/// `GET /ready`: 200 while the server takes new work, 503 while it drains after
/// SIGINT/SIGTERM ([`AppState::with_drain`]). `/health` stays 200 as long as the process
/// answers: liveness and readiness are separate questions.
async fn ready(State(s): State<Arc<AppState>>) -> Response {
    match s.is_ready() {
        true => Json(json!({"status": "ready"})).into_response(),
        false => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "draining"}))).into_response(),
    }
}

async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
    if let Some(b) = &s.batch {
        s.metrics.sync_batch(b);
    }
    // Running first: a request is queued before it runs, so queued read after it is
    // at least as many.
    let running = s.running.load(Ordering::SeqCst);
    let queued = s.queued.load(Ordering::SeqCst);
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        s.metrics.render(queued, running),
    )
        .into_response()
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": s.model_id, "object": "model", "owned_by": "toolgate",
        "caps": s.setup.report.caps, "chat_format": s.setup.family(), "device": s.device,
    }]}))
}

async fn props(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "model": s.model_id,
        "caps": s.setup.report.caps,
        "reasons": s.setup.report.reasons,
        "template_source": s.setup.source.to_string(),
        "chat_format": s.setup.family(),
        "tool_format": s.setup.layout,
        "tool_mode": s.tool_mode,
        "parallel": s.pool().len(),
        "conversation_policy": s.setup.policy,
        "device": s.device,
    }))
}

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Read a request body of at most [`MAX_BODY_BYTES`]: 413 as soon as the headers
/// announce more (the body is never read), or once a chunked body passes the limit;
/// 408 when it has not all arrived within [`ConnLimits::body_timeout`]; 503 when the
/// server begins shutting down while it arrives.
pub(crate) async fn read_body(s: &AppState, req: Request) -> Result<axum::body::Bytes, ApiError> {
    let refuse = |status, message: String| ApiError { status, kind: "invalid_request_error", message, param: None };
    let too_large =
        || refuse(StatusCode::PAYLOAD_TOO_LARGE, format!("request body is larger than {MAX_BODY_BYTES} bytes"));
    let announced = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let mut stopping = s.shutdown.subscribe();
    let timeout = s.limits.body_timeout;
    tokio::select! {
        read = tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)) => match read {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(_)) => Err(too_large()),
            Err(_) => Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {} s", timeout.as_secs_f64()),
            )),
        },
        _ = stopping.wait_for(|stop| *stop) => Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            message: "the server is shutting down".into(),
            param: None,
        }),
    }
}

/// What the generation thread tells the request.
pub(crate) enum Msg {
    /// The turn passed every check and generation begins; the prompt's token count.
    Started(usize),
    /// A delta (streaming requests only).
    Event(StreamEvent),
    /// One generated token's log-probabilities, as an OpenAI `logprobs.content` entry
    /// (requests that asked for `logprobs` only); sent before the deltas of its text.
    Logprob(Value),
    /// The finished turn.
    Done(ChatTurn),
    /// An error, before or during generation.
    Failed(ApiError),
}

/// Sets the generation's cancel flag when the request goes away (client gone).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub(crate) fn internal(message: &str) -> ApiError {
    ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, kind: "server_error", message: message.into(), param: None }
}

/// A turn generating on the blocking pool. Dropping it (the client went away) cancels
/// the generation before its next token.
pub(crate) struct Running {
    rx: tokio::sync::mpsc::UnboundedReceiver<Msg>,
    _cancel: CancelOnDrop,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
}

impl Running {
    /// Queue a turn behind the engine lock. `prepare` renders and compiles it there;
    /// its errors (bad template input, schema, context overflow) come back from this
    /// call, before any byte of a response is sent.
    pub(crate) async fn start<P>(
        s: &Arc<AppState>,
        prepare: P,
        params: GenerateParams,
        stream: bool,
    ) -> Result<Self, ApiError>
    where
        P: FnOnce(&mut Engine, &AppState) -> crate::Result<PreparedTurn> + Send + 'static,
    {
        let slot = QueueSlot::take(s).ok_or_else(|| ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            message: format!("the server is busy ({} requests queued); retry shortly", s.max_queue),
            param: None,
        })?;
        let queued_at = Instant::now();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Msg>();
        let cancel = Arc::new(AtomicBool::new(false));
        let guard = CancelOnDrop(cancel.clone());
        let state = s.clone();
        let job: Job = Box::new(move || {
            // The slot and the engine are given back before the last message is sent,
            // so a client that has its answer sees the queue without its request.
            let slot = slot;
            let mut lease = state.lease();
            let queued = queued_at.elapsed();
            if cancel.load(Ordering::Relaxed) {
                return; // the client left while queued
            }
            let prepared = match prepare(lease.engine(), &state).and_then(|p| {
                p.check_budget(params.max_tokens)?;
                Ok(p)
            }) {
                Ok(p) => p,
                Err(e) => {
                    drop((lease, slot));
                    let _ = tx.send(Msg::Failed(e.into()));
                    return;
                }
            };
            lease.follow_prefix(prepared.prompt());
            state.hold(lease.slot, prepared.prompt_tokens());
            let _ = tx.send(Msg::Started(prepared.prompt_tokens()));
            let params = GenerateParams { cancel: Some(cancel.clone()), jump_forward: state.jump_forward, ..params };
            let engine = lease.engine();
            let vocab = params.logprobs.map(|_| engine.token_vocab());
            let result = prepared.run_with_logprobs(
                engine,
                &params,
                |e| {
                    if stream && tx.send(Msg::Event(e)).is_err() {
                        cancel.store(true, Ordering::Relaxed);
                    }
                },
                |l| {
                    if let Some(vocab) = &vocab {
                        if tx.send(Msg::Logprob(openai::logprob_json(vocab, l))).is_err() {
                            cancel.store(true, Ordering::Relaxed);
                        }
                    }
                },
            );
            let last = match result {
                Ok(turn) => {
                    state.metrics.turn(&turn, queued);
                    Msg::Done(turn)
                }
                Err(e) => Msg::Failed(e.into()),
            };
            drop((lease, slot));
            let _ = tx.send(last);
        });
        let sent = s.jobs.lock().unwrap_or_else(|p| p.into_inner()).send(job);
        if sent.is_err() {
            return Err(internal("the generation thread is gone"));
        }
        match rx.recv().await {
            Some(Msg::Started(prompt_tokens)) => Ok(Self { rx, _cancel: guard, prompt_tokens }),
            Some(Msg::Failed(e)) => Err(e),
            _ => Err(internal("generation task failed")),
        }
    }

    /// The next message; `None` once the generation thread is gone.
    pub(crate) async fn next(&mut self) -> Option<Msg> {
        self.rx.recv().await
    }

    /// Wait for the whole turn.
    pub(crate) async fn finish(self) -> Result<ChatTurn, ApiError> {
        Ok(self.finish_with_logprobs().await?.0)
    }

    /// Wait for the whole turn and the `logprobs.content` entries sent on the way.
    pub(crate) async fn finish_with_logprobs(mut self) -> Result<(ChatTurn, Vec<Value>), ApiError> {
        let mut logprobs = Vec::new();
        loop {
            match self.next().await {
                Some(Msg::Done(turn)) => return Ok((turn, logprobs)),
                Some(Msg::Failed(e)) => return Err(e),
                Some(Msg::Logprob(v)) => logprobs.push(v),
                Some(_) => continue,
                None => return Err(internal("generation task failed")),
            }
        }
    }
}

/// Serve until SIGINT/SIGTERM, then finish the requests in progress and return; a
/// second signal returns at once. Connections are bounded and timed out as the state's
/// [`ConnLimits`] say (module `listen`: idle and stalled connections never hold
/// shutdown up).
///
/// # Errors
/// [`Error::Io`] if the address cannot be bound.
pub async fn serve(state: Arc<AppState>, host: &str, port: u16) -> crate::Result<()> {
    let addr = format!("{host}:{port}");
    let listener =
        tokio::net::TcpListener::bind(&addr).await.map_err(|e| Error::Io { path: addr.clone().into(), source: e })?;
    let local = listener.local_addr().map_err(|e| Error::Io { path: addr.clone().into(), source: e })?;
    eprintln!("toolgate serving {} on http://{local}", state.model_id);
    let signals = tokio::sync::watch::Sender::new(0u32);
    let counter = signals.clone();
    tokio::spawn(async move {
        loop {
            wait_for_signal().await;
            counter.send_modify(|n| *n += 1);
        }
    });
    let (mut first, mut second) = (signals.subscribe(), signals.subscribe());
    let draining = state.clone();
    let stop = async move {
        let _ = first.wait_for(|n| *n >= 1).await;
        draining.draining.store(true, Ordering::SeqCst);
        if !draining.drain.is_zero() {
            eprintln!(
                "toolgate: draining for {} s: /ready answers 503, requests are still served (signal again to stop now)",
                draining.drain.as_secs_f64()
            );
            tokio::time::sleep(draining.drain).await;
        }
        eprintln!("toolgate: shutting down after the requests in progress (signal again to stop now)");
    };
    tokio::select! {
        () = listen::run(listener, router(state.clone()), state, stop) => {}
        _ = second.wait_for(|n| *n >= 2) => eprintln!("toolgate: stopped with requests in progress"),
    }
    Ok(())
}

/// SIGINT or (on Unix) SIGTERM.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            }
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
