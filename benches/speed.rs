//! Prefill and decode speed on the real models (`cargo bench --bench speed`).
//!
//! For each model: a 128-token prompt is prefilled, then 64 tokens are decoded
//! greedily (end-of-turn ignored), 5 times; prefill is the best run, decode is one
//! over the median decode step. Prints one JSON
//! line per model (for `scripts/bench-compare`) and a table, with:
//!
//! - `rss_mib`: the process's peak resident memory (`VmHWM`) after the runs (run one
//!   model per process, `cargo bench --bench speed -- SmolLM2`, for a per-model figure);
//! - `bytes_per_token`: the model's tensor bytes, which one decode step reads (the
//!   output projection reads the tied embedding matrix whole);
//! - `bandwidth_gbs`: memory read bandwidth measured right after, with the same threads
//!   (a 1 GiB buffer summed in parallel, best of 3), and `decode_bound_tps` =
//!   bandwidth ÷ bytes per token, the speed a decoder limited only by memory would reach.
//!
//! Environment: `TOOLGATE_MODELS` (model cache), `RAYON_NUM_THREADS` (threads),
//! `BENCH_MODELS` (comma-separated GGUF file names in the cache, or paths, instead of
//! the two test models: e.g. requantized copies of one model, one per weight type).
//! To mirror one `llama-bench` test (`scripts/bench-llama-bench` sets these):
//! `BENCH_PROMPT` (prompt tokens, default 128; its `-p`), `BENCH_DECODE` (decoded
//! tokens, default 64; its `-n`), `BENCH_RUNS` (default 5; its `-r`), `BENCH_DEPTH`
//! (tokens already in the cache before each prefill and each decode, default 0; its
//! `-d`: the depth is prefilled once, untimed, and each run truncates back to it) and
//! `BENCH_KV` (`f32`, the default, or `f16`: the KV cache's type; llama-bench's own
//! default is f16). `BENCH_MALLOC=glibc` leaves glibc's allocator at its defaults
//! (`toolgate::kernels::reuse_large_buffers` is called otherwise, as the binary does). With a depth, the decode runs start from the depth, as
//! llama-bench's `tg` test does, not after the prompt. `BENCH_DEVICE` (`cpu`, the
//! default, or `cuda[:N]`) picks the device; off the CPU the bandwidth probe (a CPU
//! read) is skipped and reported as NaN.

mod common;
use common::{bench_device, bench_models};

use std::time::Instant;

use rayon::prelude::*;

use toolgate::engine::Engine;
use toolgate::gguf::GgufFile;
use toolgate::model::{DeviceChoice, KvCacheType, LoadOptions};
use toolgate::sampling::argmax;

const PROMPT_TOKENS: usize = 128;
const DECODE_TOKENS: usize = 64;
const RUNS: usize = 5;

/// A whole-number setting from the environment, `default` when unset.
fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// The prompt text both toolgate and the llama.cpp script use.
pub const TEXT: &str = "The quick brown fox jumps over the lazy dog. ";

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` this binary runs
    // as a smoke test (one short run) so the benchmark never rots.
    let smoke = !std::env::args().any(|a| a == "--bench");
    // As the `toolgate` binary runs (`BENCH_MALLOC=glibc` measures without it).
    if std::env::var("BENCH_MALLOC").as_deref() != Ok("glibc") {
        toolgate::kernels::reuse_large_buffers();
    }
    let (prompt_tokens, decode_tokens, runs) = if smoke {
        (16, 4, 1)
    } else {
        (
            env_usize("BENCH_PROMPT", PROMPT_TOKENS),
            env_usize("BENCH_DECODE", DECODE_TOKENS),
            env_usize("BENCH_RUNS", RUNS),
        )
    };
    let depth = if smoke { 0 } else { env_usize("BENCH_DEPTH", 0) };
    let kv_cache = match std::env::var("BENCH_KV").as_deref() {
        Ok("f16") => KvCacheType::F16,
        Ok("f32") | Err(_) => KvCacheType::F32,
        Ok(other) => panic!("BENCH_KV={other:?}: f32 or f16"),
    };
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    // The library's log on stderr (`RUST_LOG`, e.g. `toolgate=info` for the CUDA
    // graph sizes), as the binary prints it.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let device = bench_device();
    for path in bench_models(&filter) {
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !path.exists() {
            assert!(!smoke, "{file} not found: run scripts/fetch-models");
            eprintln!("skip {file}: not found (run scripts/fetch-models)");
            continue;
        }
        let context_length = Some(depth + prompt_tokens + decode_tokens + 1);
        let opts = LoadOptions { device, context_length, kv_cache };
        let mut engine = Engine::load_with(&path, &opts).expect("load");
        let tok = engine.tokenizer();
        // Enough text for the depth and the prompt (the dense synthetic files spend a
        // token per byte, the real ones about one per word).
        let mut ids = Vec::new();
        let mut repeats = 40;
        while ids.len() < depth + prompt_tokens {
            ids = tok.encode_prompt(&TEXT.repeat(repeats), false).expect("encode");
            repeats *= 4;
        }
        let (context, ids) = ids.split_at(depth);
        let ids = &ids[..prompt_tokens];
        // Timed on the model itself (no sampling or detokenizing): prefill is the best
        // of the runs; decode is 1 / the median step of all runs' greedy steps. The
        // median, not the mean: on a shared VM the host can stall a vCPU for a second,
        // which would swamp a mean of 64 steps (the llama.cpp script measures the same
        // way).
        let model = engine.model();
        model.truncate(0);
        if depth > 0 {
            model.forward(context).expect("depth");
        }
        let (mut best_pp, mut steps) = (0f64, Vec::new());
        for _ in 0..runs {
            model.truncate(depth);
            let t = Instant::now();
            let mut logits = model.forward(ids).expect("prefill");
            best_pp = best_pp.max(ids.len() as f64 / t.elapsed().as_secs_f64());
            if depth > 0 {
                // llama-bench's `tg` test decodes from the depth, not after the prompt.
                model.truncate(depth);
            }
            for _ in 0..decode_tokens {
                let next = argmax(&logits).expect("logits") as u32;
                let t = Instant::now();
                logits = model.forward(&[next]).expect("decode");
                steps.push(t.elapsed().as_secs_f64());
            }
        }
        steps.sort_by(f64::total_cmp);
        let best_tg = 1.0 / steps[steps.len() / 2];
        let rss_mib = peak_rss_mib();
        let bytes = bytes_per_token(&GgufFile::open(&path).expect("open"));
        let bandwidth = if smoke || device != DeviceChoice::Cpu { f64::NAN } else { read_bandwidth_gbs() };
        let threads = std::env::var("RAYON_NUM_THREADS")
            .unwrap_or_else(|_| std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_default());
        println!(
            "{{\"engine\":\"toolgate\",\"model\":\"{file}\",\"threads\":{threads},\"prompt_tokens\":{prompt_tokens},\"depth\":{depth},\"prefill_tps\":{best_pp:.2},\"decode_tokens\":{decode_tokens},\"decode_tps\":{best_tg:.2},\"rss_mib\":{rss_mib:.1},\"bytes_per_token\":{bytes},\"bandwidth_gbs\":{bandwidth:.2},\"decode_bound_tps\":{:.1}}}",
            bandwidth * 1e9 / bytes as f64
        );
        eprintln!("{file:<36} prefill {best_pp:>8.1} tok/s   decode {best_tg:>7.1} tok/s");
    }
}

/// Peak resident set size of this process, MiB (`VmHWM`; NaN where /proc is absent).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// The weight bytes one decode step reads: every tensor, less the token embeddings
/// when a separate output matrix exists (a step looks up one embedding row; with tied
/// embeddings the head reads the whole matrix).
fn bytes_per_token(gguf: &GgufFile) -> u64 {
    let embeddings = if gguf.has_tensor("output.weight") {
        gguf.tensor_data("token_embd.weight").map_or(0, |t| t.len() as u64)
    } else {
        0
    };
    gguf.tensor_bytes() - embeddings
}

/// Memory read bandwidth in GB/s, the bound a decoder limited by reading its weights
/// meets: a 1 GiB buffer (far past the caches) split into one contiguous part per
/// thread of rayon's pool (`RAYON_NUM_THREADS`, as the model runs), each read in
/// 64-byte lines with eight independent sums and, on x86-64, a prefetch 2 KiB ahead
/// (as the decode kernels ask; a plain summing loop leaves some server cores' memory
/// idle and reads low). Best of 5.
fn read_bandwidth_gbs() -> f64 {
    let buf = vec![1u64; (1 << 30) / 8];
    let threads = rayon::current_num_threads();
    let part = buf.len().div_ceil(threads).next_multiple_of(8);
    let mut best = 0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let s: u64 = buf.par_chunks(part).map(sum_lines).sum();
        let dt = t.elapsed().as_secs_f64();
        assert_eq!(s, buf.len() as u64);
        best = best.max((buf.len() * 8) as f64 / dt / 1e9);
    }
    best
}

/// The sum of `words`, a cache line (8 words) per step into 8 independent sums: in
/// 256-bit registers where the CPU has AVX2 (the bench is built for the baseline
/// x86-64, whose 128-bit loop is too slow to keep up with the memory).
fn sum_lines(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { sum_lines_avx2(words) };
    }
    sum_lines_plain(words)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_lines_avx2(words: &[u64]) -> u64 {
    sum_lines_plain(words)
}

#[inline(always)]
fn sum_lines_plain(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let lines = words.chunks_exact(8);
    let tail: u64 = lines.remainder().iter().sum();
    for (i, line) in lines.enumerate() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch reads nothing and never faults, whatever the address.
        unsafe {
            let ahead = words.as_ptr().wrapping_add(8 * i + 256) as *const i8;
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ahead);
        }
        for (a, &w) in acc.iter_mut().zip(line) {
            *a = a.wrapping_add(w);
        }
    }
    acc.iter().fold(tail, |a, &b| a.wrapping_add(b))
}
