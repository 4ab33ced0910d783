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
//!
//! Files: this one the layers and the forward passes; `load.rs` reading the weights;
//! `ffn.rs` the feed-forward block (gated or a mixture of experts); `step.rs` the
//! fused CUDA decode step.

use candle_core::{DType, Device, Tensor};

use super::arch::{ArchSpec, RopeStyle};
use super::attention::{attend, soft_cap};
use super::config::{Hyperparams, Yarn};
use super::cuda;
use super::kv_cache::KvCache;
use super::qlinear::QLinear;
use super::rowwise::{rms_norm, rope};
use crate::gguf::GgufFile;
use crate::kernels::attention::AttentionShape;
use crate::{Error, Result};

mod ffn;
mod load;
mod step;
use ffn::{ffn_forward, Ffn};
use load::Loader;
use step::{fused_attention, heads_first, projected, StepTensors};

#[derive(Debug)]
enum Qkv {
    Separate { q: QLinear, k: QLinear, v: QLinear },
    Fused(QLinear),
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
        let pos = self.pos[self.slot];
        if pos + t > self.max_context {
            return Err(Error::ContextOverflow { prompt_tokens: pos + t, context_length: self.max_context });
        }
        if t == 1 && cuda::fused(&self.device) {
            return self.decode_step(tokens[0]);
        }
        let x = self.prefill_hidden(tokens)?;
        let tail = x.narrow(1, t - n, n)?; // (1, n, n_embd), contiguous: one sequence
        self.head(&tail)
    }

    /// Feed `tokens` as [`Decoder::forward`] does; return the logits after the last
    /// one, shape `(vocab)`, and for each earlier position `i` the logits of only the
    /// ids `candidates[i]`, in that order, for the token after `tokens[i]` — the
    /// entries [`Decoder::forward_tail`]'s rows hold for them (up to rounding: the
    /// output rows are dequantized and multiplied in `f32`). Scores a draft whose
    /// positions each allow a few tokens without `vocab` logits per position.
    ///
    /// Cost: one prefill of `t` tokens, one output-head row, and one dequantized
    /// output row and dot product per candidate.
    ///
    /// # Errors
    /// As [`Decoder::forward`]; [`Error::InvalidParameter`] unless `candidates` has an
    /// entry per position but the last, or for an id outside the vocabulary.
    pub fn forward_scored(&mut self, tokens: &[u32], candidates: &[Vec<u32>]) -> Result<(Vec<Vec<f32>>, Tensor)> {
        let t = tokens.len();
        super::check_candidates(t, candidates, self.output.out_features())?;
        let pos = self.pos[self.slot];
        if pos + t > self.max_context {
            return Err(Error::ContextOverflow { prompt_tokens: pos + t, context_length: self.max_context });
        }
        let x = self.prefill_hidden(tokens)?; // (1, t, n_embd)
        let last = self.head(&x.narrow(1, t - 1, 1)?)?.flatten_all()?;
        let lead = rms_norm(&x.narrow(1, 0, t - 1)?, &self.output_norm, self.hp.rms_eps)?.squeeze(0)?; // (t - 1, n_embd)
        let mut scored = Vec::with_capacity(t - 1);
        for (i, ids) in candidates.iter().enumerate() {
            if ids.is_empty() {
                scored.push(Vec::new());
                continue;
            }
            let ids = Tensor::new(ids.as_slice(), &self.device)?;
            let h = lead.narrow(0, i, 1)?; // (1, n_embd)
            let rows = self.output.embedding(&ids)?.to_device(h.device())?.to_dtype(h.dtype())?; // (k, n_embd)
            let mut l = h.matmul(&rows.t()?)?.squeeze(0)?; // (k)
            if let Some(b) = self.output.bias() {
                let b = b.index_select(&ids.to_device(b.device())?, 0)?.to_dtype(l.dtype())?;
                l = (l + b)?;
            }
            if let Some(s) = self.hp.scales.logit_divisor {
                l = (l / s as f64)?;
            }
            if let Some(c) = self.hp.scales.final_softcap {
                l = soft_cap(&l, c)?;
            }
            scored.push(l.to_dtype(DType::F32)?.to_vec1::<f32>()?);
        }
        Ok((scored, last))
    }

    /// Every layer over `tokens` at the current slot's next positions (stored in its
    /// cache): the hidden states `(1, t, n_embd)` before the output norm.
    fn prefill_hidden(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let (t, slot, pos) = (tokens.len(), self.slot, self.pos[self.slot]);
        let x = self.embed_tokens(tokens)?; // (1, t, n_embd)
        let ropes = self.rope_tables.iter().map(|r| r.at(pos..pos + t, &self.device)).collect::<Result<Vec<_>>>()?;
        let x = self.layers_forward(x, Rows::One { slot, pos }, &ropes, None)?;
        self.pos[slot] += t;
        Ok(x)
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
        // On CUDA the residual sum that ends a layer waits for the next layer's norm,
        // to run as one kernel with it (`cuda::add_rms_norm`).
        let carry = cuda::fused(&self.device);
        let mut pending = None;
        for li in 0..self.layers.len() {
            let (x_in, f) = self.layer_forward(li, &x, pending.take(), &rows, ropes, q_scale.as_ref(), positions)?;
            match carry {
                true => (x, pending) = (x_in, Some(f)),
                false => x = (x_in + f)?,
            }
        }
        Ok(match pending {
            Some(f) => (x + f)?,
            None => x,
        })
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

    /// Layer `li` over the residual stream `x` (plus `pending`, the previous layer's
    /// FFN output when its sum was left to this layer): returns the stream after
    /// attention and the FFN's output, whose sum is the layer's output.
    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &mut self,
        li: usize,
        x: &Tensor,
        pending: Option<Tensor>,
        rows: &Rows<'_>,
        ropes: &[(Tensor, Tensor)],
        q_scale: Option<&Tensor>,
        positions: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let hp = &self.hp;
        let (_, t, _) = x.dims3()?;
        let layer = &mut self.layers[li];
        let (x, h) = match (pending, &layer.attn_norm) {
            (Some(f), Some(w)) => cuda::add_rms_norm(&x.contiguous()?, &f.contiguous()?, w, hp.rms_eps)?,
            (Some(f), None) => {
                let x = (x + f)?;
                (x.clone(), x)
            }
            (None, Some(w)) => (x.clone(), rms_norm(x, w, hp.rms_eps)?),
            (None, None) => (x.clone(), x.clone()),
        };
        let x = &x;
        // The CUDA decode kernels add the q/k/v biases themselves (unless a norm over the
        // whole projection comes first).
        let fused = positions.is_some() && q_scale.is_none();
        let unbiased = fused && !layer.qk_norm_full;
        let project = |l: &QLinear| if unbiased { l.forward_unbiased(&h) } else { l.forward(&h) };
        let qw = hp.n_head * hp.head_dim;
        let kw = hp.n_head_kv * hp.head_dim;
        let vw = hp.n_head_kv * hp.v_head_dim;
        let split = |qkv: Tensor| -> Result<(Tensor, Tensor, Tensor)> {
            Ok((qkv.narrow(2, 0, qw)?, qkv.narrow(2, qw, kw)?, qkv.narrow(2, qw + kw, vw)?))
        };
        let ((q, k, v), biases) = match &layer.qkv {
            Qkv::Separate { q, k, v } => {
                let biases = [q.bias().cloned(), k.bias().cloned(), v.bias().cloned()];
                // A decode row on CUDA: the three in one launch (`kernels/matvec.cu`).
                match QLinear::forward_group(&[q, k, v], &h, !unbiased)? {
                    Some(qkv) => (split(qkv)?, biases),
                    None => ((project(q)?, project(k)?, project(v)?), biases),
                }
            }
            Qkv::Fused(w) => {
                let qkv = project(w)?;
                let part = |b: &Tensor, at, n| b.narrow(0, at, n);
                let biases = match w.bias() {
                    Some(b) => [Some(part(b, 0, qw)?), Some(part(b, qw, kw)?), Some(part(b, qw + kw, vw)?)],
                    None => [None, None, None],
                };
                (split(qkv)?, biases)
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
    /// Returns the stream after attention and the FFN's output (their sum is the
    /// layer's output).
    fn layer_tail(&self, li: usize, x: &Tensor, o: Tensor) -> Result<(Tensor, Tensor)> {
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
        Ok((x, f))
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
