//! The canonical code both sides derive from the code lengths, and the four
//! quarters a stream is cut into (docs/FORMAT.md, "Huffman (tag 2)": Code,
//! Bit order, Quarters).

#![forbid(unsafe_code)]

use std::ops::Range;

/// Longest code: one lookup of a table of `2^MAX_LEN` entries decodes a word.
pub(super) const MAX_LEN: u32 = 12;

/// Canonical codes (most significant bit first) for lengths given in symbol
/// order: shorter codes first, and by symbol order within a length.
pub(super) fn canonical_codes(lengths: &[u32]) -> Vec<u32> {
    let mut count = [0u32; MAX_LEN as usize + 1];
    for &len in lengths {
        count[len as usize] += 1;
    }
    let mut next = [0u32; MAX_LEN as usize + 1];
    let mut code = 0;
    for len in 1..=MAX_LEN as usize {
        code = (code + count[len - 1]) << 1;
        next[len] = code;
    }
    lengths
        .iter()
        .map(|&len| {
            next[len as usize] += 1;
            next[len as usize] - 1
        })
        .collect()
}

/// The low `len` bits of `code` in reverse order: the bitstream is read from
/// the least significant bit, and a code's first bit must come out first.
pub(super) fn reverse(code: u32, len: u32) -> u32 {
    code.reverse_bits() >> (32 - len)
}

/// The word ranges of the four quarters of a stream of `n` words: quarter `q`
/// is `[q*c, (q+1)*c)` clipped to `n`, with `c = ceil(n / 4)`.
pub(in crate::codec) fn quarter_ranges(n: usize) -> [Range<usize>; 4] {
    let c = n.div_ceil(4);
    std::array::from_fn(|q| (q * c).min(n)..((q + 1) * c).min(n))
}
