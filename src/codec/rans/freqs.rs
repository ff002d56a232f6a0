//! A stream's frequencies from its table's counts, as both the encoder and
//! the decoder derive them (docs/FORMAT.md, "rANS (tag 4, version 6)":
//! Frequencies).

#![forbid(unsafe_code)]

/// The frequencies at `scale` of a table's counts: what a decoder derives
/// from the table. `scale` must give every count a slot.
pub(super) fn table_freqs(table: &[u32], scale: u32) -> Vec<u32> {
    normalize(table, table.iter().map(|&c| c as u64).sum(), scale)
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
