//! Launchers of toolgate's own CUDA kernels (`kernels/decode.cu`, compiled to PTX by
//! `build.rs`): the attention of decode rows (per-head norms, RoPE, the KV-cache store,
//! flash-decoding), the gated activation and the residual sum with the next norm; and
//! the decode matvec of quantized weights (`kernels/matvec.cu`).
//!
//! They take candle tensors and launch on candle's stream, so they interleave with
//! candle's ops and can be captured into a CUDA graph with them. The attention kernels
//! read each row's position from a device tensor (`pos`, u32), never from a launch
//! parameter: a graph captured at one position replays at the next.

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Storage, Tensor};

use super::{Heads, Rope};
use crate::kernels::attention::AttentionShape;
use crate::{Error, Result};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode.ptx"));
const MODULE: &str = "toolgate_decode";
/// Threads of an attention block: `ATTN_WARPS` (decode.cu) warps.
const ATTN_THREADS: u32 = 128;
/// The widest head the attention kernel holds (`MAX_D` in decode.cu).
pub(crate) const MAX_HEAD_DIM: usize = 512;

fn bad(reason: String) -> Error {
    Error::InvalidParameter { name: "cuda decode", reason }
}

/// The CUDA device of `t`.
fn cuda_device(t: &Tensor) -> Result<CudaDevice> {
    Ok(t.device().as_cuda_device()?.clone())
}

/// The device address of `t`'s first element (f32 or u32), which must be on `stream`'s
/// device. The caller keeps `t` alive until the kernel that reads it is launched (freeing
/// is ordered on the stream after that kernel).
fn address(t: &Tensor, stream: &Arc<CudaStream>) -> Result<u64> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else { return Err(bad("a CUDA tensor expected".into())) };
    let (base, elem) = match t.dtype() {
        DType::F32 => (cs.as_cuda_slice::<f32>()?.device_ptr(stream).0, 4),
        DType::U32 => (cs.as_cuda_slice::<u32>()?.device_ptr(stream).0, 4),
        DType::I64 => (cs.as_cuda_slice::<i64>()?.device_ptr(stream).0, 8),
        other => return Err(bad(format!("f32, u32 or i64 tensor expected, got {other:?}"))),
    };
    Ok(base + (layout.start_offset() * elem) as u64)
}

/// Decode attention of `rows` rows, one token each, row `r` at position `pos[r]` of
/// the sequence whose cache is `caches[r]` (`(1, n_kv_head, cap, head_dim)` keys and
/// `(1, n_kv_head, cap, v_head_dim)` values, contiguous f32, `cap > pos[r]`): the
/// `biases` (one per projection, its whole width) are added, each query and key head
/// is RMS-normed by `norms` (per-head weights, when given) and rotated by `rope` (when given), the keys and values are stored in the cache, and
/// the queries attend to keys `0..=pos[r]` (less those outside the window; with the
/// head's sink logit from `sinks`). `s` gives heads, widths, window, scale and soft
/// cap; its positions and key counts are not read. Returns `(1, rows, n_head ·
/// v_head_dim)`.
///
/// The keys are split into shares (flash-decoding) so that about two blocks per
/// multiprocessor run whatever the head count; the number of shares depends on the
/// cache's capacity only, so one captured graph serves every position below it.
///
/// Cost: three launches per row; reads the visible keys and values once.
///
/// # Errors
/// [`Error::InvalidParameter`] on a shape or type mismatch (nothing is launched);
/// a candle/driver error if a launch fails.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    s: &AttentionShape<'_>,
    [q, k, v]: [Heads<'_>; 3],
    biases: [Option<&Tensor>; 3],
    norms: (Option<&Tensor>, Option<&Tensor>, f32),
    rope: Option<Rope<'_>>,
    caches: &[(&Tensor, &Tensor)],
    pos: &Tensor,
    sinks: Option<&Tensor>,
) -> Result<Tensor> {
    let (d, dv, rows) = (s.head_dim, s.v_head_dim, caches.len());
    let covers = |h: &Heads<'_>, heads: usize, width: usize| {
        rows > 0 && (rows - 1) * h.row_stride + (heads - 1) * h.head_stride + width <= h.t.elem_count()
    };
    let f32_contiguous = |t: &Tensor| t.dtype() == DType::F32 && t.is_contiguous();
    let cache_ok = caches.iter().all(|(kc, vc)| {
        let cap = kc.dim(2).unwrap_or(0);
        f32_contiguous(kc)
            && f32_contiguous(vc)
            && kc.dims() == [1, s.n_kv_head, cap, d]
            && vc.dims() == [1, s.n_kv_head, cap, dv]
    });
    let norm_ok = |w: Option<&Tensor>| w.is_none_or(|w| f32_contiguous(w) && w.elem_count() == d);
    let widths = [s.n_head * d, s.n_kv_head * d, s.n_kv_head * dv];
    let bias_ok = biases.iter().zip(widths).all(|(b, n)| b.is_none_or(|b| f32_contiguous(b) && b.elem_count() == n));
    if s.n_kv_head == 0
        || !s.n_head.is_multiple_of(s.n_kv_head)
        || d > MAX_HEAD_DIM
        || dv > MAX_HEAD_DIM
        || ![q.t, k.t, v.t].iter().all(|t| f32_contiguous(t))
        || !covers(&q, s.n_head, d)
        || !covers(&k, s.n_kv_head, d)
        || !covers(&v, s.n_kv_head, dv)
        || !cache_ok
        || pos.dtype() != DType::U32
        || pos.elem_count() < rows
        || !norm_ok(norms.0)
        || !norm_ok(norms.1)
        || !bias_ok
        || rope.is_some_and(|r| r.dims > d || !r.dims.is_multiple_of(2) || r.inv_freq.elem_count() < r.dims / 2)
        || sinks.is_some_and(|z| z.elem_count() != s.n_head || z.dtype() != DType::F32)
    {
        let (nh, nkv) = (s.n_head, s.n_kv_head);
        return Err(bad(format!(
            "unsupported decode attention: {nh} heads, {nkv} KV heads, width {d}/{dv}, {rows} rows"
        )));
    }
    let device = q.t.device();
    let dev = cuda_device(q.t)?;
    let stream = dev.cuda_stream();
    let f = |name: &str| dev.get_or_load_custom_func(name, MODULE, PTX);
    let opt = |t: Option<&Tensor>| t.map_or(Ok(0u64), |t| address(t, &stream));
    let (qa, ka, va, pa) =
        (address(q.t, &stream)?, address(k.t, &stream)?, address(v.t, &stream)?, address(pos, &stream)?);
    let (qn, kn, za) = (opt(norms.0)?, opt(norms.1)?, opt(sinks)?);
    let (qb, kb, vb) = (opt(biases[0])?, opt(biases[1])?, opt(biases[2])?);
    let (freq, mscale, rope_dim, interleaved) = match rope {
        Some(r) => (address(r.inv_freq, &stream)?, r.mscale, r.dims as i32, r.interleaved as i32),
        None => (0, 1.0, 0, 0),
    };
    let (d_i, dv_i, nh_i, nkv_i, eps) = (d as i32, dv as i32, s.n_head as i32, s.n_kv_head as i32, norms.2);
    let (q_hs, k_hs, v_hs) = (q.head_stride as i32, k.head_stride as i32, v.head_stride as i32);
    let window = s.window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
    let softcap = s.softcap.unwrap_or(0.0);
    // SAFETY (all three): uninitialised buffers, every element written before it is read.
    let q_out = unsafe { Tensor::empty((rows, s.n_head, d), DType::F32, device)? };
    let out = unsafe { Tensor::empty((1, rows, s.n_head * dv), DType::F32, device)? };
    let (qo, oa) = (address(&q_out, &stream)?, address(&out, &stream)?);
    let (store, partial, combine) = (f("tg_qkv_store_f32")?, f("tg_attn_partial_f32")?, f("tg_attn_combine_f32")?);
    for (r, (kc, vc)) in caches.iter().enumerate() {
        let cap = kc.dim(2)?;
        let (kca, vca) = (address(kc, &stream)?, address(vc, &stream)?);
        let (row_i, cap_i, qo_hs) = (r as i32, cap as i32, d as i32);
        let q_row = qa + (r * q.row_stride * 4) as u64;
        let k_row = ka + (r * k.row_stride * 4) as u64;
        let v_row = va + (r * v.row_stride * 4) as u64;
        let qo_row = qo + (r * s.n_head * d * 4) as u64;
        let o_row = oa + (r * s.n_head * dv * 4) as u64;
        let mut b = store.builder();
        b.arg(&q_row).arg(&k_row).arg(&v_row).arg(&q_hs).arg(&k_hs).arg(&v_hs).arg(&qb).arg(&kb).arg(&vb);
        b.arg(&qn).arg(&kn).arg(&eps);
        b.arg(&freq).arg(&mscale).arg(&rope_dim).arg(&interleaved).arg(&pa).arg(&row_i).arg(&nh_i).arg(&cap_i);
        b.arg(&d_i).arg(&dv_i).arg(&qo_row).arg(&qo_hs).arg(&kca).arg(&vca);
        let heads = (s.n_head + s.n_kv_head) as u32;
        // SAFETY: the arguments match tg_qkv_store_f32's signature; every input covers
        // the heads read (checked above); a position outside the cache is not written.
        unsafe { b.launch(LaunchConfig { grid_dim: (heads, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 }) }
            .map_err(|e| bad(format!("qkv store launch: {e}")))?;

        let n_split = shares(s.n_head, cap);
        let parts = unsafe { Tensor::empty(s.n_head * n_split * (dv + 2), DType::F32, device)? };
        let pm = address(&parts, &stream)?;
        let pl = pm + (s.n_head * n_split * 4) as u64;
        let pacc = pl + (s.n_head * n_split * 4) as u64;
        let mut b = partial.builder();
        b.arg(&qo_row).arg(&qo_hs).arg(&kca).arg(&vca).arg(&pa).arg(&row_i).arg(&nh_i).arg(&nkv_i).arg(&cap_i);
        b.arg(&d_i).arg(&dv_i).arg(&window).arg(&s.scale).arg(&softcap).arg(&pm).arg(&pl).arg(&pacc);
        let grid = (s.n_head as u32, n_split as u32, 1);
        // SAFETY: as above; every key index the kernel reads is below pos[r] + 1 <= cap.
        unsafe { b.launch(LaunchConfig { grid_dim: grid, block_dim: (ATTN_THREADS, 1, 1), shared_mem_bytes: 0 }) }
            .map_err(|e| bad(format!("attention launch: {e}")))?;
        let ns_i = n_split as i32;
        let mut b = combine.builder();
        b.arg(&pm).arg(&pl).arg(&pacc).arg(&za).arg(&ns_i).arg(&dv_i).arg(&o_row);
        // SAFETY: as above; `parts` and `out` hold what the kernel indexes.
        unsafe {
            b.launch(LaunchConfig { grid_dim: (s.n_head as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 })
        }
        .map_err(|e| bad(format!("attention merge launch: {e}")))?;
    }
    Ok(out)
}

/// The gated activation `act(g) · u` of `rows` rows of `n` (`g`, `u` rows `row_stride`
/// apart in contiguous f32 tensors; they may be two halves of one): `mode` 0 SiLU, 1
/// GELU (tanh), 2 gpt-oss's clamped SwiGLU with `alpha`, `limit`. Returns `(1, rows, n)`.
///
/// # Errors
/// On a type or size mismatch; a failed launch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn glu(
    g: &Tensor,
    g_offset: usize,
    u: &Tensor,
    u_offset: usize,
    row_stride: usize,
    (rows, n): (usize, usize),
    (mode, alpha, limit): (i32, f32, f32),
) -> Result<Tensor> {
    let fits = |t: &Tensor, off: usize| rows > 0 && off + (rows - 1) * row_stride + n <= t.elem_count();
    if [g, u].iter().any(|t| t.dtype() != DType::F32 || !t.is_contiguous()) || !fits(g, g_offset) || !fits(u, u_offset)
    {
        return Err(bad(format!("gated activation of {rows} x {n} over {:?} / {:?}", g.dims(), u.dims())));
    }
    let dev = cuda_device(g)?;
    let stream = dev.cuda_stream();
    // SAFETY: every element is written by the kernel.
    let out = unsafe { Tensor::empty((1, rows, n), DType::F32, g.device())? };
    let ga = address(g, &stream)? + (g_offset * 4) as u64;
    let ua = address(u, &stream)? + (u_offset * 4) as u64;
    let oa = address(&out, &stream)?;
    let (rs, n_i, rows_i) = (row_stride as i32, n as i32, rows as i32);
    let func = dev.get_or_load_custom_func("tg_glu_f32", MODULE, PTX)?;
    let mut b = func.builder();
    b.arg(&ga).arg(&ua).arg(&rs).arg(&n_i).arg(&rows_i).arg(&mode).arg(&alpha).arg(&limit).arg(&oa);
    let blocks = (rows * n).div_ceil(256) as u32;
    // SAFETY: the arguments match tg_glu_f32; the inputs cover every index (checked).
    unsafe { b.launch(LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }) }
        .map_err(|e| bad(format!("gated activation launch: {e}")))?;
    Ok(out)
}

/// `x + o` and the RMS norm of that sum with weight `w`, per last-axis row, in one
/// launch: returns `(x + o, norm(x + o) · w)`, each shaped as `x`.
///
/// # Errors
/// On a shape or type mismatch; a failed launch.
pub(crate) fn add_rms_norm(x: &Tensor, o: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    let n = x.dims().last().copied().unwrap_or(0);
    if x.dims() != o.dims()
        || w.elem_count() != n
        || n == 0
        || [x, o, w].iter().any(|t| t.dtype() != DType::F32 || !t.is_contiguous())
    {
        return Err(bad(format!("residual norm of {:?} + {:?} with {:?}", x.dims(), o.dims(), w.dims())));
    }
    let dev = cuda_device(x)?;
    let stream = dev.cuda_stream();
    // SAFETY: every element of both is written by the kernel.
    let (sum, h) = unsafe { (x.empty_like()?, x.empty_like()?) };
    let (xa, oa, wa) = (address(x, &stream)?, address(o, &stream)?, address(w, &stream)?);
    let (sa, ha) = (address(&sum, &stream)?, address(&h, &stream)?);
    let n_i = n as i32;
    let func = dev.get_or_load_custom_func("tg_add_rms_norm_f32", MODULE, PTX)?;
    let mut b = func.builder();
    b.arg(&xa).arg(&oa).arg(&wa).arg(&eps).arg(&n_i).arg(&sa).arg(&ha);
    let rows = (x.elem_count() / n) as u32;
    // SAFETY: the arguments match tg_add_rms_norm_f32; all three hold `rows` rows of n.
    unsafe { b.launch(LaunchConfig { grid_dim: (rows, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }) }
        .map_err(|e| bad(format!("residual norm launch: {e}")))?;
    Ok((sum, h))
}

/// Shares of the keys per query head: enough blocks for ~264 (two per multiprocessor
/// of an H100/H200), at least 64 cache rows per share.
fn shares(n_head: usize, cap: usize) -> usize {
    264usize.div_ceil(n_head.max(1)).clamp(1, (cap / 64).max(1))
}

/// Overwrite the contiguous u32 tensor `t` with `values` (same length), in place: the
/// inputs of a captured graph live at fixed addresses.
///
/// # Errors
/// On a length or type mismatch, or a failed copy.
pub(crate) fn write_u32(t: &Tensor, values: &[u32]) -> Result<()> {
    t.inplace_op1(&Upload::U32(values))?;
    Ok(())
}

/// As [`write_u32`] for an f32 tensor.
///
/// # Errors
/// As [`write_u32`].
pub(crate) fn write_f32(t: &Tensor, values: &[f32]) -> Result<()> {
    t.inplace_op1(&Upload::F32(values))?;
    Ok(())
}

/// A host-to-device copy into an existing tensor, as a candle in-place op.
enum Upload<'a> {
    U32(&'a [u32]),
    F32(&'a [f32]),
}

impl candle_core::InplaceOp1 for Upload<'_> {
    fn name(&self) -> &'static str {
        "toolgate-upload"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &candle_core::Layout) -> candle_core::Result<()> {
        candle_core::bail!("toolgate-upload runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        storage: &mut candle_core::cuda_backend::CudaStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        let Some((a, b)) = layout.contiguous_offsets() else { candle_core::bail!("upload into a strided tensor") };
        let dev = storage.device.clone();
        match self {
            Upload::U32(v) => {
                if v.len() != b - a {
                    candle_core::bail!("upload of {} values into {}", v.len(), b - a);
                }
                let slice = storage.as_cuda_slice_mut::<u32>()?;
                dev.memcpy_htod(*v, &mut slice.slice_mut(a..b))
            }
            Upload::F32(v) => {
                if v.len() != b - a {
                    candle_core::bail!("upload of {} values into {}", v.len(), b - a);
                }
                let slice = storage.as_cuda_slice_mut::<f32>()?;
                dev.memcpy_htod(*v, &mut slice.slice_mut(a..b))
            }
        }
    }
}

/// The device address of each tensor's storage (see `super::buffer_ids`).
///
/// # Errors
/// If a tensor is not an f32/u32 CUDA tensor.
pub(crate) fn buffer_ids(tensors: &[&Tensor]) -> Result<Vec<u64>> {
    let Some(first) = tensors.first() else { return Ok(Vec::new()) };
    let stream = cuda_device(first)?.cuda_stream();
    tensors.iter().map(|t| address(t, &stream)).collect()
}

const MATVEC_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/matvec.ptx"));
const MATVEC_MODULE: &str = "toolgate_matvec";
/// Threads of a matvec block: `MV_WARPS` (matvec.cu) warps, one output row each.
const MATVEC_THREADS: u32 = 128;
/// The most activation rows one matvec launch takes (`tg_matvec_1` … `tg_matvec_8`).
pub(crate) const MATVEC_MAX_ROWS: usize = 8;

/// Chunks a lane of the single-row matvec keeps in flight (`TOOLGATE_CUDA_MATVEC_UNROLL`:
/// 1, the default, 2 or 4 — the kernels `tg_matvec_1`, `tg_matvec_1_u2`,
/// `tg_matvec_1_u4`, sized for 6, 4 and 3 thread blocks per multiprocessor): more
/// loads in flight per lane against fewer lanes per multiprocessor.
fn matvec_unroll() -> usize {
    static U: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *U.get_or_init(|| std::env::var("TOOLGATE_CUDA_MATVEC_UNROLL").ok().and_then(|v| v.parse().ok()).unwrap_or(1))
}

/// ggml's id of a weight type `kernels/matvec.cu` reads (its `T_*`), and what a row's
/// width must be a multiple of (its block; for F32/F16 the kernel's 8-weight chunk);
/// `None` for the others (Q2_K, Q3_K, BF16…: candle's matmul runs them).
pub(crate) fn matvec_type(dtype: GgmlDType) -> Option<(i32, usize)> {
    Some(match dtype {
        GgmlDType::F32 => (0, 8),
        GgmlDType::F16 => (1, 8),
        GgmlDType::Q4_0 => (2, 32),
        GgmlDType::Q4_1 => (3, 32),
        GgmlDType::Q5_0 => (6, 32),
        GgmlDType::Q5_1 => (7, 32),
        GgmlDType::Q8_0 => (8, 32),
        GgmlDType::Q4K => (12, 256),
        GgmlDType::Q5K => (13, 256),
        GgmlDType::Q6K => (14, 256),
        _ => return None,
    })
}

/// `x · Wᵀ (+ b)` for up to three weights of one input width read in their GGUF
/// layout (`kernels/matvec.cu`), outputs side by side: `x` `(…, k)` contiguous f32 of
/// at most [`MATVEC_MAX_ROWS`] rows, each weight `(n_j, k)` of a type
/// [`matvec_type`] reads, on `x`'s device. With `glu` (`mode, alpha, limit` as
/// [`glu`]) the two weights are gate and up of one width `n` and the result is
/// `act(x · gateᵀ + b_g) · (x · upᵀ + b_u)`, `(…, n)`; otherwise `(…, Σ n_j)`.
///
/// Cost: one launch; reads each weight once for all rows; one output allocation.
///
/// # Errors
/// [`Error::InvalidParameter`] on a shape, type or device mismatch (nothing is
/// launched); a driver error if the launch fails.
pub(crate) fn matvec(
    x: &Tensor,
    weights: &[(&QTensor, Option<&Tensor>)],
    glu: Option<(i32, f32, f32)>,
) -> Result<Tensor> {
    let k = x.dims().last().copied().unwrap_or(0);
    let rows = x.elem_count().checked_div(k).unwrap_or(0);
    let mut parts = Vec::with_capacity(3);
    for (w, b) in weights {
        let (n, wk) = w.shape().dims2()?;
        let Some((t, block)) = matvec_type(w.dtype()) else {
            return Err(bad(format!("matvec of a {:?} weight", w.dtype())));
        };
        if wk != k || !k.is_multiple_of(block) || b.is_some_and(|b| b.elem_count() != n || b.dtype() != DType::F32) {
            return Err(bad(format!("matvec of a ({n}, {wk}) weight by activations {:?}", x.dims())));
        }
        if !w.device().same_device(x.device()) {
            return Err(bad("matvec weight on another device".into()));
        }
        parts.push((*w, *b, t, n));
    }
    let gate_up = glu.is_some();
    if parts.is_empty()
        || parts.len() > 3
        || (gate_up && (parts.len() != 2 || parts[0].3 != parts[1].3))
        || rows == 0
        || rows > MATVEC_MAX_ROWS
        || x.dtype() != DType::F32
        || !x.is_contiguous()
    {
        return Err(bad(format!("matvec of {} weights by activations {:?}", parts.len(), x.dims())));
    }
    let dev = cuda_device(x)?;
    let stream = dev.cuda_stream();
    if !address(x, &stream)?.is_multiple_of(16) {
        // The kernel reads activations four floats at a time: a view at an odd offset
        // is copied first.
        return matvec(&x.copy()?, weights, glu);
    }
    let n_out = if gate_up { parts[0].3 } else { parts.iter().map(|p| p.3).sum() };
    let mut dims = x.dims().to_vec();
    *dims.last_mut().expect("k > 0") = n_out;
    // SAFETY: the kernel writes every element.
    let out = unsafe { Tensor::empty(dims, DType::F32, x.device())? };
    let (xa, ya) = (address(x, &stream)?, address(&out, &stream)?);
    let mut w = [0u64; 3];
    let mut b = [0u64; 3];
    let mut t = [0i32; 3];
    let mut n = [0i32; 3];
    for (j, (qt, bias, ty, rows_j)) in parts.iter().enumerate() {
        w[j] = qt.device_ptr()? as u64;
        b[j] = bias.map_or(Ok(0), |b| address(b, &stream))?;
        (t[j], n[j]) = (*ty, *rows_j as i32);
    }
    let (mode, alpha, limit) = glu.unwrap_or((-1, 0.0, 0.0));
    let (k_i, ys) = (k as i32, n_out as i32);
    let name = match (rows, matvec_unroll()) {
        (1, u @ (2 | 4)) => format!("tg_matvec_1_u{u}"),
        _ => format!("tg_matvec_{rows}"),
    };
    let func = dev.get_or_load_custom_func(&name, MATVEC_MODULE, MATVEC_PTX)?;
    let mut lb = func.builder();
    lb.arg(&xa).arg(&k_i).arg(&w[0]).arg(&w[1]).arg(&w[2]).arg(&t[0]).arg(&t[1]).arg(&t[2]);
    lb.arg(&n[0]).arg(&n[1]).arg(&n[2]).arg(&b[0]).arg(&b[1]).arg(&b[2]).arg(&ya).arg(&ys);
    lb.arg(&mode).arg(&alpha).arg(&limit);
    let blocks = (n_out as u32).div_ceil(MATVEC_THREADS / 32);
    // SAFETY: the arguments match tg_matvec_N's signature; each weight holds n_j rows of
    // k inputs in its type's layout (its QTensor's shape), the biases n_j floats, x
    // `rows` rows of k, and `out` rows × n_out.
    unsafe {
        lb.launch(LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (MATVEC_THREADS, 1, 1), shared_mem_bytes: 0 })
    }
    .map_err(|e| bad(format!("matvec launch: {e}")))?;
    Ok(out)
}

/// The most experts, and the most used per token, `tg_moe_route` holds
/// (`MOE_MAX_EXPERTS`, `MOE_MAX_USED` in matvec.cu).
const MOE_MAX_EXPERTS: usize = 512;
const MOE_MAX_USED: usize = 32;

/// The device tables of a mixture's experts for [`moe_decode`] (`super::MoeTables`):
/// each expert's gate, up and down weight addresses (and bias addresses), uploaded once
/// at load. `experts[e]` is expert e's `(gate, up, down)` weights and biases; every
/// expert's projection must have one type the matvec reads and one shape, and `used`
/// (experts per token, from the file) must fit the routing kernel.
///
/// # Errors
/// [`Error::InvalidParameter`] if they do not (the caller keeps the host routing).
pub(crate) fn moe_tables(experts: &[[(&QTensor, Option<&Tensor>); 3]], used: usize) -> Result<super::MoeTables> {
    // As the host routes: more used than there are experts is all of them.
    let used = used.min(experts.len());
    if experts.len() > MOE_MAX_EXPERTS || used == 0 || used > MOE_MAX_USED {
        return Err(bad(format!(
            "{used} of {} experts (the routing kernel takes {MOE_MAX_USED} of {MOE_MAX_EXPERTS})",
            experts.len()
        )));
    }
    let first = experts.first().ok_or_else(|| bad("no experts".into()))?;
    let dev = match first[0].0.device() {
        candle_core::Device::Cuda(d) => d,
        _ => return Err(bad("experts not on a CUDA device".into())),
    };
    let stream = dev.cuda_stream();
    let mut types = [0i32; 3];
    let mut shapes = [(0usize, 0usize); 3];
    for j in 0..3 {
        let (t, _) =
            matvec_type(first[j].0.dtype()).ok_or_else(|| bad(format!("experts of {:?}", first[j].0.dtype())))?;
        types[j] = t;
        shapes[j] = first[j].0.shape().dims2()?;
    }
    let mut tabs: [Vec<i64>; 3] = Default::default();
    let mut btabs: [Vec<i64>; 3] = Default::default();
    for ex in experts {
        for j in 0..3 {
            let (w, b) = ex[j];
            if w.dtype() != first[j].0.dtype()
                || w.shape().dims2()? != shapes[j]
                || !w.device().same_device(&first[j].0.device())
            {
                return Err(bad("experts differ in type, shape or device".into()));
            }
            tabs[j].push(w.device_ptr()? as i64);
            btabs[j].push(match b {
                Some(b) if b.dtype() == DType::F32 && b.elem_count() == shapes[j].0 => address(b, &stream)? as i64,
                Some(_) => return Err(bad("an expert bias that is not f32 of its projection's width".into())),
                None => 0,
            });
        }
    }
    let ((n_ff, n_embd), (up_n, up_k), (down_n, down_k)) = (shapes[0], shapes[1], shapes[2]);
    if (up_n, up_k) != (n_ff, n_embd) || (down_n, down_k) != (n_embd, n_ff) {
        return Err(bad(format!("expert shapes {shapes:?}")));
    }
    let device = first[0].0.device();
    let table = |v: &[i64]| Tensor::new(v, &device);
    let bias_table = |v: &[i64]| -> Result<Option<Tensor>> {
        Ok(match v.iter().any(|&a| a != 0) {
            true => Some(table(v)?),
            false => None,
        })
    };
    Ok(super::MoeTables {
        weights: [table(&tabs[0])?, table(&tabs[1])?, table(&tabs[2])?],
        biases: [bias_table(&btabs[0])?, bias_table(&btabs[1])?, bias_table(&btabs[2])?],
        types,
        n_ff,
        n_embd,
        experts: experts.len(),
    })
}

/// One row's mixture of experts on the device: route by `logits` `(…, n_expert)` f32
/// (`route`), run the chosen experts' gate/up with `glu` on `h` `(…, n_embd)` and sum
/// their down projections with the routing weights → `(1, 1, n_embd)`.
///
/// Cost: three launches; reads the chosen experts' weights once.
///
/// # Errors
/// On a shape or type mismatch; a failed launch.
pub(crate) fn moe_decode(
    tables: &super::MoeTables,
    logits: &Tensor,
    h: &Tensor,
    route: &super::MoeRoute<'_>,
    (mode, alpha, limit): (i32, f32, f32),
) -> Result<Tensor> {
    let (n, used) = (tables.experts, route.used.min(tables.experts));
    if logits.elem_count() != n
        || h.elem_count() != tables.n_embd
        || [logits, h].iter().any(|t| t.dtype() != DType::F32 || !t.is_contiguous())
        || n > MOE_MAX_EXPERTS
        || used == 0
        || used > MOE_MAX_USED
        || route.selection_bias.is_some_and(|b| b.elem_count() != n || b.dtype() != DType::F32)
    {
        return Err(bad(format!("device routing of {n} experts ({used} used) for {:?}", h.dims())));
    }
    let dev = cuda_device(h)?;
    let stream = dev.cuda_stream();
    if !address(h, &stream)?.is_multiple_of(16) {
        return moe_decode(tables, logits, &h.copy()?, route, (mode, alpha, limit));
    }
    let device = h.device();
    // SAFETY: every element of each is written by the kernels below before it is read.
    let (ids, weights, act, y) = unsafe {
        (
            Tensor::empty(used, DType::U32, device)?,
            Tensor::empty(used, DType::F32, device)?,
            Tensor::empty((used, tables.n_ff), DType::F32, device)?,
            Tensor::empty((1, 1, tables.n_embd), DType::F32, device)?,
        )
    };
    let a = |t: &Tensor| address(t, &stream);
    let opt = |t: Option<&Tensor>| t.map_or(Ok(0u64), |t| address(t, &stream));
    let (la, ha, ia, wa, aa, ya) = (a(logits)?, a(h)?, a(&ids)?, a(&weights)?, a(&act)?, a(&y)?);
    let [gt, ut, dt] = [a(&tables.weights[0])?, a(&tables.weights[1])?, a(&tables.weights[2])?];
    let [gb, ub, db] =
        [opt(tables.biases[0].as_ref())?, opt(tables.biases[1].as_ref())?, opt(tables.biases[2].as_ref())?];
    let sb = opt(route.selection_bias)?;
    let (n_i, used_i, gating, norm) = (n as i32, used as i32, route.sigmoid as i32, route.norm_topk as i32);
    let (k_i, ff_i, embd_i) = (tables.n_embd as i32, tables.n_ff as i32, tables.n_embd as i32);
    let f = |name: &str| dev.get_or_load_custom_func(name, MATVEC_MODULE, MATVEC_PTX);

    let (route_f, gate_up_f, down_f) = (f("tg_moe_route")?, f("tg_moe_gate_up")?, f("tg_moe_down")?);
    let mut b = route_f.builder();
    b.arg(&la).arg(&n_i).arg(&used_i).arg(&gating).arg(&sb).arg(&norm).arg(&route.scale).arg(&ia).arg(&wa);
    // SAFETY: the arguments match tg_moe_route; n <= 512 and used <= 32 (its tables).
    unsafe { b.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 }) }
        .map_err(|e| bad(format!("expert routing launch: {e}")))?;

    let mut b = gate_up_f.builder();
    b.arg(&ha).arg(&k_i).arg(&gt).arg(&ut).arg(&tables.types[0]).arg(&tables.types[1]).arg(&gb).arg(&ub);
    b.arg(&ff_i).arg(&ia).arg(&mode).arg(&alpha).arg(&limit).arg(&aa);
    let grid = ((tables.n_ff as u32).div_ceil(MATVEC_THREADS / 32), used as u32, 1);
    // SAFETY: the tables hold n_expert weights of (n_ff, n_embd) in their types; the ids
    // the routing wrote are below n_expert; `act` holds used × n_ff.
    unsafe { b.launch(LaunchConfig { grid_dim: grid, block_dim: (MATVEC_THREADS, 1, 1), shared_mem_bytes: 0 }) }
        .map_err(|e| bad(format!("expert gate/up launch: {e}")))?;

    let mut b = down_f.builder();
    b.arg(&aa).arg(&ff_i).arg(&dt).arg(&tables.types[2]).arg(&db).arg(&embd_i).arg(&ia).arg(&wa).arg(&used_i).arg(&ya);
    let blocks = (tables.n_embd as u32).div_ceil(MATVEC_THREADS / 32);
    // SAFETY: as above, for the (n_embd, n_ff) down weights; `y` holds n_embd.
    unsafe {
        b.launch(LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (MATVEC_THREADS, 1, 1), shared_mem_bytes: 0 })
    }
    .map_err(|e| bad(format!("expert down launch: {e}")))?;
    Ok(y)
}
