//! CPU kernels for GGUF-quantized weights: the body of the quantized-matmul seam
//! (`crate::model::qlinear::QLinear`) on CPU.
//!
//! A [`QWeight`] keeps a weight matrix `(out_features, in_features)` in its GGUF block
//! layout. [`QWeight::matmul`] quantizes the activations to 8 bits (blocks of 32 or
//! 256, see `activation`), then computes every dot product in integer arithmetic per
//! block (F16/BF16 weights: in f32, against the activations as they are; BF16 prefill
//! on AVX-512 BF16 against them rounded to BF16, [`bf16_path`]) with the
//! best kernels the CPU has ([`Isa::detect`]): `avx512` for the k-quants and the
//! F16/BF16 prefill tiles where AVX-512 is present, AVX2+FMA+F16C (`avx2`) for the rest on x86-64,
//! otherwise the portable `scalar` code (`TOOLGATE_ISA` forces one). Work is split over candle's barrier pool
//! (see `pool.rs`), weight rows per task, and during prefill each weight row is
//! decoded once for four activation rows. [`attention`] is the fused causal attention
//! the CPU decoder uses.
//!
//! Supported weight types: [`WeightType::ALL`] (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4); other GGUF types stay on candle's own matmul. The
//! bytes of a weight are a [`WeightBytes`]: owned, or a window of the memory-mapped
//! model file (no copy at load).
//!
//! ```
//! use toolgate::kernels::{QWeight, WeightType};
//! // One Q8_0 row of 32 weights: scale 1.0 (f16 0x3C00), codes 0, 1, 2, …
//! let mut row = vec![0x00, 0x3C];
//! row.extend((0..32).map(|i| i as u8));
//! let w = QWeight::new(WeightType::Q8_0, row, 1, 32)?;
//! let x = vec![1.0f32; 32];
//! let mut y = [0f32; 1];
//! w.matmul(&x, &mut y)?;
//! assert!((y[0] - 496.0).abs() < 496.0 * 0.01); // Σ 0..32 = 496, up to 8-bit activations
//! # Ok::<(), toolgate::Error>(())
//! ```

// Block code indexes several arrays in lock-step (codes, scales, activations, SIMD
// accumulators per row); index loops say that more plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

pub(crate) mod activation;
pub mod attention;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub(crate) mod formats;
pub(crate) mod glu;
mod isa;
mod matmul;
mod memory;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
mod pool;
#[cfg(target_arch = "x86_64")]
mod prefetch;
pub(crate) mod rows;
pub(crate) mod scalar;
#[cfg(test)]
mod tests;
pub(crate) mod tiles;

pub use formats::{dequantize_row, WeightType};
pub use isa::{enabled, Isa};
pub use memory::reuse_large_buffers;
#[cfg(target_arch = "x86_64")]
pub(crate) use prefetch::{prefetch_ahead, prefetch_float_rows, prefetch_part};

use candle_core::quantized::QTensor;

use crate::{Error, Result};

/// Activation rows one kernel call processes together.
pub const MAX_ROWS: usize = 4;

pub use matmul::{GEMM_MIN_ROWS, GEMM_TILE};

/// Whether a matmul of `m` activation rows with `ty` weights on the kernels of `isa`
/// runs in f32 — the weights dequantized a tile at a time, the activations as they
/// are, an f32 GEMM — rather than as dot products against the activations in their own
/// format. True for prefill-sized `m` ([`GEMM_MIN_ROWS`] and up) with the float types
/// (F16, BF16; portable kernels only — AVX2 and AVX-512 take [`float_tiles_path`]) and
/// the 32-weight block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4), where it
/// measured faster than the row kernels (IQ4_NL at m = 128: 40 GMAC/s against 27, 2
/// AVX2 threads) — except for the types `isa` runs on `tiles`
/// (`tiles::tiled`), whose integer kernels beat the f32 GEMM at every `m` (and give a
/// row the same result whatever the row count). The 256-weight types (k-quants,
/// IQ4_XS) always stay on their integer kernels.
///
/// ```
/// use toolgate::kernels::{f32_path, Isa, WeightType};
/// assert!(!f32_path(Isa::Portable, WeightType::Q5_0, 1) && f32_path(Isa::Portable, WeightType::Q5_0, 128));
/// assert!(!f32_path(Isa::Avx2, WeightType::Q5_0, 128) && f32_path(Isa::Avx2, WeightType::MXFP4, 128));
/// assert!(!f32_path(Isa::Avx2, WeightType::F16, 128) && !f32_path(Isa::Avx512, WeightType::Q6K, 128));
/// assert!(f32_path(Isa::Portable, WeightType::F16, 128));
/// ```
pub fn f32_path(isa: Isa, ty: WeightType, m: usize) -> bool {
    m >= GEMM_MIN_ROWS
        && matches!(ty.act_kind(), formats::ActKind::Blocks32 | formats::ActKind::Floats)
        && !tiles::tiled(isa, ty)
        && !float_tiles_path(isa, ty, m)
}

/// Whether a matmul of `m` activation rows with `ty` weights runs on the float prefill
/// kernels instead of the f32 GEMM: F16 or BF16 weights, prefill-sized `m`
/// ([`GEMM_MIN_ROWS`] and up), [`Isa::Avx512`] or [`Isa::Avx2`]. The weights are read
/// in their own 16-bit format (no dequantized copy of the matrix): widened to f32 once
/// per call, a task's panel at a time, against 12 activation rows × 32 weight rows per
/// register tile (6 × 16 on AVX2); or, on AVX-512 CPUs other than Intel's
/// ([`float_tiles_route`]), register tiles of 4 weight rows × 6 activation rows that
/// widen F16 at every step and multiply BF16 by `vdpbf16ps` against the activations
/// rounded to BF16 ([`bf16_path`]). Either way a row's result does not depend on how
/// many rows share the matmul.
///
/// ```
/// use toolgate::kernels::{float_tiles_path, Isa, WeightType};
/// assert!(float_tiles_path(Isa::Avx2, WeightType::F16, 128) && !float_tiles_path(Isa::Avx512, WeightType::Q8_0, 128));
/// assert!(!float_tiles_path(Isa::Portable, WeightType::BF16, 128));
/// assert!(!float_tiles_path(Isa::Avx512, WeightType::F16, 1));
/// ```
pub fn float_tiles_path(isa: Isa, ty: WeightType, m: usize) -> bool {
    m >= GEMM_MIN_ROWS && matches!(isa, Isa::Avx512 | Isa::Avx2) && matches!(ty, WeightType::F16 | WeightType::BF16)
}

/// On [`float_tiles_path`] with [`Isa::Avx512`], whether `ty` takes the register tiles
/// that read the weights in their 16 bits at every step (true) or the weights widened
/// to f32 once per call (false; AVX2 always widens): the tiles on CPUs other than
/// Intel's, for F16 always and for BF16 where the CPU has AVX-512 BF16 (`vdpbf16ps`).
/// `TOOLGATE_FLOAT_PREFILL=tiles|panels` forces the choice (read once); see
/// `docs/performance.md` for the measurements.
///
/// ```
/// use toolgate::kernels::{float_tiles_route, WeightType};
/// assert!(!float_tiles_route(WeightType::Q4_0));
/// // F16 follows the CPU's route; BF16 takes the tiles only where F16 does (it also
/// // needs AVX-512 BF16).
/// assert!(!float_tiles_route(WeightType::BF16) || float_tiles_route(WeightType::F16));
/// ```
pub fn float_tiles_route(ty: WeightType) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512::prefers_float_tiles()
            && match ty {
                WeightType::F16 => true,
                WeightType::BF16 => avx512::has_bf16(),
                _ => false,
            }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        false
    }
}

/// Whether a matmul of `m` activation rows with `ty` weights runs on AVX-512 BF16 dot
/// products (`vdpbf16ps`): BF16 weights on [`float_tiles_path`] by the tiles' route
/// ([`float_tiles_route`]: not on Intel, where it runs at half the f32 FMA's rate per
/// multiply-add). The activations are rounded to BF16 once per call (as llama.cpp does
/// for BF16 weights); each product of two BF16 values is exact in f32 and the sums are
/// f32, so an output differs from the f32 path's by the activations' rounding (about
/// 2⁻⁹ of each, relative), for twice the multiply-adds per instruction.
///
/// ```
/// use toolgate::kernels::{bf16_path, Isa, WeightType};
/// assert!(!bf16_path(Isa::Avx2, WeightType::BF16, 128) && !bf16_path(Isa::Avx512, WeightType::F16, 128));
/// assert!(!bf16_path(Isa::Avx512, WeightType::BF16, 1));
/// ```
pub fn bf16_path(isa: Isa, ty: WeightType, m: usize) -> bool {
    ty == WeightType::BF16 && isa == Isa::Avx512 && float_tiles_path(isa, ty, m) && float_tiles_route(ty)
}

mod dispatch {
    use super::activation::{Q8x256, Q8x32};
    use super::formats::WeightType;
    use super::Isa;

    /// A row-block dot product: one weight row's blocks against 1..=4 activation rows.
    pub(super) type DotFn<A> = fn(WeightType, &[u8], &[&[A]], &mut [f32]);

    /// Several weight rows (at most [`MAX_LANES`]) against one activation row, each
    /// row summed as the type's [`DotFn`] sums it alone (the same bits).
    pub(super) type LanesFn<A> = fn(WeightType, &[&[u8]], &[A], &mut [f32]);

    /// Most weight rows a [`LanesFn`] takes.
    pub(super) const MAX_LANES: usize = 4;

    /// A weight type's row kernels on one instruction set: `dot`, and where the
    /// instruction set has one, `lanes`: `(rows per call, kernel)`, which decode
    /// (one activation row) walks that many runs of weight rows with at once
    /// (`matmul::run_rows`).
    pub(super) struct RowKernels<A> {
        pub(super) dot: DotFn<A>,
        pub(super) lanes: Option<(usize, LanesFn<A>)>,
    }

    // Function pointers whatever `A` is (a derive would ask `A: Copy`).
    impl<A> Clone for RowKernels<A> {
        fn clone(&self) -> Self {
            *self
        }
    }
    impl<A> Copy for RowKernels<A> {}

    impl<A> From<DotFn<A>> for RowKernels<A> {
        fn from(dot: DotFn<A>) -> Self {
            Self { dot, lanes: None }
        }
    }

    pub(super) fn dot32_for(isa: Isa) -> DotFn<Q8x32> {
        match isa {
            // SAFETY: an `Isa` other than `Portable` only reaches the dispatcher after
            // `Isa::supported` (in `Isa::detect` or `QWeight::matmul_with`), and
            // AVX-512 CPUs run the AVX2 kernels too.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => |t, w, x, o| unsafe { super::avx2::dot32_rows(t, w, x, o) },
            // SAFETY: as above: `Isa::Neon` is reported only with NEON and `dotprod`.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => |t, w, x, o| unsafe { super::neon::dot32_rows(t, w, x, o) },
            _ => super::scalar::dot32,
        }
    }

    /// Activation quantization (blocks of 32 or 256 values).
    pub(super) type QuantFn<A> = fn(&[f32], &mut [A]);

    pub(super) fn quantize32_for(isa: Isa) -> QuantFn<Q8x32> {
        match isa {
            // SAFETY: as above (AVX2 implies the FMA the function is compiled with).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => |x, o| unsafe { super::activation::quantize_32_avx2(x, o) },
            _ => super::activation::quantize_32_portable,
        }
    }

    pub(super) fn quantize256_for(isa: Isa) -> QuantFn<Q8x256> {
        match isa {
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => |x, o| unsafe { super::activation::quantize_256_avx2(x, o) },
            _ => super::activation::quantize_256_portable,
        }
    }

    /// A weight row's dequantization into f32 (the prefill GEMM's input).
    pub(super) type DequantizeFn = fn(WeightType, &[u8], &mut [f32]);

    pub(super) fn dequantize_for(isa: Isa) -> DequantizeFn {
        match isa {
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => |t, w, o| unsafe { super::avx2::dequantize_row(t, w, o) },
            _ => super::formats::dequantize_row,
        }
    }

    pub(super) fn dot_floats_for(isa: Isa) -> RowKernels<f32> {
        match isa {
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => RowKernels {
                dot: |t, w, x, o| unsafe { super::avx2::dot_floats_rows(t, w, x, o) },
                // SAFETY: as above.
                lanes: Some((super::avx2::FLOAT_LANES, |t, ws, x, o| unsafe {
                    super::avx2::dot_floats_lanes(t, ws, x, o)
                })),
            },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => RowKernels {
                dot: |t, w, x, o| unsafe { super::avx512::dot_floats_rows(t, w, x, o) },
                // SAFETY: as above.
                lanes: Some((super::avx2::FLOAT_LANES, |t, ws, x, o| unsafe {
                    super::avx512::dot_floats_lanes(t, ws, x, o)
                })),
            },
            _ => RowKernels::from(super::scalar::dot_floats as DotFn<f32>),
        }
    }

    /// The tile kernels of each activation kind ([`super::tiles::TileActs`]).
    #[cfg(target_arch = "x86_64")]
    impl super::tiles::TileActs for Q8x32 {
        fn kernel(isa: Isa) -> super::tiles::TileKernel<Self> {
            if isa == Isa::Avx512 {
                super::avx512::tile_rows
            } else {
                super::avx2::tile_rows
            }
        }
    }

    /// The 256-weight types'.
    #[cfg(target_arch = "x86_64")]
    impl super::tiles::TileActs for Q8x256 {
        fn kernel(isa: Isa) -> super::tiles::TileKernel<Self> {
            if isa == Isa::Avx512 {
                super::avx512::tile_rows_256
            } else {
                super::avx2::tile_rows_256
            }
        }
    }

    pub(super) fn dot256_for(isa: Isa) -> DotFn<Q8x256> {
        match isa {
            // SAFETY: as above. AVX-512 runs every 256-weight type on tiles; this
            // row kernel is what a weight without tiles would take there.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 => |t, w, x, o| unsafe { super::avx2::dot256_rows(t, w, x, o) },
            // SAFETY: as in `dot32_for`.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => |t, w, x, o| unsafe { super::neon::dot256_rows(t, w, x, o) },
            _ => super::scalar::dot256,
        }
    }
}

/// Get `weights` ready for the detected kernels ([`Isa::detect`]) now instead of at
/// their first matmul: where the kernels run a weight's type on tiles
/// (`tiles::tiled`), regroup its rows into tiles and hand back the file's pages they
/// came from. A loader calls it with every weight it will multiply by, so no request
/// pays for it (a mixture of experts would otherwise pack each expert in the decode
/// step that first picks it). Calling it again, or a matmul after it, finds the tiles
/// made.
///
/// Cost: one pass over the tiled weights' bytes, spread over the pool's threads (one
/// weight per task), and a buffer of about their size; nothing for other types.
///
/// ```
/// use toolgate::kernels::{prepare, QWeight, WeightType};
/// let row = |scale: u8| { let mut r = vec![0x00, scale]; r.extend([1u8; 32]); r };
/// let w = QWeight::new(WeightType::Q8_0, row(0x3C), 1, 32)?; // scale 1
/// prepare(&[&w]);
/// let mut y = [0f32; 1];
/// w.matmul(&[127.0; 32], &mut y)?; // the same answer, tiles or not
/// assert_eq!(y, [4064.0]);
/// # Ok::<(), toolgate::Error>(())
/// ```
pub fn prepare(weights: &[&QWeight]) {
    #[cfg(target_arch = "x86_64")]
    {
        let isa = Isa::detect();
        let tiled: Vec<&QWeight> = weights.iter().copied().filter(|w| tiles::tiled(isa, w.ty)).collect();
        pool::for_each_task(tiled.len(), |i| {
            tiled[i].tiles();
        });
        // Each weight handed back its file pages as it was packed, but a page fault
        // of a weight packed meanwhile maps the cached pages around it (the kernel's
        // fault-around, 64 KiB), the neighbour's too: hand all back once more.
        for w in &tiled {
            w.release_rows(0..w.out_features);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = weights;
}

/// `y = x · Wᵀ` for every `(W, x, y)` of `products`, as [`QWeight::matmul`] computes
/// each, in one parallel call: the activations of every product are quantized first,
/// then all the products' weight rows are split into one list of tasks. Results are
/// bit-identical to separate calls.
///
/// Cost: the separate calls' arithmetic with one fork/join of the thread pool instead
/// of one per product — what a mixture-of-experts layer needs, whose chosen experts
/// are 8–16 small matmuls per token.
///
/// # Errors
/// [`Error::InvalidParameter`] if a product's `x` is not whole rows or its `y` not as
/// many rows of outputs; nothing is computed then.
///
/// ```
/// use toolgate::kernels::{matmul_batch, QWeight, WeightType};
/// let row = |scale: u8| { let mut r = vec![0x00, scale]; r.extend([1u8; 32]); r };
/// let a = QWeight::new(WeightType::Q8_0, row(0x3C), 1, 32)?; // scale 1
/// let b = QWeight::new(WeightType::Q8_0, row(0x40), 1, 32)?; // scale 2
/// let (mut ya, mut yb) = ([0f32; 1], [0f32; 2]);
/// // Multiples of 127: the activations' 8-bit scales are exact (1 and 2).
/// let xb = [[127.0f32; 32], [254.0; 32]].concat(); // two rows
/// matmul_batch(&mut [(&a, &[127.0; 32], &mut ya), (&b, &xb, &mut yb)])?;
/// assert_eq!((ya, yb), ([4064.0], [8128.0, 16256.0]));
/// # Ok::<(), toolgate::Error>(())
/// ```
pub fn matmul_batch(products: &mut [(&QWeight, &[f32], &mut [f32])]) -> Result<()> {
    for (w, x, y) in products.iter() {
        w.check_io(x, y)?;
    }
    matmul::matmul_batch(products, Isa::detect());
    Ok(())
}

/// Bytes a weight is read from, shared with their owner: a `Vec<u8>`, or a window of
/// a memory-mapped GGUF file ([`crate::gguf::GgufFile::tensor_data`]) — then the
/// model's weights are the file's pages, not a copy of them.
///
/// Cost: cloning shares the owner (an `Arc`), it never copies bytes.
///
/// ```
/// use toolgate::kernels::WeightBytes;
/// let b = WeightBytes::from(vec![1u8, 2, 3]);
/// assert_eq!(b.as_slice(), &[1, 2, 3]);
/// ```
#[derive(Clone)]
pub struct WeightBytes {
    owner: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: std::ops::Range<usize>,
    /// The owner again when it is a file mapping (see [`WeightBytes::mapped`]), whose
    /// pages [`WeightBytes::release_pages`] can hand back.
    map: Option<std::sync::Arc<memmap2::Mmap>>,
}

impl WeightBytes {
    /// `range` of `owner`'s bytes.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `range` lies outside `owner`'s bytes.
    pub fn window(owner: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>, range: std::ops::Range<usize>) -> Result<Self> {
        let all = 0..(*owner).as_ref().len();
        Self { owner, range: all, map: None }.slice(range)
    }

    /// `range` of a memory-mapped file: as [`WeightBytes::window`], and
    /// [`WeightBytes::release_pages`] can then drop the pages from the process.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `range` lies outside the mapping.
    pub fn mapped(map: std::sync::Arc<memmap2::Mmap>, range: std::ops::Range<usize>) -> Result<Self> {
        let owner: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = map.clone();
        Ok(Self { map: Some(map), ..Self::window(owner, range)? })
    }

    /// Tell the OS this process needs these bytes' pages no more, once their contents
    /// live elsewhere (a weight regrouped into `tiles`): a mapped file's pages leave
    /// the process's resident memory (they stay in the page cache, and a later read
    /// brings them back unchanged). A no-op for owned bytes and off Unix.
    ///
    /// Cost: one `madvise` call; pages shared with a neighbouring tensor are dropped
    /// too (and read back if that one is used).
    pub fn release_pages(&self) {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            // SAFETY: the mapping is read-only and file-backed; MADV_DONTNEED on it only
            // drops this process's page-table entries, and the next access reads the
            // same file bytes back, so no reference ever sees different contents (the
            // file changing underneath is the mapping's own caveat, see
            // `GgufFile::open`). The range lies inside the mapping (checked at
            // construction).
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.range.start, self.range.len())
            };
        }
    }

    /// Bytes `range` of these (relative to their start), sharing the owner: one
    /// expert's matrix out of a stacked MoE tensor.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `range` lies outside these bytes.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Result<Self> {
        if range.start > range.end || range.end > self.len() {
            return Err(Error::InvalidParameter {
                name: "range",
                reason: format!("bytes {range:?} of {}", self.len()),
            });
        }
        let start = self.range.start;
        Ok(Self { owner: self.owner.clone(), range: start + range.start..start + range.end, map: self.map.clone() })
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Whether `next` continues these bytes in the same owner (then the two are one
    /// window, see [`QWeight::stack`]).
    fn continued_by(&self, next: &WeightBytes) -> bool {
        std::sync::Arc::ptr_eq(&self.owner, &next.owner) && self.range.end == next.range.start
    }
}

impl From<Vec<u8>> for WeightBytes {
    fn from(v: Vec<u8>) -> Self {
        let range = 0..v.len();
        Self { owner: std::sync::Arc::new(v), range, map: None }
    }
}

impl std::fmt::Debug for WeightBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WeightBytes({} bytes)", self.len())
    }
}

/// A quantized weight matrix `(out_features, in_features)` in its GGUF block layout,
/// row-major (each row is `in_features / block_len` blocks).
#[derive(Debug, Clone)]
pub struct QWeight {
    ty: WeightType,
    /// Consecutive row ranges: `(first row, bytes)`; one part unless built by
    /// [`QWeight::stack`] from parts that are not adjacent in one buffer.
    parts: Vec<(usize, WeightBytes)>,
    out_features: usize,
    in_features: usize,
    /// The rows regrouped for the tile kernels ([`tiles`]), made by [`prepare`] or at
    /// the first matmul that runs on them; `None` inside when the type has no tiled
    /// layout.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    tiles: std::sync::OnceLock<Option<std::sync::Arc<tiles::Tiles>>>,
}

impl QWeight {
    /// Wrap raw GGUF bytes.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `in_features` is not a multiple of the block length
    /// or `data` is not exactly `out_features` rows.
    pub fn new(ty: WeightType, data: impl Into<WeightBytes>, out_features: usize, in_features: usize) -> Result<Self> {
        let data = data.into();
        let bad = |reason: String| Error::InvalidParameter { name: "weight", reason };
        if in_features == 0 || !in_features.is_multiple_of(ty.block_len()) {
            return Err(bad(format!(
                "{} rows of {in_features} weights are not whole blocks of {}",
                ty.name(),
                ty.block_len()
            )));
        }
        let want = out_features * in_features / ty.block_len() * ty.block_bytes();
        if data.len() != want {
            return Err(bad(format!(
                "{} bytes for a {} matrix ({out_features}, {in_features}) that needs {want}",
                data.len(),
                ty.name()
            )));
        }
        Ok(Self { ty, parts: vec![(0, data)], out_features, in_features, tiles: Default::default() })
    }

    /// Copy a CPU [`QTensor`] of shape `(out, in)`; `Ok(None)` if its type has no
    /// kernel here (the caller keeps candle's matmul for it).
    ///
    /// Cost: one copy of the tensor's bytes.
    ///
    /// # Errors
    /// If the tensor is not 2-D or its bytes cannot be read.
    pub fn from_qtensor(t: &QTensor) -> Result<Option<Self>> {
        let Some(ty) = WeightType::from_candle(t.dtype()) else { return Ok(None) };
        let (out, inp) = t.shape().dims2()?;
        if inp % ty.block_len() != 0 {
            return Ok(None);
        }
        Ok(Some(Self::new(ty, t.data()?.into_owned(), out, inp)?))
    }

    /// One matrix whose rows are `parts`' rows in order (`(Σ out, in)`): several
    /// projections of the same input then cost one call and one activation
    /// quantization. Results are bit-identical to separate calls.
    ///
    /// Cost: no copy — the result shares the parts' bytes (parts adjacent in one
    /// buffer, as q/k/v are in most GGUF files, become one window).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `parts` is empty or the parts differ in type or
    /// input width.
    ///
    /// ```
    /// use toolgate::kernels::{QWeight, WeightType};
    /// let row = |scale: u8| { let mut r = vec![0x00, scale]; r.extend([1u8; 32]); r };
    /// let a = QWeight::new(WeightType::Q8_0, row(0x3C), 1, 32)?; // scale 1
    /// let b = QWeight::new(WeightType::Q8_0, row(0x40), 1, 32)?; // scale 2
    /// let ab = QWeight::stack(&[&a, &b])?;
    /// let mut y = [0f32; 2];
    /// ab.matmul(&[127.0; 32], &mut y)?; // 127: the activations' 8-bit scale is exactly 1
    /// assert_eq!(y, [4064.0, 8128.0]);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn stack(parts: &[&QWeight]) -> Result<Self> {
        let Some(first) = parts.first() else {
            return Err(Error::InvalidParameter { name: "parts", reason: "nothing to stack".into() });
        };
        if let Some(odd) = parts.iter().find(|p| p.ty != first.ty || p.in_features != first.in_features) {
            return Err(Error::InvalidParameter {
                name: "parts",
                reason: format!(
                    "cannot stack {} ({} inputs) with {} ({} inputs)",
                    odd.ty.name(),
                    odd.in_features,
                    first.ty.name(),
                    first.in_features
                ),
            });
        }
        let mut stacked: Vec<(usize, WeightBytes)> = Vec::new();
        let mut rows = 0;
        for p in parts {
            for (first_row, bytes) in &p.parts {
                match stacked.last_mut() {
                    Some((_, last)) if last.continued_by(bytes) => last.range.end = bytes.range.end,
                    _ => stacked.push((rows + first_row, bytes.clone())),
                }
            }
            rows += p.out_features;
        }
        Ok(Self {
            ty: first.ty,
            parts: stacked,
            out_features: rows,
            in_features: first.in_features,
            tiles: Default::default(),
        })
    }

    /// The weight type.
    pub fn weight_type(&self) -> WeightType {
        self.ty
    }

    /// Rows (outputs).
    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// Columns (inputs).
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.in_features / self.ty.block_len() * self.ty.block_bytes()
    }

    /// `y (m, out) = x (m, in) · Wᵀ` with the detected kernels; `m = x.len() / in`.
    ///
    /// Cost: `m · out · in` multiply-adds — in 8-bit integer arithmetic after one 8-bit
    /// quantization of `x`, or in f32 (F16/BF16 weights, and prefill-sized `m`, see
    /// [`f32_path`]); parallel over candle's barrier pool.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `x` is not whole rows or `y` is not `m · out`.
    pub fn matmul(&self, x: &[f32], y: &mut [f32]) -> Result<()> {
        self.check_io(x, y)?;
        matmul::matmul(self, x, x.len() / self.in_features, y, Isa::detect());
        Ok(())
    }

    /// [`QWeight::matmul`] with the kernels of `isa`; an instruction set the CPU lacks
    /// ([`Isa::supported`]) gives the best one below it.
    ///
    /// # Errors
    /// As [`QWeight::matmul`].
    pub fn matmul_with(&self, isa: Isa, x: &[f32], y: &mut [f32]) -> Result<()> {
        self.check_io(x, y)?;
        let isa = Isa::available().into_iter().rev().find(|&i| i <= isa).unwrap_or(Isa::Portable);
        matmul::matmul(self, x, x.len() / self.in_features, y, isa);
        Ok(())
    }

    /// `x` is whole rows of `in_features` and `y` as many rows of `out_features`.
    fn check_io(&self, x: &[f32], y: &[f32]) -> Result<()> {
        let k = self.in_features;
        if !x.len().is_multiple_of(k) || y.len() != x.len() / k * self.out_features {
            return Err(Error::InvalidParameter {
                name: "x",
                reason: format!("{} inputs and {} outputs for a ({}, {k}) weight", x.len(), y.len(), self.out_features),
            });
        }
        Ok(())
    }

    /// Dequantize row `j` into `out` (`in_features` long).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `j` is out of range or `out` has the wrong length.
    pub fn dequantize_row(&self, j: usize, out: &mut [f32]) -> Result<()> {
        if j >= self.out_features || out.len() != self.in_features {
            return Err(Error::InvalidParameter {
                name: "row",
                reason: format!("row {j} into {} values of a ({}, {})", out.len(), self.out_features, self.in_features),
            });
        }
        dequantize_row(self.ty, self.row(j), out);
        Ok(())
    }

    /// The rows in tiles, regrouped at the first call (see [`tiles`]); `None` for a
    /// type without a tiled layout.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn tiles(&self) -> Option<&tiles::Tiles> {
        self.tiles.get_or_init(|| tiles::Tiles::pack(self)).as_deref()
    }

    /// Hand back the pages of rows `rows` when they are a mapped file's (see
    /// [`WeightBytes::release_pages`]): their contents live in tiles now, and an
    /// embedding lookup ([`QWeight::dequantize_row`]) reads back only the rows it needs.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn release_rows(&self, rows: std::ops::Range<usize>) {
        let rb = self.row_bytes();
        for (i, (first, bytes)) in self.parts.iter().enumerate() {
            let end = self.parts.get(i + 1).map_or(self.out_features, |p| p.0);
            let (a, b) = (rows.start.max(*first), rows.end.min(end));
            if a < b {
                if let Ok(part) = bytes.slice((a - first) * rb..(b - first) * rb) {
                    part.release_pages();
                }
            }
        }
    }

    /// The bytes of weight row `j` (panics past `out_features`).
    #[inline]
    pub(crate) fn row(&self, j: usize) -> &[u8] {
        let rb = self.row_bytes();
        let (first, bytes) = match self.parts.as_slice() {
            [one] => one,
            parts => &parts[parts.partition_point(|(first, _)| *first <= j) - 1],
        };
        let at = (j - first) * rb;
        &bytes.as_slice()[at..at + rb]
    }
}
