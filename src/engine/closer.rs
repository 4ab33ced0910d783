//! What a constrained region does at each step: stop, force a token, or let the
//! sampler choose under the mask.
//!
//! The constraint ([`Matcher`]) says what may come next. A token is forced only when
//! it is the one token the constraint allows (an opener, a key of a closed object, a
//! closing brace): the grammar decides it, whatever the model would prefer, and the
//! text is the same either way. **The token budget never forces anything inside a
//! call**: a call or schema instance is finished by the model's own tokens or not at
//! all. When `max_tokens` ends the generation inside a constrained region, the engine
//! reports it ([`super::Generation::unfinished`]) and the chat layer drops the cut call
//! rather than complete it with values the model did not write (`finish_reason:
//! "length"`; `docs/server.md`, "Calls cut by `max_tokens`").
//!
//! What the budget does decide is whether another call *starts*. At a boundary — the
//! region complete, every call so far closed ([`Matcher::is_accepting`]) — a sampled
//! token that would begin one more call is taken only if the budget left can hold that
//! call: at least its shortest completion ([`Matcher::completion_plan`]) and at least
//! the longest call the model wrote in this region so far ([`Boundary`]). Otherwise the
//! turn ends at the boundary, with every call in it complete and written by the model.

use crate::grammar::Matcher;
use crate::Result;

/// Longest completion searched for, in bytes, by [`Matcher::completion_plan`] when a
/// request's budget is checked before generation
/// ([`super::chat::PreparedTurn::check_budget`]): a budget of this many tokens or more
/// is not checked.
pub const CLOSE_MAX_BYTES: usize = 512;

/// What the generation loop does next under a constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The constraint admits nothing more: the turn ends (`stop`).
    Finished,
    /// Emit this token without sampling: the only one the constraint allows.
    Force(u32),
    /// Sample under the matcher's mask.
    Sample,
}

/// The next step for matcher `m` (see the module docs): [`Step::Finished`] when it
/// admits nothing more, [`Step::Force`] when it admits exactly one token, otherwise
/// [`Step::Sample`].
///
/// Cost: a state lookup, and on a state's first visit its token mask.
pub fn next_step(m: &mut Matcher) -> Step {
    if m.is_finished() {
        return Step::Finished;
    }
    match m.forced_token() {
        Some(t) => Step::Force(t),
        None => Step::Sample,
    }
}

/// The budget check at call boundaries (see the module docs): it measures the longest
/// stretch between two boundaries of one constrained region, in tokens, and says when a
/// call must not start.
#[derive(Debug, Clone, Default)]
pub struct Boundary {
    /// The token count when the region began.
    since: Option<usize>,
    /// The token count at the last boundary.
    last: Option<usize>,
    /// The longest stretch between two boundaries (or from the region's start).
    longest: usize,
}

impl Boundary {
    /// Record the step before `generated` tokens' successor is chosen: whether the
    /// region is at a boundary now.
    ///
    /// Cost: a state lookup.
    pub fn observe(&mut self, m: &mut Matcher, generated: usize) {
        let since = *self.since.get_or_insert(generated);
        if m.is_accepting() {
            let from = self.last.unwrap_or(since);
            self.longest = self.longest.max(generated - from);
            self.last = Some(generated);
        }
    }

    /// Whether the turn should end at this boundary instead of taking `next` (just
    /// sampled, not committed), with `remaining` tokens left in the budget: `next` is
    /// not an end token (`eog`), the region is complete, and the call `next` would begin
    /// cannot fit — shorter than the longest call so far, or than its own shortest
    /// completion. Leaves `m` as it was.
    ///
    /// Cost: nothing off a boundary; at one, a shortest-completion search (bounded by
    /// [`CLOSE_MAX_BYTES`]) unless the longest call already decides.
    ///
    /// # Errors
    /// As [`Matcher::commit`] (`next` must be allowed by the mask it was sampled under).
    pub fn ends_here(&mut self, m: &mut Matcher, next: u32, remaining: usize, eog: &[u32]) -> Result<bool> {
        if eog.contains(&next) || remaining > CLOSE_MAX_BYTES || !m.is_accepting() {
            return Ok(false);
        }
        // `next` itself takes one token of what is left.
        let after = remaining.saturating_sub(1);
        if after < self.longest {
            return Ok(true);
        }
        m.commit(next)?;
        let plan = m.completion_plan(CLOSE_MAX_BYTES);
        m.rollback(1);
        Ok(plan.is_none_or(|p| p.len() > after))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::engine::closer::{next_step, Step};
        use crate::grammar::{Grammar, TokenVocab};
        use std::sync::Arc;

        // A toy vocabulary: `{"a":"`, one letter each, `"}`, and an end token.
        let mut bytes: Vec<Vec<u8>> = vec![br#"{"a":""#.to_vec(), br#""}"#.to_vec(), Vec::new()];
        bytes.extend((b'a'..=b'z').map(|c| vec![c]));
        let vocab = Arc::new(TokenVocab::new(bytes, vec![2]));
        let grammar = Arc::new(Grammar::from_regex(r#"\{"a":"[a-z]*"\}"#)?);
        let mut m = grammar.matcher(vocab);
        // The opener is the only way to start: forced.
        assert_eq!(next_step(&mut m), Step::Force(0));
        m.commit(0)?;
        // Inside the string the model chooses, however little budget is left.
        assert_eq!(next_step(&mut m), Step::Sample);
        m.commit(1)?;
        // Complete: the region is finished.
        assert_eq!(next_step(&mut m), Step::Finished);
        Ok(())
    }

    #[test]
    fn boundary_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::engine::closer::Boundary;
        use crate::grammar::{Grammar, TokenVocab};
        use std::sync::Arc;

        // Calls `(x…)` one after another; `(` opens one, `x` writes it, `)` closes it.
        let vocab = Arc::new(TokenVocab::new(vec![b"(".to_vec(), b"x".to_vec(), b")".to_vec()], vec![]));
        let grammar = Arc::new(Grammar::from_regex(r"(\(x+\))+")?);
        let mut m = grammar.matcher(vocab);
        let mut b = Boundary::default();
        for (n, t) in [0u32, 1, 1, 2].into_iter().enumerate() {
            b.observe(&mut m, n);
            m.commit(t)?;
        }
        b.observe(&mut m, 4);
        // Complete after a call of 4 tokens: with 3 left, a new `(` would start a call the
        // model needs more for; with 8 left it starts.
        assert!(b.ends_here(&mut m, 0, 3, &[])?);
        assert!(!b.ends_here(&mut m, 0, 8, &[])?);
        Ok(())
    }
}
