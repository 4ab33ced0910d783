//! Hyperparameters read from GGUF metadata (`{arch}.*` keys).

use crate::gguf::GgufFile;
use crate::Result;

/// The shape of a decoder-only transformer, as its GGUF file records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hyperparams {
    /// Number of transformer blocks (`{arch}.block_count`).
    pub n_layer: usize,
    /// Residual width (`{arch}.embedding_length`).
    pub n_embd: usize,
    /// Query heads (`{arch}.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`{arch}.attention.head_count_kv`, default `n_head`).
    pub n_head_kv: usize,
    /// Per-head width of Q and K (`{arch}.attention.key_length`, default `n_embd / n_head`).
    pub head_dim: usize,
    /// Per-head width of V (`{arch}.attention.value_length`, default `head_dim`).
    pub v_head_dim: usize,
    /// RMS-norm epsilon.
    pub rms_eps: f32,
    /// RoPE base frequency (`{arch}.rope.freq_base`, default 10000).
    pub rope_base: f32,
    /// Rotated dimensions per head (`{arch}.rope.dimension_count`, default `head_dim`).
    pub rope_dim: usize,
    /// Linear RoPE scaling factor for global layers (`{arch}.rope.scaling.factor` with
    /// type `linear`), 1.0 if none.
    pub rope_linear_scale: f32,
    /// YaRN context extension (`{arch}.rope.scaling.type` = `yarn`), if any.
    pub rope_yarn: Option<Yarn>,
    /// Queries at position `p` are multiplied by `1 + scale · ln(⌊p / floor⌋ + 1)`
    /// after RoPE (`{arch}.attention.temperature_scale`, Ministral 3's
    /// `llama_4_scaling_beta`; `floor` is the original context), if set.
    pub attn_temperature: Option<AttnTemperature>,
    /// Training context length (`{arch}.context_length`).
    pub context_length: usize,
    /// Sliding attention window (`{arch}.attention.sliding_window`), if any.
    pub sliding_window: Option<usize>,
    /// RoPE base of the windowed layers (`{arch}.rope.freq_base_swa`), if recorded.
    pub rope_base_swa: Option<f32>,
    /// Mixture of experts (`{arch}.expert_count` > 0), if any.
    pub experts: Option<Experts>,
    /// The multipliers some families train with (Granite), each read when present and
    /// applied whatever the architecture, as llama.cpp does.
    pub scales: Scales,
}

/// Position-dependent query scaling (see [`Hyperparams::attn_temperature`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnTemperature {
    /// The `ln` multiplier.
    pub scale: f32,
    /// Positions per step of the logarithm (the original context length).
    pub floor: usize,
}

impl AttnTemperature {
    /// The query multiplier at position `pos`.
    pub fn at(&self, pos: usize) -> f32 {
        1.0 + self.scale * ((pos / self.floor) as f32 + 1.0).ln()
    }
}

/// YaRN RoPE scaling, as llama.cpp applies it: low-frequency pairs are interpolated by
/// `1/factor`, high-frequency ones kept, a linear ramp between (pairs whose wavelength
/// fits `beta_fast` to `beta_slow` times in `original_context`), and cos/sin
/// multiplied by `mscale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// Context extension factor (`{arch}.rope.scaling.factor`).
    pub factor: f32,
    /// The context the model was trained with before extension
    /// (`{arch}.rope.scaling.original_context_length`, default the context length).
    pub original_context: usize,
    /// `{arch}.rope.scaling.attn_factor` (default 1) times `1 + 0.1·ln(factor)` for a
    /// factor above 1, divided by `1 + 0.1·L·ln(factor)` when the file sets
    /// `{arch}.rope.scaling.yarn_log_multiplier` `L`: the magnitude of cos and sin.
    pub mscale: f32,
    /// Rotations within the original context above which a pair is kept as it is
    /// (`{arch}.rope.scaling.yarn_beta_fast`, default 32).
    pub beta_fast: f32,
    /// Rotations below which a pair is fully interpolated
    /// (`{arch}.rope.scaling.yarn_beta_slow`, default 1).
    pub beta_slow: f32,
}

impl Yarn {
    /// The rotation frequencies of pairs `0..rope_dim/2` with RoPE base `base`, YaRN
    /// applied (llama.cpp's `ggml_rope_yarn_corr_dims` and `rope_yarn` with
    /// `ext_factor = 1`).
    pub fn frequencies(&self, base: f32, rope_dim: usize) -> Vec<f32> {
        let n = rope_dim as f32;
        let corr = |rotations: f32| {
            n * (self.original_context as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
        };
        let low = corr(self.beta_fast).floor().max(0.0);
        let high = corr(self.beta_slow).ceil().min(n - 1.0);
        let scale = 1.0 / self.factor;
        (0..rope_dim / 2)
            .map(|k| {
                let extrapolated = 1.0 / base.powf(2.0 * k as f32 / n);
                let y = (k as f32 - low) / (high - low).max(0.001);
                let mix = 1.0 - y.clamp(0.0, 1.0);
                extrapolated * (scale * (1.0 - mix) + mix)
            })
            .collect()
    }
}

/// The expert counts and weighting of a mixture-of-experts FFN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Experts {
    /// Experts per layer (`{arch}.expert_count`).
    pub count: usize,
    /// Experts each token uses (`{arch}.expert_used_count`).
    pub used: usize,
    /// Renormalise the chosen experts' weights to sum to 1
    /// (`{arch}.expert_weights_norm`), when the file says.
    pub norm: Option<bool>,
    /// Multiply the chosen experts' weights by this (`{arch}.expert_weights_scale`,
    /// GLM's `routed_scaling_factor`), when set to other than 0 or 1.
    pub scale: Option<f32>,
}

/// Optional multipliers of the residual stream, attention and logits.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Scales {
    /// Token embeddings are multiplied by this (`{arch}.embedding_scale`).
    pub embedding: Option<f32>,
    /// Attention and FFN outputs are multiplied by this before each residual add
    /// (`{arch}.residual_scale`).
    pub residual: Option<f32>,
    /// Attention scores are `q·k` times this instead of `1/√head_dim`
    /// (`{arch}.attention.scale`).
    pub attention: Option<f32>,
    /// Logits are divided by this (`{arch}.logit_scale`).
    pub logit_divisor: Option<f32>,
    /// Attention scores are soft-capped to `c · tanh(s / c)`
    /// (`{arch}.attn_logit_softcapping`; the decoder keeps it only where the
    /// architecture soft-caps, [`super::arch::ArchSpec::softcapping`]).
    pub attention_softcap: Option<f32>,
    /// Logits are soft-capped likewise (`{arch}.final_logit_softcapping`).
    pub final_softcap: Option<f32>,
}

impl Hyperparams {
    /// Read the hyperparameters of architecture `arch` from `gguf`.
    ///
    /// # Errors
    /// [`crate::Error::Metadata`] if a required key is missing or mistyped, or the head
    /// counts are inconsistent.
    pub fn from_gguf(gguf: &GgufFile, arch: &str) -> Result<Self> {
        let k = |s: &str| format!("{arch}.{s}");
        // Multi-token-prediction blocks at the end (GLM 4.5's NextN) are counted in
        // `block_count` but are not part of the forward pass.
        let n_blocks = gguf.u32(&k("block_count"))? as usize;
        let nextn = gguf.opt_u32(&k("nextn_predict_layers"))?.unwrap_or(0) as usize;
        let n_layer = n_blocks.saturating_sub(nextn);
        let n_embd = gguf.u32(&k("embedding_length"))? as usize;
        let n_head = gguf.u32(&k("attention.head_count"))? as usize;
        let n_head_kv = gguf.opt_u32(&k("attention.head_count_kv"))?.map(|x| x as usize).unwrap_or(n_head);
        let bad =
            |key: &str, reason: String| crate::Error::Metadata { path: gguf.path().to_path_buf(), key: k(key), reason };
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(bad(
                "attention.head_count_kv",
                format!("{n_head} query heads cannot be grouped over {n_head_kv} key/value heads"),
            ));
        }
        let head_dim = gguf.opt_u32(&k("attention.key_length"))?.map(|x| x as usize).unwrap_or(n_embd / n_head);
        let v_head_dim = gguf.opt_u32(&k("attention.value_length"))?.map(|x| x as usize).unwrap_or(head_dim);
        // Sizes are checked against the tensors before anything is allocated from them: a
        // `block_count` of 2^31 used to reserve 800 GB for the layer list and abort.
        let blocks = gguf
            .tensor_names()
            .filter_map(|n| n.strip_prefix("blk.")?.split('.').next()?.parse::<usize>().ok())
            .collect::<std::collections::BTreeSet<_>>();
        if n_layer == 0 || (0..n_layer).any(|i| !blocks.contains(&i)) {
            return Err(bad(
                "block_count",
                format!("{n_layer} blocks declared; the file holds blocks for {}", blocks.len()),
            ));
        }
        // No width can exceed every tensor's extent.
        let widest = gguf.tensor_names().filter_map(|n| gguf.tensor_dims(n)?.iter().max().copied()).max().unwrap_or(0);
        for (key, v) in [
            ("embedding_length", n_embd),
            ("attention.head_count", n_head),
            ("attention.key_length", head_dim),
            ("attention.value_length", v_head_dim),
        ] {
            if v == 0 || v > widest {
                return Err(bad(key, format!("{v} does not fit the tensors (the widest extent is {widest})")));
            }
        }
        let rope_dim = gguf.opt_u32(&k("rope.dimension_count"))?.map(|x| x as usize).unwrap_or(head_dim);
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(bad("rope.dimension_count", format!("{rope_dim} rotated dims for head width {head_dim}")));
        }
        let context_length = gguf.opt_u32(&k("context_length"))?.map(|x| x as usize).unwrap_or(2048);
        let scaling = gguf.opt_string(&k("rope.scaling.type"))?;
        let factor = nonzero(gguf.opt_f32(&k("rope.scaling.factor"))?);
        let rope_linear_scale = match scaling {
            Some("linear") => factor.unwrap_or(1.0),
            _ => 1.0,
        };
        let rope_yarn = match (scaling, factor) {
            (Some("yarn"), Some(factor)) if factor > 0.0 => {
                let attn_factor = nonzero(gguf.opt_f32(&k("rope.scaling.attn_factor"))?).unwrap_or(1.0);
                let log_mul = nonzero(gguf.opt_f32(&k("rope.scaling.yarn_log_multiplier"))?);
                let gain = |m: f32| if factor > 1.0 { 1.0 + 0.1 * m * factor.ln() } else { 1.0 };
                Some(Yarn {
                    factor,
                    original_context: gguf
                        .opt_u32(&k("rope.scaling.original_context_length"))?
                        .map(|x| x as usize)
                        .filter(|&c| c > 0)
                        .unwrap_or(context_length),
                    mscale: attn_factor * gain(1.0) / log_mul.map_or(1.0, gain),
                    beta_fast: nonzero(gguf.opt_f32(&k("rope.scaling.yarn_beta_fast"))?).unwrap_or(32.0),
                    beta_slow: nonzero(gguf.opt_f32(&k("rope.scaling.yarn_beta_slow"))?).unwrap_or(1.0),
                })
            }
            _ => None,
        };
        let mut scales = Scales {
            embedding: nonzero(gguf.opt_f32(&k("embedding_scale"))?),
            residual: nonzero(gguf.opt_f32(&k("residual_scale"))?),
            attention: nonzero(gguf.opt_f32(&k("attention.scale"))?),
            logit_divisor: nonzero(gguf.opt_f32(&k("logit_scale"))?),
            attention_softcap: nonzero(gguf.opt_f32(&k("attn_logit_softcapping"))?),
            final_softcap: nonzero(gguf.opt_f32(&k("final_logit_softcapping"))?),
        };
        // Gemma 2 27B (46 layers) scales queries by 1/√(n_embd / n_head), not
        // 1/√head_dim (its `query_pre_attn_scalar` is 144, which GGUF does not record;
        // llama.cpp decides it by the layer count as here).
        if arch == "gemma2" && n_layer == 46 && scales.attention.is_none() {
            scales.attention = Some(1.0 / ((n_embd / n_head) as f32).sqrt());
        }
        let experts = match gguf.opt_u32(&k("expert_count"))? {
            None | Some(0) => None,
            Some(count) => {
                let used = gguf.u32(&k("expert_used_count"))?;
                if used == 0 || used > count {
                    return Err(bad("expert_used_count", format!("{used} of {count} experts")));
                }
                Some(Experts {
                    count: count as usize,
                    used: used as usize,
                    norm: gguf.opt_bool(&k("expert_weights_norm"))?,
                    scale: nonzero(gguf.opt_f32(&k("expert_weights_scale"))?).filter(|&s| s != 1.0),
                })
            }
        };
        Ok(Self {
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            v_head_dim,
            rms_eps: gguf.opt_f32(&k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
            rope_base: gguf.opt_f32(&k("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_dim,
            rope_linear_scale,
            rope_yarn,
            attn_temperature: nonzero(gguf.opt_f32(&k("attention.temperature_scale"))?).map(|scale| AttnTemperature {
                scale,
                floor: rope_yarn.map_or(context_length, |y| y.original_context).max(1),
            }),
            context_length,
            sliding_window: gguf.opt_u32(&k("attention.sliding_window"))?.map(|x| x as usize).filter(|&w| w > 0),
            rope_base_swa: gguf.opt_f32(&k("rope.freq_base_swa"))?,
            experts,
            scales,
        })
    }
}

/// A multiplier of 0 means "not set" in llama.cpp's reading of these keys.
fn nonzero(x: Option<f32>) -> Option<f32> {
    x.filter(|&v| v != 0.0 && v.is_finite())
}

#[cfg(test)]
mod tests {
    #[test]
    fn at_example() {
        use crate::model::config::AttnTemperature;
        let t = AttnTemperature { scale: 0.1, floor: 8192 };
        assert_eq!(t.at(8191), 1.0);
        assert!((t.at(8192) - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-7);
    }

    #[test]
    fn frequencies_example() {
        use crate::model::config::Yarn;
        let y = Yarn { factor: 4.0, original_context: 4096, mscale: 1.0, beta_fast: 32.0, beta_slow: 1.0 };
        let f = y.frequencies(10_000.0, 64);
        assert_eq!(f[0], 1.0); // the fastest pair is kept as it is
        let plain = 1.0 / 10_000f32.powf(62.0 / 64.0);
        assert!((f[31] - plain / 4.0).abs() < 1e-9); // the slowest is interpolated
    }
}
