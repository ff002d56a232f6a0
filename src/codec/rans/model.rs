//! The frequency model of a rANS stream (docs/FORMAT.md, "rANS (tag 4,
//! version 6)"): its scale, frequencies, table and lane groups (chosen in
//! `choose`), and the cost of coding words with it.

#![forbid(unsafe_code)]

use super::layout::MAX_SCALE;

/// Quantised frequencies summing to `2^scale`, per symbol rank, the table
/// of counts they are normalised from (see
/// [`table_counts`](super::choose::table_counts)), its precision and its
/// size in bytes, and the number of lane groups.
#[derive(Clone)]
pub(in crate::codec) struct Model {
    pub(super) scale: u32,
    pub(super) precision: u32,
    pub(super) freqs: Vec<u32>,
    pub(super) table: Vec<u32>,
    pub(super) table_bytes: usize,
    pub(super) groups: usize,
}

impl Model {
    /// Bits of coding `counts` with these frequencies, in 1/65536ths:
    /// the sum of `count * log2(2^scale / freq)`.
    pub(super) fn cost(&self, counts: &[u64]) -> i128 {
        let one = (self.scale as i128) << 16;
        counts
            .iter()
            .zip(&self.freqs)
            .map(|(&count, &freq)| count as i128 * (one - LOG2_FREQ[freq as usize] as i128))
            .sum()
    }
}

/// `log2_q16` of every frequency a model can hold: models are sized for every
/// candidate stream while packing, so the logs are computed once.
pub(super) static LOG2_FREQ: std::sync::LazyLock<Vec<u32>> = std::sync::LazyLock::new(|| {
    (0..=1u32 << MAX_SCALE)
        .map(|freq| log2_q16(freq.max(1)) as u32)
        .collect()
});

/// log2(x) for x >= 1, in 1/65536ths, by integer steps (repeated squaring of
/// the mantissa), so that choices made with it are the same on every machine.
pub(super) fn log2_q16(x: u32) -> u64 {
    let int = 31 - x.leading_zeros();
    // The mantissa x / 2^int in [1, 2), with 30 fraction bits.
    let mut m = (x as u64) << (30 - int.min(30)) >> int.saturating_sub(30);
    let mut frac = 0u64;
    for bit in (0..16).rev() {
        m = (m * m) >> 30;
        if m >= 1 << 31 {
            m >>= 1;
            frac |= 1 << bit;
        }
    }
    (int as u64) << 16 | frac
}

/// The least `k` with `2^k >= x`.
pub(super) fn ceil_log2(x: usize) -> u32 {
    usize::BITS - x.saturating_sub(1).leading_zeros()
}
