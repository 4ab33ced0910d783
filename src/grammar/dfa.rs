//! The grammar's lazy DFA: subset construction over regex-automata's Thompson NFA,
//! built for mask computation.
//!
//! A mask walks the token trie from one DFA state, so it asks for a transition on
//! every byte class the vocabulary starts with, and in structural states (between
//! JSON values, inside a property name) nearly all of them are dead. A general lazy
//! DFA (regex-automata's `hybrid`) determinizes each (state, class) pair on its own
//! first visit, dead or not, and that was two thirds of a cold mask's time. This one
//! expands a state's whole row at once, in one pass over its NFA states: every class
//! no NFA transition covers is dead at no further cost, and each live class costs one
//! epsilon closure. Later steps are one table lookup.
//!
//! **Rules.** A grammar may come as a main regex plus rules it references
//! ([`Rules`]): a reference is a marker the regex spells in bytes no
//! input holds (`0xF8`, the rule number in base 4 as `0xF9..=0xFC`, `0xFD`), and the
//! DFA follows it as a call: it enters the rule's own NFA and, when the rule
//! matches, returns to just after the marker. So a sub-grammar used in many places
//! (the rest of an object after each optional property, an array's item, an open
//! object's extra values) is compiled once, where a plain regex must copy it at each
//! use. A DFA state is then a set of *configurations*: an NFA state and the stack of
//! return points that led there (interned; a call in tail position pushes nothing).
//! Stacks deeper than [`MAX_STACK`] are dropped, which only recursive rules reach.
//!
//! **Property sets.** An object whose declared properties may come in any order, each
//! at most once ([`PropertySet`]), needs to remember which it has seen:
//! `2^n` sets, too many to write as rules past a few properties. The DFA keeps the set
//! on the stack instead, as a frame of its own, so only the sets some input reaches
//! are ever built. Three markers spelled like references (starting with
//! [`SET_START`], then the operation and the set's number) drive it: *open* pushes an
//! empty set, *next* enters every member not yet in the set (marking it, and returning
//! to just after the marker), and *close* pops the set if the object may end there
//! (every required member written, and every dependency of a written one:
//! [`PropertySet::may_close`]), else leads nowhere.
//!
//! States are sets of configurations of *consuming* NFA states (byte ranges) and the
//! match state, sorted, so two paths that reach the same set share one DFA state. The
//! regex is matched whole: the search is anchored at the start and a state accepts
//! when its set holds a match with an empty stack. Look-around (`^`, `$`, `\b`) is
//! refused at build time.
//!
//! Memory is bounded: past [`Cache`]'s capacity every state is dropped and rebuilt on
//! demand ([`Cache::clear_count`] tells callers their ids went stale).

use std::collections::HashMap;
use std::sync::Arc;

use regex_automata::nfa::thompson::{State, NFA};
use regex_automata::util::alphabet::ByteClasses;
use regex_automata::util::primitives::StateID;

use super::error::{BuildError, BuildErrorKind as Kind};
use super::nfa::{self, Source};
use super::part::{Built, Part};
use super::rules::{PropertySet, Rules, CALL_DIGIT, CALL_END, CALL_START, SET_START};
use crate::Result;

/// A DFA state: an index into a [`Cache`]'s tables, valid until the cache is cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DfaState(u32);

impl DfaState {
    /// The state no input leads out of.
    pub const DEAD: DfaState = DfaState(0);

    /// Whether this is [`DfaState::DEAD`].
    pub fn is_dead(self) -> bool {
        self == Self::DEAD
    }

    /// The state's index in its [`Cache`].
    pub fn id(self) -> u32 {
        self.0
    }

    /// The state with index `id` (from [`DfaState::id`]). An index the cache never
    /// handed out behaves as [`DfaState::DEAD`] in [`Dfa::next`].
    pub fn from_id(id: u32) -> Self {
        Self(id)
    }
}

/// Marks a row that was not expanded yet.
const UNKNOWN: u32 = u32::MAX;

/// Largest NFA a grammar may compile to (bytes): a schema past it (a `minLength` of a
/// billion, a huge enum) is refused with an error instead of exhausting memory.
pub const NFA_SIZE_LIMIT: usize = 16 << 20;

/// Deepest stack of pending rule returns a configuration may carry.
pub const MAX_STACK: usize = 256;

/// One frame of a configuration's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Frame {
    /// Where to resume when the rule called on top of it matches.
    Return(StateID),
    /// Property set `set`'s members written so far (bit `i`: member `i`).
    Set { set: u32, seen: u128 },
}

/// A configuration: NFA state in the low 32 bits, stack id in the high 32.
type Config = u64;

fn config(q: StateID, stack: u32) -> Config {
    (u64::from(stack) << 32) | u64::from(q.as_u32())
}

fn nfa_state(c: Config) -> StateID {
    StateID::new_unchecked(c as u32 as usize)
}

fn stack_of(c: Config) -> u32 {
    (c >> 32) as u32
}

/// What a marker at an NFA state does; every marker resumes at `resume`.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// Enter the rule starting at `start`; `tail`: the resume point is the end of the
    /// caller (a tail call, which pushes nothing).
    Rule { start: StateID, resume: StateID, tail: bool },
    /// Push an empty property set.
    Open { set: u32, resume: StateID },
    /// Enter each member of the set on top of the stack not yet written.
    Next { set: u32, resume: StateID },
    /// Pop the set on top of the stack, if the object may end with it
    /// ([`PropertySet::may_close`]).
    Close { set: u32, resume: StateID },
}

/// A [`PropertySet`] resolved to its members' start states.
#[derive(Debug)]
struct SetStarts {
    members: Vec<StateID>,
    set: PropertySet,
}

/// A regex compiled to a Thompson NFA, determinized lazily into a [`Cache`].
#[derive(Debug)]
pub struct Dfa {
    nfa: NFA,
    classes: ByteClasses,
    /// Number of byte classes: the length of a transition row.
    stride: usize,
    /// The rule references leaving each NFA state (empty for most).
    calls: HashMap<u32, Vec<Call>, foldhash::fast::FixedState>,
    /// Byte classes that only spell rule references: never input transitions.
    call_classes: [bool; 256],
    /// The property sets the markers name, by number.
    sets: Vec<SetStarts>,
}

impl Dfa {
    /// Compile `regex` (regex-syntax, matched whole, bytes not required to be UTF-8).
    ///
    /// Cost: the NFA compile, linear in the regex's expanded size.
    ///
    /// # Errors
    /// [`crate::Error::Schema`] if the regex does not parse, its NFA exceeds `nfa_size_limit`
    /// bytes, or it uses look-around.
    pub fn new(regex: &str, nfa_size_limit: usize) -> Result<Self> {
        Self::with_rules(regex, &[], nfa_size_limit)
    }

    /// Compile `main` and the `rules` its references call (rule `i` is referenced as
    /// [`Rules::reference`]`(i)`).
    ///
    /// Cost: the NFA compile of every rule, plus one pass over the NFA's states to find
    /// the references.
    ///
    /// # Errors
    /// As [`Dfa::new`], and [`crate::Error::Schema`] for a reference to a rule that does not
    /// exist or a malformed one.
    pub fn with_rules(main: &str, rules: &[String], nfa_size_limit: usize) -> Result<Self> {
        Self::build(Source::Text(main), rules, &[], &[], nfa_size_limit)
    }

    /// Compile `main` and everything `rules` holds: its rule bodies and the property
    /// sets its markers name (objects in any order, [`Rules::any_order`]).
    ///
    /// Cost and errors: as [`Dfa::with_rules`], and [`crate::Error::Schema`] for a set with
    /// more than 128 members or one naming a rule that does not exist.
    pub fn from_rules(main: &str, rules: &Rules, nfa_size_limit: usize) -> Result<Self> {
        Self::build(Source::Text(main), rules.bodies(), rules.parts(), rules.sets(), nfa_size_limit)
    }

    /// [`Dfa::from_rules`] for a main part as it was built (parsed only where it is
    /// text only): a [`super::spec::Spec`]'s compile.
    ///
    /// # Errors
    /// As [`Dfa::from_rules`].
    pub(crate) fn from_built(main: &Built, rules: &Rules, nfa_size_limit: usize) -> Result<Self> {
        let main = match main.steps() {
            Some(p) => Source::Part(p),
            None => Source::Text(&main.text),
        };
        Self::build(main, rules.bodies(), rules.parts(), rules.sets(), nfa_size_limit)
    }

    fn build(
        main: Source<'_>,
        rules: &[String],
        built: &[Option<Arc<Part>>],
        sets: &[PropertySet],
        nfa_size_limit: usize,
    ) -> Result<Self> {
        let fail = |kind: Kind| move |reason: String| BuildError::new(kind, reason).at("#");
        // Rules built as parts already (see [`Rules::share_built`]) compile as they
        // are; the others are parsed first.
        let sources: Vec<Source> = std::iter::once(main)
            .chain(rules.iter().enumerate().map(|(i, text)| match built.get(i).and_then(Option::as_ref) {
                Some(p) => Source::Part(p),
                None => Source::Text(text),
            }))
            .collect();
        // Look-around is refused there (a token mask cannot follow it).
        let nfa = nfa::compile(&sources, nfa_size_limit).map_err(|e| e.at("#"))?;
        let classes = *nfa.byte_classes();
        // `alphabet_len` counts the end-of-input class as well.
        let stride = classes.alphabet_len() - 1;
        let mut call_classes = [false; 256];
        for b in SET_START..=CALL_END {
            call_classes[usize::from(classes.get(b))] = true;
        }
        let mut dfa = Self { nfa, classes, stride, calls: HashMap::default(), call_classes, sets: Vec::new() };
        for set in sets {
            if set.members.len() > 128 {
                return Err(fail(Kind::TooLarge)(format!(
                    "a property set of {} members (at most 128)",
                    set.members.len()
                )));
            }
            let members = set.members.iter().map(|&r| dfa.rule_start(r)).collect::<std::result::Result<_, _>>();
            dfa.sets.push(SetStarts { members: members.map_err(fail(Kind::Invalid))?, set: set.clone() });
        }
        dfa.calls = dfa.find_calls().map_err(fail(Kind::Invalid))?;
        Ok(dfa)
    }

    /// The start state of rule `rule` (pattern `rule + 1`).
    fn rule_start(&self, rule: usize) -> std::result::Result<StateID, String> {
        regex_automata::PatternID::new(rule + 1)
            .ok()
            .filter(|p| p.as_usize() < self.nfa.pattern_len())
            .and_then(|p| self.nfa.start_pattern(p))
            .ok_or_else(|| format!("grammar references rule {rule}, which does not exist"))
    }

    /// The rule references of every NFA state with a transition on [`CALL_START`]:
    /// the digits that follow it are read through the NFA (a reference may share its
    /// first bytes with others, in a trie), up to [`CALL_END`].
    fn find_calls(&self) -> std::result::Result<HashMap<u32, Vec<Call>, foldhash::fast::FixedState>, String> {
        let mut calls: HashMap<u32, Vec<Call>, foldhash::fast::FixedState> = HashMap::default();
        for (i, state) in self.nfa.states().iter().enumerate() {
            // A marker starts with a transition on exactly its byte (wider ranges, such
            // as the unanchored search prefix, are not markers).
            let mut list = Vec::new();
            for (lo, hi, t) in transitions(state).filter(|t| t.0 == t.1 && (t.0 == CALL_START || t.0 == SET_START)) {
                let mut found = Vec::new();
                self.read_reference(t, &mut Vec::new(), &mut found)?;
                for (digits, resume) in found {
                    let number = |d: &[u8]| d.iter().fold(0usize, |n, &d| n * 4 + usize::from(d));
                    if lo == CALL_START && hi == CALL_START {
                        let start = self.rule_start(number(&digits))?;
                        list.push(Call::Rule { start, resume, tail: self.only_matches(resume) });
                        continue;
                    }
                    if digits.len() < 2 {
                        return Err("malformed property-set marker in grammar".into());
                    }
                    let set = number(&digits[1..]);
                    if set >= self.sets.len() {
                        return Err(format!("grammar names property set {set}, which does not exist"));
                    }
                    let set = set as u32;
                    list.push(match digits[0] {
                        0 => Call::Open { set, resume },
                        1 => Call::Next { set, resume },
                        _ => Call::Close { set, resume },
                    });
                }
            }
            if !list.is_empty() {
                calls.insert(i as u32, list);
            }
        }
        Ok(calls)
    }

    /// Read a marker's digits (each 0..4) from NFA state `q`, after `digits`,
    /// collecting (digits, resume state) at each [`CALL_END`]. A set marker needs its
    /// operation digit and at least one digit of its number.
    fn read_reference(
        &self,
        q: StateID,
        digits: &mut Vec<u8>,
        out: &mut Vec<(Vec<u8>, StateID)>,
    ) -> std::result::Result<(), String> {
        if digits.len() > 17 {
            return Err("malformed rule reference in grammar".into());
        }
        for end in self.epsilon_ends(q) {
            for (lo, hi, next) in transitions(self.nfa.state(end)) {
                for b in lo..=hi {
                    match b {
                        CALL_END if !digits.is_empty() => out.push((digits.clone(), next)),
                        d if (CALL_DIGIT..CALL_DIGIT + 4).contains(&d) => {
                            digits.push(d - CALL_DIGIT);
                            self.read_reference(next, digits, out)?;
                            digits.pop();
                        }
                        _ => return Err("malformed rule reference in grammar".into()),
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether every path from `q` reaches a match without consuming anything: a
    /// call resuming at `q` is in tail position.
    fn only_matches(&self, q: StateID) -> bool {
        self.epsilon_ends(q).into_iter().all(|e| matches!(self.nfa.state(e), State::Match { .. } | State::Fail))
    }

    /// The states without epsilon moves (consuming states, matches, failures) that
    /// `q` reaches through epsilon moves alone. Build-time only (the closures of DFA
    /// states, which carry stacks, are [`Dfa::close`]).
    fn epsilon_ends(&self, q: StateID) -> Vec<StateID> {
        // Most states asked about (a marker's digits, a call's resume point) consume.
        if !matches!(
            self.nfa.state(q),
            State::Union { .. } | State::BinaryUnion { .. } | State::Capture { .. } | State::Look { .. }
        ) {
            return vec![q];
        }
        let (mut stack, mut seen, mut ends) = (vec![q], std::collections::HashSet::new(), Vec::new());
        while let Some(q) = stack.pop() {
            if !seen.insert(q) {
                continue;
            }
            match self.nfa.state(q) {
                State::Union { alternates } => stack.extend(alternates.iter().rev()),
                State::BinaryUnion { alt1, alt2 } => stack.extend([*alt2, *alt1]),
                State::Capture { next, .. } | State::Look { next, .. } => stack.push(*next),
                _ => ends.push(q),
            }
        }
        ends
    }

    /// Whether some text matches both automata: a breadth-first search over pairs of
    /// states, trying every byte from each pair. Cost: up to `max_pairs` × 256 steps.
    /// `None` when the search visits more than `max_pairs` pairs without an answer (or
    /// a cache was cleared on the way, which makes state ids stale).
    pub fn intersects(&self, other: &Dfa, max_pairs: usize) -> Option<bool> {
        const CACHE_BYTES: usize = 32 << 20; // as a `Grammar`'s cache
        let (mut ca, mut cb) = (self.create_cache(CACHE_BYTES), other.create_cache(CACHE_BYTES));
        let start = (self.start(&mut ca), other.start(&mut cb));
        let mut seen = std::collections::HashSet::from([start]);
        let mut queue = std::collections::VecDeque::from([start]);
        let mut answer = Some(false);
        while let Some((a, b)) = queue.pop_front() {
            if self.is_accepting(&ca, a) && other.is_accepting(&cb, b) {
                answer = Some(true);
                break;
            }
            for byte in 0..=255u8 {
                let (na, nb) = (self.next(&mut ca, a, byte), other.next(&mut cb, b, byte));
                if na.is_dead() || nb.is_dead() {
                    continue;
                }
                if seen.insert((na, nb)) {
                    if seen.len() > max_pairs {
                        return None;
                    }
                    queue.push_back((na, nb));
                }
            }
        }
        (ca.clear_count() == 0 && cb.clear_count() == 0).then_some(answer?)
    }

    /// The byte classes: bytes of one class move every state alike.
    pub fn byte_classes(&self) -> &ByteClasses {
        &self.classes
    }

    /// An empty cache holding at most about `capacity` bytes of states.
    pub fn create_cache(&self, capacity: usize) -> Cache {
        let mut cache = Cache {
            trans: Vec::new(),
            accepting: Vec::new(),
            sets: Vec::new(),
            ids: HashMap::default(),
            stacks: Vec::new(),
            stack_ids: HashMap::default(),
            depth: Vec::new(),
            start: None,
            memory: 0,
            capacity,
            clear_count: 0,
            stamp: Vec::new(),
            generation: 0,
            seen: Default::default(),
            stack: Vec::new(),
            pairs: Vec::new(),
            set: Vec::new(),
        };
        cache.reset(self.stride);
        cache
    }

    /// The start state. Cost: one epsilon closure on first call, then a lookup.
    pub fn start(&self, cache: &mut Cache) -> DfaState {
        if let Some(s) = cache.start {
            return s;
        }
        let start = self.nfa.start_pattern(regex_automata::PatternID::ZERO).unwrap_or(self.nfa.start_anchored());
        let mut stack = std::mem::take(&mut cache.stack);
        stack.push(config(start, 0));
        self.close(cache, &mut stack);
        cache.stack = stack;
        let s = self.intern(cache);
        cache.start = Some(s);
        s
    }

    /// The state after byte `b` from `s` ([`DfaState::DEAD`] if none, or if `s` is
    /// stale). Cost: a table lookup once `s`'s row is built; building it is one pass
    /// over `s`'s NFA states plus one epsilon closure per live byte class.
    #[inline]
    pub fn next(&self, cache: &mut Cache, s: DfaState, b: u8) -> DfaState {
        let Some(base) = (s.0 as usize).checked_mul(self.stride) else { return DfaState::DEAD };
        let at = base + usize::from(self.classes.get(b));
        match cache.trans.get(at) {
            Some(&t) if t != UNKNOWN => DfaState(t),
            Some(_) => {
                let s = self.expand(cache, s);
                DfaState(cache.trans[s.0 as usize * self.stride + usize::from(self.classes.get(b))])
            }
            None => DfaState::DEAD,
        }
    }

    /// The shallowest stack of rule return points among `s`'s configurations: how
    /// many rule calls the input that led to `s` is inside, at least (0 without
    /// rules, or for a stale state).
    pub fn stack_depth(&self, cache: &Cache, s: DfaState) -> usize {
        let set = cache.sets.get(s.0 as usize);
        set.and_then(|set| set.iter().map(|&c| cache.depth.get(stack_of(c) as usize).copied().unwrap_or(0)).min())
            .map_or(0, usize::from)
    }

    /// Whether the input that led to `s` is a whole match.
    pub fn is_accepting(&self, cache: &Cache, s: DfaState) -> bool {
        cache.accepting.get(s.0 as usize).copied().unwrap_or(false)
    }

    /// Build `s`'s transition row; returns `s`'s id, which is new if the cache had to
    /// be cleared first.
    fn expand(&self, cache: &mut Cache, mut s: DfaState) -> DfaState {
        if cache.memory > cache.capacity {
            // Keep `s`: its configurations with their stacks spelled out.
            let kept: Vec<(StateID, Vec<Frame>)> =
                cache.sets[s.0 as usize].iter().map(|&c| (nfa_state(c), cache.frames(stack_of(c)))).collect();
            cache.reset(self.stride);
            cache.clear_count += 1;
            cache.set.clear();
            for (q, frames) in kept {
                let st = frames.iter().rev().try_fold(0, |st, &r| cache.push(st, r));
                if let Some(st) = st {
                    cache.set.push(config(q, st));
                }
            }
            s = self.intern(cache);
        }
        // (class, target configuration) for every NFA transition out of the state.
        let mut pairs = std::mem::take(&mut cache.pairs);
        pairs.clear();
        let set = cache.sets[s.0 as usize].clone();
        for &c in set.iter() {
            let st = stack_of(c);
            for (start, end, next) in transitions(self.nfa.state(nfa_state(c))) {
                for class in self.classes.get(start)..=self.classes.get(end) {
                    if !self.call_classes[usize::from(class)] {
                        pairs.push((class, config(next, st)));
                    }
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        let row = s.0 as usize * self.stride;
        cache.trans[row..row + self.stride].fill(DfaState::DEAD.0);
        let mut i = 0;
        let mut previous: Option<(usize, usize, DfaState)> = None;
        while i < pairs.len() {
            let class = pairs[i].0;
            let mut j = i;
            while j < pairs.len() && pairs[j].0 == class {
                j += 1;
            }
            // Neighbouring classes often share their targets (all of plain text
            // inside a string): reuse the last closure when they do.
            let same = previous.is_some_and(|(pi, pj, _)| {
                pj - pi == j - i && pairs[pi..pj].iter().zip(&pairs[i..j]).all(|(a, b)| a.1 == b.1)
            });
            let target = match previous {
                Some((_, _, t)) if same => t,
                _ => {
                    let mut stack = std::mem::take(&mut cache.stack);
                    stack.extend(pairs[i..j].iter().map(|p| p.1));
                    self.close(cache, &mut stack);
                    cache.stack = stack;
                    self.intern(cache)
                }
            };
            cache.trans[row + usize::from(class)] = target.0;
            previous = Some((i, j, target));
            i = j;
        }
        cache.pairs = pairs;
        s
    }

    /// Set `cache.set` to the epsilon closure of `stack`'s configurations (consuming
    /// states and matches with an empty stack), entering rules at references and
    /// returning from them at their matches.
    fn close(&self, cache: &mut Cache, stack: &mut Vec<Config>) {
        cache.set.clear();
        cache.begin_closure(self.nfa.states().len());
        while let Some(c) = stack.pop() {
            if !cache.first_visit(c) {
                continue;
            }
            let (q, st) = (nfa_state(c), stack_of(c));
            let state = self.nfa.state(q);
            match state {
                State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) => {
                    cache.set.push(c);
                    for call in self.calls.get(&q.as_u32()).into_iter().flatten() {
                        self.follow(cache, *call, st, stack);
                    }
                }
                State::Match { .. } if st == 0 => cache.set.push(c),
                State::Match { .. } => {
                    // A set left open when its rule matched leads nowhere (the
                    // grammar closes every set it opens).
                    if let (parent, Frame::Return(resume)) = cache.stacks[st as usize] {
                        stack.push(config(resume, parent));
                    }
                }
                State::Union { alternates } => stack.extend(alternates.iter().rev().map(|&n| config(n, st))),
                State::BinaryUnion { alt1, alt2 } => stack.extend([config(*alt2, st), config(*alt1, st)]),
                State::Capture { next, .. } => stack.push(config(*next, st)),
                // Look-around is refused at build time; `Fail` matches nothing.
                State::Look { .. } | State::Fail => {}
            }
        }
    }

    /// Push the configurations marker `call` leads to from stack `st`.
    fn follow(&self, cache: &mut Cache, call: Call, st: u32, stack: &mut Vec<Config>) {
        match call {
            Call::Rule { start, resume, tail } => {
                let inner = if tail { Some(st) } else { cache.push(st, Frame::Return(resume)) };
                if let Some(inner) = inner {
                    stack.push(config(start, inner));
                }
            }
            Call::Open { set, resume } => {
                if let Some(inner) = cache.push(st, Frame::Set { set, seen: 0 }) {
                    stack.push(config(resume, inner));
                }
            }
            Call::Next { set, resume } => {
                let Some((parent, seen)) = cache.top_set(st, set) else { return };
                for (i, &start) in self.sets[set as usize].members.iter().enumerate() {
                    if seen & 1 << i != 0 {
                        continue;
                    }
                    let marked = cache.push(parent, Frame::Set { set, seen: seen | 1 << i });
                    if let Some(inner) = marked.and_then(|m| cache.push(m, Frame::Return(resume))) {
                        stack.push(config(start, inner));
                    }
                }
            }
            Call::Close { set, resume } => {
                if let Some((parent, seen)) = cache.top_set(st, set) {
                    if self.sets[set as usize].set.may_close(seen) {
                        stack.push(config(resume, parent));
                    }
                }
            }
        }
    }

    /// The state for `cache.set`, created if new.
    fn intern(&self, cache: &mut Cache) -> DfaState {
        if cache.set.is_empty() {
            return DfaState::DEAD;
        }
        cache.set.sort_unstable();
        if let Some(&id) = cache.ids.get(cache.set.as_slice()) {
            return DfaState(id);
        }
        let id = cache.sets.len() as u32;
        let set: Arc<[Config]> = cache.set.as_slice().into();
        let accepting = set.iter().any(|&c| matches!(self.nfa.state(nfa_state(c)), State::Match { .. }));
        cache.memory += self.stride * 4 + set.len() * 8 + 96;
        cache.sets.push(set.clone());
        cache.ids.insert(set, id);
        cache.accepting.push(accepting);
        cache.trans.resize(cache.trans.len() + self.stride, UNKNOWN);
        DfaState(id)
    }
}

/// The byte transitions of an NFA state as `(first, last, next)`.
fn transitions(state: &State) -> impl Iterator<Item = (u8, u8, StateID)> + '_ {
    let (range, sparse, dense) = match state {
        State::ByteRange { trans } => (Some((trans.start, trans.end, trans.next)), &[][..], None),
        State::Sparse(s) => (None, &s.transitions[..], None),
        State::Dense(d) => (None, &[][..], Some(d)),
        _ => (None, &[][..], None),
    };
    range
        .into_iter()
        .chain(sparse.iter().map(|t| (t.start, t.end, t.next)))
        .chain(dense.into_iter().flat_map(|d| (0..=255u8).filter_map(move |b| d.matches_byte(b).map(|n| (b, b, n)))))
}

/// The states of a [`Dfa`] built so far, and scratch space for building more. One per
/// matcher; not shared between threads.
pub struct Cache {
    /// `stride` entries per state: the next state's id, or [`UNKNOWN`] before the row
    /// is expanded.
    trans: Vec<u32>,
    accepting: Vec<bool>,
    /// The configurations of each DFA state, sorted.
    sets: Vec<Arc<[Config]>>,
    ids: HashMap<Arc<[Config]>, u32, foldhash::fast::FixedState>,
    /// Interned stacks: `(parent, top frame)`; 0 is empty.
    stacks: Vec<(u32, Frame)>,
    stack_ids: HashMap<(u32, Frame), u32, foldhash::fast::FixedState>,
    depth: Vec<u16>,
    start: Option<DfaState>,
    memory: usize,
    capacity: usize,
    clear_count: usize,
    // Scratch for closures: a generation stamp per NFA state (configurations with an
    // empty stack), a set for the others, the DFS stack, the (class, target) pairs of
    // a row and the set being built.
    stamp: Vec<u32>,
    generation: u32,
    seen: std::collections::HashSet<Config, foldhash::fast::FixedState>,
    stack: Vec<Config>,
    pairs: Vec<(u8, Config)>,
    set: Vec<Config>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("states", &self.sets.len())
            .field("memory", &self.memory)
            .field("clear_count", &self.clear_count)
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// How many times the cache was cleared: state ids from before a clear are stale.
    pub fn clear_count(&self) -> usize {
        self.clear_count
    }

    /// Drop every state but the dead one, and every stack.
    fn reset(&mut self, stride: usize) {
        self.trans.clear();
        self.trans.resize(stride, DfaState::DEAD.0);
        self.accepting.clear();
        self.accepting.push(false);
        self.sets.clear();
        self.sets.push(Arc::from(&[][..]));
        self.ids.clear();
        self.stacks.clear();
        self.stacks.push((0, Frame::Return(StateID::ZERO)));
        self.stack_ids.clear();
        self.depth.clear();
        self.depth.push(0);
        self.start = None;
        self.memory = stride * 4;
    }

    /// The stack `st` with `frame` pushed, or `None` past [`MAX_STACK`].
    fn push(&mut self, st: u32, frame: Frame) -> Option<u32> {
        if let Some(&id) = self.stack_ids.get(&(st, frame)) {
            return Some(id);
        }
        let depth = self.depth[st as usize] + 1;
        if usize::from(depth) > MAX_STACK {
            return None;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push((st, frame));
        self.depth.push(depth);
        self.stack_ids.insert((st, frame), id);
        self.memory += 32;
        Some(id)
    }

    /// `(parent stack, members written)` when stack `st`'s top frame is property set
    /// `set` (a grammar opens a set before its *next* and *close* markers).
    fn top_set(&self, st: u32, set: u32) -> Option<(u32, u128)> {
        match self.stacks[st as usize] {
            (parent, Frame::Set { set: top, seen }) if st != 0 && top == set => Some((parent, seen)),
            _ => None,
        }
    }

    /// The frames of stack `st`, innermost first.
    fn frames(&self, mut st: u32) -> Vec<Frame> {
        let mut out = Vec::new();
        while st != 0 {
            let (parent, frame) = self.stacks[st as usize];
            out.push(frame);
            st = parent;
        }
        out
    }

    fn begin_closure(&mut self, nfa_states: usize) {
        if self.stamp.len() < nfa_states {
            self.stamp.resize(nfa_states, 0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // The stamps wrapped around: forget them all.
            self.stamp.fill(0);
            self.generation = 1;
        }
        if !self.seen.is_empty() {
            self.seen.clear();
        }
    }

    /// Whether configuration `c` is met for the first time in this closure.
    fn first_visit(&mut self, c: Config) -> bool {
        if stack_of(c) == 0 {
            let seen = &mut self.stamp[nfa_state(c).as_usize()];
            let first = *seen != self.generation;
            *seen = self.generation;
            first
        } else {
            self.seen.insert(c)
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::{Cache, Dfa, DfaState};
    use crate::grammar::regex::Json;
    use crate::grammar::rules::Rules;
    use crate::grammar::schema::Mode;
    use crate::grammar::Grammar;

    #[test]
    fn module_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::dfa::Dfa;
        let dfa = Dfa::new("ab+", 1 << 20)?;
        let mut cache = dfa.create_cache(1 << 20);
        let mut s = dfa.start(&mut cache);
        for &b in b"abb" {
            s = dfa.next(&mut cache, s, b);
        }
        assert!(dfa.is_accepting(&cache, s));
        assert!(dfa.next(&mut cache, s, b'a').is_dead());
        Ok(())
    }

    #[test]
    fn with_rules_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::dfa::Dfa;
        use crate::grammar::rules::Rules;
        // `item` once, called twice.
        let main = format!(r"\[(?:{0}(?:,{0})*)?\]", Rules::reference(0));
        let dfa = Dfa::with_rules(&main, &["[0-9]+|x".to_string()], 1 << 20)?;
        let mut cache = dfa.create_cache(1 << 20);
        let run = |cache: &mut _, text: &[u8]| {
            let s = text.iter().fold(dfa.start(cache), |s, &b| dfa.next(cache, s, b));
            dfa.is_accepting(cache, s)
        };
        assert!(run(&mut cache, b"[12,x,3]"));
        assert!(!run(&mut cache, b"[12,,3]"));
        Ok(())
    }

    #[test]
    fn from_rules_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::dfa::Dfa;
        use crate::grammar::regex::{to_rules, Json};
        use crate::grammar::rules::Rules;
        use crate::grammar::schema::{compile_shared, Mode, Objects};
        let schema = serde_json::json!({
            "type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}
        });
        let mut rules = Rules::new().any_order(true);
        let main = to_rules(&compile_shared(&schema, Mode::Strict, Objects::Open)?, &Json, &mut rules);
        let dfa = Dfa::from_rules(&main, &rules, 1 << 20)?;
        let mut cache = dfa.create_cache(1 << 20);
        let mut run = |text: &[u8]| {
            let s = text.iter().fold(dfa.start(&mut cache), |s, &b| dfa.next(&mut cache, s, b));
            dfa.is_accepting(&cache, s)
        };
        assert!(run(br#"{"c":3,"a":1}"#));
        assert!(!run(br#"{"c":3,"b":2}"#)); // `a` is required
        assert!(!run(br#"{"a":1,"a":1}"#)); // each at most once
        Ok(())
    }

    /// One schema of `tests/fixtures/schema_corpus.jsonl`: its name, the schema, and the
    /// instances it holds (valid and invalid together: the test compares two automata).
    #[derive(Clone)]
    struct CorpusSchema {
        name: String,
        schema: serde_json::Value,
        valid: Vec<String>,
        invalid: Vec<String>,
    }

    fn corpus() -> Vec<CorpusSchema> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_corpus.jsonl");
        let text = std::fs::read_to_string(path).expect("tests/fixtures/schema_corpus.jsonl");
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect()
        };
        text.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON line"))
            .map(|v| CorpusSchema {
                name: v["name"].as_str().unwrap_or_default().to_string(),
                schema: v["schema"].clone(),
                valid: strings(&v["valid"]),
                invalid: strings(&v["invalid"]),
            })
            .collect()
    }

    /// The grammar's lazy DFA (`grammar::dfa`), with its shared rules, against
    /// regex-automata's PikeVM, which simulates the one plain regex the rules stand for
    /// without determinizing: on every corpus schema, for
    /// the corpus instances, random walks through the DFA and byte-level mutations of
    /// both, the two agree on every whole match. A DFA whose cache holds nothing (cleared
    /// before every new row) must agree too.
    #[test]
    fn the_lazy_dfa_agrees_with_an_nfa_simulation_and_survives_cache_clears() {
        use regex_automata::nfa::thompson::pikevm::PikeVM;
        use regex_automata::nfa::thompson::{self, WhichCaptures};
        use regex_automata::util::syntax;

        fn run(dfa: &Dfa, cache: &mut Cache, text: &[u8]) -> bool {
            let mut s = dfa.start(cache);
            for &b in text {
                s = dfa.next(cache, s, b);
            }
            dfa.is_accepting(cache, s)
        }

        let mut rng = StdRng::seed_from_u64(5);
        let (mut checked, mut matched, mut clears, mut shared) = (0usize, 0usize, 0usize, 0usize);
        let (mut any_order_checked, mut machines) = (0, 0);
        for (e, any_order) in corpus().into_iter().flat_map(|e| [(e.clone(), false), (e, true)]) {
            // The grammar as `Grammar::from_schema` builds it (a main regex and shared
            // rules, properties in schema order or, as for open objects, in any order);
            // the PikeVM runs the one plain regex the rules stand for, where that is small
            // enough to build (any order spells every permutation).
            // Schemas that need automata (`grammar::machine`: rules that loop) have no plain
            // regex for the PikeVM; the plain compile refuses them, and only them.
            let Ok(node) = crate::grammar::schema::compile(&e.schema, Mode::Strict) else {
                Grammar::from_schema(&e.schema, Mode::Strict, &Json).unwrap();
                machines += 1;
                continue;
            };
            let mut rules = Rules::new().any_order(any_order);
            let main = crate::grammar::regex::to_rules(&node, &Json, &mut rules);
            let limit = if any_order { 1 << 16 } else { crate::grammar::schema::MAX_GRAMMAR_BYTES };
            let Some(plain) = rules.inline(&main, limit) else {
                assert!(any_order, "{}: the plain regex was built before rules existed", e.name);
                continue;
            };
            any_order_checked += usize::from(any_order);
            shared += rules.bodies().len();
            let dfa = Dfa::from_rules(&main, &rules, crate::grammar::mask::NFA_SIZE_LIMIT).unwrap();
            let (mut big, mut none) = (dfa.create_cache(1 << 30), dfa.create_cache(0));
            let vm = PikeVM::builder()
                .syntax(syntax::Config::new().utf8(false))
                .thompson(thompson::Config::new().utf8(false).which_captures(WhichCaptures::None))
                .build(&format!("^(?:{plain})$"))
                .unwrap();
            let mut vm_cache = vm.create_cache();
            let mut texts: Vec<Vec<u8>> = e.valid.iter().chain(&e.invalid).map(|t| t.as_bytes().to_vec()).collect();
            for _ in 0..8 {
                // A random walk over live bytes, stopping at random accepting points.
                let (mut s, mut text) = (dfa.start(&mut big), Vec::new());
                while text.len() < 300 && !(dfa.is_accepting(&big, s) && rng.random_bool(0.2)) {
                    let live: Vec<u8> = (0..=255u8).filter(|&b| !dfa.next(&mut big, s, b).is_dead()).collect();
                    if live.is_empty() {
                        break;
                    }
                    let b = live[rng.random_range(0..live.len())];
                    s = dfa.next(&mut big, s, b);
                    text.push(b);
                }
                texts.push(text);
            }
            for i in 0..texts.len() {
                let t = texts[i].clone();
                if t.is_empty() {
                    continue;
                }
                let at = rng.random_range(0..t.len());
                let mut replaced = t.clone();
                replaced[at] = rng.random();
                let mut inserted = t.clone();
                inserted.insert(at, rng.random());
                texts.extend([t[..at].to_vec(), replaced, inserted]);
            }
            for t in &texts {
                let want = vm.is_match(&mut vm_cache, t.as_slice());
                assert_eq!(run(&dfa, &mut big, t), want, "{}: {:?}", e.name, String::from_utf8_lossy(t));
                if !any_order {
                    let got = run(&dfa, &mut none, t);
                    assert_eq!(got, want, "{} (empty cache): {:?}", e.name, String::from_utf8_lossy(t));
                }
                checked += 1;
                matched += usize::from(want);
            }
            assert_eq!(big.clear_count(), 0);
            clears += none.clear_count();
            assert!(dfa.next(&mut big, DfaState::DEAD, b'{').is_dead());
        }
        assert!(
            checked > 10_000
                && matched > 3000
                && clears > 20_000
                && shared > 200
                && any_order_checked > 150
                && machines <= 8,
            "{checked} texts, {matched} matches, {clears} clears, {shared} rules, {any_order_checked} in any order, \
             {machines} with automata"
        );
    }
}
