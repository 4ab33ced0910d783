//! The streaming tool-call parser: text deltas in, OpenAI-style deltas out.
//!
//! [`StreamParser`] reads model output in pieces of any size (a token's text, a
//! byte, the whole output) and emits [`StreamEvent`]s: content outside calls, then for
//! each call its index, id and name first, then `arguments` fragments whose
//! concatenation is the final arguments string. Whatever the split points, the events
//! and the final [`ParsedOutput`] are the same as for the whole text at once; the
//! non-streaming [`super::parse`] is this parser fed everything in one piece.
//!
//! The calls' layout comes from the family's [`ToolFormat`]: an optional section
//! around all calls (a JSON array of them, for list formats), each call's start and end
//! markers, and a body that is either one JSON object naming the function or the name
//! followed by the arguments value.
//!
//! Two ways of reading a call:
//! - **incremental** (for constrained generation, whose calls are valid by
//!   construction): the function name is emitted as soon as it is complete (the header
//!   `{"name": "NAME", "arguments": ` of a JSON body, or the text before `name_end`),
//!   and JSON arguments stream out as they are generated, tracked by a small scanner so
//!   the wrapper's closing brace and the end marker never leak into them. A JSON body
//!   whose header has another shape, and arguments in a non-JSON dialect (converted to
//!   JSON at the end), are emitted when the call is complete.
//! - **whole** (native generation, where a call may be malformed): a call is emitted
//!   when its value and end marker are complete (markers inside strings do not count)
//!   and its body parses; a call that does not parse goes to the content verbatim, up
//!   to its end marker, and counts as a failure — what a client of a plain server
//!   would see.
//!
use super::body::{leading_ws, parse_body, partial_suffix, read_header, read_name, HeaderRead};
use super::dialect::{Extent, ValueScan};
use super::format::{BodyKind, CallIds, ToolFormat};
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
    /// The text ended inside a call (generation cut by `max_tokens`). After
    /// [`StreamParser::cut`] (the engine said the budget ended inside a call) the cut
    /// call is dropped from `calls` — even where its first arguments had already
    /// streamed — and its text is not content. Without it (native mode, where nothing
    /// says whether the model meant a call), a call whose arguments had begun
    /// streaming stays in `calls` with its arguments cut short, as OpenAI does, and one
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
/// tail (at most a marker's length) and, in whole mode, a call's body at its end.
#[derive(Debug, Clone)]
pub struct StreamParser {
    fmt: Option<ToolFormat>,
    incremental: bool,
    id_seed: u64,
    pending: String,
    at: Place,
    started: bool,
    held_ws: String,
    /// Content kept exactly as generated (no trimming): raw completion.
    verbatim: bool,
    out: ParsedOutput,
    finished: bool,
    reasoning: Option<super::reasoning::ReasoningSplitter>,
    /// Harmony's message headers, rewritten before anything else reads the text.
    harmony: Option<super::harmony::HarmonyFilter>,
    /// Per function, its parameters declared as strings (for dialects without quotes).
    string_params: std::collections::HashMap<String, std::collections::HashSet<String>>,
    /// The generation was cut inside a call ([`Self::cut`]).
    cut: bool,
    /// A call outside any section has just ended: the layout's separator may follow,
    /// before the next call's trigger, and is not content then.
    after_call: bool,
    /// The first call was opened by the prompt ([`Self::opened_by_prompt`]) and has
    /// not ended yet.
    opened_call: bool,
}

/// Where the parser is in the turn.
#[derive(Debug, Clone, Default)]
enum Place {
    /// Free text, looking for the format's trigger.
    #[default]
    Text,
    /// Inside a section, between calls.
    Section(Section),
    /// Inside a call.
    Call(Box<OpenCall>),
}

#[derive(Debug, Clone, Default)]
struct Section {
    /// Text read in the section that belongs to no call (markers, separators): what a
    /// client sees if the section turns out malformed.
    text: String,
    list_open: bool,
    list_closed: bool,
    /// Calls read in this section.
    calls: usize,
}

#[derive(Debug, Clone, Default)]
struct OpenCall {
    /// The section the call is in, to return to when it ends.
    section: Option<Section>,
    /// What a client sees before the call's start marker if the call is malformed
    /// (the section's trigger and text, for its first call).
    prefix: String,
    /// Text after the call's start marker.
    body: String,
    /// Where the value starts in `body` (the JSON object of a JSON body, the arguments
    /// of a name-then-arguments body), once known.
    value_start: Option<usize>,
    /// The function name of a name-then-arguments body and where the text after its
    /// `name_end` begins, once read.
    name: Option<(String, usize)>,
    /// Scans the value from `value_start`.
    scan: ValueScan,
    /// The header of a JSON body has been tried (incrementally) and is not the
    /// `{"name": …, "arguments": …}` shape: read the call whole.
    no_header: bool,
    /// The call has been announced ([`StreamEvent::CallStart`]) and streams its arguments.
    streamed: Option<Streamed>,
    /// The call is malformed from this body offset on: skipping to its end.
    broken: Option<usize>,
}

#[derive(Debug, Clone)]
struct Streamed {
    index: usize,
    /// Where the arguments start in the body, once known, and their own scanner for a
    /// JSON body (inside the object); a name-then-arguments body's arguments are the
    /// value itself, scanned by [`OpenCall::scan`].
    args: Option<usize>,
    inner: Option<ValueScan>,
    /// Stream fragments (JSON arguments) or only the converted whole at the end.
    fragments: bool,
}

/// What reading a call's body gave.
enum CallStep {
    /// Needs more text.
    More,
    /// The call is complete and used this many bytes of the body.
    Done(usize),
}

impl StreamParser {
    /// A parser for the calls of `fmt` (`None`: text only, no calls), reading calls
    /// incrementally (`true`) or whole (`false`). Call ids are
    /// `call_<seed as 8 hex digits><index as 4>`, or nine letters and digits derived from
    /// the seed and index for a format with [`CallIds::Alnum9`].
    pub fn new(fmt: Option<ToolFormat>, incremental: bool, id_seed: u64) -> Self {
        Self {
            fmt,
            incremental,
            id_seed,
            pending: String::new(),
            at: Place::Text,
            started: false,
            held_ws: String::new(),
            verbatim: false,
            out: ParsedOutput::default(),
            finished: false,
            reasoning: None,
            harmony: None,
            string_params: Default::default(),
            cut: false,
            after_call: false,
            opened_call: false,
        }
    }

    /// The prompt ended with the layout's trigger
    /// ([`super::format::ToolFormat::prompt_opens_call`]): read the output as if it
    /// began with it. A first call that names no declared tool was text the model
    /// wrote without the layout's `text_start`: it is content (without the trigger,
    /// which the model did not write), not a failed call.
    ///
    /// ```
    /// use toolgate::tools::format::{BodyKind, ToolFormat};
    /// use toolgate::tools::stream::StreamParser;
    /// let f = ToolFormat {
    ///     call_start: ">>>".into(),
    ///     body: BodyKind::NameThenArguments,
    ///     name_end: "\n".into(),
    ///     prompt_opens_call: true,
    ///     text_start: "all\n".into(),
    ///     ..ToolFormat::json_body("functionary-like", "an example")
    /// };
    /// let read = |text: &str| {
    ///     let mut p = StreamParser::new(Some(f.clone()), true, 0).opened_by_prompt();
    ///     p.push(text);
    ///     p.finish();
    ///     let out = p.into_output();
    ///     (out.content, out.calls.len(), out.failures)
    /// };
    /// assert_eq!(read("get_time\n{}"), (String::new(), 1, 0));
    /// assert_eq!(read("all\nIt is noon."), ("It is noon.".to_string(), 0, 0));
    /// assert_eq!(read("It is noon."), ("It is noon.".to_string(), 0, 0));
    /// ```
    ///
    /// Cost: none beyond reading the trigger.
    pub fn opened_by_prompt(mut self) -> Self {
        if let Some(trigger) = self.fmt.as_ref().map(|f| f.trigger().to_string()).filter(|t| !t.is_empty()) {
            self.opened_call = true;
            self.push(&trigger);
        }
        self
    }

    /// Whether `name` is a declared tool's (any name where no tools were given).
    fn declared(&self, name: &str) -> bool {
        self.string_params.is_empty() || self.string_params.contains_key(name)
    }

    /// Whether `call` is the one the prompt opened ([`Self::opened_by_prompt`]) and has
    /// named no declared tool: the model's text, not a call.
    fn opened_text(&self, call: &OpenCall) -> bool {
        self.opened_call && !call.name.as_ref().is_some_and(|(n, _)| self.declared(n))
    }

    /// Tell the parser, before [`Self::finish`], that the generation was cut by its
    /// token budget inside a call the constraint had opened
    /// ([`crate::engine::Generation::unfinished`]): at `finish` the open call is dropped
    /// (from `calls`, and its text from the content) and the output is
    /// [`ParsedOutput::truncated`]. Deltas already streamed for it stay streamed.
    ///
    /// ```
    /// use toolgate::tools::format::for_family;
    /// use toolgate::tools::stream::StreamParser;
    /// let mut p = StreamParser::new(Some(for_family("hermes")?.unwrap()), true, 0);
    /// p.push("On it.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par");
    /// p.cut();
    /// p.finish();
    /// let out = p.output();
    /// assert_eq!((out.content.as_str(), out.calls.len(), out.truncated), ("On it.", 0, true));
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn cut(&mut self) {
        self.cut = true;
    }

    /// Keep the content exactly as generated, leading and trailing whitespace included
    /// (a raw completion continues its prompt; a chat turn's content is trimmed).
    pub fn verbatim(mut self) -> Self {
        self.verbatim = true;
        self
    }

    /// Read arguments with the declared tools' parameter types: an XML-style dialect
    /// has no quotes, so a parameter declared as a string stays text even when it
    /// looks like a number.
    pub fn with_tools(mut self, tools: &[super::Tool]) -> Self {
        self.string_params = tools
            .iter()
            .map(|t| {
                let props = t.function.parameters.get("properties").and_then(|p| p.as_object());
                let strings = props
                    .into_iter()
                    .flatten()
                    .filter(|(_, schema)| declares_string(schema))
                    .map(|(k, _)| k.clone())
                    .collect();
                (t.function.name.clone(), strings)
            })
            .collect();
        self
    }

    /// Also split off a reasoning block `start`…`end` at the start of the turn (see
    /// `super::reasoning`): its text becomes [`StreamEvent::Reasoning`] and
    /// [`ParsedOutput::reasoning`], never content. `starts_inside` when the prompt
    /// already ends with `start`.
    ///
    /// Harmony's reasoning markers (`super::harmony::HARMONY_REASONING`) also turn on
    /// the `super::harmony::HarmonyFilter`: every message header the model writes is
    /// read and rewritten into this parser's layout before anything else sees it.
    pub fn with_reasoning(mut self, start: &str, end: &str, starts_inside: bool) -> Self {
        self.reasoning = Some(super::reasoning::ReasoningSplitter::new(start, end, starts_inside));
        if (start, end) == super::harmony::HARMONY_REASONING {
            let (call_start, name_end) = match &self.fmt {
                Some(f) => (f.call_start.as_str(), f.name_end.as_str()),
                None => ("to=functions.", "<|channel|>commentary json<|message|>"),
            };
            self.harmony = Some(super::harmony::HarmonyFilter::new(call_start, name_end));
        }
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
        let rewritten;
        let text = match &mut self.harmony {
            Some(h) => {
                rewritten = h.push(text);
                rewritten.as_str()
            }
            None => text,
        };
        if let Some(r) = &mut self.reasoning {
            let pieces = r.push(text);
            self.pieces(pieces, &mut ev);
            return ev;
        }
        self.pending.push_str(text);
        self.drain(&mut ev);
        ev
    }

    /// The turn ended on an end-of-generation control token whose text is `marker`
    /// (the engine stops there and never shows it as text). When a call or section is
    /// open and `marker` is what closes it (gpt-oss's `<|call|>` ends both the call
    /// and the turn), it is read as that closer, so the call is complete; otherwise
    /// nothing happens. Call before [`Self::finish`]. Returns the deltas it completes.
    ///
    /// ```
    /// use toolgate::tools::format::ToolFormat;
    /// use toolgate::tools::stream::StreamParser;
    /// let fmt: ToolFormat = serde_json::from_value(serde_json::json!({"family": "harmony-like",
    ///     "description": "", "call_start": "to=functions.", "call_end": "<|call|>",
    ///     "body": "name_then_arguments", "name_end": "<|message|>"}))?;
    /// let mut p = StreamParser::new(Some(fmt), false, 0);
    /// p.push("to=functions.f<|message|>{\"a\": 1}");
    /// p.end_of_turn("<|call|>");
    /// p.finish();
    /// assert_eq!(p.output().calls[0].function.name, "f");
    /// assert!(!p.output().truncated);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn end_of_turn(&mut self, marker: &str) -> Vec<StreamEvent> {
        let closes = match (&self.at, &self.fmt) {
            (Place::Call(_), Some(f)) => f.call_end == marker || (f.call_end.is_empty() && f.section_end == marker),
            (Place::Section(_), Some(f)) => f.section_end == marker,
            _ => false,
        };
        if closes && !marker.is_empty() {
            self.push(marker)
        } else {
            Vec::new()
        }
    }

    /// End of the text: flush what was held back. A call still open is truncated (see
    /// [`ParsedOutput::truncated`]); a malformed one still open goes to the content.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        let mut ev = Vec::new();
        if self.finished {
            return ev;
        }
        if let Some(rest) = self.harmony.take().map(|mut h| h.finish()) {
            ev.extend(self.push(&rest));
        }
        if let Some(r) = &mut self.reasoning {
            let pieces = r.finish();
            self.pieces(pieces, &mut ev);
        }
        self.finished = true;
        match std::mem::take(&mut self.at) {
            // Held back as the start of a marker, and the budget cut there: the opener of
            // a call that never came.
            Place::Text if self.cut => self.pending.clear(),
            Place::Text => {}
            Place::Section(sec) => {
                if sec.calls == 0 || self.cut {
                    // The trigger, then nothing that became a call; or complete calls
                    // in a section the budget cut before its end.
                    self.out.truncated = true;
                    self.pending.clear();
                }
            }
            Place::Call(mut call) => {
                call.body.push_str(&std::mem::take(&mut self.pending));
                if let Some(fmt) = self.fmt.clone() {
                    if self.cut {
                        // Cut by the budget inside a call the constraint had opened:
                        // neither a call nor content.
                        self.out.truncated = true;
                        if let Some(st) = &call.streamed {
                            self.out.calls.truncate(st.index);
                        }
                    } else if call.broken.is_some() {
                        self.fail(&fmt, &call, call.body.len(), &mut ev);
                    } else if self.opened_text(&call) {
                        // The prompt's call never named a tool: the model's text.
                        let text = std::mem::take(&mut call.body);
                        self.content(&text, &mut ev);
                    } else if fmt.trigger_in_body() && call.streamed.is_none() {
                        // Without a marker, an unfinished object is as likely text
                        // that happens to start like a call: the client sees it.
                        let text = std::mem::take(&mut call.body);
                        self.content(&text, &mut ev);
                    } else {
                        self.out.truncated = true;
                        if let Some(v0) = call.value_start {
                            if call.scan.end.is_none() {
                                call.scan.feed(&call.body[v0 + call.scan.consumed..]);
                            }
                        }
                        self.stream(&mut call, &mut ev);
                    }
                }
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
        let Some(fmt) = self.fmt.clone() else {
            let text = std::mem::take(&mut self.pending);
            self.content(&text, ev);
            return;
        };
        loop {
            let more = match std::mem::take(&mut self.at) {
                Place::Text => self.text(&fmt, ev),
                Place::Section(sec) => self.section(&fmt, sec, ev),
                Place::Call(call) => self.call(&fmt, call, ev),
            };
            if more {
                return;
            }
        }
    }

    /// Free text: emit it up to the trigger. Returns `true` when more text is needed.
    fn text(&mut self, fmt: &ToolFormat, ev: &mut Vec<StreamEvent>) -> bool {
        let trigger = fmt.trigger();
        // Between two calls outside a section, the separator is no content (Muse
        // Glimmer's `<|eom|><|start|>assistant ` before the next `to=`): held back until
        // the next trigger decides.
        let sep = fmt.separator.trim();
        if std::mem::take(&mut self.after_call) && !sep.is_empty() {
            let ws = self.pending.len() - self.pending.trim_start().len();
            let p = &self.pending[ws..];
            let after = p.strip_prefix(sep).map(|r| (r.len() - r.trim_start().len(), r.trim_start()));
            match after {
                Some((gap, rest)) if rest.starts_with(trigger) => {
                    self.pending.drain(..ws + sep.len() + gap);
                }
                Some((_, rest)) if trigger.starts_with(rest) => {
                    self.after_call = true;
                    return true;
                }
                None if sep.starts_with(p) => {
                    self.after_call = true;
                    return true;
                }
                _ => {}
            }
        }
        if let Some(s) = self.pending.find(trigger) {
            // The trigger, then the layout's text start (Functionary v3.2's `>>>all\n`):
            // text goes on, and neither is content.
            let (ts, rest) = (fmt.text_start.as_str(), &self.pending[s + trigger.len()..]);
            if !ts.is_empty() && (rest.starts_with(ts) || ts.starts_with(rest)) {
                let before: String = self.pending.drain(..s).collect();
                self.content(&before, ev);
                if self.pending[trigger.len()..].starts_with(ts) {
                    self.pending.drain(..trigger.len() + ts.len());
                    self.opened_call = false;
                    return false;
                }
                return true; // held until the text start is whole, or is not
            }
            let before = self.pending[..s].to_string();
            self.content(&before, ev);
            // A body trigger is the start of the call's own text: keep it.
            self.pending.drain(..if fmt.trigger_in_body() { s } else { s + trigger.len() });
            self.at = if fmt.has_section() {
                Place::Section(Section { list_open: fmt.start_opens_list(), ..Section::default() })
            } else {
                Place::Call(Box::default())
            };
            return false;
        }
        let keep = partial_suffix(&self.pending, trigger);
        let emit: String = self.pending.drain(..self.pending.len() - keep).collect();
        self.content(&emit, ev);
        true
    }

    /// Between the calls of a section. Returns `true` when more text is needed.
    fn section(&mut self, fmt: &ToolFormat, mut sec: Section, ev: &mut Vec<StreamEvent>) -> bool {
        loop {
            let ws = self.pending.len() - self.pending.trim_start().len();
            sec.text.extend(self.pending.drain(..ws));
            if self.pending.is_empty() {
                self.at = Place::Section(sec);
                return true;
            }
            let p = self.pending.as_str();
            let mut punct = None;
            if fmt.list && !sec.list_open && p.starts_with('[') {
                sec.list_open = true;
                punct = Some(1);
            } else if fmt.list && sec.list_open && !sec.list_closed && p.starts_with(']') {
                sec.list_closed = true;
                punct = Some(1);
            } else if fmt.list && sec.list_open && !sec.list_closed && sec.calls > 0 && p.starts_with(',') {
                punct = Some(1);
            } else if !fmt.list && sec.calls > 0 {
                let sep = fmt.separator.trim();
                if !sep.is_empty() && p.starts_with(sep) {
                    punct = Some(sep.len());
                }
            }
            if let Some(n) = punct {
                sec.text.extend(self.pending.drain(..n));
                continue;
            }
            let may_end = !fmt.list || sec.list_closed;
            // Whitespace before the section end was drained above (vLLM's DeepSeek
            // examples indent it: `        <｜tool▁calls▁end｜>`).
            let section_end = fmt.section_end.trim_start();
            if may_end && !section_end.is_empty() && p.starts_with(section_end) {
                self.pending.drain(..section_end.len());
                return false;
            }
            if fmt.list && sec.list_closed && fmt.section_end.is_empty() {
                return false;
            }
            let may_call = !fmt.list || (sec.list_open && !sec.list_closed);
            let opens = if !fmt.call_start.is_empty() {
                p.starts_with(&fmt.call_start)
            } else if fmt.body == BodyKind::JsonNameArguments {
                p.starts_with('{')
            } else if !fmt.name_prefix.is_empty() {
                p.starts_with(&fmt.name_prefix)
            } else {
                // A bare name (pythonic `[f(a=1), g()]`).
                p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            };
            if may_call && opens {
                self.pending.drain(..fmt.call_start.len());
                let prefix = if sec.calls == 0 {
                    format!("{}{}", fmt.trigger(), std::mem::take(&mut sec.text))
                } else {
                    std::mem::take(&mut sec.text)
                };
                sec.calls += 1;
                self.at = Place::Call(Box::new(OpenCall { section: Some(sec), prefix, ..OpenCall::default() }));
                return false;
            }
            let could_be = |m: &str| !m.is_empty() && m.starts_with(p);
            if (may_end && could_be(section_end)) || (may_call && could_be(&fmt.call_start)) {
                self.at = Place::Section(sec);
                return true;
            }
            // Anything else ends the section: after calls it is text; before any call,
            // the trigger did not lead to one, which a client sees as text.
            if sec.calls == 0 {
                self.out.failures += 1;
                let text = format!("{}{}", fmt.trigger(), sec.text);
                self.content(&text, ev);
            }
            return false;
        }
    }

    /// Inside a call. Returns `true` when more text is needed.
    fn call(&mut self, fmt: &ToolFormat, mut call: Box<OpenCall>, ev: &mut Vec<StreamEvent>) -> bool {
        call.body.push_str(&std::mem::take(&mut self.pending));
        match self.read_call(fmt, &mut call, ev) {
            CallStep::More => {
                self.at = Place::Call(call);
                true
            }
            CallStep::Done(used) => {
                self.opened_call = false;
                self.pending = call.body.split_off(used);
                self.after_call = call.section.is_none();
                self.at = call.section.take().map(Place::Section).unwrap_or_default();
                false
            }
        }
    }

    fn read_call(&mut self, fmt: &ToolFormat, call: &mut OpenCall, ev: &mut Vec<StreamEvent>) -> CallStep {
        if call.broken.is_some() {
            return self.skip_broken(fmt, call, ev);
        }
        let name_then = fmt.body == BodyKind::NameThenArguments;
        if name_then && call.name.is_none() {
            match read_name(fmt, &call.body) {
                None => return CallStep::More,
                Some(Err(())) => return self.break_at(fmt, call, 0, ev),
                Some(Ok(found)) => {
                    // A name no tool has is read whole: no call is announced for it.
                    if self.incremental && self.declared(&found.0) {
                        let index = self.announce(found.0.clone(), ev);
                        let fragments = fmt.dialect.syntax().streams_as_written();
                        call.streamed = Some(Streamed { index, args: None, inner: None, fragments });
                    }
                    call.name = Some(found);
                }
            }
        }
        let v0 = match call.value_start {
            Some(v0) => v0,
            None => {
                let from = call.name.as_ref().map_or(0, |(_, after)| *after);
                let v0 = if let Some(open) = fmt.dialect.syntax().opener() {
                    let v0 = from + leading_ws(&call.body[from..]);
                    match call.body.as_bytes().get(v0) {
                        None => return CallStep::More,
                        Some(&c) if c == open => {}
                        Some(_) => return self.break_at(fmt, call, v0, ev),
                    }
                    v0
                } else {
                    from // the dialect reads its own whitespace
                };
                call.value_start = Some(v0);
                if let Some(st) = call.streamed.as_mut() {
                    st.args = Some(v0);
                }
                v0
            }
        };
        if self.incremental && !name_then && call.streamed.is_none() && !call.no_header {
            match read_header(fmt, &call.body[v0..]) {
                HeaderRead::More => {}
                HeaderRead::Found { name, .. } if !self.declared(&name) => call.no_header = true,
                HeaderRead::Other => call.no_header = true,
                HeaderRead::Found { name, args_start } => {
                    let index = self.announce(name, ev);
                    // Arguments that are not JSON as written go out converted, whole.
                    let fragments = fmt.dialect.syntax().streams_as_written();
                    call.streamed = Some(Streamed {
                        index,
                        args: Some(v0 + args_start),
                        inner: fragments.then(ValueScan::default),
                        fragments,
                    });
                }
            }
        }
        let extent = fmt.dialect.syntax().extent(&call.body[v0..], fmt, &mut call.scan);
        self.stream(call, ev);
        let v_end = match extent {
            Extent::More => return CallStep::More,
            Extent::End(len) => v0 + len,
            Extent::Broken(at) => return self.break_at(fmt, call, v0 + at, ev),
            // Announced (constrained): whatever precedes its end marker is dropped.
            Extent::Stray(_) if call.streamed.is_some() => return CallStep::More,
            Extent::Stray(at) => return self.break_at(fmt, call, v0 + at, ev),
        };
        let used = if fmt.call_end.is_empty() {
            v_end
        } else {
            let end = &fmt.call_end;
            let r0 = &call.body[v_end..];
            let r1 = r0.trim_start();
            let ws = r0.len() - r1.len();
            if r0.starts_with(end.as_str()) {
                v_end + end.len()
            } else if r1.starts_with(end.as_str()) {
                v_end + ws + end.len()
            } else if end.starts_with(r0) || end.starts_with(r1) {
                return CallStep::More;
            } else if call.streamed.is_some() {
                // Incremental: the call is out; whatever precedes its end marker is dropped.
                match r0.find(end.as_str()) {
                    Some(e) => v_end + e + end.len(),
                    None => return CallStep::More,
                }
            } else {
                return self.break_at(fmt, call, v_end + ws, ev);
            }
        };
        self.complete(fmt, call, v0, v_end, used, ev)
    }

    /// The call's value and end are read: emit it (or, if it does not parse, its text).
    fn complete(
        &mut self,
        fmt: &ToolFormat,
        call: &mut OpenCall,
        v0: usize,
        v_end: usize,
        used: usize,
        ev: &mut Vec<StreamEvent>,
    ) -> CallStep {
        if call.streamed.as_ref().is_some_and(|st| st.fragments) {
            return CallStep::Done(used); // its JSON arguments went out as they were generated
        }
        let value = &call.body[v0..v_end];
        let parsed = match &call.name {
            None => parse_body(fmt, value),
            Some((name, _)) => {
                let args = fmt.dialect.syntax().to_json(value, fmt, self.string_params.get(name));
                args.map(|args| (name.clone(), args))
            }
        };
        match (call.streamed.as_ref().map(|st| st.index), parsed) {
            (Some(index), Some((_, args))) => {
                self.out.calls[index].function.arguments = args.clone();
                ev.push(StreamEvent::Arguments { index, fragment: args });
            }
            // Announced, then unreadable (not possible for a constrained call): the call
            // stays without arguments and counts as a failure.
            (Some(_), None) => self.out.failures += 1,
            (None, Some((name, args))) => {
                let index = self.announce(name, ev);
                if !args.is_empty() {
                    self.out.calls[index].function.arguments = args.clone();
                    ev.push(StreamEvent::Arguments { index, fragment: args });
                }
            }
            (None, None) => self.fail(fmt, call, used, ev),
        }
        CallStep::Done(used)
    }

    /// Mark the call malformed from body offset `at` and skip to its end.
    fn break_at(&mut self, fmt: &ToolFormat, call: &mut OpenCall, at: usize, ev: &mut Vec<StreamEvent>) -> CallStep {
        call.broken = Some(at);
        self.skip_broken(fmt, call, ev)
    }

    /// A malformed call ends after its end marker, or before the next call, section
    /// end or trigger, whichever comes first; without any of them, at the end of the
    /// text ([`Self::finish`]).
    fn skip_broken(&mut self, fmt: &ToolFormat, call: &mut OpenCall, ev: &mut Vec<StreamEvent>) -> CallStep {
        let from = call.broken.unwrap_or(0);
        let rest = &call.body[from..];
        let mut ends: Vec<usize> = Vec::new();
        if !fmt.call_end.is_empty() {
            ends.extend(rest.find(&fmt.call_end).map(|e| from + e + fmt.call_end.len()));
        }
        if call.section.is_some() && !fmt.section_end.is_empty() {
            ends.extend(rest.find(&fmt.section_end).map(|e| from + e));
        }
        for m in [fmt.call_start.as_str(), fmt.trigger()] {
            if !m.is_empty() {
                // A body trigger at the call's own start is this call, not the next.
                let skip = usize::from(from == 0 && fmt.trigger_in_body()).min(rest.len());
                ends.extend(rest[skip..].find(m).map(|e| from + skip + e));
            }
        }
        match ends.into_iter().min() {
            Some(used) => {
                self.fail(fmt, call, used, ev);
                CallStep::Done(used)
            }
            None => CallStep::More,
        }
    }

    /// A call that did not parse: its text goes to the content and counts as a failure.
    fn fail(&mut self, fmt: &ToolFormat, call: &OpenCall, used: usize, ev: &mut Vec<StreamEvent>) {
        // The prompt's call, naming no declared tool: text, as the model wrote it.
        if self.opened_text(call) {
            self.opened_call = false;
            let text = call.body[..used].to_string();
            self.content(&text, ev);
            return;
        }
        self.out.failures += 1;
        let text = format!("{}{}{}", call.prefix, fmt.call_start, &call.body[..used]);
        self.content(&text, ev);
    }

    /// Announce a call: its index, id and name.
    fn announce(&mut self, name: String, ev: &mut Vec<StreamEvent>) -> usize {
        let index = self.out.calls.len();
        let id = self.call_id(index, &name);
        ev.push(StreamEvent::CallStart { index, id: id.clone(), name: name.clone() });
        self.out.calls.push(ToolCall {
            id,
            kind: "function".into(),
            function: CalledFunction { name, arguments: String::new() },
        });
        index
    }

    /// Stream the arguments of an announced call as far as they are known.
    fn stream(&mut self, call: &mut OpenCall, ev: &mut Vec<StreamEvent>) {
        let Some(st) = call.streamed.as_mut() else { return };
        let (Some(args), true) = (st.args, st.fragments) else { return };
        let upto = match st.inner.as_mut() {
            Some(inner) => {
                if inner.end.is_none() {
                    inner.feed(&call.body[args + inner.consumed..]);
                }
                args + inner.complete
            }
            None => args + call.scan.complete,
        };
        let index = st.index;
        self.stream_args(index, &call.body, args, upto, ev);
    }

    /// The id of call `index` (named `name`) in this format's shape ([`CallIds`]).
    pub(crate) fn call_id(&self, index: usize, name: &str) -> String {
        match self.fmt.as_ref().map(|f| f.call_ids).unwrap_or_default() {
            CallIds::FunctionsIndex => format!("functions.{name}:{index}"),
            CallIds::Openai => format!("call_{:08x}{:04x}", self.id_seed as u32, index),
            CallIds::Alnum9 => {
                const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                let mut h = (self.id_seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
                (0..9)
                    .map(|_| {
                        h ^= h << 13;
                        h ^= h >> 7;
                        h ^= h << 17;
                        ALPHABET[(h % ALPHABET.len() as u64) as usize] as char
                    })
                    .collect()
            }
        }
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

    /// Append content, trimming at both ends of the whole turn (unless verbatim).
    fn content(&mut self, text: &str, ev: &mut Vec<StreamEvent>) {
        let text = if self.started || self.verbatim { text } else { text.trim_start() };
        if text.is_empty() {
            return;
        }
        self.started = true;
        let body = if self.verbatim { text } else { text.trim_end() };
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

/// Whether a property schema only allows strings (`type: string`, or an `enum` of
/// strings).
fn declares_string(schema: &serde_json::Value) -> bool {
    match (schema.get("type"), schema.get("enum")) {
        (Some(serde_json::Value::String(t)), _) => t == "string",
        (Some(serde_json::Value::Array(ts)), _) => !ts.is_empty() && ts.iter().all(|t| t == "string"),
        (None, Some(serde_json::Value::Array(vs))) => !vs.is_empty() && vs.iter().all(|v| v.is_string()),
        _ => false,
    }
}
