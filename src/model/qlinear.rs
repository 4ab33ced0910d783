//! The quantized-matmul seam: the one place a (quantized) weight meets an activation.
//!
//! Every projection in every architecture is a [`QLinear`]. Faster kernels replace
//! the body of [`QLinear::forward`] without touching the architectures.

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Module, Tensor};
use std::sync::Arc;

use crate::Result;

/// `y = x · Wᵀ (+ b)` with `W` of shape `(out_features, in_features)` kept in its
/// GGUF quantization.
#[derive(Debug, Clone)]
pub struct QLinear {
    weight: QMatMul,
    bias: Option<Tensor>,
    in_features: usize,
    out_features: usize,
}

impl QLinear {
    /// Wrap a loaded weight (and optional bias).
    ///
    /// # Errors
    /// If the weight is not 2-D.
    pub fn new(weight: Arc<QTensor>, bias: Option<Tensor>) -> Result<Self> {
        let (out_features, in_features) = weight.shape().dims2()?;
        Ok(Self { weight: QMatMul::from_arc(weight)?, bias, in_features, out_features })
    }

    /// Apply to `x` of shape `(…, in_features)`; returns `(…, out_features)`.
    ///
    /// Cost: one quantized matmul (activations are quantized on the fly by candle for
    /// quantized weights).
    ///
    /// # Errors
    /// On a shape mismatch.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.weight.forward(x)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }

    /// Gather rows (token embedding lookup) without dequantizing the whole matrix.
    ///
    /// # Errors
    /// If an id is out of range.
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.weight.embedding(ids)?)
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
