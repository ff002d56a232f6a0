//! Sparse streams: a stream that is one word nearly everywhere (the high
//! bytes of a fine-tune's small differences from its base, mostly zero) is
//! stored as that word, the gaps between its exceptions and their values
//! (the Sparse operator, whose node [`super::leaf()`] builds). Decoding it
//! is a fill and a scatter instead of an entropy decoder's step per word,
//! and it drops the per-stream costs of a coder whose every word carries
//! almost no information.

use crate::codec::Stats;

/// Streams shorter than this are not tried: a literal of them is small
/// anyway.
const MIN_WORDS: usize = 256;

/// At most one word in this many may be an exception.
const MAX_EXCEPTION_SHARE: u64 = 8;

/// Bytes no Sparse node encodes below: its tag, fill and count (a byte
/// each at least), and two children of at least a constant's two bytes.
pub(super) const LOWER_BOUND: usize = 3 + 2 * 2;

/// The fill word of `n` words with `stats` if a Sparse node may store
/// them: its exceptions are at most 1 in [`MAX_EXCEPTION_SHARE`], and at
/// least one.
pub(super) fn fill_of(n: usize, stats: &Stats) -> Option<u32> {
    let n = n as u64;
    let (fill, count) = stats.mode()?;
    let exceptions = n - count;
    let sparse = n >= MIN_WORDS as u64 && exceptions >= 1;
    (sparse && exceptions * MAX_EXCEPTION_SHARE <= n).then_some(fill)
}

/// The gaps and values of the exceptions to `fill` in `words` (see
/// [`crate::dsl::Op::Sparse`]).
pub(super) fn exceptions(words: &[u32], fill: u32) -> (Vec<u32>, Vec<u32>) {
    let (mut gaps, mut values) = (Vec::new(), Vec::new());
    let mut last = 0usize;
    for (i, &w) in words.iter().enumerate().filter(|&(_, &w)| w != fill) {
        gaps.push((i - last) as u32);
        values.push(w);
        last = i + 1;
    }
    (gaps, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exceptions_count_the_fill_words_before_each() {
        let words = [5, 1, 5, 5, 2, 3, 5];
        assert_eq!(exceptions(&words, 5), (vec![1, 2, 0], vec![1, 2, 3]));
        assert_eq!(exceptions(&[7, 5], 5), (vec![0], vec![7]));
    }

    #[test]
    fn only_streams_of_one_word_nearly_everywhere_are_sparse() {
        let mut words = vec![0u32; 800];
        const { assert!(MIN_WORDS <= 700) };
        let fill = |w: &[u32]| fill_of(w.len(), &Stats::new(w, 8));
        assert_eq!(fill(&words), None, "a constant is not sparse");
        words[3] = 9;
        assert_eq!(fill(&words), Some(0));
        words[..100].fill(9);
        assert_eq!(fill(&words), Some(0), "one in eight");
        words[100] = 9;
        assert_eq!(fill(&words), None, "more than one in eight");
        assert_eq!(fill(&words[..MIN_WORDS - 1]), None, "too short");
    }
}
