//! The CUDA decode step of a [`Decoder`]: one token of one sequence through toolgate's
//! decode kernels ([`cuda::attend`], [`cuda::glu`], [`cuda::add_rms_norm`]), its
//! inputs in fixed device tensors so that the step is captured once and replayed as a
//! CUDA graph ([`cuda::Graphs`]); and the decode attention those kernels run for any
//! number of rows (batched decode too). Only reached on a CUDA device
//! ([`cuda::fused`]).

use candle_core::{DType, Tensor};

use super::{attention_shape, Decoder, Ffn, Hyperparams, Layer, Rows};
use crate::model::cuda;
use crate::{Error, Result};

/// What a single-sequence CUDA decode step reads and writes, at fixed device
/// addresses so that a captured graph of the step replays ([`cuda::Graphs`]).
#[derive(Debug)]
pub(super) struct StepTensors {
    /// The token, `(1)` u32.
    ids: Tensor,
    /// Its position, `(1)` u32 (the kernels read it from here).
    pos: Tensor,
    /// RoPE's `(cos, sin)` of that position per table, each `(1, rope_dim / 2)`.
    ropes: Vec<(Tensor, Tensor)>,
    /// The step's logits, `(1, vocab)`.
    logits: Tensor,
}

impl Decoder {
    /// One token of the current slot through the CUDA decode step: inputs written into
    /// [`StepTensors`], the step replayed from a captured graph where it can be
    /// ([`cuda::Graphs`]), logits `(1, vocab)` copied out of the step's fixed output.
    pub(super) fn decode_step(&mut self, token: u32) -> Result<Tensor> {
        let (slot, pos) = (self.slot, self.pos[self.slot]);
        let vocab = self.embed_rows();
        if token as usize >= vocab {
            return Err(Error::InvalidParameter {
                name: "tokens",
                reason: format!("token id {token} >= vocab {vocab}"),
            });
        }
        let widths = (self.hp.n_head_kv, self.hp.head_dim, self.hp.v_head_dim);
        for layer in &mut self.layers {
            layer.caches[slot].reserve(pos + 1, widths, &self.device)?;
        }
        if self.step.is_none() {
            let dev = &self.device;
            let ropes = self.rope_tables.iter().map(|r| r.at(0..1, dev)).collect::<Result<Vec<_>>>()?;
            self.step = Some(StepTensors {
                ids: Tensor::zeros(1, DType::U32, dev)?,
                pos: Tensor::zeros(1, DType::U32, dev)?,
                ropes,
                logits: Tensor::zeros((1, self.output.out_features()), DType::F32, dev)?,
            });
        }
        let step = self.step.take().expect("made above");
        let ran = self.run_step(&step, slot, pos, token);
        self.step = Some(step);
        ran?;
        for layer in &mut self.layers {
            layer.caches[slot].set_len(pos + 1);
        }
        self.pos[slot] += 1;
        Ok(self.step.as_ref().expect("kept above").logits.copy()?)
    }

    /// [`Decoder::decode_step`]'s device work, replayed or captured by `self.graphs`
    /// when the architecture allows (no host round trip inside the step: no mixture of
    /// experts routed on the host, and no per-position query scale).
    fn run_step(&mut self, step: &StepTensors, slot: usize, pos: usize, token: u32) -> Result<()> {
        cuda::write_u32(&step.ids, &[token])?;
        cuda::write_u32(&step.pos, &[pos as u32])?;
        for (table, (cos, sin)) in self.rope_tables.iter().zip(&step.ropes) {
            let (c, s) = table.values(pos..pos + 1);
            cuda::write_f32(cos, &c)?;
            cuda::write_f32(sin, &s)?;
        }
        let capturable = self.hp.attn_temperature.is_none()
            && !self.layers.iter().any(|l| matches!(&l.ffn, Ffn::Moe(m) if m.device.is_none()));
        let body = |d: &mut Self| -> Result<()> {
            let x = d.embed_ids(&step.ids)?;
            let x = d.layers_forward(x, Rows::One { slot, pos }, &step.ropes, Some(&step.pos))?;
            let logits = d.head(&x.narrow(1, 0, 1)?)?; // (1, vocab)
            step.logits.slice_set(&logits, 0, 0)?;
            Ok(())
        };
        if !capturable {
            return body(self);
        }
        let mut key = vec![slot as u64];
        for layer in &self.layers {
            let (k, v) = layer.caches[slot].buffers().ok_or_else(|| Error::InvalidParameter {
                name: "kv cache",
                reason: "not allocated before a decode step".into(),
            })?;
            key.extend(cuda::buffer_ids(&[k, v])?);
            key.push(k.dim(2)? as u64); // the capacity sets the kernels' launch shapes
        }
        let mut graphs = std::mem::take(&mut self.graphs);
        let device = self.device.clone();
        let ran = graphs.run(&device, key, || body(self));
        self.graphs = graphs;
        ran
    }
}

/// A contiguous q, k or v projection `(1, rows, heads · width)` as [`cuda::Heads`]:
/// head stride `width`, row stride the whole row.
pub(super) fn projected(t: &Tensor, width: usize) -> Result<cuda::Heads<'_>> {
    let (_, _, row_stride) = t.dims3()?;
    Ok(cuda::Heads { t, head_stride: width, row_stride })
}

/// A contiguous `(1, heads, rows, width)` tensor as [`cuda::Heads`]: head stride
/// `rows · width`, row stride `width`.
pub(super) fn heads_first(t: &Tensor) -> Result<cuda::Heads<'_>> {
    let (_, _, rows, width) = t.dims4()?;
    Ok(cuda::Heads { t, head_stride: rows * width, row_stride: width })
}

/// Decode attention on the CUDA kernels ([`cuda::attend`]): row `i` of `qkv` (one
/// token of sequence `rows[i].0` at position `rows[i].1`, which `positions[i]` holds on
/// the device) gets its biases, is normed, rotated, stored in that slot's cache and
/// attended → `(1, rows, h · dv)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn fused_attention(
    layer: &mut Layer,
    hp: &Hyperparams,
    rows: Rows<'_>,
    positions: &Tensor,
    qkv: [cuda::Heads<'_>; 3],
    biases: [Option<&Tensor>; 3],
    norms: (Option<&Tensor>, Option<&Tensor>, f32),
    rope: Option<cuda::Rope<'_>>,
) -> Result<Tensor> {
    let one;
    let rows = match rows {
        Rows::One { slot, pos } => {
            one = [(slot, pos)];
            &one[..]
        }
        Rows::Each(rows) => rows,
    };
    let widths = (hp.n_head_kv, hp.head_dim, hp.v_head_dim);
    let mut caches = Vec::with_capacity(rows.len());
    for &(slot, pos) in rows {
        let cache = &mut layer.caches[slot];
        cache.reserve(pos + 1, widths, positions.device())?;
        let (kc, vc) = cache.buffers().expect("reserved above");
        caches.push((kc.clone(), vc.clone()));
    }
    let caches: Vec<(&Tensor, &Tensor)> = caches.iter().map(|(k, v)| (k, v)).collect();
    let shape = attention_shape(layer.window, hp, 1, 0, 0, 1, None);
    let out = cuda::attend(&shape, qkv, biases, norms, rope, &caches, positions, layer.sinks_dev.as_ref())?;
    for &(slot, pos) in rows {
        layer.caches[slot].set_len(pos + 1);
    }
    Ok(out)
}
