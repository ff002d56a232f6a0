//! The symbol set shared by Huffman and rANS (docs/FORMAT.md, "Symbol set
//! (shared by Huffman and rANS)"): the sorted distinct words of a stream,
//! each with a positive value (a code length or a frequency).
//!
//! Two layouts; the encoder writes whichever is smaller (range on ties):
//! - range: `[min, max]` with one entry per value in between, 0 for absent
//!   words. Small when the alphabet is dense, e.g. the 256 mantissa bytes.
//! - list: the first word, then each gap to the next word minus one, then the
//!   values in order. Small when the words are sparse, e.g. 16-bit words.
//!
//! Values are stored as 4-bit nibbles (code lengths), varints (frequencies)
//! or rounded values (counts to a few significant bits, see `rounded`).

#![forbid(unsafe_code)]

use super::rounded;
use super::width::word_mask;
use crate::wire::{put_varint, varint_len, Reader, WireError};

/// Largest alphabet Huffman and rANS accept; it bounds every decoding table.
pub const MAX_SYMBOLS: usize = 4096;

/// How the per-word values are stored.
#[derive(Clone, Copy, Debug)]
pub(super) enum Values {
    /// Two values (each 1..=15) per byte, low nibble first.
    Nibbles,
    /// One varint per value: the value itself in a range (0 = absent), the
    /// value minus one in a list.
    Varints,
    /// Rounded values with this precision, in one bit stream (0 = absent
    /// in a range).
    Rounded(u32),
}

const RANGE: u64 = 0;
const LIST: u64 = 1;

/// A decoded symbol set: `words` strictly increasing, every value >= 1.
pub(super) struct SymbolSet {
    pub(super) words: Vec<u32>,
    pub(super) values: Vec<u32>,
}

/// Number of words between the first and last, inclusive.
fn span(words: &[u32]) -> u64 {
    (words[words.len() - 1] - words[0]) as u64 + 1
}

fn range_size(words: &[u32], values: &[u32], kind: Values) -> usize {
    let span = span(words);
    let header = varint_len((span - 1) << 1) + varint_len(words[0] as u64);
    let entries = match kind {
        Values::Nibbles => span.div_ceil(2) as usize,
        Values::Varints => {
            let absent = (span - words.len() as u64) as usize;
            absent + values.iter().map(|&v| varint_len(v as u64)).sum::<usize>()
        }
        Values::Rounded(p) => {
            let gaps = words.windows(2).map(|p| (p[1] - p[0] - 1) as u64);
            rounded::size(
                values.iter().copied().zip(std::iter::once(0).chain(gaps)),
                p,
            )
        }
    };
    header + entries
}

/// One entry per word of the range `words` spans: its value, or 0 if absent.
fn range_entries<'a>(words: &'a [u32], values: &'a [u32]) -> impl Iterator<Item = u32> + 'a {
    let mut present = words.iter().zip(values).peekable();
    (words[0]..=words[words.len() - 1]).map(move |w| match present.peek() {
        Some(&(&pw, &v)) if pw == w => {
            present.next();
            v
        }
        _ => 0,
    })
}

fn list_size(words: &[u32], values: &[u32], kind: Values) -> usize {
    let header = varint_len(((words.len() as u64 - 1) << 1) | LIST) + varint_len(words[0] as u64);
    let gaps: usize = words
        .windows(2)
        .map(|p| varint_len((p[1] - p[0] - 1) as u64))
        .sum();
    let entries = match kind {
        Values::Nibbles => words.len().div_ceil(2),
        Values::Varints => values.iter().map(|&v| varint_len(v as u64 - 1)).sum(),
        Values::Rounded(p) => rounded::size_of(values, p),
    };
    header + gaps + entries
}

/// A size `write`'s output is never below, whatever the values and their
/// kind: each layout's words as written, and at least one bit an entry (a
/// nibble, a varint and a rounded value all take one or more). Costs a pass
/// over the words only. `words` is strictly increasing (none: 0).
pub(super) fn size_floor(words: &[u32]) -> usize {
    if words.is_empty() {
        return 0;
    }
    let span = span(words);
    let first = varint_len(words[0] as u64);
    let range = varint_len((span - 1) << 1) + first + span.div_ceil(8) as usize;
    let gaps: usize = words
        .windows(2)
        .map(|p| varint_len((p[1] - p[0] - 1) as u64))
        .sum();
    let list =
        varint_len(((words.len() as u64 - 1) << 1) | LIST) + first + gaps + words.len().div_ceil(8);
    range.min(list)
}

/// Exact size of `write`'s output. `words` is non-empty and strictly increasing.
pub(super) fn size(words: &[u32], values: &[u32], kind: Values) -> usize {
    range_size(words, values, kind).min(list_size(words, values, kind))
}

pub(super) fn write(words: &[u32], values: &[u32], kind: Values, out: &mut Vec<u8>) {
    if range_size(words, values, kind) <= list_size(words, values, kind) {
        write_range(words, values, kind, out);
    } else {
        write_list(words, values, kind, out);
    }
}

fn write_range(words: &[u32], values: &[u32], kind: Values, out: &mut Vec<u8>) {
    put_varint(out, ((span(words) - 1) << 1) | RANGE);
    put_varint(out, words[0] as u64);
    let entries = range_entries(words, values);
    match kind {
        Values::Nibbles => put_nibbles(out, entries),
        Values::Varints => entries.for_each(|v| put_varint(out, v as u64)),
        Values::Rounded(p) => rounded::write(&entries.collect::<Vec<_>>(), p, out),
    }
}

fn write_list(words: &[u32], values: &[u32], kind: Values, out: &mut Vec<u8>) {
    put_varint(out, ((words.len() as u64 - 1) << 1) | LIST);
    put_varint(out, words[0] as u64);
    for p in words.windows(2) {
        put_varint(out, (p[1] - p[0] - 1) as u64);
    }
    match kind {
        Values::Nibbles => put_nibbles(out, values.iter().copied()),
        Values::Varints => values.iter().for_each(|&v| put_varint(out, v as u64 - 1)),
        Values::Rounded(p) => rounded::write(values, p, out),
    }
}

fn put_nibbles(out: &mut Vec<u8>, mut values: impl Iterator<Item = u32>) {
    while let Some(low) = values.next() {
        let high = values.next().unwrap_or(0);
        debug_assert!(low < 16 && high < 16);
        out.push((low | high << 4) as u8);
    }
}

/// Reads a symbol set of words below 2^`width` and values in 1..=`max_value`.
pub(super) fn read(
    r: &mut Reader,
    width: u32,
    kind: Values,
    max_value: u32,
) -> Result<SymbolSet, WireError> {
    let header = r.varint()?;
    let count = header >> 1;
    if header & 1 == LIST {
        read_list(r, count + 1, width, kind, max_value)
    } else {
        read_range(r, count + 1, width, kind, max_value)
    }
}

fn read_range(
    r: &mut Reader,
    span: u64,
    width: u32,
    kind: Values,
    max_value: u32,
) -> Result<SymbolSet, WireError> {
    let min = r.varint()?;
    if min.saturating_add(span - 1) > word_mask(width) as u64 {
        return Err(r.error("symbol range exceeds the literal width"));
    }
    // Every entry takes at least one bit, so a range longer than the
    // remaining input is rejected before looping over it.
    let min_bytes = match kind {
        Values::Nibbles => span.div_ceil(2),
        Values::Varints => span,
        Values::Rounded(_) => span.div_ceil(8),
    };
    if min_bytes > r.remaining() as u64 {
        return Err(r.error("symbol range runs past the end of data"));
    }
    // Entries are streamed: only present words are kept, and there are at
    // most MAX_SYMBOLS of them, so memory does not grow with the span.
    let at = r.pos();
    let mut set = SymbolSet {
        words: Vec::new(),
        values: Vec::new(),
    };
    let mut last = 0;
    let mut offset = 0u64;
    read_values(r, span as usize, kind, max_value, 0, |v| {
        if offset == 0 && v == 0 {
            return Err("symbol range endpoint is absent");
        }
        if v != 0 {
            if set.words.len() == MAX_SYMBOLS {
                return Err("more than 4096 symbols");
            }
            set.words.push((min + offset) as u32);
            set.values.push(v);
        }
        last = v;
        offset += 1;
        Ok(())
    })?;
    if last == 0 {
        return Err(WireError {
            at,
            reason: "symbol range endpoint is absent",
        });
    }
    Ok(set)
}

fn read_list(
    r: &mut Reader,
    count: u64,
    width: u32,
    kind: Values,
    max_value: u32,
) -> Result<SymbolSet, WireError> {
    if count > MAX_SYMBOLS as u64 {
        return Err(r.error("more than 4096 symbols"));
    }
    let count = count as usize;
    let mask = word_mask(width) as u64;
    let mut words = Vec::with_capacity(count);
    let mut word = r.varint_max(mask, "symbol exceeds the literal width")?;
    words.push(word as u32);
    for _ in 1..count {
        let gap = r.varint_max(mask, "symbol exceeds the literal width")?;
        word += gap + 1;
        if word > mask {
            return Err(r.error("symbol exceeds the literal width"));
        }
        words.push(word as u32);
    }
    let mut values = Vec::with_capacity(count);
    read_values(r, count, kind, max_value, 1, |v| {
        values.push(v);
        Ok(())
    })?;
    Ok(SymbolSet { words, values })
}

/// Reads `count` values, each in `min_value..=max_value`, handing them in
/// order to `take`; `min_value` is 0 in a range (absent words) and 1 in a
/// list. An error from `take` is reported at the start of the values.
fn read_values(
    r: &mut Reader,
    count: usize,
    kind: Values,
    max_value: u32,
    min_value: u32,
    mut take: impl FnMut(u32) -> Result<(), &'static str>,
) -> Result<(), WireError> {
    let at = r.pos();
    let fail = |reason| WireError { at, reason };
    const BAD: &str = "symbol value out of range";
    match kind {
        Values::Nibbles => {
            let bytes = r.bytes(count.div_ceil(2))?;
            if count % 2 == 1 && bytes[count / 2] >> 4 != 0 {
                return Err(fail("symbol padding nibble is not zero"));
            }
            let nibbles = bytes.iter().flat_map(|&b| [b & 15, b >> 4]);
            for v in nibbles.take(count).map(u32::from) {
                if v < min_value || v > max_value {
                    return Err(fail(BAD));
                }
                take(v).map_err(fail)?;
            }
        }
        Values::Varints => {
            for _ in 0..count {
                let stored = r.varint_max((max_value - min_value) as u64, BAD)?;
                take(stored as u32 + min_value).map_err(fail)?;
            }
        }
        Values::Rounded(p) => rounded::read(r, count, p, min_value == 0, |v| {
            if v > max_value {
                return Err(BAD);
            }
            take(v)
        })?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range_of_varints(min: u64, entries: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, (entries.len() as u64 - 1) << 1 | RANGE);
        put_varint(&mut out, min);
        for &v in entries {
            put_varint(&mut out, v as u64);
        }
        out
    }

    fn read_all(bytes: &[u8], width: u32, kind: Values) -> Result<SymbolSet, &'static str> {
        let mut r = Reader::new(bytes);
        let set = read(&mut r, width, kind, 1 << 14).map_err(|e| e.reason)?;
        assert!(r.is_empty());
        Ok(set)
    }

    #[test]
    fn round_trips_both_layouts_and_kinds() {
        let dense: Vec<u32> = (10..300).filter(|w| w % 7 != 0).collect();
        let sparse: Vec<u32> = (0..50).map(|i| i * 1000 + 3).collect();
        for words in [dense, sparse, vec![5]] {
            let values: Vec<u32> = (0..words.len() as u32).map(|i| 1 + i % 12).collect();
            for kind in [Values::Nibbles, Values::Varints] {
                let mut out = Vec::new();
                write(&words, &values, kind, &mut out);
                assert_eq!(out.len(), size(&words, &values, kind));
                let mut r = Reader::new(&out);
                let set = read(&mut r, 20, kind, 15).unwrap();
                assert!(r.is_empty());
                assert_eq!((set.words, set.values), (words.clone(), values.clone()));
            }
        }
    }

    /// `size_floor` is below every layout's size with any values of any kind,
    /// down to rounded values of one bit each (ones after ones, precision 0).
    #[test]
    fn floor_is_below_every_layout_and_kind() {
        let dense: Vec<u32> = (10..300).filter(|w| w % 7 != 0).collect();
        let sparse: Vec<u32> = (0..50).map(|i| i * 1000 + 3).collect();
        let wide: Vec<u32> = (0..4096).map(|i| i * 16 + i % 3).collect();
        assert_eq!(size_floor(&[]), 0);
        for words in [dense, sparse, wide, vec![5], vec![0, 1]] {
            let ones = vec![1u32; words.len()];
            let mixed: Vec<u32> = (0..words.len() as u32).map(|i| 1 + i * 37 % 900).collect();
            for values in [ones, mixed] {
                let kinds = [Values::Nibbles, Values::Varints, Values::Rounded(0)];
                for kind in kinds.into_iter().chain((1..=7).map(Values::Rounded)) {
                    let values: Vec<u32> = match kind {
                        Values::Nibbles => values.iter().map(|v| 1 + v % 15).collect(),
                        _ => values.clone(),
                    };
                    let floor = size_floor(&words);
                    assert!(floor <= size(&words, &values, kind), "{kind:?} {words:?}");
                }
            }
        }
    }

    /// A long, valid range with few present words: streamed, it keeps only
    /// the present words.
    #[test]
    fn long_sparse_range_is_read() {
        let mut entries = vec![0u32; 100_000];
        entries[0] = 3;
        entries[50_000] = 1;
        entries[99_999] = 2;
        let set = read_all(&range_of_varints(7, &entries), 20, Values::Varints).unwrap();
        assert_eq!(set.words, [7, 50_007, 100_006]);
        assert_eq!(set.values, [3, 1, 2]);
    }

    #[test]
    fn range_rejects_too_many_symbols_and_absent_endpoints() {
        let full = vec![1u32; MAX_SYMBOLS];
        assert!(read_all(&range_of_varints(0, &full), 16, Values::Varints).is_ok());
        let over = vec![1u32; MAX_SYMBOLS + 1];
        assert_eq!(
            read_all(&range_of_varints(0, &over), 16, Values::Varints).err(),
            Some("more than 4096 symbols")
        );
        for entries in [[0, 1, 1], [1, 1, 0]] {
            assert_eq!(
                read_all(&range_of_varints(0, &entries), 16, Values::Varints).err(),
                Some("symbol range endpoint is absent")
            );
        }
        // Nibbles: span 3, entries 1, 0, 0 (padding nibble 0).
        assert_eq!(
            read_all(&[4, 0, 0x01, 0x00], 16, Values::Nibbles).err(),
            Some("symbol range endpoint is absent")
        );
        // Nibbles: a non-zero padding nibble.
        assert_eq!(
            read_all(&[4, 0, 0x01, 0x11], 16, Values::Nibbles).err(),
            Some("symbol padding nibble is not zero")
        );
    }
}
