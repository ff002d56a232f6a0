//! Raw: each word in `ceil(width / 8)` little-endian bytes.

use super::{word_mask, Word};
use crate::wire::{Reader, WireError};

fn bytes_per_word(width: u32) -> usize {
    width.div_ceil(8) as usize
}

/// Payload size in bytes (without the tag).
pub(super) fn size(n: usize, width: u32) -> usize {
    n * bytes_per_word(width)
}

pub(super) fn encode(words: &[u32], width: u32, out: &mut Vec<u8>) {
    let b = bytes_per_word(width);
    out.reserve(words.len() * b);
    for &w in words {
        out.extend_from_slice(&w.to_le_bytes()[..b]);
    }
}

pub(super) fn decode<T: Word>(r: &mut Reader, width: u32, out: &mut [T]) -> Result<(), WireError> {
    let b = bytes_per_word(width);
    let start = r.pos();
    // A slice of u32 holds at most isize::MAX / 4 words, so this cannot overflow.
    let bytes = r.bytes(out.len() * b)?;
    // One loop per word size, so each compiles to fixed-size loads.
    match b {
        1 => widen::<1, T>(bytes, out),
        2 => widen::<2, T>(bytes, out),
        3 => widen::<3, T>(bytes, out),
        _ => widen::<4, T>(bytes, out),
    }
    // The last byte of a word may carry bits beyond the width (unless the
    // width is whole bytes); such a word is not something any encoder wrote.
    if width.is_multiple_of(8) {
        return Ok(());
    }
    let high = out.iter().fold(0, |acc, &w| acc | w.to_u32()) & !word_mask(width);
    if high != 0 {
        return Err(WireError {
            at: start,
            reason: "raw word exceeds the literal width",
        });
    }
    Ok(())
}

/// Reads `B`-byte little-endian words into `out` (`T` holds `B` bytes).
fn widen<const B: usize, T: Word>(bytes: &[u8], out: &mut [T]) {
    // Words of the type's own size are its little-endian bytes.
    if B == size_of::<T>() && cfg!(target_endian = "little") {
        bytemuck::cast_slice_mut::<T, u8>(out).copy_from_slice(bytes);
        return;
    }
    for (o, chunk) in out.iter_mut().zip(bytes.chunks_exact(B)) {
        let mut le = [0u8; 4];
        le[..B].copy_from_slice(chunk);
        *o = T::from_u32(u32::from_le_bytes(le));
    }
}
