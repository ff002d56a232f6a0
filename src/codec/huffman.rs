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
use std::cell::RefCell;

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

/// The tables for one code. Checkpoints repeat the same code over many
/// chunks (the same lane of same-typed tensors), and building the tables
/// costs about as much as decoding a few thousand words (the multi-word table
/// several times that), so each thread keeps the last code's tables.
struct Tables {
    set: SymbolSet,
    single: Box<Table>,
    /// Built on the first long enough stream, when [`multi_pays`].
    multi: Option<Box<MultiTable>>,
}

thread_local! {
    static TABLES: RefCell<Option<Tables>> = const { RefCell::new(None) };
}

pub(super) fn decode<T: Word>(r: &mut Reader, width: u32, out: &mut [T]) -> Result<(), WireError> {
    let set = symbols::read(r, width, Values::Nibbles, MAX_LEN)?;
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

/// The four quarters' bitstreams, as stored after the symbol set.
struct Streams<'a> {
    /// All four streams, concatenated.
    data: &'a [u8],
    /// Where `data` starts in the input, for errors.
    at: usize,
    /// Byte offset in `data` where each stream starts, and where it ends.
    starts: [usize; 4],
    ends: [usize; 4],
}

impl Streams<'_> {
    fn error(&self, reason: &'static str) -> WireError {
        WireError {
            at: self.at,
            reason,
        }
    }
}

/// Reads the four streams' lengths, then their bytes.
fn read_streams<'a>(r: &mut Reader<'a>) -> Result<Streams<'a>, WireError> {
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
    Ok(Streams {
        data,
        at,
        starts,
        ends,
    })
}

/// Decodes the streams (after the symbol set) with `tables`.
fn decode_with<T: Word>(r: &mut Reader, tables: &Tables, out: &mut [T]) -> Result<(), WireError> {
    let s = read_streams(r)?;
    let streams = std::array::from_fn(|q| Bits::new(s.starts[q], s.ends[q]));
    // Tests that turn SIMD off run the plain build too.
    #[cfg(target_arch = "x86_64")]
    if super::simd::limit() != super::simd::Simd::None
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
fn decode_tables_bmi2<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    tables: &Tables,
    out: &mut [T],
) -> Result<(), &'static str> {
    decode_tables(streams, data, tables, out)
}

/// Decodes with the multi-word table if there is one and `out` is long enough.
#[inline(always)]
fn decode_tables<T: Word>(
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

/// Decodes a code of two words, each one bit long (the only complete code
/// of two words). Each stream is then a bitmap, its bit `i` choosing the
/// quarter's word `i` from `pair`, so words are expanded straight from the
/// bits instead of a few per table lookup, and no table is built. In bf16
/// checkpoints the top nibble of a weight (sign and top three exponent
/// bits) mostly takes just two values, so this is the common code there.
fn decode_one_bit<T: Word>(
    streams: &Streams,
    pair: [T; 2],
    out: &mut [T],
) -> Result<(), &'static str> {
    for ((&start, &end), q) in streams.starts.iter().zip(&streams.ends).zip(quarters(out)) {
        // One bit per word: the stream must end just after them, as any
        // other stream is checked to, before its bits are expanded.
        let mut consumed = Bits::new(start, end);
        consumed.pos += q.len();
        consumed.finish(streams.data)?;
        expand_bits(&streams.data[start..end], pair, q);
    }
    Ok(())
}

/// Sets `out[i]` to `pair[bit i of bits]`; `bits` holds at least `out.len()` bits.
fn expand_bits<T: Word>(bits: &[u8], pair: [T; 2], out: &mut [T]) {
    let done = expand_simd(bits, pair, out);
    let mut words = out[done..].chunks_exact_mut(8);
    let mut bytes = bits[done / 8..].iter();
    for (words, &byte) in (&mut words).zip(&mut bytes) {
        words.copy_from_slice(&expand_byte(byte, pair));
    }
    let tail = words.into_remainder();
    if let Some(&byte) = bytes.next() {
        tail.copy_from_slice(&expand_byte(byte, pair)[..tail.len()]);
    }
}

/// The eight words the bits of `byte` choose, lowest bit first.
#[inline(always)]
fn expand_byte<T: Word>(byte: u8, pair: [T; 2]) -> [T; 8] {
    std::array::from_fn(|j| pair[(byte >> j & 1) as usize])
}

/// Expands a prefix of the words with AVX-512 where the CPU has it; returns
/// how many words it did (a multiple of 8, possibly 0).
#[inline]
fn expand_simd<T: Word>(bits: &[u8], pair: [T; 2], out: &mut [T]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: `available` checked that the CPU has the kernel's features.
        return unsafe { avx512::expand(bits, pair, out) };
    }
    let _ = (bits, pair, out);
    0
}

/// Bit expansion with AVX-512: a stream's bits are used directly as the
/// mask of one blend between the two words, 64 bytes of words at a time.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::simd::{level, Simd};
    use super::{load_u64, Word};
    use std::arch::x86_64::*;

    /// Whether the CPU (and, in tests, the test) allows this kernel.
    pub(super) fn available() -> bool {
        level() == Simd::Avx512 && std::arch::is_x86_feature_detected!("avx512bw")
    }

    /// Expands whole steps of one vector of words (64, 32 or 16 of `T`);
    /// returns the words done. `bits` holds at least `out.len()` bits.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn expand<T: Word>(bits: &[u8], pair: [T; 2], out: &mut [T]) -> usize {
        let step = 64 / size_of::<T>();
        let [a, b] = pair.map(|w| w.to_u32());
        let (a, b) = match size_of::<T>() {
            1 => (_mm512_set1_epi8(a as i8), _mm512_set1_epi8(b as i8)),
            2 => (_mm512_set1_epi16(a as i16), _mm512_set1_epi16(b as i16)),
            _ => (_mm512_set1_epi32(a as i32), _mm512_set1_epi32(b as i32)),
        };
        for (s, words) in out.chunks_exact_mut(step).enumerate() {
            // The step's `step` bits: at most 64, within `bits`.
            let mask = load_u64(bits, s * step / 8);
            let v = match size_of::<T>() {
                1 => _mm512_mask_blend_epi8(mask, a, b),
                2 => _mm512_mask_blend_epi16(mask as u32, a, b),
                _ => _mm512_mask_blend_epi32(mask as u16, a, b),
            };
            // SAFETY: `words` is one step: `step * size_of::<T>()` = 64 bytes.
            unsafe { _mm512_storeu_si512(words.as_mut_ptr().cast(), v) };
        }
        out.len() / step * step
    }
}

/// Most words one multi-word table entry holds.
const MULTI_WORDS: usize = 7;

/// Output slots one multi-word lookup writes: the entry's eight bytes, of
/// which only the first `count` are words (the rest are overwritten later).
const MULTI_SLOTS: usize = 8;

/// Shortest stream decoded with the multi-word table: shorter ones gain less
/// than building the table costs. Building it (about 30 µs) costs as much as
/// decoding some 30000 words with the single-word table, and the cache rarely
/// saves it (in the corpus files, 6 of about 100 streams of 16384 words or
/// more found their code's tables), so those streams, f32 exponents among
/// them, decode faster without it.
const MULTI_MIN_WORDS: usize = 16 * TABLE_SIZE;

/// Decoding table indexed by the next 12 bits of a stream, holding every word
/// whose code lies wholly within those bits (at most [`MULTI_WORDS`], at
/// least one): bytes 0..7 are the words, byte 7 is `count << 4 | bits`, the
/// number of words and the bits they take.
type MultiTable = [u64; TABLE_SIZE];

/// Whether a code suits the multi-word table: its words must fit in a byte,
/// and the codes must be short enough that a lookup decodes two or more
/// words on average.
fn multi_pays(set: &SymbolSet) -> bool {
    // Expected code length if word j has probability 2^-l_j, times 4096.
    let mean_len: u32 = set.values.iter().map(|&l| l << (MAX_LEN - l)).sum();
    mean_len <= MAX_LEN / 2 * TABLE_SIZE as u32 && set.words.iter().all(|&w| w <= 0xff)
}

/// Builds the multi-word table from the single-word one; all words must fit
/// in a byte.
fn build_multi_table(table: &Table) -> Box<MultiTable> {
    let mut multi: Box<MultiTable> = vec![0; TABLE_SIZE]
        .into_boxed_slice()
        .try_into()
        .expect("TABLE_SIZE entries");
    for (peek, slot) in multi.iter_mut().enumerate() {
        let (mut entry, mut used, mut count) = (0u64, 0u32, 0u64);
        while count < MULTI_WORDS as u64 {
            // The single-word entry for the bits not yet used (zeros above
            // them) is right exactly when its code fits in those bits.
            let single = table[peek >> used];
            let len = single as u32 & 15;
            if used + len > MAX_LEN {
                break;
            }
            entry |= (single >> 32) << (8 * count);
            used += len;
            count += 1;
        }
        *slot = entry | (count << 4 | used as u64) << 56;
    }
    multi
}

/// Decodes the four quarters, interleaving the streams so their table
/// lookups overlap, then checks each stream was consumed exactly.
#[inline(always)]
fn decode_streams<T: Word>(
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

/// As [`decode_streams`], several words per lookup. Each stream advances its
/// own output position by the count each lookup decodes; the interleaved
/// loop runs while every quarter has room for four lookups' slots, so no
/// lookup decodes words past its quarter's end.
#[inline(always)]
fn decode_streams_multi<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    table: &Table,
    multi: &MultiTable,
    out: &mut [T],
) -> Result<(), &'static str> {
    let [mut s0, mut s1, mut s2, mut s3] = streams;
    let [q0, q1, q2, q3] = quarters(out);
    let [mut p0, mut p1, mut p2, mut p3] = [0usize; 4];
    const GROUP: usize = 3 * MULTI_WORDS + MULTI_SLOTS;
    while p0 + GROUP <= q0.len()
        && p1 + GROUP <= q1.len()
        && p2 + GROUP <= q2.len()
        && p3 + GROUP <= q3.len()
    {
        // One refill leaves >= 57 bits: enough for four lookups of <= 12.
        s0.refill(data);
        s1.refill(data);
        s2.refill(data);
        s3.refill(data);
        for _ in 0..4 {
            s0.decode_multi(multi, q0, &mut p0);
            s1.decode_multi(multi, q1, &mut p1);
            s2.decode_multi(multi, q2, &mut p2);
            s3.decode_multi(multi, q3, &mut p3);
        }
    }
    for (s, q, mut p) in [(s0, q0, p0), (s1, q1, p1), (s2, q2, p2), (s3, q3, p3)] {
        let mut s = s;
        while p + MULTI_SLOTS <= q.len() {
            s.refill(data);
            s.decode_multi(multi, q, &mut p);
        }
        s.decode_rest(data, table, &mut q[p..])?;
    }
    Ok(())
}

/// Stores the eight bytes of `bytes` (least significant first) as eight
/// words (`u8`, `u16` or `u32`). Widening in registers (SSE2 unpacking on
/// x86-64, elsewhere each byte moved to its lane within 64-bit integers),
/// then storing whole registers, keeps this to a few instructions, where
/// storing word by word would make stores the bottleneck.
#[inline(always)]
fn store_bytes<T: Word>(bytes: u64, slots: &mut [T; MULTI_SLOTS]) {
    if cfg!(target_endian = "big") {
        *slots = bytes.to_le_bytes().map(|b| T::from_u32(b as u32));
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if T::BITS > 8 {
        use std::arch::x86_64::*;
        // SSE2 is part of x86-64. Zero-extending all eight bytes at once
        // (then again to 32 bits) takes one instruction per 16 bytes stored,
        // against six per 8 bytes in 64-bit integers; the bf16 corpus file
        // decodes about 7% faster in memory for it.
        // SAFETY: `slots` is `8 * size_of::<T>()` bytes with `T` of 16 or 32
        // bits, and the stores write 16 bytes at 0, and for 32 bits 16 more
        // at 16, all within them.
        unsafe {
            let out = slots.as_mut_ptr() as *mut __m128i;
            let zero = _mm_setzero_si128();
            let words = _mm_unpacklo_epi8(_mm_cvtsi64_si128(bytes as i64), zero);
            if T::BITS == 16 {
                _mm_storeu_si128(out, words);
            } else {
                _mm_storeu_si128(out, _mm_unpacklo_epi16(words, zero));
                _mm_storeu_si128(out.add(1), _mm_unpackhi_epi16(words, zero));
            }
        }
        return;
    }
    let out: &mut [u8] = bytemuck::cast_slice_mut(slots);
    let lanes = out.chunks_exact_mut(8);
    match T::BITS {
        8 => out.copy_from_slice(&bytes.to_le_bytes()),
        16 => {
            for (i, lane) in lanes.enumerate() {
                // Four bytes into four 16-bit lanes.
                let x = bytes >> (32 * i) & 0xffff_ffff;
                let x = (x | x << 16) & 0x0000_ffff_0000_ffff;
                let x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
                lane.copy_from_slice(&x.to_le_bytes());
            }
        }
        _ => {
            for (i, lane) in lanes.enumerate() {
                // Two bytes into two 32-bit lanes.
                let x = bytes >> (16 * i);
                let x = (x & 0xff) | (x & 0xff00) << 24;
                lane.copy_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// `out` split into the four quarters the streams decode.
fn quarters<T>(out: &mut [T]) -> [&mut [T]; 4] {
    let [r0, r1, r2, _] = quarter_ranges(out.len());
    let (q0, rest) = out.split_at_mut(r0.len());
    let (q1, rest) = rest.split_at_mut(r1.len());
    let (q2, q3) = rest.split_at_mut(r2.len());
    [q0, q1, q2, q3]
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

    /// Decodes the words of one multi-word entry into `out` from `*at` on,
    /// advancing `*at` past them; needs at least 12 valid bits and
    /// [`MULTI_SLOTS`] slots from `*at`. All slots are written (one store of
    /// the whole entry) since that is cheaper than storing just `count`.
    #[inline(always)]
    fn decode_multi<T: Word>(&mut self, table: &MultiTable, out: &mut [T], at: &mut usize) {
        let entry = table[(self.buf & PEEK_MASK) as usize];
        let slots: &mut [T; MULTI_SLOTS] = (&mut out[*at..*at + MULTI_SLOTS])
            .try_into()
            .expect("MULTI_SLOTS slots");
        store_bytes(entry, slots);
        let len = (entry >> 56) as u32 & 15;
        *at += (entry >> 60) as usize;
        self.buf >>= len;
        self.pos += len as usize;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::{decode_all, xorshift};
    use crate::codec::{word_mask, Codec};
    use std::collections::HashMap;

    /// A random complete code: start from two 1-bit codes and repeatedly
    /// split a code into two one bit longer (which keeps the Kraft sum 1).
    fn random_lengths(seed: &mut u64, max_symbols: usize) -> Vec<u32> {
        let mut lengths = vec![1, 1];
        let splits = xorshift(seed) as usize % (max_symbols.max(2) - 1);
        for _ in 0..splits {
            let i = xorshift(seed) as usize % lengths.len();
            if lengths[i] < MAX_LEN {
                lengths[i] += 1;
                lengths.push(lengths[i]);
            }
        }
        lengths
    }

    /// Word by (length, canonical code).
    type Codes = HashMap<(u32, u32), u32>;

    /// Reference decoder, one bit at a time: the word whose canonical code
    /// (most significant bit first) matches the bits read so far, or `None`
    /// if the stream ends first.
    fn decode_one(codes: &Codes, bits: &mut impl Iterator<Item = u32>) -> Option<u32> {
        let (mut code, mut len) = (0, 0);
        loop {
            code = code << 1 | bits.next()?;
            len += 1;
            if let Some(&word) = codes.get(&(len, code)) {
                return Some(word);
            }
        }
    }

    fn stream_bits(stream: &[u8]) -> impl Iterator<Item = u32> + '_ {
        (0..stream.len() * 8).map(|i| (stream[i / 8] >> (i % 8) & 1) as u32)
    }

    /// Reference decode of `n` words from the four streams, with the
    /// format's checks: no bits past a stream, fewer than 8 left, all zero.
    fn reference(codes: &Codes, streams: &[&[u8]; 4], n: usize) -> Option<Vec<u32>> {
        let mut words = Vec::with_capacity(n);
        for (stream, range) in streams.iter().zip(quarter_ranges(n)) {
            let mut bits = stream_bits(stream);
            for _ in range {
                words.push(decode_one(codes, &mut bits)?);
            }
            let rest: Vec<u32> = bits.collect();
            if rest.len() >= 8 || rest.contains(&1) {
                return None;
            }
        }
        Some(words)
    }

    /// A random code of `lengths` over `words` (of `width` bits): `n` random
    /// words drawn with the probabilities the code implies, streams encoded
    /// independently of the codec's encoder; then decoded with the right word
    /// count, a different one (streams ending early or late), a flipped bit
    /// and a stream a byte shorter or longer, each compared with the
    /// reference decoder.
    fn check_against_reference(
        seed: &mut u64,
        width: u32,
        words: &[u32],
        lengths: &[u32],
        n: usize,
    ) {
        let by_word: HashMap<u32, (u32, u32)> = canonical_codes(lengths)
            .into_iter()
            .zip(lengths)
            .zip(words)
            .map(|((code, &len), &word)| (word, (len, code)))
            .collect();
        let codes: Codes = by_word.iter().map(|(&w, &lc)| (lc, w)).collect();
        // Words with probability 2^-len: decode random bits.
        let mut random_bits = std::iter::repeat_with(|| xorshift(seed) as u32 & 1);
        let expected: Vec<u32> = (0..n)
            .map(|_| decode_one(&codes, &mut random_bits).expect("endless bits"))
            .collect();

        let mut streams: [Vec<u8>; 4] = Default::default();
        for (stream, range) in streams.iter_mut().zip(quarter_ranges(n)) {
            let mut bits = BitWriter::new(stream);
            for w in &expected[range] {
                let (len, code) = by_word[w];
                bits.put(reverse(code, len), len);
            }
            bits.finish();
        }
        for variant in 0..4 {
            let mut streams = streams.clone();
            let mut n = n;
            let q = xorshift(seed) as usize % 4;
            match variant {
                0 => {}
                1 => n = (n as i64 + xorshift(seed) as i64 % 20 - 10).max(0) as usize,
                2 => {
                    if !streams[q].is_empty() {
                        let bit = xorshift(seed) as usize % (streams[q].len() * 8);
                        streams[q][bit / 8] ^= 1 << (bit % 8);
                    }
                }
                _ => {
                    if xorshift(seed).is_multiple_of(2) {
                        streams[q].pop();
                    } else {
                        streams[q].push(xorshift(seed) as u8);
                    }
                }
            }
            let mut input = vec![Codec::Huffman.tag()];
            symbols::write(words, lengths, Values::Nibbles, &mut input);
            for s in &streams {
                put_varint(&mut input, s.len() as u64);
            }
            for s in &streams {
                input.extend_from_slice(s);
            }
            let got = decode_all(&input, width, n).ok().map(|(words, _)| words);
            let slices = [0, 1, 2, 3].map(|q| streams[q].as_slice());
            let want = reference(&codes, &slices, n);
            assert!(
                got == want,
                "variant {variant}: width {width}, {} symbols, n {n}",
                words.len()
            );
            if variant == 0 {
                assert_eq!(want.as_deref(), Some(&expected[..]));
            }
        }
    }

    /// `count` distinct random words of `width` bits, sorted.
    fn random_words(seed: &mut u64, width: u32, count: usize) -> Vec<u32> {
        let mask = word_mask(width) as u64;
        let mut words: Vec<u32> = Vec::new();
        while words.len() < count {
            words.push((xorshift(seed) & mask) as u32);
            words.sort_unstable();
            words.dedup();
        }
        words
    }

    /// Random codes at every width. Lengths reach past `MULTI_MIN_WORDS` so
    /// both table kinds run, and codes repeat across decodes so the
    /// per-thread table cache is hit, including by streams of other lengths.
    #[test]
    fn matches_reference_decoder() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut previous: Option<(u32, Vec<u32>, Vec<u32>)> = None;
        for case in 0..600 {
            let (width, words, lengths) = match previous.take() {
                Some(code) if case % 3 == 0 => code,
                _ => {
                    let width = 1 + case as u32 % 32;
                    let max_symbols = match xorshift(&mut seed) % 4 {
                        0 => 4096,
                        1 => 300,
                        _ => 20,
                    };
                    let max_symbols = max_symbols.min(word_mask(width) as usize + 1);
                    let lengths = random_lengths(&mut seed, max_symbols);
                    let words = random_words(&mut seed, width, lengths.len());
                    (width, words, lengths)
                }
            };
            let n = match xorshift(&mut seed) % 8 {
                0 => MULTI_MIN_WORDS + xorshift(&mut seed) as usize % 30_000,
                _ => xorshift(&mut seed) as usize % 3000,
            };
            check_against_reference(&mut seed, width, &words, &lengths, n);
            previous = Some((width, words, lengths));
        }
    }

    /// Two-word codes, decoded by expanding bits: every width, and lengths
    /// from empty through several SIMD steps with every tail, to long ones.
    #[test]
    fn one_bit_codes_match_reference_decoder() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for case in 0..400 {
            let width = 1 + case as u32 % 32;
            let words = random_words(&mut seed, width, 2);
            let n = match case % 4 {
                0 => case,
                1 => xorshift(&mut seed) as usize % 3000,
                _ => xorshift(&mut seed) as usize % 300_000,
            };
            check_against_reference(&mut seed, width, &words, &[1, 1], n);
        }
    }
}
