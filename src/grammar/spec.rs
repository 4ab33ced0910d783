//! The hand-off into the constraint engine: a grammar as a typed value.
//!
//! The stages above the grammar (the tool-call layouts, a response format, an open
//! reasoning block) build what a turn may generate as a [`Spec`]: a main [`Built`]
//! part and the table of [`Rules`] it references. A spec composes
//! ([`Spec::after`]), compares and hashes by what it names (so an engine can cache
//! the compiled [`Grammar`] by it), and compiles the parts as they were built — the
//! main part too: no regex text is written out and parsed back.

use super::mask::Grammar;
use super::part::Built;
use super::rules::Rules;

/// A grammar before it is compiled: the main part (anchored at both ends when
/// compiled) and the rules it references ([`Rules::reference`]).
///
/// Two specs are equal, and hash alike, when the main part's text, the rules' texts
/// and their property sets are: a part's text names its language (the emitters
/// write both together, see [`Built`]), so equal specs compile to the same grammar.
///
/// ```
/// use toolgate::grammar::{part::Built, rules::Rules, spec::Spec};
/// let list = || {
///     let mut rules = Rules::new();
///     let digits = rules.leaf("[0-9]+".into());
///     Spec::new(Built::separated(digits, &rules.leaf(",".into())), rules)
/// };
/// let (list, again) = (list(), list());
/// assert_eq!(list, again); // built twice, one grammar: an engine compiles it once
/// // After a reasoning block: anything without `</think>`, the marker, then the list.
/// let after = list.clone().after(Built::cat(vec![Built::parse("(?:[^<]|<[^/])*")?, Built::parse("</think>")?]));
/// let g = after.compile()?;
/// assert!(g.matches(b"hmm</think>1,22") && !g.matches(b"1,22"));
/// assert!(list.compile()?.matches(b"1,22"));
/// assert_ne!(list, after);
/// # Ok::<(), toolgate::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Spec {
    /// What the whole output must match.
    pub main: Built,
    /// The rules `main` references.
    pub rules: Rules,
}

impl Spec {
    /// `main` referencing `rules`. Cost: none.
    pub fn new(main: Built, rules: Rules) -> Self {
        Self { main, rules }
    }

    /// `prefix` then this spec's main part, same rules (a constraint that starts
    /// inside a reasoning block: the rest of the block, its end marker, then this).
    /// Cost: the main part's text is copied once (its steps are shared).
    pub fn after(self, prefix: Built) -> Self {
        Self { main: Built::cat(vec![prefix, self.main.group()]), rules: self.rules }
    }

    /// Bytes of regex text the spec spells (main part and rules): what
    /// [`super::schema::MAX_GRAMMAR_BYTES`] bounds.
    pub fn text_len(&self) -> usize {
        self.main.text.len() + self.rules.total_len()
    }

    /// Compile it: the main part and the rules as they were built (a part built as
    /// text only is parsed). Cost: building the lazy DFA's NFA, linear in the parts.
    ///
    /// # Errors
    /// As [`Grammar::from_rules`]: [`crate::Error::Schema`] for a part whose text does
    /// not parse, a reference to a missing rule, or an automaton past the size limit.
    pub fn compile(&self) -> crate::Result<Grammar> {
        Grammar::from_built(&self.main, &self.rules)
    }
}

impl PartialEq for Spec {
    fn eq(&self, other: &Self) -> bool {
        self.main.text == other.main.text
            && self.rules.bodies() == other.rules.bodies()
            && self.rules.sets() == other.rules.sets()
    }
}

impl Eq for Spec {}

impl std::hash::Hash for Spec {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.main.text.hash(state);
        self.rules.bodies().hash(state);
        self.rules.sets().hash(state);
    }
}
