//! JSON arguments (`{"city": "Oslo", "days": 3}`), passed to clients as written.

use std::collections::HashSet;

use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::regex::{to_rules_part, JsonWith};
use crate::grammar::rules::Rules;
use crate::tools::format::ToolFormat;

/// RFC 8259 JSON arguments ([`crate::tools::format::ArgsDialect::Json`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl ArgsSyntax for Json {
    fn grammar(&self, node: &Node, f: &ToolFormat, rules: &mut Rules, _: &dyn Fn(&str) -> Built) -> Built {
        to_rules_part(node, &JsonWith(f.spacing), rules)
    }
    fn opener(&self) -> Option<u8> {
        Some(b'{')
    }
    fn extent(&self, text: &str, _: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Json, "")
    }
    /// The text itself when it is one JSON value.
    fn to_json(&self, text: &str, _: &ToolFormat, _: Option<&HashSet<String>>) -> Option<String> {
        serde_json::from_str::<serde::de::IgnoredAny>(text).ok().map(|_| text.to_string())
    }
    fn streams_as_written(&self) -> bool {
        true
    }
}
