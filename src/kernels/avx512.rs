//! AVX-512 (F, BW, VL, VNNI) kernels (x86-64), selected at run time by
//! [`super::dispatch`]; every other kernel of [`super::Isa::Avx512`] is the AVX2 one
//! ([`super::avx2`]), which every AVX-512 CPU also runs.
//!
//! - The **tile kernels** ([`tile_rows`] for the 32-weight types, [`tile_rows_256`]
//!   for IQ4_XS and the k-quants; layouts in [`super::tiles`]): 16 weight rows per
//!   512-bit register, one `vpdpbusd` per 4 codes of 16 rows against 4 activation
//!   codes broadcast, no horizontal sums, the same arithmetic for 1 activation row as
//!   for 128 — decode and prefill both take them.
//! - The F16/BF16 prefill kernels (see [`super::float_tiles_path`]): register tiles
//!   of 4 weight rows × 6 activation rows reading the weights in their 16 bits
//!   ([`f16_tile`], [`bf16_tile`]); or, on Intel ([`prefers_float_tiles`]), weight
//!   rows widened to f32 panels once per call ([`widen_transposed`]) against 12
//!   activation rows at a time ([`panel_tile`]).
//! - The F16/BF16 row kernel for small batches ([`dot_floats_rows`]): 16 weights
//!   widened to f32 per step against the f32 activations; for decode, the same sums
//!   over four weight rows in lockstep ([`dot_floats_lanes`]), one from each of four
//!   runs of rows, so a core reads four streams of weights at once.
//!
//! The integer sums of a block are exact, so a block's value differs from the AVX2
//! kernel's only in the f32 rounding of the per-block scale products (≤ 1 ulp per
//! block): the tests hold each ISA to the same exact reference.
//!
//! # Safety
//! Every function here requires the CPU to support `avx512f`, `avx512bw`, `avx512vl`,
//! `avx512vnni`, `avx2`, `fma` and `f16c`; [`super::Isa::detect`] checks that once.
//! Slice lengths are checked by the safe wrappers ([`super::tiles::TileJob::check`]).

use std::arch::x86_64::*;

use super::activation::{Q8x256, Q8x32};
use super::avx2::FLOAT_LANES;
use super::formats::WeightType;
use super::tiles::TileJob;
use super::tiles::{T_IQ4NL, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0};

/// `out[r] = w · xs[r]` for a row of F16 or BF16 weights and `R` f32 activation rows
/// (decode and small batches; prefill takes the register tiles): 16 weights widened
/// to f32 per step (`vcvtph2ps`, or BF16's 16-bit shift), one FMA per row, four
/// independent sums per row. Half the instructions per weight of the AVX2 kernel
/// ([`super::avx2::dot_floats_rows`]), whose BF16 widening (two instructions per 8
/// weights) held BF16 decode below llama.cpp's. A row's value does not depend on
/// how many rows share the call.
///
/// # Safety
/// As the module: the CPU supports AVX-512 F and F16C.
///
/// # Panics
/// If `ty` is not F16 or BF16, `w` has an odd length, an activation row is shorter
/// than `w`, or `xs`/`out` are not the same length in `1..=4`.
pub unsafe fn dot_floats_rows(ty: WeightType, w: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    super::avx2::check(ty, w, xs, out);
    let w = [w];
    match (is_bf16(ty), xs.len()) {
        (false, 1) => dot_floats::<false, 1, 1>(w, xs, out),
        (false, 2) => dot_floats::<false, 1, 2>(w, xs, out),
        (false, 3) => dot_floats::<false, 1, 3>(w, xs, out),
        (false, _) => dot_floats::<false, 1, 4>(w, xs, out),
        (true, 1) => dot_floats::<true, 1, 1>(w, xs, out),
        (true, 2) => dot_floats::<true, 1, 2>(w, xs, out),
        (true, 3) => dot_floats::<true, 1, 3>(w, xs, out),
        (true, _) => dot_floats::<true, 1, 4>(w, xs, out),
    }
}

/// `out[l] = ws[l] · x` for [`FLOAT_LANES`] rows of F16 or BF16 weights and one f32
/// activation row (decode): the rows advance in lockstep, each widened and multiplied
/// as [`dot_floats_rows`] does one row (the same bits), the activation loaded once per
/// step for all of them. A caller gives rows far apart — one from each of four runs of
/// rows — so the core streams from four places at once: more lines in flight than one
/// row's stream brings, where one stream cannot reach the memory's bandwidth
/// (`super::matmul`'s decode walk). Rows next to each other in lockstep did worse than
/// one at a time where a row is shorter than a page (the hardware prefetcher sees one
/// page read out of order).
///
/// # Safety
/// As the module: the CPU supports AVX-512 F and F16C.
///
/// # Panics
/// If `ty` is not F16 or BF16, `ws` or `out` do not hold [`FLOAT_LANES`] rows, the rows
/// differ in length or have an odd one, or `x` is shorter than a row.
pub unsafe fn dot_floats_lanes(ty: WeightType, ws: &[&[u8]], x: &[f32], out: &mut [f32]) {
    let ws = super::avx2::check_lanes(ty, ws, x, out);
    if is_bf16(ty) {
        dot_floats::<true, FLOAT_LANES, 1>(ws, &[x], out)
    } else {
        dot_floats::<false, FLOAT_LANES, 1>(ws, &[x], out)
    }
}

/// Whether a float type is BF16 (else F16).
///
/// # Panics
/// If `ty` is not F16 or BF16.
fn is_bf16(ty: WeightType) -> bool {
    match ty {
        WeightType::F16 => false,
        WeightType::BF16 => true,
        _ => panic!("{} is not a float type", ty.name()),
    }
}

/// 16 F16 (`BF = false`) or BF16 (`BF = true`) weights at `p` as f32.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn widen16<const BF: bool>(p: *const u8) -> __m512 {
    let raw = _mm256_loadu_si256(p as *const __m256i);
    if BF {
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))
    } else {
        _mm512_cvtph_ps(raw)
    }
}

/// `out[l · R + r] = ws[l] · xs[r]` for `W` weight rows and `R` activation rows, each
/// pair summed the same way whatever `W` and `R` are: four independent sums of 16
/// lanes over 64-value steps, a 16-value step into the first, the sums added in pairs
/// and reduced, the rest of the row in scalar.
#[target_feature(enable = "avx512f,f16c")]
unsafe fn dot_floats<const BF: bool, const W: usize, const R: usize>(ws: [&[u8]; W], xs: &[&[f32]], out: &mut [f32]) {
    const U: usize = 4;
    let ahead = super::prefetch_float_rows();
    let k = ws[0].len() / 2;
    let mut acc = [[[_mm512_setzero_ps(); U]; R]; W];
    let x: [*const f32; R] = std::array::from_fn(|r| xs[r].as_ptr());
    let w: [*const u8; W] = std::array::from_fn(|l| ws[l].as_ptr());
    let mut i = 0;
    while i + 16 * U <= k {
        // The step's weight bytes (two cache lines per row), `PREFETCH_BYTES` ahead,
        // where that helps (`super::prefetch_float_rows`).
        if ahead {
            for p in w {
                super::prefetch_ahead(p.add(2 * i), 2 * 16 * U);
            }
        }
        for u in 0..U {
            let xv: [__m512; R] = std::array::from_fn(|r| _mm512_loadu_ps(x[r].add(i + 16 * u)));
            for l in 0..W {
                let wv = widen16::<BF>(w[l].add(2 * (i + 16 * u)));
                for r in 0..R {
                    acc[l][r][u] = _mm512_fmadd_ps(wv, xv[r], acc[l][r][u]);
                }
            }
        }
        i += 16 * U;
    }
    while i + 16 <= k {
        for l in 0..W {
            let wv = widen16::<BF>(w[l].add(2 * i));
            for r in 0..R {
                acc[l][r][0] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[r].add(i)), acc[l][r][0]);
            }
        }
        i += 16;
    }
    let ty = if BF { WeightType::BF16 } else { WeightType::F16 };
    for l in 0..W {
        for r in 0..R {
            let a = &acc[l][r];
            let s = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
            let tail: f32 = (i..k).map(|j| super::formats::float_at(ty, ws[l], j) * *x[r].add(j)).sum();
            *out.get_unchecked_mut(l * R + r) = _mm512_reduce_add_ps(s) + tail;
        }
    }
}

/// Store each row's 16 tile outputs `y[r]` at `out + r·ld`, the first `cols` of them.
///
/// # Safety
/// As the tile kernels: `out + r·ld` valid for `cols` floats per row.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store_tile<const R: usize>(y: &[__m512; R], out: *mut f32, ld: usize, cols: usize) {
    let keep: __mmask16 = if cols >= 16 { 0xFFFF } else { (1u16 << cols) - 1 };
    for r in 0..R {
        _mm512_mask_storeu_ps(out.add(r * ld), keep, y[r]);
    }
}

/// `Σ_c codes[c] · x_r[c]` per 32-bit lane for each of the `R` activation rows: `N`
/// code vectors (unsigned bytes, 16 weight rows × 4 codes) against row `r`'s
/// activation codes at `q[r]`, 4 per vector (broadcast).
///
/// `vpdpbusd` takes several cycles before its sum can take the next product, so the
/// sums run as independent chains: with 3 or more rows the rows themselves — each code
/// vector against every row before the next vector (row after row, each row's `N` sums
/// were one chain: the Q4_K tile at 8 rows waited on it, and 1.5B-shape Q4_K_M prefill
/// on an Intel Xeon VM went from 0.92–0.95× to 1.20–1.39× of llama-bench's); with 1 or
/// 2 rows each row's sum is split in 4 or 2 chains. Integer sums are exact, so the
/// order does not change the result.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dot_rows<const N: usize, const R: usize>(codes: &[__m512i; N], q: [*const i32; R]) -> [__m512i; R] {
    let split = match R {
        1 => 4,
        2 => 2,
        _ => 1,
    };
    let mut acc = [[_mm512_setzero_si512(); R]; 4];
    for c in 0..N {
        for r in 0..R {
            let xq = _mm512_set1_epi32(std::ptr::read_unaligned(q[r].add(c)));
            acc[c % split][r] = _mm512_dpbusd_epi32(acc[c % split][r], codes[c], xq);
        }
    }
    for r in 0..R {
        for i in 1..split {
            acc[0][r] = _mm512_add_epi32(acc[0][r], acc[i][r]);
        }
    }
    acc[0]
}

/// An activation block's codes, for [`codes_at`].
trait Codes {
    fn codes(&self) -> *const i8;
}

impl Codes for Q8x32 {
    fn codes(&self) -> *const i8 {
        self.qs.as_ptr()
    }
}

impl Codes for Q8x256 {
    fn codes(&self) -> *const i8 {
        self.qs.as_ptr()
    }
}

/// Each activation row's codes of block `b` from code `at` on, as [`dot_rows`] reads them.
///
/// # Safety
/// Every `x[r]` points at `b + 1` or more blocks.
#[inline]
unsafe fn codes_at<A: Codes, const R: usize>(x: &[*const A; R], b: usize, at: usize) -> [*const i32; R] {
    std::array::from_fn(|r| (*x[r].add(b)).codes().add(at) as *const i32)
}

/// One tile (16 weight rows, layout in [`super::tiles`]) against `R` activation rows:
/// `out[r · ld + j] = w_j · x_r` for the tile's first `cols` rows `j`.
///
/// Per block: the code vectors (unpacked once for all `R` rows), 8 `vpdpbusd` per row
/// against the row's 4-byte groups broadcast, the offset taken back in integers
/// (`Σ q·qₓ − offset·Σ qₓ`, `sums` holding each activation block's `Σ qₓ`: exact, no
/// cancellation in floats), then `y += d ⊙ (dₓ·Σ)` (plus `m·sₓ` for Q4_1/Q5_1) per
/// row, in block order: an output's sum is the same for any `R`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_kernel<const TY: u8, const R: usize>(job: &TileJob) {
    let TileJob { tile, acts, sums, blocks, out, ld, cols, .. } = *job;
    let super::tiles::BlockLayout { nibbles, fifth, has_m, scales_at, bytes: bb } = super::tiles::block_layout(TY);
    let offset = match TY {
        T_Q4_0 => 8,
        T_Q5_0 => 16,
        T_Q8_0 | T_IQ4NL => 128,
        _ => 0,
    };
    let m4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(0x10);
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(super::tiles::IQ4_SHIFTED.as_ptr() as *const __m128i));
    let x: [*const Q8x32; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        super::prefetch_part(R, blk, bb, 0, 1);
        let mut codes = [_mm512_setzero_si512(); 8];
        if nibbles {
            for v in 0..4 {
                let z = _mm512_loadu_si512(blk.add(64 * v) as *const _);
                codes[v] = _mm512_and_si512(z, m4);
                codes[v + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(z), m4);
            }
        } else {
            for c in 0..8 {
                codes[c] = _mm512_loadu_si512(blk.add(64 * c) as *const _);
            }
        }
        if fifth {
            for c in 0..8 {
                let mask = std::ptr::read_unaligned(blk.add(256 + 8 * c) as *const u64);
                codes[c] = _mm512_mask_add_epi8(codes[c], mask, codes[c], sixteen);
            }
        }
        if TY == T_IQ4NL {
            for c in 0..8 {
                codes[c] = _mm512_shuffle_epi8(table, codes[c]);
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(scales_at) as *const __m256i));
        let m = if has_m { _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(scales_at + 32) as *const __m256i)) } else { d };
        let accs = dot_rows(&codes, codes_at(&x, b, 0));
        for r in 0..R {
            let a = &*x[r].add(b);
            let mut acc = accs[r];
            if offset != 0 {
                acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(offset * *sums.get_unchecked(r * blocks + b)));
            }
            let t = _mm512_cvtepi32_ps(acc);
            y[r] = _mm512_fmadd_ps(d, _mm512_mul_ps(t, _mm512_set1_ps(a.d)), y[r]);
            if has_m {
                y[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.s_min), y[r]);
            }
        }
    }
    store_tile(&y, out, ld, cols);
}

/// [`tile_kernel`] for `ty` and the job's 1..=8 activation rows.
///
/// # Safety
/// The CPU must support `avx512f`, `avx512bw`, `avx512vl`, `avx512vnni`, `avx2`,
/// `fma` and `f16c`; `job.out` must be valid for writes of `job.cols` floats at
/// `out + r·ld` for every activation row `r`.
///
/// # Panics
/// As [`TileJob::check`].
pub unsafe fn tile_rows(ty: WeightType, job: &TileJob) {
    let rows = job.check(ty);
    macro_rules! rows {
        ($t:expr) => {
            match rows {
                1 => tile_kernel::<$t, 1>(job),
                2 => tile_kernel::<$t, 2>(job),
                3 => tile_kernel::<$t, 3>(job),
                4 => tile_kernel::<$t, 4>(job),
                5 => tile_kernel::<$t, 5>(job),
                6 => tile_kernel::<$t, 6>(job),
                7 => tile_kernel::<$t, 7>(job),
                _ => tile_kernel::<$t, 8>(job),
            }
        };
    }
    match ty {
        WeightType::Q4_0 => rows!(T_Q4_0),
        WeightType::Q4_1 => rows!(T_Q4_1),
        WeightType::Q5_0 => rows!(T_Q5_0),
        WeightType::Q5_1 => rows!(T_Q5_1),
        WeightType::Q8_0 => rows!(T_Q8_0),
        WeightType::IQ4NL => rows!(T_IQ4NL),
        _ => unreachable!("TileJob::check admits no other type"),
    }
}

/// One IQ4_XS tile (16 weight rows, layout in [`super::tiles`]) against `R` activation
/// rows of [`Q8x256`]: per 256-weight block, each 32-weight sub-block's codes (IQ4_NL's
/// table, shifted to unsigned) go through 8 `vpdpbusd` per row, the shift comes back
/// in integers (`Σ q·qₓ − 128·Σ qₓ`, from the block's per-16 sums), the sum is multiplied by the rows' integer
/// sub-block scales and added up over the block; then one float step per block,
/// `y += (d ⊙ dₓ) · Σ`, as ggml's IQ4_XS kernel computes it. An output's sum is the
/// same for any `R`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn iq4xs_tile_kernel<const R: usize>(job: &TileJob<Q8x256>) {
    use super::tiles::IQ4XS_SCALES_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = IQ4XS_SCALES_AT + 128 + 32;
    let m4 = _mm512_set1_epi8(0x0F);
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(super::tiles::IQ4_SHIFTED.as_ptr() as *const __m128i));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let mut total = [_mm512_setzero_si512(); R];
        for s in 0..8 {
            super::prefetch_part(R, blk, bb, s, 8);
            let mut codes = [_mm512_setzero_si512(); 8];
            for v in 0..4 {
                let z = _mm512_loadu_si512(blk.add(256 * s + 64 * v) as *const _);
                codes[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(z, m4));
                codes[v + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(z), m4));
            }
            let ls = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(IQ4XS_SCALES_AT + 16 * s) as *const __m128i));
            let accs = dot_rows(&codes, codes_at(&x, b, 32 * s));
            for r in 0..R {
                let a = &*x[r].add(b);
                let shift = 128 * (i32::from(a.bsums[2 * s]) + i32::from(a.bsums[2 * s + 1]));
                let sub = _mm512_sub_epi32(accs[r], _mm512_set1_epi32(shift));
                total[r] = _mm512_add_epi32(total[r], _mm512_mullo_epi32(sub, ls));
            }
        }
        add_block(&mut y, blk.add(IQ4XS_SCALES_AT + 128), &x, b, &int_sums(&total), None);
    }
    store_tile(&y, out, ld, cols);
}

/// One Q2_K tile (16 weight rows, layout in [`super::tiles`]) against `R` activation
/// rows of [`Q8x256`]: per 16-weight group, 4 `vpdpbusd` of the 2-bit codes against
/// the row's activations, times the rows' integer group scales, and the groups'
/// minimums times the activations' per-16 sums, both summed in integers over the
/// block; then `y += (d ⊙ dₓ)·Σ − (dmin ⊙ dₓ)·Σm` per block, as ggml's Q2_K kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q2k_tile_kernel<const R: usize>(job: &TileJob<Q8x256>) {
    use super::tiles::Q2K_SCALES_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = Q2K_SCALES_AT + 256 + 64;
    let m3 = _mm512_set1_epi8(3);
    let low4 = _mm512_set1_epi32(0xF);
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let (mut sums, mut mins) = ([_mm512_setzero_si512(); R], [_mm512_setzero_si512(); R]);
        // The minimums times the activations' per-16 sums: each lane the row's two
        // minimums as i16.
        let mn = |g: usize| {
            let sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(Q2K_SCALES_AT + 16 * g) as *const __m128i));
            _mm512_srli_epi32::<4>(sm)
        };
        add_pair_sums(
            &mut mins,
            &x,
            b,
            |a| &a.bsums,
            |p| _mm512_or_si512(mn(2 * p), _mm512_slli_epi32::<16>(mn(2 * p + 1))),
        );
        for g in 0..16 {
            super::prefetch_part(R, blk, bb, g, 16);
            let z = _mm512_loadu_si512(blk.add(64 * g) as *const _);
            let codes = [
                _mm512_and_si512(z, m3),
                _mm512_and_si512(_mm512_srli_epi16::<2>(z), m3),
                _mm512_and_si512(_mm512_srli_epi16::<4>(z), m3),
                _mm512_and_si512(_mm512_srli_epi16::<6>(z), m3),
            ];
            let sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(Q2K_SCALES_AT + 16 * g) as *const __m128i));
            let sc = _mm512_and_si512(sm, low4);
            let accs = dot_rows(&codes, codes_at(&x, b, 16 * g));
            for r in 0..R {
                sums[r] = _mm512_add_epi32(sums[r], _mm512_mullo_epi32(accs[r], sc));
            }
        }
        add_block(&mut y, blk.add(Q2K_SCALES_AT + 256), &x, b, &int_sums(&sums), Some(&mins));
    }
    store_tile(&y, out, ld, cols);
}

/// The one float step per block of the 256-weight tile kernels: `y[r] += (d ⊙ dₓ)·Σ[r]`
/// for activation row `r`'s block `b`, `d` the 16 rows' f16 scales at `d_at`; with
/// minimums first `y[r] −= (dmin ⊙ dₓ)·Σm[r]`, `dmin` the 16 f16 right after `d`.
/// `total` is the block's integer sum as a float ([`int_sums`] of an integer one, or
/// summed in floats from exact products, as [`q45k_tile_kernel`] does).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn add_block<const R: usize>(
    y: &mut [__m512; R],
    d_at: *const u8,
    x: &[*const Q8x256; R],
    b: usize,
    total: &[__m512; R],
    mins: Option<&[__m512i; R]>,
) {
    let d = _mm512_cvtph_ps(_mm256_loadu_si256(d_at as *const __m256i));
    let dmin = mins.map(|_| _mm512_cvtph_ps(_mm256_loadu_si256(d_at.add(32) as *const __m256i)));
    for r in 0..R {
        let dx = _mm512_set1_ps((*x[r].add(b)).d);
        if let (Some(mins), Some(dmin)) = (mins, dmin) {
            y[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(mins[r]), y[r]);
        }
        y[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), total[r], y[r]);
    }
}

/// Integer sums as floats, for [`add_block`] (exact below 2²⁴).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn int_sums<const R: usize>(total: &[__m512i; R]) -> [__m512; R] {
    total.map(|t| _mm512_cvtepi32_ps(t))
}

/// `total[r] += sc ⊙ Σ codes·qₓ` over 16-weight group `g` of block `b` of each
/// activation row `x[r]`: one group of the Q3_K and Q6_K tiles (unsigned codes
/// `q + offset`, the signed scale bytes at `scales`, one per weight row), the scale
/// applied in floats as [`q45k_tile_kernel`] does (each product an integer below 2²⁴:
/// Q6_K's at most 16 · 63 · 127 · 128; their sum over the block exact below 2²⁴); the
/// offset is taken back once per block by [`take_offsets`], in integers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn add_scaled_group<const R: usize>(
    total: &mut [__m512; R],
    codes: &[__m512i; 4],
    x: &[*const Q8x256; R],
    b: usize,
    g: usize,
    scales: *const u8,
) {
    let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(scales as *const __m128i)));
    let accs = dot_rows(codes, codes_at(x, b, 16 * g));
    for r in 0..R {
        total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(accs[r]), sc, total[r]);
    }
}

/// A block's scaled sums ([`add_scaled_group`], floats) and its offsets
/// ([`take_offsets`], integers) as one float sum for [`add_block`].
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn with_offsets<const R: usize>(total: &[__m512; R], offsets: &[__m512i; R]) -> [__m512; R] {
    std::array::from_fn(|r| _mm512_add_ps(total[r], _mm512_cvtepi32_ps(offsets[r])))
}

/// `total[r] −= offset · Σ_g sc_g ⊙ Σqₓ_g` over the 16 groups of block `b`: what the
/// unsigned codes `q + offset` of [`add_scaled_group`] added, taken back in integers
/// with the activations' per-16 sums. Two groups per `vpdpwssd` (each lane the weight
/// row's two scales times `−offset`, as i16, against the two sums broadcast): 8 per
/// row and block, where a subtraction per group and row cost 32 vector operations: the
/// Q6_K tile at 512 activation rows (2,048 × 11,008, one thread, Emerald Rapids Xeon
/// VM) went 76 → 90 GMAC/s, median of 5 alternated runs (`benches/kernels.rs`), as
/// AVX2's kernels already did. `scales` points at the block's 16 × 16 signed scale
/// bytes (group-major); `offset · |sc|` fits in an i16 for both types (Q6_K: 32 · 128,
/// Q3_K: 4 · 32). Integer sums are exact, so the result is unchanged.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn take_offsets<const R: usize>(
    total: &mut [__m512i; R],
    scales: *const u8,
    x: &[*const Q8x256; R],
    b: usize,
    offset: i16,
) {
    let (low16, neg) = (_mm512_set1_epi32(0xFFFF), _mm512_set1_epi16(-offset));
    let sc = |g: usize| _mm512_cvtepi8_epi32(_mm_loadu_si128(scales.add(16 * g) as *const __m128i));
    add_pair_sums(
        total,
        x,
        b,
        |a| &a.bsums,
        |p| {
            let pair = _mm512_or_si512(_mm512_and_si512(sc(2 * p), low16), _mm512_slli_epi32::<16>(sc(2 * p + 1)));
            _mm512_mullo_epi16(pair, neg)
        },
    );
}

/// `acc[r] += pair(p) ⊙ (Σqₓ_{2p}, Σqₓ_{2p+1})` over the `N / 2` pairs of groups of
/// block `b` of each activation row `x[r]`: `pair(p)` holds in each lane a weight
/// row's values for groups `2p` and `2p + 1` as two i16 (Q2_K's minimums, Q3_K's and
/// Q6_K's scales times their codes' −offset, with the per-16 sums `|a| &a.bsums`;
/// Q4_K's and Q5_K's minimums, with the per-32 sums `|a| &a.sums32`), met by the
/// activations' two sums broadcast, one `vpdpwssd` per pair and row (AVX2's
/// `group_sums`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn add_pair_sums<const R: usize, const N: usize>(
    acc: &mut [__m512i; R],
    x: &[*const Q8x256; R],
    b: usize,
    sums: impl Fn(&Q8x256) -> &[i16; N],
    pair: impl Fn(usize) -> __m512i,
) {
    for p in 0..N / 2 {
        let pair = pair(p);
        for r in 0..R {
            let sums = sums(&*x[r].add(b)).as_ptr().add(2 * p) as *const i32;
            acc[r] = _mm512_dpwssd_epi32(acc[r], pair, _mm512_set1_epi32(std::ptr::read_unaligned(sums)));
        }
    }
}

/// One Q3_K tile (16 weight rows, layout in [`super::tiles`]) against `R` activation
/// rows of [`Q8x256`]: per 16-weight group, the 2-bit codes plus 4 where the third bit
/// is set (unsigned `q + 4`), 4 `vpdpbusd`, times the rows' integer scales, summed in
/// integers over the block; `4·Σ sc·Σ qₓ` taken back at its end ([`take_offsets`]); one
/// float step per block, as ggml's Q3_K kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q3k_tile_kernel<const R: usize>(job: &TileJob<Q8x256>) {
    use super::tiles::{Q3K_MASKS_AT, Q3K_SCALES_AT};
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = Q3K_SCALES_AT + 256 + 32;
    let (m3, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let (mut total, mut offsets) = ([_mm512_setzero_ps(); R], [_mm512_setzero_si512(); R]);
        for g in 0..16 {
            super::prefetch_part(R, blk, bb, g, 16);
            let z = _mm512_loadu_si512(blk.add(64 * g) as *const _);
            let codes: [__m512i; 4] = std::array::from_fn(|c| {
                let low = _mm512_and_si512(_mm512_srl_epi16(z, _mm_cvtsi32_si128(2 * c as i32)), m3);
                let third = std::ptr::read_unaligned(blk.add(Q3K_MASKS_AT + 32 * g + 8 * c) as *const u64);
                _mm512_mask_add_epi8(low, third, low, four)
            });
            add_scaled_group(&mut total, &codes, &x, b, g, blk.add(Q3K_SCALES_AT + 16 * g));
        }
        take_offsets(&mut offsets, blk.add(Q3K_SCALES_AT), &x, b, 4);
        add_block(&mut y, blk.add(Q3K_SCALES_AT + 256), &x, b, &with_offsets(&total, &offsets), None);
    }
    store_tile(&y, out, ld, cols);
}

/// One Q4_K or Q5_K tile (16 weight rows, layout in [`super::tiles`]) against `R`
/// activation rows of [`Q8x256`]: per 32-weight sub-block, 8 `vpdpbusd` of its codes
/// (Q5_K: plus 16 where the fifth bit is set) per row, then times the rows' scales in
/// floats (`vcvtdq2ps` and an FMA: each product is an integer below 2²⁴, exact, and so
/// is their sum over the block below 2²⁴ — the integer sum AVX2 takes, the same bits;
/// `vpmulld`, two µops on one port, was a fifth of the loop); the minimums, two
/// sub-blocks' per lane as i16 pairs, times the activations' per-32 sums
/// ([`Q8x256::sums32`]) by `vpdpwssd`, summed in integers; then `y += (d ⊙ dₓ)·Σ −
/// (dmin ⊙ dₓ)·Σm`, as ggml's kernels.
///
/// With `U` (Q4_K only) the codes come unpacked from `job.codes` ([`unpack_tile`]):
/// two loads per code vector pair in place of a shift and two masks, the unpacking
/// paid once per tile and [`ROW_TILE`](super::tiles) activation rows instead of once
/// per 8.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q45k_tile_kernel<const Q5: bool, const U: bool, const R: usize>(job: &TileJob<Q8x256>) {
    use super::tiles::Q45K_MASKS_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, codes, .. } = *job;
    let unpacked = if U { codes.expect("unpacked codes").as_ptr() } else { std::ptr::null() };
    let scales_at = Q45K_MASKS_AT + if Q5 { 512 } else { 0 };
    let bb = scales_at + 256 + 64;
    let (m4, sixteen) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let (mut total, mut mins) = ([_mm512_setzero_ps(); R], [_mm512_setzero_si512(); R]);
        let bytes16 = |at: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(at) as *const __m128i));
        for i in 0..4 {
            let (mut lo, mut hi) = ([_mm512_setzero_si512(); 8], [_mm512_setzero_si512(); 8]);
            for v in 0..8 {
                if U {
                    let at = unpacked.add(UNPACKED_BLOCK * b + 1024 * i + 64 * v);
                    lo[v] = _mm512_load_si512(at as *const _);
                    hi[v] = _mm512_load_si512(at.add(512) as *const _);
                    continue;
                }
                super::prefetch_part(R, blk, bb, 8 * i + v, 32);
                let z = _mm512_loadu_si512(blk.add(512 * i + 64 * v) as *const _);
                lo[v] = _mm512_and_si512(z, m4);
                hi[v] = _mm512_and_si512(_mm512_srli_epi16::<4>(z), m4);
                if Q5 {
                    let mask =
                        |s: usize| std::ptr::read_unaligned(blk.add(Q45K_MASKS_AT + 64 * s + 8 * v) as *const u64);
                    lo[v] = _mm512_mask_add_epi8(lo[v], mask(2 * i), lo[v], sixteen);
                    hi[v] = _mm512_mask_add_epi8(hi[v], mask(2 * i + 1), hi[v], sixteen);
                }
            }
            let scale = |at: usize| _mm512_cvtepi32_ps(bytes16(at));
            let (sc_lo, sc_hi) = (scale(scales_at + 32 * i), scale(scales_at + 32 * i + 16));
            let (lo, hi) = (dot_rows(&lo, codes_at(&x, b, 64 * i)), dot_rows(&hi, codes_at(&x, b, 64 * i + 32)));
            for r in 0..R {
                total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[r]), sc_lo, total[r]);
                total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[r]), sc_hi, total[r]);
            }
        }
        // Two sub-blocks' minimums per multiply-add, against the rows' per-32 sums.
        add_pair_sums(
            &mut mins,
            &x,
            b,
            |a| &a.sums32,
            |p| {
                let at = scales_at + 128 + 32 * p;
                _mm512_or_si512(bytes16(at), _mm512_slli_epi32::<16>(bytes16(at + 16)))
            },
        );
        add_block(&mut y, blk.add(scales_at + 256), &x, b, &total, Some(&mins));
    }
    store_tile(&y, out, ld, cols);
}

/// Bytes of one block of a Q4_K or Q6_K tile unpacked by [`unpack_tile`]: 256
/// weights × 16 rows, one byte per code. Q4_K: per pair of 32-weight sub-blocks (4),
/// its 8 low-nibble code vectors then its 8 high ones; Q6_K: per 16-weight group
/// (16), its 4 code vectors (`q + 32`); 64 bytes per vector.
pub(super) const UNPACKED_BLOCK: usize = 16 * 256;

/// Whether [`unpack_tile`] takes `ty` (Q4_K and Q6_K, the types of a Q4_K_M file's
/// matrices).
pub(super) fn unpacks(ty: WeightType) -> bool {
    matches!(ty, WeightType::Q4K | WeightType::Q6K)
}

/// The codes of a Q4_K or Q6_K tile of `blocks` blocks (layout in [`super::tiles`])
/// one byte each, in the order [`q45k_tile_kernel`] and [`q6k_tile_kernel`] read them
/// with `U`: block `b`'s at `out[UNPACKED_BLOCK · b ..]` (`out` 64-byte aligned). A
/// prefill multiplies a tile by many activation rows, 8 at a time; unpacked once for
/// all of them, each pass loads its codes instead of making them. Cost: what one
/// pass's unpacking costs (Q4_K: a shift and two masks per 64 bytes; Q6_K: about 3
/// operations per code vector), plus the stores.
///
/// # Safety
/// The CPU has [`super::Isa::Avx512`]'s features.
///
/// # Panics
/// If `ty` is not unpacked ([`unpacks`]), `tile` is not `blocks` tile blocks of it, or
/// `out` is shorter than `blocks · UNPACKED_BLOCK` or not 64-byte aligned.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unpack_tile(ty: WeightType, tile: &[u8], blocks: usize, out: &mut [u8]) {
    assert!(unpacks(ty), "{} tiles are not unpacked", ty.name());
    let bb = super::tiles::block_bytes(ty).expect("a tiled layout");
    assert!(tile.len() == blocks * bb, "a tile of {blocks} {} blocks", ty.name());
    assert!(out.len() >= blocks * UNPACKED_BLOCK && (out.as_ptr() as usize).is_multiple_of(64), "64-byte aligned room");
    let store = |at: *mut u8, v: __m512i| _mm512_store_si512(at as *mut _, v);
    let m4 = _mm512_set1_epi8(0x0F);
    for b in 0..blocks {
        let (blk, dst) = (tile.as_ptr().add(b * bb), out.as_mut_ptr().add(b * UNPACKED_BLOCK));
        if ty == WeightType::Q6K {
            for g in 0..16 {
                for (c, v) in q6k_codes(blk, g).into_iter().enumerate() {
                    store(dst.add(256 * g + 64 * c), v);
                }
            }
            continue;
        }
        for i in 0..4 {
            for v in 0..8 {
                let z = _mm512_loadu_si512(blk.add(512 * i + 64 * v) as *const _);
                let at = dst.add(1024 * i + 64 * v);
                store(at, _mm512_and_si512(z, m4));
                store(at.add(512), _mm512_and_si512(_mm512_srli_epi16::<4>(z), m4));
            }
        }
    }
}

/// One Q6_K tile (16 weight rows, layout in [`super::tiles`]) against `R` activation
/// rows of [`Q8x256`]: per 16-weight group, the low nibbles joined to the high two
/// bits (unsigned `q + 32`), 4 `vpdpbusd`, times the rows' integer scales, summed in
/// integers over the block; `32·Σ sc·Σ qₓ` taken back at its end ([`take_offsets`]);
/// one float step per block, as ggml's Q6_K kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6k_tile_kernel<const U: bool, const R: usize>(job: &TileJob<Q8x256>) {
    use super::tiles::Q6K_SCALES_AT;
    let TileJob { tile, acts, blocks, out, ld, cols, codes, .. } = *job;
    let unpacked = if U { codes.expect("unpacked codes").as_ptr() } else { std::ptr::null() };
    let bb = Q6K_SCALES_AT + 256 + 32;
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let (mut total, mut offsets) = ([_mm512_setzero_ps(); R], [_mm512_setzero_si512(); R]);
        for g in 0..16 {
            let codes = if U {
                let at = unpacked.add(UNPACKED_BLOCK * b + 256 * g);
                std::array::from_fn(|c| _mm512_load_si512(at.add(64 * c) as *const _))
            } else {
                super::prefetch_part(R, blk, bb, g, 16);
                q6k_codes(blk, g)
            };
            add_scaled_group(&mut total, &codes, &x, b, g, blk.add(Q6K_SCALES_AT + 16 * g));
        }
        take_offsets(&mut offsets, blk.add(Q6K_SCALES_AT), &x, b, 32);
        add_block(&mut y, blk.add(Q6K_SCALES_AT + 256), &x, b, &with_offsets(&total, &offsets), None);
    }
    store_tile(&y, out, ld, cols);
}

/// Group `g`'s 4 code vectors of the Q6_K tile block at `blk` (unsigned `q + 32`): the
/// low nibbles (two groups per run: group `2p` low, `2p + 1` high) joined to the high
/// two bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn q6k_codes(blk: *const u8, g: usize) -> [__m512i; 4] {
    use super::tiles::Q6K_HIGH_AT;
    let (m4, m30) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    let high = _mm512_loadu_si512(blk.add(Q6K_HIGH_AT + 64 * g) as *const _);
    // Code vector c's high bits (bits 2c, 2c + 1 of each byte) moved to 4, 5.
    let up = [_mm512_slli_epi16::<4>(high), _mm512_slli_epi16::<2>(high), high, _mm512_srli_epi16::<2>(high)];
    std::array::from_fn(|c| {
        let run = _mm512_loadu_si512(blk.add(256 * (g / 2) + 64 * c) as *const _);
        let low = if g.is_multiple_of(2) { run } else { _mm512_srli_epi16::<4>(run) };
        // (low & 0x0F) | (up & 0x30): bit select, C = 0x0F ? A = low : B = up & 0x30.
        _mm512_ternarylogic_epi32::<0xE4>(low, _mm512_and_si512(up[c], m30), m4)
    })
}

/// The tile kernel of a 256-weight type (IQ4_XS: [`iq4xs_tile_kernel`], Q2_K:
/// [`q2k_tile_kernel`], Q3_K: [`q3k_tile_kernel`], Q4_K and Q5_K:
/// [`q45k_tile_kernel`], Q6_K: [`q6k_tile_kernel`]) for the job's 1..=8 activation
/// rows.
///
/// # Safety
/// As [`tile_rows`].
///
/// # Panics
/// If `ty` has no 256-weight tile kernel, or as [`TileJob::check`].
pub unsafe fn tile_rows_256(ty: WeightType, job: &TileJob<Q8x256>) {
    let rows = job.check(ty);
    macro_rules! rows {
        ($k:ident $(, $c:expr)*) => {
            match rows {
                1 => $k::<$($c,)* 1>(job),
                2 => $k::<$($c,)* 2>(job),
                3 => $k::<$($c,)* 3>(job),
                4 => $k::<$($c,)* 4>(job),
                5 => $k::<$($c,)* 5>(job),
                6 => $k::<$($c,)* 6>(job),
                7 => $k::<$($c,)* 7>(job),
                _ => $k::<$($c,)* 8>(job),
            }
        };
    }
    match ty {
        WeightType::IQ4XS => rows!(iq4xs_tile_kernel),
        WeightType::Q2K => rows!(q2k_tile_kernel),
        WeightType::Q3K => rows!(q3k_tile_kernel),
        WeightType::Q4K if job.codes.is_some() => rows!(q45k_tile_kernel, false, true),
        WeightType::Q4K => rows!(q45k_tile_kernel, false, false),
        WeightType::Q5K => rows!(q45k_tile_kernel, true, false),
        WeightType::Q6K if job.codes.is_some() => rows!(q6k_tile_kernel, true),
        WeightType::Q6K => rows!(q6k_tile_kernel, false),
        _ => panic!("{} has no 256-weight tile kernel", ty.name()),
    }
}

/// Activation rows per BF16 register tile ([`bf16_tile`]).
pub(super) const BF16_RM: usize = 6;
/// Weight rows per BF16 register tile: `BF16_RM × BF16_RN` accumulators (24 of the 32
/// registers) plus the tile's weight vectors and one activation vector.
pub(super) const BF16_RN: usize = 4;

/// Whether this CPU has AVX-512 BF16 (`vdpbf16ps`, `vcvtne2ps2bf16`) besides
/// [`super::Isa::Avx512`]'s features. Cached by the standard library.
pub fn has_bf16() -> bool {
    is_x86_feature_detected!("avx512bf16")
}

/// `x` rounded to BF16, nearest-even (as `vcvtne2ps2bf16`), into `out`, zero past `x`
/// (`out` is `x` rounded up to 32 values).
///
/// # Safety
/// The CPU supports AVX-512 F/BW and BF16 ([`has_bf16`]); `out.len() >= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn to_bf16(x: &[f32], out: &mut [u16]) {
    let full = x.len() / 32;
    for c in 0..full {
        let lo = _mm512_loadu_ps(x.as_ptr().add(c * 32));
        let hi = _mm512_loadu_ps(x.as_ptr().add(c * 32 + 16));
        let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(out.as_mut_ptr().add(c * 32) as *mut __m512i, v);
    }
    for (o, &v) in out[full * 32..].iter_mut().zip(&x[full * 32..]) {
        *o = super::formats::bf16_bits(v);
    }
    out[x.len()..].fill(0);
}

/// One register tile of a BF16 matmul: `out[i][j] = Σ x_i · w_j` over `k` values,
/// for `RM` activation rows (`xs`, BF16, zero-padded to a multiple of 32) and `RN`
/// weight rows (`ws`, BF16, exactly `k` long: the last 32-value step loads them
/// masked). Products of BF16 pairs are exact in f32; `vdpbf16ps` adds two per lane.
///
/// # Safety
/// The CPU supports AVX-512 F/BW and BF16 ([`has_bf16`]); each `xs[i]` points at
/// `k` rounded up to 32 readable values, each `ws[j]` at `k`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(super) unsafe fn bf16_tile<const RM: usize, const RN: usize>(
    xs: [*const u16; RM],
    ws: [*const u16; RN],
    k: usize,
    out: &mut [[f32; RN]; RM],
) {
    let mut acc = [[_mm512_setzero_ps(); RN]; RM];
    // One 32-value step: the weights' vectors (loaded by `w`: plain, or masked for the
    // tail), then each activation row against all of them; only the accumulators live
    // across steps (24 of the 32 registers at 6 × 4). The function enables `avx512vl`:
    // without it LLVM kept the accumulators in zmm0–15 only, spilled the rest to the
    // stack inside the loop and ran at two thirds of this speed.
    #[inline(always)]
    unsafe fn step<const RM: usize, const RN: usize>(
        acc: &mut [[__m512; RN]; RM],
        xs: &[*const u16; RM],
        at: usize,
        w: impl Fn(usize) -> __m512i,
    ) {
        let wv: [__m512bh; RN] = std::array::from_fn(|j| std::mem::transmute::<__m512i, __m512bh>(w(j)));
        for i in 0..RM {
            let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(xs[i].add(at) as *const __m512i));
            for j in 0..RN {
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
            }
        }
    }
    let full = k / 32;
    for c in 0..full {
        step(&mut acc, &xs, c * 32, |j| _mm512_loadu_si512(ws[j].add(c * 32) as *const __m512i));
    }
    let tail = k % 32;
    if tail > 0 {
        let mask: __mmask32 = (1u32 << tail) - 1;
        step(&mut acc, &xs, full * 32, |j| _mm512_maskz_loadu_epi16(mask, ws[j].add(full * 32) as *const i16));
    }
    for i in 0..RM {
        for j in 0..RN {
            out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
        }
    }
}

/// [`bf16_tile`] for F16 weights: each step widens 16 weights per row to f32
/// (`vcvtph2ps`) and multiplies them with 16 f32 activations per row (FMA), the
/// activations as they are. `xs[i]` and `ws[j]` each point at `k` values; the last
/// step loads both masked.
///
/// # Safety
/// The CPU supports AVX-512 F/BW ([`super::Isa::Avx512`]); each `xs[i]` points at `k`
/// readable f32 values, each `ws[j]` at `k` F16 values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(super) unsafe fn f16_tile<const RM: usize, const RN: usize>(
    xs: [*const f32; RM],
    ws: [*const u16; RN],
    k: usize,
    out: &mut [[f32; RN]; RM],
) {
    let mut acc = [[_mm512_setzero_ps(); RN]; RM];
    let full = k / 16;
    let mut wv = [_mm512_setzero_ps(); RN];
    for c in 0..full {
        for j in 0..RN {
            wv[j] = _mm512_cvtph_ps(_mm256_loadu_si256(ws[j].add(c * 16) as *const __m256i));
        }
        for i in 0..RM {
            let xv = _mm512_loadu_ps(xs[i].add(c * 16));
            for j in 0..RN {
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
    }
    let tail = k % 16;
    if tail > 0 {
        let mask: __mmask16 = (1u16 << tail) - 1;
        for j in 0..RN {
            wv[j] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, ws[j].add(full * 16) as *const i16));
        }
        for i in 0..RM {
            let xv = _mm512_maskz_loadu_ps(mask, xs[i].add(full * 16));
            for j in 0..RN {
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
    }
    for i in 0..RM {
        for j in 0..RN {
            out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
        }
    }
}

/// Activation rows per panel register tile ([`panel_tile`]): `PANEL_MR × 2`
/// accumulators (24 of the 32 registers), the panel's two vectors and a broadcast.
pub(super) const PANEL_MR: usize = 12;
/// Weight rows per micro-panel of [`widen_transposed`]'s layout: two 16-wide registers.
pub(super) const PANEL_NR: usize = 32;

/// Whether F16/BF16 prefill runs on the register tiles that read the weights in their
/// 16 bits at every step ([`f16_tile`]; [`bf16_tile`] where the CPU has AVX-512 BF16)
/// rather than on weights widened to f32 once per call ([`widen_transposed`],
/// [`panel_tile`]): on every CPU but Intel's. The tiles widen F16 inside the loop and
/// multiply BF16 with `vdpbf16ps`; on AMD Zen 5 (measured) the F16 tile ran at the FMA
/// peak (98 GMAC/s per core) and the BF16 tile at half again more (twice the
/// multiply-adds per instruction; BF16 prefill 1.14× llama.cpp). On an Intel Xeon
/// (Emerald Rapids, measured) `vcvtph2ps` takes a µop of the FMA ports (the F16 tile
/// ran at 47–53 GMAC/s per core of 80) and `vdpbf16ps` retires at a quarter of the
/// FMA's instruction rate (40 GMAC/s per core), so widening once wins there.
/// `TOOLGATE_FLOAT_PREFILL=tiles|panels` forces the choice (read once). Cost: one
/// CPUID read at the first call, cached after it.
pub fn prefers_float_tiles() -> bool {
    static TILES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TILES.get_or_init(|| match std::env::var("TOOLGATE_FLOAT_PREFILL").as_deref() {
        Ok("tiles") => true,
        Ok("panels") => false,
        _ => !is_intel(),
    })
}

/// Whether the CPU's vendor string is `GenuineIntel` (CPUID leaf 0).
pub(super) fn is_intel() -> bool {
    let id = __cpuid(0);
    [id.ebx, id.edx, id.ecx] == [*b"Genu", *b"ineI", *b"ntel"].map(u32::from_le_bytes)
}

/// Transpose 16 rows of 16 f32 values in registers: afterwards `r[c]` holds what was
/// column `c`. Four rounds of 16 shuffles (pairs of floats, pairs of doubles, then
/// 128-bit lanes twice).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn transpose16(r: &mut [__m512; 16]) {
    let mut t = [_mm512_setzero_ps(); 16];
    // Rows 2i, 2i+1 interleaved: in each 128-bit lane, columns (0, 1) then (2, 3) of both.
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Rows 4i..4i+4: r[4i + c] holds column c of them in lane 0 (c + 4 in lane 1, …).
    for i in 0..4 {
        for h in 0..2 {
            let (a, b) = (_mm512_castps_pd(t[4 * i + h]), _mm512_castps_pd(t[4 * i + 2 + h]));
            r[4 * i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            r[4 * i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    }
    // Lanes regrouped across the four groups of rows.
    for i in 0..2 {
        for h in 0..4 {
            t[8 * i + h] = _mm512_shuffle_f32x4::<0x88>(r[8 * i + h], r[8 * i + 4 + h]);
            t[8 * i + 4 + h] = _mm512_shuffle_f32x4::<0xdd>(r[8 * i + h], r[8 * i + 4 + h]);
        }
    }
    for h in 0..8 {
        r[h] = _mm512_shuffle_f32x4::<0x88>(t[h], t[8 + h]);
        r[8 + h] = _mm512_shuffle_f32x4::<0xdd>(t[h], t[8 + h]);
    }
}

/// Values `k0..k0 + kc` of 16 F16 (`BF = false`) or BF16 (`BF = true`) weight rows,
/// widened to f32 and transposed: `out[kk · ld + r] = rows[r][k0 + kk]`, `0.0` for a
/// null row (past the matrix's last). 16 values per row per step (the last step loads
/// masked), one transpose per step ([`transpose16`]).
///
/// # Safety
/// The CPU supports AVX-512 F/BW/VL and F16C; each non-null `rows[r]` points at a row
/// of at least `k0 + kc` 16-bit values; `out + kk · ld` is valid for 16 floats for
/// every `kk < kc`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(super) unsafe fn widen_transposed<const BF: bool>(
    rows: &[*const u8; 16],
    k0: usize,
    kc: usize,
    out: *mut f32,
    ld: usize,
) {
    for kb in (0..kc).step_by(16) {
        let len = 16.min(kc - kb);
        let mask: __mmask16 = if len == 16 { !0 } else { (1u16 << len) - 1 };
        let mut r: [__m512; 16] = std::array::from_fn(|q| {
            if rows[q].is_null() {
                return _mm512_setzero_ps();
            }
            let raw = _mm256_maskz_loadu_epi16(mask, rows[q].add(2 * (k0 + kb)) as *const i16);
            if BF {
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))
            } else {
                _mm512_cvtph_ps(raw)
            }
        });
        transpose16(&mut r);
        for (q, v) in r.iter().enumerate().take(len) {
            _mm512_storeu_ps(out.add((kb + q) * ld), *v);
        }
    }
}

/// One register tile of the panel GEMM: for `R` activation rows packed step-major
/// (`x[kk · R + i]`) and the 32 weight rows of a micro-panel (`panel[kk · 32 + j]`, [`widen_transposed`]),
/// `y[i · ldy + j] = Σ_kk x[i][kk] · panel[kk][j]` over `kk < kc` — added to what `y`
/// holds when `accumulate` — for the columns `j` whose bit is set in `cols` (low 16
/// bits: `j < 16`). Each step broadcasts one activation per row against the panel's
/// two vectors: `2R` FMAs, no horizontal sums, and each output's products are added
/// in `kk` order whatever `R` is.
///
/// # Safety
/// The CPU supports AVX-512 F/VL; `x` is valid for `R · kc` floats, `panel` for
/// `32 · kc`, and `y + i · ldy + j` for each column `j` in `cols`.
#[target_feature(enable = "avx512f,avx512vl")]
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
    let masks: [__mmask16; 2] = [cols as u16, (cols >> 16) as u16];
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    if accumulate {
        for (i, row) in acc.iter_mut().enumerate() {
            for (v, a) in row.iter_mut().enumerate() {
                *a = _mm512_maskz_loadu_ps(masks[v], y.add(i * ldy + 16 * v));
            }
        }
    }
    for kk in 0..kc {
        // The micro-panel streams from L2: without asking for its lines ahead the loads
        // stalled (a third less GMAC/s on an Intel Xeon).
        super::prefetch_ahead(panel.add(kk * PANEL_NR) as *const u8, 4 * PANEL_NR);
        let b0 = _mm512_loadu_ps(panel.add(kk * PANEL_NR));
        let b1 = _mm512_loadu_ps(panel.add(kk * PANEL_NR + 16));
        for (i, row) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_ps(*x.add(kk * R + i));
            row[0] = _mm512_fmadd_ps(a, b0, row[0]);
            row[1] = _mm512_fmadd_ps(a, b1, row[1]);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (v, a) in row.iter().enumerate() {
            _mm512_mask_storeu_ps(y.add(i * ldy + 16 * v), masks[v], *a);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefers_float_tiles_example() {
        use super::prefers_float_tiles;
        let tiles = prefers_float_tiles();
        assert_eq!(tiles, prefers_float_tiles()); // read once: the same answer all run long
    }
}
