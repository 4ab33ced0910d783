//! AVX-512 (F, BW, VL, VNNI) dot products for the k-quant types Q4_K, Q5_K and Q6_K
//! (x86-64), selected at run time by [`super::dispatch`]; every other kernel of
//! [`super::Isa::Avx512`] is the AVX2 one ([`super::avx2`]), which every AVX-512 CPU
//! also runs.
//!
//! Why these three: they are the weights of the Q4_K_M/Q5_K_M files most users
//! download, and on their integer prefill path (4 activation rows per decoded weight
//! row) the AVX2 kernels spend three instructions per 32 multiply-adds per row
//! (`maddubs`, `madd` with the sub-block scales, `add`). Here one 512-bit register
//! holds the codes of two adjacent sub-blocks — a 32-byte run of Q4_K/Q5_K nibbles
//! with its low nibbles in the lower half and its high nibbles in the upper half,
//! which is exactly the order of the 64 activations they multiply — and VNNI's
//! `vpdpwssd` fuses the scale `madd` with the accumulation: two instructions per 64
//! multiply-adds per row. The 32-weight types run their prefill as an f32 GEMM (the
//! `gemm` crate already uses AVX-512 there) and their decode is bound by memory, so
//! they keep the AVX2 dot products.
//!
//! Also the F16/BF16 prefill register tiles ([`f16_tile`], [`bf16_tile`]; see
//! [`super::float_tiles_path`]): 4 weight rows × 6 activation rows per step, the
//! weights read in their 16-bit format.
//!
//! The integer sums of a block are exact, so a block's value differs from the AVX2
//! kernel's only in the f32 rounding of the per-block scale products (≤ 1 ulp per
//! block): the tests hold each ISA to the same exact reference.
//!
//! # Safety
//! Every function here requires the CPU to support `avx512f`, `avx512bw`, `avx512vl`,
//! `avx512vnni`, `avx2`, `fma` and `f16c`; [`super::Isa::detect`] checks that once.
//! Slice lengths are checked by the safe wrapper at the bottom of this file.

use std::arch::x86_64::*;

use super::activation::{Q8x256, Q8x32};
use super::avx2::{by_rows, f16_at, T_IQ4NL, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0};
use super::formats::{scale_min_k4, WeightType};
use super::tiles::TileJob;

/// `lo` in the lower 256 bits, `hi` in the upper.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn load512(p: *const i8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

/// Dot products of a Q4_K (`Q5 = false`) or Q5_K row with `R` rows.
///
/// Per block: 8 sub-blocks of 32 weights with 6-bit scales and mins. Run `j` (32
/// bytes) holds sub-block `2j` in its low nibbles and `2j + 1` in its high nibbles;
/// Q5_K's fifth bits are bits `2j` and `2j + 1` of the 32 `qh` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q45k<const Q5: bool, const R: usize>(w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let bb = if Q5 { 176 } else { 144 };
    let qs_at = if Q5 { 48 } else { 16 };
    let nb = w.len() / bb;
    let m4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(0x10);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut accm = [_mm256_setzero_ps(); R];
    let x: [*const Q8x256; R] = std::array::from_fn(|r| xs[r].as_ptr());
    for i in 0..nb {
        let b = w.as_ptr().add(i * bb);
        let (d, dmin) = (f16_at(b), f16_at(b.add(2)));
        let packed = std::slice::from_raw_parts(b.add(4), 12);
        let (mut sc, mut mins) = ([0i16; 8], [0i16; 16]);
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, packed);
            sc[j] = i16::from(s);
            (mins[2 * j], mins[2 * j + 1]) = (i16::from(m), i16::from(m));
        }
        let sc = _mm512_castsi128_si512(_mm_loadu_si128(sc.as_ptr() as *const __m128i));
        let mins = _mm256_loadu_si256(mins.as_ptr() as *const __m256i);
        let qh = if Q5 {
            let h = _mm256_loadu_si256(b.add(16) as *const __m256i);
            join(h, h)
        } else {
            _mm512_setzero_si512()
        };
        let mut sumi = [_mm512_setzero_si512(); R];
        for j in 0..4 {
            let q = _mm256_loadu_si256(b.add(qs_at + 32 * j) as *const __m256i);
            let mut codes = _mm512_and_si512(join(q, _mm256_srli_epi16::<4>(q)), m4);
            if Q5 {
                let bits = join(_mm256_set1_epi8(1 << (2 * j)), _mm256_set1_epi8((1u8 << (2 * j + 1)) as i8));
                codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(qh, bits), codes, sixteen);
            }
            // Sub-block 2j's scale for the lower 16 i16 lanes, 2j + 1's for the upper.
            let s = _mm512_permutexvar_epi16(
                join(_mm256_set1_epi16(2 * j as i16), _mm256_set1_epi16(2 * j as i16 + 1)),
                sc,
            );
            for r in 0..R {
                let xv = load512((*x[r].add(i)).qs.as_ptr().add(64 * j));
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(codes, xv), s);
            }
        }
        for r in 0..R {
            let a = &*x[r].add(i);
            let summ = _mm256_madd_epi16(_mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i), mins);
            accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * a.d), _mm256_cvtepi32_ps(summ), accm[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * a.d), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) =
            _mm512_reduce_add_ps(acc[r]) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(accm[r]));
    }
}

/// Dot products of a Q6_K row with `R` rows.
///
/// Per block: 16 groups of 16 weights with signed 8-bit scales; codes are 6-bit,
/// stored `+32` (the `-32` is taken off through the activations' per-16 sums). Half
/// `h` reads 64 bytes of low nibbles: the low nibbles of those 64 bytes are weights
/// `128h .. 128h + 64`, the high nibbles the next 64; the two top bits come from the
/// half's 32 `qh` bytes at shifts 0, 2 (low nibbles) and 4, 6 (high nibbles).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q6k<const R: usize>(w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let nb = w.len() / 210;
    let m4 = _mm512_set1_epi8(0x0F);
    let m2 = _mm512_set1_epi8(3);
    // Per 16-bit lane, the shift bringing the top bits of each quarter to bits 0..2.
    let shift_lo = join(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    let shift_hi = join(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
    let mut acc = [_mm512_setzero_ps(); R];
    let x: [*const Q8x256; R] = std::array::from_fn(|r| xs[r].as_ptr());
    for i in 0..nb {
        let b = w.as_ptr().add(i * 210);
        let d = f16_at(b.add(208));
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192) as *const __m128i));
        // −32 · scale, against the activations' 16 per-group sums.
        let neg32 = _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16::<5>(sc16)));
        let sc = _mm512_castsi256_si512(sc16);
        let mut sumi = [_mm512_setzero_si512(); R];
        for r in 0..R {
            let bs = _mm512_zextsi256_si512(_mm256_loadu_si256((*x[r].add(i)).bsums.as_ptr() as *const __m256i));
            sumi[r] = _mm512_dpwssd_epi32(sumi[r], bs, neg32);
        }
        for h in 0..2 {
            let ql = load512(b.add(64 * h) as *const i8);
            let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
            let qh = join(qh, qh);
            for half in 0..2 {
                let (low, shift) = if half == 0 {
                    (_mm512_and_si512(ql, m4), shift_lo)
                } else {
                    (_mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4), shift_hi)
                };
                let high = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), m2);
                let codes = _mm512_or_si512(low, _mm512_slli_epi16::<4>(high));
                // Four groups of 16 weights: groups 8h + 4·half + 0..4, 8 i16 lanes each.
                let g = (8 * h + 4 * half) as i16;
                let idx = join(
                    _mm256_set_m128i(_mm_set1_epi16(g + 1), _mm_set1_epi16(g)),
                    _mm256_set_m128i(_mm_set1_epi16(g + 3), _mm_set1_epi16(g + 2)),
                );
                let s = _mm512_permutexvar_epi16(idx, sc);
                for r in 0..R {
                    let xv = load512((*x[r].add(i)).qs.as_ptr().add(128 * h + 64 * half));
                    sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(codes, xv), s);
                }
            }
        }
        for r in 0..R {
            let a = &*x[r].add(i);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * a.d), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for r in 0..R {
        *out.get_unchecked_mut(r) = _mm512_reduce_add_ps(acc[r]);
    }
}

/// `out[r] = w · xs[r]` for a 256-weight type: Q4_K, Q5_K and Q6_K here, the others
/// on the AVX2 kernels.
///
/// # Safety
/// The CPU must support `avx512f`, `avx512bw`, `avx512vl`, `avx512vnni`, `avx2`,
/// `fma` and `f16c`.
///
/// # Panics
/// If `ty` is a 32-weight type, `w` is not whole blocks, an activation row is shorter
/// than `w`, or `xs`/`out` are not the same length in `1..=4`.
pub unsafe fn dot256_rows(ty: WeightType, w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    super::avx2::check(ty, w, xs, out);
    match ty {
        WeightType::Q4K => by_rows!(dot_q45k[false](w, xs, out)),
        WeightType::Q5K => by_rows!(dot_q45k[true](w, xs, out)),
        WeightType::Q6K => by_rows!(dot_q6k[](w, xs, out)),
        _ => super::avx2::dot256_rows(ty, w, xs, out),
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

/// Independent `vpdpbusd` sums per activation row for [`dot_codes`] when a kernel
/// multiplies `rows` rows: 4 for one row, 2 for two, else 1 (the rows themselves are
/// independent chains then).
const fn chains(rows: usize) -> usize {
    match rows {
        1 => 4,
        2 => 2,
        _ => 1,
    }
}

/// `Σ_c codes[c] · x[c]` per 32-bit lane: `N` code vectors (unsigned bytes, 16 rows ×
/// 4 codes) against the activation codes at `q`, 4 per vector (broadcast), in `chains`
/// independent sums (1, 2 or 4: with few rows they hide `vpdpbusd`'s latency; integer
/// sums are exact, so the split does not change the result).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dot_codes<const N: usize>(codes: &[__m512i; N], q: *const i32, chains: usize) -> __m512i {
    let mut acc = [_mm512_setzero_si512(); 4];
    for c in 0..N {
        let xq = _mm512_set1_epi32(std::ptr::read_unaligned(q.add(c)));
        acc[c % chains] = _mm512_dpbusd_epi32(acc[c % chains], codes[c], xq);
    }
    for i in 1..chains {
        acc[0] = _mm512_add_epi32(acc[0], acc[i]);
    }
    acc[0]
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
    let TileJob { tile, acts, sums, blocks, out, ld, cols } = *job;
    let super::tiles::BlockLayout { nibbles, fifth, has_m, scales_at, bytes: bb } = super::tiles::block_layout(TY);
    let offset = match TY {
        T_Q4_0 => 8,
        T_Q5_0 => 16,
        T_Q8_0 | T_IQ4NL => 128,
        _ => 0,
    };
    let chains = chains(R);
    let m4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(0x10);
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(super::tiles::IQ4_SHIFTED.as_ptr() as *const __m128i));
    let x: [*const Q8x32; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
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
        for r in 0..R {
            let a = &*x[r].add(b);
            let mut acc = dot_codes(&codes, a.qs.as_ptr() as *const i32, chains);
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
    let chains = chains(R);
    let m4 = _mm512_set1_epi8(0x0F);
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(super::tiles::IQ4_SHIFTED.as_ptr() as *const __m128i));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let mut total = [_mm512_setzero_si512(); R];
        for s in 0..8 {
            let mut codes = [_mm512_setzero_si512(); 8];
            for v in 0..4 {
                let z = _mm512_loadu_si512(blk.add(256 * s + 64 * v) as *const _);
                codes[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(z, m4));
                codes[v + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(z), m4));
            }
            let ls = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(IQ4XS_SCALES_AT + 16 * s) as *const __m128i));
            for r in 0..R {
                let a = &*x[r].add(b);
                let acc = dot_codes(&codes, a.qs.as_ptr().add(32 * s) as *const i32, chains);
                let shift = 128 * (i32::from(a.bsums[2 * s]) + i32::from(a.bsums[2 * s + 1]));
                let sub = _mm512_sub_epi32(acc, _mm512_set1_epi32(shift));
                total[r] = _mm512_add_epi32(total[r], _mm512_mullo_epi32(sub, ls));
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(IQ4XS_SCALES_AT + 128) as *const __m256i));
        for r in 0..R {
            let dd = _mm512_mul_ps(d, _mm512_set1_ps((*x[r].add(b)).d));
            y[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(total[r]), y[r]);
        }
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
    let chains = chains(R);
    let m3 = _mm512_set1_epi8(3);
    let low4 = _mm512_set1_epi32(0xF);
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let (mut sums, mut mins) = ([_mm512_setzero_si512(); R], [_mm512_setzero_si512(); R]);
        // The minimums times the activations' per-16 sums: two groups per `vpdpwssd`
        // (each lane the row's two minimums as i16, against the two sums broadcast).
        for p in 0..8 {
            let mn = |g: usize| {
                let sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(Q2K_SCALES_AT + 16 * g) as *const __m128i));
                _mm512_srli_epi32::<4>(sm)
            };
            let pair = _mm512_or_si512(mn(2 * p), _mm512_slli_epi32::<16>(mn(2 * p + 1)));
            for r in 0..R {
                let bsums = (*x[r].add(b)).bsums.as_ptr().add(2 * p) as *const i32;
                mins[r] = _mm512_dpwssd_epi32(mins[r], pair, _mm512_set1_epi32(std::ptr::read_unaligned(bsums)));
            }
        }
        for g in 0..16 {
            let z = _mm512_loadu_si512(blk.add(64 * g) as *const _);
            let codes = [
                _mm512_and_si512(z, m3),
                _mm512_and_si512(_mm512_srli_epi16::<2>(z), m3),
                _mm512_and_si512(_mm512_srli_epi16::<4>(z), m3),
                _mm512_and_si512(_mm512_srli_epi16::<6>(z), m3),
            ];
            let sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(Q2K_SCALES_AT + 16 * g) as *const __m128i));
            let sc = _mm512_and_si512(sm, low4);
            for r in 0..R {
                let a = &*x[r].add(b);
                let acc = dot_codes(&codes, a.qs.as_ptr().add(16 * g) as *const i32, chains);
                sums[r] = _mm512_add_epi32(sums[r], _mm512_mullo_epi32(acc, sc));
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(Q2K_SCALES_AT + 256) as *const __m256i));
        let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(Q2K_SCALES_AT + 288) as *const __m256i));
        for r in 0..R {
            let dx = _mm512_set1_ps((*x[r].add(b)).d);
            y[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(mins[r]), y[r]);
            y[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sums[r]), y[r]);
        }
    }
    store_tile(&y, out, ld, cols);
}

/// One Q3_K tile (16 weight rows, layout in [`super::tiles`]) against `R` activation
/// rows of [`Q8x256`]: per 16-weight group, the 2-bit codes plus 4 where the third bit
/// is set (unsigned `q + 4`), 4 `vpdpbusd`, `4·Σ qₓ` taken back with the activations'
/// per-16 sum, times the rows' integer scales, summed in integers over the block; one
/// float step per block, as ggml's Q3_K kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q3k_tile_kernel<const R: usize>(job: &TileJob<Q8x256>) {
    use super::tiles::{Q3K_MASKS_AT, Q3K_SCALES_AT};
    let TileJob { tile, acts, blocks, out, ld, cols, .. } = *job;
    let bb = Q3K_SCALES_AT + 256 + 32;
    let chains = chains(R);
    let (m3, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
    let x: [*const Q8x256; R] = std::array::from_fn(|r| acts.as_ptr().add(r * blocks));
    let mut y = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        let blk = tile.as_ptr().add(b * bb);
        let mut total = [_mm512_setzero_si512(); R];
        for g in 0..16 {
            let z = _mm512_loadu_si512(blk.add(64 * g) as *const _);
            let codes: [__m512i; 4] = std::array::from_fn(|c| {
                let low = _mm512_and_si512(_mm512_srl_epi16(z, _mm_cvtsi32_si128(2 * c as i32)), m3);
                let third = std::ptr::read_unaligned(blk.add(Q3K_MASKS_AT + 32 * g + 8 * c) as *const u64);
                _mm512_mask_add_epi8(low, third, low, four)
            });
            let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(Q3K_SCALES_AT + 16 * g) as *const __m128i));
            for r in 0..R {
                let a = &*x[r].add(b);
                let acc = dot_codes(&codes, a.qs.as_ptr().add(16 * g) as *const i32, chains);
                let shift = _mm512_set1_epi32(4 * i32::from(*a.bsums.get_unchecked(g)));
                total[r] = _mm512_add_epi32(total[r], _mm512_mullo_epi32(_mm512_sub_epi32(acc, shift), sc));
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(Q3K_SCALES_AT + 256) as *const __m256i));
        for r in 0..R {
            let dd = _mm512_mul_ps(d, _mm512_set1_ps((*x[r].add(b)).d));
            y[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(total[r]), y[r]);
        }
    }
    store_tile(&y, out, ld, cols);
}

/// The tile kernel of a 256-weight type (IQ4_XS: [`iq4xs_tile_kernel`], Q2_K:
/// [`q2k_tile_kernel`], Q3_K: [`q3k_tile_kernel`]) for the job's 1..=8 activation rows.
///
/// # Safety
/// As [`tile_rows`].
///
/// # Panics
/// If `ty` is not IQ4_XS, Q2_K or Q3_K, or as [`TileJob::check`].
pub unsafe fn tile_rows_256(ty: WeightType, job: &TileJob<Q8x256>) {
    let rows = job.check(ty);
    macro_rules! rows {
        ($k:ident) => {
            match rows {
                1 => $k::<1>(job),
                2 => $k::<2>(job),
                3 => $k::<3>(job),
                4 => $k::<4>(job),
                5 => $k::<5>(job),
                6 => $k::<6>(job),
                7 => $k::<7>(job),
                _ => $k::<8>(job),
            }
        };
    }
    match ty {
        WeightType::IQ4XS => rows!(iq4xs_tile_kernel),
        WeightType::Q2K => rows!(q2k_tile_kernel),
        WeightType::Q3K => rows!(q3k_tile_kernel),
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
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn bf16_tile<const RM: usize, const RN: usize>(
    xs: [*const u16; RM],
    ws: [*const u16; RN],
    k: usize,
    out: &mut [[f32; RN]; RM],
) {
    let mut acc = [[_mm512_setzero_ps(); RN]; RM];
    let full = k / 32;
    let mut wv = [_mm512_setzero_si512(); RN];
    for c in 0..full {
        for j in 0..RN {
            wv[j] = _mm512_loadu_si512(ws[j].add(c * 32) as *const __m512i);
        }
        for i in 0..RM {
            let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(xs[i].add(c * 32) as *const __m512i));
            for j in 0..RN {
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, std::mem::transmute::<__m512i, __m512bh>(wv[j]));
            }
        }
    }
    let tail = k % 32;
    if tail > 0 {
        let mask: __mmask32 = (1u32 << tail) - 1;
        for j in 0..RN {
            wv[j] = _mm512_maskz_loadu_epi16(mask, ws[j].add(full * 32) as *const i16);
        }
        for i in 0..RM {
            let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(xs[i].add(full * 32) as *const __m512i));
            for j in 0..RN {
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, std::mem::transmute::<__m512i, __m512bh>(wv[j]));
            }
        }
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
