//! Where a rANS stream's words go: a slice in order, or the rows of a
//! Partition's class (docs/FORMAT.md, "Programs": `Partition`), which the
//! SIMD decoders write whole rounds of in place.

#![forbid(unsafe_code)]

use std::ops::Range;

use super::layout::LANES;
use crate::codec::word::Word;

/// Rows that [`decode_rows`](crate::codec::decode_rows) writes into are a
/// multiple of this many words: the widest round of a rANS stream's lanes,
/// which its SIMD decoders write at once.
pub const ROWS_ROUND: usize = 2 * LANES;

/// Where a stream's words go: a slice, in order, or the rows of a
/// Partition's class ([`Rows`]). Spans of whole rounds (`G * LANES`
/// words from a multiple of that) are written in place by the SIMD
/// decoders; the rest through [`Dest::with_words`].
pub(in crate::codec) trait Dest<T> {
    /// Words of the stream.
    fn words(&self) -> usize;
    /// The slots of words `start..start + len`, a whole round.
    fn span(&mut self, start: usize, len: usize) -> &mut [T];
    /// Runs `f` on slots for the words of `range`, and puts them in place.
    fn with_words<R>(&mut self, range: Range<usize>, f: impl FnOnce(&mut [T]) -> R) -> R;
}

impl<T> Dest<T> for [T] {
    fn words(&self) -> usize {
        self.len()
    }

    #[inline(always)]
    fn span(&mut self, start: usize, len: usize) -> &mut [T] {
        &mut self[start..start + len]
    }

    fn with_words<R>(&mut self, range: Range<usize>, f: impl FnOnce(&mut [T]) -> R) -> R {
        f(&mut self[range])
    }
}

/// The rows of `out` that hold a stream: word `k` goes to row
/// `rows[k / group]`, at `k % group` in it. Rows are whole rounds of
/// lanes, so every round the SIMD decoders write lies in one row.
pub(in crate::codec) struct Rows<'a, T> {
    out: &'a mut [T],
    group: usize,
    rows: &'a [u32],
}

impl<'a, T: Word> Rows<'a, T> {
    /// None unless `group` is a multiple of [`ROWS_ROUND`] (the widest
    /// round) and every row lies in `out`.
    pub(in crate::codec) fn new(out: &'a mut [T], group: usize, rows: &'a [u32]) -> Option<Self> {
        let inside = |&r: &u32| {
            (r as usize + 1)
                .checked_mul(group)
                .is_some_and(|e| e <= out.len())
        };
        (group > 0 && group.is_multiple_of(ROWS_ROUND) && rows.iter().all(inside)).then_some(Rows {
            out,
            group,
            rows,
        })
    }

    /// Where word `k` goes in `out`.
    fn at(&self, k: usize) -> usize {
        self.rows[k / self.group] as usize * self.group + k % self.group
    }
}

impl<T: Word> Dest<T> for Rows<'_, T> {
    fn words(&self) -> usize {
        self.rows.len().saturating_mul(self.group)
    }

    #[inline(always)]
    fn span(&mut self, start: usize, len: usize) -> &mut [T] {
        debug_assert!(start % self.group + len <= self.group);
        let at = self.at(start);
        &mut self.out[at..at + len]
    }

    fn with_words<R>(&mut self, range: Range<usize>, f: impl FnOnce(&mut [T]) -> R) -> R {
        let mut words = vec![T::default(); range.len()];
        let result = f(&mut words);
        for (k, w) in range.zip(words) {
            let at = self.at(k);
            self.out[at] = w;
        }
        result
    }
}
