//! Activations quantized to 8 bits, the right-hand side of every quantized dot product.
//!
//! A row of `k` f32 activations becomes `k / 32` [`Q8x32`] blocks (for the 32-weight
//! types) or `k / 256` [`Q8x256`] blocks (for the k-quants). Scales are symmetric
//! (`q = x · 127 / max|x|` rounded half to even, `d ≈ max|x| / 127`), so every code is
//! in `-127..=127`, which the sign trick of the `Q8_0` kernels needs. Codes and scales
//! are exactly ggml's (`block_q8_0`, `block_q8_1`, `block_q8_K`, scales rounded as
//! ggml stores them), so a product equals llama.cpp's up to the order of its sums.

use half::f16;

/// 32 activations: `x ≈ d·q`, with `d` an f16 value as ggml's `block_q8_0` and
/// `block_q8_1` store it (so products equal llama.cpp's).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Q8x32 {
    /// Scale (an f16 value).
    pub d: f32,
    /// `d · Σ qs`: the Q4_0/Q5_0 kernels apply the codes' offset (`-8·d_w`,
    /// `-16·d_w`) with one multiply.
    pub s: f32,
    /// `Σ qs` times the scale before its rounding, rounded to f16: ggml's
    /// `block_q8_1::s`, which multiplies the minimum of Q4_1/Q5_1 weights
    /// (`m` in `w = q·d + m`).
    pub s_min: f32,
    /// Codes.
    pub qs: [i8; 32],
}

/// 256 activations: `x ≈ d·q`, with the sum of each 16 codes for the k-quants'
/// per-sub-block offsets.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Q8x256 {
    /// Scale.
    pub d: f32,
    /// Codes.
    pub qs: [i8; 256],
    /// `Σ qs[16i..16i+16]`.
    pub bsums: [i16; 16],
    /// `Σ qs[32i..32i+32]` (`bsums` in pairs): Q4_K's and Q5_K's minimums belong to
    /// 32-weight sub-blocks, and the tile kernels take two of them per
    /// multiply-add from one 32-bit read of this.
    pub sums32: [i16; 8],
}

impl Q8x32 {
    /// An all-zero block.
    pub const ZERO: Q8x32 = Q8x32 { d: 0.0, s: 0.0, s_min: 0.0, qs: [0; 32] };
}

impl Q8x256 {
    /// An all-zero block.
    pub const ZERO: Q8x256 = Q8x256 { d: 0.0, qs: [0; 256], bsums: [0; 16], sums32: [0; 8] };
}

/// `(d, 1/d)` of a block as ggml's quantizers compute them: `127 / max|x|` for the
/// codes (not `1 / d`, which can differ by an ulp).
///
/// `max|x|` runs as eight maxima, one per lane of 8, then the maximum of those: one
/// running maximum was a chain of 256 dependent scalar `maxss` per 256-block (about
/// 1,000 cycles, 3% of a 3B model's prefill), eight are vectorized. A maximum rounds
/// nothing, so any order gives the same `amax` (NaN is skipped either way).
#[inline(always)]
fn scale_of(x: &[f32]) -> (f32, f32) {
    let mut lanes = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, v) in lanes.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    let amax = rest.iter().fold(lanes.iter().fold(0f32, |a, &v| a.max(v)), |a, v| a.max(v.abs()));
    (amax / 127.0, if amax > 0.0 { 127.0 / amax } else { 0.0 })
}

/// Quantize `x` (length `32 · out.len()`) into `out`, with the best code the CPU runs
/// ([`super::Isa::detect`]).
///
/// Cost: one pass over `x`; vectorized with AVX2 where the CPU has it (same results:
/// the rounding is `f32::round_ties_even` on every path). The tests' entry point (the
/// kernels call the per-ISA function they dispatched to).
#[cfg(test)]
pub fn quantize_32(x: &[f32], out: &mut [Q8x32]) {
    super::dispatch::quantize32_for(super::Isa::detect())(x, out)
}

/// Quantize `x` (length `256 · out.len()`) into `out`.
///
/// Cost: as [`quantize_32`].
#[cfg(test)]
pub fn quantize_256(x: &[f32], out: &mut [Q8x256]) {
    super::dispatch::quantize256_for(super::Isa::detect())(x, out)
}

// The same code compiled with AVX2 enabled: the compiler vectorizes the rounding
// (`round_ties_even` lowers to SSE4.1 `roundps`, exactly) instead of a call per value.
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_32_avx2(x: &[f32], out: &mut [Q8x32]) {
    quantize_32_portable(x, out)
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_256_avx2(x: &[f32], out: &mut [Q8x256]) {
    quantize_256_portable(x, out)
}

/// `r as i8` for a rounded `r`, written so that the compiler converts 8 at a time:
/// `as i8`'s saturation it did value by value (about five instructions each, most of
/// a 256-block's quantization). NaN gives 0 and the rest saturates, as `as i8`.
#[inline(always)]
fn to_code(r: f32) -> i8 {
    let r = if r.is_nan() { 0.0 } else { r.clamp(-128.0, 127.0) };
    // SAFETY: `r` is finite and inside i32's range.
    unsafe { r.to_int_unchecked::<i32>() as i8 }
}

/// The portable quantization (any CPU); also the body the AVX2 copy compiles.
#[inline(always)]
pub(super) fn quantize_32_portable(x: &[f32], out: &mut [Q8x32]) {
    debug_assert_eq!(x.len(), out.len() * 32);
    for (xs, o) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, id) = scale_of(xs);
        let mut sum = 0i32;
        for (q, v) in o.qs.iter_mut().zip(xs) {
            let c = i32::from(to_code((v * id).round_ties_even()));
            *q = c as i8;
            sum += c;
        }
        // Rounded as ggml rounds its Q8_0/Q8_1 blocks: an f32 scale is closer to `x`,
        // but moved a tiny random model's logits by 2% of their scale away from
        // llama.cpp's (`tiny_models_match_llama_cpp`).
        o.d = f16::from_f32(d).to_f32();
        o.s = o.d * sum as f32;
        o.s_min = f16::from_f32(d * sum as f32).to_f32();
    }
}

/// The portable quantization (any CPU); also the body the AVX2 copy compiles.
#[inline(always)]
pub(super) fn quantize_256_portable(x: &[f32], out: &mut [Q8x256]) {
    debug_assert_eq!(x.len(), out.len() * 256);
    for (xs, o) in x.chunks_exact(256).zip(out.iter_mut()) {
        let (_, id) = scale_of(xs);
        for (q, v) in o.qs.iter_mut().zip(xs) {
            *q = to_code((v * id).round_ties_even());
        }
        for (s, qs) in o.bsums.iter_mut().zip(o.qs.chunks_exact(16)) {
            *s = qs.iter().map(|&q| q as i16).sum();
        }
        for (s, pair) in o.sums32.iter_mut().zip(o.bsums.chunks_exact(2)) {
            *s = pair[0] + pair[1];
        }
        // `block_q8_K` keeps `1 / id` in f32.
        o.d = if id > 0.0 { 1.0 / id } else { 0.0 };
    }
}
