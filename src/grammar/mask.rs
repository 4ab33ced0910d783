//! Regex → lazy DFA → token masks, and the [`Matcher`] that follows generation.
//!
//! Masks are computed by walking a flat trie of token byte strings through the DFA
//! (skipping a subtree at a dead state) and cached per DFA state, so a state seen
//! before costs a hash lookup. Inside strings, the plain-text slices of
//! [`TokenVocab`] replace most of the walk: the matcher first asks where *every*
//! plain character leads (one transition per byte class of the DFA, a few hundred in
//! all); when they all agree, the plain tokens are allowed by length wholesale and
//! only the rest trie (a few percent of the vocabulary) is walked. DFA states are
//! built lazily on first visit (`dfa`) in a bounded cache; if that cache is
//! ever cleared, the mask cache is dropped and the matcher's state is recomputed from
//! its committed bytes.
//!
//! A finished [`Matcher`] gives its DFA cache and masks back to its [`Grammar`], and
//! the next matcher of that grammar over the same vocabulary starts warm: with the
//! same tools on every request (the common agent case), masks are computed once per
//! DFA state for the life of the grammar, not once per request.

use std::collections::HashMap;
use std::sync::Arc;

use regex_automata::util::alphabet::ByteClasses;
use regex_syntax::utf8::Utf8Sequences;

use super::dfa::{Cache, Dfa, DfaState};
use super::part::Built;
use super::regex::{to_rules_part, Dialect};
use super::rules::Rules;
use super::schema::{check_grammar_size, compile_shared, Mode, Objects};
use super::token_mask::TokenMask;
use super::vocab::TokenTrie;
pub use super::vocab::TokenVocab;
use crate::{Error, Result};

/// Lazy-DFA cache per matcher (bytes). States beyond it are evicted and rebuilt.
pub const DFA_CACHE_BYTES: usize = 32 << 20;
pub use super::dfa::NFA_SIZE_LIMIT;

/// A compiled grammar: the lazy DFA of one regex, and the warm state finished
/// matchers left behind.
pub struct Grammar {
    dfa: Dfa,
    regex: String,
    rules: Vec<String>,
    /// One byte string per plain-character class path (see [`plain_paths`]); `None`
    /// when the DFA's byte classes are too fine for the plain-text shortcut.
    plain_paths: Option<Vec<Vec<u8>>>,
    /// One byte per byte class of the DFA (bytes of a class lead every state to the
    /// same place), each with whether its class holds that byte alone: what the
    /// searches over next bytes try ([`Matcher::completion_plan`],
    /// [`Matcher::forced_bytes`]).
    class_bytes: Box<[(u8, bool)]>,
    warm: std::sync::Mutex<Option<Warm>>,
}

/// More plain-character paths than this and the shortcut costs more than it saves.
const MAX_PLAIN_PATHS: usize = 1024;

/// Byte strings standing for every plain character (valid UTF-8, not a control
/// character, `"` or `\`): for each UTF-8 encoding range of those characters, one
/// string per combination of the DFA's byte classes along it. Bytes of one class
/// move every DFA state alike, so where these strings lead is where every plain
/// character leads. `None` past [`MAX_PLAIN_PATHS`].
fn plain_paths(classes: &ByteClasses) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for (lo, hi) in [('\u{20}', '\u{21}'), ('\u{23}', '\u{5B}'), ('\u{5D}', '\u{10FFFF}')] {
        for seq in Utf8Sequences::new(lo, hi) {
            let mut partial: Vec<Vec<u8>> = vec![Vec::new()];
            for range in seq.as_slice() {
                let mut seen = [false; 256];
                let reps: Vec<u8> = (range.start..=range.end)
                    .filter(|&b| !std::mem::replace(&mut seen[usize::from(classes.get(b))], true))
                    .collect();
                partial = partial
                    .iter()
                    .flat_map(|p| reps.iter().map(move |&b| p.iter().copied().chain([b]).collect()))
                    .collect();
                if partial.len() + out.len() > MAX_PLAIN_PATHS {
                    return None;
                }
            }
            out.extend(partial);
        }
    }
    Some(out)
}

/// A finished matcher's DFA cache and masks, for the next matcher to start from.
struct Warm {
    vocab: Arc<TokenVocab>,
    cache: Cache,
    clear_count: usize,
    masks: HashMap<DfaState, Arc<TokenMask>>,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar").field("regex_len", &self.regex.len()).finish_non_exhaustive()
    }
}

impl Grammar {
    /// Compile a regex (anchored at both ends).
    ///
    /// # Errors
    /// [`Error::Schema`] if the regex does not compile (it names the regex size).
    pub fn from_regex(regex: &str) -> Result<Self> {
        Self::from_rules(regex, &Rules::none())
    }

    /// Compile a regex that references `rules` ([`super::regex::to_rules`]).
    ///
    /// # Errors
    /// As [`Grammar::from_regex`], and for a reference to a missing rule.
    pub fn from_rules(regex: &str, rules: &Rules) -> Result<Self> {
        let dfa = Dfa::from_rules(regex, rules, NFA_SIZE_LIMIT)?;
        Ok(Self::with_dfa(dfa, regex.to_string(), rules))
    }

    /// Compile `main`, referencing `rules`, as they were built (the text of a part
    /// built as text only is parsed): what [`super::spec::Spec::compile`] calls.
    ///
    /// # Errors
    /// As [`Grammar::from_rules`].
    pub(crate) fn from_built(main: &Built, rules: &Rules) -> Result<Self> {
        let dfa = Dfa::from_built(main, rules, NFA_SIZE_LIMIT)?;
        Ok(Self::with_dfa(dfa, main.text.clone(), rules))
    }

    fn with_dfa(dfa: Dfa, regex: String, rules: &Rules) -> Self {
        let classes = dfa.byte_classes();
        let plain_paths = plain_paths(classes);
        let mut members = [0u16; 257];
        for b in 0..=255u8 {
            members[usize::from(classes.get(b))] += 1;
        }
        let class_bytes = classes
            .representatives(..)
            .filter_map(|u| u.as_u8())
            .map(|b| (b, members[usize::from(classes.get(b))] == 1))
            .collect();
        Self { dfa, regex, rules: rules.bodies().to_vec(), plain_paths, class_bytes, warm: std::sync::Mutex::new(None) }
    }

    /// Compile a JSON Schema in a dialect.
    ///
    /// Parts of the grammar used in several places (the rest of an object after each
    /// optional property, array items, nested values) are compiled once, as rules
    /// ([`super::rules::Rules`]).
    ///
    /// # Errors
    /// [`Error::Schema`] from [`compile`](super::schema::compile), for a grammar past
    /// [`MAX_GRAMMAR_BYTES`](super::schema::MAX_GRAMMAR_BYTES), or from the regex compiler.
    pub fn from_schema(schema: &serde_json::Value, mode: Mode, dialect: &dyn Dialect) -> Result<Self> {
        Self::from_schema_with(schema, mode, Objects::Closed, dialect)
    }

    /// [`Grammar::from_schema`], choosing what undeclared properties an object admits
    /// ([`Objects::Open`] is JSON Schema's reading, for `response_format` and
    /// validation-style uses; tool calls keep [`Objects::Closed`]).
    ///
    /// # Errors
    /// As [`Grammar::from_schema`].
    pub fn from_schema_with(
        schema: &serde_json::Value,
        mode: Mode,
        objects: Objects,
        dialect: &dyn Dialect,
    ) -> Result<Self> {
        let node = compile_shared(schema, mode, objects)?;
        let mut rules = Rules::new().any_order(objects == Objects::Open);
        let main = to_rules_part(&node, dialect, &mut rules);
        check_grammar_size(main.text.len() + rules.total_len())?;
        Self::from_built(&main, &rules)
    }

    /// The regex this grammar was built from (it may reference [`Grammar::rules`]).
    pub fn regex(&self) -> &str {
        &self.regex
    }

    /// The rules [`Grammar::regex`] references, by number (empty for a plain regex).
    pub fn rules(&self) -> &[String] {
        &self.rules
    }

    /// Whether `text` is a complete instance. Cost: O(len).
    pub fn matches(&self, text: &[u8]) -> bool {
        let mut cache = self.create_cache();
        match self.walk(&mut cache, text) {
            Some(s) => self.accepting(&mut cache, s),
            None => false,
        }
    }

    /// Whether `text` can be extended to an instance. Cost: O(len).
    pub fn is_prefix(&self, text: &[u8]) -> bool {
        let mut cache = self.create_cache();
        self.walk(&mut cache, text).is_some()
    }

    fn start(&self, cache: &mut Cache) -> DfaState {
        self.dfa.start(cache)
    }

    #[inline]
    fn step(&self, cache: &mut Cache, s: DfaState, b: u8) -> Option<DfaState> {
        let n = self.dfa.next(cache, s, b);
        (!n.is_dead()).then_some(n)
    }

    fn create_cache(&self) -> Cache {
        self.dfa.create_cache(DFA_CACHE_BYTES)
    }

    fn walk(&self, cache: &mut Cache, bytes: &[u8]) -> Option<DfaState> {
        let mut s = self.start(cache);
        for &b in bytes {
            s = self.step(cache, s, b)?;
        }
        Some(s)
    }

    /// Where every plain character leads from `s`: `Some(Some(next))` when all lead
    /// to the same live state, `Some(None)` when none can follow, `None` when they
    /// disagree (or the shortcut is off for this grammar).
    fn plain_step(&self, cache: &mut Cache, s: DfaState) -> Option<Option<DfaState>> {
        let mut first = None;
        for path in self.plain_paths.as_ref()? {
            let mut at = Some(s);
            for &b in path {
                at = self.step(cache, at?, b);
            }
            match first {
                None => first = Some(at),
                Some(f) if f != at => return None,
                Some(_) => {}
            }
        }
        first
    }

    /// Allow every token of `trie` that can follow from `s`.
    fn walk_trie(&self, cache: &mut Cache, trie: &TokenTrie, s: DfaState, mask: &mut TokenMask) {
        let nodes = trie.nodes();
        // `states[d]`: the DFA state after the first `d` bytes of the current branch.
        let mut states = vec![s; trie.max_depth() + 1];
        let mut i = 1;
        while i < nodes.len() {
            let node = nodes[i];
            let depth = usize::from(node.depth);
            match self.step(cache, states[depth - 1], node.byte) {
                None => i = node.subtree_end as usize,
                Some(next) => {
                    for &t in trie.tokens_at(i) {
                        mask.allow(t);
                    }
                    states[depth] = next;
                    i += 1;
                }
            }
        }
    }

    /// The mask of state `s`: plain slices plus a walk of the rest trie when every
    /// plain character moves alike, otherwise a walk of the whole trie.
    fn compute_mask(&self, cache: &mut Cache, vocab: &TokenVocab, s: DfaState) -> TokenMask {
        // The allowed plain lengths are 1..=m; find m.
        let mut at = s;
        let mut m = 0;
        let uniform = loop {
            if m == vocab.plain_max_chars() {
                break true;
            }
            match self.plain_step(cache, at) {
                None => break false,
                Some(None) => break true,
                Some(Some(next)) if next == at => {
                    m = vocab.plain_max_chars(); // a loop: every length is allowed
                    break true;
                }
                Some(Some(next)) => {
                    at = next;
                    m += 1;
                }
            }
        };
        if uniform {
            let mut mask = vocab.plain_upto(m).cloned().unwrap_or_else(|| TokenMask::new(vocab.len()));
            self.walk_trie(cache, vocab.rest(), s, &mut mask);
            mask
        } else {
            let mut mask = TokenMask::new(vocab.len());
            self.walk_trie(cache, vocab.all(), s, &mut mask);
            mask
        }
    }

    /// The mask of the token sequences that can follow `bytes`, computed one token at
    /// a time with no trie and no slices: the reference the fast path is tested
    /// against. Cost: O(total bytes of the vocabulary).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `bytes` is not a valid prefix.
    pub fn reference_mask(&self, vocab: &TokenVocab, bytes: &[u8]) -> Result<TokenMask> {
        let mut cache = self.create_cache();
        let s = self.walk(&mut cache, bytes).ok_or_else(|| Error::InvalidParameter {
            name: "bytes",
            reason: "not a valid prefix of this grammar".into(),
        })?;
        let mut mask = TokenMask::new(vocab.len());
        for id in 0..vocab.len() as u32 {
            let b = vocab.token_bytes(id);
            let maskable = !b.is_empty() && super::vocab::maskable(b);
            if maskable && b.iter().try_fold(s, |at, &x| self.step(&mut cache, at, x)).is_some() {
                mask.allow(id);
            }
        }
        Ok(mask)
    }

    fn accepting(&self, cache: &mut Cache, s: DfaState) -> bool {
        self.dfa.is_accepting(cache, s)
    }

    /// Whether some text matches both grammars: a breadth-first search over pairs of
    /// states of the two automata, trying every byte from each pair. Cost: up to
    /// `max_pairs` × 256 automaton steps. `None` when the search visits more than
    /// `max_pairs` pairs without an answer (or a lazy-DFA cache was cleared on the way).
    ///
    /// ```
    /// use toolgate::grammar::Grammar;
    /// let digits = Grammar::from_regex("[0-9]+")?;
    /// assert_eq!(digits.intersects(&Grammar::from_regex("[a-z]+")?, 4096), Some(false));
    /// assert_eq!(digits.intersects(&Grammar::from_regex("[5-7]x?")?, 4096), Some(true));
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn intersects(&self, other: &Grammar, max_pairs: usize) -> Option<bool> {
        self.dfa.intersects(&other.dfa, max_pairs)
    }

    /// A matcher that has already consumed `prefix` (bytes generated before the
    /// constraint took over, e.g. a tool-call trigger).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `prefix` is not a valid start.
    pub fn matcher_with_prefix(self: &Arc<Self>, vocab: Arc<TokenVocab>, prefix: &[u8]) -> Result<Matcher> {
        let mut m = self.matcher(vocab);
        m.state = self.walk(&mut m.cache, prefix).ok_or_else(|| Error::InvalidParameter {
            name: "prefix",
            reason: "the text so far cannot start this grammar".into(),
        })?;
        m.prefix = prefix.to_vec();
        m.bytes = prefix.to_vec();
        Ok(m)
    }

    /// Whether the grammar accepts exactly this token sequence, checked the way
    /// generation would see it: each token must be in the mask at its step, and the
    /// end must be accepting. `Err((step, reason))` names the first failing step
    /// (`step == tokens.len()` when the sequence is a valid but incomplete prefix).
    ///
    /// Cost: one mask per step (cached per DFA state, see [`Matcher`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use toolgate::grammar::{Grammar, TokenVocab};
    /// let vocab = Arc::new(TokenVocab::new(vec![b"{".to_vec(), b"}".to_vec(), b"x".to_vec()], vec![]));
    /// let g = Arc::new(Grammar::from_regex(r"\{\}")?);
    /// assert!(g.check_tokens(vocab.clone(), &[0, 1]).is_ok());
    /// assert_eq!(g.check_tokens(vocab.clone(), &[0, 2]).unwrap_err().0, 1);
    /// assert_eq!(g.check_tokens(vocab, &[0]).unwrap_err().0, 1);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn check_tokens(
        self: &Arc<Self>,
        vocab: Arc<TokenVocab>,
        tokens: &[u32],
    ) -> std::result::Result<(), (usize, String)> {
        let mut m = self.matcher(vocab.clone());
        let mut mask = TokenMask::new(vocab.len());
        for (i, &t) in tokens.iter().enumerate() {
            m.fill_mask(&mut mask).map_err(|e| (i, e.to_string()))?;
            if !mask.is_allowed(t) {
                let piece = String::from_utf8_lossy(vocab.token_bytes(t)).into_owned();
                return Err((
                    i,
                    format!("token {t} ({piece:?}) is not allowed after {:?}", String::from_utf8_lossy(m.bytes())),
                ));
            }
            m.commit(t).map_err(|e| (i, e.to_string()))?;
        }
        if m.is_accepting() {
            Ok(())
        } else {
            Err((tokens.len(), format!("ends incomplete after {:?}", String::from_utf8_lossy(m.bytes()))))
        }
    }

    /// A matcher over `vocab` at the start of the grammar. It starts warm (the DFA
    /// states and masks an earlier matcher of this grammar computed over the same
    /// vocabulary) when one has finished; otherwise cold.
    pub fn matcher(self: &Arc<Self>, vocab: Arc<TokenVocab>) -> Matcher {
        let warm = self.warm.lock().unwrap_or_else(|p| p.into_inner()).take().filter(|w| Arc::ptr_eq(&w.vocab, &vocab));
        let (mut cache, clear_count, masks) = match warm {
            Some(w) => (w.cache, w.clear_count, w.masks),
            None => {
                let cache = self.create_cache();
                let n = cache.clear_count();
                (cache, n, HashMap::new())
            }
        };
        let state = self.start(&mut cache);
        Matcher {
            grammar: self.clone(),
            vocab,
            clear_count,
            cache,
            state,
            bytes: Vec::new(),
            prefix: Vec::new(),
            tokens: Vec::new(),
            masks,
            finished: false,
        }
    }
}

/// Rule calls deeper than the current state a completion search first stays within
/// ([`Matcher::completion_plan`]).
pub const COMPLETION_EXTRA_CALLS: usize = 4;

/// Follows one generation through a grammar: which tokens may come next.
///
/// Cost: the first visit of a DFA state walks the token trie (milliseconds for a
/// 262k vocabulary inside a string); later visits are a hash lookup.
#[derive(Debug)]
pub struct Matcher {
    grammar: Arc<Grammar>,
    vocab: Arc<TokenVocab>,
    cache: Cache,
    clear_count: usize,
    state: DfaState,
    bytes: Vec<u8>,
    prefix: Vec<u8>,
    tokens: Vec<u32>,
    masks: HashMap<DfaState, Arc<TokenMask>>,
    finished: bool,
}

impl Drop for Matcher {
    fn drop(&mut self) {
        let cache = std::mem::replace(&mut self.cache, self.grammar.create_cache());
        let warm = Warm {
            vocab: self.vocab.clone(),
            cache,
            clear_count: self.clear_count,
            masks: std::mem::take(&mut self.masks),
        };
        *self.grammar.warm.lock().unwrap_or_else(|p| p.into_inner()) = Some(warm);
    }
}

impl Matcher {
    fn sync_cache(&mut self) {
        if self.cache.clear_count() != self.clear_count {
            // States were evicted: every cached id is stale.
            self.masks.clear();
            let bytes = std::mem::take(&mut self.bytes);
            self.state = self.grammar.walk(&mut self.cache, &bytes).unwrap_or(self.state);
            self.bytes = bytes;
            self.clear_count = self.cache.clear_count();
        }
    }

    fn text_mask(&mut self) -> Arc<TokenMask> {
        self.sync_cache();
        if let Some(m) = self.masks.get(&self.state) {
            return m.clone();
        }
        let start_clears = self.cache.clear_count();
        let mask = Arc::new(self.grammar.compute_mask(&mut self.cache, &self.vocab, self.state));
        if self.cache.clear_count() == start_clears {
            self.masks.insert(self.state, mask.clone());
        } else {
            self.sync_cache();
            return self.text_mask();
        }
        mask
    }

    /// Write the allowed next tokens into `out` (which must cover the vocabulary).
    /// End-of-generation tokens are allowed only when the output so far is complete.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `out` has the wrong size.
    pub fn fill_mask(&mut self, out: &mut TokenMask) -> Result<()> {
        if out.len() != self.vocab.len() {
            return Err(Error::InvalidParameter {
                name: "mask",
                reason: format!("mask covers {} tokens, vocabulary has {}", out.len(), self.vocab.len()),
            });
        }
        let m = if self.finished { Arc::new(TokenMask::new(self.vocab.len())) } else { self.text_mask() };
        out.words_mut().copy_from_slice(m.words());
        if !self.finished && self.is_accepting() {
            for &e in self.vocab.eog() {
                out.allow(e);
            }
        }
        Ok(())
    }

    /// Advance by one token.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if the grammar does not allow `token` here (the
    /// matcher is unchanged).
    pub fn commit(&mut self, token: u32) -> Result<()> {
        self.sync_cache();
        if self.vocab.eog().contains(&token) && self.is_accepting() && !self.finished {
            self.finished = true;
            self.tokens.push(token);
            return Ok(());
        }
        let bytes = self.vocab.token_bytes(token).to_vec();
        let reject = || Error::InvalidParameter {
            name: "token",
            reason: format!("token {token} is not allowed by the grammar here"),
        };
        if self.finished || bytes.is_empty() {
            return Err(reject());
        }
        let mut s = self.state;
        for &b in &bytes {
            s = self.grammar.step(&mut self.cache, s, b).ok_or_else(reject)?;
        }
        self.state = s;
        self.bytes.extend_from_slice(&bytes);
        self.tokens.push(token);
        Ok(())
    }

    /// Undo the last `n` tokens. Cost: replays the remaining bytes.
    pub fn rollback(&mut self, n: usize) {
        let keep = self.tokens.len().saturating_sub(n);
        self.tokens.truncate(keep);
        self.finished = false;
        let mut bytes = self.prefix.clone();
        for &t in &self.tokens {
            if self.vocab.eog().contains(&t) {
                self.finished = true;
            } else {
                bytes.extend_from_slice(self.vocab.token_bytes(t));
            }
        }
        self.state = self.grammar.walk(&mut self.cache, &bytes).expect("a prefix that was accepted before");
        self.bytes = bytes;
        self.clear_count = self.cache.clear_count();
    }

    /// Whether the output so far is a complete instance.
    pub fn is_accepting(&mut self) -> bool {
        self.finished || self.grammar.accepting(&mut self.cache, self.state)
    }

    /// Whether generation must stop: an end token was committed, or the output is
    /// complete and no byte can extend it.
    pub fn is_finished(&mut self) -> bool {
        self.finished || (self.is_accepting() && self.text_mask().count() == 0)
    }

    /// If exactly one token can come next (and ending is not allowed), that token:
    /// the engine appends it without sampling.
    pub fn forced_token(&mut self) -> Option<u32> {
        if self.finished || self.is_accepting() {
            return None;
        }
        let m = self.text_mask();
        if m.count() != 1 {
            return None;
        }
        let first = m.allowed().next();
        first
    }

    /// The bytes the grammar forces from here, at most `max`: while the output is not
    /// complete and exactly one byte can come next, that byte. Stops before a control
    /// token's mark (`0xFF`: a control token is forced whole, [`Matcher::forced_token`])
    /// (and any byte no UTF-8 text holds) and wherever the output could end or go two
    /// ways. Leaves the matcher as it was.
    /// What jump-forward decoding feeds the model as one chunk instead of one decode
    /// step per token.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use toolgate::grammar::{Grammar, TokenVocab};
    /// let vocab = Arc::new(TokenVocab::new((b'a'..=b'z').map(|c| vec![c]).collect(), vec![]));
    /// let g = Arc::new(Grammar::from_regex("name(x|yz)q")?);
    /// let mut m = g.matcher(vocab);
    /// assert_eq!(m.forced_bytes(64), b"name");
    /// assert_eq!(m.forced_bytes(2), b"na");
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    ///
    /// Cost: one DFA step per byte class per forced byte.
    pub fn forced_bytes(&mut self, max: usize) -> Vec<u8> {
        self.sync_cache();
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let clears = self.cache.clear_count();
        let mut s = self.state;
        while out.len() < max && !self.grammar.accepting(&mut self.cache, s) {
            let mut next = None;
            for &(b, alone) in self.grammar.class_bytes.iter() {
                if let Some(n) = self.grammar.step(&mut self.cache, s, b) {
                    if next.is_some() {
                        return out;
                    }
                    next = Some((b, alone, n));
                }
            }
            if self.cache.clear_count() != clears {
                return Vec::new(); // evicted mid-walk: the ids are stale
            }
            match next {
                // (0xF5 and up never occur in UTF-8: control-token marks and rule markers.)
                Some((b, true, n)) if b < 0xF5 => {
                    out.push(b);
                    s = n;
                }
                _ => break,
            }
        }
        out
    }

    /// The shortest way to finish from here: tokens whose bytes spell the shortest
    /// byte string that makes the output a complete instance (breadth-first over the
    /// DFA), each the longest vocabulary token that is a prefix of what remains. Empty
    /// when the output is already complete; `None` when no completion of at most
    /// `max_bytes` bytes was found within the search bound. The engine uses it to close
    /// an open call before the token budget runs out, so a constrained call is never
    /// cut off.
    ///
    /// The search first stays within [`COMPLETION_EXTRA_CALLS`] rule calls deeper
    /// than here (a value that may nest in itself opens new states at every byte that
    /// opens a container), then goes unbounded.
    ///
    /// Cost: up to two breadth-first searches over at most 65536 DFA states each (each
    /// tried with one byte per byte class of the DFA), then one walk down the token trie.
    pub fn completion_plan(&mut self, max_bytes: usize) -> Option<Vec<u32>> {
        self.sync_cache();
        if self.is_accepting() {
            return Some(Vec::new());
        }
        let depth = self.grammar.dfa.stack_depth(&self.cache, self.state);
        let path = self
            .completion_bytes(max_bytes, Some(depth + COMPLETION_EXTRA_CALLS))
            .or_else(|| self.completion_bytes(max_bytes, None))?;
        // Longest vocabulary token that is a prefix of what remains, repeatedly.
        let mut plan = Vec::new();
        let mut i = 0;
        while i < path.len() {
            let (t, len) = self.vocab.all().longest_prefix(&path[i..])?;
            plan.push(t);
            i += len;
        }
        Some(plan)
    }

    /// The bytes of the shortest completion from here (breadth-first), entering at
    /// most `max_depth` rule calls deep when given.
    fn completion_bytes(&mut self, max_bytes: usize, max_depth: Option<usize>) -> Option<Vec<u8>> {
        const MAX_STATES: usize = 1 << 16;
        self.sync_cache();
        let clears = self.cache.clear_count();
        // (state, parent index, byte, depth)
        let mut nodes: Vec<(DfaState, usize, u8, usize)> = vec![(self.state, usize::MAX, 0, 0)];
        let mut seen = std::collections::HashSet::from([self.state]);
        let mut head = 0;
        let mut goal = None;
        'bfs: while head < nodes.len() {
            let (s, _, _, depth) = nodes[head];
            if depth >= max_bytes {
                head += 1;
                continue;
            }
            for &(b, _) in self.grammar.class_bytes.iter() {
                let Some(n) = self.grammar.step(&mut self.cache, s, b) else { continue };
                if self.cache.clear_count() != clears {
                    return None; // evicted mid-search: ids are stale
                }
                if !seen.insert(n) || max_depth.is_some_and(|d| self.grammar.dfa.stack_depth(&self.cache, n) > d) {
                    continue;
                }
                nodes.push((n, head, b, depth + 1));
                if self.grammar.accepting(&mut self.cache, n) {
                    goal = Some(nodes.len() - 1);
                    break 'bfs;
                }
                if nodes.len() >= MAX_STATES {
                    return None;
                }
            }
            head += 1;
        }
        let mut at = goal?;
        let mut path = Vec::new();
        while nodes[at].1 != usize::MAX {
            path.push(nodes[at].2);
            at = nodes[at].1;
        }
        path.reverse();
        Some(path)
    }

    /// Bytes committed so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// DFA states whose masks are cached (computed by this matcher, or inherited warm
    /// from an earlier matcher of the same grammar).
    pub fn cached_states(&self) -> usize {
        self.masks.len()
    }
}
