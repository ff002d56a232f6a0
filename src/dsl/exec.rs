//! The executor: runs a program into a caller's buffer of words, as the
//! semantics of docs/FORMAT.md, "Programs", say.
//!
//! Every node writes its output straight into its slice of the caller's buffer;
//! only Merge needs scratch space, one buffer per call reused across its parts.
//! Words are held in any [`Word`] type wide enough for the program's width, so
//! that narrow lanes and fields move as few bytes as possible.

use super::matches::run_matches;
use super::mirror::mirror_rows;
use super::ops::ScanOp;
use super::palette::palette_table_len;
use super::partition::{gather_partition, MAX_PARTITION_CLASSES};
use super::program::{Literal, Op, Program};
use super::scaled::scaled_word;
use super::sparse::place_sparse;
use super::types::mask;
use crate::codec::{OrIn, Word, ROWS_ROUND};

/// Runs `f` on a scratch buffer of `len` words (contents unspecified), of
/// the shared pool (see [`crate::scratch`]).
pub fn with_scratch<T: Word, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let units = (len * size_of::<T>()).div_ceil(size_of::<u32>());
    crate::scratch::with_words(units, |buf| {
        let words: &mut [T] = bytemuck::cast_slice_mut(buf);
        f(&mut words[..len])
    })
}

/// Where a literal's words come from.
pub trait LiteralSource {
    type Error;
    /// Writes exactly `out.len()` words of `width` bits (`width <= T::BITS`).
    fn write_words<T: Word>(&self, width: u32, out: &mut [T]) -> Result<(), Self::Error>;

    /// Whether `or_words` may be called: the words can be ored into a Merge's
    /// output as they come, with no scratch buffer.
    fn ors_in(&self) -> bool;

    /// Ors the words into `out` as a Merge field (`out.len()` words of
    /// `width` bits, see [`OrIn`]). Only called if `ors_in()`.
    fn or_words<T: Word>(&self, width: u32, or_in: OrIn, out: &mut [T]) -> Result<(), Self::Error>;

    /// Whether `write_rows` may be called: the words can go straight to the
    /// rows of a Partition's class, with no scratch to gather them from.
    fn writes_rows(&self) -> bool;

    /// Writes the words into the rows `rows` of `out`: word `k` to row
    /// `rows[k / group]` (rows of `group` words), at `k % group` in it. Only
    /// called if `writes_rows()`, with `group` a multiple of
    /// [`ROWS_ROUND`] and every row inside `out`.
    fn write_rows<T: Word>(
        &self,
        width: u32,
        out: &mut [T],
        group: usize,
        rows: &[u32],
    ) -> Result<(), Self::Error>;

    /// The error for a program whose literals' words make it invalid (a
    /// Match's tokens that copy from outside the output, a Sparse node's
    /// gaps that lead past it, a Partition's classes that its parts do not
    /// hold).
    fn refuse(reason: &'static str) -> Self::Error;
}

/// Why a synthesized program does not execute (a bug: the synthesizer builds
/// valid programs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub &'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

impl LiteralSource for Literal {
    type Error = Refused;
    fn write_words<T: Word>(&self, _width: u32, out: &mut [T]) -> Result<(), Self::Error> {
        for (o, &w) in out.iter_mut().zip(self.words.iter()) {
            *o = T::from_u32(w);
        }
        Ok(())
    }

    fn ors_in(&self) -> bool {
        true
    }

    fn or_words<T: Word>(&self, _width: u32, m: OrIn, out: &mut [T]) -> Result<(), Self::Error> {
        m.apply_all(out, &self.words);
        Ok(())
    }

    fn writes_rows(&self) -> bool {
        true
    }

    fn write_rows<T: Word>(
        &self,
        _width: u32,
        out: &mut [T],
        group: usize,
        rows: &[u32],
    ) -> Result<(), Self::Error> {
        for (words, &row) in self.words.chunks(group).zip(rows) {
            let row = &mut out[row as usize * group..][..group];
            row.iter_mut()
                .zip(words)
                .for_each(|(o, &w)| *o = T::from_u32(w));
        }
        Ok(())
    }

    fn refuse(reason: &'static str) -> Refused {
        Refused(reason)
    }
}

/// Runs `p` into `out`, which must hold exactly `p.ty.len` words of at least
/// `p.ty.width` bits. The program must be well typed (as built by the
/// synthesizer or accepted by `decode_program`).
pub fn execute<T: Word, L: LiteralSource>(p: &Program<L>, out: &mut [T]) -> Result<(), L::Error> {
    debug_assert_eq!(out.len(), p.ty.len);
    debug_assert!(p.ty.width <= T::BITS);
    let width = p.ty.width;
    match &p.op {
        Op::Lit(lit) => lit.write_words(width, out)?,
        Op::Const(w) => out.fill(T::from_u32(*w)),
        Op::Concat(parts) => end_to_end(parts, out)?,
        Op::Repeat { body, .. } => {
            let period = body.ty.len;
            execute(body, &mut out[..period])?;
            // Doubling copies: log2(times) memmoves instead of one per period.
            let mut filled = period;
            while filled < out.len() {
                let n = filled.min(out.len() - filled);
                out.copy_within(..n, filled);
                filled += n;
            }
        }
        Op::Map { op, body } => {
            execute(body, out)?;
            let op = *op;
            out.iter_mut()
                .for_each(|x| *x = T::from_u32(op.apply(x.to_u32(), width)));
        }
        Op::Scan { op, init, updates } => {
            execute(updates, out)?;
            // One loop per operator: the accumulator is a chain through
            // every word, which a per-word choice of operator lengthens.
            match op {
                ScanOp::Xor => scan(out, *init, |acc, x| ScanOp::Xor.step(acc, x, width)),
                ScanOp::Add => scan(out, *init, |acc, x| ScanOp::Add.step(acc, x, width)),
            }
        }
        Op::ColumnScan { row, updates } => {
            execute(updates, out)?;
            column_scan(out, *row, width);
        }
        Op::Merge { fields, parts } => {
            let shifts = fields.shifts(width);
            // Fields occupy disjoint bits, so they can be merged in any order.
            // One field is built in place, unshifted: pick one that could not
            // be ored in without scratch, so that at most the others need it,
            // else a Partition whose classes go straight to their rows (no
            // scratch, no pass to gather them) beside literals and
            // constants, else one that is not a Partition, which ors its
            // groups in as it gathers them.
            let first = (parts.iter().position(|p| !ors_in(p)))
                .or_else(|| {
                    // Ahead of a nested Merge, it would leave that Merge's
                    // fields all to be ored in, which decodes slower.
                    let flat = parts
                        .iter()
                        .all(|p| matches!(p.op, Op::Lit(_) | Op::Const(_) | Op::Partition { .. }));
                    (parts.iter().position(|p| in_rows(p, out.len()))).filter(|_| flat)
                })
                .or_else(|| parts.iter().position(|p| !is_partition(p)))
                .unwrap_or(0);
            execute(&parts[first], out)?;
            // The first field's shift is applied in the pass that ors in the
            // next, saving a pass over `out`.
            let mut pending = shifts[first];
            for (i, part) in parts.iter().enumerate().filter(|&(i, _)| i != first) {
                let or_in = OrIn {
                    pending,
                    shift: shifts[i],
                };
                merge_field(part, or_in, out)?;
                pending = 0;
            }
        }
        Op::Palette {
            group,
            index_width,
            values,
            indices,
        } => with_scratch(values.ty.len, |tables: &mut [T]| {
            execute(values, tables)?;
            execute(indices, out)?;
            let table = palette_table_len(*index_width);
            for (words, tables) in out.chunks_mut(*group).zip(tables.chunks_exact(table)) {
                // An index has `index_width` bits: always inside its table.
                words
                    .iter_mut()
                    .for_each(|w| *w = tables[w.to_u32() as usize]);
            }
            Ok(())
        })?,
        Op::Scaled {
            group,
            format,
            scales,
            ints,
            ..
        } => with_scratch(scales.ty.len, |factors: &mut [u32]| {
            execute(scales, factors)?;
            execute(ints, out)?;
            let format = *format;
            for (words, &scale) in out.chunks_mut(*group).zip(factors.iter()) {
                words
                    .iter_mut()
                    .for_each(|w| *w = T::from_u32(scaled_word(format, scale, w.to_u32())));
            }
            Ok(())
        })?,
        Op::Match { parts } => {
            let [lits, runs, lens, dists] = &**parts;
            let k = runs.ty.len;
            with_scratch(lits.ty.len, |words: &mut [T]| {
                execute(lits, words)?;
                with_scratch(3 * k, |tokens: &mut [u32]| {
                    let (r, rest) = tokens.split_at_mut(k);
                    let (l, d) = rest.split_at_mut(k);
                    execute(runs, r)?;
                    execute(lens, l)?;
                    execute(dists, d)?;
                    run_matches(out, words, r, l, d).map_err(L::refuse)
                })
            })?
        }
        Op::Sparse { fill, gaps, values } => with_scratch(gaps.ty.len, |at: &mut [u32]| {
            execute(gaps, at)?;
            with_scratch(values.ty.len, |words: &mut [T]| {
                execute(values, words)?;
                out.fill(T::from_u32(*fill));
                place_sparse(out, at, words).map_err(L::refuse)
            })
        })?,
        Op::Partition {
            group,
            classes,
            parts,
        } => {
            let partition = (*group, &**classes, &parts[..]);
            if in_rows(p, out.len()) {
                partition_in_rows(partition, out)?
            } else {
                // Groups of one or two words (the fields of a quantized
                // block) are copied in place: a `memcpy` call each would
                // cost more than the copy.
                run_partition::<T, T, L>(partition, out, |rows, words| match (rows, words) {
                    ([r], [w]) => *r = *w,
                    ([r0, r1], [w0, w1]) => (*r0, *r1) = (*w0, *w1),
                    (rows, words) => rows.copy_from_slice(words),
                })?
            }
        }
        Op::Mirror { at, head, diffs } => {
            // The head's words go first, then move to their rows.
            execute(head, &mut out[..head.ty.len])?;
            with_scratch(diffs.ty.len, |d: &mut [T]| {
                execute(diffs, d)?;
                mirror_rows(out, *at, d);
                Ok(())
            })?
        }
    }
    Ok(())
}

/// Runs `parts` into `out` one after another (a Concat, a Partition's
/// classes' streams).
fn end_to_end<T: Word, L: LiteralSource>(
    parts: &[Program<L>],
    out: &mut [T],
) -> Result<(), L::Error> {
    let mut rest = out;
    for part in parts {
        let (head, tail) = rest.split_at_mut(part.ty.len);
        execute(part, head)?;
        rest = tail;
    }
    Ok(())
}

/// A Partition's group length, classes and parts.
type Partition<'a, L> = (usize, &'a Program<L>, &'a [Program<L>]);

/// Runs a Partition's classes, and its parts end to end in scratch words of
/// type `F`, then puts its groups into `out` with `put` (see
/// [`gather_partition`]).
fn run_partition<T: Word, F: Word, L: LiteralSource>(
    (group, classes, parts): Partition<'_, L>,
    out: &mut [T],
    put: impl FnMut(&mut [T], &[F]),
) -> Result<(), L::Error> {
    with_class_ids(classes, |ids, repeating| {
        with_scratch(out.len(), |words: &mut [F]| {
            end_to_end(parts, words)?;
            let mut lens = [0; MAX_PARTITION_CLASSES];
            let lens = &mut lens[..parts.len()];
            lens.iter_mut().zip(parts).for_each(|(n, p)| *n = p.ty.len);
            gather_partition(out, (group, repeating), ids, (words, lens), put).map_err(L::refuse)
        })
    })
}

/// Runs a Partition's classes and calls `f` with their ids and whether
/// those repeat to the classes' length: where the classes are a Repeat (or
/// a Repeat and the start of its body again, as a row's classes over a
/// chunk that ends inside a row), only the body's ids, which a gather
/// takes by repeats (see [`gather_partition`]); else every id.
fn with_class_ids<L: LiteralSource, R>(
    classes: &Program<L>,
    f: impl FnOnce(&[u32], bool) -> Result<R, L::Error>,
) -> Result<R, L::Error> {
    let Some((body, tail)) = repeated_body(classes) else {
        return with_every_id(classes, f);
    };
    let tail_len = tail.map_or(0, |t| t.ty.len);
    with_scratch(body.ty.len + tail_len, |ids: &mut [u32]| {
        let (head, rest) = ids.split_at_mut(body.ty.len);
        execute(body, head)?;
        if let Some(tail) = tail {
            execute(tail, rest)?;
        }
        match *rest == head[..tail_len] {
            true => f(head, true),
            // A tail that does not start the body again: every id.
            false => with_every_id(classes, f),
        }
    })
}

/// The body `classes` repeat, and the part after the Repeat if they are a
/// Repeat and one more part no longer than the body: None for any other
/// program.
fn repeated_body<L>(classes: &Program<L>) -> Option<(&Program<L>, Option<&Program<L>>)> {
    let (repeat, tail) = match &classes.op {
        Op::Concat(parts) => match &parts[..] {
            [repeat, tail] => (repeat, Some(tail)),
            _ => return None,
        },
        _ => (classes, None),
    };
    let Op::Repeat { body, .. } = &repeat.op else {
        return None;
    };
    let fits = tail.is_none_or(|t| t.ty.len <= body.ty.len);
    fits.then_some((&**body, tail))
}

/// Runs `classes` and calls `f` with every one of their ids.
fn with_every_id<L: LiteralSource, R>(
    classes: &Program<L>,
    f: impl FnOnce(&[u32], bool) -> Result<R, L::Error>,
) -> Result<R, L::Error> {
    with_scratch(classes.ty.len, |ids: &mut [u32]| {
        execute(classes, ids)?;
        f(ids, false)
    })
}

/// Whether `p` is a Partition of `len` words whose classes' literals write
/// straight into their rows: whole rows of a multiple of [`ROWS_ROUND`]
/// words.
fn in_rows<L: LiteralSource>(p: &Program<L>, len: usize) -> bool {
    let Op::Partition { group, parts, .. } = &p.op else {
        return false;
    };
    let literal_rows = |q: &Program<L>| matches!(&q.op, Op::Lit(lit) if lit.writes_rows());
    *group > 0
        && group.is_multiple_of(ROWS_ROUND)
        && len.is_multiple_of(*group)
        && parts.iter().all(literal_rows)
}

/// Runs a Partition of [`in_rows`]: each class's literal writes its words
/// straight into the class's rows of `out`. Refuses what
/// [`gather_partition`] refuses, before any literal runs.
fn partition_in_rows<T: Word, L: LiteralSource>(
    (group, classes, parts): Partition<'_, L>,
    out: &mut [T],
) -> Result<(), L::Error> {
    with_scratch(classes.ty.len, |ids: &mut [u32]| {
        execute(classes, ids)?;
        let mut counts = [0usize; MAX_PARTITION_CLASSES];
        for &class in ids.iter() {
            let count = (counts.get_mut(class as usize)).filter(|_| (class as usize) < parts.len());
            *count.ok_or_else(|| L::refuse("partition class without a part"))? += 1;
        }
        // As the parts' lengths sum to `out.len()`, none longer than its
        // rows means each exactly as long.
        if (counts.iter().zip(parts)).any(|(&rows, part)| rows * group > part.ty.len) {
            return Err(L::refuse("partition class longer than its part"));
        }
        // The classes' rows one class after another, each class's in
        // order: `next[c]` is where class `c`'s next row goes, and its end
        // once all are placed.
        let mut next = [0usize; MAX_PARTITION_CLASSES];
        for c in 1..parts.len() {
            next[c] = next[c - 1] + counts[c - 1];
        }
        with_scratch(ids.len(), |rows: &mut [u32]| {
            for (row, &class) in (0u32..).zip(ids.iter()) {
                rows[next[class as usize]] = row;
                next[class as usize] += 1;
            }
            let mut start = 0;
            for (part, &end) in parts.iter().zip(&next) {
                let Op::Lit(lit) = &part.op else {
                    unreachable!("in_rows checked that every part is a literal");
                };
                lit.write_rows(part.ty.width, out, group, &rows[start..end])?;
                start = end;
            }
            Ok(())
        })
    })
}

/// Ors a Partition's groups into `out` as a Merge field, from scratch words
/// of type `F`, the narrowest that holds them: no scratch of the Merge's
/// width, and none for a Merge it is a field of.
fn partition_field<T: Word, F: Word, L: LiteralSource>(
    partition: Partition<'_, L>,
    or_in: OrIn,
    out: &mut [T],
) -> Result<(), L::Error> {
    run_partition::<T, F, L>(partition, out, |rows, words| or_in.apply_all(rows, words))
}

fn is_partition<L>(part: &Program<L>) -> bool {
    matches!(part.op, Op::Partition { .. })
}

/// Whether `part` can be ored into a Merge's output without scratch of the
/// Merge's width (a Partition's groups are ored in from scratch of their
/// own).
fn ors_in<L: LiteralSource>(part: &Program<L>) -> bool {
    match &part.op {
        Op::Lit(lit) => lit.ors_in(),
        Op::Const(_) | Op::Partition { .. } => true,
        Op::Merge { parts, .. } => parts.iter().all(ors_in),
        _ => false,
    }
}

/// Ors the Merge field `part` into `out` (see [`OrIn`]): straight from its
/// literal or constant where it can, else through scratch.
fn merge_field<T: Word, L: LiteralSource>(
    part: &Program<L>,
    or_in: OrIn,
    out: &mut [T],
) -> Result<(), L::Error> {
    match &part.op {
        Op::Lit(lit) if lit.ors_in() => lit.or_words(part.ty.width, or_in, out),
        // Oring in zeros changes nothing (as in the zero low half of a
        // bf16 upcast to f32).
        Op::Const(0) if or_in.pending == 0 => Ok(()),
        Op::Const(w) => {
            out.iter_mut().for_each(|o| *o = or_in.apply(*o, *w));
            Ok(())
        }
        // A nested Merge's fields each go straight to their bits of `out`.
        Op::Merge { fields, parts } if parts.iter().all(ors_in) => {
            let shifts = fields.shifts(part.ty.width);
            let mut pending = or_in.pending;
            for (field, shift) in parts.iter().zip(shifts) {
                let shift = or_in.shift + shift;
                merge_field(field, OrIn { pending, shift }, out)?;
                pending = 0;
            }
            Ok(())
        }
        Op::Partition {
            group,
            classes,
            parts,
        } => {
            let partition = (*group, &**classes, &parts[..]);
            match part.ty.width {
                0..=8 => partition_field::<T, u8, L>(partition, or_in, out),
                9..=16 => partition_field::<T, u16, L>(partition, or_in, out),
                _ => partition_field::<T, u32, L>(partition, or_in, out),
            }
        }
        _ => match part.ty.width {
            0..=8 => merge_scratch::<T, u8, L>(part, or_in, out),
            9..=16 => merge_scratch::<T, u16, L>(part, or_in, out),
            _ => merge_scratch::<T, u32, L>(part, or_in, out),
        },
    }
}

/// Runs the Merge field `part` in scratch words of type `F`, the narrowest
/// that holds it, and ors them into `out`.
fn merge_scratch<T: Word, F: Word, L: LiteralSource>(
    part: &Program<L>,
    or_in: OrIn,
    out: &mut [T],
) -> Result<(), L::Error> {
    with_scratch(out.len(), |scratch: &mut [F]| {
        execute(part, scratch)?;
        or_in.apply_all(out, scratch);
        Ok(())
    })
}

/// Replaces each word of `out` by the running `step` of the words so far,
/// from `acc`.
#[inline(always)]
/// Adds to each word of `out` from its second row of `row` words on the
/// word a row above it (modulo `2^width`), row by row: the rows above are
/// final when a row is added to.
fn column_scan<T: Word>(out: &mut [T], row: usize, width: u32) {
    let m = mask(width);
    for start in (row..out.len()).step_by(row) {
        let (above, rest) = out.split_at_mut(start);
        let above = &above[start - row..];
        for (x, a) in rest.iter_mut().take(row).zip(above) {
            *x = T::from_u32(x.to_u32().wrapping_add(a.to_u32()) & m);
        }
    }
}

fn scan<T: Word>(out: &mut [T], mut acc: u32, step: impl Fn(u32, u32) -> u32) {
    for x in out.iter_mut() {
        acc = step(acc, x.to_u32());
        *x = T::from_u32(acc);
    }
}
