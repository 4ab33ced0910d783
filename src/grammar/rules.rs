//! The rule and marker protocol, written and read in one place.
//!
//! A plain regex cannot share a part between two places, so large schemas are
//! written as *rules*: a regex over the value's bytes that references other rules by
//! markers in bytes valid UTF-8 never holds ([`CALL_START`], digits, [`CALL_END`]), and
//! property-set markers ([`SET_START`]) for objects whose members may come in any
//! order. [`Rules`] writes them (each part once, identical parts shared);
//! [`super::dfa::Dfa`] reads them back, following references as calls on its stack.
//! Also the regex-text helpers every emitter uses (alternation, bounded repetition).
//! Nothing here depends on another stage of the grammar pipeline.

/// The bytes that spell a rule reference (see [`super::dfa`]'s module docs): valid UTF-8 never
/// holds them, and no grammar transition on them is ever taken by input.
pub const CALL_START: u8 = 0xF8;
/// The first of the four base-4 digit bytes of a rule number.
pub const CALL_DIGIT: u8 = 0xF9;
/// Ends a rule reference.
pub const CALL_END: u8 = 0xFD;
/// Starts a property-set marker: the operation as one digit (0 open, 1 next, 2 close;
/// [`CALL_DIGIT`]-based like the set's number after it), then [`CALL_END`].
pub const SET_START: u8 = 0xF7;

use super::error::{BuildError, BuildErrorKind};
use regex_syntax::hir::Hir;

/// Sub-regexes at least this long are emitted once, as a rule, and referenced where
/// they are used (see [`Rules`]); shorter ones are copied.
pub const SHARE_MIN_LEN: usize = 256;

/// A regex no text matches ([`super::schema::Node::Never`]).
pub(crate) const NEVER: &str = r"[^\x00-\x{10FFFF}]";

/// Strings whose length bounds pass this count (and strings with a pattern) are emitted
/// once, as a rule, however short their regex text: the NFA holds one copy of the
/// character per count.
pub const SHARE_MIN_COUNT: usize = 32;

/// A regex both as text and as the regex-syntax [`Hir`] of the same language: the
/// emitters build both, so the grammar compiles the second ([`super::nfa`]) and the
/// text only names the rule ([`Rules::share_built`]) and shows it. The combinators
/// below write the text exactly as the regex syntax spells it and record the `Hir`
/// the parser would make of that text, so nothing is parsed back.
///
/// The `Hir` is kept as a tree of the combinators' steps over shared parts, which the
/// NFA compiler reads as it is; a `Hir` is made ([`Built::hir`]) only on request (for
/// tests and tools), and an emitter that writes the same part twice (a `$ref`
/// expanded in many places) pays for the tree alone. A part has none where it was
/// given as text only (a table that
/// shares nothing, [`Rules::none`]; a text that is not a regex; nesting past
/// [`MAX_BUILT_DEPTH`]): the grammar's compile parses its text, and reports it if it
/// does not parse.
///
/// ```
/// use toolgate::grammar::rules::{Built, Rules};
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
/// compiled to NFA states as it is ([`super::nfa`]), or made into a `Hir`
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
/// where a state accepts. For [`super::machine::Machine`]s, whose states written as
/// one rule each cost a rule call per byte, a reference's bytes per edge, and the
/// texts of them all.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    /// The states, by number.
    pub(crate) states: Vec<GraphState>,
}

/// One state of a [`Graph`].
#[derive(Debug, Default)]
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
    fn hir(&self) -> Option<Hir> {
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
    /// ([`Rules::share_part_always`]), and [`Rules::inline`] gives `None` for a
    /// regex reaching it. `None` when an edge's part is text only or nests too
    /// deeply. Cost: a pass over the edges.
    pub(crate) fn graph(text: String, graph: Graph) -> Option<Self> {
        let depth = 1 + graph.states.iter().flat_map(|s| &s.parts).map(|(p, _)| p.depth()).max().unwrap_or(0);
        (depth <= MAX_BUILT_DEPTH)
            .then(|| Self { text, part: Some(std::sync::Arc::new(Part::Graph(Box::new(graph), depth))) })
    }

    /// The part's steps, for [`Built::graph`]'s edges; `None` where text only.
    pub(crate) fn part(&self) -> Option<&std::sync::Arc<Part>> {
        self.part.as_ref()
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

/// A rule's text parsed with the grammar's syntax (Unicode on, UTF-8 off: rule
/// references are bytes no UTF-8 text holds), as [`super::dfa::Dfa`] compiles it.
pub(crate) fn parse_rule(text: &str) -> Result<Hir, Box<regex_syntax::Error>> {
    regex_automata::util::syntax::parse_with(text, &regex_automata::util::syntax::Config::new().utf8(false))
        .map_err(Box::new)
}

/// Sub-grammars a regex references instead of copying. A plain regex cannot share a
/// part between two places, so an object whose optional properties may each open it
/// holds one copy of "the rest of the object" per such property, an array writes its
/// item twice (`item(,item)*`) and nested containers multiply those copies. With
/// rules, each such part is emitted once and referenced; [`super::dfa::Dfa`] follows
/// references as calls. Identical parts share one rule.
///
/// ```
/// use toolgate::grammar::rules::Rules;
/// let mut rules = Rules::new();
/// let long = "[a-z]".repeat(100);
/// let r = rules.share(long.clone());
/// assert_eq!(r, Rules::reference(0));
/// assert_eq!(rules.share(long.clone()), r); // the same rule
/// assert_eq!(rules.share("[0-9]+".into()), "[0-9]+"); // short: copied
/// assert_eq!(rules.inline(&format!("x{r}"), 1 << 20), Some(format!("x(?:{long})")));
/// ```
#[derive(Debug, Clone)]
pub struct Rules {
    bodies: Vec<String>,
    /// Rule `i`'s body as a [`Built`] part where an emitter made one
    /// ([`Rules::share_built`]), so the compiler skips parsing its text back.
    built: Vec<Option<std::sync::Arc<Part>>>,
    /// Small regexes the emitters give as text (a dialect's separators, keys,
    /// number ranges), parsed once per table ([`Rules::leaf`]).
    leaves: std::collections::HashMap<String, Built, foldhash::fast::RandomState>,
    ids: std::collections::HashMap<String, usize, foldhash::fast::RandomState>,
    min_len: usize,
    total: usize,
    any_order: bool,
    sets: Vec<PropertySet>,
    set_ids: std::collections::HashMap<PropertySet, usize>,
    /// The rule of each [`Node::Def`] being written, by key.
    pub(crate) defs: std::collections::HashMap<String, usize>,
}

/// An object whose declared properties may come in any order, each at most once
/// ([`Rules::any_order`]). Its members are written as
/// `open (member (comma member)*)? close`, where a member is the *next* marker (any
/// declared property not written yet) or an extra property; [`super::dfa::Dfa`]
/// keeps the set of properties written on its stack and closes the object only once
/// every required one is in it. So an object of `n` properties costs `O(n)` grammar,
/// and only the sets some input reaches become DFA states.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PropertySet {
    /// The rule holding each declared property (`"name":value`), in schema order.
    pub members: Vec<usize>,
    /// Bit `i`: `members[i]` is required.
    pub required: u128,
    /// `(i, mask)`: once `members[i]` is written, every member in `mask` is required
    /// too (`dependencies`).
    pub dependencies: Vec<(usize, u128)>,
    /// The extra properties' regex, if any (for [`Rules::inline`]).
    pub extra: Option<String>,
    /// The separator between members (for [`Rules::inline`]).
    pub comma: String,
    /// Whether the object must hold at least one member (for [`Rules::inline`]).
    pub non_empty: bool,
    /// The rule holding the whole member list, markers included.
    pub rule: usize,
}

impl Default for Rules {
    fn default() -> Self {
        Self::new()
    }
}

impl Rules {
    /// An empty table sharing every part of at least [`SHARE_MIN_LEN`] bytes.
    pub fn new() -> Self {
        Self {
            bodies: Vec::new(),
            built: Vec::new(),
            leaves: Default::default(),
            ids: Default::default(),
            min_len: SHARE_MIN_LEN,
            total: 0,
            any_order: false,
            sets: Vec::new(),
            set_ids: Default::default(),
            defs: Default::default(),
        }
    }

    /// Let objects of at most [`ANY_ORDER_MAX_PROPERTIES`] declared properties take
    /// them in any order, each at most once, as [`PropertySet`]s (JSON Schema's
    /// reading, for [`super::schema::Objects::Open`]); by default properties come in
    /// schema order.
    pub fn any_order(mut self, yes: bool) -> Self {
        self.any_order = yes;
        self
    }

    /// A table that shares nothing: the regex is one plain regex.
    pub fn none() -> Self {
        Self { min_len: usize::MAX, ..Self::new() }
    }

    /// Whether this table shares anything (not [`Rules::none`]).
    pub fn shares(&self) -> bool {
        self.min_len != usize::MAX
    }

    /// How a regex references rule `i`: bytes no input holds (see
    /// [`super::dfa`]'s module docs).
    pub fn reference(i: usize) -> String {
        Self::marker_text(&Self::marker_bytes(&[CALL_START], i))
    }

    /// A marker's bytes: `head`, then `number` in base 4 as digit bytes from
    /// [`CALL_DIGIT`] on (most significant first), then [`CALL_END`].
    fn marker_bytes(head: &[u8], mut number: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(head.len() + 34);
        bytes.extend_from_slice(head);
        loop {
            bytes.push(CALL_DIGIT + (number % 4) as u8);
            number /= 4;
            if number == 0 {
                break;
            }
        }
        bytes[head.len()..].reverse();
        bytes.push(CALL_END);
        bytes
    }

    /// A marker's bytes spelled for a regex: `(?-u:\xF8\xF9…\xFD)`.
    fn marker_text(bytes: &[u8]) -> String {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut text = String::with_capacity(6 + 4 * bytes.len());
        text.push_str("(?-u:");
        for &b in bytes {
            text.push_str("\\x");
            text.push(char::from(HEX[usize::from(b >> 4)]));
            text.push(char::from(HEX[usize::from(b & 15)]));
        }
        text.push(')');
        text
    }

    /// How a regex spells operation `op` (0 open, 1 next, 2 close) on property set
    /// `set` (see [`PropertySet`] and [`super::dfa`]'s module docs).
    pub fn set_marker(op: u8, set: usize) -> String {
        Self::marker_text(&Self::marker_bytes(&[SET_START, CALL_DIGIT + op], set))
    }

    /// Whether an object of `n` declared properties is written as a
    /// [`PropertySet`] (any order, [`Rules::any_order`]; sets need shared rules).
    pub(crate) fn takes_any_order(&self, n: usize) -> bool {
        self.any_order && self.shares() && (2..=ANY_ORDER_MAX_PROPERTIES).contains(&n)
    }

    /// The property sets, by number.
    pub fn sets(&self) -> &[PropertySet] {
        &self.sets
    }

    /// `re` itself if short, else a reference to the rule holding it.
    /// Cost: a hash of `re`.
    pub fn share(&mut self, re: String) -> String {
        if re.len() < self.min_len {
            return re;
        }
        self.share_always(re)
    }

    /// A reference to the rule holding `re`, however short (for parts referenced from
    /// many places, whose copies would multiply).
    pub fn share_always(&mut self, re: String) -> String {
        Self::reference(self.rule_of(re))
    }

    /// `text` as a [`Built`] part: parsed once per table (the same text again costs a
    /// hash and a copy of its `Hir`), or text only in a table that shares nothing
    /// (whose regex is compiled from its text). For the small regexes emitters take
    /// as text: a dialect's separators and keys, number ranges, translated patterns.
    /// A text that does not parse is kept as text only: the grammar's compile
    /// reports it.
    ///
    /// ```
    /// use toolgate::grammar::rules::{Built, Rules};
    /// let mut rules = Rules::new();
    /// assert_eq!(rules.leaf("a+".into()), Built::parse("a+")?);
    /// // A literal (meta characters escaped) is read without the parser.
    /// assert_eq!(rules.leaf(r#""k\.é\{""#.into()), Built::parse(r#""k\.é\{""#)?);
    /// assert_eq!(Rules::none().leaf("a+".into()).hir(), None);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn leaf(&mut self, text: String) -> Built {
        if !self.shares() {
            return Built::text_only(text);
        }
        if let Some(b) = self.leaves.get(&text) {
            return b.clone();
        }
        let b = match literal_bytes(&text) {
            Some(bytes) => Built::bytes(text.clone(), bytes),
            None => Built::parse(&text).unwrap_or_else(|_| Built::text_only(text.clone())),
        };
        self.leaves.insert(text, b.clone());
        b
    }

    /// [`Rules::share`] for a [`Built`] part: itself if short, else a reference to
    /// the rule holding it (its `Hir` kept for the compile).
    pub fn share_part(&mut self, part: Built) -> Built {
        if part.text.len() < self.min_len {
            return part;
        }
        self.share_part_always(part)
    }

    /// [`Rules::share_always`] for a [`Built`] part.
    pub fn share_part_always(&mut self, part: Built) -> Built {
        Self::reference_built(self.rule_of_built(part))
    }

    /// [`Rules::reference`]`(i)` as a [`Built`] part.
    pub fn reference_built(i: usize) -> Built {
        let bytes = Self::marker_bytes(&[CALL_START], i);
        Built::bytes(Self::marker_text(&bytes), bytes)
    }

    /// The number of the rule holding `part` (made if new, its `Hir` made then).
    fn rule_of_built(&mut self, part: Built) -> usize {
        let i = self.rule_of(part.text);
        if self.built[i].is_none() {
            self.built[i] = part.part;
        }
        i
    }

    /// The number of the rule holding `re`, made if new.
    fn rule_of(&mut self, re: String) -> usize {
        if let Some(&i) = self.ids.get(&re) {
            return i;
        }
        let i = self.bodies.len();
        self.total += re.len();
        self.ids.insert(re.clone(), i);
        self.bodies.push(re);
        self.built.push(None);
        i
    }

    /// [`Rules::share_always`] for a regex the emitter also built as regex-syntax's
    /// [`Hir`] (`built.hir` must match the language of `built.text`): the text
    /// names and shares the rule, the `Hir` is what the grammar compiles, so the
    /// regex parser never reads it. For large generated regexes (key tries,
    /// automata), where parsing text back was most of a schema's compile time.
    ///
    /// ```
    /// use toolgate::grammar::rules::{Built, Rules};
    /// use toolgate::grammar::Grammar;
    /// let mut rules = Rules::new();
    /// let ab = Built::parse("a+b")?;
    /// let r = rules.share_built(ab.clone());
    /// assert_eq!(rules.share_built(ab), r); // the same rule
    /// let g = Grammar::from_rules(&format!("x{r}"), &rules)?;
    /// assert!(g.matches(b"xaab") && !g.matches(b"xb"));
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn share_built(&mut self, built: Built) -> String {
        Self::reference(self.rule_of_built(built))
    }

    /// [`Rules::share_built`] for a regex named by `key` before it is built: `make`
    /// runs only the first time a key is asked for (a large generated regex, such as
    /// the key trie of an object repeated throughout a schema, is built once), and
    /// may put parts of its own into the table. `None` when `make` gives nothing (not
    /// remembered). `key` must determine the regex.
    ///
    /// ```
    /// use toolgate::grammar::rules::{Built, Rules};
    /// let mut rules = Rules::new();
    /// let r = rules.share_built_keyed("ab".into(), |_| Built::parse("a+b").ok());
    /// assert_eq!(rules.share_built_keyed("ab".into(), |_| unreachable!()), r);
    /// ```
    pub fn share_built_keyed(&mut self, key: String, make: impl FnOnce(&mut Rules) -> Option<Built>) -> Option<Built> {
        // Keys live beside the rules' texts, after a byte no regex text starts with.
        let key = format!("\u{0}built\u{0}{key}");
        if let Some(&i) = self.ids.get(&key) {
            return Some(Self::reference_built(i));
        }
        let built = make(self)?;
        let i = self.rule_of_built(built);
        self.ids.insert(key, i);
        Some(Self::reference_built(i))
    }

    /// Set the body of rule `i` (made by [`Rules::reserve`]) as text and `Hir`, as
    /// [`Rules::share_built`] does; nothing when there is no such rule.
    pub fn define_built(&mut self, i: usize, built: Built) {
        self.define(i, built.text);
        if let Some(b) = self.built.get_mut(i) {
            *b = built.part;
        }
    }

    /// The rule bodies built as `Hir` ([`Rules::share_built`]), by number; `None` for
    /// those given as text only. Cost: a `Hir` made for each (the grammar's compile
    /// does not make them: for tests and tools).
    pub fn built(&self) -> Vec<Option<Hir>> {
        self.built.iter().map(|p| p.as_ref().and_then(|p| p.hir())).collect()
    }

    /// The rule bodies as [`Built`] parts, by number, for the NFA compiler.
    pub(crate) fn parts(&self) -> &[Option<std::sync::Arc<Part>>] {
        &self.built
    }

    /// A reference to the rule holding an object's members in any order (see
    /// [`PropertySet`]): `members` are the declared properties' regexes, in schema
    /// order, with whether each is required. The same object shares one set.
    pub(crate) fn property_set(
        &mut self,
        members: &[(Built, bool)],
        extra: Option<&Built>,
        comma: &Built,
        non_empty: bool,
        dependencies: &[(usize, u128)],
    ) -> Built {
        let required = members.iter().enumerate().filter(|(_, m)| m.1).fold(0u128, |r, (i, _)| r | 1 << i);
        let members: Vec<usize> = members.iter().map(|(re, _)| self.rule_of_built(re.clone())).collect();
        // Keyed with `rule` 0: the same object, wherever it is written.
        let key = PropertySet {
            members,
            required,
            dependencies: dependencies.to_vec(),
            extra: extra.map(|x| x.text.clone()),
            comma: comma.text.clone(),
            non_empty,
            rule: 0,
        };
        if let Some(&k) = self.set_ids.get(&key) {
            return Self::reference_built(self.sets[k].rule);
        }
        let k = self.sets.len();
        let [open, next, close] = [0, 1, 2].map(|op| Self::set_marker_built(op, k));
        let member = match extra {
            Some(x) => Built::alt(vec![next, x.clone()]),
            None => next,
        };
        let list = Built::separated(member, comma);
        let list = if non_empty { list } else { list.group().opt() };
        let rule = self.reserve(1);
        self.define_built(rule, Built::cat(vec![open, list, close]));
        self.set_ids.insert(key.clone(), k);
        self.sets.push(PropertySet { rule, ..key });
        Self::reference_built(rule)
    }

    /// [`Rules::set_marker`] as a [`Built`] part.
    fn set_marker_built(op: u8, set: usize) -> Built {
        let bytes = Self::marker_bytes(&[SET_START, CALL_DIGIT + op], set);
        Built::bytes(Self::marker_text(&bytes), bytes)
    }

    /// A reference to a rule whose body, `body(reference to itself)`, may call
    /// itself (a value nesting in itself); the same body shares one rule. Cost: two
    /// calls of `body` and a hash.
    ///
    /// ```
    /// use toolgate::grammar::{rules::{Built, Rules}, Grammar};
    /// let mut rules = Rules::new();
    /// let body = |me: &Built| Built::text_only(format!(r"x|\[{}\]", me.text));
    /// let list = rules.share_recursive(body);
    /// assert_eq!(rules.share_recursive(body), list);
    /// let g = Grammar::from_rules(&list.text, &rules)?;
    /// assert!(g.matches(b"[[[x]]]") && !g.matches(b"[[x]"));
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn share_recursive(&mut self, body: impl Fn(&Built) -> Built) -> Built {
        // The body around a placeholder no regex holds names the rule.
        let key = body(&Built::text_only("\u{0}self\u{0}".into())).text;
        if let Some(&i) = self.ids.get(&key) {
            return Self::reference_built(i);
        }
        let i = self.reserve(1);
        self.ids.insert(key, i);
        self.define_built(i, body(&Self::reference_built(i)));
        Self::reference_built(i)
    }

    /// Make `n` empty rules, numbered from the returned one, for bodies that reference
    /// each other (an automaton's states, [`Rules::define`] them). Never shared by
    /// content.
    pub fn reserve(&mut self, n: usize) -> usize {
        let first = self.bodies.len();
        self.bodies.resize(first + n, String::new());
        self.built.resize(first + n, None);
        first
    }

    /// Set the body of rule `i` (made by [`Rules::reserve`]); nothing when there is no
    /// such rule.
    pub fn define(&mut self, i: usize, body: String) {
        if let Some(b) = self.bodies.get_mut(i) {
            self.total = self.total - b.len() + body.len();
            *b = body;
            self.built[i] = None;
        }
    }

    /// The rule bodies, by number.
    pub fn bodies(&self) -> &[String] {
        &self.bodies
    }

    /// Total bytes of the rule bodies.
    pub fn total_len(&self) -> usize {
        self.total
    }

    /// `regex` with every reference replaced by its rule, recursively: the one plain
    /// regex it stands for (for tests and oracles), or `None` past `max_len` bytes (it
    /// can be exponentially larger: a [`PropertySet`] spells every order of its
    /// members), when rules reference each other in a loop (an automaton's,
    /// [`Rules::reserve`]), or when it reaches a rule holding an automaton as one
    /// part (a machine's rule, which no regex spells). Cost: one pass per rule over the inlined bodies.
    pub fn inline(&self, regex: &str, max_len: usize) -> Option<String> {
        let set_of: std::collections::HashMap<usize, &PropertySet> = self.sets.iter().map(|s| (s.rule, s)).collect();
        // A rule's body only references rules made before it.
        let mut inlined: Vec<String> = Vec::with_capacity(self.bodies.len());
        let expand = |text: &str, inlined: &[String]| -> Option<String> {
            let mut out = text.to_string();
            for (i, body) in inlined.iter().enumerate().rev() {
                let r = Self::reference(i);
                if out.contains(&r) {
                    out = out.replace(&r, &format!("(?:{body})"));
                    if out.len() > max_len {
                        return None;
                    }
                }
            }
            Some(out)
        };
        for (i, body) in self.bodies.iter().enumerate() {
            if let Some(Some(Part::Graph(..))) = self.built.get(i).map(|p| p.as_deref()) {
                // No regex spells it: a placeholder no regex holds, so a reference
                // reaching it is left over below.
                inlined.push(Self::reference(i));
                continue;
            }
            let b = match set_of.get(&i) {
                Some(set) => {
                    let members: Option<Vec<String>> = set.members.iter().map(|&m| inlined.get(m).cloned()).collect();
                    let extra = match set.extra.as_deref() {
                        Some(x) => Some(expand(x, &inlined)?),
                        None => None,
                    };
                    every_order(set, &members?, extra.as_deref(), max_len)?
                }
                None => expand(body, &inlined)?,
            };
            inlined.push(b);
        }
        let out = expand(regex, &inlined)?;
        // A reference left: one to a later rule, which only loops make.
        let marker = format!("\\x{:02X}", CALL_START);
        (!out.contains(&marker)).then_some(out)
    }
}

/// The plain regex of `set`'s members in every order (`members` and `extra` already
/// plain), or `None` past `max_len` bytes: `after[s]`, the rest once the members in
/// bit set `s` were written, copied into every `after` that leads to it.
fn every_order(set: &PropertySet, members: &[String], extra: Option<&str>, max_len: usize) -> Option<String> {
    let n = members.len();
    if n > 16 {
        return None;
    }
    let comma = &set.comma;
    let extras = extra.map(|x| format!("(?:{comma}{x})*")).unwrap_or_default();
    let mut after = vec![String::new(); 1 << n];
    for s in (0..1usize << n).rev() {
        let mut alts: Vec<String> =
            (0..n).filter(|i| s & 1 << i == 0).map(|i| format!("{comma}{}{}", members[i], after[s | 1 << i])).collect();
        if set.may_close(s as u128) {
            alts.push(String::new());
        }
        after[s] = format!("{extras}{}", alt(alts));
        if after[s].len() > max_len {
            return None;
        }
    }
    let mut alts: Vec<String> = (0..n).map(|i| format!("{}{}", members[i], after[1 << i])).collect();
    if let Some(x) = extra {
        alts.push(format!("{x}{}", after[0]));
    }
    if !set.non_empty && set.required == 0 {
        alts.push(String::new());
    }
    Some(alt(alts))
}

impl PropertySet {
    /// Whether an object whose written members are `seen` may close: every required
    /// member and every dependency of a written one is in it.
    ///
    /// ```
    /// use toolgate::grammar::rules::PropertySet;
    /// let set = PropertySet { members: vec![0, 1, 2], required: 0b001, dependencies: vec![(1, 0b100)],
    ///     extra: None, comma: ",".into(), non_empty: false, rule: 3 };
    /// assert!(set.may_close(0b001) && set.may_close(0b111) && !set.may_close(0b011) && !set.may_close(0b100));
    /// ```
    pub fn may_close(&self, seen: u128) -> bool {
        seen & self.required == self.required
            && self.dependencies.iter().all(|&(i, mask)| seen & 1 << i == 0 || seen & mask == mask)
    }
}

/// With [`Rules::any_order`], objects of 2 to this many declared properties take them
/// in any order, as JSON Schema allows ([`PropertySet`], whose seen-set is a 128-bit
/// mask). Larger objects keep schema order.
pub const ANY_ORDER_MAX_PROPERTIES: usize = 128;

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
