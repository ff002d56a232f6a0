//! The frequency model of a stream: its scale, quantised frequencies and
//! group count, and the cost estimates that choose them.

#![forbid(unsafe_code)]

use super::*;

/// Quantised frequencies summing to `2^scale`, per symbol rank, the table
/// of counts they are normalised from (see [`table_counts`]), its precision
/// and its size in bytes, and the number of lane groups.
pub(in crate::codec) struct Model {
    pub(super) scale: u32,
    pub(super) precision: u32,
    pub(super) freqs: Vec<u32>,
    pub(super) table: Vec<u32>,
    pub(super) table_bytes: usize,
    pub(super) groups: usize,
}

/// A stream takes the coarsest scale whose size, table included, is at
/// most 1/this larger than the smallest any scale gives: coarser scales
/// have smaller decoding tables, which are built faster and stay in the L1
/// cache, so a stream gives up a sliver of size for faster decoding; a
/// looser bound costs more size and decodes no faster (docs/PERFORMANCE.md,
/// *rANS scales*).
pub(super) const SCALE_COST: i128 = 1000;

/// The precision [`Model::with_cost`] starts its search from: the one the
/// weight fields of the corpus take most often.
const START_PRECISION: u32 = 3;

/// The counts a table of `precision` holds for `counts` (see
/// [`shape::quantise`]).
pub(super) fn table_counts(counts: &[u64], precision: u32) -> Vec<u32> {
    (counts.iter())
        .map(|&c| shape::quantise(c as u32, precision))
        .collect()
}

/// The frequencies at `scale` of a table's counts: what a decoder derives
/// from the table. `scale` must give every count a slot.
pub(super) fn table_freqs(table: &[u32], scale: u32) -> Vec<u32> {
    normalize(table, table.iter().map(|&c| c as u64).sum(), scale)
}

impl Model {
    /// The model of a stream of `alphabet` and its cost of the words (see
    /// [`Model::with_cost`]), chosen once per alphabet.
    pub(super) fn of(alphabet: &Alphabet) -> &(Model, i128) {
        alphabet.rans.get_or_init(|| {
            let n = alphabet.quarters.iter().flatten().map(|&c| c as usize);
            Model::with_cost(alphabet, n.sum())
        })
    }

    /// The model of `n` words of `alphabet`, and its cost of the words (as
    /// [`Model::cost`]). A precision of the table's counts and a scale give
    /// a size: the words' cost plus the table. The precision is the one of
    /// the smallest size at the finest scale; then, of the scales from the
    /// fewest bits that give every word a frequency up to about log2(n)
    /// (beyond which a finer one gains the words nothing; a single word
    /// needs no precision at all), the coarsest within 1/[`SCALE_COST`] of
    /// the smallest size is kept. The groups follow from the cost (see
    /// [`group_count`]).
    pub(super) fn with_cost(alphabet: &Alphabet, n: usize) -> (Model, i128) {
        let counts = alphabet.totals();
        let least = ceil_log2(alphabet.len());
        let scales = match alphabet.len() {
            1 => 0..=0,
            _ => least..=ceil_log2(n).clamp(least, MAX_SCALE),
        };
        // A precision's table and its size in bytes (the same at every scale).
        let table_of = |precision: u32| {
            let table = table_counts(&counts, precision);
            let bytes = symbols::size(&alphabet.words, &table, Values::Shape(precision));
            (precision, table, bytes)
        };
        // (model, cost of the words, size) of a table at a scale.
        let at = |(precision, table, bytes): &(u32, Vec<u32>, usize), scale: u32| {
            let model = Model {
                scale,
                precision: *precision,
                freqs: table_freqs(table, scale),
                // Given the chosen model's once it is chosen.
                table: Vec::new(),
                table_bytes: *bytes,
                groups: 1,
            };
            let cost = model.cost(&counts);
            (model, cost, cost + ((*bytes as i128) << 19))
        };
        // The precision: the smallest size at the finest scale, found by
        // stepping from a middle one while the size falls (it falls and
        // then rises with the precision: the words' cost falls, the
        // table's grows).
        let finest = *scales.end();
        let mut table = table_of(START_PRECISION);
        let mut best = at(&table, finest);
        for step in [-1i32, 1] {
            // Where a step down paid, a step up cannot.
            if step == 1 && best.0.precision != START_PRECISION {
                break;
            }
            loop {
                let precision = best.0.precision as i32 + step;
                if !(0..=shape::MAX_PRECISION as i32).contains(&precision) {
                    break;
                }
                let next_table = table_of(precision as u32);
                let next = at(&next_table, finest);
                if next.2 >= best.2 {
                    break;
                }
                (table, best) = (next_table, next);
            }
        }
        let mut options: Vec<_> = (*scales.start()..finest).map(|s| at(&table, s)).collect();
        options.push(best);
        let smallest = options.iter().map(|s| s.2).min().expect("a scale");
        let (mut model, cost, _) = options
            .into_iter()
            .find(|s| (s.2 - smallest) * SCALE_COST <= smallest)
            .expect("the smallest is within the bound");
        model.groups = group_count(cost);
        model.table = table.1;
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
pub(super) fn normalize(counts: &[u32], total: u64, scale: u32) -> Vec<u32> {
    let target = 1u64 << scale;
    // A frequency is at most `2^scale` (<= 2^14): it fits a u32.
    let mut freqs: Vec<u32> = counts
        .iter()
        .map(|&c| ((c as u64 * target + total / 2) / total).max(1) as u32)
        .collect();
    let sum: u64 = freqs.iter().map(|&f| f as u64).sum();
    if sum < target {
        let i = largest(&freqs);
        freqs[i] += (target - sum) as u32;
    } else {
        settle_excess(&mut freqs, sum - target);
    }
    freqs
}

/// Takes `excess` from the largest frequencies (the first of equals first),
/// each down to 1 at most, until it is settled. The largest alone settles
/// it unless rare symbols were rounded up to 1 at a coarse scale; then
/// every frequency above a threshold goes to 1 and those at it give the
/// rest in index order, which is that order without sorting: the threshold
/// is the smallest value above which the frequencies cannot settle it,
/// found by bisection.
fn settle_excess(freqs: &mut [u32], mut excess: u64) {
    let first = largest(freqs);
    if excess < freqs[first] as u64 {
        freqs[first] -= excess as u32;
        return;
    }
    // What taking every frequency above `v` down to 1 settles.
    let above = |v: u32| -> u64 {
        (freqs.iter())
            .map(|&f| if f > v { f as u64 - 1 } else { 0 })
            .sum()
    };
    // above(low) >= excess > above(high): above(1) is the sum less one a
    // frequency, and there are at most 2^scale of them.
    let (mut low, mut high) = (1, freqs[first]);
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        match above(mid) >= excess {
            true => low = mid,
            false => high = mid,
        }
    }
    for f in freqs.iter_mut().filter(|f| **f > high) {
        excess -= *f as u64 - 1;
        *f = 1;
    }
    for f in freqs.iter_mut().filter(|f| **f == high) {
        let taken = (*f as u64 - 1).min(excess);
        *f -= taken as u32;
        excess -= taken;
    }
    debug_assert_eq!(excess, 0);
}

/// The index of the largest frequency, the first of equals.
fn largest(freqs: &[u32]) -> usize {
    (0..freqs.len())
        .max_by_key(|&i| (freqs[i], std::cmp::Reverse(i)))
        .expect("a frequency")
}
