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
/// once: the fields of a quantized block are such runs. With `repeating`,
/// `classes` are those of the first groups, repeated over all of them:
/// the groups are put by repeats. Work is O(out.len() + classes.len()).
pub fn gather_partition<T, F>(
    out: &mut [T],
    (group, repeating): (usize, bool),
    classes: &[u32],
    (words, lens): (&[F], &[usize]),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    let mut next: Offsets = [0; MAX_PARTITION_CLASSES];
    let mut end: Offsets = [0; MAX_PARTITION_CLASSES];
    let mut at = 0;
    for (c, &len) in lens.iter().enumerate() {
        next[c] = at;
        at += len;
        end[c] = at;
    }
    let parts = (words, lens.len());
    // Classes for every group, if given more than a repeat: as they are.
    let repeating = repeating && classes.len() < out.len().div_ceil(group);
    match (repeating, group) {
        (true, _) if classes.is_empty() => return Err("partition classes repeat nothing"),
        (true, 1) => return gather_places(out, classes, parts, (next, end), put),
        (true, _) => return gather_runs(out, group, classes, parts, (next, end), put),
        (false, 1) => return gather_words(out, classes, parts, (next, end), put),
        (false, _) => {}
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

/// Where each class's part starts (or its next unread word lies) in the
/// parts' words, or where it ends.
type Offsets = [usize; MAX_PARTITION_CLASSES];

/// Repeats of a period that [`gather_places`] puts place by place.
const REPEATS_AT_ONCE: usize = 16;

/// Words each class gives one repeat of `pattern` (classes of groups of
/// `group` words), once it is checked that every class has a part and
/// that the repeats filling `len` words, the last one cut short, take no
/// more of a part than it holds: what [`gather_partition`] refuses.
fn words_per_repeat(
    pattern: &[u32],
    (group, len): (usize, usize),
    parts: usize,
    (next, end): (&Offsets, &Offsets),
) -> Result<Offsets, &'static str> {
    if pattern.iter().any(|&c| c as usize >= parts) {
        return Err("partition class without a part");
    }
    let mut per_repeat = [0usize; MAX_PARTITION_CLASSES];
    pattern
        .iter()
        .for_each(|&c| per_repeat[c as usize] += group);
    let repeat = pattern.len() * group;
    let mut taken = per_repeat.map(|n| n * (len / repeat));
    let rest = len % repeat;
    for (k, &c) in pattern.iter().enumerate().take(rest.div_ceil(group)) {
        taken[c as usize] += group.min(rest - k * group);
    }
    if (0..parts).any(|c| taken[c] > end[c] - next[c]) {
        return Err("partition class longer than its part");
    }
    Ok(per_repeat)
}

/// [`gather_partition`] of groups of one word whose classes repeat
/// `pattern` (the columns of a matrix in classes, a row's classes): every
/// repeat takes the same number of words from each part, so the word for
/// place `k` of a repeat lies a fixed step past the one for place `k` of
/// the repeat before. Place by place over a block of repeats, no word
/// waits for the one before it, as it does where each class's next word
/// is counted in turn. Refuses before anything is put.
fn gather_places<T, F>(
    out: &mut [T],
    pattern: &[u32],
    (words, parts): (&[F], usize),
    (next, end): (Offsets, Offsets),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    let step = words_per_repeat(pattern, (1, out.len()), parts, (&next, &end))?;
    // `at[k]`: the word of place `k` in the next block's first repeat.
    let mut seen = [0usize; MAX_PARTITION_CLASSES];
    let mut at: Vec<(usize, usize)> = (pattern.iter())
        .map(|&c| {
            let c = c as usize;
            seen[c] += 1;
            (next[c] + seen[c] - 1, step[c])
        })
        .collect();
    let period = pattern.len();
    for block in out.chunks_mut(period * REPEATS_AT_ONCE) {
        let repeats = block.len().div_ceil(period);
        for (k, (a, s)) in at.iter_mut().enumerate() {
            let outs = block
                .get_mut(k..)
                .unwrap_or_default()
                .iter_mut()
                .step_by(period);
            let ins = words.get(*a..).unwrap_or_default().iter().step_by(*s);
            for (o, w) in outs.zip(ins) {
                put(std::slice::from_mut(o), std::slice::from_ref(w));
            }
            *a += repeats * *s;
        }
    }
    Ok(())
}

/// [`gather_partition`] of groups of several words whose classes repeat
/// `pattern` (the fields of quantized blocks): each repeat is the same
/// runs of groups of one class, found once, each put at once. Refuses
/// before anything is put.
fn gather_runs<T, F>(
    out: &mut [T],
    group: usize,
    pattern: &[u32],
    (words, parts): (&[F], usize),
    (mut next, end): (Offsets, Offsets),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    words_per_repeat(pattern, (group, out.len()), parts, (&next, &end))?;
    // (class, first word, words) of each run of a repeat.
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for (k, &c) in pattern.iter().enumerate() {
        match runs.last_mut() {
            Some((last, _, n)) if *last == c as usize => *n += group,
            _ => runs.push((c as usize, k * group, group)),
        }
    }
    for repeat in out.chunks_mut(pattern.len() * group) {
        for &(c, first, n) in &runs {
            let Some(rows) = repeat.get_mut(first..(first + n).min(repeat.len())) else {
                break;
            };
            put(rows, &words[next[c]..next[c] + rows.len()]);
            next[c] += rows.len();
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
    (mut next, end): (Offsets, Offsets),
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
            let got = gather_partition(&mut out, (group, false), &classes, (&words, &lens), |o, w| {
                o.copy_from_slice(w)
            });
            let want = one_by_one(len, group, &classes, &lens);
            prop_assert_eq!(got.is_ok(), want.is_some());
            if let Some(want) = want.filter(|w| w.len() == len) {
                prop_assert_eq!(out, want);
            }
        }

        /// Groups whose classes repeat a pattern gather from the pattern
        /// alone as they do one by one from every group's class, and
        /// refuse what that refuses: parts as long as their classes'
        /// words, `extra` words longer, one of them a word short.
        #[test]
        fn groups_gather_by_repeats_as_one_by_one(
            group in 1usize..5,
            pattern in prop::collection::vec(0u32..5, 1..40),
            len in 1usize..2000,
            parts in 1usize..6,
            extra in prop::collection::vec(0usize..2, 5),
            short in prop::option::of(0usize..5),
        ) {
            let groups = len.div_ceil(group);
            let classes: Vec<u32> = (0..groups).map(|i| pattern[i % pattern.len()]).collect();
            // Each class's words: its groups', the last group cut short.
            let mut lens = vec![0; parts];
            for (g, &c) in classes.iter().enumerate() {
                if let Some(n) = lens.get_mut(c as usize) {
                    *n += group.min(len - g * group);
                }
            }
            lens.iter_mut().zip(&extra).for_each(|(n, e)| *n += e);
            if let Some(n) = short.and_then(|c| lens.get_mut(c)) {
                *n = n.saturating_sub(1);
            }
            let total: usize = lens.iter().sum();
            let words: Vec<u32> = (0..total as u32).collect();
            let mut out = vec![u32::MAX; len];
            let got = gather_partition(
                &mut out,
                (group, true),
                &pattern,
                (&words, &lens),
                |o, w| o.copy_from_slice(w),
            );
            let want = one_by_one(len, group, &classes, &lens);
            prop_assert_eq!(got.is_ok(), want.is_some());
            if let Some(want) = want {
                prop_assert_eq!(&out[..want.len()], &want[..]);
            }
        }
    }
}
