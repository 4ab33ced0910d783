//! Architectures on candle behind one [`Model`] trait, device choice and KV cache.
//!
//! All supported architectures (see `arch::SUPPORTED`) run on the generic
//! `decoder::Decoder`; per-family differences live in `arch::spec_for`, and every
//! projection goes through the `qlinear::QLinear` seam.
//!
//! ```no_run
//! use toolgate::gguf::GgufFile;
//! use toolgate::model::{load, DeviceChoice, LoadOptions};
//! let gguf = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let mut model = load(&gguf, &LoadOptions::default())?;
//! let logits = model.forward(&[1, 2, 3])?; // logits of the last position
//! assert_eq!(logits.len(), model.vocab_size());
//! # Ok::<(), toolgate::Error>(())
//! ```

pub(crate) mod arch;
mod attention;
pub(crate) mod config;
mod cuda;
pub(crate) mod decoder;
pub mod kv_cache;
pub(crate) mod qlinear;
mod rowwise;

use candle_core::Device;

use crate::gguf::GgufFile;
use crate::{Error, Result};

/// A causal language model with a KV cache.
pub trait Model: Send {
    /// Feed `tokens` after the cached positions and return the next-token logits of the
    /// last one (length [`Model::vocab_size`]).
    ///
    /// # Errors
    /// [`Error::ContextOverflow`] when the cache would exceed [`Model::context_length`].
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// Feed `tokens` as [`Model::forward`] does and return the logits of the last `n`
    /// positions, oldest first: entry `i` predicts the token after `tokens[len - n + i]`.
    /// Scores a known continuation in one batched pass (teacher forcing, prompt
    /// log-probabilities) instead of one call per token.
    ///
    /// Cost: one prefill of `tokens` plus `n` rows of the output head (`n · vocab`
    /// floats returned).
    ///
    /// # Errors
    /// As [`Model::forward`]; [`Error::InvalidParameter`] if `n` is 0 or exceeds
    /// `tokens.len()`.
    fn forward_tail(&mut self, tokens: &[u32], n: usize) -> Result<Vec<Vec<f32>>>;
    /// Feed `tokens` as [`Model::forward`] does and return, for each position `i` but
    /// the last, the logits of only the ids `candidates[i]` (in that order) for the
    /// token after `tokens[i]`, and the whole logits after the last position. Scores a
    /// draft whose positions each allow a few tokens (jump-forward decoding) without a
    /// full output-head row per position.
    ///
    /// Cost: one prefill of `tokens`, one output-head row, and a dot product per
    /// candidate (the default goes through [`Model::forward_tail`]: a row per position).
    ///
    /// # Errors
    /// As [`Model::forward`]; [`Error::InvalidParameter`] unless `candidates` has an
    /// entry per position but the last, or for an id outside the vocabulary.
    fn forward_scored(&mut self, tokens: &[u32], candidates: &[Vec<u32>]) -> Result<(Vec<Vec<f32>>, Vec<f32>)> {
        check_candidates(tokens.len(), candidates, self.vocab_size())?;
        let mut rows = self.forward_tail(tokens, tokens.len())?;
        let last = rows.pop().unwrap_or_default();
        let scored = rows.iter().zip(candidates).map(|(row, ids)| ids.iter().map(|&id| row[id as usize]).collect());
        Ok((scored.collect(), last))
    }
    /// Positions currently cached.
    fn position(&self) -> usize;
    /// Drop cached positions `len..` (0 clears the cache).
    fn truncate(&mut self, len: usize);
    /// Maximum positions (prompt + generated).
    fn context_length(&self) -> usize;
    /// Width of the logits.
    fn vocab_size(&self) -> usize;
    /// `general.architecture`.
    fn architecture(&self) -> &str;
    /// Independent sequences this model holds (each its own KV cache and position);
    /// 1 unless [`Model::set_slots`] asked for more.
    fn slots(&self) -> usize {
        1
    }
    /// Hold `n` independent sequences (see `decoder::Decoder::set_slots`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] from models that hold one sequence only (`n > 1`).
    fn set_slots(&mut self, n: usize) -> Result<()> {
        match n {
            0 | 1 => Ok(()),
            _ => Err(Error::InvalidParameter { name: "slots", reason: "this model holds one sequence".into() }),
        }
    }
    /// Make `slot` the sequence [`Model::forward`], [`Model::forward_tail`],
    /// [`Model::position`] and [`Model::truncate`] act on.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `slot >= slots()`.
    fn select_slot(&mut self, slot: usize) -> Result<()> {
        match slot {
            0 => Ok(()),
            _ => Err(Error::InvalidParameter { name: "slot", reason: format!("{slot} of 1 slot") }),
        }
    }
    /// Decode one token for each of several sequences in one pass: `batch[i] = (slot,
    /// token)`; returns row `i`'s next-token logits for each (see
    /// `decoder::Decoder::forward_batch`).
    ///
    /// # Errors
    /// As `decoder::Decoder::forward_batch`; the default (one sequence) takes a batch
    /// of one token of slot 0.
    fn forward_batch(&mut self, batch: &[(usize, u32)]) -> Result<Vec<Vec<f32>>> {
        match batch {
            [(0, t)] => Ok(vec![self.forward(&[*t])?]),
            _ => Err(Error::InvalidParameter { name: "batch", reason: "this model holds one sequence".into() }),
        }
    }
    /// The current sequence will not ask for another decode step until its next
    /// prefill: a model that batches sequences stops waiting for it. Nothing for others.
    fn finish_sequence(&mut self) {}
}

impl Model for decoder::Decoder {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let logits = decoder::Decoder::forward(self, tokens)?;
        Ok(logits.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?)
    }
    fn forward_tail(&mut self, tokens: &[u32], n: usize) -> Result<Vec<Vec<f32>>> {
        let logits = decoder::Decoder::forward_tail(self, tokens, n)?;
        Ok(logits.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?)
    }
    fn forward_scored(&mut self, tokens: &[u32], candidates: &[Vec<u32>]) -> Result<(Vec<Vec<f32>>, Vec<f32>)> {
        let (scored, last) = decoder::Decoder::forward_scored(self, tokens, candidates)?;
        Ok((scored, last.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?))
    }
    fn position(&self) -> usize {
        decoder::Decoder::position(self)
    }
    fn truncate(&mut self, len: usize) {
        decoder::Decoder::truncate(self, len)
    }
    fn context_length(&self) -> usize {
        self.max_context()
    }
    fn vocab_size(&self) -> usize {
        decoder::Decoder::vocab_size(self)
    }
    fn architecture(&self) -> &str {
        self.spec().name
    }
    fn slots(&self) -> usize {
        decoder::Decoder::slots(self)
    }
    fn set_slots(&mut self, n: usize) -> Result<()> {
        decoder::Decoder::set_slots(self, n);
        Ok(())
    }
    fn select_slot(&mut self, slot: usize) -> Result<()> {
        decoder::Decoder::select_slot(self, slot)
    }
    fn forward_batch(&mut self, batch: &[(usize, u32)]) -> Result<Vec<Vec<f32>>> {
        let logits = decoder::Decoder::forward_batch(self, batch)?;
        Ok(logits.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?)
    }
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// CPU, all cores (rayon's pool; set `RAYON_NUM_THREADS` to limit).
    #[default]
    Cpu,
    /// CUDA device `n` (needs the `cuda` feature).
    Cuda(usize),
    /// Metal (needs the `metal` feature).
    Metal,
}

impl std::str::FromStr for DeviceChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "metal" => Ok(Self::Metal),
            "cuda" => Ok(Self::Cuda(0)),
            s => match s.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
                Some(n) => Ok(Self::Cuda(n)),
                None => Err(Error::Device { device: s.into(), reason: "expected cpu, cuda, cuda:N or metal".into() }),
            },
        }
    }
}

impl std::fmt::Display for DeviceChoice {
    /// `cpu`, `cuda:N` or `metal` (what `DeviceChoice::from_str` reads back).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Metal => write!(f, "metal"),
        }
    }
}

impl DeviceChoice {
    /// Open the device.
    ///
    /// # Errors
    /// [`Error::Device`] if the feature is not compiled in or no device is present.
    pub fn open(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(n) => {
                if !cfg!(feature = "cuda") {
                    return Err(Error::Device {
                        device: format!("cuda:{n}"),
                        reason: "built without the `cuda` feature".into(),
                    });
                }
                let device = Device::new_cuda(n)
                    .map_err(|e| Error::Device { device: format!("cuda:{n}"), reason: first_line(&e) })?;
                cuda_matmul_from_env()?;
                Ok(device)
            }
            Self::Metal => {
                if !cfg!(feature = "metal") {
                    return Err(Error::Device {
                        device: "metal".into(),
                        reason: "built without the `metal` feature".into(),
                    });
                }
                Device::new_metal(0).map_err(|e| Error::Device { device: "metal".into(), reason: first_line(&e) })
            }
        }
    }
}

/// How quantized weights are multiplied on CUDA, from `TOOLGATE_CUDA_MATMUL`:
/// `quantized` (default: candle's MMQ/MMVQ kernels, which round the activations to
/// 8 bits per block as llama.cpp's CUDA backend does) or `f32` (the weights are
/// dequantized and multiplied in f32: activations keep full precision, at a cost in
/// speed). The choice is process-wide.
///
/// # Errors
/// [`Error::Device`] for any other value.
fn cuda_matmul_from_env() -> Result<()> {
    let f32_matmul = match std::env::var("TOOLGATE_CUDA_MATMUL").as_deref() {
        Err(_) | Ok("quantized") => false,
        Ok("f32") => true,
        Ok(other) => {
            return Err(Error::Device {
                device: "cuda".into(),
                reason: format!("TOOLGATE_CUDA_MATMUL={other}: expected quantized or f32"),
            })
        }
    };
    #[cfg(feature = "cuda")]
    candle_core::quantized::cuda::set_force_dmmv(f32_matmul);
    #[cfg(not(feature = "cuda"))]
    let _ = f32_matmul; // the switch exists only in CUDA builds
    Ok(())
}

/// The arguments of [`Model::forward_scored`] for `t` positions and logits `vocab`
/// wide: a candidate list per position but the last, every id inside the vocabulary.
/// Checked before anything is fed.
///
/// # Errors
/// [`Error::InvalidParameter`] naming what is wrong.
pub(crate) fn check_candidates(t: usize, candidates: &[Vec<u32>], vocab: usize) -> Result<()> {
    if t == 0 || candidates.len() + 1 != t {
        return Err(Error::InvalidParameter {
            name: "candidates",
            reason: format!("{} candidate lists for {t} positions (one per position but the last)", candidates.len()),
        });
    }
    match candidates.iter().flatten().find(|&&id| id as usize >= vocab) {
        Some(bad) => {
            Err(Error::InvalidParameter { name: "candidates", reason: format!("token id {bad} >= vocab {vocab}") })
        }
        None => Ok(()),
    }
}

/// A candle error's message without the backtrace candle appends to it.
fn first_line(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// Options for [`load`].
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Device to run on.
    pub device: DeviceChoice,
    /// Context window to allocate (prompt + generated tokens); `None` uses
    /// `min(training context, 8192)`.
    pub context_length: Option<usize>,
    /// How the KV cache stores keys and values.
    pub kv_cache: KvCacheType,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { device: DeviceChoice::Cpu, context_length: None, kv_cache: KvCacheType::default() }
    }
}

/// The element type of the KV cache.
///
/// `F32` (the default) keeps every key and value as computed. `F16` halves the cache's
/// memory (a 7B model's 32k-token cache: 1.8 GB instead of 3.7): keys and values are
/// rounded to f16 once, when stored, and the attention kernels widen them exactly as
/// they load them, so each decode step reads half the bytes. A 6.4k-token prompt
/// (`BENCHMARKS.md`, "Long prompts"): decode 1.5–2.3× the f32 cache's on SmolLM2 and
/// 1.2× on Qwen2.5-Coder-0.5B, peak RSS 0.68× (SmolLM2), but that prompt's prefill
/// 0.89–0.92× (its attention is compute-bound, and every load then converts). It
/// applies on the CPU with toolgate's kernels; other devices, and
/// `TOOLGATE_KERNELS=candle`, keep `F32`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KvCacheType {
    /// 16-bit floats: half the memory, faster long-context decode, slower long prefill.
    F16,
    /// 32-bit floats.
    #[default]
    F32,
}

/// The default context window when none is asked for.
pub const DEFAULT_CONTEXT: usize = 8192;

/// Load the model in `gguf`.
///
/// # Errors
/// [`Error::UnsupportedArchitecture`] for an architecture not in `arch::SUPPORTED`;
/// metadata, tensor and device errors as they occur.
pub fn load(gguf: &GgufFile, opts: &LoadOptions) -> Result<Box<dyn Model>> {
    let arch_name = gguf.architecture()?;
    let spec = arch::spec_for(arch_name).ok_or_else(|| Error::UnsupportedArchitecture {
        path: gguf.path().to_path_buf(),
        arch: arch_name.to_string(),
        supported: arch::SUPPORTED.join(", "),
    })?;
    let device = opts.device.open()?;
    let ctx = opts.context_length.unwrap_or(DEFAULT_CONTEXT);
    let kv = match opts.kv_cache {
        KvCacheType::F16 if device.is_cpu() && crate::kernels::enabled() => candle_core::DType::F16,
        _ => candle_core::DType::F32,
    };
    Ok(Box::new(decoder::Decoder::load(gguf, spec, &device, ctx)?.with_kv_dtype(kv)))
}
