//! How a chunk coded against a base meets the base's bytes: its record
//! decodes to a residual, and the chunk is the residual combined with the
//! base's span, element by element.
//!
//! XOR keeps the bits a fine-tune did not change at zero. A difference of
//! values does better where training moved a float by a few units in its
//! last place: XOR then flips every bit a carry ran through (0x7f -> 0x80
//! flips eight), where the difference is one. The packer takes, per chunk,
//! whichever residual is cheaper (see `pack::residual`).

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
            Combine::Difference => per_element(&mut out, base, layout, Direction::Residual),
        }
        out
    }

    /// Turns `out`, a decoded residual, into the chunk's bytes against `base`.
    pub fn restore(self, out: &mut [u8], base: &[u8], layout: Layout) {
        match self {
            Combine::Xor => xor_into(out, base),
            Combine::Difference => per_element(out, base, layout, Direction::Restore),
        }
    }
}

fn xor_into(out: &mut [u8], base: &[u8]) {
    out.iter_mut().zip(base).for_each(|(o, b)| *o ^= b);
}

/// Which way [`per_element`] goes.
#[derive(Clone, Copy)]
enum Direction {
    /// Values to residuals.
    Residual,
    /// Residuals to values.
    Restore,
}

/// Turns every element of `out` into its residual against `base`'s, or
/// back. Each width gets its own loop over its own integers, so that it
/// vectorizes: this runs on every read of such a chunk.
fn per_element(out: &mut [u8], base: &[u8], layout: Layout, way: Direction) {
    match layout.element_bytes() {
        1 => elements::<u8>(out, base, way),
        2 => elements::<u16>(out, base, way),
        4 => elements::<u32>(out, base, way),
        _ => elements::<u64>(out, base, way),
    }
}

fn elements<T: Element>(out: &mut [u8], base: &[u8], way: Direction) {
    let pairs = out
        .chunks_exact_mut(T::BYTES)
        .zip(base.chunks_exact(T::BYTES));
    match way {
        Direction::Residual => pairs.for_each(|(o, b)| T::load(o).difference(T::load(b)).store(o)),
        Direction::Restore => pairs.for_each(|(o, b)| T::load(o).sum(T::load(b)).store(o)),
    }
}

/// An element as an unsigned integer of its width, read little-endian.
trait Element: Copy {
    const BYTES: usize;
    fn load(bytes: &[u8]) -> Self;
    fn store(self, bytes: &mut [u8]);
    /// Sign-magnitude to two's complement of the same order: a set sign
    /// bit flips the magnitude bits. Its own inverse.
    fn order(self) -> Self;
    /// The residual of `self` against `base`: zigzag(order(self) - order(base)).
    fn difference(self, base: Self) -> Self;
    /// The inverse of [`Element::difference`]: the value whose residual
    /// against `base` is `self`.
    fn sum(self, base: Self) -> Self;
}

macro_rules! element {
    ($($t:ty, $signed:ty);*) => {$(
        impl Element for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("whole elements"))
            }
            #[inline(always)]
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn order(self) -> Self {
                let sign = ((self as $signed) >> (<$t>::BITS - 1)) as $t;
                self ^ (sign & (<$t>::MAX >> 1))
            }
            #[inline(always)]
            fn difference(self, base: Self) -> Self {
                let d = self.order().wrapping_sub(base.order());
                (d << 1) ^ (((d as $signed) >> (<$t>::BITS - 1)) as $t)
            }
            #[inline(always)]
            fn sum(self, base: Self) -> Self {
                let d = (self >> 1) ^ (self & 1).wrapping_neg();
                base.order().wrapping_add(d).order()
            }
        }
    )*};
}
element!(u8, i8; u16, i16; u32, i32; u64, i64);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn neighbouring_floats_differ_by_small_residuals() {
        let bf16 = |v: f32| (v.to_bits() >> 16) as u16;
        // 1.0 and the next BF16 above it: one unit, zigzag 2.
        assert_eq!((bf16(1.0) + 1).difference(bf16(1.0)), 2);
        assert_eq!(bf16(1.0).difference(bf16(1.0) + 1), 1);
        // Across zero: +0 and -0 are neighbours, and so are the smallest
        // values of each sign around them.
        assert_eq!(0x0000u16.difference(0x8000), 2);
        assert_eq!(0x0001u16.difference(0x8001), 6);
        // A carry through the mantissa is still one unit.
        assert_eq!(0x3f80u16.difference(0x3f7f), 2);
        assert_eq!(0x3f80 ^ 0x3f7f, 0xff);
        // The widest and narrowest elements alike.
        let f64_one = 1.0f64.to_bits();
        assert_eq!((f64_one + 3).difference(f64_one), 6);
        assert_eq!(0x80u8.difference(0x00), 1);
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
