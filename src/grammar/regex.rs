//! Value grammar → regex, through a serialization [`Dialect`].
//!
//! The same [`Node`] becomes compact JSON (`{"city":"Paris"}`) with [`Json`], or Gemma
//! 4's native call syntax (`{city:<|"|>Paris<|"|>}`) with [`Gemma4`]. Whitespace is
//! bounded: at most one space after `:` and `,`, never a loop.

use regex_syntax::escape;
use serde_json::Value;

use super::schema::{Format, Node};

/// Repetition counts above this become unbounded (`*`), to keep automata small.
pub const MAX_REPEAT: usize = 64;

/// How values are spelled.
pub trait Dialect {
    /// Regex for a string's opening and closing quote.
    fn quote(&self) -> String;
    /// Regex for one character inside a string.
    fn string_char(&self) -> String;
    /// Regex for an object key.
    fn key(&self, name: &str) -> String;
    /// Regex for any object key (additional properties).
    fn any_key(&self) -> String;
    /// Regex for a literal JSON value (`enum`, `const`).
    fn literal(&self, v: &Value) -> String;
    /// Regex for the separator between key and value.
    fn colon(&self) -> String {
        ": ?".into()
    }
    /// Regex for the separator between items.
    fn comma(&self) -> String {
        ", ?".into()
    }
    /// Regex for a boolean.
    fn boolean(&self) -> String {
        "(?:true|false)".into()
    }
    /// Regex for null.
    fn null(&self) -> String {
        "null".into()
    }
}

/// RFC 8259 JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

const JSON_CHAR: &str = r#"(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})"#;

impl Dialect for Json {
    fn quote(&self) -> String {
        "\"".into()
    }
    fn string_char(&self) -> String {
        JSON_CHAR.into()
    }
    fn key(&self, name: &str) -> String {
        escape(&serde_json::to_string(name).unwrap_or_default())
    }
    fn any_key(&self) -> String {
        format!("\"{JSON_CHAR}*\"")
    }
    fn literal(&self, v: &Value) -> String {
        escape(&serde_json::to_string(v).unwrap_or_default())
    }
}

/// Gemma 4's native tool-call syntax: bare keys, strings between `<|"|>` special
/// tokens (spelled `0xFF<|"|>`, which no text can produce).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma4;

const GEMMA_QUOTE: &str = r#"(?-u:\xFF)<\|"\|>"#;

impl Dialect for Gemma4 {
    fn quote(&self) -> String {
        GEMMA_QUOTE.into()
    }
    fn string_char(&self) -> String {
        // Any character; a string ends only at the special quote token.
        r"[^\x00]".into()
    }
    fn key(&self, name: &str) -> String {
        escape(name)
    }
    fn any_key(&self) -> String {
        "[A-Za-z_][A-Za-z0-9_]*".into()
    }
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) => format!("{GEMMA_QUOTE}{}{GEMMA_QUOTE}", escape(s)),
            Value::Array(a) => format!(r"\[{}\]", a.iter().map(|x| self.literal(x)).collect::<Vec<_>>().join(",")),
            Value::Object(o) => format!(
                r"\{{{}\}}",
                o.iter().map(|(k, x)| format!("{}:{}", escape(k), self.literal(x))).collect::<Vec<_>>().join(",")
            ),
            other => escape(&other.to_string()),
        }
    }
    fn colon(&self) -> String {
        ":".into()
    }
    fn comma(&self) -> String {
        ",".into()
    }
}

/// The regex for `node` in dialect `d` (unanchored text; callers anchor).
pub fn to_regex(node: &Node, d: &dyn Dialect) -> String {
    match node {
        Node::Never => "[^\\x00-\\x{10FFFF}]".into(),
        Node::Null => d.null(),
        Node::Boolean => d.boolean(),
        Node::Integer { min, max } => int_range(*min, *max),
        // The exponent stops at ±292: with at most 16 integer digits every number the
        // grammar allows is a finite f64 (`6.5e555` is RFC 8259 JSON, but no JSON
        // parser that reads into doubles accepts it).
        Node::Number => {
            r"-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?(?:[0-9]{1,2}|1[0-9]{2}|2[0-8][0-9]|29[0-2]))?"
                .into()
        }
        Node::String { min_len, max_len, pattern, format } => {
            let q = d.quote();
            let body = match (format, pattern) {
                (Some(f), _) => format_regex(*f),
                (None, Some(p)) => pattern_body(p, &d.string_char()),
                (None, None) => repeat(&d.string_char(), *min_len, *max_len),
            };
            format!("{q}{body}{q}")
        }
        Node::Literals(vs) => alt(vs.iter().map(|v| d.literal(v)).collect()),
        Node::AnyOf(ns) => alt(ns.iter().map(|n| to_regex(n, d)).collect()),
        Node::Array { prefix, items, min, max } => {
            let comma = d.comma();
            let mut parts: Vec<String> = prefix.iter().map(|n| to_regex(n, d)).collect();
            let head = parts.join(&comma);
            let rest_min = min.saturating_sub(parts.len());
            let rest_max = max.map(|m| m.saturating_sub(parts.len()));
            let tail = match items {
                Some(item) if rest_max != Some(0) => {
                    let item = to_regex(item, d);
                    Some((item, rest_min, rest_max))
                }
                _ => None,
            };
            let inner = match (head.is_empty(), tail) {
                (true, None) => String::new(),
                (false, None) => head,
                (true, Some((item, lo, hi))) => list(&item, &comma, lo, hi),
                (false, Some((item, lo, hi))) => {
                    let more = if lo == 0 {
                        format!("(?:{comma}{})?", list(&item, &comma, 1, hi))
                    } else {
                        format!("{comma}{}", list(&item, &comma, lo, hi))
                    };
                    parts.clear();
                    format!("{head}{more}")
                }
            };
            format!(r"\[{inner}\]")
        }
        Node::Object { properties, additional } => {
            let colon = d.colon();
            let comma = d.comma();
            let elems: Vec<(String, bool)> = properties
                .iter()
                .map(|(name, n, req)| (format!("{}{colon}{}", d.key(name), to_regex(n, d)), *req))
                .collect();
            let extra = additional.as_ref().map(|n| format!("{}{colon}{}", d.any_key(), to_regex(n, d)));
            format!(r"\{{{}\}}", props_first(&elems, 0, extra.as_deref(), &comma))
        }
    }
}

/// Nothing emitted yet, at element `i`.
fn props_first(e: &[(String, bool)], i: usize, extra: Option<&str>, comma: &str) -> String {
    if i == e.len() {
        return match extra {
            Some(x) => format!("(?:{x}(?:{comma}{x})*)?"),
            None => String::new(),
        };
    }
    let (re, required) = &e[i];
    let then = props_rest(e, i + 1, extra, comma);
    if *required {
        format!("{re}{then}")
    } else {
        format!("(?:{re}{then}|{})", props_first(e, i + 1, extra, comma))
    }
}

/// Something emitted, at element `i`.
fn props_rest(e: &[(String, bool)], i: usize, extra: Option<&str>, comma: &str) -> String {
    let mut out = String::new();
    for (re, required) in &e[i..] {
        if *required {
            out.push_str(&format!("{comma}{re}"));
        } else {
            out.push_str(&format!("(?:{comma}{re})?"));
        }
    }
    if let Some(x) = extra {
        out.push_str(&format!("(?:{comma}{x})*"));
    }
    out
}

fn list(item: &str, comma: &str, lo: usize, hi: Option<usize>) -> String {
    let hi = hi.filter(|&h| h <= MAX_REPEAT);
    match (lo, hi) {
        (0, Some(0)) => String::new(),
        (0, Some(h)) => format!("(?:{item}(?:{comma}{item}){{0,{}}})?", h - 1),
        (0, None) => format!("(?:{item}(?:{comma}{item})*)?"),
        (l, Some(h)) => format!("{item}(?:{comma}{item}){{{},{}}}", l.min(MAX_REPEAT) - 1, h.max(l) - 1),
        (l, None) => format!("{item}(?:{comma}{item}){{{},}}", l.min(MAX_REPEAT) - 1),
    }
}

fn repeat(unit: &str, min: usize, max: Option<usize>) -> String {
    let min = min.min(MAX_REPEAT);
    match max.filter(|&m| m <= MAX_REPEAT) {
        Some(m) => format!("{unit}{{{min},{}}}", m.max(min)),
        None if min == 0 => format!("{unit}*"),
        None => format!("{unit}{{{min},}}"),
    }
}

fn alt(parts: Vec<String>) -> String {
    if parts.is_empty() {
        return to_regex(&Node::Never, &Json);
    }
    format!("(?:{})", parts.join("|"))
}

fn pattern_body(p: &str, any_char: &str) -> String {
    let anchored_start = p.starts_with('^');
    let anchored_end = p.ends_with('$') && !p.ends_with("\\$");
    let core = p.trim_start_matches('^');
    let core = if anchored_end { &core[..core.len() - 1] } else { core };
    format!(
        "{}(?:{core}){}",
        if anchored_start { String::new() } else { format!("{any_char}*") },
        if anchored_end { String::new() } else { format!("{any_char}*") }
    )
}

fn format_regex(f: Format) -> String {
    const DATE: &str = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])";
    const TIME: &str =
        r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    match f {
        Format::Date => DATE.into(),
        Format::Time => TIME.into(),
        Format::DateTime => format!("{DATE}T{TIME}"),
        Format::Uuid => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".into(),
        Format::Email => r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}".into(),
        Format::Uri => r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1F\x22\x5C]+".into(),
        Format::Ipv4 => format!(r"{OCTET}\.{OCTET}\.{OCTET}\.{OCTET}"),
    }
}

/// Regex for the decimal integers in `[min, max]` (either side open).
///
/// ```
/// use toolgate::grammar::regex::int_range;
/// let re = regex_automata::meta::Regex::new(&format!("^(?:{})$", int_range(Some(-5), Some(120)))).unwrap();
/// for i in -5..=120 { assert!(re.is_match(&i.to_string())); }
/// for s in ["-6", "121", "007", "-0", "1000"] { assert!(!re.is_match(s)); }
/// ```
pub fn int_range(min: Option<i64>, max: Option<i64>) -> String {
    const ANY_POS: &str = "(?:0|[1-9][0-9]{0,15})";
    const ANY_NEG: &str = "-[1-9][0-9]{0,15}";
    let cap = 10i64.pow(16) - 1;
    let mut alts = Vec::new();
    match (min, max) {
        (None, None) => return "(?:-?[1-9][0-9]{0,15}|0)".to_string(),
        (Some(lo), None) => {
            if lo <= 0 {
                alts.push(ANY_POS.to_string());
                if lo < 0 {
                    alts.push(format!("-(?:{})", nonneg_range(1, -lo)));
                }
            } else {
                alts.push(nonneg_range(lo, cap));
            }
        }
        (None, Some(hi)) => {
            if hi >= 0 {
                alts.push(ANY_NEG.to_string());
                alts.push(nonneg_range(0, hi));
            } else {
                alts.push(format!("-(?:{})", nonneg_range(-hi, cap)));
            }
        }
        (Some(lo), Some(hi)) => {
            if hi >= 0 {
                alts.push(nonneg_range(lo.max(0), hi));
            }
            if lo < 0 {
                let a = if hi < 0 { -hi } else { 1 };
                alts.push(format!("-(?:{})", nonneg_range(a, -lo)));
            }
        }
    }
    format!("(?:{})", alts.join("|"))
}

/// Regex for integers in `[lo, hi]`, `0 <= lo <= hi`, without leading zeros.
fn nonneg_range(lo: i64, hi: i64) -> String {
    let mut parts = Vec::new();
    let (lo_len, hi_len) = (lo.to_string().len(), hi.to_string().len());
    for len in lo_len..=hi_len {
        let floor = if len == 1 { 0 } else { 10i64.pow(len as u32 - 1) };
        let ceil = 10i64.pow(len as u32) - 1;
        let (a, b) = (lo.max(floor), hi.min(ceil));
        if a <= b {
            parts.push(same_len(&a.to_string(), &b.to_string()));
        }
    }
    parts.join("|")
}

/// Regex for the numbers between two digit strings of equal length.
fn same_len(a: &str, b: &str) -> String {
    let (a0, b0) = (a.as_bytes()[0] - b'0', b.as_bytes()[0] - b'0');
    let n = a.len() - 1;
    if n == 0 {
        return if a0 == b0 { a.to_string() } else { format!("[{a0}-{b0}]") };
    }
    let (ar, br) = (&a[1..], &b[1..]);
    if a0 == b0 {
        return format!("{a0}(?:{})", same_len(ar, br));
    }
    let (zeros, nines) = ("0".repeat(n), "9".repeat(n));
    if ar == zeros && br == nines {
        return format!("[{a0}-{b0}][0-9]{{{n}}}");
    }
    let mut parts = vec![format!("{a0}(?:{})", same_len(ar, &nines))];
    if a0 + 1 < b0 {
        parts.push(format!("[{}-{}][0-9]{{{n}}}", a0 + 1, b0 - 1));
    }
    parts.push(format!("{b0}(?:{})", same_len(&zeros, br)));
    parts.join("|")
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
    fn key(&self, name: &str) -> String {
        Json.key(name)
    }
    fn any_key(&self) -> String {
        Json.any_key()
    }
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) => escape(s),
            other => Json.literal(other),
        }
    }
}

/// Regex of any text that does not contain `literal`, for a literal whose first
/// character appears nowhere else in it (`</parameter>`), built from the automaton
/// that tracks how much of the literal was just seen.
///
/// ```
/// use toolgate::grammar::{regex::without_literal, Grammar};
/// let g = Grammar::from_regex(&without_literal("</p>"))?;
/// assert!(g.matches(b"a < b </ c </q> <</p"));
/// assert!(!g.matches(b"x</p>y") && !g.matches(b"<</p>"));
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: a regex of size quadratic in the literal's length.
pub fn without_literal(literal: &str) -> String {
    let l: Vec<char> = literal.chars().collect();
    let first = escape(&l[0].to_string());
    let class = |c: char| format!("[^{}{}]", escape(&c.to_string()), escape(&l[0].to_string()));
    // Having seen l[..i], an optional further advance that stays short of the whole.
    fn advance(l: &[char], i: usize) -> String {
        if i + 1 >= l.len() {
            return String::new();
        }
        format!("(?:{}{})?", escape(&l[i].to_string()), advance(l, i + 1))
    }
    // Having seen l[..i], advance and then break the match with another character.
    fn breaks(l: &[char], i: usize, class: &dyn Fn(char) -> String) -> String {
        if i + 1 >= l.len() {
            return class(l[i]);
        }
        format!("(?:{}|{}{})", class(l[i]), escape(&l[i].to_string()), breaks(l, i + 1, class))
    }
    let back_to_first = format!("(?:{}{first})*", advance(&l, 1));
    let other = format!("[^{first}]");
    format!("(?:{other}|{first}{back_to_first}{})*(?:{first}{back_to_first}{})?", breaks(&l, 1, &class), advance(&l, 1))
}

/// Qwen3-Coder's XML-style parameters for an arguments schema: each declared
/// property in schema order (optional ones skippable) as
/// `<parameter=NAME>\n?VALUE\n?</parameter>\n?`, extra properties if the schema
/// allows them, then `</function>`. String values are bare text without
/// `</parameter>`; other values are JSON.
pub fn xml_parameters(node: &Node) -> String {
    const RAW_CLOSE: &str = "</parameter>";
    fn value(n: &Node) -> String {
        match n {
            Node::String { min_len: 0, max_len: None, pattern: None, format: None } => without_literal(RAW_CLOSE),
            Node::String { .. } | Node::Literals(_) => to_regex(n, &XmlText),
            Node::AnyOf(ns) => alt(ns.iter().map(value).collect()),
            other => to_regex(other, &Json),
        }
    }
    let param = |key: &str, v: &str| format!("<parameter={key}>\\n?{v}\\n?</parameter>\\n?");
    let body = match node {
        Node::Object { properties, additional } => {
            let mut out = String::new();
            for (name, n, required) in properties {
                let p = param(&escape(name), &value(n));
                out.push_str(&if *required { p } else { format!("(?:{p})?") });
            }
            if let Some(extra) = additional {
                out.push_str(&format!("(?:{})*", param("[A-Za-z_][A-Za-z0-9_.-]*", &value(extra))));
            }
            out
        }
        other => format!("(?:{})*", param("[A-Za-z_][A-Za-z0-9_.-]*", &value(other))),
    };
    format!("\\n?{body}</function>")
}

/// Python literals, as pythonic tool calls write values: strings in double quotes with
/// JSON's escapes (valid Python), numbers as in JSON, `True`/`False`/`None`, lists
/// `[…]`, dicts `{"key": …}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Python;

/// Strings and keys are JSON's (valid Python); literals and constants differ.
impl Dialect for Python {
    fn quote(&self) -> String {
        Json.quote()
    }
    fn string_char(&self) -> String {
        Json.string_char()
    }
    fn key(&self, name: &str) -> String {
        Json.key(name)
    }
    fn any_key(&self) -> String {
        Json.any_key()
    }
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

/// A JSON value written as a Python literal (`true` → `True`, `null` → `None`).
///
/// ```
/// use toolgate::grammar::regex::python_repr;
/// assert_eq!(python_repr(&serde_json::json!({"a": [true, null, "x"]})), r#"{"a": [True, None, "x"]}"#);
/// ```
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

/// Keyword arguments of a pythonic call for an arguments schema: `(name=VALUE, …)` with
/// the declared properties in schema order (optional ones skippable), extra ones if
/// the schema allows them, values as [`Python`] literals.
pub fn python_kwargs(node: &Node) -> String {
    let comma = ", ?";
    match node {
        Node::Object { properties, additional } => {
            let elems: Vec<(String, bool)> = properties
                .iter()
                .map(|(name, n, req)| (format!("{}={}", escape(name), to_regex(n, &Python)), *req))
                .collect();
            let extra = additional.as_ref().map(|n| format!("[A-Za-z_][A-Za-z0-9_]*={}", to_regex(n, &Python)));
            format!(r"\({}\)", props_first(&elems, 0, extra.as_deref(), comma))
        }
        other => format!(
            r"\((?:[A-Za-z_][A-Za-z0-9_]*={v}(?:{comma}[A-Za-z_][A-Za-z0-9_]*={v})*)?\)",
            v = to_regex(other, &Python)
        ),
    }
}
