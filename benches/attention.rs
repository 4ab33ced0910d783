//! toolgate's fused CPU attention against candle's ops (the path every other device
//! takes: K/V repeated per query head, a mask tensor, softmax, two matmuls), same
//! inputs, same run (`cargo bench --bench attention`).
//!
//! Head shapes of the three test models — Qwen2.5-Coder-0.5B (14 query / 2 key-value
//! heads of 64), SmolLM2-135M (9 / 3 of 64), Gemma-3-270M (4 / 1 of 256) — for a
//! prefill chunk of 256 queries after 2k and 8k cached keys, and one decode query at
//! 8k. Prints the best of several runs as GMAC/s (`queries · heads · visible keys ·
//! (d + dv)`) and the ratio, one JSON line per case on stderr. Threads:
//! `RAYON_NUM_THREADS`. Under `cargo test --all-targets` it runs one tiny case.

use std::time::Instant;

use candle_core::{Device, Tensor};
use toolgate::kernels::attention::{attention, AttentionShape, Strided};

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

/// candle's ops for the same causal attention (no window): `(1, h, t, dv)`.
fn with_candle(q: &Tensor, k: &Tensor, v: &Tensor, s: &AttentionShape) -> Tensor {
    let n_rep = s.n_head / s.n_kv_head;
    let rep = |x: &Tensor| {
        let (b, h, t, d) = x.dims4().unwrap();
        Tensor::cat(&vec![x; n_rep], 2).unwrap().reshape((b, h * n_rep, t, d)).unwrap()
    };
    let (k, v) = (rep(k), rep(v));
    let scores = (q.matmul(&k.t().unwrap()).unwrap() * s.scale as f64).unwrap();
    let mut m = vec![0f32; s.queries * s.keys];
    for i in 0..s.queries {
        for j in s.pos + i + 1..s.keys {
            m[i * s.keys + j] = f32::NEG_INFINITY;
        }
    }
    let mask = Tensor::from_vec(m, (1, 1, s.queries, s.keys), q.device()).unwrap();
    let probs = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&mask).unwrap()).unwrap();
    probs.matmul(&v).unwrap()
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let dev = Device::Cpu;
    let models: &[(&str, usize, usize, usize)] =
        &[("Qwen2.5-Coder-0.5B", 14, 2, 64), ("SmolLM2-135M", 9, 3, 64), ("Gemma-3-270M", 4, 1, 256)];
    let cases: &[(usize, usize)] = if smoke { &[(8, 16)] } else { &[(256, 2048), (256, 8192), (1, 8192)] };
    println!("| model | queries | keys before | toolgate GMAC/s | candle GMAC/s | ratio |");
    println!("|---|---|---|---|---|---|");
    for &(name, n_head, n_kv_head, d) in models {
        for &(t, before) in cases {
            let keys = before + t;
            let s = AttentionShape {
                n_head,
                n_kv_head,
                head_dim: d,
                v_head_dim: d,
                queries: t,
                pos: before,
                first_key: 0,
                keys,
                window: None,
                scale: 1.0 / (d as f32).sqrt(),
                softcap: None,
                sinks: None,
            };
            let q = Tensor::randn(0f32, 1.0, (1, n_head, t, d), &dev).unwrap();
            let k = Tensor::randn(0f32, 1.0, (1, n_kv_head, keys, d), &dev).unwrap();
            let v = Tensor::randn(0f32, 1.0, (1, n_kv_head, keys, d), &dev).unwrap();
            let flat = |x: &Tensor| x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (qs, ks, vs) = (flat(&q), flat(&k), flat(&v));
            let mut out = vec![0f32; t * n_head * d];
            let runs = if smoke { 1 } else { 3 };
            let ours = best_of(runs, || {
                attention(
                    &s,
                    Strided { data: &qs, head_stride: t * d, row_stride: d },
                    Strided { data: &ks, head_stride: keys * d, row_stride: d },
                    Strided { data: &vs, head_stride: keys * d, row_stride: d },
                    &mut out,
                )
                .unwrap()
            });
            let theirs = best_of(runs, || {
                with_candle(&q, &k, &v, &s);
            });
            // Visible keys summed over the queries: before + 1, …, before + t.
            let visible = t * before + t * (t + 1) / 2;
            let gmac = |secs: f64| (n_head * visible * 2 * d) as f64 / secs / 1e9;
            println!("| {name} | {t} | {before} | {:.1} | {:.1} | {:.2}x |", gmac(ours), gmac(theirs), theirs / ours);
            eprintln!("{{\"model\":\"{name}\",\"queries\":{t},\"before\":{before},\"toolgate_s\":{ours:.6},\"candle_s\":{theirs:.6}}}");
        }
    }
}
