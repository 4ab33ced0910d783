//! Separating a model's reasoning (`<think>…</think>` and the like) from its answer,
//! incrementally.
//!
//! Reasoning models open their turn with a reasoning block; some templates already
//! put the opening marker at the end of the prompt (DeepSeek-R1's `<think>\n`), so the
//! output starts inside it. [`ReasoningSplitter`] reads output in pieces of any size
//! and yields [`Piece::Reasoning`] for the block's text and [`Piece::Text`] for
//! everything after it; the markers themselves go to neither. Only a block at the
//! start of the turn counts: a marker later in the answer is answer text. The result
//! does not depend on where the pieces split: a partial marker is held back until it
//! is decided, and reasoning is trimmed (leading whitespace dropped, trailing held
//! until more reasoning follows) exactly as for the whole text.

/// One output piece, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text inside the reasoning block.
    Reasoning(String),
    /// Text after it (or all text, for a turn without one).
    Text(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet: a reasoning block may still open.
    Before,
    /// Inside the block.
    Inside,
    /// After the block, or the turn has none.
    After,
}

/// Splits a turn's output into reasoning and answer. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    start: String,
    end: String,
    state: State,
    pending: String,
    held_ws: String,
    emitted: bool,
}

impl ReasoningSplitter {
    /// A splitter for blocks `start`…`end`; `starts_inside` when the prompt already
    /// ends with `start`.
    pub fn new(start: &str, end: &str, starts_inside: bool) -> Self {
        Self {
            start: start.to_string(),
            end: end.to_string(),
            state: if starts_inside { State::Inside } else { State::Before },
            pending: String::new(),
            held_ws: String::new(),
            emitted: false,
        }
    }

    /// Reasoning text, trimmed: leading whitespace dropped, trailing whitespace held
    /// until more reasoning follows.
    fn reasoning(&mut self, text: &str, out: &mut Vec<Piece>) {
        let text = if self.emitted { text } else { text.trim_start() };
        if text.is_empty() {
            return;
        }
        let body = text.trim_end();
        if body.is_empty() {
            self.held_ws.push_str(text);
            return;
        }
        let mut piece = std::mem::take(&mut self.held_ws);
        piece.push_str(body);
        self.held_ws.push_str(&text[body.len()..]);
        self.emitted = true;
        out.push(Piece::Reasoning(piece));
    }

    /// Feed the next piece of output.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.state == State::After {
            if !text.is_empty() {
                out.push(Piece::Text(text.to_string()));
            }
            return out;
        }
        self.pending.push_str(text);
        if self.state == State::Before {
            let rest = self.pending.trim_start();
            if rest.starts_with(&self.start) {
                self.pending = rest[self.start.len()..].to_string();
                self.state = State::Inside;
            } else if self.start.starts_with(rest) {
                return out; // still undecided (whitespace or a partial marker)
            } else {
                self.state = State::After;
                out.push(Piece::Text(std::mem::take(&mut self.pending)));
                return out;
            }
        }
        // Inside.
        if let Some(at) = self.pending.find(&self.end) {
            let before = self.pending[..at].to_string();
            let after = self.pending[at + self.end.len()..].to_string();
            self.pending.clear();
            self.reasoning(&before, &mut out);
            self.held_ws.clear();
            self.state = State::After;
            if !after.is_empty() {
                out.push(Piece::Text(after));
            }
            return out;
        }
        // Keep back a tail that could be the start of the end marker.
        let keep = (1..self.end.len().min(self.pending.len() + 1))
            .rev()
            .find(|&k| {
                self.pending.is_char_boundary(self.pending.len() - k)
                    && self.end.starts_with(&self.pending[self.pending.len() - k..])
            })
            .unwrap_or(0);
        let split = self.pending.len() - keep;
        let ready = self.pending[..split].to_string();
        self.pending.drain(..split);
        self.reasoning(&ready, &mut out);
        out
    }

    /// The output has ended: an undecided start is answer text; an unterminated block
    /// is all reasoning (the turn was cut off inside it).
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        match self.state {
            State::Before if !pending.is_empty() => out.push(Piece::Text(pending)),
            State::Inside => self.reasoning(&pending, &mut out),
            _ => {}
        }
        self.state = State::After;
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reasoningsplitter_example() {
        use crate::tools::reasoning::{Piece, ReasoningSplitter};
        let mut s = ReasoningSplitter::new("<think>", "</think>", false);
        let mut out = Vec::new();
        for piece in ["<thi", "nk>\nLet me see", ".\n</th", "ink>\n\nParis."] {
            out.extend(s.push(piece));
        }
        out.extend(s.finish());
        assert_eq!(
            out,
            [Piece::Reasoning("Let me see".into()), Piece::Reasoning(".".into()), Piece::Text("\n\nParis.".into())]
        );
    }
}
