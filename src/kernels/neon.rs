//! aarch64 NEON kernels with the dot-product extension (`sdot`: Graviton 2 and later,
//! Apple M1 and later, Ampere Altra, Cortex-A76 and later): the decode-time dot
//! products of every 32-weight and 256-weight type, one weight row against 1..=4
//! activation rows.
//!
//! Each block's codes are unpacked into signed bytes and multiplied with `sdot` (16
//! byte products summed into 4 lanes per instruction). The integer sums are exact, and
//! the float step after each block is [`super::scalar`]'s, term for term and in its
//! order, so a product here has the portable kernel's bits: answers do not depend on
//! which of the two a machine runs. Prefill (32 rows and more) takes the f32 GEMM path
//! as on every CPU ([`super::f32_path`]).
//!
//! `sdot` is written as inline assembly: its intrinsic (`vdotq_s32`) is not stable
//! Rust yet.
//!
//! Every function is `unsafe`: the caller must have checked that the CPU has NEON and
//! `dotprod` ([`super::Isa::Neon`]).

use std::arch::aarch64::*;

use super::activation::{Q8x256, Q8x32};
use super::formats::{scale_min_k4, table_block, WeightType, IQ4_VALUES};

/// `acc + Σ a·b` in 4 lanes: each lane the sum of 4 byte products.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY (of the asm): a register-only instruction of the enabled `dotprod`
    // extension; it reads `a` and `b` and updates `acc`, nothing else.
    std::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// The f16 at `b[at..at + 2]` as f32, exactly (`fcvtl`, base Advanced SIMD): the
/// `half` crate's conversion is a call with a feature check, once per 32 weights.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
    let h = vdup_n_u16(u16::from_le_bytes([b[at], b[at + 1]]));
    let f: float32x4_t;
    // SAFETY (of the asm): a register-only Advanced SIMD conversion.
    std::arch::asm!("fcvtl {f:v}.4s, {h:v}.4h", f = out(vreg) f, h = in(vreg) h, options(pure, nomem, nostack, preserves_flags));
    vgetq_lane_f32::<0>(f)
}

/// Bit `j` of `bits` (a little-endian u32) as `0x10` in lane `j`, lanes 0..16 from
/// bits `first..first + 16`: the fifth bit of Q5_0/Q5_1 codes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn fifth_bits(bits: u32, first: u32) -> uint8x16_t {
    let half = (bits >> first) as u16;
    let bytes = vcombine_u8(vdup_n_u8(half as u8), vdup_n_u8((half >> 8) as u8));
    const MASKS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    vandq_u8(vtstq_u8(bytes, vld1q_u8(MASKS.as_ptr())), vdupq_n_u8(0x10))
}

/// A 32-weight block's codes as two vectors of 16 (weights 0..16 and 16..32) and its
/// `(d, m)` with `w = d·code + m`, as [`super::scalar`]'s `decode32`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn decode32(ty: WeightType, b: &[u8]) -> (int8x16_t, int8x16_t, f32, f32) {
    let nibbles = |qs: &[u8]| {
        let q = vld1q_u8(qs.as_ptr());
        (vandq_u8(q, vdupq_n_u8(0xF)), vshrq_n_u8::<4>(q))
    };
    match ty {
        WeightType::Q4_0 | WeightType::Q4_1 => {
            let (lo, hi) = nibbles(if ty == WeightType::Q4_0 { &b[2..18] } else { &b[4..20] });
            let d = f16_at(b, 0);
            let m = if ty == WeightType::Q4_0 { -8.0 * d } else { f16_at(b, 2) };
            (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), d, m)
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            let (qh_at, qs_at) = if ty == WeightType::Q5_0 { (2, 6) } else { (4, 8) };
            let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
            let (lo, hi) = nibbles(&b[qs_at..qs_at + 16]);
            let lo = vorrq_u8(lo, fifth_bits(qh, 0));
            let hi = vorrq_u8(hi, fifth_bits(qh, 16));
            let d = f16_at(b, 0);
            let m = if ty == WeightType::Q5_0 { -16.0 * d } else { f16_at(b, 2) };
            (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), d, m)
        }
        WeightType::Q8_0 => {
            let q = b[2..34].as_ptr() as *const i8;
            (vld1q_s8(q), vld1q_s8(q.add(16)), f16_at(b, 0), 0.0)
        }
        WeightType::IQ4NL | WeightType::MXFP4 => {
            let (d, qs, values) = match ty {
                WeightType::IQ4NL => (f16_at(b, 0), &b[2..18], &IQ4_VALUES),
                _ => table_block(ty, b),
            };
            let (lo, hi) = nibbles(qs);
            let table = vld1q_s8(values.as_ptr());
            (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi), d, 0.0)
        }
        _ => unreachable!("not a 32-weight type"),
    }
}

/// `out[r] = w · xs[r]` for a row `w` of a 32-weight type: [`super::scalar::dot32`]'s
/// bits.
///
/// # Safety
/// The CPU must have NEON and `dotprod`; `w` is whole blocks, each `xs[r]` has one
/// block per weight block, and `out.len() == xs.len()`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot32_rows(ty: WeightType, w: &[u8], xs: &[&[Q8x32]], out: &mut [f32]) {
    out.iter_mut().for_each(|o| *o = 0.0);
    let uses_min = matches!(ty, WeightType::Q4_1 | WeightType::Q5_1);
    for (bi, b) in w.chunks_exact(ty.block_bytes()).enumerate() {
        let (lo, hi, d, m) = decode32(ty, b);
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            let a = &x[bi];
            let q = a.qs.as_ptr();
            let acc = sdot(sdot(vdupq_n_s32(0), lo, vld1q_s8(q)), hi, vld1q_s8(q.add(16)));
            let sumi = vaddvq_s32(acc);
            let s = if uses_min { a.s_min } else { a.s };
            *o += d * a.d * sumi as f32 + m * s;
        }
    }
}

/// A 256-weight block's codes as bytes, the per-16 scales and minimums, and `(d,
/// dmin)`: [`super::scalar`]'s `decode256`, with Q4_K, Q5_K and Q6_K unpacked in
/// vectors (Q2_K and Q3_K through the scalar decoder).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn decode256(
    ty: WeightType,
    b: &[u8],
    codes: &mut [i8; 256],
    sc: &mut [i32; 16],
    mn: &mut [i32; 16],
) -> (f32, f32) {
    let c = codes.as_mut_ptr();
    let low = vdupq_n_u8(0xF);
    match ty {
        WeightType::Q4K | WeightType::Q5K => {
            let scales = &b[4..16];
            let (qh, qs) = if ty == WeightType::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for sub in 0..8 {
                let (s, m) = scale_min_k4(sub, scales);
                (sc[2 * sub], sc[2 * sub + 1]) = (s as i32, s as i32);
                (mn[2 * sub], mn[2 * sub + 1]) = (m as i32, m as i32);
            }
            for j in 0..4 {
                let q0 = vld1q_u8(qs[32 * j..].as_ptr());
                let q1 = vld1q_u8(qs[32 * j + 16..].as_ptr());
                let mut v = [vandq_u8(q0, low), vandq_u8(q1, low), vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1)];
                if let Some(qh) = qh {
                    let (h0, h1) = (vld1q_u8(qh.as_ptr()), vld1q_u8(qh[16..].as_ptr()));
                    for (i, (h, sub)) in
                        [(h0, 2 * j), (h1, 2 * j), (h0, 2 * j + 1), (h1, 2 * j + 1)].into_iter().enumerate()
                    {
                        let bit = vtstq_u8(h, vdupq_n_u8(1 << sub));
                        v[i] = vorrq_u8(v[i], vandq_u8(bit, vdupq_n_u8(0x10)));
                    }
                }
                for (i, v) in v.into_iter().enumerate() {
                    vst1q_s8(c.add(64 * j + 16 * i), vreinterpretq_s8_u8(v));
                }
            }
            (f16_at(b, 0), f16_at(b, 2))
        }
        WeightType::Q6K => {
            let three = vdupq_n_u8(3);
            for half in 0..2 {
                let (ql, qh) = (&b[64 * half..], &b[128 + 32 * half..]);
                for l in [0, 16] {
                    let (a, bq) = (vld1q_u8(ql[l..].as_ptr()), vld1q_u8(ql[l + 32..].as_ptr()));
                    let h = vld1q_u8(qh[l..].as_ptr());
                    let parts = [
                        vorrq_u8(vandq_u8(a, low), vshlq_n_u8::<4>(vandq_u8(h, three))),
                        vorrq_u8(vandq_u8(bq, low), vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(h), three))),
                        vorrq_u8(vshrq_n_u8::<4>(a), vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(h), three))),
                        vorrq_u8(vshrq_n_u8::<4>(bq), vshlq_n_u8::<4>(vshrq_n_u8::<6>(h))),
                    ];
                    for (i, p) in parts.into_iter().enumerate() {
                        vst1q_s8(c.add(128 * half + 32 * i + l), vreinterpretq_s8_u8(p));
                    }
                }
            }
            for g in 0..16 {
                sc[g] = b[192 + g] as i8 as i32;
                mn[g] = 32 * sc[g];
            }
            let d = f16_at(b, 208);
            (d, d)
        }
        _ => {
            let mut wide = [0i32; 256];
            let dd = super::scalar::decode256(ty, b, &mut wide, sc, mn);
            for (c, w) in codes.iter_mut().zip(wide) {
                *c = w as i8;
            }
            dd
        }
    }
}

/// `out[r] = w · xs[r]` for a row `w` of a 256-weight type: [`super::scalar::dot256`]'s
/// bits.
///
/// # Safety
/// As [`dot32_rows`], with 256-weight blocks.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot256_rows(ty: WeightType, w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    out.iter_mut().for_each(|o| *o = 0.0);
    let mut codes = [0i8; 256];
    let (mut sc, mut mn) = ([0i32; 16], [0i32; 16]);
    for (bi, b) in w.chunks_exact(ty.block_bytes()).enumerate() {
        let (d, dmin) = decode256(ty, b, &mut codes, &mut sc, &mut mn);
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            let a = &x[bi];
            let mut acc = vdupq_n_s32(0);
            for g in (0..16).step_by(4) {
                // The sums of groups g..g + 4 (16 codes each), one per lane.
                let part = |i: usize| {
                    let at = 16 * (g + i);
                    sdot(vdupq_n_s32(0), vld1q_s8(codes[at..].as_ptr()), vld1q_s8(a.qs[at..].as_ptr()))
                };
                let sums = vpaddq_s32(vpaddq_s32(part(0), part(1)), vpaddq_s32(part(2), part(3)));
                acc = vmlaq_s32(acc, sums, vld1q_s32(sc[g..].as_ptr()));
            }
            let sumi = vaddvq_s32(acc);
            let summ: i32 = mn.iter().zip(&a.bsums).map(|(&m, &s)| m * s as i32).sum();
            *o += a.d * (d * sumi as f32 - dmin * summ as f32);
        }
    }
}
