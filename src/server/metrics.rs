//! `GET /metrics`: Prometheus text exposition of what the server did.
//!
//! Requests by endpoint and status, prompt and completion tokens, request latency,
//! time to first token, queue depth, tool calls and parse failures, and the time spent
//! computing constraint masks — enough to see throughput, tail latency and what the
//! constraint engine costs in production.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::engine::batch::BatchStats;
use crate::engine::chat::ChatTurn;

/// Labels of a finished request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Route path.
    pub endpoint: String,
    /// HTTP status.
    pub status: u16,
}

/// Every metric the server keeps. Cheap to update (atomics) from any thread.
pub struct Metrics {
    registry: Registry,
    /// Requests by endpoint and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Requests waiting for or holding the engine.
    queue_depth: Gauge,
    /// Requests admitted and waiting for an engine (`toolgate_requests_waiting`, and
    /// vLLM's `vllm:num_requests_waiting`, which routers such as the Gateway API
    /// Inference Extension's endpoint picker read by default).
    requests_waiting: Gauge,
    /// Requests holding an engine: preparing or generating (`toolgate_requests_running`,
    /// `vllm:num_requests_running`).
    requests_running: Gauge,
    /// The share of the KV caches' token capacity that holds tokens, 0 to 1
    /// (`toolgate_kv_cache_usage_ratio`, vLLM's `vllm:kv_cache_usage_perc` and its older
    /// name `vllm:gpu_cache_usage_perc`, both fractions despite the name).
    kv_cache_usage: Gauge<f64, AtomicU64>,
    /// The vLLM-compatible names, unprefixed.
    compat: Registry,
    /// Held while a scrape sets the load gauges and writes the text out.
    scrape: Mutex<()>,
    /// Client connections held.
    pub connections_open: Gauge,
    /// Connections closed at accept because [`super::ConnLimits::max_connections`] were held.
    pub connections_refused: Counter,
    prompt_tokens: Counter,
    completion_tokens: Counter,
    tool_calls: Counter,
    recovered_calls: Counter,
    cut_calls: Counter,
    forced_tokens: Counter,
    forced_chunks: Counter,
    rejected_tokens: Counter,
    parse_failures: Counter,
    mask_seconds: Counter<f64, AtomicU64>,
    turn_seconds: Histogram,
    first_token_seconds: Histogram,
    decode_steps: Counter,
    decode_rows: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `metric` registered in `registry` as `name` with `help`; the handle to update it.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// A registry with every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("toolgate");
        let requests = registered(
            &mut registry,
            "requests",
            "HTTP requests by endpoint and status",
            Family::<RequestLabels, Counter>::default(),
        );
        let queue_depth =
            registered(&mut registry, "queue_depth", "Requests queued for or holding the engine", Gauge::default());
        let connections_open =
            registered(&mut registry, "connections_open", "Client connections held", Gauge::default());
        let waiting_help = "Requests admitted and waiting for an engine";
        let running_help = "Requests holding an engine (preparing or generating)";
        let requests_waiting = registered(&mut registry, "requests_waiting", waiting_help, Gauge::default());
        let requests_running = registered(&mut registry, "requests_running", running_help, Gauge::default());
        let kv_help =
            "Share of the KV caches' token capacity holding tokens (0 to 1), as of the last turn start or end";
        let kv_cache_usage =
            registered(&mut registry, "kv_cache_usage_ratio", kv_help, Gauge::<f64, AtomicU64>::default());
        // The same gauges under the names vLLM publishes, which routers scrape by default.
        let mut compat = Registry::default();
        compat.register("vllm:num_requests_waiting", waiting_help, requests_waiting.clone());
        compat.register("vllm:num_requests_running", running_help, requests_running.clone());
        compat.register("vllm:kv_cache_usage_perc", kv_help, kv_cache_usage.clone());
        compat.register("vllm:gpu_cache_usage_perc", kv_help, kv_cache_usage.clone());
        let connections_refused = registered(
            &mut registry,
            "connections_refused",
            "Connections closed at accept because the connection cap was reached",
            Counter::default(),
        );
        let prompt_tokens = registered(&mut registry, "prompt_tokens", "Prompt tokens processed", Counter::default());
        let completion_tokens = registered(&mut registry, "completion_tokens", "Tokens generated", Counter::default());
        let tool_calls = registered(&mut registry, "tool_calls", "Tool calls returned", Counter::default());
        let recovered_calls = registered(
            &mut registry,
            "tool_calls_recovered",
            "Tool calls read from a near-miss form in auto (a bare or fenced JSON call)",
            Counter::default(),
        );
        let cut_calls = registered(
            &mut registry,
            "tool_calls_cut",
            "Calls max_tokens ended before they were complete: dropped, the turn ends with finish_reason length",
            Counter::default(),
        );
        let forced_tokens = registered(
            &mut registry,
            "jump_forward_tokens",
            "Generated tokens jump-forward took from a draft of forced text fed in one chunk (no decode step each)",
            Counter::default(),
        );
        let forced_chunks = registered(
            &mut registry,
            "jump_forward_chunks",
            "Drafts of forced text jump-forward fed as one chunk behind a generated token",
            Counter::default(),
        );
        let rejected_tokens = registered(
            &mut registry,
            "jump_forward_rejected_tokens",
            "Draft tokens fed but not taken (the model chose another token there, or the turn ended first)",
            Counter::default(),
        );
        let parse_failures = registered(
            &mut registry,
            "tool_call_parse_failures",
            "Call blocks that did not parse (native mode)",
            Counter::default(),
        );
        let mask_seconds = registered(
            &mut registry,
            "constraint_mask_seconds",
            "Time spent computing grammar token masks",
            Counter::<f64, AtomicU64>::default(),
        );
        let turn_seconds = registered(
            &mut registry,
            "turn_seconds",
            "Queue wait + prefill + decode of one turn",
            Histogram::new(exponential_buckets(0.05, 2.0, 14)),
        );
        let first_token_seconds = registered(
            &mut registry,
            "time_to_first_token_seconds",
            "Queue wait + prefill until the first generated token",
            Histogram::new(exponential_buckets(0.01, 2.0, 14)),
        );
        let decode_steps = registered(
            &mut registry,
            "decode_steps",
            "Batched decode steps run (with --parallel > 1)",
            Counter::default(),
        );
        let decode_rows = registered(
            &mut registry,
            "decode_rows",
            "Tokens those steps decoded; rows / steps is the mean batch size",
            Counter::default(),
        );
        Self {
            registry,
            decode_steps,
            decode_rows,
            requests,
            queue_depth,
            requests_waiting,
            requests_running,
            kv_cache_usage,
            compat,
            scrape: Mutex::new(()),
            connections_open,
            connections_refused,
            prompt_tokens,
            completion_tokens,
            tool_calls,
            recovered_calls,
            cut_calls,
            forced_tokens,
            forced_chunks,
            rejected_tokens,
            parse_failures,
            mask_seconds,
            turn_seconds,
            first_token_seconds,
        }
    }

    /// Record a finished turn that waited `queued` for the engine.
    pub fn turn(&self, turn: &ChatTurn, queued: Duration) {
        self.prompt_tokens.inc_by(turn.prompt_tokens as u64);
        self.completion_tokens.inc_by(turn.completion_tokens as u64);
        self.tool_calls.inc_by(turn.tool_calls.len() as u64);
        self.parse_failures.inc_by(turn.parse_failures as u64);
        self.recovered_calls.inc_by(turn.recovered_calls as u64);
        self.cut_calls.inc_by(u64::from(turn.cut_call));
        self.forced_tokens.inc_by(turn.timings.forced_tokens as u64);
        self.forced_chunks.inc_by(turn.timings.forced_chunks as u64);
        self.rejected_tokens.inc_by(turn.timings.rejected_tokens as u64);
        self.mask_seconds.inc_by(turn.timings.mask.as_secs_f64());
        let q = queued.as_secs_f64();
        self.first_token_seconds.observe(q + turn.timings.prompt.as_secs_f64());
        self.turn_seconds.observe(q + turn.timings.prompt.as_secs_f64() + turn.timings.decode.as_secs_f64());
    }

    /// Bring the decode-step counters up to `stats` (called before rendering).
    pub fn sync_batch(&self, stats: &BatchStats) {
        self.decode_steps.inc_by(stats.steps().saturating_sub(self.decode_steps.get()));
        self.decode_rows.inc_by(stats.rows().saturating_sub(self.decode_rows.get()));
    }

    /// The KV caches hold `held` tokens of their `capacity` (all slots together).
    pub fn set_kv_usage(&self, held: usize, capacity: usize) {
        self.kv_cache_usage.set(if capacity == 0 { 0.0 } else { (held as f64 / capacity as f64).min(1.0) });
    }

    /// The exposition text (OpenMetrics): toolgate's metrics, then the vLLM-compatible
    /// names, with the load as of this scrape: `queued` requests admitted (waiting or
    /// running), `running` of them holding an engine.
    ///
    /// The load gauges are set and written out under one lock, so a scrape reads one
    /// load under every name (`toolgate_queue_depth` = running + waiting, the vLLM names
    /// equal to toolgate's) even while requests come and go; the gauges were once set
    /// from each request's thread, and a scrape could land between two of them.
    pub fn render(&self, queued: usize, running: usize) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(|p| p.into_inner());
        self.queue_depth.set(queued as i64);
        self.requests_running.set(running as i64);
        self.requests_waiting.set(queued.saturating_sub(running) as i64);
        let mut out = String::new();
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &self.compat);
        let _ = encode_eof(&mut out);
        out
    }
}
