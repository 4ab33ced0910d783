//! [`ByteTable`]: a vocabulary's many short byte strings, packed end to end, and the
//! [`PieceIndex`] that finds an id by its string.

use std::hash::BuildHasher;

use crate::grammar::vocab::TokenBytes;

/// Byte strings packed end to end in one buffer, indexed by position (a token id).
///
/// A vocabulary is hundreds of thousands of strings of a few bytes: as a
/// `Vec<Vec<u8>>` each costs a 24-byte header plus a heap block of at least 32 bytes,
/// 15 MB for Gemma 3's 262k tokens; here it is its bytes plus 8 bytes of offset (3.4
/// MB). The tokenizer and the grammar's token vocabulary share one table.
///
/// ```
/// use toolgate::tokenizer::ByteTable;
/// let t: ByteTable = ["ab", "", "cde"].into_iter().collect();
/// assert_eq!((t.len(), t.get(2), t.get(1), t.get(3)), (3, Some(&b"cde"[..]), Some(&b""[..]), None));
/// assert_eq!(t.iter().map(<[u8]>::len).sum::<usize>(), 5);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ByteTable {
    data: Vec<u8>,
    /// `ends[i]`: where string `i` ends in `data` (it starts where `i - 1` ends).
    ends: Vec<usize>,
}

impl ByteTable {
    /// An empty table with room for `strings` strings of `bytes` bytes in all.
    pub fn with_capacity(strings: usize, bytes: usize) -> Self {
        Self { data: Vec::with_capacity(bytes), ends: Vec::with_capacity(strings) }
    }

    /// Append a string; its index is the previous [`ByteTable::len`].
    ///
    /// Cost: amortized O(`s.len()`).
    pub fn push(&mut self, s: &[u8]) {
        self.data.extend_from_slice(s);
        self.ends.push(self.data.len());
    }

    /// String `i`, or `None` past the end.
    ///
    /// Cost: O(1).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.data[start..end])
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the table has no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The strings in index order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i).unwrap_or_default())
    }

    /// Bytes of memory the table holds (its buffers' capacity).
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }
}

impl<T: AsRef<[u8]>> FromIterator<T> for ByteTable {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut table = Self::default();
        for s in iter {
            table.push(s.as_ref());
        }
        table.data.shrink_to_fit();
        table.ends.shrink_to_fit();
        table
    }
}

/// The grammar reads a tokenizer's tokens through this table, shared.
impl TokenBytes for ByteTable {
    fn count(&self) -> usize {
        self.len()
    }
    fn token(&self, id: usize) -> &[u8] {
        self.get(id).unwrap_or_default()
    }
}

impl std::fmt::Debug for ByteTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteTable").field("len", &self.len()).field("bytes", &self.data.len()).finish()
    }
}

/// Token ids by their text: an open-addressing hash table of ids (4 bytes a slot, at
/// most half full); the texts themselves stay in the caller's [`ByteTable`].
///
/// Where several tokens share a text, the lowest id is the one found.
///
/// Cost: building hashes every text once; a lookup hashes the query and compares it
/// with one text in the common case. The hash is seeded per process, so no vocabulary
/// or query can be chosen to collide.
#[derive(Debug, Clone)]
pub(crate) struct PieceIndex {
    slots: Vec<u32>,
    hasher: foldhash::fast::RandomState,
}

impl PieceIndex {
    const EMPTY: u32 = u32::MAX;

    /// Index `texts` (id = position).
    pub(crate) fn new(texts: &ByteTable) -> Self {
        let len = (texts.len() * 2).next_power_of_two().max(16);
        let mut index = Self { slots: vec![Self::EMPTY; len], hasher: foldhash::fast::RandomState::default() };
        let mask = len - 1;
        for (id, text) in texts.iter().enumerate() {
            let mut i = index.hasher.hash_one(text) as usize & mask;
            loop {
                match index.slots[i] {
                    Self::EMPTY => {
                        index.slots[i] = id as u32;
                        break;
                    }
                    // Ids are inserted in order: the first holder of a text is the lowest.
                    other if texts.get(other as usize) == Some(text) => break,
                    _ => i = (i + 1) & mask,
                }
            }
        }
        index
    }

    /// The lowest id whose text is `text`, given the same `texts` as [`PieceIndex::new`].
    pub(crate) fn get(&self, texts: &ByteTable, text: &[u8]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = self.hasher.hash_one(text) as usize & mask;
        loop {
            match self.slots[i] {
                Self::EMPTY => return None,
                id if texts.get(id as usize) == Some(text) => return Some(id),
                _ => i = (i + 1) & mask,
            }
        }
    }
}
