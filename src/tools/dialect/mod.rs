//! Argument dialects: how a call's arguments are spelled, one file each.
//!
//! A layout ([`ToolFormat`]) says where a call's arguments go; its
//! [`ArgsDialect`] says how they are written there. Each dialect is one file and one
//! type implementing [`ArgsSyntax`], which holds everything toolgate does with that
//! spelling: the constrained **grammar** of the arguments for a tool's schema, how a
//! **reader** finds where the arguments end in streamed text, and the **converter** to
//! the JSON object clients receive. The file also holds how the dialect spells a
//! value (the grammar's [`Dialect`](crate::grammar::regex::Dialect) trait, which the
//! schema compiler writes values through): Gemma 4's quote token, Python's literals,
//! bare text between tags. JSON's spelling is the grammar's own
//! ([`crate::grammar::regex::Json`]).
//!
//! | dialect | file | written as |
//! |---|---|---|
//! | [`ArgsDialect::Json`] | [`json`] | `{"city": "Oslo", "days": 3}` |
//! | [`ArgsDialect::Gemma4`] | [`gemma4`] | `{city:<\|"\|>Oslo<\|"\|>,days:3}` (FunctionGemma: `<escape>` for `<\|"\|>`) |
//! | [`ArgsDialect::XmlParameters`] | [`tagged`] | `<parameter=city>Oslo</parameter>…`, GLM's `<arg_key>`, MiniMax's `<parameter name=…>`, DSML's typed tags |
//! | [`ArgsDialect::Python`] | [`python`] | `(city="Oslo", days=3)` |
//! | [`ArgsDialect::PythonDict`] | [`python_dict`] | `{'city': 'Oslo', 'days': 3}` in a JSON body (or JSON) |
//!
//! Adding a dialect is a file here, a variant of [`ArgsDialect`] and its arm in
//! [`ArgsDialect::syntax`]; the grammar ([`super::calls_grammar`]), the parser
//! ([`super::stream::StreamParser`]) and derivation ([`super::derive`]) go through the
//! trait.

pub mod gemma4;
pub mod json;
mod literals;
pub mod python;
pub mod python_dict;
mod scan;
pub mod tagged;

use std::collections::HashSet;

use super::format::{ArgsDialect, ToolFormat};
use crate::grammar::ir::Node;
use crate::grammar::part::Built;
use crate::grammar::rules::Rules;
pub use scan::ValueScan;

/// Where a call's arguments end, as far as the text read so far tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// Not decided yet: more text is needed.
    More,
    /// The arguments are this many bytes long.
    End(usize),
    /// A `<` outside any string at this offset: the start of a marker, not part of a
    /// value. A call whose arguments were not announced yet is malformed there; an
    /// announced one (constrained) waits for its end marker.
    Stray(usize),
    /// The text stops being arguments of this dialect at this offset.
    Broken(usize),
}

/// One argument spelling: grammar, reader and converter together.
///
/// Every method is cheap to call (no state): the reader's state lives in the
/// [`ValueScan`] the parser keeps per call.
pub trait ArgsSyntax: Sync {
    /// The grammar of the arguments for a tool whose compiled arguments schema is
    /// `node`, in layout `f`, as a part of the call's grammar; large parts go into
    /// `rules` (see [`Rules`]). `marker` spells a marker's text as the call's grammar
    /// does (the vocabulary's control tokens in it as those tokens), for dialects whose
    /// arguments hold markers (tagged parameters).
    ///
    /// Cost: linear in the schema's size.
    fn grammar(&self, node: &Node, f: &ToolFormat, rules: &mut Rules, marker: &dyn Fn(&str) -> Built) -> Built;

    /// The byte the arguments open with, after optional whitespace (`{`, `(`), or
    /// `None` where the dialect reads its own whitespace from the name's end.
    fn opener(&self) -> Option<u8>;

    /// Where the arguments that start `text` end. `scan` is this call's reader state:
    /// `text` always starts at the arguments, and grows by the newly read text
    /// between calls.
    ///
    /// Cost: amortized linear in the text (a value scan resumes where it stopped).
    fn extent(&self, text: &str, f: &ToolFormat, scan: &mut ValueScan) -> Extent;

    /// The whole arguments `text` (as [`ArgsSyntax::extent`] delimits them) as a
    /// compact JSON object, or `None` if they do not read in this dialect. `strings`
    /// names the parameters the tool declares as strings (for dialects that do not
    /// quote strings).
    fn to_json(&self, text: &str, f: &ToolFormat, strings: Option<&HashSet<String>>) -> Option<String>;

    /// Whether the arguments are JSON as written, so they stream to clients as they
    /// are generated (the others are converted whole at the end of the call).
    fn streams_as_written(&self) -> bool {
        false
    }

    /// Control tokens the spelling needs in the vocabulary, in layout `f` (Gemma
    /// quotes strings with one): a model whose vocabulary lacks one cannot write these
    /// arguments, and the grammar reads them as control tokens.
    fn control_tokens<'f>(&self, _f: &'f ToolFormat) -> Vec<&'f str> {
        Vec::new()
    }
}

impl ArgsDialect {
    /// The dialect's grammar, reader and converter.
    pub(crate) fn syntax(self) -> &'static dyn ArgsSyntax {
        match self {
            ArgsDialect::Json => &json::Json,
            ArgsDialect::Gemma4 => &gemma4::Gemma4,
            ArgsDialect::XmlParameters => &tagged::Tagged,
            ArgsDialect::Python => &python::Python,
            ArgsDialect::PythonDict => &python_dict::PythonDict,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn syntax_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::tools::format::{for_family, ArgsDialect};
        let f = for_family("hermes")?.unwrap();
        let python = ArgsDialect::Python.syntax();
        assert_eq!(
            python.to_json(r#"(city="Oslo", days=3)"#, &f, None).as_deref(),
            Some(r#"{"city":"Oslo","days":3}"#)
        );
        Ok(())
    }
}
