//! Where a value ends in streamed text: one scanner for the bracketed dialects.

use crate::grammar::dialect::Quoted;

/// The literal syntax a [`ValueScan`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Brackets {
    /// JSON: strings in `"` with backslash escapes.
    #[default]
    Json,
    /// Gemma 4: strings between two quote tokens, without escapes.
    Gemma,
    /// Python: `(…)` brackets too, strings in `"` or `'` with backslash escapes.
    Python,
}

/// A call's reader state: tracks where a value (object, array, call arguments or
/// scalar) ends, byte by byte, resuming where it stopped as more text arrives.
#[derive(Debug, Clone, Default)]
pub struct ValueScan {
    /// Bytes examined.
    pub(crate) consumed: usize,
    /// Bytes known to belong to the value.
    pub(crate) complete: usize,
    /// The value's length, once it has ended.
    pub(crate) end: Option<usize>,
    /// A `<` outside any string (not part of a value: the start of a marker), where.
    pub(crate) stray: Option<usize>,
    syntax: Brackets,
    depth: usize,
    quoted: Quoted,
    scalar: bool,
    /// Whether the last byte outside a string was a letter, digit, `_` or part of a
    /// non-ASCII character: in [`Brackets::Python`] a quote there is inside a bare
    /// word (`name=O'Brien`, as templates that print strings bare show them), not a
    /// string's start.
    word: bool,
    /// The string quote of [`Brackets::Gemma`].
    quote: String,
}

impl ValueScan {
    /// Scan `text` (the value from its start, as read so far) in `syntax`, and say
    /// where the value ends. `quote` is [`Brackets::Gemma`]'s string quote (unused by
    /// the others).
    pub(crate) fn extent(&mut self, text: &str, syntax: Brackets, quote: &str) -> super::Extent {
        if self.end.is_none() && self.stray.is_none() {
            self.syntax = syntax;
            if syntax == Brackets::Gemma && self.quote != quote {
                self.quote = quote.to_string();
            }
            self.feed(&text[self.consumed..]);
        }
        match (self.end, self.stray) {
            (Some(len), _) => super::Extent::End(len),
            (None, Some(at)) => super::Extent::Stray(at),
            (None, None) => super::Extent::More,
        }
    }

    /// Examine `s`, the text after the bytes already consumed.
    pub(crate) fn feed(&mut self, s: &str) {
        let gemma = self.syntax == Brackets::Gemma;
        let python = self.syntax == Brackets::Python;
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if self.end.is_some() || self.stray.is_some() {
                return;
            }
            let c = b[i];
            let at = self.consumed;
            if gemma && Some(&c) == self.quote.as_bytes().first() && !self.scalar {
                let rest = &s[i..];
                if rest.starts_with(self.quote.as_str()) {
                    if self.quoted.inside() {
                        self.quoted.close();
                    } else {
                        self.quoted.open_raw();
                    }
                    i += self.quote.len();
                    self.consumed += self.quote.len();
                    self.complete = self.consumed;
                    continue;
                }
                if self.quote.starts_with(rest) {
                    return; // A quote split across pieces: wait for the rest.
                }
            }
            i += 1;
            self.consumed += 1;
            if self.consumed == 1 && !matches!(c, b'{' | b'[') && !(python && c == b'(') {
                self.scalar = true;
            }
            if self.scalar {
                if matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}' | b']') {
                    self.end = Some(at);
                    return;
                }
                self.complete = self.consumed;
                continue;
            }
            if self.quoted.inside() {
                // Gemma's strings end at the quote token (above) only.
                self.quoted.step(c);
            } else {
                let word = std::mem::replace(&mut self.word, c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80);
                match c {
                    b'"' | b'\'' if python && word => {}
                    b'"' if !gemma => self.quoted.open(c),
                    b'\'' if python => self.quoted.open(c),
                    b'{' | b'[' => self.depth += 1,
                    b'(' if python => self.depth += 1,
                    b')' if python => {
                        self.depth = self.depth.saturating_sub(1);
                        if self.depth == 0 {
                            self.end = Some(self.consumed);
                        }
                    }
                    b'}' | b']' => {
                        self.depth = self.depth.saturating_sub(1);
                        if self.depth == 0 {
                            self.end = Some(self.consumed);
                        }
                    }
                    b'<' => {
                        self.stray = Some(at);
                        return;
                    }
                    _ => {}
                }
            }
            self.complete = self.consumed;
        }
    }
}
