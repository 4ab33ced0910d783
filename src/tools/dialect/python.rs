//! Python keyword arguments (`(city="Oslo", days=3, ok=True)`), as pythonic calls
//! write them (LFM2, Llama 3.2's pythonic layout), and the spellings unlike Python
//! some templates print them in ([`PythonQuirks`]: `city=Paris`, `days="3"`).

use std::collections::HashSet;

use regex_syntax::escape;
use serde_json::Value;

use super::literals::{LiteralReader, Literals};
use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::dialect::json_keys;
use crate::grammar::dialect::json_strings_and_keys;
use crate::grammar::ir::{MachineKind, Node};
use crate::grammar::part::{Built, NEVER};
use crate::grammar::regex::{key_except, members, to_rules, Dialect, Json};
use crate::grammar::rules::Rules;
use crate::tools::format::{PythonQuirks, ToolFormat};

/// Python keyword arguments ([`crate::tools::format::ArgsDialect::Python`]), and
/// the [`Dialect`] of Python literals as pythonic calls write values: strings in
/// double quotes with JSON's escapes (valid Python), numbers as in JSON,
/// `True`/`False`/`None`, lists `[…]`, dicts `{"key": …}` ([`PythonSingle`] for
/// `repr`'s single quotes).
#[derive(Debug, Clone, Copy, Default)]
pub struct Python;

impl ArgsSyntax for Python {
    fn grammar(&self, node: &Node, f: &ToolFormat, rules: &mut Rules, _: &dyn Fn(&str) -> Built) -> Built {
        let values: &dyn Dialect = if f.single_quotes { &PythonSingle } else { self };
        Built::read(grammar(node, values, f.python_quirks, rules))
    }
    fn opener(&self) -> Option<u8> {
        Some(b'(')
    }
    fn extent(&self, text: &str, _: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Python, "")
    }
    fn to_json(&self, text: &str, f: &ToolFormat, strings: Option<&HashSet<String>>) -> Option<String> {
        to_json(text, f.python_quirks, strings)
    }
}

/// Keyword arguments of a pythonic call for an arguments schema: `(name=VALUE, …)` with
/// the declared properties in schema order (optional ones skippable), extra ones if
/// the schema allows them, values as Python literals spelled by `values`
/// ([`Python`] or [`PythonSingle`]), and beside them the spellings `quirks` admits for
/// a declared parameter's value (a bare string, a quoted number; no comma between
/// arguments). Large parts go into `rules` as [`to_rules`] puts them ([`Rules::none`]
/// for one plain regex).
///
/// Cost: linear in the schema's size, as [`to_rules`].
pub fn grammar(node: &Node, values: &dyn Dialect, quirks: PythonQuirks, rules: &mut Rules) -> String {
    let comma = if quirks.no_commas { "(?:, ?)?" } else { ", ?" };
    let py = values;
    match node {
        // (`patternProperties` names are not generated as keyword arguments.)
        Node::Object { properties, additional, non_empty, extra_keys, .. } => {
            let elems: Vec<(String, bool)> = properties
                .iter()
                .filter(|p| p.1 != Node::Never)
                .map(|(name, n, req)| (format!("{}={}", escape(name), argument(n, py, quirks, rules)), *req))
                .collect();
            let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
            let key = key_except("[A-Za-z_]", "[A-Za-z0-9_]", &names);
            // (Nor extras that must avoid a pattern.)
            let additional = additional.as_ref().filter(|_| extra_keys.is_none());
            let extra = additional.map(|n| format!("{key}={}", to_rules(n, py, rules)));
            format!(r"\({}\)", members(&elems, extra.as_deref(), comma, *non_empty, rules))
        }
        other => {
            let v = to_rules(other, py, rules);
            let v = rules.share(v);
            format!(r"\((?:[A-Za-z_][A-Za-z0-9_]*={v}(?:{comma}[A-Za-z_][A-Za-z0-9_]*={v})*)?\)")
        }
    }
}

/// A declared parameter's value: a Python literal, or as `quirks` also spell it.
fn argument(n: &Node, py: &dyn Dialect, quirks: PythonQuirks, rules: &mut Rules) -> String {
    let literal = to_rules(n, py, rules);
    let strings = string_node;
    let scalar = |n: &Node| match n {
        Node::Integer { .. } | Node::Number { .. } | Node::Boolean | Node::Null => true,
        Node::Machine { kind, .. } => *kind != MachineKind::String,
        Node::Literals(vs) => vs.iter().all(|v| !(v.is_string() || v.is_array() || v.is_object())),
        _ => false,
    };
    if quirks.bare_strings && strings(n) {
        format!("(?:{literal}|{})", to_rules(n, &Bare, rules))
    } else if quirks.quoted_scalars && scalar(n) {
        let (literal, q) = (rules.share(literal), py.quote());
        format!("(?:{literal}|{q}{literal}{q})")
    } else {
        literal
    }
}

/// Whether every value `n` admits is a string.
pub(super) fn string_node(n: &Node) -> bool {
    match n {
        Node::String { .. } | Node::Machine { kind: MachineKind::String, .. } => true,
        Node::Literals(vs) => vs.iter().all(Value::is_string),
        _ => false,
    }
}

/// A string as a template's `{{ value }}` prints it between `=` and the next
/// argument ([`PythonQuirks::bare_strings`]): no quotes and no escapes, so it holds
/// none of `,()[]{}"'\` nor control characters (a value with one is written quoted).
#[derive(Debug, Clone, Copy, Default)]
struct Bare;

/// Whether `c` may stand in a bare string.
fn bare_char(c: char) -> bool {
    c >= ' ' && !matches!(c, ',' | '(' | ')' | '[' | ']' | '{' | '}' | '"' | '\'' | '\\')
}

impl Dialect for Bare {
    fn quote(&self) -> String {
        String::new()
    }
    fn string_char(&self) -> String {
        r#"[^,()\[\]{}"'\\\x00-\x1F]"#.into()
    }
    json_keys!();
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) if s.chars().all(bare_char) => escape(s),
            Value::String(_) => NEVER.into(),
            other => Python.literal(other),
        }
    }
    fn plain_byte(&self, b: u8) -> bool {
        b >= 0x80 || bare_char(b as char)
    }
    fn string_literal_char(&self, c: char) -> String {
        if bare_char(c) {
            escape(c.encode_utf8(&mut [0; 4]))
        } else {
            NEVER.into()
        }
    }
}

/// Python keyword arguments (`(city="Paris", n=2, ok=True, tags=['a'])`) as a compact
/// JSON object, or `None` if `s` is not that; also the spellings `quirks` admits: a
/// bare string up to the next `,` or `)`, a quoted number, boolean or null, no comma
/// between arguments. `strings` names the parameters declared as strings: a bare
/// value of one is a string however it reads (`zip=75001`), a quoted value of another
/// parameter is the literal it holds (`days="3"` → `3`). Without `strings`, a bare
/// value is the literal it reads as, else a string, and quoted values stay strings.
///
/// Cost: linear in `s`; nesting is bounded (128 levels).
pub fn to_json(s: &str, quirks: PythonQuirks, strings: Option<&HashSet<String>>) -> Option<String> {
    let mut r = LiteralReader::new(s, Literals::Python);
    let mut map = serde_json::Map::new();
    if !r.eat("(") {
        return None;
    }
    if !r.eat(")") {
        loop {
            r.ws();
            let rest = &r.s[r.i..];
            let n = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if n == 0 {
                return None;
            }
            let key = rest[..n].to_string();
            r.i += n;
            if !r.eat("=") {
                return None;
            }
            let string = strings.map(|s| s.contains(&key));
            map.insert(key, read_argument(&mut r, quirks, string)?);
            if r.eat(")") {
                break;
            }
            if !r.eat(",") && !quirks.no_commas {
                return None;
            }
        }
    }
    r.ws();
    (r.i == s.len()).then(|| serde_json::Value::Object(map).to_string())
}

/// The value at `r`'s cursor, as `quirks` admit it; `string`: whether the parameter
/// is declared a string (`None`: not known).
fn read_argument(r: &mut LiteralReader, quirks: PythonQuirks, string: Option<bool>) -> Option<Value> {
    r.ws();
    let rest = &r.s[r.i..];
    if quirks.bare_strings && !rest.starts_with(['"', '\'', '[', '{']) {
        let n = rest.find([',', ')']).unwrap_or(rest.len());
        let text = rest[..n].trim_end();
        r.i += n;
        let literal = (string != Some(true)).then(|| whole_literal(text)).flatten();
        return Some(literal.unwrap_or_else(|| Value::String(text.to_string())));
    }
    let v = r.value()?;
    match v {
        Value::String(s) if quirks.quoted_scalars && string == Some(false) => Some(
            whole_literal(&s).filter(|x| !(x.is_string() || x.is_array() || x.is_object())).unwrap_or(Value::String(s)),
        ),
        v => Some(v),
    }
}

/// `text` as one Python literal, or `None` if it is not exactly one.
pub(super) fn whole_literal(text: &str) -> Option<Value> {
    let mut r = LiteralReader::new(text, Literals::Python);
    let v = r.value()?;
    r.ws();
    (r.i == text.len()).then_some(v)
}

/// The value spelling of [`Python`]: strings and keys are JSON's (valid Python);
/// literals and constants differ.
impl Dialect for Python {
    json_strings_and_keys!();
    fn literal(&self, v: &Value) -> String {
        escape(&python_repr(v))
    }
    fn boolean(&self) -> String {
        "(?:True|False)".into()
    }
    fn null(&self) -> String {
        "None".into()
    }
}

/// Python literals with strings in single quotes, as Python's `repr` writes them
/// (LFM2.5's pythonic calls: `(city='Oslo', tags=['a'])`): the escapes `\\`, `\'`,
/// `\n`, `\r`, `\t` and `\uXXXX`, dict keys in single quotes, numbers as in JSON,
/// `True`/`False`/`None`. A string that holds `'` may also be in double quotes, as
/// `repr` writes it (`"it's"`), and a literal (`enum`, `const`) is exactly its `repr`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PythonSingle;

const SINGLE_CHAR: &str = r"(?:[^'\\\x00-\x1F]|\\['\\nrt]|\\u[0-9a-fA-F]{4})";

/// A string in double quotes that holds a `'` (how `repr` writes one), with
/// [`SINGLE_CHAR`]'s escapes but `\\"` none (`repr` picks these quotes only for a
/// string without `"`).
const DOUBLE_WITH_APOSTROPHE: &str =
    r#""(?:[^"'\\\x00-\x1F]|\\[\\nrt]|\\u[0-9a-fA-F]{4})*'(?:[^"\\\x00-\x1F]|\\[\\nrt]|\\u[0-9a-fA-F]{4})*""#;

/// One character that stands in a single-quoted string as itself.
const SINGLE_PLAIN: &str = r"[^'\\\x00-\x1F]";

impl Dialect for PythonSingle {
    fn quote(&self) -> String {
        "'".into()
    }
    fn string_char(&self) -> String {
        SINGLE_CHAR.into()
    }
    fn key(&self, name: &str) -> String {
        escape(&repr_string(name))
    }
    /// Extra keys are written with plain characters only.
    fn any_key(&self, except: &[&str]) -> String {
        let names: Vec<&str> = except.iter().copied().filter(|n| n.chars().all(|c| self.plain_char(c))).collect();
        format!("'{}'", key_except(SINGLE_PLAIN, SINGLE_PLAIN, &names))
    }
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::Number(_) => Json.literal(v),
            Value::Array(a) => format!(r"\[{}\]", a.iter().map(|x| self.literal(x)).collect::<Vec<_>>().join(", ")),
            Value::Object(o) => format!(
                r"\{{{}\}}",
                o.iter().map(|(k, x)| format!("{}: {}", self.key(k), self.literal(x))).collect::<Vec<_>>().join(", ")
            ),
            other => escape(&python_repr_single(other)),
        }
    }
    fn string_literal_char(&self, c: char) -> String {
        match c {
            '\'' => r"\\'".into(),
            '\\' => r"\\\\".into(),
            '\n' => r"\\n".into(),
            '\r' => r"\\r".into(),
            '\t' => r"\\t".into(),
            c if c < ' ' => format!(r"\\u00{:02x}", c as u32),
            c => escape(c.encode_utf8(&mut [0; 4])),
        }
    }
    fn plain_byte(&self, b: u8) -> bool {
        !(b < 0x20 || b == b'\'' || b == b'\\')
    }
    fn boolean(&self) -> String {
        "(?:True|False)".into()
    }
    fn null(&self) -> String {
        "None".into()
    }
    fn other_string(&self) -> Option<String> {
        Some(DOUBLE_WITH_APOSTROPHE.into())
    }
}

impl PythonSingle {
    fn plain_char(&self, c: char) -> bool {
        c >= ' ' && c != '\'' && c != '\\'
    }
}

/// `s` as Python's `repr` writes it: in single quotes, or in double quotes where it
/// holds `'` and no `"`.
fn repr_string(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            c if c == quote => out.push_str(&format!("\\{c}")),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A JSON value as Python's `repr` writes it, strings in single quotes (double where
/// one holds `'` and no `"`): `{"a": [true, "x"]}` → `{'a': [True, 'x']}`.
pub fn python_repr_single(v: &Value) -> String {
    match v {
        Value::String(s) => repr_string(s),
        Value::Array(a) => format!("[{}]", a.iter().map(python_repr_single).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, x)| format!("{}: {}", repr_string(k), python_repr_single(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => python_repr(other),
    }
}

/// A JSON value written as a Python literal (`true` → `True`, `null` → `None`).
pub fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Array(a) => format!("[{}]", a.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, x)| format!("{}: {}", Value::String(k.clone()), python_repr(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn grammar_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::{rules::Rules, schema, Grammar};
        let node = schema::compile(
            &serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            schema::Mode::Strict,
        )?;
        use crate::tools::dialect::python::{grammar, Python, PythonSingle};
        use crate::tools::format::PythonQuirks;
        let none = PythonQuirks::default();
        let g = Grammar::from_regex(&grammar(&node, &Python, none, &mut Rules::none()))?;
        assert!(g.matches(br#"(city="Oslo")"#) && g.matches(b"()") && !g.matches(b"(town=1)"));
        assert!(!g.matches(b"(city=Oslo)"));
        let bare = PythonQuirks { bare_strings: true, ..none };
        let g = Grammar::from_regex(&grammar(&node, &Python, bare, &mut Rules::none()))?;
        assert!(
            g.matches(b"(city=Oslo)") && g.matches(br#"(city="Oslo, Norway")"#) && !g.matches(b"(city=Oslo, Norway)")
        );
        let g = Grammar::from_regex(&grammar(&node, &PythonSingle, none, &mut Rules::none()))?;
        assert!(g.matches(br"(city='Oslo')") && g.matches(br"(city='it\'s')") && !g.matches(br#"(city="Oslo")"#));
        Ok(())
    }

    #[test]
    fn to_json_example() {
        use crate::tools::dialect::python::to_json;
        use crate::tools::format::PythonQuirks;
        use std::collections::HashSet;
        let none = PythonQuirks::default();
        assert_eq!(
            to_json(r#"(city="Paris", n=-2.5, ok=True, x=None, t=['a', {"k": False}])"#, none, None).as_deref(),
            Some(r#"{"city":"Paris","n":-2.5,"ok":true,"x":null,"t":["a",{"k":false}]}"#)
        );
        assert_eq!(to_json("(city=Paris)", none, None), None);
        let q = PythonQuirks { bare_strings: true, quoted_scalars: true, no_commas: true };
        let strings: HashSet<String> = ["city".to_string(), "zip".to_string()].into();
        assert_eq!(
            to_json(r#"(city=New York, zip=10001, days="3"ok="True" n="x")"#, q, Some(&strings)).as_deref(),
            Some(r#"{"city":"New York","zip":"10001","days":3,"ok":true,"n":"x"}"#)
        );
        // Without the declared types, a bare value is the literal it reads as.
        assert_eq!(to_json("(city=Paris, n=2)", q, None).as_deref(), Some(r#"{"city":"Paris","n":2}"#));
        // Malformed text reads as nothing, whatever the quirks, and never panics.
        for text in ["(", "(city=", "(city=Zürich", "(=1)", "(city=\"é, n=\u{1F600})", "(a=1 b)", "(city=)x"] {
            for q in PythonQuirks::all() {
                let _ = to_json(text, q, Some(&strings));
            }
            assert_eq!(to_json(text, none, Some(&strings)), None, "{text}");
        }
        assert_eq!(to_json("(city=)", q, Some(&strings)).as_deref(), Some(r#"{"city":""}"#));
    }

    /// A quote inside a bare word (`name=O'Brien`, as a template that prints strings
    /// bare shows them) is not a string's start: the arguments end at their `)`
    /// however the text arrives, and read back with the quote in the string.
    #[test]
    fn a_quote_inside_a_bare_word_is_not_a_string() {
        use crate::tools::dialect::{ArgsSyntax, Extent, ValueScan};
        use crate::tools::format::{for_family, PythonQuirks};
        let mut f = for_family("hermes").unwrap().unwrap();
        f.python_quirks = PythonQuirks { bare_strings: true, ..PythonQuirks::default() };
        let text = r#"(name=O'Brien, note=5" tall, cafe=Café's, n=2) then text"#;
        let args = &text[..text.find(" then").unwrap()];
        for split in (0..=text.len()).filter(|&at| text.is_char_boundary(at)) {
            let mut scan = ValueScan::default();
            let mut end = None;
            for seen in [split, text.len()] {
                if let Extent::End(len) = super::Python.extent(&text[..seen], &f, &mut scan) {
                    end = Some(len);
                    break;
                }
            }
            assert_eq!(end, Some(args.len()), "split at {split}");
        }
        let strings = ["name".to_string(), "note".to_string(), "cafe".to_string()].into();
        assert_eq!(
            super::to_json(args, f.python_quirks, Some(&strings)).as_deref(),
            Some(r#"{"name":"O'Brien","note":"5\" tall","cafe":"Café's","n":2}"#)
        );
        // A string still opens where a value starts, quotes and brackets inside it kept.
        let quoted = r#"(name='a), b', n=2)"#;
        let mut scan = ValueScan::default();
        assert!(matches!(super::Python.extent(quoted, &f, &mut scan), Extent::End(n) if n == quoted.len()));
    }

    #[test]
    fn python_repr_single_example() {
        use crate::tools::dialect::python::python_repr_single;
        assert_eq!(
            python_repr_single(&serde_json::json!({"a": [true, null, "it's"], "b": "say \"it's\""})),
            r#"{'a': [True, None, "it's"], 'b': 'say "it\'s"'}"#
        );
    }

    #[test]
    fn python_repr_example() {
        use crate::tools::dialect::python::python_repr;
        assert_eq!(python_repr(&serde_json::json!({"a": [true, null, "x"]})), r#"{"a": [True, None, "x"]}"#);
    }
}
