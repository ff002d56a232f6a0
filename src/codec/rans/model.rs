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

/// A stream takes the coarsest scale whose size, table included, is at
/// most 1/this larger than the smallest any scale gives: coarser scales
/// have smaller decoding tables, which stay in the L1 cache. The rule before
/// (the words' cost alone, within 1/300 of the finest, from scale 12 up)
/// made the BF16, FP8 and F16 corpus files 0.07-0.13% larger and decoded
/// them 1.4-6% faster (examples/decode_cpu.rs, medians of thread CPU time;
/// docs/PERFORMANCE.md, *rANS scales*).
pub(super) const SCALE_COST: i128 = 3000;

impl Model {
    /// The model of [`Model::with_cost`].
    pub(super) fn new(alphabet: &Alphabet, n: usize) -> Model {
        Model::with_cost(alphabet, n).0
    }

    /// The model of `n` words of `alphabet`, and its cost of the words (as
    /// [`Model::cost`]). Scales run from the fewest bits that give every
    /// word a frequency up to about log2(n), beyond which a finer one costs
    /// table bytes that the words cannot recoup; a single word needs no
    /// precision at all. Each scale's size is its words' cost plus its
    /// table; the coarsest within 1/[`SCALE_COST`] of the smallest is kept.
    /// The groups follow from the cost (see [`group_count`]).
    pub(super) fn with_cost(alphabet: &Alphabet, n: usize) -> (Model, i128) {
        let counts = alphabet.totals();
        let at = |scale| {
            let model = Model {
                scale,
                freqs: normalize(&counts, n as u64, scale),
                groups: 1,
            };
            let cost = model.cost(&counts);
            let table = symbols::size(&alphabet.words, &model.freqs, Values::Varints) as i128;
            (model, cost, cost + (table << 19))
        };
        let (mut model, cost, _) = if alphabet.len() == 1 {
            at(0)
        } else {
            let least = ceil_log2(alphabet.len());
            let scales: Vec<_> = (least..=ceil_log2(n).clamp(least, MAX_SCALE))
                .map(at)
                .collect();
            let smallest = scales.iter().map(|s| s.2).min().expect("a scale");
            scales
                .into_iter()
                .find(|s| (s.2 - smallest) * SCALE_COST <= smallest)
                .expect("the smallest is within the bound")
        };
        model.groups = group_count(cost);
        (model, cost)
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
