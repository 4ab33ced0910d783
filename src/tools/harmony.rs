//! OpenAI's harmony message format (gpt-oss): message headers read and rewritten into
//! the template's own spelling, incrementally.
//!
//! A harmony turn is a run of messages, each `[<|start|>assistant]<|channel|>CHANNEL
//! [ to=functions.NAME][ <|constrain|>json]<|message|>BODY` ended by `<|end|>`,
//! `<|call|>` or `<|return|>` (the last two end generation and never reach the text).
//! The recipient may also come before the channel (` to=functions.NAME<|channel|>
//! commentary json<|message|>`, the order gpt-oss's template renders past calls in).
//! That is more than markers: the same call has two spellings, and channel headers
//! must not reach the answer. [`HarmonyFilter`] reads each header whole and writes:
//!
//! - `analysis` → the reasoning block `<|channel|>analysis<|message|>…<|end|>`
//!   ([`HARMONY_REASONING`], which the reasoning splitter reads);
//! - a message to `functions.NAME` → `{call_start}NAME{name_end}` of the call layout
//!   derived from the template, whatever order the model wrote the header in;
//! - `final`, and `commentary` without a recipient (a preamble) → nothing: the body is
//!   answer text;
//! - `<|end|>` after an answer or call → nothing; after reasoning → `<|end|>`.
//!
//! Text that does not start like a header (a model that skips the format) passes
//! through unchanged. A marker split across pieces is held until it is decided, so the
//! output does not depend on where the pieces split.

use super::body::partial_suffix;

/// The reasoning block of a harmony turn, `(start, end)`, as the reasoning splitter
/// reads it ([`crate::template::family::REASONING_MARKERS`] holds it too).
pub const HARMONY_REASONING: (&str, &str) = ("<|channel|>analysis<|message|>", "<|end|>");

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const RETURN: &str = "<|return|>";
const CALL: &str = "<|call|>";
const RECIPIENT: &str = "to=functions.";
/// A header longer than this is not one: its text passes through.
const MAX_HEADER: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Answer,
    Call,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between messages: what comes next is a header (or plain text).
    Header,
    /// Inside a message's body.
    In(Body),
    /// Not harmony after all: everything passes through.
    Plain,
}

/// Rewrites harmony headers; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct HarmonyFilter {
    call_start: String,
    name_end: String,
    state: State,
    held: String,
}

impl HarmonyFilter {
    /// A filter writing calls as `{call_start}NAME{name_end}` (the layout derived from
    /// the template).
    pub fn new(call_start: &str, name_end: &str) -> Self {
        Self { call_start: call_start.into(), name_end: name_end.into(), state: State::Header, held: String::new() }
    }

    /// Feed the next piece of model output; returns the rewritten text it completes.
    /// Cost: linear in the piece (a held partial marker is re-read once).
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let mut out = String::new();
        loop {
            match self.state {
                State::Plain => {
                    out.push_str(&std::mem::take(&mut self.held));
                    return out;
                }
                State::Header => {
                    let Some(at) = self.held.find(MESSAGE) else {
                        if self.held.len() > MAX_HEADER || !could_be_header(&self.held) {
                            self.state = State::Plain;
                            continue;
                        }
                        return out;
                    };
                    let header: String = self.held.drain(..at + MESSAGE.len()).collect();
                    let (body, rewritten) = self.read_header(&header[..at]);
                    out.push_str(&rewritten);
                    self.state = State::In(body);
                }
                State::In(body) => {
                    // The body runs to the first message end or next message start.
                    let ends = [END, RETURN, CALL, START];
                    let found = ends.iter().filter_map(|m| self.held.find(m).map(|i| (i, *m))).min();
                    match found {
                        Some((i, marker)) => {
                            out.push_str(&self.held[..i]);
                            self.held.drain(..i + if marker == START { 0 } else { marker.len() });
                            match (body, marker) {
                                (Body::Reasoning, _) => out.push_str(END),
                                (Body::Call, CALL) => out.push_str(CALL),
                                _ => {}
                            }
                            self.state = State::Header;
                        }
                        None => {
                            // Hold a tail that may be the start of a marker.
                            let keep = ends.iter().map(|m| partial_suffix(&self.held, m)).max().unwrap_or(0);
                            let cut = self.held.len() - keep;
                            out.push_str(&self.held[..cut]);
                            self.held.drain(..cut);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// End of the output: what is still held, as it was written.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// What a header says, and its rewriting.
    fn read_header(&self, header: &str) -> (Body, String) {
        let header = header.trim_start();
        let header = header.strip_prefix(START).unwrap_or(header);
        let header = header.strip_prefix("assistant").unwrap_or(header);
        if let Some(at) = header.find(RECIPIENT) {
            let rest = &header[at + RECIPIENT.len()..];
            let end = rest.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(rest.len());
            let name = &rest[..end];
            return (Body::Call, format!("{}{name}{}", self.call_start, self.name_end));
        }
        let channel = header.split(CHANNEL).nth(1).unwrap_or("");
        let channel = channel.split([' ', '<']).next().unwrap_or("").trim();
        if channel == "analysis" {
            return (Body::Reasoning, HARMONY_REASONING.0.to_string());
        }
        // (`<|constrain|>json` only names the body's syntax.)
        (Body::Answer, String::new())
    }
}

/// Whether `text` (no `<|message|>` yet) may still become a harmony header.
fn could_be_header(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty()
        || [START, CHANNEL, " to=", "to="].iter().any(|m| t.starts_with(m) || m.starts_with(t))
        || t.starts_with("assistant")
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_example() {
        use crate::tools::harmony::HarmonyFilter;
        let mut f = HarmonyFilter::new("to=functions.", "<|channel|>commentary json<|message|>");
        let mut out = String::new();
        for piece in [
            "<|channel|>analysis<|message|>Need wea",
            "ther.<|end|><|start|>assistant<|channel|>comm",
            "entary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
        ] {
            out += &f.push(piece);
        }
        out += &f.finish();
        assert_eq!(
            out,
            "<|channel|>analysis<|message|>Need weather.<|end|>\
                         to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Oslo\"}"
        );
    }
}
