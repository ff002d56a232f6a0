//! Mirrors: rows of a tensor that are their own mirror image, up to a
//! difference per word (format version 8).
//!
//! A basis of cosines and sines, as an STFT's convolution holds, has rows
//! that are symmetric (the cosines) or antisymmetric (the sines) about
//! their middle: the second half of each row is the first half reversed,
//! its signs flipped or not. A Mirror keeps each row's first half (its
//! head) and codes the rest as the xor of each word with the word it
//! mirrors: one word along a row (zero for a cosine, the sign bit for a
//! sine), but where a sine's zero keeps its sign.

use super::stream::Hint;
use crate::dsl::{Literal, Mirroring, Op, Program, Type};
use std::sync::Arc;

/// Rows shorter than this are not mirrored: a row's difference words are
/// then too few to code as a run.
const MIN_ROW: usize = 8;

/// A Mirror is built only where at most one mirrored word in this many
/// differs from its row's first difference: such differences code to
/// almost nothing, others to about what the words would.
const MAX_STRAY_DIVISOR: usize = 16;

/// The mirroring of `words`' rows (`hint.rows` words each), if they mirror
/// themselves: about the column past the last (`pivot = row`, a row of a
/// discrete Fourier basis, whose column `row - n` is column `n`'s mirror),
/// or about their middle (`pivot = row - 1`, a palindrome), with at most one
/// word in [`MAX_STRAY_DIVISOR`] whose difference from its mirror differs
/// from the row's first. The first row alone rejects most streams.
pub(super) fn mirroring(words: &[u32], hint: Hint) -> Option<Mirroring> {
    let row = hint.rows.filter(|&r| r >= MIN_ROW)?;
    let candidates = [
        Mirroring {
            row,
            tail: (row - 1) / 2,
            pivot: row,
        },
        Mirroring {
            row,
            tail: row / 2,
            pivot: row - 1,
        },
    ];
    (candidates.into_iter())
        .filter(|m| words.len() >= m.row && m.fits(words.len()))
        .find(|m| {
            let allowed = |rows: usize| rows * m.tail / MAX_STRAY_DIVISOR;
            strays(&words[..row], *m) <= allowed(1)
                && words
                    .chunks_exact(row)
                    .map(|r| strays(r, *m))
                    .sum::<usize>()
                    <= allowed(words.len() / row)
        })
}

/// The mirrored words of one row whose difference from their mirror word
/// is not the row's first.
fn strays(row: &[u32], m: Mirroring) -> usize {
    let kept = m.kept();
    let diff = |c: usize| row[c] ^ row[m.pivot - c];
    let first = diff(kept);
    (kept..m.row).filter(|&c| diff(c) != first).count()
}

/// The head (each row's first `row - tail` words, rows in order) and the
/// differences (each mirrored word xor its mirror) of `words`, whose length
/// `m` fits (see [`Mirroring::fits`]).
pub fn mirror_streams(words: &[u32], m: Mirroring) -> (Arc<[u32]>, Arc<[u32]>) {
    let kept = m.kept();
    let rows = words.chunks_exact(m.row);
    let head = rows.clone().flat_map(|r| &r[..kept]).copied().collect();
    let diffs = rows
        .flat_map(|r| (kept..m.row).map(move |c| r[c] ^ r[m.pivot - c]))
        .collect();
    (head, diffs)
}

/// The Mirror node of type `ty` with `m` and these children.
pub fn mirror_program(
    ty: Type,
    m: Mirroring,
    head: Program<Literal>,
    diffs: Program<Literal>,
) -> Program<Literal> {
    Program {
        ty,
        op: Op::Mirror {
            at: m,
            head: Box::new(head),
            diffs: Box::new(diffs),
        },
    }
}
