//! Code lengths, canonical codes and the four bitstreams of the encoder, and
//! the exact size of an encoding.

#![forbid(unsafe_code)]

use super::*;

pub(super) fn code_lengths(alphabet: &Alphabet) -> Vec<u32> {
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
    let bytes = stream_bytes(alphabet, &lengths);
    for b in bytes {
        put_varint(out, b as u64);
    }
    let codes: Vec<u32> = canonical_codes(&lengths)
        .iter()
        .zip(&lengths)
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
    true
}

/// Canonical codes (most significant bit first) for lengths given in symbol
/// order: shorter codes first, and by symbol order within a length.
pub(super) fn canonical_codes(lengths: &[u32]) -> Vec<u32> {
    let mut count = [0u32; MAX_LEN as usize + 1];
    for &len in lengths {
        count[len as usize] += 1;
    }
    let mut next = [0u32; MAX_LEN as usize + 1];
    let mut code = 0;
    for len in 1..=MAX_LEN as usize {
        code = (code + count[len - 1]) << 1;
        next[len] = code;
    }
    lengths
        .iter()
        .map(|&len| {
            next[len as usize] += 1;
            next[len as usize] - 1
        })
        .collect()
}

/// The low `len` bits of `code` in reverse order: the bitstream is read from
/// the least significant bit, and a code's first bit must come out first.
pub(super) fn reverse(code: u32, len: u32) -> u32 {
    code.reverse_bits() >> (32 - len)
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
