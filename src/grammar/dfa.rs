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
//! States are sets of *consuming* NFA states (byte ranges) plus the match state,
//! sorted, so two paths that reach the same set share one DFA state. The regex is
//! matched whole: the search is anchored at the start and a state accepts when its
//! set holds the match state. Look-around (`^`, `$`, `\b`) is refused at build time.
//!
//! Memory is bounded: past [`Cache`]'s capacity every state is dropped and rebuilt on
//! demand ([`Cache::clear_count`] tells callers their ids went stale).
//!
//! ```
//! use toolgate::grammar::dfa::Dfa;
//! let dfa = Dfa::new("ab+", 1 << 20)?;
//! let mut cache = dfa.create_cache(1 << 20);
//! let mut s = dfa.start(&mut cache);
//! for &b in b"abb" {
//!     s = dfa.next(&mut cache, s, b);
//! }
//! assert!(dfa.is_accepting(&cache, s));
//! assert!(dfa.next(&mut cache, s, b'a').is_dead());
//! # Ok::<(), toolgate::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use regex_automata::nfa::thompson::{self, State, NFA};
use regex_automata::util::alphabet::ByteClasses;
use regex_automata::util::primitives::StateID;
use regex_automata::util::syntax;

use crate::{Error, Result};

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
}

/// Marks a row that was not expanded yet.
const UNKNOWN: u32 = u32::MAX;

/// A regex compiled to a Thompson NFA, determinized lazily into a [`Cache`].
#[derive(Debug)]
pub struct Dfa {
    nfa: NFA,
    classes: ByteClasses,
    /// Number of byte classes: the length of a transition row.
    stride: usize,
}

impl Dfa {
    /// Compile `regex` (regex-syntax, matched whole, bytes not required to be UTF-8).
    ///
    /// Cost: the NFA compile, linear in the regex's expanded size.
    ///
    /// # Errors
    /// [`Error::Schema`] if the regex does not parse, its NFA exceeds `nfa_size_limit`
    /// bytes, or it uses look-around.
    pub fn new(regex: &str, nfa_size_limit: usize) -> Result<Self> {
        let fail = |reason: String| Error::Schema { pointer: "#".into(), reason };
        let nfa = thompson::Compiler::new()
            .syntax(syntax::Config::new().utf8(false))
            .configure(
                thompson::Config::new()
                    .utf8(false)
                    .which_captures(thompson::WhichCaptures::None)
                    .nfa_size_limit(Some(nfa_size_limit)),
            )
            .build(regex)
            .map_err(|e| fail(format!("grammar does not compile: {e}")))?;
        if !nfa.look_set_any().is_empty() {
            return Err(fail("grammar uses look-around (`^`, `$`, `\\b`), which a token mask cannot follow".into()));
        }
        let classes = *nfa.byte_classes();
        // `alphabet_len` counts the end-of-input class as well.
        let stride = classes.alphabet_len() - 1;
        Ok(Self { nfa, classes, stride })
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
            start: None,
            memory: 0,
            capacity,
            clear_count: 0,
            stamp: Vec::new(),
            generation: 0,
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
        cache.set.clear();
        cache.generation = cache.generation.wrapping_add(1);
        let mut stack = std::mem::take(&mut cache.stack);
        stack.push(self.nfa.start_anchored());
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

    /// Whether the input that led to `s` is a whole match.
    pub fn is_accepting(&self, cache: &Cache, s: DfaState) -> bool {
        cache.accepting.get(s.0 as usize).copied().unwrap_or(false)
    }

    /// Build `s`'s transition row; returns `s`'s id, which is new if the cache had to
    /// be cleared first.
    fn expand(&self, cache: &mut Cache, mut s: DfaState) -> DfaState {
        if cache.memory > cache.capacity {
            let set = cache.sets[s.0 as usize].clone();
            cache.reset(self.stride);
            cache.clear_count += 1;
            cache.set.clear();
            cache.set.extend_from_slice(&set);
            s = self.intern(cache);
        }
        // (class, target) for every NFA transition out of the state.
        let mut pairs = std::mem::take(&mut cache.pairs);
        pairs.clear();
        let set = cache.sets[s.0 as usize].clone();
        for &q in set.iter() {
            let mut span = |start: u8, end: u8, next: StateID| {
                for c in self.classes.get(start)..=self.classes.get(end) {
                    pairs.push((c, next.as_u32()));
                }
            };
            match self.nfa.state(StateID::new_unchecked(q as usize)) {
                State::ByteRange { trans } => span(trans.start, trans.end, trans.next),
                State::Sparse(sparse) => {
                    for t in sparse.transitions.iter() {
                        span(t.start, t.end, t.next);
                    }
                }
                State::Dense(dense) => {
                    for b in 0..=255u8 {
                        if let Some(next) = dense.matches_byte(b) {
                            span(b, b, next);
                        }
                    }
                }
                _ => {}
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
                    cache.set.clear();
                    cache.generation = cache.generation.wrapping_add(1);
                    let mut stack = std::mem::take(&mut cache.stack);
                    stack.extend(pairs[i..j].iter().map(|p| StateID::new_unchecked(p.1 as usize)));
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

    /// Add the epsilon closure of `stack`'s NFA states to `cache.set` (consuming
    /// states and the match state only), skipping states already stamped with the
    /// current generation.
    fn close(&self, cache: &mut Cache, stack: &mut Vec<StateID>) {
        if cache.stamp.len() < self.nfa.states().len() {
            cache.stamp.resize(self.nfa.states().len(), 0);
        }
        if cache.generation == 0 {
            // The stamps wrapped around: forget them all.
            cache.stamp.fill(0);
            cache.generation = 1;
        }
        while let Some(q) = stack.pop() {
            let seen = &mut cache.stamp[q.as_usize()];
            if *seen == cache.generation {
                continue;
            }
            *seen = cache.generation;
            match self.nfa.state(q) {
                State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) | State::Match { .. } => {
                    cache.set.push(q.as_u32())
                }
                State::Union { alternates } => stack.extend(alternates.iter().rev()),
                State::BinaryUnion { alt1, alt2 } => stack.extend([*alt2, *alt1]),
                State::Capture { next, .. } => stack.push(*next),
                // Look-around is refused at build time; `Fail` matches nothing.
                State::Look { .. } | State::Fail => {}
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
        let set: Arc<[u32]> = cache.set.as_slice().into();
        let accepting =
            set.iter().any(|&q| matches!(self.nfa.state(StateID::new_unchecked(q as usize)), State::Match { .. }));
        cache.memory += self.stride * 4 + set.len() * 4 + 96;
        cache.sets.push(set.clone());
        cache.ids.insert(set, id);
        cache.accepting.push(accepting);
        cache.trans.resize(cache.trans.len() + self.stride, UNKNOWN);
        DfaState(id)
    }
}

/// The states of a [`Dfa`] built so far, and scratch space for building more. One per
/// matcher; not shared between threads.
pub struct Cache {
    /// `stride` entries per state: the next state's id, or [`UNKNOWN`] before the row
    /// is expanded.
    trans: Vec<u32>,
    accepting: Vec<bool>,
    /// The NFA states of each DFA state, sorted.
    sets: Vec<Arc<[u32]>>,
    ids: HashMap<Arc<[u32]>, u32, foldhash::fast::FixedState>,
    start: Option<DfaState>,
    memory: usize,
    capacity: usize,
    clear_count: usize,
    // Scratch for closures: a generation stamp per NFA state, the DFS stack, the
    // (class, target) pairs of a row and the set being built.
    stamp: Vec<u32>,
    generation: u32,
    stack: Vec<StateID>,
    pairs: Vec<(u8, u32)>,
    set: Vec<u32>,
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

    /// Number of DFA states built (the dead state included).
    pub fn states(&self) -> usize {
        self.sets.len()
    }

    /// Approximate bytes held by the states.
    pub fn memory_usage(&self) -> usize {
        self.memory
    }

    /// Drop every state but the dead one.
    fn reset(&mut self, stride: usize) {
        self.trans.clear();
        self.trans.resize(stride, DfaState::DEAD.0);
        self.accepting.clear();
        self.accepting.push(false);
        self.sets.clear();
        self.sets.push(Arc::from(&[][..]));
        self.ids.clear();
        self.start = None;
        self.memory = stride * 4;
    }
}
