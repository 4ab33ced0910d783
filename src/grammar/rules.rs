//! The rule and marker protocol, written and read in one place.
//!
//! A plain regex cannot share a part between two places, so large schemas are
//! written as *rules*: a regex over the value's bytes that references other rules by
//! markers in bytes valid UTF-8 never holds ([`CALL_START`], digits, [`CALL_END`]), and
//! property-set markers ([`SET_START`]) for objects whose members may come in any
//! order. [`Rules`] writes them (each part once, identical parts shared);
//! `dfa::Dfa` reads them back, following references as calls on its stack.
//! The parts it holds are [`super::part::Built`]s; nothing else here depends on
//! another stage of the grammar pipeline.

/// The bytes that spell a rule reference (see `dfa`'s module docs): valid UTF-8 never
/// holds them, and no grammar transition on them is ever taken by input.
pub const CALL_START: u8 = 0xF8;
/// The first of the four base-4 digit bytes of a rule number.
pub const CALL_DIGIT: u8 = 0xF9;
/// Ends a rule reference.
pub const CALL_END: u8 = 0xFD;
/// Starts a property-set marker: the operation as one digit (0 open, 1 next, 2 close;
/// [`CALL_DIGIT`]-based like the set's number after it), then [`CALL_END`].
pub const SET_START: u8 = 0xF7;

use super::part::{alt, Built, Part};
use regex_syntax::hir::Hir;

/// Sub-regexes at least this long are emitted once, as a rule, and referenced where
/// they are used (see [`Rules`]); shorter ones are copied.
pub const SHARE_MIN_LEN: usize = 256;

/// Strings whose length bounds pass this count (and strings with a pattern) are emitted
/// once, as a rule, however short their regex text: the NFA holds one copy of the
/// character per count.
pub const SHARE_MIN_COUNT: usize = 32;

/// Sub-grammars a regex references instead of copying. A plain regex cannot share a
/// part between two places, so an object whose optional properties may each open it
/// holds one copy of "the rest of the object" per such property, an array writes its
/// item twice (`item(,item)*`) and nested containers multiply those copies. With
/// rules, each such part is emitted once and referenced; `dfa::Dfa` follows
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
/// declared property not written yet) or an extra property; `dfa::Dfa`
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
    /// `dfa`'s module docs).
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
    /// `set` (see [`PropertySet`] and `dfa`'s module docs).
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
    /// use toolgate::grammar::{part::Built, rules::Rules};
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
        let b = Built::read(text.clone());
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
        let (text, part) = part.into_parts();
        let i = self.rule_of(text);
        if self.built[i].is_none() {
            self.built[i] = part;
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
    /// use toolgate::grammar::{part::Built, rules::Rules};
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
    /// use toolgate::grammar::{part::Built, rules::Rules};
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
        let (text, part) = built.into_parts();
        self.define(i, text);
        if let Some(b) = self.built.get_mut(i) {
            *b = part;
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
    /// use toolgate::grammar::{part::Built, rules::Rules, Grammar};
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
