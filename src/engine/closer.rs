//! What a constrained region does at each step: stop, force a token, or let the
//! sampler choose under the mask — with the token budget in view, so that a call is
//! never cut by `max_tokens` half-written.
//!
//! The constraint ([`Matcher`]) says what may come next; the [`Closer`] adds the
//! budget. Near the end of the budget (within [`CLOSE_LOOKAHEAD`] tokens) it asks the
//! matcher for the shortest way to finish ([`Matcher::completion_plan`]) and, once that
//! plan plus [`CLOSE_MARGIN`] no longer fits, forces the plan token by token. It also
//! measures the longest stretch between two closing points (a complete call, or one
//! token from it): with less budget left than that stretch, it closes at the next
//! closing point rather than start another call the budget would cut.
//!
//! ```
//! use std::sync::Arc;
//! use toolgate::engine::closer::{Closer, Step};
//! use toolgate::grammar::{Grammar, TokenVocab};
//!
//! // A toy vocabulary: `{"a":"`, one letter each, `"}`, and an end token.
//! let mut bytes: Vec<Vec<u8>> = vec![br#"{"a":""#.to_vec(), br#""}"#.to_vec(), Vec::new()];
//! bytes.extend((b'a'..=b'z').map(|c| vec![c]));
//! let vocab = Arc::new(TokenVocab::new(bytes, vec![2]));
//! let grammar = Arc::new(Grammar::from_regex(r#"\{"a":"[a-z]*"\}"#)?);
//! let mut m = grammar.matcher(vocab);
//! let mut closer = Closer::default();
//! // The opener is the only way to start: forced.
//! assert_eq!(closer.step(&mut m, 0, 100), Step::Force(0));
//! m.commit(0)?;
//! // Plenty of budget: the model chooses.
//! assert_eq!(closer.step(&mut m, 1, 100), Step::Sample);
//! // One token left: the string is closed now.
//! assert_eq!(closer.step(&mut m, 1, 1), Step::Force(1));
//! # Ok::<(), toolgate::Error>(())
//! ```

use crate::grammar::Matcher;

/// With this many tokens or fewer left in the budget, a constrained generation checks
/// each step how many tokens the shortest completion needs
/// ([`Matcher::completion_plan`]).
pub const CLOSE_LOOKAHEAD: usize = 96;

/// Closing starts when the shortest completion plus this margin no longer fits the
/// remaining budget (one token can open several structures at once).
pub const CLOSE_MARGIN: usize = 8;

/// Longest completion searched for, in bytes.
pub const CLOSE_MAX_BYTES: usize = 512;

/// What the generation loop does next under a constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The constraint admits nothing more: the turn ends (`stop`).
    Finished,
    /// The region is complete and the budget too short for more: the turn ends
    /// (`length`).
    Closed,
    /// Emit this token without sampling: the only one allowed, or the next of the
    /// shortest completion.
    Force(u32),
    /// Sample under the matcher's mask.
    Sample,
}

/// The budget bookkeeping of one constrained region (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Closer {
    /// Forcing the shortest completion.
    closing: bool,
    /// The token count at the last closing point.
    last_accept: Option<usize>,
    /// The longest stretch between two closing points, in tokens.
    span: usize,
    /// The token count when the region began.
    active_since: Option<usize>,
}

impl Closer {
    /// The next step for matcher `m`, with `generated` tokens generated so far and
    /// `remaining` left in the budget.
    ///
    /// Cost: with more than [`CLOSE_LOOKAHEAD`] tokens left, a state lookup; within it,
    /// one shortest-completion search per step (bounded by [`CLOSE_MAX_BYTES`]).
    pub fn step(&mut self, m: &mut Matcher, generated: usize, remaining: usize) -> Step {
        if m.is_finished() {
            return Step::Finished;
        }
        let plan = if self.closing || remaining <= CLOSE_LOOKAHEAD { m.completion_plan(CLOSE_MAX_BYTES) } else { None };
        let since = *self.active_since.get_or_insert(generated);
        // A closing point: complete, or one token from it (the `]` of a list of calls).
        let closing_point = match &plan {
            Some(p) => p.len() <= 1,
            None => m.is_accepting(),
        };
        if closing_point {
            let j = self.last_accept.unwrap_or(since);
            if generated > j + 1 {
                self.span = self.span.max(generated - j);
            }
            self.last_accept = Some(generated);
            if self.span > 0 && remaining < self.span + CLOSE_MARGIN {
                self.closing = true;
            }
        }
        match plan {
            _ if self.closing && m.is_accepting() => return Step::Closed,
            Some(plan) if !plan.is_empty() && (self.closing || plan.len() + CLOSE_MARGIN >= remaining) => {
                self.closing = true;
                return Step::Force(plan[0]);
            }
            _ => {}
        }
        match m.forced_token() {
            Some(t) => Step::Force(t),
            None => Step::Sample,
        }
    }
}
