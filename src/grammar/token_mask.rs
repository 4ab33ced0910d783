//! The set of tokens a constraint allows at one step: a bitset over the vocabulary,
//! what [`super::Matcher`] computes and the sampler applies to the logits.

/// A set of allowed token ids (a bitset over the vocabulary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    bits: Vec<u64>,
    len: usize,
}

impl TokenMask {
    /// An empty mask (nothing allowed) over `vocab` tokens.
    pub fn new(vocab: usize) -> Self {
        Self { bits: vec![0; vocab.div_ceil(64)], len: vocab }
    }

    /// A mask allowing every token.
    pub fn all(vocab: usize) -> Self {
        let mut m = Self { bits: vec![u64::MAX; vocab.div_ceil(64)], len: vocab };
        m.clear_tail();
        m
    }

    fn clear_tail(&mut self) {
        let rem = self.len % 64;
        if rem != 0 {
            if let Some(last) = self.bits.last_mut() {
                *last &= (1u64 << rem) - 1;
            }
        }
    }

    /// Allow token `id` (ignored if out of range).
    pub fn allow(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.bits[id as usize / 64] |= 1 << (id % 64);
        }
    }

    /// Disallow token `id`.
    pub fn forbid(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.bits[id as usize / 64] &= !(1 << (id % 64));
        }
    }

    /// Whether `id` is allowed.
    pub fn is_allowed(&self, id: u32) -> bool {
        (id as usize) < self.len && self.bits[id as usize / 64] & (1 << (id % 64)) != 0
    }

    /// The allowed token ids, ascending.
    ///
    /// Cost: one pass over the words (`len / 64`), plus one step per allowed token.
    ///
    /// ```
    /// use toolgate::grammar::TokenMask;
    /// let mut m = TokenMask::new(130);
    /// for id in [129, 3, 64] {
    ///     m.allow(id);
    /// }
    /// assert_eq!(m.allowed().collect::<Vec<_>>(), [3, 64, 129]);
    /// ```
    pub fn allowed(&self) -> impl Iterator<Item = u32> + '_ {
        self.bits.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let id = (w * 64) as u32 + bits.trailing_zeros();
                    bits &= bits - 1;
                    id
                })
            })
        })
    }

    /// Number of allowed tokens.
    pub fn count(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Vocabulary size the mask covers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mask covers no tokens at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw words, 64 tokens each, for kernels.
    pub fn words(&self) -> &[u64] {
        &self.bits
    }

    /// Mutable raw words; bits past `len()` must stay zero.
    pub fn words_mut(&mut self) -> &mut [u64] {
        &mut self.bits
    }

    /// Allow every token `other` allows (`other` must cover the same vocabulary;
    /// extra words are ignored). Cost: one OR per 64 tokens.
    ///
    /// ```
    /// use toolgate::grammar::TokenMask;
    /// let (mut a, mut b) = (TokenMask::new(70), TokenMask::new(70));
    /// a.allow(1);
    /// b.allow(69);
    /// a.union_with(&b);
    /// assert!(a.is_allowed(1) && a.is_allowed(69) && a.count() == 2);
    /// ```
    pub fn union_with(&mut self, other: &TokenMask) {
        for (a, b) in self.bits.iter_mut().zip(&other.bits) {
            *a |= b;
        }
    }
}
