//! The canonical byte encoding of programs (docs/FORMAT.md, "Programs"), and
//! its length as the search weighs it.

use super::mirror::Mirroring;
use super::ops::{Fields, FloatFormat, MapOp, ScanOp};
use super::program::{Literal, Op, Program};
use super::scaled::SCALED_FORMATS;
use super::tag::*;
use crate::codec;
use crate::wire::{put_varint, varint_len};

fn map_code(op: MapOp) -> (u8, Option<u32>) {
    match op {
        MapOp::Xor(c) => (0, Some(c)),
        MapOp::Add(c) => (1, Some(c)),
        MapOp::Zigzag => (2, None),
        MapOp::Gray => (3, None),
        MapOp::Rotate(r) => (4, Some(r)),
        MapOp::BitReverse => (5, None),
    }
}

fn fields_code(fields: Fields) -> (u8, Option<u32>) {
    match fields {
        Fields::Float(f) => (
            FloatFormat::ALL.iter().position(|g| *g == f).unwrap() as u8,
            None,
        ),
        Fields::Split { low } => (5, Some(low)),
        Fields::BitPlanes => (6, None),
        Fields::BytePlanes => (7, None),
    }
}

fn scan_code(op: ScanOp) -> u8 {
    match op {
        ScanOp::Xor => 0,
        ScanOp::Add => 1,
    }
}

fn put_coded(out: &mut Vec<u8>, (code, param): (u8, Option<u32>)) {
    out.push(code);
    if let Some(p) = param {
        put_varint(out, p as u64);
    }
}

fn coded_len((_, param): (u8, Option<u32>)) -> usize {
    1 + param.map_or(0, |p| varint_len(p as u64))
}

/// Appends the canonical encoding of `p`.
pub fn encode_program(p: &Program<Literal>, out: &mut Vec<u8>) {
    match &p.op {
        Op::Lit(lit) => {
            // The literal's size is known once it is encoded (rANS's was
            // predicted), and is written before it.
            let mut bytes = Vec::with_capacity(lit.size);
            let (width, stats) = (p.ty.width, &lit.stats);
            let ok = codec::encode_with_stats(lit.codec, &lit.words, width, stats, &mut bytes);
            assert!(ok, "literal codec does not apply");
            out.push(TAG_LIT);
            put_varint(out, bytes.len() as u64);
            out.extend_from_slice(&bytes);
        }
        Op::Const(w) => {
            out.push(TAG_CONST);
            put_varint(out, *w as u64);
        }
        Op::Concat(parts) => {
            out.push(TAG_CONCAT);
            put_part_lens(out, parts);
            parts.iter().for_each(|q| encode_program(q, out));
        }
        Op::Repeat { times, body } => {
            out.push(TAG_REPEAT);
            put_varint(out, *times as u64 - 2);
            encode_program(body, out);
        }
        Op::Map { op, body } => {
            out.push(TAG_MAP);
            put_coded(out, map_code(*op));
            encode_program(body, out);
        }
        Op::Scan { op, init, updates } => {
            out.push(TAG_SCAN);
            out.push(scan_code(*op));
            put_varint(out, *init as u64);
            encode_program(updates, out);
        }
        Op::Merge { fields, parts } => {
            out.push(TAG_MERGE);
            put_coded(out, fields_code(*fields));
            parts.iter().for_each(|q| encode_program(q, out));
        }
        Op::Palette {
            group,
            index_width,
            values,
            indices,
        } => {
            out.push(TAG_PALETTE);
            put_varint(out, *group as u64 - 2);
            out.push(*index_width as u8);
            encode_program(values, out);
            encode_program(indices, out);
        }
        Op::Scaled {
            group,
            format,
            int_width,
            scales,
            ints,
        } => {
            out.push(TAG_SCALED);
            put_varint(out, *group as u64 - 1);
            out.push(scaled_format_code(*format));
            out.push(*int_width as u8);
            encode_program(scales, out);
            encode_program(ints, out);
        }
        Op::Match { parts } => {
            out.push(TAG_MATCH);
            put_varint(out, parts[1].ty.len as u64 - 1);
            put_varint(out, parts[0].ty.len as u64 - 1);
            parts.iter().for_each(|q| encode_program(q, out));
        }
        Op::Sparse { fill, gaps, values } => {
            out.push(TAG_SPARSE);
            put_varint(out, *fill as u64);
            put_varint(out, gaps.ty.len as u64 - 1);
            encode_program(gaps, out);
            encode_program(values, out);
        }
        Op::Partition {
            group,
            classes,
            parts,
        } => {
            out.push(TAG_PARTITION);
            put_varint(out, *group as u64 - 1);
            put_part_lens(out, parts);
            encode_program(classes, out);
            parts.iter().for_each(|q| encode_program(q, out));
        }
        Op::ColumnScan { row, updates } => {
            out.push(TAG_COLUMN_SCAN);
            put_varint(out, *row as u64 - 1);
            encode_program(updates, out);
        }
        Op::Mirror { at, head, diffs } => {
            out.push(TAG_MIRROR);
            mirroring_fields(*at).for_each(|v| put_varint(out, v));
            encode_program(head, out);
            encode_program(diffs, out);
        }
    }
}

/// A Concat's or a Partition's parts, as their count less 2 and the
/// lengths of all but the last (which takes what is left).
fn put_part_lens<L>(out: &mut Vec<u8>, parts: &[Program<L>]) {
    put_varint(out, parts.len() as u64 - 2);
    for part in &parts[..parts.len() - 1] {
        put_varint(out, part.ty.len as u64);
    }
}

/// The bytes [`put_part_lens`] writes.
fn part_lens_len<L>(parts: &[Program<L>]) -> usize {
    let lens = parts[..parts.len() - 1].iter().map(|q| q.ty.len as u64);
    varint_len(parts.len() as u64 - 2) + lens.map(varint_len).sum::<usize>()
}

/// The varints a Mirror's parameters are stored as: `row - 2`, `tail - 1`,
/// `pivot - (row - 1)`.
fn mirroring_fields(at: Mirroring) -> impl Iterator<Item = u64> {
    [at.row - 2, at.tail - 1, at.pivot + 1 - at.row]
        .map(|v| v as u64)
        .into_iter()
}

fn scaled_format_code(format: FloatFormat) -> u8 {
    SCALED_FORMATS
        .iter()
        .position(|f| *f == format)
        .expect("a Scaled format") as u8
}

/// Length of `encode_program`'s output as the search weighs it, without
/// encoding any literal: exact but for rANS literals, whose sizes are
/// predicted (see `Literal::size`).
pub fn encoded_len(p: &Program<Literal>) -> usize {
    encoded_len_with(p, &|lit, _| lit.size)
}

/// The exact length of `encode_program`'s output: [`encoded_len`] with
/// rANS literals sized by a pass of their coder.
pub fn exact_len(p: &Program<Literal>) -> usize {
    encoded_len_with(p, &|lit, width| lit.exact_size(width))
}

/// [`encoded_len`] with each literal (of words of the width given) taking
/// the bytes `literal_size` says.
fn encoded_len_with(p: &Program<Literal>, literal_size: &impl Fn(&Literal, u32) -> usize) -> usize {
    let children: usize = p
        .children()
        .map(|q| encoded_len_with(q, literal_size))
        .sum();
    1 + children
        + match &p.op {
            Op::Lit(lit) => {
                let size = literal_size(lit, p.ty.width);
                varint_len(size as u64) + size
            }
            Op::Const(w) => varint_len(*w as u64),
            Op::Concat(parts) => part_lens_len(parts),
            Op::Repeat { times, .. } => varint_len(*times as u64 - 2),
            Op::Map { op, .. } => coded_len(map_code(*op)),
            Op::Scan { init, .. } => 1 + varint_len(*init as u64),
            Op::Merge { fields, .. } => coded_len(fields_code(*fields)),
            Op::Palette { group, .. } => varint_len(*group as u64 - 2) + 1,
            Op::Scaled { group, .. } => varint_len(*group as u64 - 1) + 2,
            Op::Match { parts } => {
                varint_len(parts[1].ty.len as u64 - 1) + varint_len(parts[0].ty.len as u64 - 1)
            }
            Op::Sparse { fill, gaps, .. } => {
                varint_len(*fill as u64) + varint_len(gaps.ty.len as u64 - 1)
            }
            Op::Partition { group, parts, .. } => {
                varint_len(*group as u64 - 1) + part_lens_len(parts)
            }
            Op::Mirror { at, .. } => mirroring_fields(*at).map(varint_len).sum(),
            Op::ColumnScan { row, .. } => varint_len(*row as u64 - 1),
        }
}
