//! Gemma's native argument syntax (`{city:<|"|>Oslo<|"|>,days:3}`): bare keys,
//! strings between a control token (Gemma 4's `<|"|>`, FunctionGemma's `<escape>`:
//! [`ToolFormat::string_quote`]), JSON's numbers and constants.

use std::collections::HashSet;

use regex_syntax::escape;
use serde_json::Value;

use super::literals::LiteralReader;
pub use super::literals::QUOTE;
use super::python::{string_node, whole_literal, PythonSingle};
use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::regex::{key_except, members, to_rules, to_rules_part, Dialect};
use crate::grammar::rules::Rules;
use crate::tokenizer::SPECIAL_PREFIX;
use crate::tools::format::ToolFormat;

/// Gemma's arguments ([`crate::tools::format::ArgsDialect::Gemma4`]): bare keys,
/// strings between the layout's quote token ([`ToolFormat::gemma_quote`]), JSON's
/// numbers and constants. Their values are spelled by [`GemmaValues`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma4;

impl ArgsSyntax for Gemma4 {
    fn grammar(&self, node: &Node, f: &ToolFormat, rules: &mut Rules, _: &dyn Fn(&str) -> Built) -> Built {
        let values = GemmaValues::new(f.gemma_quote());
        match node {
            Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty }
                if f.python_quirks.quoted_scalars && patterns.is_empty() && dependencies.is_empty() =>
            {
                // Each declared parameter's value as Gemma spells it, or (not a string)
                // as Jinja prints it between the quotes: Python's `str`.
                let q = values.quote();
                let elems: Vec<(String, bool)> = properties
                    .iter()
                    .filter(|p| p.1 != Node::Never)
                    .map(|(name, n, req)| {
                        let native = to_rules(n, &values, rules);
                        let value = match string_node(n) {
                            true => native,
                            false => format!("(?:{native}|{q}{}{q})", to_rules(n, &PythonSingle, rules)),
                        };
                        (format!("{}:{value}", escape(name)), *req)
                    })
                    .collect();
                let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
                let additional = additional.as_ref().filter(|_| extra_keys.is_none());
                let extra = additional.map(|n| format!("{}:{}", values.any_key(&names), to_rules(n, &values, rules)));
                Built::read(format!(r"\{{{}\}}", members(&elems, extra.as_deref(), ",", *non_empty, rules)))
            }
            _ => to_rules_part(node, &values, rules),
        }
    }
    fn opener(&self) -> Option<u8> {
        Some(b'{')
    }
    fn extent(&self, text: &str, f: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Gemma, f.gemma_quote())
    }
    /// With [`PythonQuirks::quoted_scalars`](crate::tools::format::PythonQuirks), a
    /// quoted value of a parameter `strings` does not name is the Python literal it
    /// holds, if it holds one (`days:<escape>3<escape>` → `3`).
    fn to_json(&self, text: &str, f: &ToolFormat, strings: Option<&HashSet<String>>) -> Option<String> {
        let mut v = read(text, f.gemma_quote())?;
        if let (true, Value::Object(map), Some(strings)) = (f.python_quirks.quoted_scalars, &mut v, strings) {
            for (_, value) in map.iter_mut().filter(|(k, _)| !strings.contains(*k)) {
                if let Some(printed) = value.as_str().and_then(whole_literal).filter(|v| !v.is_string()) {
                    *value = printed;
                }
            }
        }
        serde_json::to_string(&v).ok()
    }
    fn control_tokens<'f>(&self, f: &'f ToolFormat) -> Vec<&'f str> {
        vec![f.gemma_quote()]
    }
}

/// The [`Dialect`] that spells Gemma's values: bare keys, strings between a quote
/// control token, which the grammar writes as the token (its special prefix byte,
/// then its text: no text can produce it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmaValues {
    /// The quote as a regex: the special prefix, then the token's text.
    quote: String,
}

impl GemmaValues {
    /// Values whose strings sit between `quote` control tokens (Gemma 4's [`QUOTE`],
    /// FunctionGemma's `<escape>`).
    pub fn new(quote: &str) -> Self {
        Self { quote: format!(r"(?-u:\x{SPECIAL_PREFIX:02X}){}", escape(quote)) }
    }
}

impl Default for GemmaValues {
    /// Gemma 4's values ([`QUOTE`]).
    fn default() -> Self {
        Self::new(QUOTE)
    }
}

/// The value spelling: bare keys, strings between the quote control token.
impl Dialect for GemmaValues {
    fn quote(&self) -> String {
        self.quote.clone()
    }
    /// Keys are bare identifiers.
    fn keys_are_strings(&self) -> bool {
        false
    }
    fn string_char(&self) -> String {
        // Any character; a string ends only at the special quote token.
        r"[^\x00]".into()
    }
    fn key(&self, name: &str) -> String {
        escape(name)
    }
    fn any_key(&self, except: &[&str]) -> String {
        let ident = |n: &&str| {
            n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let names: Vec<&str> = except.iter().copied().filter(ident).collect();
        key_except("[A-Za-z_]", "[A-Za-z0-9_]", &names)
    }
    fn literal(&self, v: &Value) -> String {
        let q = &self.quote;
        match v {
            Value::String(s) => format!("{q}{}{q}", escape(s)),
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
    fn string_literal_char(&self, c: char) -> String {
        escape(c.encode_utf8(&mut [0; 4]))
    }
    fn pattern_key(&self, _body: &str) -> Option<String> {
        None // bare identifier keys: a pattern's names need not be identifiers
    }
}

/// Gemma's native value syntax (`{city:<|"|>Paris<|"|>,n:[1,2]}`, strings between
/// `quote`: [`QUOTE`], or FunctionGemma's `<escape>`) as compact JSON, or `None` if
/// `s` is not one value in that syntax.
///
/// Cost: linear in `s`; nesting is bounded (128 levels).
fn read(s: &str, quote: &str) -> Option<Value> {
    let mut r = LiteralReader::gemma(s, quote);
    let v = r.value()?;
    r.ws();
    (r.i == s.len()).then_some(v)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::GemmaValues;
    use crate::grammar::schema::Mode;
    use crate::grammar::{Grammar, TokenMask, TokenVocab};

    #[test]
    fn gemma4_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::{regex::Dialect, Grammar};
        use crate::tools::dialect::gemma4::GemmaValues;
        let g = Grammar::from_regex(&GemmaValues::default().literal(&serde_json::json!({"city": "Oslo"})))?;
        // The quote is a control token: its bytes in a mask are 0xFF and its text.
        assert!(g.matches(b"{city:\xff<|\"|>Oslo\xff<|\"|>}") && !g.matches(br#"{"city":"Oslo"}"#));
        Ok(())
    }

    #[test]
    fn to_json_example() {
        use crate::tools::dialect::ArgsSyntax;
        use crate::tools::format::for_family;
        let mut f = for_family("gemma4").unwrap().unwrap();
        let to_json = |s: &str, f: &crate::tools::format::ToolFormat| super::Gemma4.to_json(s, f, None);
        assert_eq!(
            to_json(r#"{city:<|"|>Paris<|"|>,n:[1,true]}"#, &f).as_deref(),
            Some(r#"{"city":"Paris","n":[1,true]}"#)
        );
        assert_eq!(to_json("{city:Paris}", &f), None);
        // FunctionGemma's quote.
        f.string_quote = "<escape>".into();
        assert_eq!(to_json("{city:<escape>Paris <|\"|><escape>}", &f).as_deref(), Some(r#"{"city":"Paris <|\"|>"}"#));
    }

    /// A template that prints every value between the quotes (`{{ value }}`: vLLM's
    /// FunctionGemma example): the grammar admits a declared non-string parameter so,
    /// as Python prints it, beside Gemma's own spelling, and the reader converts it back.
    #[test]
    fn values_printed_between_the_quotes() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::rules::Rules;
        use crate::tools::dialect::ArgsSyntax;
        use crate::tools::format::for_family;
        let mut f = for_family("gemma4")?.unwrap();
        f.string_quote = "<escape>".into();
        f.python_quirks.quoted_scalars = true;
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
            "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["city"]});
        let node = crate::grammar::schema::compile(&schema, Mode::Strict)?;
        let g = Grammar::from_regex(&super::Gemma4.grammar(&node, &f, &mut Rules::none(), &|_| unreachable!()).text)?;
        let q = |s: &str| -> Vec<u8> {
            let mut quote = vec![crate::tokenizer::SPECIAL_PREFIX];
            quote.extend_from_slice(b"<escape>");
            s.split('|')
                .collect::<Vec<_>>()
                .join("\u{0}")
                .bytes()
                .flat_map(|b| if b == 0 { quote.clone() } else { vec![b] })
                .collect()
        };
        for ok in ["{city:|Paris|,days:3,ok:true}", "{city:|Paris|,days:|3|,ok:|True|,tags:|['a', 'b']|}", "{city:||}"]
        {
            assert!(g.matches(&q(ok)), "{ok}");
        }
        for bad in ["{city:|Paris|,days:|three|}", "{city:|Paris|,ok:|true|}", "{days:3}", "{city:Paris}"] {
            assert!(!g.matches(&q(bad)), "{bad}");
        }
        let strings = ["city".to_string()].into();
        let text = "{city:<escape>3<escape>,days:<escape>3<escape>,ok:<escape>True<escape>,tags:<escape>['a']<escape>}";
        assert_eq!(
            super::Gemma4.to_json(text, &f, Some(&strings)).as_deref(),
            Some(r#"{"city":"3","days":3,"ok":true,"tags":["a"]}"#)
        );
        // Types unknown: quoted values stay strings.
        assert_eq!(super::Gemma4.to_json("{days:<escape>3<escape>}", &f, None).as_deref(), Some(r#"{"days":"3"}"#));
        Ok(())
    }

    #[test]
    fn gemma4_dialect_requires_the_special_quote_token() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}, "required": ["city"]});
        let g = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &GemmaValues::default()).unwrap());
        let q = |s: &str| {
            let mut v = vec![0xFF];
            v.extend_from_slice(b"<|\"|>");
            let mut out = Vec::new();
            for (i, part) in s.split('|').enumerate() {
                if i > 0 {
                    out.extend_from_slice(&v);
                }
                out.extend_from_slice(part.as_bytes());
            }
            out
        };
        assert!(g.matches(&q("{city:|Paris|}")));
        assert!(g.matches(&q("{city:|Paris \"x\"|,n:3}")));
        // Text spelling the quote is not the quote token.
        assert!(!g.matches(b"{city:<|\"|>Paris<|\"|>}"));
        // A vocabulary where the quote is one special token.
        let mut bytes: Vec<Vec<u8>> = ["{", "}", "city", ":", "Par", "is", ",", "n", "3", "<|\"|>"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let mut special = vec![0xFF];
        special.extend_from_slice(b"<|\"|>");
        bytes.push(special); // id 10
        bytes.push(vec![]); // id 11: empty token, never allowed
        let vocab = Arc::new(TokenVocab::new(bytes, vec![]));
        let mut m = g.matcher(vocab);
        for t in [0, 2, 3] {
            m.commit(t).unwrap();
        }
        let mut mask = TokenMask::new(12);
        m.fill_mask(&mut mask).unwrap();
        assert!(mask.is_allowed(10) && !mask.is_allowed(9) && !mask.is_allowed(11));
        assert_eq!(mask.count(), 1);
        assert_eq!(m.forced_token(), Some(10));
    }
}
