//! The Partition operator's groups gathered from its classes' parts
//! (docs/FORMAT.md, "Programs": `Partition`), each group checked before it
//! is copied.

/// Classes a Partition has at most: each holds a stream of its own, with
/// its own code tables.
pub const MAX_PARTITION_CLASSES: usize = 16;

/// Groups shorter than this are put in runs of one class (see
/// [`gather_partition`]); longer ones one by one, as looking for runs of
/// them costs more than it saves.
const RUNS_BELOW: usize = 8;

/// Puts a Partition's groups into `out` with `put` (a copy, or an or into
/// a Merge's field): group `i` (of `group` words, the last one what is
/// left) is the next words of `parts[classes[i]]`, the parts lying end to
/// end in `words` with the given lengths. A class without a part, or one
/// whose groups take more words than its part holds, is refused before
/// anything is read past the part. As the lengths sum to `out.len()`, every
/// part is then used up exactly. Consecutive groups of one class take
/// consecutive words of its part, so each run of short groups is put at
/// once: the fields of a quantized block are such runs. Groups of one word
/// whose classes repeat their first `period` (where given, and checked) are
/// put by repeats. Work is O(out.len() + classes.len()).
pub fn gather_partition<T, F>(
    out: &mut [T],
    (group, period): (usize, Option<usize>),
    classes: &[u32],
    (words, lens): (&[F], &[usize]),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    let mut next = [0usize; MAX_PARTITION_CLASSES];
    let mut end = [0usize; MAX_PARTITION_CLASSES];
    let mut at = 0;
    for (c, &len) in lens.iter().enumerate() {
        next[c] = at;
        at += len;
        end[c] = at;
    }
    if group == 1 {
        let parts = (words, lens.len());
        return match period.filter(|&p| is_periodic(classes, out.len(), p)) {
            Some(period) => gather_periodic(out, &classes[..period], parts, (next, end), put),
            None => gather_words(out, classes, parts, (next, end), put),
        };
    }
    let len = out.len();
    let groups = len.div_ceil(group).min(classes.len());
    let mut g = 0;
    while g < groups {
        let class = classes[g];
        let mut run = 1;
        while group < RUNS_BELOW && g + run < groups && classes[g + run] == class {
            run += 1;
        }
        let c = class as usize;
        if c >= lens.len() {
            return Err("partition class without a part");
        }
        let rows = &mut out[g * group..((g + run) * group).min(len)];
        if rows.len() > end[c] - next[c] {
            return Err("partition class longer than its part");
        }
        put(rows, &words[next[c]..next[c] + rows.len()]);
        next[c] += rows.len();
        g += run;
    }
    Ok(())
}

/// Repeats of a period that [`gather_periodic`] puts place by place.
const REPEATS_AT_ONCE: usize = 16;

/// Whether the first `len` of `classes` repeat the first `period` of them.
fn is_periodic(classes: &[u32], len: usize, period: usize) -> bool {
    let Some(classes) = classes.get(..len) else {
        return false;
    };
    period > 0 && period < len && classes[period..] == classes[..len - period]
}

/// [`gather_partition`] of groups of one word whose classes repeat
/// `pattern` (the columns of a matrix in classes, a row's classes): every
/// repeat takes the same number of words from each part, so the word for
/// place `k` of a repeat lies a fixed step past the one for place `k` of
/// the repeat before. No word waits for the one before it, as it does
/// where each class's next word is counted in turn. Refuses what
/// [`gather_words`] refuses, before anything is put.
fn gather_periodic<T, F>(
    out: &mut [T],
    pattern: &[u32],
    (words, parts): (&[F], usize),
    (next, end): (
        [usize; MAX_PARTITION_CLASSES],
        [usize; MAX_PARTITION_CLASSES],
    ),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    if pattern.iter().any(|&c| c as usize >= parts) {
        return Err("partition class without a part");
    }
    // `at[k]`: the word of place `k` in the first repeat; `step[k]`: words
    // of its class in a repeat.
    let mut per_repeat = [0usize; MAX_PARTITION_CLASSES];
    let mut at: Vec<usize> = (pattern.iter())
        .map(|&c| {
            let c = c as usize;
            per_repeat[c] += 1;
            next[c] + per_repeat[c] - 1
        })
        .collect();
    let step: Vec<usize> = pattern.iter().map(|&c| per_repeat[c as usize]).collect();
    let (repeats, rest) = (out.len() / pattern.len(), out.len() % pattern.len());
    let mut taken = per_repeat.map(|n| n * repeats);
    pattern[..rest].iter().for_each(|&c| taken[c as usize] += 1);
    if (0..parts).any(|c| taken[c] > end[c] - next[c]) {
        return Err("partition class longer than its part");
    }
    // Place by place over a block of repeats: a place's word and step are
    // read once for the block, and no store waits on another.
    let period = pattern.len();
    for block in out.chunks_mut(period * REPEATS_AT_ONCE) {
        let repeats = block.len().div_ceil(period);
        for (k, (a, &s)) in at.iter_mut().zip(&step).enumerate() {
            let outs = block
                .get_mut(k..)
                .unwrap_or_default()
                .iter_mut()
                .step_by(period);
            let ins = words.get(*a..).unwrap_or_default().iter().step_by(s);
            for (o, w) in outs.zip(ins) {
                put(std::slice::from_mut(o), std::slice::from_ref(w));
            }
            *a += repeats * s;
        }
    }
    Ok(())
}

/// [`gather_partition`] of groups of one word (the columns of a matrix in
/// classes), each put on its own: a run of one class is rarely longer
/// than a word, and looking for one costs more than the word's copy.
/// `next` and `end` are where each of the `parts` parts' unread words
/// start and end.
fn gather_words<T, F>(
    out: &mut [T],
    classes: &[u32],
    (words, parts): (&[F], usize),
    (mut next, end): (
        [usize; MAX_PARTITION_CLASSES],
        [usize; MAX_PARTITION_CLASSES],
    ),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    for (o, &class) in out.iter_mut().zip(classes) {
        let c = class as usize;
        if c >= parts {
            return Err("partition class without a part");
        }
        if next[c] == end[c] {
            return Err("partition class longer than its part");
        }
        put(std::slice::from_mut(o), &words[next[c]..next[c] + 1]);
        next[c] += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a Partition means, group by group (docs/FORMAT.md): each group
    /// the next words of its class's part, or None where a class has no
    /// part or its groups take more words than the part holds.
    fn one_by_one(len: usize, group: usize, classes: &[u32], lens: &[usize]) -> Option<Vec<u32>> {
        let mut next: Vec<usize> = (lens
            .iter()
            .scan(0, |at, &n| Some(std::mem::replace(at, *at + n))))
        .collect();
        let mut out = Vec::new();
        for (g, &c) in (0..len.div_ceil(group)).zip(classes) {
            let n = group.min(len - g * group);
            let c = c as usize;
            let end = next.get(c)? + n;
            if end > lens[..=c].iter().sum() {
                return None;
            }
            out.extend((next[c]..end).map(|w| w as u32));
            next[c] = end;
        }
        Some(out)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Putting runs of groups at once yields what putting each group
        /// does, and refuses what it refuses, short groups or long, with
        /// classes valid or not.
        #[test]
        fn runs_of_groups_gather_as_single_groups(
            group in 1usize..12,
            classes in prop::collection::vec(0u32..4, 1..40),
            lens in prop::collection::vec(0usize..60, 1..4),
        ) {
            let len: usize = lens.iter().sum();
            let words: Vec<u32> = (0..len as u32).collect();
            let mut out = vec![u32::MAX; len];
            let got = gather_partition(&mut out, (group, None), &classes, (&words, &lens), |o, w| {
                o.copy_from_slice(w)
            });
            let want = one_by_one(len, group, &classes, &lens);
            prop_assert_eq!(got.is_ok(), want.is_some());
            if let Some(want) = want.filter(|w| w.len() == len) {
                prop_assert_eq!(out, want);
            }
        }

        /// Single words whose classes repeat a pattern (or, with `broken`,
        /// all but one word) gather with the period given as they do one
        /// by one, and refuse what that refuses: parts as long as their
        /// classes' words, `extra` words longer, one of them a word short.
        #[test]
        fn words_gather_by_repeats_as_one_by_one(
            pattern in prop::collection::vec(0u32..5, 1..40),
            len in 0usize..2000,
            broken in prop::option::of((0usize..2000, 0u32..5)),
            parts in 1usize..6,
            extra in prop::collection::vec(0usize..2, 5),
            short in prop::option::of(0usize..5),
        ) {
            let mut classes: Vec<u32> = (0..len).map(|i| pattern[i % pattern.len()]).collect();
            if let Some((at, class)) = broken.filter(|&(at, _)| at < len) {
                classes[at] = class;
            }
            let mut lens: Vec<usize> = (0..parts)
                .map(|c| classes.iter().filter(|&&k| k as usize == c).count() + extra[c])
                .collect();
            if let Some(n) = short.and_then(|c| lens.get_mut(c)) {
                *n = n.saturating_sub(1);
            }
            let total: usize = lens.iter().sum();
            let words: Vec<u32> = (0..total as u32).collect();
            let mut out = vec![u32::MAX; len];
            let got = gather_partition(
                &mut out,
                (1, Some(pattern.len())),
                &classes,
                (&words, &lens),
                |o, w| o.copy_from_slice(w),
            );
            let want = one_by_one(len, 1, &classes, &lens);
            prop_assert_eq!(got.is_ok(), want.is_some());
            if let Some(want) = want {
                prop_assert_eq!(&out[..want.len()], &want[..]);
            }
        }
    }
}
