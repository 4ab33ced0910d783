//! Tagged parameters: each argument between tags, strings as bare text, other values
//! as JSON — Qwen3-Coder's `<parameter=city>\nOslo\n</parameter>` … `</function>`,
//! GLM's `<arg_key>city</arg_key><arg_value>Oslo</arg_value>`, MiniMax's
//! `<parameter name="city">Oslo</parameter>`, DeepSeek DSML's typed
//! `<｜DSML｜parameter name="city" string="true">Oslo</｜DSML｜parameter>`, MiniMax M3's
//! `]<]minimax[>[<city>Oslo]<]minimax[>[</city>` (a closing tag that repeats the key,
//! a vendor token before every tag).
//!
//! The tags are markers: where the vocabulary has a control token for a piece of one
//! (MiniMax M3's vendor token, GLM's `<arg_key>`), the grammar has the model write
//! that token, as for the layout's other markers.
//!
//! Values are typed by the tool's schema when converted to JSON: a parameter
//! declared as a string stays a string even when it reads as a number.

use std::collections::HashSet;

use regex_syntax::escape;
use serde_json::Value;

use super::python::Python;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::dialect::json_keys;
use crate::grammar::ir::Node;
use crate::grammar::part::{alt, Built, NEVER};
use crate::grammar::regex::{key_except, members, to_rules, without_literal, Dialect, Json};
use crate::grammar::rules::Rules;
use crate::tools::format::{ParamTags, ToolFormat, JSON_TYPES, TYPE_SLOT};
use crate::tools::SPECIAL_REGEX;

/// Longest tool or parameter name read.
const MAX_NAME: usize = 256;

fn leading_ws(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

/// Tagged parameters ([`crate::tools::format::ArgsDialect::XmlParameters`]), spelled
/// by the layout's [`ToolFormat::param_tags`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Tagged;

impl ArgsSyntax for Tagged {
    fn grammar(&self, node: &Node, f: &ToolFormat, rules: &mut Rules, marker: &dyn Fn(&str) -> Built) -> Built {
        Built::read(grammar(node, rules, &f.param_tags(), marker))
    }
    fn opener(&self) -> Option<u8> {
        None
    }
    fn extent(&self, text: &str, f: &ToolFormat, _: &mut ValueScan) -> Extent {
        match read(text, &f.param_tags(), f.call_end.trim(), false) {
            None => Extent::More,
            Some(Err(at)) => Extent::Broken(at),
            Some(Ok((len, _))) => Extent::End(len),
        }
    }
    fn to_json(&self, text: &str, f: &ToolFormat, strings: Option<&HashSet<String>>) -> Option<String> {
        match read(text, &f.param_tags(), f.call_end.trim(), true) {
            Some(Ok((_, params))) => Some(params_to_json(&params, &f.param_tags(), strings)),
            _ => None,
        }
    }
}

/// The regex of the key end before a value of kind `kind` in `tags`' layout.
fn key_end_regex(tags: &ParamTags, kind: Kind) -> String {
    let Kind::Json(t) = kind else { return escape(&tags.key_end) };
    match tags.key_end_json().split_once(TYPE_SLOT) {
        Some((a, b)) if t == ANY_TYPE => format!("{}(?:{}){}", escape(a), JSON_TYPES.join("|"), escape(b)),
        Some((a, b)) => format!("{}{t}{}", escape(a), escape(b)),
        None => escape(tags.key_end_json()),
    }
}

/// How a value alternative is written: bare text, or JSON of a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Json(&'static str),
}

/// A JSON value of a type the grammar does not single out.
const ANY_TYPE: &str = "any";

/// The JSON type name a typed key end gives a non-string value grammar.
fn json_type(n: &Node) -> &'static str {
    match n {
        Node::Integer { .. } | Node::Number { .. } => "number",
        Node::Boolean => "boolean",
        Node::Null => "null",
        Node::Object { .. } => "object",
        Node::Array { .. } => "array",
        _ => ANY_TYPE,
    }
}

fn literal_type(v: &Value) -> &'static str {
    match v {
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => ANY_TYPE,
    }
}

/// Tagged parameters for an arguments schema, spelled by `tags` (Qwen3-Coder's
/// `<parameter=NAME>\n?VALUE\n?</parameter>\n?` by default): each declared property
/// in schema order (optional ones skippable), extra properties if the schema allows
/// them (and the closing tag does not repeat the key: [`ParamTags::keyed_end`]), then
/// `tags.end`. String values are bare text without their closing tag; other values
/// are JSON. `marker` spells a tag's text as the grammar reads it (its control tokens,
/// as [`crate::tools::calls_grammar`] spells markers); a closing tag that opens with a
/// control token leaves bare text free, as no text spells one. Large parts go into
/// `rules` as [`to_rules`] puts them ([`Rules::none`] for one plain regex).
///
/// Cost: linear in the schema's size, as [`to_rules`].
pub fn grammar(node: &Node, rules: &mut Rules, tags: &ParamTags, marker: &dyn Fn(&str) -> Built) -> String {
    let s = Spelled::new(tags, marker);
    let body = match node {
        // (`patternProperties` names are not generated in this layout.)
        Node::Object { properties, additional, non_empty, extra_keys, .. } => {
            let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
            let key = key_except("[A-Za-z_]", "[A-Za-z0-9_.-]", &names);
            // Extras that must avoid a pattern are not generated in this layout either.
            let additional = additional.as_ref().filter(|_| extra_keys.is_none() && !tags.keyed_end());
            let extra = additional.map(|extra| s.param(&key, "", extra, rules));
            let declared = s.declared(properties, rules);
            if *non_empty {
                // At least one parameter: the JSON objects' layout, without separators.
                members(&declared, extra.as_deref(), "", true, rules)
            } else {
                let mut out = in_order(declared);
                if let Some(x) = extra {
                    out.push_str(&format!("(?:{x})*"));
                }
                out
            }
        }
        // Any parameters, where the closing tag can be written without knowing them.
        _ if tags.keyed_end() => String::new(),
        other => format!("(?:{})*", s.param("[A-Za-z_][A-Za-z0-9_.-]*", "", other, rules)),
    };
    format!("\\n?{body}{}", s.spell(&tags.end))
}

/// Members in schema order, the optional ones skippable.
fn in_order(declared: Vec<(String, bool)>) -> String {
    declared.into_iter().map(|(p, required)| if required { p } else { format!("(?:{p})?") }).collect()
}

/// Most items an array written as elements may be bounded to (`maxItems`, `minItems`);
/// past it such an array is written as JSON only.
const MAX_ELEMENT_ITEMS: usize = 16;

/// A layout's tags as its grammar spells them.
struct Spelled<'a> {
    tags: &'a ParamTags,
    /// A marker's text as the call's grammar spells it.
    marker: &'a dyn Fn(&str) -> Built,
    /// The key start, spelled.
    key_start: String,
}

impl<'a> Spelled<'a> {
    fn new(tags: &'a ParamTags, marker: &'a dyn Fn(&str) -> Built) -> Self {
        let s = Spelled { tags, marker, key_start: String::new() };
        Spelled { key_start: s.spell(&tags.key_start), ..s }
    }

    fn spell(&self, text: &str) -> String {
        if text.is_empty() {
            String::new()
        } else {
            (self.marker)(text).text
        }
    }

    /// The bare text a value of parameter `key` may be, and its closing tag's regex.
    fn close(&self, key: &str) -> (String, String) {
        let text = self.tags.value_end_for(key);
        let regex = self.spell(&text);
        let bare = match regex.starts_with(SPECIAL_REGEX) {
            true => "(?s:.)*".to_string(),
            false => without_literal(clear_tail(&text)),
        };
        (bare, regex)
    }

    /// The declared properties, each `(regex, required)`.
    fn declared(&self, properties: &[(String, Node, bool)], rules: &mut Rules) -> Vec<(String, bool)> {
        properties
            .iter()
            .filter(|p| p.1 != Node::Never)
            .map(|(name, n, required)| (self.param(&escape(name), name, n, rules), *required))
            .collect()
    }

    /// Parameter `key` (a regex; its closing tag's text `close_key` where that repeats
    /// it) with value `n`.
    fn param(&self, key: &str, close_key: &str, n: &Node, rules: &mut Rules) -> String {
        let (bare, close) = self.close(close_key);
        // Alternatives grouped by the key end they take, in order.
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (kind, v) in self.value(n, rules, &bare) {
            let ke = key_end_regex(self.tags, kind);
            match groups.iter_mut().find(|g| g.0 == ke) {
                Some(g) => g.1.push(v),
                None => groups.push((ke, vec![v])),
            }
        }
        let out: Vec<String> = groups.into_iter().map(|(ke, vs)| format!("{ke}\\n?{}", alt(vs))).collect();
        format!("{}{key}(?:{})\\n?{close}\\n?", self.key_start, out.join("|"))
    }

    /// `(kind, regex)` alternatives of a value: bare text and JSON values (of each
    /// type, where the layout names it) take different key ends when the layout types
    /// its values.
    fn value(&self, n: &Node, rules: &mut Rules, bare: &str) -> Vec<(Kind, String)> {
        match n {
            Node::String { min_len: 0, max_len: None, pattern: None, format: None } => {
                vec![(Kind::Text, bare.to_string())]
            }
            Node::String { .. } | Node::Machine { .. } => vec![(Kind::Text, to_rules(n, &XmlText, rules))],
            Node::Literals(vs) => {
                let mut groups: Vec<(Kind, Vec<Value>)> = Vec::new();
                for v in vs {
                    let kind = if v.is_string() { Kind::Text } else { Kind::Json(literal_type(v)) };
                    match groups.iter_mut().find(|g| g.0 == kind) {
                        Some(g) => g.1.push(v.clone()),
                        None => groups.push((kind, vec![v.clone()])),
                    }
                }
                let spell = |k: Kind| if k == Kind::Text { &XmlText as &dyn Dialect } else { &Json };
                groups.into_iter().map(|(k, vs)| (k, to_rules(&Node::Literals(vs), spell(k), rules))).collect()
            }
            Node::AnyOf(ns) => ns.iter().flat_map(|n| self.value(n, rules, bare)).collect(),
            // A string is bare text here, the other values JSON.
            Node::AnyValue { .. } => {
                vec![(Kind::Text, bare.to_string()), (Kind::Json(ANY_TYPE), to_rules(n, &Json, rules))]
            }
            // JSON's `true`, or the `True` a template's Jinja prints for a boolean it
            // writes with `{{ value }}` or `| string` (Qwen3-Coder, Qwen3.5, MiniCPM5):
            // what a model trained on such a template writes.
            Node::Boolean => vec![(Kind::Json("boolean"), format!("(?:{}|{})", Json.boolean(), Python.boolean()))],
            // JSON's `null`, or the `None` such a template prints for it.
            Node::Null => vec![(Kind::Json("null"), format!("(?:{}|{})", Json.null(), Python.null()))],
            other => {
                let mut out = vec![(Kind::Json(json_type(other)), to_rules(other, &Json, rules))];
                out.extend(self.elements(other, rules).map(|x| (Kind::Text, x)));
                out
            }
        }
    }

    /// An object or array value as more elements, where the closing tag repeats the
    /// key (MiniMax M3's `<filters><city>Oslo</city></filters>`, array items as
    /// `<item>…</item>`): an object's declared properties in order, an array's items
    /// (at most [`MAX_ELEMENT_ITEMS`] where bounded). `None` where the layout or the
    /// value has no such spelling (it is JSON only then).
    fn elements(&self, n: &Node, rules: &mut Rules) -> Option<String> {
        if !self.tags.keyed_end() {
            return None;
        }
        match n {
            Node::Object { properties, non_empty, .. } if !properties.is_empty() => {
                let declared = self.declared(properties, rules);
                Some(if *non_empty { members(&declared, None, "", true, rules) } else { in_order(declared) })
            }
            Node::Array { prefix, items: Some(item), min, max } if prefix.is_empty() => {
                let one = self.param("item", "item", item, rules);
                match max {
                    _ if *min > MAX_ELEMENT_ITEMS => None,
                    None => Some(format!("(?:{one}){{{min},}}")),
                    Some(m) if *m <= MAX_ELEMENT_ITEMS => Some(format!("(?:{one}){{{min},{m}}}")),
                    Some(_) => None,
                }
            }
            _ => None,
        }
    }
}

/// The longest end of `close` whose first character appears nowhere else in it, for
/// [`without_literal`]: text without that end is text without `close` (a sound
/// narrowing where the whole tag repeats its first character, as MiniMax M3's vendor
/// token `]<]minimax[>[` does).
fn clear_tail(close: &str) -> &str {
    let clear = |t: &&str| t.chars().next().is_some_and(|c| !t[c.len_utf8()..].contains(c));
    close.char_indices().map(|(i, _)| &close[i..]).find(clear).unwrap_or(close)
}

/// Tagged parameters at the start of `s`, spelled by `tags` (Qwen3-Coder's
/// `<parameter=KEY>VALUE</parameter>` … `</function>` by default), whitespace
/// between. With an empty `tags.end` the parameters end where no further key starts
/// (before the whitespace there); `then` is the text that follows them there (the
/// call's end marker; `""`: unknown), and `whole` says `s` is all there is (so its end
/// ends them). A value may hold the text of its own closing tag: see [`value_len`].
/// `None` while undecided; `Err(offset)` where the text stops being that;
/// `Ok((length through the end, parameters))`.
///
/// Cost: linear in `s` times the number of key ends (six for a typed layout).
pub fn read(s: &str, tags: &ParamTags, then: &str, whole: bool) -> Option<Result<(usize, Vec<Param>), usize>> {
    let ends = tags.key_ends();
    let (open, end) = (tags.key_start.as_str(), tags.end.as_str());
    let mut i = 0;
    let mut params = Vec::new();
    loop {
        let before_ws = i;
        i += leading_ws(&s[i..]);
        let rest = &s[i..];
        if !end.is_empty() && rest.starts_with(end) {
            return Some(Ok((i + end.len(), params)));
        }
        if !rest.starts_with(open) {
            let undecided = open.starts_with(rest) || (!end.is_empty() && end.starts_with(rest));
            if undecided && !(whole && end.is_empty()) {
                return None;
            }
            return if end.is_empty() { Some(Ok((before_ws, params))) } else { Some(Err(i)) };
        }
        let k0 = i + open.len();
        // A key start then `/` is a closing tag (the call's, where it shares the key
        // start's text: MiniMax M3's `]<]minimax[>[</invoke>`), not a key.
        if end.is_empty() && s[k0..].starts_with('/') {
            return Some(Ok((before_ws, params)));
        }
        // The key runs to the first key end (any spelling).
        let found = ends.iter().filter_map(|(e, text)| s[k0..].find(e.as_str()).map(|at| (at, e.len(), *text)));
        let Some((gt, ke, text)) = found.min() else {
            return (s.len() - k0 > MAX_NAME).then_some(Err(i));
        };
        let key = &s[k0..k0 + gt];
        if key.is_empty() || key.len() > MAX_NAME || key.contains(char::is_whitespace) {
            return Some(Err(i));
        }
        let v0 = k0 + gt + ke;
        let close = tags.value_end_for(key);
        let close_at = value_len(&s[v0..], &close, tags, then, whole)?;
        params.push(Param { key: key.to_string(), raw: s[v0..v0 + close_at].to_string(), text });
        i = v0 + close_at + close.len();
    }
}

/// One tagged parameter as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Its name.
    pub key: String,
    /// Its value's text, between the key end and the value end.
    pub raw: String,
    /// The key end says the value is bare text (a layout that types its values:
    /// DSML's `string="true"`, Kimi K3's `type="string"`).
    pub text: bool,
}

/// Tagged parameters as a JSON object: a value loses one leading and one trailing
/// newline (the layout around it); parameters in `strings` (declared as strings) and
/// values the layout's key end marks as text stay text; where the closing tag repeats
/// the key ([`ParamTags::keyed_end`]), a value of more elements is an object, or an
/// array where every element is an `item` (MiniMax M3's spelling; [`elements_to_json`]);
/// others are JSON when they parse as JSON (numbers, booleans, objects), a boolean or
/// null when they are the `True`, `False` or `None` a template's Jinja prints for one,
/// and text otherwise.
///
/// Cost: linear in the parameters' text.
pub fn params_to_json(params: &[Param], tags: &ParamTags, strings: Option<&HashSet<String>>) -> String {
    let mut map = serde_json::Map::new();
    for Param { key, raw, text } in params {
        let v = without_outer_newlines(raw);
        let value = if *text || strings.is_some_and(|s| s.contains(key)) {
            Value::String(v.to_string())
        } else {
            let nested = tags.keyed_end() && v.trim_start().starts_with(tags.key_start.as_str());
            nested.then(|| elements_to_json(v, tags)).flatten().unwrap_or_else(|| scalar(v))
        };
        map.insert(key.clone(), value);
    }
    Value::Object(map).to_string()
}

/// `v` without one leading and one trailing newline (the layout's, around a value).
fn without_outer_newlines(v: &str) -> &str {
    let v = v.strip_prefix('\n').unwrap_or(v);
    v.strip_suffix('\n').unwrap_or(v)
}

/// Most levels of elements [`elements_to_json`] reads nested (deeper: not elements).
const MAX_ELEMENT_DEPTH: usize = 32;

/// A value's text as JSON: JSON where it parses, the `True`, `False` and `None` Jinja
/// prints, else a string.
fn scalar(v: &str) -> Value {
    serde_json::from_str(v).unwrap_or_else(|_| match v {
        "True" => Value::Bool(true),
        "False" => Value::Bool(false),
        "None" => Value::Null,
        _ => Value::String(v.to_string()),
    })
}

/// Elements in `tags`' spelling whose closing tags repeat their names (`KEY_START
/// name KEY_END value VALUE_END(name)`, whitespace between), as JSON: an array where
/// every name is `item`, else an object; a value that is more elements nests, the
/// others are read as [`params_to_json`] reads a value not declared a string. `None`
/// where `s` is not such elements whole, or nests them more than
/// [`MAX_ELEMENT_DEPTH`] deep (a model's output is read by this recursion).
/// (Example: the unit test `elements_to_json_example`.)
///
/// Cost: linear in `s` times the nesting depth.
pub fn elements_to_json(s: &str, tags: &ParamTags) -> Option<Value> {
    nested_elements(s, tags, MAX_ELEMENT_DEPTH)
}

/// [`elements_to_json`] with at most `levels` levels left.
fn nested_elements(s: &str, tags: &ParamTags, levels: usize) -> Option<Value> {
    let levels = levels.checked_sub(1)?;
    let (open, key_end) = (tags.key_start.as_str(), tags.key_end.as_str());
    let mut items: Vec<(String, Value)> = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let after = rest.strip_prefix(open)?;
        let name = &after[..after.find(key_end)?];
        if name.is_empty() || name.starts_with('/') || name.contains(char::is_whitespace) {
            return None;
        }
        let body = name.len() + key_end.len();
        let (tag, close) = (format!("{open}{name}{key_end}"), tags.value_end_for(name));
        // The matching closing tag: elements of the same name may nest.
        let (mut depth, mut at) = (1, body);
        let end = loop {
            let c = at + after[at..].find(close.as_ref())?;
            match after[at..].find(&tag).map(|o| at + o) {
                Some(o) if o < c => (depth, at) = (depth + 1, o + tag.len()),
                _ if depth == 1 => break c,
                _ => (depth, at) = (depth - 1, c + close.len()),
            }
        };
        let inner = &after[body..end];
        let value = match inner.trim_start().starts_with(open) {
            true => nested_elements(inner, tags, levels)?,
            false => scalar(without_outer_newlines(inner)),
        };
        items.push((name.to_string(), value));
        rest = after[end + close.len()..].trim_start();
    }
    match items.iter().all(|(k, _)| k == "item") {
        _ if items.is_empty() => None,
        true => Some(Value::Array(items.into_iter().map(|(_, v)| v).collect())),
        false => Some(Value::Object(items.into_iter().collect())),
    }
}

/// The length of the value at the start of `s`: up to the first closing tag `close`
/// (the parameter's [`ParamTags::value_end_for`]) after which the parameters can go
/// on (another key, their end, or `then`, the text after them), so a value that holds the closing tag's text (code,
/// markup) is read whole, not cut there. With nothing known to follow the parameters,
/// the first closing tag ends the value. `None` while undecided.
///
/// Cost: linear in `s`.
pub fn value_len(s: &str, close: &str, tags: &ParamTags, then: &str, whole: bool) -> Option<usize> {
    let (open, end) = (tags.key_start.as_str(), tags.end.as_str());
    let first = s.find(close)?;
    let followers: Vec<&str> = [open, end, then].into_iter().filter(|f| !f.is_empty()).collect();
    if end.is_empty() && then.is_empty() {
        return Some(first);
    }
    let mut at = first;
    loop {
        let rest = s[at + close.len()..].trim_start();
        if followers.iter().any(|f| rest.starts_with(f)) {
            return Some(at);
        }
        if followers.iter().any(|f| f.starts_with(rest)) {
            // Not decided by the text so far (an empty rest included).
            return if whole { Some(at) } else { None };
        }
        match s[at + close.len()..].find(close) {
            Some(next) => at += close.len() + next,
            None if whole => return Some(first),
            None => return None,
        }
    }
}

/// Bare text inside an XML-style parameter: quoted by nothing, ended by the closing tag.
#[derive(Debug, Clone, Copy, Default)]
pub struct XmlText;

impl Dialect for XmlText {
    fn quote(&self) -> String {
        String::new()
    }
    fn string_char(&self) -> String {
        // Constrained strings (formats, patterns, lengths) leave `<` out, which keeps
        // them clear of the closing tag.
        "[^<]".into()
    }
    json_keys!();
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) => escape(s),
            other => Json.literal(other),
        }
    }
    fn plain_byte(&self, b: u8) -> bool {
        b != b'<'
    }
    /// Bare text: every character as itself, but `<` (which could open the closing
    /// tag) has no spelling.
    fn string_literal_char(&self, c: char) -> String {
        if c == '<' {
            NEVER.into()
        } else {
            escape(c.encode_utf8(&mut [0; 4]))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn value_len_example() {
        use crate::tools::dialect::tagged::value_len;
        use crate::tools::format::ParamTags;
        let tags = ParamTags::default(); // <parameter=K>V</parameter> … </function>
        let s = "a</parameter> b</parameter>\n</function>";
        let close = tags.value_end_for("city");
        assert_eq!(value_len(s, &close, &tags, "", true), Some(s.find(" b").unwrap() + 2));
        assert_eq!(value_len("a</parameter>", &close, &tags, "", false), None); // what follows decides
    }

    #[test]
    fn elements_to_json_example() {
        use crate::tools::dialect::tagged::elements_to_json;
        use crate::tools::format::ParamTags;
        let tags = ParamTags {
            key_start: "<".into(),
            key_end: ">".into(),
            value_end: "</{key}>".into(),
            ..Default::default()
        };
        let v = elements_to_json("<city>Oslo</city><tags><item>a</item><item><item>1</item></item></tags>", &tags);
        assert_eq!(v, Some(serde_json::json!({"city": "Oslo", "tags": ["a", [1]]})));
        assert_eq!(elements_to_json("<city>Oslo", &tags), None);
        assert_eq!(elements_to_json("<a>1</a> x", &tags), None);
        // One newline around a leaf is the layout's, on both sides or either.
        assert_eq!(elements_to_json("<a>\nx</a><b>\ny\n</b>", &tags), Some(serde_json::json!({"a": "x", "b": "y"})));
        // Nested deeper than the reader goes: not elements.
        let deep = format!("{}1{}", "<a>".repeat(40), "</a>".repeat(40));
        assert_eq!(elements_to_json(&deep, &tags), None);
    }

    /// `minProperties: 1` over optional properties: at least one tagged parameter
    /// before the call's end.
    #[test]
    fn min_properties_needs_one_parameter() {
        use crate::grammar::rules::Rules;
        use crate::grammar::schema::{compile, Mode};
        use crate::grammar::Grammar;
        let filters = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "minProperties": 1});
        let node = compile(&filters, Mode::Strict).unwrap();
        let plain = |t: &str| crate::grammar::part::Built::read(regex_syntax::escape(t));
        let xml = Grammar::from_regex(&super::grammar(&node, &mut Rules::none(), &Default::default(), &plain)).unwrap();
        assert!(xml.matches(b"<parameter=a>1</parameter></function>"));
        assert!(!xml.matches(b"</function>"));
    }
}
