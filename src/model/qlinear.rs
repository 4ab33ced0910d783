//! The quantized-matmul seam: the one place a (quantized) weight meets an activation.
//!
//! Every projection in every architecture is a [`QLinear`]. On CPU, weights of the
//! types in [`crate::kernels::WeightType::ALL`] run on toolgate's own kernels
//! ([`crate::kernels`]); every other type and device runs candle's `QMatMul` — but
//! on CUDA with `TOOLGATE_CUDA_MATVEC=on`, a few rows (decode) of a type
//! `kernels/matvec.cu` reads run that kernel (`super::cuda::matvec`: f32 activations,
//! the bias added in the kernel, q/k/v or gate/up in one launch).
//! `TOOLGATE_KERNELS=candle` keeps candle's matmul everywhere (for comparison).

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Shape, Tensor};
use std::sync::Arc;

use crate::kernels::QWeight;
use crate::Result;

#[derive(Debug, Clone)]
enum Weight {
    Candle(QMatMul),
    Kernels(Arc<QWeight>),
}

/// The kernels' matmul as a candle op (CPU only).
struct KernelMatmul<'a>(&'a QWeight);

impl CustomOp1 for KernelMatmul<'_> {
    fn name(&self) -> &'static str {
        "toolgate-qmatmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(x) = storage else { candle_core::bail!("quantized matmul takes f32 activations") };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("quantized matmul needs contiguous activations")
        };
        let mut dims = layout.shape().dims().to_vec();
        match dims.last_mut() {
            Some(last) if *last == self.0.in_features() => *last = self.0.out_features(),
            _ => candle_core::bail!(
                "activations {:?} do not match a weight of {} inputs",
                layout.shape(),
                self.0.in_features()
            ),
        }
        let shape = Shape::from(dims);
        let mut y = vec![0f32; shape.elem_count()];
        self.0.matmul(&x[start..end], &mut y).map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::F32(y), shape))
    }
}

/// `y = x · Wᵀ (+ b)` with `W` of shape `(out_features, in_features)` kept in its
/// GGUF quantization.
#[derive(Debug, Clone)]
pub struct QLinear {
    weight: Weight,
    bias: Option<Tensor>,
    in_features: usize,
    out_features: usize,
}

impl QLinear {
    /// Wrap a loaded weight (and optional bias). A CPU weight of a type with a kernel
    /// is copied into a [`QWeight`] (the `QTensor` is then no longer held).
    ///
    /// # Errors
    /// If the weight is not 2-D.
    pub fn new(weight: Arc<QTensor>, bias: Option<Tensor>) -> Result<Self> {
        let (out_features, in_features) = weight.shape().dims2()?;
        let use_kernels = weight.device().is_cpu() && crate::kernels::enabled();
        let kernel = if use_kernels { QWeight::from_qtensor(&weight)? } else { None };
        let weight = match kernel {
            Some(k) => Weight::Kernels(Arc::new(k)),
            None => Weight::Candle(QMatMul::from_arc(weight)?),
        };
        Ok(Self { weight, bias, in_features, out_features })
    }

    /// Wrap a weight already in toolgate's kernel layout (read straight from the file,
    /// [`crate::gguf::GgufFile::tensor_data`]).
    pub fn from_qweight(weight: QWeight, bias: Option<Tensor>) -> Self {
        let (in_features, out_features) = (weight.in_features(), weight.out_features());
        Self { weight: Weight::Kernels(Arc::new(weight)), bias, in_features, out_features }
    }

    /// One projection computing `parts` side by side (outputs concatenated in order,
    /// biases too), when all of them run on toolgate's kernels with the same weight type
    /// and input width; `Ok(None)` otherwise (keep them separate). Used to fuse q/k/v and
    /// gate/up: one matmul call and one activation quantization instead of two or three,
    /// with bit-identical outputs.
    ///
    /// Cost: one copy of the parts' weights.
    ///
    /// # Errors
    /// Only on a candle error concatenating biases.
    pub fn stack(parts: &[&QLinear]) -> Result<Option<QLinear>> {
        let mut weights = Vec::with_capacity(parts.len());
        for p in parts {
            match &p.weight {
                Weight::Kernels(w) => weights.push(w.as_ref()),
                Weight::Candle(_) => return Ok(None),
            }
        }
        let Ok(w) = QWeight::stack(&weights) else { return Ok(None) };
        let bias = if parts.iter().any(|p| p.bias.is_some()) {
            let bs = parts
                .iter()
                .map(|p| match &p.bias {
                    Some(b) => Ok(b.clone()),
                    None => Tensor::zeros(p.out_features, DType::F32, &candle_core::Device::Cpu),
                })
                .collect::<candle_core::Result<Vec<_>>>()?;
            Some(Tensor::cat(&bs, 0)?)
        } else {
            None
        };
        let (in_features, out_features) = (w.in_features(), w.out_features());
        Ok(Some(Self { weight: Weight::Kernels(Arc::new(w)), bias, in_features, out_features }))
    }

    /// Apply to `x` of shape `(…, in_features)`; returns `(…, out_features)`.
    ///
    /// Cost: one quantized matmul (activations are quantized on the fly by candle for
    /// quantized weights).
    ///
    /// # Errors
    /// On a shape mismatch.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(y) = Self::forward_group(&[self], x, true)? {
            return Ok(y);
        }
        let y = self.forward_unbiased(x)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }

    /// `parts` (up to three, one input width) applied to `x` in one launch of the CUDA
    /// decode matvec (`kernels/matvec.cu`), outputs side by side `(…, Σ out_features)`,
    /// each with its bias when `with_bias`. `Ok(None)` where the matvec does not apply
    /// (not CUDA, not switched on by `TOOLGATE_CUDA_MATVEC=on`, more than eight rows, a
    /// weight candle holds dequantized or a type the matvec does not read): the caller
    /// runs the parts one by one.
    ///
    /// # Errors
    /// On a shape mismatch or a failed launch.
    pub(crate) fn forward_group(parts: &[&QLinear], x: &Tensor, with_bias: bool) -> Result<Option<Tensor>> {
        let Some(weights) = Self::matvec_weights(parts, with_bias) else { return Ok(None) };
        super::cuda::matvec(x, &weights, None)
    }

    /// `act(x · gateᵀ + b) · (x · upᵀ + b)` in one launch of the CUDA decode matvec;
    /// `Ok(None)` where it does not apply (as [`QLinear::forward_group`], or gate and up
    /// of different widths).
    ///
    /// # Errors
    /// On a shape mismatch or a failed launch.
    pub(crate) fn forward_gated(
        gate: &QLinear,
        up: &QLinear,
        activation: super::arch::Activation,
        x: &Tensor,
    ) -> Result<Option<Tensor>> {
        match Self::matvec_weights(&[gate, up], true) {
            Some(weights) if gate.out_features == up.out_features => super::cuda::matvec(x, &weights, Some(activation)),
            _ => Ok(None),
        }
    }

    /// The quantized weight and its bias when candle holds the weight as a `QTensor`
    /// on a CUDA device (f32 bias): what the CUDA matvec kernels read.
    pub(crate) fn cuda_weight(&self) -> Option<(&QTensor, Option<&Tensor>)> {
        Self::matvec_weights(&[self], true).and_then(|v| v.into_iter().next())
    }

    /// The quantized weights (and biases) of `parts` when candle holds each as a
    /// `QTensor` on a CUDA device.
    fn matvec_weights<'a>(parts: &[&'a QLinear], with_bias: bool) -> Option<Vec<(&'a QTensor, Option<&'a Tensor>)>> {
        parts
            .iter()
            .map(|p| match &p.weight {
                Weight::Candle(QMatMul::QTensor(w))
                    if w.device().is_cuda() && p.bias.as_ref().is_none_or(|b| b.dtype() == DType::F32) =>
                {
                    Some((w.as_ref(), if with_bias { p.bias.as_ref() } else { None }))
                }
                _ => None,
            })
            .collect()
    }

    /// [`QLinear::forward`] without the bias: for a caller that adds [`QLinear::bias`]
    /// itself, inside a fused kernel (the CUDA decode step's q/k/v).
    ///
    /// # Errors
    /// On a shape mismatch.
    pub fn forward_unbiased(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(y) = Self::forward_group(&[self], x, false)? {
            return Ok(y);
        }
        Ok(match &self.weight {
            Weight::Candle(w) => w.forward(x)?,
            Weight::Kernels(w) => x.to_dtype(DType::F32)?.contiguous()?.apply_op1_no_bwd(&KernelMatmul(w))?,
        })
    }

    /// The bias `(out_features)`, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Gather rows (token embedding lookup) without dequantizing the whole matrix.
    ///
    /// # Errors
    /// If an id is out of range.
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        match &self.weight {
            Weight::Candle(w) => Ok(w.embedding(ids)?),
            Weight::Kernels(w) => {
                let ids = ids.to_vec1::<u32>()?;
                let k = w.in_features();
                let mut out = vec![0f32; ids.len() * k];
                for (&id, row) in ids.iter().zip(out.chunks_exact_mut(k)) {
                    w.dequantize_row(id as usize, row)?;
                }
                Ok(Tensor::from_vec(out, (ids.len(), k), &candle_core::Device::Cpu)?)
            }
        }
    }

    /// The weight as toolgate's kernels hold it and the bias, when the kernels run it
    /// (callers that work on plain `f32` rows, such as the MoE experts, use them
    /// directly).
    pub fn kernel_parts(&self) -> Option<(&QWeight, Option<&Tensor>)> {
        match &self.weight {
            Weight::Kernels(w) => Some((w, self.bias.as_ref())),
            Weight::Candle(_) => None,
        }
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Output width.
    pub fn out_features(&self) -> usize {
        self.out_features
    }
}
