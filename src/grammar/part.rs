//! Parts: a regex as text and as the steps that make its regex-syntax `Hir`.
//!
//! Emitters build every regex as a [`Built`] part: its text (which names it, and
//! which the table of rules keys it by) beside a tree of the combinators' steps over
//! shared parts (`Part`), which `nfa` compiles straight into NFA states, so
//! no emitted regex is parsed back. An automaton with loops is one part too (a
//! `Graph`), compiled state by state. Also the regex-text helpers every emitter uses
//! (alternation, bounded repetition). Nothing here depends on another stage of the
//! grammar pipeline.

use super::error::{BuildError, BuildErrorKind};
use regex_syntax::hir::Hir;

/// A regex no text matches ([`super::schema::Node::Never`]).
pub(crate) const NEVER: &str = r"[^\x00-\x{10FFFF}]";

/// A regex both as text and as the regex-syntax [`Hir`] of the same language: the
/// emitters build both, so the grammar compiles the second (`nfa`) and the
/// text only names the rule ([`super::rules::Rules::share_built`]) and shows it. The combinators
/// below write the text exactly as the regex syntax spells it and record the `Hir`
/// the parser would make of that text, so nothing is parsed back.
///
/// The `Hir` is kept as a tree of the combinators' steps over shared parts, which the
/// NFA compiler reads as it is; a `Hir` is made ([`Built::hir`]) only on request (for
/// tests and tools), and an emitter that writes the same part twice (a `$ref`
/// expanded in many places) pays for the tree alone. A part has none where it was
/// given as text only (a table that
/// shares nothing, [`super::rules::Rules::none`]; a text that is not a regex; nesting past
/// [`MAX_BUILT_DEPTH`]): the grammar's compile parses its text, and reports it if it
/// does not parse.
///
/// ```
/// use toolgate::grammar::part::Built;
/// use toolgate::grammar::rules::Rules;
/// let mut rules = Rules::new();
/// let digits = rules.leaf("[0-9]".into());
/// let list = Built::cat(vec![digits.clone(), Built::cat(vec![rules.leaf(",".into()), digits]).group().star()]);
/// assert_eq!(list.text, "[0-9](?:,[0-9])*");
/// assert_eq!(list.hir(), Built::parse(&list.text)?.hir());
/// # Ok::<(), toolgate::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Built {
    /// The regex's text.
    pub text: String,
    /// How its `Hir` is made; `None`: parsed from the text when the grammar compiles.
    part: Option<std::sync::Arc<Part>>,
}

/// Two parts are equal when their texts and their `Hir`s are (a `Hir` made for each:
/// for tests).
impl PartialEq for Built {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.hir() == other.hir()
    }
}

/// A [`Built`] part's `Hir`, as the steps that make it (each with its depth):
/// compiled to NFA states as it is (`nfa`), or made into a `Hir`
/// ([`Built::hir`]).
#[derive(Debug)]
pub(crate) enum Part {
    /// A literal byte string (rule references and markers, quotes): depth 1.
    Bytes(Box<[u8]>),
    Hir(Hir, usize),
    Concat(Vec<std::sync::Arc<Part>>, usize),
    Alternation(Vec<std::sync::Arc<Part>>, usize),
    Repetition {
        sub: std::sync::Arc<Part>,
        min: u32,
        max: Option<u32>,
        depth: usize,
    },
    /// An automaton compiled state by state ([`Built::graph`]); it has no `Hir`.
    Graph(Box<Graph>, usize),
}

/// A right-linear grammar (an automaton whose edges may be parts) that compiles
/// straight into one NFA state per state: state 0 is the start, and the graph ends
/// where a state accepts. For `machine::Machine`s, whose states written as
/// one rule each cost a rule call per byte, a reference's bytes per edge, and the
/// texts of them all.
#[derive(Debug)]
pub(crate) struct Graph {
    /// The states, by number.
    pub(crate) states: Vec<GraphState>,
}

/// One state of a [`Graph`].
#[derive(Debug)]
pub(crate) struct GraphState {
    /// Whether the graph may end here.
    pub(crate) accepting: bool,
    /// `(lo, hi, target)`: bytes `lo..=hi` lead to state `target`; sorted, disjoint.
    pub(crate) ranges: Vec<(u8, u8, u32)>,
    /// `(part, target)`: `part`, then state `target`.
    pub(crate) parts: Vec<(std::sync::Arc<Part>, u32)>,
}

impl Part {
    /// How deeply the `Hir` nests.
    fn depth(&self) -> usize {
        match self {
            Part::Bytes(_) => 1,
            Part::Hir(_, d)
            | Part::Concat(_, d)
            | Part::Alternation(_, d)
            | Part::Repetition { depth: d, .. }
            | Part::Graph(_, d) => *d,
        }
    }

    /// The `Hir`; `None` where a [`Graph`] is in it (an automaton with loops has
    /// no regex short enough to write).
    pub(crate) fn hir(&self) -> Option<Hir> {
        Some(match self {
            Part::Bytes(b) => Hir::literal(b.clone()),
            Part::Hir(h, _) => h.clone(),
            Part::Concat(parts, _) => Hir::concat(parts.iter().map(|p| p.hir()).collect::<Option<_>>()?),
            Part::Alternation(parts, _) => Hir::alternation(parts.iter().map(|p| p.hir()).collect::<Option<_>>()?),
            Part::Repetition { sub, min, max, .. } => Hir::repetition(regex_syntax::hir::Repetition {
                min: *min,
                max: *max,
                greedy: true,
                sub: Box::new(sub.hir()?),
            }),
            Part::Graph(..) => return None,
        })
    }
}

/// Deepest nesting a [`Built`] part's `Hir` may have: the NFA compiler recurses once
/// per level, and deeper parts are left to the regex parser, whose nesting limit
/// refuses them cleanly. (Key tries of names up to
/// [`super::dialect::MAX_BUILT_KEY_CHARS`] characters stay under it.)
pub const MAX_BUILT_DEPTH: usize = 640;

/// How deeply `h` nests (a walk of its nodes).
fn hir_depth(h: &Hir) -> usize {
    use regex_syntax::hir::HirKind;
    match h.kind() {
        HirKind::Concat(subs) | HirKind::Alternation(subs) => 1 + subs.iter().map(hir_depth).max().unwrap_or(0),
        HirKind::Repetition(r) => 1 + hir_depth(&r.sub),
        HirKind::Capture(c) => 1 + hir_depth(&c.sub),
        _ => 1,
    }
}

impl Built {
    /// `text` parsed the way the grammar parses rules.
    ///
    /// Cost: one parse of `text`.
    ///
    /// # Errors
    /// [`crate::Error::Schema`] when `text` is not a regex.
    pub fn parse(text: &str) -> crate::Result<Self> {
        let hir = parse_rule(text)
            .map_err(|e| BuildError::new(BuildErrorKind::Pattern, format!("not a regex: {e}")).at("#"))?;
        Ok(Self::from_hir(text.to_string(), hir))
    }

    /// A part whose `Hir` its emitter built (`hir` must be what the grammar's parser
    /// makes of `text`). Cost: a walk of `hir` for its depth.
    pub fn from_hir(text: String, hir: Hir) -> Self {
        let depth = hir_depth(&hir);
        Self { text, part: (depth <= MAX_BUILT_DEPTH).then(|| std::sync::Arc::new(Part::Hir(hir, depth))) }
    }

    /// A regex given as text only (parsed when the grammar compiles).
    pub fn text_only(text: String) -> Self {
        Self { text, part: None }
    }

    /// The part's `Hir`, or `None` where it is text only or holds an automaton as
    /// one part (a machine's rule). Cost: a copy of every node.
    pub fn hir(&self) -> Option<Hir> {
        self.part.as_ref().and_then(|p| p.hir())
    }

    /// An automaton as one part (see [`Graph`]), named by `text`: a description
    /// that determines it, not a regex (no regex short enough exists where it
    /// loops), so such a part is only ever a rule of its own
    /// ([`super::rules::Rules::share_part_always`]), and [`super::rules::Rules::inline`] gives `None` for a
    /// regex reaching it. `None` when an edge's part is text only or nests too
    /// deeply. Cost: a pass over the edges.
    pub(crate) fn graph(text: String, graph: Graph) -> Option<Self> {
        let depth = 1 + graph.states.iter().flat_map(|s| &s.parts).map(|(p, _)| p.depth()).max().unwrap_or(0);
        (depth <= MAX_BUILT_DEPTH)
            .then(|| Self { text, part: Some(std::sync::Arc::new(Part::Graph(Box::new(graph), depth))) })
    }

    /// The empty regex (matches the empty text).
    pub fn empty() -> Self {
        static EMPTY: std::sync::LazyLock<std::sync::Arc<Part>> =
            std::sync::LazyLock::new(|| std::sync::Arc::new(Part::Hir(Hir::empty(), 1)));
        Self { text: String::new(), part: Some(EMPTY.clone()) }
    }

    /// The regex that matches nothing (`[^\x00-\x{10FFFF}]`).
    pub fn never() -> Self {
        static NEVER_PART: std::sync::LazyLock<std::sync::Arc<Part>> =
            std::sync::LazyLock::new(|| std::sync::Arc::new(Part::Hir(Hir::fail(), 1)));
        Self { text: NEVER.into(), part: Some(NEVER_PART.clone()) }
    }

    /// The bytes `bytes` (not empty), spelled `text` (which the grammar's parser must
    /// read as exactly these bytes). Cost: no `Hir`; a `Vec` is kept as it is.
    pub fn bytes(text: String, bytes: impl Into<Box<[u8]>>) -> Self {
        Self { text, part: Some(std::sync::Arc::new(Part::Bytes(bytes.into()))) }
    }

    /// `item (separator item)*`: one or more items, separated.
    pub fn separated(item: Built, separator: &Built) -> Self {
        Self::cat(vec![item.clone(), Self::cat(vec![separator.clone(), item]).group().star()])
    }

    fn joined(parts: Vec<Built>, sep: Option<&str>, make: fn(Vec<std::sync::Arc<Part>>, usize) -> Part) -> Self {
        let text =
            sep.map_or_else(String::new, |sep| parts.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join(sep));
        let subs = parts.into_iter().map(|p| p.part).collect::<Option<Vec<_>>>();
        let part = subs.and_then(|subs| {
            let depth = 1 + subs.iter().map(|p| p.depth()).max().unwrap_or(0);
            (depth <= MAX_BUILT_DEPTH).then(|| std::sync::Arc::new(make(subs, depth)))
        });
        Self { text, part }
    }

    /// `parts` one after the other, as written (a part holding a top-level `|` must
    /// be a [`Built::group`]). Cost: linear in the parts.
    pub fn cat(parts: Vec<Built>) -> Self {
        Self::joined(parts, Some(""), Part::Concat)
    }

    /// `a|b|…` without a group around it (see [`Built::alt`] for the grouped form).
    pub fn bar(parts: Vec<Built>) -> Self {
        Self::joined(parts, Some("|"), Part::Alternation)
    }

    /// [`Built::cat`] with no text written (empty): for a large part built level by
    /// level (a key trie), whose text would be copied once per level, and which is
    /// spelled once at the end ([`Built::spelled`]).
    pub(crate) fn cat_unspelled(parts: Vec<Built>) -> Self {
        Self::joined(parts, None, Part::Concat)
    }

    /// [`Built::bar`] with no text written, as [`Built::cat_unspelled`]; no
    /// alternatives: [`Built::never`].
    pub(crate) fn bar_unspelled(parts: Vec<Built>) -> Self {
        match parts.is_empty() {
            true => Self::never(),
            false => Self::joined(parts, None, Part::Alternation),
        }
    }

    /// This part with `text` as its text (`text` must spell the same language).
    pub(crate) fn spelled(self, text: String) -> Self {
        Self { text, part: self.part }
    }

    /// `(?:a|b|…)`; no alternatives: [`Built::never`].
    pub fn alt(parts: Vec<Built>) -> Self {
        if parts.is_empty() {
            return Self::never();
        }
        Self::bar(parts).group()
    }

    /// `(?:self)`: the same language, one atom.
    pub fn group(self) -> Self {
        let mut text = String::with_capacity(self.text.len() + 4);
        text.push_str("(?:");
        text.push_str(&self.text);
        text.push(')');
        Self { text, part: self.part }
    }

    /// `self?` (`self` must be an atom: a group, class or reference).
    pub fn opt(self) -> Self {
        self.counted("?", 0, Some(1))
    }

    /// `self*` (`self` must be an atom).
    pub fn star(self) -> Self {
        self.counted("*", 0, None)
    }

    /// `self{min,max}` as the emitters write a count (`max` capped at
    /// [`MAX_REPEAT`]; `self` must be an atom).
    pub fn repeat(self, min: usize, max: Option<usize>) -> Self {
        match max {
            None if min == 0 => self.star(),
            None => self.times(min, None),
            Some(_) => self.times(min, Some(cap(min, max).max(min))),
        }
    }

    /// `self{min,max}` (`self{min,}` without a maximum), exactly these counts.
    pub fn times(self, min: usize, max: Option<usize>) -> Self {
        let op = match max {
            Some(max) => format!("{{{min},{max}}}"),
            None => format!("{{{min},}}"),
        };
        self.counted(&op, min, max)
    }

    fn counted(self, op: &str, min: usize, max: Option<usize>) -> Self {
        let mut text = String::with_capacity(self.text.len() + op.len());
        text.push_str(&self.text);
        text.push_str(op);
        let counts = match (u32::try_from(min), max.map(u32::try_from)) {
            (Ok(min), None) => Some((min, None)),
            (Ok(min), Some(Ok(max))) => Some((min, Some(max))),
            _ => None,
        };
        let part = self.part.zip(counts).and_then(|(sub, (min, max))| {
            let depth = sub.depth() + 1;
            (depth <= MAX_BUILT_DEPTH).then(|| std::sync::Arc::new(Part::Repetition { sub, min, max, depth }))
        });
        Self { text, part }
    }
}

/// The bytes `text` matches when it is a plain literal: characters, each regex
/// meta character escaped with a backslash (as `regex_syntax::escape` writes them);
/// `None` for anything else (a class, an escape such as `\x41` or `\n`, a group, the
/// empty text), which the parser reads. Keys, quotes and enum values are such
/// literals: read here, they skip the parser. Cost: one pass over `text`.
fn literal_bytes(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let c = match c {
            '\\' => chars.next().filter(|&e| regex_syntax::is_meta_character(e))?,
            c if regex_syntax::is_meta_character(c) || c.is_whitespace() => return None,
            c => c,
        };
        bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
    }
    (!bytes.is_empty()).then_some(bytes)
}

impl Built {
    /// `text` as a part: a plain literal read without the parser, else parsed, else
    /// (not a regex) text only, which the grammar's compile reports.
    pub(crate) fn read(text: String) -> Self {
        match literal_bytes(&text) {
            Some(bytes) => Self::bytes(text, bytes),
            None => Self::parse(&text).unwrap_or_else(|_| Self::text_only(text)),
        }
    }

    /// The steps that make the `Hir` (`None` where text only): what the compiler reads.
    pub(crate) fn steps(&self) -> Option<&std::sync::Arc<Part>> {
        self.part.as_ref()
    }

    /// The text and the steps (`None` where text only), taken apart: for the table of
    /// rules, and for a graph's edges.
    pub(crate) fn into_parts(self) -> (String, Option<std::sync::Arc<Part>>) {
        (self.text, self.part)
    }
}

/// A rule's text parsed with the grammar's syntax (Unicode on, UTF-8 off: rule
/// references are bytes no UTF-8 text holds), as `dfa::Dfa` compiles it.
pub(crate) fn parse_rule(text: &str) -> Result<Hir, Box<regex_syntax::Error>> {
    regex_automata::util::syntax::parse_with(text, &regex_automata::util::syntax::Config::new().utf8(false))
        .map_err(Box::new)
}

/// `(?:a|b|…)`; no alternatives: [`NEVER`].
pub(crate) fn alt(parts: Vec<String>) -> String {
    if parts.is_empty() {
        return NEVER.into();
    }
    format!("(?:{})", parts.join("|"))
}

/// Largest repetition count written out (`maxLength`, `maxItems`). A larger maximum
/// is lowered to this one (or to the minimum, when that is larger): the grammar then
/// generates only the shorter values, every one of them valid. Minimums are exact.
pub const MAX_REPEAT: usize = 1024;

/// `max` lowered to [`MAX_REPEAT`] (or to `min`, when that is larger).
pub(crate) fn cap(min: usize, max: Option<usize>) -> usize {
    max.unwrap_or(usize::MAX).min(MAX_REPEAT.max(min))
}

pub(crate) fn repeat(unit: &str, min: usize, max: Option<usize>) -> String {
    match max {
        None if min == 0 => format!("{unit}*"),
        None => format!("{unit}{{{min},}}"),
        Some(_) => format!("{unit}{{{min},{}}}", cap(min, max).max(min)),
    }
}
