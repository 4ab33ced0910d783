//! A model's vocabulary as the mask computation reads it: every token's bytes in a
//! flat, pre-order trie, plus the **plain-text slices** that let a mask inside a
//! string skip most of the vocabulary.
//!
//! A token is *plain text* when its bytes are valid UTF-8 with no control character
//! (U+0000–U+001F), no `"` and no `\` — text that can stand inside a JSON string as
//! it is. Most of a vocabulary is plain (SmolLM2: 95% of 49k tokens; Gemma 3: 96% of
//! 262k). When the grammar is in a state where every plain character leads to the
//! same next state (inside a free string, every such character loops back), whether a
//! plain token of `k` characters is allowed depends only on `k`, and the allowed
//! lengths are `1..=m` for some `m` (unbounded inside a free string, the characters
//! left under a `maxLength`, 0 where a string cannot continue). The mask then takes
//! the precomputed set of plain tokens of at most `m` characters wholesale and walks
//! only the remaining tokens (the *rest* trie) byte by byte. See [`super::Matcher`].

use std::sync::Arc;

use super::token_mask::TokenMask;

/// Whether a token of these bytes can be in a mask: no `0xFF` but a control token's
/// leading mark ([`TokenVocab::from_table`]).
pub(crate) fn maskable(b: &[u8]) -> bool {
    match b {
        [SPECIAL_PREFIX, text @ ..] => !text.is_empty() && !text.contains(&SPECIAL_PREFIX),
        text => !text.contains(&SPECIAL_PREFIX),
    }
}

/// The prefix byte of a special (control) token's byte string in a vocabulary's
/// table (`crate::tokenizer`'s): `0xFF` never occurs in UTF-8, so no text can spell a
/// special token's bytes.
pub const SPECIAL_PREFIX: u8 = 0xFF;

/// A vocabulary's token byte strings, by token id: what the grammar needs of a
/// tokenizer (`crate::tokenizer`'s byte table implements it, so a vocabulary shares
/// the tokenizer's table instead of copying it).
pub trait TokenBytes: Send + Sync + std::fmt::Debug {
    /// Number of tokens.
    fn count(&self) -> usize;
    /// Bytes of token `id` (empty where a token has none, and for `id >= count()`).
    fn token(&self, id: usize) -> &[u8];
}

impl TokenBytes for Vec<Vec<u8>> {
    fn count(&self) -> usize {
        self.len()
    }
    fn token(&self, id: usize) -> &[u8] {
        self.get(id).map_or(&[], Vec::as_slice)
    }
}

/// Plain tokens longer than this many characters are walked with the rest (they are
/// rare, and each length costs one slice mask).
pub const PLAIN_MAX_CHARS: usize = 32;

/// Token byte strings in a flat pre-order trie.
///
/// Node 0 is the root (the empty prefix). A node's subtree is `nodes[i..subtree_end]`,
/// so a walk skips a dead subtree in one step; children appear in byte order. The
/// tokens ending at node `i` are `tokens[nodes[i].tok_start..nodes[i + 1].tok_start]`
/// (a sentinel node closes the list).
#[derive(Debug, Default)]
pub struct TokenTrie {
    nodes: Vec<TrieNode>,
    tokens: Vec<u32>,
    max_depth: usize,
}

/// One trie node: the byte that leads to it, its depth, its subtree's end, and where
/// its tokens start. 12 bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrieNode {
    pub(crate) subtree_end: u32,
    pub(crate) tok_start: u32,
    pub(crate) depth: u16,
    pub(crate) byte: u8,
}

impl TokenTrie {
    /// Build from `(id, bytes)` pairs (empty byte strings are skipped).
    ///
    /// Cost: a sort of the byte strings, then one pass (about 50 ms for 262k tokens).
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a [u8])>) -> Self {
        let mut sorted: Vec<(&[u8], u32)> =
            tokens.into_iter().filter(|(_, b)| !b.is_empty()).map(|(id, b)| (b, id)).collect();
        sorted.sort_unstable();
        let mut trie = Self {
            nodes: vec![TrieNode { subtree_end: 0, tok_start: 0, depth: 0, byte: 0 }],
            tokens: Vec::with_capacity(sorted.len()),
            max_depth: 0,
        };
        // `path[d]` is the node at depth `d` on the current branch.
        let mut path: Vec<u32> = vec![0];
        let mut prev: &[u8] = &[];
        for (bytes, id) in sorted {
            // Depth is stored in 16 bits; a longer token cannot be represented.
            let bytes = &bytes[..bytes.len().min(u16::MAX as usize)];
            let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            while path.len() > common + 1 {
                let done = path.pop().unwrap_or(0) as usize;
                trie.nodes[done].subtree_end = trie.nodes.len() as u32;
            }
            for (d, &b) in bytes.iter().enumerate().skip(common) {
                trie.nodes.push(TrieNode {
                    subtree_end: 0,
                    tok_start: trie.tokens.len() as u32,
                    depth: (d + 1) as u16,
                    byte: b,
                });
                path.push(trie.nodes.len() as u32 - 1);
            }
            trie.tokens.push(id);
            trie.max_depth = trie.max_depth.max(bytes.len());
            prev = bytes;
        }
        while let Some(done) = path.pop() {
            trie.nodes[done as usize].subtree_end = trie.nodes.len() as u32;
        }
        // Sentinel: closes the last node's token list.
        trie.nodes.push(TrieNode { subtree_end: 0, tok_start: trie.tokens.len() as u32, depth: 0, byte: 0 });
        trie
    }

    /// Number of nodes, root included (the sentinel is not counted).
    pub fn len(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Whether the trie holds no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Longest token length in bytes.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    pub(crate) fn nodes(&self) -> &[TrieNode] {
        &self.nodes[..self.nodes.len() - 1]
    }

    /// Tokens ending at node `i`.
    pub(crate) fn tokens_at(&self, i: usize) -> &[u32] {
        &self.tokens[self.nodes[i].tok_start as usize..self.nodes[i + 1].tok_start as usize]
    }

    /// The longest token whose bytes are a prefix of `bytes`, and its length.
    /// Cost: O(len × children scanned per level).
    pub fn longest_prefix(&self, bytes: &[u8]) -> Option<(u32, usize)> {
        let nodes = self.nodes();
        let (mut at, mut best) = (0usize, None);
        for (k, &b) in bytes.iter().enumerate() {
            let end = nodes[at].subtree_end as usize;
            let mut child = at + 1;
            while child < end && nodes[child].byte < b {
                child = nodes[child].subtree_end as usize;
            }
            if child >= end || nodes[child].byte != b {
                break;
            }
            at = child;
            if let Some(&t) = self.tokens_at(at).first() {
                best = Some((t, k + 1));
            }
        }
        best
    }
}

/// All token byte strings of a vocabulary: the full trie, the plain-text slices and
/// the trie of the rest, and the end-of-generation ids.
#[derive(Debug)]
pub struct TokenVocab {
    all: TokenTrie,
    rest: TokenTrie,
    /// `plain_upto[m - 1]`: plain tokens of at most `m` characters, `m ≤ PLAIN_MAX_CHARS`.
    plain_upto: Vec<TokenMask>,
    eog: Vec<u32>,
    bytes: Arc<dyn TokenBytes>,
}

/// Characters of `b` if it is plain text (see the module docs), else `None`.
pub fn plain_chars(b: &[u8]) -> Option<usize> {
    let s = std::str::from_utf8(b).ok()?;
    let mut n = 0;
    for c in s.chars() {
        if c < ' ' || c == '"' || c == '\\' {
            return None;
        }
        n += 1;
    }
    (n > 0).then_some(n)
}

impl TokenVocab {
    /// Build from explicit token byte strings (index = token id). Empty tokens are
    /// never allowed.
    ///
    /// Cost: as [`TokenVocab::from_table`], after packing the strings into a table.
    ///
    /// ```
    /// use toolgate::grammar::TokenVocab;
    /// let v = TokenVocab::new(vec![b"ab".to_vec(), b"\"".to_vec(), vec![]], vec![2]);
    /// assert_eq!(v.len(), 3);
    /// assert_eq!(v.plain_tokens(), 1);
    /// ```
    pub fn new(bytes: Vec<Vec<u8>>, eog: Vec<u32>) -> Self {
        Self::from_table(Arc::new(bytes), eog)
    }

    /// Build over a table of token byte strings (index = token id), shared, not
    /// copied: a tokenizer's (`Tokenizer::token_vocab` in `crate::tokenizer`).
    ///
    /// A token whose bytes hold `0xFF` other than as a control token's leading mark
    /// (`0xFF` then text: [`SPECIAL_PREFIX`]) is left out of every
    /// mask: `0xFF` never occurs in UTF-8, so no valid output holds such a token, and
    /// a byte token `<0xFF>` (SentencePiece's byte fallback) would otherwise spell a
    /// control token's mark, leaving the rest of the control token to text tokens.
    ///
    /// Cost: two trie builds and one pass to classify tokens (about 40 ms for 49k
    /// tokens, 300 ms for 262k); memory: ~12 bytes per trie node and one bit per
    /// token per plain length.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use toolgate::grammar::{Grammar, TokenVocab};
    /// let table = vec![b"{".to_vec(), b"}".to_vec(), b"ab".to_vec(), vec![0xFF], b"\xFF<q>".to_vec()];
    /// let v = TokenVocab::from_table(Arc::new(table), vec![]);
    /// assert_eq!((v.len(), v.token_bytes(2)), (5, &b"ab"[..]));
    /// // A control token `<q>` is allowed where the grammar has one; the byte 0xFF alone never.
    /// let g = Grammar::from_regex(r"(?-u:\xFF)<q>")?;
    /// let mut mask = toolgate::grammar::TokenMask::new(v.len());
    /// Arc::new(g).matcher(Arc::new(v)).fill_mask(&mut mask)?;
    /// assert!(mask.is_allowed(4) && !mask.is_allowed(3));
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn from_table(bytes: Arc<dyn TokenBytes>, eog: Vec<u32>) -> Self {
        let len = bytes.count();
        let tokens = || (0..len).map(|id| bytes.token(id)).enumerate().filter(|(_, b)| maskable(b));
        let mut plain_upto = vec![TokenMask::new(len); PLAIN_MAX_CHARS];
        let mut longest = 0;
        let mut rest = Vec::new();
        for (id, b) in tokens() {
            match plain_chars(b) {
                Some(k) if k <= PLAIN_MAX_CHARS => {
                    plain_upto[k - 1].allow(id as u32);
                    longest = longest.max(k);
                }
                _ => rest.push((id as u32, b)),
            }
        }
        plain_upto.truncate(longest);
        for m in 1..plain_upto.len() {
            let (done, next) = plain_upto.split_at_mut(m);
            next[0].union_with(&done[m - 1]);
        }
        let all = TokenTrie::new(tokens().map(|(i, b)| (i as u32, b)));
        let rest = TokenTrie::new(rest);
        Self { all, rest, plain_upto, eog, bytes }
    }

    /// Vocabulary size.
    pub fn len(&self) -> usize {
        self.bytes.count()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.count() == 0
    }

    /// Bytes of a token (empty for an unknown id).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes.token(id as usize)
    }

    /// End-of-generation tokens (allowed only where the grammar accepts).
    pub fn eog(&self) -> &[u32] {
        &self.eog
    }

    /// Number of nodes of the full trie (for diagnostics).
    pub fn trie_nodes(&self) -> usize {
        self.all.len()
    }

    /// Number of plain-text tokens handled by slices.
    pub fn plain_tokens(&self) -> usize {
        self.plain_upto.last().map_or(0, TokenMask::count)
    }

    /// The trie of every token.
    pub fn all(&self) -> &TokenTrie {
        &self.all
    }

    /// The trie of the tokens that are not in a plain slice.
    pub fn rest(&self) -> &TokenTrie {
        &self.rest
    }

    /// Plain tokens of at most `chars` characters (`1..=plain_max_chars()`).
    pub fn plain_upto(&self, chars: usize) -> Option<&TokenMask> {
        chars.checked_sub(1).and_then(|i| self.plain_upto.get(i))
    }

    /// The longest plain token handled by slices, in characters (0 if none).
    pub fn plain_max_chars(&self) -> usize {
        self.plain_upto.len()
    }
}
