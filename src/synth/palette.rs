//! Palettes: streams with few distinct words in each group of consecutive
//! words (per-group codebooks), found and derived for the Palette operator.

use crate::dsl::{palette_table_len, palette_values_len, MAX_PALETTE_INDEX_WIDTH};

/// Narrowest words a Palette is tried for (16-bit floats and integers).
const PALETTE_MIN_WIDTH: u32 = 16;

/// Group lengths a Palette is tried at.
const PALETTE_GROUPS: [usize; 5] = [16, 32, 64, 128, 256];

/// The Palettes that fit `t`, as their group lengths and index widths: for
/// each group length, the narrowest index that holds every group's distinct
/// words, where the tables take at most
/// half the words and the stream has [`PALETTE_SPREAD`] times as many
/// distinct words as a table (else they would not pay for themselves). A group's first
/// words decide cheaply for most streams, which have too many distinct words.
pub(super) fn palettes(t: &[u32], width: u32) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    // Narrower words have alphabets a literal's table codes well.
    if width < PALETTE_MIN_WIDTH {
        return out;
    }
    for group in PALETTE_GROUPS.into_iter().filter(|&g| 2 * g <= t.len()) {
        let most = (group / 2).min(1 << MAX_PALETTE_INDEX_WIDTH);
        let fits = |words: &[u32]| distinct_at_most(words, most);
        let Some(first) = fits(&t[..group]) else {
            continue;
        };
        let Some(distinct) =
            (t.chunks(group).skip(1)).try_fold(first, |d, g| Some(d.max(fits(g)?)))
        else {
            continue;
        };
        let index_width = usize::BITS - (distinct.max(2) - 1).leading_zeros();
        let table = 1 << index_width;
        if index_width < width && table <= group / 2 && has_distinct(t, PALETTE_SPREAD * table) {
            out.push((group, index_width));
        }
    }
    out
}

/// A Palette pays where the whole stream has many more distinct words than
/// each group (a literal codes a small alphabet as well): at least this many
/// times its tables' length.
const PALETTE_SPREAD: usize = 4;

/// Whether `words` has more than `most` distinct words. (Fx hashing: the
/// keys are words, which need no defence against chosen collisions, and
/// the scan hashes each word of the stream, where a slower hash would
/// outweigh everything else it does.)
fn has_distinct(words: &[u32], most: usize) -> bool {
    let mut seen = rustc_hash::FxHashSet::with_capacity_and_hasher(most + 1, Default::default());
    words.iter().any(|w| {
        seen.insert(*w);
        seen.len() > most
    })
}

/// The number of distinct words of `words`, if at most `most`.
fn distinct_at_most(words: &[u32], most: usize) -> Option<usize> {
    let mut sorted = words.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() <= most).then_some(sorted.len())
}

/// A Palette's children for `t`: each group's distinct words in increasing
/// order, padded to `2^index_width` by repeating the largest (values), and
/// each word's place in its group's table (indices); None if a group has
/// more distinct words than a table holds.
pub fn palette_streams(t: &[u32], group: usize, index_width: u32) -> Option<(Vec<u32>, Vec<u32>)> {
    let table = palette_table_len(index_width);
    let mut values = Vec::with_capacity(palette_values_len(t.len(), group, index_width));
    let mut indices = Vec::with_capacity(t.len());
    for words in t.chunks(group) {
        let start = values.len();
        values.extend_from_slice(words);
        values[start..].sort_unstable();
        let mut kept = start;
        for i in start..values.len() {
            if i == start || values[i] != values[kept - 1] {
                values[kept] = values[i];
                kept += 1;
            }
        }
        if kept - start > table {
            return None;
        }
        values.truncate(kept);
        let tab = &values[start..];
        indices.extend(words.iter().map(|w| tab.partition_point(|v| v < w) as u32));
        let last = values[kept - 1];
        values.resize(start + table, last);
    }
    Some((values, indices))
}
