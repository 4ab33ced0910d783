//! GGUF block layouts of the weight types the kernels read, and their reference
//! (scalar) dequantization.
//!
//! Every type stores a row of `k` weights as `k / block_len` consecutive blocks of
//! `block_bytes` bytes; all multi-byte fields are little-endian. The layouts are the
//! ones GGML defines; each `dequantize_*` below is the definition the SIMD kernels
//! must agree with.

use half::f16;

/// The quantized weight types with kernels of their own.
///
/// Adding a type is one arm in each `match` over this enum in `kernels/` plus a test
/// case in `tests/integration/kernels.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// 32 weights: `d: f16`, 16 bytes of nibbles; `w = (q - 8)·d`.
    Q4_0,
    /// 32 weights: `d: f16`, `m: f16`, 16 bytes of nibbles; `w = q·d + m`.
    Q4_1,
    /// 32 weights: `d: f16`, `qh: u32` (5th bits), 16 bytes of nibbles; `w = (q - 16)·d`.
    Q5_0,
    /// 32 weights: `d: f16`, 32 signed bytes; `w = q·d`.
    Q8_0,
    /// 256 weights: `d, dmin: f16`, 12 bytes of packed 6-bit scales/mins for 8
    /// sub-blocks of 32, 128 bytes of nibbles; `w = d·sc·q - dmin·m`.
    Q4K,
    /// 256 weights: as Q4_K plus 32 bytes holding each weight's 5th bit.
    Q5K,
    /// 256 weights: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed
    /// 8-bit scales (one per 16 weights), `d: f16`; `w = d·sc·(q - 32)`.
    Q6K,
}

/// The activation format a weight type is multiplied with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActKind {
    /// Blocks of 32 ([`super::activation::Q8x32`]).
    Blocks32,
    /// Blocks of 256 with per-16 sums ([`super::activation::Q8x256`]).
    Blocks256,
}

impl WeightType {
    /// Every type, in GGML order.
    pub const ALL: [WeightType; 7] = [
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q8_0,
        WeightType::Q4K,
        WeightType::Q5K,
        WeightType::Q6K,
    ];

    /// Weights per block.
    pub const fn block_len(self) -> usize {
        match self {
            WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q5_0 | WeightType::Q8_0 => 32,
            WeightType::Q4K | WeightType::Q5K | WeightType::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            WeightType::Q4_0 => 18,
            WeightType::Q4_1 => 20,
            WeightType::Q5_0 => 22,
            WeightType::Q8_0 => 34,
            WeightType::Q4K => 144,
            WeightType::Q5K => 176,
            WeightType::Q6K => 210,
        }
    }

    /// Which activation blocks the dot products take.
    pub const fn act_kind(self) -> ActKind {
        match self.block_len() {
            32 => ActKind::Blocks32,
            _ => ActKind::Blocks256,
        }
    }

    /// candle's enum for this type (always exists: every kernel type is a GGML type).
    ///
    /// ```
    /// use toolgate::kernels::WeightType;
    /// let t = WeightType::Q4K;
    /// assert_eq!(WeightType::from_ggml(t.to_ggml()), Some(t));
    /// ```
    pub const fn to_ggml(self) -> candle_core::quantized::GgmlDType {
        use candle_core::quantized::GgmlDType as G;
        match self {
            WeightType::Q4_0 => G::Q4_0,
            WeightType::Q4_1 => G::Q4_1,
            WeightType::Q5_0 => G::Q5_0,
            WeightType::Q8_0 => G::Q8_0,
            WeightType::Q4K => G::Q4K,
            WeightType::Q5K => G::Q5K,
            WeightType::Q6K => G::Q6K,
        }
    }

    /// The type from candle's enum, `None` for types without a kernel here.
    pub fn from_ggml(dtype: candle_core::quantized::GgmlDType) -> Option<Self> {
        use candle_core::quantized::GgmlDType as G;
        Some(match dtype {
            G::Q4_0 => WeightType::Q4_0,
            G::Q4_1 => WeightType::Q4_1,
            G::Q5_0 => WeightType::Q5_0,
            G::Q8_0 => WeightType::Q8_0,
            G::Q4K => WeightType::Q4K,
            G::Q5K => WeightType::Q5K,
            G::Q6K => WeightType::Q6K,
            _ => return None,
        })
    }

    /// The GGML name (`"q4_K"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q5_0 => "q5_0",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4K => "q4_K",
            WeightType::Q5K => "q5_K",
            WeightType::Q6K => "q6_K",
        }
    }
}

#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block's 12 packed bytes.
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Dequantize one block `b` (exactly `block_bytes` long) into `out` (`block_len` long).
pub fn dequantize_block(ty: WeightType, b: &[u8], out: &mut [f32]) {
    match ty {
        WeightType::Q4_0 => {
            let d = f16_at(b, 0);
            for j in 0..16 {
                out[j] = ((b[2 + j] & 0xF) as i32 - 8) as f32 * d;
                out[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        WeightType::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for j in 0..16 {
                out[j] = (b[4 + j] & 0xF) as f32 * d + m;
                out[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
            }
        }
        WeightType::Q5_0 => {
            let d = f16_at(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) << 4;
                let h1 = ((qh >> (j + 16)) & 1) << 4;
                out[j] = (((b[6 + j] & 0xF) as u32 | h0) as i32 - 16) as f32 * d;
                out[j + 16] = (((b[6 + j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
            }
        }
        WeightType::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                out[j] = b[2 + j] as i8 as f32 * d;
            }
        }
        WeightType::Q4K | WeightType::Q5K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let (qh, qs) = if ty == WeightType::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for j in 0..4 {
                let (sc0, m0) = scale_min_k4(2 * j, scales);
                let (sc1, m1) = scale_min_k4(2 * j + 1, scales);
                let (d0, min0) = (d * sc0 as f32, dmin * m0 as f32);
                let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
                for l in 0..32 {
                    let mut lo = (qs[32 * j + l] & 0xF) as u32;
                    let mut hi = (qs[32 * j + l] >> 4) as u32;
                    if let Some(qh) = qh {
                        lo |= ((qh[l] as u32 >> (2 * j)) & 1) << 4;
                        hi |= ((qh[l] as u32 >> (2 * j + 1)) & 1) << 4;
                    }
                    out[64 * j + l] = d0 * lo as f32 - min0;
                    out[64 * j + 32 + l] = d1 * hi as f32 - min1;
                }
            }
        }
        WeightType::Q6K => {
            let d = f16_at(b, 208);
            for half in 0..2 {
                let ql = &b[64 * half..64 * half + 64];
                let qh = &b[128 + 32 * half..128 + 32 * half + 32];
                let sc = &b[192 + 8 * half..192 + 8 * half + 8];
                let o = &mut out[128 * half..128 * half + 128];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    o[l] = d * (sc[is] as i8 as f32) * q1 as f32;
                    o[l + 32] = d * (sc[is + 2] as i8 as f32) * q2 as f32;
                    o[l + 64] = d * (sc[is + 4] as i8 as f32) * q3 as f32;
                    o[l + 96] = d * (sc[is + 6] as i8 as f32) * q4 as f32;
                }
            }
        }
    }
}

/// Dequantize a whole row (`row.len()` a multiple of `block_bytes`) into `out`.
pub fn dequantize_row(ty: WeightType, row: &[u8], out: &mut [f32]) {
    let (bl, bb) = (ty.block_len(), ty.block_bytes());
    for (b, o) in row.chunks_exact(bb).zip(out.chunks_exact_mut(bl)) {
        dequantize_block(ty, b, o);
    }
}
