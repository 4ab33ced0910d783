//! Tool calling: OpenAI tool types, the constrained grammar of a family's calls for a
//! `tool_choice`, and the parser that turns model output into OpenAI `tool_calls`.

pub mod definition;
pub mod format;
pub mod reasoning;
pub mod stream;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::grammar::regex::{to_regex, Json};
use crate::grammar::schema::{compile, Mode};
use crate::tokenizer::{TokenKind, Tokenizer, SPECIAL_PREFIX};
use crate::{Error, Result};
use format::{BodyKind, ToolFormat};

/// An OpenAI function tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function.
    pub function: FunctionDef,
}

fn function_type() -> String {
    "function".into()
}

/// A function's declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDef {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments (`{}` if absent).
    #[serde(default = "empty_object")]
    pub parameters: Value,
    /// Per-tool strictness: `true` refuses unsupported schema keywords, `false`/absent
    /// ignores them (lenient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

fn empty_object() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// OpenAI `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// No call possible.
    None,
    /// Free text until the family's call marker, then a constrained call.
    #[default]
    Auto,
    /// At least one call, constrained from the first token.
    Required,
    /// Exactly this function.
    Named(String),
}

impl ToolChoice {
    /// From the OpenAI JSON (`"auto"`, `"none"`, `"required"`,
    /// `{"type":"function","function":{"name":…}}`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for anything else.
    pub fn from_json(v: &Value) -> Result<Self> {
        match v {
            Value::String(s) if s == "none" => Ok(Self::None),
            Value::String(s) if s == "auto" => Ok(Self::Auto),
            Value::String(s) if s == "required" => Ok(Self::Required),
            Value::Object(o) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(|n| Self::Named(n.to_string()))
                .ok_or_else(|| Error::InvalidParameter {
                    name: "tool_choice",
                    reason: "object without function.name".into(),
                }),
            other => Err(Error::InvalidParameter { name: "tool_choice", reason: format!("unsupported value {other}") }),
        }
    }
}

/// A parsed call, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// `call_…`.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Name and arguments.
    pub function: CalledFunction,
}

/// The function part of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalledFunction {
    /// Function name.
    pub name: String,
    /// Arguments as a JSON string.
    pub arguments: String,
}

/// Regex for a marker: the special token's bytes if the vocabulary has a control token
/// with exactly this text, else the text.
fn marker(text: &str, tok: &Tokenizer) -> String {
    match tok.token_id(text) {
        Some(id) if tok.token_kind(id).is_some_and(TokenKind::is_special) => {
            format!("(?-u:\\x{SPECIAL_PREFIX:02X}){}", regex_syntax::escape(text))
        }
        _ => regex_syntax::escape(text),
    }
}

/// The bytes a marker is generated as (see [`marker`]).
pub fn marker_bytes(text: &str, tok: &Tokenizer) -> Vec<u8> {
    match tok.token_id(text) {
        Some(id) if tok.token_kind(id).is_some_and(TokenKind::is_special) => {
            let mut v = vec![SPECIAL_PREFIX];
            v.extend_from_slice(text.as_bytes());
            v
        }
        _ => text.as_bytes().to_vec(),
    }
}

/// The regex of the calls `choice` allows: one call (`parallel == false`) or one or more.
///
/// # Errors
/// [`Error::Schema`] for a tool whose `parameters` cannot be compiled;
/// [`Error::InvalidParameter`] for `ToolChoice::None`, no tools, or a named tool that is
/// not declared.
pub fn calls_regex(
    f: &ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    tok: &Tokenizer,
) -> Result<String> {
    let selected: Vec<&Tool> = match choice {
        ToolChoice::None => {
            return Err(Error::InvalidParameter { name: "tool_choice", reason: "`none` allows no call".into() })
        }
        ToolChoice::Named(n) => {
            let t = tools.iter().filter(|t| &t.function.name == n).collect::<Vec<_>>();
            if t.is_empty() {
                return Err(Error::InvalidParameter { name: "tool_choice", reason: format!("no tool named `{n}`") });
            }
            t
        }
        _ => tools.iter().collect(),
    };
    if selected.is_empty() {
        return Err(Error::InvalidParameter { name: "tools", reason: "no tools declared".into() });
    }
    let mut bodies = Vec::new();
    for t in &selected {
        let mode = if t.function.strict == Some(true) { Mode::Strict } else { Mode::Lenient };
        let node = compile(&t.function.parameters, mode).map_err(|e| match e {
            Error::Schema { pointer, reason } => Error::Schema {
                pointer: format!("tools[{}].function.parameters{}", t.function.name, &pointer[1..]),
                reason,
            },
            e => e,
        })?;
        let args = to_regex(&node, &Json);
        match f.body {
            BodyKind::JsonNameArguments => bodies.push(format!(
                r#"\{{"{}": ?{}, ?"{}": ?{args}\}}"#,
                regex_syntax::escape(&f.name_key),
                regex_syntax::escape(&serde_json::to_string(&t.function.name).unwrap_or_default()),
                regex_syntax::escape(&f.arguments_key),
            )),
        }
    }
    let nl = if f.inner_newlines { "\\n?" } else { "" };
    let call = format!("{}{nl}(?:{}){nl}{}", marker(&f.call_start, tok), bodies.join("|"), marker(&f.call_end, tok));
    Ok(if parallel {
        let sep = format!("(?:{})?", regex_syntax::escape(&f.separator));
        format!("{call}(?:{sep}{call})*")
    } else {
        call
    })
}

/// Split model output into text content and calls, reading each call whole (see
/// [`stream::StreamParser`], which this is, fed the whole text at once). Blocks that do
/// not parse stay in the content (that is what a client would see) and are counted in
/// the third value. Call ids derive from a hash of `text`.
///
/// ```
/// let fmt = toolgate::tools::format::for_family("hermes")?.unwrap();
/// let (content, calls, failures) =
///     toolgate::tools::parse(&fmt, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
/// assert_eq!((content.as_str(), calls[0].function.name.as_str(), failures), ("", "f", 0));
/// # Ok::<(), toolgate::Error>(())
/// ```
pub fn parse(f: &ToolFormat, text: &str) -> (String, Vec<ToolCall>, usize) {
    let mut p = stream::StreamParser::new(Some(f.clone()), false, fxhash(text));
    p.push(text);
    p.finish();
    let out = p.into_output();
    (out.content, out.calls, out.failures)
}

pub(crate) fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}
