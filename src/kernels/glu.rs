//! The gated feed-forward activation `act(g) · u` over rows of a fused gate|up
//! projection, vectorized: candle's tensor ops compute `gelu` and `silu` one scalar
//! `tanhf`/`expf` at a time over strided views, which took more of Gemma 3's prefill
//! than its attention (2 × 2048 values per token and layer).
//!
//! The AVX2 path evaluates `exp` with a range reduction and a degree-6 polynomial
//! (≤ 2 ulp on the reduced range) and derives `tanh` and the logistic function from
//! it; results are within a few ulp of the portable code's `f32::exp`/`f32::tanh`,
//! far below the 8-bit activation rounding the next matmul applies.

use super::pool::for_each_chunk;
use super::Isa;
use crate::{Error, Result};

/// The feed-forward gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (SwiGLU).
    Silu,
    /// GELU, tanh approximation (GeGLU).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `g' = min(g, 7)`, `u' = clamp(u, -7, 7)`,
    /// `g' · σ(1.702 · g') · (u' + 1)` (the constants are fixed, as in llama.cpp's
    /// `swiglu_oai`).
    SwigluOai,
}

/// [`Activation::SwigluOai`]'s `α`.
pub const OAI_ALPHA: f32 = 1.702;
/// [`Activation::SwigluOai`]'s clamp.
pub const OAI_LIMIT: f32 = 7.0;

/// `√(2/π)`, GELU's tanh-form constant.
const GELU_C: f32 = 0.797_884_6;

/// `act(g) · u` for one gate value `g` and up value `u` (the portable reference).
#[inline]
pub fn glu(activation: Activation, g: f32, u: f32) -> f32 {
    match activation {
        Activation::Silu => g / (1.0 + (-g).exp()) * u,
        Activation::GeluTanh => 0.5 * g * (1.0 + (GELU_C * (g + 0.044_715 * g * g * g)).tanh()) * u,
        Activation::SwigluOai => {
            let g = g.min(OAI_LIMIT);
            g / (1.0 + (-OAI_ALPHA * g).exp()) * (u.clamp(-OAI_LIMIT, OAI_LIMIT) + 1.0)
        }
    }
}

/// `out[r][i] = act(gu[r][i]) · gu[r][ff + i]`: each row of `gu` is `2·ff` values, the
/// gate's `ff` then the up projection's `ff`; `out` gets `ff` per row.
///
/// Cost: one pass, vectorized (AVX2) where the CPU has it, rows spread over the
/// kernels' thread pool.
///
/// # Errors
/// [`Error::InvalidParameter`] if `ff` is 0, `gu` is not whole rows of `2·ff` or `out`
/// not as many rows of `ff`.
pub fn glu_rows(activation: Activation, gu: &[f32], ff: usize, out: &mut [f32]) -> Result<()> {
    if ff == 0 || !gu.len().is_multiple_of(2 * ff) || out.len() != gu.len() / 2 {
        return Err(Error::InvalidParameter {
            name: "gu",
            reason: format!("{} gate|up values and {} outputs for rows of {ff}", gu.len(), out.len()),
        });
    }
    let isa = Isa::detect();
    // About 64 Ki values per task: small batches stay on the calling thread.
    let rows_per_task = (65_536 / ff).max(1);
    for_each_chunk(out, rows_per_task * ff, |chunk, o| {
        for (r, row) in o.chunks_exact_mut(ff).enumerate() {
            let at = (chunk * rows_per_task + r) * 2 * ff;
            let (g, u) = gu[at..at + 2 * ff].split_at(ff);
            glu_row(isa, activation, g, u, row);
        }
    });
    Ok(())
}

/// One row with the kernels of `isa`.
fn glu_row(isa: Isa, activation: Activation, g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        // SAFETY: `isa` comes from `Isa::detect`, which only reports AVX2 (or
        // AVX-512, which includes it) on a CPU that has AVX2 and FMA.
        return unsafe { avx2::glu_row(activation, g, u, out) };
    }
    let _ = isa;
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = glu(activation, g, u);
    }
}

/// `xs[i] = e^(xs[i] − max)` in place, returning `Σ xs[i]` (a softmax's numerators
/// and denominator), vectorized like [`glu_rows`]; the sum's order is fixed by the
/// length alone.
pub(crate) fn exp_shifted(isa: Isa, xs: &mut [f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        // SAFETY: as in `glu_row`: `isa` reports AVX2 only on a CPU that has it and FMA.
        return unsafe { avx2::exp_shifted(xs, max) };
    }
    let _ = isa;
    xs.iter_mut().fold(0.0, |sum, x| {
        *x = (*x - max).exp();
        sum + *x
    })
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use super::{glu, Activation, GELU_C, OAI_ALPHA, OAI_LIMIT};

    /// `e^x` for 8 lanes: `x = n·ln2 + r`, `|r| ≤ ln2/2`, `e^r` by Cephes' degree-6
    /// polynomial, `2^n` built in the exponent bits. `x` is clamped to
    /// `[-87.3, 88.3]` (normal results, no overflow).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(in crate::kernels) unsafe fn exp8(x: __m256) -> __m256 {
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3)), _mm256_set1_ps(88.3));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
        ));
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_2e-4);
        for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0));
        let two_n = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
        _mm256_mul_ps(y, _mm256_castsi256_ps(two_n))
    }

    /// `act(g) · u` for 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn glu8(activation: Activation, g: __m256, u: __m256) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        match activation {
            Activation::Silu => {
                let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
                _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u)
            }
            Activation::GeluTanh => {
                // tanh(z) = 1 − 2 / (e^{2z} + 1)
                let g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
                let z = _mm256_mul_ps(_mm256_set1_ps(GELU_C), _mm256_fmadd_ps(_mm256_set1_ps(0.044_715), g3, g));
                let e = exp8(_mm256_add_ps(z, z));
                let tanh = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0), _mm256_add_ps(e, one)));
                _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), g), _mm256_add_ps(one, tanh)), u)
            }
            Activation::SwigluOai => {
                let limit = _mm256_set1_ps(OAI_LIMIT);
                let g = _mm256_min_ps(g, limit);
                let u = _mm256_min_ps(_mm256_max_ps(u, _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
                let e = exp8(_mm256_mul_ps(_mm256_set1_ps(-OAI_ALPHA), g));
                _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_add_ps(u, one))
            }
        }
    }

    /// [`super::exp_shifted`] on AVX2.
    ///
    /// # Safety
    /// The CPU must support `avx2` and `fma`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted(xs: &mut [f32], max: f32) -> f32 {
        let n = xs.len();
        let full = n / 8 * 8;
        let m = _mm256_set1_ps(max);
        let mut acc = _mm256_setzero_ps();
        for i in (0..full).step_by(8) {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(xs.as_ptr().add(i)), m));
            _mm256_storeu_ps(xs.as_mut_ptr().add(i), e);
            acc = _mm256_add_ps(acc, e);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        let mut sum = lanes.iter().sum::<f32>();
        for x in &mut xs[full..] {
            *x = (*x - max).exp();
            sum += *x;
        }
        sum
    }

    /// [`super::glu_row`] on AVX2.
    ///
    /// # Safety
    /// The CPU must support `avx2` and `fma`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn glu_row(activation: Activation, g: &[f32], u: &[f32], out: &mut [f32]) {
        let n = out.len().min(g.len()).min(u.len());
        let full = n / 8 * 8;
        for i in (0..full).step_by(8) {
            let v = glu8(activation, _mm256_loadu_ps(g.as_ptr().add(i)), _mm256_loadu_ps(u.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        }
        for i in full..n {
            out[i] = glu(activation, g[i], u[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glu_example() {
        use crate::kernels::glu::{glu, Activation};
        assert_eq!(glu(Activation::Silu, 0.0, 3.0), 0.0);
        assert!((glu(Activation::GeluTanh, 1.0, 2.0) - 2.0 * 0.841_192).abs() < 1e-5);
    }

    #[test]
    fn glu_rows_example() -> crate::Result<()> {
        use crate::kernels::glu::{glu_rows, Activation};
        let gu = [1.0f32, -2.0, 3.0, 4.0]; // one row: gates [1, -2], ups [3, 4]
        let mut out = [0f32; 2];
        glu_rows(Activation::Silu, &gu, 2, &mut out)?;
        assert!((out[0] - 0.731_059 * 3.0).abs() < 1e-5 && (out[1] + 0.238_406 * 4.0).abs() < 1e-5);
        Ok::<(), crate::Error>(())
    }
}
