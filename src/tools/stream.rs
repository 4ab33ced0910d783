//! The streaming tool-call parser: text deltas in, OpenAI-style deltas out.
//!
//! [`StreamParser`] reads model output in pieces of any size (a token's text, a
//! byte, the whole output) and emits [`StreamEvent`]s: content outside calls, then for
//! each call its index, id and name first, then `arguments` fragments whose
//! concatenation is the final arguments string. Whatever the split points, the events
//! and the final [`ParsedOutput`] are the same as for the whole text at once; the
//! non-streaming [`super::parse`] is this parser fed everything in one piece.
//!
//! Two ways of reading a call:
//! - **incremental** (for constrained generation, whose calls are valid by
//!   construction): the header `{"name": "NAME", "arguments": ` is recognised as soon as
//!   it is complete, and the arguments value streams out as it is generated, tracked by
//!   a small JSON scanner so the wrapper's closing brace and the end marker never leak
//!   into it. A call whose header has another shape is read whole instead.
//! - **whole** (native generation, where a call may be malformed): a call is emitted
//!   when its end marker arrives (an end marker inside an unfinished JSON string does
//!   not count) and its body parses; a body that does not parse goes to
//!   the content verbatim and counts as a failure — what a client of a plain server
//!   would see.
//!
//! Content is trimmed exactly like the non-streaming result: leading whitespace is
//! dropped, trailing whitespace is held back until more content follows, and a piece
//! of text that could be the start of the call marker is held until it is decided.

use serde_json::value::RawValue;

use super::format::{BodyKind, ToolFormat};
use super::{CalledFunction, ToolCall};

/// One delta of a streamed assistant turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// Text outside tool calls.
    Content(String),
    /// A call begins: sent once per call, before any of its arguments.
    CallStart {
        /// Position of the call in the turn (0, 1, …).
        index: usize,
        /// Its id (`call_…`).
        id: String,
        /// The function name.
        name: String,
    },
    /// The next piece of a call's `arguments` string.
    Arguments {
        /// The call's index.
        index: usize,
        /// Text to append to the arguments.
        fragment: String,
    },
    /// The next piece of the turn's reasoning (`reasoning_content`), when the parser
    /// was given reasoning markers ([`StreamParser::with_reasoning`]).
    Reasoning(String),
}

/// The aggregate of a turn: what the non-streaming API returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedOutput {
    /// Content outside calls, trimmed.
    pub content: String,
    /// The reasoning block's text (empty when there was none), trimmed.
    pub reasoning: String,
    /// The calls, in order.
    pub calls: Vec<ToolCall>,
    /// Call blocks that did not parse (kept in `content`).
    pub failures: usize,
    /// The text ended inside a call (generation cut by `max_tokens`): a call whose
    /// arguments had begun streaming stays in `calls` with its arguments cut short; one
    /// cut before that is dropped. Either way the turn's finish reason is `length`.
    pub truncated: bool,
}

/// Incremental parser of one assistant turn. See the [module docs](self).
///
/// ```
/// use toolgate::tools::format::for_family;
/// use toolgate::tools::stream::{StreamEvent, StreamParser};
///
/// let fmt = for_family("hermes")?.unwrap();
/// let mut p = StreamParser::new(Some(fmt), true, 7);
/// let mut events = Vec::new();
/// for piece in ["Sure. <tool", "_call>{\"name\": \"f\", \"argu", "ments\": {\"a\": 1}}</tool_call>"] {
///     events.extend(p.push(piece));
/// }
/// events.extend(p.finish());
/// assert_eq!(events[0], StreamEvent::Content("Sure.".into()));
/// assert!(matches!(&events[1], StreamEvent::CallStart { index: 0, name, .. } if name == "f"));
/// let out = p.output();
/// assert_eq!(out.calls[0].function.arguments, "{\"a\": 1}");
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: linear in the text; each piece is scanned once, apart from the held-back
/// tail (at most the marker's length) and, in whole mode, a call's body at its end.
#[derive(Debug, Clone)]
pub struct StreamParser {
    fmt: Option<ToolFormat>,
    incremental: bool,
    id_seed: u64,
    pending: String,
    call: Option<OpenCall>,
    started: bool,
    held_ws: String,
    out: ParsedOutput,
    finished: bool,
    reasoning: Option<super::reasoning::ReasoningSplitter>,
}

#[derive(Debug, Clone, Default)]
struct OpenCall {
    body: String,
    whole: bool,
    header: Option<Header>,
}

#[derive(Debug, Clone)]
struct Header {
    index: usize,
    args_start: usize,
    scan: ValueScan,
}

impl StreamParser {
    /// A parser for the calls of `fmt` (`None`: text only, no calls), reading calls
    /// incrementally (`true`) or whole (`false`). Call ids are
    /// `call_<seed as 8 hex digits><index as 4>`.
    pub fn new(fmt: Option<ToolFormat>, incremental: bool, id_seed: u64) -> Self {
        Self {
            fmt,
            incremental,
            id_seed,
            pending: String::new(),
            call: None,
            started: false,
            held_ws: String::new(),
            out: ParsedOutput::default(),
            finished: false,
            reasoning: None,
        }
    }

    /// Also split off a reasoning block `start`…`end` at the start of the turn (see
    /// [`super::reasoning`]): its text becomes [`StreamEvent::Reasoning`] and
    /// [`ParsedOutput::reasoning`], never content. `starts_inside` when the prompt
    /// already ends with `start`.
    pub fn with_reasoning(mut self, start: &str, end: &str, starts_inside: bool) -> Self {
        self.reasoning = Some(super::reasoning::ReasoningSplitter::new(start, end, starts_inside));
        self
    }

    fn pieces(&mut self, pieces: Vec<super::reasoning::Piece>, ev: &mut Vec<StreamEvent>) {
        for p in pieces {
            match p {
                super::reasoning::Piece::Reasoning(r) => {
                    self.out.reasoning.push_str(&r);
                    ev.push(StreamEvent::Reasoning(r));
                }
                super::reasoning::Piece::Text(t) => {
                    self.pending.push_str(&t);
                    self.drain(ev);
                }
            }
        }
    }

    /// Feed the next piece of text; returns the deltas it completes (possibly none).
    pub fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        let mut ev = Vec::new();
        if self.finished {
            return ev;
        }
        if let Some(r) = &mut self.reasoning {
            let pieces = r.push(text);
            self.pieces(pieces, &mut ev);
            return ev;
        }
        self.pending.push_str(text);
        self.drain(&mut ev);
        ev
    }

    /// End of the text: flush what was held back. A call still open is truncated (see
    /// [`ParsedOutput::truncated`]).
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        let mut ev = Vec::new();
        if self.finished {
            return ev;
        }
        if let Some(r) = &mut self.reasoning {
            let pieces = r.finish();
            self.pieces(pieces, &mut ev);
        }
        self.finished = true;
        if let Some(mut call) = self.call.take() {
            self.out.truncated = true;
            call.body.push_str(&std::mem::take(&mut self.pending));
            if let Some(h) = &mut call.header {
                if h.scan.end.is_none() {
                    h.scan.feed(&call.body[h.args_start + h.scan.consumed..]);
                }
                let (index, args_start, upto) = (h.index, h.args_start, h.args_start + h.scan.complete);
                self.stream_args(index, &call.body, args_start, upto, &mut ev);
            }
        }
        let rest = std::mem::take(&mut self.pending);
        self.content(&rest, &mut ev);
        ev
    }

    /// The turn so far (complete after [`Self::finish`]).
    pub fn output(&self) -> &ParsedOutput {
        &self.out
    }

    /// Consume the parser, returning the turn.
    pub fn into_output(self) -> ParsedOutput {
        self.out
    }

    fn drain(&mut self, ev: &mut Vec<StreamEvent>) {
        loop {
            let Some(fmt) = self.fmt.clone() else {
                let text = std::mem::take(&mut self.pending);
                self.content(&text, ev);
                return;
            };
            let Some(mut call) = self.call.take() else {
                if let Some(s) = self.pending.find(&fmt.call_start) {
                    let before = self.pending[..s].to_string();
                    self.content(&before, ev);
                    self.pending.drain(..s + fmt.call_start.len());
                    self.call = Some(OpenCall { whole: !self.incremental, ..OpenCall::default() });
                    continue;
                }
                let keep = partial_suffix(&self.pending, &fmt.call_start);
                let emit: String = self.pending.drain(..self.pending.len() - keep).collect();
                self.content(&emit, ev);
                return;
            };
            call.body.push_str(&std::mem::take(&mut self.pending));
            if !call.whole {
                if call.header.is_none() {
                    match read_header(&fmt, &call.body) {
                        HeaderRead::More => {}
                        HeaderRead::Other => call.whole = true,
                        HeaderRead::Found { name, args_start } => {
                            let index = self.out.calls.len();
                            let id = self.call_id(index);
                            ev.push(StreamEvent::CallStart { index, id: id.clone(), name: name.clone() });
                            self.out.calls.push(ToolCall {
                                id,
                                kind: "function".into(),
                                function: CalledFunction { name, arguments: String::new() },
                            });
                            call.header = Some(Header { index, args_start, scan: ValueScan::default() });
                        }
                    }
                }
                if let Some(h) = &mut call.header {
                    if h.scan.end.is_none() {
                        h.scan.feed(&call.body[h.args_start + h.scan.consumed..]);
                    }
                    let upto = h.args_start + h.scan.complete;
                    let (index, args_start) = (h.index, h.args_start);
                    self.stream_args(index, &call.body, args_start, upto, ev);
                    if let Some(end) = h.scan.end {
                        let after = args_start + end;
                        if let Some(e) = call.body[after..].find(&fmt.call_end) {
                            self.pending = call.body.split_off(after + e + fmt.call_end.len());
                            continue;
                        }
                    }
                    self.call = Some(call);
                    return;
                }
            }
            if call.whole {
                if let Some(e) = whole_call_end(&fmt, &call.body) {
                    self.pending = call.body.split_off(e + fmt.call_end.len());
                    call.body.truncate(e);
                    self.close_whole(&fmt, &call.body, ev);
                    continue;
                }
            }
            self.call = Some(call);
            return;
        }
    }

    fn call_id(&self, index: usize) -> String {
        format!("call_{:08x}{:04x}", self.id_seed as u32, index)
    }

    /// Emit `body[args_start..upto]` beyond what call `index` already has.
    fn stream_args(&mut self, index: usize, body: &str, args_start: usize, upto: usize, ev: &mut Vec<StreamEvent>) {
        let args = &mut self.out.calls[index].function.arguments;
        let from = args_start + args.len();
        // Fragments end on char boundaries: a character split across pieces goes out whole.
        let mut upto = upto.min(body.len());
        while !body.is_char_boundary(upto) {
            upto -= 1;
        }
        if upto > from {
            let fragment = body[from..upto].to_string();
            args.push_str(&fragment);
            ev.push(StreamEvent::Arguments { index, fragment });
        }
    }

    fn close_whole(&mut self, fmt: &ToolFormat, body: &str, ev: &mut Vec<StreamEvent>) {
        match parse_body(fmt, body.trim()) {
            Some((name, arguments)) => {
                let index = self.out.calls.len();
                let id = self.call_id(index);
                ev.push(StreamEvent::CallStart { index, id: id.clone(), name: name.clone() });
                if !arguments.is_empty() {
                    ev.push(StreamEvent::Arguments { index, fragment: arguments.clone() });
                }
                self.out.calls.push(ToolCall {
                    id,
                    kind: "function".into(),
                    function: CalledFunction { name, arguments },
                });
            }
            None => {
                self.out.failures += 1;
                self.content(&format!("{}{body}{}", fmt.call_start, fmt.call_end), ev);
            }
        }
    }

    /// Append content, trimming at both ends of the whole turn.
    fn content(&mut self, text: &str, ev: &mut Vec<StreamEvent>) {
        let text = if self.started { text } else { text.trim_start() };
        if text.is_empty() {
            return;
        }
        self.started = true;
        let body = text.trim_end();
        let tail = &text[body.len()..];
        if body.is_empty() {
            self.held_ws.push_str(tail);
            return;
        }
        let mut s = std::mem::take(&mut self.held_ws);
        s.push_str(body);
        self.held_ws.push_str(tail);
        self.out.content.push_str(&s);
        match ev.last_mut() {
            Some(StreamEvent::Content(c)) => c.push_str(&s),
            _ => ev.push(StreamEvent::Content(s)),
        }
    }
}

/// Where a whole-mode call ends: the first end marker before which the body is not
/// JSON cut short — so an end marker inside a string argument does not end the call.
fn whole_call_end(fmt: &ToolFormat, body: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(e) = body[from..].find(&fmt.call_end).map(|e| e + from) {
        let BodyKind::JsonNameArguments = fmt.body;
        match serde_json::from_str::<serde::de::IgnoredAny>(body[..e].trim()) {
            Err(err) if err.is_eof() => from = e + fmt.call_end.len(),
            _ => return Some(e),
        }
    }
    None
}

/// Length of the longest proper suffix of `s` that is a prefix of `marker`, on a char
/// boundary.
fn partial_suffix(s: &str, marker: &str) -> usize {
    let max = marker.len().saturating_sub(1).min(s.len());
    (1..=max).rev().find(|&k| s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..])).unwrap_or(0)
}

enum HeaderRead {
    More,
    Other,
    Found { name: String, args_start: usize },
}

/// Read `{"<name_key>": "NAME", "<arguments_key>": ` at the start of `body` (JSON
/// whitespace anywhere between tokens), up to the first character of a non-string
/// arguments value.
fn read_header(fmt: &ToolFormat, body: &str) -> HeaderRead {
    let BodyKind::JsonNameArguments = fmt.body;
    let b = body.as_bytes();
    let mut i = 0;
    macro_rules! ws {
        () => {
            while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
                i += 1;
            }
            if i == b.len() {
                return HeaderRead::More;
            }
        };
    }
    macro_rules! byte {
        ($c:expr) => {
            ws!();
            if b[i] != $c {
                return HeaderRead::Other;
            }
            i += 1;
        };
    }
    macro_rules! string {
        () => {{
            ws!();
            if b[i] != b'"' {
                return HeaderRead::Other;
            }
            let Some(len) = json_string_len(&body[i..]) else { return HeaderRead::More };
            let Ok(s) = serde_json::from_str::<String>(&body[i..i + len]) else { return HeaderRead::Other };
            i += len;
            s
        }};
    }
    byte!(b'{');
    if string!() != fmt.name_key {
        return HeaderRead::Other;
    }
    byte!(b':');
    let name = string!();
    byte!(b',');
    if string!() != fmt.arguments_key {
        return HeaderRead::Other;
    }
    byte!(b':');
    ws!();
    if b[i] == b'"' {
        // Arguments given as a JSON string: decoded when the call is whole.
        return HeaderRead::Other;
    }
    HeaderRead::Found { name, args_start: i }
}

/// Byte length of the JSON string token at the start of `s` (which starts with `"`),
/// or `None` if it is not closed yet.
fn json_string_len(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.bytes().enumerate().skip(1) {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, b'"') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// Tracks where a JSON value (object, array or scalar) ends, byte by byte.
#[derive(Debug, Clone, Default)]
struct ValueScan {
    /// Bytes examined.
    consumed: usize,
    /// Bytes known to belong to the value.
    complete: usize,
    /// The value's length, once it has ended.
    end: Option<usize>,
    depth: usize,
    in_string: bool,
    escaped: bool,
    scalar: bool,
}

impl ValueScan {
    fn feed(&mut self, s: &str) {
        for &c in s.as_bytes() {
            if self.end.is_some() {
                return;
            }
            let at = self.consumed;
            self.consumed += 1;
            if self.consumed == 1 && !matches!(c, b'{' | b'[') {
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
            if self.in_string {
                match (self.escaped, c) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
            } else {
                match c {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth = self.depth.saturating_sub(1);
                        if self.depth == 0 {
                            self.end = Some(self.consumed);
                        }
                    }
                    _ => {}
                }
            }
            self.complete = self.consumed;
        }
    }
}

/// Parse a whole call body: `(name, arguments)`; arguments are the value's own text
/// (or the decoded string if the model wrote them as a JSON string), `{}` if absent.
pub(crate) fn parse_body(f: &ToolFormat, body: &str) -> Option<(String, String)> {
    match f.body {
        BodyKind::JsonNameArguments => {
            let map: std::collections::HashMap<String, &RawValue> = serde_json::from_str(body).ok()?;
            let name: String = serde_json::from_str(map.get(&f.name_key)?.get()).ok()?;
            let args = match map.get(&f.arguments_key) {
                Some(raw) if raw.get().starts_with('"') => serde_json::from_str::<String>(raw.get()).ok()?,
                Some(raw) => raw.get().to_string(),
                None => "{}".into(),
            };
            Some((name, args))
        }
    }
}
