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
    debug_assert!(weights.len() >= 2 && weights.len() <= 1 << limit);
    let order = sorted_order(weights);
    let lengths = huffman_lengths(weights, &order);
    if lengths.iter().all(|&l| l <= limit) {
        lengths
    } else {
        package_merge(weights, &order, limit)
    }
}

/// Indices of `weights` by increasing weight, then index.
fn sorted_order(weights: &[u64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_unstable_by_key(|&i| (weights[i], i));
    order
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
/// items of the last list give each leaf's code length as its number of
/// occurrences inside them.
fn package_merge(weights: &[u64], order: &[usize], limit: u32) -> Vec<u32> {
    let m = weights.len();
    // An item is (weight, node); nodes below m are leaves (sorted positions),
    // node m + k is the package `children[k]`.
    let leaves: Vec<(u64, usize)> = order
        .iter()
        .enumerate()
        .map(|(k, &i)| (weights[i], k))
        .collect();
    let mut children: Vec<[usize; 2]> = Vec::new();
    let mut list = leaves.clone();
    for _ in 1..limit {
        let mut packages = Vec::with_capacity(list.len() / 2);
        for pair in list.chunks_exact(2) {
            children.push([pair[0].1, pair[1].1]);
            packages.push((pair[0].0 + pair[1].0, m + children.len() - 1));
        }
        list = merge_by_weight(&leaves, &packages);
    }
    let mut occurrences = vec![0u32; m];
    let mut stack = Vec::new();
    for &(_, node) in &list[..2 * m - 2] {
        stack.push(node);
        while let Some(node) = stack.pop() {
            match node.checked_sub(m) {
                None => occurrences[node] += 1,
                Some(k) => stack.extend_from_slice(&children[k]),
            }
        }
    }
    let mut lengths = vec![0; m];
    for (leaf, &i) in order.iter().enumerate() {
        lengths[i] = occurrences[leaf];
    }
    lengths
}

/// Merges two lists sorted by weight; on equal weights leaves come first.
fn merge_by_weight(leaves: &[(u64, usize)], packages: &[(u64, usize)]) -> Vec<(u64, usize)> {
    let mut merged = Vec::with_capacity(leaves.len() + packages.len());
    let (mut i, mut j) = (0, 0);
    while i < leaves.len() && j < packages.len() {
        if leaves[i].0 <= packages[j].0 {
            merged.push(leaves[i]);
            i += 1;
        } else {
            merged.push(packages[j]);
            j += 1;
        }
    }
    merged.extend_from_slice(&leaves[i..]);
    merged.extend_from_slice(&packages[j..]);
    merged
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

    #[test]
    fn full_alphabet_gets_equal_lengths() {
        let weights: Vec<u64> = (0..4096u64).map(|i| 1 + (i % 3) * 1000).collect();
        let lengths = limited_lengths(&weights, 12);
        assert!(lengths.iter().all(|&l| l == 12));
    }
}
