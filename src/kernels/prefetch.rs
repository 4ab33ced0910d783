//! Software prefetches of the weight bytes a kernel reads next (x86-64): how far
//! ahead, how many lines per step, and on which CPUs. Measured reasons for each
//! number are beside it; `docs/performance.md` has the runs.

/// How far ahead, in bytes, a decode kernel asks for the weight bytes it will read
/// (`prefetch`): with one activation row a matmul is bound by memory, and on a server
/// core (measured on an Intel Xeon VM) the hardware's own streams keep too few cache
/// lines in flight to reach the memory's bandwidth. F16/BF16 decode of
/// Qwen2.5-Coder-0.5B went 12.3–12.9 → 19.2–20.2 tok/s (BF16) and 13.7–14.4 → 17.8–19.0
/// (F16) with 2 KiB; 1 KiB gave less, 4 KiB no more. Far below the 32 KiB+ of L1, so a
/// line is still there when its row reaches it. Rows of one task are contiguous, so
/// asking past a row's end asks for the next row's bytes; a prefetch never faults, so
/// asking past the last row is harmless.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_BYTES: usize = 2048;

/// Most activation rows at which a tile kernel asks for its next bytes ahead
/// ([`prefetch_part`]). At one or two rows (decode) a pass over a tile is bound by
/// memory and the asks keep lines in flight; at more (prefill) the same tile is walked
/// again per group of rows from L2 and the hardware's streams keep up, while the asks'
/// loop cost issue slots and, with the line-fill buffers full, stalled: on an Intel Xeon
/// VM (Cascade Lake) a third of the AVX2 Q4_K tile's prefill samples sat on it, and a
/// 1.5B Q4_K_M prefill went 26.5–26.9 → 32.6–35.3 tok/s on AVX2 without it.
#[cfg(target_arch = "x86_64")]
const PREFETCH_MAX_ROWS: usize = 2;

/// Ask for the `len` bytes [`PREFETCH_BYTES`] ahead of the ones at `at`, rounded up to
/// whole spans of `len` and at least `PREFETCH_BLOCKS` spans ahead: called once per
/// step of a row kernel (decode of the float files) or of a panel tile (F16/BF16
/// prefill's micro-panel, one step's floats), `len` being the bytes one step reads. A
/// prefetch never faults, so running past the last row is harmless. (`len` is a
/// constant of each kernel, so the division folds.)
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(at: *const u8, len: usize) {
    ask_ahead::<{ std::arch::x86_64::_MM_HINT_T0 }>(at, len, 0, 1);
}

/// What a tile kernel multiplying `rows` activation rows asks for ahead, once per step
/// of its `len`-byte blocks: nothing above [`PREFETCH_MAX_ROWS`] rows; otherwise part
/// `part` of `parts` of what [`prefetch_ahead`] would ask for whole (then the next
/// tile's bytes, past the current one's end, as a task's tiles are contiguous), a
/// line or two per call. The 256-weight tile kernels, whose blocks are 1.3–3.4 KiB
/// (20–53 cache lines), call it once per step of a block (`parts` steps), so the
/// block's lines are asked for one or two at a time; the 32-weight ones once per
/// block, whole (`0, 1`). Asked for whole at the block's start, the burst
/// of prefetches was more than the core tracks at once: on an AMD EPYC VM (Zen 4
/// class), the Q6_K tiles at one activation row read about 8 GB/s per thread from memory
/// against 28 with the same lines asked for 4 at a time (9.5 → 34 GMAC/s;
/// `docs/performance.md`). Each part's asks are straight-line code: `⌊lines / parts⌋`
/// lines, plus one for the first `lines mod parts` parts. As a loop over a range
/// worked out per call (the parts' index is not a constant where the kernel's loop
/// stays rolled) the asks cost as much as the arithmetic: on an Intel Xeon VM the
/// AVX-512 Q4_K tile at one row read 9 GB/s per core from L2 with that loop and 23
/// with these asks (AVX2: 8 and 15), and a 1.5B Q4_K_M decode went 10.5–13.2 →
/// 14.5–15.4 tok/s. The lines go to L2 (`prefetcht1`), not L1: a tile block is used
/// once per pass and read within a few hundred cycles of its arrival, and asks into L2
/// leave L1's fill buffers to the loads. On an Intel Xeon VM (Sapphire Rapids class, 2
/// threads) a 7B Q4_K_M decode ran faster in 8 of 9 alternating pairs, 4.85 → 5.08
/// tok/s on average (`docs/performance.md`). (`rows`, `len` and `parts` are constants
/// of each kernel, so the test and the division fold.)
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_part(rows: usize, at: *const u8, len: usize, part: usize, parts: usize) {
    if rows <= PREFETCH_MAX_ROWS {
        ask_ahead::<{ std::arch::x86_64::_MM_HINT_T1 }>(at, len, part, parts);
    }
}

/// The prefetches of [`prefetch_ahead`] and [`prefetch_part`], with `HINT` the cache
/// level they fill (`_MM_HINT_T0`: L1, `_MM_HINT_T1`: L2).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ask_ahead<const HINT: i32>(at: *const u8, len: usize, part: usize, parts: usize) {
    let ahead = at.wrapping_add(PREFETCH_BYTES.div_ceil(len).max(PREFETCH_BLOCKS) * len);
    // Part p asks for `per` lines, and one more while p < `extra`: straight-line code
    // (`per` and `extra` fold), no loop over a range computed per call.
    let lines = len.div_ceil(64);
    let (per, extra) = (lines / parts, lines % parts);
    let first = ahead.wrapping_add(64 * (per * part + part.min(extra)));
    let ask = |line: usize| {
        // SAFETY: a prefetch reads nothing and never faults, whatever the address.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(first.wrapping_add(64 * line) as *const i8) }
    };
    for line in 0..per {
        ask(line);
    }
    if part < extra {
        ask(per);
    }
}

/// Whether the F16/BF16 row kernels (decode of the float files: one weight row, one
/// stream, at a time) ask for their bytes [`PREFETCH_BYTES`] ahead: on Intel CPUs yes
/// — on an Intel Xeon VM the hardware's streams alone kept too few lines in flight
/// (Qwen2.5-Coder-0.5B F16 decode 13.7–14.4 → 17.8–19.0 tok/s with it) — elsewhere
/// no: on an AMD EPYC VM (Zen 4 class) the same prefetches halved the rate
/// (F16 at one row from memory, 65,536 × 2,048: 6 against 12–13 GMAC/s on one
/// thread, 12 against 17 on two; `docs/performance.md`). Read once.
#[cfg(target_arch = "x86_64")]
pub(crate) fn prefetch_float_rows() -> bool {
    static AHEAD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AHEAD.get_or_init(super::avx512::is_intel)
}

/// The fewest spans ahead [`prefetch_ahead`] asks for (the 256-weight types' tile
/// blocks pass `PREFETCH_BYTES` in one).
#[cfg(target_arch = "x86_64")]
const PREFETCH_BLOCKS: usize = 2;
