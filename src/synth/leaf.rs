//! Leaves: the cheapest program that stores a stream directly, without
//! finding structure in it. A constant where the words are all one; else a
//! literal with the smallest exact encoding, or a Sparse node (the fill, the
//! gaps between the other words and their values) where one word is nearly
//! everywhere and that is smaller. Every hole of a search is completed by
//! its leaf, and every pass falls back on one.

use super::expand::Operator;
use super::sparse;
use super::stream::is_constant;
use crate::codec::{self, Stats};
use crate::dsl::{self, count_width, encoded_len, Fields, Literal, Op, Program, Type};
use std::sync::Arc;

/// The cheapest program that stores `words` directly: a constant if they are all
/// equal, otherwise the literal with the smallest exact encoding, or a Sparse
/// node (fill, gaps and values) where one word is nearly everywhere and that is
/// smaller. Also returns the number of distinct words when at most 4096.
pub fn leaf(words: Arc<[u32]>, width: u32) -> (Program<Literal>, Option<usize>) {
    leaf_among(&codec::SIZING_ORDER, words, width, None)
}

/// [`leaf`] of `words` whose statistics are `stats` where known, its
/// literal sized with `codecs` only.
pub(super) fn leaf_among(
    codecs: &[codec::Codec],
    words: Arc<[u32]>,
    width: u32,
    stats: Option<Stats>,
) -> (Program<Literal>, Option<usize>) {
    let stats = match stats {
        Some(stats) => stats,
        None if is_constant(&words) => return const_leaf(&words, width),
        None => Stats::new(&words, width),
    };
    if stats.is_constant() {
        return const_leaf(&words, width);
    }
    let distinct = stats.distinct();
    let (codec, size) = codec::best_of(codecs, &words, width, &stats);
    (
        literal_or_sparse(codec, size, words, width, stats),
        distinct,
    )
}

/// The leaf of `words`, all equal (at least one).
fn const_leaf(words: &[u32], width: u32) -> (Program<Literal>, Option<usize>) {
    let ty = Type {
        width,
        len: words.len(),
    };
    let op = Op::Const(words[0]);
    (Program { ty, op }, Some(1))
}

/// The literal of `words` with `codec` in `size` bytes, or a Sparse node of
/// them where one word is nearly everywhere and that is smaller.
fn literal_or_sparse(
    codec: codec::Codec,
    size: usize,
    words: Arc<[u32]>,
    width: u32,
    stats: Stats,
) -> Program<Literal> {
    let sparse = sparse::fill_of(words.len(), &stats).map(|fill| sparse_leaf(&words, width, fill));
    let ty = Type {
        width,
        len: words.len(),
    };
    let literal = Program {
        ty,
        op: Op::Lit(Literal::new(codec, size, words, stats)),
    };
    match sparse {
        Some(s) if dsl::encoded_len(&s) < dsl::encoded_len(&literal) => s,
        _ => literal,
    }
}

/// A length no leaf of `n` words whose statistics are `stats` (see
/// [`leaf`]) encodes below, found without sizing any codec: 2 bytes for a
/// constant, else a literal's tag and size byte plus
/// [`codec::size_lower_bound`]; for a stream a Sparse node may store, which
/// can code below its words' order-0 entropy, its own node's bytes and its
/// children's.
pub(super) fn leaf_lower_bound_of(n: usize, width: u32, stats: &Stats) -> usize {
    if stats.is_constant() {
        return 2;
    }
    if sparse::fill_of(n, stats).is_some() {
        return sparse::LOWER_BOUND;
    }
    2 + codec::size_lower_bound(n, width, stats)
}

/// A Sparse node yielding `words` (`width`-bit) around `fill`, its gaps
/// stored by `gaps_program` and its values by their own [`leaf`]. `fill`
/// must be one of the words and some word must differ from it (as
/// `sparse::fill_of` ensures).
pub fn sparse_leaf(words: &[u32], width: u32, fill: u32) -> Program<Literal> {
    let (gaps, values) = sparse::exceptions(words, fill);
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
        let operator = Operator::Merge(Fields::Split { low });
        let parts = (operator.children(&gaps, width).into_iter())
            .map(|(t, part)| leaf(part, t.width).0)
            .collect();
        operator.build(ty, parts)
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
    use crate::synth::cost::runs_to;

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
        assert!(runs_to(&p, &gaps));
        assert!(encoded_len(&p) < encoded_len(&leaf(gaps.into(), 18).0));
        // Gaps of 0 and 1 keep their leaf.
        let dense = [0, 1, 0, 0, 1, 0, 1, 1].repeat(40);
        assert!(matches!(gaps_program(dense, 18).op, Op::Lit(_)));
    }
}
