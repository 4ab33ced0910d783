//! GGUF vocabulary → encoder, special tokens and per-token bytes.
//!
//! Two vocabulary kinds are supported, selected by `tokenizer.ggml.model`:
//!
//! * `gpt2`: byte-level BPE with merges, run by a [`tokenizers::Tokenizer`]; the
//!   pre-tokenizer regexes are chosen by `tokenizer.ggml.pre` (see [`pretokenize`]).
//! * `llama`: SentencePiece BPE with scores and byte fallback (Gemma, Llama 2, Mistral),
//!   encoded here (`spm.rs`): the highest-scoring adjacent pair that spells a piece is
//!   merged first, with no merge table.
//!
//! Special tokens are handled here, not inside the `tokenizers` model, so the caller
//! decides whether a string may produce them: [`Tokenizer::encode`] with
//! `parse_special: false` (all user text) never yields a control token, even for
//! text such as `<|im_end|>`. Template output that legitimately contains control
//! tokens is encoded with `parse_special: true`. User-defined tokens (GGUF token type
//! 4, e.g. Gemma's whitespace runs) are matched in any text, as llama.cpp does.
//!
//! ```no_run
//! use toolgate::gguf::GgufFile;
//! use toolgate::tokenizer::{EncodeOptions, Tokenizer};
//! let gguf = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let ids = tok.encode("Hello world", EncodeOptions::TEXT)?;
//! assert_eq!(tok.decode(&ids, false), "Hello world");
//! # Ok::<(), toolgate::Error>(())
//! ```

pub mod pretokenize;
mod spm;
mod table;

pub use table::ByteTable;
use table::PieceIndex;

use std::collections::HashMap;
use std::sync::Arc;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::gguf::GgufFile;
use crate::grammar::TokenVocab;
use crate::{Error, Result};

pub use crate::grammar::vocab::SPECIAL_PREFIX;

/// A token's type, as GGUF's `tokenizer.ggml.token_type` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Ordinary text piece.
    Normal,
    /// The unknown token.
    Unknown,
    /// Control token (`<|im_end|>`, `<bos>`): only template text may produce it.
    Control,
    /// User-defined token: matched literally in any text.
    UserDefined,
    /// Unused slot.
    Unused,
    /// A byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenKind {
    fn from_gguf(v: i64) -> Self {
        match v {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Normal,
        }
    }

    /// Whether this kind is a special token (never produced from user text).
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::Unknown | Self::Unused)
    }
}

/// The vocabulary's algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VocabKind {
    /// Byte-level BPE (`tokenizer.ggml.model = gpt2`) with its pre-tokenizer name.
    BytePairGpt2 {
        /// `tokenizer.ggml.pre`.
        pre: String,
    },
    /// SentencePiece BPE with byte fallback (`tokenizer.ggml.model = llama`).
    SentencePiece,
}

/// How to encode a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Prepend BOS (only if the vocabulary has one).
    pub add_bos: bool,
    /// Recognise control tokens spelled in the text. `false` for all user content.
    pub parse_special: bool,
}

impl EncodeOptions {
    /// Plain text: no BOS, no special tokens.
    pub const TEXT: Self = Self { add_bos: false, parse_special: false };
    /// Rendered chat-template output: special tokens recognised, no extra BOS (the
    /// template writes its own).
    pub const TEMPLATE: Self = Self { add_bos: false, parse_special: true };
}

/// A tokenizer built from GGUF metadata.
///
/// Holds the text encoder (a text-only [`tokenizers::Tokenizer`] for byte-level BPE,
/// toolgate's own for SentencePiece), the token table with kinds, each token's bytes,
/// and the special ids.
#[derive(Clone)]
pub struct Tokenizer {
    encoder: Encoder,
    kind: VocabKind,
    /// Each token's text as the GGUF stores it (valid UTF-8).
    tokens: ByteTable,
    kinds: Vec<TokenKind>,
    /// Each token's bytes ([`Tokenizer::token_bytes`]), shared with the grammar.
    bytes: Arc<ByteTable>,
    /// Token ids by text ([`Tokenizer::token_id`], SentencePiece merges): 2 slots of 4
    /// bytes a token, where a `HashMap<String, u32>` took 12 MiB for 262k tokens.
    index: PieceIndex,
    /// Control/unknown/user-defined token ids, longest text first.
    partition: Vec<u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    eog: Vec<u32>,
    fim: Option<FimTokens>,
    add_bos: bool,
    add_space_prefix: bool,
}

/// The algorithm that turns text (with no special token in it) into ids.
#[derive(Clone)]
enum Encoder {
    /// Byte-level BPE, text-only (no added tokens).
    Gpt2(Box<tokenizers::Tokenizer>),
    /// SentencePiece BPE over the token table.
    SentencePiece(spm::SentencePiece),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab_size", &self.tokens.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eog", &self.eog)
            .finish()
    }
}

/// Token texts that end generation. As in llama.cpp, a token with one of these texts
/// is a control token whatever its GGUF type says (Gemma 3 stores `</s>` as
/// user-defined; llama.cpp promotes it to control and end-of-generation).
const EOG_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<|return|>",
    "<|call|>",
    "</s>",
    // Fill-in-the-middle padding and file separators (Qwen 2.5 Coder): llama.cpp ends
    // an infill at them.
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
];

/// Fill-in-the-middle tokens by text, `(prefix, suffix, middle)`, for vocabularies
/// whose GGUF has no `tokenizer.ggml.fim_{pre,suf,mid}_token_id`: Qwen 2.5 Coder,
/// StarCoder / SantaCoder, CodeLlama, DeepSeek Coder, CodeGemma. One row per family.
const FIM_NAMES: &[(&str, &str, &str)] = &[
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),
    ("\u{2581}<PRE>", "\u{2581}<SUF>", "\u{2581}<MID>"),
    ("<PRE>", "<SUF>", "<MID>"),
    ("<\u{ff5c}fim\u{2581}begin\u{ff5c}>", "<\u{ff5c}fim\u{2581}hole\u{ff5c}>", "<\u{ff5c}fim\u{2581}end\u{ff5c}>"),
    ("<|fim_begin|>", "<|fim_hole|>", "<|fim_end|>"),
];

/// A vocabulary's fill-in-the-middle tokens: a prompt
/// `prefix_token PREFIX suffix_token SUFFIX middle_token` asks for the text between
/// `PREFIX` and `SUFFIX` ([`Tokenizer::fim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    /// Opens the text before the hole.
    pub prefix: u32,
    /// Opens the text after the hole.
    pub suffix: u32,
    /// Asks for the middle.
    pub middle: u32,
}

impl Tokenizer {
    /// Build the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
    ///
    /// Cost: linear in the vocabulary, plus the merge table of a byte-level BPE
    /// vocabulary; memory about 40 bytes a token besides the texts.
    ///
    /// # Errors
    /// [`Error::Metadata`] for missing/mistyped keys; [`Error::Tokenizer`] for an
    /// unknown `tokenizer.ggml.model` or `tokenizer.ggml.pre`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let model = gguf.string("tokenizer.ggml.model")?.to_string();
        let texts = gguf.str_array("tokenizer.ggml.tokens")?;
        if texts.is_empty() {
            return Err(Error::Tokenizer("tokenizer.ggml.tokens is empty".into()));
        }
        let mut kinds: Vec<TokenKind> = match gguf.get("tokenizer.ggml.token_type") {
            Some(_) => gguf.int_array("tokenizer.ggml.token_type")?.into_iter().map(TokenKind::from_gguf).collect(),
            None => vec![TokenKind::Normal; texts.len()],
        };
        if kinds.len() != texts.len() {
            return Err(Error::Tokenizer(format!("token_type has {} entries for {} tokens", kinds.len(), texts.len())));
        }
        for (t, k) in texts.iter().zip(kinds.iter_mut()) {
            if EOG_NAMES.contains(t) && matches!(*k, TokenKind::UserDefined | TokenKind::Normal) {
                *k = TokenKind::Control;
            }
        }
        let id_of =
            |key: &str| -> Result<Option<u32>> { Ok(gguf.opt_u32(key)?.filter(|&id| (id as usize) < texts.len())) };
        let bos = id_of("tokenizer.ggml.bos_token_id")?;
        let eos = id_of("tokenizer.ggml.eos_token_id")?;
        let unk = id_of("tokenizer.ggml.unknown_token_id")?;
        let add_space_prefix = gguf.opt_bool("tokenizer.ggml.add_space_prefix")?;

        let (encoder, kind, bytes, add_bos_default, add_space_prefix) = match model.as_str() {
            "gpt2" => {
                let pre = gguf.opt_string("tokenizer.ggml.pre")?.unwrap_or("default").to_string();
                let merges = gguf.str_array("tokenizer.ggml.merges")?;
                let hf = build_gpt2(&texts, &merges, &pre)?;
                let bytes = gpt2_token_bytes(&texts, &kinds);
                (Encoder::Gpt2(Box::new(hf)), VocabKind::BytePairGpt2 { pre }, bytes, false, false)
            }
            "llama" => {
                let scores = match gguf.get("tokenizer.ggml.scores") {
                    Some(_) => gguf.f32_array("tokenizer.ggml.scores")?,
                    None => vec![0.0; texts.len()],
                };
                let spm = spm::SentencePiece::new(&texts, &kinds, scores, unk)?;
                let bytes = spm_token_bytes(&texts, &kinds);
                (Encoder::SentencePiece(spm), VocabKind::SentencePiece, bytes, true, add_space_prefix.unwrap_or(true))
            }
            other => {
                return Err(Error::Tokenizer(format!(
                    "unsupported tokenizer.ggml.model `{other}` (supported: gpt2, llama)"
                )))
            }
        };
        let add_bos = gguf.opt_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(add_bos_default) && bos.is_some();

        let tokens: ByteTable = texts.iter().collect();
        let index = PieceIndex::new(&tokens);
        let mut partition: Vec<u32> = (0..texts.len() as u32)
            .filter(|&i| {
                let k = kinds[i as usize];
                matches!(k, TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined)
                    && !texts[i as usize].is_empty()
            })
            .collect();
        partition.sort_by_key(|&i| std::cmp::Reverse(texts[i as usize].len()));

        let mut eog = Vec::new();
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            if let Some(id) = id_of(key)? {
                if !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }
        for name in EOG_NAMES {
            if let Some(id) = index.get(&tokens, name.as_bytes()) {
                if kinds[id as usize] == TokenKind::Control && !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }

        let keyed_fim = ["pre", "suf", "mid"].map(|k| id_of(&format!("tokenizer.ggml.fim_{k}_token_id")));
        let fim = match keyed_fim {
            [Ok(Some(prefix)), Ok(Some(suffix)), Ok(Some(middle))] => Some(FimTokens { prefix, suffix, middle }),
            _ => FIM_NAMES.iter().find_map(|(p, s, m)| {
                let id = |t: &str| index.get(&tokens, t.as_bytes());
                Some(FimTokens { prefix: id(p)?, suffix: id(s)?, middle: id(m)? })
            }),
        };
        let bytes = Arc::new(bytes);
        Ok(Self {
            encoder,
            kind,
            tokens,
            kinds,
            bytes,
            index,
            partition,
            bos,
            eos,
            eog,
            fim,
            add_bos,
            add_space_prefix,
        })
    }

    /// Encode a string.
    ///
    /// Special tokens are split out first (longest first, as llama.cpp does): control
    /// tokens only when `opts.parse_special`, user-defined tokens always; every other
    /// span is tokenized as text.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] if the underlying model fails (it does not on valid UTF-8).
    pub fn encode(&self, text: &str, opts: EncodeOptions) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if opts.add_bos {
            if let Some(bos) = self.bos {
                out.push(bos);
            }
        }
        let fragments = self.partition_specials(text, opts.parse_special);
        let mut prev_special = true;
        for frag in fragments {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(s) => {
                    if self.kind == VocabKind::SentencePiece && self.add_space_prefix && prev_special {
                        self.encode_plain(&format!(" {s}"), &mut out)?
                    } else {
                        self.encode_plain(s, &mut out)?
                    };
                    prev_special = false;
                }
            }
        }
        Ok(out)
    }

    /// Whether `text` certainly encodes to more than `limit` tokens, found without
    /// encoding all of it: `Some(n)` (at least about `n` tokens) as soon as its leading
    /// chunks pass the limit, `None` when it may fit.
    ///
    /// The check that keeps a 4 MB request from being tokenized in full (seconds, and a
    /// gigabyte of memory) only to be refused for the context window. Text of at most
    /// `limit` bytes always fits (no token is shorter than a byte) and costs nothing;
    /// longer text is encoded 16 KiB at a time, cut after whitespace, until the count
    /// passes `limit` plus a margin for the tokens a cut can add (so `Some` is never
    /// given to text that fits), at most a little more than `limit` tokens of work.
    ///
    /// ```no_run
    /// # let tok: toolgate::tokenizer::Tokenizer = todo!();
    /// use toolgate::tokenizer::EncodeOptions;
    /// let huge = "word ".repeat(1 << 20);
    /// assert!(tok.certainly_exceeds(&huge, EncodeOptions::TEMPLATE, 8192)?.is_some());
    /// assert!(tok.certainly_exceeds("hello", EncodeOptions::TEMPLATE, 8192)?.is_none());
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tokenizer::encode`].
    pub fn certainly_exceeds(&self, text: &str, opts: EncodeOptions, limit: usize) -> Result<Option<usize>> {
        /// Tokens a cut may add: a special token's text split in two is spelled out.
        const CUT_MARGIN: usize = 32;
        const CHUNK: usize = 16 << 10;
        if text.len() <= limit {
            return Ok(None);
        }
        let (mut rest, mut count, mut cuts) = (text, 0usize, 0usize);
        while !rest.is_empty() {
            let mut end = rest.len().min(CHUNK);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            if end < rest.len() {
                // After the last whitespace in the chunk's second half, when there is one
                // (both ends on character boundaries: the text may be any script).
                let half = (end / 2..end).find(|&i| rest.is_char_boundary(i)).unwrap_or(end);
                if let Some((ws, c)) = rest[half..end].char_indices().rev().find(|(_, c)| c.is_whitespace()) {
                    end = half + ws + c.len_utf8();
                }
            }
            count += self.encode(&rest[..end], opts)?.len();
            rest = &rest[end..];
            cuts += 1;
            if count > limit + cuts * CUT_MARGIN {
                return Ok(Some(count));
            }
        }
        Ok(None)
    }

    /// Encode a prompt the way the model expects a raw prompt: BOS if the GGUF asks for
    /// it, special tokens recognised when `parse_special`.
    ///
    /// # Errors
    /// As [`Tokenizer::encode`].
    pub fn encode_prompt(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        self.encode(text, EncodeOptions { add_bos: self.add_bos, parse_special })
    }

    /// Encode text with no special token in it, appending to `out`.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        match &self.encoder {
            Encoder::Gpt2(hf) => {
                let enc = hf.encode(text, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
                out.extend_from_slice(enc.get_ids());
                Ok(())
            }
            Encoder::SentencePiece(spm) => spm.encode(text, &self.tokens, &self.kinds, &self.index, out),
        }
    }

    fn partition_specials<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = vec![Fragment::Text(text)];
        for &id in &self.partition {
            let kind = self.kinds[id as usize];
            if !parse_special && kind != TokenKind::UserDefined {
                continue;
            }
            let needle = self.token_str(id).unwrap_or_default();
            if needle.is_empty() {
                continue;
            }
            if !frags.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(needle))) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(mut t) => {
                        while let Some(pos) = t.find(needle) {
                            if pos > 0 {
                                next.push(Fragment::Text(&t[..pos]));
                            }
                            next.push(Fragment::Token(id));
                            t = &t[pos + needle.len()..];
                        }
                        if !t.is_empty() {
                            next.push(Fragment::Text(t));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// Whether `text` contains the text of any control token (which, in user content,
    /// must be kept from becoming that token).
    pub fn contains_special_text(&self, text: &str) -> bool {
        self.partition
            .iter()
            .filter(|&&id| self.kinds[id as usize] != TokenKind::UserDefined)
            .filter_map(|&id| self.token_str(id))
            .any(|needle| text.contains(needle))
    }

    /// Decode ids to text. Special tokens are written as their text unless
    /// `skip_special`; invalid UTF-8 (a split multi-byte character) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut buf = Vec::new();
        for &id in ids {
            buf.extend_from_slice(&self.piece_bytes(id, skip_special));
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The bytes a token contributes to decoded text (special tokens as their text,
    /// or nothing when `skip_special`).
    pub fn piece_bytes(&self, id: u32, skip_special: bool) -> Vec<u8> {
        match self.bytes.get(id as usize) {
            Some(b) if b.first() == Some(&SPECIAL_PREFIX) => {
                if skip_special {
                    Vec::new()
                } else {
                    b[1..].to_vec()
                }
            }
            Some(b) => b.to_vec(),
            None => Vec::new(),
        }
    }

    /// Each token's bytes, for token masks: text tokens as the bytes they decode to,
    /// special tokens as `0xFF` followed by their text (bytes no text can spell). The
    /// grammar's [`crate::grammar::TokenVocab`] shares this table.
    pub fn token_bytes(&self) -> &Arc<ByteTable> {
        &self.bytes
    }

    /// The vocabulary as the grammar's token masks read it: [`Tokenizer::token_bytes`]
    /// (shared, not copied) and [`Tokenizer::eog_tokens`].
    ///
    /// Cost: as [`TokenVocab::from_table`] (about 40 ms for 49k tokens, 300 ms for
    /// 262k); callers keep the result (the engine builds it once).
    pub fn token_vocab(&self) -> TokenVocab {
        TokenVocab::from_table(self.bytes.clone(), self.eog.clone())
    }

    /// The token's vocabulary string, as stored in the GGUF.
    pub fn token_str(&self, id: u32) -> Option<&str> {
        std::str::from_utf8(self.tokens.get(id as usize)?).ok()
    }

    /// The id of a vocabulary string, if present.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.index.get(&self.tokens, piece.as_bytes())
    }

    /// The kind of a token.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The vocabulary's algorithm.
    pub fn kind(&self) -> &VocabKind {
        &self.kind
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether the GGUF asks for BOS before a prompt.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// End-of-generation tokens: EOS, EOT/EOM and the known end-of-turn control tokens.
    pub fn eog_tokens(&self) -> &[u32] {
        &self.eog
    }

    /// The fill-in-the-middle tokens, when the vocabulary has them (from the GGUF's
    /// `tokenizer.ggml.fim_*_token_id`, else by their text in a known family's
    /// spelling); `None` for a model not trained to fill in.
    pub fn fim(&self) -> Option<FimTokens> {
        self.fim
    }

    /// The text of BOS/EOS, for chat templates.
    pub fn special_text(&self, id: Option<u32>) -> &str {
        id.and_then(|i| self.token_str(i)).unwrap_or("")
    }

    /// The inner text-only `tokenizers::Tokenizer` (no special tokens registered) of
    /// a byte-level BPE vocabulary; `None` for SentencePiece, which toolgate encodes
    /// itself.
    pub fn hf(&self) -> Option<&tokenizers::Tokenizer> {
        match &self.encoder {
            Encoder::Gpt2(hf) => Some(hf),
            Encoder::SentencePiece(_) => None,
        }
    }

    /// A streaming detokenizer over this vocabulary.
    pub fn detokenizer(&self, skip_special: bool) -> Detokenizer<'_> {
        Detokenizer { tok: self, pending: Vec::new(), skip_special }
    }
}

enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Turns a stream of token ids into a stream of complete UTF-8 text pieces, holding
/// back bytes of a character split across tokens.
pub struct Detokenizer<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
    skip_special: bool,
}

impl Detokenizer<'_> {
    /// Add one token; returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.pending.extend_from_slice(&self.tok.piece_bytes(id, self.skip_special));
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // An invalid sequence (not just incomplete) is flushed lossily.
            Err(_) => self.pending.len(),
        };
        let out: Vec<u8> = self.pending.drain(..valid).collect();
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Flush what is left (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

fn build_gpt2(tokens: &[&str], merges: &[&str], pre: &str) -> Result<tokenizers::Tokenizer> {
    let rule = pretokenize::rule_for(pre).ok_or_else(|| {
        Error::Tokenizer(format!("unsupported tokenizer.ggml.pre `{pre}` for a gpt2 (byte-level BPE) vocabulary"))
    })?;
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    let merges = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| Error::Tokenizer(format!("invalid merge `{m}`")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(rule.ignore_merges)
        .build()
        .map_err(|e| Error::Tokenizer(format!("building BPE: {e}")))?;
    let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
    for re in rule.regexes {
        let split = Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| Error::Tokenizer(format!("pre-tokenizer regex: {e}")))?;
        steps.push(split.into());
    }
    steps.push(ByteLevel::new(false, false, false).into());
    let mut tk = tokenizers::Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(Sequence::new(steps)));
    tk.with_decoder(Some(ByteLevelDecoder::new(false, false, false)));
    Ok(tk)
}

/// GPT-2's reversible byte ↔ printable-char table: char → byte.
fn gpt2_char_to_byte() -> HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..=255u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.into_iter().zip(cs).filter_map(|(b, c)| char::from_u32(c).map(|c| (c, b as u8))).collect()
}

fn special_bytes(text: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(text.len() + 1);
    v.push(SPECIAL_PREFIX);
    v.extend_from_slice(text.as_bytes());
    v
}

fn gpt2_token_bytes(tokens: &[&str], kinds: &[TokenKind]) -> ByteTable {
    let table = gpt2_char_to_byte();
    tokens
        .iter()
        .zip(kinds)
        .map(|(t, k)| match k {
            k if k.is_special() => special_bytes(t),
            TokenKind::UserDefined => t.as_bytes().to_vec(),
            _ => {
                let mut out = Vec::with_capacity(t.len());
                for c in t.chars() {
                    match table.get(&c) {
                        Some(&b) => out.push(b),
                        None => {
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                out
            }
        })
        .collect()
}

fn spm_token_bytes(tokens: &[&str], kinds: &[TokenKind]) -> ByteTable {
    tokens
        .iter()
        .zip(kinds)
        .map(|(t, k)| match k {
            k if k.is_special() => special_bytes(t),
            TokenKind::Byte => parse_byte_token(t).map(|b| vec![b]).unwrap_or_else(|| special_bytes(t)),
            TokenKind::UserDefined => t.as_bytes().to_vec(),
            _ => t.replace('\u{2581}', " ").into_bytes(),
        })
        .collect()
}

fn parse_byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}
