//! AVX2 + FMA + F16C dot products (x86-64), selected at run time by
//! [`super::dispatch`].
//!
//! Each kernel takes one weight row and `R` (1..=4) activation rows and decodes every
//! weight block once for all `R` rows, so prefill reads a weight row once per group of
//! four tokens. Integer products use `maddubs` (unsigned weight code × signed
//! activation code, pairwise into i16, which cannot saturate for codes below 64 or with
//! the sign trick for the signed codes of `Q8_0` and the table types IQ4_NL, IQ4_XS and
//! MXFP4, whose nibbles are looked up with `pshufb`), then `madd` into i32 and one FMA per block and row.
//!
//! The F16/BF16 prefill kernels ([`widen_transposed`], [`panel_tile`]; see
//! [`super::float_tiles_path`]) widen 8 weight rows at a time to f32 micro-panels once
//! per call and multiply 6 activation rows × 16 weight rows per register tile.
//!
//! The tile kernels ([`tile_rows`] for the 32-weight types, [`tile_rows_256`] for
//! IQ4_XS and the k-quants) run the 16-row tiles of [`super::tiles`] as two 8-row
//! halves; their integer sums and float steps equal the AVX-512 kernels', so an output
//! has the same bits on either instruction set.
//!
//! # Safety
//! Every function here requires the CPU to support `avx2`, `fma` and `f16c`; the
//! dispatcher checks that once. Slice lengths are checked by the safe wrappers at the
//! bottom of this file.

use std::arch::x86_64::*;

use super::activation::{Q8x256, Q8x32};
use super::formats::{
    e8m0_half, float_at, iq4xs_scale, q2k_scale_min, q3k_scale_bytes, scale_min_k4, WeightType, FP4_VALUES, IQ4_VALUES,
};
use super::tiles::{TileJob, T_IQ4NL, T_MXFP4, T_Q2K, T_Q3K, T_Q4K, T_Q4_0, T_Q4_1, T_Q5K, T_Q5_0, T_Q5_1, T_Q8_0};

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 16 bytes of nibbles → 32 codes: low nibbles first, then high nibbles.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4))
}

/// A 16-entry `i8` table in both 128-bit lanes, for `_mm256_shuffle_epi8` lookups of
/// nibble codes (IQ4_NL, IQ4_XS, MXFP4).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn table16(values: &[i8; 16]) -> __m256i {
    _mm256_broadcastsi128_si256(_mm_loadu_si128(values.as_ptr() as *const __m128i))
}

/// Bit `i` of `bits` → byte `i` set to `0xFF` (else 0).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bits_to_bytes(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let b = _mm256_shuffle_epi8(v, shuf);
    let m = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(b, m), m)
}

/// Dot products of a 32-weight-type row with `R` rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32<const TY: u8, const R: usize>(w: &[u8], xs: &[&[Q8x32]], out: &mut [f32]) {
    let bb = match TY {
        T_Q4_0 | T_IQ4NL => 18,
        T_Q4_1 => 20,
        T_Q5_0 => 22,
        T_Q5_1 => 24,
        T_MXFP4 => 17,
        _ => 34,
    };
    // Signed codes (Q8_0 and the table types) take the sign trick below.
    let signed = matches!(TY, T_Q8_0 | T_IQ4NL | T_MXFP4);
    let table = match TY {
        T_MXFP4 => table16(&FP4_VALUES),
        _ => table16(&IQ4_VALUES),
    };
    let nb = w.len() / bb;
    let ones = _mm256_set1_epi16(1);
    // Two accumulator sets, for even and odd blocks: with one, every block's FMA waits
    // for the previous one's (4-cycle latency), which bounds decode (R = 1).
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
    let (mut corr0, mut corr1) = ([0f32; R], [0f32; R]);
    let mut x = [std::ptr::null::<Q8x32>(); R];
    for r in 0..R {
        x[r] = xs.get_unchecked(r).as_ptr();
    }
    macro_rules! block {
        ($i:expr, $acc:ident, $corr:ident) => {{
            let b = w.as_ptr().add($i * bb);
            let d = if TY == T_MXFP4 { e8m0_half(*b) } else { f16_at(b) };
            let (codes, m) = match TY {
                T_IQ4NL => (_mm256_shuffle_epi8(table, nibbles32(b.add(2))), 0.0),
                T_MXFP4 => (_mm256_shuffle_epi8(table, nibbles32(b.add(1))), 0.0),
                T_Q4_0 => (nibbles32(b.add(2)), -8.0 * d),
                T_Q4_1 => (nibbles32(b.add(4)), f16_at(b.add(2))),
                T_Q5_0 => {
                    let qh = std::ptr::read_unaligned(b.add(2) as *const u32);
                    let hb = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
                    (_mm256_or_si256(nibbles32(b.add(6)), hb), -16.0 * d)
                }
                T_Q5_1 => {
                    let qh = std::ptr::read_unaligned(b.add(4) as *const u32);
                    let hb = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
                    (_mm256_or_si256(nibbles32(b.add(8)), hb), f16_at(b.add(2)))
                }
                _ => (_mm256_loadu_si256(b.add(2) as *const __m256i), 0.0),
            };
            let abs = if signed { _mm256_sign_epi8(codes, codes) } else { codes };
            for r in 0..R {
                let a = &*x[r].add($i);
                let q = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
                let q = if signed { _mm256_sign_epi8(q, codes) } else { q };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(abs, q), ones);
                $acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(p), $acc[r]);
                if !signed {
                    $corr[r] += m * if TY == T_Q4_1 || TY == T_Q5_1 { a.s_min } else { a.s };
                }
            }
        }};
    }
    let mut i = 0;
    while i + 1 < nb {
        block!(i, acc0, corr0);
        block!(i + 1, acc1, corr1);
        i += 2;
    }
    if i < nb {
        block!(i, acc0, corr0);
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) = hsum_ps(_mm256_add_ps(acc0[r], acc1[r])) + corr0[r] + corr1[r];
    }
}

/// Dot products of a Q4_K / Q5_K row with `R` rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q45k<const TY: u8, const R: usize>(w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let bb = if TY == T_Q5K { 176 } else { 144 };
    let qs_at = if TY == T_Q5K { 48 } else { 16 };
    let nb = w.len() / bb;
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut accm = [_mm256_setzero_ps(); R];
    let mut x = [std::ptr::null::<Q8x256>(); R];
    for r in 0..R {
        x[r] = xs.get_unchecked(r).as_ptr();
    }
    for i in 0..nb {
        let b = w.as_ptr().add(i * bb);
        let (d, dmin) = (f16_at(b), f16_at(b.add(2)));
        let packed = std::slice::from_raw_parts(b.add(4), 12);
        let mut sc = [0i16; 8];
        let mut mins = [0i16; 16];
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, packed);
            sc[j] = s as i16;
            mins[2 * j] = m as i16;
            mins[2 * j + 1] = m as i16;
        }
        let mins = _mm256_loadu_si256(mins.as_ptr() as *const __m256i);
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let a = &*x[r].add(i);
            let bs = _mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i);
            let summ = _mm256_madd_epi16(bs, mins);
            accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * a.d), _mm256_cvtepi32_ps(summ), accm[r]);
        }
        let qh = if TY == T_Q5K { _mm256_loadu_si256(b.add(16) as *const __m256i) } else { _mm256_setzero_si256() };
        for j in 0..4 {
            let q = _mm256_loadu_si256(b.add(qs_at + 32 * j) as *const __m256i);
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if TY == T_Q5K {
                let s0 = _mm_cvtsi32_si128(2 * j as i32);
                let s1 = _mm_cvtsi32_si128(2 * j as i32 + 1);
                let h0 = _mm256_and_si256(_mm256_srl_epi16(qh, s0), one);
                let h1 = _mm256_and_si256(_mm256_srl_epi16(qh, s1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
            }
            let s_lo = _mm256_set1_epi16(sc[2 * j]);
            let s_hi = _mm256_set1_epi16(sc[2 * j + 1]);
            for r in 0..R {
                let a = &*x[r].add(i);
                let xl = _mm256_loadu_si256(a.qs.as_ptr().add(64 * j) as *const __m256i);
                let xh = _mm256_loadu_si256(a.qs.as_ptr().add(64 * j + 32) as *const __m256i);
                let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), s_lo);
                let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), s_hi);
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(pl, ph));
            }
        }
        for r in 0..R {
            let a = &*x[r].add(i);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) = hsum_ps(acc[r]) - hsum_ps(accm[r]);
    }
}

/// Dot products of a Q6_K row with `R` rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6k<const R: usize>(w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let nb = w.len() / 210;
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut x = [std::ptr::null::<Q8x256>(); R];
    for r in 0..R {
        x[r] = xs.get_unchecked(r).as_ptr();
    }
    for i in 0..nb {
        let b = w.as_ptr().add(i * 210);
        let d = f16_at(b.add(208));
        let scales = b.add(192) as *const i8;
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(scales as *const __m128i));
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            // The codes are stored +32: subtract 32 · Σ_g sc[g]·bsum[g].
            let a = &*x[r].add(i);
            let bs = _mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i);
            sumi[r] = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
        }
        for half in 0..2 {
            let ql0 = _mm256_loadu_si256(b.add(64 * half) as *const __m256i);
            let ql1 = _mm256_loadu_si256(b.add(64 * half + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.add(128 + 32 * half) as *const __m256i);
            for part in 0..4 {
                let (low, shift) = match part {
                    0 => (_mm256_and_si256(ql0, m4), 0),
                    1 => (_mm256_and_si256(ql1, m4), 2),
                    2 => (_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), 4),
                    _ => (_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), 6),
                };
                let high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), m2);
                let q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                let g = 8 * half + 2 * part;
                let s =
                    _mm256_set_m128i(_mm_set1_epi16(*scales.add(g + 1) as i16), _mm_set1_epi16(*scales.add(g) as i16));
                for r in 0..R {
                    let a = &*x[r].add(i);
                    let xv = _mm256_loadu_si256(a.qs.as_ptr().add(128 * half + 32 * part) as *const __m256i);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), s);
                    sumi[r] = _mm256_add_epi32(sumi[r], p);
                }
            }
        }
        for r in 0..R {
            let a = &*x[r].add(i);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) = hsum_ps(acc[r]);
    }
}

/// Dot products of an IQ4_XS row with `R` rows: per 32 weights, table lookup of the
/// nibbles, the sign trick, and the sub-block's 6-bit scale in the `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq4xs<const R: usize>(w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let nb = w.len() / 136;
    let table = table16(&IQ4_VALUES);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut x = [std::ptr::null::<Q8x256>(); R];
    for r in 0..R {
        x[r] = xs.get_unchecked(r).as_ptr();
    }
    for i in 0..nb {
        let b = w.as_ptr().add(i * 136);
        let block = std::slice::from_raw_parts(b, 136);
        let d = f16_at(b);
        let mut sumi = [_mm256_setzero_si256(); R];
        for ib in 0..8 {
            let codes = _mm256_shuffle_epi8(table, nibbles32(b.add(8 + 16 * ib)));
            let abs = _mm256_sign_epi8(codes, codes);
            let s = _mm256_set1_epi16(iq4xs_scale(block, ib) as i16);
            for r in 0..R {
                let a = &*x[r].add(i);
                let q = _mm256_loadu_si256(a.qs.as_ptr().add(32 * ib) as *const __m256i);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(abs, _mm256_sign_epi8(q, codes)), s);
                sumi[r] = _mm256_add_epi32(sumi[r], p);
            }
        }
        for r in 0..R {
            let a = &*x[r].add(i);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) = hsum_ps(acc[r]);
    }
}

/// Dot products of a Q2_K (`TY = T_Q2K`) or Q3_K row with `R` rows. Both are
/// 2-bit codes in 32-byte runs, four 16-weight groups per run at shifts 0, 2, 4, 6;
/// Q3_K adds a high bit, read here as `+4` on an unsigned code whose `-4` is a
/// per-group "min" of `4·scale` (so both take `maddubs` on unsigned codes, the scales
/// in a `madd`, and the mins against the activations' per-16 sums).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q23k<const TY: u8, const R: usize>(w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let bb = if TY == T_Q2K { 84 } else { 110 };
    let nb = w.len() / bb;
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let mut acc = [_mm256_setzero_ps(); R];
    let x: [*const Q8x256; R] = std::array::from_fn(|r| xs[r].as_ptr());
    for i in 0..nb {
        let b = &w[i * bb..(i + 1) * bb];
        let (mut sc, mut mn) = ([0i16; 16], [0i16; 16]);
        let (d, dmin, qs) = if TY == T_Q2K {
            for g in 0..16 {
                let (s, m) = q2k_scale_min(b, g);
                (sc[g], mn[g]) = (i16::from(s), i16::from(m));
            }
            (f16_at(b.as_ptr().add(80)), f16_at(b.as_ptr().add(82)), b.as_ptr().add(16))
        } else {
            let raw = q3k_scale_bytes(&b[96..108]);
            let s = _mm256_sub_epi16(
                _mm256_cvtepu8_epi16(_mm_loadu_si128(raw.as_ptr() as *const __m128i)),
                _mm256_set1_epi16(32),
            );
            _mm256_storeu_si256(sc.as_mut_ptr() as *mut __m256i, s);
            _mm256_storeu_si256(mn.as_mut_ptr() as *mut __m256i, _mm256_slli_epi16::<2>(s));
            let d = f16_at(b.as_ptr().add(108));
            (d, d, b.as_ptr().add(32))
        };
        let high = if TY == T_Q3K { _mm256_loadu_si256(b.as_ptr() as *const __m256i) } else { _mm256_setzero_si256() };
        let mins = _mm256_loadu_si256(mn.as_ptr() as *const __m256i);
        let mut sumi = [_mm256_setzero_si256(); R];
        for h in 0..2 {
            let q = _mm256_loadu_si256(qs.add(32 * h) as *const __m256i);
            for j in 0..4 {
                let mut codes = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j as i32)), m3);
                if TY == T_Q3K {
                    let bit = _mm256_set1_epi8((1u8 << (4 * h + j)) as i8);
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(high, bit), bit);
                    codes = _mm256_or_si256(codes, _mm256_and_si256(set, four));
                }
                let g = 8 * h + 2 * j;
                let scales = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                for r in 0..R {
                    let a = (*x[r].add(i)).qs.as_ptr().add(128 * h + 32 * j);
                    let p = _mm256_maddubs_epi16(codes, _mm256_loadu_si256(a as *const __m256i));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, scales));
                }
            }
        }
        for r in 0..R {
            let a = &*x[r].add(i);
            let summ = _mm256_madd_epi16(_mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i), mins);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-a.d * dmin), _mm256_cvtepi32_ps(summ), acc[r]);
        }
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) = hsum_ps(acc[r]);
    }
}

/// 8 F16 (`BF = false`) or BF16 (`BF = true`) weights at `p` as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen<const BF: bool>(p: *const u8) -> __m256 {
    let raw = _mm_loadu_si128(p as *const __m128i);
    if BF {
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16))
    } else {
        _mm256_cvtph_ps(raw)
    }
}

/// Dot products of `W` rows of F16 (`BF = false`) or BF16 (`BF = true`) weights with
/// `R` f32 rows, `out[l · R + r] = ws[l] · xs[r]`: 8 weights widened to f32 per step
/// (F16C's `vcvtph2ps`, or a 16-bit shift for BF16), one FMA per pair; four
/// independent sums per pair for one or two activation rows, two for more (the FMA
/// latency, not the loads, bounds a single chain). A pair's sum does not depend on `W`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_floats<const BF: bool, const W: usize, const R: usize>(ws: [&[u8]; W], xs: &[&[f32]], out: &mut [f32]) {
    let k = ws[0].len() / 2;
    let unroll = if R <= 2 { 4 } else { 2 };
    let ahead = super::prefetch_float_rows();
    let mut acc = [[[_mm256_setzero_ps(); 4]; R]; W];
    let x: [*const f32; R] = std::array::from_fn(|r| xs[r].as_ptr());
    let w: [*const u8; W] = std::array::from_fn(|l| ws[l].as_ptr());
    let mut i = 0;
    while i + 8 * unroll <= k {
        // The step's weight bytes (one cache line per row, or half of one for 3–4
        // activation rows), `PREFETCH_BYTES` ahead, where that helps
        // (`super::prefetch_float_rows`).
        if ahead {
            for p in w {
                super::prefetch_ahead(p.add(2 * i), 2 * 8 * unroll);
            }
        }
        for u in 0..unroll {
            for l in 0..W {
                let wv = widen::<BF>(w[l].add(2 * (i + 8 * u)));
                for r in 0..R {
                    acc[l][r][u] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r].add(i + 8 * u)), acc[l][r][u]);
                }
            }
        }
        i += 8 * unroll;
    }
    while i + 8 <= k {
        for l in 0..W {
            let wv = widen::<BF>(w[l].add(2 * i));
            for r in 0..R {
                acc[l][r][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r].add(i)), acc[l][r][0]);
            }
        }
        i += 8;
    }
    let ty = if BF { WeightType::BF16 } else { WeightType::F16 };
    for l in 0..W {
        for r in 0..R {
            let a = &acc[l][r];
            let s = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
            let tail: f32 = (i..k).map(|j| float_at(ty, ws[l], j) * *x[r].add(j)).sum();
            *out.get_unchecked_mut(l * R + r) = hsum_ps(s) + tail;
        }
    }
}

macro_rules! by_rows {
    ($f:ident [$($p:tt),*] ($w:expr, $xs:expr, $out:expr)) => {
        match $xs.len() {
            1 => $f::<$($p,)* 1>($w, $xs, $out),
            2 => $f::<$($p,)* 2>($w, $xs, $out),
            3 => $f::<$($p,)* 3>($w, $xs, $out),
            _ => $f::<$($p,)* 4>($w, $xs, $out),
        }
    };
}

/// The row kernels' argument checks (see their `# Panics`).
pub(super) fn check<A>(ty: WeightType, w: &[u8], xs: &[&[A]], out: &[f32]) {
    let nb = w.len() / ty.block_bytes();
    assert!(w.len().is_multiple_of(ty.block_bytes()), "weight row is not whole blocks");
    assert!((1..=super::MAX_ROWS).contains(&xs.len()) && out.len() == xs.len(), "1..=4 rows with one output each");
    assert!(xs.iter().all(|x| x.len() >= nb), "activation row shorter than the weight row");
}

/// `out[r] = w · xs[r]` for a 32-weight type.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
///
/// # Panics
/// If `ty` is a 256-weight type, `w` is not whole blocks, an activation row is shorter
/// than `w`, or `xs`/`out` are not the same length in `1..=4`.
pub unsafe fn dot32_rows(ty: WeightType, w: &[u8], xs: &[&[Q8x32]], out: &mut [f32]) {
    check(ty, w, xs, out);
    match ty {
        WeightType::Q4_0 => by_rows!(dot32[T_Q4_0](w, xs, out)),
        WeightType::Q4_1 => by_rows!(dot32[T_Q4_1](w, xs, out)),
        WeightType::Q5_0 => by_rows!(dot32[T_Q5_0](w, xs, out)),
        WeightType::Q5_1 => by_rows!(dot32[T_Q5_1](w, xs, out)),
        WeightType::Q8_0 => by_rows!(dot32[T_Q8_0](w, xs, out)),
        WeightType::IQ4NL => by_rows!(dot32[T_IQ4NL](w, xs, out)),
        WeightType::MXFP4 => by_rows!(dot32[T_MXFP4](w, xs, out)),
        _ => panic!("{} is not a 32-weight type", ty.name()),
    }
}

/// `out[r] = w · xs[r]` for a 256-weight type.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
///
/// # Panics
/// As [`dot32_rows`], with a 32-weight `ty`.
pub unsafe fn dot256_rows(ty: WeightType, w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    check(ty, w, xs, out);
    match ty {
        WeightType::Q2K => by_rows!(dot_q23k[T_Q2K](w, xs, out)),
        WeightType::Q3K => by_rows!(dot_q23k[T_Q3K](w, xs, out)),
        WeightType::Q4K => by_rows!(dot_q45k[T_Q4K](w, xs, out)),
        WeightType::Q5K => by_rows!(dot_q45k[T_Q5K](w, xs, out)),
        WeightType::Q6K => by_rows!(dot_q6k [] (w, xs, out)),
        WeightType::IQ4XS => by_rows!(dot_iq4xs [] (w, xs, out)),
        _ => panic!("{} is not a 256-weight type", ty.name()),
    }
}

/// Dequantize a weight row into `out`: F16/BF16 rows 8 weights per instruction (the
/// portable conversion is one software half-float decode per weight, which made F16
/// prefill 2.7× slower than llama.cpp's), every other type by the reference code.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
///
/// # Panics
/// If `out` is shorter than the row's weights.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dequantize_row(ty: WeightType, row: &[u8], out: &mut [f32]) {
    let bf = match ty {
        WeightType::F16 => false,
        WeightType::BF16 => true,
        _ => return super::formats::dequantize_row(ty, row, out),
    };
    let k = row.len() / 2;
    assert!(out.len() >= k, "{} outputs for a row of {k}", out.len());
    let full = k / 8 * 8;
    for i in (0..full).step_by(8) {
        let v = if bf { widen::<true>(row.as_ptr().add(2 * i)) } else { widen::<false>(row.as_ptr().add(2 * i)) };
        _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
    }
    for i in full..k {
        out[i] = float_at(ty, row, i);
    }
}

/// `out[r] = w · xs[r]` for a row of F16 or BF16 weights and f32 activation rows.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
///
/// # Panics
/// If `ty` is not F16 or BF16, `w` has an odd length, an activation row is shorter
/// than `w`, or `xs`/`out` are not the same length in `1..=4`.
pub unsafe fn dot_floats_rows(ty: WeightType, w: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    check(ty, w, xs, out);
    let w = [w];
    match ty {
        WeightType::F16 => by_rows!(dot_floats[false, 1](w, xs, out)),
        WeightType::BF16 => by_rows!(dot_floats[true, 1](w, xs, out)),
        _ => panic!("{} is not a float type", ty.name()),
    }
}

/// Weight rows per call of [`dot_floats_lanes`] (and of the AVX-512 one).
pub const FLOAT_LANES: usize = 4;

/// The lane kernels' argument checks (see their `# Panics`): [`FLOAT_LANES`] rows of
/// one length and an output each, each row as [`check`] checks one; the rows as an
/// array.
pub(super) fn check_lanes<'a>(ty: WeightType, ws: &[&'a [u8]], x: &[f32], out: &[f32]) -> [&'a [u8]; FLOAT_LANES] {
    let rows: [&[u8]; FLOAT_LANES] = ws.try_into().expect("FLOAT_LANES weight rows");
    assert_eq!(out.len(), FLOAT_LANES, "an output per weight row");
    for w in rows {
        check(ty, w, &[x], &out[..1]);
        assert_eq!(w.len(), rows[0].len(), "weight rows of different lengths");
    }
    rows
}

/// `out[l] = ws[l] · x` for [`FLOAT_LANES`] rows of F16 or BF16 weights and one f32
/// activation row (decode), the rows in lockstep, each summed as [`dot_floats_rows`]
/// sums one row (the same bits): the AVX2 form of
/// [`super::avx512::dot_floats_lanes`], which says why.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
///
/// # Panics
/// If `ty` is not F16 or BF16, `ws` or `out` do not hold [`FLOAT_LANES`] rows, the rows
/// differ in length or have an odd one, or `x` is shorter than a row.
pub unsafe fn dot_floats_lanes(ty: WeightType, ws: &[&[u8]], x: &[f32], out: &mut [f32]) {
    let ws = check_lanes(ty, ws, x, out);
    match ty {
        WeightType::F16 => dot_floats::<false, FLOAT_LANES, 1>(ws, &[x], out),
        WeightType::BF16 => dot_floats::<true, FLOAT_LANES, 1>(ws, &[x], out),
        _ => panic!("{} is not a float type", ty.name()),
    }
}

/// One half-tile (8 weight rows, `half` of a 16-row tile laid out as in
/// [`super::tiles`]) against `R` activation rows: `out[r · ld + 8·half + j] = w_j · x_r`
/// for the rows `j` below `cols − 8·half`.
///
/// Per block and row: `maddubs` of each 4-code group with the row's 4 activation codes
/// (broadcast), summed in 16 bits while that cannot overflow (Q4: all 8 groups, codes ≤
/// 15; Q5: 4 groups, codes ≤ 31; Q8_0 through the sign trick: one group), `madd` to 32
/// bits, the offset taken back in integers, then the float steps of the AVX-512 kernel,
/// block by block: an output's value is the same for any `R`, and the same as on
/// AVX-512.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_kernel<const TY: u8, const R: usize, const H: usize>(job: &TileJob, half0: usize) {
    let TileJob { tile, acts, sums, blocks, out, ld, cols, .. } = *job;
    let super::tiles::BlockLayout { nibbles, fifth, has_m, scales_at, bytes: bb } = super::tiles::block_layout(TY);
    // Q8_0's codes go back to signed (the sign trick), so they take no offset here;
    // Q4_1/Q5_1 use `m`.
    let offset = match TY {
        T_Q4_0 => 8,
        T_Q5_0 => 16,
        _ => 0,
    };
    let m4 = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(0x10);
    let flip = _mm256_set1_epi8(-128);
    let ones = _mm256_set1_epi16(1);
    // Signed codes go through the sign trick, one `maddubs` per 16-bit sum: Q8_0's
    // (stored `q + 128`) and IQ4_NL's values (looked up from the nibbles).
    let signed = !nibbles || TY == T_IQ4NL;
    let iq4 = table16(&IQ4_VALUES);
    let x: [*const Q8x32; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [[_mm256_setzero_ps(); R]; H];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        for (h, y) in y.iter_mut().enumerate() {
            let half = half0 + h;
            if h == 0 {
                super::prefetch_part(R, blk, bb, 0, 1);
            }
            let mut codes = [_mm256_setzero_si256(); 8];
            if nibbles {
                for v in 0..4 {
                    let z = _mm256_loadu_si256(blk.add(64 * v + 32 * half) as *const __m256i);
                    codes[v] = _mm256_and_si256(z, m4);
                    codes[v + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(z), m4);
                }
            } else {
                for c in 0..8 {
                    // Back to signed codes for the sign trick.
                    codes[c] =
                        _mm256_xor_si256(_mm256_loadu_si256(blk.add(64 * c + 32 * half) as *const __m256i), flip);
                }
            }
            if fifth {
                for c in 0..8 {
                    let mask = std::ptr::read_unaligned(blk.add(256 + 8 * c) as *const u64);
                    let set = bits_to_bytes((mask >> (32 * half)) as u32);
                    codes[c] = _mm256_or_si256(codes[c], _mm256_and_si256(set, sixteen));
                }
            }
            if TY == T_IQ4NL {
                // The nibbles index IQ4_NL's signed values (the sign trick below, as Q8_0).
                for c in &mut codes {
                    *c = _mm256_shuffle_epi8(iq4, *c);
                }
            }
            let abs: [__m256i; 8] = std::array::from_fn(|c| if signed { _mm256_abs_epi8(codes[c]) } else { codes[c] });
            let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(scales_at + 16 * half) as *const __m128i));
            let m = if has_m {
                _mm256_cvtph_ps(_mm_loadu_si128(blk.add(scales_at + 32 + 16 * half) as *const __m128i))
            } else {
                d
            };
            for r in 0..R {
                let a = &*x[r].add(b);
                let q = a.qs.as_ptr() as *const i32;
                let xq = |c: usize| _mm256_set1_epi32(std::ptr::read_unaligned(q.add(c)));
                let acc = if signed {
                    let mut acc = _mm256_setzero_si256();
                    for c in 0..8 {
                        let p = _mm256_maddubs_epi16(abs[c], _mm256_sign_epi8(xq(c), codes[c]));
                        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
                    }
                    acc
                } else {
                    // 16-bit partial sums: at most 8 groups of codes ≤ 15, or 4 of ≤ 31.
                    let per = if fifth { 4 } else { 8 };
                    let mut acc = _mm256_setzero_si256();
                    for g in (0..8).step_by(per) {
                        let mut s = _mm256_maddubs_epi16(abs[g], xq(g));
                        for c in g + 1..g + per {
                            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(abs[c], xq(c)));
                        }
                        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s, ones));
                    }
                    acc
                };
                let acc = if offset != 0 {
                    _mm256_sub_epi32(acc, _mm256_set1_epi32(offset * *sums.get_unchecked(r * blocks + b)))
                } else {
                    acc
                };
                let t = _mm256_cvtepi32_ps(acc);
                y[r] = _mm256_fmadd_ps(d, _mm256_mul_ps(t, _mm256_set1_ps(a.d)), y[r]);
                if has_m {
                    y[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s_min), y[r]);
                }
            }
        }
    }
    store_halves(&y, out, ld, cols, half0);
}

/// Store half `half` (weight rows `8·half ..`) of a tile's outputs: `y[r]`'s lanes at
/// `out + r·ld + 8·half`, only the tile's real rows (`cols` in all).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn store_half<const R: usize>(y: &[__m256; R], out: *mut f32, ld: usize, cols: usize, half: usize) {
    let n = cols.saturating_sub(8 * half).min(8);
    for r in 0..R {
        let dst = out.add(r * ld + 8 * half);
        if n == 8 {
            _mm256_storeu_ps(dst, y[r]);
        } else {
            let mut tmp = [0f32; 8];
            _mm256_storeu_ps(tmp.as_mut_ptr(), y[r]);
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, n);
        }
    }
}

/// [`store_half`] for each of the `H` halves a kernel ran in one pass, from `half0` on.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn store_halves<const R: usize, const H: usize>(
    y: &[[__m256; R]; H],
    out: *mut f32,
    ld: usize,
    cols: usize,
    half0: usize,
) {
    for (h, y) in y.iter().enumerate() {
        store_half(y, out, ld, cols, half0 + h);
    }
}

/// One tile (layout in [`super::tiles`]) against the job's 1..=8 activation rows, four
/// at a time, each 8-row half of the tile in turn. Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
/// IQ4_NL (its values looked up from the nibbles, signed as Q8_0's).
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`; `job.out` must be valid for writes
/// of `job.cols` floats at `out + r·ld` for every activation row `r`.
///
/// # Panics
/// As [`TileJob::check`], and for a type without an AVX2 32-weight tile kernel.
pub unsafe fn tile_rows(ty: WeightType, job: &TileJob) {
    let rows = job.check(ty);
    macro_rules! run {
        ($t:expr, $sub:expr, $r:expr, $half:expr, $both:expr) => {
            match ($r, $both) {
                (1, true) => tile_kernel::<$t, 1, 2>($sub, $half),
                (2, true) => tile_kernel::<$t, 2, 2>($sub, $half),
                (1, _) => tile_kernel::<$t, 1, 1>($sub, $half),
                (2, _) => tile_kernel::<$t, 2, 1>($sub, $half),
                (3, _) => tile_kernel::<$t, 3, 1>($sub, $half),
                _ => tile_kernel::<$t, 4, 1>($sub, $half),
            }
        };
    }
    in_groups(job, rows, 1, |sub, r, half, both| match ty {
        WeightType::Q4_0 => run!(T_Q4_0, sub, r, half, both),
        WeightType::Q4_1 => run!(T_Q4_1, sub, r, half, both),
        WeightType::Q5_0 => run!(T_Q5_0, sub, r, half, both),
        WeightType::Q5_1 => run!(T_Q5_1, sub, r, half, both),
        WeightType::Q8_0 => run!(T_Q8_0, sub, r, half, both),
        WeightType::IQ4NL => run!(T_IQ4NL, sub, r, half, both),
        _ => panic!("{} has no AVX2 tile kernel", ty.name()),
    });
}

/// `kernel(sub, r, half, both)` for the job's `rows` activation rows four at a time
/// (`sub` the job narrowed to `r` of them, `sums_per` code sums per block each): with
/// one or two rows and a tile of more than 8 weight rows, both 8-row halves in one
/// pass (`both`, from `half` 0: each block's cache lines are read once, whole — at one
/// activation row, decode, the pass is bound by memory); otherwise each half in turn,
/// as four rows' accumulators of two halves would not fit the 16 registers.
///
/// # Safety
/// As the kernels': `job` checked ([`TileJob::check`]), its output valid for every row.
#[inline]
unsafe fn in_groups<A>(
    job: &TileJob<A>,
    rows: usize,
    sums_per: usize,
    mut kernel: impl FnMut(&TileJob<A>, usize, usize, bool),
) {
    let b = job.blocks;
    for g in (0..rows).step_by(4) {
        let r = (rows - g).min(4);
        let sub = TileJob {
            acts: &job.acts[g * b..(g + r) * b],
            sums: &job.sums[g * b * sums_per..(g + r) * b * sums_per],
            out: job.out.add(g * job.ld),
            ..*job
        };
        if r <= 2 && job.cols > 8 {
            kernel(&sub, r, 0, true);
        } else {
            for half in 0..job.cols.div_ceil(8) {
                kernel(&sub, r, half, false);
            }
        }
    }
}

/// The float step per block of the 256-weight tile kernels, on one 8-row half: as
/// AVX-512's (`y[r] −= (dmin ⊙ dₓ)·Σm[r]` when there are minimums, then `y[r] += (d ⊙
/// dₓ)·Σ[r]`), so an output has the same bits on either instruction set. `d_at`: the
/// half's 8 f16 `d`, its `dmin` 32 bytes on (after all 16 rows' `d`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn add_block<const R: usize>(
    y: &mut [__m256; R],
    d_at: *const u8,
    x: &[*const Q8x256; R],
    b: usize,
    total: &[__m256i; R],
    mins: Option<&[__m256i; R]>,
) {
    let d = _mm256_cvtph_ps(_mm_loadu_si128(d_at as *const __m128i));
    let dmin = mins.map(|_| _mm256_cvtph_ps(_mm_loadu_si128(d_at.add(32) as *const __m128i)));
    for r in 0..R {
        let dx = _mm256_set1_ps((*x[r].add(b)).d);
        if let (Some(mins), Some(dmin)) = (mins, dmin) {
            y[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(mins[r]), y[r]);
        }
        y[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(total[r]), y[r]);
    }
}

/// 8 rows' signed byte values (the low 8 bytes of `bytes`) as `i16` pairs, each lane
/// the row's value twice: `madd` with it multiplies both 16-bit partial sums of a lane
/// by the row's scale (or minimum) and adds them. Unsigned values below 128 (the
/// k-quants' 4- and 6-bit scales and minimums) read the same.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn twice(bytes: __m128i) -> __m256i {
    let v = _mm256_cvtepi8_epi32(bytes);
    _mm256_blend_epi16::<0xAA>(v, _mm256_slli_epi32::<16>(v))
}

/// The 8 bytes at `at` (one half's per-row values) for [`twice`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bytes8(at: *const u8) -> __m128i {
    _mm_loadl_epi64(at as *const __m128i)
}

/// Half `half` (8 weight rows) of a Q4_K or Q5_K tile (layout in [`super::tiles`])
/// against `R` activation rows of [`Q8x256`]: per 32-weight sub-block, 8 `maddubs` of
/// its codes (Q5_K: plus 16 where the fifth bit is set) with the row's codes
/// (broadcast), summed in 16 bits (Q4: all 8, codes ≤ 15; Q5: 4 at a time, codes ≤ 31:
/// no overflow), then `madd` with the rows' integer scales; the minimums, two
/// sub-blocks' per lane, against the activations' per-32 sums by `madd`; the block's
/// sums are AVX-512's (which sums its scaled sub-blocks in floats, exactly below 2²⁴),
/// and so is the float step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q45k_tile_kernel<const Q5: bool, const R: usize, const H: usize>(job: &TileJob<Q8x256>, half0: usize) {
    use super::tiles::Q45K_MASKS_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let scales_at = Q45K_MASKS_AT + if Q5 { 512 } else { 0 };
    let bb = scales_at + 256 + 64;
    let per = if Q5 { 4 } else { 8 };
    let (m4, sixteen) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [[_mm256_setzero_ps(); R]; H];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        for (h, y) in y.iter_mut().enumerate() {
            let half = half0 + h;
            let mut total = [_mm256_setzero_si256(); R];
            for s in 0..8 {
                if h == 0 {
                    super::prefetch_part(R, blk, bb, s, 8);
                }
                // Sub-block s: the low nibbles of run s / 2 when s is even, else the high.
                let codes: [__m256i; 8] = std::array::from_fn(|v| {
                    let z = _mm256_loadu_si256(blk.add(512 * (s / 2) + 64 * v + 32 * half) as *const __m256i);
                    let c = if s % 2 == 0 { z } else { _mm256_srli_epi16::<4>(z) };
                    let c = _mm256_and_si256(c, m4);
                    if Q5 {
                        let mask = std::ptr::read_unaligned(blk.add(Q45K_MASKS_AT + 64 * s + 8 * v) as *const u64);
                        let set = bits_to_bytes((mask >> (32 * half)) as u32);
                        _mm256_or_si256(c, _mm256_and_si256(set, sixteen))
                    } else {
                        c
                    }
                });
                let sc = twice(bytes8(blk.add(scales_at + 16 * s + 8 * half)));
                for r in 0..R {
                    let q = (*x[r].add(b)).qs.as_ptr().add(32 * s) as *const i32;
                    let xq = |v: usize| _mm256_set1_epi32(std::ptr::read_unaligned(q.add(v)));
                    for g in (0..8).step_by(per) {
                        let mut p = _mm256_maddubs_epi16(codes[g], xq(g));
                        for v in g + 1..g + per {
                            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(codes[v], xq(v)));
                        }
                        total[r] = _mm256_add_epi32(total[r], _mm256_madd_epi16(p, sc));
                    }
                }
            }
            // Two sub-blocks' minimums per `madd`, against the rows' per-32 sums.
            let mins = group_sums(&x, b, |a| &a.sums32, |s| bytes8(blk.add(scales_at + 128 + 16 * s + 8 * half)));
            add_block(y, blk.add(scales_at + 256 + 16 * half), &x, b, &total, Some(&mins));
        }
    }
    store_halves(&y, out, ld, cols, half0);
}

/// `total[r] += sc ⊙ Σ codes·qₓ` over 16-weight group `g` of block `b` of each
/// activation row `x[r]`, on one 8-row half of a Q3_K or Q6_K tile: the 4 code vectors
/// (unsigned) by `maddubs`, `PER` of them summed in 16 bits (Q6_K's codes ≤ 63: 2;
/// Q3_K's ≤ 7: all 4), then `madd` with `scales`, the 8 rows' signed scales (bytes),
/// each twice in a lane. Exact in 32-bit integers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn add_scaled_group<const R: usize, const PER: usize>(
    total: &mut [__m256i; R],
    codes: &[__m256i; 4],
    x: &[*const Q8x256; R],
    b: usize,
    g: usize,
    scales: __m128i,
) {
    let sc = twice(scales);
    for r in 0..R {
        let q = (*x[r].add(b)).qs.as_ptr().add(16 * g) as *const i32;
        let xq = |c: usize| _mm256_set1_epi32(std::ptr::read_unaligned(q.add(c)));
        for c0 in (0..4).step_by(PER) {
            let mut p = _mm256_maddubs_epi16(codes[c0], xq(c0));
            for c in c0 + 1..c0 + PER {
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(codes[c], xq(c)));
            }
            total[r] = _mm256_add_epi32(total[r], _mm256_madd_epi16(p, sc));
        }
    }
}

/// `Σ_g s_g · Σ qₓ(g)` over the `N` groups of block `b`, per activation row: the
/// rows' per-group values `group(g)` (8 signed bytes, or unsigned below 128: Q3_K's
/// and Q6_K's scales, for the offset of their unsigned codes; Q2_K's minimums, with
/// the per-16 sums `|a| &a.bsums`; Q4_K's and Q5_K's minimums, with the per-32 sums
/// `|a| &a.sums32`) against the activations' sums, two groups per `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn group_sums<const R: usize, const N: usize>(
    x: &[*const Q8x256; R],
    b: usize,
    sums: impl Fn(&Q8x256) -> &[i16; N],
    group: impl Fn(usize) -> __m128i,
) -> [__m256i; R] {
    let mut out = [_mm256_setzero_si256(); R];
    for g in (0..N).step_by(2) {
        // Lane j: (row j's value of group g, of group g + 1), against the two sums.
        let pair = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(group(g), group(g + 1)));
        for r in 0..R {
            let sums = sums(&*x[r].add(b)).as_ptr().add(g) as *const i32;
            out[r] =
                _mm256_add_epi32(out[r], _mm256_madd_epi16(pair, _mm256_set1_epi32(std::ptr::read_unaligned(sums))));
        }
    }
    out
}

/// `total[r] −= offset · Σ_g sc_g · Σ qₓ(g)` ([`group_sums`] of the scales): the
/// `offset` of unsigned codes (`q + offset`, a power of two) taken back once per block.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn take_offsets<const R: usize>(
    total: &mut [__m256i; R],
    x: &[*const Q8x256; R],
    b: usize,
    scales: impl Fn(usize) -> __m128i,
    offset: u32,
) {
    let offsets = group_sums(x, b, |a| &a.bsums, scales);
    let shift = _mm_cvtsi32_si128(offset.trailing_zeros() as i32);
    for r in 0..R {
        total[r] = _mm256_sub_epi32(total[r], _mm256_sll_epi32(offsets[r], shift));
    }
}

/// Half `half` (8 weight rows) of a Q2_K tile (layout in [`super::tiles`]) against `R`
/// activation rows of [`Q8x256`]: per 16-weight group, the 2-bit codes by 4 `maddubs`
/// summed in 16 bits, `madd` with the rows' 4-bit scales ([`add_scaled_group`]); the
/// 4-bit minimums against the activations' per-16 sums ([`group_sums`]). The integer
/// sums equal AVX-512's, and so does the float step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2k_tile_kernel<const R: usize, const H: usize>(job: &TileJob<Q8x256>, half0: usize) {
    use super::tiles::Q2K_SCALES_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = Q2K_SCALES_AT + 256 + 64;
    let m3 = _mm256_set1_epi8(3);
    let low4 = _mm_set1_epi8(0xF);
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [[_mm256_setzero_ps(); R]; H];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        for (h, y) in y.iter_mut().enumerate() {
            let half = half0 + h;
            // Group g's 8 bytes `sc | m << 4`.
            let bytes = |g: usize| bytes8(blk.add(Q2K_SCALES_AT + 16 * g + 8 * half));
            let mut total = [_mm256_setzero_si256(); R];
            for g in 0..16 {
                if h == 0 {
                    super::prefetch_part(R, blk, bb, g, 16);
                }
                let z = _mm256_loadu_si256(blk.add(64 * g + 32 * half) as *const __m256i);
                let codes = [
                    _mm256_and_si256(z, m3),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(z), m3),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(z), m3),
                    _mm256_and_si256(_mm256_srli_epi16::<6>(z), m3),
                ];
                add_scaled_group::<R, 4>(&mut total, &codes, &x, b, g, _mm_and_si128(bytes(g), low4));
            }
            let mins = group_sums(&x, b, |a| &a.bsums, |g| _mm_and_si128(_mm_srli_epi16::<4>(bytes(g)), low4));
            add_block(y, blk.add(Q2K_SCALES_AT + 256 + 16 * half), &x, b, &total, Some(&mins));
        }
    }
    store_halves(&y, out, ld, cols, half0);
}

/// Half `half` (8 weight rows) of a Q6_K tile (layout in [`super::tiles`]) against `R`
/// activation rows of [`Q8x256`]: per 16-weight group, the low nibbles joined to the
/// high two bits (unsigned `q + 32`, ≤ 63), 4 `maddubs` summed in pairs in 16 bits,
/// `madd` with the rows' signed integer scales ([`add_scaled_group`]); `32·Σ sc·Σ qₓ`
/// taken back at the end of the block from the activations' per-16 sums
/// ([`take_offsets`]). The integer sums equal AVX-512's, and
/// so does the float step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_tile_kernel<const R: usize, const H: usize>(job: &TileJob<Q8x256>, half0: usize) {
    use super::tiles::{Q6K_HIGH_AT, Q6K_SCALES_AT};
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = Q6K_SCALES_AT + 256 + 32;
    let (m4, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [[_mm256_setzero_ps(); R]; H];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        for (h, y) in y.iter_mut().enumerate() {
            let half = half0 + h;
            let mut total = [_mm256_setzero_si256(); R];
            let scales = |g: usize| bytes8(blk.add(Q6K_SCALES_AT + 16 * g + 8 * half));
            for g in 0..16 {
                if h == 0 {
                    super::prefetch_part(R, blk, bb, g, 16);
                }
                let high = _mm256_loadu_si256(blk.add(Q6K_HIGH_AT + 64 * g + 32 * half) as *const __m256i);
                // Code vector c's high bits (bits 2c, 2c + 1 of each byte) moved to 4, 5.
                let up =
                    [_mm256_slli_epi16::<4>(high), _mm256_slli_epi16::<2>(high), high, _mm256_srli_epi16::<2>(high)];
                let codes: [__m256i; 4] = std::array::from_fn(|c| {
                    let z = _mm256_loadu_si256(blk.add(256 * (g / 2) + 64 * c + 32 * half) as *const __m256i);
                    let low = if g % 2 == 0 { z } else { _mm256_srli_epi16::<4>(z) };
                    _mm256_or_si256(_mm256_and_si256(low, m4), _mm256_and_si256(up[c], m30))
                });
                add_scaled_group::<R, 2>(&mut total, &codes, &x, b, g, scales(g));
            }
            take_offsets(&mut total, &x, b, scales, 32);
            add_block(y, blk.add(Q6K_SCALES_AT + 256 + 16 * half), &x, b, &total, None);
        }
    }
    store_halves(&y, out, ld, cols, half0);
}

/// Half `half` (8 weight rows) of a Q3_K tile (layout in [`super::tiles`]) against `R`
/// activation rows of [`Q8x256`]: per 16-weight group, the 2-bit codes plus 4 where the
/// third bit is set (unsigned `q + 4`, ≤ 7), 4 `maddubs` summed in 16 bits, `madd` with
/// the rows' signed scales; `4·Σ sc·Σ qₓ` taken back at the end of the block from the
/// activations' per-16 sums, as in [`q6k_tile_kernel`]. The integer sums equal
/// AVX-512's, and so does the float step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3k_tile_kernel<const R: usize, const H: usize>(job: &TileJob<Q8x256>, half0: usize) {
    use super::tiles::{Q3K_MASKS_AT, Q3K_SCALES_AT};
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = Q3K_SCALES_AT + 256 + 32;
    let (m3, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
    let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
    // Code vector c's mask bytes are bytes 8c + 4·half .. + 4 of the group's 32: the
    // first two spread over lane 0's 16 bytes, the last two over lane 1's (byte i of
    // the result holds bit i of the 32; `bits_to_bytes` from a vector, no scalar load).
    let spread: [[__m256i; 2]; H] = std::array::from_fn(|h| {
        std::array::from_fn(|odd| {
            let at = (8 * odd + 4 * (half0 + h)) as i64;
            let rep = |k: i64| (at + k) * 0x0101010101010101;
            _mm256_set_epi64x(rep(3), rep(2), rep(1), rep(0))
        })
    });
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [[_mm256_setzero_ps(); R]; H];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        for (h, y) in y.iter_mut().enumerate() {
            let half = half0 + h;
            let mut total = [_mm256_setzero_si256(); R];
            let scales = |g: usize| bytes8(blk.add(Q3K_SCALES_AT + 16 * g + 8 * half));
            for g in 0..16 {
                if h == 0 {
                    super::prefetch_part(R, blk, bb, g, 16);
                }
                let z = _mm256_loadu_si256(blk.add(64 * g + 32 * half) as *const __m256i);
                let masks = _mm256_loadu_si256(blk.add(Q3K_MASKS_AT + 32 * g) as *const __m256i);
                // Both lanes the masks of codes 0 and 1, or of codes 2 and 3.
                let pairs =
                    [_mm256_permute2x128_si256::<0x00>(masks, masks), _mm256_permute2x128_si256::<0x11>(masks, masks)];
                let codes: [__m256i; 4] = std::array::from_fn(|c| {
                    let low = _mm256_and_si256(_mm256_srl_epi16(z, _mm_cvtsi32_si128(2 * c as i32)), m3);
                    let spread = _mm256_shuffle_epi8(pairs[c / 2], spread[h][c % 2]);
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
                    _mm256_or_si256(low, _mm256_and_si256(set, four))
                });
                add_scaled_group::<R, 4>(&mut total, &codes, &x, b, g, scales(g));
            }
            take_offsets(&mut total, &x, b, scales, 4);
            add_block(y, blk.add(Q3K_SCALES_AT + 256 + 16 * half), &x, b, &total, None);
        }
    }
    store_halves(&y, out, ld, cols, half0);
}

/// Half `half` (8 weight rows) of an IQ4_XS tile (layout in [`super::tiles`]) against
/// `R` activation rows of [`Q8x256`]: per 32-weight sub-block, IQ4_NL's signed values
/// looked up from the nibbles, one `maddubs` per code vector through the sign trick
/// (two products of at most 127 · 127 per 16 bits), `madd` with the rows' integer
/// scales `ls − 32`, summed over the block in integers; the sums equal AVX-512's, and
/// so does the float step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4xs_tile_kernel<const R: usize, const H: usize>(job: &TileJob<Q8x256>, half0: usize) {
    use super::tiles::IQ4XS_SCALES_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = IQ4XS_SCALES_AT + 128 + 32;
    let m4 = _mm256_set1_epi8(0x0F);
    let table = table16(&IQ4_VALUES);
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [[_mm256_setzero_ps(); R]; H];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        for (h, y) in y.iter_mut().enumerate() {
            let half = half0 + h;
            let mut total = [_mm256_setzero_si256(); R];
            for s in 0..8 {
                if h == 0 {
                    super::prefetch_part(R, blk, bb, s, 8);
                }
                let mut codes = [_mm256_setzero_si256(); 8];
                for v in 0..4 {
                    let z = _mm256_loadu_si256(blk.add(256 * s + 64 * v + 32 * half) as *const __m256i);
                    codes[v] = _mm256_shuffle_epi8(table, _mm256_and_si256(z, m4));
                    codes[v + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(z), m4));
                }
                let abs: [__m256i; 8] = std::array::from_fn(|c| _mm256_abs_epi8(codes[c]));
                let ls = twice(bytes8(blk.add(IQ4XS_SCALES_AT + 16 * s + 8 * half)));
                for r in 0..R {
                    let q = (*x[r].add(b)).qs.as_ptr().add(32 * s) as *const i32;
                    for c in 0..8 {
                        let xq = _mm256_set1_epi32(std::ptr::read_unaligned(q.add(c)));
                        let p = _mm256_maddubs_epi16(abs[c], _mm256_sign_epi8(xq, codes[c]));
                        total[r] = _mm256_add_epi32(total[r], _mm256_madd_epi16(p, ls));
                    }
                }
            }
            add_block(y, blk.add(IQ4XS_SCALES_AT + 128 + 16 * half), &x, b, &total, None);
        }
    }
    store_halves(&y, out, ld, cols, half0);
}

/// One tile of a 256-weight type (Q2_K … Q6_K, IQ4_XS; layout in [`super::tiles`]) against
/// the job's 1..=8 activation rows, four at a time, each 8-row half of the tile in turn.
///
/// # Safety
/// As [`tile_rows`].
///
/// # Panics
/// As [`TileJob::check`], and for a type without an AVX2 256-weight tile kernel.
pub unsafe fn tile_rows_256(ty: WeightType, job: &TileJob<Q8x256>) {
    let rows = job.check(ty);
    macro_rules! run {
        ($k:ident $(, $q5:expr)?; $sub:expr, $r:expr, $half:expr, $both:expr) => {
            match ($r, $both) {
                (1, true) => $k::<$($q5,)? 1, 2>($sub, $half),
                (2, true) => $k::<$($q5,)? 2, 2>($sub, $half),
                (1, _) => $k::<$($q5,)? 1, 1>($sub, $half),
                (2, _) => $k::<$($q5,)? 2, 1>($sub, $half),
                (3, _) => $k::<$($q5,)? 3, 1>($sub, $half),
                _ => $k::<$($q5,)? 4, 1>($sub, $half),
            }
        };
    }
    in_groups(job, rows, 0, |sub, r, half, both| match ty {
        WeightType::Q4K => run!(q45k_tile_kernel, false; sub, r, half, both),
        WeightType::Q5K => run!(q45k_tile_kernel, true; sub, r, half, both),
        WeightType::Q6K => run!(q6k_tile_kernel; sub, r, half, both),
        WeightType::IQ4XS => run!(iq4xs_tile_kernel; sub, r, half, both),
        WeightType::Q3K => run!(q3k_tile_kernel; sub, r, half, both),
        WeightType::Q2K => run!(q2k_tile_kernel; sub, r, half, both),
        _ => panic!("{} has no AVX2 256-weight tile kernel", ty.name()),
    });
}

/// Activation rows per AVX2 panel register tile ([`panel_tile`]): `PANEL_MR × 2`
/// accumulators (12 of the 16 registers), the micro-panel's two vectors and a
/// broadcast.
pub(super) const PANEL_MR: usize = 6;
/// Weight rows per AVX2 micro-panel ([`widen_transposed`]'s layout): two 8-wide
/// registers.
pub(super) const PANEL_NR: usize = 16;

/// Transpose 8 rows of 8 f32 values in registers: afterwards `r[c]` holds what was
/// column `c`. Three rounds of 8 shuffles (pairs of floats, pairs of pairs, then the
/// 128-bit halves).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn transpose8(r: &mut [__m256; 8]) {
    // Rows 2i, 2i+1 interleaved: in each half, columns (0, 1) then (2, 3) of both.
    let t: [__m256; 8] = std::array::from_fn(|q| {
        let (a, b) = (r[q / 2 * 2], r[q / 2 * 2 + 1]);
        if q % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // Rows 4g..4g+4: s[4g + c] holds column c of them in the low half, c + 4 in the high.
    let mut s = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        for h in 0..2 {
            let (a, b) = (t[4 * g + h], t[4 * g + 2 + h]);
            s[4 * g + 2 * h] = _mm256_shuffle_ps::<0x44>(a, b);
            s[4 * g + 2 * h + 1] = _mm256_shuffle_ps::<0xEE>(a, b);
        }
    }
    for c in 0..4 {
        r[c] = _mm256_permute2f128_ps::<0x20>(s[c], s[4 + c]);
        r[4 + c] = _mm256_permute2f128_ps::<0x31>(s[c], s[4 + c]);
    }
}

/// Values `k0..k0 + kc` of 8 F16 (`BF = false`) or BF16 (`BF = true`) weight rows,
/// widened to f32 and transposed: `out[kk · ld + r] = rows[r][k0 + kk]`, `0.0` for a
/// null row (past the matrix's last). 8 values per row per step (the last step copies
/// what is left through a zeroed buffer), one transpose per step ([`transpose8`]).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; each non-null `rows[r]` points at a row of at
/// least `k0 + kc` 16-bit values; `out + kk · ld` is valid for 8 floats for every
/// `kk < kc`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_transposed<const BF: bool>(
    rows: &[*const u8; 8],
    k0: usize,
    kc: usize,
    out: *mut f32,
    ld: usize,
) {
    for kb in (0..kc).step_by(8) {
        let len = 8.min(kc - kb);
        let mut r: [__m256; 8] = std::array::from_fn(|q| {
            if rows[q].is_null() {
                return _mm256_setzero_ps();
            }
            let at = rows[q].add(2 * (k0 + kb));
            let raw = if len == 8 {
                _mm_loadu_si128(at as *const __m128i)
            } else {
                let mut part = [0u8; 16];
                std::ptr::copy_nonoverlapping(at, part.as_mut_ptr(), 2 * len);
                _mm_loadu_si128(part.as_ptr() as *const __m128i)
            };
            if BF {
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(raw)))
            } else {
                _mm256_cvtph_ps(raw)
            }
        });
        transpose8(&mut r);
        for (q, v) in r.iter().enumerate().take(len) {
            _mm256_storeu_ps(out.add((kb + q) * ld), *v);
        }
    }
}

/// One AVX2 register tile of the panel GEMM: for `R` activation rows packed step-major
/// (`x[kk · R + i]`) and the 16 weight rows of a micro-panel (`panel[kk · 16 + j]`, [`widen_transposed`]),
/// `y[i · ldy + j] = Σ_kk x[i][kk] · panel[kk][j]` over `kk < kc` — added to what `y`
/// holds when `accumulate` — for the columns `j` whose bit is set in `cols`. Each step
/// broadcasts one activation per row against the panel's two vectors: `2R` FMAs, no
/// horizontal sums, and each output's products are added in `kk` order whatever `R`
/// is (the same order as [`super::avx512::panel_tile`], in 8-wide registers).
///
/// # Safety
/// The CPU supports AVX2 and FMA; `x` is valid for `R · kc` floats, `panel` for
/// `16 · kc`, and `y + i · ldy + j` for each column `j` in `cols`.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)] // a register kernel's operands: pointers and strides, as BLAS passes them
pub(super) unsafe fn panel_tile<const R: usize>(
    x: *const f32,
    panel: *const f32,
    kc: usize,
    y: *mut f32,
    ldy: usize,
    cols: u32,
    accumulate: bool,
) {
    let lanes: [i32; 16] = std::array::from_fn(|j| if cols >> j & 1 == 1 { -1 } else { 0 });
    let masks = [
        _mm256_loadu_si256(lanes.as_ptr() as *const __m256i),
        _mm256_loadu_si256(lanes.as_ptr().add(8) as *const __m256i),
    ];
    // A whole tile reads and writes `y` with plain moves: AMD's masked moves are
    // microcoded (a masked store costs a dozen cycles), which was an eighth of this
    // kernel's time at `kc` = 512 on Zen 3.
    let full = cols == 0xffff;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    if accumulate {
        for (i, row) in acc.iter_mut().enumerate() {
            for (v, a) in row.iter_mut().enumerate() {
                let at = y.add(i * ldy + 8 * v);
                *a = if full { _mm256_loadu_ps(at) } else { _mm256_maskload_ps(at, masks[v]) };
            }
        }
    }
    for kk in 0..kc {
        super::prefetch_ahead(panel.add(kk * PANEL_NR) as *const u8, 4 * PANEL_NR);
        let b0 = _mm256_loadu_ps(panel.add(kk * PANEL_NR));
        let b1 = _mm256_loadu_ps(panel.add(kk * PANEL_NR + 8));
        for (i, row) in acc.iter_mut().enumerate() {
            let a = _mm256_broadcast_ss(&*x.add(kk * R + i));
            row[0] = _mm256_fmadd_ps(a, b0, row[0]);
            row[1] = _mm256_fmadd_ps(a, b1, row[1]);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (v, a) in row.iter().enumerate() {
            let at = y.add(i * ldy + 8 * v);
            if full {
                _mm256_storeu_ps(at, *a);
            } else {
                _mm256_maskstore_ps(at, masks[v], *a);
            }
        }
    }
}
