//! Portable dot products: one weight row against up to [`super::MAX_ROWS`] activation
//! rows, in integer arithmetic per block like the SIMD kernels (so the two agree to
//! float rounding). Used where no SIMD kernel applies, and as the tests' second
//! opinion on the SIMD ones.

use super::activation::{Q8x256, Q8x32};
use super::formats::{
    f16_at, float_at, iq4xs_scale, q23k_codes, q2k_scale_min, q3k_scales, q6k_codes, scale_min_k4, table_block,
    WeightType, IQ4_VALUES,
};

/// A 32-weight block as `w = d·code + m`.
#[inline]
fn decode32(ty: WeightType, b: &[u8], codes: &mut [i32; 32]) -> (f32, f32) {
    match ty {
        WeightType::Q4_0 | WeightType::Q4_1 => {
            let qs = if ty == WeightType::Q4_0 { &b[2..18] } else { &b[4..20] };
            for j in 0..16 {
                codes[j] = (qs[j] & 0xF) as i32;
                codes[j + 16] = (qs[j] >> 4) as i32;
            }
            let d = f16_at(b, 0);
            (d, if ty == WeightType::Q4_0 { -8.0 * d } else { f16_at(b, 2) })
        }
        WeightType::Q5_0 => {
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for j in 0..16 {
                codes[j] = ((b[6 + j] & 0xF) as u32 | (((qh >> j) & 1) << 4)) as i32;
                codes[j + 16] = ((b[6 + j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4)) as i32;
            }
            let d = f16_at(b, 0);
            (d, -16.0 * d)
        }
        WeightType::Q5_1 => {
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            for j in 0..16 {
                codes[j] = ((b[8 + j] & 0xF) as u32 | (((qh >> j) & 1) << 4)) as i32;
                codes[j + 16] = ((b[8 + j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4)) as i32;
            }
            (f16_at(b, 0), f16_at(b, 2))
        }
        WeightType::Q8_0 => {
            for j in 0..32 {
                codes[j] = b[2 + j] as i8 as i32;
            }
            (f16_at(b, 0), 0.0)
        }
        WeightType::IQ4NL | WeightType::MXFP4 => {
            let (d, qs, values) = table_block(ty, b);
            for j in 0..16 {
                codes[j] = values[(qs[j] & 0xF) as usize] as i32;
                codes[j + 16] = values[(qs[j] >> 4) as usize] as i32;
            }
            (d, 0.0)
        }
        _ => unreachable!("not a 32-weight type"),
    }
}

/// A 256-weight block as `w = d·sc[g]·code - dmin·mn[g]` for each group `g` of 16.
#[inline]
pub(super) fn decode256(
    ty: WeightType,
    b: &[u8],
    codes: &mut [i32; 256],
    sc: &mut [i32; 16],
    mn: &mut [i32; 16],
) -> (f32, f32) {
    match ty {
        WeightType::Q4K | WeightType::Q5K => {
            let scales = &b[4..16];
            let (qh, qs) = if ty == WeightType::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for j in 0..4 {
                for (sub, shift) in [(2 * j, 0), (2 * j + 1, 4)] {
                    let (s, m) = scale_min_k4(sub, scales);
                    sc[2 * sub] = s as i32;
                    sc[2 * sub + 1] = s as i32;
                    mn[2 * sub] = m as i32;
                    mn[2 * sub + 1] = m as i32;
                    for l in 0..32 {
                        let mut q = ((qs[32 * j + l] >> shift) & 0xF) as i32;
                        if let Some(qh) = qh {
                            q |= (((qh[l] >> sub) & 1) as i32) << 4;
                        }
                        codes[32 * sub + l] = q;
                    }
                }
            }
            (f16_at(b, 0), f16_at(b, 2))
        }
        WeightType::Q6K => {
            for (code, q) in codes.iter_mut().zip(q6k_codes(b)) {
                *code = i32::from(q);
            }
            for g in 0..16 {
                sc[g] = b[192 + g] as i8 as i32;
                mn[g] = 32 * sc[g];
            }
            let d = f16_at(b, 208);
            (d, d)
        }
        WeightType::Q2K | WeightType::Q3K => {
            for (code, q) in codes.iter_mut().zip(q23k_codes(ty, b)) {
                *code = i32::from(q);
            }
            if ty == WeightType::Q2K {
                for g in 0..16 {
                    let (s, m) = q2k_scale_min(b, g);
                    (sc[g], mn[g]) = (i32::from(s), i32::from(m));
                }
                (f16_at(b, 80), f16_at(b, 82))
            } else {
                *sc = q3k_scales(&b[96..108]);
                *mn = [0; 16];
                (f16_at(b, 108), 0.0)
            }
        }
        WeightType::IQ4XS => {
            for ib in 0..8 {
                let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
                for j in 0..16 {
                    codes[32 * ib + j] = IQ4_VALUES[(qs[j] & 0xF) as usize] as i32;
                    codes[32 * ib + j + 16] = IQ4_VALUES[(qs[j] >> 4) as usize] as i32;
                }
                let s = iq4xs_scale(b, ib);
                sc[2 * ib] = s;
                sc[2 * ib + 1] = s;
                mn[2 * ib] = 0;
                mn[2 * ib + 1] = 0;
            }
            (f16_at(b, 0), 0.0)
        }
        _ => unreachable!("not a 256-weight type"),
    }
}

/// `out[r] = w · xs[r]` for a row `w` of a 32-weight type.
pub fn dot32(ty: WeightType, w: &[u8], xs: &[&[Q8x32]], out: &mut [f32]) {
    let mut codes = [0i32; 32];
    out.iter_mut().for_each(|o| *o = 0.0);
    for (bi, b) in w.chunks_exact(ty.block_bytes()).enumerate() {
        let (d, m) = decode32(ty, b, &mut codes);
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            let a = &x[bi];
            let sumi: i32 = codes.iter().zip(&a.qs).map(|(&c, &q)| c * q as i32).sum();
            let s = if matches!(ty, WeightType::Q4_1 | WeightType::Q5_1) { a.s_min } else { a.s };
            *o += d * a.d * sumi as f32 + m * s;
        }
    }
}

/// `out[r] = w · xs[r]` for a row `w` of a 256-weight type.
pub fn dot256(ty: WeightType, w: &[u8], xs: &[&[Q8x256]], out: &mut [f32]) {
    let mut codes = [0i32; 256];
    let (mut sc, mut mn) = ([0i32; 16], [0i32; 16]);
    out.iter_mut().for_each(|o| *o = 0.0);
    for (bi, b) in w.chunks_exact(ty.block_bytes()).enumerate() {
        let (d, dmin) = decode256(ty, b, &mut codes, &mut sc, &mut mn);
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            let a = &x[bi];
            let (mut sumi, mut summ) = (0i32, 0i32);
            for g in 0..16 {
                let s: i32 = (0..16).map(|l| codes[16 * g + l] * a.qs[16 * g + l] as i32).sum();
                sumi += sc[g] * s;
                summ += mn[g] * a.bsums[g] as i32;
            }
            *o += a.d * (d * sumi as f32 - dmin * summ as f32);
        }
    }
}

/// `out[r] = w · xs[r]` for a row `w` of F16 or BF16 weights and f32 activation rows,
/// with eight partial sums per row (so the compiler can vectorize it).
pub fn dot_floats(ty: WeightType, w: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    let k = w.len() / 2;
    let mut lanes = [[0f32; 8]; super::MAX_ROWS];
    let mut wv = [0f32; 8];
    let full = k / 8 * 8;
    for i in (0..full).step_by(8) {
        for (l, v) in wv.iter_mut().enumerate() {
            *v = float_at(ty, w, i + l);
        }
        for (x, acc) in xs.iter().zip(lanes.iter_mut()) {
            for l in 0..8 {
                acc[l] += wv[l] * x[i + l];
            }
        }
    }
    for ((x, acc), o) in xs.iter().zip(&lanes).zip(out.iter_mut()) {
        *o = acc.iter().sum::<f32>() + (full..k).map(|i| float_at(ty, w, i) * x[i]).sum::<f32>();
    }
}
