//! Finding a tensor's rows among a base tensor's: each base row hashed
//! into a table, each row of the tensor looked up and confirmed by its
//! bytes. A vocabulary extended, or pruned and reordered, keeps most of an
//! embedding's rows as they were, at other places; the rows found become a
//! row map (see [`RowMap`](crate::archive::RowMap)), the rest are coded as
//! any bytes.

#![forbid(unsafe_code)]

use crate::archive::format::checksum;
use crate::archive::{RowMap, Run};
use crate::error::Result;
use rayon::prelude::*;
use std::collections::HashMap;

/// Bytes of a tensor read at once while its rows are looked up.
const BLOCK_BYTES: u64 = 4 << 20;

/// A base tensor's rows, indexed by content.
pub(super) struct BaseRows<'a> {
    bytes: &'a [u8],
    row_len: usize,
    /// Each row's XXH3-64, with the first row that has it.
    by_hash: HashMap<u64, u64>,
}

impl<'a> BaseRows<'a> {
    /// Indexes the rows of `bytes`, `row_len` bytes each.
    pub(super) fn new(bytes: &'a [u8], row_len: usize) -> BaseRows<'a> {
        let hashes: Vec<u64> = bytes.par_chunks_exact(row_len).map(checksum).collect();
        let mut by_hash = HashMap::with_capacity(hashes.len());
        for (row, h) in hashes.into_iter().enumerate() {
            by_hash.entry(h).or_insert(row as u64);
        }
        BaseRows {
            bytes,
            row_len,
            by_hash,
        }
    }

    fn rows(&self) -> u64 {
        (self.bytes.len() / self.row_len) as u64
    }

    /// The base row with the bytes of `row`, if there is one.
    fn find(&self, row: &[u8]) -> Option<u64> {
        let at = *self.by_hash.get(&checksum(row))?;
        let start = at as usize * self.row_len;
        (&self.bytes[start..start + self.row_len] == row).then_some(at)
    }
}

/// The runs of a row map of the `rows` rows that `read(offset, buffer)`
/// gives against `base`, if it is worth one: where at least a quarter of
/// them are found, or where `same_name` (the base tensor is the one of the
/// tensor's name) and the rows found are mostly at their own places (or
/// none is). With `same_name` a row not found is taken as the base row at
/// its own place, if there is one: a fine-tune that trained its old rows
/// as well as adding new ones then differs from its base as little as any
/// other tensor does.
pub(super) fn find_rows(
    base: &BaseRows,
    rows: u64,
    same_name: bool,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<Option<Vec<Run>>> {
    let row_len = base.row_len as u64;
    let per_block = (BLOCK_BYTES / row_len).max(1);
    let mut found: Vec<Option<u64>> = Vec::with_capacity(rows as usize);
    let mut block = Vec::new();
    for first in (0..rows).step_by(per_block as usize) {
        let n = per_block.min(rows - first);
        block.resize((n * row_len) as usize, 0);
        read(first * row_len, &mut block)?;
        found.par_extend(block.par_chunks_exact(base.row_len).map(|r| base.find(r)));
    }
    let hits = found.iter().flatten().count() as u64;
    let in_place = (found.iter().enumerate())
        .filter(|&(i, f)| *f == Some(i as u64))
        .count() as u64;
    let positional = same_name && (hits == 0 || in_place * 2 >= hits);
    if hits * 4 < rows && !positional {
        return Ok(None);
    }
    if positional {
        let own = |(i, f): (usize, &mut Option<u64>)| {
            if f.is_none() && (i as u64) < base.rows() {
                *f = Some(i as u64);
            }
        };
        found.iter_mut().enumerate().for_each(own);
    }
    Ok(Some(runs_of(&found)))
}

/// The byte ranges a tensor coded against `map` is cut into before its
/// chunks are: apart where a run without base rows at least `least` bytes
/// long starts and ends (the rows a vocabulary appended). A chunk of both
/// would be the residual's zeros and then new rows, which a program
/// searched on its first words codes as neither.
pub(super) fn sections(map: &RowMap, least: u64) -> Vec<(u64, u64)> {
    let mut cuts = vec![0];
    let mut at = 0;
    for run in map.runs() {
        let end = at + run.rows * map.row_len;
        if run.from.is_none() && end - at >= least {
            cuts.extend([at, end]);
        }
        at = end;
    }
    cuts.push(at);
    cuts.dedup();
    cuts.windows(2).map(|w| (w[0], w[1])).collect()
}

/// Consecutive rows merged into runs: rows with no base row, or base rows
/// that follow one another.
fn runs_of(found: &[Option<u64>]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for &from in found {
        match runs.last_mut() {
            Some(last)
                if last.from.map(|f| f + last.rows) == from
                    || (last.from, from) == (None, None) =>
            {
                last.rows += 1
            }
            _ => runs.push(Run { rows: 1, from }),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` rows of 8 bytes, row `i` all `i + 1`.
    fn rows(ids: &[u8]) -> Vec<u8> {
        ids.iter().flat_map(|&i| [i; 8]).collect()
    }

    fn runs(base: &[u8], target: &[u8], same_name: bool) -> Option<Vec<(u64, Option<u64>)>> {
        let base = BaseRows::new(base, 8);
        let read = |at: u64, out: &mut [u8]| {
            out.copy_from_slice(&target[at as usize..at as usize + out.len()]);
            Ok(())
        };
        let found = find_rows(&base, target.len() as u64 / 8, same_name, read).unwrap();
        found.map(|r| r.iter().map(|r| (r.rows, r.from)).collect())
    }

    #[test]
    fn appended_rows_follow_the_base_rows_in_one_run() {
        let base = rows(&[1, 2, 3, 4]);
        let tuned = rows(&[1, 2, 3, 4, 9, 9]);
        assert_eq!(
            runs(&base, &tuned, true).unwrap(),
            [(4, Some(0)), (2, None)]
        );
    }

    #[test]
    fn reordered_rows_are_found_wherever_they_are() {
        let base = rows(&[1, 2, 3, 4, 5]);
        let pruned = rows(&[5, 3, 4, 7]);
        let expected = [(1, Some(4)), (2, Some(2)), (1, None)];
        assert_eq!(runs(&base, &pruned, false).unwrap(), expected);
        // Under the base tensor's own name alike: its rows are not in place.
        assert_eq!(runs(&base, &pruned, true).unwrap(), expected);
    }

    #[test]
    fn rows_changed_in_place_refer_to_their_own_row_under_one_name() {
        let base = rows(&[1, 2, 3]);
        let trained = rows(&[11, 12, 13, 14]);
        assert_eq!(
            runs(&base, &trained, true).unwrap(),
            [(3, Some(0)), (1, None)]
        );
        assert_eq!(runs(&base, &trained, false), None, "nothing in common");
    }

    #[test]
    fn long_runs_of_new_rows_are_sections_of_their_own() {
        let run = |rows, from| Run { rows, from };
        let runs = vec![
            run(10, Some(0)),
            run(1, None),
            run(2, Some(20)),
            run(5, None),
        ];
        let map = RowMap::new(0, 0, 8, runs).unwrap();
        assert_eq!(sections(&map, 32), [(0, 104), (104, 144)]);
        assert_eq!(
            sections(&map, 8),
            [(0, 80), (80, 88), (88, 104), (104, 144)]
        );
        assert_eq!(sections(&map, 64), [(0, 144)]);
    }

    #[test]
    fn a_tensor_with_few_rows_of_another_is_not_mapped() {
        let base = rows(&[1, 2, 3, 4]);
        let other = rows(&[1, 20, 30, 40, 50]);
        assert_eq!(runs(&base, &other, false), None);
    }
}
