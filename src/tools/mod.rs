//! Tool calling: OpenAI tool types, the constrained grammar of a family's calls for a
//! `tool_choice`, and the parser that turns model output into OpenAI `tool_calls`.

mod body;
pub mod conformance;
pub mod definition;
pub mod derive;
pub(crate) mod dialect;
pub mod format;
pub(crate) mod harmony;
pub mod layout;
pub(crate) mod reasoning;
pub mod recovery;
pub mod stream;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::grammar::part::Built;
use crate::grammar::regex::{to_rules_part, without_literal, Json as JsonValues};
use crate::grammar::rules::Rules;
use crate::grammar::schema::{check_grammar_size, compile_shared, Mode, Objects};
use crate::grammar::spec::Spec;
use crate::tokenizer::{TokenKind, Tokenizer, SPECIAL_PREFIX};
use crate::{Error, Result};
use format::{BodyKind, IdSlot, KeyOrder, ToolFormat};
use recovery::Recovery;

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
    /// From a command line's `--tool-choice`: `auto`, `none`, `required`, or a
    /// function name.
    ///
    /// ```
    /// use toolgate::tools::ToolChoice;
    /// assert_eq!(ToolChoice::from_cli("required"), ToolChoice::Required);
    /// assert_eq!(ToolChoice::from_cli("get_weather"), ToolChoice::Named("get_weather".into()));
    /// ```
    pub fn from_cli(s: &str) -> Self {
        match s {
            "none" => Self::None,
            "auto" => Self::Auto,
            "required" => Self::Required,
            name => Self::Named(name.to_string()),
        }
    }

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

/// A marker's text split into the vocabulary's control tokens and plain text: at each
/// position the longest control token whose text starts there, else one character.
/// `(is_special, piece)` runs, plain text merged.
fn marker_pieces<'a>(text: &'a str, tok: &Tokenizer) -> Vec<(bool, &'a str)> {
    let is_special = |s: &str| tok.token_id(s).is_some_and(|id| tok.token_kind(id).is_some_and(TokenKind::is_special));
    let mut out: Vec<(bool, &str)> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let special =
            text[i..].char_indices().rev().map(|(j, c)| i + j + c.len_utf8()).find(|&end| is_special(&text[i..end]));
        match special {
            Some(end) => {
                out.push((true, &text[i..end]));
                i = end;
            }
            None => {
                let end = i + text[i..].chars().next().map_or(1, char::len_utf8);
                match out.last_mut() {
                    Some((false, run)) => *run = &text[i - run.len()..end],
                    _ => out.push((false, &text[i..end])),
                }
                i = end;
            }
        }
    }
    out
}

/// The regex of a control token's prefix byte ([`SPECIAL_PREFIX`]), as a marker's
/// spelling starts where it opens with a control token.
pub(crate) const SPECIAL_REGEX: &str = "(?-u:\\xFF)";

/// A marker as the grammar spells it and as it is generated: each control token of
/// the vocabulary in it as its bytes (`0xFF` + text, which no text can spell; in the
/// regex `(?-u:\xFF)` + the text), the rest as text.
fn spell_marker(text: &str, tok: &Tokenizer) -> (String, Vec<u8>) {
    let (mut regex, mut bytes) = (String::new(), Vec::with_capacity(text.len() + 2));
    for (special, piece) in marker_pieces(text, tok) {
        if special {
            regex.push_str(SPECIAL_REGEX);
            bytes.push(SPECIAL_PREFIX);
        }
        regex.push_str(&regex_syntax::escape(piece));
        bytes.extend_from_slice(piece.as_bytes());
    }
    (regex, bytes)
}

/// A marker as a part of a grammar ([`spell_marker`]).
fn marker_part(text: &str, tok: &Tokenizer) -> Built {
    if text.is_empty() {
        return Built::empty();
    }
    let (regex, bytes) = spell_marker(text, tok);
    Built::bytes(regex, bytes)
}

/// A marker as plain text (no control tokens), as a part of a grammar.
fn plain_marker(text: &str) -> Built {
    match text.is_empty() {
        true => Built::empty(),
        false => Built::bytes(regex_syntax::escape(text), text.as_bytes()),
    }
}

/// The bytes a marker is generated as (those of its grammar part): what the lazy
/// constraint watches the output for.
pub fn marker_bytes(text: &str, tok: &Tokenizer) -> Vec<u8> {
    spell_marker(text, tok).1
}

/// Whether `tok`'s vocabulary can write `f`'s calls: a dialect may need control
/// tokens (Gemma 4 quotes strings with one), and a vocabulary without them could never
/// close a string.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the missing token.
pub fn check_vocabulary(f: &ToolFormat, tok: &Tokenizer) -> Result<()> {
    for token in f.dialect.syntax().control_tokens(f) {
        if marker_pieces(token, tok) != [(true, token)] {
            return Err(Error::InvalidParameter {
                name: "tools",
                reason: format!(
                    "the `{}` format writes its arguments with the {token} control token, which this vocabulary \
                     lacks; use --tool-fallback generic",
                    f.family
                ),
            });
        }
    }
    Ok(())
}

/// The grammar of the calls `choice` allows, in `f`'s layout: one call (`parallel ==
/// false`) or one or more, inside the family's section if it has one. Markers that
/// are control tokens of `tok`'s vocabulary must be generated as those tokens. Each
/// tool's `parameters` compile as [`Grammar::from_schema`](crate::grammar::Grammar::from_schema) compiles a schema (closed
/// objects, properties in schema order), into rules all tools share. The engine
/// compiles (and caches) the [`Spec`]: [`crate::engine::Engine::grammar`].
///
/// Cost: one schema compile per selected tool; the grammar grows linearly with the
/// schemas.
///
/// # Errors
/// [`Error::Schema`] for a tool whose `parameters` cannot be compiled, or whose
/// grammars together pass [`crate::grammar::schema::MAX_GRAMMAR_BYTES`];
/// [`Error::InvalidParameter`] for `ToolChoice::None`, no tools, or a named tool that is
/// not declared.
pub fn calls_grammar(
    f: &ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    tok: &Tokenizer,
) -> Result<Spec> {
    calls_grammar_with(f, tools, choice, parallel, &|text| marker_part(text, tok))
}

/// [`calls_grammar`] without a vocabulary: every marker is plain text. For checking a
/// format against text a template rendered (the markers then are text too), as
/// [`conformance::conformance`] does.
///
/// ```
/// use toolgate::tools::{calls_grammar_plain, format::for_family, Tool, ToolChoice};
/// let tools: Vec<Tool> = serde_json::from_value(serde_json::json!([{"type": "function", "function":
///     {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]))?;
/// let hermes = for_family("hermes")?.ok_or("no hermes layout")?;
/// let g = calls_grammar_plain(&hermes, &tools, &ToolChoice::Required, false)?.compile()?;
/// assert!(g.matches(b"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2}}\n</tool_call>"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// As [`calls_grammar`].
pub fn calls_grammar_plain(f: &ToolFormat, tools: &[Tool], choice: &ToolChoice, parallel: bool) -> Result<Spec> {
    calls_grammar_with(f, tools, choice, parallel, &plain_marker)
}

fn calls_grammar_with(
    f: &ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    marker: &dyn Fn(&str) -> Built,
) -> Result<Spec> {
    let mut rules = Rules::new();
    let main = calls_into(f, tools, choice, parallel, marker, &mut rules)?;
    Ok(Spec::new(main, rules))
}

/// The grammar of a turn in `tool_choice: auto` that has a response format
/// (`response_format: json_schema`): a text answer follows the format, a call its tool.
/// It is the calls [`calls_grammar`] builds for `f` (and, when `recovery` is set, the
/// bare JSON calls small models write instead: [`Recovery::grammar_format`]), or one
/// JSON value of `schema`, constrained from the first token. Properties of the answer
/// come in schema order, with no undeclared ones (as [`Grammar::from_schema`](crate::grammar::Grammar::from_schema)).
///
/// Cost: as [`calls_grammar`], plus one schema compile.
///
/// # Errors
/// As [`calls_grammar`]; [`Error::Schema`] for a `schema` that cannot be compiled (its
/// pointer under `response_format.json_schema.schema`).
pub fn calls_or_answer(
    f: &ToolFormat,
    tools: &[Tool],
    parallel: bool,
    recovery: bool,
    schema: (&Value, Mode),
    tok: &Tokenizer,
) -> Result<Spec> {
    let mut rules = Rules::new();
    let marker = |text: &str| marker_part(text, tok);
    let mut alternatives = vec![calls_into(f, tools, &ToolChoice::Auto, parallel, &marker, &mut rules)?];
    if recovery && f.trigger() != Recovery::TRIGGER {
        let bare = Recovery::grammar_format();
        alternatives.push(calls_into(&bare, tools, &ToolChoice::Auto, parallel, &marker, &mut rules)?);
    }
    let answer = answer_into(schema, &mut rules)?;
    // A layout whose prompt opens the first call writes text after the call marker and
    // its text start (Functionary v3.2's `>>>all\n`): so does the answer.
    alternatives.push(match f.prompt_opens_call && !f.text_start.is_empty() {
        true => Built::cat(vec![marker(f.trigger()), marker(&f.text_start), answer]),
        false => answer,
    });
    let spec = Spec::new(Built::bar(alternatives.into_iter().map(Built::group).collect()), rules);
    check_grammar_size(spec.text_len()).map_err(in_format)?;
    Ok(spec)
}

/// The grammar of one JSON value of a response format's `schema` (a text answer), as
/// [`Grammar::from_schema`](crate::grammar::Grammar::from_schema) compiles it (closed objects, properties in schema order),
/// so the engine caches it and [`after_reasoning`] can put it after an open reasoning
/// block.
///
/// # Errors
/// [`Error::Schema`] (its pointer under `response_format.json_schema.schema`) for a
/// schema that cannot be compiled, admits no value or is too large.
pub fn answer_grammar(schema: (&Value, Mode)) -> Result<Spec> {
    let mut rules = Rules::new();
    let spec = Spec::new(answer_into(schema, &mut rules)?, rules);
    check_grammar_size(spec.text_len()).map_err(in_format)?;
    Ok(spec)
}

/// A response format's schema as a part, its shared parts written into `rules`.
fn answer_into(schema: (&Value, Mode), rules: &mut Rules) -> Result<Built> {
    let node = compile_shared(schema.0, schema.1, Objects::Closed).map_err(in_format)?;
    Ok(to_rules_part(&node, &JsonValues, rules))
}

/// A schema error of a response format, pointed at where the request holds it.
fn in_format(e: Error) -> Error {
    match e {
        Error::Schema { pointer, kind, reason } => {
            Error::Schema { pointer: format!("response_format.json_schema.schema{}", &pointer[1..]), kind, reason }
        }
        e => e,
    }
}

/// The calls' grammar, its shared parts written into `rules`.
fn calls_into(
    f: &ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    marker: &dyn Fn(&str) -> Built,
    rules: &mut Rules,
) -> Result<Built> {
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
        let in_tool = |e| match e {
            Error::Schema { pointer, kind, reason } => Error::Schema {
                pointer: format!("tools[{}].function.parameters{}", t.function.name, &pointer[1..]),
                kind,
                reason,
            },
            e => e,
        };
        let mut node = compile_shared(&t.function.parameters, mode, Objects::Closed).map_err(in_tool)?;
        if f.key_order == KeyOrder::Sorted {
            node.sort_keys();
        }
        // The call grammar is composed around each tool's arguments; their shared
        // parts go into one table of rules.
        let args = f.dialect.syntax().grammar(&node, f, rules, marker);
        check_grammar_size(args.text.len() + rules.total_len()).map_err(in_tool)?;
        let name = &t.function.name;
        match f.body {
            BodyKind::JsonNameArguments => {
                let (colon, comma) = (f.spacing.colon(), f.spacing.comma());
                let member = format!(r#""{}"{colon}"(?:{})""#, regex_syntax::escape(&f.id_key), f.id_pattern);
                let (lead, id) = match (f.id_key.is_empty(), f.id_first) {
                    (true, _) => (String::new(), String::new()),
                    (false, true) => (format!("{member}{comma}"), String::new()),
                    (false, false) => (String::new(), format!("(?:{comma}{member})?")),
                };
                let inner = format!(
                    r#""{}"{colon}{}{comma}"{}"{colon}"#,
                    regex_syntax::escape(&f.name_key),
                    regex_syntax::escape(&serde_json::to_string(name).unwrap_or_default()),
                    regex_syntax::escape(&f.arguments_key),
                );
                let (open, close) = match f.nested_function {
                    true => (
                        format!(r#"\{{{lead}"type"{colon}"function"{comma}"function"{colon}\{{{inner}"#),
                        format!(r"\}}{id}\}}"),
                    ),
                    false => (format!(r"\{{{lead}{inner}"), format!(r"{id}\}}")),
                };
                bodies.push(Built::cat(vec![Built::read(open), args, Built::read(close)]));
            }
            BodyKind::NameThenArguments => {
                let sep = regex_syntax::escape(&f.name_index_separator);
                let (id, index) = match (f.id_slot, sep.as_str()) {
                    (IdSlot::BeforeName, _) => (format!("(?:{})", f.id_pattern), String::new()),
                    (IdSlot::AfterName, sep) => (String::new(), format!("{sep}(?:{})", f.id_pattern)),
                    (IdSlot::None, "") => Default::default(),
                    (IdSlot::None, sep) => (String::new(), format!("{sep}[0-9]{{1,3}}")),
                };
                let again = match f.name_again.as_str() {
                    "" => Built::empty(),
                    end => Built::cat(vec![Built::read(regex_syntax::escape(name)), marker(end)]),
                };
                let name = format!("{id}{}{}{index}", regex_syntax::escape(&f.name_prefix), regex_syntax::escape(name));
                bodies.push(Built::cat(vec![Built::read(name), marker(&f.name_end), again, args]));
            }
        }
    }
    let nl = || if f.inner_newlines { Built::read("\\n?".into()) } else { Built::empty() };
    let call = Built::cat(vec![marker(&f.call_start), nl(), Built::alt(bodies), nl(), marker(&f.call_end)]);
    // A list of calls is a JSON array: compact, or pretty-printed with a newline and a
    // bounded indent (Command R7B's `[\n    {…}\n]`); never an unbounded run.
    const LIST_WS: &str = "(?:\\n {0,8})?";
    let sep = if f.list { format!(",(?: |{LIST_WS})") } else { format!("(?:{})?", regex_syntax::escape(&f.separator)) };
    let calls = if parallel { Built::separated(rules.share_part(call), &Built::read(sep)) } else { call };
    Ok(if f.has_section() {
        let (open, close) = match (f.list, f.start_opens_list()) {
            (true, true) => (LIST_WS.to_string(), format!("{LIST_WS}\\]")),
            (true, false) => (format!("\\[{LIST_WS}"), format!("{LIST_WS}\\]")),
            (false, _) => (String::new(), String::new()),
        };
        let around = |text: String| if text.is_empty() { Built::empty() } else { Built::read(text) };
        Built::cat(vec![
            marker(&f.section_start),
            nl(),
            around(open),
            calls,
            around(close),
            nl(),
            marker(&f.section_end),
        ])
    } else {
        calls
    })
}

/// `calls` preceded by the rest of an open reasoning block: any text without the
/// block's `end` marker, the marker, at most two newlines, then the calls. For a turn
/// constrained from its first token whose prompt already opened the block (the
/// reasoning splitter then reads the block, the parser the calls). The closing logic of
/// [`crate::engine::Engine::generate_constrained`] bounds the reasoning by the budget.
pub fn after_reasoning(end: &str, calls: Spec, tok: &Tokenizer) -> Spec {
    let rest = Built::read(without_literal(end));
    calls.after(Built::cat(vec![rest, marker_part(end, tok), Built::read("\\n{0,2}".into())]))
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
