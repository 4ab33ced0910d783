//! Call recovery for `tool_choice: auto`: the calls small models mean but write in a
//! near-miss form.
//!
//! Asked in `auto` mode, a small model often answers a question that needs a tool
//! with the call's JSON as plain text instead of its family's markers: a bare
//! `{"name": "get_weather", "arguments": {…}}`, the same inside a ```` ```json ````
//! fence, a list of such objects, with Llama's `"parameters"` key, or in OpenAI's own
//! shape (`{"id": …, "type": "function", "function": {"name": …, "arguments": …}}`,
//! as templates with TabbyAPI-style metadata show earlier calls). A client then
//! sees that JSON as the answer and its agent loop ends. Recovery reads such text as
//! calls:
//!
//! - **Only a declared tool counts.** The object's `"name"` must be one of the request's
//!   tools and its arguments a JSON object; text that merely contains JSON stays text.
//! - **Constrained mode never returns an invalid call.** From the moment the model has
//!   written `{"name": "DECLARED"`, the engine constrains the rest of the object with
//!   the tool's grammar ([`Recovery::grammar_format`], the lazy constraint's second
//!   trigger), so the compact form is valid by construction; any other recovered
//!   call (pretty-printed, fenced) must also pass the tool's JSON Schema, or it stays
//!   text. In native mode arguments are taken as written.
//! - **What is left** is the content without the calls and without the fences that
//!   held them.
//!
//! [`RecoveringParser`] wraps the family's [`StreamParser`] for streaming: content
//! that could still become a recovered call (from the first `{` or ```` ``` ```` on) is
//! held back until the turn ends, then sent as calls or as the text it was.
//!
//! ```
//! use toolgate::tools::recovery::recover;
//! let tools: Vec<toolgate::tools::Tool> = serde_json::from_str(r#"[{"type": "function", "function":
//!     {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]"#)?;
//! let r = recover("```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```", &tools, true);
//! assert_eq!(r.calls, vec![("get_weather".to_string(), r#"{"city":"Oslo"}"#.to_string())]);
//! assert_eq!(r.content, "");
//! assert!(recover(r#"{"name": "Bob", "age": 3}"#, &tools, true).calls.is_empty());
//! # Ok::<(), serde_json::Error>(())
//! ```

use serde_json::Value;

use super::format::ToolFormat;
use super::stream::{StreamEvent, StreamParser};
use super::{CalledFunction, Tool, ToolCall};

/// The keys a near-miss call may hold its arguments under.
const ARGUMENT_KEYS: [&str; 2] = ["arguments", "parameters"];

/// What [`recover`] found in a turn's content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// `(name, arguments as compact JSON)`, in order.
    pub calls: Vec<(String, String)>,
    /// The content without them (and without fences left empty), trimmed.
    pub content: String,
}

/// Read the near-miss calls in `content` (see the [module docs](self)). With
/// `validate`, a call's arguments must also satisfy its tool's JSON Schema.
///
/// Cost: one pass over the content, a JSON parse at each `{` or `[` that starts a
/// line or follows a fence, and one schema validation per candidate call.
pub fn recover(content: &str, tools: &[Tool], validate: bool) -> Recovered {
    let mut calls = Vec::new();
    let mut kept = String::new();
    let mut i = 0;
    while i < content.len() {
        let rest = &content[i..];
        let at_line_start = i == 0 || content[..i].ends_with('\n') || content[..i].trim_end().ends_with("```json");
        let c = rest.as_bytes()[0];
        if at_line_start && (c == b'{' || c == b'[') {
            let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            if let Some(Ok(v)) = stream.next() {
                let items: Vec<Value> = match v {
                    Value::Array(a) => a,
                    other => vec![other],
                };
                let read: Option<Vec<(String, String)>> =
                    items.iter().map(|item| as_call(item, tools, validate)).collect();
                if let Some(read) = read.filter(|r| !r.is_empty()) {
                    calls.extend(read);
                    i += stream.byte_offset();
                    continue;
                }
            }
        }
        let ch = rest.chars().next().map_or(1, char::len_utf8);
        kept.push_str(&rest[..ch]);
        i += ch;
    }
    if calls.is_empty() {
        return Recovered { calls, content: content.trim().to_string() };
    }
    Recovered { calls, content: without_empty_fences(&kept) }
}

/// `item` as a call of a declared tool: `{"name": N, "arguments"|"parameters": {…}}`
/// (arguments given as a JSON string are read too), nothing else in it but an `id`.
fn as_call(item: &Value, tools: &[Tool], validate: bool) -> Option<(String, String)> {
    let mut obj = item.as_object()?;
    // OpenAI's own shape, as templates show earlier calls: `{"id": …, "type":
    // "function", "function": {"name": …, "arguments": …}}`.
    if let Some(Value::Object(inner)) = obj.get("function") {
        let wrapper = |k: &String| matches!(k.as_str(), "id" | "type" | "function");
        if !obj.keys().all(wrapper) || obj.get("type").is_some_and(|t| t != "function") {
            return None;
        }
        obj = inner;
    }
    let name = obj.get("name")?.as_str()?;
    let tool = tools.iter().find(|t| t.function.name == name)?;
    let key = ARGUMENT_KEYS.iter().find(|k| obj.contains_key(**k));
    let args = match key.map(|k| &obj[*k]) {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok()?,
        Some(v) => v.clone(),
        None => Value::Object(Default::default()),
    };
    if !args.is_object() || obj.keys().any(|k| k != "name" && k != "id" && Some(&k.as_str()) != key) {
        return None;
    }
    if validate {
        let ok = jsonschema::validator_for(&tool.function.parameters).map(|v| v.is_valid(&args)).unwrap_or(false);
        if !ok {
            return None;
        }
    }
    Some((name.to_string(), args.to_string()))
}

/// `text` without ```` ```json ```` / ```` ``` ```` fences that hold only whitespace,
/// trimmed.
fn without_empty_fences(text: &str) -> String {
    let mut out = text.to_string();
    for open in ["```json", "```JSON", "```"] {
        while let Some(a) = out.find(open) {
            let after = a + open.len();
            let Some(b) = out[after..].find("```").map(|b| after + b) else { break };
            if !out[after..b].trim().is_empty() {
                break;
            }
            out.replace_range(a..b + 3, "");
        }
    }
    // An unclosed fence left at the end (generation stopped after the call).
    let t = out.trim_end();
    let t = t.strip_suffix("```json").or_else(|| t.strip_suffix("```")).unwrap_or(t);
    t.trim().to_string()
}

/// Recovery for one turn: the declared tools and whether calls are constrained.
#[derive(Debug, Clone)]
pub struct Recovery {
    tools: Vec<Tool>,
    constrained: bool,
}

impl Recovery {
    /// Recovery of calls to `tools`; `constrained` (the turn's tool mode is
    /// constrained) makes every recovered call pass its schema.
    pub fn new(tools: &[Tool], constrained: bool) -> Self {
        Self { tools: tools.to_vec(), constrained }
    }

    /// The layout the engine constrains a recovered compact call with: a bare
    /// `{"name": …, "arguments": {…}}` object, calls separated by a newline.
    pub fn grammar_format() -> ToolFormat {
        ToolFormat {
            body_trigger: Self::TRIGGER.into(),
            separator: "\n".into(),
            ..ToolFormat::json_body("recovered", "a bare JSON call object, as small models write in auto mode")
        }
    }

    /// The text that opens a recovered compact call.
    pub const TRIGGER: &'static str = "{\"name\"";

    /// Whether an opener at the end of `before` is the value of a `"function"` member:
    /// the inner object of an OpenAI-shaped call (`{"id": …, "type": "function",
    /// "function": {"name": …`), which is read whole, with its wrapper, when the turn
    /// ends; constraining it alone would leave the wrapper's text in the content.
    pub fn inside_function_member(before: &[u8]) -> bool {
        let t = before.trim_ascii_end();
        t.strip_suffix(b":").is_some_and(|t| t.trim_ascii_end().ends_with(b"\"function\""))
    }

    /// Whether `text` (from the trigger on) holds a complete name string: only then can
    /// the engine tell a declared tool's call from other JSON.
    pub fn name_complete(text: &[u8]) -> bool {
        let Some(rest) = text.strip_prefix(Self::TRIGGER.as_bytes()) else { return false };
        let rest = rest.strip_prefix(b":").map(|r| r.strip_prefix(b" ").unwrap_or(r));
        match rest.and_then(|r| r.strip_prefix(b"\"")) {
            Some(r) => r.contains(&b'"'),
            None => text.len() > Self::TRIGGER.len() + 2,
        }
    }

    /// Whether held-back `text` (from its first `{` or fence on) is the start of a
    /// near-miss call of a declared tool, as far as it goes: an optional code fence,
    /// `{`, `"name"`, `:` and a string that is a declared name or the start of one, in
    /// any spacing. A turn cut by its budget there was cut inside a call.
    ///
    /// ```
    /// use toolgate::tools::recovery::Recovery;
    /// use toolgate::tools::Tool;
    /// let tools: Vec<Tool> = serde_json::from_value(serde_json::json!([
    ///     {"type": "function", "function": {"name": "get_weather", "parameters": {}}}]))?;
    /// let r = Recovery::new(&tools, true);
    /// assert!(r.could_be_call("```json\n{\n  \"name\": \"get_wea"));
    /// assert!(r.could_be_call("{\"name\": \"get_weather\", \"arguments\": {\"ci"));
    /// assert!(!r.could_be_call("{\"name\": \"other"));
    /// assert!(!r.could_be_call("{\"answer\": 4"));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn could_be_call(&self, text: &str) -> bool {
        let mut t = text.trim_start();
        if let Some(rest) = t.strip_prefix("```") {
            // The fence's language tag (`json`), up to its line end.
            t = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric()).trim_start();
        }
        let Some(t) = t.strip_prefix('{') else { return t.is_empty() && !text.trim().is_empty() };
        let t = t.trim_start();
        // `"name"`, or the start of it.
        let key = "\"name\"";
        if t.len() < key.len() {
            return key.starts_with(t);
        }
        let Some(t) = t.strip_prefix(key) else { return false };
        let t = t.trim_start();
        let Some(t) = t.strip_prefix(':') else { return t.is_empty() };
        let t = t.trim_start();
        let Some(t) = t.strip_prefix('"') else { return t.is_empty() };
        let mut names = self.tools.iter().map(|tool| tool.function.name.as_str());
        match t.find('"') {
            Some(end) => names.any(|n| n == &t[..end]),
            None => names.any(|n| n.starts_with(t)),
        }
    }

    /// Read the near-miss calls of a finished turn's content.
    pub fn recover(&self, content: &str) -> Recovered {
        recover(content, &self.tools, self.constrained)
    }
}

/// A [`StreamParser`] with call recovery: content that could become a recovered call is
/// held until [`RecoveringParser::finish`], which turns it into calls when the family's
/// own markers gave none.
#[derive(Debug)]
pub struct RecoveringParser {
    inner: StreamParser,
    recovery: Option<Recovery>,
    /// Content held back (from the first `{` or fence on).
    held: String,
    /// Content already passed through.
    passed: String,
    /// What [`RecoveringParser::finish`] recovered: the calls (ids in the format's
    /// shape) and the content left without them.
    recovered: Option<(Vec<ToolCall>, String)>,
    /// The text of a call the budget cut ([`RecoveringParser::cut`]).
    cut: Option<String>,
    /// The content without a cut call's text, when [`RecoveringParser::finish`] removed one.
    content: Option<String>,
    /// The turn ended on its budget ([`RecoveringParser::budget_ended`]).
    budget_ended: bool,
}

impl RecoveringParser {
    /// Wrap `inner`; `None` recovers nothing (the events pass through). Recovered
    /// calls get their ids from `inner`, in its format's shape.
    pub fn new(inner: StreamParser, recovery: Option<Recovery>) -> Self {
        Self {
            inner,
            recovery,
            held: String::new(),
            passed: String::new(),
            recovered: None,
            cut: None,
            content: None,
            budget_ended: false,
        }
    }

    /// [`StreamParser::cut`]: the generation was cut by its budget inside a call, whose
    /// text so far is `unfinished` ([`crate::engine::Generation::unfinished`]). A cut
    /// call in the family's own layout is dropped by the inner parser; a cut recovered
    /// call (bare JSON, held back as possible content) is dropped here, so neither
    /// becomes a call or content.
    pub fn cut(&mut self, unfinished: &str) {
        self.inner.cut();
        self.cut = Some(unfinished.trim_end().to_string()).filter(|c| !c.is_empty());
        self.budget_ended = true;
    }

    /// The turn ended on its token budget (`max_tokens` or the context window), with no
    /// constrained call open. Held-back text that is the start of a near-miss call of a
    /// declared tool ([`Recovery::could_be_call`]) is then a call the budget cut, dropped
    /// as in [`Self::cut`]; other held text stays content.
    pub fn budget_ended(&mut self) {
        self.budget_ended = true;
    }

    /// Whether [`Self::finish`] dropped a call the budget cut (see [`Self::cut`] and
    /// [`Self::budget_ended`]).
    pub fn dropped_cut_call(&self) -> bool {
        self.cut.is_some()
    }

    /// `text` without the cut call's text at its end (see [`Self::cut`]).
    fn without_cut(&self, text: &str) -> String {
        match self.cut.as_deref().and_then(|c| text.rfind(c)) {
            Some(at) => text[..at].trim_end().to_string(),
            None => text.to_string(),
        }
    }

    fn filter(&mut self, events: Vec<StreamEvent>) -> Vec<StreamEvent> {
        if self.recovery.is_none() {
            return events;
        }
        let mut out = Vec::new();
        for e in events {
            match e {
                StreamEvent::Content(text) => {
                    if self.held.is_empty() {
                        match text.find(['{', '[', '`']) {
                            Some(at) => {
                                // Whitespace before the opener is held with it: if the
                                // opener becomes a call, the content ends before it,
                                // streamed or not.
                                let before = text[..at].trim_end();
                                if !before.is_empty() {
                                    self.passed.push_str(before);
                                    out.push(StreamEvent::Content(before.to_string()));
                                }
                                self.held.push_str(&text[before.len()..]);
                            }
                            None => {
                                self.passed.push_str(&text);
                                out.push(StreamEvent::Content(text));
                            }
                        }
                    } else {
                        self.held.push_str(&text);
                    }
                }
                other => out.push(other),
            }
        }
        out
    }

    /// Feed the next piece of model output.
    pub fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        let events = self.inner.push(text);
        self.filter(events)
    }

    /// [`StreamParser::end_of_turn`]: the turn ended on a control token with this text.
    pub fn end_of_turn(&mut self, marker: &str) -> Vec<StreamEvent> {
        let events = self.inner.end_of_turn(marker);
        self.filter(events)
    }

    /// The turn ended: the last events, recovered calls included.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        let events = self.inner.finish();
        let mut out = self.filter(events);
        let Some(recovery) = &self.recovery else { return out };
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return out;
        }
        if self.budget_ended && self.cut.is_none() && recovery.could_be_call(&held) {
            self.cut = Some(held.trim().to_string());
        }
        let held = self.without_cut(&held);
        let content = self.without_cut(&self.inner.output().content);
        let r = if self.inner.output().calls.is_empty() { recovery.recover(&content) } else { Recovered::default() };
        if r.calls.is_empty() {
            if !held.is_empty() {
                out.push(StreamEvent::Content(held));
            }
            self.content = Some(content);
            return out;
        }
        // What was streamed before the hold stays; the rest of the content follows.
        let passed = self.passed.trim();
        let left = r.content.strip_prefix(passed).unwrap_or(&r.content).to_string();
        if !left.trim().is_empty() {
            out.push(StreamEvent::Content(left));
        }
        let calls: Vec<ToolCall> = r
            .calls
            .into_iter()
            .enumerate()
            .map(|(index, (name, arguments))| ToolCall {
                id: self.inner.call_id(index, &name),
                kind: "function".into(),
                function: CalledFunction { name, arguments },
            })
            .collect();
        for (index, c) in calls.iter().enumerate() {
            out.push(StreamEvent::CallStart { index, id: c.id.clone(), name: c.function.name.clone() });
            out.push(StreamEvent::Arguments { index, fragment: c.function.arguments.clone() });
        }
        self.recovered = Some((calls, r.content));
        out
    }

    /// The turn's aggregate, recovered calls included, and how many were recovered.
    pub fn into_output(self) -> (super::stream::ParsedOutput, usize) {
        let mut out = self.inner.into_output();
        if self.cut.is_some() {
            // Cut inside a call: in the family's layout the inner parser says so; a cut
            // recovered call is only known here.
            out.truncated = true;
        }
        if let Some(content) = self.content {
            out.content = content;
        }
        let Some((calls, content)) = self.recovered else { return (out, 0) };
        let n = calls.len();
        out.calls = calls;
        out.content = content;
        (out, n)
    }
}
