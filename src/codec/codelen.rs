//! Optimal prefix-code lengths under a maximum length.
//!
//! Plain Huffman (two-queue construction over sorted weights) is tried first:
//! it is fast and, when its longest code fits the limit, already optimal. Only
//! otherwise does package-merge compute the optimal length-limited code.

#![forbid(unsafe_code)]

/// Code lengths (1..=`limit`) for `weights` (at least two, all positive,
/// at most 2^`limit` of them) minimising the weighted total length.
/// Ties are broken by index, so the result is deterministic.
pub(super) fn limited_lengths(weights: &[u64], limit: u32) -> Vec<u32> {
    limited_lengths_within(weights, limit, u64::MAX).expect("no code costs more")
}

/// [`limited_lengths`], or None where the unlimited Huffman code already
/// costs more than `most` (the weighted total length): no code within the
/// limit costs less, so package-merge is spared. (A code it returns may
/// still cost more than `most`.)
pub(super) fn limited_lengths_within(weights: &[u64], limit: u32, most: u64) -> Option<Vec<u32>> {
    debug_assert!(weights.len() >= 2 && weights.len() <= 1 << limit);
    let order = sorted_order(weights);
    let lengths = huffman_lengths(weights, &order);
    let total: u64 = (weights.iter().zip(&lengths))
        .map(|(&w, &l)| w * l as u64)
        .sum();
    if total > most {
        None
    } else if lengths.iter().all(|&l| l <= limit) {
        Some(lengths)
    } else {
        Some(package_merge(weights, &order, limit))
    }
}

/// Indices of `weights` by increasing weight, then index.
fn sorted_order(weights: &[u64]) -> Vec<usize> {
    sorted_indices(weights.iter().copied())
}

/// Indices of `keys` (below 2^48, at most 2^16 of them) by increasing key,
/// then index: sorted as packed integers, without an indirection per
/// comparison, since code lengths are chosen for every candidate stream
/// while packing.
pub(super) fn sorted_indices(keys: impl ExactSizeIterator<Item = u64>) -> Vec<usize> {
    const INDEX_BITS: u32 = 16;
    assert!(keys.len() <= 1 << INDEX_BITS, "too many keys");
    let mut packed: Vec<u64> = (keys.enumerate())
        .map(|(i, key)| {
            debug_assert!(key < 1 << (64 - INDEX_BITS), "key too large");
            key << INDEX_BITS | i as u64
        })
        .collect();
    packed.sort_unstable();
    let mask = (1 << INDEX_BITS) - 1;
    packed.into_iter().map(|k| (k & mask) as usize).collect()
}

/// Unlimited Huffman lengths. Leaves are consumed in sorted order and merged
/// nodes are created in non-decreasing weight order, so two FIFO queues replace
/// a heap.
fn huffman_lengths(weights: &[u64], order: &[usize]) -> Vec<u32> {
    let m = weights.len();
    // Nodes 0..m are the leaves in sorted order, m.. the merged nodes.
    let mut weight: Vec<u64> = order.iter().map(|&i| weights[i]).collect();
    let mut parent = vec![0usize; 2 * m - 1];
    let (mut next_leaf, mut next_node) = (0, m);
    for new in m..2 * m - 1 {
        let mut take = || {
            let leaf_first =
                next_node == new || (next_leaf < m && weight[next_leaf] <= weight[next_node]);
            let pick = if leaf_first {
                &mut next_leaf
            } else {
                &mut next_node
            };
            *pick += 1;
            *pick - 1
        };
        let (a, b) = (take(), take());
        weight.push(weight[a] + weight[b]);
        parent[a] = new;
        parent[b] = new;
    }
    // Parents come after their children, so one backward pass sets depths.
    let mut depth = vec![0u32; 2 * m - 1];
    for node in (0..2 * m - 2).rev() {
        depth[node] = depth[parent[node]] + 1;
    }
    let mut lengths = vec![0; m];
    for (leaf, &i) in order.iter().enumerate() {
        lengths[i] = depth[leaf];
    }
    lengths
}

/// Package-merge (Larmore & Hirschberg): `limit` rounds of pairing the
/// cheapest items and merging the pairs with the leaves; the cheapest 2m-2
/// items of the last list are kept, and each kept package keeps both items it
/// pairs from the list before. A leaf's code length is the number of lists in
/// which it is kept. Every list is sorted with the leaves in order, so what is
/// kept of a list is a prefix, and of its leaves a prefix too: only the
/// number of leaves in each list's prefixes is needed, not the packages' trees.
fn package_merge(weights: &[u64], order: &[usize], limit: u32) -> Vec<u32> {
    let m = weights.len();
    let leaves: Vec<u64> = order.iter().map(|&i| weights[i]).collect();
    // is_leaf[j][k]: whether item k of list j is a leaf (list 0 is the leaves).
    let mut is_leaf: Vec<Vec<bool>> = vec![vec![true; m]];
    let mut list = leaves.clone();
    let mut packages = Vec::with_capacity(m);
    for _ in 1..limit {
        packages.clear();
        packages.extend(list.chunks_exact(2).map(|pair| pair[0] + pair[1]));
        let (merged, kinds) = merge_by_weight(&leaves, &packages);
        list = merged;
        is_leaf.push(kinds);
    }
    // Walk back from the last list: its first 2m-2 items are kept, and each
    // kept package keeps two items of the list before.
    let mut kept_leaves = vec![0usize; is_leaf.len()];
    let mut kept = 2 * m - 2;
    for (j, kinds) in is_leaf.iter().enumerate().rev() {
        let leaves_kept = kinds[..kept].iter().filter(|&&leaf| leaf).count();
        kept_leaves[j] = leaves_kept;
        kept = 2 * (kept - leaves_kept);
    }
    let mut lengths = vec![0; m];
    for (leaf, &i) in order.iter().enumerate() {
        lengths[i] = kept_leaves.iter().filter(|&&n| leaf < n).count() as u32;
    }
    lengths
}

/// Merges the leaves and the packages, both sorted, by weight (on equal
/// weights leaves first): the merged weights and whether each is a leaf.
fn merge_by_weight(leaves: &[u64], packages: &[u64]) -> (Vec<u64>, Vec<bool>) {
    let n = leaves.len() + packages.len();
    let (mut merged, mut kinds) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut i, mut j) = (0, 0);
    while i < leaves.len() || j < packages.len() {
        let leaf = j == packages.len() || (i < leaves.len() && leaves[i] <= packages[j]);
        if leaf {
            merged.push(leaves[i]);
            i += 1;
        } else {
            merged.push(packages[j]);
            j += 1;
        }
        kinds.push(leaf);
    }
    (merged, kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kraft_complete(lengths: &[u32], limit: u32) -> bool {
        lengths.iter().map(|&l| 1u64 << (limit - l)).sum::<u64>() == 1 << limit
    }

    fn cost(weights: &[u64], lengths: &[u32]) -> u64 {
        weights
            .iter()
            .zip(lengths)
            .map(|(&w, &l)| w * l as u64)
            .sum()
    }

    #[test]
    fn fibonacci_weights_are_limited_and_complete() {
        let mut weights = vec![1u64, 1];
        while weights.len() < 40 {
            let n = weights.len();
            weights.push(weights[n - 1] + weights[n - 2]);
        }
        let unlimited = huffman_lengths(&weights, &sorted_order(&weights));
        assert!(unlimited.iter().any(|&l| l > 12));
        let limited = limited_lengths(&weights, 12);
        assert!(limited.iter().all(|&l| (1..=12).contains(&l)));
        assert!(kraft_complete(&limited, 12));
    }

    #[test]
    fn package_merge_matches_huffman_when_the_limit_is_loose() {
        let weights: Vec<u64> = (0..300u64).map(|i| 1 + (i * i * 7919) % 1000).collect();
        let order = sorted_order(&weights);
        let huffman = huffman_lengths(&weights, &order);
        let merged = package_merge(&weights, &order, 30);
        assert_eq!(cost(&weights, &huffman), cost(&weights, &merged));
        assert!(kraft_complete(&merged, 30));
    }

    /// Against every assignment of lengths 1..=limit that satisfies Kraft's
    /// inequality, on small skewed alphabets where the limit binds.
    #[test]
    fn package_merge_is_optimal_under_tight_limits() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let m = 3 + (seed % 5) as usize;
            let limit = (usize::BITS - (m - 1).leading_zeros()).max(2);
            let weights: Vec<u64> = (0..m)
                .map(|i| (1 + ((seed >> (8 * i)) & 0xff)) << i)
                .collect();
            let got = package_merge(&weights, &sorted_order(&weights), limit);
            assert!(got.iter().all(|&l| (1..=limit).contains(&l)));
            assert!(got.iter().map(|&l| 1u64 << (limit - l)).sum::<u64>() <= 1 << limit);
            let mut best = u64::MAX;
            let mut lengths = vec![1u32; m];
            loop {
                if lengths.iter().map(|&l| 1u64 << (limit - l)).sum::<u64>() <= 1 << limit {
                    best = best.min(cost(&weights, &lengths));
                }
                let Some(k) = lengths.iter().position(|&l| l < limit) else {
                    break;
                };
                lengths[k] += 1;
                lengths[..k].fill(1);
            }
            assert_eq!(
                cost(&weights, &got),
                best,
                "weights {weights:?} limit {limit}"
            );
        }
    }

    #[test]
    fn full_alphabet_gets_equal_lengths() {
        let weights: Vec<u64> = (0..4096u64).map(|i| 1 + (i % 3) * 1000).collect();
        let lengths = limited_lengths(&weights, 12);
        assert!(lengths.iter().all(|&l| l == 12));
    }
}
