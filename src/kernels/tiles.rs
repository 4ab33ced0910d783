//! Weights of the 32-weight block types, IQ4_XS and the k-quants regrouped into 16-row tiles
//! for the AVX-512 VNNI and AVX2 kernels (`super::avx512::tile_rows`,
//! `super::avx2::tile_rows`, `super::avx512::tile_rows_256`), and the matmul
//! over them.
//!
//! Why regroup: in GGUF's layout a block is one row's 32 weights, so a dot product
//! ends every block in a horizontal sum across SIMD lanes, for every activation row.
//! In a tile the lanes are 16 *weight rows*: each 32-bit lane of a 512-bit vector
//! holds 4 consecutive codes of one row, so one `vpdpbusd` multiplies 16 rows by the
//! same 4 activation codes (broadcast) and accumulates 64 products with no horizontal
//! work at all. Per block and activation row that is 8 `vpdpbusd` and 3 float
//! operations for 512 multiply-adds, against ~2 instructions per 32 on the row
//! kernels (AVX2, without VNNI, takes 8 rows per register and `maddubs` with 16-bit
//! partial sums instead) — and it is the same arithmetic for 1 activation row as for
//! 128, so the path no longer changes with the batch: every output sums its blocks in
//! file order whatever the row count (batch- and cache-invariant results).
//!
//! # Layout
//! Tile `t` holds weight rows `16t .. 16t + 16` (rows past the matrix are zeros); its
//! blocks follow in order, each `block_bytes(ty)` long:
//!
//! | type | codes | then |
//! |---|---|---|
//! | Q4_0, IQ4_NL | 256 B of nibbles | 16 × f16 `d` |
//! | Q4_1 | 256 B of nibbles | 16 × f16 `d`, 16 × f16 `m` |
//! | Q5_0 | 256 B of nibbles, 8 × u64 fifth-bit masks | 16 × f16 `d` |
//! | Q5_1 | 256 B of nibbles, 8 × u64 fifth-bit masks | 16 × f16 `d`, 16 × f16 `m` |
//! | Q8_0 | 512 B of bytes (`q + 128`) | 16 × f16 `d` |
//! | IQ4_XS (256 weights) | 8 × 256 B of nibbles, one run per 32 | 8 × 16 × i8 `ls − 32`, 16 × f16 `d` |
//! | Q2_K (256 weights) | 16 × 64 B of 2-bit codes, one run per 16 | 16 × 16 × u8 `sc | m << 4`, 16 × f16 `d`, 16 × f16 `dmin` |
//! | Q3_K (256 weights) | as Q2_K, then 16 × 4 × u64 third-bit masks | 16 × 16 × i8 `sc − 32`, 16 × f16 `d` |
//! | Q4_K (256 weights) | 4 × 8 × 64 B of nibbles, one run per pair of 32-weight sub-blocks | 8 × 16 × u8 `sc`, 8 × 16 × u8 `m`, 16 × f16 `d`, 16 × f16 `dmin` |
//! | Q5_K (256 weights) | as Q4_K, then 8 × 8 × u64 fifth-bit masks | as Q4_K |
//! | Q6_K (256 weights) | 8 × 4 × 64 B of nibbles (low 4 bits, two 16-weight groups per run), 16 × 64 B of high 2 bits (one run per group, as Q2_K's) | 16 × 16 × i8 `sc`, 16 × f16 `d` |
//!
//! Code vector `c` (0..8) covers weights `4c .. 4c + 4` of the block: byte `4j + b` is
//! row `j`'s weight `4c + b`. The nibble types store vectors `c` and `c + 4` in one
//! 64-byte run (low and high nibbles — GGUF's own nibble order, weight `i` low and
//! `i + 16` high, so a run is GGUF's bytes regrouped, not re-encoded); Q5's fifth bits
//! are one 64-bit mask per code vector. Sizes equal GGUF's up to the 32-bit masks'
//! regrouping: no type grows by more than its `d`/`m` halves already took.
//!
//! IQ4_XS keeps its 256-weight blocks and the 8-bit activations of the k-quants
//! ([`Q8x256`](super::activation::Q8x256), one f32 scale per 256, as llama.cpp multiplies it): each 32-weight
//! sub-block is an IQ4_NL-style run whose integer sum is scaled by its integer
//! `ls − 32` per row before the block's one float step, so the sums are exact integers
//! as in ggml's kernel. Q2_K likewise: per 16-weight group, 4 `vpdpbusd` of its
//! 2-bit codes (byte `4j + b` of a run holds row `j`'s weights `b`, `4 + b`, `8 + b`,
//! `12 + b` at bits 0, 2, 4, 6), times the group's integer scale; its minimums meet
//! the activations' per-16 sums, in integers too. Q3_K is Q2_K's runs plus a mask of
//! third bits per code vector (code `q + 4`, so unsigned), its `−4` taken back through
//! the same per-16 sums. Q4_K and Q5_K keep GGUF's own nibble pairing (a byte's low
//! nibble in sub-block `2i`, its high one in `2i + 1`): each sub-block's 8 `vpdpbusd`
//! per row are multiplied by the rows' integer scales, and the minimums meet the
//! activations' per-16 sums through `vpdpwssd`, all in integers over the block, then
//! one float step for each, as ggml's Q4_K/Q5_K kernels. Q6_K's 6-bit codes are its
//! low nibbles joined to its high two bits (unsigned `q + 32`, the `−32` taken back
//! through the per-16 sums), then Q3_K's integer scaling per 16-weight group.
//!
//! Codes are unsigned (`vpdpbusd` takes unsigned × signed bytes); a type whose value
//! is `d·(q − offset)` (Q4_0: 8, Q5_0: 16, Q8_0 and IQ4_NL: 128 after the shift) takes
//! the offset back in integers through the activation block's code sum:
//! `Σ w·x = d·dₓ·(Σ q·qₓ − offset·Σ qₓ)` — exact before the one scaling, so a large
//! offset costs no precision.

// The tile kernels are x86-64's (AVX2, AVX-512); elsewhere the layout compiles but no
// matmul takes it until NEON kernels exist.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use std::sync::Arc;

use super::activation::Q8x32;
use super::formats::{WeightType, IQ4_VALUES};
use super::pool::{for_each_chunk, for_each_task, threads};
use super::{Isa, QWeight};

/// Weight rows per tile (the 16 32-bit lanes of a 512-bit register).
pub const TILE_ROWS: usize = 16;

/// Activation rows processed per pass over a tile (accumulators held in registers).
pub(super) const TILE_ACT_ROWS: usize = 8;

/// Activation rows whose quantized blocks stay in cache while every tile of a task
/// passes over them (64 rows of 4096 weights: 320 KiB).
const ROW_TILE: usize = 64;

/// Tiles packed between two releases of the rows they came from (1024 rows).
const RELEASE_TILES: usize = 64;

/// Tasks per thread a tiled product with few activation rows (a decode step's, at
/// most [`TILE_ACT_ROWS`]) is cut into (runs of tiles, handed out one at a time).
/// The threads finish together only to within one task, so the last task's length
/// is time the other threads wait: at 4 per thread, a 7B decode step spent ~5% of
/// its time waiting at the barriers (`perf`, 2 threads); at 16, decode ran ~5%
/// faster (7B Q4_K_M, 4 alternating pairs).
const DECODE_TASKS_PER_THREAD: usize = 16;

/// Tasks per thread of a product with more rows (a prefill's): each task reuses its
/// activation rows across its tiles, and cut finer (16 per thread) SmolLM2's
/// prefill ran ~4% slower (3 alternating rounds).
const PREFILL_TASKS_PER_THREAD: usize = 4;

/// Whether the kernels of `isa` run `ty` on tiles: on AVX-512 VNNI every type with a
/// tiled layout, on AVX2 the 32-weight types (`maddubs`; the signed codes of Q8_0 and
/// IQ4_NL through the sign trick), IQ4_XS and the k-quants: every type with a tiled
/// layout, as on AVX-512; on the portable code none.
pub fn tiled(isa: Isa, ty: WeightType) -> bool {
    match isa {
        Isa::Avx512 | Isa::Avx2 => block_bytes(ty).is_some(),
        Isa::Portable | Isa::Neon => false,
    }
}

/// Bytes of one tiled block (16 rows × one block of `ty`: 32 weights, the k-quants and
/// IQ4_XS 256),
/// `None` for types without tiles.
pub(super) fn block_bytes(ty: WeightType) -> Option<usize> {
    Some(match ty {
        WeightType::Q4_0 | WeightType::IQ4NL => 256 + 32,
        WeightType::Q4_1 => 256 + 64,
        WeightType::Q5_0 => 256 + 64 + 32,
        WeightType::Q5_1 => 256 + 64 + 64,
        WeightType::Q8_0 => 512 + 32,
        WeightType::IQ4XS => IQ4XS_SCALES_AT + 128 + 32,
        WeightType::Q2K => Q2K_SCALES_AT + 256 + 64,
        WeightType::Q3K => Q3K_SCALES_AT + 256 + 32,
        WeightType::Q4K => Q45K_MASKS_AT + 256 + 64,
        WeightType::Q5K => Q45K_MASKS_AT + 512 + 256 + 64,
        WeightType::Q6K => Q6K_SCALES_AT + 256 + 32,
        _ => return None,
    })
}

/// Where an IQ4_XS tiled block's 8 × 16 sub-block scales start (its `d` follow them).
pub(super) const IQ4XS_SCALES_AT: usize = 8 * 256;

/// Where a Q2_K tiled block's 16 × 16 scale/min bytes start (`d`, then `dmin`, follow).
pub(super) const Q2K_SCALES_AT: usize = 16 * 64;

/// Where a Q3_K tiled block's third-bit masks start (4 × u64 per group).
pub(super) const Q3K_MASKS_AT: usize = 16 * 64;

/// Where a Q3_K tiled block's 16 × 16 scales start (`d` follows).
pub(super) const Q3K_SCALES_AT: usize = Q3K_MASKS_AT + 16 * 32;

/// Where a Q4_K/Q5_K tiled block's codes end: Q5_K's fifth-bit masks (8 × u64 per
/// sub-block) start there, Q4_K's scales (8 × 16 `sc`, 8 × 16 `m`, then `d`, `dmin`).
pub(super) const Q45K_MASKS_AT: usize = 8 * 256;

/// Where a Q6_K tiled block's high-bit runs start (16 × 64 B, one per group).
pub(super) const Q6K_HIGH_AT: usize = 8 * 256;

/// Where a Q6_K tiled block's 16 × 16 scales start (`d` follows).
pub(super) const Q6K_SCALES_AT: usize = Q6K_HIGH_AT + 16 * 64;

/// A weight matrix in tiles (see the module docs).
pub(crate) struct Tiles {
    ty: WeightType,
    /// Blocks per row (`in_features / 32`).
    blocks: usize,
    /// Number of tiles (`⌈out_features / 16⌉`).
    count: usize,
    /// Bytes of one tile (all its blocks).
    tile_len: usize,
    /// The tiles, from `bytes[start]` on: `start` puts them on a 64-byte boundary, so
    /// a kernel's 64-byte loads never straddle two cache lines (a large `Vec` starts
    /// 16 bytes past a page boundary).
    bytes: Vec<u8>,
    start: usize,
}

impl std::fmt::Debug for Tiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tiles({}, {} blocks per row, {} bytes)", self.ty.name(), self.blocks, self.bytes.len())
    }
}

impl Tiles {
    /// Regroup `w` into tiles; `None` if its type has no tiled layout.
    ///
    /// Cost: one pass over the weight's bytes, parallel over groups of tiles; one
    /// buffer of about their size.
    pub(crate) fn pack(w: &QWeight) -> Option<Arc<Tiles>> {
        let ty = w.weight_type();
        let bb = block_bytes(ty)?;
        let (n, blocks) = (w.out_features(), w.in_features() / ty.block_len());
        let tiles = n.div_ceil(TILE_ROWS);
        let mut bytes = vec![0u8; tiles * blocks * bb + 63];
        let start = bytes.as_ptr().align_offset(64).min(63);
        let src_bb = ty.block_bytes();
        // Groups of tiles in parallel (inline inside a pool task), each group handing
        // back the file's pages of its rows once they live in tiles: the process never
        // holds a large weight twice (peak memory as without tiles).
        let tile_len = blocks * bb;
        for_each_chunk(&mut bytes[start..start + tiles * tile_len], RELEASE_TILES * tile_len, |g, group| {
            let first = g * RELEASE_TILES;
            for (i, tile) in group.chunks_exact_mut(tile_len).enumerate() {
                let t = first + i;
                for j in 0..TILE_ROWS.min(n - t * TILE_ROWS) {
                    let row = w.row(t * TILE_ROWS + j);
                    for (b, dst) in tile.chunks_exact_mut(bb).enumerate() {
                        pack_block(ty, &row[b * src_bb..(b + 1) * src_bb], j, dst);
                    }
                }
            }
            w.release_rows(first * TILE_ROWS..((first + RELEASE_TILES) * TILE_ROWS).min(n));
        });
        Some(Arc::new(Tiles { ty, blocks, count: tiles, tile_len, bytes, start }))
    }

    /// Bytes of tile `t` (all its blocks).
    fn tile(&self, t: usize) -> &[u8] {
        let at = self.start + t * self.tile_len;
        &self.bytes[at..at + self.tile_len]
    }
}

/// Write row `j`'s GGUF block `src` into its lanes of the tiled block `dst`.
fn pack_block(ty: WeightType, src: &[u8], j: usize, dst: &mut [u8]) {
    if ty == WeightType::Q6K {
        let codes = super::formats::q6k_codes(src);
        // Runs of low nibbles: group pair `gp`'s first group in the low nibbles, its
        // second in the high ones; then each group's run of high two bits (code vector
        // `c` at bits `2c`). Row `j` owns bytes `4j..4j + 4` of every run.
        for gp in 0..8 {
            for c in 0..4 {
                let (first, second) = (word(&codes, 32 * gp + 4 * c), word(&codes, 32 * gp + 16 + 4 * c));
                put_word(dst, 256 * gp + 64 * c + 4 * j, first & 0x0F0F_0F0F | (second & 0x0F0F_0F0F) << 4);
            }
        }
        for g in 0..16 {
            let high = (0..4).fold(0, |acc, c| acc | (word(&codes, 16 * g + 4 * c) >> 4 & 0x0303_0303) << (2 * c));
            put_word(dst, Q6K_HIGH_AT + 64 * g + 4 * j, high);
            dst[Q6K_SCALES_AT + 16 * g + j] = src[192 + g];
        }
        dst[Q6K_SCALES_AT + 256 + 2 * j..Q6K_SCALES_AT + 258 + 2 * j].copy_from_slice(&src[208..210]);
        return;
    }
    if matches!(ty, WeightType::Q4K | WeightType::Q5K) {
        let q5 = ty == WeightType::Q5K;
        let (qh, qs) = if q5 { (Some(&src[16..48]), &src[48..176]) } else { (None, &src[16..144]) };
        let scales_at = Q45K_MASKS_AT + if q5 { 512 } else { 0 };
        for i in 0..4 {
            for v in 0..8 {
                dst[512 * i + 64 * v + 4 * j..512 * i + 64 * v + 4 * j + 4].copy_from_slice(&qs[32 * i + 4 * v..][..4]);
            }
        }
        if let Some(qh) = qh {
            // Sub-block s's code vector v: row j's fifth bits of weights 4v..4v+4.
            for s in 0..8 {
                for v in 0..8 {
                    let bits = (0..4).fold(0, |acc, b| acc | (qh[4 * v + b] >> s & 1) << b);
                    or_row_bits(dst, Q45K_MASKS_AT + 64 * s + 8 * v, j, bits);
                }
            }
        }
        for s in 0..8 {
            let (sc, m) = super::formats::scale_min_k4(s, &src[4..16]);
            dst[scales_at + 16 * s + j] = sc;
            dst[scales_at + 128 + 16 * s + j] = m;
        }
        dst[scales_at + 256 + 2 * j..scales_at + 258 + 2 * j].copy_from_slice(&src[0..2]);
        dst[scales_at + 288 + 2 * j..scales_at + 290 + 2 * j].copy_from_slice(&src[2..4]);
        return;
    }
    if matches!(ty, WeightType::Q2K | WeightType::Q3K) {
        let q3 = ty == WeightType::Q3K;
        // Unsigned: Q3_K's `q + 4` (0..8).
        let codes = super::formats::q23k_codes(ty, src).map(|q| (q + if q3 { 4 } else { 0 }) as u8);
        for g in 0..16 {
            // Group g's run: code vector `c` at bits `2c` of each byte; Q3_K's third
            // bits, one 4-bit field of row j per code vector's mask.
            let run = (0..4).fold(0, |acc, c| acc | (word(&codes, 16 * g + 4 * c) & 0x0303_0303) << (2 * c));
            put_word(dst, 64 * g + 4 * j, run);
            if q3 {
                for c in 0..4 {
                    let third = word(&codes, 16 * g + 4 * c) >> 2 & 0x0101_0101;
                    let bits = third & 1 | third >> 7 & 2 | third >> 14 & 4 | third >> 21 & 8;
                    or_row_bits(dst, Q3K_MASKS_AT + 32 * g + 8 * c, j, bits as u8);
                }
            }
        }
        if q3 {
            let scales = super::formats::q3k_scales(&src[96..108]);
            for (g, &sc) in scales.iter().enumerate() {
                dst[Q3K_SCALES_AT + 16 * g + j] = sc as i8 as u8;
            }
            dst[Q3K_SCALES_AT + 256 + 2 * j..Q3K_SCALES_AT + 258 + 2 * j].copy_from_slice(&src[108..110]);
        } else {
            for g in 0..16 {
                dst[Q2K_SCALES_AT + 16 * g + j] = src[g];
            }
            dst[Q2K_SCALES_AT + 256 + 2 * j..Q2K_SCALES_AT + 258 + 2 * j].copy_from_slice(&src[80..82]);
            dst[Q2K_SCALES_AT + 288 + 2 * j..Q2K_SCALES_AT + 290 + 2 * j].copy_from_slice(&src[82..84]);
        }
        return;
    }
    if ty == WeightType::IQ4XS {
        // Each 32-weight sub-block as IQ4_NL's nibble runs, then its scale, then `d`.
        for s in 0..8 {
            for v in 0..4 {
                for b in 0..4 {
                    dst[256 * s + 64 * v + 4 * j + b] = src[8 + 16 * s + 4 * v + b];
                }
            }
            dst[IQ4XS_SCALES_AT + 16 * s + j] = super::formats::iq4xs_scale(src, s) as i8 as u8;
        }
        dst[IQ4XS_SCALES_AT + 128 + 2 * j..IQ4XS_SCALES_AT + 128 + 2 * j + 2].copy_from_slice(&src[0..2]);
        return;
    }
    // (byte offset of the scales in `src`, of the codes, of Q5's fifth bits).
    let (m_at, qh_at, qs_at) = match ty {
        WeightType::Q4_0 | WeightType::IQ4NL => (None, None, 2),
        WeightType::Q4_1 => (Some(2), None, 4),
        WeightType::Q5_0 => (None, Some(2), 6),
        WeightType::Q5_1 => (Some(2), Some(4), 8),
        _ => (None, None, 2), // Q8_0
    };
    let nibbles = ty != WeightType::Q8_0;
    let codes_len = if nibbles { 256 } else { 512 };
    if nibbles {
        for v in 0..4 {
            for b in 0..4 {
                let q = src[qs_at + 4 * v + b];
                // IQ4_NL's nibbles index its table; the kernel looks them up.
                dst[64 * v + 4 * j + b] = q;
            }
        }
    } else {
        for c in 0..8 {
            for b in 0..4 {
                dst[64 * c + 4 * j + b] = (src[qs_at + 4 * c + b] as i8 as i16 + 128) as u8;
            }
        }
    }
    let mut at = codes_len;
    if let Some(qh_at) = qh_at {
        let qh = u32::from_le_bytes(src[qh_at..qh_at + 4].try_into().expect("4 bytes"));
        for c in 0..8 {
            // Vector c < 4: weights 4c..4c+4 (low nibbles); c ≥ 4: 16 + 4(c − 4)..
            let first = if c < 4 { 4 * c } else { 16 + 4 * (c - 4) };
            or_row_bits(dst, at + 8 * c, j, (qh >> first & 0xF) as u8);
        }
        at += 64;
    }
    dst[at + 2 * j..at + 2 * j + 2].copy_from_slice(&src[0..2]);
    if let Some(m_at) = m_at {
        dst[at + 32 + 2 * j..at + 32 + 2 * j + 2].copy_from_slice(&src[m_at..m_at + 2]);
    }
}

/// The four bytes of `codes` from `at`, as a little-endian word (byte `b` in bits `8b..`).
#[inline(always)]
fn word(codes: &[u8; 256], at: usize) -> u32 {
    u32::from_le_bytes(codes[at..at + 4].try_into().expect("4 bytes"))
}

/// Set row `j`'s four bits (`bits`, 0..16; bit `b` for the vector's weight `b`) in
/// the 64-bit mask at `dst[at..at + 8]`: bits `4j..4j + 4`, little-endian.
#[inline(always)]
fn or_row_bits(dst: &mut [u8], at: usize, j: usize, bits: u8) {
    let mask = u64::from_le_bytes(dst[at..at + 8].try_into().expect("8 bytes")) | u64::from(bits) << (4 * j);
    dst[at..at + 8].copy_from_slice(&mask.to_le_bytes());
}

/// Store `w` little-endian at `dst[at..at + 4]`.
#[inline(always)]
fn put_word(dst: &mut [u8], at: usize, w: u32) {
    dst[at..at + 4].copy_from_slice(&w.to_le_bytes());
}

// The kernels' type tags: a const generic of the tile and row kernels of
// [`super::avx2`] and [`super::avx512`], one per weight type they specialise on.
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q4_0: u8 = 0;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q4_1: u8 = 1;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q5_0: u8 = 2;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q8_0: u8 = 3;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q4K: u8 = 4;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q5K: u8 = 5;
#[cfg(target_arch = "x86_64")]
pub(super) const T_IQ4NL: u8 = 6;
#[cfg(target_arch = "x86_64")]
pub(super) const T_MXFP4: u8 = 7;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q5_1: u8 = 8;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q2K: u8 = 9;
#[cfg(target_arch = "x86_64")]
pub(super) const T_Q3K: u8 = 10;

/// Where the parts of a tiled block lie, for the kernels (by their type tag, the
/// `T_*` above; see the layout table above).
pub(super) struct BlockLayout {
    /// 4-bit codes (two per byte), else one byte per code (Q8_0).
    pub(super) nibbles: bool,
    /// Fifth-bit masks follow the codes (Q5_0, Q5_1).
    pub(super) fifth: bool,
    /// An `m` per row follows `d` (Q4_1, Q5_1).
    pub(super) has_m: bool,
    /// Byte offset of the 16 `d` values.
    pub(super) scales_at: usize,
    /// Bytes of the block.
    pub(super) bytes: usize,
}

/// The [`BlockLayout`] of the type tagged `tag`.
#[cfg(target_arch = "x86_64")]
pub(super) const fn block_layout(tag: u8) -> BlockLayout {
    let nibbles = tag != T_Q8_0;
    let fifth = matches!(tag, T_Q5_0 | T_Q5_1);
    let has_m = matches!(tag, T_Q4_1 | T_Q5_1);
    let scales_at = if nibbles { 256 } else { 512 } + if fifth { 64 } else { 0 };
    BlockLayout { nibbles, fifth, has_m, scales_at, bytes: scales_at + if has_m { 64 } else { 32 } }
}

/// One call of a tile kernel (`super::avx512::tile_rows`, `super::avx2::tile_rows`,
/// `super::avx512::tile_rows_256`): a tile against 1..=8 activation rows,
/// `out[r · ld + j] = w_j · x_r` for the tile's first `cols` weight rows `j`.
#[derive(Debug, Clone, Copy)]
pub struct TileJob<'a, A = Q8x32> {
    /// The tile's bytes: `blocks` tiled blocks.
    pub tile: &'a [u8],
    /// The activation rows, `blocks` quantized blocks each ([`Q8x32`], or [`Q8x256`](super::activation::Q8x256)
    /// for IQ4_XS).
    pub acts: &'a [A],
    /// Each [`Q8x32`] block's code sum `Σ qₓ`; empty with [`Q8x256`](super::activation::Q8x256), whose blocks
    /// carry their own per-16 sums.
    pub sums: &'a [i32],
    /// Blocks per row (`in_features` / the type's block length).
    pub blocks: usize,
    /// Where row 0's first output goes.
    pub out: *mut f32,
    /// Distance between two rows' outputs.
    pub ld: usize,
    /// Outputs per row (the tile's real weight rows, ≤ 16).
    pub cols: usize,
    /// The tile's codes unpacked one per byte (Q4_K and Q6_K on AVX-512 in a prefill,
    /// `super::avx512::unpack_tile`), or `None`: the kernel unpacks them itself.
    pub codes: Option<&'a [u8]>,
}

impl<A> TileJob<'_, A> {
    /// Check the job against `ty`'s layout; returns the number of activation rows.
    ///
    /// # Panics
    /// If `ty` has no tiled layout, `cols > 16`, `tile` is not `blocks` whole tiled
    /// blocks, `acts` is not 1..=8 rows of `blocks`, or `sums` not one per [`Q8x32`]
    /// block (none with [`Q8x256`](super::activation::Q8x256)).
    pub(super) fn check(&self, ty: WeightType) -> usize {
        let TileJob { tile, acts, sums, blocks, cols, .. } = *self;
        let rows = acts.len() / blocks.max(1);
        assert!(blocks > 0 && acts.len() == rows * blocks && (1..=8).contains(&rows), "1..=8 rows of {blocks} blocks");
        assert_eq!(sums.len(), acts.len() * sums_per_block(ty), "one code sum per Q8x32 block");
        let bb = block_bytes(ty).unwrap_or_else(|| panic!("{} has no tiled layout", ty.name()));
        assert!(cols <= 16 && tile.len() == blocks * bb, "a tile of {blocks} blocks and at most 16 columns");
        rows
    }
}

/// IQ4_NL's values shifted to unsigned bytes (`+128`), the table the kernel looks
/// nibbles up in.
pub(super) const IQ4_SHIFTED: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (IQ4_VALUES[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// A tile kernel for the activations `A` (see [`TileJob`]).
pub(super) type TileKernel<A> = unsafe fn(WeightType, &TileJob<A>);

/// The activation blocks tiles are multiplied with, and the kernel for each.
#[cfg(target_arch = "x86_64")]
pub(super) trait TileActs: Sized + Sync {
    /// `isa`'s tile kernel for these activations.
    fn kernel(isa: Isa) -> TileKernel<Self>;
}

/// Code sums a tile job carries per activation block of `ty`: one for the 32-weight
/// types, none for the 256-weight ones (their [`Q8x256`](super::activation::Q8x256) blocks hold per-16 sums).
fn sums_per_block(ty: WeightType) -> usize {
    usize::from(ty.block_len() == 32)
}

/// `y (m, n) = x · Wᵀ` over tiles, `acts` being `x` quantized (`m` rows of
/// `blocks` blocks: [`Q8x32`], or [`Q8x256`](super::activation::Q8x256) for the 256-weight types) and `sums`
/// each [`Q8x32`] block's code sum (empty with [`Q8x256`](super::activation::Q8x256)). Each task owns a run of
/// tiles (16 output columns each, [`run_tiles`]).
#[cfg(target_arch = "x86_64")]
pub(super) fn matmul<A: TileActs>(
    isa: Isa,
    tiles: &Tiles,
    n: usize,
    acts: &[A],
    sums: &[i32],
    m: usize,
    y: &mut [f32],
) {
    assert_eq!(y.len(), m * n, "output of {m} rows of {n}");
    let count = tiles.count;
    let chunk = tiles.per_task(m);
    let out = Out(y.as_mut_ptr());
    for_each_task(count.div_ceil(chunk), |ci| {
        // SAFETY: `y` is the `m × n` output (checked above), task `ci` alone writes
        // the columns of its tiles, and `y` outlives every task.
        unsafe { run_tiles(isa, tiles, n, acts, sums, m, out.at(0), ci * chunk..((ci + 1) * chunk).min(count)) };
    });
}

/// Tiles `range` of `tiles` (an `n`-row weight) against the `m` activation rows
/// `acts`/`sums` (as [`matmul`] takes them), written into columns `16·range.start ..
/// min(16·range.end, n)` of the `m × n` output at `out`: the activation rows
/// [`ROW_TILE`] at a time, [`TILE_ACT_ROWS`] per kernel call.
///
/// # Safety
/// `out` points at an `m × n` output no one else writes those columns of during the
/// call, alive for it.
///
/// # Panics
/// If `isa` has no tiles for the weight's type, `acts`/`sums` are not `m` rows of
/// the weight's blocks, or `range` passes the last tile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_tiles<A: TileActs>(
    isa: Isa,
    tiles: &Tiles,
    n: usize,
    acts: &[A],
    sums: &[i32],
    m: usize,
    out: *mut f32,
    range: std::ops::Range<usize>,
) {
    assert!(tiled(isa, tiles.ty), "{} has no {isa:?} tiles", tiles.ty.name());
    let per = sums_per_block(tiles.ty);
    let blocks = tiles.blocks;
    assert_eq!(sums.len(), acts.len() * per, "one code sum per Q8x32 block");
    assert_eq!(acts.len(), m * blocks, "{m} activation rows of {blocks} blocks");
    assert!(tiles.count == n.div_ceil(TILE_ROWS) && range.end <= tiles.count, "tiles {range:?} of an {n}-row weight");
    let kernel = A::kernel(isa);
    UNPACKED.with_borrow_mut(|scratch| {
        for r0 in (0..m).step_by(ROW_TILE) {
            let r1 = (r0 + ROW_TILE).min(m);
            // Q4_K and Q6_K on AVX-512, more than one pass of rows over each tile:
            // its codes unpacked once per tile for all of them (`avx512::unpack_tile`).
            let unpack = isa == Isa::Avx512 && super::avx512::unpacks(tiles.ty) && r1 - r0 > TILE_ACT_ROWS;
            for t in range.clone() {
                let cols = TILE_ROWS.min(n - t * TILE_ROWS);
                let codes = if unpack {
                    let len = blocks * super::avx512::UNPACKED_BLOCK;
                    if scratch.len() < len / 64 {
                        scratch.resize(len / 64, Line([0; 64]));
                    }
                    // SAFETY: a `Line` is 64 plain bytes, 64-byte aligned.
                    let bytes = unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr() as *mut u8, len) };
                    // SAFETY: `isa` is AVX-512 (checked by `dispatch`: every feature
                    // `unpack_tile` enables).
                    unsafe { super::avx512::unpack_tile(tiles.ty, tiles.tile(t), blocks, bytes) };
                    Some(&*bytes)
                } else {
                    None
                };
                for g0 in (r0..r1).step_by(TILE_ACT_ROWS) {
                    let g1 = (g0 + TILE_ACT_ROWS).min(r1);
                    let job = TileJob {
                        tile: tiles.tile(t),
                        acts: &acts[g0 * blocks..g1 * blocks],
                        sums: &sums[g0 * blocks * per..g1 * blocks * per],
                        blocks,
                        out: out.wrapping_add(g0 * n + t * TILE_ROWS),
                        ld: n,
                        cols,
                        codes,
                    };
                    // SAFETY: `isa` is supported (every `Isa` reaching the kernels was
                    // checked, see `dispatch`) and `kernel` is its tile kernel, which takes
                    // `tiles.ty` (asserted above); the output rows g0..g1, columns
                    // 16t..16t+cols lie inside the `m × n` output and are the caller's
                    // alone (its contract).
                    kernel(tiles.ty, &job);
                }
            }
        }
    });
}

/// 64 bytes, 64-byte aligned: the unit of [`UNPACKED`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

thread_local! {
    /// Each thread's room for one tile's unpacked codes ([`run_tiles`]), kept between
    /// calls (the largest tile seen: 172 KiB for an 11,008-wide Q4_K input).
    static UNPACKED: std::cell::RefCell<Vec<Line>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Tiles {
    /// Tiles per task of a product with `m` activation rows
    /// ([`DECODE_TASKS_PER_THREAD`] or [`PREFILL_TASKS_PER_THREAD`] tasks per thread).
    pub(super) fn per_task(&self, m: usize) -> usize {
        let per = if m <= TILE_ACT_ROWS { DECODE_TASKS_PER_THREAD } else { PREFILL_TASKS_PER_THREAD };
        self.count.div_ceil(threads() * per).max(1)
    }

    /// Number of tiles (`⌈out_features / 16⌉`).
    pub(super) fn count(&self) -> usize {
        self.count
    }
}

/// `y`'s base pointer, shared by the tasks, each writing its own columns.
struct Out(*mut f32);
// SAFETY: tasks write disjoint columns and `matmul` returns only after all of them.
unsafe impl Sync for Out {}

impl Out {
    /// The output element `i` (a method, so closures capture the `Sync` wrapper).
    fn at(&self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tiled_example() {
        use crate::kernels::{tiles::tiled, Isa, WeightType};
        assert!(tiled(Isa::Avx512, WeightType::IQ4NL) && tiled(Isa::Avx2, WeightType::IQ4NL));
        assert!(tiled(Isa::Avx512, WeightType::IQ4XS) && tiled(Isa::Avx2, WeightType::IQ4XS));
        assert!(tiled(Isa::Avx512, WeightType::Q2K) && tiled(Isa::Avx2, WeightType::Q2K));
        assert!(tiled(Isa::Avx2, WeightType::Q5_0) && !tiled(Isa::Portable, WeightType::Q5_0));
        assert!(tiled(Isa::Avx512, WeightType::Q4K) && tiled(Isa::Avx2, WeightType::Q5K));
        assert!(tiled(Isa::Avx2, WeightType::Q6K) && !tiled(Isa::Portable, WeightType::Q6K));
        assert!(tiled(Isa::Avx512, WeightType::Q6K) && !tiled(Isa::Avx512, WeightType::F16));
    }
}
