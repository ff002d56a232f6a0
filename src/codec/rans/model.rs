//! The frequency model of a stream: its scale, quantised frequencies and
//! group count, and the cost estimates that choose them.

#![forbid(unsafe_code)]

use super::*;

/// Quantised frequencies summing to `2^scale`, per symbol rank, and the
/// number of lane groups.
pub(super) struct Model {
    pub(super) scale: u32,
    pub(super) freqs: Vec<u32>,
    pub(super) groups: usize,
}

/// The coarsest scale a long stream is coded at when that costs little: its
/// decoding tables (2^12 four-byte entries and as many words) stay in the L1
/// cache, which makes decoding the F16, BF16 and FP8 corpus files 7-9% faster
/// than with their long streams at scale 14 (see [`FAST_SCALE_COST`]).
/// Scale 13's fused table (32 KiB) still fits the L1 cache where 14's does
/// not: FP8 streams that 12 would cost too much decode ~5% faster at 13.
/// A layout that keeps scale 14's tables in the L1 cache decoded slower
/// still: see [`Slots::Fused`].
pub(super) const FAST_SCALE: u32 = 12;

/// A stream takes a scale coarser than its finest when that makes it at most
/// 1/this larger. A finer choice trades decoding speed for little: at 1/1000
/// (long streams mostly at 13) wordllama-f16, minilm-bf16 and minilm-fp8
/// decoded 1.4-3.1% slower for 0.04-0.09% smaller archives; at 1/3000 with
/// 13 as the coarsest scale (mostly 14) 7-9% slower for 0.05-0.13%
/// (examples/decode_cpu.rs: medians of thread CPU time).
pub(super) const FAST_SCALE_COST: i128 = 300;

impl Model {
    /// The finest scale is about log2(n): a finer one would cost table bytes
    /// that a short stream cannot recoup. A single word needs no precision at
    /// all. Long streams drop to the coarsest scale from [`FAST_SCALE`] up
    /// whose frequencies cost at most 1/[`FAST_SCALE_COST`] more than the
    /// finest's. The groups follow from the size (see [`group_count`]).
    pub(super) fn new(alphabet: &Alphabet, n: usize) -> Model {
        Model::with_cost(alphabet, n).0
    }

    /// [`Model::new`] and its cost of the words (as [`Model::cost`]).
    pub(super) fn with_cost(alphabet: &Alphabet, n: usize) -> (Model, i128) {
        let counts = alphabet.totals();
        let (mut model, cost) = Model::quantised(&counts, alphabet.len(), n);
        model.groups = group_count(cost);
        (model, cost)
    }

    /// The frequencies of [`Model::new`], with one group, and their cost.
    pub(super) fn quantised(counts: &[u64], distinct: usize, n: usize) -> (Model, i128) {
        let at = |scale| {
            let model = Model {
                scale,
                freqs: normalize(counts, n as u64, scale),
                groups: 1,
            };
            let cost = model.cost(counts);
            (model, cost)
        };
        if distinct == 1 {
            return at(0);
        }
        let least = ceil_log2(distinct);
        let fine = at(ceil_log2(n).clamp(least, MAX_SCALE));
        (least.max(FAST_SCALE)..fine.0.scale)
            .map(at)
            .find(|coarse| (coarse.1 - fine.1) * FAST_SCALE_COST <= fine.1)
            .unwrap_or(fine)
    }

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

/// Rounds `counts` (summing to `total`) to frequencies >= 1 summing to
/// `2^scale` (which is at least the number of counts). The rounding error is
/// settled on the largest frequencies, where one unit costs the fewest bits.
pub(super) fn normalize(counts: &[u64], total: u64, scale: u32) -> Vec<u32> {
    let target = 1u64 << scale;
    let mut freqs: Vec<u64> = counts
        .iter()
        .map(|&c| ((c * target + total / 2) / total).max(1))
        .collect();
    let order = crate::codec::sorted_indices(freqs.iter().map(|&f| target - f));
    let sum: u64 = freqs.iter().sum();
    if sum < target {
        freqs[order[0]] += target - sum;
    } else {
        let mut excess = sum - target;
        for &i in &order {
            let take = (freqs[i] - 1).min(excess);
            freqs[i] -= take;
            excess -= take;
        }
        debug_assert_eq!(excess, 0);
    }
    freqs.into_iter().map(|f| f as u32).collect()
}
