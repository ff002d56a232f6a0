//! Huffman codes of two one-bit words (docs/FORMAT.md, "Huffman (tag 2)"),
//! common in the top bits of BF16 weights: each stream's bits are expanded
//! straight into words, with no table.

use super::streams::{quarters, Bits, Streams};
use crate::codec::word::Word;

/// Decodes a code of two words, each one bit long (the only complete code
/// of two words). Each stream is then a bitmap, its bit `i` choosing the
/// quarter's word `i` from `pair`, so words are expanded straight from the
/// bits instead of a few per table lookup, and no table is built. In bf16
/// checkpoints the top nibble of a weight (sign and top three exponent
/// bits) mostly takes just two values, so this is the common code there.
pub(super) fn decode_one_bit<T: Word>(
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
pub(super) fn expand_bits<T: Word>(bits: &[u8], pair: [T; 2], out: &mut [T]) {
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
pub(super) fn expand_byte<T: Word>(byte: u8, pair: [T; 2]) -> [T; 8] {
    std::array::from_fn(|j| pair[(byte >> j & 1) as usize])
}

/// Expands a prefix of the words with AVX-512 where the CPU has it; returns
/// how many words it did (a multiple of 8, possibly 0).
#[inline]
pub(super) fn expand_simd<T: Word>(bits: &[u8], pair: [T; 2], out: &mut [T]) -> usize {
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
pub(super) mod avx512 {
    use super::Word;
    use crate::codec::huffman::streams::load_u64;
    use crate::codec::simd::{level, Simd};
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
