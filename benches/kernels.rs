//! toolgate's CPU kernels against candle's quantized matmul, same weights, same run
//! (`cargo bench --bench kernels`).
//!
//! For every weight type: a random `(n, k)` matrix quantized by candle, multiplied by
//! `m = 1` (decode) and `m = 128` (prefill) activation rows through
//! `toolgate::kernels::QWeight::matmul` and through candle's `QMatMul::forward`. Prints
//! the best of several runs as GMAC/s and the ratio, one JSON line per case and a
//! Markdown table. Threads: `RAYON_NUM_THREADS`. IQ4_NL, IQ4_XS and MXFP4, which
//! candle has no type for, run on random blocks (codes random, scales fixed) with no
//! candle column; compare them with llama.cpp end to end (`scripts/bench-compare`).
//!
//! `KERNELS_SHAPE=n,k` picks another shape (types whose block does not divide `k` are
//! skipped); `KERNELS_TYPES=q4_K,q6_K` measures only the types named; `KERNELS_ROWS=1,512`
//! measures those activation row counts. Under `cargo test --all-targets` it runs one tiny case as a smoke test.

use std::time::Instant;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use toolgate::kernels::{QWeight, WeightType};

/// `(n, k)` weights of a type candle cannot quantize: random codes, a fixed scale of
/// about 0.01 per block.
fn random_blocks(ty: WeightType, n: usize, k: usize) -> QWeight {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut bytes: Vec<u8> = (0..n * k / ty.block_len() * ty.block_bytes())
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    for b in bytes.chunks_exact_mut(ty.block_bytes()) {
        match ty {
            WeightType::MXFP4 => b[0] = 120, // 2^-8
            _ => b[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes()),
        }
    }
    QWeight::new(ty, bytes, n, k).unwrap()
}

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
    // `KERNELS_ROWS=1,512` measures those activation row counts instead of 1 and 128.
    let rows: Option<Vec<usize>> = std::env::var("KERNELS_ROWS")
        .ok()
        .map(|s| s.split(',').filter_map(|r| r.trim().parse().ok()).filter(|&m| m > 0).collect());
    let ms: &[usize] = if smoke { &[1, 5] } else { rows.as_deref().unwrap_or(&[1, 128]) };
    let types: Vec<WeightType> = if smoke {
        vec![WeightType::Q4_1, WeightType::Q6K]
    } else {
        WeightType::ALL.into_iter().filter(|t| t.block_len() <= k && k % t.block_len() == 0).collect()
    };
    // `KERNELS_TYPES=q4_K,q6_K` measures only those types.
    let only: Option<Vec<String>> =
        std::env::var("KERNELS_TYPES").ok().map(|s| s.split(',').map(str::to_string).collect());
    let types: Vec<WeightType> =
        types.into_iter().filter(|t| only.as_ref().is_none_or(|o| o.iter().any(|n| n == t.name()))).collect();
    println!("| type | m | toolgate GMAC/s | candle GMAC/s | ratio |");
    println!("|---|---|---|---|---|");
    for ty in types {
        let (ours, theirs) = match ty.to_candle() {
            Some(dtype) => {
                let w = Tensor::randn(0f32, 0.1, (n, k), &dev).unwrap();
                let qt = QTensor::quantize(&w, dtype).unwrap();
                (QWeight::from_qtensor(&qt).unwrap().unwrap(), Some(QMatMul::from_qtensor(qt).unwrap()))
            }
            None => (random_blocks(ty, n, k), None),
        };
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
            let t_theirs = match &theirs {
                Some(theirs) => best_of(runs, || {
                    theirs.forward(&x).unwrap();
                }),
                None => f64::NAN,
            };
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
