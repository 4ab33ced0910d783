//! Jump-forward: text the constraint forces is fed to the model as one chunk behind
//! the token before it (a [`Draft`]), so forced tokens cost one forward pass together
//! rather than one decode step each; the generation loop still decides every token.

use std::collections::VecDeque;

use crate::grammar::{Matcher, TokenMask};
use crate::model::Model;
use crate::tokenizer::{EncodeOptions, Tokenizer};
use crate::Result;

/// Jump-forward's draft: the tokens of a forced run not yet emitted and, once the run
/// is fed as one chunk behind the token before it, the logits after each of them
/// (`rows[i]` after `tokens[i]`).
///
/// A draft proposes; the generation loop's step decides every token as a plain decode
/// would (the constraint's forced token, or the sampler over the masked row), so the
/// tokens are the plain decode's and only the decode steps are saved.
#[derive(Default)]
pub(super) struct Draft {
    pub(super) tokens: VecDeque<u32>,
    rows: VecDeque<Row>,
    /// Drafts fed so far, and their tokens cut again unverified.
    pub(super) chunks: usize,
    pub(super) rejected: usize,
}

/// The logits after one of a draft's tokens: every entry, or only those of the tokens
/// the constraint allows next (the sampler masks the others away in any case).
enum Row {
    Full(Vec<f32>),
    Allowed { ids: Vec<u32>, logits: Vec<f32> },
}

impl Row {
    /// The row as `vocab` logits, `-inf` where only allowed tokens were scored.
    fn into_logits(self, vocab: usize) -> Vec<f32> {
        match self {
            Row::Full(logits) => logits,
            Row::Allowed { ids, logits } => {
                let mut row = vec![f32::NEG_INFINITY; vocab];
                for (&id, &l) in ids.iter().zip(&logits) {
                    row[id as usize] = l;
                }
                row
            }
        }
    }
}

impl Draft {
    /// Positions the model holds beyond the emitted tokens: the chunk's tokens not
    /// emitted yet (0 before the chunk is fed).
    pub(super) fn ahead(&self) -> usize {
        if self.rows.is_empty() {
            0
        } else {
            self.tokens.len()
        }
    }

    /// For each of the draft's tokens, the tokens `m` (where the draft starts) allows
    /// in its place: what the step there chooses from.
    ///
    /// Cost: a mask and a commit per token, then a rollback.
    pub(super) fn candidates(&self, m: &mut Matcher, mask: &mut TokenMask) -> Result<Vec<Vec<u32>>> {
        let mut out = Vec::with_capacity(self.tokens.len());
        let mut committed = 0;
        for &tok in &self.tokens {
            if let Err(e) = m.fill_mask(mask) {
                m.rollback(committed);
                return Err(e);
            }
            out.push(mask.allowed().collect());
            if m.commit(tok).is_err() {
                break;
            }
            committed += 1;
        }
        m.rollback(committed);
        Ok(out)
    }

    /// Feed `next` (just emitted) and the draft behind it as one chunk and return the
    /// logits after `next`; the draft's rows wait in `rows`. With `candidates` (one
    /// list per draft token) only those are scored at each position but the last;
    /// without, every row is whole. An empty draft is a plain decode step.
    ///
    /// Cost: one forward pass over the chunk, with a dot product per candidate (or an
    /// output-head row per position) and one output-head row for the last position.
    pub(super) fn feed(
        &mut self,
        next: u32,
        model: &mut dyn Model,
        cached: &mut Vec<u32>,
        candidates: Option<Vec<Vec<u32>>>,
    ) -> Result<Vec<f32>> {
        if self.tokens.is_empty() {
            cached.push(next);
            return model.forward(&[next]);
        }
        let chunk: Vec<u32> = std::iter::once(next).chain(self.tokens.iter().copied()).collect();
        let vocab = model.vocab_size();
        self.chunks += 1;
        self.rows = match candidates.filter(|c| c.len() == self.tokens.len()) {
            Some(mut ids) => {
                // A tokenizer may count more ids than the output head has rows.
                ids.iter_mut().for_each(|ids| ids.retain(|&id| (id as usize) < vocab));
                let (scored, last) = model.forward_scored(&chunk, &ids)?;
                let mut rows: VecDeque<Row> =
                    ids.into_iter().zip(scored).map(|(ids, logits)| Row::Allowed { ids, logits }).collect();
                rows.push_back(Row::Full(last));
                rows
            }
            None => model.forward_tail(&chunk, chunk.len())?.into_iter().map(Row::Full).collect(),
        };
        cached.extend_from_slice(&chunk);
        Ok(self.rows.pop_front().map(|r| r.into_logits(vocab)).unwrap_or_default())
    }

    /// `next` was emitted: the logits after it when the fed chunk holds it (the draft
    /// moves on), `None` when it must be fed (no chunk fed yet, or the model chose
    /// another token — the chunk's unverified rest is then dropped from the cache).
    pub(super) fn take(&mut self, next: u32, model: &mut dyn Model, cached: &mut Vec<u32>) -> Option<Vec<f32>> {
        if self.rows.is_empty() {
            return None;
        }
        if self.tokens.front() == Some(&next) {
            self.tokens.pop_front();
            return self.rows.pop_front().map(|r| r.into_logits(model.vocab_size()));
        }
        self.drop_unverified(model, cached);
        None
    }

    /// Drop the fed chunk's tokens not emitted from the model's cache, and the draft.
    pub(super) fn drop_unverified(&mut self, model: &mut dyn Model, cached: &mut Vec<u32>) {
        let keep = cached.len() - self.ahead();
        self.rejected += self.ahead();
        model.truncate(keep);
        cached.truncate(keep);
        self.clear();
    }

    pub(super) fn clear(&mut self) {
        self.tokens.clear();
        self.rows.clear();
    }
}

/// Most bytes of forced text one jump-forward chunk covers.
pub(super) const JUMP_MAX_BYTES: usize = 256;

/// The tokens of the text `m`'s constraint forces from here ([`Matcher::forced_bytes`]),
/// at most `limit` of them, as jump-forward's draft.
///
/// The text is tokenized as the model's tokenizer tokenizes it. Kept: the tokens that
/// spell the forced text in order (a tokenizer that adds a leading space spells
/// something else, and nothing is drafted) and that the constraint accepts one after
/// another (checked by committing them, then rolled back). The draft is a proposal:
/// where the model spells the text otherwise (`"` + `",` instead of `"` + `"` + `,`, or
/// `t` + `ool` for `tool`), the generation loop keeps the model's token.
///
/// Cost: a DFA walk over the forced bytes, one tokenization of at most
/// [`JUMP_MAX_BYTES`] bytes, a commit and rollback per token.
pub(super) fn forced_run(tokenizer: &Tokenizer, m: &mut Matcher, limit: usize) -> Vec<u32> {
    if limit == 0 {
        return Vec::new();
    }
    let bytes = m.forced_bytes(JUMP_MAX_BYTES);
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    if text.is_empty() {
        return Vec::new();
    }
    let Ok(mut ids) = tokenizer.encode(text, EncodeOptions::TEXT) else { return Vec::new() };
    let mut at = 0;
    let spelled = ids
        .iter()
        .take_while(|&&id| {
            let piece = tokenizer.piece_bytes(id, false);
            let fits = !piece.is_empty() && text.as_bytes()[at..].starts_with(&piece);
            at += piece.len();
            fits
        })
        .count();
    ids.truncate(spelled.min(limit));
    let accepted = ids.iter().take_while(|&&id| m.commit(id).is_ok()).count();
    m.rollback(accepted);
    ids.truncate(accepted);
    ids
}
