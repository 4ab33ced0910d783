//! The row-wise steps of a layer — RMS norm and rotary position embedding — on the
//! kernels' pool.
//!
//! candle-nn's versions compute the same thing, but spread a prefill-sized call over
//! rayon's global pool: a second set of threads beside the barrier pool the kernels
//! run on, whose workers spin between calls. On a machine with many cores the two
//! fight for them (on 16 cores, prefill with 16 threads fell below 8;
//! `BENCHMARKS.md`, thread scaling). These functions do candle-nn's arithmetic in its
//! order, so the results are the same bits, split over `super::pool`.

use super::pool::{for_each_chunk, rows_per_task};
use crate::{Error, Result};

/// Values below which a call stays on the calling thread: a decode step's norm or
/// RoPE (one row, a few heads) is a microsecond of work, less than waking the pool.
const MIN_PARALLEL: usize = 1 << 14;

/// Rows per task for `rows` rows of `len` values in all.
fn split(rows: usize, len: usize) -> usize {
    if len < MIN_PARALLEL {
        rows.max(1)
    } else {
        rows_per_task(rows)
    }
}

/// `out_r = x_r / √(mean(x_r²) + eps) ⊙ w` for each row `x_r` of `x` (rows of
/// `w.len()` values), as candle-nn's `rms_norm` computes it: the squares summed in
/// f32, left to right.
///
/// Cost: `3 · x.len()` multiply-adds and one square root per row; parallel over rows.
///
/// # Errors
/// [`Error::InvalidParameter`] if `w` is empty, `x` is not whole rows of it, or `out`
/// is not `x`'s length.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> Result<()> {
    let n = w.len();
    if n == 0 || !x.len().is_multiple_of(n) || out.len() != x.len() {
        return Err(Error::InvalidParameter {
            name: "rms_norm",
            reason: format!("{} values into {} for rows of {n}", x.len(), out.len()),
        });
    }
    let per = split(x.len() / n, x.len());
    for_each_chunk(out, per * n, |task, out| {
        let x = &x[task * per * n..task * per * n + out.len()];
        for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let sum2 = xr.iter().map(|&v| v * v).sum::<f32>();
            let m = (sum2 / n as f32 + eps).sqrt();
            for ((o, &v), &a) in or.iter_mut().zip(xr).zip(w) {
                *o = v / m * a;
            }
        }
    });
    Ok(())
}

/// Rotary position embedding of `x`, laid out `(heads, t, d)`, with `cos` and `sin`
/// laid out `(t, d / 2)`: each pair `(a, b)` of a row becomes `(a·cos − b·sin, a·sin +
/// b·cos)`, pairs being `(i, i + d/2)` (`interleaved` false, candle-nn's `rope`) or
/// `(2i, 2i + 1)` (candle-nn's `rope_i`), computed as those do.
///
/// Cost: `4 · x.len() / 2` multiplies; parallel over heads.
///
/// # Errors
/// [`Error::InvalidParameter`] if `d` is odd or zero, `x` is not whole `(t, d)` heads,
/// `cos`/`sin` are not `t · d / 2` long, or `out` is not `x`'s length.
pub fn rope(x: &[f32], cos: &[f32], sin: &[f32], t: usize, d: usize, interleaved: bool, out: &mut [f32]) -> Result<()> {
    let head = t * d;
    if d == 0 || !d.is_multiple_of(2) || head == 0 || !x.len().is_multiple_of(head) {
        return Err(Error::InvalidParameter {
            name: "rope",
            reason: format!("{} values as heads of ({t}, {d})", x.len()),
        });
    }
    if cos.len() != head / 2 || sin.len() != head / 2 || out.len() != x.len() {
        return Err(Error::InvalidParameter {
            name: "rope",
            reason: format!("cos {}, sin {}, output {} for heads of ({t}, {d})", cos.len(), sin.len(), out.len()),
        });
    }
    let per = split(x.len() / head, x.len());
    let half = d / 2;
    for_each_chunk(out, per * head, |task, out| {
        let x = &x[task * per * head..task * per * head + out.len()];
        for (src, dst) in x.chunks_exact(head).zip(out.chunks_exact_mut(head)) {
            for i_t in 0..t {
                let (src, dst) = (&src[i_t * d..(i_t + 1) * d], &mut dst[i_t * d..(i_t + 1) * d]);
                let (c, s) = (&cos[i_t * half..(i_t + 1) * half], &sin[i_t * half..(i_t + 1) * half]);
                for i in 0..half {
                    let (i1, i2) = if interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
                    dst[i1] = src[i1] * c[i] - src[i2] * s[i];
                    dst[i2] = src[i1] * s[i] + src[i2] * c[i];
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn rms_norm_example() -> crate::Result<()> {
        let mut out = [0f32; 4];
        crate::kernels::rows::rms_norm(&[3.0, 4.0, 0.0, 0.0], &[1.0, 2.0], 0.0, &mut out)?;
        let m = (12.5f32).sqrt(); // √((9 + 16) / 2)
        assert_eq!(out[..2], [3.0 / m * 1.0, 4.0 / m * 2.0]);
        assert!(out[2..].iter().all(|v| v.is_nan())); // 0 / 0, as candle-nn
        Ok::<(), crate::Error>(())
    }

    #[test]
    fn rope_example() -> crate::Result<()> {
        let mut out = [0f32; 4];
        // One head, one position, d = 4: the angle's cos 0 and sin 1 turn each pair by 90°.
        crate::kernels::rows::rope(&[1.0, 2.0, 3.0, 4.0], &[0.0, 0.0], &[1.0, 1.0], 1, 4, false, &mut out)?;
        assert_eq!(out, [-3.0, -4.0, 1.0, 2.0]);
        Ok::<(), crate::Error>(())
    }
}
