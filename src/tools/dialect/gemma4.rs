//! Gemma's native argument syntax (`{city:<|"|>Oslo<|"|>,days:3}`): bare keys,
//! strings between a control token (Gemma 4's `<|"|>`, FunctionGemma's `<escape>`:
//! [`ToolFormat::string_quote`]), JSON's numbers and constants.

use std::collections::HashSet;

use regex_syntax::escape;
use serde_json::Value;

use super::literals::LiteralReader;
pub use super::literals::QUOTE;
use super::scan::Brackets;
use super::{ArgsSyntax, Extent, ValueScan};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::regex::{key_except, to_rules_part, Dialect};
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
        to_rules_part(node, &GemmaValues::new(f.gemma_quote()), rules)
    }
    fn opener(&self) -> Option<u8> {
        Some(b'{')
    }
    fn extent(&self, text: &str, f: &ToolFormat, scan: &mut ValueScan) -> Extent {
        scan.extent(text, Brackets::Gemma, f.gemma_quote())
    }
    fn to_json(&self, text: &str, f: &ToolFormat, _: Option<&HashSet<String>>) -> Option<String> {
        to_json(text, f.gemma_quote())
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
pub fn to_json(s: &str, quote: &str) -> Option<String> {
    let mut r = LiteralReader::gemma(s, quote);
    let v = r.value()?;
    r.ws();
    (r.i == s.len()).then(|| serde_json::to_string(&v).ok()).flatten()
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
        use crate::tools::dialect::gemma4::{to_json, QUOTE};
        assert_eq!(
            to_json(r#"{city:<|"|>Paris<|"|>,n:[1,true]}"#, QUOTE).as_deref(),
            Some(r#"{"city":"Paris","n":[1,true]}"#)
        );
        assert_eq!(to_json("{city:Paris}", QUOTE), None);
        // FunctionGemma's quote.
        assert_eq!(
            to_json("{city:<escape>Paris <|\"|><escape>}", "<escape>").as_deref(),
            Some(r#"{"city":"Paris <|\"|>"}"#)
        );
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
