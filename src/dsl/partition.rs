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
/// once: the fields of a quantized block are such runs. Work is
/// O(out.len() + classes.len()).
pub fn gather_partition<T, F>(
    out: &mut [T],
    group: usize,
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
        return gather_words(out, classes, (words, lens.len()), (next, end), put);
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
            let got = gather_partition(&mut out, group, &classes, (&words, &lens), |o, w| {
                o.copy_from_slice(w)
            });
            let want = one_by_one(len, group, &classes, &lens);
            prop_assert_eq!(got.is_ok(), want.is_some());
            if let Some(want) = want.filter(|w| w.len() == len) {
                prop_assert_eq!(out, want);
            }
        }
    }
}
