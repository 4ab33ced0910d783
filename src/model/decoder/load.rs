//! Loading a decoder's weights: projections on toolgate's kernels straight from the
//! mapped file where they run them (else candle tensors), norms as f32, a mixture of
//! experts as windows of its stacked tensors.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};

use super::ffn::{Ffn, Moe};
use crate::gguf::GgufFile;
use crate::model::arch::ArchSpec;
use crate::model::config::Hyperparams;
use crate::model::qlinear::QLinear;
use crate::{Error, Result};

/// Reads a decoder's tensors from a GGUF file onto a device, checking each one's
/// shape and naming the tensor in every error.
pub(super) struct Loader<'a> {
    pub(super) gguf: &'a GgufFile,
    pub(super) device: &'a Device,
}

impl Loader<'_> {
    pub(super) fn qtensor(&self, name: &str) -> Result<Arc<QTensor>> {
        Ok(Arc::new(self.gguf.tensor(name, self.device)?))
    }

    pub(super) fn f32(&self, name: &str) -> Result<Tensor> {
        let t = self.gguf.tensor(name, self.device)?;
        Ok(t.dequantize(self.device)?.to_dtype(DType::F32)?)
    }

    pub(super) fn opt_f32(&self, name: &str) -> Result<Option<Tensor>> {
        if self.gguf.has_tensor(name) {
            self.f32(name).map(Some)
        } else {
            Ok(None)
        }
    }

    pub(super) fn linear(&self, name: &str) -> Result<QLinear> {
        let b = self.opt_f32(&format!("{name}.bias"))?;
        self.weight(&format!("{name}.weight"), b)
    }

    /// A projection: the file's mapped bytes run by toolgate's kernels when they run
    /// it (no copy at all), else through candle's `QTensor`.
    pub(super) fn weight(&self, name: &str, bias: Option<Tensor>) -> Result<QLinear> {
        let info = self.gguf.tensor_info(name).ok_or_else(|| self.bad(name, "missing"))?;
        if let [rows, cols] = info.dims[..] {
            return self.projection(name, info.ty, self.gguf.tensor_data(name)?, rows, cols, bias);
        }
        QLinear::new(self.qtensor(name)?, bias).map_err(|e| self.bad(name, e))
    }

    /// The experts' biases `{name}.bias` `(n, rows)` of a stacked expert tensor, when
    /// the file has them (gpt-oss); read once for all `n` experts.
    pub(super) fn expert_biases(&self, name: &str, n: usize) -> Result<Option<Tensor>> {
        let bias_name = format!("{name}.bias");
        match self.opt_f32(&bias_name)? {
            Some(b) if b.dims().first() == Some(&n) && b.rank() == 2 => Ok(Some(b)),
            Some(b) => Err(self.bad(&bias_name, format!("shape {:?} is not (experts, rows)", b.dims()))),
            None => Ok(None),
        }
    }

    /// Matrix `e` of a stacked `(n, rows, cols)` expert tensor `{name}.weight`, as a
    /// projection (a window of the mapped tensor), with row `e` of `biases` (from
    /// [`Self::expert_biases`]) as its bias.
    pub(super) fn expert(&self, name: &str, e: usize, n: usize, biases: Option<&Tensor>) -> Result<QLinear> {
        let bias_name = format!("{name}.bias");
        let bias = biases.map(|b| b.get(e)).transpose()?;
        let name = &format!("{name}.weight");
        let info = self.gguf.tensor_info(name).ok_or_else(|| self.bad(name, "missing"))?;
        let [count, rows, cols] = info.dims[..] else {
            return Err(self.bad(name, format!("shape {:?} is not (experts, rows, columns)", info.dims)));
        };
        if count != n {
            return Err(self.bad(name, format!("{count} experts, the metadata says {n}")));
        }
        let per = info.byte_len() as usize / count;
        let bytes = self.gguf.tensor_data(name)?.slice(e * per..(e + 1) * per).map_err(|err| self.bad(name, err))?;
        if bias.as_ref().is_some_and(|b| b.elem_count() != rows) {
            return Err(self.bad(&bias_name, format!("bias rows differ from the weight's {rows}")));
        }
        self.projection(name, info.ty, bytes, rows, cols, bias)
    }

    /// `bytes`, a `(rows, cols)` matrix of type `ty` (all or part of tensor `name`), as
    /// a projection: on toolgate's kernels when they run it, else a candle tensor.
    pub(super) fn projection(
        &self,
        name: &str,
        ty: crate::gguf::GgmlType,
        bytes: crate::kernels::WeightBytes,
        rows: usize,
        cols: usize,
        bias: Option<Tensor>,
    ) -> Result<QLinear> {
        let kernel_type = crate::kernels::WeightType::from_ggml_id(ty.id);
        if let (true, Some(kt)) = (self.device.is_cpu() && crate::kernels::enabled(), kernel_type) {
            if cols.is_multiple_of(kt.block_len()) {
                let w = crate::kernels::QWeight::new(kt, bytes, rows, cols).map_err(|err| self.bad(name, err))?;
                return Ok(QLinear::from_qweight(w, bias));
            }
        }
        let t = self.gguf.qtensor_of(name, ty, &bytes, vec![rows, cols], self.device)?;
        QLinear::new(Arc::new(t), bias).map_err(|err| self.bad(name, err))
    }

    pub(super) fn moe(&self, i: usize, spec: &ArchSpec, hp: &Hyperparams) -> Result<Ffn> {
        let p = |s: &str| format!("blk.{i}.{s}");
        let Some(ex) = hp.experts else {
            return Err(self.bad(&p("ffn_gate_inp.weight"), "a router but no `expert_count` in the metadata"));
        };
        let router = self.linear(&p("ffn_gate_inp"))?;
        self.expect_width(&p("ffn_gate_inp.weight"), &router, hp.n_embd, ex.count)?;
        let mut experts = Vec::with_capacity(ex.count);
        let names = [p("ffn_gate_exps"), p("ffn_up_exps"), p("ffn_down_exps")];
        let [gate_b, up_b, down_b] = [0, 1, 2].map(|j| self.expert_biases(&names[j], ex.count));
        let (gate_b, up_b, down_b) = (gate_b?, up_b?, down_b?);
        for e in 0..ex.count {
            let gate = self.expert(&names[0], e, ex.count, gate_b.as_ref())?;
            let up = self.expert(&names[1], e, ex.count, up_b.as_ref())?;
            let down = self.expert(&names[2], e, ex.count, down_b.as_ref())?;
            self.expect_width(&p("ffn_gate_exps.weight"), &gate, hp.n_embd, up.out_features())?;
            self.expect_width(&p("ffn_down_exps.weight"), &down, up.out_features(), hp.n_embd)?;
            experts.push(Ffn::gated(gate, up, down)?);
        }
        let selection_bias = self.opt_vec(&p("exp_probs_b.bias"), ex.count)?;
        let device = Moe::device_tables(&experts, ex.used, selection_bias.as_deref(), self.device)?;
        let shared = match self.gguf.has_tensor(&p("ffn_gate_shexp.weight")) {
            true => Some(Box::new(self.gated(&p("ffn_gate_shexp"), &p("ffn_up_shexp"), &p("ffn_down_shexp"))?)),
            false => None,
        };
        Ok(Ffn::Moe(Moe {
            router,
            gating: spec.moe_gating,
            experts,
            used: ex.used,
            norm_topk: ex.norm.unwrap_or(spec.moe_norm_topk),
            scale: ex.scale,
            selection_bias,
            shared,
            device,
        }))
    }

    /// A gated FFN from three projections `{gate,up,down}.weight` (and biases).
    pub(super) fn gated(&self, gate: &str, up: &str, down: &str) -> Result<Ffn> {
        let (g, u, d) = (self.linear(gate)?, self.linear(up)?, self.linear(down)?);
        if g.out_features() != u.out_features() {
            return Err(self.bad(&format!("{up}.weight"), "gate and up projections differ in width"));
        }
        Ffn::gated(g, u, d)
    }

    /// An optional 1-D f32 tensor that must hold `width` values, as plain floats.
    pub(super) fn opt_vec(&self, name: &str, width: usize) -> Result<Option<Vec<f32>>> {
        let Some(t) = self.opt_f32(name)? else { return Ok(None) };
        self.expect_norm(name, &t, width)?;
        Ok(Some(t.to_vec1::<f32>()?))
    }

    pub(super) fn bad(&self, name: &str, e: impl std::fmt::Display) -> Error {
        Error::Tensor { path: self.gguf.path().to_path_buf(), name: name.to_string(), reason: e.to_string() }
    }

    pub(super) fn expect_width(&self, name: &str, lin: &QLinear, input: usize, output: usize) -> Result<()> {
        if lin.in_features() != input || lin.out_features() != output {
            return Err(self.bad(
                name,
                format!(
                    "shape ({}, {}) but the hyperparameters need ({output}, {input})",
                    lin.out_features(),
                    lin.in_features()
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn expect_norm(&self, name: &str, t: &Tensor, width: usize) -> Result<()> {
        if t.dims() != [width] {
            return Err(self.bad(name, format!("shape {:?}, expected [{width}]", t.dims())));
        }
        Ok(())
    }
}
