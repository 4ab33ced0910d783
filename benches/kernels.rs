//! toolgate's CPU kernels against candle's quantized matmul, same weights, same run
//! (`cargo bench --bench kernels`).
//!
//! For every weight type: a random `(n, k)` matrix quantized by candle, multiplied by
//! `m = 1` (decode) and `m = 128` (prefill) activation rows through
//! `toolgate::kernels::QWeight::matmul` and through candle's `QMatMul::forward`. Prints
//! the best of several runs as GMAC/s and the ratio, one JSON line per case and a
//! Markdown table. Threads: `RAYON_NUM_THREADS`.
//!
//! `KERNELS_SHAPE=n,k` picks another shape (types whose block does not divide `k` are
//! skipped). Under `cargo test --all-targets` it runs one tiny case as a smoke test.

use std::time::Instant;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use toolgate::kernels::{QWeight, WeightType};

fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let dev = Device::Cpu;
    // `KERNELS_SHAPE=n,k` measures one model's shape instead of 2048×2048.
    let shape = std::env::var("KERNELS_SHAPE").ok().and_then(|s| {
        let (n, k) = s.split_once(',')?;
        Some((n.trim().parse().ok()?, k.trim().parse().ok()?))
    });
    let (n, k) = if smoke { (64, 512) } else { shape.unwrap_or((2048, 2048)) };
    let ms: &[usize] = if smoke { &[1, 5] } else { &[1, 128] };
    let types: Vec<WeightType> = if smoke {
        vec![WeightType::Q4_1, WeightType::Q6K]
    } else {
        WeightType::ALL.into_iter().filter(|t| t.block_len() <= k && k % t.block_len() == 0).collect()
    };
    println!("| type | m | toolgate GMAC/s | candle GMAC/s | ratio |");
    println!("|---|---|---|---|---|");
    for ty in types {
        let w = Tensor::randn(0f32, 0.1, (n, k), &dev).unwrap();
        let qt = QTensor::quantize(&w, ty.to_ggml()).unwrap();
        let ours = QWeight::from_qtensor(&qt).unwrap().unwrap();
        let theirs = QMatMul::from_qtensor(qt).unwrap();
        for &m in ms {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
            let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let mut y = vec![0f32; m * n];
            let runs = if smoke {
                1
            } else if m == 1 {
                200
            } else {
                5
            };
            let t_ours = best_of(runs, || ours.matmul(&xs, &mut y).unwrap());
            let t_theirs = best_of(runs, || {
                theirs.forward(&x).unwrap();
            });
            let gmac = |t: f64| (m * n * k) as f64 / t / 1e9;
            println!(
                "| {} | {m} | {:.1} | {:.1} | {:.2}x |",
                ty.name(),
                gmac(t_ours),
                gmac(t_theirs),
                t_theirs / t_ours
            );
            eprintln!(
                "{{\"type\":\"{}\",\"m\":{m},\"n\":{n},\"k\":{k},\"toolgate_s\":{t_ours:.6},\"candle_s\":{t_theirs:.6}}}",
                ty.name()
            );
        }
    }
}
