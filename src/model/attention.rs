//! The attention seam: scores, causal/window mask, softmax and weighted values of one
//! layer, from `q (1, n_head, t, d)` and the cached `k`, `v (1, n_kv_head, keys, d)`
//! to `(1, t, n_head · dv)`.
//!
//! On CPU (unless `TOOLGATE_KERNELS=candle`) this is toolgate's fused kernel
//! ([`crate::kernels::attention`]), which reads the KV cache in place, f32 or f16; on
//! other devices it is candle ops: K/V repeated per query head, an explicit mask
//! tensor, softmax.

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};

use crate::kernels::attention::{attention, AttentionShape, Strided};
use crate::Result;

/// Attention of `q` over `k`, `v` as laid out in the module docs; `shape` gives the
/// head counts, positions, window and scale (its `queries`/`keys` must match the tensors).
///
/// # Errors
/// On inconsistent shapes (candle or [`crate::Error::InvalidParameter`]).
pub(super) fn attend(q: &Tensor, k: &Tensor, v: &Tensor, shape: AttentionShape) -> Result<Tensor> {
    if q.device().is_cpu() && crate::kernels::enabled() {
        return Ok(q.apply_op3_no_bwd(k, v, &Fused(shape))?);
    }
    with_candle_ops(q, k, v, shape)
}

/// The fused kernel as a candle op (CPU only).
struct Fused<'a>(AttentionShape<'a>);

/// A `(1, heads, rows, width)` CPU tensor's elements `data` as a [`Strided`] view.
fn strided<'a, T>(data: &'a [T], l: &Layout, what: &str) -> candle_core::Result<Strided<'a, T>> {
    let (dims, stride) = (l.dims(), l.stride());
    if dims.len() != 4 || dims[0] != 1 || stride[3] != 1 || l.start_offset() > data.len() {
        candle_core::bail!("attention {what}: (1, heads, rows, width) with unit inner stride expected, got {l:?}");
    }
    Ok(Strided { data: &data[l.start_offset()..], head_stride: stride[1], row_stride: stride[2] })
}

impl CustomOp3 for Fused<'_> {
    fn name(&self) -> &'static str {
        "toolgate-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let s = &self.0;
        let want = [
            (l1.dims(), [1, s.n_head, s.queries, s.head_dim]),
            (l2.dims(), [1, s.n_kv_head, s.keys, s.head_dim]),
            (l3.dims(), [1, s.n_kv_head, s.keys, s.v_head_dim]),
        ];
        for (got, want) in want {
            if got != want {
                candle_core::bail!("attention: tensor {got:?} where {want:?} was expected");
            }
        }
        let CpuStorage::F32(qd) = s1 else { candle_core::bail!("attention q: f32 expected") };
        let q = strided(qd, l1, "q")?;
        let mut out = vec![0f32; s.queries * s.n_head * s.v_head_dim];
        // Keys and values as the KV cache stores them.
        match (s2, s3) {
            (CpuStorage::F32(kd), CpuStorage::F32(vd)) => {
                attention(s, q, strided(kd, l2, "k")?, strided(vd, l3, "v")?, &mut out)
            }
            (CpuStorage::F16(kd), CpuStorage::F16(vd)) => {
                attention(s, q, strided(kd, l2, "k")?, strided(vd, l3, "v")?, &mut out)
            }
            _ => candle_core::bail!("attention k/v: both f32 or both f16 expected"),
        }
        .map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::F32(out), Shape::from((1, s.queries, s.n_head * s.v_head_dim))))
    }
}

/// The portable path: candle ops on any device.
fn with_candle_ops(q: &Tensor, k: &Tensor, v: &Tensor, s: AttentionShape) -> Result<Tensor> {
    let n_rep = s.n_head / s.n_kv_head.max(1);
    let k = repeat_kv(k, n_rep)?;
    let v = repeat_kv(v, n_rep)?;
    let scores = (q.matmul(&k.t()?)? * s.scale as f64)?; // (1, h, t, keys)
    let scores = match s.softcap {
        Some(c) => soft_cap(&scores, c)?,
        None => scores,
    };
    let scores = if s.queries > 1 || s.window.is_some_and(|w| s.keys > w) {
        scores.broadcast_add(&mask(&s, q.device())?)?
    } else {
        scores
    };
    let probs = match s.sinks {
        // The sinks as one more key column whose probability is dropped.
        Some(z) => {
            let z =
                Tensor::from_slice(z, (1, s.n_head, 1, 1), q.device())?.broadcast_as((1, s.n_head, s.queries, 1))?;
            let with_sinks = Tensor::cat(&[&scores, &z.to_dtype(scores.dtype())?], 3)?.contiguous()?;
            candle_nn::ops::softmax_last_dim(&with_sinks)?.narrow(3, 0, s.keys)?.contiguous()?
        }
        None => candle_nn::ops::softmax_last_dim(&scores)?,
    };
    let o = probs.matmul(&v)?; // (1, h, t, dv)
    Ok(o.transpose(1, 2)?.reshape((1, s.queries, s.n_head * s.v_head_dim))?)
}

/// `c · tanh(x / c)` elementwise: Gemma 2's soft cap of attention scores and logits
/// (the fused kernel applies it per score, [`AttentionShape::score`]).
pub(super) fn soft_cap(x: &Tensor, c: f32) -> Result<Tensor> {
    Ok(((x / c as f64)?.tanh()? * c as f64)?)
}

fn repeat_kv(x: &Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x.contiguous()?);
    }
    let (b, h, t, d) = x.dims4()?;
    let x = x.contiguous()?;
    Ok(Tensor::cat(&vec![&x; n_rep], 2)?.reshape((b, h * n_rep, t, d))?)
}

/// `mask[i][j] = 0` where query `pos+i` may see key `first_key+j`, `-inf` otherwise.
fn mask(s: &AttentionShape, device: &Device) -> Result<Tensor> {
    let (t, keys) = (s.queries, s.keys);
    let mut m = vec![0f32; t * keys];
    for i in 0..t {
        let qp = s.pos + i;
        for j in 0..keys {
            let kp = s.first_key + j;
            let visible = kp <= qp && s.window.is_none_or(|w| qp - kp < w);
            if !visible {
                m[i * keys + j] = f32::NEG_INFINITY;
            }
        }
    }
    Ok(Tensor::from_vec(m, (1, 1, t, keys), device)?)
}
