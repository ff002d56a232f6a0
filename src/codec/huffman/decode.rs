//! The decoder of Huffman literals (docs/FORMAT.md, "Huffman (tag 2)"): the
//! tables of a code (kept per thread for the next chunk of the same code),
//! and the four quarter streams decoded interleaved.

use std::cell::RefCell;

use super::code::MAX_LEN;
use super::multi::{
    build_multi_table, decode_streams_multi, multi_pays, MultiTable, MULTI_MIN_WORDS,
};
use super::one_bit::decode_one_bit;
use super::streams::{quarters, read_streams, Bits};
use super::table::{build_table, Table};
use crate::codec::symbols::{self, SymbolSet, Values};
use crate::codec::word::Word;
use crate::wire::{Reader, WireError};

/// The tables for one code. Checkpoints repeat the same code over many
/// chunks (the same lane of same-typed tensors), and building the tables
/// costs about as much as decoding a few thousand words (the multi-word table
/// several times that), so each thread keeps the last code's tables.
pub(super) struct Tables {
    pub(super) set: SymbolSet,
    pub(super) single: Box<Table>,
    /// Built on the first long enough stream, when [`multi_pays`].
    pub(super) multi: Option<Box<MultiTable>>,
}

thread_local! {
    static TABLES: RefCell<Option<Tables>> = const { RefCell::new(None) };
}

/// The code's words and their code lengths (after the tag).
pub(in crate::codec) fn read_table(r: &mut Reader, width: u32) -> Result<SymbolSet, WireError> {
    symbols::read(r, width, Values::Nibbles, MAX_LEN)
}

/// Decodes the four streams (after the symbol set) with the code of `set`,
/// from `r`: the same reader for a literal that holds its table, another
/// for one whose table is shared.
pub(in crate::codec) fn decode_words<T: Word>(
    r: &mut Reader,
    set: SymbolSet,
    out: &mut [T],
) -> Result<(), WireError> {
    if set.values == [1, 1] {
        let streams = read_streams(r)?;
        let pair = [set.words[0], set.words[1]].map(T::from_u32);
        return decode_one_bit(&streams, pair, out).map_err(|reason| streams.error(reason));
    }
    TABLES.with_borrow_mut(|cached| {
        let tables = match cached {
            Some(t) if t.set.words == set.words && t.set.values == set.values => t,
            _ => {
                *cached = None;
                let single =
                    build_table(&set).ok_or_else(|| r.error("huffman code is not complete"))?;
                cached.insert(Tables {
                    set,
                    single,
                    multi: None,
                })
            }
        };
        if tables.multi.is_none() && out.len() >= MULTI_MIN_WORDS && multi_pays(&tables.set) {
            tables.multi = Some(build_multi_table(&tables.single));
        }
        decode_with(r, tables, out)
    })
}

/// Decodes the streams (after the symbol set) with `tables`.
pub(super) fn decode_with<T: Word>(
    r: &mut Reader,
    tables: &Tables,
    out: &mut [T],
) -> Result<(), WireError> {
    let s = read_streams(r)?;
    let streams = std::array::from_fn(|q| Bits::new(s.starts[q], s.ends[q]));
    // Tests that turn SIMD off run the plain build too.
    #[cfg(target_arch = "x86_64")]
    if crate::codec::simd::limit() != crate::codec::simd::Simd::None
        && std::arch::is_x86_feature_detected!("bmi2")
    {
        // SAFETY: the CPU has BMI2.
        let result = unsafe { decode_tables_bmi2(streams, s.data, tables, out) };
        return result.map_err(|reason| s.error(reason));
    }
    decode_tables(streams, s.data, tables, out).map_err(|reason| s.error(reason))
}

/// [`decode_tables`] compiled for BMI2: each word's variable shift is then
/// one `shrx` instead of a shift by `cl`, which needs the count moved into
/// `cl` and more micro-ops, in the decoders' inner loops.
///
/// # Safety
/// The CPU must support BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
pub(super) fn decode_tables_bmi2<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    tables: &Tables,
    out: &mut [T],
) -> Result<(), &'static str> {
    decode_tables(streams, data, tables, out)
}

/// Decodes with the multi-word table if there is one and `out` is long enough.
#[inline(always)]
pub(super) fn decode_tables<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    tables: &Tables,
    out: &mut [T],
) -> Result<(), &'static str> {
    match &tables.multi {
        Some(multi) if out.len() >= MULTI_MIN_WORDS => {
            decode_streams_multi(streams, data, &tables.single, multi, out)
        }
        _ => decode_streams(streams, data, &tables.single, out),
    }
}

/// Decodes the four quarters, interleaving the streams so their table
/// lookups overlap, then checks each stream was consumed exactly.
#[inline(always)]
pub(super) fn decode_streams<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    table: &Table,
    out: &mut [T],
) -> Result<(), &'static str> {
    let [mut s0, mut s1, mut s2, mut s3] = streams;
    let [q0, q1, q2, q3] = quarters(out);
    let mut done = 0;
    let groups = q0
        .chunks_exact_mut(4)
        .zip(q1.chunks_exact_mut(4))
        .zip(q2.chunks_exact_mut(4))
        .zip(q3.chunks_exact_mut(4));
    for (((a, b), c), d) in groups {
        // One refill leaves >= 57 bits: enough for four 12-bit codes.
        s0.refill(data);
        s1.refill(data);
        s2.refill(data);
        s3.refill(data);
        for t in 0..4 {
            a[t] = s0.decode(table);
            b[t] = s1.decode(table);
            c[t] = s2.decode(table);
            d[t] = s3.decode(table);
        }
        done += 4;
    }
    for (s, q) in [(s0, q0), (s1, q1), (s2, q2), (s3, q3)] {
        s.decode_rest(data, table, &mut q[done..])?;
    }
    Ok(())
}
