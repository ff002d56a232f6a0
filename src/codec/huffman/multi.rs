//! The multi-word table for long streams of a Huffman literal
//! (docs/FORMAT.md, "Huffman (tag 2)"): one lookup yields up to seven short
//! codes' words.

use super::code::MAX_LEN;
use super::streams::{quarters, Bits};
use super::table::{Table, PEEK_MASK, TABLE_SIZE};
use crate::codec::symbols::SymbolSet;
use crate::codec::word::Word;

/// Most words one multi-word table entry holds.
pub(super) const MULTI_WORDS: usize = 7;

/// Output slots one multi-word lookup writes: the entry's eight bytes, of
/// which only the first `count` are words (the rest are overwritten later).
pub(super) const MULTI_SLOTS: usize = 8;

/// Shortest stream decoded with the multi-word table: shorter ones gain less
/// than building the table costs. Building it costs as much as decoding
/// tens of thousands of words with the single-word table, and the cache
/// rarely saves it (few streams find their code's tables there), so those
/// streams, f32 exponents among them, decode faster without it.
pub(super) const MULTI_MIN_WORDS: usize = 16 * TABLE_SIZE;

/// Decoding table indexed by the next 12 bits of a stream, holding every word
/// whose code lies wholly within those bits (at most [`MULTI_WORDS`], at
/// least one): bytes 0..7 are the words, byte 7 is `count << 4 | bits`, the
/// number of words and the bits they take.
pub(super) type MultiTable = [u64; TABLE_SIZE];

/// Whether a code suits the multi-word table: its words must fit in a byte,
/// and the codes must be short enough that a lookup decodes two or more
/// words on average.
pub(super) fn multi_pays(set: &SymbolSet) -> bool {
    // Expected code length if word j has probability 2^-l_j, times 4096.
    let mean_len: u32 = set.values.iter().map(|&l| l << (MAX_LEN - l)).sum();
    mean_len <= MAX_LEN / 2 * TABLE_SIZE as u32 && set.words.iter().all(|&w| w <= 0xff)
}

/// Builds the multi-word table from the single-word one; all words must fit
/// in a byte.
pub(super) fn build_multi_table(table: &Table) -> Box<MultiTable> {
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

impl Bits {
    /// Decodes the words of one multi-word entry into `out` from `*at` on,
    /// advancing `*at` past them; needs at least 12 valid bits and
    /// [`MULTI_SLOTS`] slots from `*at`. All slots are written (one store of
    /// the whole entry) since that is cheaper than storing just `count`.
    #[inline(always)]
    pub(super) fn decode_multi<T: Word>(
        &mut self,
        table: &MultiTable,
        out: &mut [T],
        at: &mut usize,
    ) {
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
}

/// As [`decode_streams`](super::decode::decode_streams), several words per
/// lookup. Each stream advances its own output position by the count each
/// lookup decodes; the interleaved loop runs while every quarter has room
/// for four lookups' slots, so no lookup decodes words past its quarter's
/// end.
#[inline(always)]
pub(super) fn decode_streams_multi<T: Word>(
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
pub(super) fn store_bytes<T: Word>(bytes: u64, slots: &mut [T; MULTI_SLOTS]) {
    if cfg!(target_endian = "big") {
        *slots = bytes.to_le_bytes().map(|b| T::from_u32(b as u32));
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if T::BITS > 8 {
        use std::arch::x86_64::*;
        // SSE2 is part of x86-64. Zero-extending all eight bytes at once
        // (then again to 32 bits) takes one instruction per 16 bytes stored,
        // against six per 8 bytes in 64-bit integers.
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
