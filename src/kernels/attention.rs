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

/// A `(heads, rows, width)` f32 array whose rows are contiguous: element `(h, r, c)`
/// is `data[h · head_stride + r · row_stride + c]`.
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a> {
    /// The backing slice, starting at element `(0, 0, 0)`.
    pub data: &'a [f32],
    /// Elements between heads.
    pub head_stride: usize,
    /// Elements between rows.
    pub row_stride: usize,
}

impl Strided<'_> {
    fn row(&self, h: usize, r: usize, width: usize) -> &[f32] {
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
/// Cost: `queries · n_head · visible_keys · (head_dim + v_head_dim)` multiply-adds,
/// one scratch vector of `keys` floats per task; parallel over (query, head) pairs.
///
/// # Errors
/// [`Error::InvalidParameter`] if the head counts do not divide, a view does not cover
/// its shape, `out` has the wrong length, `sinks` is not one per query head, or a
/// query sees no key at all (its own position must be among the keys).
pub fn attention(shape: &AttentionShape, q: Strided, k: Strided, v: Strided, out: &mut [f32]) -> Result<()> {
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
    let n_rep = s.n_head / s.n_kv_head;
    let dv = s.v_head_dim;
    let isa = super::Isa::detect();
    let one = |item: usize, o: &mut [f32], scores: &mut Vec<f32>| {
        let (i, h) = (item / s.n_head, item % s.n_head);
        let kvh = h / n_rep;
        let qp = s.pos + i;
        // Visible key positions: [lo, qp] ∩ [first_key, first_key + keys).
        let lo = match s.window {
            Some(w) if qp + 1 > w => (qp + 1 - w).max(s.first_key),
            _ => s.first_key,
        };
        let (j0, j1) = (lo - s.first_key, qp - s.first_key + 1);
        let qr = q.row(h, i, s.head_dim);
        scores.clear();
        let sink = s.sinks.map(|z| z[h]);
        let mut max = sink.unwrap_or(f32::NEG_INFINITY);
        for j in j0..j1 {
            let sc = s.score(dot(isa, qr, k.row(kvh, j, s.head_dim)));
            max = max.max(sc);
            scores.push(sc);
        }
        let sum = sink.map_or(0.0, |z| (z - max).exp()) + super::glu::exp_shifted(isa, scores, max);
        o.fill(0.0);
        for (p, j) in scores.iter().zip(j0..j1) {
            axpy(isa, p / sum, v.row(kvh, j, dv), o);
        }
    };
    let items = s.queries * s.n_head;
    let per_item = s.keys * (s.head_dim + dv);
    if items * per_item < 1 << 15 {
        // Too little work to be worth waking the other threads.
        let mut scores = Vec::with_capacity(s.keys);
        for (item, o) in out.chunks_exact_mut(dv).enumerate() {
            one(item, o, &mut scores);
        }
        return Ok(());
    }
    super::pool::for_each_chunk(out, dv, |item, o| {
        SCRATCH.with(|c| one(item, o, &mut c.borrow_mut()));
    });
    Ok(())
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `Σ a_i b_i` with eight independent partial sums (AVX2+FMA where the CPU has it, the
/// same grouping either way).
fn dot(isa: super::Isa, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa >= super::Isa::Avx2 {
        // SAFETY: `isa` comes from `Isa::detect`, which reports AVX2 only on a CPU with
        // AVX2 and FMA.
        return unsafe { avx2::dot(a, b) };
    }
    let _ = isa;
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `o += a · x`.
fn axpy(isa: super::Isa, a: f32, x: &[f32], o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa >= super::Isa::Avx2 {
        // SAFETY: as in `dot`.
        return unsafe { avx2::axpy(a, x, o) };
    }
    let _ = isa;
    for (o, x) in o.iter_mut().zip(x) {
        *o += a * x;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// [`super::dot`] with FMA.
    ///
    /// # Safety
    /// The CPU must support `avx2` and `fma`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let full = n / 8 * 8;
        let mut acc = _mm256_setzero_ps();
        for i in (0..full).step_by(8) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), _mm256_loadu_ps(b.as_ptr().add(i)), acc);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        lanes.iter().sum::<f32>() + (full..n).map(|i| a[i] * b[i]).sum::<f32>()
    }

    /// [`super::axpy`] with FMA.
    ///
    /// # Safety
    /// The CPU must support `avx2` and `fma`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn axpy(a: f32, x: &[f32], o: &mut [f32]) {
        let n = o.len().min(x.len());
        let full = n / 8 * 8;
        let av = _mm256_set1_ps(a);
        for i in (0..full).step_by(8) {
            let r = _mm256_fmadd_ps(av, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(o.as_ptr().add(i)));
            _mm256_storeu_ps(o.as_mut_ptr().add(i), r);
        }
        for i in full..n {
            o[i] += a * x[i];
        }
    }
}
