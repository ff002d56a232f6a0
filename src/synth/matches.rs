//! Copies of earlier words: a bounded matcher that parses a stream into
//! literal runs and copies (the Match operator, format version 4), and a
//! cheap test of whether a stream is worth parsing at all.
//!
//! The matcher is greedy over hash chains of a fixed depth: at each word it
//! looks at the last [`CHAIN_DEPTH`] earlier positions whose first words
//! hash alike, takes the longest copy (ties: the distance used most often so
//! far, which codes cheaper), and copies at least [`min_match`] words; for
//! bytes a short copy waits one word for a longer one (lazy parsing). Work
//! is O(n * CHAIN_DEPTH) whatever the stream.

use super::cost::byte_planes_cost;
use crate::dsl::{count_width, Literal, Op, Program, Type};
use std::sync::Arc;

/// Earlier positions looked at per word.
const CHAIN_DEPTH: usize = 32;

/// Words at a stream's start that [`estimate`] parses.
const SAMPLE_WORDS: usize = 8192;

/// Shortest copy the matcher makes for words of `width` bits: one 32-bit
/// word (a float repeated somewhere earlier), two 16-bit words, four bytes
/// (see docs/PERFORMANCE.md).
fn min_match(width: u32) -> usize {
    match width {
        0..=8 => 4,
        9..=16 => 2,
        _ => 1,
    }
}

/// The parse: literal words, and per copy the literal run before it, its
/// length and its distance.
struct Parse {
    lits: Vec<u32>,
    runs: Vec<u32>,
    lens: Vec<u32>,
    dists: Vec<u32>,
}

fn hash(words: &[u32], bits: u32) -> usize {
    let mut h = 0u64;
    for &w in words {
        h = (h ^ w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    (h >> (64 - bits)) as usize
}

const NONE: u32 = u32::MAX;

/// Copies shorter than this are parsed lazily for words of `width` bits: a
/// copy one word on that is longer wins, the word between becoming a
/// literal. Bytes only (headers, say): on 32-bit words it codes larger.
fn lazy_below(width: u32) -> usize {
    if width <= 8 {
        32
    } else {
        0
    }
}

/// Parses `t` greedily (lazily for copies shorter than `lazy`) into literals
/// and copies of at least `min_len` words.
fn parse(t: &[u32], min_len: usize, lazy: usize, depth: usize) -> Parse {
    let n = t.len();
    let key = min_len.clamp(1, 4);
    let bits = (usize::BITS - n.max(2).leading_zeros()).clamp(10, 18);
    let mut head = vec![NONE; 1 << bits];
    let mut prev = vec![NONE; n];
    // How often each distance was taken.
    let mut used = vec![0u32; n];
    let mut p = Parse {
        lits: Vec::new(),
        runs: Vec::new(),
        lens: Vec::new(),
        dists: Vec::new(),
    };
    let insert = |i: usize, head: &mut [u32], prev: &mut [u32]| {
        if i + key <= n {
            let h = hash(&t[i..i + key], bits);
            prev[i] = head[h];
            head[h] = i as u32;
        }
    };
    // The longest copy at `i` from the positions inserted so far.
    let find = |i: usize, head: &[u32], prev: &[u32], used: &[u32]| {
        let (mut best_len, mut best_dist) = (0usize, 0usize);
        if i + key <= n {
            let mut cand = head[hash(&t[i..i + key], bits)];
            let mut steps = 0;
            while cand != NONE && steps < depth {
                let j = cand as usize;
                // Only a copy at least as long as the best can win.
                if best_len == 0 || t.get(i + best_len) == t.get(j + best_len) {
                    let len = common_len(t, j, i);
                    let d = i - j;
                    if len >= min_len
                        && (len > best_len || (len == best_len && used[d] > used[best_dist]))
                    {
                        (best_len, best_dist) = (len, d);
                    }
                }
                cand = prev[j];
                steps += 1;
            }
        }
        (best_len, best_dist)
    };
    let mut run = 0u32;
    let mut i = 0;
    let mut pending = None;
    while i < n {
        let (len, dist) = pending
            .take()
            .unwrap_or_else(|| find(i, &head, &prev, &used));
        if len < min_len {
            p.lits.push(t[i]);
            run += 1;
            insert(i, &mut head, &mut prev);
            i += 1;
            continue;
        }
        insert(i, &mut head, &mut prev);
        // Lazy: a longer copy one word on is worth a literal word.
        if len < lazy && i + 1 < n {
            let next = find(i + 1, &head, &prev, &used);
            if next.0 > len {
                p.lits.push(t[i]);
                run += 1;
                i += 1;
                pending = Some(next);
                // `i` (the old one) is inserted; the next is not yet.
                continue;
            }
        }
        p.runs.push(run);
        p.lens.push(len as u32 - 1);
        p.dists.push(dist as u32 - 1);
        used[dist] += 1;
        run = 0;
        for k in i + 1..i + len {
            insert(k, &mut head, &mut prev);
        }
        i += len;
    }
    p
}

/// Words from `i` on that equal those from `j < i` on (the copy may overlap).
fn common_len(t: &[u32], j: usize, i: usize) -> usize {
    t[i..]
        .iter()
        .zip(&t[j..])
        .take_while(|(a, b)| a == b)
        .count()
}

/// The streams of a Match node yielding `t` (`width`-bit words): its
/// literal words, then the literal runs, lengths - 1 and distances - 1 of
/// its copies; None where the matcher finds no copy.
pub fn match_streams(t: &[u32], width: u32) -> Option<Vec<(Type, Arc<[u32]>)>> {
    let p = parse(t, min_match(width), lazy_below(width), CHAIN_DEPTH);
    if p.runs.is_empty() {
        return None;
    }
    let tw = count_width(t.len());
    let token = |s: Vec<u32>| {
        let ty = Type {
            width: tw,
            len: s.len(),
        };
        (ty, Arc::from(s))
    };
    let lits = Type {
        width,
        len: p.lits.len(),
    };
    Some(vec![
        (lits, p.lits.into()),
        token(p.runs),
        token(p.lens),
        token(p.dists),
    ])
}

/// A Match node of type `ty` over its four children.
pub fn match_program(ty: Type, kids: Vec<Program<Literal>>) -> Program<Literal> {
    let parts: [Program<Literal>; 4] = kids.try_into().expect("a Match has four children");
    Program {
        ty,
        op: Op::Match {
            parts: Box::new(parts),
        },
    }
}

/// The bytes per word a Match of `t` is estimated to take, where it may pay:
/// the matcher on its first [`SAMPLE_WORDS`] words covers at least 1/8 of
/// them with copies, and the order-0 byte-plane costs of the literals and
/// tokens (the estimate) come to at most 7/8 of the sample's own. Ordinary
/// weights fail at the first test, after one pass of the matcher over the
/// sample.
pub(super) fn estimate(t: &[u32], width: u32) -> Option<f64> {
    let s = &t[..t.len().min(SAMPLE_WORDS)];
    let p = parse(s, min_match(width), lazy_below(width), CHAIN_DEPTH);
    let covered = s.len() - p.lits.len();
    if covered * 8 < s.len() {
        return None;
    }
    let tw = count_width(t.len());
    let tokens: usize = [&p.runs, &p.lens, &p.dists]
        .iter()
        .map(|s| byte_planes_cost(s, tw))
        .sum();
    let est = byte_planes_cost(&p.lits, width) + tokens;
    (est * 8 <= byte_planes_cost(s, width) * 7).then(|| est as f64 / s.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::estimate;
    use crate::codec::tests::xorshift;

    /// Words without repeats get no estimate; repeated rows get one of
    /// their copies' cost, well under their byte planes' (2 bytes a word).
    #[test]
    fn repeats_are_estimated_and_noise_is_not() {
        let mut seed = 0x2545_f491;
        let noise: Vec<u32> = (0..4096)
            .map(|_| xorshift(&mut seed) as u32 & 0xffff)
            .collect();
        assert_eq!(estimate(&noise, 16), None);
        let rows: Vec<u32> = noise[..256].iter().copied().cycle().take(4096).collect();
        let per_word = estimate(&rows, 16).expect("repeats");
        assert!(per_word > 0.0 && per_word < 0.25, "{per_word}");
    }
}
