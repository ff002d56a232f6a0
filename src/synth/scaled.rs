//! Scaled integers: float streams that are a scale per group times small
//! integers (a quantized checkpoint stored back in a wide dtype), found and
//! derived for the Scaled operator.

use super::stream::Hint;
use crate::dsl::{mask, scaled_word, to_f32, FloatFormat, SCALED_FORMATS};
use std::cell::RefCell;

/// Group lengths a Scaled node is tried at, largest first: those of common
/// quantizers.
const SCALED_GROUPS: [usize; 4] = [256, 128, 64, 32];

/// Largest integer magnitude the search looks for (8-bit quantization).
const SCALED_MAX_INT: u32 = 127;

/// Width of the integers of the Scaled nodes the packer makes: magnitudes up
/// to [`SCALED_MAX_INT`] and a sign. A wider field costs nothing: literals code
/// the integers' values, not their width.
const SCALED_INT_WIDTH: u32 = 8;

/// Groups a Scaled node is checked on before it is proposed: enough to see
/// a group length that straddles rows of a per-row quantizer.
const SCALED_PROBE_GROUPS: usize = 4;

/// The Scaled node with the longest group whose first few groups are each a
/// scale times small integers (the first group decides cheaply for most
/// streams, whose words are not), as its group length, float format and
/// integer width; whether every group is, deriving the children finds out.
pub(super) fn scaled(t: &[u32], width: u32, hint: Hint) -> Option<(usize, FloatFormat, u32)> {
    let format = hint
        .float
        .filter(|f| SCALED_FORMATS.contains(f) && f.width() == width)?;
    let group = SCALED_GROUPS
        .into_iter()
        .filter(|&g| 2 * g <= t.len())
        .find(|&g| {
            (t.chunks(g).take(SCALED_PROBE_GROUPS))
                .all(|words| group_scale(words, format).is_some())
        })?;
    Some((group, format, SCALED_INT_WIDTH))
}

/// A scale and integers (magnitude and sign, as [`scaled_word`] reads them)
/// whose products, rounded to `format`, are `words`, with magnitudes of at
/// most [`SCALED_MAX_INT`]. From each of a few rough guesses of the scale
/// (the smallest magnitude over 1 to 4, the largest over the top level of
/// common quantizers), [`fit`] finds the integers and the interval of scales
/// that round every product to its word, from which a few scales are tried.
/// This finds scales kept in the checkpoint's dtype and wider ones alike (a
/// quantizer that computes in binary32 and stores BF16).
///
/// A quantized group holds a few distinct magnitudes, so both the fit and
/// the check of a scale look at each once: a word's integer depends only on
/// its magnitude (its sign is the integer's), and rounding is symmetric, so
/// a product that rounds to a magnitude rounds, negated, to its negative.
fn group_scale(words: &[u32], format: FloatFormat) -> Option<(f32, Vec<u32>)> {
    let sign = 1u32 << (format.width() - 1);
    // Zeros are any scale times 0; no scale yields a NaN.
    let magnitudes = distinct_magnitudes(words, sign);
    if magnitudes.iter().any(|&m| to_f32(format, m).is_nan()) {
        return None;
    }
    // Each word's integer, given those of the magnitudes (0 for zeros).
    let ints_of = |qs: &[u32]| -> Vec<u32> {
        let int = |q: u32, w: u32| q << 1 | (w & sign != 0) as u32;
        if sign > NARROW_SIGN {
            let q = |m| magnitudes.binary_search(&m).map_or(0, |k| qs[k]);
            return words.iter().map(|&w| int(q(w & (sign - 1)), w)).collect();
        }
        // Narrow words look their magnitude's integer up in a table, whose
        // slots of this group's magnitudes (and of zero) are written first.
        NARROW_SCRATCH.with_borrow_mut(|(_, table)| {
            table.resize(NARROW_SIGN as usize, 0);
            table[0] = 0;
            for (&m, &q) in magnitudes.iter().zip(qs) {
                table[m as usize] = q as u8;
            }
            (words.iter())
                .map(|&w| int(table[(w & (sign - 1)) as usize] as u32, w))
                .collect()
        })
    };
    let (Some(&first), Some(&last)) = (magnitudes.first(), magnitudes.last()) else {
        // Signed zeros only: any scale times 0.
        return Some((1.0, ints_of(&[])));
    };
    let (smallest, largest) = (to_f32(format, first), to_f32(format, last));
    let divided = [1.0, 2.0, 3.0, 4.0].map(|d| smallest / d);
    let tops = [7.0, 8.0, 15.0, 16.0, 127.0, 128.0].map(|q| largest / q);
    divided.into_iter().chain(tops).find_map(|guess| {
        let (qs, interval) = fit(&magnitudes, guess, format)?;
        let scale = scales_within(interval).find(|scale| {
            (magnitudes.iter().zip(&qs))
                .all(|(&m, &q)| scaled_word(format, scale.to_bits(), q << 1) == m)
        })?;
        Some((scale, ints_of(&qs)))
    })
}

/// Sign bit of the widest words (16-bit floats) whose magnitudes
/// [`distinct_magnitudes`] marks in a bitmap and `group_scale` looks up in
/// a table.
const NARROW_SIGN: u32 = 1 << 15;

const _: () = assert!(SCALED_MAX_INT <= u8::MAX as u32);

thread_local! {
    /// A bitmap of magnitudes below [`NARROW_SIGN`] (left clear between
    /// groups) and a table of their integers (up to [`SCALED_MAX_INT`]).
    static NARROW_SCRATCH: RefCell<(Vec<u64>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The distinct nonzero magnitudes (bits below `sign`) of `words`, in
/// increasing order. Narrow words are marked in a bitmap, a pass without
/// comparisons, which is read between the lowest and highest words marked
/// and cleared as it is read (zeros, common in quantized groups, are not
/// marked: they would stretch that span down to 0); wider words are sorted.
fn distinct_magnitudes(words: &[u32], sign: u32) -> Vec<u32> {
    if sign > NARROW_SIGN {
        let mut magnitudes: Vec<u32> = (words.iter())
            .map(|&w| w & (sign - 1))
            .filter(|&m| m != 0)
            .collect();
        magnitudes.sort_unstable();
        magnitudes.dedup();
        return magnitudes;
    }
    NARROW_SCRATCH.with_borrow_mut(|(bitmap, _)| {
        bitmap.resize(NARROW_SIGN as usize / 64, 0);
        let (mut low, mut high) = (bitmap.len(), 0);
        for &w in words.iter().filter(|&&w| w & (sign - 1) != 0) {
            let m = (w & (sign - 1)) as usize;
            bitmap[m / 64] |= 1 << (m % 64);
            (low, high) = (low.min(m / 64), high.max(m / 64));
        }
        let mut magnitudes = Vec::new();
        for (i, slot) in bitmap.iter_mut().enumerate().take(high + 1).skip(low) {
            let mut bits = std::mem::take(slot);
            while bits != 0 {
                magnitudes.push((64 * i) as u32 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        magnitudes
    })
}

/// How far from a guess the scale may be: more than the rounding of the word
/// a guess is made from.
const GUESS_SLACK: f64 = 1.0 / 64.0;

/// The integer of each of the increasing positive `magnitudes` near `guess`,
/// and the interval of scales that round each integer's product to its
/// magnitude. Magnitudes are taken from the smallest: the small integers,
/// which a rough scale cannot get wrong, narrow the interval before the
/// large ones, which a scale off by the rounding of a word could round to a
/// neighbour, are chosen (the one whose magnitude's interval still meets
/// it). None if a magnitude has no such integer of at most
/// [`SCALED_MAX_INT`]. Fitting each distinct magnitude once gives what
/// fitting every word would: a magnitude met again would take the same
/// integer and leave the interval as it is, since the interval already lies
/// within its rounding interval over its integer, which is narrower than
/// one integer's step for integers up to [`SCALED_MAX_INT`].
fn fit(magnitudes: &[u32], guess: f32, format: FloatFormat) -> Option<(Vec<u32>, (f64, f64))> {
    if !guess.is_normal() {
        return None;
    }
    let guess = guess as f64;
    let (mut low, mut high) = (guess * (1.0 - GUESS_SLACK), guess * (1.0 + GUESS_SLACK));
    let mut qs = Vec::with_capacity(magnitudes.len());
    for &m in magnitudes {
        let (below, above) = rounding_interval(m, format);
        let near = (to_f32(format, m) as f64 / ((low + high) / 2.0)).round();
        let q = [near, near - 1.0, near + 1.0].into_iter().find(|&q| {
            (1.0..=SCALED_MAX_INT as f64).contains(&q) && below / q <= high && above / q >= low
        })?;
        low = low.max(below / q);
        high = high.min(above / q);
        qs.push(q as u32);
    }
    Some((qs, (low, high)))
}

/// The magnitudes that round to the magnitude of `word` in `format`,
/// widened by [`INTERVAL_SLACK`] so that a product exactly on a bound (a tie
/// rounded to even) stays in.
fn rounding_interval(word: u32, format: FloatFormat) -> (f64, f64) {
    let m = word & !(1u32 << (format.width() - 1));
    let value = to_f32(format, m) as f64;
    let below = to_f32(format, m - 1) as f64;
    let above = to_f32(format, m + 1) as f64;
    let above = if above.is_finite() {
        above
    } else {
        2.0 * value - below
    };
    (
        (value + below) / 2.0 * (1.0 - INTERVAL_SLACK),
        (value + above) / 2.0 * (1.0 + INTERVAL_SLACK),
    )
}

/// Relative slack of each bound of [`rounding_interval`]; the scales tried
/// are checked exactly, so a wider interval only costs a failed try.
const INTERVAL_SLACK: f64 = 1e-9;

/// Scales in `[low, high]` to try, fewest mantissa bits first (as a
/// quantizer's BF16 or F16 scale has, so that the scales code small), then
/// the middle.
fn scales_within((low, high): (f64, f64)) -> impl Iterator<Item = f32> {
    let middle = ((low + high) / 2.0) as f32;
    let short = [7, 10, 16].into_iter().filter_map(move |kept| {
        let drop = 23 - kept;
        let bits = (middle.to_bits() + (1 << (drop - 1))) & !((1 << drop) - 1);
        let scale = f32::from_bits(bits);
        (low <= scale as f64 && scale as f64 <= high).then_some(scale)
    });
    short.chain(std::iter::once(middle))
}

/// A Scaled node's children for `t`: one scale per group of `group` words
/// and each word's integer (in `int_width` bits); None if a group has no
/// scale (of those `group_scale` guesses) or needs wider integers.
pub fn scaled_streams(
    t: &[u32],
    group: usize,
    format: FloatFormat,
    int_width: u32,
) -> Option<(Vec<u32>, Vec<u32>)> {
    let mut scales = Vec::with_capacity(t.len().div_ceil(group));
    let mut ints = Vec::with_capacity(t.len());
    for words in t.chunks(group) {
        let (scale, qs) = group_scale(words, format)?;
        if qs.iter().any(|&q| q > mask(int_width)) {
            return None;
        }
        scales.push(scale.to_bits());
        ints.extend(qs);
    }
    Some((scales, ints))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    /// The bitmap of narrow magnitudes gives what sorting gives, and is left
    /// clear for the next group.
    #[test]
    fn narrow_magnitudes_are_the_sorted_distinct_ones() {
        let mut seed = 3;
        for round in 0..20 {
            let spread = [4, 300, 1 << 16][round % 3];
            let words: Vec<u32> = (0..256)
                .map(|_| (xorshift(&mut seed) % spread) as u32)
                .collect();
            let mut sorted: Vec<u32> = (words.iter())
                .map(|&w| w & 0x7fff)
                .filter(|&m| m != 0)
                .collect();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                distinct_magnitudes(&words, 1 << 15),
                sorted,
                "round {round}"
            );
        }
        NARROW_SCRATCH.with_borrow(|(bitmap, _)| assert!(bitmap.iter().all(|&b| b == 0)));
    }

    /// Signed zeros are any scale times 0; a NaN is no scale's product.
    #[test]
    fn zeros_scale_and_nans_do_not() {
        let zeros = [0, 0x8000, 0];
        let (scales, ints) = scaled_streams(&zeros, 3, FloatFormat::Bf16, 8).unwrap();
        assert_eq!((scales, ints), (vec![1f32.to_bits()], vec![0, 1, 0]));
        assert!(scaled_streams(&[0, 0x7fc0, 0x8000], 3, FloatFormat::Bf16, 8).is_none());
        assert!(scaled_streams(&[0x3f80, 0xffc0], 2, FloatFormat::Bf16, 8).is_none());
    }
}
