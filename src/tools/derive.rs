//! Tool-call layouts read off the template itself, by differential rendering.
//!
//! A template shows how its model writes calls when it renders an assistant turn
//! that made some. [`derive()`] renders the same short conversation several ways that
//! differ in one controlled respect, and reads the layout off the differences:
//!
//! 1. **Where the calls are.** The turn with one call and the same turn with text
//!    content instead (`zcontentz`) share everything before the assistant's output and
//!    after it (the end-of-turn marker): what lies between is the call text.
//! 2. **Where each call's body is.** The probe calls use names and argument values no
//!    template contains (`tg_probe_alpha`, `vq_alpha`, 4711). A JSON object around the
//!    name that holds the name and the arguments is a JSON body (its keys are the
//!    name and arguments keys; arguments printed in it as Python's `repr` of a dict are
//!    [`ArgsDialect::PythonDict`]); otherwise the name is followed by the arguments in one
//!    of the argument dialects (JSON, Gemma 4, Python keyword arguments, XML-style
//!    parameters), recognised by reading the text after the name back into the probe's
//!    arguments. Python arguments a template prints unlike Python (`xa_q=vq_alpha`,
//!    `xb_n="4711"`, no comma between them) are read with the fewest
//!    [`PythonQuirks`] that read them back, and the grammar admits those spellings;
//!    Gemma-style arguments with every value between the string quotes
//!    (`xb_n:<escape>4711<escape>`) get [`PythonQuirks::quoted_scalars`].
//! 3. **Section, call markers, separator.** The turn with two calls gives the text
//!    between the calls: it is the call's end marker, a separator, and the next call's
//!    start marker. The start marker is what the text before the first call and the
//!    text between calls end with; the end marker what the text between calls and the
//!    text after the last call start with. What is left before (after) is the
//!    section's start (end). Splits fall only at marker edges (after `>`, `]`, `}` or
//!    whitespace, or before `<`, `[`, `{` or whitespace), so `<｜tool▁call▁end｜>` is
//!    never cut inside. A `[` … `]` section with `,` between JSON bodies is a list; an
//!    index after the name that differs between the calls (`:0`, `:1`) is a call index.
//! 4. **Call ids.** Templates that check ids (Mistral's nine characters) fail with
//!    OpenAI's `call_…` ids and render with nine letters and digits: the format then
//!    gives its calls such ids.
//! 5. **Key order.** One more call, with the probe tool's parameters declared and its
//!    arguments given in reverse name order: a template that prints them sorted
//!    (Jinja's `dictsort`: Gemma 4) gets [`KeyOrder::Sorted`], so the grammar writes
//!    keys in the order the model was trained on.
//!
//! The result is a [`ToolFormat`] like the ones in `grammars/`, checked by a round trip
//! ([`conformance`]): the parser reads the rendered calls back to the probe calls, and
//! the constrained grammar for the probe tools accepts the rendered text. A template
//! whose calls cannot be read this way is an [`Underivable`] naming what was missing —
//! never a guessed format.
//!
//! ```
//! use toolgate::template::ChatTemplate;
//! use toolgate::tools::derive::derive;
//! let t = ChatTemplate::new("demo", r#"{%- for m in messages -%}
//! {%- if m.tool_calls -%}<|calls|>{%- for c in m.tool_calls -%}{%- if not loop.first %}, {% endif -%}
//! <call>{"fn": "{{ c.function.name }}", "args": {{ c.function.arguments | tojson }}}</call>
//! {%- endfor -%}<|end|>
//! {%- else -%}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif -%}
//! {%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"#)?;
//! let d = derive(&t, true).unwrap();
//! let f = &d.format;
//! assert_eq!((f.section_start.as_str(), f.call_start.as_str(), f.call_end.as_str()), ("<|calls|>", "<call>", "</call>"));
//! assert_eq!((f.name_key.as_str(), f.arguments_key.as_str(), f.separator.as_str()), ("fn", "args", ", "));
//! assert!(d.parallel);
//! # Ok::<(), toolgate::Error>(())
//! ```

use serde_json::{json, Value};

use super::conformance::{conformance, probe_arguments, probe_tools, shorten, PROBE_NAMES};
use super::dialect::python::python_repr_single;
use super::dialect::{gemma4, python, tagged};
use super::format::{
    ArgsDialect, BodyKind, CallIds, IdSlot, KeyOrder, ParamTags, PythonQuirks, ToolFormat, KEY_SLOT, TYPE_SLOT,
};
use super::Tool;
use crate::grammar::regex::Spacing;
use crate::template::family::reasoning_markers;
use crate::template::transform::shape_fields;
use crate::template::{ChatTemplate, RenderRequest};

/// What a template's layout could not be read for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot derive the tool-call layout from the template: {reason}")]
pub struct Underivable {
    /// What was missing or inconsistent.
    pub reason: String,
    /// The call text the template wrote for one probe call, when it wrote one: an
    /// override must read it ([`conformance`]) to be used instead.
    pub sample: Option<String>,
    /// What the template wrote after that call ([`Derivation::turn_end`]).
    pub turn_end: String,
}

impl Underivable {
    fn new(reason: impl Into<String>) -> Self {
        Self { reason: reason.into(), sample: None, turn_end: String::new() }
    }
}

/// A layout read off a template.
#[derive(Debug, Clone)]
pub struct Derivation {
    /// The layout (`family` is `"derived"`).
    pub format: ToolFormat,
    /// The template renders two calls in one turn (parallel calls).
    pub parallel: bool,
    /// The call text the template wrote for the probe calls (two when `parallel`):
    /// what [`conformance`] checks formats against.
    pub sample: String,
    /// What the template writes after the calls, up to the end of generation (its
    /// `eos_token`) or of the turn: the turn's end marker, such as `<|im_end|>`,
    /// `<|eom_id|>` or `<|END_OF_TURN_TOKEN|>`. Model output may end with it, or with
    /// a prefix of it where generation stopped at a special token
    /// ([`super::conformance::check_calls`]).
    pub turn_end: String,
}

/// Ids in OpenAI's shape, then ids of nine letters and digits (Mistral's templates
/// refuse any other length).
/// Kimi's templates print the id where the name goes, so they need `functions.NAME:N`.
const IDS: [(CallIds, [&str; 2]); 3] = [
    (CallIds::Openai, ["call_0a1b2c3d4e5f", "call_6a7b8c9d0e1f"]),
    (CallIds::Alnum9, ["Xq7Rk2Pz9", "Lm3Tw8Vb4"]),
    (CallIds::FunctionsIndex, ["functions.tg_probe_alpha:0", "functions.tg_probe_beta:1"]),
];

struct Renders {
    /// The template's reasoning markers: an empty block before the calls is the
    /// model's (empty) reasoning, not part of them.
    reasoning: Option<(&'static str, &'static str)>,
    /// The turn with text content instead of calls.
    text: String,
    /// One call; two calls (when the template renders them).
    one: String,
    two: Option<String>,
    ids: CallIds,
    /// The calls' arguments were passed as objects, so the template wrote their JSON.
    object_arguments: bool,
    /// The order the template prints argument keys in.
    key_order: KeyOrder,
    /// Where the one-call turn ends in `one`: see [`turn_end`].
    turn_end: usize,
    /// The probe question with the generation prompt (`None`: it did not render).
    prompt: Option<String>,
}

fn render(
    t: &ChatTemplate,
    tools: &[Tool],
    assistant: Option<Value>,
    object_arguments: bool,
) -> Result<String, String> {
    render_turns(t, tools, assistant.into_iter().collect(), object_arguments, false)
}

/// The probe question, then `turns`, rendered as [`render`] does.
fn render_turns(
    t: &ChatTemplate,
    tools: &[Tool],
    turns: Vec<Value>,
    object_arguments: bool,
    generation_prompt: bool,
) -> Result<String, String> {
    let mut messages = vec![json!({"role": "user", "content": "Probe question?"})];
    messages.extend(turns);
    let messages = shape_fields(messages, object_arguments, false);
    let mut req = RenderRequest::new(messages);
    req.tools = Some(tools.iter().map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).collect());
    req.add_generation_prompt = generation_prompt;
    req.bos_token = "<s>".into();
    req.eos_token = PROBE_EOS.into();
    t.render(&req).map_err(|e| e.to_string())
}

/// The `eos_token` the probe renders with: generation ends there.
const PROBE_EOS: &str = "</s>";

/// Where the call turn `one` (the render of `turn`) ends: where the render with a
/// user message after it departs from `one` (at a marker edge), or the end of `one`
/// when the template renders nothing after the turn or refuses a user message there.
fn turn_end(t: &ChatTemplate, tools: &[Tool], one: &str, turn: Value, object_arguments: bool) -> usize {
    let Ok(follow) =
        render_turns(t, tools, vec![turn, json!({"role": "user", "content": "zfollowz"})], object_arguments, false)
    else {
        return one.len();
    };
    let mut p = one.bytes().zip(follow.bytes()).take_while(|(a, b)| a == b).count();
    while p > 0 && !(one.is_char_boundary(p) && edge(one, p)) {
        p -= 1;
    }
    p
}

/// What `render` holds after `sample` (a piece of it), up to the end of the turn
/// (byte `end`) or [`PROBE_EOS`], trimmed: [`Derivation::turn_end`].
fn after_calls(render: &str, end: usize, sample: &str) -> String {
    let Some(at) = render.rfind(sample).map(|at| at + sample.len()) else { return String::new() };
    // A template that renders the turn otherwise when a message follows (Qwen 3 drops
    // its reasoning then) departs before the calls end: no bound is known.
    let rest = &render[at..end.max(at)];
    let rest = if rest.is_empty() { &render[at..] } else { rest };
    rest.split(PROBE_EOS).next().unwrap_or_default().trim().to_string()
}

fn assistant_with_calls(n: usize, ids: &[&str; 2], content: Value) -> Value {
    let calls: Vec<Value> = (0..n)
        .map(|i| {
            // OpenAI clients send arguments as a JSON string; `shape_fields` gives the
            // template objects when it reads objects, as the engine does.
            json!({"id": ids[i], "type": "function", "function": {
                "name": PROBE_NAMES[i], "arguments": probe_arguments(i).to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": content, "tool_calls": calls})
}

fn renders(t: &ChatTemplate, object_arguments: bool) -> Result<Renders, Underivable> {
    let tools = probe_tools();
    let text = render(t, &tools, Some(text_turn()), object_arguments)
        .map_err(|e| Underivable::new(format!("the template cannot render an assistant answer: {e}")))?;
    let mut last_error = String::new();
    for (ids_kind, ids) in IDS {
        for content in [json!(""), Value::Null] {
            match render(t, &tools, Some(assistant_with_calls(1, &ids, content.clone())), object_arguments) {
                Ok(one) if output_part(&one, &text).contains(PROBE_NAMES[0]) => {
                    // A template that renders only one of two calls has no parallel calls.
                    let two = render(t, &tools, Some(assistant_with_calls(2, &ids, content.clone())), object_arguments)
                        .ok()
                        .filter(|two| PROBE_NAMES.iter().all(|n| output_part(two, &text).contains(n)));
                    let reasoning = reasoning_markers(t.source());
                    let key_order =
                        if object_arguments { key_order(t, &ids, content.clone()) } else { KeyOrder::Schema };
                    let turn_end = turn_end(t, &tools, &one, assistant_with_calls(1, &ids, content), object_arguments);
                    let prompt = render_turns(t, &tools, Vec::new(), object_arguments, true).ok();
                    return Ok(Renders {
                        reasoning,
                        text,
                        one,
                        two,
                        ids: ids_kind,
                        object_arguments,
                        key_order,
                        turn_end,
                        prompt,
                    });
                }
                Ok(_) => last_error = "the template renders an assistant turn with a tool call without the call".into(),
                Err(e) => last_error = format!("rendering an assistant turn with a tool call failed: {e}"),
            }
        }
    }
    Err(Underivable::new(last_error))
}

/// The text answer of [`text_turn`].
const TEXT_CONTENT: &str = "zcontentz";

/// The assistant turn with text content, whose render tells a call turn's output part.
fn text_turn() -> Value {
    json!({"role": "assistant", "content": TEXT_CONTENT})
}

/// The order `t` prints a call's argument keys in (arguments passed as objects): one
/// call rendered with the probe tool's parameters declared, and its arguments given,
/// in reverse name order (`xb_n` before `xa_q`). A template that sorts the keys
/// (Jinja's `dictsort`, Gemma 4's) prints `xa_q` first; one that prints them as given
/// (`tojson`, `.items()`) or in its schema's order prints `xb_n` first. Anything else
/// (a render error, keys not printed) keeps the schema's order.
fn key_order(t: &ChatTemplate, ids: &[&str; 2], content: Value) -> KeyOrder {
    let reversed = |v: &Value| -> Value {
        let pairs: Vec<(String, Value)> =
            v.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
        Value::Object(pairs.into_iter().rev().collect())
    };
    let mut tools = probe_tools();
    for tool in &mut tools {
        if let Some(p) = tool.function.parameters.get_mut("properties") {
            *p = reversed(p);
        }
    }
    let mut turn = assistant_with_calls(1, ids, content);
    turn["tool_calls"][0]["function"]["arguments"] = Value::String(reversed(&probe_arguments(0)).to_string());
    let (Ok(text), Ok(one)) = (render(t, &tools, Some(text_turn()), true), render(t, &tools, Some(turn), true)) else {
        return KeyOrder::Schema;
    };
    let out = output_part(&one, &text);
    match (out.find("xa_q"), out.find("xb_n")) {
        (Some(a), Some(b)) if a < b => KeyOrder::Sorted,
        _ => KeyOrder::Schema,
    }
}

/// The model's part of a rendered turn: what differs from the same turn with text
/// content (`zcontentz`), cut at marker edges (`<|START_THINKING|>` is not cut
/// after its shared `<|START_`; a call turn may end with its own marker,
/// `<|END_ACTION|>` or `<|eom_id|>` where the text turn has `<|END_RESPONSE|>` or
/// `<|eot_id|>`: the shared `|>` is not a cut, the marker is kept whole), leading and
/// trailing whitespace trimmed.
fn output_part<'a>(calls: &'a str, text: &str) -> &'a str {
    let mut p = calls.bytes().zip(text.bytes()).take_while(|(a, b)| a == b).count();
    while p > 0 && !(calls.is_char_boundary(p) && edge(calls, p)) {
        p -= 1;
    }
    let max_s = calls.len() - p;
    let s = calls.bytes().rev().zip(text.bytes().rev()).take_while(|(a, b)| a == b).count().min(max_s);
    // Forward to the next edge: the call turn's own end marker is kept whole
    // (`<|END_ACTION|>` shares `|>` with `<|END_RESPONSE|>`).
    let mut end = calls.len() - s;
    while end < calls.len() && !(calls.is_char_boundary(end) && edge(calls, end)) {
        end += 1;
    }
    calls[p..end].trim()
}

/// `out` without a reasoning block at its start (Command R7B renders an empty one
/// before its calls).
fn without_reasoning<'a>(out: &'a str, markers: Option<(&str, &str)>) -> &'a str {
    let Some((start, end)) = markers else { return out };
    match out.strip_prefix(start).and_then(|rest| rest.find(end).map(|e| &rest[e + end.len()..])) {
        Some(rest) => rest.trim_start(),
        None => out,
    }
}

/// A call found in the output: where it starts (its body or its name), where it ends
/// (after its arguments or body), and what was read.
#[derive(Debug, Clone)]
struct Found {
    start: usize,
    end: usize,
    body: Body,
    /// The spelling of tagged parameters, for that dialect.
    tags: Option<ParamTags>,
    /// The string quote of the Gemma dialect, where it is not Gemma 4's.
    quote: String,
    /// The Python dialect's spellings unlike Python the call needed to read back.
    python: PythonQuirks,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    /// `id_value`: the id member's value in this call; `ours`: it is the id the call
    /// was rendered with (else the template made it, such as an index).
    /// `dialect`: the arguments' ([`ArgsDialect::PythonDict`] where they print as
    /// Python's `repr`).
    Json {
        name_key: String,
        arguments_key: String,
        id_key: String,
        id_value: String,
        id_first: bool,
        ours: bool,
        dialect: ArgsDialect,
    },
    /// `name_at`: where the name starts; `name_end`: the text between the name and the
    /// arguments.
    NameThen { name_at: usize, name_end: String, dialect: ArgsDialect },
}

/// The probe call `i` in `out`, searched from byte `from`.
fn find_call(out: &str, from: usize, i: usize, ids: &[&str; 2]) -> Result<Found, String> {
    let name = PROBE_NAMES[i];
    let args = probe_arguments(i);
    let n = out[from..].find(name).map(|n| from + n).ok_or_else(|| format!("the call text lacks the name {name}"))?;
    // A JSON object around the name holding it and the arguments: a JSON body.
    // Its arguments may be printed as Python's `repr` of a dict (`{'xa_q': 'vq_alpha',
    // …}`: Jinja's `{{ arguments }}`), read as their JSON in that place.
    let repr = python_repr_single(&args);
    let (json_args, dict_at) = (args.to_string(), out[n..].find(&repr).map(|k| n + k));
    for (p, _) in out[from..n].char_indices().rev().filter(|(_, c)| *c == '{') {
        let p = from + p;
        let mut stream = serde_json::Deserializer::from_str(&out[p..]).into_iter::<Value>();
        let (obj, end, dialect) = match stream.next() {
            Some(Ok(Value::Object(obj))) => (obj, p + stream.byte_offset(), ArgsDialect::Json),
            _ => {
                let Some(k) = dict_at else { continue };
                let text = format!("{}{json_args}{}", &out[p..k], &out[k + repr.len()..]);
                let mut stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
                let Some(Ok(Value::Object(obj))) = stream.next() else { continue };
                let end = p + stream.byte_offset();
                if end < k + json_args.len() {
                    continue;
                }
                (obj, end + repr.len() - json_args.len(), ArgsDialect::PythonDict)
            }
        };
        if end <= n {
            continue;
        }
        let name_key = obj.iter().find(|(_, v)| v.as_str() == Some(name)).map(|(k, _)| k.clone());
        let arguments_key = obj
            .iter()
            .find(|(_, v)| {
                **v == args || v.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()).as_ref() == Some(&args)
            })
            .map(|(k, _)| k.clone());
        if let (Some(name_key), Some(arguments_key)) = (name_key, arguments_key) {
            // Any other member is an id: ours, or one the template makes (an index).
            let others: Vec<(&String, &Value)> =
                obj.iter().filter(|(k, _)| **k != name_key && **k != arguments_key).collect();
            let id_key = match others.as_slice() {
                [] => String::new(),
                [(k, Value::String(_))] => (*k).clone(),
                _ => {
                    return Err(format!(
                        "the JSON call body has members besides the name, arguments and an id: {obj:?}"
                    ))
                }
            };
            let id_value = obj.get(&id_key).and_then(Value::as_str).unwrap_or_default().to_string();
            let ours = id_value == ids[i];
            let key_at = |k: &str| out[p..end].find(&format!("\"{k}\"")).unwrap_or(usize::MAX);
            let id_first = !id_key.is_empty() && key_at(&id_key) < key_at(&name_key);
            let body = Body::Json { name_key, arguments_key, id_key, id_value, id_first, ours, dialect };
            return Ok(Found {
                start: p,
                end,
                body,
                tags: None,
                quote: String::new(),
                python: PythonQuirks::default(),
            });
        }
    }
    // The name, then the arguments in one of the dialects.
    let strings: std::collections::HashSet<String> = ["xa_q".to_string()].into();
    let after = n + name.len();
    let rest = &out[after..];
    let same = |json: Option<String>| json.and_then(|j| serde_json::from_str::<Value>(&j).ok()).as_ref() == Some(&args);
    let closers = |open: usize, close: char| {
        rest[open..].char_indices().filter(move |(_, c)| *c == close).map(move |(j, _)| open + j + 1)
    };
    if let Some(open) = rest.find('{') {
        let mut stream = serde_json::Deserializer::from_str(&rest[open..]).into_iter::<Value>();
        if let Some(Ok(v)) = stream.next() {
            if v == args {
                let end = after + open + stream.byte_offset();
                return Ok(name_then(out, n, after, after + open, end, ArgsDialect::Json));
            }
        }
        // Gemma's values, or every value printed between the quotes (`xb_n:<escape>4711<escape>`).
        if let Some(quote) = gemma_quote(&rest[open..], i) {
            for quoted_scalars in [false, true] {
                let mut f = ToolFormat::json_body("gemma", "");
                (f.dialect, f.string_quote) = (ArgsDialect::Gemma4, quote.to_string());
                f.python_quirks.quoted_scalars = quoted_scalars;
                let read = |c: usize| ArgsDialect::Gemma4.syntax().to_json(&rest[open..c], &f, Some(&strings));
                if let Some(close) = closers(open, '}').find(|&c| same(read(c))) {
                    let mut found = name_then(out, n, after, after + open, after + close, ArgsDialect::Gemma4);
                    if quote != gemma4::QUOTE {
                        found.quote = quote.to_string();
                    }
                    found.python = f.python_quirks;
                    return Ok(found);
                }
            }
        }
    }
    // Python keyword arguments, as Python spells them or, failing that, with the
    // fewest quirks a template's `{{ value }}` prints them with (`xa_q=vq_alpha`).
    if let Some(open) = rest.find('(') {
        for quirks in PythonQuirks::all() {
            let read = |c: usize| python::to_json(&rest[open..c], quirks, Some(&strings));
            if let Some(close) = closers(open, ')').find(|&c| same(read(c))) {
                let mut found = name_then(out, n, after, after + open, after + close, ArgsDialect::Python);
                found.python = quirks;
                return Ok(found);
            }
        }
    }
    if let Some((tags, at, len)) = tagged(rest, i) {
        if let Some(Ok((read, params))) = tagged::read(&rest[at..], &tags, "", true) {
            if read == len && same(Some(tagged::params_to_json(&params, &tags, Some(&strings)))) {
                let mut found = name_then(out, n, after, after + at, after + at + len, ArgsDialect::XmlParameters);
                found.tags = Some(tags);
                return Ok(found);
            }
        }
    }
    Err(format!(
        "after the name {name}, the arguments {args} are in no layout toolgate reads (JSON, Gemma 4, Python keyword \
         arguments, tagged parameters): {:?}",
        shorten(rest)
    ))
}

/// The token Gemma-style arguments (`{xa_q:Qvq_alphaQ,…}`, `args` from their `{`)
/// quote the probe's string with: the text between the key's `:` and the value, the
/// same after it, shaped as a control token (`<|"|>`, `<escape>`).
fn gemma_quote(args: &str, i: usize) -> Option<&str> {
    let value = probe_arguments(i)["xa_q"].as_str()?.to_string();
    let from = args.find("xa_q:")? + "xa_q:".len();
    let quote = &args[from..from + args[from..].find(&value)?];
    let token = quote.len() > 2 && quote.starts_with('<') && quote.ends_with('>');
    let closed = args[from + quote.len() + value.len()..].starts_with(quote);
    (token && closed && !quote.contains(char::is_whitespace)).then_some(quote)
}

fn name_then(out: &str, name_at: usize, after: usize, args_at: usize, end: usize, dialect: ArgsDialect) -> Found {
    let name_end = out[after..args_at].to_string();
    let body = Body::NameThen { name_at, name_end, dialect };
    Found { start: name_at, end, body, tags: None, quote: String::new(), python: PythonQuirks::default() }
}

/// Tagged parameters after a name (`rest`), read off the probe arguments' positions:
/// `a xa_q b vq_alpha c xb_n d 4711 e`, where `a` is the name's end and the first key
/// start, `c` a value end and the next key start, `b` (`d`) the key end before a bare
/// (JSON) value. Returns the spelling, where the parameters start in `rest` and how
/// long they are. Whitespace at a tag's inner side is left to the dialect (it allows
/// a newline around values).
fn tagged(rest: &str, i: usize) -> Option<(ParamTags, usize, usize)> {
    let args = probe_arguments(i);
    let value = args["xa_q"].as_str()?.to_string();
    let number = args["xb_n"].to_string();
    let k1 = rest.find("xa_q")?;
    let v1 = k1 + 4 + rest[k1 + 4..].find(&value)?;
    let k2 = v1 + value.len() + rest[v1 + value.len()..].find("xb_n")?;
    let v2 = k2 + 4 + rest[k2 + 4..].find(&number)?;
    let (a, b, c, d) = (&rest[..k1], &rest[k1 + 4..v1], &rest[v1 + value.len()..k2], &rest[k2 + 4..v2]);
    // The key start: the longest common suffix of `a` and `c` that starts at an edge.
    let common =
        a.chars().rev().zip(c.chars().rev()).take_while(|(x, y)| x == y).map(|(x, _)| x.len_utf8()).sum::<usize>();
    let key_len = (1..=common)
        .rev()
        .find(|&n| a.is_char_boundary(a.len() - n) && edge(c, c.len() - n) && edge(a, a.len() - n))?;
    let key_start = a[a.len() - key_len..].trim_start().to_string();
    // A closing tag that repeats the key (`</xa_q>`) has a slot for it.
    let value_end = c[..c.len() - key_len].trim().replace("xa_q", KEY_SLOT);
    let key_end = b.trim_end().to_string();
    let key_end_json = d.trim_end().to_string();
    if key_start.is_empty() || key_end.is_empty() || value_end.is_empty() {
        return None;
    }
    let tags = ParamTags { key_start, key_end, key_end_json: None, value_end, end: String::new() };
    let tail = &rest[v2 + number.len()..];
    let last_end = tags.value_end_for("xb_n");
    let close = tail.find(last_end.as_ref())?;
    if !tail[..close].trim().is_empty() {
        return None;
    }
    let at = a.len() - tags.key_start.len();
    let len = v2 + number.len() + close + last_end.len() - at;
    let key_end_json = (key_end_json != tags.key_end).then(|| typed_key_end(&tags.key_end, &key_end_json));
    Some((ParamTags { key_end_json, ..tags }, at, len))
}

/// A key end before JSON values that names the value's type where the one before
/// strings says `string` (Kimi K3's `" type="number"<|sep|>` beside `" type="string"<|sep|>`):
/// the type becomes [`TYPE_SLOT`], so booleans, objects and arrays get theirs.
fn typed_key_end(text: &str, json: &str) -> String {
    let same = |(a, b): (char, char)| if a == b { Some(a.len_utf8()) } else { None };
    let pre: usize = text.chars().zip(json.chars()).map_while(same).sum();
    let suf: usize = text[pre..].chars().rev().zip(json[pre..].chars().rev()).map_while(same).sum();
    if (&text[pre..text.len() - suf], &json[pre..json.len() - suf]) == ("string", "number") {
        format!("{}{}{}", &json[..pre], TYPE_SLOT, &json[json.len() - suf..])
    } else {
        json.to_string()
    }
}

/// Whether byte `i` of `s` is a marker edge: the text before it ends a marker or
/// whitespace, or the text after it starts one.
fn edge(s: &str, i: usize) -> bool {
    let before = s[..i].chars().next_back();
    let after = s[i..].chars().next();
    match (before, after) {
        (None, _) | (_, None) => true,
        (Some(b), Some(a)) => {
            matches!(b, '>' | ']' | '}' | ')') || b.is_whitespace() || matches!(a, '<' | '[' | '{') || a.is_whitespace()
        }
    }
}

/// Split the text between two calls (`mid`) into end marker, separator and start
/// marker, where the start marker ends the text before the first call (`pre`) and the
/// end marker starts the text after the last (`post`): the split with the longest
/// markers whose every cut is a marker edge. Returns `(section_start, call_start,
/// separator, call_end, section_end)`.
fn split_markers<'a>(pre: &'a str, mid: &'a str, post: &'a str) -> Option<[&'a str; 5]> {
    let mut best: Option<((usize, usize), [&str; 5])> = None;
    let cuts: Vec<usize> = (0..=mid.len()).filter(|&i| mid.is_char_boundary(i)).collect();
    for &i in &cuts {
        let ce = &mid[..i];
        if !post.starts_with(ce) || !edge(mid, i) || !edge(post, i) {
            continue;
        }
        for &j in cuts.iter().filter(|&&j| j >= i) {
            let cs = &mid[j..];
            if !pre.ends_with(cs) || !edge(mid, j) || !edge(pre, pre.len() - cs.len()) {
                continue;
            }
            // The most marker text (whitespace aside: a newline inside one marker is no
            // more marker than one between two); then the least whitespace in the
            // markers (it is the separator's).
            let text = |m: &str| m.chars().filter(|c| !c.is_whitespace()).map(char::len_utf8).sum::<usize>();
            let score = (text(ce) + text(cs), usize::MAX - ce.len() - cs.len());
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, [&pre[..pre.len() - cs.len()], cs, &mid[i..j], ce, &post[ce.len()..]]));
            }
        }
    }
    best.map(|(_, parts)| parts)
}

/// Strip one newline (and the spaces around it) at the inner side of a marker: `true`
/// when one was there (the grammar then allows a newline in that place). Spaces alone
/// stay part of the marker (Granite 20B's `<function_call> {…}`).
fn inner_newline(s: &str, at_end: bool) -> (String, bool) {
    let t = if at_end { s.trim_end() } else { s.trim_start() };
    let cut = if at_end { &s[t.len()..] } else { &s[..s.len() - t.len()] };
    match cut.contains('\n') {
        true => (t.to_string(), true),
        false => (s.to_string(), false),
    }
}

/// Read the layout of `template`'s tool calls (see the [module docs](self)).
/// `object_arguments`: the template reads call arguments as JSON objects (the
/// prober's `supports_object_arguments`), so they are passed as the engine passes them.
///
/// Cost: six to ten renders of a one- to three-message conversation (one with a user
/// message after the call turn, for its end; one of the question with the generation
/// prompt, for `prompt_opens_call`), and a search quadratic in the length of
/// the text between two calls (tens of bytes): about a millisecond.
///
/// # Errors
/// [`Underivable`] naming what could not be read: the template renders no call, the
/// name or arguments cannot be found, the arguments are in a layout toolgate has no
/// dialect for, or the markers do not split consistently.
pub fn derive(template: &ChatTemplate, object_arguments: bool) -> Result<Derivation, Underivable> {
    let r = renders(template, object_arguments)?;
    let one = without_reasoning(output_part(&r.one, &r.text), r.reasoning);
    let two = r.two.as_deref().map(|t| without_reasoning(output_part(t, &r.text), r.reasoning));
    let (one, two, opened_text) = with_hidden_opener(&r, one, two);
    read_layout(&r, one, two, opened_text).map_err(|reason| Underivable {
        reason,
        sample: Some(one.to_string()),
        turn_end: after_calls(&r.one, r.turn_end, one),
    })
}

/// Byte offset of `part` (a slice of `whole`) in `whole`.
fn offset_in(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// `one` and `two` (the output parts of `r.one` and `r.two`) from the calls' opening
/// marker on, where the text the call turns share with the text turn ends inside it:
/// Functionary v3.2's `>>>` opens calls and text alike (`>>>NAME\n{…}` against
/// `>>>all\nText`), so the output parts start at the name. The marker is then the
/// end of the text between two calls that both renders hold just before their first
/// call. Unchanged where the first call has text before it, or no two calls render.
/// Also returns where the text turn goes on after that marker (see [`Opened`]).
fn with_hidden_opener<'a>(r: &'a Renders, one: &'a str, two: Option<&'a str>) -> Opened<'a> {
    let unchanged = (one, two, None);
    let ids = probe_ids(r);
    let (Some(two_part), Some(render2)) = (two, r.two.as_deref()) else { return unchanged };
    let (Ok(c1), Ok(a)) = (find_call(one, 0, 0, &ids), find_call(two_part, 0, 0, &ids)) else { return unchanged };
    let Ok(b) = find_call(two_part, a.end, 1, &ids) else { return unchanged };
    if c1.start > 0 || a.start > 0 {
        return unchanged;
    }
    let mid = &two_part[a.end..b.start];
    let (o1, o2) = (offset_in(&r.one, one), offset_in(render2, two_part));
    let (before1, before2) = (&r.one[..o1], &render2[..o2]);
    // The longest such end of `mid` that starts at a marker edge.
    let opener = (0..mid.len())
        .filter(|&j| mid.is_char_boundary(j) && edge(mid, j))
        .map(|j| &mid[j..])
        .find(|m| !m.trim().is_empty() && before1.ends_with(m) && before2.ends_with(m));
    match opener {
        Some(m) => (&r.one[o1 - m.len()..o1 + one.len()], Some(&render2[o2 - m.len()..o2 + two_part.len()]), Some(o1)),
        None => unchanged,
    }
}

/// The output parts of the one- and two-call turns, and where a text turn's own text
/// starts after a marker that opens it as well ([`with_hidden_opener`]), as a byte
/// offset into both `Renders::one` and `Renders::text` (which share everything before).
type Opened<'a> = (&'a str, Option<&'a str>, Option<usize>);

/// The ids the probe calls were rendered with.
fn probe_ids(r: &Renders) -> [&'static str; 2] {
    IDS.iter().find(|(k, _)| *k == r.ids).map(|(_, ids)| *ids).unwrap_or(IDS[0].1)
}

/// The layout of the calls in `one` (the one-call turn's output part) and, for the
/// separator and section, in `two` (the two-call turn's); `opened_text` as
/// [`with_hidden_opener`] gives it.
fn read_layout(r: &Renders, one: &str, two: Option<&str>, opened_text: Option<usize>) -> Result<Derivation, String> {
    let ids = probe_ids(r);
    let c1 = find_call(one, 0, 0, &ids)?;
    let pair = match two {
        Some(two) => {
            let a = find_call(two, 0, 0, &ids)?;
            let b = find_call(two, a.end, 1, &ids)?;
            Some((two, a, b))
        }
        None => None,
    };
    let pre = &one[..c1.start];
    let post = &one[c1.end..];
    let [section_start, call_start, separator, call_end, section_end] = match &pair {
        Some((two, a, b)) => {
            let (pre2, post2) = (&two[..a.start], &two[b.end..]);
            if pre2 != pre || post2 != post {
                return Err(format!(
                    "one call and two calls are written differently: {:?} vs {:?}",
                    shorten(one),
                    shorten(two)
                ));
            }
            split_markers(pre, &two[a.end..b.start], post).ok_or_else(|| {
                format!("the text between two calls does not split into markers: {:?}", shorten(&two[a.end..b.start]))
            })?
        }
        None => ["", pre, "", post, ""],
    };
    // A section end without a start is the end of the call turn (Gemma 4's
    // `<|tool_response>`), where generation stops: not part of the calls.
    let (section_end, sample_cut) = if section_start.is_empty() { ("", section_end.len()) } else { (section_end, 0) };
    let description = format!("derived from the template: {}", shorten(pair.as_ref().map_or(one, |p| p.0)));
    let mut f = ToolFormat {
        separator: separator.to_string(),
        call_ids: r.ids,
        ..ToolFormat::json_body("derived", &description)
    };
    let (ss, nl1) = inner_newline(section_start, true);
    let (se, nl2) = inner_newline(section_end, false);
    let (cs, nl3) = inner_newline(call_start, true);
    let (ce, nl4) = inner_newline(call_end, false);
    f.inner_newlines = nl1 || nl2 || nl3 || nl4;
    f.section_start = ss;
    f.section_end = se;
    f.call_start = cs;
    f.call_end = ce;
    match &c1.body {
        Body::Json { name_key, arguments_key, id_key, id_value, id_first, ours, dialect } => {
            f.dialect = *dialect;
            f.name_key = name_key.clone();
            f.arguments_key = arguments_key.clone();
            if !id_key.is_empty() {
                f.id_key = id_key.clone();
                f.id_first = *id_first;
                let nine = id_value.len() == 9 && id_value.bytes().all(|b| b.is_ascii_alphanumeric());
                f.id_pattern = id_pattern(id_value).into();
                if nine && !ours {
                    // The template made nine-character ids of its own: give it such ids back.
                    f.call_ids = CallIds::Alnum9;
                }
            }
            // `[` … `]` around bodies separated by `,`: a list.
            if f.call_start.is_empty()
                && f.call_end.is_empty()
                && f.section_start.ends_with('[')
                && f.section_end.starts_with(']')
            {
                f.list = true;
                f.separator = ", ".into();
                let marker = &f.section_start[..f.section_start.len() - 1];
                // A word before the `[` keeps it (`functools[`): the word alone is text.
                // A space before it stays part of the marker (`[TOOL_CALLS] [`).
                if marker.trim_end().chars().last().is_some_and(|c| !c.is_alphanumeric()) {
                    f.section_start = marker.trim_end_matches('\n').to_string();
                }
                f.section_end = f.section_end[1..].trim_start().to_string();
            }
            if f.section_start.is_empty() && f.call_start.is_empty() {
                f.body_trigger = format!("{{\"{}\"", f.name_key);
            }
        }
        Body::NameThen { name_end, dialect, .. } => {
            f.body = BodyKind::NameThenArguments;
            f.dialect = *dialect;
            f.name_end = name_end.clone();
            // Python's `repr` quotes strings with `'`: `city='vq_alpha'`.
            f.single_quotes = *dialect == ArgsDialect::Python && one[c1.start..c1.end].contains("'vq_alpha'");
            f.python_quirks = c1.python;
            f.string_quote = c1.quote.clone();
            if *dialect == ArgsDialect::XmlParameters {
                f.params = c1.tags.clone();
                f.name_end = f.name_end.trim_end().to_string();
            }
            // `to=NAME<|message|>…<invoke name="NAME">`: the name in a header and again in
            // the body (the second call's text between them the same, with its name).
            if let Some((before, after)) = f.name_end.split_once(PROBE_NAMES[0]) {
                let again = |e2: &str| e2.trim_end() == format!("{before}{}{after}", PROBE_NAMES[1]);
                let both = pair
                    .as_ref()
                    .is_none_or(|(_, _, b)| matches!(&b.body, Body::NameThen { name_end: e2, .. } if again(e2)));
                if !before.is_empty() && !after.is_empty() && both {
                    (f.name_end, f.name_again) = (before.to_string(), after.to_string());
                }
            }
            // `:0` / `:1` after the names: a call index.
            if let Some((_, _, b)) = pair.as_ref().filter(|_| f.name_again.is_empty()) {
                if let Body::NameThen { name_end: e2, .. } = &b.body {
                    if let Some((sep, rest)) = index_split(name_end, e2) {
                        f.name_index_separator = sep;
                        f.name_end = rest;
                    } else if let Some((sep, rest)) = id_split(name_end, e2, &ids) {
                        // `[CALL_ID]Xq7Rk2Pz9[ARGS]`: the call's id after the name.
                        f.name_index_separator = sep;
                        f.name_end = rest;
                        f.id_slot = IdSlot::AfterName;
                        f.id_pattern = id_pattern(ids[0]).into();
                    }
                }
            }
            // `<|tool_call:begin|>ID<|tool_call:name|>NAME`: the call's id between the call
            // start and the name, read off as ends of the section start and separator.
            if let Some((opener, separator, call_start)) = id_before_name(&f, &ids) {
                f.name_prefix = std::mem::replace(&mut f.call_start, call_start);
                (f.section_start, f.separator) = (opener, separator);
                f.id_slot = IdSlot::BeforeName;
                f.id_pattern = id_pattern(ids[0]).into();
            }
            // `<tool_call>\n<function=`: a call marker, then the name's prefix.
            if let Some((a, b)) = f.call_start.rsplit_once('\n') {
                let (a, b) = (a.trim_end().to_string(), b.trim_start().to_string());
                if !a.is_empty() && !b.is_empty() {
                    f.call_start = a;
                    f.name_prefix = b;
                    f.inner_newlines = true;
                }
            }
        }
    }
    // The JSON spelling the template writes calls in, when it wrote their arguments
    // itself (arguments passed as a string come back as the client spelled them): the
    // grammar follows it.
    if r.object_arguments && f.dialect == ArgsDialect::Json {
        let json = match &c1.body {
            Body::Json { .. } => &one[c1.start..c1.end],
            Body::NameThen { name_end, .. } => &one[c1.start + PROBE_NAMES[0].len() + name_end.len()..c1.end],
        };
        f.spacing = Spacing::of(json).unwrap_or_default();
    }
    f.key_order = r.key_order;
    if f.section_start.is_empty() && f.call_start.is_empty() && f.body_trigger.is_empty() {
        return Err(format!("the calls have no marker to recognise them by in free text: {:?}", shorten(one)));
    }
    // A generation prompt that ends with the calls' marker: the model starts inside the
    // first call.
    f.prompt_opens_call =
        !f.trigger_in_body() && r.prompt.as_deref().is_some_and(|p| p.trim_end().ends_with(f.trigger()));
    // A marker that opens the text turn too (`with_hidden_opener`): what the text turn
    // writes after it, before its text, starts text instead of a call.
    if let Some(at) = opened_text {
        f.text_start =
            r.text.get(at..).and_then(|t| t.find(TEXT_CONTENT).map(|e| t[..e].to_string())).unwrap_or_default();
    }
    let sample = pair.as_ref().map_or(one, |p| p.0);
    let sample = sample[..sample.len() - sample_cut].trim_end();
    let turn_end = after_calls(&r.one, r.turn_end, one[..one.len() - sample_cut].trim_end());
    let sample = sample.to_string();
    // The combinations the parser and grammar rely on, as for a `grammars/` file (a
    // derived value end must also be a literal `without_literal` can exclude).
    f.validate().map_err(|e| format!("the derived layout ({}) is inconsistent: {e}", summary(&f)))?;
    let d = Derivation { format: f, parallel: pair.is_some(), sample, turn_end };
    conformance(&d.format, &d.sample, d.parallel)
        .map_err(|e| format!("the derived layout ({}) does not round-trip: {e}", summary(&d.format)))?;
    Ok(d)
}

/// The markers of a layout, for messages: `section … call … name_end … params …`.
pub fn summary(f: &ToolFormat) -> String {
    let mut parts = Vec::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            parts.push(format!("{k} {v:?}"));
        }
    };
    put("section_start", &f.section_start);
    put("section_end", &f.section_end);
    put("call_start", &f.call_start);
    put("call_end", &f.call_end);
    put("name_prefix", &f.name_prefix);
    put("name_index_separator", &f.name_index_separator);
    put("name_end", &f.name_end);
    put("name_again", &f.name_again);
    put("separator", &f.separator);
    put("body_trigger", &f.body_trigger);
    put("text_start", &f.text_start);
    if let Some(p) = &f.params {
        put("key_start", &p.key_start);
        put("key_end", &p.key_end);
        put("key_end_json", p.key_end_json.as_deref().unwrap_or(""));
        put("value_end", &p.value_end);
    }
    let spacing = match f.spacing {
        Spacing::Optional => String::new(),
        s => format!(" ({s:?} separators)"),
    };
    let keys = match f.key_order {
        KeyOrder::Schema => "",
        KeyOrder::Sorted => " (keys sorted)",
    };
    let quote = match f.string_quote.as_str() {
        "" => String::new(),
        q => format!(" (strings between {q})"),
    };
    let q = f.python_quirks;
    let quirks: Vec<&str> =
        [(q.bare_strings, "bare strings"), (q.quoted_scalars, "quoted scalars"), (q.no_commas, "no commas")]
            .into_iter()
            .filter_map(|(on, what)| on.then_some(what))
            .collect();
    let quirks = if quirks.is_empty() { String::new() } else { format!(" ({})", quirks.join(", ")) };
    let id = match f.id_slot {
        IdSlot::None => String::new(),
        IdSlot::AfterName => format!(", a call id {} after the name", f.id_pattern),
        IdSlot::BeforeName => format!(", a call id {} before the name", f.id_pattern),
    };
    let opened = if f.prompt_opens_call { " (the prompt opens the first call)" } else { "" };
    format!(
        "{:?} body, {:?} arguments{spacing}{quote}{quirks}{keys}, {}{id}{opened}",
        f.body,
        f.dialect,
        parts.join(", ")
    )
}

/// `(separator, rest)` when two name ends hold the two calls' ids, `ids`, between the
/// same texts (`[CALL_ID]Xq7Rk2Pz9[ARGS]` and `[CALL_ID]Lm3Tw8Vb4[ARGS]` give
/// `("[CALL_ID]", "[ARGS]")`).
fn id_split(a: &str, b: &str, ids: &[&str; 2]) -> Option<(String, String)> {
    let (sep, rest) = a.split_once(ids[0])?;
    (!sep.is_empty() && b == format!("{sep}{}{rest}", ids[1])).then(|| (sep.to_string(), rest.to_string()))
}

/// `(section start, separator, call start)` when the section start ends with the
/// first call's id and the separator with the second's (Solar Open's
/// `<|tool_calls|><|tool_call:begin|>ID0` and `<|tool_call:begin|>ID1`): the text both
/// have before the id opens each call (`<|tool_call:begin|>`), and the call start
/// derived so far becomes the name's prefix, after the id (`f.call_start`, which must
/// not begin with a byte of an id).
fn id_before_name(f: &ToolFormat, ids: &[&str; 2]) -> Option<(String, String, String)> {
    let opener = f.section_start.strip_suffix(ids[0])?;
    let separator = f.separator.strip_suffix(ids[1])?;
    if f.call_start.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b)) {
        return None;
    }
    let common = opener.bytes().rev().zip(separator.bytes().rev()).take_while(|(a, b)| a == b).count();
    fn split(s: &str, tail: usize) -> Option<(&str, &str)> {
        s.is_char_boundary(s.len() - tail).then(|| s.split_at(s.len() - tail))
    }
    let ((opener, call_start), (separator, _)) = (split(opener, common)?, split(separator, common)?);
    (!call_start.is_empty()).then(|| (opener.to_string(), separator.to_string(), call_start.to_string()))
}

/// The regex of ids shaped as `id` is: nine letters and digits (Mistral's), digits,
/// or any id toolgate or a client makes.
fn id_pattern(id: &str) -> &'static str {
    let digits = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
    let nine = id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    match (digits, nine) {
        (true, _) => "[0-9]{1,4}",
        (false, true) => "[A-Za-z0-9]{9}",
        _ => "[A-Za-z0-9_.:-]{1,64}",
    }
}

/// `(separator, rest)` when two name ends differ only in a call index after the same
/// separator (`:0<|x|>` and `:1<|x|>` give `(":", "<|x|>")`).
fn index_split(a: &str, b: &str) -> Option<(String, String)> {
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let p = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let sep = a[..p].trim_end_matches(|c: char| c.is_ascii_digit());
    let (ra, rb) = (&a[sep.len()..], &b[sep.len()..]);
    let (da, db) = (digits(ra), digits(rb));
    (a != b && !sep.is_empty() && da > 0 && db > 0 && ra[da..] == rb[db..])
        .then(|| (sep.to_string(), ra[da..].to_string()))
}

/// The call text `template` renders for the probe calls — the two-call turn when it
/// renders one, else the one-call turn — whether it holds two calls, and what follows
/// them ([`Derivation::turn_end`]): what [`super::layout::from_metadata`] checks a
/// metadata-named layout against.
///
/// Cost: the renders of [`derive()`].
///
/// # Errors
/// [`Underivable`] when the template does not render the probe conversation.
pub(super) fn probe_sample(
    template: &ChatTemplate,
    object_arguments: bool,
) -> Result<(String, bool, String), Underivable> {
    let r = renders(template, object_arguments)?;
    let one = without_reasoning(output_part(&r.one, &r.text), r.reasoning).trim();
    Ok(match &r.two {
        Some(render) => {
            let two = without_reasoning(output_part(render, &r.text), r.reasoning).trim();
            (two.to_string(), true, after_calls(&r.one, r.turn_end, one))
        }
        None => (one.to_string(), false, after_calls(&r.one, r.turn_end, one)),
    })
}
