//! The quantized matmul driver: quantize the activations, split the weight rows across
//! the threads, and walk each thread's rows tile by tile so a weight row is read once
//! per group of four activation rows and the activation tile stays in L1. Outputs are
//! written in place and the quantized activations live in a per-thread buffer, so a
//! call allocates nothing.
//!
//! Threads: `pool.rs` (candle's barrier pool).

use std::cell::Cell;

use super::activation::{Q8x256, Q8x32};
use super::dispatch::{RowKernels, MAX_LANES};
use super::formats::ActKind;
use super::pool::{for_each_task, threads};
use super::{dispatch, Isa, QWeight, MAX_ROWS};

/// Activation rows per tile (a tile of 16 rows of width 4096 is 64 KiB of codes).
const ROW_TILE: usize = 16;
/// Fewest weight rows per parallel task.
const MIN_CHUNK: usize = 16;

/// From this many activation rows on (prefill), a matmul with a 32-weight block type
/// dequantizes its weights to f32, a tile of rows at a time, and multiplies with an
/// f32 GEMM (the `gemm` crate's register-blocked kernels, AVX-512/AVX2/NEON by
/// run-time detection): dequantizing a weight row once is cheap next to `m` dot
/// products with it, and the f32 micro-kernels beat the integer dot products' per-block
/// overhead at this size (see [`super::f32_path`]). Below it (decode, small batches),
/// the integer dot products read the quantized weights once.
pub const GEMM_MIN_ROWS: usize = 32;

/// Weight rows dequantized per GEMM call (`TILE × k` floats per thread: 1.25 MiB at
/// `k = 2048`). Large enough that the GEMM's packing of the activations is paid once
/// per 160 weight rows, not once per 32 (measured: 32 was slower on k = 2048).
pub const GEMM_TILE: usize = 160;

/// `y (m, n) = x (m, k) · Wᵀ` where `w` is `(n, k)`.
pub(super) fn matmul(w: &QWeight, x: &[f32], m: usize, y: &mut [f32], isa: Isa) {
    if y.is_empty() {
        // No rows, or a weight of no rows: nothing to compute (and no task to split).
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::float_tiles_path(isa, w.ty, m) {
        return if isa == Isa::Avx512 && super::float_tiles_route(w.ty) {
            matmul_float_tiles(w, x, m, y)
        } else if isa == Isa::Avx512 {
            matmul_float_panels::<Avx512Panels>(w, x, m, y)
        } else {
            matmul_float_panels::<Avx2Panels>(w, x, m, y)
        };
    }
    if super::f32_path(isa, w.ty, m) {
        return matmul_dequantized(w, x, m, y, dispatch::dequantize_for(isa));
    }
    let k = w.in_features;
    #[cfg(target_arch = "x86_64")]
    if super::tiles::tiled(isa, w.ty) {
        if let Some(tiles) = w.tiles() {
            return match w.ty.act_kind() {
                // The 256-weight tiles read the blocks' own per-16 code sums.
                ActKind::Blocks256 => with_scratch(&ACTS256, m * k / 256, Q8x256::ZERO, |acts| {
                    quantize_rows(x, k, k / 256, acts, dispatch::quantize256_for(isa));
                    super::tiles::matmul(isa, tiles, w.out_features, acts, &[], m, y);
                }),
                // Each block's code sum, for the tiles' integer offsets.
                _ => with_scratch(&ACTS32, m * k / 32, Q8x32::ZERO, |acts| {
                    quantize_rows(x, k, k / 32, acts, dispatch::quantize32_for(isa));
                    with_scratch(&SUMS, acts.len(), 0, |sums| {
                        for (s, a) in sums.iter_mut().zip(acts.iter()) {
                            *s = code_sum(a);
                        }
                        super::tiles::matmul(isa, tiles, w.out_features, acts, sums, m, y);
                    });
                }),
            };
        }
    }
    match w.ty.act_kind() {
        // Each activation row is one "block" of `k` floats.
        ActKind::Floats => run(w, x, k, m, y, dispatch::dot_floats_for(isa)),
        ActKind::Blocks32 => with_scratch(&ACTS32, m * k / 32, Q8x32::ZERO, |acts| {
            quantize_rows(x, k, k / 32, acts, dispatch::quantize32_for(isa));
            run(w, acts, k / 32, m, y, dispatch::dot32_for(isa).into());
        }),
        ActKind::Blocks256 => with_scratch(&ACTS256, m * k / 256, Q8x256::ZERO, |acts| {
            quantize_rows(x, k, k / 256, acts, dispatch::quantize256_for(isa));
            run(w, acts, k / 256, m, y, dispatch::dot256_for(isa).into());
        }),
    }
}

/// A [`Q8x32`] block's code sum `Σ qₓ`, which the 32-weight tiles take their integer
/// offsets back with.
fn code_sum(a: &Q8x32) -> i32 {
    a.qs.iter().map(|&q| i32::from(q)).sum()
}

/// Quantize each `k`-wide row of `x` into its `blocks` blocks of `acts`.
fn quantize_rows<A: Send>(x: &[f32], k: usize, blocks: usize, acts: &mut [A], quantize: dispatch::QuantFn<A>) {
    // Rows in parallel: each row's blocks are its own, so the bits do not depend on the
    // split (a prefill on many cores spent its time here on one thread).
    let per = super::pool::rows_per_task(x.len() / k);
    super::pool::for_each_chunk(acts, per * blocks, |task, acts| {
        let x = &x[task * per * k..];
        for (xr, ar) in x.chunks_exact(k).zip(acts.chunks_exact_mut(blocks)) {
            quantize(xr, ar);
        }
    });
}

thread_local! {
    /// The calling thread's quantized-activation buffers, reused across calls (a decode
    /// step makes ~100 matmul calls; none of them allocates).
    static ACTS32: Cell<Vec<Q8x32>> = const { Cell::new(Vec::new()) };
    static ACTS256: Cell<Vec<Q8x256>> = const { Cell::new(Vec::new()) };
    /// The code sum of each activation block, for the tiles' integer offsets.
    static SUMS: Cell<Vec<i32>> = const { Cell::new(Vec::new()) };
    /// Each pool thread's tile of dequantized weight rows (or, for
    /// [`matmul_float_panels`], its panel of widened ones).
    static WEIGHTS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    /// The activations rounded to BF16 ([`matmul_float_tiles`]).
    static BF16_ACTS: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
    /// The activations packed for the panel tiles ([`pack_panel_rows`]).
    static PACKED_ACTS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// The F16/BF16 prefill path on CPUs other than Intel's ([`super::float_tiles_path`],
/// [`super::float_tiles_route`]): BF16 rounds the activations to BF16 once (each row
/// zero-padded to a multiple of 32), F16 reads them as they are; then each task walks
/// its weight rows [`BF16_RN`] at a time against every activation row, [`BF16_RM`] at
/// a time, in register tiles ([`super::avx512::bf16_tile`],
/// [`super::avx512::f16_tile`]): BF16 weights go into `vdpbf16ps` as they are, F16
/// weights are widened 16 at a time inside the loop.
#[cfg(target_arch = "x86_64")]
fn matmul_float_tiles(w: &QWeight, x: &[f32], m: usize, y: &mut [f32]) {
    use super::avx512::{to_bf16, BF16_RM, BF16_RN};
    let (n, k) = (w.out_features, w.in_features);
    assert_eq!(x.len(), m * k, "input of {m} rows of {k}");
    assert_eq!(y.len(), m * n, "output of {m} rows of {n}");
    let bf16 = w.ty == super::WeightType::BF16;
    let kp = k.div_ceil(32) * 32;
    with_scratch(&BF16_ACTS, if bf16 { m * kp } else { 0 }, 0, |xb| {
        if bf16 {
            for (xr, br) in x.chunks_exact(k).zip(xb.chunks_exact_mut(kp)) {
                // SAFETY: `float_tiles_path` checked AVX-512 F/BW, `float_tiles_route`
                // BF16; `br` holds `kp >= k` values.
                unsafe { to_bf16(xr, br) };
            }
        }
        let xb = &*xb;
        let chunk = float_chunk(n, m, k, BF16_RN);
        let cols = Columns(y.as_mut_ptr());
        for_each_task(n.div_ceil(chunk), |ci| {
            let (j0, j1) = (ci * chunk, ((ci + 1) * chunk).min(n));
            for jb in (j0..j1).step_by(BF16_RN) {
                let rn = BF16_RN.min(j1 - jb);
                for ib in (0..m).step_by(BF16_RM) {
                    let rm = BF16_RM.min(m - ib);
                    let at = FloatTile { w, x, xb, kp, ib, jb, cols };
                    macro_rules! rows {
                        ($rn:literal) => {
                            match rm {
                                6 => at.run::<6, $rn>(),
                                5 => at.run::<5, $rn>(),
                                4 => at.run::<4, $rn>(),
                                3 => at.run::<3, $rn>(),
                                2 => at.run::<2, $rn>(),
                                _ => at.run::<1, $rn>(),
                            }
                        };
                    }
                    // SAFETY: the CPU checks as above; activation rows `ib..ib + rm`
                    // and weight rows `jb..jb + rn` exist; this task alone writes
                    // columns `j0..j1` of `y` (m × n, checked above), which outlives
                    // the task.
                    unsafe {
                        match rn {
                            4 => rows!(4),
                            3 => rows!(3),
                            2 => rows!(2),
                            _ => rows!(1),
                        }
                    }
                }
            }
        });
    });
}

/// Where one register tile of [`matmul_float_tiles`] reads and writes.
#[cfg(target_arch = "x86_64")]
struct FloatTile<'a> {
    w: &'a QWeight,
    /// The activations (F16 weights read them).
    x: &'a [f32],
    /// The activations as BF16, rows of `kp` (BF16 weights read them).
    xb: &'a [u16],
    kp: usize,
    ib: usize,
    jb: usize,
    cols: Columns,
}

#[cfg(target_arch = "x86_64")]
impl FloatTile<'_> {
    /// Outputs `(ib + i, jb + j)` for `i < RM`, `j < RN`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW (and BF16 for BF16 weights); activation rows
    /// `ib..ib + RM` and weight rows `jb..jb + RN` exist; no other task writes those
    /// outputs, and `y` is alive.
    unsafe fn run<const RM: usize, const RN: usize>(&self) {
        let (n, k) = (self.w.out_features, self.w.in_features);
        let mut ws = [std::ptr::null::<u16>(); RN];
        for (j, p) in ws.iter_mut().enumerate() {
            // A 16-bit float row is `k` little-endian u16 values (read unaligned).
            *p = self.w.row(self.jb + j).as_ptr() as *const u16;
        }
        let mut out = [[0f32; RN]; RM];
        if self.w.ty == super::WeightType::BF16 {
            let mut xs = [std::ptr::null::<u16>(); RM];
            for (i, p) in xs.iter_mut().enumerate() {
                *p = self.xb[(self.ib + i) * self.kp..][..self.kp].as_ptr();
            }
            super::avx512::bf16_tile::<RM, RN>(xs, ws, k, &mut out);
        } else {
            let mut xs = [std::ptr::null::<f32>(); RM];
            for (i, p) in xs.iter_mut().enumerate() {
                *p = self.x[(self.ib + i) * k..][..k].as_ptr();
            }
            super::avx512::f16_tile::<RM, RN>(xs, ws, k, &mut out);
        }
        for (i, row) in out.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                self.cols.write((self.ib + i) * n + self.jb + j, v);
            }
        }
    }
}

/// One instruction set's kernels for [`matmul_float_panels`]: widen a group of weight
/// rows into a micro-panel, and multiply activation rows with a micro-panel.
#[cfg(target_arch = "x86_64")]
trait Panels {
    /// Activation rows per register tile.
    const MR: usize;
    /// Weight rows per micro-panel: two registers' width, so one [`Panels::widen`]
    /// call (one register's width) fills half of it.
    const NR: usize;
    /// Values `k0..k0 + kc` of the `NR / 2` rows `rows` (null: past the matrix)
    /// widened and transposed to `out[kk · ld + r]`.
    ///
    /// # Safety
    /// As the kernels': the CPU has the instruction set; each non-null row holds
    /// `k0 + kc` values; `out + kk · ld` is valid for `NR / 2` floats for `kk < kc`.
    unsafe fn widen(bf16: bool, rows: &[*const u8], k0: usize, kc: usize, out: *mut f32, ld: usize);
    /// `rm` (1..=MR) activation rows against one micro-panel, `kc` values.
    ///
    /// # Safety
    /// As the kernels' `panel_tile`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        rm: usize,
        x: *const f32,
        panel: *const f32,
        kc: usize,
        y: *mut f32,
        ldy: usize,
        cols: u32,
        accumulate: bool,
    );
}

/// [`Panels`] on AVX-512: micro-panels of 32 rows widened 16 at a time, tiles of 12
/// activation rows.
#[cfg(target_arch = "x86_64")]
struct Avx512Panels;

/// [`Panels`] on AVX2: micro-panels of 16 rows widened 8 at a time, tiles of 6
/// activation rows.
#[cfg(target_arch = "x86_64")]
struct Avx2Panels;

#[cfg(target_arch = "x86_64")]
macro_rules! panels_impl {
    ($ty:ident, $isa:ident, $($r:literal)*) => {
        impl Panels for $ty {
            const MR: usize = super::$isa::PANEL_MR;
            const NR: usize = super::$isa::PANEL_NR;
            unsafe fn widen(bf16: bool, rows: &[*const u8], k0: usize, kc: usize, out: *mut f32, ld: usize) {
                let rows: &[*const u8; super::$isa::PANEL_NR / 2] = rows.try_into().expect("half a micro-panel of rows");
                if bf16 {
                    super::$isa::widen_transposed::<true>(rows, k0, kc, out, ld)
                } else {
                    super::$isa::widen_transposed::<false>(rows, k0, kc, out, ld)
                }
            }
            unsafe fn tile(
                rm: usize,
                x: *const f32,
                panel: *const f32,
                kc: usize,
                y: *mut f32,
                ldy: usize,
                cols: u32,
                accumulate: bool,
            ) {
                match rm {
                    $($r => super::$isa::panel_tile::<$r>(x, panel, kc, y, ldy, cols, accumulate),)*
                    _ => unreachable!("at most {} rows", Self::MR),
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
panels_impl!(Avx512Panels, avx512, 12 11 10 9 8 7 6 5 4 3 2 1);
#[cfg(target_arch = "x86_64")]
panels_impl!(Avx2Panels, avx2, 6 5 4 3 2 1);

/// Weight rows per task of the F16/BF16 prefill paths ([`matmul_float_panels`],
/// [`matmul_float_tiles`]) for `n` rows of `k` against `m` activation rows, taken `step`
/// at a time: at least [`FLOAT_TASKS_PER_THREAD`] tasks per thread and no task over
/// [`FLOAT_TASK_MACS`] multiply-adds, so a thread that finishes early takes another
/// task instead of waiting at the barrier for a slower one (the pool hands tasks out
/// one at a time, so a thread waits at most one task at the end of a call: with four
/// tasks per thread, the 30 ms tasks of a 1.5B model's MLP at 512 rows spent a tenth
/// of an AVX2 prefill spinning); and at least [`FLOAT_MIN_CHUNK`] rows (each task
/// reads the whole of the activations once per panel).
#[cfg(target_arch = "x86_64")]
fn float_chunk(n: usize, m: usize, k: usize, step: usize) -> usize {
    let by_count = n.div_ceil(threads() * FLOAT_TASKS_PER_THREAD);
    let by_work = FLOAT_TASK_MACS / (m * k).max(1);
    by_count.min(by_work).max(FLOAT_MIN_CHUNK).next_multiple_of(step)
}

/// Fewest tasks per thread in [`float_chunk`].
#[cfg(target_arch = "x86_64")]
const FLOAT_TASKS_PER_THREAD: usize = 4;
/// Most multiply-adds per task in [`float_chunk`]: about 2 ms of one core's FMAs.
#[cfg(target_arch = "x86_64")]
const FLOAT_TASK_MACS: usize = 1 << 26;
/// Fewest weight rows per task in [`float_chunk`].
#[cfg(target_arch = "x86_64")]
const FLOAT_MIN_CHUNK: usize = 64;

/// Bytes of f32 panel per task in [`matmul_float_panels`] (L2-sized: the panel is read
/// once per register tile's group of activation rows, [`Panels::MR`]).
#[cfg(target_arch = "x86_64")]
const PANEL_BYTES: usize = 1 << 20;
/// Most values of `k` per panel in [`matmul_float_panels`]: a longer row is widened
/// in slices of this many, so a panel holds at least `PANEL_BYTES / 4 / PANEL_SLICE`
/// weight rows and the activation rows' slice (`m × PANEL_SLICE` floats) is read
/// once per panel, not once per 32 weight rows.
#[cfg(target_arch = "x86_64")]
const PANEL_SLICE: usize = 512;
/// `x` (`m` rows of `k`) packed for [`matmul_float_panels`]'s register tiles: for each
/// slice of `slice` values from `s0` and each group of `mr` rows from `ib` (`rm` rows,
/// the last group may hold fewer), the group's values step-major — value `kk` of row
/// `ib + i` at `out[s0 · m + ib · sl + kk · rm + i]`, `sl` the slice's length. A tile
/// then reads its activations in order, 12 × 2 KiB of them staying in L1 while its
/// micro-panels stream from L2 (as rows a row's length apart, the 12 rows' lines fell
/// into a few L1 sets and the panel's lines evicted them). Once per call, `m · k`
/// copies, shared by every task, the row groups spread over the threads.
#[cfg(target_arch = "x86_64")]
fn pack_panel_rows(x: &[f32], m: usize, k: usize, mr: usize, slice: usize, out: &mut [f32]) {
    assert!(x.len() >= m * k && out.len() >= m * k, "{m} rows of {k} to pack");
    let groups = m.div_ceil(mr);
    let per_task = super::pool::rows_per_task(groups);
    let base = Columns(out.as_mut_ptr());
    for_each_task(groups.div_ceil(per_task), |t| {
        for ib in (t * per_task * mr..((t + 1) * per_task * mr).min(m)).step_by(mr) {
            let rm = mr.min(m - ib);
            for s0 in (0..k).step_by(slice) {
                let sl = slice.min(k - s0);
                // SAFETY: the group's values for this slice are `out[s0 · m + ib · sl ..][..rm
                // · sl]`: inside `out` (`m · k`, checked above), and no other (group,
                // slice) pair's, so no other task's.
                let group = unsafe { std::slice::from_raw_parts_mut(base.base().add(s0 * m + ib * sl), rm * sl) };
                for (i, row) in x[ib * k..].chunks_exact(k).take(rm).enumerate() {
                    for (dst, &v) in group[i..].iter_mut().step_by(rm).zip(&row[s0..s0 + sl]) {
                        *dst = v;
                    }
                }
            }
        }
    });
}

/// The F16/BF16 prefill path on AVX2, on Intel's AVX-512, and for BF16 on CPUs without
/// AVX-512 BF16 ([`super::float_tiles_path`], [`super::float_tiles_route`]), with the
/// kernels of `P`: each task widens its weight rows to f32 — a panel of at most
/// [`PANEL_BYTES`]: a run of rows, a slice of at most [`PANEL_SLICE`] of their values
/// — transposed into micro-panels of 32 rows, 16 on AVX2
/// ([`super::avx512::widen_transposed`]; each weight is converted once per call, not
/// once per group of activation rows), then multiplies every activation row with the
/// panel in register tiles of 12 rows × 32 columns, 6 × 16 on AVX2
/// ([`super::avx512::panel_tile`]), a whole slice per call, the partial sums kept in
/// `y`, the activations packed for the tiles once per call ([`pack_panel_rows`]), the
/// micro-panels' lines asked for ahead. The weight rows go out in [`float_chunk`]'s
/// tasks. An output's
/// products are added in `k` order whatever the row count, so a row's result does not
/// depend on how many rows share the matmul.
#[cfg(target_arch = "x86_64")]
fn matmul_float_panels<P: Panels>(w: &QWeight, x: &[f32], m: usize, y: &mut [f32]) {
    let (mr, nr) = (P::MR, P::NR);
    let (n, k) = (w.out_features, w.in_features);
    assert_eq!(x.len(), m * k, "input of {m} rows of {k}");
    assert_eq!(y.len(), m * n, "output of {m} rows of {n}");
    let bf16 = w.ty == super::WeightType::BF16;
    let slice = PANEL_SLICE.min(k);
    // Rows per panel: a multiple of `nr`, at least one micro-panel.
    let per_panel = (PANEL_BYTES / (4 * slice) / nr).max(1) * nr;
    let chunk = float_chunk(n, m, k, nr);
    let cols = Columns(y.as_mut_ptr());
    with_line_scratch(&PACKED_ACTS, m * k, |packed| {
        pack_panel_rows(x, m, k, mr, slice, packed);
        let packed = &*packed;
        for_each_task(n.div_ceil(chunk), |ci| {
            let (j0, j1) = (ci * chunk, ((ci + 1) * chunk).min(n));
            with_line_scratch(&WEIGHTS, per_panel.min((j1 - j0).next_multiple_of(nr)) * slice, |panel| {
                for jc in (j0..j1).step_by(per_panel) {
                    let rows = per_panel.min(j1 - jc);
                    for s0 in (0..k).step_by(slice) {
                        let sl = slice.min(k - s0);
                        // Micro-panel `p` (weight rows jc + p·nr ..) is `panel[p · nr · sl ..]`:
                        // `sl` steps of `nr` values.
                        for (p, micro) in panel.chunks_exact_mut(nr * sl).take(rows.div_ceil(nr)).enumerate() {
                            let group_len = nr / 2;
                            for half in 0..2 {
                                let first = jc + p * nr + half * group_len;
                                let group: [*const u8; 16] = std::array::from_fn(|r| {
                                    if r < group_len && first + r < jc + rows {
                                        w.row(first + r).as_ptr()
                                    } else {
                                        std::ptr::null()
                                    }
                                });
                                // SAFETY: `float_tiles_path` checked the instruction set (AVX2
                                // with FMA and F16C; AVX-512 F/BW/VL on top for
                                // `Avx512Panels`); each row holds `k >= s0 + sl` 16-bit
                                // values; `micro` holds `nr · sl` floats, written at
                                // `kk · nr + half · nr / 2 ..+ nr / 2` for `kk < sl`.
                                unsafe {
                                    let out = micro.as_mut_ptr().add(half * group_len);
                                    P::widen(bf16, &group[..group_len], s0, sl, out, nr);
                                }
                            }
                        }
                        let panel = &*panel;
                        for ib in (0..m).step_by(mr) {
                            let rm = mr.min(m - ib);
                            // Rows `ib..ib + rm`, values `s0..s0 + sl`, step-major.
                            let xs = &packed[s0 * m + ib * sl..][..rm * sl];
                            for jr in (0..rows).step_by(nr) {
                                let valid = nr.min(rows - jr);
                                let mask = if valid == 32 { u32::MAX } else { (1u32 << valid) - 1 };
                                let micro = panel[jr * sl..].as_ptr();
                                // SAFETY: the CPU checks as above; `xs` holds `sl · rm`
                                // values; the micro-panel holds `nr · sl` floats; outputs
                                // `(ib + i, jc + jr + j)` for the `valid` columns are inside
                                // `y` (m × n, checked above) and this task's alone.
                                unsafe {
                                    let out = cols.base().add(ib * n + jc + jr);
                                    P::tile(rm, xs.as_ptr(), micro, sl, out, n, mask, s0 > 0);
                                }
                            }
                        }
                    }
                }
            });
        });
    });
}

/// The prefill path (see [`GEMM_MIN_ROWS`]): each task owns a run of weight rows
/// (columns of `y`), dequantizes them [`GEMM_TILE`] at a time and multiplies the whole
/// of `x` by each tile.
fn matmul_dequantized(w: &QWeight, x: &[f32], m: usize, y: &mut [f32], dequantize: dispatch::DequantizeFn) {
    let (n, k) = (w.out_features, w.in_features);
    assert_eq!(x.len(), m * k, "input of {m} rows of {k}");
    assert_eq!(y.len(), m * n, "output of {m} rows of {n}");
    let chunk = n.div_ceil(threads()).max(GEMM_TILE);
    let cols = Columns(y.as_mut_ptr());
    for_each_task(n.div_ceil(chunk), |ci| {
        let (j0, j1) = (ci * chunk, ((ci + 1) * chunk).min(n));
        with_scratch(&WEIGHTS, GEMM_TILE * k, 0.0, |tile| {
            for a in (j0..j1).step_by(GEMM_TILE) {
                let b = (a + GEMM_TILE).min(j1);
                for j in a..b {
                    dequantize(w.ty, w.row(j), &mut tile[(j - a) * k..][..k]);
                }
                // SAFETY: dst is y's columns a..b (rows of stride n), inside y (m·n
                // elements, checked above) and written by this task alone; lhs is x
                // (m × k, row-major), rhs the tile read as k × (b − a) (column j − a is
                // dequantized row j); all three outlive the call.
                unsafe {
                    gemm::gemm(
                        m,
                        b - a,
                        k,
                        cols.base().add(a),
                        1,
                        n as isize,
                        false,
                        x.as_ptr(),
                        1,
                        k as isize,
                        tile.as_ptr(),
                        k as isize,
                        1,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            }
        });
    });
}

/// Run `f` on `len` elements of this thread's scratch buffer `key` (contents
/// unspecified), growing it if needed. Re-entrant: a nested call gets a fresh buffer.
fn with_scratch<T: Copy + 'static>(
    key: &'static std::thread::LocalKey<Cell<Vec<T>>>,
    len: usize,
    zero: T,
    f: impl FnOnce(&mut [T]),
) {
    let mut buf = key.with(Cell::take);
    if buf.len() < len {
        buf.resize(len, zero);
    }
    f(&mut buf[..len]);
    key.with(|c| c.set(buf));
}

/// [`with_scratch`] for floats, the `len` floats handed to `f` starting on a 64-byte
/// line, so that no 32- or 64-byte load of a micro-panel or of the packed activations
/// straddles two lines (a split load costs two).
#[cfg(target_arch = "x86_64")]
fn with_line_scratch(key: &'static std::thread::LocalKey<Cell<Vec<f32>>>, len: usize, f: impl FnOnce(&mut [f32])) {
    const LINE: usize = 64 / std::mem::size_of::<f32>();
    with_scratch(key, len + LINE, 0.0, |buf| {
        let at = buf.as_ptr().align_offset(64).min(LINE);
        f(&mut buf[at..at + len])
    })
}

/// An output buffer's base pointer, shared with the pool's tasks, each of which writes
/// a disjoint set of its elements: `y`'s columns of its own weight rows in the
/// products, and its own row groups in [`pack_panel_rows`].
#[derive(Clone, Copy)]
struct Columns(*mut f32);
// SAFETY: tasks write disjoint elements (see `run` and `pack_panel_rows`), and the
// pool's calls that run them return only after every task has finished, while the
// buffer is still mutably borrowed by the caller.
unsafe impl Send for Columns {}
unsafe impl Sync for Columns {}

impl Columns {
    fn base(&self) -> *mut f32 {
        self.0
    }

    /// # Safety
    /// `i` is inside `y`, no other task writes element `i`, and `y` is alive.
    unsafe fn write(&self, i: usize, v: f32) {
        *self.0.add(i) = v;
    }
}

/// Weight rows per task of a row-kernel product with `n` weight rows: about four
/// tasks per thread, at least [`MIN_CHUNK`] rows each.
fn rows_per_task(n: usize) -> usize {
    n.div_ceil(threads() * 4).max(MIN_CHUNK)
}

fn run<A: Sync>(w: &QWeight, acts: &[A], blocks: usize, m: usize, y: &mut [f32], kernels: RowKernels<A>) {
    let n = w.out_features;
    assert_eq!(y.len(), m * n, "output of {m} rows of {n}");
    let chunk = rows_per_task(n);
    // Each task owns a run of weight rows (columns of `y`) and fills them for every
    // activation row, tile by tile, writing straight into `y`.
    let cols = Columns(y.as_mut_ptr());
    for_each_task(n.div_ceil(chunk), |ci| {
        // SAFETY: `cols` is `y` (m × n, checked above), task `ci` alone owns columns
        // `j0..j1`, and `y` outlives every task.
        unsafe { run_rows(w, acts, blocks, m, cols, kernels, ci * chunk, ((ci + 1) * chunk).min(n)) };
    });
}

/// Fill columns `j0..j1` of `y` (`m × n`, `n = w.out_features`, at `cols`).
///
/// One activation row (decode) with a [`RowKernels::lanes`] kernel of `L` rows: the
/// columns are cut into `L` runs walked in lockstep, one row of each per call, so
/// the core reads `L` streams of weights at once (F16 rows on an AMD EPYC core, 2
/// threads, rows from memory: 12 → 17–22 GMAC/s at 8,960 columns, 24–25 → 28–33 at
/// 1,536; a 1.5B F16 model's decode 8.1–8.4 → 11.1–11.5 tok/s).
///
/// # Safety
/// `cols` points at an `m · n` output no one else writes columns `j0..j1` of, alive
/// for the call.
#[allow(clippy::too_many_arguments)]
unsafe fn run_rows<A>(
    w: &QWeight,
    acts: &[A],
    blocks: usize,
    m: usize,
    cols: Columns,
    kernels: RowKernels<A>,
    j0: usize,
    j1: usize,
) {
    let n = w.out_features;
    let dot = kernels.dot;
    let act = |r: usize| &acts[r * blocks..(r + 1) * blocks];
    if m == 1 {
        let mut rest = j0;
        if let Some((lanes, f)) = kernels.lanes {
            let per = (j1 - j0) / lanes;
            let mut ws: [&[u8]; MAX_LANES] = [&[]; MAX_LANES];
            let mut o = [0f32; MAX_LANES];
            for t in 0..per {
                for (l, s) in ws[..lanes].iter_mut().enumerate() {
                    *s = w.row(j0 + l * per + t);
                }
                f(w.ty, &ws[..lanes], act(0), &mut o[..lanes]);
                for (l, &v) in o[..lanes].iter().enumerate() {
                    // SAFETY: as below (`j0 + l · per + t < j1`).
                    cols.write(j0 + l * per + t, v);
                }
            }
            rest = j0 + lanes * per;
        }
        let x = [act(0)];
        for j in rest..j1 {
            let mut o = 0f32;
            dot(w.ty, w.row(j), &x, std::slice::from_mut(&mut o));
            // SAFETY: as below, with `r = 0`.
            cols.write(j, o);
        }
        return;
    }
    let mut out = [0f32; MAX_ROWS];
    for t0 in (0..m).step_by(ROW_TILE) {
        let t1 = (t0 + ROW_TILE).min(m);
        for j in j0..j1 {
            let wr = w.row(j);
            for g0 in (t0..t1).step_by(MAX_ROWS) {
                let g1 = (g0 + MAX_ROWS).min(t1);
                let mut xs: [&[A]; MAX_ROWS] = [act(g0); MAX_ROWS];
                for (s, r) in xs.iter_mut().zip(g0..g1) {
                    *s = act(r);
                }
                dot(w.ty, wr, &xs[..g1 - g0], &mut out[..g1 - g0]);
                for (r, v) in (g0..g1).zip(out) {
                    // SAFETY: `r < m` and `j < n`, so the index is inside the
                    // output (`m·n`); column `j` is this call's alone (the caller's
                    // contract), and the output outlives the call.
                    cols.write(r * n + j, v);
                }
            }
        }
    }
}

/// The activations of one product, quantized for its weight type (and for its tiles,
/// where the weight runs on them: the 32-weight tiles also take each block's code sum).
enum Acts {
    B32(Vec<Q8x32>),
    B256(Vec<Q8x256>),
    Floats,
    // Read by the x86-64 tile kernels only (no other target has tiles).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Tiles32(Vec<Q8x32>, Vec<i32>),
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Tiles256(Vec<Q8x256>),
}

/// Several products in one parallel call: every product's activations are quantized
/// first, then all products' weight rows (or tiles, [`super::tiles`]) are split into
/// one list of tasks, so `p` small matmuls (a MoE layer's chosen experts) cost one
/// fork/join, not `p`. Products on the f32 path (prefill-sized, [`super::f32_path`])
/// or the float tiles run as [`matmul`] does.
/// Results are bit-identical to separate [`matmul`] calls.
/// Each product is `(W, x, y)`: `y (m, n) = x (m, k) · Wᵀ`, shapes checked by the caller.
pub(super) fn matmul_batch(products: &mut [(&QWeight, &[f32], &mut [f32])], isa: Isa) {
    let mut parts: Vec<(&QWeight, &[f32], Acts, Columns)> = Vec::with_capacity(products.len());
    for (w, x, y) in products.iter_mut() {
        let k = w.in_features;
        let m = x.len() / k;
        if super::f32_path(isa, w.ty, m) || super::float_tiles_path(isa, w.ty, m) {
            matmul(w, x, m, y, isa);
            continue;
        }
        let tiled = super::tiles::tiled(isa, w.ty) && w.tiles().is_some();
        let acts = match w.ty.act_kind() {
            ActKind::Floats => Acts::Floats,
            ActKind::Blocks32 => {
                let mut a = vec![Q8x32::ZERO; m * k / 32];
                quantize_rows(x, k, k / 32, &mut a, dispatch::quantize32_for(isa));
                if tiled {
                    let sums = a.iter().map(code_sum).collect();
                    Acts::Tiles32(a, sums)
                } else {
                    Acts::B32(a)
                }
            }
            ActKind::Blocks256 => {
                let mut a = vec![Q8x256::ZERO; m * k / 256];
                quantize_rows(x, k, k / 256, &mut a, dispatch::quantize256_for(isa));
                if tiled {
                    Acts::Tiles256(a)
                } else {
                    Acts::B256(a)
                }
            }
        };
        parts.push((w, x, acts, Columns(y.as_mut_ptr())));
    }
    // Each product is cut into the pieces `run` (or the tiles' matmul) would cut it
    // into — runs of weight rows, or of tiles — and the tasks are ordered piece by
    // piece across the products: the pool hands each thread a contiguous range of
    // tasks, which then holds the same share of every product, however unevenly the
    // rows are spread over the products (a prefill routes more tokens to some experts
    // than to others).
    // Only a tiled product asks for its tiles (asking packs them).
    let chunk = |p: &(&QWeight, &[f32], Acts, Columns)| match &p.2 {
        Acts::Tiles32(..) | Acts::Tiles256(_) => {
            let tiles = p.0.tiles().expect("packed above");
            (tiles.count(), tiles.per_task(p.1.len() / p.0.in_features))
        }
        _ => (p.0.out_features, rows_per_task(p.0.out_features)),
    };
    let chunks: Vec<(usize, usize)> = parts.iter().map(chunk).collect();
    // As many pieces as the product cut finest has.
    let pieces = chunks.iter().map(|&(n, chunk)| n.div_ceil(chunk)).max().unwrap_or(0);
    let mut tasks: Vec<(usize, usize, usize)> = Vec::new();
    for piece in 0..pieces {
        for (i, &(n, chunk)) in chunks.iter().enumerate() {
            if piece * chunk < n {
                tasks.push((i, piece * chunk, ((piece + 1) * chunk).min(n)));
            }
        }
    }
    for_each_task(tasks.len(), |t| {
        let (i, j0, j1) = tasks[t];
        let (w, x, acts, cols) = &parts[i];
        let (k, m) = (w.in_features, x.len() / w.in_features);
        // SAFETY: `cols` is product `i`'s output (`m · n`, its `&mut` held by
        // `products` for the whole call, shapes checked by the caller), task `t` alone
        // owns its columns `j0..j1`, and every task ends before this function returns.
        unsafe {
            match acts {
                Acts::Floats => run_rows(w, x, k, m, *cols, dispatch::dot_floats_for(isa), j0, j1),
                Acts::B32(a) => run_rows(w, a, k / 32, m, *cols, dispatch::dot32_for(isa).into(), j0, j1),
                Acts::B256(a) => run_rows(w, a, k / 256, m, *cols, dispatch::dot256_for(isa).into(), j0, j1),
                // Tiles `j0..j1`: `tiled` above saw them packed.
                #[cfg(target_arch = "x86_64")]
                Acts::Tiles32(a, sums) => {
                    let tiles = w.tiles().expect("packed above");
                    super::tiles::run_tiles(isa, tiles, w.out_features, a, sums, m, cols.base(), j0..j1)
                }
                #[cfg(target_arch = "x86_64")]
                Acts::Tiles256(a) => {
                    let tiles = w.tiles().expect("packed above");
                    super::tiles::run_tiles(isa, tiles, w.out_features, a, &[], m, cols.base(), j0..j1)
                }
                #[cfg(not(target_arch = "x86_64"))]
                Acts::Tiles32(..) | Acts::Tiles256(_) => unreachable!("no tiles off x86-64"),
            }
        }
    });
}
