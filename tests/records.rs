//! Block-quantized records stored as bytes (GGUF's Q4_0, Q5_0, Q5_1, Q8_0,
//! Q4_K, Q5_K and Q6_K blocks in a U8 tensor): their fields are split apart into a
//! Partition wherever a chunk starts in its records, the split reproduces
//! the bytes through its encoding, never costs more than the program it
//! replaces, and is not made for bytes without records or for floats.
//! MXFP4's blocks of FP4 codes take classes of blocks (a Partition of rows);
//! bytes quantized per column with zero points take classes of columns.

mod common;

use brevis::dsl::{FloatFormat, Literal, Op, Program};
use brevis::synth::{self, runs_to, Columns, Field, Hint, SynthOptions, LAYOUTS};
use proptest::prelude::*;

/// Bytes of a tensor of rows (not floats), as the packer hints them.
const ROWS: Hint = Hint {
    float: None,
    rows: Some(2),
    columns: None,
};

/// `records` blocks of `layout` from `seed`: scales F16 of a few
/// exponents, integers peaked as quantized weights are, each field's
/// around a value of its own (a K-quant's packed scales, its nibbles and
/// its high bits differ).
fn blocks(layout: &[Field], records: usize, seed: u64) -> Vec<u32> {
    let noise = common::noise(seed, records * 450);
    let mut bytes = noise.iter().copied();
    let mut out = Vec::new();
    for _ in 0..records {
        for (j, &f) in layout.iter().enumerate() {
            match f {
                Field::Scale => {
                    let b = bytes.next().unwrap();
                    // 1/64 to 1/16: exponents 9 to 11, any mantissa.
                    let scale = 0x2400u16 + (b as u16 % 3) * 0x400 + (b as u16 * 37) % 0x400;
                    out.extend(scale.to_le_bytes().map(u32::from));
                }
                Field::Ints(n) => out.extend((0..n).map(|_| {
                    let (a, b) = (bytes.next().unwrap(), bytes.next().unwrap());
                    // A difference of two uniform bytes' top bits: a peak
                    // at the field's own value.
                    (a >> 4).wrapping_sub(b >> 4).wrapping_add(40 * j as u8) as u32
                })),
            }
        }
    }
    out
}

fn size(p: &Program<Literal>) -> usize {
    synth::exact_cost(p)
}

/// Encodes, decodes and runs `p`: what an archive reader would get.
fn decoded(p: &Program<Literal>) -> Vec<u32> {
    let mut bytes = Vec::new();
    brevis::dsl::encode_program(p, &mut bytes);
    let (q, _) = brevis::dsl::decode_program(&bytes, p.ty, Default::default()).unwrap();
    let mut out = vec![0u32; p.ty.len];
    brevis::dsl::execute(&q, &mut out).unwrap();
    out
}

/// The program the packer would code `words` with before records: the
/// search's.
fn searched(words: &[u32], hint: Hint) -> Program<Literal> {
    synth::search_stream(words, 8, hint, &SynthOptions::default())
}

fn is_partition(p: &Program<Literal>) -> bool {
    matches!(p.op, Op::Partition { .. })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Every layout, the chunk starting anywhere (an even offset) in its
    /// records and ending anywhere: the split is made, into the layout's
    /// own fields, reproduces the bytes, and codes smaller than the
    /// search's program.
    #[test]
    fn records_split_into_fields_wherever_the_chunk_starts(
        layout in 0..LAYOUTS.len(),
        skip in 0usize..105,
        cut in 0usize..105,
        seed: u64,
    ) {
        let all = blocks(LAYOUTS[layout], 160, seed);
        let words = &all[2 * skip..all.len() - 2 * cut];
        let found = searched(words, ROWS);
        let p = synth::split_records(found.clone(), words, ROWS);
        prop_assert!(is_partition(&p), "{}", p);
        let fields = LAYOUTS[layout];
        let record: usize = fields.iter().map(|&f| if let Field::Ints(n) = f { n } else { 2 }).sum();
        prop_assert_eq!(split_layout(&p), Some((fields.len(), record / 2)), "{}", p);
        prop_assert_eq!(decoded(&p), words.to_vec());
        prop_assert!(size(&p) < size(&found), "{} >= {}", size(&p), size(&found));
    }

    /// Bytes without records, odd lengths included: the program is kept
    /// unless the split is smaller, and whatever comes back runs to the
    /// bytes.
    #[test]
    fn anything_else_keeps_its_program_unless_the_split_is_smaller(
        len in 1usize..20_000,
        seed: u64,
    ) {
        let words: Vec<u32> = common::noise(seed, len).into_iter().map(u32::from).collect();
        let found = searched(&words, ROWS);
        let p = synth::split_records(found.clone(), &words, ROWS);
        prop_assert!(runs_to(&p, &words));
        prop_assert!(size(&p) <= size(&found));
    }

    /// A matrix of bytes about a zero point per column, the chunk starting
    /// and ending anywhere in its rows: its columns are split into classes
    /// by a Partition of single bytes, which reproduces the bytes and codes
    /// smaller; without the columns' place it is left as it is.
    #[test]
    fn columns_of_zero_points_take_classes_wherever_the_chunk_starts(
        row in 64usize..400,
        first in 0usize..400,
        cut in 0usize..400,
        seed: u64,
    ) {
        let words = per_column(row, 20_000 / row + 2, seed);
        let words = &words[first..words.len() - cut];
        let columns = Columns { row, first: first % row };
        let hint = Hint { columns: Some(columns), ..ROWS };
        let found = searched(words, ROWS);
        let p = synth::columns_in_classes(found.clone(), words, hint);
        prop_assert_eq!(partition_group(&p), Some(1), "{}", p);
        prop_assert_eq!(decoded(&p), words.to_vec());
        prop_assert!(size(&p) < size(&found), "{} >= {}", size(&p), size(&found));
        prop_assert_eq!(synth::columns_in_classes(found.clone(), words, ROWS), found);
    }

    /// Bytes whose columns do not differ, at any place in rows: the program
    /// is kept unless the classes are smaller, and what comes back runs to
    /// the bytes.
    #[test]
    fn columns_alike_keep_their_program_unless_classes_are_smaller(
        row in 64usize..400,
        first in 0usize..400,
        len in 16_384usize..40_000,
        seed: u64,
    ) {
        let words: Vec<u32> = common::noise(seed, len).into_iter().map(|b| u32::from(b >> 3)).collect();
        let hint = Hint { columns: Some(Columns { row, first: first % row }), ..ROWS };
        let found = searched(&words, ROWS);
        let p = synth::columns_in_classes(found.clone(), &words, hint);
        prop_assert!(runs_to(&p, &words));
        prop_assert!(size(&p) <= size(&found));
    }
}

/// `rows` rows of `row` bytes, each column's about a zero point of its own
/// (as onnxruntime's per-channel uint8 quantization makes them).
fn per_column(row: usize, rows: usize, seed: u64) -> Vec<u32> {
    let noise = common::noise(seed, row * (rows + 1) * 2);
    let (zeros, rest) = noise.split_at(row);
    (rest.chunks(2).take(row * rows).enumerate())
        .map(|(i, r)| {
            // A difference of two uniform bytes' top bits: a peak at the
            // column's zero point.
            let zero = 64 + zeros[i % row] / 2;
            zero.wrapping_add(r[0] >> 4).wrapping_sub(r[1] >> 4) as u32
        })
        .collect()
}

/// Records in a float tensor's words, or in a tensor without rows, are
/// left as the search found them: only bytes of integers' rows are tried.
#[test]
fn floats_and_tensors_without_rows_are_not_split() {
    // Q8_0.
    let words = blocks(LAYOUTS[3], 200, 5);
    let hints = [
        Hint {
            float: Some(FloatFormat::E4M3),
            ..ROWS
        },
        Hint {
            float: None,
            rows: None,
            columns: None,
        },
    ];
    for hint in hints {
        let found = searched(&words, hint);
        assert_eq!(synth::split_records(found.clone(), &words, hint), found);
    }
}

/// The number of fields of a split into records and the groups of its
/// record (its classes' period), from the outer Partition of `p`: each
/// layout is found as itself, not as a shorter one whose stride meets its
/// scales nor as a longer one of whole blocks.
fn split_layout(p: &Program<Literal>) -> Option<(usize, usize)> {
    let Op::Partition { classes, parts, .. } = &p.op else {
        return None;
    };
    let repeat = match &classes.op {
        Op::Concat(items) => &items[0],
        _ => classes,
    };
    match &repeat.op {
        Op::Repeat { body, .. } => Some((parts.len(), body.ty.len)),
        _ => None,
    }
}

/// Finds a Partition node anywhere in `p`: its group length.
fn partition_group(p: &Program<Literal>) -> Option<usize> {
    match &p.op {
        Op::Partition { group, .. } => Some(*group),
        _ => p.children().find_map(partition_group),
    }
}

/// Blocks of 32 FP4 codes packed two to a byte (MXFP4's, 16 bytes a
/// block), half of them with most codes small (a block whose largest
/// value stands far above the rest), half spread: a literal of the bytes
/// becomes a Partition of blocks in classes, smaller than the search's
/// program, that yields the bytes. Without rows none is made.
#[test]
fn fp4_blocks_of_two_kinds_take_classes() {
    let noise = common::noise(11, 1 << 17);
    let code = |r: u8, narrow: bool| match narrow {
        true => (r >> 6) | (r & 8),
        false => r & 15,
    };
    let words: Vec<u32> = (noise.chunks(4).enumerate())
        .map(|(i, r)| {
            let narrow = (i / 16 * 7) % 5 < 2;
            (code(r[0], narrow) | code(r[1], narrow) << 4) as u32
        })
        .collect();
    let rows = Hint {
        float: None,
        rows: Some(16),
        columns: None,
    };
    let found = searched(&words, rows);
    let p = synth::partition_rows(found.clone(), &words, rows);
    assert_eq!(partition_group(&p), Some(16), "{p}");
    assert_eq!(decoded(&p), words);
    assert!(size(&p) < size(&found), "{} >= {}", size(&p), size(&found));
    let flat = Hint { rows: None, ..rows };
    assert_eq!(synth::partition_rows(found.clone(), &words, flat), found);
}
