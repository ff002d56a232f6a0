//! How the encoder chooses a stream's model (docs/FORMAT.md, "rANS (tag 3)"
//! and "rANS (tag 4, version 6)", the informative Encoder paragraphs): the
//! precision of its table's counts, its scale and its lane groups. The
//! choice reads the stream's alphabet, which caches the chosen [`Model`]:
//! so the type lives apart, in `model`, and imports no statistics.

#![forbid(unsafe_code)]

use super::freqs::table_freqs;
use super::layout::{LANES, MAX_SCALE};
use super::model::{ceil_log2, Model};
use crate::codec::rounded;
use crate::codec::stats::Alphabet;
use crate::codec::symbols::{self, Values};

/// A stream takes the coarsest scale whose size, table included, is at
/// most 1/this larger than the smallest any scale gives: coarser scales
/// have smaller decoding tables, which are built faster and stay in the L1
/// cache, so a stream gives up a sliver of size for faster decoding; a
/// looser bound costs more size and decodes no faster (docs/PERFORMANCE.md,
/// *Tried and not kept*).
pub(super) const SCALE_COST: i128 = 1000;

/// The precision [`Model::with_cost`] starts its search from: the search
/// steps down or up from it while the size falls, so it starts where a
/// weight field's table is typically smallest, a few steps from any
/// stream's best.
const START_PRECISION: u32 = 3;

/// The counts a table of `precision` holds for `counts` (see
/// [`rounded::quantise`]).
pub(super) fn table_counts(counts: &[u64], precision: u32) -> Vec<u32> {
    (counts.iter())
        .map(|&c| rounded::quantise(c as u32, precision))
        .collect()
}

/// A stream takes two groups when the extra states cost at most 1/this of
/// its estimated size, i.e. from 32000 bytes on: the second group's states
/// are 128 bytes, and a long stream decodes much faster with two, its SIMD
/// decoder having twice the independent chains.
pub(super) const GROUP_COST: i128 = 250;

/// Number of groups the encoder gives a stream whose words cost `bits`
/// (in 1/65536ths, as [`Model::cost`]).
pub(super) fn group_count(bits: i128) -> usize {
    // The second group's states: 32 of 32 bits.
    const EXTRA_BITS: i128 = (LANES as i128 * 32) << 16;
    if EXTRA_BITS * GROUP_COST <= bits {
        2
    } else {
        1
    }
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
            let bytes = symbols::size(&alphabet.words, &table, Values::Rounded(precision));
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
                if !(0..=rounded::MAX_PRECISION as i32).contains(&precision) {
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
}
