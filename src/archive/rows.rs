//! Row maps (format version 9): a tensor whose rows are rows of a base's
//! tensor in another order, or some of them, with rows of its own among
//! them (a vocabulary extended, or pruned and reordered, changes an
//! embedding's shape, so no span of the base lines up with it). A map lists
//! which base row each of its rows is, in runs; the bytes it stands for,
//! the base's rows in the map's order (zeros for rows it has no base row
//! for), are what a chunk referencing it combines with, as a chunk
//! referencing a span of the base combines with that span.

#![forbid(unsafe_code)]

use crate::wire::{put_varint, Reader, WireError};

/// Rows of a base's source, `row_len` bytes each from `origin`, in the
/// order and with the gaps of its runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowMap {
    /// Which of the index's bases.
    pub base: u32,
    /// Where the base's row 0 starts in its source.
    pub origin: u64,
    /// Bytes per row.
    pub row_len: u64,
    runs: Vec<Run>,
    /// The map's row where each run starts, and its row count at the end:
    /// a binary search finds the run of any byte.
    starts: Vec<u64>,
    /// The first base row it takes and the row after its last (both 0
    /// where it takes none).
    base_rows: (u64, u64),
}

/// Consecutive rows of a map: `rows` base rows from `from`, or rows that
/// have none (`from` is `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub rows: u64,
    pub from: Option<u64>,
}

/// Longest row a map may have: as long as the longest chunk, which a
/// row longer than that would not fit in anyway.
const MAX_ROW_BYTES: u64 = 64 << 20;

/// Average rows per run below which a map is [`RowMap::scattered`].
const SCATTERED_RUN_ROWS: u64 = 8;

/// Smallest encoded map: base, origin, row length, run count, one run of
/// two bytes.
pub(super) const MIN_MAP_LEN: usize = 6;

impl RowMap {
    /// A map of `runs` (none empty) of base `base`'s rows; `None` if its
    /// bytes would not fit in a `u64`.
    pub fn new(base: u32, origin: u64, row_len: u64, runs: Vec<Run>) -> Option<RowMap> {
        let mut starts = Vec::with_capacity(runs.len() + 1);
        let mut at = 0u64;
        starts.push(0);
        for run in &runs {
            at = at.checked_add(run.rows)?;
            starts.push(at);
        }
        at.checked_mul(row_len)?;
        let (mut first, mut end) = (u64::MAX, 0);
        for run in &runs {
            if let Some(from) = run.from {
                (first, end) = (first.min(from), end.max(from.checked_add(run.rows)?));
            }
        }
        Some(RowMap {
            base,
            origin,
            row_len,
            runs,
            starts,
            base_rows: (first.min(end), end),
        })
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Bytes the map stands for: its rows times the row length.
    pub fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1] * self.row_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether its rows come from all over its base tensor, a few at a
    /// time: runs of fewer than [`SCATTERED_RUN_ROWS`] rows on average.
    pub fn scattered(&self) -> bool {
        self.runs.len() as u64 * SCATTERED_RUN_ROWS > self.starts[self.runs.len()]
    }

    /// The base's source bytes its rows lie in: from its first row to the
    /// end of its last (empty if it takes none).
    pub fn base_span(&self) -> std::ops::Range<u64> {
        let (first, end) = self.base_rows;
        self.origin + first * self.row_len..self.origin + end * self.row_len
    }

    /// The end of the base's source bytes its rows reach (0 if it takes
    /// none), or `None` past `u64`.
    fn base_end(&self) -> Option<u64> {
        (self.base_rows.1.checked_mul(self.row_len)?).checked_add(self.origin)
    }

    /// The pieces of the map's bytes `[offset, offset + len)` (which lie
    /// inside it), in order: `(at, n, from)`, `n` bytes at `at` from the
    /// offset, which are the base's source bytes from `from`, or zeros.
    pub fn pieces(
        &self,
        offset: u64,
        len: u64,
    ) -> impl Iterator<Item = (u64, u64, Option<u64>)> + '_ {
        let end = offset + len;
        let first = self.starts.partition_point(|&s| s * self.row_len <= offset) - 1;
        let mut at = offset;
        (first..self.runs.len()).map_while(move |k| {
            if at >= end {
                return None;
            }
            let (run, start) = (self.runs[k], self.starts[k] * self.row_len);
            let stop = end.min(self.starts[k + 1] * self.row_len);
            let from = run
                .from
                .map(|f| self.origin + f * self.row_len + (at - start));
            let piece = (at - offset, stop - at, from);
            at = stop;
            Some(piece)
        })
    }

    /// The map's bytes in an index: base, origin, row length, then its
    /// runs, each base row given by how far it is from the row after the
    /// previous run's.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.base as u64);
        put_varint(out, self.origin);
        put_varint(out, self.row_len);
        put_varint(out, self.runs.len() as u64);
        let mut next = 0u64;
        for run in &self.runs {
            put_varint(out, run.rows);
            match run.from {
                None => put_varint(out, 0),
                Some(from) => {
                    put_varint(out, 1 + zigzag(from.wrapping_sub(next) as i64));
                    next = from + run.rows;
                }
            }
        }
    }

    /// Reads a map of an index whose bases' sources are `base_lens` long,
    /// checking that its rows lie inside its base's source.
    pub fn decode(r: &mut Reader, base_lens: &[u64]) -> Result<RowMap, WireError> {
        let max_base = (base_lens.len() as u64).checked_sub(1);
        let max_base = max_base.ok_or_else(|| r.error("a row map needs a base"))?;
        let base = r.varint_max(max_base, "row map's base number out of range")?;
        let origin = r.varint()?;
        let row_len = r.varint_max(MAX_ROW_BYTES, "row longer than the maximum")?;
        if row_len == 0 {
            return Err(r.error("rows of no bytes"));
        }
        let max_runs = (r.remaining() / 2) as u64;
        let count = r.varint_max(max_runs, "run count exceeds index size")?;
        let mut runs = Vec::with_capacity(count as usize);
        let mut next = 0u64;
        for _ in 0..count {
            let rows = r.varint()?;
            let code = r.varint()?;
            if rows == 0 {
                return Err(r.error("a run of no rows"));
            }
            let from = match code {
                0 => None,
                code => {
                    let from = next.checked_add_signed(unzigzag(code - 1));
                    let from = from.ok_or_else(|| r.error("run starts before the base's rows"))?;
                    next = from
                        .checked_add(rows)
                        .ok_or_else(|| r.error("run too long"))?;
                    Some(from)
                }
            };
            runs.push(Run { rows, from });
        }
        let map = RowMap::new(base as u32, origin, row_len, runs);
        let map = map.ok_or_else(|| r.error("row map longer than the maximum"))?;
        let fits = map
            .base_end()
            .is_some_and(|e| e <= base_lens[base as usize]);
        if !fits {
            return Err(r.error("row map's rows beyond the base's source"));
        }
        Ok(map)
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(runs: &[(u64, Option<u64>)]) -> RowMap {
        let runs = runs
            .iter()
            .map(|&(rows, from)| Run { rows, from })
            .collect();
        RowMap::new(0, 100, 4, runs).unwrap()
    }

    #[test]
    fn pieces_follow_runs_and_cut_rows_where_asked() {
        // Rows 0..3 of the base, two rows of its own, then base row 7.
        let m = map(&[(3, Some(0)), (2, None), (1, Some(7))]);
        assert_eq!(m.len(), 24);
        let all: Vec<_> = m.pieces(0, 24).collect();
        assert_eq!(all, [(0, 12, Some(100)), (12, 8, None), (20, 4, Some(128))]);
        // From inside a row to inside another run.
        let some: Vec<_> = m.pieces(6, 8).collect();
        assert_eq!(some, [(0, 6, Some(106)), (6, 2, None)]);
        let last: Vec<_> = m.pieces(21, 3).collect();
        assert_eq!(last, [(0, 3, Some(129))]);
    }

    #[test]
    fn maps_round_trip_and_are_checked_against_their_base() {
        let m = map(&[(3, Some(5)), (2, None), (1, Some(0)), (4, Some(9))]);
        let mut bytes = Vec::new();
        m.encode(&mut bytes);
        let back = RowMap::decode(&mut Reader::new(&bytes), &[100 + 13 * 4]).unwrap();
        assert_eq!(back, m);
        let short = RowMap::decode(&mut Reader::new(&bytes), &[100 + 13 * 4 - 1]);
        assert_eq!(
            short.unwrap_err().reason,
            "row map's rows beyond the base's source"
        );
        let err = RowMap::decode(&mut Reader::new(&bytes), &[]).unwrap_err();
        assert_eq!(err.reason, "a row map needs a base");
    }

    #[test]
    fn runs_before_the_first_row_and_empty_runs_are_refused() {
        // Base 0, origin 0, rows of 4, one run of 2 rows from row -1.
        let before = [0, 0, 4, 1, 2, 1 + 1];
        let err = RowMap::decode(&mut Reader::new(&before), &[1000]).unwrap_err();
        assert_eq!(err.reason, "run starts before the base's rows");
        let empty = [0, 0, 4, 1, 0, 1];
        let err = RowMap::decode(&mut Reader::new(&empty), &[1000]).unwrap_err();
        assert_eq!(err.reason, "a run of no rows");
        let no_bytes = [0, 0, 0, 1, 1, 1];
        let err = RowMap::decode(&mut Reader::new(&no_bytes), &[1000]).unwrap_err();
        assert_eq!(err.reason, "rows of no bytes");
    }

    proptest! {
        #[test]
        fn map_decoder_survives_arbitrary_and_damaged_bytes(
            bytes: Vec<u8>,
            runs in proptest::collection::vec((1u64..300, proptest::option::of(0u64..1000)), 1..20),
            at: usize,
            bit in 0u8..8,
        ) {
            let _ = RowMap::decode(&mut Reader::new(&bytes), &[u64::MAX]);
            let m = map(&runs.iter().map(|&(n, f)| (n, f)).collect::<Vec<_>>());
            let mut encoded = Vec::new();
            m.encode(&mut encoded);
            prop_assert_eq!(&RowMap::decode(&mut Reader::new(&encoded), &[u64::MAX]).unwrap(), &m);
            let k = at % encoded.len();
            encoded[k] ^= 1 << bit;
            if let Ok(d) = RowMap::decode(&mut Reader::new(&encoded), &[1 << 20]) {
                // Whatever it reads lies inside the base and tiles the map.
                let mut total = 0;
                for (at, n, from) in d.pieces(0, d.len()) {
                    prop_assert_eq!(at, total);
                    total += n;
                    prop_assert!(from.is_none_or(|f| f + n <= 1 << 20));
                }
                prop_assert_eq!(total, d.len());
            }
        }
    }
}
