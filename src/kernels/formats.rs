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
/// case in `src/kernels/tests.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// Unquantized IEEE half floats, one weight per 2 bytes (multiplied with f32
    /// activations, `ActKind::Floats`).
    F16,
    /// Unquantized bfloat16 (the top half of an f32), one weight per 2 bytes.
    BF16,
    /// 32 weights: `d: f16`, 16 bytes of nibbles; `w = (q - 8)·d`.
    Q4_0,
    /// 32 weights: `d: f16`, `m: f16`, 16 bytes of nibbles; `w = q·d + m`.
    Q4_1,
    /// 32 weights: `d: f16`, `qh: u32` (5th bits), 16 bytes of nibbles; `w = (q - 16)·d`.
    Q5_0,
    /// 32 weights: `d: f16`, `m: f16`, `qh: u32` (5th bits), 16 bytes of nibbles;
    /// `w = q·d + m`.
    Q5_1,
    /// 32 weights: `d: f16`, 32 signed bytes; `w = q·d`.
    Q8_0,
    /// 256 weights: 16 bytes of 4-bit scale/min pairs (one per 16 weights), 64 bytes
    /// of 2-bit codes, `d, dmin: f16`; `w = d·sc·q - dmin·m`.
    Q2K,
    /// 256 weights: 32 bytes of high bits, 64 bytes of 2-bit low codes, 12 bytes of
    /// packed 6-bit scales (one per 16 weights), `d: f16`;
    /// `w = d·(sc - 32)·(q - (high bit ? 0 : 4))`.
    Q3K,
    /// 256 weights: `d, dmin: f16`, 12 bytes of packed 6-bit scales/mins for 8
    /// sub-blocks of 32, 128 bytes of nibbles; `w = d·sc·q - dmin·m`.
    Q4K,
    /// 256 weights: as Q4_K plus 32 bytes holding each weight's 5th bit.
    Q5K,
    /// 256 weights: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed
    /// 8-bit scales (one per 16 weights), `d: f16`; `w = d·sc·(q - 32)`.
    Q6K,
    /// 32 weights: `d: f16`, 16 bytes of nibbles indexing a fixed non-linear table
    /// (`IQ4_VALUES`); `w = d·IQ4_VALUES[q]`.
    IQ4NL,
    /// 256 weights: `d: f16`, `scales_h: u16`, `scales_l: [u8; 4]` (a 6-bit scale
    /// `ls` per 32 weights), 128 bytes of nibbles as IQ4_NL's; `w = d·(ls - 32)·IQ4_VALUES[q]`.
    IQ4XS,
    /// 32 weights (OCP microscaling FP4): `e: u8` (an E8M0 power of two), 16 bytes of
    /// nibbles, each an E2M1 float (`FP4_VALUES`, doubled); `w = 2^(e-128)·FP4_VALUES[q]`.
    MXFP4,
}

/// IQ4_NL / IQ4_XS code values (ggml's `kvalues_iq4nl`).
pub const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// E2M1 (FP4) values times two (ggml's `kvalues_mxfp4`): the `½` is in the scale.
pub const FP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The scale of an MXFP4 block, halved to go with [`FP4_VALUES`]: `2^(e - 128)` as
/// ggml computes it (exponents 0 and 1 give f32 subnormals).
#[inline]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

/// A 32-weight table block (IQ4_NL, MXFP4) as `(scale, 16 bytes of nibbles, the
/// table the nibbles index)`; `w = scale · table[nibble]`, low nibbles first.
#[inline]
pub(crate) fn table_block(ty: WeightType, b: &[u8]) -> (f32, &[u8], &'static [i8; 16]) {
    match ty {
        WeightType::MXFP4 => (e8m0_half(b[0]), &b[1..17], &FP4_VALUES),
        _ => (f16_at(b, 0), &b[2..18], &IQ4_VALUES),
    }
}

/// The 6-bit scale of sub-block `ib` (0..8) of an IQ4_XS block `b`, minus 32.
#[inline(always)]
pub(crate) fn iq4xs_scale(b: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
    let hi = ((scales_h >> (2 * ib)) & 3) as u8;
    i32::from(lo | (hi << 4)) - 32
}

/// The activation format a weight type is multiplied with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActKind {
    /// The f32 activations as they are (F16, BF16: quantizing them to 8 bits would
    /// throw away what an unquantized weight keeps).
    Floats,
    /// Blocks of 32 ([`super::activation::Q8x32`]).
    Blocks32,
    /// Blocks of 256 with per-16 sums ([`super::activation::Q8x256`]).
    Blocks256,
}

impl WeightType {
    /// Every type, in GGML order.
    pub const ALL: [WeightType; 15] = [
        WeightType::F16,
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q8_0,
        WeightType::Q2K,
        WeightType::Q3K,
        WeightType::Q4K,
        WeightType::Q5K,
        WeightType::Q6K,
        WeightType::IQ4NL,
        WeightType::IQ4XS,
        WeightType::BF16,
        WeightType::MXFP4,
    ];

    /// Weights per block.
    pub const fn block_len(self) -> usize {
        match self {
            WeightType::F16 | WeightType::BF16 => 1,
            WeightType::Q4_0
            | WeightType::Q4_1
            | WeightType::Q5_0
            | WeightType::Q5_1
            | WeightType::Q8_0
            | WeightType::IQ4NL
            | WeightType::MXFP4 => 32,
            WeightType::Q2K
            | WeightType::Q3K
            | WeightType::Q4K
            | WeightType::Q5K
            | WeightType::Q6K
            | WeightType::IQ4XS => 256,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            WeightType::F16 | WeightType::BF16 => 2,
            WeightType::Q4_0 => 18,
            WeightType::Q4_1 => 20,
            WeightType::Q5_0 => 22,
            WeightType::Q5_1 => 24,
            WeightType::Q8_0 => 34,
            WeightType::Q2K => 84,
            WeightType::Q3K => 110,
            WeightType::Q4K => 144,
            WeightType::Q5K => 176,
            WeightType::Q6K => 210,
            WeightType::IQ4NL => 18,
            WeightType::IQ4XS => 136,
            WeightType::MXFP4 => 17,
        }
    }

    /// Which activation blocks the dot products take.
    pub(crate) const fn act_kind(self) -> ActKind {
        match self.block_len() {
            1 => ActKind::Floats,
            32 => ActKind::Blocks32,
            _ => ActKind::Blocks256,
        }
    }

    /// ggml's id of this type (`enum ggml_type`, the id in a GGUF tensor directory).
    pub const fn ggml_id(self) -> u32 {
        match self {
            WeightType::F16 => 1,
            WeightType::BF16 => 30,
            WeightType::Q4_0 => 2,
            WeightType::Q4_1 => 3,
            WeightType::Q5_0 => 6,
            WeightType::Q5_1 => 7,
            WeightType::Q8_0 => 8,
            WeightType::Q2K => 10,
            WeightType::Q3K => 11,
            WeightType::Q4K => 12,
            WeightType::Q5K => 13,
            WeightType::Q6K => 14,
            WeightType::IQ4NL => 20,
            WeightType::IQ4XS => 23,
            WeightType::MXFP4 => 39,
        }
    }

    /// The type with ggml id `id`, `None` for types without a kernel here.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// candle's enum value for this type, for the types candle also reads (`None`
    /// for IQ4_NL, IQ4_XS and MXFP4, which only these kernels read).
    pub fn to_candle(self) -> Option<candle_core::quantized::GgmlDType> {
        candle_dtype(self.ggml_id())
    }

    /// The type of candle's enum value `dtype`, `None` for candle types without a
    /// kernel here (F32, Q8_1, Q8_K).
    pub fn from_candle(dtype: candle_core::quantized::GgmlDType) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.to_candle() == Some(dtype))
    }

    /// The GGML name (`"q4_K"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            WeightType::F16 => "f16",
            WeightType::BF16 => "bf16",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q5_0 => "q5_0",
            WeightType::Q5_1 => "q5_1",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q2K => "q2_K",
            WeightType::Q3K => "q3_K",
            WeightType::Q4K => "q4_K",
            WeightType::Q5K => "q5_K",
            WeightType::Q6K => "q6_K",
            WeightType::IQ4NL => "iq4_nl",
            WeightType::IQ4XS => "iq4_xs",
            WeightType::MXFP4 => "mxfp4",
        }
    }
}

/// candle's enum value for the ggml tensor type with id `id`, `None` for the types
/// candle does not read (IQ4_NL, IQ4_XS, MXFP4, the other i-quants, integers).
pub fn candle_dtype(id: u32) -> Option<candle_core::quantized::GgmlDType> {
    use candle_core::quantized::GgmlDType as G;
    Some(match id {
        0 => G::F32,
        1 => G::F16,
        2 => G::Q4_0,
        3 => G::Q4_1,
        6 => G::Q5_0,
        7 => G::Q5_1,
        8 => G::Q8_0,
        9 => G::Q8_1,
        10 => G::Q2K,
        11 => G::Q3K,
        12 => G::Q4K,
        13 => G::Q5K,
        14 => G::Q6K,
        15 => G::Q8K,
        30 => G::BF16,
        _ => return None,
    })
}

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 4-bit scale and min of group `g` (0..16) of a Q2_K block `b`.
#[inline(always)]
pub(crate) fn q2k_scale_min(b: &[u8], g: usize) -> (u8, u8) {
    (b[g] & 0xF, b[g] >> 4)
}

/// The 16 scales of a Q3_K block's 12 packed bytes `s`, minus 32: scale `j` has its
/// low 4 bits in `s[j % 8]` (low nibble for `j < 8`, high nibble after) and its high 2
/// bits in `s[8 + j % 4]` at bit `2·(j / 4)`.
#[inline(always)]
pub(crate) fn q3k_scales(s: &[u8]) -> [i32; 16] {
    q3k_scale_bytes(s).map(|b| i32::from(b) - 32)
}

/// [`q3k_scales`] before the `- 32`, as 16 bytes, computed branch-free in integer
/// registers (a loop over `j` with its variable shifts left LLVM a scalar loop in the
/// AVX2 kernel, 3× slower than this).
#[inline(always)]
pub(crate) fn q3k_scale_bytes(s: &[u8]) -> [u8; 16] {
    let low = u64::from_le_bytes(s[0..8].try_into().expect("12 bytes"));
    let high = u32::from_le_bytes(s[8..12].try_into().expect("12 bytes"));
    let nibbles = 0x0F0F_0F0F_0F0F_0F0Fu64;
    let low = u128::from(low & nibbles) | u128::from((low >> 4) & nibbles) << 64;
    let pairs = 0x0303_0303u32;
    let high = (0..4).fold(0u128, |acc, q| acc | u128::from((high >> (2 * q)) & pairs) << (32 * q));
    (low | high << 4).to_le_bytes()
}

/// The unsigned 6-bit codes (`q + 32`, 0..64) of a Q6_K block's 256 weights, in
/// weight order: weights `128h + 32k + l` (`k` 0..4, `l` 0..32) take nibble `k / 2` of
/// `ql[64h + l + 32·(k % 2)]` and bits `2k..2k+2` of `qh[32h + l]`. Runs of 32 over
/// `l`, which the compiler does a vector at a time.
#[inline]
pub(crate) fn q6k_codes(b: &[u8]) -> [u8; 256] {
    let (ql, qh) = (&b[..128], &b[128..192]);
    let mut codes = [0u8; 256];
    for h in 0..2 {
        for k in 0..4 {
            let (low, high) = (&ql[64 * h + 32 * (k % 2)..][..32], &qh[32 * h..][..32]);
            for (l, code) in codes[128 * h + 32 * k..][..32].iter_mut().enumerate() {
                *code = low[l] >> (4 * (k / 2)) & 0xF | (high[l] >> (2 * k) & 3) << 4;
            }
        }
    }
    codes
}

/// The signed codes of a Q2_K (0..4) or Q3_K (−4..4) block's 256 weights, group by
/// group (weight `16g + l`): group `g` (0..16, 16 weights each) reads its 2-bit codes
/// from byte `32·(g / 8) + 16·(g % 2) + l` of the code bytes at bit `2·((g % 8) / 2)`,
/// and (Q3_K) its high bit from byte `16·(g % 2) + l` of the high-bit bytes at bit
/// `g / 2` (a clear bit subtracts 4). Runs of 16 over `l`, which the compiler does a
/// vector at a time.
#[inline]
pub(crate) fn q23k_codes(ty: WeightType, b: &[u8]) -> [i8; 256] {
    let q3 = ty == WeightType::Q3K;
    let codes_at = if q3 { 32 } else { 16 };
    let mut codes = [0i8; 256];
    for g in 0..16 {
        let (shift, low) = (2 * ((g % 8) / 2), &b[codes_at + 32 * (g / 8) + 16 * (g % 2)..][..16]);
        let high = &b[16 * (g % 2)..][..16];
        for (l, code) in codes[16 * g..][..16].iter_mut().enumerate() {
            let q = (low[l] >> shift & 3) as i8;
            *code = if q3 { q - 4 + 4 * ((high[l] >> (g / 2) & 1) as i8) } else { q };
        }
    }
    codes
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block's 12 packed bytes.
#[inline(always)]
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
        WeightType::F16 | WeightType::BF16 => out[0] = float_at(ty, b, 0),
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
        WeightType::Q5_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) << 4;
                let h1 = ((qh >> (j + 16)) & 1) << 4;
                out[j] = ((b[8 + j] & 0xF) as u32 | h0) as f32 * d + m;
                out[j + 16] = ((b[8 + j] >> 4) as u32 | h1) as f32 * d + m;
            }
        }
        WeightType::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                out[j] = b[2 + j] as i8 as f32 * d;
            }
        }
        WeightType::Q2K => {
            let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
            let codes = q23k_codes(ty, b);
            for g in 0..16 {
                let (sc, m) = q2k_scale_min(b, g);
                for l in 0..16 {
                    out[16 * g + l] = d * sc as f32 * codes[16 * g + l] as f32 - dmin * m as f32;
                }
            }
        }
        WeightType::Q3K => {
            let d = f16_at(b, 108);
            let scales = q3k_scales(&b[96..108]);
            let codes = q23k_codes(ty, b);
            for g in 0..16 {
                let dl = d * scales[g] as f32;
                for l in 0..16 {
                    out[16 * g + l] = dl * codes[16 * g + l] as f32;
                }
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
            for (i, (o, q)) in out.iter_mut().zip(q6k_codes(b)).enumerate() {
                *o = d * (b[192 + i / 16] as i8 as f32) * (i32::from(q) - 32) as f32;
            }
        }
        WeightType::IQ4NL | WeightType::MXFP4 => {
            let (d, qs, values) = table_block(ty, b);
            for j in 0..16 {
                out[j] = d * values[(qs[j] & 0xF) as usize] as f32;
                out[j + 16] = d * values[(qs[j] >> 4) as usize] as f32;
            }
        }
        WeightType::IQ4XS => {
            let d = f16_at(b, 0);
            for ib in 0..8 {
                let dl = d * iq4xs_scale(b, ib) as f32;
                let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
                for j in 0..16 {
                    out[32 * ib + j] = dl * IQ4_VALUES[(qs[j] & 0xF) as usize] as f32;
                    out[32 * ib + j + 16] = dl * IQ4_VALUES[(qs[j] >> 4) as usize] as f32;
                }
            }
        }
    }
}

/// Weight `i` of a row of F16 or BF16 weights `b` (other types: unreachable).
#[inline]
pub(crate) fn float_at(ty: WeightType, b: &[u8], i: usize) -> f32 {
    let bits = u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
    match ty {
        WeightType::BF16 => f32::from_bits(u32::from(bits) << 16),
        _ => f16::from_bits(bits).to_f32(),
    }
}

/// Dequantize a whole row (`row.len()` a multiple of `block_bytes`) into `out`.
pub fn dequantize_row(ty: WeightType, row: &[u8], out: &mut [f32]) {
    if ty.act_kind() == ActKind::Floats {
        // One weight per block: a loop over the row, not a call per weight.
        for (i, o) in out.iter_mut().enumerate().take(row.len() / 2) {
            *o = float_at(ty, row, i);
        }
        return;
    }
    let (bl, bb) = (ty.block_len(), ty.block_bytes());
    for (b, o) in row.chunks_exact(bb).zip(out.chunks_exact_mut(bl)) {
        dequantize_block(ty, b, o);
    }
}

/// A row of IQ4_NL, IQ4_XS or MXFP4 weights (`row.len()` a multiple of the type's
/// `block_bytes`) rewritten as Q8_0 blocks of 34 bytes per 32 weights, for devices
/// whose matmul reads Q8_0 but not these table types (candle's CUDA and Metal).
///
/// All three store each 32 weights as `unit · code` with a small integer `code`
/// (`|code| ≤ 127`), which is exactly a Q8_0 block whenever `unit` is an f16:
/// - IQ4_NL: `unit` is the block's f16 scale — always exact;
/// - MXFP4: `unit` is a power of two, `2^(e-128)` — exact for `e` from 104 to 146
///   (the codes are shifted left when the unit alone is too large for an f16); a
///   smaller unit (weights under about 1e-7) is rounded to f16's steps of 2^-24;
/// - IQ4_XS: `unit = d·(ls - 32)` needs up to 17 significant bits; it is rounded to
///   the nearest f16, a relative change of at most 2^-11 per 32 weights (the type's
///   own rounding is about 2^-4).
///
/// Cost: O(`row.len()`), one output allocation of `34 · weights / 32` bytes —
/// twice the bytes of these 4.25–4.5-bit types.
///
/// # Errors
/// `None` for other types, a row that is not whole blocks, or an MXFP4 unit past
/// f16's range even with the codes shifted (`e` over 146, weights over 2^21; none
/// seen in real files).
pub fn to_q8_0(ty: WeightType, row: &[u8]) -> Option<Vec<u8>> {
    let bb = ty.block_bytes();
    if !matches!(ty, WeightType::IQ4NL | WeightType::IQ4XS | WeightType::MXFP4) || !row.len().is_multiple_of(bb) {
        return None;
    }
    let mut out = Vec::with_capacity(row.len() / bb * ty.block_len() / 32 * 34);
    let mut codes = [0i32; 32];
    for b in row.chunks_exact(bb) {
        let groups = ty.block_len() / 32;
        for g in 0..groups {
            let (unit, qs, table) = match ty {
                WeightType::IQ4XS => {
                    let unit = f16_at(b, 0) * iq4xs_scale(b, g) as f32;
                    (unit, &b[8 + 16 * g..24 + 16 * g], &IQ4_VALUES)
                }
                _ => table_block(ty, b),
            };
            for j in 0..16 {
                codes[j] = i32::from(table[(qs[j] & 0xF) as usize]);
                codes[j + 16] = i32::from(table[(qs[j] >> 4) as usize]);
            }
            push_q8_0(&mut out, unit, &codes)?;
        }
    }
    Some(out)
}

/// Append the Q8_0 block of the 32 weights `unit · codes[i]`: exact when `unit`, or
/// `unit / 2^t` with the codes shifted left by `t` (still within ±127), is an f16;
/// else `unit` rounded to f16. `None` if no finite f16 scale fits.
fn push_q8_0(out: &mut Vec<u8>, unit: f32, codes: &[i32; 32]) -> Option<()> {
    let cmax = codes.iter().map(|c| c.unsigned_abs()).max().unwrap_or(0).max(1);
    // The largest left shift of the codes that stays within ±127.
    let room = (0..8).rev().find(|&t| cmax << t <= 127)?;
    let scale = |t: u32| unit / (1u32 << t) as f32;
    let t = match (0..=room).find(|&t| f16::from_f32(scale(t)).to_f32() == scale(t)) {
        Some(t) => t,
        // No exact scale: round the unit (or, past f16's range, the smallest unit the
        // codes' room allows).
        None if f16::from_f32(unit).is_finite() => 0,
        None => room,
    };
    let d = f16::from_f32(scale(t));
    if !d.is_finite() {
        return None;
    }
    out.extend_from_slice(&d.to_bits().to_le_bytes());
    out.extend(codes.iter().map(|&c| ((c << t) as i8) as u8));
    Some(())
}

/// `v` rounded to BF16, nearest-even (as `vcvtne2ps2bf16`; a NaN stays a quiet NaN),
/// as its 16 bits: how [`super::bf16_path`] rounds the activations.
#[cfg(any(test, target_arch = "x86_64"))]
pub fn bf16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    if v.is_nan() {
        return ((b >> 16) as u16) | 0x40;
    }
    (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    #[test]
    fn fn_example() {
        use crate::kernels::WeightType;
        for t in WeightType::ALL {
            assert_eq!(WeightType::from_ggml_id(t.ggml_id()), Some(t));
        }
        assert_eq!(WeightType::IQ4XS.ggml_id(), 23);
    }

    #[test]
    fn candle_dtype_example() {
        use crate::kernels::formats::candle_dtype;
        use candle_core::quantized::GgmlDType;
        assert_eq!(candle_dtype(12), Some(GgmlDType::Q4K));
        assert_eq!(candle_dtype(23), None); // IQ4_XS
    }

    #[test]
    fn to_q8_0_example() {
        use crate::kernels::formats::{dequantize_row, to_q8_0, WeightType};
        // One IQ4_NL block: scale 0.5, nibbles 0..16 twice.
        let mut b = vec![0x00, 0x38];
        b.extend((0..16u8).map(|j| j | (j << 4)));
        let q8 = to_q8_0(WeightType::IQ4NL, &b).unwrap();
        let (mut want, mut got) = ([0f32; 32], [0f32; 32]);
        dequantize_row(WeightType::IQ4NL, &b, &mut want);
        dequantize_row(WeightType::Q8_0, &q8, &mut got);
        assert_eq!(want, got);
    }

    #[test]
    fn bf16_bits_example() {
        use crate::kernels::formats::bf16_bits;
        assert_eq!(bf16_bits(1.0), 0x3F80);
        assert_eq!(bf16_bits(f32::from_bits(0x3F80_8000)), 0x3F80); // a tie: to even
        assert_eq!(bf16_bits(f32::from_bits(0x3F81_8000)), 0x3F82);
    }
}
