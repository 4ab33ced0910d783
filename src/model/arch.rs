//! Architecture table: what differs between the decoder-only families toolgate runs.
//!
//! Everything that can be read off the GGUF file (fused QKV, biases, Q/K norms, fused
//! gate+up, tied output) is detected from the tensors present; what cannot is written
//! here, one match arm per `general.architecture`. Adding an architecture that fits
//! the generic decoder is one arm here plus one test.

/// How rotary embeddings pair up dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(x0,x1),(x2,x3)…` — llama.cpp's `LLAMA_ROPE_TYPE_NORM` (GGUF llama
    /// weights are permuted for it).
    Interleaved,
    /// First half with second half — `LLAMA_ROPE_TYPE_NEOX` (Qwen, Gemma, Phi-3).
    Halves,
}

/// The feed-forward gate activation (computed by [`crate::kernels::glu`]).
pub use crate::kernels::glu::Activation;

/// How a mixture-of-experts router turns its logits into expert weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts (Qwen3-MoE, gpt-oss).
    Softmax,
    /// Each expert's own sigmoid (GLM 4.5, DeepSeek V3).
    Sigmoid,
}

/// Interleaved sliding-window attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingWindow {
    /// Every `pattern`-th layer (1-based) is global; the others attend to a window.
    pub pattern: usize,
    /// RoPE base of the windowed (local) layers; `None`: `{arch}.rope.freq_base_swa`
    /// when the file records it, else the global base.
    pub local_rope_base: Option<f32>,
    /// The windowed layers' RoPE is scaled (linear or YaRN) as the global layers' is
    /// (gpt-oss); otherwise it is unscaled (Gemma).
    pub local_rope_scaled: bool,
}

/// The per-architecture facts the generic decoder needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArchSpec {
    /// `general.architecture`.
    pub name: &'static str,
    /// Rotary pairing.
    pub rope: RopeStyle,
    /// Feed-forward activation.
    pub activation: Activation,
    /// Multiply token embeddings by `sqrt(n_embd)` (Gemma).
    pub embed_scale: bool,
    /// RMS-normalise the attention and FFN outputs before the residual add (Gemma's
    /// `post_attention_norm` / `post_ffw_norm`).
    pub sandwich_norms: bool,
    /// Interleaved local/global attention, if any.
    pub sliding_window: Option<SlidingWindow>,
    /// Every `n`-th layer (1-based) applies no rotary embedding (SmolLM3's NoPE layers).
    pub no_rope_every: Option<usize>,
    /// RMS-normalise each block's input before attention and before the FFN
    /// (`attn_norm`, `ffn_norm`); OLMo 2 normalises only the outputs.
    pub pre_norms: bool,
    /// The name of the FFN's input norm tensor, `blk.N.{ffn_norm}.weight`
    /// (`ffn_norm`; gpt-oss calls it `post_attention_norm`).
    pub ffn_norm: &'static str,
    /// Apply the file's attention and final-logit soft caps (Gemma 2).
    pub softcapping: bool,
    /// In a mixture-of-experts FFN (detected: `ffn_gate_inp`), rescale the chosen
    /// experts' softmax weights to sum to 1 (Qwen3-MoE's `norm_topk_prob`).
    pub moe_norm_topk: bool,
    /// The router's gating function.
    pub moe_gating: Gating,
}

/// Architectures toolgate can load, for error messages.
pub const SUPPORTED: &[&str] = &[
    "llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "granite", "smollm3", "gemma2", "olmo2", "gpt-oss",
    "glm4moe", "mistral3",
];

/// The spec for a `general.architecture` value, or `None` if unsupported.
pub fn spec_for(arch: &str) -> Option<ArchSpec> {
    let base = ArchSpec {
        name: "",
        rope: RopeStyle::Halves,
        activation: Activation::Silu,
        embed_scale: false,
        sandwich_norms: false,
        sliding_window: None,
        no_rope_every: None,
        pre_norms: true,
        ffn_norm: "ffn_norm",
        softcapping: false,
        moe_norm_topk: false,
        moe_gating: Gating::Softmax,
    };
    Some(match arch {
        // Llama 2/3.x, Mistral, SmolLM: interleaved RoPE, SwiGLU.
        "llama" => ArchSpec { name: "llama", rope: RopeStyle::Interleaved, ..base },
        // Qwen 2/2.5: QKV biases (detected), NeoX RoPE.
        "qwen2" => ArchSpec { name: "qwen2", ..base },
        // Qwen 3: per-head Q/K RMS norms (detected), NeoX RoPE.
        "qwen3" => ArchSpec { name: "qwen3", ..base },
        // Qwen 3 MoE (30B-A3B, Coder-30B-A3B): Qwen 3 with a mixture of experts (softmax
        // router, top-k, weights renormalised).
        "qwen3moe" => ArchSpec { name: "qwen3moe", moe_norm_topk: true, ..base },
        // Phi-3: fused QKV and fused gate+up (detected), NeoX RoPE.
        "phi3" => ArchSpec { name: "phi3", ..base },
        // Gemma 3: GeGLU, scaled embeddings, sandwich norms, Q/K norms, 5 local : 1 global.
        "gemma3" => ArchSpec {
            name: "gemma3",
            activation: Activation::GeluTanh,
            embed_scale: true,
            sandwich_norms: true,
            sliding_window: Some(SlidingWindow {
                pattern: 6,
                local_rope_base: Some(10_000.0),
                local_rope_scaled: false,
            }),
            ..base
        },
        // Gemma 2: as Gemma 3 without Q/K norms, every other layer windowed, attention
        // and final logits soft-capped.
        "gemma2" => ArchSpec {
            name: "gemma2",
            activation: Activation::GeluTanh,
            embed_scale: true,
            sandwich_norms: true,
            sliding_window: Some(SlidingWindow { pattern: 2, local_rope_base: None, local_rope_scaled: false }),
            softcapping: true,
            ..base
        },
        // OLMo 2: norms after attention and FFN only, Q/K norms over the whole
        // projection (detected); OLMo 3's files (same arch) window 3 layers of 4.
        "olmo2" => ArchSpec {
            name: "olmo2",
            sandwich_norms: true,
            pre_norms: false,
            sliding_window: Some(SlidingWindow { pattern: 4, local_rope_base: None, local_rope_scaled: false }),
            ..base
        },
        // Granite 3.x: llama's layout; its embedding, residual, attention and logit
        // multipliers are metadata (`Hyperparams::scales`).
        "granite" => ArchSpec { name: "granite", rope: RopeStyle::Interleaved, ..base },
        // SmolLM3: llama's layout, every 4th layer without RoPE.
        "smollm3" => ArchSpec { name: "smollm3", rope: RopeStyle::Interleaved, no_rope_every: Some(4), ..base },
        // gpt-oss: a mixture of experts (router and experts with biases, softmax over
        // the chosen experts' logits, clamped SwiGLU), attention sinks (detected),
        // every other layer windowed starting with the first, YaRN on every layer.
        "gpt-oss" => ArchSpec {
            name: "gpt-oss",
            activation: Activation::SwigluOai,
            sliding_window: Some(SlidingWindow { pattern: 2, local_rope_base: None, local_rope_scaled: true }),
            ffn_norm: "post_attention_norm",
            moe_norm_topk: true,
            ..base
        },
        // GLM 4.5 / 4.6 (Air): leading dense layers then MoE layers (detected), sigmoid
        // router whose `exp_probs_b` bias only picks the experts, a shared expert beside
        // them (detected), weights renormalised and scaled as the metadata says,
        // partial NeoX RoPE, NextN blocks skipped.
        // Ministral 3 / Mistral 3: llama's layout (interleaved RoPE), YaRN with its own
        // betas and log multiplier, queries scaled with the log of the position
        // (`Hyperparams::attn_temperature`); MoE variants renormalise.
        "mistral3" => ArchSpec { name: "mistral3", rope: RopeStyle::Interleaved, moe_norm_topk: true, ..base },
        "glm4moe" => ArchSpec { name: "glm4moe", ffn_norm: "post_attention_norm", moe_gating: Gating::Sigmoid, ..base },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn spec_for_example() {
        use crate::model::arch::{spec_for, RopeStyle};
        assert_eq!(spec_for("llama").unwrap().rope, RopeStyle::Interleaved);
        assert!(spec_for("gemma3").unwrap().sandwich_norms);
        assert!(spec_for("bert").is_none());
    }
}
