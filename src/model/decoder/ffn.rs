//! The feed-forward block of a decoder layer: a gated FFN (gate and up as two
//! projections or stacked as one) or a mixture of experts, and its forward pass on
//! hidden states `(1, t, n_embd)`.

use candle_core::{DType, Tensor, D};

use super::cuda;
use crate::kernels::glu::{glu_rows, OAI_ALPHA, OAI_LIMIT};
use crate::model::arch::{Activation, Gating};
use crate::model::qlinear::QLinear;
use crate::model::rowwise;
use crate::Result;

#[derive(Debug)]
pub(super) enum Ffn {
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
pub(super) struct Moe {
    pub(super) router: QLinear,
    pub(super) gating: Gating,
    /// One gated FFN per expert (gate and up stacked when they can be).
    pub(super) experts: Vec<Ffn>,
    pub(super) used: usize,
    pub(super) norm_topk: bool,
    pub(super) scale: Option<f32>,
    /// Added to the probabilities to choose experts, not to weight them (`exp_probs_b`).
    pub(super) selection_bias: Option<Vec<f32>>,
    /// The expert every token runs (`ffn_*_shexp`).
    pub(super) shared: Option<Box<Ffn>>,
    /// On CUDA: the experts as device tables and `selection_bias` on the device, so a
    /// decode row routes and runs its experts there (`cuda::moe_decode`).
    pub(super) device: Option<(cuda::MoeTables, Option<Tensor>)>,
}

impl Moe {
    /// The device tables of `experts` (each a gated FFN of three projections), `used`
    /// per token, and the selection bias on `device`, when the CUDA kernels can run them
    /// ([`cuda::moe_tables`]).
    ///
    /// # Errors
    /// A failed upload.
    pub(super) fn device_tables(
        experts: &[Ffn],
        used: usize,
        selection_bias: Option<&[f32]>,
        device: &candle_core::Device,
    ) -> Result<Option<(cuda::MoeTables, Option<Tensor>)>> {
        if !device.is_cuda() {
            return Ok(None);
        }
        let mut parts = Vec::with_capacity(experts.len());
        for e in experts {
            let Ffn::GateUp { gate, up, down } = e else { return Ok(None) };
            let [Some(g), Some(u), Some(d)] = [gate, up, down].map(QLinear::cuda_weight) else { return Ok(None) };
            parts.push([g, u, d]);
        }
        let Some(tables) = cuda::moe_tables(&parts, used)? else { return Ok(None) };
        let bias = selection_bias.map(|b| Tensor::new(b, device)).transpose()?;
        Ok(Some((tables, bias)))
    }
}

/// A projection on toolgate's kernels with its bias as plain floats.
type KernelPart<'a> = (&'a crate::kernels::QWeight, Option<Vec<f32>>);

impl Ffn {
    /// Push every projection of this FFN (a mixture's router, experts and shared
    /// expert) onto `out`.
    pub(super) fn linears<'a>(&'a self, out: &mut Vec<&'a QLinear>) {
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
    pub(super) fn gated(gate: QLinear, up: QLinear, down: QLinear) -> Result<Ffn> {
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

/// A feed-forward block on `h` `(1, t, n_embd)` → `(1, t, n_embd)`.
pub(super) fn ffn_forward(ffn: &Ffn, activation: Activation, h: &Tensor) -> Result<Tensor> {
    Ok(match ffn {
        Ffn::GateUp { gate, up, down } => {
            // A few rows on CUDA: gate, up and the activation in one launch.
            if let Some(a) = QLinear::forward_gated(gate, up, activation, h)? {
                return down.forward(&a);
            }
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
                down.forward(&rowwise::glu_cpu(&gu, activation)?.to_dtype(h.dtype())?)?
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
    if let (Some((tables, bias)), 1) = (&moe.device, t) {
        // One row on CUDA: routed and run on the device, no host round trip.
        let route = cuda::MoeRoute {
            used: moe.used,
            sigmoid: matches!(moe.gating, Gating::Sigmoid),
            norm_topk: moe.norm_topk,
            scale: moe.scale.unwrap_or(1.0),
            selection_bias: bias.as_ref(),
        };
        let logits = moe.router.forward(h)?.to_dtype(DType::F32)?;
        let out =
            cuda::moe_decode(tables, &logits, &h.to_dtype(DType::F32)?, &route, activation)?.to_dtype(h.dtype())?;
        return Ok(match &moe.shared {
            Some(shared) => (out + ffn_forward(shared, activation, h)?)?,
            None => out,
        });
    }
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
