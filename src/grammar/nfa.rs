//! Rules → one Thompson NFA (regex-automata's [`NFA`]), a pattern per rule.
//!
//! The emitters hand over each rule as a [`Built`](super::part::Built) part tree (concatenations,
//! alternations and repetitions over shared parts, leaves parsed once per table) or
//! as text. This stage compiles the trees straight into NFA states with
//! regex-automata's [`Builder`], so no regex-syntax `Hir` is made for them (making
//! one and dropping it again cost as much as the NFA itself); text rules are parsed
//! and their `Hir` compiled the same way.
//!
//! The shapes follow regex-automata's own compiler where it matters for the lazy DFA
//! that walks the NFA ([`super::dfa`]): bounded repetitions share one exit, so an
//! epsilon closure does not gather every optional copy; a Unicode class is a trie of
//! its UTF-8 byte ranges whose equal suffixes are one state. Preference order is not
//! kept (the DFA matches sets, not leftmost-first), so alternations and loops are
//! plain unions.

use std::collections::HashMap;

use regex_automata::nfa::thompson::{Builder, Transition, NFA};
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Class, Hir, HirKind};

use super::error::{BuildError, BuildErrorKind as Kind};
use super::part::{parse_rule, Graph, Part};

/// A compiled piece: its entry state and the state to patch to what follows.
#[derive(Clone, Copy)]
struct Frag {
    start: StateID,
    end: StateID,
}

/// One rule to compile: its part tree where the emitter built one, else its text.
pub(crate) enum Source<'a> {
    Part(&'a Part),
    Text(&'a str),
}

/// Compile `rules` into one NFA, pattern `i` for `rules[i]` (pattern 0 the main
/// regex), anchored, without captures, at most `size_limit` bytes of states.
///
/// Cost: linear in the parts' size (a bounded repetition copies its body once per
/// count); text rules are parsed first.
///
/// # Errors
/// [`Kind::Pattern`] when a text rule does not parse or a rule uses look-around;
/// [`Kind::TooLarge`] past `size_limit`.
pub(crate) fn compile(rules: &[Source], size_limit: usize) -> std::result::Result<NFA, BuildError> {
    let mut c = Compiler { b: Builder::new(), suffixes: HashMap::default() };
    c.b.set_utf8(false);
    c.b.set_size_limit(Some(size_limit)).map_err(too_large)?;
    let mut first = None;
    for rule in rules {
        c.b.start_pattern().map_err(too_large)?;
        let frag = match rule {
            Source::Part(p) => c.part(p)?,
            Source::Text(text) => {
                let hir = parse_rule(text).map_err(|e| {
                    // The kind alone: the error's own display quotes the whole regex.
                    let kind = match &*e {
                        regex_syntax::Error::Parse(e) => e.kind().to_string(),
                        regex_syntax::Error::Translate(e) => e.kind().to_string(),
                        _ => "error parsing regex".into(),
                    };
                    BuildError::new(Kind::Pattern, format!("grammar does not compile: error parsing regex: {kind}"))
                })?;
                c.hir(&hir)?
            }
        };
        let done = c.b.add_match().map_err(too_large)?;
        c.patch(frag.end, done)?;
        c.b.finish_pattern(frag.start).map_err(too_large)?;
        first.get_or_insert(frag.start);
    }
    let start = first.ok_or_else(|| BuildError::new(Kind::Invalid, "a grammar without a main regex"))?;
    c.b.build(start, start).map_err(too_large)
}

fn too_large(e: regex_automata::nfa::thompson::BuildError) -> BuildError {
    BuildError::new(Kind::TooLarge, format!("grammar does not compile: {e}"))
}

struct Compiler {
    b: Builder,
    /// UTF-8 trie states of the class being compiled, by their transitions: equal
    /// suffixes are one state.
    suffixes: HashMap<Vec<Transition>, StateID, foldhash::fast::FixedState>,
}

impl Compiler {
    fn patch(&mut self, from: StateID, to: StateID) -> std::result::Result<(), BuildError> {
        self.b.patch(from, to).map_err(too_large)
    }

    fn empty(&mut self) -> std::result::Result<Frag, BuildError> {
        let s = self.b.add_empty().map_err(too_large)?;
        Ok(Frag { start: s, end: s })
    }

    fn part(&mut self, p: &Part) -> std::result::Result<Frag, BuildError> {
        match p {
            Part::Bytes(b) => self.literal(b),
            Part::Hir(h, _) => self.hir(h),
            Part::Concat(ps, _) => self.concat(ps.len(), |c, i| c.part(&ps[i])),
            Part::Alternation(ps, _) => self.alternation(ps.len(), |c, i| c.part(&ps[i])),
            Part::Repetition { sub, min, max, .. } => self.repetition(*min, *max, |c| c.part(sub)),
            Part::Graph(g, _) => self.graph(g),
        }
    }

    /// An automaton: an entry state per state (made first, so edges can lead to
    /// states not compiled yet), each patched to the union of its edges and, where
    /// it accepts, the exit.
    fn graph(&mut self, g: &Graph) -> std::result::Result<Frag, BuildError> {
        let end = self.b.add_empty().map_err(too_large)?;
        if g.states.is_empty() {
            // The empty language: nothing leads to `end`.
            let fail = self.b.add_fail().map_err(too_large)?;
            return Ok(Frag { start: fail, end });
        }
        let entries = (0..g.states.len())
            .map(|_| self.b.add_empty().map_err(too_large))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let entry = |t: u32| {
            entries
                .get(t as usize)
                .copied()
                .ok_or_else(|| BuildError::new(Kind::Invalid, "graph edge to a missing state"))
        };
        for (i, state) in g.states.iter().enumerate() {
            let mut alts = Vec::with_capacity(2 + state.parts.len());
            if state.accepting {
                alts.push(end);
            }
            if !state.ranges.is_empty() {
                let trans = state
                    .ranges
                    .iter()
                    .map(|&(start, end, t)| Ok(Transition { start, end, next: entry(t)? }))
                    .collect::<std::result::Result<Vec<_>, BuildError>>()?;
                alts.push(
                    match trans.len() {
                        1 => self.b.add_range(trans[0]),
                        _ => self.b.add_sparse(trans),
                    }
                    .map_err(too_large)?,
                );
            }
            for (part, t) in &state.parts {
                let f = self.part(part)?;
                self.patch(f.end, entry(*t)?)?;
                alts.push(f.start);
            }
            let body = match alts.len() {
                0 => self.b.add_fail(),
                1 => Ok(alts[0]),
                _ => self.b.add_union(alts),
            }
            .map_err(too_large)?;
            self.patch(entries[i], body)?;
        }
        Ok(Frag { start: entries[0], end })
    }

    fn hir(&mut self, h: &Hir) -> std::result::Result<Frag, BuildError> {
        match h.kind() {
            HirKind::Empty => self.empty(),
            HirKind::Literal(lit) => self.literal(&lit.0),
            HirKind::Class(Class::Bytes(class)) => {
                let end = self.b.add_empty().map_err(too_large)?;
                let trans = class.iter().map(|r| Transition { start: r.start(), end: r.end(), next: end }).collect();
                Ok(Frag { start: self.b.add_sparse(trans).map_err(too_large)?, end })
            }
            HirKind::Class(Class::Unicode(class)) => self.unicode_class(class),
            HirKind::Look(_) => Err(BuildError::new(
                Kind::Pattern,
                "grammar uses look-around (`^`, `$`, `\\b`), which a token mask cannot follow",
            )),
            HirKind::Repetition(r) => self.repetition(r.min, r.max, |c| c.hir(&r.sub)),
            HirKind::Capture(cap) => self.hir(&cap.sub),
            HirKind::Concat(hs) => self.concat(hs.len(), |c, i| c.hir(&hs[i])),
            HirKind::Alternation(hs) => self.alternation(hs.len(), |c, i| c.hir(&hs[i])),
        }
    }

    /// The bytes of `lit` in a chain; the last byte's state is the end (patching it
    /// sets where it leads).
    fn literal(&mut self, lit: &[u8]) -> std::result::Result<Frag, BuildError> {
        let Some((&first, rest)) = lit.split_first() else { return self.empty() };
        let start =
            self.b.add_range(Transition { start: first, end: first, next: StateID::ZERO }).map_err(too_large)?;
        let mut end = start;
        for &byte in rest {
            let s = self.b.add_range(Transition { start: byte, end: byte, next: StateID::ZERO }).map_err(too_large)?;
            self.patch(end, s)?;
            end = s;
        }
        Ok(Frag { start, end })
    }

    /// Pieces `0..n` one after the other.
    fn concat(
        &mut self,
        n: usize,
        mut piece: impl FnMut(&mut Self, usize) -> std::result::Result<Frag, BuildError>,
    ) -> std::result::Result<Frag, BuildError> {
        if n == 0 {
            return self.empty();
        }
        let first = piece(self, 0)?;
        let mut end = first.end;
        for i in 1..n {
            let next = piece(self, i)?;
            self.patch(end, next.start)?;
            end = next.end;
        }
        Ok(Frag { start: first.start, end })
    }

    /// One of pieces `0..n` (none: nothing matches).
    fn alternation(
        &mut self,
        n: usize,
        mut piece: impl FnMut(&mut Self, usize) -> std::result::Result<Frag, BuildError>,
    ) -> std::result::Result<Frag, BuildError> {
        if n == 0 {
            let fail = self.b.add_fail().map_err(too_large)?;
            let end = self.b.add_empty().map_err(too_large)?;
            return Ok(Frag { start: fail, end });
        }
        if n == 1 {
            return piece(self, 0);
        }
        let union = self.b.add_union(Vec::with_capacity(n)).map_err(too_large)?;
        let end = self.b.add_empty().map_err(too_large)?;
        for i in 0..n {
            let f = piece(self, i)?;
            self.patch(union, f.start)?;
            self.patch(f.end, end)?;
        }
        Ok(Frag { start: union, end })
    }

    /// The body `min..=max` times (`max` `None`: unbounded). Optional copies share
    /// one exit, so the closure at each copy holds that copy and the exit only.
    fn repetition(
        &mut self,
        min: u32,
        max: Option<u32>,
        mut body: impl FnMut(&mut Self) -> std::result::Result<Frag, BuildError>,
    ) -> std::result::Result<Frag, BuildError> {
        let prefix = self.concat(min as usize, |c, _| body(c))?;
        match max {
            Some(max) if max <= min => Ok(prefix),
            Some(max) => {
                let exit = self.b.add_empty().map_err(too_large)?;
                let mut end = prefix.end;
                for _ in min..max {
                    let union = self.b.add_union(Vec::with_capacity(2)).map_err(too_large)?;
                    self.patch(end, union)?;
                    self.patch(union, exit)?;
                    let copy = body(self)?;
                    self.patch(union, copy.start)?;
                    end = copy.end;
                }
                self.patch(end, exit)?;
                Ok(Frag { start: prefix.start, end: exit })
            }
            None => {
                // A loop: the union enters the body or leaves (patched later).
                let union = self.b.add_union(Vec::with_capacity(2)).map_err(too_large)?;
                let copy = body(self)?;
                self.patch(union, copy.start)?;
                self.patch(copy.end, union)?;
                self.patch(prefix.end, union)?;
                Ok(Frag { start: prefix.start, end: union })
            }
        }
    }

    /// A Unicode class as the trie of its UTF-8 sequences (in order, so equal
    /// leading ranges are one node), each node one sparse state and equal suffixes
    /// one state.
    fn unicode_class(&mut self, class: &regex_syntax::hir::ClassUnicode) -> std::result::Result<Frag, BuildError> {
        // Trie nodes: (lo, hi, child node or `None` for the end).
        let mut nodes: Vec<Vec<(u8, u8, Option<usize>)>> = vec![Vec::new()];
        for range in class.iter() {
            for seq in regex_syntax::utf8::Utf8Sequences::new(range.start(), range.end()) {
                let bytes = seq.as_slice();
                let mut node = 0;
                for (k, r) in bytes.iter().enumerate() {
                    let last = k + 1 == bytes.len();
                    let shared = nodes[node]
                        .last()
                        .filter(|&&(lo, hi, child)| lo == r.start && hi == r.end && child.is_some() && !last);
                    node = match shared {
                        Some(&(_, _, Some(child))) => child,
                        _ => {
                            let child = (!last).then(|| {
                                nodes.push(Vec::new());
                                nodes.len() - 1
                            });
                            nodes[node].push((r.start, r.end, child));
                            match child {
                                Some(c) => c,
                                None => break,
                            }
                        }
                    };
                }
            }
        }
        let end = self.b.add_empty().map_err(too_large)?;
        self.suffixes.clear();
        let start = self.trie_state(&nodes, 0, end)?;
        Ok(Frag { start, end })
    }

    fn trie_state(
        &mut self,
        nodes: &[Vec<(u8, u8, Option<usize>)>],
        node: usize,
        end: StateID,
    ) -> std::result::Result<StateID, BuildError> {
        let mut trans = Vec::with_capacity(nodes[node].len());
        for &(lo, hi, child) in &nodes[node] {
            let next = match child {
                Some(c) => self.trie_state(nodes, c, end)?,
                None => end,
            };
            trans.push(Transition { start: lo, end: hi, next });
        }
        if let Some(&s) = self.suffixes.get(&trans) {
            return Ok(s);
        }
        // Sparse states need sorted, disjoint ranges; a node whose sequences overlap
        // becomes a union of single ranges.
        let disjoint = trans.windows(2).all(|w| w[0].end < w[1].start);
        let s = match (trans.len(), disjoint) {
            (1, _) => self.b.add_range(trans[0]).map_err(too_large)?,
            (_, true) => self.b.add_sparse(trans.clone()).map_err(too_large)?,
            (_, false) => {
                let alternates = trans
                    .iter()
                    .map(|&t| self.b.add_range(t).map_err(too_large))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                self.b.add_union(alternates).map_err(too_large)?
            }
        };
        self.suffixes.insert(trans, s);
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::{dfa::Dfa, rules::Rules};
        let mut rules = Rules::new();
        let word = rules.leaf("[a-zé]+".into());
        let r = rules.share_part_always(word);
        let dfa = Dfa::from_rules(&format!("{}-{}", r.text, r.text), &rules, 1 << 20)?;
        let mut cache = dfa.create_cache(1 << 20);
        let end = "été-ab".bytes().fold(dfa.start(&mut cache), |s, b| dfa.next(&mut cache, s, b));
        assert!(dfa.is_accepting(&cache, end));
        // Look-around is refused: a token mask cannot follow it.
        let err = Dfa::new(r"a\b", 1 << 20).unwrap_err().to_string();
        assert!(err.contains("look-around"), "{err}");
        Ok(())
    }
}
