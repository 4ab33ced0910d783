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
mod validate;

pub use listen::ConnLimits;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::batch::BatchStats;
use crate::engine::chat::{ChatTurn, PreparedTurn, ToolMode};
use crate::engine::{Engine, GenerateParams};
use crate::template::ChatSetup;
use crate::tools::stream::StreamEvent;
use crate::Error;
use metrics::{Metrics, RequestLabels};

/// Request bodies larger than this get 413.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// What the server serves.
pub struct AppState {
    /// The engines (one per sequence slot); `None` while a turn holds it.
    engines: Mutex<Vec<Option<Engine>>>,
    engine_free: Condvar,
    /// The generation threads' queue: turns start in arrival order.
    jobs: Mutex<std::sync::mpsc::Sender<Job>>,
    pub(crate) setup: ChatSetup,
    /// The model's tokenizer, for requests that only count tokens (no engine needed).
    pub(crate) tokenizer: Arc<crate::tokenizer::Tokenizer>,
    pub(crate) model_id: String,
    pub(crate) tool_mode: ToolMode,
    /// Where the model runs (`cpu`, `cuda:N`, `metal`).
    device: String,
    max_queue: usize,
    /// Jump-forward decoding for every request ([`AppState::with_jump_forward`]).
    jump_forward: bool,
    queued: AtomicUsize,
    /// Of those, requests holding an engine ([`Lease`]).
    running: AtomicUsize,
    /// Tokens each slot's KV cache holds, as of its last turn start or end.
    held: Vec<AtomicUsize>,
    /// Tokens one slot's KV cache can hold (the context length).
    capacity: usize,
    /// How long `/ready` answers 503 before the server stops accepting, after SIGTERM.
    drain: Duration,
    /// `true` from the first SIGINT/SIGTERM: `/ready` answers 503 (requests are still
    /// served until [`AppState::with_drain`]'s time is up).
    draining: AtomicBool,
    metrics: Metrics,
    batch: Option<BatchStats>,
    limits: ConnLimits,
    /// `true` once the server stops: bodies still arriving get 503, idle connections close.
    shutdown: tokio::sync::watch::Sender<bool>,
}

type Job = Box<dyn FnOnce() + Send>;

/// `n` generation threads sharing one queue. Long-lived threads (rather than a
/// blocking-pool thread per request) keep the allocator's working set in a few arenas:
/// memory stays flat under many concurrent clients. A thread the OS refuses is logged
/// and left out (fewer turns run at once); with none, requests get a 500.
fn spawn_workers(n: usize) -> std::sync::mpsc::Sender<Job> {
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..n {
        let rx = rx.clone();
        let spawned = std::thread::Builder::new().name(format!("toolgate-generate-{i}")).spawn(move || loop {
            let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                Ok(job) => job,
                Err(_) => return, // the server is gone
            };
            // A panic in one turn (a bug) must not take the server down: that
            // request's channel closes and it gets a 500; its engine goes back
            // (`Lease`'s drop).
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        });
        if let Err(e) = spawned {
            tracing::error!("starting generation thread {i} of {n}: {e}");
        }
    }
    tx
}

/// An engine taken from the pool, given back (and out of the decode batch) on drop,
/// also when a turn panics.
struct Lease<'a> {
    state: &'a AppState,
    slot: usize,
    engine: Option<Engine>,
}

impl Lease<'_> {
    fn engine(&mut self) -> &mut Engine {
        self.engine.as_mut().expect("held until drop")
    }

    /// Move to the free engine that serves `prompt` best: the most cached prefix reused,
    /// the least other cached work thrown away. Score: reused − discarded tokens (a
    /// conversation's turns return to the slot holding its history; a new conversation
    /// takes an empty or little-used slot rather than evicting another's long prefix).
    fn follow_prefix(&mut self, prompt: &[u32]) {
        let score = |e: &Engine| {
            let reused = e.reusable_prefix(prompt) as i64;
            reused - (e.cached_len() as i64 - reused)
        };
        let mut pool = self.state.pool();
        let mine = score(self.engine());
        let best = pool
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((i, score(e.as_ref()?))))
            .max_by_key(|&(i, s)| (s, std::cmp::Reverse(i)));
        if let Some((i, s)) = best.filter(|&(_, s)| s > mine) {
            let other = pool[i].take();
            let left_behind = self.engine().cached_len();
            pool[self.slot] = std::mem::replace(&mut self.engine, other);
            self.state.hold(self.slot, left_behind);
            self.slot = i;
            self.state.engine_free.notify_one();
            tracing::debug!(slot = i, score = s, "turn moved to the slot that serves its prompt best");
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(mut e) = self.engine.take() {
            e.finish_sequence();
            self.state.hold(self.slot, e.cached_len());
            self.state.pool()[self.slot] = Some(e);
            self.state.engine_free.notify_one();
        }
        let running = self.state.running.fetch_sub(1, Ordering::SeqCst) - 1;
        self.state.metrics.set_load(self.state.queued.load(Ordering::SeqCst), running);
    }
}

/// Default number of requests generating at once (`--parallel`): on 2 CPU cores,
/// batched decode throughput stops growing past 4 sequences (BENCHMARKS.md).
pub const DEFAULT_PARALLEL: usize = 4;

/// The most sequences `--parallel` may ask for: each holds its own KV cache, and the
/// decode batch is not built for more.
pub const MAX_PARALLEL: usize = 256;

/// Default bound on requests waiting for or holding the engine.
pub const DEFAULT_MAX_QUEUE: usize = 64;

impl AppState {
    /// Serve `engine` (which passed the gate with `setup`) as `model_id`, one request
    /// at a time, with at most [`DEFAULT_MAX_QUEUE`] requests queued.
    pub fn new(engine: Engine, setup: ChatSetup, model_id: String, tool_mode: ToolMode) -> Self {
        let tokenizer = engine.shared_tokenizer();
        Self::with_engines(vec![engine], tokenizer, None, setup, model_id, tool_mode)
    }

    /// Serve `engine` with up to `parallel` requests generating at once, on one copy of
    /// the weights, their decode steps batched ([`Engine::into_batched`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `parallel` above [`MAX_PARALLEL`]; otherwise as
    /// [`Engine::into_batched`] (memory for the caches).
    pub fn parallel(
        engine: Engine,
        parallel: usize,
        setup: ChatSetup,
        model_id: String,
        tool_mode: ToolMode,
    ) -> crate::Result<Self> {
        if parallel > MAX_PARALLEL {
            return Err(Error::InvalidParameter {
                name: "parallel",
                reason: format!("{parallel} sequences asked for; at most {MAX_PARALLEL}"),
            });
        }
        if parallel <= 1 {
            return Ok(Self::new(engine, setup, model_id, tool_mode));
        }
        let tokenizer = engine.shared_tokenizer();
        let (engines, stats) = engine.into_batched(parallel)?;
        Ok(Self::with_engines(engines, tokenizer, Some(stats), setup, model_id, tool_mode))
    }

    fn with_engines(
        engines: Vec<Engine>,
        tokenizer: Arc<crate::tokenizer::Tokenizer>,
        batch: Option<BatchStats>,
        setup: ChatSetup,
        model_id: String,
        tool_mode: ToolMode,
    ) -> Self {
        let n = engines.len();
        let device = engines.first().map_or_else(|| "cpu".to_string(), |e| e.device().to_string());
        let capacity = engines.first().map_or(0, Engine::context_length);
        Self {
            held: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            capacity,
            drain: Duration::ZERO,
            draining: AtomicBool::new(false),
            device,
            engines: Mutex::new(engines.into_iter().map(Some).collect()),
            engine_free: Condvar::new(),
            jobs: Mutex::new(spawn_workers(n)),
            setup,
            tokenizer,
            model_id,
            tool_mode,
            max_queue: DEFAULT_MAX_QUEUE,
            jump_forward: false,
            queued: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            metrics: Metrics::new(),
            batch,
            limits: ConnLimits::default(),
            shutdown: tokio::sync::watch::Sender::new(false),
        }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Vec<Option<Engine>>> {
        self.engines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free engine (there is one whenever a generation thread asks: threads and
    /// engines are as many, and a thread holds one engine at a time).
    fn lease(&self) -> Lease<'_> {
        let mut pool = self.pool();
        loop {
            if let Some(i) = pool.iter().position(Option::is_some) {
                let engine = pool[i].take();
                let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                self.metrics.set_load(self.queued.load(Ordering::SeqCst), running);
                return Lease { state: self, slot: i, engine };
            }
            pool = self.engine_free.wait(pool).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Answer 429 once `n` requests (at least 1) are waiting for or holding the engine.
    pub fn with_max_queue(mut self, n: usize) -> Self {
        self.max_queue = n.max(1);
        self
    }

    /// Jump-forward decoding for every request (`--jump-forward on`): text the
    /// constraint forces goes through the model in chunks
    /// ([`crate::engine::GenerateParams::jump_forward`]). Off unless set here;
    /// `toolgate serve` sets it (`--jump-forward on`, its default).
    pub fn with_jump_forward(mut self, on: bool) -> Self {
        self.jump_forward = on;
        self
    }

    /// Use these connection limits (timeouts and the connection cap) instead of
    /// [`ConnLimits::default`]. A cap of 0 is taken as 1, one past `u32::MAX` as
    /// `u32::MAX` (shutdown waits for the cap's permits in one call).
    pub fn with_limits(mut self, limits: ConnLimits) -> Self {
        self.limits = ConnLimits { max_connections: limits.max_connections.clamp(1, u32::MAX as usize), ..limits };
        self
    }

    /// How long, after the first SIGINT/SIGTERM, the server keeps serving while
    /// `/ready` answers 503 (so a router that polls it, or a Kubernetes readiness
    /// probe, stops sending requests), before it stops accepting connections and
    /// finishes the requests in progress. Zero (the default): it stops accepting at once.
    pub fn with_drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// Whether the server takes new work: `false` once it is draining (`/ready`).
    pub fn is_ready(&self) -> bool {
        !self.draining.load(Ordering::SeqCst)
    }

    fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Slot `slot`'s KV cache now holds `tokens`: update the usage gauge.
    fn hold(&self, slot: usize, tokens: usize) {
        if let Some(h) = self.held.get(slot) {
            h.store(tokens, Ordering::SeqCst);
        }
        let held = self.held.iter().map(|h| h.load(Ordering::SeqCst)).sum();
        self.metrics.set_kv_usage(held, self.capacity * self.held.len());
    }
}

/// A request's place in the queue, given back on drop.
struct QueueSlot(Arc<AppState>);

impl QueueSlot {
    fn take(s: &Arc<AppState>) -> Option<Self> {
        let depth = s.queued.fetch_add(1, Ordering::SeqCst) + 1;
        if depth > s.max_queue {
            s.queued.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        s.metrics.set_load(depth, s.running.load(Ordering::SeqCst));
        Some(Self(s.clone()))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let depth = self.0.queued.fetch_sub(1, Ordering::SeqCst) - 1;
        self.0.metrics.set_load(depth, self.0.running.load(Ordering::SeqCst));
    }
}

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
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        s.metrics.render(),
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
