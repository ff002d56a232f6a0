//! Raw literals (docs/FORMAT.md, "Raw (tag 0)"): each word in
//! `ceil(width / 8)` little-endian bytes.

use super::width::word_mask;
use super::word::{Put, Word};
use crate::wire::{Reader, WireError};

fn bytes_per_word(width: u32) -> usize {
    width.div_ceil(8) as usize
}

/// Payload size in bytes (without the tag).
pub(super) fn size(n: usize, width: u32) -> usize {
    n * bytes_per_word(width)
}

pub(super) fn encode(words: &[u32], width: u32, out: &mut Vec<u8>) {
    // One loop per word size, so each copies a fixed number of bytes (a
    // copy of a variable length is a call to memmove per word).
    match bytes_per_word(width) {
        1 => narrow::<1>(words, out),
        2 => narrow::<2>(words, out),
        3 => narrow::<3>(words, out),
        _ => narrow::<4>(words, out),
    }
}

/// Appends the low `B` bytes of each word, little-endian.
fn narrow<const B: usize>(words: &[u32], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + words.len() * B, 0);
    for (bytes, &w) in out[start..].chunks_exact_mut(B).zip(words) {
        bytes.copy_from_slice(&w.to_le_bytes()[..B]);
    }
}

pub(super) fn decode<T: Word, P: Put>(
    r: &mut Reader,
    width: u32,
    out: &mut [T],
    put: P,
) -> Result<(), WireError> {
    let b = bytes_per_word(width);
    let start = r.pos();
    // A slice of u32 holds at most isize::MAX / 4 words, so this cannot overflow.
    let bytes = r.bytes(out.len() * b)?;
    // One loop per word size, so each compiles to fixed-size loads.
    match b {
        1 => widen::<1, T, P>(bytes, out, put),
        2 => widen::<2, T, P>(bytes, out, put),
        3 => widen::<3, T, P>(bytes, out, put),
        _ => widen::<4, T, P>(bytes, out, put),
    }
    // The last byte of a word may carry bits beyond the width (unless the
    // width is whole bytes); such a word is not something any encoder wrote.
    // Those bits are all in the words' top bytes.
    if width.is_multiple_of(8) {
        return Ok(());
    }
    let top = bytes.chunks_exact(b).fold(0u8, |acc, w| acc | w[b - 1]);
    if (top as u32) << (8 * (b - 1)) & !word_mask(width) != 0 {
        return Err(WireError {
            at: start,
            reason: "raw word exceeds the literal width",
        });
    }
    Ok(())
}

/// Puts `B`-byte little-endian words into `out` (`T` holds `B` bytes).
fn widen<const B: usize, T: Word, P: Put>(bytes: &[u8], out: &mut [T], put: P) {
    // Words of the type's own size are its little-endian bytes.
    if B == size_of::<T>() && cfg!(target_endian = "little") && put.or_in().is_none() {
        return bytemuck::cast_slice_mut::<T, u8>(out).copy_from_slice(bytes);
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::Simd::Avx2 {
        // SAFETY: `level` checked that the CPU has AVX2.
        return unsafe { widen_avx2::<B, T, P>(bytes, out, put) };
    }
    widen_words::<B, T, P>(bytes, out, put)
}

/// [`widen_words`] compiled for AVX2. The loop is a Merge's hot path (the low
/// byte of every f16 word, say), and the baseline x86-64 build vectorizes it
/// only four words at a time.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn widen_avx2<const B: usize, T: Word, P: Put>(bytes: &[u8], out: &mut [T], put: P) {
    widen_words::<B, T, P>(bytes, out, put)
}

/// Puts each `B`-byte word into its slot.
#[inline(always)]
fn widen_words<const B: usize, T: Word, P: Put>(bytes: &[u8], out: &mut [T], put: P) {
    for (o, chunk) in out.iter_mut().zip(bytes.chunks_exact(B)) {
        let mut le = [0u8; 4];
        le[..B].copy_from_slice(chunk);
        put.put(o, u32::from_le_bytes(le));
    }
}
