//! The special case of bf16 values stored as f32 (an upcast checkpoint):
//! f32 words whose low halves are all one value. Their high halves are
//! searched as a bf16 stream of their own and merged with that constant,
//! since a search of the f32 words spends its budget on the f32 fields,
//! which code the sign, exponent and mantissa of the halves apart, where a
//! bf16 stream's search finds the fields that code them together.

use super::cost::{exact_cost, runs_to};
use super::options::SynthOptions;
use super::search::astar;
use super::stream::{is_constant, Hint};
use crate::dsl::{self, FloatFormat, Literal, Op, Program, Type};
use std::borrow::Cow;

/// The low half of every word, if `words` are f32 values whose low halves
/// are all that one value: bf16 values stored as f32.
pub(super) fn upcast_low(words: &[u32], width: u32, hint: Hint) -> Option<u32> {
    let low = words[0] & 0xffff;
    let f32s = width == 32 && hint.float == Some(FloatFormat::F32);
    (f32s && words.iter().all(|w| w & 0xffff == low)).then_some(low)
}

/// The program for bf16 values stored as f32 (`low` their low halves): a
/// Merge of their high halves, searched as a bf16 stream of their own, and
/// that constant; or, for a stream of at most [`UPCAST_PLAIN_WORDS`] or of
/// one word, the root-only search's program where that costs less.
pub(super) fn astar_upcast(
    words: &[u32],
    low: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    let (high, bf16) = high_halves(words, hint);
    let halves = Type {
        width: 16,
        len: words.len(),
    };
    let root = SynthOptions {
        budget: 0,
        ..opts.clone()
    };
    // The two searches are independent: run them at once.
    let (of_high, plain) = rayon::join(
        || astar(&high, 16, bf16, opts).program,
        || {
            let worth = words.len() <= UPCAST_PLAIN_WORDS || is_constant(words);
            worth.then(|| astar(words, 32, hint, &root).program)
        },
    );
    let parts = vec![
        of_high,
        Program {
            ty: halves,
            op: Op::Const(low),
        },
    ];
    let merged = Program {
        ty: Type {
            width: 32,
            len: words.len(),
        },
        op: Op::Merge {
            fields: dsl::Fields::Split { low: 16 },
            parts,
        },
    };
    match plain {
        Some(plain) if exact_cost(&plain) <= exact_cost(&merged) => plain,
        // (The halves' program is checked: the root-only one is checked by
        // its search.)
        _ if runs_to(&merged, words) => merged,
        _ => plain.unwrap_or_else(|| astar(words, 32, hint, &root).program),
    }
}

/// Words up to which an upcast stream's f32 words are also searched at the
/// root (see [`astar_upcast`]). The halves' tables and Merge are a fixed
/// cost: beside a long stream's words they weigh little and that search
/// would only take time; on a short stream the f32 words' program can be
/// the smaller, as on a constant one (one word, where the halves take two).
const UPCAST_PLAIN_WORDS: usize = 4096;

/// The high halves of f32 `words` with `hint`, as bf16 words and their hint.
fn high_halves(words: &[u32], hint: Hint) -> (Vec<u32>, Hint) {
    let bf16 = Hint {
        float: Some(FloatFormat::Bf16),
        rows: hint.rows,
        columns: None,
    };
    (words.iter().map(|w| w >> 16).collect(), bf16)
}

/// The stream packing searches for the lane `words`: the lane, or for bf16
/// values stored as f32 their high halves as bf16 words (see
/// [`astar_upcast`]). A prior is learned from these, so that it counts the
/// productions packing's own searches choose.
pub(super) fn lane_as_searched(
    words: &[u32],
    width: u32,
    hint: Hint,
) -> (Cow<'_, [u32]>, u32, Hint) {
    match upcast_low(words, width, hint) {
        Some(_) => {
            let (high, bf16) = high_halves(words, hint);
            (Cow::Owned(high), 16, bf16)
        }
        None => (Cow::Borrowed(words), width, hint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;
    use crate::synth::passes::search_stream;

    /// An upcast lane is searched as its high halves, bf16 words with the
    /// lane's rows; any other lane as it is.
    #[test]
    fn upcast_lanes_are_searched_as_their_high_halves() {
        let hint = |float| Hint {
            float: Some(float),
            rows: Some(64),
            columns: None,
        };
        let high: Vec<u32> = (0..256u32).map(|i| 0x3c00 + i * 7 % 0x180).collect();
        let words: Vec<u32> = high.iter().map(|h| h << 16 | 0x8000).collect();
        let (searched, width, to) = lane_as_searched(&words, 32, hint(FloatFormat::F32));
        assert_eq!(
            (&searched[..], width, to),
            (&high[..], 16, hint(FloatFormat::Bf16))
        );
        // Low halves that differ, or words that are not f32 values, are not halved.
        let mut f32s = words.clone();
        f32s[1] ^= 1;
        let f32_hint = hint(FloatFormat::F32);
        assert_eq!(
            lane_as_searched(&f32s, 32, f32_hint),
            (f32s[..].into(), 32, f32_hint)
        );
        let plain = Hint {
            float: None,
            rows: None,
            columns: None,
        };
        assert_eq!(
            lane_as_searched(&words, 32, plain),
            (words[..].into(), 32, plain)
        );
    }

    /// A long upcast stream is the Merge of its halves, searched as bf16
    /// words, and its constant low halves; the f32 words' root-only program
    /// is kept where it is smaller on a short or constant stream.
    #[test]
    fn upcast_streams_merge_their_halves_or_keep_a_smaller_root() {
        let opts = SynthOptions::default();
        let f32_hint = Hint {
            float: Some(FloatFormat::F32),
            rows: None,
            columns: None,
        };
        let mut seed = 0x2545_f491;
        let long: Vec<u32> = (0..2 * UPCAST_PLAIN_WORDS)
            .map(|_| {
                let r = xorshift(&mut seed) as u32;
                // Weight-like: a few exponents, any sign and mantissa.
                ((0x3c00 + r % 0x180) | ((r >> 31) << 15)) << 16
            })
            .collect();
        let p = search_stream(&long, 32, f32_hint, &opts);
        assert!(runs_to(&p, &long));
        let Op::Merge { fields, parts } = &p.op else {
            panic!("not a merge: {p}");
        };
        assert_eq!(*fields, dsl::Fields::Split { low: 16 });
        assert!(matches!(parts[1].op, Op::Const(0)), "{p}");
        for len in [384, 2 * UPCAST_PLAIN_WORDS] {
            let constant = vec![0x3f80_0000; len];
            let p = search_stream(&constant, 32, f32_hint, &opts);
            assert!(matches!(p.op, Op::Const(0x3f80_0000)), "{len}: {p}");
        }
    }
}
