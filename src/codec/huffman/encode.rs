//! The encoder of Huffman literals (docs/FORMAT.md, "Huffman (tag 2)"): code
//! lengths, the four bitstreams, and the exact size of an encoding.

#![forbid(unsafe_code)]

use super::code::{canonical_codes, quarter_ranges, reverse, MAX_LEN};
use crate::codec::bits::BitWriter;
use crate::codec::codelen::{limited_lengths, limited_lengths_within};
use crate::codec::index::SymbolIndex;
use crate::codec::stats::{Alphabet, Stats};
use crate::codec::symbols::{self, Values};
use crate::wire::{put_varint, varint_len};

/// Huffman needs at least two words (a one-word code would be incomplete).
pub(in crate::codec) fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 2)
}

pub(in crate::codec) fn code_lengths(alphabet: &Alphabet) -> Vec<u32> {
    limited_lengths(&alphabet.totals(), MAX_LEN)
}

/// Byte length of each quarter's bitstream, from the per-quarter counts.
pub(super) fn stream_bytes(alphabet: &Alphabet, lengths: &[u32]) -> [usize; 4] {
    let mut bits = [0u64; 4];
    for (counts, &len) in alphabet.quarters.iter().zip(lengths) {
        for (b, &c) in bits.iter_mut().zip(counts) {
            *b += c as u64 * len as u64;
        }
    }
    bits.map(|b| b.div_ceil(8) as usize)
}

/// Payload size in bytes (without the tag).
pub(in crate::codec) fn size(stats: &Stats) -> Option<usize> {
    size_within(stats, usize::MAX)
}

/// [`size`], but None also where the size is sure to exceed `most` bytes:
/// where the table, a byte for each stream's length and the words' order-0
/// entropy (no prefix code's lengths average less; less a millionth for the
/// floating-point sum) are more, or the optimal unlimited Huffman code's
/// bits in their place. The search sizes many streams that rANS or Raw
/// code smaller, and limiting their code lengths (package-merge) took most
/// of the time sizing them.
pub(in crate::codec) fn size_within(stats: &Stats, most: usize) -> Option<usize> {
    let alphabet = applicable(stats)?;
    // The table's nibbles do not depend on the lengths.
    let table = symbols::size(&alphabet.words, &[], Values::Nibbles);
    let room = most.checked_sub(table + 4)?;
    if (alphabet.order0_bits() / 8.0 * (1.0 - 1e-6)) as usize > room {
        return None;
    }
    let most_bits = (room as u64).saturating_mul(8);
    let lengths = limited_lengths_within(&alphabet.totals(), MAX_LEN, most_bits)?;
    let streams: usize = stream_bytes(alphabet, &lengths)
        .iter()
        .map(|&b| varint_len(b as u64) + b)
        .sum();
    Some(table + streams)
}

pub(in crate::codec) fn encode(words: &[u32], stats: &Stats, out: &mut Vec<u8>) -> bool {
    let Some(alphabet) = applicable(stats) else {
        return false;
    };
    let lengths = code_lengths(alphabet);
    symbols::write(&alphabet.words, &lengths, Values::Nibbles, out);
    write_streams(
        words,
        alphabet,
        &lengths,
        stream_bytes(alphabet, &lengths),
        out,
    );
    true
}

/// Appends the table of the code of `lengths` over `alphabet`'s words.
pub(in crate::codec) fn encode_table(alphabet: &Alphabet, lengths: &[u32], out: &mut Vec<u8>) {
    symbols::write(&alphabet.words, lengths, Values::Nibbles, out);
}

/// Appends what follows the table in a literal of `words` (each one of
/// `alphabet`'s) coded with `lengths`: the streams' lengths and the
/// streams. Their lengths come from a pass over the words, as `alphabet`
/// counts other words too (a table shared by many literals).
pub(in crate::codec) fn encode_words(
    words: &[u32],
    alphabet: &Alphabet,
    lengths: &[u32],
    out: &mut Vec<u8>,
) {
    let index = alphabet.index();
    let bits = quarter_ranges(words.len()).map(|range| {
        let lens = words[range].iter().map(|&w| lengths[index.rank(w)] as u64);
        lens.sum::<u64>().div_ceil(8) as usize
    });
    write_streams(words, alphabet, lengths, bits, out);
}

/// Appends the streams' lengths `bytes` and the streams of `words` coded
/// with `lengths` over `alphabet`'s words.
fn write_streams(
    words: &[u32],
    alphabet: &Alphabet,
    lengths: &[u32],
    bytes: [usize; 4],
    out: &mut Vec<u8>,
) {
    for b in bytes {
        put_varint(out, b as u64);
    }
    let codes: Vec<u32> = canonical_codes(lengths)
        .iter()
        .zip(lengths)
        .map(|(&code, &len)| reverse(code, len) << 4 | len)
        .collect();
    for (range, bytes) in quarter_ranges(words.len()).into_iter().zip(bytes) {
        write_stream(
            &words[range],
            alphabet.index(),
            &codes,
            BitWriter::new(out, bytes),
        );
    }
}

/// Writes one quarter's bitstream with `bits`; `codes[rank]` is `reversed
/// code << 4 | length`.
pub(super) fn write_stream(words: &[u32], index: &SymbolIndex, codes: &[u32], mut bits: BitWriter) {
    const PER_FLUSH: usize = (BitWriter::ROOM / MAX_LEN) as usize;
    for fields in words.chunks(PER_FLUSH) {
        for &w in fields {
            let code = codes[index.rank(w)];
            bits.put(code >> 4, code & 15);
        }
        bits.flush();
    }
    bits.finish();
}
