//! The seam of the row-wise steps (RMS norm, RoPE, the gated activation of a stacked
//! gate|up projection): on CPU (unless `TOOLGATE_KERNELS=candle`; the activation
//! always) toolgate's [`crate::kernels::rows`] and [`crate::kernels::glu`], on the
//! kernels' pool, reading the tensors' storage in place; elsewhere candle-nn's ops.
//! Both give the same bits on CPU.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};

use super::arch::{Activation, RopeStyle};
use crate::kernels::{glu, rows};
use crate::Result;

/// Whether `t` runs through [`crate::kernels::rows`]: an f32 CPU tensor with the
/// kernels enabled.
fn on_kernels(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == candle_core::DType::F32 && crate::kernels::enabled()
}

/// RMS norm of the last axis of `x` with weight `w` (`x`'s last dimension long).
///
/// # Errors
/// If `x` is not contiguous or the shapes disagree.
pub(super) fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    if on_kernels(x) && on_kernels(w) {
        return Ok(x.apply_op2_no_bwd(w, &RmsNorm(eps))?);
    }
    Ok(candle_nn::ops::rms_norm(x, w, eps)?)
}

/// RoPE of `x` `(1, heads, t, d)` with `cos`, `sin` `(t, d / 2)`, in `style`'s pairs.
///
/// # Errors
/// If a tensor is not contiguous or the shapes disagree.
pub(super) fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, style: RopeStyle) -> Result<Tensor> {
    if on_kernels(x) && on_kernels(cos) && on_kernels(sin) {
        return Ok(x.apply_op3_no_bwd(cos, sin, &Rope(style))?);
    }
    Ok(match style {
        RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin)?,
        RopeStyle::Halves => candle_nn::rotary_emb::rope(x, cos, sin)?,
    })
}

/// The gated activation of `gu` `(…, 2·ff)`, each row's gate values then its up values
/// (a stacked gate|up projection's output), as `(…, ff)`: an f32 CPU tensor in place,
/// without the copy `to_vec1` makes (a 512-token prefill of a 3B model's 11,008-wide
/// FFN copied 45 MB per layer that way); any other on CPU converted to f32 first.
///
/// # Errors
/// If `gu` is not on the CPU, or its last axis is odd.
pub(super) fn glu_cpu(gu: &Tensor, activation: Activation) -> Result<Tensor> {
    Ok(gu.to_dtype(candle_core::DType::F32)?.contiguous()?.apply_op1_no_bwd(&Glu(activation))?)
}

/// A contiguous CPU f32 tensor's values.
fn values<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else { candle_core::bail!("{what}: f32 expected") };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{what}: a contiguous tensor expected, got {l:?}"),
    }
}

struct RmsNorm(f32);

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "toolgate-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, w) = (values(s1, l1, "rms_norm input")?, values(s2, l2, "rms_norm weight")?);
        if l1.dims().last() != Some(&w.len()) {
            candle_core::bail!("rms_norm: input {:?} against a weight of {}", l1.dims(), w.len());
        }
        let mut out = vec![0f32; x.len()];
        rows::rms_norm(x, w, self.0, &mut out).map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

struct Glu(Activation);

impl CustomOp1 for Glu {
    fn name(&self) -> &'static str {
        "toolgate-glu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let gu = values(s, l, "glu input")?;
        let mut dims = l.dims().to_vec();
        let ff = match dims.last_mut() {
            Some(last) if *last % 2 == 0 && *last > 0 => {
                *last /= 2;
                *last
            }
            _ => candle_core::bail!("glu: gate|up rows of an even length expected, got {:?}", l.dims()),
        };
        let mut out = vec![0f32; gu.len() / 2];
        glu::glu_rows(self.0, gu, ff, &mut out).map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

struct Rope(RopeStyle);

impl CustomOp3 for Rope {
    fn name(&self) -> &'static str {
        "toolgate-rope"
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
        let (x, cos, sin) = (values(s1, l1, "rope input")?, values(s2, l2, "rope cos")?, values(s3, l3, "rope sin")?);
        let (_, _, t, d) = l1.shape().dims4()?;
        let mut out = vec![0f32; x.len()];
        let interleaved = matches!(self.0, RopeStyle::Interleaved);
        rows::rope(x, cos, sin, t, d, interleaved, &mut out).map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}
