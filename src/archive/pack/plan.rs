//! Planning a safetensors file's chunks: the header, each tensor and the
//! gaps between them cut into chunks of whole elements, each tensor's
//! chunks with their class, their base's bytes and their rows.

#![forbid(unsafe_code)]

use super::bases::{Bases, Origin};
use super::options::PackOptions;
use super::width::{against_base, tables_per_plane, tensor_chunk};
use crate::archive::format::{checksum, MAX_CHUNK_BYTES};
use crate::archive::reader::fingerprint as fingerprint_of_sums;
use crate::error::{Error, IoContext, Result};
use crate::safetensors::{self, Element, SourceLayout, TensorInfo};
use crate::synth::Columns;
use rayon::prelude::*;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A span of the source to become one chunk.
#[derive(Clone, Copy, Debug)]
pub(super) struct Planned {
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) element: Element,
    /// The class of the tensor it is a piece of, if any: tensors of one dtype
    /// and shape, whose chunks re-fit programs searched on others (see
    /// `pipeline`).
    pub(super) class: Option<usize>,
    /// Whether its tensor is the first of its class.
    pub(super) leads: bool,
    /// Its place among the chunks of its region, and their number.
    pub(super) nth: u64,
    pub(super) count: u64,
    /// Where a base has the same bytes of its tensor, if one has.
    pub(super) base: Option<Origin>,
    /// The length of the groups of its elements that lie in one row of its
    /// tensor (see [`Hint::rows`](crate::synth::Hint::rows)).
    pub(super) rows: Option<usize>,
    /// Its tensor's row length and the column of its first element (see
    /// [`Hint::columns`](crate::synth::Hint::columns)).
    pub(super) columns: Option<Columns>,
}

impl Planned {
    /// Whether the chunk is searched afresh rather than re-fit from another
    /// chunk of its class: chunks outside tensors, and the representative of
    /// the tensor that leads its class.
    pub(super) fn searched(&self) -> bool {
        self.class.is_none() || (self.leads && self.nth == self.representative())
    }

    /// The chunk of its region whose program is the first template of a class:
    /// the middle one, as the first often differs from the rest (an
    /// embedding's first rows are its special tokens).
    pub(super) fn representative(&self) -> u64 {
        (self.count - 1) / 2
    }
}

/// A region's last chunk takes in a remainder shorter than 1/this of a
/// chunk, rather than leave it a chunk of its own that pays for its code
/// tables again: a tensor a little longer than a chunk would otherwise pay
/// for two chunks' tables for little more than one chunk's bytes.
const TAIL_SHARE: u64 = 2;

/// The pieces `(offset, length)` that `len` bytes are cut into at `step`:
/// all `step` long but the last, which takes in a remainder shorter than
/// 1/[`TAIL_SHARE`] of a step (within [`MAX_CHUNK_BYTES`]).
pub(super) fn pieces(len: u64, step: u64) -> impl Iterator<Item = (u64, u64)> {
    let tail = len % step;
    let mut count = len.div_ceil(step);
    if count >= 2 && tail > 0 && tail * TAIL_SHARE < step && step + tail <= MAX_CHUNK_BYTES {
        count -= 1;
    }
    (0..count).map(move |nth| {
        let at = nth * step;
        (at, if nth + 1 == count { len - at } else { step })
    })
}

/// A tensor's class, whether it leads it, where a base has it, and its row
/// length in elements (see [`push_region`]).
type Region = (Option<usize>, bool, Option<Origin>, Option<u64>);

/// Splits `[start, end)` into chunks of whole elements (see [`pieces`]).
fn push_region(
    plan: &mut Vec<Planned>,
    (start, end): (u64, u64),
    element: Element,
    (class, leads, base, row): Region,
    chunk: u64,
) {
    let e = element.layout.element_bytes() as u64;
    let step = (chunk / e).max(1) * e;
    let cut: Vec<_> = pieces(end.saturating_sub(start), step).collect();
    let count = cut.len() as u64;
    plan.extend((0..count).zip(cut).map(|(nth, (at, len))| Planned {
        start: start + at,
        len,
        element,
        class,
        leads,
        nth,
        count,
        base: base.map(|origin| origin.plus(at)),
        rows: row.map(|row| gcd(row, at / e) as usize),
        columns: row.map(|row| Columns {
            row: row as usize,
            first: (at / e % row) as usize,
        }),
    }));
}

/// The greatest common divisor (`a` for `b = 0`).
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// How a file is cut into chunks.
#[derive(Clone, Copy)]
pub(super) struct Chunking {
    /// Source bytes per chunk.
    pub(super) chunk: u64,
    /// See [`PackOptions::adapt_chunks`].
    pub(super) adapt: bool,
    /// Whether a matrix's rows may be coded in classes, each with its own
    /// tables (see `SynthOptions::partitions`).
    pub(super) row_classes: bool,
}

impl Chunking {
    /// The chunks `opts` ask for.
    pub(super) fn of(opts: &PackOptions) -> Chunking {
        Chunking {
            adapt: opts.adapt_chunks,
            row_classes: opts.synth.partitions,
            ..Chunking::fixed(opts.chunk_size)
        }
    }

    /// Chunks of `chunk_size` bytes (clamped to what the format allows),
    /// never widened.
    pub(super) fn fixed(chunk_size: usize) -> Chunking {
        Chunking {
            chunk: chunk_size.clamp(64, MAX_CHUNK_BYTES as usize) as u64,
            adapt: false,
            row_classes: false,
        }
    }
}

/// Chunks covering `[0, size)` of the safetensors file `file` (named `src`
/// in errors): header, tensors, and any gaps between them; with `adapt`, a
/// tensor without a base may take wider chunks (see [`tensor_chunk`]), and
/// one with a base its base's chunks (see [`against_base`]).
pub(super) fn plan(
    src: &Path,
    file: &File,
    size: u64,
    chunking: Chunking,
    bases: &mut Bases,
) -> Result<Vec<Planned>> {
    let layout = safetensors::parse(size, |n| {
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, 0).map(|_| buf)
    })
    .map_err(|reason| Error::NotSafetensors {
        path: src.to_path_buf(),
        reason,
    })?;
    let read_of = |t: &TensorInfo| tensor_reader(file, src, t);
    let found = tensor_bases(&layout.tensors, bases, read_of)?;
    let elements: Vec<Element> = (layout.tensors.iter())
        .map(|t| Element::of_dtype(&t.dtype))
        .collect();
    let steps = tensor_steps(&layout, (&found, &elements), chunking, bases, read_of)?;
    let tensors = (found.into_iter().zip(elements)).zip(steps);
    Ok(cut(&layout, tensors, (chunking.chunk, size), bases))
}

/// Where a base has a tensor's bytes, if one has.
type Found = Option<Origin>;

/// A reader of tensor `t`'s bytes in `file` (named `src` in errors), at
/// offsets from the tensor's start.
fn tensor_reader<'f>(
    file: &'f File,
    src: &'f Path,
    t: &TensorInfo,
) -> impl Fn(u64, &mut [u8]) -> Result<()> + 'f {
    let start = t.start;
    move |at: u64, out: &mut [u8]| file.read_exact_at(out, start + at).at(src)
}

/// Which base has each tensor, and where its bytes lie there (see
/// [`Bases::offset_of`]), looked up in order.
fn tensor_bases<R: Fn(u64, &mut [u8]) -> Result<()>>(
    tensors: &[TensorInfo],
    bases: &mut Bases,
    read_of: impl Fn(&TensorInfo) -> R,
) -> Result<Vec<Found>> {
    (tensors.iter())
        .map(|t| {
            let fingerprint = |step| fingerprint(t.end - t.start, step, read_of(t));
            bases.offset_of(t, fingerprint, read_of(t))
        })
        .collect()
}

/// The chunk size of each tensor: with `adapt`, one without a base
/// estimated in parallel, each tensor a task of its own (their sizes differ
/// a thousandfold), and one with a base its base's chunks.
fn tensor_steps<R: Fn(u64, &mut [u8]) -> Result<()>>(
    layout: &SourceLayout,
    (found, elements): (&[Found], &[Element]),
    chunking: Chunking,
    bases: &Bases,
    read_of: impl Fn(&TensorInfo) -> R + Sync,
) -> Result<Vec<u64>> {
    let Chunking { chunk, adapt, .. } = chunking;
    let each = (layout.tensors.par_iter().zip(found).zip(elements)).with_max_len(1);
    each.map(|((t, base), &element)| match (adapt, base) {
        (true, None) => {
            let tables = tables_per_plane(&t.shape, chunking.row_classes);
            tensor_chunk(t.end - t.start, (element, tables), chunk, read_of(t))
        }
        (true, Some(origin)) => Ok(bases
            .chunk_at(*origin)
            .map_or(chunk, |step| against_base(step, chunk))),
        (false, _) => Ok(chunk),
    })
    .collect()
}

/// The chunks of `layout`'s header, its `tensors` (each with its base, its
/// element and its chunk size; against a row map, in the sections of
/// [`Bases::sections`]) and the gaps between them, up to `size`.
fn cut(
    layout: &SourceLayout,
    tensors: impl Iterator<Item = ((Found, Element), u64)>,
    (chunk, size): (u64, u64),
    bases: &Bases,
) -> Vec<Planned> {
    let mut plan = Vec::new();
    let bytes = Element::BYTES;
    let none = (None, false, None, None);
    push_region(&mut plan, (0, layout.header_end), bytes, none, chunk);
    let mut at = layout.header_end;
    let mut classes = HashMap::new();
    for (t, ((base, element), step)) in layout.tensors.iter().zip(tensors) {
        push_region(&mut plan, (at, t.start), bytes, none, chunk);
        // Rows of at least two elements (a matrix's last dimension).
        let row = (t.shape.len() >= 2).then(|| t.shape[t.shape.len() - 1]);
        let row = row.filter(|&r| r >= 2);
        let sections = bases.sections(base, t.end - t.start, step);
        for (section, (from, to)) in sections.into_iter().enumerate() {
            // Chunks coded against a base are a class apart: their residuals
            // against the base look nothing like the values. So are the
            // sections of one against a row map: its new rows are values.
            let next = classes.len();
            let key = (&t.dtype, &t.shape, base.is_some(), section);
            let class = *classes.entry(key).or_insert(next);
            let group = (Some(class), class == next, base.map(|o| o.plus(from)), row);
            let region = (t.start + from, t.start + to);
            push_region(&mut plan, region, element, group, step);
        }
        at = at.max(t.end);
    }
    push_region(&mut plan, (at, size), bytes, none, chunk);
    plan
}

/// The fingerprint (see [`Archive::fingerprint`](crate::archive::Archive::fingerprint))
/// of `len` bytes that `read(offset, buffer)` gives, cut into chunks at
/// `step` as the packer cuts a tensor.
fn fingerprint(
    len: u64,
    step: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<u64> {
    let mut buf = Vec::new();
    let mut sums = Vec::new();
    for (at, n) in pieces(len, step.max(1)) {
        buf.resize(n as usize, 0);
        read(at, &mut buf)?;
        sums.push(checksum(&buf));
    }
    Ok(fingerprint_of_sums(sums.into_iter()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_tile_the_region_and_take_in_short_tails() {
        let cut = |len, step| pieces(len, step).collect::<Vec<_>>();
        assert_eq!(cut(9, 4), [(0, 4), (4, 5)]);
        // Half a chunk stays a chunk of its own.
        assert_eq!(cut(10, 4), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(cut(8, 4), [(0, 4), (4, 4)]);
        assert_eq!(cut(3, 4), [(0, 3)]);
        assert_eq!(cut(0, 4), []);
        // Never beyond the format's longest chunk.
        let max = MAX_CHUNK_BYTES;
        assert_eq!(cut(max + 1, max), [(0, max), (max, 1)]);
        for len in 0..200 {
            for step in 1..40 {
                let p = cut(len, step);
                let mut at = 0;
                for &(start, n) in &p {
                    assert_eq!(start, at);
                    assert!(n > 0 && n < step + step.div_ceil(2));
                    at += n;
                }
                assert_eq!(at, len);
            }
        }
    }
}
