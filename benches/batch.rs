//! Batched decode throughput (`cargo bench --bench batch`): `b` sequences decoded
//! together with `Model::forward_batch`, for b = 1, 2, 4, 8, on the real models.
//!
//! Each of the `b` slots is prefilled with its own 32-token prompt, then 64 steps each
//! decode one greedy token for every slot in one pass. Reports per `b` the median step
//! time, the aggregate tokens/s (`b` ÷ step) and the speedup over `b = 1`. Decode reads
//! every weight once per step whatever `b` is, so aggregate throughput grows with `b`
//! until the per-row work (attention, activations, the output head's rows) dominates.
//!
//! Environment: `TOOLGATE_MODELS` (model cache), `RAYON_NUM_THREADS` (threads),
//! `BENCH_MODELS` (comma-separated GGUF file names in the cache, or paths, instead of
//! the two test models), `BENCH_DEVICE` (`cpu`, the default, or `cuda[:N]`).
//! Arguments: model-name filters (`SmolLM2`, `gemma`).

mod common;
use common::{bench_device, bench_models};

use std::time::Instant;

use toolgate::engine::Engine;
use toolgate::sampling::argmax;

const TEXT: &str = "The quick brown fox jumps over the lazy dog. ";

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --benches` one short run.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (steps, widths): (usize, &[usize]) = if smoke { (2, &[1, 2]) } else { (64, &[1, 2, 4, 8]) };
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let device = bench_device();
    for path in bench_models(&filter) {
        assert!(path.exists(), "{} not found: run scripts/fetch-models", path.display());
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let mut engine = Engine::load(&path, device).expect("load");
        // Enough text for 8 slots' prompts (the dense synthetic files spend a token per
        // byte, the real ones about one per word).
        let words: Vec<u32> = engine.tokenizer().encode_prompt(&TEXT.repeat(20), false).expect("encode");
        let model = engine.model();
        let mut base = None;
        println!("{file}: {steps} steps");
        println!("| sequences | step (median) | aggregate tok/s | vs 1 sequence |");
        println!("|---|---|---|---|");
        for &b in widths {
            model.set_slots(b).expect("slots");
            let mut next = Vec::new();
            for slot in 0..b {
                model.select_slot(slot).expect("slot");
                model.truncate(0);
                let logits = model.forward(&words[slot..slot + 32]).expect("prefill");
                next.push(argmax(&logits).expect("logits") as u32);
            }
            let mut times = Vec::new();
            for _ in 0..steps {
                let batch: Vec<(usize, u32)> = next.iter().copied().enumerate().collect();
                let t = Instant::now();
                let rows = model.forward_batch(&batch).expect("step");
                times.push(t.elapsed().as_secs_f64());
                next = rows.iter().map(|r| argmax(r).expect("logits") as u32).collect();
            }
            times.sort_by(f64::total_cmp);
            let step = times[times.len() / 2];
            let tps = b as f64 / step;
            let base_tps = *base.get_or_insert(tps);
            println!("| {b} | {:.2} ms | {tps:.1} | {:.2}× |", step * 1e3, tps / base_tps);
        }
    }
}
