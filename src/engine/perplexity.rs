//! Scoring text: perplexity, and agreement with another engine's next-token
//! distributions (KL divergence, same top token) over the same tokens — what
//! llama.cpp's `llama-perplexity` reports, over the same chunks, in the same file
//! format, so either engine can be the other's base.
//!
//! The text is tokenized once (BOS where the model wants one) and cut into chunks of
//! `n_ctx` tokens. Each chunk is evaluated from an empty cache, its first token
//! replaced by BOS where the model uses one, and only its second half is scored (every
//! scored token has at least `n_ctx / 2` tokens of context): `n_ctx - 1 - n_ctx / 2`
//! next-token distributions per chunk.
//!
//! A **base file** ([`BaseWriter`], [`BaseReader`]) is llama.cpp's `--kl-divergence-base`
//! format: `_logits_`, `n_ctx` (u32), `n_vocab`, `n_chunk` (i32), the `n_chunk · n_ctx`
//! evaluated tokens (i32), then per scored position `2 · ⌈n_vocab / 2⌉ + 4` u16s: the
//! f32 `scale` and `min_log_prob` of that row's log-probabilities, then each token's
//! log-probability quantized to 16 bits over the top 16 nats (below that, 0).
//!
//! ```no_run
//! use toolgate::engine::perplexity::{chunk_tokens, score, BaseReader, Scoring};
//! use toolgate::engine::Engine;
//! use toolgate::model::DeviceChoice;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut engine = Engine::load("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", DeviceChoice::Cpu)?;
//! let text = std::fs::read_to_string("corpus.txt")?;
//! let tokens = chunk_tokens(engine.tokenizer(), &text, 512, None)?;
//! let report = score(&mut engine, &tokens, 512, Scoring::default())?;
//! println!("PPL {:.3} ± {:.3}", report.ppl, report.ppl_err);
//!
//! // Against llama.cpp: `llama-perplexity -m … -f corpus.txt -c 512 --kl-divergence-base base.kld`.
//! let mut base = BaseReader::open("base.kld")?;
//! let tokens = base.tokens().to_vec();
//! let report = score(&mut engine, &tokens, base.n_ctx(), Scoring { base: Some(&mut base), save: None })?;
//! let kld = report.kld.unwrap();
//! println!("KLD {:.5}, same top token {:.2}%", kld.mean, 100.0 * kld.same_top);
//! # Ok(()) }
//! ```

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use serde::Serialize;

use super::Engine;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// The magic at the start of a base file.
const MAGIC: &[u8; 8] = b"_logits_";

/// u16s per scored position in a base file: two f32s, then the vocabulary rounded up
/// to an even count.
fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

fn invalid(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidParameter { name, reason: reason.into() }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Tokenize `text` as a raw prompt (BOS where the model wants one) and keep whole
/// chunks of `n_ctx` tokens, at most `chunks` of them.
///
/// # Errors
/// [`Error::InvalidParameter`] (`n_ctx`) when `n_ctx` is below 8 or the text holds
/// fewer than two chunks; tokenizer errors.
pub fn chunk_tokens(tok: &Tokenizer, text: &str, n_ctx: usize, chunks: Option<usize>) -> Result<Vec<u32>> {
    if n_ctx < 8 {
        return Err(invalid("n_ctx", format!("{n_ctx} is too small (at least 8)")));
    }
    let mut tokens = tok.encode_prompt(text, false)?;
    if tokens.len() < 2 * n_ctx {
        return Err(invalid(
            "n_ctx",
            format!("the text is {} tokens: at least two chunks of {n_ctx} are needed", tokens.len()),
        ));
    }
    let n = (tokens.len() / n_ctx).min(chunks.unwrap_or(usize::MAX)).max(1);
    tokens.truncate(n * n_ctx);
    Ok(tokens)
}

/// What [`score`] measures against a base.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct KldReport {
    /// Mean KL divergence of this engine's distribution from the base's, in nats.
    pub mean: f64,
    /// Its standard error.
    pub mean_err: f64,
    /// The 99th percentile of the per-position KL divergences.
    pub p99: f64,
    /// The largest.
    pub max: f64,
    /// Fraction of positions where both put the same token first.
    pub same_top: f64,
    /// Its standard error.
    pub same_top_err: f64,
    /// The base's perplexity over the same positions.
    pub base_ppl: f64,
    /// Root mean square of the difference in the probability of the actual next token.
    pub rms_dp: f64,
}

/// The result of [`score`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PerplexityReport {
    /// Chunks evaluated.
    pub chunks: usize,
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Positions scored: `chunks · (n_ctx - 1 - n_ctx / 2)`, as llama.cpp scores them.
    pub scored: usize,
    /// Perplexity: `exp` of the mean negative log-likelihood of the next token.
    pub ppl: f64,
    /// Its standard error.
    pub ppl_err: f64,
    /// Against a base ([`Scoring::base`]).
    pub kld: Option<KldReport>,
    /// Wall time of the evaluation, in seconds.
    pub seconds: f64,
}

/// Where [`score`] reads a base from and writes one to.
#[derive(Default)]
pub struct Scoring<'a> {
    /// Compare with this base (its tokens must be the ones scored).
    pub base: Option<&'a mut BaseReader>,
    /// Write this engine's distributions as a base.
    pub save: Option<&'a mut BaseWriter>,
}

/// Evaluate `tokens` (whole chunks of `n_ctx`, as [`chunk_tokens`] or
/// [`BaseReader::tokens`] give them) and report perplexity, and with a base the KL
/// divergence and top-token agreement (see the module docs).
///
/// Cost: one prefill of every chunk, plus `n_ctx / 2` output-head rows per chunk and a
/// pass over the vocabulary per scored position.
///
/// # Errors
/// [`Error::InvalidParameter`] when `tokens` is not a whole number of chunks, the
/// chunk is larger than the model's context, or the base's vocabulary size or tokens
/// differ from this model's and `tokens`; model and I/O errors.
pub fn score(engine: &mut Engine, tokens: &[u32], n_ctx: usize, mut scoring: Scoring<'_>) -> Result<PerplexityReport> {
    let started = std::time::Instant::now();
    if n_ctx < 8 || tokens.is_empty() || !tokens.len().is_multiple_of(n_ctx) {
        return Err(invalid("n_ctx", format!("{} tokens are not whole chunks of {n_ctx}", tokens.len())));
    }
    let bos = engine.tokenizer().add_bos().then(|| engine.tokenizer().bos()).flatten();
    let model = engine.model();
    if n_ctx > model.context_length() {
        return Err(invalid("n_ctx", format!("{n_ctx} exceeds the model's context of {}", model.context_length())));
    }
    let n_vocab = model.vocab_size();
    let n_chunk = tokens.len() / n_ctx;
    if let Some(base) = scoring.base.as_deref() {
        if base.n_vocab != n_vocab {
            return Err(invalid("base", format!("its vocabulary is {} tokens, the model's {n_vocab}", base.n_vocab)));
        }
        if base.n_ctx != n_ctx || base.tokens.len() < tokens.len() || base.tokens[..tokens.len()] != *tokens {
            return Err(invalid("base", "it was computed over other tokens or another chunk size"));
        }
    }
    if let Some(save) = scoring.save.as_deref_mut() {
        save.header(n_ctx, n_vocab, tokens)?;
    }
    let first = n_ctx / 2;
    let mut sums = Sums::default();
    let mut klds = Vec::new();
    let mut row = vec![0u16; row_len(n_vocab)];
    for chunk in tokens.chunks(n_ctx) {
        let mut input = chunk.to_vec();
        if let Some(b) = bos {
            input[0] = b;
        }
        model.truncate(0);
        let logits = model.forward_tail(&input, n_ctx - first)?;
        for (j, l) in logits.iter().take(n_ctx - 1 - first).enumerate() {
            let next = chunk[first + j + 1] as usize;
            let lp = LogSoftmax::new(l);
            sums.nll.add(lp.nll(l, next));
            if let Some(save) = scoring.save.as_deref_mut() {
                lp.quantize(l, &mut row);
                save.row(&row)?;
            }
            if let Some(base) = scoring.base.as_deref_mut() {
                base.read_row(&mut row)?;
                let k = compare(&lp, l, &row, next, &mut sums);
                klds.push(k);
            }
        }
    }
    model.truncate(0);
    if let Some(save) = scoring.save.as_deref_mut() {
        save.flush()?;
    }
    let (mean_nll, nll_err) = sums.nll.mean_err();
    let kld = scoring.base.is_some().then(|| {
        klds.sort_by(f64::total_cmp);
        let (mean, mean_err) = sums.kld.mean_err();
        let n = sums.nll.n as f64;
        let same = sums.same_top as f64 / n;
        KldReport {
            mean,
            mean_err,
            p99: klds.get(((klds.len() as f64) * 0.99) as usize).copied().unwrap_or(0.0),
            max: klds.last().copied().unwrap_or(0.0),
            same_top: same,
            same_top_err: (same * (1.0 - same) / (n - 1.0).max(1.0)).sqrt(),
            base_ppl: sums.nll_base.mean_err().0.exp(),
            rms_dp: (sums.dp.sum2 / n).sqrt(),
        }
    });
    Ok(PerplexityReport {
        chunks: n_chunk,
        n_ctx,
        scored: sums.nll.n,
        ppl: mean_nll.exp(),
        ppl_err: mean_nll.exp() * nll_err,
        kld,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A running mean with its standard error.
#[derive(Default)]
struct Stat {
    sum: f64,
    sum2: f64,
    n: usize,
}

impl Stat {
    fn add(&mut self, x: f64) {
        self.sum += x;
        self.sum2 += x * x;
        self.n += 1;
    }
    fn mean_err(&self) -> (f64, f64) {
        if self.n == 0 {
            return (0.0, 0.0);
        }
        let m = self.sum / self.n as f64;
        let var = self.sum2 / self.n as f64 - m * m;
        let err = if var > 0.0 && self.n > 10 { (var / (self.n - 1) as f64).sqrt() } else { 0.0 };
        (m, err)
    }
}

#[derive(Default)]
struct Sums {
    nll: Stat,
    nll_base: Stat,
    kld: Stat,
    dp: Stat,
    same_top: usize,
}

/// One row's log-softmax: `log p(i) = l[i] - max - log Σ exp(l - max)`.
struct LogSoftmax {
    max: f32,
    argmax: usize,
    log_sum: f32,
}

impl LogSoftmax {
    fn new(l: &[f32]) -> Self {
        let (argmax, max) =
            l.iter().copied().enumerate().fold((0, f32::NEG_INFINITY), |a, (i, x)| if x > a.1 { (i, x) } else { a });
        let sum: f64 = l.iter().map(|&x| f64::from((x - max).exp())).sum();
        Self { max, argmax, log_sum: sum.ln() as f32 }
    }

    fn log_p(&self, l: &[f32], i: usize) -> f32 {
        l[i] - self.max - self.log_sum
    }

    fn nll(&self, l: &[f32], tok: usize) -> f64 {
        -f64::from(self.log_p(l, tok))
    }

    /// The row as a base file stores it: `scale` and `min_log_prob`, then each
    /// log-probability within 16 nats of the top as `round((l - min) / scale)`.
    fn quantize(&self, l: &[f32], row: &mut [u16]) {
        let min_logit = l.iter().copied().fold(f32::INFINITY, f32::min).max(self.max - 16.0);
        let scale = (self.max - min_logit) / 65535.0;
        let min_log_prob = min_logit - self.max - self.log_sum;
        let (head, body) = row.split_at_mut(4);
        for (k, v) in [scale, min_log_prob].iter().enumerate() {
            let b = v.to_le_bytes();
            head[2 * k] = u16::from_le_bytes([b[0], b[1]]);
            head[2 * k + 1] = u16::from_le_bytes([b[2], b[3]]);
        }
        body.fill(0);
        if scale > 0.0 {
            for (q, &x) in body.iter_mut().zip(l) {
                if x > min_logit {
                    *q = ((x - min_logit) / scale).round().clamp(0.0, 65535.0) as u16;
                }
            }
        }
    }
}

/// `(scale, min_log_prob)` of a stored row.
fn row_header(row: &[u16]) -> (f32, f32) {
    let f = |k: usize| {
        let (a, b) = (row[2 * k].to_le_bytes(), row[2 * k + 1].to_le_bytes());
        f32::from_le_bytes([a[0], a[1], b[0], b[1]])
    };
    (f(0), f(1))
}

/// Add one position's comparison to `sums`; returns its KL divergence.
fn compare(lp: &LogSoftmax, l: &[f32], row: &[u16], next: usize, sums: &mut Sums) -> f64 {
    let (scale, min_log_prob) = row_header(row);
    let q = &row[4..];
    let base_log_p = |i: usize| scale * f32::from(q[i]) + min_log_prob;
    let mut kld = 0.0f64;
    let (mut top, mut top_lp) = (0usize, f32::NEG_INFINITY);
    for i in 0..l.len() {
        let b = base_log_p(i);
        if b > top_lp {
            (top, top_lp) = (i, b);
        }
        // As llama.cpp sums it: positions more than 16 nats below the top carry nothing.
        if b > -16.0 {
            kld += f64::from(b.exp()) * f64::from(b - lp.log_p(l, i));
        }
    }
    let nll_base = -f64::from(base_log_p(next));
    sums.nll_base.add(nll_base);
    sums.kld.add(kld);
    sums.dp.add((-lp.nll(l, next)).exp() - (-nll_base).exp());
    if top == lp.argmax {
        sums.same_top += 1;
    }
    kld
}

/// A base file being written (see the module docs).
pub struct BaseWriter {
    out: BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    /// One row's bytes, reused for every row.
    bytes: Vec<u8>,
}

impl BaseWriter {
    /// Create (or truncate) `path`; [`score`] writes the header and rows.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be created.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let out = BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
        Ok(Self { out, path: path.to_path_buf(), bytes: Vec::new() })
    }

    fn header(&mut self, n_ctx: usize, n_vocab: usize, tokens: &[u32]) -> Result<()> {
        let n_chunk = tokens.len() / n_ctx;
        let mut bytes = MAGIC.to_vec();
        bytes.extend((n_ctx as u32).to_le_bytes());
        bytes.extend((n_vocab as i32).to_le_bytes());
        bytes.extend((n_chunk as i32).to_le_bytes());
        bytes.extend(tokens.iter().flat_map(|&t| (t as i32).to_le_bytes()));
        self.out.write_all(&bytes).map_err(io(&self.path))
    }

    fn row(&mut self, row: &[u16]) -> Result<()> {
        self.bytes.clear();
        self.bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        self.out.write_all(&self.bytes).map_err(io(&self.path))
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(io(&self.path))
    }
}

/// A base file being read (see the module docs): llama.cpp's `--kl-divergence-base`
/// output, or toolgate's own.
pub struct BaseReader {
    input: BufReader<std::fs::File>,
    n_ctx: usize,
    n_vocab: usize,
    tokens: Vec<u32>,
    /// One row's bytes, reused for every row.
    raw: Vec<u8>,
}

impl BaseReader {
    /// Open `path` and read its header and tokens.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read; [`Error::InvalidParameter`] (`base`) when
    /// it is not a base file or its header is inconsistent.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bad = |why: &str| invalid("base", format!("{}: {why}", path.display()));
        let mut input = BufReader::new(std::fs::File::open(path).map_err(io(path))?);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic).map_err(|_| bad("too short"))?;
        if &magic != MAGIC {
            return Err(bad("not a log-probability file (no `_logits_` magic)"));
        }
        let mut word = [0u8; 4];
        let mut next = |input: &mut BufReader<std::fs::File>| -> Result<i64> {
            input.read_exact(&mut word).map_err(|_| bad("truncated header"))?;
            Ok(i64::from(i32::from_le_bytes(word)))
        };
        let (n_ctx, n_vocab, n_chunk) = (next(&mut input)?, next(&mut input)?, next(&mut input)?);
        if !(8..=1 << 20).contains(&n_ctx) || !(1..=1 << 24).contains(&n_vocab) || !(1..=1 << 20).contains(&n_chunk) {
            return Err(bad(&format!("implausible header: n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}")));
        }
        let (n_ctx, n_vocab) = (n_ctx as usize, n_vocab as usize);
        // The token list the header promises must be in the file before it is allocated.
        let token_bytes = n_ctx * n_chunk as usize * 4;
        let file_len = input.get_ref().metadata().map_err(io(path))?.len();
        if (MAGIC.len() + 12 + token_bytes) as u64 > file_len {
            return Err(bad(&format!(
                "truncated: the header promises {token_bytes} bytes of tokens, the file has {file_len} bytes"
            )));
        }
        let mut raw = vec![0u8; token_bytes];
        input.read_exact(&mut raw).map_err(|_| bad("truncated token list"))?;
        let tokens = raw
            .chunks_exact(4)
            .map(|w| {
                u32::try_from(i32::from_le_bytes([w[0], w[1], w[2], w[3]])).map_err(|_| bad("a negative token id"))
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(Self { input, n_ctx, n_vocab, tokens, raw: Vec::new() })
    }

    /// Tokens per chunk.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The vocabulary size of the model that wrote it.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The evaluated tokens, whole chunks.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    fn read_row(&mut self, row: &mut [u16]) -> Result<()> {
        self.raw.resize(row.len() * 2, 0);
        self.input.read_exact(&mut self.raw).map_err(|_| invalid("base", "it ends before the positions scored"))?;
        for (v, b) in row.iter_mut().zip(self.raw.chunks_exact(2)) {
            *v = u16::from_le_bytes([b[0], b[1]]);
        }
        Ok(())
    }
}
