//! A JSON body's arguments as Jinja prints a mapping (`{'city': 'Oslo', 'days': 3}`):
//! what a template that writes `{{ call.function.arguments }}` renders when the
//! arguments are passed as an object, as Hugging Face and vLLM pass them (vLLM's
//! Phi-4-mini example: `{"name": "get_weather", "arguments": {'city': 'Oslo'}}`).
//! The same template renders JSON for arguments passed as a string, and models are
//! trained on JSON: both spellings are admitted and read back.

use std::collections::HashSet;

use super::literals::{LiteralReader, Literals};
use super::python::PythonSingle;
use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::regex::{to_rules_part, Json};
use crate::grammar::rules::Rules;
use crate::tools::format::ToolFormat;

/// Arguments as Python's `repr` of a dict, or as JSON
/// ([`crate::tools::format::ArgsDialect::PythonDict`]).
///
#[derive(Debug, Clone, Copy, Default)]
pub struct PythonDict;

impl ArgsSyntax for PythonDict {
    /// The schema's JSON, or its Python literal with `repr`'s single quotes
    /// ([`PythonSingle`]: `True`, `None`, `{'key': …}`): one spelling per call, not a
    /// mix.
    fn grammar(&self, node: &Node, _: &ToolFormat, rules: &mut Rules, _: &dyn Fn(&str) -> Built) -> Built {
        let json = to_rules_part(node, &Json, rules);
        let python = to_rules_part(node, &PythonSingle, rules);
        Built::alt(vec![json, python])
    }
    fn opener(&self) -> Option<u8> {
        Some(b'{')
    }
    /// Python's brackets and both quotes: a JSON value scans the same way.
    fn extent(&self, text: &str, _: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Python, "")
    }
    /// JSON as written, else the Python dict as compact JSON; `None` for anything
    /// but one object.
    fn to_json(&self, text: &str, _: &ToolFormat, _: Option<&HashSet<String>>) -> Option<String> {
        if let Ok(serde_json::Value::Object(_)) = serde_json::from_str(text) {
            return Some(text.to_string());
        }
        let mut r = LiteralReader::new(text, Literals::Python);
        let v = r.value().filter(serde_json::Value::is_object)?;
        r.ws();
        (r.i == text.len()).then(|| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::PythonDict;
    use crate::grammar::rules::Rules;
    use crate::grammar::{schema, Grammar};
    use crate::tools::dialect::ArgsSyntax;
    use crate::tools::format::for_family;

    #[test]
    fn either_spelling_whole_never_mixed() -> Result<(), Box<dyn std::error::Error>> {
        let f = for_family("hermes")?.unwrap();
        let node = schema::compile(
            &serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}, "ok": {"type": "boolean"}},
                "required": ["city"]}),
            schema::Mode::Strict,
        )?;
        let built = PythonDict.grammar(&node, &f, &mut Rules::none(), &|_| unreachable!());
        let g = Grammar::from_regex(&built.text)?;
        // A string holding `'` in double quotes, as `repr` writes it; other strings in
        // double quotes are not `repr`'s.
        for ok in [
            r#"{"city": "Oslo", "ok": true}"#,
            "{'city': 'Oslo', 'ok': True}",
            r"{'city': 'it\'s'}",
            r#"{'city': "it's"}"#,
        ] {
            assert!(g.matches(ok.as_bytes()), "{ok}");
        }
        for bad in [
            r#"{"city": 'Oslo'}"#,
            "{'city': 'Oslo', 'ok': true}",
            "{'ok': True}",
            "{city: 'Oslo'}",
            r#"{'city': "Oslo"}"#,
        ] {
            assert!(!g.matches(bad.as_bytes()), "{bad}");
        }
        assert_eq!(
            PythonDict.to_json("{'city': 'Oslo', 'ok': True, 'tags': ['a']}", &f, None).as_deref(),
            Some(r#"{"city":"Oslo","ok":true,"tags":["a"]}"#)
        );
        assert_eq!(PythonDict.to_json(r#"{"city": "Oslo"}"#, &f, None).as_deref(), Some(r#"{"city": "Oslo"}"#));
        assert_eq!(PythonDict.to_json("['Oslo']", &f, None), None);
        assert_eq!(
            PythonDict.to_json(r"{'city': 'it\'s', 'x': None}", &f, None).as_deref(),
            Some(r#"{"city":"it's","x":null}"#)
        );
        assert_eq!(PythonDict.to_json(r#"{'city': "it's"}"#, &f, None).as_deref(), Some(r#"{"city":"it's"}"#));
        assert_eq!(PythonDict.to_json("{'city': 'Oslo'} and more", &f, None), None);
        Ok(())
    }
}
