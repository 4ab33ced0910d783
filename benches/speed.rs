//! Prefill and decode speed on the real models (`cargo bench --bench speed`).
//!
//! For each model: a 128-token prompt is prefilled, then 64 tokens are decoded
//! greedily (end-of-turn ignored); the best of 3 runs is reported. Prints one JSON
//! line per model (for `scripts/bench-compare`) and a table.
//!
//! Environment: `TOOLGATE_MODELS` (model cache), `RAYON_NUM_THREADS` (threads).

use std::path::PathBuf;

use toolgate::engine::{Engine, GenerateParams};
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;

const PROMPT_TOKENS: usize = 128;
const DECODE_TOKENS: usize = 64;
const RUNS: usize = 3;

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
    for file in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"] {
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
        let params = GenerateParams {
            max_tokens: decode_tokens,
            sampling: SamplingParams::greedy(),
            stop: vec![],
            stop_on_eog: false,
            ..GenerateParams::default()
        };
        let (mut best_pp, mut best_tg) = (0f64, 0f64);
        for _ in 0..runs {
            let g = engine.generate(&ids, &params, |_| {}).expect("generate");
            best_pp = best_pp.max(g.prompt_tps());
            best_tg = best_tg.max(g.decode_tps());
        }
        let threads = std::env::var("RAYON_NUM_THREADS")
            .unwrap_or_else(|_| std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_default());
        println!(
            "{{\"engine\":\"toolgate\",\"model\":\"{file}\",\"threads\":{threads},\"prompt_tokens\":{prompt_tokens},\"prefill_tps\":{best_pp:.2},\"decode_tokens\":{decode_tokens},\"decode_tps\":{best_tg:.2}}}"
        );
        eprintln!("{file:<36} prefill {best_pp:>8.1} tok/s   decode {best_tg:>7.1} tok/s");
    }
}
