//! The Mirror operator's rows (docs/FORMAT.md, "Programs": `Mirror`): where
//! each row's mirrored words are read from, and the rows made from the head
//! and the differences.

use crate::codec;

/// Where a Mirror's rows take their mirrored words from: rows of `row`
/// words whose last `tail` words, at column `c`, mirror column `pivot - c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mirroring {
    pub row: usize,
    pub tail: usize,
    pub pivot: usize,
}

impl Mirroring {
    /// Whether a Mirror of `len` words may mirror so: the rows are whole
    /// (`len` a multiple of `row`), each keeps at least as many words as it
    /// mirrors, and every mirrored word reads a kept one (`row - 1 <= pivot
    /// <= 2 * (row - tail) - 1`).
    pub fn fits(self, len: usize) -> bool {
        let Mirroring { row, tail, pivot } = self;
        row >= 2
            && len.is_multiple_of(row)
            && (1..=row / 2).contains(&tail)
            && pivot >= row - 1
            && pivot < 2 * (row - tail)
    }

    /// The words each row keeps: its head's.
    pub fn kept(self) -> usize {
        self.row - self.tail
    }
}

/// Makes a Mirror's rows in `out` (see [`Op::Mirror`](super::Op::Mirror)),
/// whose first `out.len() / at.row * at.kept()` words hold the head's
/// words: each row's kept words are moved to its place (the last row first,
/// as every row moves forward), then its last `at.tail` words read their
/// mirror words xor the next of `diffs`. `at` must fit `out` (see
/// [`Mirroring::fits`]) and `diffs` hold `at.tail` words a row, which the
/// program's types guarantee. Work is O(out.len()).
pub fn mirror_rows<T: codec::Word>(out: &mut [T], at: Mirroring, diffs: &[T]) {
    let kept = at.kept();
    let rows = out.len() / at.row;
    for r in (1..rows).rev() {
        out.copy_within(r * kept..(r + 1) * kept, r * at.row);
    }
    for (words, diffs) in out
        .chunks_exact_mut(at.row)
        .zip(diffs.chunks_exact(at.tail))
    {
        let (head, mirrored) = words.split_at_mut(kept);
        for (c, (w, &d)) in (kept..).zip(mirrored.iter_mut().zip(diffs)) {
            *w = T::from_u32(head[at.pivot - c].to_u32() ^ d.to_u32());
        }
    }
}
