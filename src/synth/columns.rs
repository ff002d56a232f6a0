//! Columns in classes: a matrix's bytes whose columns differ in offset,
//! split by columns into a few streams (a Partition, format version 7).
//!
//! A matrix quantized per channel with zero points (onnxruntime's dynamic
//! uint8 quantization stores a MatMul's weight as [in, out], a scale and a
//! zero point per column) holds in each column integers about that
//! column's zero point: one histogram for the whole chunk is as wide as
//! the zero points are spread, where a table per class of columns with
//! like zero points is narrower. Rows in classes (`partition`) cannot see
//! it, as every row has every column. The classes are runs of the columns
//! sorted by their bytes' sum; the Partition's groups are single bytes,
//! their classes a Repeat of one row's (`records`' periodic classes), so
//! the classes cost a row's words however long the chunk. Kept only where
//! it codes smaller than the program found and than the bytes as one
//! literal.

use super::cost::{cost, exact_cost};
use super::leaf::leaf;
use super::partition::{classes_bytes, classes_of, MIN_WORDS};
use super::records::{gather, partition, periodic};
use super::stream::{Columns, Hint};
use crate::dsl::{Literal, Program};

/// Class counts tried.
const CLASS_COUNTS: [usize; 3] = [2, 4, 8];

/// Rows shorter than this are left as they are: few columns have few
/// offsets to tell apart, and a Partition of single bytes costs a pass to
/// decode whatever it saves.
const MIN_ROW: usize = 64;

/// Chunks of fewer rows than this are left as they are: each column's bytes
/// are too few to tell its offset, and a chunk shorter than a row may
/// leave a class without a word.
const MIN_ROWS: usize = 32;

/// Words of the lane whose columns are sorted and classes estimated.
const SAMPLE_WORDS: usize = 1 << 16;

/// Estimated bytes of a class's own tables and coder states.
const CLASS_BYTES: f64 = 64.0;

/// A split is built only where its estimate saves at least 1/this of the
/// bytes' estimate as one stream (see `partition::MIN_GAIN_DIVISOR`).
const MIN_GAIN_DIVISOR: f64 = 300.0;

/// `p`, the program found for `lane` (a chunk of a matrix's bytes), or the
/// lane as a Partition of its columns in classes where that costs less.
/// Only bytes that are not floats, in rows of at least [`MIN_ROW`], are
/// tried.
pub fn columns_in_classes(p: Program<Literal>, lane: &[u32], hint: Hint) -> Program<Literal> {
    let Some(columns) = hint.columns else {
        return p;
    };
    let fits = columns.row >= MIN_ROW && lane.len() >= MIN_WORDS.max(MIN_ROWS * columns.row);
    if p.ty.width != 8 || hint.float.is_some() || !fits {
        return p;
    }
    // Whether to split, and into how many classes, is estimated on a
    // sample of whole rows (most chunks of bytes are not split, and two
    // passes over each cost more than the sample's); the classes are made
    // from every row.
    let sample = &lane[..lane.len().min(SAMPLE_WORDS.max(MIN_ROWS * columns.row))];
    let whole = (cost(&p) as f64, lane.len() as f64 / sample.len() as f64);
    let Some(k) = best_count(sample, columns, &columns_by_sum(sample, columns), whole) else {
        return p;
    };
    let order = columns_by_sum(lane, columns);
    let split = split_program(lane, columns, &classes_of(&order, k), k);
    // Weighed against the bytes as one literal too, which a longer search
    // finds where a shorter one may not: which of the two is kept does not
    // then hang on the effort level.
    let plain = exact_cost(&p).min(exact_cost(&leaf(lane.into(), 8).0));
    if exact_cost(&split) < plain {
        split
    } else {
        p
    }
}

/// The column of each word of the lane, in turn: word `i` is in column
/// `(first + i) % row`.
fn column_of(columns: Columns) -> impl Iterator<Item = usize> {
    (0..columns.row).cycle().skip(columns.first % columns.row)
}

/// The columns in order of the sum of their bytes (ties by column).
fn columns_by_sum(lane: &[u32], columns: Columns) -> Vec<u32> {
    let mut sums = vec![0u64; columns.row];
    for (&w, c) in lane.iter().zip(column_of(columns)) {
        sums[c] += w as u64;
    }
    let mut order: Vec<u32> = (0..columns.row as u32).collect();
    order.sort_by_key(|&c| (sums[c as usize], c));
    order
}

/// The class count of [`CLASS_COUNTS`] whose estimate (the classes'
/// order-0 bytes and shortfalls in `sample`, times `scale` for the whole
/// lane, their tables, a row of class words) is least, if it saves enough
/// on the bytes as one stream and is below `found`, the predicted cost of
/// the program found for the lane: blocks whose fields are already apart
/// (GGUF's, see `records`) are not split again.
fn best_count(
    sample: &[u32],
    columns: Columns,
    order: &[u32],
    (found, scale): (f64, f64),
) -> Option<usize> {
    let finest = CLASS_COUNTS[CLASS_COUNTS.len() - 1];
    let class = classes_of(order, finest);
    let mut counts = vec![0u32; finest * 256];
    for (&w, c) in sample.iter().zip(column_of(columns)) {
        counts[class[c] as usize * 256 + (w as usize & 0xff)] += 1;
    }
    // The runs of fewer classes are unions of the finest's.
    let estimate = |k: usize| {
        let mut merged = vec![0u32; k * 256];
        for (c, table) in counts.chunks(256).enumerate() {
            let into = &mut merged[c / (finest / k) * 256..][..256];
            into.iter_mut().zip(table).for_each(|(m, &t)| *m += t);
        }
        let ids = columns.row as f64 * (k as f64).log2() / 8.0;
        classes_bytes(&merged, 256) * scale + k as f64 * CLASS_BYTES + ids
    };
    let whole = estimate(1);
    let (k, bytes) = (CLASS_COUNTS.into_iter())
        .map(|k| (k, estimate(k)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    (bytes < found.min(whole - whole / MIN_GAIN_DIVISOR)).then_some(k)
}

/// The Partition of `lane` into single bytes, the byte in column `c` of
/// class `class[c]` (of `k`): its classes a Repeat of a row's, each class's
/// bytes their own leaf.
fn split_program(lane: &[u32], columns: Columns, class: &[u32], k: usize) -> Program<Literal> {
    let row: Vec<u32> = column_of(columns)
        .take(columns.row)
        .map(|c| class[c])
        .collect();
    let classes: Vec<u32> = (0..lane.len()).map(|i| row[i % row.len()]).collect();
    let parts = (gather(lane, 1, &classes, k).into_iter())
        .map(|words| leaf(words, 8).0)
        .collect();
    partition(lane.len(), 1, periodic(&row, lane.len(), k), parts)
}
