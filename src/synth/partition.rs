//! Partitions: a literal of a weight matrix's words split by rows into a few
//! classes, each coded apart (format version 7).
//!
//! The rows of a matrix often differ in scale (an embedding's rows are
//! tokens of different norms): a literal of an exponent field codes each
//! row with one table for all of them, where a table per class of similar
//! rows fits each better. Classes are runs of the rows sorted by their
//! exponents' sum, which the lane's words (the elements) give whatever
//! fields the program codes; each entropy-coded literal of the program that
//! yields words in place of the elements (under Merges and Maps only) is
//! offered a Partition, kept where it codes smaller. Bytes that are not
//! floats (blocks of FP4 codes, each block scaled to its own largest value)
//! have no exponents: their groups are sorted by what their bytes cost in
//! the lane's histogram, which sets the groups whose bytes are rare apart.

use super::cost::{cost as cost_of, exact_cost, prediction_slack};
use super::leaf::leaf;
use super::stream::Hint;
use crate::codec::{self, Codec, SplitHistogram};
use crate::dsl::{self, count_width, FloatFormat, Literal, Op, Program, Type};
use std::sync::Arc;

/// Class counts tried.
const CLASS_COUNTS: [usize; 3] = [2, 4, 8];

/// Literals shorter than this are left as they are: a class's own tables
/// and states would cost more than it saves.
pub(super) const MIN_WORDS: usize = 1 << 14;

/// Widest literal words partitioned: the classes' histograms are dense.
const MAX_WIDTH: u32 = 12;

/// Groups shorter than this are not partitioned: each group's class is a
/// word of its own.
pub const MIN_GROUP: usize = 32;

/// [`MIN_GROUP`] for bytes that are not floats: a block of 32 FP4 codes
/// (MXFP4's, packed in 16 bytes) is what shares a scale.
const MIN_BYTE_GROUP: usize = 16;

/// A partition is built only where its estimate saves at least 1/this of
/// the literal's size: the estimate is no closer than that to what the
/// classes code to, so a smaller saving may well be none, and building a
/// partition sizes a literal per class.
const MIN_GAIN_DIVISOR: usize = 300;

/// Fewer groups than this are not partitioned: each class wants a few.
const MIN_GROUPS: usize = 16;

/// `p`, the program found for `lane` (a tensor's elements), with each of
/// its entropy-coded literals that yields one word per element replaced by
/// a Partition of groups of `hint.rows` words where that costs less (see
/// `partitioned`): never more than `p`. Unchanged without rows, or for
/// words that are neither floats nor bytes. The last pass of a lane's
/// program, after the caller takes the program as a template (a re-fit is
/// weighed against the template's literals, and partitioned anew).
pub fn partition_rows(p: Program<Literal>, lane: &[u32], hint: Hint) -> Program<Literal> {
    let Some(rows) = hint.rows else {
        return p;
    };
    if !may_partition(lane.len(), p.ty.width, hint) {
        return p;
    }
    let order = std::cell::OnceCell::new();
    let order = || {
        order
            .get_or_init(|| match hint.float {
                Some(float) => groups_by_exponent(lane, rows, float),
                None => groups_by_information(lane, rows),
            })
            .as_slice()
    };
    let found = partition_literals(p, rows, &order);
    match hint.float {
        Some(_) => found,
        None => whole_bytes(found, lane, rows, order()),
    }
}

/// `found`, or the Partition of `lane` (bytes) as one literal where that
/// costs less: a search may split bytes into fields (the two FP4 codes of
/// a byte) that each gain too little from classes to pay for their own,
/// where the bytes as one literal pay for one set of classes.
fn whole_bytes(
    found: Program<Literal>,
    lane: &[u32],
    rows: usize,
    order: &[u32],
) -> Program<Literal> {
    let Program {
        ty,
        op: Op::Lit(lit),
    } = leaf(lane.into(), 8).0
    else {
        return found;
    };
    let whole = worth_trying(&lit, ty).then(|| partitioned(&lit, ty, rows, order));
    match whole.flatten() {
        Some(whole) if exact_cost(&whole) < exact_cost(&found) => whole,
        _ => found,
    }
}

/// Whether [`partition_rows`] may partition a program of a lane of `len`
/// words of `width` bits with `hint`: float words (of the hint's format)
/// or bytes, in rows long enough, and enough of them.
pub(super) fn may_partition(len: usize, width: u32, hint: Hint) -> bool {
    let least = match hint.float {
        Some(float) if float.width() == width => MIN_GROUP,
        None if width == 8 => MIN_BYTE_GROUP,
        _ => return false,
    };
    hint.rows
        .is_some_and(|rows| rows >= least && len >= MIN_WORDS)
}

/// The groups of `rows` words of `lane`, in order of their exponents' sum
/// (ties by position).
fn groups_by_exponent(lane: &[u32], rows: usize, float: FloatFormat) -> Vec<u32> {
    let [_, e, m] = float.widths();
    let exponent = |w: u32| (w >> m) & dsl::mask(e);
    // Summed in u32 over blocks that cannot overflow it (2^16 exponents of
    // at most 8 bits), which vectorizes where u64 lanes would halve the width.
    let sum = |g: &[u32]| -> u64 {
        (g.chunks(1 << 16))
            .map(|b| b.iter().map(|&w| exponent(w)).sum::<u32>() as u64)
            .sum()
    };
    let sums: Vec<u64> = lane.chunks(rows).map(sum).collect();
    let mut order: Vec<u32> = (0..sums.len() as u32).collect();
    order.sort_by_key(|&g| (sums[g as usize], g));
    order
}

/// The groups of `rows` bytes of `lane`, in order of what their bytes cost
/// in the lane's histogram (ties by position): each byte's cost is minus
/// the base-2 logarithm of its count, in integers (see [`log2_fixed`]), so
/// that the order is the same on every machine.
fn groups_by_information(lane: &[u32], rows: usize) -> Vec<u32> {
    let mut counts = [0u32; 256];
    lane.iter().for_each(|&w| counts[w as usize & 0xff] += 1);
    let cost = counts.map(|c| LOG2_CEILING - log2_fixed(c));
    let sum = |g: &[u32]| -> u64 { g.iter().map(|&w| cost[w as usize & 0xff] as u64).sum() };
    let sums: Vec<u64> = lane.chunks(rows).map(sum).collect();
    let mut order: Vec<u32> = (0..sums.len() as u32).collect();
    order.sort_by_key(|&g| (sums[g as usize], g));
    order
}

/// Above [`log2_fixed`] of any count.
const LOG2_CEILING: u32 = 33 << 8;

/// `256 log2(c)` for `c >= 1`, its fraction linear between powers of two
/// (0 for 0, which no byte of the lane has).
fn log2_fixed(c: u32) -> u32 {
    let Some(e) = c.checked_ilog2() else {
        return 0;
    };
    let fraction = ((c as u64) << 8 >> e) as u32 & 0xff;
    (e << 8) | fraction
}

/// [`partition_rows`] below the root: through Merges and Maps, whose
/// children yield one word per element in place. `order` sorts the groups
/// (see [`groups_by_exponent`]) when a literal is worth trying.
fn partition_literals<'a>(
    p: Program<Literal>,
    rows: usize,
    order: &impl Fn() -> &'a [u32],
) -> Program<Literal> {
    let ty = p.ty;
    let op = match p.op {
        Op::Lit(lit) if worth_trying(&lit, ty) => {
            return partitioned(&lit, ty, rows, order()).unwrap_or(Program {
                ty,
                op: Op::Lit(lit),
            })
        }
        Op::Merge { fields, parts } => Op::Merge {
            fields,
            parts: (parts.into_iter())
                .map(|q| partition_literals(q, rows, order))
                .collect(),
        },
        Op::Map { op, body } => Op::Map {
            op,
            body: Box::new(partition_literals(*body, rows, order)),
        },
        op => op,
    };
    Program { ty, op }
}

fn worth_trying(lit: &Literal, ty: Type) -> bool {
    matches!(lit.codec, Codec::Rans | Codec::Huffman)
        && ty.width <= MAX_WIDTH
        && ty.len >= MIN_WORDS
}

/// The classes of the groups sorted as `order` says, cut into `k` runs of
/// about equal length: group of rank `r` (of `G`) is in class `r * k / G`.
/// The runs of `k` classes are unions of those of any multiple of `k`.
pub(super) fn classes_of(order: &[u32], k: usize) -> Vec<u32> {
    let mut class = vec![0u32; order.len()];
    for (rank, &g) in order.iter().enumerate() {
        class[g as usize] = (rank * k / order.len()) as u32;
    }
    class
}

/// Estimated bytes of the words of `k` classes whose histograms (of
/// `alphabet` words each) are `counts`: their order-0 entropy, plus each
/// histogram's expected shortfall ((distinct - 1) / (2 ln 2) bits), as a
/// coder of fewer words pays more for what it learns from them.
pub(super) fn classes_bytes(counts: &[u32], alphabet: usize) -> f64 {
    let bits: f64 = (counts.chunks(alphabet))
        .map(|t| {
            let n = t.iter().map(|&c| c as usize).sum();
            let distinct = t.iter().filter(|&&c| c > 0).count();
            let shortfall = distinct.saturating_sub(1) as f64 / (2.0 * std::f64::consts::LN_2);
            codec::order0_bits(t.iter().map(|&c| c as u64), n) + shortfall
        })
        .sum();
    bits / 8.0
}

/// Each class count's estimated bytes (see [`classes_bytes`]) for the words
/// in groups of `rows`, the groups in classes by `order`: one pass counts
/// the histograms of the finest classes, whose unions give the others'.
fn estimates(words: &[u32], width: u32, rows: usize, order: &[u32]) -> Vec<(usize, f64)> {
    let alphabet = 1usize << width;
    let finest = CLASS_COUNTS[CLASS_COUNTS.len() - 1];
    let counts = class_counts(words, alphabet, rows, &classes_of(order, finest));
    let merged = |k: usize| {
        let mut out = vec![0u32; k * alphabet];
        for (c, table) in counts.chunks(alphabet).enumerate() {
            let into = &mut out[c / (finest / k) * alphabet..][..alphabet];
            into.iter_mut().zip(table).for_each(|(o, &t)| *o += t);
        }
        classes_bytes(&out, alphabet)
    };
    (std::iter::once(1).chain(CLASS_COUNTS))
        .map(|k| (k, merged(k)))
        .collect()
}

/// The histogram of each class's words (`alphabet` counts a class, class
/// after class): groups of `rows` words of `words`, group `j` of class
/// `class[j]`. The fields partitioned hold exponents, whose long runs of one
/// word a [`SplitHistogram`] counts without stalling (up to 10-bit words).
fn class_counts(words: &[u32], alphabet: usize, rows: usize, class: &[u32]) -> Vec<u32> {
    let classes = class.iter().max().map_or(0, |&c| c as usize + 1);
    let mut counts: Vec<SplitHistogram> = (0..classes)
        .map(|_| SplitHistogram::new(alphabet))
        .collect();
    for (g, &c) in words.chunks(rows).zip(class) {
        counts[c as usize].add(g);
    }
    (counts.iter())
        .flat_map(|h| (0..alphabet).map(move |w| h.count(w)))
        .collect()
}

/// A Partition of `lit` (of type `ty`) into groups of `rows` words, if one
/// of [`CLASS_COUNTS`] classes is estimated to save enough and codes smaller.
/// The estimate charges each class the bytes the literal spends beyond its
/// words' estimate (its tables, its states), and each group its class's
/// bits. A partition predicted smaller by more than the rANS predictions
/// may be off is kept without sizing it exactly.
fn partitioned(lit: &Literal, ty: Type, rows: usize, order: &[u32]) -> Option<Program<Literal>> {
    if order.len() < MIN_GROUPS {
        return None;
    }
    let words = &lit.words[..];
    let estimates = estimates(words, ty.width, rows, order);
    let overhead = (lit.size as f64 - estimates[0].1).max(0.0);
    let ids = |k: usize| order.len() as f64 * (k as f64).log2() / 8.0;
    let (k, cost) = (estimates[1..].iter())
        .map(|&(k, bytes)| (k, bytes + k as f64 * overhead + ids(k)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    if cost > (lit.size - lit.size / MIN_GAIN_DIVISOR) as f64 {
        return None;
    }
    let node = build(words, ty, rows, &classes_of(order, k), k);
    let literal = Program {
        ty,
        op: Op::Lit(lit.clone()),
    };
    let slack = prediction_slack(&node) + prediction_slack(&literal);
    let sure = cost_of(&node) + slack < cost_of(&literal);
    (sure || exact_cost(&node) < exact_cost(&literal)).then_some(node)
}

/// The Partition of `words` into groups of `rows` whose classes (of `k`)
/// are `class`: the classes and each class's words as their leaves.
fn build(words: &[u32], ty: Type, rows: usize, class: &[u32], k: usize) -> Program<Literal> {
    // Each class's stream made at its length and its groups copied in once,
    // rather than grown group by group and copied again into an Arc: every
    // word of the literal is copied, so each copy counts.
    let mut lens = vec![0; k];
    for (g, &c) in words.chunks(rows).zip(class) {
        lens[c as usize] += g.len();
    }
    let mut parts: Vec<Arc<[u32]>> = (lens.into_iter())
        .map(|n| std::iter::repeat_n(0, n).collect())
        .collect();
    let mut rest: Vec<&mut [u32]> = (parts.iter_mut())
        .map(|p| Arc::get_mut(p).expect("a new stream is not shared"))
        .collect();
    for (g, &c) in words.chunks(rows).zip(class) {
        let (to, after) = std::mem::take(&mut rest[c as usize]).split_at_mut(g.len());
        to.copy_from_slice(g);
        rest[c as usize] = after;
    }
    let ids: Arc<[u32]> = class.into();
    Program {
        ty,
        op: Op::Partition {
            group: rows,
            classes: Box::new(leaf(ids, count_width(k)).0),
            parts: (parts.into_iter()).map(|p| leaf(p, ty.width).0).collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    /// The interleaved tables add up to each class's histogram, whatever
    /// the groups' length (here not a multiple of the interleaving) and
    /// however long the runs of one word.
    #[test]
    fn class_counts_are_each_class_histogram() {
        let mut seed = 7;
        let words: Vec<u32> = (0..37 * 50)
            .map(|i| match i % 300 < 100 {
                true => 5,
                false => (xorshift(&mut seed) % 64) as u32,
            })
            .collect();
        let class: Vec<u32> = (0..50).map(|g| (g * 7 % 3) as u32).collect();
        let counts = class_counts(&words, 64, 37, &class);
        let mut expected = vec![0u32; 3 * 64];
        for (g, &c) in words.chunks(37).zip(&class) {
            g.iter()
                .for_each(|&w| expected[c as usize * 64 + w as usize] += 1);
        }
        assert_eq!(counts, expected);
    }
}
