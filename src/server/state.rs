//! What the server serves ([`AppState`]): the engines (one per sequence slot) and
//! their lease to a request, the generation threads, the queue bound, readiness and
//! draining, and the load and KV-cache gauges they keep.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::listen::ConnLimits;
use super::metrics::Metrics;
use crate::engine::batch::BatchStats;
use crate::engine::chat::ToolMode;
use crate::engine::Engine;
use crate::template::ChatSetup;
use crate::Error;

/// What the server serves.
pub struct AppState {
    /// The engines (one per sequence slot); `None` while a turn holds it.
    pub(super) engines: Mutex<Vec<Option<Engine>>>,
    pub(super) engine_free: Condvar,
    /// The generation threads' queue: turns start in arrival order.
    pub(super) jobs: Mutex<std::sync::mpsc::Sender<Job>>,
    pub(crate) setup: ChatSetup,
    /// The model's tokenizer, for requests that only count tokens (no engine needed).
    pub(crate) tokenizer: Arc<crate::tokenizer::Tokenizer>,
    pub(crate) model_id: String,
    pub(crate) tool_mode: ToolMode,
    /// Where the model runs (`cpu`, `cuda:N`, `metal`).
    pub(super) device: String,
    pub(super) max_queue: usize,
    /// Jump-forward decoding for every request ([`AppState::with_jump_forward`]).
    pub(super) jump_forward: bool,
    pub(super) queued: AtomicUsize,
    /// Of those, requests holding an engine ([`Lease`]).
    pub(super) running: AtomicUsize,
    /// Tokens each slot's KV cache holds, as of its last turn start or end.
    pub(super) held: Vec<AtomicUsize>,
    /// Tokens one slot's KV cache can hold (the context length).
    pub(super) capacity: usize,
    /// How long `/ready` answers 503 before the server stops accepting, after SIGTERM.
    pub(super) drain: Duration,
    /// `true` from the first SIGINT/SIGTERM: `/ready` answers 503 (requests are still
    /// served until [`AppState::with_drain`]'s time is up).
    pub(super) draining: AtomicBool,
    pub(super) metrics: Metrics,
    pub(super) batch: Option<BatchStats>,
    pub(super) limits: ConnLimits,
    /// `true` once the server stops: bodies still arriving get 503, idle connections close.
    pub(super) shutdown: tokio::sync::watch::Sender<bool>,
}

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// `n` generation threads sharing one queue. Long-lived threads (rather than a
/// blocking-pool thread per request) keep the allocator's working set in a few arenas:
/// memory stays flat under many concurrent clients. A thread the OS refuses is logged
/// and left out (fewer turns run at once); with none, requests get a 500.
pub(super) fn spawn_workers(n: usize) -> std::sync::mpsc::Sender<Job> {
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
pub(super) struct Lease<'a> {
    state: &'a AppState,
    pub(super) slot: usize,
    engine: Option<Engine>,
}

impl Lease<'_> {
    pub(super) fn engine(&mut self) -> &mut Engine {
        self.engine.as_mut().expect("held until drop")
    }

    /// Move to the free engine that serves `prompt` best: the most cached prefix reused,
    /// the least other cached work thrown away. Score: reused − discarded tokens (a
    /// conversation's turns return to the slot holding its history; a new conversation
    /// takes an empty or little-used slot rather than evicting another's long prefix).
    pub(super) fn follow_prefix(&mut self, prompt: &[u32]) {
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
        self.state.running.fetch_sub(1, Ordering::SeqCst);
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

    pub(super) fn with_engines(
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

    pub(super) fn pool(&self) -> std::sync::MutexGuard<'_, Vec<Option<Engine>>> {
        self.engines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free engine (there is one whenever a generation thread asks: threads and
    /// engines are as many, and a thread holds one engine at a time).
    pub(super) fn lease(&self) -> Lease<'_> {
        let mut pool = self.pool();
        loop {
            if let Some(i) = pool.iter().position(Option::is_some) {
                let engine = pool[i].take();
                self.running.fetch_add(1, Ordering::SeqCst);
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

    pub(super) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Slot `slot`'s KV cache now holds `tokens`: update the usage gauge.
    pub(super) fn hold(&self, slot: usize, tokens: usize) {
        if let Some(h) = self.held.get(slot) {
            h.store(tokens, Ordering::SeqCst);
        }
        let held = self.held.iter().map(|h| h.load(Ordering::SeqCst)).sum();
        self.metrics.set_kv_usage(held, self.capacity * self.held.len());
    }
}

/// A request's place in the queue, given back on drop.
pub(super) struct QueueSlot(pub(super) Arc<AppState>);

impl QueueSlot {
    pub(super) fn take(s: &Arc<AppState>) -> Option<Self> {
        let depth = s.queued.fetch_add(1, Ordering::SeqCst) + 1;
        if depth > s.max_queue {
            s.queued.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self(s.clone()))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::SeqCst);
    }
}
