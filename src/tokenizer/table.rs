//! [`ByteTable`]: a vocabulary's many short byte strings, packed end to end.

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

impl std::fmt::Debug for ByteTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteTable").field("len", &self.len()).field("bytes", &self.data.len()).finish()
    }
}
