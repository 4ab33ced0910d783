//! Gemma 4's native argument syntax (`{city:<|"|>Oslo<|"|>,days:3}`): bare keys,
//! strings between a control token, JSON's numbers and constants.

use std::collections::HashSet;

use super::literals::{LiteralReader, Literals, QUOTE};
use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::regex::{to_rules_part, Gemma4 as Gemma4Values};
use crate::grammar::rules::Rules;
use crate::tools::format::ToolFormat;

/// Gemma 4 arguments ([`crate::tools::format::ArgsDialect::Gemma4`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma4;

impl ArgsSyntax for Gemma4 {
    fn grammar(&self, node: &Node, _: &ToolFormat, rules: &mut Rules) -> Built {
        to_rules_part(node, &Gemma4Values, rules)
    }
    fn opener(&self) -> Option<u8> {
        Some(b'{')
    }
    fn extent(&self, text: &str, _: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Gemma)
    }
    fn to_json(&self, text: &str, _: &ToolFormat, _: Option<&HashSet<String>>) -> Option<String> {
        to_json(text)
    }
    fn control_tokens(&self) -> &'static [&'static str] {
        &[QUOTE]
    }
}

/// Gemma 4's native value syntax (`{city:<|"|>Paris<|"|>,n:[1,2]}`) as compact JSON,
/// or `None` if `s` is not one value in that syntax.
///
/// ```
/// # use toolgate::tools::dialect::gemma4::to_json;
/// assert_eq!(to_json(r#"{city:<|"|>Paris<|"|>,n:[1,true]}"#).as_deref(), Some(r#"{"city":"Paris","n":[1,true]}"#));
/// assert_eq!(to_json("{city:Paris}"), None);
/// ```
///
/// Cost: linear in `s`; nesting is bounded (128 levels).
pub fn to_json(s: &str) -> Option<String> {
    let mut r = LiteralReader::new(s, Literals::Gemma);
    let v = r.value()?;
    r.ws();
    (r.i == s.len()).then(|| serde_json::to_string(&v).ok()).flatten()
}
