//! The quantized matmul driver: quantize the activations, split the weight rows across
//! the threads, and walk each thread's rows tile by tile so a weight row is read once
//! per group of four activation rows and the activation tile stays in L1.
//!
//! Threads: `pool.rs` (candle's barrier pool).

use super::activation::{quantize_256, quantize_32, Q8x256, Q8x32};
use super::dispatch::DotFn;
use super::formats::ActKind;
use super::pool::{for_each_chunk, threads};
use super::{dispatch, Isa, QWeight, MAX_ROWS};

/// Activation rows per tile (a tile of 16 rows of width 4096 is 64 KiB of codes).
const ROW_TILE: usize = 16;
/// Fewest weight rows per parallel task.
const MIN_CHUNK: usize = 16;

/// `y (m, n) = x (m, k) · Wᵀ` where `w` is `(n, k)`.
pub(super) fn matmul(w: &QWeight, x: &[f32], m: usize, y: &mut [f32], isa: Isa) {
    let k = w.in_features;
    match w.ty.act_kind() {
        ActKind::Blocks32 => {
            let mut acts = vec![Q8x32::ZERO; m * k / 32];
            for (xr, ar) in x.chunks_exact(k).zip(acts.chunks_exact_mut(k / 32)) {
                quantize_32(xr, ar);
            }
            run(w, &acts, k / 32, m, y, dispatch::dot32_for(isa));
        }
        ActKind::Blocks256 => {
            let mut acts = vec![Q8x256::ZERO; m * k / 256];
            for (xr, ar) in x.chunks_exact(k).zip(acts.chunks_exact_mut(k / 256)) {
                quantize_256(xr, ar);
            }
            run(w, &acts, k / 256, m, y, dispatch::dot256_for(isa));
        }
    }
}

fn run<A: Sync>(w: &QWeight, acts: &[A], blocks: usize, m: usize, y: &mut [f32], dot: DotFn<A>) {
    let n = w.out_features;
    let rb = w.row_bytes();
    let row = |j: usize| &w.data[j * rb..(j + 1) * rb];
    let act = |r: usize| &acts[r * blocks..(r + 1) * blocks];
    let chunk = n.div_ceil(threads() * 4).max(MIN_CHUNK);
    if m == 1 {
        let x = [act(0)];
        for_each_chunk(y, chunk, |ci, ys| {
            for (jj, o) in ys.iter_mut().enumerate() {
                dot(w.ty, row(ci * chunk + jj), &x, std::slice::from_mut(o));
            }
        });
        return;
    }
    // Each task owns a run of weight rows and fills their outputs for every activation
    // row, into `yt (n, m)`; transposed into `y` at the end.
    let mut yt = vec![0f32; n * m];
    for_each_chunk(&mut yt, chunk * m, |ci, ys| {
        let rows = ys.len() / m;
        for t0 in (0..m).step_by(ROW_TILE) {
            let t1 = (t0 + ROW_TILE).min(m);
            for jj in 0..rows {
                let wr = row(ci * chunk + jj);
                let out = &mut ys[jj * m..(jj + 1) * m];
                for g0 in (t0..t1).step_by(MAX_ROWS) {
                    let g1 = (g0 + MAX_ROWS).min(t1);
                    let mut xs: [&[A]; MAX_ROWS] = [act(g0); MAX_ROWS];
                    for (s, r) in xs.iter_mut().zip(g0..g1) {
                        *s = act(r);
                    }
                    dot(w.ty, wr, &xs[..g1 - g0], &mut out[g0..g1]);
                }
            }
        }
    });
    for (j, col) in yt.chunks_exact(m).enumerate() {
        for (r, v) in col.iter().enumerate() {
            y[r * n + j] = *v;
        }
    }
}
