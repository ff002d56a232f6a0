//! Maps the words of a stream to their rank among its sorted distinct words,
//! so that Huffman and rANS can keep per-symbol tables indexed by rank.

#![forbid(unsafe_code)]

use super::symbols::MAX_SYMBOLS;

/// An open-addressing hash map from word to a small id. It holds at most
/// `MAX_SYMBOLS + 1` words in 8192 slots, so it stays at most about half full:
/// probe sequences are short and always meet an empty slot.
pub(super) struct WordTable {
    keys: Vec<u32>,
    /// id + 1 of the word in `keys[i]`; 0 marks an empty slot.
    ids: Vec<u16>,
}

const HASH_BITS: u32 = 13;
const HASH_MASK: usize = (1 << HASH_BITS) - 1;
const _: () = assert!((MAX_SYMBOLS + 1) * 3 / 2 < 1 << HASH_BITS);

fn home_slot(w: u32) -> usize {
    // Fibonacci hashing: the top bits of the product mix every input bit.
    (w.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
}

impl WordTable {
    pub(super) fn new() -> Self {
        WordTable {
            keys: vec![0; 1 << HASH_BITS],
            ids: vec![0; 1 << HASH_BITS],
        }
    }

    /// The id of `w`, inserting it with id `fresh` if it is absent. The caller
    /// must insert at most `MAX_SYMBOLS + 1` words.
    pub(super) fn get_or_insert(&mut self, w: u32, fresh: u16) -> u16 {
        let mut h = home_slot(w);
        loop {
            let id = self.ids[h];
            if id == 0 {
                self.keys[h] = w;
                self.ids[h] = fresh + 1;
                return fresh;
            }
            if self.keys[h] == w {
                return id - 1;
            }
            h = (h + 1) & HASH_MASK;
        }
    }

    /// The id of `w`, which must have been inserted (otherwise 0 is returned).
    fn get(&self, w: u32) -> u16 {
        let mut h = home_slot(w);
        loop {
            let id = self.ids[h];
            if id == 0 || self.keys[h] == w {
                return id.saturating_sub(1);
            }
            h = (h + 1) & HASH_MASK;
        }
    }
}

/// Word -> rank lookup: a direct array for narrow words, a hash table otherwise.
pub(super) enum SymbolIndex {
    /// `2^width + 1` ranks: one per word, then a zero pad so that a 4-byte
    /// load at any word's rank stays inside the array (see `dense_ranks`).
    Dense(Vec<u16>),
    Hashed(WordTable),
}

/// Widest word for which the direct array (2^width entries of 2 bytes) is used.
const DENSE_MAX_WIDTH: u32 = 16;

impl SymbolIndex {
    /// `sorted` holds at most `MAX_SYMBOLS` distinct words of `width` bits.
    pub(super) fn new(sorted: &[u32], width: u32) -> Self {
        if width <= DENSE_MAX_WIDTH {
            let mut ranks = vec![0u16; (1 << width) + 1];
            for (rank, &w) in sorted.iter().enumerate() {
                ranks[w as usize] = rank as u16;
            }
            SymbolIndex::Dense(ranks)
        } else {
            let mut table = WordTable::new();
            for (rank, &w) in sorted.iter().enumerate() {
                table.get_or_insert(w, rank as u16);
            }
            SymbolIndex::Hashed(table)
        }
    }

    /// The direct array when there is one: `2^width + 1` entries, the last
    /// being padding, so reading 4 bytes at entry `w < 2^width` stays inside.
    pub(super) fn dense_ranks(&self) -> Option<&[u16]> {
        match self {
            SymbolIndex::Dense(ranks) => Some(ranks),
            SymbolIndex::Hashed(_) => None,
        }
    }

    /// Rank of `w`, which must be one of the indexed words.
    #[inline]
    pub(super) fn rank(&self, w: u32) -> usize {
        match self {
            SymbolIndex::Dense(ranks) => ranks[w as usize] as usize,
            SymbolIndex::Hashed(table) => table.get(w) as usize,
        }
    }
}
