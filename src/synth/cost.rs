//! What the passes weigh: a program's cost (its encoded bytes plus a
//! charge for the decode passes it makes), exactly or as the search predicts
//! it, and the order-0 byte-plane estimates of a stream that no program has
//! yet been found for. Also the check every program passes before it is
//! kept: that it runs to its target.

use super::production::Production;
use crate::codec;
use crate::dsl::{self, Literal, Op, Program, Type};

/// One in this many raw bytes of its stream is what a Map or Scan must save to be
/// chosen: each costs a full pass over its words when decoding, and a bijection
/// that only reshuffles a literal's symbol table is not worth that.
const PASS_PENALTY_DIVISOR: usize = 512;

/// Bytes a node of `production` over `ty` is charged for its decode work.
pub(super) fn decode_penalty(production: Production, ty: Type) -> usize {
    if production.is_full_pass() {
        (ty.len * ty.width as usize).div_ceil(8 * PASS_PENALTY_DIVISOR)
    } else {
        0
    }
}

/// What the search minimizes: encoded bytes (rANS literals' predicted, see
/// `codec::best`) plus every node's decode penalty.
pub fn cost(p: &Program<Literal>) -> usize {
    dsl::encoded_len(p) + penalties(p)
}

/// [`cost`] with every literal sized exactly: what a final choice between
/// programs compares, so that a wider search never keeps a program a
/// prediction only made look smaller.
pub fn exact_cost(p: &Program<Literal>) -> usize {
    dsl::exact_len(p) + penalties(p)
}

/// Bytes by which [`cost`] may be off [`exact_cost`]: what `p`'s rANS
/// literals' predicted sizes may be off their exact ones.
pub fn prediction_slack(p: &Program<Literal>) -> usize {
    let own = match &p.op {
        Op::Lit(l) if l.codec == codec::Codec::Rans => codec::rans_prediction_slack(l.size),
        _ => 0,
    };
    own + p.children().map(prediction_slack).sum::<usize>()
}

/// The decode penalties of `p`'s nodes.
fn penalties(p: &Program<Literal>) -> usize {
    let own = decode_penalty(Production::of_op(&p.op), p.ty);
    own + p.children().map(penalties).sum::<usize>()
}

/// Whether `p` executes to exactly `target`.
pub fn runs_to(p: &Program<Literal>, target: &[u32]) -> bool {
    let mut out = vec![0u32; p.ty.len];
    dsl::execute(p, &mut out).is_ok() && out == target
}

/// Bytes an order-0 code of each byte plane of `words` would take (tables not
/// counted): what any float or integer stream costs without structure beyond
/// its byte statistics, computed in one pass.
pub(super) fn byte_planes_cost(words: &[u32], width: u32) -> usize {
    planes_cost(words.iter().copied(), width)
}

/// [`byte_planes_cost`] estimated from one in [`PLANES_SAMPLE_STEP`] words
/// (a little below it: a sample shows fewer rare bytes), at that fraction
/// of the time.
pub(super) fn sampled_planes_cost(words: &[u32], width: u32) -> usize {
    let sampled = words.len().div_ceil(PLANES_SAMPLE_STEP).max(1);
    let sample = words.iter().step_by(PLANES_SAMPLE_STEP).copied();
    planes_cost(sample, width) * words.len() / sampled
}

/// Words per sampled word of [`sampled_planes_cost`].
const PLANES_SAMPLE_STEP: usize = 4;

fn planes_cost(words: impl Iterator<Item = u32>, width: u32) -> usize {
    match width.div_ceil(8) {
        1 => count_planes::<1>(words),
        2 => count_planes::<2>(words),
        3 => count_planes::<3>(words),
        _ => count_planes::<4>(words),
    }
}

/// [`planes_cost`] of words of `P` byte planes. Pairs of words count into
/// two sets of tables, summed at the end, as in [`plane_counts`].
fn count_planes<const P: usize>(mut words: impl Iterator<Item = u32>) -> usize {
    let mut counts = [[[0u32; 256]; P]; 2];
    let mut n = 0;
    let count = |tables: &mut [[u32; 256]; P], w: u32| {
        for (k, c) in tables.iter_mut().enumerate() {
            c[(w >> (8 * k)) as usize & 0xff] += 1;
        }
    };
    while let Some(a) = words.next() {
        count(&mut counts[0], a);
        n += 1;
        if let Some(b) = words.next() {
            count(&mut counts[1], b);
            n += 1;
        }
    }
    let [mut even, odd] = counts;
    for (e, o) in even.iter_mut().zip(&odd) {
        e.iter_mut().zip(o).for_each(|(e, o)| *e += o);
    }
    order0_bytes(&even, n)
}

/// `byte_planes_cost` of elements of `stride` bytes, straight from their
/// little-endian bytes (plane `k` holds byte `k` of every element).
pub fn strided_planes_cost(bytes: &[u8], stride: usize) -> usize {
    order0_bytes(&plane_counts(bytes, stride), bytes.len() / stride)
}

/// The byte counts of each plane of elements of `stride` bytes (plane `k`
/// holds byte `k` of every element). Pairs of elements count into two sets
/// of tables, summed at the end, so that a plane's runs of one byte (a
/// weight's exponent) do not make each increment wait for the last.
pub fn plane_counts(bytes: &[u8], stride: usize) -> Vec<[u32; 256]> {
    let mut counts = vec![[0u32; 256]; 2 * stride];
    let (even, odd) = counts.split_at_mut(stride);
    let mut pairs = bytes.chunks_exact(2 * stride);
    for pair in &mut pairs {
        let (a, b) = pair.split_at(stride);
        for ((ce, co), (&x, &y)) in even.iter_mut().zip(odd.iter_mut()).zip(a.iter().zip(b)) {
            ce[x as usize] += 1;
            co[y as usize] += 1;
        }
    }
    for element in pairs.remainder().chunks_exact(stride) {
        for (c, &b) in even.iter_mut().zip(element) {
            c[b as usize] += 1;
        }
    }
    for (e, o) in even.iter_mut().zip(odd.iter()) {
        e.iter_mut().zip(o).for_each(|(e, o)| *e += o);
    }
    counts.truncate(stride);
    counts
}

/// The order-0 code length, in bytes, of planes of `n` symbols each with
/// these counts.
pub fn order0_bytes(counts: &[[u32; 256]], n: usize) -> usize {
    let counts = counts.iter().flatten().map(|&c| c as u64);
    (codec::order0_bits(counts, n) / 8.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    /// Counting in two sets of tables gives each plane's plain counts, for
    /// any stride and with an element left over.
    #[test]
    fn plane_counts_are_each_planes_byte_counts() {
        let mut seed = 7;
        let bytes: Vec<u8> = (0..1000).map(|_| (xorshift(&mut seed) % 5) as u8).collect();
        for stride in [1, 2, 3, 4, 8] {
            for len in [0, stride, 3 * stride, 100 * stride + 1, 1000] {
                let part = &bytes[..len];
                let mut plain = vec![[0u32; 256]; stride];
                for element in part.chunks_exact(stride) {
                    for (k, &b) in element.iter().enumerate() {
                        plain[k][b as usize] += 1;
                    }
                }
                assert!(
                    plane_counts(part, stride) == plain,
                    "stride {stride} len {len}"
                );
            }
        }
    }

    #[test]
    fn byte_planes_cost_counts_each_planes_entropy() {
        // Low byte uniform over 256 values (8 bits), high byte one of two
        // (1 bit), a constant third byte (0 bits): 9 bits per word.
        let words: Vec<u32> = (0..4096u32)
            .map(|i| (i & 0xff) | (i >> 8 & 1) << 8 | 7 << 16)
            .collect();
        assert_eq!(byte_planes_cost(&words, 24), 4096 * 9 / 8);
        assert_eq!(byte_planes_cost(&[5; 100], 8), 0);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(
            strided_planes_cost(&bytes, 4),
            byte_planes_cost(&words, 32),
            "the same planes from the bytes"
        );
    }

    #[test]
    fn sampled_planes_cost_is_close_to_the_whole() {
        let mut seed = 11;
        let words: Vec<u32> = (0..65536)
            .map(|_| (xorshift(&mut seed) >> 40) as u32 & 0x3fff)
            .collect();
        let (whole, sampled) = (
            byte_planes_cost(&words, 16),
            sampled_planes_cost(&words, 16),
        );
        assert!(
            sampled <= whole && sampled * 100 >= whole * 99,
            "{sampled} vs {whole}"
        );
        assert_eq!(sampled_planes_cost(&[3; 5], 8), 0);
    }
}
