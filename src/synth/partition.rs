//! Partitions: a literal of a weight matrix's words split by rows into a few
//! classes, each coded apart (format version 7).
//!
//! The rows of a matrix often differ in scale (an embedding's rows are
//! tokens of different norms): a literal of an exponent field codes each
//! row with one table for all of them, where a table per class of similar
//! rows fits each better. Classes are runs of the rows sorted by their mean
//! exponent, which the lane's words (the elements) give whatever fields
//! the program codes; each entropy-coded literal of the program that yields
//! words in place of the elements (under Merges and Maps only) is offered
//! a Partition, kept where its exact cost is smaller.

use super::{exact_cost, leaf, Hint};
use crate::codec::{self, Codec};
use crate::dsl::{self, count_width, FloatFormat, Literal, Op, Program, Type};
use std::sync::Arc;

/// Class counts tried.
const CLASS_COUNTS: [usize; 3] = [2, 4, 8];

/// Literals shorter than this are left as they are: a class's own tables
/// and states would cost more than it saves.
const MIN_WORDS: usize = 1 << 14;

/// Widest literal words partitioned: the classes' histograms are dense.
const MAX_WIDTH: u32 = 12;

/// Groups shorter than this are not partitioned: each group's class is a
/// word of its own.
pub const MIN_GROUP: usize = 32;

/// A partition is built only where its estimate saves at least 1/this of
/// the literal's size.
const MIN_GAIN_DIVISOR: usize = 1000;

/// `p`, the program found for `lane` (a tensor's elements), with each of
/// its entropy-coded literals that yields one word per element replaced by
/// a Partition of groups of `hint.rows` words where that costs less
/// exactly. Unchanged without rows, or for words that are not floats.
pub fn with_partitions(p: Program<Literal>, lane: &[u32], hint: Hint) -> Program<Literal> {
    let (Some(rows), Some(float)) = (hint.rows, hint.float) else {
        return p;
    };
    if rows < MIN_GROUP || lane.len() < MIN_WORDS || float.width() != p.ty.width {
        return p;
    }
    let order = groups_by_exponent(lane, rows, float);
    partition_literals(p, rows, &order)
}

/// The groups of `rows` words of `lane`, in order of their exponents' sum
/// (ties by position).
fn groups_by_exponent(lane: &[u32], rows: usize, float: FloatFormat) -> Vec<u32> {
    let [_, e, m] = float.widths();
    let exponent = |w: u32| (w >> m) & dsl::mask(e);
    let sums: Vec<u64> = (lane.chunks(rows))
        .map(|g| g.iter().map(|&w| exponent(w) as u64).sum())
        .collect();
    let mut order: Vec<u32> = (0..sums.len() as u32).collect();
    order.sort_by_key(|&g| (sums[g as usize], g));
    order
}

/// [`with_partitions`] below the root: through Merges and Maps, whose
/// children yield one word per element in place.
fn partition_literals(p: Program<Literal>, rows: usize, order: &[u32]) -> Program<Literal> {
    let ty = p.ty;
    let op = match p.op {
        Op::Lit(lit) if worth_trying(&lit, ty) => {
            return partitioned(&lit, ty, rows, order).unwrap_or(Program {
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

/// The classes of `groups` groups sorted as `order` says, cut into `k` runs
/// of about equal length.
fn classes_of(order: &[u32], k: usize) -> Vec<u32> {
    let mut class = vec![0u32; order.len()];
    for (rank, &g) in order.iter().enumerate() {
        class[g as usize] = (rank * k / order.len()) as u32;
    }
    class
}

/// The order-0 bytes of the words of each class (of `k`), and how many
/// words each has.
fn class_costs(words: &[u32], width: u32, rows: usize, class: &[u32], k: usize) -> f64 {
    let alphabet = 1usize << width;
    let mut counts = vec![0u32; k * alphabet];
    for (g, &c) in words.chunks(rows).zip(class) {
        let table = &mut counts[c as usize * alphabet..][..alphabet];
        g.iter().for_each(|&w| table[w as usize] += 1);
    }
    (counts.chunks(alphabet))
        .map(|t| {
            let n = t.iter().map(|&c| c as usize).sum();
            codec::order0_bits(t.iter().map(|&c| c as u64), n)
        })
        .sum::<f64>()
        / 8.0
}

/// A Partition of `lit` (of type `ty`) into groups of `rows` words, if one
/// of [`CLASS_COUNTS`] classes is estimated to save enough and codes smaller
/// exactly. The estimate charges each class the bytes the literal spends
/// beyond its words' order-0 entropy (its tables, its states), and each
/// group its class's bits.
fn partitioned(lit: &Literal, ty: Type, rows: usize, order: &[u32]) -> Option<Program<Literal>> {
    let words = &lit.words[..];
    let entropy = class_costs(words, ty.width, rows, &vec![0; order.len()], 1);
    let overhead = (lit.size as f64 - entropy).max(0.0);
    let estimate = |k: usize| {
        let class = classes_of(order, k);
        let ids = order.len() as f64 * (k as f64).log2() / 8.0;
        let cost = class_costs(words, ty.width, rows, &class, k) + k as f64 * overhead + ids;
        (cost, class, k)
    };
    let (cost, class, k) = (CLASS_COUNTS.into_iter())
        .filter(|&k| k <= order.len())
        .map(estimate)
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    if cost > (lit.size - lit.size / MIN_GAIN_DIVISOR) as f64 {
        return None;
    }
    let node = build(words, ty, rows, &class, k);
    let literal = Program {
        ty,
        op: Op::Lit(lit.clone()),
    };
    (exact_cost(&node) < exact_cost(&literal)).then_some(node)
}

/// The Partition of `words` into groups of `rows` whose classes (of `k`)
/// are `class`: the classes and each class's words as their leaves.
fn build(words: &[u32], ty: Type, rows: usize, class: &[u32], k: usize) -> Program<Literal> {
    let mut parts: Vec<Vec<u32>> = vec![Vec::new(); k];
    for (g, &c) in words.chunks(rows).zip(class) {
        parts[c as usize].extend_from_slice(g);
    }
    let ids: Arc<[u32]> = class.into();
    Program {
        ty,
        op: Op::Partition {
            group: rows,
            classes: Box::new(leaf(ids, count_width(k)).0),
            parts: (parts.into_iter())
                .map(|p| leaf(p.into(), ty.width).0)
                .collect(),
        },
    }
}
