//! The generic decoder-only transformer every supported architecture runs on.
//!
//! Shapes (one sequence): token ids `(t)` → hidden `(1, t, n_embd)`; per layer
//! Q `(1, n_head, t, head_dim)`, K/V `(1, n_kv_head, t, head_dim)` appended to the
//! [`KvCache`]; logits of the last position `(vocab)`.
//!
//! **Slots**: the decoder holds [`Decoder::slots`] independent sequences, each with its
//! own KV caches and position ([`Decoder::set_slots`], [`Decoder::select_slot`]).
//! [`Decoder::forward_batch`] decodes one token of each of `b` sequences in one pass:
//! hidden `(1, b, n_embd)`, every projection one `b`-row matmul (the weights are read
//! once for all of them), attention per row against that row's own cache.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor, D};

use crate::kernels::glu::{glu_rows, OAI_ALPHA, OAI_LIMIT};

use super::arch::{Activation, ArchSpec, Gating, RopeStyle};
use super::attention::{attend, soft_cap};
use super::config::{Hyperparams, Yarn};
use super::cuda;
use super::kv_cache::KvCache;
use super::qlinear::QLinear;
use super::rowwise::{rms_norm, rope};
use crate::gguf::GgufFile;
use crate::kernels::attention::AttentionShape;
use crate::{Error, Result};

mod step;
use step::{fused_attention, heads_first, projected, StepTensors};

#[derive(Debug)]
enum Qkv {
    Separate { q: QLinear, k: QLinear, v: QLinear },
    Fused(QLinear),
}

#[derive(Debug)]
enum Ffn {
    GateUp {
        gate: QLinear,
        up: QLinear,
        down: QLinear,
    },
    /// Phi-3: `ffn_up` holds gate and up concatenated along the output axis.
    FusedGateUp {
        gate_up: QLinear,
        down: QLinear,
    },
    /// Mixture of experts: a router picks `used` of `experts` per token.
    Moe(Moe),
}

/// A mixture-of-experts FFN: `router` `(n_expert, n_embd)` scores the experts of each
/// token, `gating` turns the scores into probabilities; the `used` best (by
/// probability plus `selection_bias`, when the file has one) run, and their outputs
/// are summed weighted by those probabilities (renormalised to 1 when `norm_topk`,
/// then multiplied by `scale`), plus the `shared` expert's output unweighted. Each
/// expert is a window of the stacked `ffn_{gate,up,down}_exps` tensors (no copy), so a
/// decode step reads only the chosen experts' weights.
#[derive(Debug)]
struct Moe {
    router: QLinear,
    gating: Gating,
    /// One gated FFN per expert (gate and up stacked when they can be).
    experts: Vec<Ffn>,
    used: usize,
    norm_topk: bool,
    scale: Option<f32>,
    /// Added to the probabilities to choose experts, not to weight them (`exp_probs_b`).
    selection_bias: Option<Vec<f32>>,
    /// The expert every token runs (`ffn_*_shexp`).
    shared: Option<Box<Ffn>>,
}

/// A projection on toolgate's kernels with its bias as plain floats.
type KernelPart<'a> = (&'a crate::kernels::QWeight, Option<Vec<f32>>);

impl Ffn {
    /// Push every projection of this FFN (a mixture's router, experts and shared
    /// expert) onto `out`.
    fn linears<'a>(&'a self, out: &mut Vec<&'a QLinear>) {
        match self {
            Ffn::GateUp { gate, up, down } => out.extend([gate, up, down]),
            Ffn::FusedGateUp { gate_up, down } => out.extend([gate_up, down]),
            Ffn::Moe(moe) => {
                out.push(&moe.router);
                for ffn in moe.experts.iter().chain(moe.shared.as_deref()) {
                    ffn.linears(out);
                }
            }
        }
    }

    /// A gated FFN, gate and up stacked into one projection when they can be.
    fn gated(gate: QLinear, up: QLinear, down: QLinear) -> Result<Ffn> {
        Ok(match QLinear::stack(&[&gate, &up])? {
            Some(gate_up) => Ffn::FusedGateUp { gate_up, down },
            None => Ffn::GateUp { gate, up, down },
        })
    }

    /// `(gate_up, down)` when a gated FFN runs on toolgate's kernels with gate and up
    /// stacked: what a MoE expert runs on plain rows.
    fn kernel_weights(&self) -> Result<Option<(KernelPart<'_>, KernelPart<'_>)>> {
        let Ffn::FusedGateUp { gate_up, down } = self else { return Ok(None) };
        let (Some((gu, gu_bias)), Some((d, d_bias))) = (gate_up.kernel_parts(), down.kernel_parts()) else {
            return Ok(None);
        };
        let plain = |b: Option<&Tensor>| b.map(|b| b.to_dtype(DType::F32)?.to_vec1::<f32>()).transpose();
        Ok(Some(((gu, plain(gu_bias)?), (d, plain(d_bias)?))))
    }
}

/// The gated activation on tensors `g`, `u` of one shape, by candle's ops (off the
/// CPU; on it, [`glu_rows`]).
fn glu_tensors(activation: Activation, g: &Tensor, u: &Tensor) -> Result<Tensor> {
    Ok(match activation {
        Activation::Silu => (candle_nn::ops::silu(g)? * u)?,
        Activation::GeluTanh => (g.gelu()? * u)?,
        Activation::SwigluOai => {
            let g = g.minimum(OAI_LIMIT as f64)?;
            let s = candle_nn::ops::sigmoid(&(&g * OAI_ALPHA as f64)?)?;
            ((g * s)? * (u.clamp(-OAI_LIMIT, OAI_LIMIT)? + 1.0)?)?
        }
    })
}

#[derive(Debug)]
struct Layer {
    /// `None` where the architecture has no pre-norms (OLMo 2).
    attn_norm: Option<Tensor>,
    qkv: Qkv,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    /// The Q/K norms span the whole projection (OLMo 2), not each head.
    qk_norm_full: bool,
    attn_out: QLinear,
    post_attn_norm: Option<Tensor>,
    ffn_norm: Option<Tensor>,
    ffn: Ffn,
    post_ffn_norm: Option<Tensor>,
    /// Attend only to the last `window` positions.
    window: Option<usize>,
    /// One attention-sink logit per query head (gpt-oss's `attn_sinks`), if any.
    sinks: Option<Vec<f32>>,
    /// The same on the model's device, for the CUDA decode kernels (off the CPU only).
    sinks_dev: Option<Tensor>,
    /// Index into `Decoder::rope_tables`; `None` for a layer without RoPE.
    rope: Option<usize>,
    /// One cache per slot.
    caches: Vec<KvCache>,
}

/// RoPE frequencies of one base; the cos/sin of a forward's positions are computed
/// per forward (`t × rope_dim/2` values), not tabled for the whole context (a 32k
/// context × 128 frequencies × cos and sin is 33 MB per base).
#[derive(Debug)]
struct RopeTable {
    inv_freq: Vec<f32>,
    /// cos and sin are multiplied by this (YaRN's magnitude; 1 otherwise).
    mscale: f32,
    /// `inv_freq` on the model's device, for the CUDA decode kernels (off the CPU only).
    inv_freq_dev: Option<Tensor>,
}

impl RopeTable {
    /// `(cos, sin)` of `positions`, each `(positions.len(), rope_dim / 2)`.
    fn at(&self, positions: impl ExactSizeIterator<Item = usize>, device: &Device) -> Result<(Tensor, Tensor)> {
        let (half, t) = (self.inv_freq.len(), positions.len());
        let (cos, sin) = self.values(positions);
        Ok((Tensor::from_vec(cos, (t, half), device)?, Tensor::from_vec(sin, (t, half), device)?))
    }

    /// The values of [`RopeTable::at`], row-major, on the host.
    fn values(&self, positions: impl ExactSizeIterator<Item = usize>) -> (Vec<f32>, Vec<f32>) {
        let n = positions.len() * self.inv_freq.len();
        let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for p in positions {
            for f in &self.inv_freq {
                let a = p as f32 * f;
                cos.push(a.cos() * self.mscale);
                sin.push(a.sin() * self.mscale);
            }
        }
        (cos, sin)
    }
}

/// A loaded decoder: weights, RoPE tables and per-layer KV caches.
#[derive(Debug)]
pub struct Decoder {
    spec: ArchSpec,
    hp: Hyperparams,
    embed: QLinear,
    layers: Vec<Layer>,
    output_norm: Tensor,
    output: QLinear,
    rope_tables: Vec<RopeTable>,
    max_context: usize,
    /// The element type of every layer's KV cache ([`Decoder::with_kv_dtype`]).
    kv_dtype: DType,
    device: Device,
    /// Cached positions, per slot.
    pos: Vec<usize>,
    /// The slot `forward`, `forward_tail`, `position` and `truncate` act on.
    slot: usize,
    /// The fixed inputs and output of a CUDA decode step (allocated at its first use).
    step: Option<StepTensors>,
    /// Captured CUDA decode steps.
    graphs: cuda::Graphs,
}

/// Which rows of a forward pass belong to which sequence.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// All rows are one sequence: `slot`, starting at position `pos`.
    One { slot: usize, pos: usize },
    /// Row `i` is one token of sequence `rows[i].0` at position `rows[i].1`.
    Each(&'a [(usize, usize)]),
}

struct Loader<'a> {
    gguf: &'a GgufFile,
    device: &'a Device,
}

impl Loader<'_> {
    fn qtensor(&self, name: &str) -> Result<Arc<QTensor>> {
        Ok(Arc::new(self.gguf.tensor(name, self.device)?))
    }

    fn f32(&self, name: &str) -> Result<Tensor> {
        let t = self.gguf.tensor(name, self.device)?;
        Ok(t.dequantize(self.device)?.to_dtype(DType::F32)?)
    }

    fn opt_f32(&self, name: &str) -> Result<Option<Tensor>> {
        if self.gguf.has_tensor(name) {
            self.f32(name).map(Some)
        } else {
            Ok(None)
        }
    }

    fn linear(&self, name: &str) -> Result<QLinear> {
        let b = self.opt_f32(&format!("{name}.bias"))?;
        self.weight(&format!("{name}.weight"), b)
    }

    /// A projection: the file's mapped bytes run by toolgate's kernels when they run
    /// it (no copy at all), else through candle's `QTensor`.
    fn weight(&self, name: &str, bias: Option<Tensor>) -> Result<QLinear> {
        let info = self.gguf.tensor_info(name).ok_or_else(|| self.bad(name, "missing"))?;
        if let [rows, cols] = info.dims[..] {
            return self.projection(name, info.ty, self.gguf.tensor_data(name)?, rows, cols, bias);
        }
        QLinear::new(self.qtensor(name)?, bias).map_err(|e| self.bad(name, e))
    }

    /// The experts' biases `{name}.bias` `(n, rows)` of a stacked expert tensor, when
    /// the file has them (gpt-oss); read once for all `n` experts.
    fn expert_biases(&self, name: &str, n: usize) -> Result<Option<Tensor>> {
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
    fn expert(&self, name: &str, e: usize, n: usize, biases: Option<&Tensor>) -> Result<QLinear> {
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
    fn projection(
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

    fn moe(&self, i: usize, spec: &ArchSpec, hp: &Hyperparams) -> Result<Ffn> {
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
        }))
    }

    /// A gated FFN from three projections `{gate,up,down}.weight` (and biases).
    fn gated(&self, gate: &str, up: &str, down: &str) -> Result<Ffn> {
        let (g, u, d) = (self.linear(gate)?, self.linear(up)?, self.linear(down)?);
        if g.out_features() != u.out_features() {
            return Err(self.bad(&format!("{up}.weight"), "gate and up projections differ in width"));
        }
        Ffn::gated(g, u, d)
    }

    /// An optional 1-D f32 tensor that must hold `width` values, as plain floats.
    fn opt_vec(&self, name: &str, width: usize) -> Result<Option<Vec<f32>>> {
        let Some(t) = self.opt_f32(name)? else { return Ok(None) };
        self.expect_norm(name, &t, width)?;
        Ok(Some(t.to_vec1::<f32>()?))
    }

    fn bad(&self, name: &str, e: impl std::fmt::Display) -> Error {
        Error::Tensor { path: self.gguf.path().to_path_buf(), name: name.to_string(), reason: e.to_string() }
    }

    fn expect_width(&self, name: &str, lin: &QLinear, input: usize, output: usize) -> Result<()> {
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

    fn expect_norm(&self, name: &str, t: &Tensor, width: usize) -> Result<()> {
        if t.dims() != [width] {
            return Err(self.bad(name, format!("shape {:?}, expected [{width}]", t.dims())));
        }
        Ok(())
    }
}

impl Decoder {
    /// Load all weights of `gguf` onto `device`.
    ///
    /// `max_context` bounds the positions this instance will process (the KV caches'
    /// extent); it is clamped to the model's training context.
    ///
    /// # Errors
    /// [`Error::Metadata`] / [`Error::Tensor`] when a key or tensor is missing or has
    /// a shape inconsistent with the hyperparameters.
    pub fn load(gguf: &GgufFile, spec: ArchSpec, device: &Device, max_context: usize) -> Result<Self> {
        let mut hp = Hyperparams::from_gguf(gguf, spec.name)?;
        if !spec.softcapping {
            // The keys are honoured only where the architecture soft-caps (as llama.cpp).
            hp.scales.attention_softcap = None;
            hp.scales.final_softcap = None;
        }
        let ld = Loader { gguf, device };
        let embed = ld.weight("token_embd.weight", None)?;
        if embed.in_features() != hp.n_embd {
            return Err(ld.bad("token_embd.weight", format!("width {} != n_embd {}", embed.in_features(), hp.n_embd)));
        }
        // Tied head (no `output.weight`): the same weight as the embedding, shared, not
        // copied (Gemma 3 270M: 170 MB of its 262k x 640 Q8_0 table).
        let output = if gguf.has_tensor("output.weight") { ld.linear("output")? } else { embed.clone() };
        let output_norm = ld.f32("output_norm.weight")?;
        ld.expect_norm("output_norm.weight", &output_norm, hp.n_embd)?;

        let q_width = hp.n_head * hp.head_dim;
        let kv_width = hp.n_head_kv * hp.head_dim;
        let v_width = hp.n_head_kv * hp.v_head_dim;
        let freq_factors = ld.opt_f32("rope_freqs.weight")?;
        let mut rope_tables = Vec::new();
        let max_context = max_context.min(hp.context_length).max(1);
        let yarn = hp.rope_yarn.as_ref();
        rope_tables.push(rope_table(&hp, hp.rope_base, hp.rope_linear_scale, yarn, freq_factors.as_ref())?);
        if let Some(sw) = spec.sliding_window {
            let base = sw.local_rope_base.or(hp.rope_base_swa).unwrap_or(hp.rope_base);
            rope_tables.push(match sw.local_rope_scaled {
                true => rope_table(&hp, base, hp.rope_linear_scale, yarn, None)?,
                false => rope_table(&hp, base, 1.0, None, None)?,
            });
        }

        if !device.is_cpu() {
            for table in &mut rope_tables {
                table.inv_freq_dev = Some(Tensor::new(table.inv_freq.as_slice(), device)?);
            }
        }
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}");
            let qkv = if gguf.has_tensor(&p("attn_qkv.weight")) {
                let l = ld.linear(&p("attn_qkv"))?;
                ld.expect_width(&p("attn_qkv.weight"), &l, hp.n_embd, q_width + kv_width + v_width)?;
                Qkv::Fused(l)
            } else {
                let (q, k, v) = (ld.linear(&p("attn_q"))?, ld.linear(&p("attn_k"))?, ld.linear(&p("attn_v"))?);
                ld.expect_width(&p("attn_q.weight"), &q, hp.n_embd, q_width)?;
                ld.expect_width(&p("attn_k.weight"), &k, hp.n_embd, kv_width)?;
                ld.expect_width(&p("attn_v.weight"), &v, hp.n_embd, v_width)?;
                match QLinear::stack(&[&q, &k, &v])? {
                    Some(qkv) => Qkv::Fused(qkv),
                    None => Qkv::Separate { q, k, v },
                }
            };
            let attn_out = ld.linear(&p("attn_output"))?;
            ld.expect_width(&p("attn_output.weight"), &attn_out, hp.n_head * hp.v_head_dim, hp.n_embd)?;
            let ffn = if gguf.has_tensor(&p("ffn_gate_inp.weight")) {
                ld.moe(i, &spec, &hp)?
            } else if gguf.has_tensor(&p("ffn_gate.weight")) {
                ld.gated(&p("ffn_gate"), &p("ffn_up"), &p("ffn_down"))?
            } else {
                let gate_up = ld.linear(&p("ffn_up"))?;
                if gate_up.out_features() % 2 != 0 {
                    return Err(ld.bad(&p("ffn_up.weight"), "fused gate+up has an odd width"));
                }
                Ffn::FusedGateUp { gate_up, down: ld.linear(&p("ffn_down"))? }
            };
            let (attn_norm, ffn_norm) = if spec.pre_norms {
                let attn_norm = ld.f32(&p("attn_norm.weight"))?;
                ld.expect_norm(&p("attn_norm.weight"), &attn_norm, hp.n_embd)?;
                let ffn_norm_name = p(&format!("{}.weight", spec.ffn_norm));
                let ffn_norm = ld.f32(&ffn_norm_name)?;
                ld.expect_norm(&ffn_norm_name, &ffn_norm, hp.n_embd)?;
                (Some(attn_norm), Some(ffn_norm))
            } else {
                (None, None)
            };
            let q_norm = ld.opt_f32(&p("attn_q_norm.weight"))?;
            let k_norm = ld.opt_f32(&p("attn_k_norm.weight"))?;
            // Per head (`head_dim` wide) or over the whole projection (OLMo 2).
            let qk_norm_full = match (&q_norm, &k_norm) {
                (Some(q), Some(k))
                    if q.elem_count() == q_width && k.elem_count() == kv_width && q_width != hp.head_dim =>
                {
                    true
                }
                (Some(q), Some(k)) if q.elem_count() == hp.head_dim && k.elem_count() == hp.head_dim => false,
                (None, None) => false,
                _ => return Err(ld.bad(&p("attn_q_norm.weight"), "Q/K norms fit neither a head nor the projection")),
            };
            let (post_attn_norm, post_ffn_norm) = if spec.sandwich_norms {
                (Some(ld.f32(&p("post_attention_norm.weight"))?), Some(ld.f32(&p("post_ffw_norm.weight"))?))
            } else {
                (None, None)
            };
            let sinks = ld.opt_vec(&p("attn_sinks.weight"), hp.n_head)?;
            let sinks_dev = match &sinks {
                Some(z) if !device.is_cpu() => Some(Tensor::from_slice(z, hp.n_head, device)?),
                _ => None,
            };
            let is_local = match spec.sliding_window {
                Some(sw) => (i + 1) % sw.pattern != 0,
                None => false,
            };
            layers.push(Layer {
                attn_norm,
                qkv,
                q_norm,
                k_norm,
                qk_norm_full,
                attn_out,
                post_attn_norm,
                ffn_norm,
                ffn,
                post_ffn_norm,
                window: if is_local { hp.sliding_window } else { None },
                sinks,
                sinks_dev,
                rope: match spec.no_rope_every {
                    Some(n) if (i + 1) % n == 0 => None,
                    _ => Some(if is_local { 1 } else { 0 }),
                },
                caches: vec![KvCache::new(DType::F32)],
            });
        }
        let decoder = Self {
            spec,
            hp,
            embed,
            layers,
            output_norm,
            output,
            rope_tables,
            max_context,
            kv_dtype: DType::F32,
            device: device.clone(),
            pos: vec![0],
            slot: 0,
            step: None,
            graphs: cuda::Graphs::default(),
        };
        decoder.prepare();
        Ok(decoder)
    }

    /// Get every weight the forward pass multiplies by ready for the CPU kernels
    /// ([`crate::kernels::prepare`]: their tiles), every expert of a mixture
    /// included, so no request pays for it; [`Decoder::load`] calls it. The embedding
    /// table is left as it is (a lookup reads rows), unless it is also the head.
    ///
    /// Cost: one pass over the weights' bytes, parallel; nothing for weights on
    /// candle's matmul (other devices, types without kernels).
    fn prepare(&self) {
        let mut linears = vec![&self.output];
        for layer in &self.layers {
            match &layer.qkv {
                Qkv::Separate { q, k, v } => linears.extend([q, k, v]),
                Qkv::Fused(qkv) => linears.push(qkv),
            }
            linears.push(&layer.attn_out);
            layer.ffn.linears(&mut linears);
        }
        let weights: Vec<_> = linears.iter().filter_map(|l| l.kernel_parts()).map(|(w, _)| w).collect();
        crate::kernels::prepare(&weights);
    }

    /// The hyperparameters.
    pub fn hyperparams(&self) -> &Hyperparams {
        &self.hp
    }

    /// The architecture spec.
    pub fn spec(&self) -> &ArchSpec {
        &self.spec
    }

    /// Store keys and values as `dtype` (F32 or F16; every slot's cache starts over
    /// empty): what [`super::LoadOptions::kv_cache`] selects.
    pub fn with_kv_dtype(mut self, dtype: DType) -> Self {
        self.kv_dtype = dtype;
        for l in &mut self.layers {
            l.caches.iter_mut().for_each(|c| *c = KvCache::new(dtype));
        }
        self
    }

    /// Positions this instance can hold.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// Number of positions in the current slot's KV cache.
    pub fn position(&self) -> usize {
        self.pos[self.slot]
    }

    /// Number of sequence slots (1 after loading).
    pub fn slots(&self) -> usize {
        self.pos.len()
    }

    /// Hold `n` (at least 1) independent sequences. New slots start empty; slots past
    /// `n` are dropped with their caches; the current slot becomes 0 if it was dropped.
    ///
    /// Cost: nothing until a slot's cache fills (caches grow on demand).
    pub fn set_slots(&mut self, n: usize) {
        let n = n.max(1);
        self.pos.resize(n, 0);
        let kv = self.kv_dtype;
        for l in &mut self.layers {
            l.caches.resize_with(n, || KvCache::new(kv));
        }
        if self.slot >= n {
            self.slot = 0;
        }
    }

    /// Make `slot` the one [`Decoder::forward`], [`Decoder::forward_tail`],
    /// [`Decoder::position`] and [`Decoder::truncate`] act on.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `slot >= slots()`.
    pub fn select_slot(&mut self, slot: usize) -> Result<()> {
        if slot >= self.slots() {
            return Err(Error::InvalidParameter { name: "slot", reason: format!("{slot} of {} slots", self.slots()) });
        }
        self.slot = slot;
        Ok(())
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Output vocabulary width.
    pub fn vocab_size(&self) -> usize {
        self.output.out_features()
    }

    /// Drop the current slot's cached positions `len..`.
    pub fn truncate(&mut self, len: usize) {
        let slot = self.slot;
        self.pos[slot] = self.pos[slot].min(len);
        for l in &mut self.layers {
            l.caches[slot].truncate(self.pos[slot]);
        }
    }

    /// Process `tokens` at positions `position()..position()+t`, append them to the KV
    /// cache and return the logits of the last one, shape `(vocab)`.
    ///
    /// # Errors
    /// [`Error::ContextOverflow`] past `max_context`; candle errors otherwise.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        Ok(self.forward_tail(tokens, 1)?.flatten_all()?)
    }

    /// As [`Decoder::forward`], returning the logits of the last `n` positions, shape
    /// `(n, vocab)`: row `i` predicts the token after `tokens[t - n + i]`. One batched
    /// pass scores a given continuation (teacher forcing, prompt log-probabilities).
    ///
    /// Cost: one prefill of `t` tokens plus `n` output-head rows.
    ///
    /// # Errors
    /// As [`Decoder::forward`]; [`Error::InvalidParameter`] if `n` is 0 or more than `t`.
    pub fn forward_tail(&mut self, tokens: &[u32], n: usize) -> Result<Tensor> {
        let t = tokens.len();
        if t == 0 {
            return Err(Error::InvalidParameter { name: "tokens", reason: "empty input".into() });
        }
        if n == 0 || n > t {
            return Err(Error::InvalidParameter { name: "n", reason: format!("{n} logit rows of {t} positions") });
        }
        let (slot, pos) = (self.slot, self.pos[self.slot]);
        if pos + t > self.max_context {
            return Err(Error::ContextOverflow { prompt_tokens: pos + t, context_length: self.max_context });
        }
        if t == 1 && cuda::fused(&self.device) {
            return self.decode_step(tokens[0]);
        }
        let x = self.embed_tokens(tokens)?; // (1, t, n_embd)
        let ropes = self.rope_tables.iter().map(|r| r.at(pos..pos + t, &self.device)).collect::<Result<Vec<_>>>()?;
        let x = self.layers_forward(x, Rows::One { slot, pos }, &ropes, None)?;
        self.pos[slot] += t;
        let tail = x.narrow(1, t - n, n)?; // (1, n, n_embd), contiguous: one sequence
        self.head(&tail)
    }

    /// Decode one token for each of several sequences in one pass: `batch[i] = (slot,
    /// token)` feeds `token` to `slot` at that slot's next position. Returns the
    /// next-token logits, shape `(b, vocab)`, row `i` for `batch[i]`. The current slot
    /// is unchanged.
    ///
    /// Each row's logits equal what [`Decoder::forward`] on that slot alone gives, up to
    /// floating-point rounding (the projections run as one `b`-row matmul).
    ///
    /// Cost: one pass over the weights for all `b` tokens (decode is bound by reading
    /// them, so `b` sequences cost little more than one), plus each row's attention.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an empty batch, a slot out of range or twice,
    /// or a token outside the vocabulary; [`Error::ContextOverflow`] if a slot is full.
    pub fn forward_batch(&mut self, batch: &[(usize, u32)]) -> Result<Tensor> {
        if batch.is_empty() {
            return Err(Error::InvalidParameter { name: "batch", reason: "empty batch".into() });
        }
        let mut rows = Vec::with_capacity(batch.len());
        for (i, &(slot, _)) in batch.iter().enumerate() {
            if slot >= self.slots() || batch[..i].iter().any(|b| b.0 == slot) {
                return Err(Error::InvalidParameter {
                    name: "batch",
                    reason: format!("slot {slot} is out of range ({} slots) or given twice", self.slots()),
                });
            }
            let pos = self.pos[slot];
            if pos + 1 > self.max_context {
                return Err(Error::ContextOverflow { prompt_tokens: pos + 1, context_length: self.max_context });
            }
            rows.push((slot, pos));
        }
        let tokens: Vec<u32> = batch.iter().map(|b| b.1).collect();
        let x = self.embed_tokens(&tokens)?; // (1, b, n_embd)
        let ropes = self
            .rope_tables
            .iter()
            .map(|r| r.at(rows.iter().map(|r| r.1), &self.device))
            .collect::<Result<Vec<_>>>()?;
        // The CUDA kernels read each row's position from the device.
        let positions = match cuda::fused(&self.device) {
            true => Some(Tensor::new(rows.iter().map(|r| r.1 as u32).collect::<Vec<_>>(), &self.device)?),
            false => None,
        };
        let x = self.layers_forward(x, Rows::Each(&rows), &ropes, positions.as_ref())?;
        for &(slot, _) in &rows {
            self.pos[slot] += 1;
        }
        self.head(&x)
    }

    /// Token ids `(t)` → scaled embeddings `(1, t, n_embd)`.
    fn embed_tokens(&self, tokens: &[u32]) -> Result<Tensor> {
        let vocab = self.embed_rows();
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::InvalidParameter { name: "tokens", reason: format!("token id {bad} >= vocab {vocab}") });
        }
        self.embed_ids(&Tensor::new(tokens, &self.device)?)
    }

    /// Token ids already on the device, `(t)` u32 and in range → `(1, t, n_embd)`.
    fn embed_ids(&self, ids: &Tensor) -> Result<Tensor> {
        let x = self.embed.embedding(ids)?.unsqueeze(0)?;
        let x = if self.spec.embed_scale { (x * (self.hp.n_embd as f64).sqrt())? } else { x };
        Ok(match self.hp.scales.embedding {
            Some(s) => (x * s as f64)?,
            None => x,
        })
    }

    /// Every layer over `x` `(1, t, n_embd)`. `positions` (u32, one per row), when given,
    /// sends attention through the CUDA decode kernels, which store keys and values and
    /// read positions on the device (`t` is then one token per row).
    fn layers_forward(
        &mut self,
        mut x: Tensor,
        rows: Rows<'_>,
        ropes: &[(Tensor, Tensor)],
        positions: Option<&Tensor>,
    ) -> Result<Tensor> {
        // The query multipliers of the positions (Ministral 3), `(1, 1, t, 1)`, once
        // for every layer.
        let q_scale = match self.hp.attn_temperature {
            Some(temp) => {
                let scales: Vec<f32> = match rows {
                    Rows::One { pos, .. } => (pos..pos + x.dim(1)?).map(|p| temp.at(p)).collect(),
                    Rows::Each(rows) => rows.iter().map(|&(_, p)| temp.at(p)).collect(),
                };
                let t = scales.len();
                Some(Tensor::from_vec(scales, (1, 1, t, 1), &self.device)?.to_dtype(x.dtype())?)
            }
            None => None,
        };
        for li in 0..self.layers.len() {
            x = self.layer_forward(li, &x, &rows, ropes, q_scale.as_ref(), positions)?;
        }
        Ok(x)
    }

    /// Final norm and output head: `(1, n, n_embd)` → logits `(n, vocab)`.
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        let x = rms_norm(x, &self.output_norm, self.hp.rms_eps)?;
        let logits = self.output.forward(&x)?.squeeze(0)?;
        let logits = match self.hp.scales.logit_divisor {
            Some(s) => (logits / s as f64)?,
            None => logits,
        };
        Ok(match self.hp.scales.final_softcap {
            Some(c) => soft_cap(&logits, c)?,
            None => logits,
        })
    }

    fn embed_rows(&self) -> usize {
        self.embed.out_features()
    }

    fn layer_forward(
        &mut self,
        li: usize,
        x: &Tensor,
        rows: &Rows<'_>,
        ropes: &[(Tensor, Tensor)],
        q_scale: Option<&Tensor>,
        positions: Option<&Tensor>,
    ) -> Result<Tensor> {
        let hp = &self.hp;
        let (_, t, _) = x.dims3()?;
        let layer = &mut self.layers[li];
        let h = match &layer.attn_norm {
            Some(w) => rms_norm(x, w, hp.rms_eps)?,
            None => x.clone(),
        };
        // The CUDA decode kernels add the q/k/v biases themselves (unless a norm over the
        // whole projection comes first).
        let fused = positions.is_some() && q_scale.is_none();
        let unbiased = fused && !layer.qk_norm_full;
        let project = |l: &QLinear| if unbiased { l.forward_unbiased(&h) } else { l.forward(&h) };
        let qw = hp.n_head * hp.head_dim;
        let kw = hp.n_head_kv * hp.head_dim;
        let vw = hp.n_head_kv * hp.v_head_dim;
        let ((q, k, v), biases) = match &layer.qkv {
            Qkv::Separate { q, k, v } => {
                ((project(q)?, project(k)?, project(v)?), [q.bias().cloned(), k.bias().cloned(), v.bias().cloned()])
            }
            Qkv::Fused(w) => {
                let qkv = project(w)?;
                let part = |b: &Tensor, at, n| b.narrow(0, at, n);
                let biases = match w.bias() {
                    Some(b) => [Some(part(b, 0, qw)?), Some(part(b, qw, kw)?), Some(part(b, qw + kw, vw)?)],
                    None => [None, None, None],
                };
                ((qkv.narrow(2, 0, qw)?, qkv.narrow(2, qw, kw)?, qkv.narrow(2, qw + kw, vw)?), biases)
            }
        };
        let biases = if unbiased { biases } else { [None, None, None] };
        // Decode on the CUDA kernels: from the projections to the attention output in
        // three launches per row (a per-position query scale takes the general path).
        if let (Some(p), true) = (positions, fused) {
            // Norms over the whole projection run here; per-head ones in the kernel (clones
            // share the weights: the cache store below borrows the layer).
            let (q, k, qn, kn) = match (layer.qk_norm_full, &layer.q_norm, &layer.k_norm) {
                (true, Some(qw), Some(kw)) => (
                    rms_norm(&q.contiguous()?, qw, hp.rms_eps)?,
                    rms_norm(&k.contiguous()?, kw, hp.rms_eps)?,
                    None,
                    None,
                ),
                _ => (q, k, layer.q_norm.clone(), layer.k_norm.clone()),
            };
            let norms = (qn.as_ref(), kn.as_ref(), hp.rms_eps);
            let rope = match layer.rope {
                Some(r) => Some(cuda::Rope {
                    inv_freq: self.rope_tables[r].inv_freq_dev.as_ref().ok_or_else(|| Error::InvalidParameter {
                        name: "rope",
                        reason: "no device copy of the frequencies".into(),
                    })?,
                    mscale: self.rope_tables[r].mscale,
                    dims: hp.rope_dim,
                    interleaved: matches!(self.spec.rope, RopeStyle::Interleaved),
                }),
                None => None,
            };
            // A window of a fused projection is copied out (contiguous ones are not).
            let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
            let (d, dv) = (hp.head_dim, hp.v_head_dim);
            let qkv = [projected(&q, d)?, projected(&k, d)?, projected(&v, dv)?];
            let biases = [biases[0].as_ref(), biases[1].as_ref(), biases[2].as_ref()];
            let o = fused_attention(layer, hp, *rows, p, qkv, biases, norms, rope)?;
            return self.layer_tail(li, x, o);
        }
        let norm = |x: Tensor, w: &Option<Tensor>| -> Result<Tensor> {
            Ok(match w {
                Some(w) => rms_norm(&x.contiguous()?, w, hp.rms_eps)?,
                None => x,
            })
        };
        let (q, k) = if layer.qk_norm_full { (norm(q, &layer.q_norm)?, norm(k, &layer.k_norm)?) } else { (q, k) };
        // (1, t, heads*d) -> (1, heads, t, d)
        let q = q.reshape((1, t, hp.n_head, hp.head_dim))?.transpose(1, 2)?.contiguous()?;
        let k = k.reshape((1, t, hp.n_head_kv, hp.head_dim))?.transpose(1, 2)?.contiguous()?;
        let v = v.reshape((1, t, hp.n_head_kv, hp.v_head_dim))?.transpose(1, 2)?.contiguous()?;
        let (q, k) = if layer.qk_norm_full { (q, k) } else { (norm(q, &layer.q_norm)?, norm(k, &layer.k_norm)?) };
        let (q, k) = match layer.rope {
            Some(r) => (
                apply_rope(&q, &ropes[r], hp.rope_dim, self.spec.rope)?,
                apply_rope(&k, &ropes[r], hp.rope_dim, self.spec.rope)?,
            ),
            None => (q, k),
        };
        let q = match q_scale {
            Some(s) => q.broadcast_mul(s)?,
            None => q,
        };

        let o = match (*rows, positions) {
            (rows, Some(p)) => {
                let qkv = [heads_first(&q)?, heads_first(&k)?, heads_first(&v)?];
                fused_attention(layer, hp, rows, p, qkv, [None; 3], (None, None, 0.0), None)?
            }
            (Rows::One { slot, pos }, None) => layer_attention(layer, hp, slot, pos, &q, &k, &v)?, // (1, t, h * dv)
            (Rows::Each(rows), None) => {
                let mut out = Vec::with_capacity(rows.len());
                for (i, &(slot, pos)) in rows.iter().enumerate() {
                    let (q, k, v) = (q.narrow(2, i, 1)?, k.narrow(2, i, 1)?, v.narrow(2, i, 1)?);
                    out.push(layer_attention(layer, hp, slot, pos, &q, &k, &v)?);
                }
                Tensor::cat(&out, 1)? // (1, b, h * dv)
            }
        };
        self.layer_tail(li, x, o)
    }

    /// The rest of layer `li` after attention: output projection, residual, FFN.
    fn layer_tail(&self, li: usize, x: &Tensor, o: Tensor) -> Result<Tensor> {
        let (hp, layer) = (&self.hp, &self.layers[li]);
        let mut o = layer.attn_out.forward(&o)?;
        if let Some(w) = &layer.post_attn_norm {
            o = rms_norm(&o, w, hp.rms_eps)?;
        }
        if let Some(s) = hp.scales.residual {
            o = (o * s as f64)?;
        }
        let (x, h) = match &layer.ffn_norm {
            Some(w) if cuda::fused(x.device()) => {
                cuda::add_rms_norm(&x.contiguous()?, &o.contiguous()?, w, hp.rms_eps)?
            }
            Some(w) => {
                let x = (x + o)?;
                let h = rms_norm(&x, w, hp.rms_eps)?;
                (x, h)
            }
            None => {
                let x = (x + o)?;
                (x.clone(), x)
            }
        };
        let mut f = ffn_forward(&layer.ffn, self.spec.activation, &h)?;
        if let Some(w) = &layer.post_ffn_norm {
            f = rms_norm(&f, w, hp.rms_eps)?;
        }
        if let Some(s) = hp.scales.residual {
            f = (f * s as f64)?;
        }
        Ok((x + f)?)
    }
}

/// A feed-forward block on `h` `(1, t, n_embd)` → `(1, t, n_embd)`.
fn ffn_forward(ffn: &Ffn, activation: Activation, h: &Tensor) -> Result<Tensor> {
    Ok(match ffn {
        Ffn::GateUp { gate, up, down } => {
            let (g, u) = (gate.forward(h)?, up.forward(h)?);
            let (_, rows, n) = g.dims3()?;
            match cuda::fused(h.device()) {
                true => {
                    down.forward(&cuda::glu(activation, (&g.contiguous()?, 0), (&u.contiguous()?, 0), n, (rows, n))?)?
                }
                false => down.forward(&glu_tensors(activation, &g, &u)?)?,
            }
        }
        Ffn::FusedGateUp { gate_up, down } => {
            let gu = gate_up.forward(h)?;
            let half = gu.dim(D::Minus1)? / 2;
            if gu.device().is_cpu() {
                let (b, t, _) = gu.dims3()?;
                let gu: Vec<f32> = gu.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
                let mut act = vec![0f32; b * t * half];
                glu_rows(activation, &gu, half, &mut act)?;
                down.forward(&Tensor::from_vec(act, (b, t, half), h.device())?.to_dtype(h.dtype())?)?
            } else if cuda::fused(gu.device()) {
                let (_, rows, _) = gu.dims3()?;
                let gu = gu.contiguous()?;
                down.forward(&cuda::glu(activation, (&gu, 0), (&gu, half), 2 * half, (rows, half))?)?
            } else {
                down.forward(&glu_tensors(activation, &gu.narrow(2, 0, half)?, &gu.narrow(2, half, half)?)?)?
            }
        }
        Ffn::Moe(moe) => moe_forward(moe, activation, h)?,
    })
}

/// Route each of the `t` rows of `h` `(1, t, n_embd)` to its experts and sum their
/// weighted outputs. Rows are grouped by expert, so each chosen expert runs one
/// matmul over all the rows that chose it (prefill), and a decode step touches only
/// `used` experts.
fn moe_forward(moe: &Moe, activation: Activation, h: &Tensor) -> Result<Tensor> {
    let (_, t, width) = h.dims3()?;
    let logits: Vec<Vec<f32>> = moe.router.forward(h)?.squeeze(0)?.to_dtype(DType::F32)?.to_vec2()?;
    // rows_of[e] = the (row, weight) pairs routed to expert e.
    let mut rows_of: Vec<Vec<(usize, f32)>> = vec![Vec::new(); moe.experts.len()];
    for (r, l) in logits.iter().enumerate() {
        let probs: Vec<f32> = match moe.gating {
            Gating::Softmax => {
                let max = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let exp: Vec<f32> = l.iter().map(|x| (x - max).exp()).collect();
                let sum: f32 = exp.iter().sum();
                exp.iter().map(|e| e / sum).collect()
            }
            Gating::Sigmoid => l.iter().map(|x| 1.0 / (1.0 + (-x).exp())).collect(),
        };
        let key = |e: usize| probs[e] + moe.selection_bias.as_ref().map_or(0.0, |b| b[e]);
        let mut order: Vec<usize> = (0..probs.len()).collect();
        // Highest first; ties by index, as a stable sort gives.
        order.sort_by(|&a, &b| key(b).total_cmp(&key(a)));
        let chosen = &order[..moe.used.min(order.len())];
        // llama.cpp's floor on the sum (an f16's smallest normal).
        let total: f32 = chosen.iter().map(|&e| probs[e]).sum::<f32>().max(6.103_515_6e-5);
        for &e in chosen {
            let w = if moe.norm_topk { probs[e] / total } else { probs[e] };
            rows_of[e].push((r, w * moe.scale.unwrap_or(1.0)));
        }
    }
    // Each chosen expert's output rows, in its `routed` order. Experts on toolgate's
    // kernels run on plain f32 rows, all of them in two batched kernel calls (gate+up,
    // then down: one fork/join each per layer, not two per expert); the others
    // through candle ops.
    let mut ys: Vec<Option<Vec<f32>>> = vec![None; moe.experts.len()];
    let mut plain = Vec::new();
    for (e, (expert, routed)) in moe.experts.iter().zip(&rows_of).enumerate() {
        if routed.is_empty() {
            continue;
        }
        match expert.kernel_weights()? {
            Some(parts) => plain.push((e, parts)),
            None => {
                let idx: Vec<u32> = routed.iter().map(|&(r, _)| r as u32).collect();
                let idx = Tensor::new(idx.as_slice(), h.device())?;
                let x = h.index_select(&idx, 1)?; // (1, m, n_embd)
                ys[e] = Some(ffn_forward(expert, activation, &x)?.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?);
            }
        }
    }
    if !plain.is_empty() {
        let h_rows: Vec<f32> = h.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
        let xs: Vec<Vec<f32>> = plain
            .iter()
            .map(|(e, _)| rows_of[*e].iter().flat_map(|&(r, _)| &h_rows[r * width..(r + 1) * width]).copied().collect())
            .collect();
        let mut gus: Vec<Vec<f32>> =
            plain.iter().map(|(e, ((gate_up, _), _))| vec![0f32; rows_of[*e].len() * gate_up.out_features()]).collect();
        let mut products: Vec<_> = plain
            .iter()
            .zip(&xs)
            .zip(gus.iter_mut())
            .map(|(((_, ((gate_up, _), _)), x), gu)| (*gate_up, x.as_slice(), gu.as_mut_slice()))
            .collect();
        crate::kernels::matmul_batch(&mut products)?;
        drop(products);
        let acts: Vec<Vec<f32>> = plain
            .iter()
            .zip(&mut gus)
            .map(|((_, ((gate_up, gate_up_bias), _)), gu)| {
                add_bias(gu, gate_up_bias.as_deref());
                let ff = gate_up.out_features() / 2;
                let mut act = vec![0f32; gu.len() / 2];
                glu_rows(activation, gu, ff, &mut act)?;
                Ok(act)
            })
            .collect::<Result<_>>()?;
        let mut downs: Vec<Vec<f32>> = plain.iter().map(|(e, _)| vec![0f32; rows_of[*e].len() * width]).collect();
        let mut products: Vec<_> = plain
            .iter()
            .zip(&acts)
            .zip(downs.iter_mut())
            .map(|(((_, (_, (down, _))), a), y)| (*down, a.as_slice(), y.as_mut_slice()))
            .collect();
        crate::kernels::matmul_batch(&mut products)?;
        drop(products);
        for ((e, (_, (_, down_bias))), mut y) in plain.iter().zip(downs) {
            add_bias(&mut y, down_bias.as_deref());
            ys[*e] = Some(y);
        }
    }
    // Weighted sum, in expert order.
    let mut out = vec![0f32; t * width];
    for (y, routed) in ys.iter().zip(&rows_of) {
        let Some(y) = y else { continue };
        for (&(r, w), row) in routed.iter().zip(y.chunks_exact(width)) {
            for (o, v) in out[r * width..(r + 1) * width].iter_mut().zip(row) {
                *o += w * v;
            }
        }
    }
    let out = Tensor::from_vec(out, (1, t, width), h.device())?.to_dtype(h.dtype())?;
    Ok(match &moe.shared {
        Some(shared) => (out + ffn_forward(shared, activation, h)?)?,
        None => out,
    })
}

/// Add `bias` (one row's width) to every row of `rows`.
fn add_bias(rows: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in rows.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(y, b)| *y += b);
        }
    }
}

/// The attention of `queries` rows from `pos` over keys `first_key..first_key + keys`.
fn attention_shape<'a>(
    window: Option<usize>,
    hp: &Hyperparams,
    queries: usize,
    pos: usize,
    first_key: usize,
    keys: usize,
    sinks: Option<&'a [f32]>,
) -> AttentionShape<'a> {
    AttentionShape {
        n_head: hp.n_head,
        n_kv_head: hp.n_head_kv,
        head_dim: hp.head_dim,
        v_head_dim: hp.v_head_dim,
        queries,
        pos,
        first_key,
        keys,
        window,
        scale: hp.scales.attention.unwrap_or((1.0 / (hp.head_dim as f64).sqrt()) as f32),
        softcap: hp.scales.attention_softcap,
        sinks,
    }
}

/// One sequence's attention in one layer: append `k`, `v` `(1, n_kv_head, t, d)` at
/// `pos` to `slot`'s cache and attend `q` `(1, n_head, t, d)` to it → `(1, t, h · dv)`.
#[allow(clippy::too_many_arguments)]
fn layer_attention(
    layer: &mut Layer,
    hp: &Hyperparams,
    slot: usize,
    pos: usize,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<Tensor> {
    let t = q.dim(2)?;
    let (k_all, v_all) = layer.caches[slot].append(k, v)?;
    let total = pos + t;
    // Keys outside every query's window are dropped up front.
    let first_key = match layer.window {
        Some(w) if pos + 1 > w => pos + 1 - w,
        _ => 0,
    };
    let (k_all, v_all) = if first_key > 0 {
        (k_all.narrow(2, first_key, total - first_key)?, v_all.narrow(2, first_key, total - first_key)?)
    } else {
        (k_all, v_all)
    };
    let shape = attention_shape(layer.window, hp, t, pos, first_key, total - first_key, layer.sinks.as_deref());
    attend(q, &k_all, &v_all, shape)
}

/// The RoPE frequencies of base `base`: plain, divided by `linear_scale`, or YaRN's;
/// each divided by its `rope_freqs` factor when the file has them (Llama 3.1+).
fn rope_table(
    hp: &Hyperparams,
    base: f32,
    linear_scale: f32,
    yarn: Option<&Yarn>,
    freq_factors: Option<&Tensor>,
) -> Result<RopeTable> {
    let half = hp.rope_dim / 2;
    let factors: Option<Vec<f32>> = freq_factors.map(|f| f.to_vec1::<f32>()).transpose()?;
    let mut inv_freq: Vec<f32> = match yarn {
        Some(y) => y.frequencies(base, hp.rope_dim),
        None => (0..half).map(|i| 1.0 / base.powf(2.0 * i as f32 / hp.rope_dim as f32) / linear_scale).collect(),
    };
    if let Some(ff) = &factors {
        inv_freq.iter_mut().zip(ff).for_each(|(f, ff)| *f /= ff);
    }
    Ok(RopeTable { inv_freq, mscale: yarn.map_or(1.0, |y| y.mscale), inv_freq_dev: None })
}

fn apply_rope(x: &Tensor, (cos, sin): &(Tensor, Tensor), rope_dim: usize, style: RopeStyle) -> Result<Tensor> {
    let (_, _, _, d) = x.dims4()?;
    let rot = |x: &Tensor| rope(x, cos, sin, style);
    if rope_dim == d {
        return rot(x);
    }
    let head = x.narrow(3, 0, rope_dim)?.contiguous()?;
    let tail = x.narrow(3, rope_dim, d - rope_dim)?;
    // `cat` on the last axis can hand back a strided layout; attention reads rows.
    Ok(Tensor::cat(&[rot(&head)?, tail], 3)?.contiguous()?)
}
