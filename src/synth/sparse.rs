//! Sparse leaves: a stream that is one word nearly everywhere (the high
//! bytes of a fine-tune's small differences from its base, mostly zero) is
//! stored as that word, the gaps between its exceptions and their values.
//! Decoding it is a fill and a scatter instead of an entropy decoder's step
//! per word, and it drops the per-stream costs of a coder whose every word
//! carries almost no information.

use super::{leaf, Shape};
use crate::codec::Stats;
use crate::dsl::{count_width, encoded_len, Fields, Literal, Op, Program, Type};

/// Streams shorter than this are not tried: a literal of them is small
/// anyway.
const MIN_WORDS: usize = 256;

/// At most one word in this many may be an exception.
const MAX_EXCEPTION_SHARE: u64 = 8;

/// Bytes no Sparse node encodes below: its tag, fill and count (a byte
/// each at least), and two children of at least a constant's two bytes.
pub const LOWER_BOUND: usize = 3 + 2 * 2;

/// The fill word of `n` words with `stats` if a Sparse node may store
/// them: its exceptions are at most 1 in [`MAX_EXCEPTION_SHARE`], and at
/// least one.
pub fn fill_of(n: usize, stats: &Stats) -> Option<u32> {
    let n = n as u64;
    let (fill, count) = stats.mode()?;
    let exceptions = n - count;
    let sparse = n >= MIN_WORDS as u64 && exceptions >= 1;
    (sparse && exceptions * MAX_EXCEPTION_SHARE <= n).then_some(fill)
}

/// The gaps and values of the exceptions to `fill` in `words` (see
/// [`crate::dsl::Op::Sparse`]).
fn exceptions(words: &[u32], fill: u32) -> (Vec<u32>, Vec<u32>) {
    let (mut gaps, mut values) = (Vec::new(), Vec::new());
    let mut last = 0usize;
    for (i, &w) in words.iter().enumerate().filter(|&(_, &w)| w != fill) {
        gaps.push((i - last) as u32);
        values.push(w);
        last = i + 1;
    }
    (gaps, values)
}

/// A Sparse node yielding `words` (`width`-bit) around `fill`, its gaps
/// stored by [`gaps_program`] and its values by their own [`leaf`]. `fill`
/// must be one of the words and some word must differ from it (as
/// [`fill_of`] ensures).
pub fn sparse_leaf(words: &[u32], width: u32, fill: u32) -> Program<Literal> {
    let (gaps, values) = exceptions(words, fill);
    let gaps = gaps_program(gaps, count_width(words.len()));
    let values = leaf(values.into(), width).0;
    Program {
        ty: Type {
            width,
            len: words.len(),
        },
        op: Op::Sparse {
            fill,
            gaps: Box::new(gaps),
            values: Box::new(values),
        },
    }
}

/// The gaps of a Sparse node, `width`-bit words: their leaf, or where it is
/// smaller, a Merge that splits off their low `k` bits, `2^k` the largest
/// power of two at most their mean (as a Rice code does): the low bits
/// are nearly uniform and the high ones a few small values, where a leaf of
/// whole gaps pays a code table of every distinct gap.
fn gaps_program(gaps: Vec<u32>, width: u32) -> Program<Literal> {
    let ty = Type {
        width,
        len: gaps.len(),
    };
    let mean = gaps.iter().map(|&g| g as u64).sum::<u64>() / gaps.len() as u64;
    let low = mean.checked_ilog2().unwrap_or(0).min(width - 1);
    let split = (low > 0).then(|| {
        let shape = Shape::Merge(Fields::Split { low });
        let parts = (shape.children(&gaps, width).into_iter())
            .map(|(t, part)| leaf(part, t.width).0)
            .collect();
        shape.build(ty, parts)
    });
    let whole = leaf(gaps.into(), width).0;
    match split {
        Some(s) if encoded_len(&s) < encoded_len(&whole) => s,
        _ => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    #[test]
    fn exceptions_count_the_fill_words_before_each() {
        let words = [5, 1, 5, 5, 2, 3, 5];
        assert_eq!(exceptions(&words, 5), (vec![1, 2, 0], vec![1, 2, 3]));
        assert_eq!(exceptions(&[7, 5], 5), (vec![0], vec![7]));
    }

    #[test]
    fn spread_gaps_split_off_their_low_bits() {
        // Gaps between exceptions at random places, one in about 200 words:
        // geometric, 2^7 <= mean < 2^8, so the low 7 bits go apart.
        let mut seed = 12345;
        let gaps: Vec<u32> = (0..2000)
            .map(|_| {
                let u = ((xorshift(&mut seed) >> 11) as f64 + 1.0) / 2f64.powi(53);
                (-u.ln() * 200.0) as u32
            })
            .collect();
        let p = gaps_program(gaps.clone(), 18);
        assert!(
            matches!(
                p.op,
                Op::Merge {
                    fields: Fields::Split { low: 7 },
                    ..
                }
            ),
            "{p}"
        );
        assert!(super::super::runs_to(&p, &gaps));
        assert!(encoded_len(&p) < encoded_len(&leaf(gaps.into(), 18).0));
        // Gaps of 0 and 1 keep their leaf.
        let dense = [0, 1, 0, 0, 1, 0, 1, 1].repeat(40);
        assert!(matches!(gaps_program(dense, 18).op, Op::Lit(_)));
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
