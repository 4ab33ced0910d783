//! What a constrained region does at each step: stop, force a token, or let the
//! sampler choose under the mask.
//!
//! The constraint ([`Matcher`]) says what may come next. A token is forced only when
//! it is the one token the constraint allows (an opener, a key of a closed object, a
//! closing brace): the grammar decides it, whatever the model would prefer, and the
//! text is the same either way. **The token budget never forces anything**: a call or
//! schema instance is finished by the model's own tokens or not at all. When
//! `max_tokens` ends the generation inside a constrained region, the engine reports it
//! ([`super::Generation::unfinished`]) and the chat layer drops the cut call rather than
//! complete it with values the model did not write (`finish_reason: "length"`;
//! `docs/server.md`, "Calls cut by `max_tokens`").
//!
//! ```
//! use std::sync::Arc;
//! use toolgate::engine::closer::{next_step, Step};
//! use toolgate::grammar::{Grammar, TokenVocab};
//!
//! // A toy vocabulary: `{"a":"`, one letter each, `"}`, and an end token.
//! let mut bytes: Vec<Vec<u8>> = vec![br#"{"a":""#.to_vec(), br#""}"#.to_vec(), Vec::new()];
//! bytes.extend((b'a'..=b'z').map(|c| vec![c]));
//! let vocab = Arc::new(TokenVocab::new(bytes, vec![2]));
//! let grammar = Arc::new(Grammar::from_regex(r#"\{"a":"[a-z]*"\}"#)?);
//! let mut m = grammar.matcher(vocab);
//! // The opener is the only way to start: forced.
//! assert_eq!(next_step(&mut m), Step::Force(0));
//! m.commit(0)?;
//! // Inside the string the model chooses, however little budget is left.
//! assert_eq!(next_step(&mut m), Step::Sample);
//! m.commit(1)?;
//! // Complete: the region is finished.
//! assert_eq!(next_step(&mut m), Step::Finished);
//! # Ok::<(), toolgate::Error>(())
//! ```

use crate::grammar::Matcher;

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
