//! Tool-call metadata a template declares about itself, in TabbyAPI's style: top-level
//! `{% set %}`s, before any output, of `tool_start` (what the model writes to open its
//! calls), `tool_end` (what closes them; optional) and `stop_strings` (extra stop
//! strings).
//!
//! ```jinja
//! {%- set stop_strings = ["<|im_start|>", "<|im_end|>"] -%}
//! {%- set tool_start = "<tool_call>" -%}
//! {%- set tool_end = "</tool_call>" -%}
//! ```
//!
//! Such a template renders earlier calls as `{{ tool_start }}{{ message['tool_calls'] |
//! tojson }}{{ tool_end }}`: a JSON list of OpenAI-shaped calls. [`read`] evaluates only
//! those `set`s (no conversation is rendered), and [`TemplateMetadata::format`] is the
//! call layout they describe; explicit metadata wins over derivation.

use minijinja::Value;

use super::render::ChatTemplate;
use crate::tools::format::{BodyKind, CallIds, ToolFormat};
use crate::{Error, Result};

/// The metadata variables toolgate reads.
const NAMES: [&str; 3] = ["tool_start", "tool_end", "stop_strings"];

/// What a template declares about its tool calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TemplateMetadata {
    /// The text that opens the model's calls.
    pub tool_start: Option<String>,
    /// The text that closes them (`None`: the JSON list ends them).
    pub tool_end: Option<String>,
    /// Extra stop strings for every turn.
    pub stop_strings: Vec<String>,
}

impl TemplateMetadata {
    /// The call layout the metadata describes, when it names a `tool_start`: that
    /// marker, a JSON list of calls in OpenAI's shape (`{"id": …, "type": "function",
    /// "function": {"name": …, "arguments": {…}}}`; the parser also reads
    /// `{"name": …, "arguments": …}`), then `tool_end` if any.
    ///
    /// ```
    /// use toolgate::template::metadata::TemplateMetadata;
    /// let m = TemplateMetadata { tool_start: Some("<tool_call>".into()), tool_end: Some("</tool_call>".into()), ..Default::default() };
    /// let f = m.format().unwrap();
    /// let (_, calls, _) = toolgate::tools::parse(&f, r#"<tool_call>[{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]</tool_call>"#);
    /// assert_eq!((calls[0].function.name.as_str(), calls[0].function.arguments.as_str()), ("f", r#"{"x": 1}"#));
    /// ```
    pub fn format(&self) -> Option<ToolFormat> {
        let start = self.tool_start.as_deref().filter(|s| !s.trim().is_empty())?;
        let description = format!(
            "from the template's metadata: {start:?}, a JSON list of OpenAI-shaped calls, then {:?}",
            self.tool_end.as_deref().unwrap_or("nothing")
        );
        Some(ToolFormat {
            section_start: start.trim().to_string(),
            section_end: self.tool_end.as_deref().unwrap_or_default().trim().to_string(),
            list: true,
            separator: ", ".into(),
            inner_newlines: true,
            body: BodyKind::JsonNameArguments,
            nested_function: true,
            id_key: "id".into(),
            id_pattern: "call_[A-Za-z0-9]{1,24}".into(),
            id_first: true,
            call_ids: CallIds::Openai,
            ..ToolFormat::json_body("metadata", &description)
        })
    }
}

/// Read `template`'s metadata: its top-level `{% set %}`s of `tool_start`, `tool_end`
/// and `stop_strings`, evaluated alone (a `set` inside a block, a macro or a loop is
/// not metadata).
///
/// ```
/// use toolgate::template::{metadata, ChatTemplate};
/// let t = ChatTemplate::new("t", r#"{%- set tool_start = "<tool_call>" -%}{% set stop_strings = ["<|im_end|>"] %}{% for m in messages %}{% set tool_end = "x" %}{% endfor %}"#)?;
/// let m = metadata::read(&t)?;
/// assert_eq!((m.tool_start.as_deref(), m.tool_end, m.stop_strings), (Some("<tool_call>"), None, vec!["<|im_end|>".to_string()]));
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: one scan of the source and a render of the few `set`s found.
///
/// # Errors
/// [`Error::Template`] when a metadata value is not what it must be (a string; a
/// list of strings) or its expression fails.
pub fn read(template: &ChatTemplate) -> Result<TemplateMetadata> {
    let sets = top_level_sets(template.source());
    if sets.is_empty() {
        return Ok(TemplateMetadata::default());
    }
    let bad =
        |what: String| Error::Template { template: template.name().to_string(), reason: format!("metadata: {what}") };
    let env = super::env::environment(super::env::Clock::default());
    let t = env.template_from_str(&sets).map_err(|e| bad(e.to_string()))?;
    let captured = t.render_captured(minijinja::context! {}).map_err(|e| bad(e.to_string()))?;
    let state = captured.state();
    let string = |name: &str| -> Result<Option<String>> {
        match state.lookup(name) {
            None => Ok(None),
            Some(v) if v.is_undefined() || v.is_none() => Ok(None),
            Some(v) => v.as_str().map(|s| Some(s.to_string())).ok_or_else(|| bad(format!("`{name}` is not a string"))),
        }
    };
    let stop_strings = match state.lookup("stop_strings") {
        None => Vec::new(),
        Some(v) if v.is_undefined() || v.is_none() => Vec::new(),
        Some(v) => {
            let list = matches!(v.kind(), minijinja::value::ValueKind::Seq);
            let items = v.try_iter().ok().filter(|_| list).ok_or_else(|| bad("`stop_strings` is not a list".into()))?;
            items
                .map(|s: Value| {
                    s.as_str().map(str::to_string).ok_or_else(|| bad("`stop_strings` holds a non-string".into()))
                })
                .filter(|s| !matches!(s, Ok(s) if s.is_empty()))
                .collect::<Result<Vec<_>>>()?
        }
    };
    Ok(TemplateMetadata { tool_start: string("tool_start")?, tool_end: string("tool_end")?, stop_strings })
}

/// The top-level `{% set NAME = … %}` tags of `source` for the metadata names, joined:
/// tags are scanned in order with their nesting (blocks that `end…`, and `set` blocks
/// without `=`); comments, expressions and `raw` blocks are skipped.
fn top_level_sets(source: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut rest = source;
    loop {
        // Whichever comes first: a comment or a statement.
        let (at, comment) = match (rest.find("{%"), rest.find("{#")) {
            (Some(s), Some(c)) if c < s => (c, true),
            (Some(s), _) => (s, false),
            (None, Some(c)) => (c, true),
            (None, None) => break,
        };
        if comment {
            let Some(end) = rest[at + 2..].find("#}").map(|e| e + 2) else { break };
            rest = &rest[at + end + 2..];
            continue;
        }
        // The closer is searched after the opener: in `{%}` they overlap.
        let Some(end) = rest[at + 2..].find("%}").map(|e| e + 2) else { break };
        let tag = &rest[at..at + end + 2];
        rest = &rest[at + end + 2..];
        let body = tag[2..tag.len() - 2].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        let word = body.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or("");
        match word {
            "raw" => {
                // Skip to the end of the raw block.
                match rest.find("endraw") {
                    Some(e) => rest = rest[e..].find("%}").map_or("", |x| &rest[e + x + 2..]),
                    None => break,
                }
            }
            "for" | "if" | "macro" | "call" | "filter" | "block" | "with" | "autoescape" => depth += 1,
            w if w.starts_with("end") => depth = depth.saturating_sub(1),
            "set" => {
                let target = body[3..].trim_start();
                match target.split_once('=') {
                    None => depth += 1, // `{% set x %}…{% endset %}`
                    Some((name, _)) if depth == 0 && NAMES.contains(&name.trim()) => {
                        out.push_str(tag);
                        out.push('\n');
                    }
                    Some(_) => {}
                }
            }
            _ => {}
        }
    }
    out
}
