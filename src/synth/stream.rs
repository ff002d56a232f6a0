//! What the passes know of a stream before any program is found for it: the
//! hint its tensor gives, and whether its words are all one (where every
//! pass stops: a constant is final).

use crate::dsl::FloatFormat;

/// What the synthesizer knows about a stream besides its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    /// The float format of the tensor's dtype, when the words are floats.
    pub float: Option<FloatFormat>,
    /// The length of the groups of consecutive words that lie in one row
    /// of the tensor, when its words are its elements and it has rows: the
    /// row's length, or the largest divisor of it on which the chunk
    /// starts (see [`super::partition_rows`]).
    pub rows: Option<usize>,
    /// Where the words lie in the rows of their tensor, when they are its
    /// elements and it has rows (see [`super::columns_in_classes`]).
    pub columns: Option<Columns>,
}

/// Where a chunk's words lie in the rows of its tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    /// Words in a row of the tensor.
    pub row: usize,
    /// The column of the chunk's first word.
    pub first: usize,
}

/// Whether every word equals the first (true for no words). Blocks of words
/// are compared without a branch per word, which the compiler vectorises: a
/// field that is constant for long stretches (the top exponent bit of most
/// weights) is scanned at a fraction of the cost of stopping at each word.
pub(super) fn is_constant(words: &[u32]) -> bool {
    const BLOCK: usize = 64;
    let Some(&first) = words.first() else {
        return true;
    };
    let mut blocks = words.chunks_exact(BLOCK);
    let differs = |block: &[u32]| block.iter().fold(0, |acc, &w| acc | (w ^ first)) != 0;
    !blocks.any(differs) && !differs(blocks.remainder())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A differing word anywhere, in blocks or in the remainder, is found.
    #[test]
    fn is_constant_finds_a_differing_word_anywhere() {
        assert!(is_constant(&[]));
        for len in [1, 2, 63, 64, 65, 128, 200] {
            let mut words = vec![7u32; len];
            assert!(is_constant(&words), "len {len}");
            // One word alone is constant whatever its value.
            for at in (0..len).filter(|_| len > 1) {
                words[at] = 7 ^ (1 << (at % 32));
                assert!(!is_constant(&words), "len {len} at {at}");
                words[at] = 7;
            }
        }
    }
}
