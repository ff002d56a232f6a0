//! Program synthesis: finds a small program that yields a target word stream.
//!
//! Synthesis is target-directed: an *expansion* picks an operator and derives, from
//! the target, the exact streams its children must yield, so any completion of the
//! children yields the target by construction. A bounded A* ([`search`]) explores
//! partial programs in the order of a production prior learned from the checkpoint
//! itself ([`prior`]); open holes are completed by their best *leaf* (a constant or
//! the smallest literal encoding), and the smallest complete program wins.

#![forbid(unsafe_code)]

mod context;
mod cost;
mod expand;
mod leaf;
mod matches;
mod mirror;
mod options;
mod palette;
mod partition;
pub mod prior;
mod production;
mod refit;
mod scaled;
mod search;
mod sparse;
mod stream;

pub use context::{Context, Position};
pub use cost::{
    cost, exact_cost, order0_bytes, plane_counts, prediction_slack, runs_to, strided_planes_cost,
};
pub use expand::{
    expansions, operators, operators as shapes, Expansion, Operator, Operator as Shape,
};
pub use leaf::{leaf, sparse_leaf};
pub use matches::{match_program, match_streams, min_match};
pub use mirror::{mirror_program, mirror_streams, mirroring};
pub use options::{
    Order, SearchLimits, SearchLimits as Limits, SynthOptions, DEFAULT_BUDGET, DEFAULT_REFIT_SLACK,
    MATCH_WORDS, SEARCH_WORDS,
};
pub use palette::palette_streams;
pub use partition::{with_partitions, MIN_GROUP};
pub use prior::Prior;
pub use production::Production;
pub use refit::Template;
pub use scaled::scaled_streams;
pub use search::{Found, Setup};
pub use stream::Hint;

use crate::codec;
use crate::dsl::{self, FloatFormat, Literal, Op, Program, Type};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Arc;
use stream::is_constant;

/// Searches for the smallest program yielding `words`.
pub fn search(words: &[u32], width: u32, hint: Hint, opts: &SynthOptions) -> Found {
    let setup = Setup {
        hint,
        prior: &opts.prior,
        order: opts.order,
        budget: opts.budget,
        min_q: opts.min_q,
        limits: opts.limits,
        leaf_codecs: opts.leaf_codecs,
    };
    search::search(words, width, &setup)
}

/// The program [`search`] finds on at most `opts.search_words` words (at
/// least one), re-fit to all of them (their smallest leaf where it does not
/// re-fit), or a Match node where that is smaller (see [`with_matches`]),
/// or a Mirror node where the rows mirror themselves and that is smaller
/// still (see [`mirror::with_mirror`]).
pub fn synthesize(words: &[u32], width: u32, hint: Hint, opts: &SynthOptions) -> Program<Literal> {
    synthesize_shared(&words.into(), width, hint, opts)
}

/// [`synthesize`] of a chunk's shared lane: its re-fit and its leaves hold
/// the lane, not a copy.
fn synthesize_shared(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    let found = searched(words, width, hint, opts);
    let found = if words.len() > MATCH_WORDS {
        found
    } else {
        with_matches(words, width, hint, opts, found)
    };
    mirror::with_mirror(words, width, hint, opts, found)
}

/// The program [`search`] finds on at most `opts.search_words` of `words`
/// (at least one), re-fit to all of them (their smallest leaf where it
/// does not re-fit).
fn searched(words: &Arc<[u32]>, width: u32, hint: Hint, opts: &SynthOptions) -> Program<Literal> {
    let sample = &words[..words.len().min(opts.search_words.max(1))];
    let found = match upcast_low(sample, width, hint) {
        Some(low) => upcast(sample, low, hint, opts),
        None => search(sample, width, hint, opts).program,
    };
    if words.len() > sample.len() {
        (Template::of(&found).apply(words)).unwrap_or_else(|| leaf(words.clone(), width).0)
    } else {
        found
    }
}

/// The low half of every word, if `words` are f32 values whose low halves
/// are all that one value: bf16 values stored as f32.
fn upcast_low(words: &[u32], width: u32, hint: Hint) -> Option<u32> {
    let low = words[0] & 0xffff;
    let f32s = width == 32 && hint.float == Some(FloatFormat::F32);
    (f32s && words.iter().all(|w| w & 0xffff == low)).then_some(low)
}

/// The program for bf16 values stored as f32 (`low` their low halves): a
/// Merge of their high halves, searched as a bf16 stream of their own, and
/// that constant; or, for a stream of at most [`UPCAST_PLAIN_WORDS`] or of
/// one word, the root-only search's program where that costs less. A
/// search of the f32 words spends its budget on the f32 fields, which code
/// the sign, exponent and mantissa of the halves apart, where a bf16
/// stream's search finds the fields that code them together.
fn upcast(words: &[u32], low: u32, hint: Hint, opts: &SynthOptions) -> Program<Literal> {
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
        || search(&high, 16, bf16, opts).program,
        || {
            let worth = words.len() <= UPCAST_PLAIN_WORDS || is_constant(words);
            worth.then(|| search(words, 32, hint, &root).program)
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
        _ => plain.unwrap_or_else(|| search(words, 32, hint, &root).program),
    }
}

/// Words up to which an upcast stream's f32 words are also searched at the
/// root (see [`upcast`]). On long streams that search takes more time than
/// the halves' and does not win; on short ones it can, by a few bytes, where
/// the halves' tables weigh, and on a constant stream (one word, where the
/// halves take two).
const UPCAST_PLAIN_WORDS: usize = 4096;

/// The high halves of f32 `words` with `hint`, as bf16 words and their hint.
fn high_halves(words: &[u32], hint: Hint) -> (Vec<u32>, Hint) {
    let bf16 = Hint {
        float: Some(FloatFormat::Bf16),
        rows: hint.rows,
    };
    (words.iter().map(|w| w >> 16).collect(), bf16)
}

/// The stream packing searches for the lane `words`: the lane, or for bf16
/// values stored as f32 their high halves as bf16 words (see `upcast`). A
/// prior is learned from these; a search of an upcast lane's f32 words took
/// three times as long as one of its halves.
fn searched_lane(words: &[u32], width: u32, hint: Hint) -> (Cow<'_, [u32]>, u32, Hint) {
    match upcast_low(words, width, hint) {
        Some(_) => {
            let (high, bf16) = high_halves(words, hint);
            (Cow::Owned(high), 16, bf16)
        }
        None => (Cow::Borrowed(words), width, hint),
    }
}

/// `found`, or a Match node yielding `words` where its exact cost is
/// smaller: tried only where `matches::estimate` says a sample of the
/// words has repeats, and estimates the Match near enough `found`'s cost
/// per word (see `MATCH_MARGIN`); its four streams are searched like any
/// stream (the literal words with the stream's hint).
pub fn with_matches(
    words: &[u32],
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    found: Program<Literal>,
) -> Program<Literal> {
    if words.len() < 2 {
        return found;
    }
    let Some(per_word) = matches::estimate(words, width) else {
        return found;
    };
    let found_cost = exact_cost(&found);
    if per_word >= MATCH_MARGIN * found_cost as f64 / words.len() as f64 + MATCH_SLACK {
        return found;
    }
    searched_match(words, width, hint, opts, (found, found_cost))
}

/// `found`, or the Match node of `words` (at least two) with its four
/// streams searched (the literal words with `hint`) where its exact cost is
/// smaller than `found`'s, `found_cost` (sized once, by the caller: rANS
/// literals are sized exactly by a pass of their coder).
fn searched_match(
    words: &[u32],
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    (found, found_cost): (Program<Literal>, usize),
) -> Program<Literal> {
    let Some(streams) = matches::match_streams(words, width) else {
        return found;
    };
    // The streams' searches are independent: run them at once.
    let kids = (streams.par_iter().enumerate())
        .with_max_len(1)
        .map(|(k, (ty, s))| {
            let hint = if k == 0 {
                hint
            } else {
                Hint {
                    float: None,
                    rows: None,
                }
            };
            search(s, ty.width, hint, opts).program
        })
        .collect();
    let ty = Type {
        width,
        len: words.len(),
    };
    let m = matches::match_program(ty, kids);
    if exact_cost(&m) < found_cost && runs_to(&m, words) {
        m
    } else {
        found
    }
}

/// How far above the found program's cost per word a Match's estimate may
/// be for the Match to be searched: `MATCH_MARGIN` times it plus
/// `MATCH_SLACK` bytes. The estimate (order-0 byte planes) overstates what
/// the Match's streams code to once searched, by far where the copies are
/// regular, so a Match estimated above the found cost may still win; one
/// estimated at about twice it or more rarely does, and costs search time.
const MATCH_MARGIN: f64 = 1.5;
const MATCH_SLACK: f64 = 0.125;

/// [`synthesize`], but first re-fitting the templates `like` (from other
/// chunks of the same tensor lane), in order, when the options allow: the
/// first that fits is kept. Where none fits, the lane is searched only if
/// `may_search` (and the smallest of the search's program and the re-fits is
/// kept); otherwise None.
pub fn synthesize_like(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    like: &[&Template],
    may_search: bool,
) -> Option<Program<Literal>> {
    let mut refits: Vec<(Program<Literal>, bool)> = Vec::new();
    let mut plain = None;
    if let Some(slack) = opts.refit_slack {
        for t in like.iter().filter(|t| t.width() == width) {
            let Some(p) = t.apply(words) else { continue };
            let fits = t.fits(&p, slack);
            // The first template that fits is kept unless it codes worse
            // than the words' byte planes would: then the data may have
            // changed kind, and every template is tried for the cheapest.
            if fits {
                let plain = *plain.get_or_insert_with(|| cost::sampled_planes_cost(words, width));
                if cost(&p) * PLAIN_DIVISOR <= plain * (PLAIN_DIVISOR + 1) {
                    return Some(p);
                }
            }
            refits.push((p, fits));
        }
    }
    // The cheapest re-fit, if it fits its template and codes no worse than
    // the words' byte planes by far: a re-fit within its template's cost
    // per word may still miss what makes these words cheap (embedding rows
    // re-fit to a template from a deeper search can code far larger than a
    // search of their own finds).
    refits.sort_by_key(|(p, _)| cost(p));
    if let Some((p, true)) = refits.first() {
        let plain = plain.unwrap_or_else(|| cost::sampled_planes_cost(words, width));
        if cost(p) <= plain + plain / MISFIT_DIVISOR + MISFIT_TABLE_BYTES {
            return Some(p.clone());
        }
    }
    if !may_search {
        return None;
    }
    let found = deeper_or_default(words, width, hint, opts);
    // The search is bounded: a template's operators may still be the cheaper.
    let best = [found]
        .into_iter()
        .chain(refits.into_iter().map(|(p, _)| p))
        .min_by_key(exact_cost);
    Some(best.expect("the search's program is a candidate"))
}

/// [`synthesize_shared`] of a lane; where `opts` search deeper than the
/// default (a larger budget, or more words) and the lane's literals may be
/// partitioned (see [`with_partitions`]), the default search's program too,
/// and of the two the one that codes smaller once partitioned. A search
/// weighs its programs before partitions: on a matrix a larger budget may
/// find fields that code smaller as they are, where the default's 8-bit
/// field codes smaller still in classes of rows.
fn deeper_or_default(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    let deeper = opts.budget > DEFAULT_BUDGET || opts.search_words > SEARCH_WORDS;
    if !(deeper && opts.partitions && partition::may_partition(words.len(), hint)) {
        return synthesize_shared(words, width, hint, opts);
    }
    let default = SynthOptions {
        budget: opts.budget.min(DEFAULT_BUDGET),
        search_words: opts.search_words.min(SEARCH_WORDS),
        ..opts.clone()
    };
    let (found, shallow) = rayon::join(
        || synthesize_shared(words, width, hint, opts),
        || synthesize_shared(words, width, hint, &default),
    );
    let coded = |p: &Program<Literal>| exact_cost(&with_partitions(p.clone(), words, hint));
    if coded(&shallow) < coded(&found) {
        shallow
    } else {
        found
    }
}

/// A fitting re-fit is kept at once if it costs at most `1 + 1/this` times
/// the order-0 code of its words' byte planes (estimated from a sample).
const PLAIN_DIVISOR: usize = 64;

/// The cheapest fitting re-fit is searched instead if it costs more than
/// `1 + 1/this` times the order-0 code of its words' byte planes, plus
/// [`MISFIT_TABLE_BYTES`].
const MISFIT_DIVISOR: usize = 8;
/// Bytes of tables that the byte planes' estimate leaves out: without
/// them, every small chunk would be sent to a search.
const MISFIT_TABLE_BYTES: usize = 1024;

/// The codecs a prior's search sizes its leaves with: a prior counts the
/// operators of the programs found, which Huffman's code lengths (much of
/// the sampled searches' sizing) hardly change where rANS's prediction
/// stands in for them, so the prior learned so packs as one learned with
/// Huffman does.
const LEARNING_CODECS: [codec::Codec; 3] =
    [codec::Codec::Raw, codec::Codec::BitPack, codec::Codec::Rans];

/// Learns a prior from sample streams: each is searched as packing searches it
/// (see `searched_lane`) without production costs (best-first by size,
/// `budget` expansions), and the productions of the programs found are counted
/// in their contexts. The search sizes its leaves without Huffman (see
/// [`LEARNING_CODECS`]).
pub fn learn_prior(samples: &[(impl AsRef<[u32]> + Sync, u32, Hint)], budget: usize) -> Prior {
    let opts = SynthOptions {
        budget,
        order: Order::EstimatedSize,
        leaf_codecs: &LEARNING_CODECS,
        ..SynthOptions::default()
    };
    let found: Vec<Found> = samples
        .par_iter()
        .with_max_len(1)
        .map(|(words, width, hint)| {
            let (words, width, hint) = searched_lane(words.as_ref(), *width, *hint);
            search(&words, width, hint, &opts)
        })
        .collect();
    let mut prior = Prior::uniform();
    for f in &found {
        for (ctx, p) in &f.productions {
            prior.observe(*ctx, *p);
        }
    }
    prior
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    /// An upcast lane is searched as its high halves, bf16 words with the
    /// lane's rows; any other lane as it is.
    #[test]
    fn upcast_lanes_are_searched_as_their_high_halves() {
        let hint = |float| Hint {
            float: Some(float),
            rows: Some(64),
        };
        let high: Vec<u32> = (0..256u32).map(|i| 0x3c00 + i * 7 % 0x180).collect();
        let words: Vec<u32> = high.iter().map(|h| h << 16 | 0x8000).collect();
        let (searched, width, to) = searched_lane(&words, 32, hint(FloatFormat::F32));
        assert_eq!(
            (&searched[..], width, to),
            (&high[..], 16, hint(FloatFormat::Bf16))
        );
        // Low halves that differ, or words that are not f32 values, are not halved.
        let mut f32s = words.clone();
        f32s[1] ^= 1;
        let f32_hint = hint(FloatFormat::F32);
        assert_eq!(
            searched_lane(&f32s, 32, f32_hint),
            (f32s[..].into(), 32, f32_hint)
        );
        let plain = Hint {
            float: None,
            rows: None,
        };
        assert_eq!(
            searched_lane(&words, 32, plain),
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
        };
        let mut seed = 0x2545_f491;
        let long: Vec<u32> = (0..2 * UPCAST_PLAIN_WORDS)
            .map(|_| {
                let r = xorshift(&mut seed) as u32;
                // Weight-like: a few exponents, any sign and mantissa.
                ((0x3c00 + r % 0x180) | ((r >> 31) << 15)) << 16
            })
            .collect();
        let p = synthesize(&long, 32, f32_hint, &opts);
        assert!(runs_to(&p, &long));
        let Op::Merge { fields, parts } = &p.op else {
            panic!("not a merge: {p}");
        };
        assert_eq!(*fields, dsl::Fields::Split { low: 16 });
        assert!(matches!(parts[1].op, Op::Const(0)), "{p}");
        for len in [384, 2 * UPCAST_PLAIN_WORDS] {
            let constant = vec![0x3f80_0000; len];
            let p = synthesize(&constant, 32, f32_hint, &opts);
            assert!(matches!(p.op, Op::Const(0x3f80_0000)), "{len}: {p}");
        }
    }

    /// The codecs of `p`'s literals.
    fn literal_codecs(p: &Program<Literal>, out: &mut Vec<codec::Codec>) {
        if let Op::Lit(l) = &p.op {
            out.push(l.codec);
        }
        p.children().for_each(|c| literal_codecs(c, out));
    }

    /// A search sizes its leaves with its `leaf_codecs` only: a short
    /// stream of a few skewed symbols, which Huffman codes smallest, takes
    /// another codec without it (as when learning a prior).
    #[test]
    fn a_search_sizes_its_leaves_with_its_codecs_only() {
        let mut seed = 0x9e37_79b9;
        let words: Vec<u32> = (0..3000)
            .map(|_| (xorshift(&mut seed) % 64).trailing_zeros())
            .collect();
        let hint = Hint {
            float: None,
            rows: None,
        };
        let found = |leaf_codecs| {
            let opts = SynthOptions {
                leaf_codecs,
                ..SynthOptions::default()
            };
            let p = search(&words, 8, hint, &opts).program;
            assert!(runs_to(&p, &words));
            let mut codecs = Vec::new();
            literal_codecs(&p, &mut codecs);
            codecs
        };
        assert!(found(&codec::SIZING_ORDER).contains(&codec::Codec::Huffman));
        let learning = found(&LEARNING_CODECS);
        assert!(!learning.is_empty() && !learning.contains(&codec::Codec::Huffman));
    }
}
