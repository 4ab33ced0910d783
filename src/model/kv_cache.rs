//! A growable key/value cache for one attention layer.
//!
//! Keys and values are stored as `(1, n_kv_head, capacity, head_dim)` buffers that
//! double when full, so appending a token is a copy of that token only. The cache can
//! be truncated (to reuse a shared prompt prefix or roll back a speculative step). The
//! buffers hold f32 or f16 ([`KvCache::new`]); appended keys and values are converted.

use candle_core::{DType, Device, Tensor};

use crate::Result;

/// Keys and values of the positions seen so far, for one layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
    dtype: DType,
}

impl Default for KvCache {
    fn default() -> Self {
        Self::new(DType::F32)
    }
}

impl KvCache {
    /// An empty cache storing `dtype` (F32 or F16).
    pub fn new(dtype: DType) -> Self {
        Self { k: None, v: None, len: 0, dtype }
    }

    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forget positions `len..`; the buffers are kept.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Append `k`, `v` of shape `(1, n_kv_head, t, d)` and return views of all cached
    /// keys and values, `(1, n_kv_head, len + t, d)`, in the cache's type.
    ///
    /// Cost: copies (and converts) the `t` new positions; amortised O(1) regrowth.
    ///
    /// # Errors
    /// On a shape mismatch with earlier appends.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, heads, t, d) = k.dims4()?;
        let need = self.len + t;
        self.make_room(need, (b, heads, d, v.dim(3)?), k.device())?;
        let (kb, vb) = (self.k.as_ref().expect("allocated above"), self.v.as_ref().expect("allocated above"));
        kb.slice_set(&k.to_dtype(self.dtype)?.contiguous()?, 2, self.len)?;
        vb.slice_set(&v.to_dtype(self.dtype)?.contiguous()?, 2, self.len)?;
        self.len = need;
        Ok((kb.narrow(2, 0, need)?, vb.narrow(2, 0, need)?))
    }
}

impl KvCache {
    /// Make room for `need` positions without appending (keys `(1, heads, cap, d)`,
    /// values `(1, heads, cap, dv)`, allocated on `device` if there are none yet):
    /// the CUDA decode step writes a position into the buffers itself
    /// ([`KvCache::buffers`], [`KvCache::set_len`]).
    ///
    /// Cost: nothing when there is room; else one regrowth as in [`KvCache::append`].
    ///
    /// # Errors
    /// On a candle error allocating or copying.
    pub fn reserve(&mut self, need: usize, (heads, d, dv): (usize, usize, usize), device: &Device) -> Result<()> {
        self.make_room(need, (1, heads, d, dv), device)
    }

    /// Grow both buffers (`(b, heads, cap, d)` keys, `(b, heads, cap, dv)` values) to
    /// hold `need` positions: at least double, at least 256, keeping what is cached.
    fn make_room(
        &mut self,
        need: usize,
        (b, heads, d, dv): (usize, usize, usize, usize),
        device: &Device,
    ) -> Result<()> {
        let cap = self.capacity();
        if need <= cap {
            return Ok(());
        }
        let new_cap = need.max(cap * 2).max(256);
        self.k = Some(grow(self.k.as_ref(), (b, heads, d), device, self.len, new_cap, self.dtype)?);
        self.v = Some(grow(self.v.as_ref(), (b, heads, dv), device, self.len, new_cap, self.dtype)?);
        Ok(())
    }

    /// Positions the buffers hold (0 before the first append or reserve).
    fn capacity(&self) -> usize {
        self.k.as_ref().and_then(|b| b.dim(2).ok()).unwrap_or(0)
    }

    /// The whole key and value buffers, `(1, heads, capacity, width)`, if allocated.
    pub fn buffers(&self) -> Option<(&Tensor, &Tensor)> {
        self.k.as_ref().zip(self.v.as_ref())
    }

    /// Set the number of cached positions to `len` (at most the capacity) after
    /// positions were written into [`KvCache::buffers`] directly.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }
}

fn grow(
    old: Option<&Tensor>,
    (b, h, d): (usize, usize, usize),
    dev: &Device,
    len: usize,
    cap: usize,
    dtype: DType,
) -> Result<Tensor> {
    let buf = Tensor::zeros((b, h, cap, d), dtype, dev)?;
    if let (Some(old), true) = (old, len > 0) {
        buf.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
    }
    Ok(buf)
}
