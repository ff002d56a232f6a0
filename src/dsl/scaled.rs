//! The arithmetic of the Scaled operator (docs/FORMAT.md, "Programs":
//! `Scaled`): a float word made from a binary32 scale times a small signed
//! integer, rounded to the word's float format.
//!
//! Everything is exact IEEE 754 arithmetic (one binary32 multiplication,
//! rounded to nearest, ties to even; then one rounding to the format, nearest,
//! ties to even), so every platform decodes the same bits. The one thing IEEE
//! leaves open, the payload of a NaN, is fixed: a NaN product becomes the
//! format's canonical quiet NaN.

use super::ops::FloatFormat;

/// The formats a Scaled node may yield.
pub const SCALED_FORMATS: [FloatFormat; 3] =
    [FloatFormat::F32, FloatFormat::Bf16, FloatFormat::F16];

/// Widest integer a Scaled node multiplies by, in bits (magnitude and sign).
pub const MAX_SCALED_INT_WIDTH: u32 = 16;

/// The word of `format` that `scale * q` rounds to, `q` being `int` read as
/// magnitude and sign: bit 0 the sign, the bits above it the magnitude (so
/// that small integers are small words whatever the width). A sign with
/// magnitude 0 is -0.0, so that a quantizer's negative zeros
/// (`round(-0.3) * scale`) are products too.
#[inline]
pub fn scaled_word(format: FloatFormat, scale: u32, int: u32) -> u32 {
    let magnitude = (int >> 1) as f32;
    let q = if int & 1 == 1 { -magnitude } else { magnitude };
    round_to(format, f32::from_bits(scale) * q)
}

/// The word of `format` nearest to `x` (ties to even); a NaN becomes the
/// format's canonical quiet NaN. Formats other than F32, BF16 and F16 are not
/// Scaled formats (caller bug).
#[inline]
pub fn round_to(format: FloatFormat, x: f32) -> u32 {
    match format {
        FloatFormat::F32 if x.is_nan() => 0x7fc0_0000,
        FloatFormat::F32 => x.to_bits(),
        FloatFormat::Bf16 => f32_to_bf16(x),
        FloatFormat::F16 => f32_to_f16(x),
        _ => panic!("{format:?} is not a Scaled format"),
    }
}

/// The binary32 value of a word of `format` (exact: every BF16 and F16 value
/// is a binary32 value).
pub fn to_f32(format: FloatFormat, word: u32) -> f32 {
    match format {
        FloatFormat::F32 => f32::from_bits(word),
        FloatFormat::Bf16 => f32::from_bits(word << 16),
        FloatFormat::F16 => f16_to_f32(word),
        _ => panic!("{format:?} is not a Scaled format"),
    }
}

fn f32_to_bf16(x: f32) -> u32 {
    if x.is_nan() {
        return 0x7fc0;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    // Carries into the exponent round up to the next binade or to infinity.
    ((bits as u64 + 0x7fff + lsb as u64) >> 16) as u32
}

fn f32_to_f16(x: f32) -> u32 {
    if x.is_nan() {
        return 0x7e00;
    }
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let abs = bits & 0x7fff_ffff;
    // 65520 = 0x477f_f000 and above round to infinity.
    if abs >= 0x477f_f000 {
        return sign | 0x7c00;
    }
    let exp = (abs >> 23) as i32 - 127;
    let (mant, shift) = if exp >= -14 {
        // Normal in F16: keep 10 of the 23 mantissa bits, with the exponent
        // rebiased; a carry out of the mantissa moves to the next binade.
        let rebased = abs - ((127 - 15) << 23);
        (rebased, 13)
    } else {
        // Subnormal in F16 (or zero): the value in units of 2^-24, the
        // implicit bit made explicit.
        if exp < -25 {
            return sign;
        }
        let m = (abs & 0x7f_ffff) | 0x80_0000;
        (m, (-exp - 14 + 13) as u32)
    };
    let half = 1u32 << (shift - 1);
    let rest = mant & ((1 << shift) - 1);
    let mut out = mant >> shift;
    if rest > half || (rest == half && out & 1 == 1) {
        out += 1;
    }
    sign | out
}

fn f16_to_f32(word: u32) -> f32 {
    let sign = (word & 0x8000) << 16;
    let exp = (word >> 10) & 0x1f;
    let mant = word & 0x3ff;
    let bits = match exp {
        // Zero or subnormal: mant * 2^-24, exact in binary32.
        0 => {
            let v = mant as f32 * f32::from_bits(0x3380_0000);
            return if sign == 0 { v } else { -v };
        }
        0x1f => sign | 0x7f80_0000 | (mant << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (mant << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every finite non-negative F16 value, in increasing order, with its word.
    fn f16_values() -> Vec<(f64, u32)> {
        (0..0x7c00u32).map(|w| (f16_to_f32(w) as f64, w)).collect()
    }

    /// The nearest F16 word by brute force, ties to the even word, with the
    /// sign of `x` (rounding keeps the sign, also down to zero).
    fn nearest_f16(x: f32, values: &[(f64, u32)]) -> u32 {
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let a = x.abs() as f64;
        if a >= 65520.0 {
            return sign | 0x7c00;
        }
        let i = values.partition_point(|(v, _)| *v < a);
        let mut best: Option<(f64, u32)> = None;
        for &(v, w) in &values[i.saturating_sub(2)..(i + 2).min(values.len())] {
            let d = (v - a).abs();
            best = match best {
                Some((bd, bw)) if bd < d || (bd == d && bw & 1 == 0) => Some((bd, bw)),
                _ => Some((d, w)),
            };
        }
        sign | best.unwrap().1
    }

    #[test]
    fn f16_widening_is_exact_and_round_trips() {
        for w in (0..0x10000u32).filter(|w| (w >> 10) & 0x1f != 0x1f) {
            assert_eq!(f32_to_f16(f16_to_f32(w)), w, "{w:#x}");
        }
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
    }

    #[test]
    fn nan_is_canonical_and_infinities_stay() {
        assert_eq!(round_to(FloatFormat::Bf16, f32::NAN), 0x7fc0);
        assert_eq!(round_to(FloatFormat::F16, -f32::NAN), 0x7e00);
        assert_eq!(
            round_to(FloatFormat::F32, f32::from_bits(0xffc0_1234)),
            0x7fc0_0000
        );
        assert_eq!(round_to(FloatFormat::F16, f32::NEG_INFINITY), 0xfc00);
        assert_eq!(round_to(FloatFormat::Bf16, f32::MAX), 0x7f80);
    }

    #[test]
    fn scaled_words_read_magnitude_and_sign() {
        let half = 0.5f32.to_bits();
        assert_eq!(
            scaled_word(FloatFormat::F32, half, 0b0011),
            (-0.5f32).to_bits()
        );
        assert_eq!(
            scaled_word(FloatFormat::F32, half, 0b1110),
            3.5f32.to_bits()
        );
        assert_eq!(scaled_word(FloatFormat::Bf16, half, 0b1111), 0xc060);
        assert_eq!(scaled_word(FloatFormat::Bf16, half, 0b0001), 0x8000);
        assert_eq!(scaled_word(FloatFormat::F16, half, 0b0000), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn f16_rounding_is_to_the_nearest_even(bits: u32) {
            let x = f32::from_bits(bits);
            prop_assume!(!x.is_nan());
            let values = f16_values_cached();
            prop_assert_eq!(f32_to_f16(x), nearest_f16(x, values), "{:e}", x);
        }

        #[test]
        fn bf16_rounding_is_to_the_nearest_even(bits: u32) {
            let x = f32::from_bits(bits);
            prop_assume!(!x.is_nan() && x.is_finite());
            let w = f32_to_bf16(x);
            let got = f32::from_bits(w << 16) as f64;
            // Neighbours one BF16 step either side are no nearer.
            for n in [w.wrapping_sub(1), w + 1] {
                let other = f32::from_bits((n & 0xffff) << 16) as f64;
                if other.is_finite() && got.is_finite() {
                    let (d, e) = ((got - x as f64).abs(), (other - x as f64).abs());
                    prop_assert!(d < e || (d == e && w & 1 == 0), "{:e}", x);
                }
            }
        }
    }

    fn f16_values_cached() -> &'static [(f64, u32)] {
        static VALUES: std::sync::OnceLock<Vec<(f64, u32)>> = std::sync::OnceLock::new();
        VALUES.get_or_init(f16_values)
    }
}
