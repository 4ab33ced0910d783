//! Explicit automata for languages a regex cannot write compactly.
//!
//! A `pattern` with `minLength`/`maxLength`, a `pattern` beside a `format`, or the
//! multiples of a number (`multipleOf`) within bounds are each the *intersection* of
//! simple languages. A regex has no intersection, and writing one out by hand is
//! exponential in general; automata intersect by a product. So each constraint is a
//! small on-demand [`Automaton`] (a regex's DFA, a character counter, a remainder
//! counter), their product is explored breadth-first into a [`Machine`] (a plain
//! table of states and byte-range edges, with the states that cannot reach
//! acceptance removed), and the regex stage writes the machine as one rule whose part
//! is the machine itself (a [`super::rules::Rules`] graph: the NFA gets one state per
//! machine state, with its byte ranges as edges), so the grammar's DFA walks it as it
//! walks any other part, with no rule call per byte.

use std::collections::HashMap;

use super::dfa::{Cache, Dfa};
use super::error::{BuildError, BuildErrorKind as Kind};

/// Most states a [`Machine`] may have: a product past it is refused (its rules would
/// cost more to compile than the constraint is worth).
pub const MAX_STATES: usize = 4096;

/// A deterministic automaton over bytes, asked for its transitions one at a time.
/// States are `u64`s the automaton chooses; `None` is the dead state.
pub trait Automaton {
    /// The start state (`None`: the language is empty).
    fn start(&mut self) -> Option<u64>;
    /// The state after byte `b` from `s`.
    fn next(&mut self, s: u64, b: u8) -> Option<u64>;
    /// Whether the input that led to `s` is in the language.
    fn accepts(&mut self, s: u64) -> bool;
    /// Whether the states handed out so far are still valid (an automaton with a
    /// bounded cache may have to drop them).
    fn healthy(&self) -> bool {
        true
    }
    /// Mark in `starts` each byte that begins a run of bytes this automaton treats
    /// alike (the same transition from every state); marks are only added. The
    /// default marks every byte, which is always right; a narrower answer lets
    /// [`Machine::intersect`] take one transition per run instead of one per byte.
    fn class_starts(&self, starts: &mut [bool; 256]) {
        starts.fill(true);
    }
}

/// One state of a [`Machine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineState {
    /// `(lo, hi, target)`: bytes `lo..=hi` lead to state `target`; sorted, disjoint.
    pub edges: Vec<(u8, u8, u32)>,
    /// Whether input ending here is in the language.
    pub accepting: bool,
}

/// An explicit DFA over bytes: state 0 is the start; every state can reach an
/// accepting one. No states: the empty language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The states, by number.
    pub states: Vec<MachineState>,
}

impl Machine {
    /// The product of `parts` (the intersection of their languages), explored from
    /// the start, then trimmed to the states that can reach acceptance. Bytes every
    /// part treats alike ([`Automaton::class_starts`]) are stepped once, as a run.
    ///
    /// Cost: one transition per part per byte run per product state (at most 256
    /// runs); memory linear in the states.
    ///
    /// # Errors
    /// A message when the product has more than `max_states` states, or an automaton
    /// dropped its states on the way.
    pub fn intersect(parts: &mut [Box<dyn Automaton>], max_states: usize) -> Result<Machine, BuildError> {
        let too_many = || {
            BuildError::new(
                Kind::TooLarge,
                format!("the constraints together need more than {max_states} automaton states"),
            )
        };
        let Some(start) = parts.iter_mut().map(|p| p.start()).collect::<Option<Vec<u64>>>() else {
            return Ok(Machine { states: Vec::new() });
        };
        // The byte runs every part treats alike: `(first, last)`.
        let mut starts = [false; 256];
        starts[0] = true;
        parts.iter().for_each(|p| p.class_starts(&mut starts));
        let mut runs: Vec<(u8, u8)> = Vec::new();
        for b in 0..=255u8 {
            match runs.last_mut() {
                Some(run) if !starts[usize::from(b)] => run.1 = b,
                _ => runs.push((b, b)),
            }
        }
        let mut ids: HashMap<Vec<u64>, u32> = HashMap::from([(start.clone(), 0)]);
        let mut queue = vec![start];
        let mut states = Vec::new();
        while states.len() < queue.len() {
            let here = queue[states.len()].clone();
            let accepting = parts.iter_mut().zip(&here).all(|(p, &s)| p.accepts(s));
            let mut edges: Vec<(u8, u8, u32)> = Vec::new();
            for &(b, last) in &runs {
                let Some(next) = parts.iter_mut().zip(&here).map(|(p, &s)| p.next(s, b)).collect::<Option<Vec<u64>>>()
                else {
                    continue;
                };
                let id = match ids.get(&next) {
                    Some(&id) => id,
                    None => {
                        if queue.len() >= max_states {
                            return Err(too_many());
                        }
                        let id = queue.len() as u32;
                        ids.insert(next.clone(), id);
                        queue.push(next);
                        id
                    }
                };
                push_run(&mut edges, b, last, id);
            }
            states.push(MachineState { edges, accepting });
        }
        if !parts.iter().all(|p| p.healthy()) {
            return Err(BuildError::new(Kind::TooLarge, "an automaton's state cache overflowed"));
        }
        Ok(Machine { states }.trimmed().minimized())
    }

    /// The same language with equivalent states merged (Hopcroft's partition
    /// refinement), numbered breadth-first from the start. Products are often far
    /// from minimal: a length counter past the point where a pattern's states differ,
    /// or a remainder that no longer matters.
    ///
    /// The alphabet is the byte runs on which no state's edges change target; a
    /// missing edge goes to an explicit dead state while refining.
    ///
    /// Cost: O(runs · states · log states) time, O(runs · states) memory.
    fn minimized(self) -> Machine {
        let n = self.states.len();
        if n < 2 {
            return self;
        }
        // Symbols: the runs between every edge boundary of every state.
        let mut cut = [false; 257];
        cut[0] = true;
        for s in &self.states {
            for &(lo, hi, _) in &s.edges {
                cut[usize::from(lo)] = true;
                cut[usize::from(hi) + 1] = true;
            }
        }
        let firsts: Vec<u8> = (0..256).filter(|&b| cut[b]).map(|b| b as u8).collect();
        let k = firsts.len();
        let dead = n as u32;
        // delta[s * k + a]: the target of state s on symbol a (`dead` for none).
        let mut delta = vec![dead; (n + 1) * k];
        for (s, st) in self.states.iter().enumerate() {
            let mut e = st.edges.iter().peekable();
            for (a, &b) in firsts.iter().enumerate() {
                while e.peek().is_some_and(|x| x.1 < b) {
                    e.next();
                }
                if let Some(&&(lo, hi, t)) = e.peek() {
                    if lo <= b && b <= hi {
                        delta[s * k + a] = t;
                    }
                }
            }
        }
        // Inverse edges by symbol, as lists: for symbol a and target t, the sources.
        let total = n + 1;
        let mut inv_start = vec![0u32; k * total + 1];
        for s in 0..total {
            for a in 0..k {
                inv_start[a * total + delta[s * k + a] as usize + 1] += 1;
            }
        }
        for i in 1..inv_start.len() {
            inv_start[i] += inv_start[i - 1];
        }
        let mut fill = inv_start.clone();
        let mut inv = vec![0u32; total * k];
        for s in 0..total {
            for a in 0..k {
                let slot = &mut fill[a * total + delta[s * k + a] as usize];
                inv[*slot as usize] = s as u32;
                *slot += 1;
            }
        }
        // The partition: `elems` grouped by block, `block_of` each state's block,
        // block b is elems[start[b]..end[b]].
        let accepting = |s: usize| s < n && self.states[s].accepting;
        let mut elems: Vec<u32> = (0..total as u32).filter(|&s| accepting(s as usize)).collect();
        let n_acc = elems.len();
        elems.extend((0..total as u32).filter(|&s| !accepting(s as usize)));
        let mut pos = vec![0u32; total];
        for (i, &s) in elems.iter().enumerate() {
            pos[s as usize] = i as u32;
        }
        // Block 0 the accepting states, block 1 the others. Both are non-empty: a
        // trimmed machine of two or more states accepts somewhere, and the dead state
        // does not accept.
        debug_assert!(0 < n_acc && n_acc < total);
        let (mut start, mut end) = (vec![0, n_acc as u32], vec![n_acc as u32, total as u32]);
        let mut block_of = vec![0u32; total];
        for &s in &elems[n_acc..] {
            block_of[s as usize] = 1;
        }
        // Splitters waiting: (block, symbol), and which are waiting, by block · k + symbol.
        let mut pending: Vec<(u32, u32)> =
            (0..start.len() as u32).flat_map(|b| (0..k as u32).map(move |a| (b, a))).collect();
        let mut waiting = vec![false; total * k];
        pending.iter().for_each(|&(b, a)| waiting[b as usize * k + a as usize] = true);
        let mut marked = vec![0u32; total]; // per block: how many members are marked
        let mut touched: Vec<u32> = Vec::new();
        let mut sources: Vec<u32> = Vec::new();
        while let Some((b, a)) = pending.pop() {
            waiting[b as usize * k + a as usize] = false;
            // The states with an edge on `a` into block `b`.
            sources.clear();
            for i in start[b as usize]..end[b as usize] {
                let t = elems[i as usize] as usize;
                let at = a as usize * total + t;
                sources.extend_from_slice(&inv[inv_start[at] as usize..inv_start[at + 1] as usize]);
            }
            // Mark them: move each to the front of its block.
            for &s in &sources {
                let blk = block_of[s as usize] as usize;
                let first_unmarked = start[blk] + marked[blk];
                let p = pos[s as usize];
                if p < first_unmarked {
                    continue; // already marked
                }
                let other = elems[first_unmarked as usize];
                elems.swap(p as usize, first_unmarked as usize);
                pos[other as usize] = p;
                pos[s as usize] = first_unmarked;
                if marked[blk] == 0 {
                    touched.push(blk as u32);
                }
                marked[blk] += 1;
            }
            // Split each touched block whose members were not all marked.
            for blk in touched.drain(..) {
                let blk = blk as usize;
                let m = std::mem::take(&mut marked[blk]);
                let size = end[blk] - start[blk];
                if m == size {
                    continue;
                }
                // The marked part becomes a new block. Per symbol: where `blk` waits,
                // both halves must (`blk` keeps its entry), else the smaller half
                // suffices (Hopcroft's rule).
                let new = start.len() as u32;
                start.push(start[blk]);
                end.push(start[blk] + m);
                start[blk] += m;
                for i in start[new as usize]..end[new as usize] {
                    block_of[elems[i as usize] as usize] = new;
                }
                let smaller = if m <= size - m { new } else { blk as u32 };
                for a in 0..k {
                    let add = if waiting[blk * k + a] { new } else { smaller };
                    if !std::mem::replace(&mut waiting[add as usize * k + a], true) {
                        pending.push((add, a as u32));
                    }
                }
            }
        }
        // Breadth-first from the start's block, one representative per block; the dead
        // state's block is left out (its edges were the missing ones).
        let dead_block = block_of[dead as usize];
        let mut number = vec![u32::MAX; start.len()];
        let mut order = vec![block_of[0]];
        number[block_of[0] as usize] = 0;
        let mut states = Vec::with_capacity(start.len());
        while let Some(&blk) = order.get(states.len()) {
            let rep = elems[start[blk as usize] as usize] as usize;
            let mut edges: Vec<(u8, u8, u32)> = Vec::new();
            for (a, &lo) in firsts.iter().enumerate() {
                let hi = firsts.get(a + 1).map_or(255, |&next| next - 1);
                let to = block_of[delta[rep * k + a] as usize];
                if to == dead_block {
                    continue;
                }
                if number[to as usize] == u32::MAX {
                    number[to as usize] = order.len() as u32;
                    order.push(to);
                }
                push_run(&mut edges, lo, hi, number[to as usize]);
            }
            states.push(MachineState { edges, accepting: self.states[rep].accepting });
        }
        Machine { states }
    }

    /// Only the states that can reach an accepting one, renumbered in order.
    fn trimmed(self) -> Machine {
        let n = self.states.len();
        let mut into: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (i, s) in self.states.iter().enumerate() {
            for e in &s.edges {
                into[e.2 as usize].push(i as u32);
            }
        }
        let mut live = vec![false; n];
        let mut stack: Vec<u32> = (0..n as u32).filter(|&i| self.states[i as usize].accepting).collect();
        while let Some(i) = stack.pop() {
            if !std::mem::replace(&mut live[i as usize], true) {
                stack.extend(into[i as usize].iter().copied().filter(|&j| !live[j as usize]));
            }
        }
        if n == 0 || !live[0] {
            return Machine { states: Vec::new() };
        }
        let mut number = vec![u32::MAX; n];
        let mut next = 0;
        for i in 0..n {
            if live[i] {
                number[i] = next;
                next += 1;
            }
        }
        let states = self
            .states
            .into_iter()
            .enumerate()
            .filter(|(i, _)| live[*i])
            .map(|(_, s)| MachineState {
                accepting: s.accepting,
                edges: s
                    .edges
                    .into_iter()
                    .filter(|e| live[e.2 as usize])
                    .map(|(lo, hi, t)| (lo, hi, number[t as usize]))
                    .collect(),
            })
            .collect();
        Machine { states }
    }

    /// Whether `input` is in the language. Cost: one edge search per byte.
    pub fn matches(&self, input: &[u8]) -> bool {
        let mut at = 0usize;
        if self.states.is_empty() {
            return false;
        }
        for &b in input {
            match self.states[at].edges.iter().find(|e| e.0 <= b && b <= e.1) {
                Some(e) => at = e.2 as usize,
                None => return false,
            }
        }
        self.states[at].accepting
    }
}

/// Append the edge `lo..=hi → target` to `edges` (sorted, disjoint), joined with the
/// last edge when that one ends at `lo - 1` and has the same target.
fn push_run(edges: &mut Vec<(u8, u8, u32)>, lo: u8, hi: u8, target: u32) {
    match edges.last_mut() {
        Some(e) if e.2 == target && u16::from(e.1) + 1 == u16::from(lo) => e.1 = hi,
        _ => edges.push((lo, hi, target)),
    }
}

/// The shortest and longest match of `regex` in bytes (`None` for the longest:
/// unbounded), or `None` when it does not parse or matches nothing. Cost: one parse.
pub fn byte_lengths(regex: &str) -> Option<(usize, Option<usize>)> {
    let hir = regex_syntax::ParserBuilder::new().build().parse(regex).ok()?;
    let p = hir.properties();
    Some((p.minimum_len()?, p.maximum_len()))
}

/// A regex's language (regex-syntax, matched whole), through the grammar's lazy DFA.
pub struct Pattern {
    dfa: Dfa,
    cache: Cache,
}

impl Pattern {
    /// Compile `regex`. Cost: its NFA compile.
    ///
    /// # Errors
    /// A message when the regex does not compile (see [`Dfa::new`]).
    pub fn new(regex: &str) -> Result<Self, BuildError> {
        let dfa = Dfa::new(regex, 1 << 24).map_err(BuildError::from_error)?;
        let cache = dfa.create_cache(1 << 28);
        Ok(Self { dfa, cache })
    }
}

impl Automaton for Pattern {
    fn start(&mut self) -> Option<u64> {
        let s = self.dfa.start(&mut self.cache);
        (!s.is_dead()).then(|| u64::from(s.id()))
    }
    fn next(&mut self, s: u64, b: u8) -> Option<u64> {
        let t = self.dfa.next(&mut self.cache, super::dfa::DfaState::from_id(s as u32), b);
        (!t.is_dead()).then(|| u64::from(t.id()))
    }
    fn accepts(&mut self, s: u64) -> bool {
        self.dfa.is_accepting(&self.cache, super::dfa::DfaState::from_id(s as u32))
    }
    fn healthy(&self) -> bool {
        self.cache.clear_count() == 0
    }
    fn class_starts(&self, starts: &mut [bool; 256]) {
        let classes = self.dfa.byte_classes();
        for b in 1..=255u8 {
            if classes.get(b) != classes.get(b - 1) {
                starts[usize::from(b)] = true;
            }
        }
    }
}

/// The complement of another automaton's language: every byte string it rejects.
/// Its dead state becomes an accepting sink ([`u64::MAX`], which the inner automaton
/// must never use as a state). Intersected with the strings a grammar may write (an
/// object key that avoids a `patternProperties` pattern and the declared names).
pub struct Not(pub Box<dyn Automaton>);

impl Not {
    const SINK: u64 = u64::MAX;
}

impl Automaton for Not {
    fn start(&mut self) -> Option<u64> {
        Some(self.0.start().unwrap_or(Self::SINK))
    }
    fn next(&mut self, s: u64, b: u8) -> Option<u64> {
        if s == Self::SINK {
            return Some(Self::SINK);
        }
        Some(self.0.next(s, b).unwrap_or(Self::SINK))
    }
    fn accepts(&mut self, s: u64) -> bool {
        s == Self::SINK || !self.0.accepts(s)
    }
    fn healthy(&self) -> bool {
        self.0.healthy()
    }
    fn class_starts(&self, starts: &mut [bool; 256]) {
        self.0.class_starts(starts);
    }
}

/// UTF-8 text of `min..=max` characters (a character starts at every byte that is not
/// a continuation byte). Without a maximum the count saturates at `min`.
#[derive(Debug, Clone, Copy)]
pub struct Length {
    min: usize,
    max: Option<usize>,
}

impl Length {
    /// Between `min` and `max` characters.
    pub fn new(min: usize, max: Option<usize>) -> Self {
        Self { min, max }
    }
}

impl Automaton for Length {
    fn start(&mut self) -> Option<u64> {
        Some(0)
    }
    fn next(&mut self, s: u64, b: u8) -> Option<u64> {
        if (0x80..0xC0).contains(&b) {
            return Some(s);
        }
        let n = s as usize + 1;
        match self.max {
            Some(max) if n > max => None,
            Some(_) => Some(n as u64),
            None => Some(n.min(self.min) as u64),
        }
    }
    fn class_starts(&self, starts: &mut [bool; 256]) {
        // Continuation bytes, and every other byte.
        starts[0x80] = true;
        starts[0xC0] = true;
    }
    fn accepts(&mut self, s: u64) -> bool {
        s as usize >= self.min
    }
}

/// JSON number text (`-`, digits, one `.`; no exponent) whose value is a multiple of
/// `m / 10^e`. The syntax itself is another automaton's job: this one tracks the
/// remainder of the value × 10^e modulo `m`, and refuses a non-zero digit past the
/// `e`-th decimal (the value × 10^e would not be whole).
///
/// In the integer part only the integer modulo `m / gcd(m, 10^e)` matters (a multiple
/// of that, times 10^e, is a multiple of `m`), so `multipleOf: 0.25` needs one
/// integer state, not 25, and `2.5` five.
#[derive(Debug, Clone, Copy)]
pub struct MultipleOf {
    m: u64,
    e: u32,
    /// 10^e mod m.
    scale: u64,
    /// The modulus the integer part is tracked in: m / gcd(m, 10^e).
    m_int: u64,
}

/// Largest `m` (the multiple's digits without its decimal point) accepted: the
/// remainder automaton has `m` states per position.
pub const MAX_MULTIPLE_DIGITS: u64 = 100_000;

impl MultipleOf {
    /// Multiples of `k`, given in decimal (`"0.01"`, `"2.5"`, `"7"`).
    ///
    /// # Errors
    /// A message when `k` is not a positive decimal, has more than 12 decimals, or
    /// its digits pass [`MAX_MULTIPLE_DIGITS`].
    pub fn new(k: &str) -> Result<Self, BuildError> {
        let bad = || {
            BuildError::new(
                Kind::Unsupported,
                format!("`multipleOf: {k}` is not a positive decimal the grammar can follow"),
            )
        };
        let (int, frac) = k.split_once('.').unwrap_or((k, ""));
        let frac = frac.trim_end_matches('0');
        if int.is_empty() && frac.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if frac.len() > 12 {
            return Err(bad());
        }
        let digits = format!("{int}{frac}");
        let digits = digits.trim_start_matches('0');
        let m: u64 = digits.parse().map_err(|_| bad())?;
        if m == 0 {
            return Err(bad());
        }
        if m > MAX_MULTIPLE_DIGITS {
            return Err(BuildError::new(
                Kind::TooLarge,
                format!("`multipleOf: {k}` needs more than {MAX_MULTIPLE_DIGITS} remainder states"),
            ));
        }
        let e = frac.len() as u32;
        let scale = (0..e).fold(1 % m, |acc, _| acc * 10 % m);
        // gcd(m, 10^e) = gcd(m, 10^e mod m), with gcd(m, 0) = m.
        let gcd = |mut a: u64, mut b: u64| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let m_int = m / gcd(m, scale);
        Ok(Self { m, e, scale, m_int })
    }

    // A state: bits 0..40 the remainder, then the decimals read + 1 (0: in the
    // integer part).
    fn pack(r: u64, decimals: Option<u32>) -> u64 {
        r | (u64::from(decimals.map_or(0, |d| d + 1)) << 40)
    }
    fn unpack(s: u64) -> (u64, Option<u32>) {
        let d = (s >> 40) as u32;
        (s & ((1 << 40) - 1), d.checked_sub(1))
    }
}

impl Automaton for MultipleOf {
    fn start(&mut self) -> Option<u64> {
        Some(Self::pack(0, None))
    }
    fn next(&mut self, s: u64, b: u8) -> Option<u64> {
        let (r, decimals) = Self::unpack(s);
        match (b, decimals) {
            (b'-', _) => Some(s),
            (b'.', None) => Some(Self::pack(r * self.scale % self.m, Some(0))),
            (b'0'..=b'9', None) => Some(Self::pack((r * 10 + u64::from(b - b'0')) % self.m_int, None)),
            (b'0'..=b'9', Some(j)) => {
                let d = u64::from(b - b'0');
                if j < self.e {
                    let weight = (0..self.e - j - 1).fold(1 % self.m, |acc, _| acc * 10 % self.m);
                    Some(Self::pack((r + d * weight) % self.m, Some(j + 1)))
                } else if d == 0 {
                    Some(Self::pack(r, Some(self.e)))
                } else {
                    None
                }
            }
            _ => None,
        }
    }
    fn accepts(&mut self, s: u64) -> bool {
        match Self::unpack(s) {
            (r, None) => (r * self.scale).is_multiple_of(self.m),
            (r, Some(_)) => r == 0,
        }
    }
    fn class_starts(&self, starts: &mut [bool; 256]) {
        // `-`, `.` and each digit alone; the other bytes all lead nowhere.
        for b in [b'-', b'.', b'.' + 1].into_iter().chain(b'-' + 1..=b'9' + 1) {
            starts[usize::from(b)] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Automaton, Length, Machine, MultipleOf, Not, Pattern};

    #[test]
    fn module_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::machine::{Automaton, Length, Machine, Pattern};
        // Strings of the pattern `^[a-z]+[0-9]*$` with at most 3 characters.
        let mut parts: Vec<Box<dyn Automaton>> =
            vec![Box::new(Pattern::new("[a-z]+[0-9]*")?), Box::new(Length::new(0, Some(3)))];
        let m = Machine::intersect(&mut parts, 1024)?;
        assert!(m.matches(b"ab1") && m.matches(b"a") && !m.matches(b"abcd") && !m.matches(b"1"));
        Ok(())
    }

    #[test]
    fn byte_lengths_example() {
        use crate::grammar::machine::byte_lengths;
        assert_eq!(byte_lengths("[a-z]{2,5}(?:@x)?"), Some((2, Some(7))));
        assert_eq!(byte_lengths("a+"), Some((1, None)));
    }

    #[test]
    fn not_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::machine::{Automaton, Machine, Not, Pattern};
        let mut parts: Vec<Box<dyn Automaton>> =
            vec![Box::new(Pattern::new("[a-z]+")?), Box::new(Not(Box::new(Pattern::new("a.*|name")?)))];
        let m = Machine::intersect(&mut parts, 1024)?;
        assert!(m.matches(b"names") && m.matches(b"b") && !m.matches(b"abc") && !m.matches(b"name"));
        Ok(())
    }

    #[test]
    fn new_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::machine::{Automaton, Machine, MultipleOf, Pattern};
        let mut parts: Vec<Box<dyn Automaton>> =
            vec![Box::new(Pattern::new(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")?), Box::new(MultipleOf::new("2.5")?)];
        let m = Machine::intersect(&mut parts, 1024)?;
        assert!(["0", "2.5", "-5", "7.50", "10.0"].iter().all(|x| m.matches(x.as_bytes())));
        assert!(["1", "2.25", "7.55", "2.51"].iter().all(|x| !m.matches(x.as_bytes())));
        // Multiples of 0.25: the integer part needs one remainder state, not 25 (any
        // integer times 100 is a multiple of 25), and the product is minimized: 7
        // states (start, `-`, `0`, other integers, `.`, a tenth of 2 or 7 awaiting its
        // 5, zeros only).
        let mut parts: Vec<Box<dyn Automaton>> =
            vec![Box::new(Pattern::new(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")?), Box::new(MultipleOf::new("0.25")?)];
        let m = Machine::intersect(&mut parts, 1024)?;
        assert_eq!(m.states.len(), 7);
        assert!(["0", "-3.75", "12.50", "7.2500"].iter().all(|x| m.matches(x.as_bytes())));
        assert!(["0.2", "1.05", "-0.255"].iter().all(|x| !m.matches(x.as_bytes())));
        Ok(())
    }

    /// `Machine::intersect` steps each run of bytes every part treats alike once
    /// (`Automaton::class_starts`): the machine it builds is the one stepping all 256
    /// bytes builds, state for state, for patterns with lengths, multiples and
    /// complements.
    #[test]
    fn intersect_by_byte_runs_equals_intersect_by_bytes() {
        // The same automaton without its byte classes: every byte stepped.
        struct EveryByte(Box<dyn Automaton>);
        impl Automaton for EveryByte {
            fn start(&mut self) -> Option<u64> {
                self.0.start()
            }
            fn next(&mut self, s: u64, b: u8) -> Option<u64> {
                self.0.next(s, b)
            }
            fn accepts(&mut self, s: u64) -> bool {
                self.0.accepts(s)
            }
        }
        type Parts = Vec<Box<dyn Automaton>>;
        let cases: Vec<fn() -> Parts> = vec![
            || vec![Box::new(Pattern::new("[a-z]+[0-9]*").unwrap()), Box::new(Length::new(2, Some(6)))],
            || vec![Box::new(Pattern::new(r"(?:\p{L}|-)+").unwrap()), Box::new(Length::new(3, None))],
            || {
                vec![
                    Box::new(Pattern::new(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?").unwrap()),
                    Box::new(MultipleOf::new("0.25").unwrap()),
                ]
            },
            || {
                vec![
                    Box::new(Pattern::new("[a-z_]+").unwrap()),
                    Box::new(Not(Box::new(Pattern::new("id|name|x.*").unwrap()))),
                ]
            },
            || {
                vec![
                    Box::new(Pattern::new(r"(?s:.)*").unwrap()),
                    Box::new(Length::new(0, Some(3))),
                    Box::new(Not(Box::new(Pattern::new("é.*").unwrap()))),
                ]
            },
            // Bytes a pattern does not tell apart: the runs come from `Length` alone.
            || vec![Box::new(Pattern::new(r"(?-u:[\x00-\xF6])*").unwrap()), Box::new(Length::new(1, Some(2)))],
        ];
        for (i, parts) in cases.iter().enumerate() {
            let fast = Machine::intersect(&mut parts(), 4096).unwrap();
            let mut slow: Parts = parts().into_iter().map(|p| Box::new(EveryByte(p)) as Box<dyn Automaton>).collect();
            let slow = Machine::intersect(&mut slow, 4096).unwrap();
            assert!(!fast.states.is_empty(), "case {i}");
            assert_eq!(fast, slow, "case {i}");
        }
    }
}
