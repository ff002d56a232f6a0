//! The single-word decoding table of a Huffman code (docs/FORMAT.md,
//! "Huffman (tag 2)": Code, Bit order): one lookup of the next 12 bits of a
//! stream gives its next word and that word's code length.

#![forbid(unsafe_code)]

use super::code::{canonical_codes, reverse, MAX_LEN};
use crate::codec::symbols::SymbolSet;

pub(super) const TABLE_SIZE: usize = 1 << MAX_LEN;
pub(super) const PEEK_MASK: u64 = TABLE_SIZE as u64 - 1;

/// Decoding table indexed by the next 12 bits of a stream: `word << 32 | length`.
pub(super) type Table = [u64; TABLE_SIZE];

/// Fails unless the lengths form a complete prefix code (Kraft sum exactly 1),
/// which also guarantees every table entry is filled exactly once.
///
/// A slot's entry depends only on its low `longest` bits (the codes are
/// read lowest bit first, and none is longer), so those first `2^longest`
/// slots are filled code by code and then copied up to the full size: the
/// codes of a small tensor's exponents, a few bits long, fill a few hundred
/// slots rather than all 4096 (building tables weighs heavily in decoding a
/// file of small tensors).
pub(super) fn build_table(set: &SymbolSet) -> Option<Box<Table>> {
    let kraft: u32 = set.values.iter().map(|&len| 1 << (MAX_LEN - len)).sum();
    if kraft != TABLE_SIZE as u32 {
        return None;
    }
    let longest = set.values.iter().copied().max().unwrap_or(0);
    let mut table = Vec::with_capacity(TABLE_SIZE);
    table.resize(1 << longest, 0);
    let codes = canonical_codes(&set.values);
    for ((&word, &len), &code) in set.words.iter().zip(&set.values).zip(&codes) {
        let entry = (word as u64) << 32 | len as u64;
        for slot in (reverse(code, len) as usize..table.len()).step_by(1 << len) {
            table[slot] = entry;
        }
    }
    while table.len() < TABLE_SIZE {
        table.extend_from_within(..);
    }
    table.into_boxed_slice().try_into().ok()
}
