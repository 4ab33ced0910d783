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
//! `BENCH_MODELS` (comma-separated GGUF file names in the cache, instead of the two
//! test models: e.g. requantized copies of one model, one per weight type).

use std::path::PathBuf;
use std::time::Instant;

use rayon::prelude::*;

use toolgate::engine::Engine;
use toolgate::gguf::GgufFile;
use toolgate::model::DeviceChoice;
use toolgate::sampling::argmax;

const PROMPT_TOKENS: usize = 128;
const DECODE_TOKENS: usize = 64;
const RUNS: usize = 5;

fn models_dir() -> PathBuf {
    std::env::var("TOOLGATE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/toolgate/models"))
}

/// The prompt text both toolgate and the llama.cpp script use.
pub const TEXT: &str = "The quick brown fox jumps over the lazy dog. ";

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` this binary runs
    // as a smoke test (one short run) so the benchmark never rots.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (prompt_tokens, decode_tokens, runs) = if smoke { (16, 4, 1) } else { (PROMPT_TOKENS, DECODE_TOKENS, RUNS) };
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let files: Vec<String> = match std::env::var("BENCH_MODELS") {
        Ok(list) => list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        Err(_) => vec!["SmolLM2-135M-Instruct.Q4_1.gguf".into(), "gemma-3-270m-q4_k_m.gguf".into()],
    };
    for file in &files {
        let file = file.as_str();
        if !filter.is_empty() && !filter.iter().any(|f| file.contains(f.as_str())) {
            continue;
        }
        let path = models_dir().join(file);
        if !path.exists() {
            assert!(!smoke, "{file} not found: run scripts/fetch-models");
            eprintln!("skip {file}: not found (run scripts/fetch-models)");
            continue;
        }
        let mut engine = Engine::load(&path, DeviceChoice::Cpu).expect("load");
        let tok = engine.tokenizer();
        let mut ids = tok.encode_prompt(&TEXT.repeat(40), false).expect("encode");
        ids.truncate(prompt_tokens);
        // Timed on the model itself (no sampling or detokenizing): prefill is the best
        // of the runs; decode is 1 / the median step of all runs' greedy steps. The
        // median, not the mean: on a shared VM the host can stall a vCPU for a second,
        // which would swamp a mean of 64 steps (the llama.cpp script measures the same
        // way).
        let model = engine.model();
        let (mut best_pp, mut steps) = (0f64, Vec::new());
        for _ in 0..runs {
            model.truncate(0);
            let t = Instant::now();
            let mut logits = model.forward(&ids).expect("prefill");
            best_pp = best_pp.max(ids.len() as f64 / t.elapsed().as_secs_f64());
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
        let bytes = GgufFile::open(&path).expect("open").tensor_bytes();
        let bandwidth = if smoke { f64::NAN } else { read_bandwidth_gbs() };
        let threads = std::env::var("RAYON_NUM_THREADS")
            .unwrap_or_else(|_| std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_default());
        println!(
            "{{\"engine\":\"toolgate\",\"model\":\"{file}\",\"threads\":{threads},\"prompt_tokens\":{prompt_tokens},\"prefill_tps\":{best_pp:.2},\"decode_tokens\":{decode_tokens},\"decode_tps\":{best_tg:.2},\"rss_mib\":{rss_mib:.1},\"bytes_per_token\":{bytes},\"bandwidth_gbs\":{bandwidth:.2},\"decode_bound_tps\":{:.1}}}",
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

/// Memory read bandwidth in GB/s: a 1 GiB buffer summed by rayon's threads, best of 3.
fn read_bandwidth_gbs() -> f64 {
    let buf = vec![1u64; (1 << 30) / 8];
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let s: u64 = buf.par_chunks(1 << 16).map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v))).sum();
        let dt = t.elapsed().as_secs_f64();
        assert_eq!(s, buf.len() as u64);
        best = best.max((buf.len() * 8) as f64 / dt / 1e9);
    }
    best
}
