//! Causal grouped-query attention in f32, for one sequence, read straight from the KV
//! cache: no repeated K/V per query head, no materialised mask, no score tensor.
//!
//! For each query `i` (position `pos + i`) and head `h`, with K/V head
//! `h / (n_head / n_kv_head)`: scores `s_j = scale · q·k_j` (soft-capped to
//! `c · tanh(s_j / c)` when `softcap` is `Some(c)`, Gemma 2) over the keys the query
//! may see (key position `≤` query position, and within `window` positions of it when
//! set), `p = softmax(s)`, output `Σ_j p_j v_j`. With attention sinks (gpt-oss), head
//! `h`'s sink logit `z_h` joins the softmax's denominator only:
//! `p_j = exp(s_j) / (Σ_k exp(s_k) + exp(z_h))`, so a head can attend to nothing. Work is split over (query, head)
//! pairs on candle's barrier pool, the same threads the matmuls use.
//!
//! ```
//! use toolgate::kernels::attention::{attention, AttentionShape, Strided};
//! // One head, two keys, one query at position 1 seeing both.
//! let shape = AttentionShape {
//!     n_head: 1, n_kv_head: 1, head_dim: 2, v_head_dim: 2,
//!     queries: 1, pos: 1, first_key: 0, keys: 2, window: None, scale: 1.0, softcap: None,
//!     sinks: None,
//! };
//! let q = [0.0f32, 0.0]; // equal scores: the output is the mean of the values
//! let k = [1.0f32, 0.0, 0.0, 1.0];
//! let v = [2.0f32, 0.0, 0.0, 4.0];
//! let mut out = [0f32; 2];
//! attention(
//!     &shape,
//!     Strided { data: &q, head_stride: 2, row_stride: 2 },
//!     Strided { data: &k, head_stride: 4, row_stride: 2 },
//!     Strided { data: &v, head_stride: 4, row_stride: 2 },
//!     &mut out,
//! )?;
//! assert_eq!(out, [1.0, 2.0]);
//! # Ok::<(), toolgate::Error>(())
//! ```

use crate::{Error, Result};

/// The sizes and positions of one attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape<'a> {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (divides `n_head`).
    pub n_kv_head: usize,
    /// Width of a query/key head.
    pub head_dim: usize,
    /// Width of a value head.
    pub v_head_dim: usize,
    /// Number of queries (`t`).
    pub queries: usize,
    /// Position of the first query.
    pub pos: usize,
    /// Position of key 0.
    pub first_key: usize,
    /// Number of keys (and values).
    pub keys: usize,
    /// Each query sees only keys less than `window` positions back.
    pub window: Option<usize>,
    /// Multiplier of `q·k`.
    pub scale: f32,
    /// Soft cap of the scaled scores: `c · tanh(s / c)` (Gemma 2's
    /// `attn_logit_softcapping`), `None` for none.
    pub softcap: Option<f32>,
    /// One logit per query head that joins the softmax's denominator and has no value
    /// (gpt-oss's `attn_sinks`; not scaled), `None` for none.
    pub sinks: Option<&'a [f32]>,
}

impl AttentionShape<'_> {
    /// One score from `q·k`: scaled, then soft-capped if set.
    #[inline]
    pub fn score(&self, qk: f32) -> f32 {
        let s = qk * self.scale;
        match self.softcap {
            Some(c) => c * (s / c).tanh(),
            None => s,
        }
    }
}

/// A `(heads, rows, width)` array of `T` (f32, or f16 for a KV cache) whose rows are
/// contiguous: element `(h, r, c)` is `data[h · head_stride + r · row_stride + c]`.
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a, T = f32> {
    /// The backing slice, starting at element `(0, 0, 0)`.
    pub data: &'a [T],
    /// Elements between heads.
    pub head_stride: usize,
    /// Elements between rows.
    pub row_stride: usize,
}

/// An element type keys and values may be stored in: f32, or f16 (a KV cache of half
/// the size). The kernels read either directly, widening f16 exactly to f32 as they
/// load it (`vcvtph2ps`), so the arithmetic and its bits are those of the widened
/// values: a query gets the same bits from an f16 cache as from an f32 one holding the
/// same (f16-rounded) numbers.
pub trait KvElement: Copy + Send + Sync + 'static {
    /// Whether this is f16 (the SIMD kernels pick their loads by it).
    const HALF: bool;
    /// The value as f32 (exact).
    fn f32(self) -> f32;
}

impl KvElement for f32 {
    const HALF: bool = false;
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl KvElement for half::f16 {
    const HALF: bool = true;
    #[inline(always)]
    fn f32(self) -> f32 {
        self.to_f32()
    }
}

impl<T> Strided<'_, T> {
    fn row(&self, h: usize, r: usize, width: usize) -> &[T] {
        let at = h * self.head_stride + r * self.row_stride;
        &self.data[at..at + width]
    }

    /// Whether `(heads, rows, width)` lies inside `data`.
    fn covers(&self, heads: usize, rows: usize, width: usize) -> bool {
        if heads == 0 || rows == 0 {
            return true;
        }
        let last = (heads - 1).checked_mul(self.head_stride).and_then(|a| {
            (rows - 1).checked_mul(self.row_stride).and_then(|b| a.checked_add(b)).and_then(|c| c.checked_add(width))
        });
        last.is_some_and(|end| end <= self.data.len())
    }
}

/// `out (queries, n_head · v_head_dim)` = attention of `q (n_head, queries, head_dim)`
/// over `k (n_kv_head, keys, head_dim)` and `v (n_kv_head, keys, v_head_dim)`.
///
/// Cost: `queries · n_head · visible_keys · (head_dim + v_head_dim)` multiply-adds and
/// one `exp` per visible score; scratch of at most ~4 MiB of scores per thread, plus
/// one staging copy of `out`. Parallel over the blocks of `Plan`.
///
/// # Errors
/// [`Error::InvalidParameter`] if the head counts do not divide, a view does not cover
/// its shape, `out` has the wrong length, `sinks` is not one per query head, or a
/// query sees no key at all (its own position must be among the keys).
pub fn attention<T: KvElement>(
    shape: &AttentionShape,
    q: Strided,
    k: Strided<T>,
    v: Strided<T>,
    out: &mut [f32],
) -> Result<()> {
    let s = *shape;
    let bad = |reason: String| Error::InvalidParameter { name: "attention", reason };
    if s.n_kv_head == 0 || !s.n_head.is_multiple_of(s.n_kv_head) {
        return Err(bad(format!("{} query heads over {} key/value heads", s.n_head, s.n_kv_head)));
    }
    if !q.covers(s.n_head, s.queries, s.head_dim)
        || !k.covers(s.n_kv_head, s.keys, s.head_dim)
        || !v.covers(s.n_kv_head, s.keys, s.v_head_dim)
    {
        return Err(bad(format!("a q/k/v view does not cover its shape {s:?}")));
    }
    if out.len() != s.queries * s.n_head * s.v_head_dim {
        return Err(bad(format!("output of {} for {s:?}", out.len())));
    }
    if s.sinks.is_some_and(|z| z.len() != s.n_head) {
        return Err(bad(format!("{} sink logits for {} query heads", s.sinks.map_or(0, <[f32]>::len), s.n_head)));
    }
    let last_query = s.pos + s.queries.saturating_sub(1);
    if s.queries > 0 && (s.keys == 0 || s.first_key > s.pos || s.first_key + s.keys <= last_query) {
        return Err(bad(format!("queries at {}..={last_query} but keys at {}..+{}", s.pos, s.first_key, s.keys)));
    }
    if out.is_empty() {
        return Ok(());
    }
    // Too little work (a short decode step) is not worth waking the other threads.
    let work = s.queries * s.n_head * s.keys * (s.head_dim + s.v_head_dim);
    let threads = if work < 1 << 15 { 1 } else { super::pool::threads() };
    let plan = Plan::new(s, threads);
    let isa = super::Isa::detect();
    let chunk = plan.bq * plan.hs * s.v_head_dim;
    let mut staged = vec![0f32; plan.items * chunk];
    let run = |item: usize, o: &mut [f32]| SCRATCH.with(|c| plan.run(item, isa, q, k, v, o, &mut c.borrow_mut()));
    if threads == 1 {
        staged.chunks_exact_mut(chunk).enumerate().for_each(|(item, o)| run(item, o));
    } else {
        super::pool::for_each_chunk(&mut staged, chunk, run);
    }
    plan.scatter(&staged, out);
    Ok(())
}

/// Rows (query, head) that share one key/value head and a run of queries: each key
/// and value row is read once for all of them (from cache, in tiles), not once per row.
const ROWS_PER_BLOCK: usize = 32;
/// Scores held per block at most (4 MiB): long contexts get fewer rows per block.
const SCORES_PER_BLOCK: usize = 1 << 20;
/// Bytes of keys (or values) per tile, reused by every row of a block while in L1.
const TILE_FLOATS: usize = 4096;

/// How one call is cut into blocks ("items"): `bq` consecutive queries × `hs` query
/// heads of one key/value head. Every row's arithmetic is the same whatever block it
/// lands in (its scores, softmax and weighted sum run over its own visible keys, in key
/// order), so the answer does not depend on the cut — nor on the number of queries
/// in the call (decode or a prefill chunk) or the thread count.
struct Plan<'a> {
    s: AttentionShape<'a>,
    n_rep: usize,
    /// Queries per block, and the number of query blocks.
    bq: usize,
    n_qb: usize,
    /// Query heads per block, and blocks per key/value head.
    hs: usize,
    n_hs: usize,
    items: usize,
}

impl<'a> Plan<'a> {
    fn new(s: AttentionShape<'a>, threads: usize) -> Self {
        let n_rep = s.n_head / s.n_kv_head;
        let rows = ROWS_PER_BLOCK.min(SCORES_PER_BLOCK / s.keys.max(1)).max(1);
        let mut hs = n_rep.min(rows);
        let mut bq = (rows / hs).clamp(1, s.queries);
        // Enough blocks to keep every thread busy: fewer queries per block first (the
        // heads of a key/value head stay together), then fewer heads.
        let blocks = |bq: usize, hs: usize| s.queries.div_ceil(bq) * s.n_kv_head * n_rep.div_ceil(hs);
        while blocks(bq, hs) < 2 * threads && bq > 1 {
            bq = bq.div_ceil(2);
        }
        while blocks(bq, hs) < 2 * threads && hs > 1 {
            hs = hs.div_ceil(2);
        }
        let (n_qb, n_hs) = (s.queries.div_ceil(bq), n_rep.div_ceil(hs));
        Plan { s, n_rep, bq, n_qb, hs, n_hs, items: n_qb * s.n_kv_head * n_hs }
    }

    /// Block `item`'s queries, query heads and key/value head. The last query blocks
    /// (the most keys) come first, so the threads' last grabs are the short ones.
    fn block(&self, item: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>, usize) {
        let per_qb = self.s.n_kv_head * self.n_hs;
        let qb = self.n_qb - 1 - item / per_qb;
        let (g, hsub) = (item % per_qb / self.n_hs, item % self.n_hs);
        let h0 = g * self.n_rep + hsub * self.hs;
        let queries = qb * self.bq..((qb + 1) * self.bq).min(self.s.queries);
        (queries, h0..(h0 + self.hs).min((g + 1) * self.n_rep), g)
    }

    /// Key indices query `i` sees: `[lo, its own position]` within the keys.
    fn visible(&self, i: usize) -> (usize, usize) {
        let s = &self.s;
        let qp = s.pos + i;
        let lo = match s.window {
            Some(w) if qp + 1 > w => (qp + 1 - w).max(s.first_key),
            _ => s.first_key,
        };
        (lo - s.first_key, qp - s.first_key + 1)
    }

    /// One block into `o` (its rows in (query, head) order, `v_head_dim` each); `sc`
    /// holds the scores.
    #[allow(clippy::too_many_arguments)]
    fn run<T: KvElement>(
        &self,
        item: usize,
        isa: super::Isa,
        q: Strided,
        k: Strided<T>,
        v: Strided<T>,
        o: &mut [f32],
        sc: &mut Vec<f32>,
    ) {
        let s = &self.s;
        let (d, dv) = (s.head_dim, s.v_head_dim);
        let (queries, heads, kvh) = self.block(item);
        let nh = heads.len();
        let rows = queries.len() * nh;
        let row_range = |r: usize| self.visible(queries.start + r / nh);
        // The keys some row sees: from the first query's lowest to the last one's own.
        let (ja, jb) = (row_range(0).0, row_range(rows - 1).1);
        let span = jb - ja;
        sc.clear();
        sc.resize(rows * span, 0.0);

        // Scores, key tile by key tile; each row only its own visible keys.
        let tile = (TILE_FLOATS / d.max(1)).max(8);
        for t0 in (ja..jb).step_by(tile) {
            let t1 = (t0 + tile).min(jb);
            // Rows that see the same keys of this tile (a query's heads on this key
            // head, and queries whose causal limits lie past it): up to `SCORE_ROWS`
            // of them share each key's load.
            let seen = |r: usize| {
                let (j0, j1) = row_range(r);
                (t0.max(j0), t1.min(j1))
            };
            let mut r = 0;
            while r < rows {
                let (a, b) = seen(r);
                let g = (1..SCORE_ROWS.min(rows - r)).take_while(|&i| seen(r + i) == (a, b)).count() + 1;
                if a < b {
                    let row = |i: usize| {
                        let i = r + i.min(g - 1);
                        q.row(heads.start + i % nh, queries.start + i / nh, d)
                    };
                    let qs: [&[f32]; SCORE_ROWS] = std::array::from_fn(row);
                    let out = &mut sc[r * span + a - ja..];
                    scores(isa, &qs[..g], k.rows(kvh, a, b - a, d), k.row_stride, b - a, out, span);
                }
                r += g;
            }
        }
        // Softmax of each row over its visible keys; zeros elsewhere, so the weighted
        // sum below may run over the union of a few rows' keys and add exact zeros.
        for r in 0..rows {
            let (j0, j1) = row_range(r);
            let row = &mut sc[r * span..(r + 1) * span];
            let vis = &mut row[j0 - ja..j1 - ja];
            match s.softcap {
                None => vis.iter_mut().for_each(|x| *x *= s.scale),
                Some(_) => vis.iter_mut().for_each(|x| *x = s.score(*x)),
            }
            let sink = s.sinks.map(|z| z[heads.start + r % nh]);
            let max = max_of(vis).max(sink.unwrap_or(f32::NEG_INFINITY));
            let sum = sink.map_or(0.0, |z| (z - max).exp()) + super::glu::exp_shifted(isa, vis, max);
            let inv = 1.0 / sum;
            vis.iter_mut().for_each(|x| *x *= inv);
        }
        // Weighted values, value tile by value tile, up to four rows at once.
        let o = &mut o[..rows * dv];
        o.fill(0.0);
        let tile = (TILE_FLOATS / dv.max(1)).max(8);
        for t0 in (ja..jb).step_by(tile) {
            let t1 = (t0 + tile).min(jb);
            for r0 in (0..rows).step_by(4) {
                let n = (rows - r0).min(4);
                let (a, b) = (t0.max(row_range(r0).0), t1.min(row_range(r0 + n - 1).1));
                if a < b {
                    let p = &sc[r0 * span + a - ja..];
                    let o = &mut o[r0 * dv..(r0 + n) * dv];
                    values(isa, n, p, span, b - a, v.rows(kvh, a, b - a, dv), v.row_stride, o);
                }
            }
        }
    }

    /// Each block's rows to their places in `out (queries, n_head · v_head_dim)`.
    fn scatter(&self, staged: &[f32], out: &mut [f32]) {
        let (dv, chunk) = (self.s.v_head_dim, self.bq * self.hs * self.s.v_head_dim);
        for item in 0..self.items {
            let (queries, heads, _) = self.block(item);
            let mut from = staged[item * chunk..].chunks_exact(dv);
            for i in queries {
                for h in heads.clone() {
                    let at = (i * self.s.n_head + h) * dv;
                    out[at..at + dv].copy_from_slice(from.next().unwrap_or_default());
                }
            }
        }
    }
}

/// The largest of `xs` (16 running maxima, so it vectorizes; `-inf` when empty).
fn max_of(xs: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 16];
    let chunks = xs.chunks_exact(16);
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    for c in chunks {
        for l in 0..16 {
            m[l] = if c[l] > m[l] { c[l] } else { m[l] };
        }
    }
    m.iter().fold(tail, |a, &x| a.max(x))
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<'a, T> Strided<'a, T> {
    /// Rows `first..first + n` of head `h`, from the first's start to the last's end.
    fn rows(&self, h: usize, first: usize, n: usize, width: usize) -> &'a [T] {
        let at = h * self.head_stride + first * self.row_stride;
        &self.data[at..at + (n - 1) * self.row_stride + width]
    }
}

/// Query rows one key tile's scores take at once (the AVX-512 kernel keeps `8 ×` this
/// many sums in registers): each key is loaded, and an f16 key widened, once for them.
const SCORE_ROWS: usize = 3;

/// `out[i · out_stride + j] = qs[i] · k_j` for the `n` key rows of `k` (`stride` apart)
/// and the query rows `qs` (1 to [`SCORE_ROWS`], the same length). Each score is
/// computed alone, the same way wherever its key falls in a batch and whichever rows
/// share the call, so a row's scores do not depend on which keys or rows share it.
fn scores<T: KvElement>(
    isa: super::Isa,
    qs: &[&[f32]],
    k: &[T],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let d = qs.first().map_or(0, |q| q.len());
    assert!(
        (1..=SCORE_ROWS).contains(&qs.len())
            && qs.iter().all(|q| q.len() == d)
            && (n == 0 || k.len() >= (n - 1) * stride + d)
            && out.len() >= (qs.len() - 1) * out_stride + n,
        "query, key or score rows out of range"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if isa >= super::Isa::Avx512 {
            // SAFETY: `isa` reports AVX-512 only on a CPU that has it; rows checked above.
            return unsafe {
                match qs.len() {
                    1 => avx512::scores::<T, 1>(qs, k, stride, n, out, out_stride),
                    2 => avx512::scores::<T, 2>(qs, k, stride, n, out, out_stride),
                    _ => avx512::scores::<T, 3>(qs, k, stride, n, out, out_stride),
                }
            };
        }
        if isa >= super::Isa::Avx2 {
            // SAFETY: `isa` reports AVX2 only on a CPU with AVX2, FMA and F16C; rows checked above.
            return unsafe {
                match qs.len() {
                    1 => avx2::scores::<T, 1, 8>(qs, k, stride, n, out, out_stride),
                    2 => avx2::scores::<T, 2, 4>(qs, k, stride, n, out, out_stride),
                    _ => avx2::scores::<T, 3, 4>(qs, k, stride, n, out, out_stride),
                }
            };
        }
    }
    let _ = isa;
    for (i, q) in qs.iter().enumerate() {
        for (j, o) in out[i * out_stride..i * out_stride + n].iter_mut().enumerate() {
            let kr = &k[j * stride..j * stride + d];
            let mut acc = [0f32; 8];
            let (qc, kc) = (q.chunks_exact(8), kr.chunks_exact(8));
            let tail: f32 = qc.remainder().iter().zip(kc.remainder()).map(|(x, y)| x * y.f32()).sum();
            for (x, y) in qc.zip(kc) {
                for l in 0..8 {
                    acc[l] += x[l] * y[l].f32();
                }
            }
            *o = acc.iter().sum::<f32>() + tail;
        }
    }
}

/// Pointers to the key rows `j..j + KEYS` of `k` (`stride` apart) that exist (below
/// `n`), and how many do (`m`); the others point at row 0: a short batch computes
/// products there and drops them. The SIMD [`scores`] take a batch of keys so.
#[cfg(target_arch = "x86_64")]
fn key_rows<T, const KEYS: usize>(k: &[T], stride: usize, j: usize, n: usize) -> ([*const T; KEYS], usize) {
    let m = (n - j).min(KEYS);
    (std::array::from_fn(|t| if t < m { k[(j + t) * stride..].as_ptr() } else { k.as_ptr() }), m)
}

/// `o_r += Σ_j p_r[j] · v_j` for `rows` (1 to 4) rows: `p_r` is `p[r · p_stride..]`
/// (`n` weights), `v_j` the `n` value rows of `v` (`v_stride` apart), `o_r` the `r`-th
/// `o.len() / rows`-wide row of `o`. Each output adds its terms in key order, whatever
/// `rows` is.
#[allow(clippy::too_many_arguments)]
fn values<T: KvElement>(
    isa: super::Isa,
    rows: usize,
    p: &[f32],
    p_stride: usize,
    n: usize,
    v: &[T],
    v_stride: usize,
    o: &mut [f32],
) {
    let dv = o.len() / rows;
    assert!(
        (1..=4).contains(&rows) && n > 0 && p.len() >= (rows - 1) * p_stride + n && v.len() >= (n - 1) * v_stride + dv,
        "weights or value rows out of range"
    );
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! by_rows {
            ($m:ident) => {
                // SAFETY: the ISA is the CPU's (see `scores`); every row checked above.
                unsafe {
                    match rows {
                        1 => $m::values::<_, 1>(p, p_stride, n, v, v_stride, o, dv),
                        2 => $m::values::<_, 2>(p, p_stride, n, v, v_stride, o, dv),
                        3 => $m::values::<_, 3>(p, p_stride, n, v, v_stride, o, dv),
                        _ => $m::values::<_, 4>(p, p_stride, n, v, v_stride, o, dv),
                    }
                }
            };
        }
        if isa >= super::Isa::Avx512 {
            return by_rows!(avx512);
        }
        if isa >= super::Isa::Avx2 {
            return by_rows!(avx2);
        }
    }
    let _ = isa;
    for (r, or) in o.chunks_exact_mut(dv).enumerate() {
        let pr = &p[r * p_stride..r * p_stride + n];
        for (j, &w) in pr.iter().enumerate() {
            for (oc, vc) in or.iter_mut().zip(&v[j * v_stride..j * v_stride + dv]) {
                *oc += w * vc.f32();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::KvElement;

    /// Eight elements at `p` as f32 (f16 widened exactly, `vcvtph2ps`).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(super) unsafe fn load8<T: KvElement>(p: *const T) -> __m256 {
        if T::HALF {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        } else {
            _mm256_loadu_ps(p as *const f32)
        }
    }

    /// The sums of eight 8-lane accumulators as one vector (lane `t` = `Σ acc[t]`), in a
    /// fixed order per lane.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) unsafe fn sum8(a: [__m256; 8]) -> __m256 {
        let (t0, t1) = (_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        let (t2, t3) = (_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
        let (u0, u1) = (_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(u0, u1), _mm256_permute2f128_ps::<0x31>(u0, u1))
    }

    /// The sums of four 8-lane accumulators (lane `t` < 4 = `Σ acc[t]`), each lane
    /// added in the same order as [`sum8`] adds it.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn sum4(a: [__m256; 4]) -> __m128 {
        let u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps::<1>(u))
    }

    /// [`super::scores`] on AVX2 for `RQ` query rows: `KEYS` keys at a time (8 for one
    /// row; 4 for two or three, so the `RQ · KEYS` accumulators fit AVX2's 16
    /// registers), each key loaded (and widened) once for all rows. A short batch
    /// computes `q · k₀` in its empty lanes and drops them; each key's lanes are summed
    /// in [`sum8`]'s order, so a row's sums are the same whatever `RQ` is.
    ///
    /// # Safety
    /// The CPU must support `avx2`, `fma` and `f16c`; the slices as `super::scores`
    /// checks, `qs.len() == RQ`, and `KEYS` is 4 or 8.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scores<T: KvElement, const RQ: usize, const KEYS: usize>(
        qs: &[&[f32]],
        k: &[T],
        stride: usize,
        n: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let d = qs[0].len();
        let d8 = d / 8 * 8;
        let q: [*const f32; RQ] = std::array::from_fn(|i| qs[i].as_ptr());
        for j in (0..n).step_by(KEYS) {
            let (rows, m) = super::key_rows::<T, KEYS>(k, stride, j, n);
            let mut acc = [[_mm256_setzero_ps(); KEYS]; RQ];
            for c in (0..d8).step_by(8) {
                let qc: [__m256; RQ] = std::array::from_fn(|i| _mm256_loadu_ps(q[i].add(c)));
                for t in 0..KEYS {
                    let kv = load8(rows[t].add(c));
                    for i in 0..RQ {
                        acc[i][t] = _mm256_fmadd_ps(qc[i], kv, acc[i][t]);
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                let mut lanes = [0f32; 8];
                if KEYS == 8 {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), sum8(std::array::from_fn(|t| acc[t])));
                } else {
                    _mm_storeu_ps(lanes.as_mut_ptr(), sum4(std::array::from_fn(|t| acc[t])));
                }
                let row = &mut out[i * out_stride + j..i * out_stride + j + m];
                for (t, o) in row.iter_mut().enumerate() {
                    *o = (d8..d).fold(lanes[t], |s, c| qs[i][c].mul_add((*rows[t].add(c)).f32(), s));
                }
            }
        }
    }

    /// [`super::values`] on AVX2 for `R` rows: 32 outputs of each row in registers
    /// across the keys for one or two rows, 16 for three or four (so the `R · W`
    /// accumulators, the `W` value vectors and the weight fit AVX2's 16 registers:
    /// four rows × 32 outputs spilled accumulators to the stack at every key), then 8,
    /// then one at a time. Each output adds its terms in key order either way.
    ///
    /// # Safety
    /// The CPU must support `avx2`, `fma` and `f16c`; the slices as `super::values`
    /// checks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn values<T: KvElement, const R: usize>(
        p: &[f32],
        p_stride: usize,
        n: usize,
        v: &[T],
        v_stride: usize,
        o: &mut [f32],
        dv: usize,
    ) {
        let (pp, vp, op) = (p.as_ptr(), v.as_ptr(), o.as_mut_ptr());
        let block = Block { pp, p_stride, n, vp, v_stride, op, dv };
        let wide = if R <= 2 { 32 } else { 16 };
        let mut c = 0;
        while c + wide <= dv {
            if R <= 2 {
                block.run::<R, 4>(c);
            } else {
                block.run::<R, 2>(c);
            }
            c += wide;
        }
        while c + 8 <= dv {
            block.run::<R, 1>(c);
            c += 8;
        }
        for c in c..dv {
            for r in 0..R {
                let o = &mut *op.add(r * dv + c);
                for j in 0..n {
                    *o = (*pp.add(r * p_stride + j)).mul_add((*vp.add(j * v_stride + c)).f32(), *o);
                }
            }
        }
    }

    /// The operands of [`values`]: `n` weights per row at `pp` (`p_stride` apart), `n`
    /// value rows at `vp` (`v_stride` apart), rows of `dv` outputs at `op`.
    struct Block<T> {
        pp: *const f32,
        p_stride: usize,
        n: usize,
        vp: *const T,
        v_stride: usize,
        op: *mut f32,
        dv: usize,
    }

    impl<T: KvElement> Block<T> {
        /// Outputs `c..c + 8W` of each of `R` rows, in `R · W` registers across the keys.
        ///
        /// # Safety
        /// As [`values`], and `c + 8W <= dv`.
        #[target_feature(enable = "avx2,fma,f16c")]
        #[inline]
        unsafe fn run<const R: usize, const W: usize>(&self, c: usize) {
            let Self { pp, p_stride, n, vp, v_stride, op, dv } = *self;
            let mut acc = [[_mm256_setzero_ps(); W]; R];
            for (r, a) in acc.iter_mut().enumerate() {
                for (x, a) in a.iter_mut().enumerate() {
                    *a = _mm256_loadu_ps(op.add(r * dv + c + 8 * x));
                }
            }
            for j in 0..n {
                let row = vp.add(j * v_stride + c);
                let vv: [__m256; W] = std::array::from_fn(|x| load8(row.add(8 * x)));
                for (r, a) in acc.iter_mut().enumerate() {
                    let w = _mm256_broadcast_ss(&*pp.add(r * p_stride + j));
                    for x in 0..W {
                        a[x] = _mm256_fmadd_ps(w, vv[x], a[x]);
                    }
                }
            }
            for (r, a) in acc.iter().enumerate() {
                for (x, a) in a.iter().enumerate() {
                    _mm256_storeu_ps(op.add(r * dv + c + 8 * x), *a);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::KvElement;

    /// Sixteen elements at `p` as f32, those outside `mask` zero (f16 widened exactly).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn load16<T: KvElement>(mask: __mmask16, p: *const T) -> __m512 {
        match (T::HALF, mask) {
            (true, 0xffff) => _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
            (true, _) => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p as *const i16)),
            (false, 0xffff) => _mm512_loadu_ps(p as *const f32),
            (false, _) => _mm512_maskz_loadu_ps(mask, p as *const f32),
        }
    }

    /// [`super::scores`] on AVX-512 for `RQ` query rows: eight keys at a time, 16 lanes
    /// per step (a masked last step for a width not a multiple of 16), each key loaded
    /// (and widened) once for all rows, then each row's halves folded and summed as
    /// AVX2 sums lanes. A row's sums are the same whatever `RQ` is.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL and AVX2/FMA/F16C ([`super::super::Isa::Avx512`]);
    /// the slices as `super::scores` checks, `qs.len() == RQ`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn scores<T: KvElement, const RQ: usize>(
        qs: &[&[f32]],
        k: &[T],
        stride: usize,
        n: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let d = qs[0].len();
        let q: [*const f32; RQ] = std::array::from_fn(|i| qs[i].as_ptr());
        let tail = (d % 16) as u32;
        let mask: __mmask16 = ((1u32 << tail) - 1) as u16;
        let d16 = d - tail as usize;
        for j in (0..n).step_by(8) {
            let (rows, m) = super::key_rows::<T, 8>(k, stride, j, n);
            let mut acc = [[_mm512_setzero_ps(); 8]; RQ];
            for c in (0..d16).step_by(16) {
                let qc: [__m512; RQ] = std::array::from_fn(|i| _mm512_loadu_ps(q[i].add(c)));
                for t in 0..8 {
                    let kv = load16(0xffff, rows[t].add(c));
                    for i in 0..RQ {
                        acc[i][t] = _mm512_fmadd_ps(qc[i], kv, acc[i][t]);
                    }
                }
            }
            if tail > 0 {
                let qc: [__m512; RQ] = std::array::from_fn(|i| _mm512_maskz_loadu_ps(mask, q[i].add(d16)));
                for t in 0..8 {
                    let kv = load16(mask, rows[t].add(d16));
                    for i in 0..RQ {
                        acc[i][t] = _mm512_fmadd_ps(qc[i], kv, acc[i][t]);
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                let halves = acc.map(|a| {
                    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
                    _mm256_add_ps(_mm512_castps512_ps256(a), hi)
                });
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), super::avx2::sum8(halves));
                out[i * out_stride + j..i * out_stride + j + m].copy_from_slice(&lanes[..m]);
            }
        }
    }

    /// [`super::values`] on AVX-512 for `R` rows: 64 outputs of each row in registers
    /// across the keys, then 16, then a masked last step.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL and AVX2/FMA/F16C; the slices as
    /// `super::values` checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn values<T: KvElement, const R: usize>(
        p: &[f32],
        p_stride: usize,
        n: usize,
        v: &[T],
        v_stride: usize,
        o: &mut [f32],
        dv: usize,
    ) {
        let (pp, vp, op) = (p.as_ptr(), v.as_ptr(), o.as_mut_ptr());
        let mut c = 0;
        while c + 64 <= dv {
            let mut acc = [[_mm512_setzero_ps(); 4]; R];
            for (r, a) in acc.iter_mut().enumerate() {
                for (x, a) in a.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(op.add(r * dv + c + 16 * x));
                }
            }
            for j in 0..n {
                let row = vp.add(j * v_stride + c);
                let vv = [0, 16, 32, 48].map(|x| load16(0xffff, row.add(x)));
                for (r, a) in acc.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(*pp.add(r * p_stride + j));
                    for x in 0..4 {
                        a[x] = _mm512_fmadd_ps(w, vv[x], a[x]);
                    }
                }
            }
            for (r, a) in acc.iter().enumerate() {
                for (x, a) in a.iter().enumerate() {
                    _mm512_storeu_ps(op.add(r * dv + c + 16 * x), *a);
                }
            }
            c += 64;
        }
        while c < dv {
            let mask: __mmask16 = if dv - c >= 16 { 0xffff } else { ((1u32 << (dv - c)) - 1) as u16 };
            let mut acc = [_mm512_setzero_ps(); R];
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm512_maskz_loadu_ps(mask, op.add(r * dv + c));
            }
            for j in 0..n {
                let vv = load16(mask, vp.add(j * v_stride + c));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(*pp.add(r * p_stride + j)), vv, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(op.add(r * dv + c), mask, *a);
            }
            c += 16;
        }
    }
}
