//! SentencePiece BPE encoding (`tokenizer.ggml.model = llama`: Gemma, Llama 2,
//! Mistral).
//!
//! SentencePiece's BPE needs no merge table: starting from single characters, it
//! merges the adjacent pair whose concatenation is the highest-scoring piece (the
//! leftmost pair on a tie), until no adjacent pair spells a piece. A symbol left that
//! is no piece is written as its bytes' `<0xNN>` tokens (byte fallback). This is the
//! algorithm of SentencePiece's `bpe_model.cc` and llama.cpp's `llm_tokenizer_spm`.
//!
//! toolgate used to hand this to `tokenizers`' BPE with a merge table derived from the
//! scores. For Gemma 3's 262k pieces that table, the vocabulary map and its reverse
//! took 57 MB of hash maps, more than the rest of the process besides the weights;
//! the [`PieceIndex`] this looks pieces up in takes 2 MiB and the scores 1 MiB.

use std::collections::BinaryHeap;

use super::{ByteTable, PieceIndex, TokenKind};
use crate::{Error, Result};

/// What SentencePiece BPE needs beyond the token texts: each piece's score and the
/// byte-fallback tokens.
#[derive(Debug, Clone)]
pub(crate) struct SentencePiece {
    scores: Vec<f32>,
    /// `<0xNN>` token of each byte, `u32::MAX` where the vocabulary has none.
    byte_tokens: Box<[u32; 256]>,
    unk: Option<u32>,
}

/// One symbol of the text being merged: a byte range of the normalized text and its
/// neighbours (`NONE` at the ends). A symbol merged into its left neighbour has `len`
/// 0.
#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
    /// Whether the symbol's text is a piece that may take part in a merge.
    mergeable: bool,
}

const NONE: u32 = u32::MAX;

/// A candidate merge of two adjacent symbols into a piece of `score`; `len` is the
/// merged length when it was queued (a later merge of either side makes it stale).
struct Candidate {
    score: f32,
    left: u32,
    right: u32,
    len: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Candidate {}

impl Ord for Candidate {
    /// The highest score first, then the leftmost.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether a piece of this kind may be the result or a part of a merge: text pieces
/// only, so that user text never merges into a control token.
fn mergeable(kind: TokenKind) -> bool {
    matches!(kind, TokenKind::Normal | TokenKind::UserDefined)
}

impl SentencePiece {
    /// From the vocabulary's texts, kinds and scores (`scores.len()` must equal the
    /// token count).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the scores do not match the tokens.
    pub(crate) fn new(tokens: &[&str], kinds: &[TokenKind], scores: Vec<f32>, unk: Option<u32>) -> Result<Self> {
        if scores.len() != tokens.len() {
            return Err(Error::Tokenizer(format!("{} scores for {} tokens", scores.len(), tokens.len())));
        }
        let mut byte_tokens = Box::new([NONE; 256]);
        for (id, (t, k)) in tokens.iter().zip(kinds).enumerate().rev() {
            if *k == TokenKind::Byte {
                if let Some(b) = super::parse_byte_token(t) {
                    byte_tokens[b as usize] = id as u32;
                }
            }
        }
        Ok(Self { scores, byte_tokens, unk })
    }

    /// Encode `text` (already split around special tokens, the leading space already
    /// added where the vocabulary wants one), appending the ids to `out`.
    ///
    /// Cost: O(n log n) in the text's characters, one index lookup per candidate pair.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] for a character that is no piece when the vocabulary has
    /// neither its bytes' `<0xNN>` tokens nor an unknown token, or for text of 4 GiB or
    /// more (positions are 32-bit).
    pub(crate) fn encode(
        &self,
        text: &str,
        tokens: &ByteTable,
        kinds: &[TokenKind],
        index: &PieceIndex,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        // The text with every space written as U+2581, as the pieces spell it.
        let norm = text.replace(' ', "\u{2581}");
        let norm = norm.as_bytes();
        if u32::try_from(norm.len()).is_err() {
            return Err(Error::Tokenizer(format!("{} bytes of text: more than 4 GiB to encode at once", norm.len())));
        }
        let piece = |s: &Symbol| &norm[s.start as usize..(s.start + s.len) as usize];
        let lookup = |bytes: &[u8]| index.get(tokens, bytes);
        let mut symbols: Vec<Symbol> = Vec::with_capacity(norm.len());
        let mut start = 0usize;
        for c in text.chars() {
            let len = if c == ' ' { 3 } else { c.len_utf8() };
            let i = symbols.len() as u32;
            let mergeable = lookup(&norm[start..start + len]).is_some_and(|id| mergeable(kinds[id as usize]));
            symbols.push(Symbol {
                start: start as u32,
                len: len as u32,
                prev: i.wrapping_sub(1),
                next: i + 1,
                mergeable,
            });
            start += len;
        }
        let Some(last) = symbols.last_mut() else { return Ok(()) };
        last.next = NONE;

        let mut queue = BinaryHeap::with_capacity(symbols.len());
        let candidate = |symbols: &[Symbol], left: u32, right: u32| -> Option<Candidate> {
            let (l, r) = (symbols.get(left as usize)?, symbols.get(right as usize)?);
            if !(l.mergeable && r.mergeable) {
                return None;
            }
            let len = l.len + r.len;
            let id = lookup(&norm[l.start as usize..(l.start + len) as usize])?;
            mergeable(kinds[id as usize]).then(|| Candidate { score: self.scores[id as usize], left, right, len })
        };
        for i in 1..symbols.len() as u32 {
            queue.extend(candidate(&symbols, i - 1, i));
        }
        while let Some(c) = queue.pop() {
            let (l, r) = (symbols[c.left as usize], symbols[c.right as usize]);
            if l.len == 0 || r.len == 0 || l.len + r.len != c.len {
                continue;
            }
            symbols[c.left as usize].len = c.len;
            symbols[c.left as usize].next = r.next;
            symbols[c.right as usize].len = 0;
            if let Some(n) = symbols.get_mut(r.next as usize) {
                n.prev = c.left;
            }
            queue.extend(candidate(&symbols, l.prev, c.left));
            queue.extend(candidate(&symbols, c.left, r.next));
        }

        let mut i = 0u32;
        while let Some(s) = symbols.get(i as usize) {
            match lookup(piece(s)).filter(|&id| !kinds[id as usize].is_special()) {
                Some(id) => out.push(id),
                None => {
                    let bytes: Option<Vec<u32>> =
                        piece(s).iter().map(|&b| Some(self.byte_tokens[b as usize]).filter(|&id| id != NONE)).collect();
                    match (bytes, self.unk) {
                        (Some(bytes), _) => out.extend(bytes),
                        (None, Some(unk)) => out.push(unk),
                        (None, None) => {
                            return Err(Error::Tokenizer(format!(
                                "`{}` is no piece of this vocabulary, which has neither its bytes' <0xNN> tokens nor \
                                 an unknown token",
                                String::from_utf8_lossy(piece(s))
                            )))
                        }
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }
}
