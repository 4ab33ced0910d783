//! The logits pipeline: constraint mask → penalties → temperature → top-k → top-p →
//! min-p → seeded draw.
//!
//! A [`Sampler`] owns its random state, so the same seed and the same logits give the
//! same tokens. `temperature == 0` is greedy (argmax after mask and penalties).
//!
//! ```
//! use toolgate::grammar::TokenMask;
//! use toolgate::sampling::{Sampler, SamplingParams};
//! let mut s = Sampler::new(SamplingParams::greedy())?;
//! let mut logits = vec![0.1, 2.0, 0.3];
//! assert_eq!(s.sample(&mut logits, None)?, 1);
//! let mut mask = TokenMask::new(3);
//! mask.allow(2);
//! let mut logits = vec![0.1, 2.0, 0.3];
//! assert_eq!(s.sample(&mut logits, Some(&mask))?, 2);
//! # Ok::<(), toolgate::Error>(())
//! ```

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::grammar::TokenMask;
use crate::{Error, Result};

/// Sampling parameters. The defaults are greedy decoding with no penalties.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; `0` means greedy.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (`0` = off).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `p` (`1.0` = off).
    pub top_p: f32,
    /// Drop tokens below `min_p × p(max)` (`0` = off).
    pub min_p: f32,
    /// Divide positive / multiply negative logits of recently seen tokens (`1.0` = off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    /// Subtract from logits of tokens seen at least once (OpenAI semantics).
    pub presence_penalty: f32,
    /// Subtract `count × frequency_penalty` from logits of seen tokens.
    pub frequency_penalty: f32,
    /// RNG seed: the same seed gives the same output.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

impl SamplingParams {
    /// Greedy decoding, no penalties.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            penalty_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }

    /// Check ranges.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the first bad parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, reason: &str| Err(Error::InvalidParameter { name, reason: reason.into() });
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad("temperature", "must be a finite number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", "must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", "must be in [0, 1]");
        }
        if !self.repeat_penalty.is_finite() || self.repeat_penalty <= 0.0 {
            return bad("repeat_penalty", "must be a finite number > 0");
        }
        if !self.presence_penalty.is_finite() || self.presence_penalty.abs() > 2.0 {
            return bad("presence_penalty", "must be in [-2, 2]");
        }
        if !self.frequency_penalty.is_finite() || self.frequency_penalty.abs() > 2.0 {
            return bad("frequency_penalty", "must be in [-2, 2]");
        }
        Ok(())
    }
}

/// Seeded sampler with penalty history.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    history: Vec<u32>,
}

impl Sampler {
    /// A sampler for `params`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `params` fail [`SamplingParams::validate`].
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = StdRng::seed_from_u64(params.seed);
        Ok(Self { params, rng, history: Vec::new() })
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Record a token (prompt or generated) for the penalties.
    pub fn accept(&mut self, token: u32) {
        self.history.push(token);
    }

    /// Choose the next token from `logits` (modified in place), allowing only tokens in
    /// `mask` if given.
    ///
    /// Cost: a few O(vocab) passes (one `exp` per token when sampling); top-k sorts
    /// its `k` candidates, top-p only the tokens above a floor that holds the nucleus.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if the mask allows nothing or every logit is `NaN`/`-inf`.
    pub fn sample(&mut self, logits: &mut [f32], mask: Option<&TokenMask>) -> Result<u32> {
        if let Some(mask) = mask {
            for (i, l) in logits.iter_mut().enumerate() {
                if !mask.is_allowed(i as u32) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        self.apply_penalties(logits);
        let best = argmax(logits).ok_or_else(|| Error::InvalidParameter {
            name: "mask",
            reason: "no token is allowed at this step".into(),
        })?;
        let p = &self.params;
        if p.temperature == 0.0 {
            return Ok(best as u32);
        }
        if p.top_k > 0 {
            return Ok(self.sample_top_k(logits));
        }
        // Unnormalised probabilities in place of the logits, the most likely at 1 (one
        // `exp` per token, read by every pass below).
        let max = logits[best];
        for l in logits.iter_mut() {
            *l = if l.is_finite() { ((*l - max) / p.temperature).exp() } else { 0.0 };
        }
        let weights: &[f32] = logits;
        if p.top_p >= 1.0 {
            // No ranking needed: one draw over the vocabulary in id order (tokens under
            // min-p's floor weigh nothing).
            let w = |x: f32| if x >= p.min_p { x } else { 0.0 };
            let total: f32 = weights.iter().map(|&x| w(x)).sum();
            let mut r = self.rng.random::<f32>() * total;
            for (i, &x) in weights.iter().enumerate() {
                let x = w(x);
                if r < x {
                    return Ok(i as u32);
                }
                r -= x;
            }
            return Ok(best as u32);
        }
        // Top-p: rank only the tokens above a floor whose mass already reaches `top_p` —
        // the nucleus (the most likely tokens until their mass reaches it) lies above it.
        // The floor starts at 2^-8 of the best and drops until it holds enough; the
        // vocabulary is sorted only in the rare case it never does.
        let total: f32 = weights.iter().sum();
        let mut floor = 1.0f32 / 256.0;
        let mut cand: Vec<(u32, f32)> = loop {
            let mass: f32 = weights.iter().filter(|&&w| w >= floor).sum();
            if mass >= p.top_p * total || floor == 0.0 {
                break weights
                    .iter()
                    .enumerate()
                    .map(|(i, &w)| (i as u32, w))
                    .filter(|&(_, w)| w >= floor && w > 0.0)
                    .collect();
            }
            floor = if floor < 1e-30 { 0.0 } else { floor / 256.0 };
        };
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut acc = 0.0;
        let keep = cand.iter().position(|&(_, w)| {
            acc += w;
            acc >= p.top_p * total
        });
        cand.truncate(keep.map_or(cand.len(), |k| k + 1));
        Ok(self.draw_ranked(&cand))
    }

    /// The old-style ranked path for top-k: the `k` best, sorted, then top-p and min-p.
    fn sample_top_k(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let mut cand: Vec<(u32, f32)> =
            logits.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, &l)| (i as u32, l)).collect();
        if p.top_k < cand.len() {
            cand.select_nth_unstable_by(p.top_k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(p.top_k);
        }
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let max = cand[0].1;
        let mut ranked: Vec<(u32, f32)> = cand.iter().map(|&(i, l)| (i, ((l - max) / p.temperature).exp())).collect();
        let sum: f32 = ranked.iter().map(|x| x.1).sum();
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            if let Some(k) = ranked.iter().position(|x| {
                acc += x.1 / sum;
                acc >= p.top_p
            }) {
                ranked.truncate(k + 1);
            }
        }
        self.draw_ranked(&ranked)
    }

    /// Draw from `(token, weight)` sorted by weight, most likely first, after min-p.
    fn draw_ranked(&mut self, ranked: &[(u32, f32)]) -> u32 {
        let floor = ranked[0].1 * self.params.min_p;
        let keep = ranked.iter().take_while(|x| x.1 >= floor).count().max(1);
        let total: f32 = ranked[..keep].iter().map(|x| x.1).sum();
        let mut r = self.rng.random::<f32>() * total;
        for &(id, w) in &ranked[..keep] {
            if r < w {
                return id;
            }
            r -= w;
        }
        ranked[keep - 1].0
    }

    fn apply_penalties(&self, logits: &mut [f32]) {
        let p = &self.params;
        if p.repeat_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 {
            return;
        }
        let start = self.history.len().saturating_sub(p.penalty_last_n);
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in &self.history[start..] {
            *counts.entry(t).or_default() += 1;
        }
        for (&t, &c) in &counts {
            let Some(l) = logits.get_mut(t as usize) else { continue };
            if !l.is_finite() {
                continue;
            }
            if p.repeat_penalty != 1.0 {
                *l = if *l > 0.0 { *l / p.repeat_penalty } else { *l * p.repeat_penalty };
            }
            *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }
}

/// Index of the largest finite value (first on ties), `None` if there is none.
pub fn argmax(xs: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in xs.iter().enumerate() {
        if x.is_nan() || x == f32::NEG_INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i)
}

/// The most alternatives [`log_probs`] reports per token (OpenAI's `top_logprobs` bound).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One generated token's log-probability under the model, with the most likely
/// alternatives at its step.
///
/// The distribution is the model's own: the log-softmax of the raw logits, before
/// penalties, temperature, top-k/top-p/min-p and any constraint mask. A token a grammar
/// forced can therefore have a low log-probability: that is how far the constraint
/// moved the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenLogprob {
    /// The token chosen.
    pub token: u32,
    /// Its natural-log probability (≤ 0).
    pub logprob: f32,
    /// The `k` most likely tokens and their log-probabilities, most likely first (ties
    /// by lower id); empty when `k = 0`.
    pub top: Vec<(u32, f32)>,
}

/// Log-probabilities at one step: write `log_softmax(logits)` into `out` (resized to
/// the vocabulary) and return the `top` most likely `(token, logprob)` pairs, most
/// likely first. Non-finite logits get `-inf`.
///
/// Cost: three passes over the vocabulary and one more for `top > 0`, no allocation
/// beyond `out`'s first growth.
///
/// ```
/// use toolgate::sampling::log_probs;
/// let mut lp = Vec::new();
/// let top = log_probs(&[0.0, 0.0, f32::NEG_INFINITY, 1.0_f32.ln()], 2, &mut lp);
/// assert!((lp[0] - (1.0_f32 / 3.0).ln()).abs() < 1e-6);
/// assert_eq!(lp[2], f32::NEG_INFINITY);
/// assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![0, 1]);
/// ```
pub fn log_probs(logits: &[f32], top: usize, out: &mut Vec<f32>) -> Vec<(u32, f32)> {
    let max = logits.iter().copied().filter(|x| x.is_finite()).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().filter(|x| x.is_finite()).map(|&x| ((x - max) as f64).exp()).sum();
    let lse = max + sum.ln() as f32;
    out.clear();
    out.extend(logits.iter().map(|&x| if x.is_finite() { x - lse } else { f32::NEG_INFINITY }));
    if top == 0 {
        return Vec::new();
    }
    // A sorted list of the best `top` so far: one comparison rejects almost every token.
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
    for (i, &l) in out.iter().enumerate() {
        if best.len() == top && best.last().is_some_and(|w| l <= w.1) {
            continue;
        }
        let at = best.partition_point(|b| b.1 >= l);
        best.insert(at, (i as u32, l));
        best.truncate(top);
    }
    best
}
