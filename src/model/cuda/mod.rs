//! The CUDA decode step: toolgate's own kernels for what candle runs as many small ops
//! (`kernels/decode.cu`: a decode row's norms, RoPE, KV-cache store and attention; the
//! gated activation; the residual sum with the next norm), and CUDA graphs that replay
//! a whole single-sequence decode step with one launch.
//!
//! Without the `cuda` feature nothing here runs ([`fused`] is false), and the
//! functions that would launch a kernel return [`crate::Error::Device`].
//!
//! Switches (read once per process):
//! - `TOOLGATE_CUDA_DECODE=candle` keeps candle's ops for decode attention (K/V repeated
//!   per head, a score matrix, softmax) — the path before these kernels, for comparison;
//!   the default `fused` runs [`attend`], [`glu`] and [`add_rms_norm`].
//! - `TOOLGATE_CUDA_GRAPH=off` runs the fused step without capturing it.
//! - A decode row's experts are routed and run on the device ([`moe_decode`]);
//!   `TOOLGATE_CUDA_MOE=host` reads the router's logits back and routes on the host
//!   (the path before, for comparison: 4.2× slower on an H200, `docs/devices.md`).
//! - `TOOLGATE_CUDA_MATVEC=on` runs dense projections of a few rows on [`matvec`]
//!   (`kernels/matvec.cu`) where the weight type allows. Off by default: correct on an
//!   H200, but slower per step than candle's MMVQ, which multiplies 8-bit activations
//!   with `dp4a` where the matvec dequantizes each weight to f32.

#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod kernels;

use std::sync::OnceLock;

use candle_core::{Device, Tensor};

use crate::kernels::attention::AttentionShape;
use crate::Result;

#[cfg(feature = "cuda")]
pub(super) use graph::Graphs;

/// Whether decode on `device` runs toolgate's fused kernels: a CUDA device, the
/// `cuda` feature, and `TOOLGATE_CUDA_DECODE` not `candle`.
pub(super) fn fused(device: &Device) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    cfg!(feature = "cuda")
        && device.is_cuda()
        && *ON.get_or_init(|| std::env::var("TOOLGATE_CUDA_DECODE").map_or(true, |v| v != "candle"))
}

/// Whether a fused single-sequence decode step is captured and replayed as a CUDA graph
/// (`TOOLGATE_CUDA_GRAPH` not `off`).
#[cfg(feature = "cuda")]
fn graphs() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TOOLGATE_CUDA_GRAPH").map_or(true, |v| v != "off"))
}

#[cfg(not(feature = "cuda"))]
fn unavailable() -> crate::Error {
    crate::Error::Device { device: "cuda".into(), reason: "built without the `cuda` feature".into() }
}

/// Device addresses of `tensors`' storage: equal lists mean the same buffers, so a
/// graph captured over them is still valid.
///
/// # Errors
/// If a tensor is not on a CUDA device (or without the `cuda` feature).
pub(super) fn buffer_ids(tensors: &[&Tensor]) -> Result<Vec<u64>> {
    #[cfg(feature = "cuda")]
    return kernels::buffer_ids(tensors);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = tensors;
        Err(unavailable())
    }
}

/// Overwrite the u32 tensor `t` in place with `values` (a graph's inputs stay at one
/// address).
///
/// # Errors
/// On a length or type mismatch; without the `cuda` feature.
pub(super) fn write_u32(t: &Tensor, values: &[u32]) -> Result<()> {
    #[cfg(feature = "cuda")]
    return kernels::write_u32(t, values);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (t, values);
        Err(unavailable())
    }
}

/// As [`write_u32`] for an f32 tensor.
///
/// # Errors
/// As [`write_u32`].
pub(super) fn write_f32(t: &Tensor, values: &[f32]) -> Result<()> {
    #[cfg(feature = "cuda")]
    return kernels::write_f32(t, values);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (t, values);
        Err(unavailable())
    }
}

/// One of q, k, v for [`attend`]: `rows` rows of heads, head `h` of row `r` at element
/// `r · row_stride + h · head_stride` of the contiguous f32 tensor `t`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // read by the CUDA launchers only
pub(super) struct Heads<'a> {
    pub t: &'a Tensor,
    pub head_stride: usize,
    pub row_stride: usize,
}

/// RoPE as [`attend`] applies it: the angle of pair `i` at position `p` is
/// `p · inv_freq[i]` (`inv_freq` f32 on the device, at least `dims / 2` long), cos and
/// sin times `mscale`; pairs `(i, i + dims/2)`, or `(2i, 2i+1)` when `interleaved`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // read by the CUDA launchers only
pub(super) struct Rope<'a> {
    pub inv_freq: &'a Tensor,
    pub mscale: f32,
    pub dims: usize,
    pub interleaved: bool,
}

/// Decode attention on toolgate's kernels: the projections' `biases` (q, k, v; each
/// the projection's width), per-head norms (`norms`: q and k weights, eps), RoPE, the
/// KV-cache store and flash-decoding, for one token per row, row `r` at position
/// `pos[r]` (u32 on the device) of the sequence cached in `caches[r]`.
/// `shape` gives heads, widths, window, scale and soft cap (its positions are
/// ignored). Returns `(1, rows, n_head · v_head_dim)` (`kernels::attend`).
///
/// # Errors
/// [`crate::Error::InvalidParameter`] on a shape mismatch; a failed launch; without the
/// `cuda` feature, [`crate::Error::Device`].
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    shape: &AttentionShape<'_>,
    qkv: [Heads<'_>; 3],
    biases: [Option<&Tensor>; 3],
    norms: (Option<&Tensor>, Option<&Tensor>, f32),
    rope: Option<Rope<'_>>,
    caches: &[(&Tensor, &Tensor)],
    pos: &Tensor,
    sinks: Option<&Tensor>,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    return kernels::attend(shape, qkv, biases, norms, rope, caches, pos, sinks);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (shape, qkv, biases, norms, rope, caches, pos, sinks);
        Err(unavailable())
    }
}

/// The gated activation on the device (`kernels::glu`): `act(g) · u` for `rows` rows of
/// `n`, `g` and `u` starting at the given element offsets, rows `row_stride` apart.
///
/// # Errors
/// As `kernels::glu`; without the `cuda` feature.
pub(super) fn glu(
    activation: super::arch::Activation,
    (g, g_offset): (&Tensor, usize),
    (u, u_offset): (&Tensor, usize),
    row_stride: usize,
    rows_n: (usize, usize),
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    return kernels::glu(g, g_offset, u, u_offset, row_stride, rows_n, glu_mode(activation));
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (g, g_offset, u, u_offset, row_stride, rows_n, glu_mode(activation));
        Err(unavailable())
    }
}

/// The kernels' code for `activation` (`mode`, SwiGLU's `alpha` and `limit`): 0 SiLU,
/// 1 GELU (tanh), 2 gpt-oss's clamped SwiGLU.
fn glu_mode(activation: super::arch::Activation) -> (i32, f32, f32) {
    use super::arch::Activation;
    use crate::kernels::glu::{OAI_ALPHA, OAI_LIMIT};
    let mode = match activation {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
        Activation::SwigluOai => 2,
    };
    (mode, OAI_ALPHA, OAI_LIMIT)
}

/// Whether projections of a few rows on `device` run toolgate's matvec
/// (`kernels/matvec.cu`): [`fused`] decode, and `TOOLGATE_CUDA_MATVEC=on` (off by
/// default: slower than candle's MMVQ on an H200, `docs/devices.md`).
#[cfg(feature = "cuda")]
fn matvec_on(device: &Device) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    fused(device) && *ON.get_or_init(|| std::env::var("TOOLGATE_CUDA_MATVEC").is_ok_and(|v| v == "on"))
}

/// `x · Wᵀ (+ b)` for each of `weights` (a quantized weight and its bias) in one launch
/// of toolgate's matvec, outputs side by side `(…, Σ n_j)`; with `gated`, the two
/// weights are gate and up and the result is `act(gate) · up` `(…, n)`.
/// `Ok(None)` when the matvec does not apply — not `matvec_on` (without
/// `TOOLGATE_CUDA_MATVEC=on`), more than eight rows or three weights, activations not
/// f32, or a weight type it does not read (Q2_K, Q3_K, IQ…) — and the caller runs
/// candle's matmul.
///
/// Cost: one launch, each weight read once for all rows.
///
/// # Errors
/// On a shape mismatch or a failed launch.
pub(super) fn matvec(
    x: &Tensor,
    weights: &[(&candle_core::quantized::QTensor, Option<&Tensor>)],
    gated: Option<super::arch::Activation>,
) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    {
        let k = x.dims().last().copied().unwrap_or(0);
        let applies = matvec_on(x.device())
            && x.dtype() == candle_core::DType::F32
            && k > 0
            && x.elem_count() / k <= kernels::MATVEC_MAX_ROWS
            && (1..=3).contains(&weights.len())
            && weights.iter().all(|(w, _)| kernels::matvec_type(w.dtype()).is_some());
        if !applies {
            return Ok(None);
        }
        Ok(Some(kernels::matvec(&x.contiguous()?, weights, gated.map(glu_mode))?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (x, weights, gated);
        Ok(None)
    }
}

/// `(x + o, rms_norm(x + o) · w)` in one launch (`kernels::add_rms_norm`).
///
/// # Errors
/// As `kernels::add_rms_norm`; without the `cuda` feature.
pub(super) fn add_rms_norm(x: &Tensor, o: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    #[cfg(feature = "cuda")]
    return kernels::add_rms_norm(x, o, w, eps);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (x, o, w, eps);
        Err(unavailable())
    }
}

/// Decode-step graphs of a decoder; without the `cuda` feature a step always runs
/// directly.
#[cfg(not(feature = "cuda"))]
#[derive(Debug, Default)]
pub(super) struct Graphs(());

#[cfg(not(feature = "cuda"))]
impl Graphs {
    /// Run `step` (no graphs without the `cuda` feature).
    pub(super) fn run(&mut self, _: &Device, _: Vec<u64>, mut step: impl FnMut() -> Result<()>) -> Result<()> {
        step()
    }
}

/// A mixture's experts as device tables (their weights' and biases' addresses, one
/// weight type per projection), for routing and running a decode row's experts on the
/// device ([`moe_decode`]); built once at load ([`moe_tables`]).
#[derive(Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // read by the CUDA launchers only
pub(super) struct MoeTables {
    /// Gate, up and down weight addresses, `(n_expert)` i64 each.
    pub weights: [Tensor; 3],
    /// Their bias addresses (0 where an expert has none), when any expert has one.
    pub biases: [Option<Tensor>; 3],
    /// ggml type ids of the three projections.
    pub types: [i32; 3],
    pub n_ff: usize,
    pub n_embd: usize,
    pub experts: usize,
}

/// How a row picks its experts ([`moe_decode`]): the `used` most probable (softmax, or
/// `sigmoid`, of the router's logits, plus `selection_bias` to choose), weighted by
/// their probabilities (over the chosen sum when `norm_topk`) times `scale`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // read by the CUDA launchers only
pub(super) struct MoeRoute<'a> {
    pub used: usize,
    pub sigmoid: bool,
    pub norm_topk: bool,
    pub scale: f32,
    pub selection_bias: Option<&'a Tensor>,
}

/// Device tables of `experts` (each `[gate, up, down]`: a quantized weight and its
/// bias), `used` of them per token, when each is a CUDA weight the matvec reads, of one
/// type and shape per projection, and the counts fit the routing kernel; `Ok(None)`
/// otherwise, or with `TOOLGATE_CUDA_MOE=host`: the mixture then routes on the host.
///
/// # Errors
/// A failed upload of the tables.
pub(super) fn moe_tables(
    experts: &[[(&candle_core::quantized::QTensor, Option<&Tensor>); 3]],
    used: usize,
) -> Result<Option<MoeTables>> {
    #[cfg(feature = "cuda")]
    {
        static ON: OnceLock<bool> = OnceLock::new();
        if !*ON.get_or_init(|| std::env::var("TOOLGATE_CUDA_MOE").map_or(true, |v| v != "host")) {
            return Ok(None);
        }
        match experts.first() {
            Some(first) if fused(&first[0].0.device()) => Ok(kernels::moe_tables(experts, used).ok()),
            _ => Ok(None),
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (experts, used);
        Ok(None)
    }
}

/// One row's mixture of experts on the device (`kernels::moe_decode`): route by the
/// router's `logits`, run the chosen experts on `h` `(1, 1, n_embd)` with
/// `activation` → `(1, 1, n_embd)`, with no host round trip.
///
/// # Errors
/// On a shape mismatch or a failed launch; without the `cuda` feature.
pub(super) fn moe_decode(
    tables: &MoeTables,
    logits: &Tensor,
    h: &Tensor,
    route: &MoeRoute<'_>,
    activation: super::arch::Activation,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    return kernels::moe_decode(tables, &logits.contiguous()?, &h.contiguous()?, route, glu_mode(activation));
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (tables, logits, h, route, glu_mode(activation));
        Err(unavailable())
    }
}
