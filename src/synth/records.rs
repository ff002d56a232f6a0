//! Records: block-quantized weights stored as bytes, whose fields are
//! split apart as a Partition (format version 7).
//!
//! GGUF's Q4_0, Q5_0, Q5_1 and Q8_0 blocks, and its K-quants' (Q4_K, Q5_K,
//! Q6_K) super-blocks, stored as the rows of a U8 tensor, interleave an F16
//! scale per block with the block's integers: one byte histogram for both
//! fits neither. A Partition
//! of two-byte groups into one class per field (the classes a Repeat of one
//! record's pattern) gives each field a stream of its own, and a nested
//! Partition of single bytes splits each scale into its low and high
//! bytes, the high one holding the sign and exponent. The layout and the
//! chunk's place in its records are found from the words: the layout and
//! phase at which a scale's high bytes take far fewer bits (order-0) than
//! the chunk's bytes do; the split is kept only where it codes smaller.

use super::cost::exact_cost;
use super::leaf::leaf;
use super::stream::Hint;
use crate::codec;
use crate::dsl::{count_width, Literal, Op, Program, Type};
use std::sync::Arc;

/// A field of a record: an F16 scale (split into its bytes), or bytes of
/// integers coded as one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Scale,
    Ints(usize),
}

impl Field {
    fn bytes(self) -> usize {
        match self {
            Field::Scale => 2,
            Field::Ints(n) => n,
        }
    }
}

/// The block layouts tried, as GGUF (ggml-common.h) lays them out, shorter
/// records first: every field an even number of bytes at an even offset,
/// so that two-byte groups never straddle fields.
pub const LAYOUTS: [&[Field]; 7] = [
    // Q4_0: d, then 32 nibbles.
    &[Field::Scale, Field::Ints(16)],
    // Q5_0: d, the 32 values' fifth bits, their low nibbles.
    &[Field::Scale, Field::Ints(4), Field::Ints(16)],
    // Q5_1: d, the minimum m, fifth bits, low nibbles.
    &[Field::Scale, Field::Scale, Field::Ints(4), Field::Ints(16)],
    // Q8_0: d, then 32 int8.
    &[Field::Scale, Field::Ints(32)],
    // Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, 256 nibbles.
    &[
        Field::Scale,
        Field::Scale,
        Field::Ints(12),
        Field::Ints(128),
    ],
    // Q5_K: d, dmin, 12 bytes of scales and mins, 256 fifth bits, 256
    // low nibbles.
    &[
        Field::Scale,
        Field::Scale,
        Field::Ints(12),
        Field::Ints(32),
        Field::Ints(128),
    ],
    // Q6_K: 128 bytes of low nibbles, 64 of high bits, 16 int8 scales, d.
    &[
        Field::Ints(128),
        Field::Ints(64),
        Field::Ints(16),
        Field::Scale,
    ],
];

/// Words of a group of the outer Partition: a scale is one group.
const GROUP: usize = 2;

/// Chunks with fewer records than this are left as they are: each stream's
/// tables would cost more than the split saves.
const MIN_RECORDS: usize = 64;

/// Bytes of the lane through which the phase search looks at every
/// layout's scales: the same bytes for all, as a tensor's scales drift
/// along it (an embedding's first rows are tokens seldom seen), and over a
/// thousand of the longest records.
const SAMPLE_SPAN: usize = 1 << 18;

/// Bytes of the lane whose order-0 bits the scales are weighed against.
const SAMPLE_BYTES: usize = 1 << 16;

/// A layout is tried only where its scales' high bytes take at least this
/// many bits fewer than the chunk's bytes as a whole, order-0: scales of
/// one tensor share a few exponents, its integers spread over most bytes.
const MIN_BITS_SAVED: f64 = 1.0;

/// How many times the bits a shorter layout's scales save a longer one's
/// must save to be preferred. The true layout's scales save 3.3 to 6 bits a
/// byte on minilm's GGUF files, a wrong shorter one's (its stride meeting
/// them among other bytes) at most 1.3, and a longer one's whose stride
/// takes every k-th block of a shorter true layout up to 0.6 more than the
/// true one (the scales of blocks of some columns of an embedding differ).
const SAVED_RATIO: f64 = 2.0;

/// `p`, the program found for `lane`, or the lane split into the fields of
/// block-quantized records where that costs less. Only bytes of a tensor
/// of rows that are not floats are tried.
pub fn split_records(p: Program<Literal>, lane: &[u32], hint: Hint) -> Program<Literal> {
    if p.ty.width != 8 || hint.float.is_some() || hint.rows.is_none() {
        return p;
    }
    let Some((fields, phase)) = records_of(lane) else {
        return p;
    };
    let split = split_program(lane, fields, phase);
    if exact_cost(&split) < exact_cost(&p) {
        split
    } else {
        p
    }
}

/// The layout of the records `lane` holds and the offset in its record of
/// the lane's first byte: of the layouts whose first scale's high bytes, at
/// the phase where they take the fewest bits, stand out from the lane's
/// bytes (see [`MIN_BITS_SAVED`]), the one where they stand out most. A
/// shorter layout's stride through longer records also meets their scales
/// (every fourth time a Q4_0 block's through Q5_1 blocks), so it can stand
/// out too, but less, mixed with other bytes. A longer layout replaces a
/// shorter one only by [`SAVED_RATIO`], as eight Q4_0 blocks are as long as
/// a Q4_K super-block (eight Q5_0 blocks as a Q5_K one), and their first
/// scale stands out about as much where the super-block's would.
fn records_of(lane: &[u32]) -> Option<(&'static [Field], usize)> {
    if !lane.len().is_multiple_of(GROUP) {
        return None;
    }
    let whole = bits_per_word(lane[..lane.len().min(SAMPLE_BYTES)].iter().copied());
    let sample = &lane[..lane.len().min(SAMPLE_SPAN)];
    let found = LAYOUTS.into_iter().filter_map(|fields| {
        let len = record_len(fields);
        if lane.len() < MIN_RECORDS * len {
            return None;
        }
        let high = 1 + scale_offset(fields);
        // Byte `i` of the lane is byte `(i + phase) % len` of a record.
        let bits = |phase: usize| {
            let first = (len + high - phase) % len;
            bits_per_word(sample.iter().skip(first).step_by(len).copied())
        };
        let phases = (0..len).step_by(GROUP).map(|phase| (phase, bits(phase)));
        let (phase, bits) = phases.min_by(|a, b| a.1.total_cmp(&b.1))?;
        let saved = whole - bits;
        (saved >= MIN_BITS_SAVED).then_some((fields, phase, saved))
    });
    let best = found.reduce(|best, next| {
        if next.2 > SAVED_RATIO * best.2 {
            next
        } else {
            best
        }
    });
    best.map(|(fields, phase, _)| (fields, phase))
}

/// Bytes of a record of `fields`.
fn record_len(fields: &[Field]) -> usize {
    fields.iter().map(|f| f.bytes()).sum()
}

/// Offset in the record of its first scale.
fn scale_offset(fields: &[Field]) -> usize {
    let before = fields.iter().take_while(|&&f| f != Field::Scale);
    before.map(|f| f.bytes()).sum()
}

/// Order-0 bits per word of `words` (bytes).
fn bits_per_word(words: impl Iterator<Item = u32>) -> f64 {
    let mut counts = [0u64; 256];
    let mut n = 0;
    for w in words {
        counts[w as usize & 0xff] += 1;
        n += 1;
    }
    codec::order0_bits(counts, n) / n.max(1) as f64
}

/// The Partition of `lane` into the streams of `fields`, the lane's first
/// byte at `phase` in its record: two-byte groups, each field a class.
fn split_program(lane: &[u32], fields: &[Field], phase: usize) -> Program<Literal> {
    let pattern: Vec<u32> = (fields.iter().enumerate())
        .flat_map(|(class, f)| std::iter::repeat_n(class as u32, f.bytes() / GROUP))
        .collect();
    let start = phase / GROUP;
    let rotated: Vec<u32> = (0..pattern.len())
        .map(|i| pattern[(start + i) % pattern.len()])
        .collect();
    let groups = lane.len() / GROUP;
    let classes: Vec<u32> = (0..groups).map(|g| rotated[g % rotated.len()]).collect();
    let parts = gather(lane, GROUP, &classes, fields.len());
    let parts = (parts.into_iter().zip(fields))
        .map(|(words, &f)| match f {
            Field::Scale => scale_program(words),
            Field::Ints(_) => leaf(words, 8).0,
        })
        .collect();
    partition(
        lane.len(),
        GROUP,
        periodic(&rotated, groups, fields.len()),
        parts,
    )
}

/// A scale field's bytes, low and high in turn, as a Partition of single
/// bytes into the two.
fn scale_program(words: Arc<[u32]>) -> Program<Literal> {
    let classes: Vec<u32> = (0..words.len() as u32).map(|i| i % 2).collect();
    let parts = (gather(&words, 1, &classes, 2).into_iter())
        .map(|p| leaf(p, 8).0)
        .collect();
    partition(words.len(), 1, periodic(&[0, 1], words.len(), 2), parts)
}

/// The words of each of `k` classes, in order: groups of `group` words of
/// `words`, group `j` of class `classes[j]`.
pub(super) fn gather(words: &[u32], group: usize, classes: &[u32], k: usize) -> Vec<Arc<[u32]>> {
    let mut parts = vec![Vec::new(); k];
    for (g, &c) in words.chunks(group).zip(classes) {
        parts[c as usize].extend_from_slice(g);
    }
    parts.into_iter().map(Arc::from).collect()
}

/// The Partition of `len` bytes in groups of `group` with these classes
/// and parts.
pub(super) fn partition(
    len: usize,
    group: usize,
    classes: Program<Literal>,
    parts: Vec<Program<Literal>>,
) -> Program<Literal> {
    Program {
        ty: Type { width: 8, len },
        op: Op::Partition {
            group,
            classes: Box::new(classes),
            parts,
        },
    }
}

/// The classes of `len` groups that repeat `pattern` (of `k` classes): a
/// Repeat of it, and the start of another where `len` is not a multiple.
pub(super) fn periodic(pattern: &[u32], len: usize, k: usize) -> Program<Literal> {
    let width = count_width(k);
    let (times, rest) = (len / pattern.len(), len % pattern.len());
    let words = |n: usize| Arc::from(&pattern[..n]);
    if times < 2 {
        let all: Vec<u32> = (0..len).map(|i| pattern[i % pattern.len()]).collect();
        return leaf(all.into(), width).0;
    }
    let ty = |len| Type { width, len };
    let repeat = Program {
        ty: ty(times * pattern.len()),
        op: Op::Repeat {
            times,
            body: Box::new(leaf(words(pattern.len()), width).0),
        },
    };
    if rest == 0 {
        return repeat;
    }
    Program {
        ty: ty(len),
        op: Op::Concat(vec![repeat, leaf(words(rest), width).0]),
    }
}
