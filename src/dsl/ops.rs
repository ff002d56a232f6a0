//! Parameters of the Map, Scan and Merge operators and their word-level
//! semantics (docs/FORMAT.md, "Programs": `Scan`, Map kinds, Merge fields).

use super::types::mask;
use std::fmt;

/// Width-preserving bijections on `b`-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapOp {
    /// `x ^ c`, c != 0.
    Xor(u32),
    /// `x + c mod 2^b`, c != 0.
    Add(u32),
    /// Zigzag decoding: 0, 1, 2, 3 -> 0, -1, 1, -2 (two's complement in `b` bits).
    Zigzag,
    /// Gray encoding `x ^ (x >> 1)`.
    Gray,
    /// Rotate left by r, 0 < r < b.
    Rotate(u32),
    /// Reverse the order of the `b` bits.
    BitReverse,
}

impl MapOp {
    /// The word the Map yields for body word `x`.
    #[inline]
    pub fn apply(self, x: u32, width: u32) -> u32 {
        let m = mask(width);
        match self {
            MapOp::Xor(c) => x ^ c,
            MapOp::Add(c) => x.wrapping_add(c) & m,
            MapOp::Zigzag => ((x >> 1) ^ (x & 1).wrapping_neg()) & m,
            MapOp::Gray => x ^ (x >> 1),
            MapOp::Rotate(r) => ((x << r) | (x >> (width - r))) & m,
            MapOp::BitReverse => x.reverse_bits() >> (32 - width),
        }
    }

    /// The body word that makes the Map yield `y`: `apply(invert(y)) == y`.
    #[inline(always)]
    pub fn invert(self, y: u32, width: u32) -> u32 {
        let m = mask(width);
        match self {
            MapOp::Xor(c) => y ^ c,
            MapOp::Add(c) => y.wrapping_sub(c) & m,
            MapOp::Zigzag => {
                let sign = (y >> (width - 1)) & 1;
                ((y << 1) ^ sign.wrapping_neg()) & m
            }
            MapOp::Gray => {
                let mut x = y;
                let mut shift = 1;
                while shift < 32 {
                    x ^= x >> shift;
                    shift <<= 1;
                }
                x
            }
            MapOp::Rotate(r) => MapOp::Rotate(width - r).apply(y, width),
            MapOp::BitReverse => self.apply(y, width),
        }
    }

    /// `fold` of `ys` with [`MapOp::invert`] at `width` as a function made
    /// for this Map's kind: the kind is matched once rather than once a
    /// word, so that the fold's loop over the words vectorizes.
    pub fn fold_inverse<F: InverseFold>(self, ys: &[u32], width: u32, fold: F) -> F::Out {
        let kind = |op: MapOp| move |y| op.invert(y, width);
        match self {
            MapOp::Xor(c) => fold.fold(ys, kind(MapOp::Xor(c))),
            MapOp::Add(c) => fold.fold(ys, kind(MapOp::Add(c))),
            MapOp::Zigzag => fold.fold(ys, kind(MapOp::Zigzag)),
            MapOp::Gray => fold.fold(ys, kind(MapOp::Gray)),
            MapOp::Rotate(r) => fold.fold(ys, kind(MapOp::Rotate(r))),
            MapOp::BitReverse => fold.fold(ys, kind(MapOp::BitReverse)),
        }
    }

    /// Whether the parameters are legal and the map is not the identity at `width`.
    pub fn is_valid(self, width: u32) -> bool {
        match self {
            MapOp::Xor(c) | MapOp::Add(c) => c != 0 && c <= mask(width),
            MapOp::Rotate(r) => r > 0 && r < width,
            MapOp::Zigzag | MapOp::Gray | MapOp::BitReverse => width >= 2,
        }
    }
}

/// A loop over words and a function of each (see [`MapOp::fold_inverse`]).
pub trait InverseFold {
    type Out;
    fn fold(self, ys: &[u32], f: impl Fn(u32) -> u32) -> Self::Out;
}

/// The words `f` gives.
pub struct Collect;

impl InverseFold for Collect {
    type Out = std::sync::Arc<[u32]>;
    fn fold(self, ys: &[u32], f: impl Fn(u32) -> u32) -> Self::Out {
        ys.iter().map(|&y| f(y)).collect()
    }
}

/// The largest word `f` gives (0 for none).
pub struct Max;

impl InverseFold for Max {
    type Out = u32;
    fn fold(self, ys: &[u32], f: impl Fn(u32) -> u32) -> u32 {
        ys.iter().map(|&y| f(y)).max().unwrap_or(0)
    }
}

impl fmt::Display for MapOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapOp::Xor(c) => write!(f, "xor {c:#x}"),
            MapOp::Add(c) => write!(f, "add {c:#x}"),
            MapOp::Zigzag => f.write_str("zigzag"),
            MapOp::Gray => f.write_str("gray"),
            MapOp::Rotate(r) => write!(f, "rotl {r}"),
            MapOp::BitReverse => f.write_str("bitrev"),
        }
    }
}

/// The accumulation of a Scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanOp {
    Xor,
    Add,
}

impl ScanOp {
    #[inline]
    pub fn step(self, acc: u32, update: u32, width: u32) -> u32 {
        match self {
            ScanOp::Xor => acc ^ update,
            ScanOp::Add => acc.wrapping_add(update) & mask(width),
        }
    }

    /// The update that moves the accumulator from `prev` to `next`.
    #[inline]
    pub fn delta(self, prev: u32, next: u32, width: u32) -> u32 {
        match self {
            ScanOp::Xor => prev ^ next,
            ScanOp::Add => next.wrapping_sub(prev) & mask(width),
        }
    }
}

impl fmt::Display for ScanOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScanOp::Xor => "xor",
            ScanOp::Add => "add",
        })
    }
}

/// Float layouts a Merge can split a word into (sign, exponent, mantissa).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatFormat {
    F32,
    Bf16,
    F16,
    E4M3,
    E5M2,
}

impl FloatFormat {
    pub const ALL: [FloatFormat; 5] = [
        FloatFormat::F32,
        FloatFormat::Bf16,
        FloatFormat::F16,
        FloatFormat::E4M3,
        FloatFormat::E5M2,
    ];

    /// Field widths, most significant first.
    pub fn widths(self) -> [u32; 3] {
        match self {
            FloatFormat::F32 => [1, 8, 23],
            FloatFormat::Bf16 => [1, 8, 7],
            FloatFormat::F16 => [1, 5, 10],
            FloatFormat::E4M3 => [1, 4, 3],
            FloatFormat::E5M2 => [1, 5, 2],
        }
    }

    pub fn width(self) -> u32 {
        self.widths().iter().sum()
    }

    fn name(self) -> &'static str {
        match self {
            FloatFormat::F32 => "f32",
            FloatFormat::Bf16 => "bf16",
            FloatFormat::F16 => "f16",
            FloatFormat::E4M3 => "e4m3",
            FloatFormat::E5M2 => "e5m2",
        }
    }
}

/// How a Merge splits its word into fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fields {
    /// Sign, exponent and mantissa of a float format of exactly the word's width.
    Float(FloatFormat),
    /// Two fields: the high `width - low` bits and the low `low` bits, 0 < low < width.
    Split { low: u32 },
    /// One field per bit.
    BitPlanes,
    /// One field per byte; the width must be a multiple of 8 and at least 16.
    BytePlanes,
}

impl Fields {
    /// Whether these fields fit a word of `width` bits.
    pub fn is_valid(self, width: u32) -> bool {
        match self {
            Fields::Float(f) => f.width() == width,
            Fields::Split { low } => low > 0 && low < width,
            Fields::BitPlanes => width >= 2,
            Fields::BytePlanes => width.is_multiple_of(8) && width >= 16,
        }
    }

    /// Field widths, most significant first. Only meaningful when `is_valid(width)`.
    pub fn widths(self, width: u32) -> Vec<u32> {
        match self {
            Fields::Float(f) => f.widths().to_vec(),
            Fields::Split { low } => vec![width - low, low],
            Fields::BitPlanes => vec![1; width as usize],
            Fields::BytePlanes => vec![8; width as usize / 8],
        }
    }

    /// Bit offset (from the least significant bit) of each field, in field order.
    pub fn shifts(self, width: u32) -> Vec<u32> {
        let widths = self.widths(width);
        let mut shift = width;
        widths
            .iter()
            .map(|w| {
                shift -= w;
                shift
            })
            .collect()
    }
}

impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fields::Float(ff) => f.write_str(ff.name()),
            Fields::Split { low } => write!(f, "split {low}"),
            Fields::BitPlanes => f.write_str("bits"),
            Fields::BytePlanes => f.write_str("bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all_maps(width: u32) -> Vec<MapOp> {
        let mut ops = vec![MapOp::Zigzag, MapOp::Gray, MapOp::BitReverse];
        ops.extend([
            MapOp::Xor(mask(width)),
            MapOp::Add(1),
            MapOp::Add(mask(width)),
        ]);
        ops.extend((1..width).map(MapOp::Rotate));
        ops.into_iter().filter(|m| m.is_valid(width)).collect()
    }

    proptest! {
        #[test]
        fn maps_are_bijections(width in 1u32..=32, x: u32) {
            let x = x & mask(width);
            for op in all_maps(width) {
                let y = op.apply(x, width);
                prop_assert!(y <= mask(width), "{op} left the width");
                prop_assert_eq!(op.apply(op.invert(x, width), width), x, "{}", op);
                prop_assert_eq!(op.invert(y, width), x, "{}", op);
            }
        }

        #[test]
        fn scan_delta_inverts_step(width in 1u32..=32, a: u32, b: u32) {
            let (a, b) = (a & mask(width), b & mask(width));
            for op in [ScanOp::Xor, ScanOp::Add] {
                prop_assert_eq!(op.step(a, op.delta(a, b, width), width), b);
            }
        }
    }

    #[test]
    fn field_shifts_tile_the_word() {
        for width in 1..=32 {
            for fields in [
                Fields::BitPlanes,
                Fields::BytePlanes,
                Fields::Split { low: 3 },
            ]
            .into_iter()
            .chain(FloatFormat::ALL.map(Fields::Float))
            {
                if !fields.is_valid(width) {
                    continue;
                }
                let widths = fields.widths(width);
                assert_eq!(widths.iter().sum::<u32>(), width);
                assert_eq!(*fields.shifts(width).last().unwrap(), 0);
            }
        }
    }

    #[test]
    fn zigzag_maps_small_codes_to_small_magnitudes() {
        let z = |x| MapOp::Zigzag.apply(x, 8);
        assert_eq!([z(0), z(1), z(2), z(3)], [0, 0xff, 1, 0xfe]);
    }
}
