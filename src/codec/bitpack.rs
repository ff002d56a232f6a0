//! BitPack: one byte `k` (the bit length of the largest word), then every word
//! in `k` bits, packed LSB-first.

use super::bits::BitWriter;
use super::Word;
use crate::wire::{Reader, WireError};

/// Number of bits needed to write `v` (0 for 0).
pub(super) fn bit_len(v: u32) -> u32 {
    32 - v.leading_zeros()
}

fn packed_bytes(n: usize, k: u32) -> usize {
    (n as u64 * k as u64).div_ceil(8) as usize
}

/// Payload size in bytes (without the tag).
pub(super) fn size(n: usize, max: u32) -> usize {
    1 + packed_bytes(n, bit_len(max))
}

pub(super) fn encode(words: &[u32], max: u32, out: &mut Vec<u8>) {
    let k = bit_len(max);
    out.push(k as u8);
    out.reserve(packed_bytes(words.len(), k));
    let mut bits = BitWriter::new(out);
    for &w in words {
        bits.put(w, k);
    }
    bits.finish();
}

/// The 8 bytes starting at `at`, with zeros past the end of `bytes`.
fn load_u64(bytes: &[u8], at: usize) -> u64 {
    match bytes.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut le = [0u8; 8];
            let rest = bytes.get(at..).unwrap_or(&[]);
            le[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(le)
        }
    }
}

/// Window a group of 8 words is read from: 8 words of up to 32 bits span at most
/// 32 bytes, and the last 8-byte load starts at most 28 bytes in.
const WINDOW: usize = 40;

/// Unpacks whole groups of 8 words (8 words of `K` bits are exactly `K` bytes)
/// while a full window stays inside `bytes`; returns how many words it wrote.
/// `K` is a constant so the shifts and offsets compile to immediates.
fn unpack_const<const K: usize, T: Word>(bytes: &[u8], out: &mut [T]) -> usize {
    let mask = (1u64 << K) - 1;
    let groups = (bytes.len().saturating_sub(WINDOW) / K + 1).min(out.len() / 8);
    let groups = if bytes.len() >= WINDOW { groups } else { 0 };
    for (g, words) in out.chunks_exact_mut(8).take(groups).enumerate() {
        let window: &[u8; WINDOW] = bytes[g * K..g * K + WINDOW].try_into().expect("window");
        for (j, w) in words.iter_mut().enumerate() {
            let bit = j * K;
            let at = bit / 8;
            let le: [u8; 8] = window[at..at + 8].try_into().expect("8 bytes");
            *w = T::from_u32(((u64::from_le_bytes(le) >> (bit % 8)) & mask) as u32);
        }
    }
    groups * 8
}

fn unpack_groups<T: Word>(k: u32, bytes: &[u8], out: &mut [T]) -> usize {
    macro_rules! dispatch {
        ($($k:literal)*) => {
            match k {
                0 => { out.fill(T::default()); out.len() }
                $($k => unpack_const::<$k, T>(bytes, out),)*
                _ => 0,
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
}

/// Unpacks words from index `from` on, one at a time.
fn unpack_tail<T: Word>(k: u32, bytes: &[u8], from: usize, out: &mut [T]) {
    let mask = (1u64 << k) - 1;
    for (i, o) in out.iter_mut().enumerate().skip(from) {
        let bit = i as u64 * k as u64;
        // Starting at most 7 bits into a byte, a word of <= 32 bits fits in 64.
        let word = load_u64(bytes, (bit / 8) as usize) >> (bit % 8);
        *o = T::from_u32((word & mask) as u32);
    }
}

pub(super) fn decode<T: Word>(r: &mut Reader, width: u32, out: &mut [T]) -> Result<(), WireError> {
    let k = r.u8()? as u32;
    if k > width {
        return Err(r.error("bitpack width exceeds the literal width"));
    }
    let bytes = r.bytes(packed_bytes(out.len(), k))?;
    let done = unpack_groups(k, bytes, out);
    unpack_tail(k, bytes, done, out);
    let used = (out.len() as u64 * k as u64 % 8) as u32;
    if used != 0 && bytes.last().is_some_and(|&b| b >> used != 0) {
        return Err(r.error("bitpack padding bits are not zero"));
    }
    Ok(())
}
