//! Python keyword arguments (`(city="Oslo", days=3, ok=True)`), as pythonic calls
//! write them (LFM2, Llama 3.2's pythonic layout).

use std::collections::HashSet;

use regex_syntax::escape;

use super::literals::{LiteralReader, Literals};
use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::regex::{key_except, members, to_rules, Dialect, Python as PythonValues, PythonSingle};
use crate::grammar::rules::Rules;
use crate::tools::format::ToolFormat;

/// Python keyword arguments ([`crate::tools::format::ArgsDialect::Python`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Python;

impl ArgsSyntax for Python {
    fn grammar(&self, node: &Node, f: &ToolFormat, rules: &mut Rules) -> Built {
        let values: &dyn Dialect = if f.single_quotes { &PythonSingle } else { &PythonValues };
        Built::read(grammar(node, values, rules))
    }
    fn opener(&self) -> Option<u8> {
        Some(b'(')
    }
    fn extent(&self, text: &str, _: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Python)
    }
    fn to_json(&self, text: &str, _: &ToolFormat, _: Option<&HashSet<String>>) -> Option<String> {
        to_json(text)
    }
}

/// Keyword arguments of a pythonic call for an arguments schema: `(name=VALUE, …)` with
/// the declared properties in schema order (optional ones skippable), extra ones if
/// the schema allows them, values as Python literals spelled by `values`
/// ([`crate::grammar::regex::Python`] or [`PythonSingle`]). Large parts go into
/// `rules` as [`to_rules`] puts them ([`Rules::none`] for one plain regex).
///
/// ```
/// use toolgate::grammar::{rules::Rules, schema, Grammar};
/// let node = schema::compile(&serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}), schema::Mode::Strict)?;
/// use toolgate::grammar::regex::{Python, PythonSingle};
/// use toolgate::tools::dialect::python::grammar;
/// let g = Grammar::from_regex(&grammar(&node, &Python, &mut Rules::none()))?;
/// assert!(g.matches(br#"(city="Oslo")"#) && g.matches(b"()") && !g.matches(b"(town=1)"));
/// let g = Grammar::from_regex(&grammar(&node, &PythonSingle, &mut Rules::none()))?;
/// assert!(g.matches(br"(city='Oslo')") && g.matches(br"(city='it\'s')") && !g.matches(br#"(city="Oslo")"#));
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: linear in the schema's size, as [`to_rules`].
pub fn grammar(node: &Node, values: &dyn Dialect, rules: &mut Rules) -> String {
    let comma = ", ?";
    let py = values;
    match node {
        // (`patternProperties` names are not generated as keyword arguments.)
        Node::Object { properties, additional, non_empty, extra_keys, .. } => {
            let elems: Vec<(String, bool)> = properties
                .iter()
                .filter(|p| p.1 != Node::Never)
                .map(|(name, n, req)| (format!("{}={}", escape(name), to_rules(n, py, rules)), *req))
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

/// Python keyword arguments (`(city="Paris", n=2, ok=True, tags=['a'])`) as a compact
/// JSON object, or `None` if `s` is not that.
///
/// ```
/// # use toolgate::tools::dialect::python::to_json;
/// assert_eq!(
///     to_json(r#"(city="Paris", n=-2.5, ok=True, x=None, t=['a', {"k": False}])"#).as_deref(),
///     Some(r#"{"city":"Paris","n":-2.5,"ok":true,"x":null,"t":["a",{"k":false}]}"#)
/// );
/// assert_eq!(to_json("(city=Paris)"), None);
/// ```
///
/// Cost: linear in `s`; nesting is bounded (128 levels).
pub fn to_json(s: &str) -> Option<String> {
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
            map.insert(key, r.value()?);
            if r.eat(")") {
                break;
            }
            if !r.eat(",") {
                return None;
            }
        }
    }
    r.ws();
    (r.i == s.len()).then(|| serde_json::Value::Object(map).to_string())
}
