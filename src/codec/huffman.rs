//! Huffman: a canonical prefix code over the stream's distinct words, with
//! codes of at most 12 bits so that one 4096-entry table lookup decodes a word.
//!
//! The stream is cut into four quarters, each coded as its own bitstream, so
//! the decoder can run four independent dependency chains at once.

use super::bits::BitWriter;
use super::codelen::limited_lengths;
use super::index::SymbolIndex;
use super::stats::{quarter_ranges, Alphabet};
use super::symbols::{self, SymbolSet, Values};
use super::{Stats, Word};
use crate::wire::{put_varint, varint_len, Reader, WireError};

const MAX_LEN: u32 = 12;
const TABLE_SIZE: usize = 1 << MAX_LEN;
const PEEK_MASK: u64 = TABLE_SIZE as u64 - 1;

/// Huffman needs at least two words (a one-word code would be incomplete).
fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 2)
}

fn code_lengths(alphabet: &Alphabet) -> Vec<u32> {
    limited_lengths(&alphabet.totals(), MAX_LEN)
}

/// Byte length of each quarter's bitstream, from the per-quarter counts.
fn stream_bytes(alphabet: &Alphabet, lengths: &[u32]) -> [usize; 4] {
    let mut bits = [0u64; 4];
    for (counts, &len) in alphabet.quarters.iter().zip(lengths) {
        for (b, &c) in bits.iter_mut().zip(counts) {
            *b += c as u64 * len as u64;
        }
    }
    bits.map(|b| b.div_ceil(8) as usize)
}

/// Payload size in bytes (without the tag).
pub(super) fn size(stats: &Stats) -> Option<usize> {
    let alphabet = applicable(stats)?;
    let lengths = code_lengths(alphabet);
    let streams: usize = stream_bytes(alphabet, &lengths)
        .iter()
        .map(|&b| varint_len(b as u64) + b)
        .sum();
    Some(symbols::size(&alphabet.words, &lengths, Values::Nibbles) + streams)
}

pub(super) fn encode(words: &[u32], stats: &Stats, out: &mut Vec<u8>) -> bool {
    let Some(alphabet) = applicable(stats) else {
        return false;
    };
    let lengths = code_lengths(alphabet);
    symbols::write(&alphabet.words, &lengths, Values::Nibbles, out);
    for bytes in stream_bytes(alphabet, &lengths) {
        put_varint(out, bytes as u64);
    }
    let codes: Vec<u32> = canonical_codes(&lengths)
        .iter()
        .zip(&lengths)
        .map(|(&code, &len)| reverse(code, len) << 4 | len)
        .collect();
    for range in quarter_ranges(words.len()) {
        write_stream(&words[range], alphabet.index(), &codes, out);
    }
    true
}

/// Canonical codes (most significant bit first) for lengths given in symbol
/// order: shorter codes first, and by symbol order within a length.
fn canonical_codes(lengths: &[u32]) -> Vec<u32> {
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
fn reverse(code: u32, len: u32) -> u32 {
    code.reverse_bits() >> (32 - len)
}

/// Appends one quarter's bitstream; `codes[rank]` is `reversed code << 4 | length`.
fn write_stream(words: &[u32], index: &SymbolIndex, codes: &[u32], out: &mut Vec<u8>) {
    let mut bits = BitWriter::new(out);
    for &w in words {
        let code = codes[index.rank(w)];
        bits.put(code >> 4, code & 15);
    }
    bits.finish();
}

/// Decoding table indexed by the next 12 bits of a stream: `word << 32 | length`.
type Table = [u64; TABLE_SIZE];

/// Fails unless the lengths form a complete prefix code (Kraft sum exactly 1),
/// which also guarantees every table entry is filled exactly once.
fn build_table(set: &SymbolSet) -> Option<Box<Table>> {
    let kraft: u32 = set.values.iter().map(|&len| 1 << (MAX_LEN - len)).sum();
    if kraft != TABLE_SIZE as u32 {
        return None;
    }
    let mut table: Box<Table> = vec![0; TABLE_SIZE].into_boxed_slice().try_into().ok()?;
    let codes = canonical_codes(&set.values);
    for ((&word, &len), &code) in set.words.iter().zip(&set.values).zip(&codes) {
        let entry = (word as u64) << 32 | len as u64;
        for slot in (reverse(code, len) as usize..TABLE_SIZE).step_by(1 << len) {
            table[slot] = entry;
        }
    }
    Some(table)
}

pub(super) fn decode<T: Word>(r: &mut Reader, width: u32, out: &mut [T]) -> Result<(), WireError> {
    let set = symbols::read(r, width, Values::Nibbles, MAX_LEN)?;
    let table = build_table(&set).ok_or_else(|| r.error("huffman code is not complete"))?;
    let mut ends = [0usize; 4];
    let mut total = 0usize;
    for end in &mut ends {
        let remaining = r.remaining().saturating_sub(total) as u64;
        total += r.varint_max(remaining, "huffman stream runs past the end of data")? as usize;
        *end = total;
    }
    let at = r.pos();
    let data = r.bytes(total)?;
    let mut starts = [0; 4];
    starts[1..].copy_from_slice(&ends[..3]);
    let streams = std::array::from_fn(|q| Bits::new(starts[q], ends[q]));
    decode_streams(streams, data, &table, out).map_err(|reason| WireError { at, reason })
}

/// Decodes the four quarters, interleaving the streams so their table
/// lookups overlap, then checks each stream was consumed exactly.
fn decode_streams<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    table: &Table,
    out: &mut [T],
) -> Result<(), &'static str> {
    let [mut s0, mut s1, mut s2, mut s3] = streams;
    let [r0, r1, r2, _] = quarter_ranges(out.len());
    let (q0, rest) = out.split_at_mut(r0.len());
    let (q1, rest) = rest.split_at_mut(r1.len());
    let (q2, q3) = rest.split_at_mut(r2.len());
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

/// A bit reader over one stream inside the concatenated streams, least
/// significant bit first. It may read into the next stream or past the end
/// (as zeros); `finish` rejects any such overrun. Keeping only a bit position
/// and a buffer per stream lets four readers live in registers.
struct Bits {
    /// Bit offset of the next unread bit in the concatenated streams.
    pos: usize,
    /// Byte offset where this stream ends.
    end: usize,
    /// Bits from `pos` on; at least 12 valid after each refill's budget.
    buf: u64,
}

/// The 8 bytes starting at `at`, with zeros past the end of `data`.
#[inline(always)]
fn load_u64(data: &[u8], at: usize) -> u64 {
    match data.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => load_tail(data, at),
    }
}

#[cold]
fn load_tail(data: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    let rest = data.get(at..).unwrap_or(&[]);
    le[..rest.len()].copy_from_slice(rest);
    u64::from_le_bytes(le)
}

impl Bits {
    fn new(start: usize, end: usize) -> Self {
        Bits {
            pos: start * 8,
            end,
            buf: 0,
        }
    }

    /// Loads the 64 bits at the byte holding `pos`; after dropping the bits
    /// before `pos`, at least 57 remain.
    #[inline(always)]
    fn refill(&mut self, data: &[u8]) {
        self.buf = load_u64(data, self.pos / 8) >> (self.pos % 8);
    }

    /// Decodes one word; needs at least 12 valid bits.
    #[inline(always)]
    fn decode<T: Word>(&mut self, table: &Table) -> T {
        let entry = table[(self.buf & PEEK_MASK) as usize];
        let len = entry as u32 & 15;
        self.buf >>= len;
        self.pos += len as usize;
        T::from_u32((entry >> 32) as u32)
    }

    fn decode_rest<T: Word>(
        mut self,
        data: &[u8],
        table: &Table,
        out: &mut [T],
    ) -> Result<(), &'static str> {
        for o in out {
            self.refill(data);
            *o = self.decode(table);
        }
        self.finish(data)
    }

    /// Checks the stream was consumed exactly: no bits read past its end, no
    /// whole byte left over, and zero padding bits in its last byte.
    fn finish(mut self, data: &[u8]) -> Result<(), &'static str> {
        let end = self.end as u64 * 8;
        let pos = self.pos as u64;
        if pos > end {
            return Err("huffman stream overrun");
        }
        let left = end - pos;
        if left >= 8 {
            return Err("huffman stream has unread bytes");
        }
        self.refill(data);
        if self.buf & ((1 << left) - 1) != 0 {
            return Err("huffman padding bits are not zero");
        }
        Ok(())
    }
}
