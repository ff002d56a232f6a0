//! How a chunk coded against a base meets the base's bytes: its record
//! decodes to a residual, and the chunk is the residual combined with the
//! base's span, element by element.
//!
//! XOR keeps the bits a fine-tune did not change at zero. A difference of
//! values does better where training moved a float by a few units in its
//! last place: XOR then flips every bit a carry ran through (0x7f -> 0x80
//! flips eight), where the difference is one. The packer takes, per chunk,
//! whichever residual is cheaper (see `base::residual`).

#![forbid(unsafe_code)]

use crate::safetensors::Layout;

/// How a residual and a base's bytes make a chunk's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combine {
    /// Byte by byte: chunk = residual XOR base.
    Xor,
    /// Per element of the layout (1, 2, 4 or 8 bytes, little-endian), as
    /// sign-magnitude numbers (every float format): the residual is the
    /// zigzag of `order(chunk) - order(base)` modulo 2^bits, where `order`
    /// maps sign-magnitude to two's complement in the same order (format
    /// version 4).
    Difference,
}

impl Combine {
    /// `bytes` as a residual against `base` (same length, whole elements).
    pub fn residual(self, bytes: &[u8], base: &[u8], layout: Layout) -> Vec<u8> {
        let mut out = bytes.to_vec();
        match self {
            Combine::Xor => xor_into(&mut out, base),
            Combine::Difference => per_element(&mut out, base, layout, difference),
        }
        out
    }

    /// Turns `out`, a decoded residual, into the chunk's bytes against `base`.
    pub fn restore(self, out: &mut [u8], base: &[u8], layout: Layout) {
        match self {
            Combine::Xor => xor_into(out, base),
            Combine::Difference => per_element(out, base, layout, sum),
        }
    }
}

fn xor_into(out: &mut [u8], base: &[u8]) {
    out.iter_mut().zip(base).for_each(|(o, b)| *o ^= b);
}

/// Applies `f(word, base word, bits)` to every element of `out` in place.
fn per_element(out: &mut [u8], base: &[u8], layout: Layout, f: fn(u64, u64, u32) -> u64) {
    match layout.element_bytes() {
        1 => elements::<1>(out, base, f),
        2 => elements::<2>(out, base, f),
        4 => elements::<4>(out, base, f),
        _ => elements::<8>(out, base, f),
    }
}

fn elements<const W: usize>(out: &mut [u8], base: &[u8], f: fn(u64, u64, u32) -> u64) {
    let bits = 8 * W as u32;
    for (o, b) in out.chunks_exact_mut(W).zip(base.chunks_exact(W)) {
        let (mut x, mut y) = ([0u8; 8], [0u8; 8]);
        x[..W].copy_from_slice(o);
        y[..W].copy_from_slice(b);
        let z = f(u64::from_le_bytes(x), u64::from_le_bytes(y), bits);
        o.copy_from_slice(&z.to_le_bytes()[..W]);
    }
}

fn mask(bits: u32) -> u64 {
    u64::MAX >> (64 - bits)
}

/// Sign-magnitude to two's complement of the same order: a set sign bit
/// flips the magnitude bits. Its own inverse.
fn order(v: u64, bits: u32) -> u64 {
    let sign = (v >> (bits - 1)) & 1;
    v ^ (sign * (mask(bits) >> 1))
}

/// The residual of `x` against `y`: zigzag(order(x) - order(y)).
fn difference(x: u64, y: u64, bits: u32) -> u64 {
    let d = order(x, bits).wrapping_sub(order(y, bits)) & mask(bits);
    let sign = (d >> (bits - 1)) & 1;
    ((d << 1) ^ (sign * mask(bits))) & mask(bits)
}

/// The inverse of [`difference`]: the `x` whose residual against `y` is `r`.
fn sum(r: u64, y: u64, bits: u32) -> u64 {
    let d = (r >> 1) ^ ((r & 1) * mask(bits));
    order(order(y, bits).wrapping_add(d) & mask(bits), bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn neighbouring_floats_differ_by_small_residuals() {
        let bf16 = |v: f32| (v.to_bits() >> 16) as u64;
        // 1.0 and the next BF16 above it: one unit, zigzag 2.
        assert_eq!(difference(bf16(1.0) + 1, bf16(1.0), 16), 2);
        assert_eq!(difference(bf16(1.0), bf16(1.0) + 1, 16), 1);
        // Across zero: +0 and -0 are neighbours, and so are the smallest
        // values of each sign around them.
        assert_eq!(difference(0x0000, 0x8000, 16), 2);
        assert_eq!(difference(0x0001, 0x8001, 16), 6);
        // A carry through the mantissa is still one unit.
        assert_eq!(difference(0x3f80, 0x3f7f, 16), 2);
        assert_eq!(0x3f80 ^ 0x3f7f, 0xff);
    }

    proptest! {
        #[test]
        fn residuals_restore_the_chunk(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            base_seed in any::<u64>(),
        ) {
            let base: Vec<u8> = (0..bytes.len() as u64)
                .map(|i| (base_seed.wrapping_mul(i + 1) >> 17) as u8)
                .collect();
            for layout in Layout::ALL {
                let n = bytes.len() / layout.element_bytes() * layout.element_bytes();
                for combine in [Combine::Xor, Combine::Difference] {
                    let r = combine.residual(&bytes[..n], &base[..n], layout);
                    let mut back = r.clone();
                    combine.restore(&mut back, &base[..n], layout);
                    prop_assert_eq!(&back[..], &bytes[..n], "{:?} {:?}", combine, layout);
                }
            }
        }
    }

    #[test]
    fn identical_chunks_leave_zero_residuals() {
        let bytes: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        for layout in Layout::ALL {
            for combine in [Combine::Xor, Combine::Difference] {
                let r = combine.residual(&bytes, &bytes, layout);
                assert!(r.iter().all(|&b| b == 0), "{combine:?} {layout:?}");
            }
        }
    }
}
