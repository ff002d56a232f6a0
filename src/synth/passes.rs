//! The order of the passes that find a lane's program, from the packer's
//! entry point ([`refit_or_search`]) down:
//!
//! 1. Re-fit: the programs found for other chunks of the same tensor lane
//!    (their templates) are re-fit to the lane; the first that fits is kept.
//! 2. Search, where none fits: the bounded A* search on the lane's first
//!    words, its program re-fit to all of them (bf16 values stored as f32
//!    are searched as their high halves, see `upcast`). Where the options
//!    search deeper than the default, the default search's program is found
//!    too, and the one that codes smaller once partitioned is kept.
//! 3. Match: a Match node (literal words and copies of earlier ones) is
//!    offered beside the search's program where a sample shows repeats.
//! 4. Mirror: a Mirror node is offered where the tensor's rows mirror
//!    themselves; its head and differences go through 2 to 4 again.
//!    Then one or two ColumnScans where its columns change slowly down its
//!    rows; their updates go through 2 to 4 again.
//! 5. Partition: the caller takes the program as a template for later
//!    chunks, then offers its literals a Partition of the tensor's rows
//!    ([`super::partition_rows`]).
//!
//! Each pass weighs its candidates by [`exact_cost`] and checks the one it
//! keeps with [`runs_to`].

use super::columnscan::{best_order, column_scan_program};
use super::cost::{cost, exact_cost, runs_to, sampled_planes_cost};
use super::leaf::leaf;
use super::matches::{self, match_program, match_streams};
use super::mirror::{mirror_program, mirror_streams, mirroring};
use super::options::{SynthOptions, DEFAULT_BUDGET, MATCH_WORDS, SCAN_MATCH_WORDS, SEARCH_WORDS};
use super::partition::{may_partition, partition_rows};
use super::refit::Template;
use super::search::astar;
use super::stream::Hint;
use super::upcast::{astar_upcast, upcast_low};
use crate::dsl::{Literal, Program, Type};
use rayon::prelude::*;
use std::sync::Arc;

/// The program of a chunk's lane `words`, as the packer finds it: the
/// templates `like` (from other chunks of the same tensor lane) re-fit in
/// order, when the options allow, the first that fits kept. Where none
/// fits, the lane is searched (see [`search_stream`]) only if `may_search`,
/// and the smallest of the search's program and the re-fits is kept;
/// otherwise None. The program is not partitioned yet: it is the lane's
/// template, and [`super::partition_rows`] offers its literals a Partition.
pub fn refit_or_search(
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
                let plain = *plain.get_or_insert_with(|| sampled_planes_cost(words, width));
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
        let plain = plain.unwrap_or_else(|| sampled_planes_cost(words, width));
        if cost(p) <= plain + plain / MISFIT_DIVISOR + MISFIT_TABLE_BYTES {
            return Some(p.clone());
        }
    }
    if !may_search {
        return None;
    }
    let found = search_deeper_or_default(words, width, hint, opts);
    // The search is bounded: a template's operators may still be the cheaper.
    let best = [found]
        .into_iter()
        .chain(refits.into_iter().map(|(p, _)| p))
        .min_by_key(exact_cost);
    Some(best.expect("the search's program is a candidate"))
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

/// [`search_shared`] of a lane; where `opts` search deeper than the
/// default (a larger budget, or more words) and the lane's literals may be
/// partitioned (see [`partition_rows`]), the default search's program too,
/// and of the two the one that codes smaller once partitioned. A search
/// weighs its programs before partitions: on a matrix a larger budget may
/// find fields that code smaller as they are, where the default's 8-bit
/// field codes smaller still in classes of rows.
fn search_deeper_or_default(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    let deeper = opts.budget > DEFAULT_BUDGET || opts.search_words > SEARCH_WORDS;
    if !(deeper && opts.partitions && may_partition(words.len(), width, hint)) {
        return search_shared(words, width, hint, opts);
    }
    let default = no_deeper_than_default(opts);
    let (found, shallow) = rayon::join(
        || search_shared(words, width, hint, opts),
        || search_shared(words, width, hint, &default),
    );
    let coded = |p: &Program<Literal>| exact_cost(&partition_rows(p.clone(), words, hint));
    if coded(&shallow) < coded(&found) {
        shallow
    } else {
        found
    }
}

/// `opts` searching no deeper than the default level does: its budget and
/// the words it searches at most the default's.
fn no_deeper_than_default(opts: &SynthOptions) -> SynthOptions {
    SynthOptions {
        budget: opts.budget.min(DEFAULT_BUDGET),
        search_words: opts.search_words.min(SEARCH_WORDS),
        ..opts.clone()
    }
}

/// The program of a stream `words` (at least one) found by search, without
/// templates: the bounded A* search on its first `opts.search_words` words,
/// re-fit to all of them (their smallest leaf where it does not re-fit); or
/// a Match node where that is smaller; or a Mirror node where the rows
/// mirror themselves and that is smaller still. Not partitioned (see
/// [`super::partition_rows`]).
pub fn search_stream(
    words: &[u32],
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    search_shared(&words.into(), width, hint, opts)
}

/// [`search_stream`] of a chunk's shared lane: its re-fit and its leaves
/// hold the lane, not a copy.
fn search_shared(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    search_shared_matching(words, width, hint, opts, MATCH_WORDS)
}

/// [`search_shared`], offering a Match where there are at most
/// `match_words` words.
fn search_shared_matching(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    match_words: usize,
) -> Program<Literal> {
    let found = astar_sample_refit(words, width, hint, opts);
    let found = if words.len() > match_words {
        found
    } else {
        offer_match(words, width, hint, opts, found)
    };
    let found = offer_mirror(words, width, hint, opts, found);
    offer_column_scan(words, width, hint, opts, found)
}

/// The program [`astar`] finds on at most `opts.search_words` of `words`
/// (at least one), re-fit to all of them (their smallest leaf where it
/// does not re-fit); for bf16 values stored as f32, the program of their
/// halves (see [`astar_upcast`]).
fn astar_sample_refit(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
) -> Program<Literal> {
    let sample = &words[..words.len().min(opts.search_words.max(1))];
    let found = match upcast_low(sample, width, hint) {
        Some(low) => astar_upcast(sample, low, hint, opts),
        None => astar(sample, width, hint, opts).program,
    };
    if words.len() > sample.len() {
        (Template::of(&found).apply(words)).unwrap_or_else(|| leaf(words.clone(), width).0)
    } else {
        found
    }
}

/// `found`, or a Match node yielding `words` where its exact cost is
/// smaller: tried only where `matches::estimate` says a sample of the
/// words has repeats, and estimates the Match near enough `found`'s cost
/// per word (see `MATCH_MARGIN`); its four streams are searched like any
/// stream (the literal words with the stream's hint).
fn offer_match(
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
    try_match(words, width, hint, opts, (found, found_cost))
}

/// How far above the found program's cost per word a Match's estimate may
/// be for the Match to be searched: `MATCH_MARGIN` times it plus
/// `MATCH_SLACK` bytes. The estimate (order-0 byte planes) overstates what
/// the Match's streams code to once searched, by far where the copies are
/// regular, so a Match estimated above the found cost may still win; the
/// further above, the less likely, while searching its streams costs the
/// same: the margin is where that search stops paying for itself.
const MATCH_MARGIN: f64 = 1.5;
const MATCH_SLACK: f64 = 0.125;

/// `found`, or the Match node of `words` (at least two) with its four
/// streams searched (the literal words with `hint`) where its exact cost is
/// smaller than `found`'s, `found_cost` (sized once, by the caller: rANS
/// literals are sized exactly by a pass of their coder).
fn try_match(
    words: &[u32],
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    (found, found_cost): (Program<Literal>, usize),
) -> Program<Literal> {
    let Some(streams) = match_streams(words, width) else {
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
                    columns: None,
                }
            };
            astar(s, ty.width, hint, opts).program
        })
        .collect();
    let ty = Type {
        width,
        len: words.len(),
    };
    let m = match_program(ty, kids);
    if exact_cost(&m) < found_cost && runs_to(&m, words) {
        m
    } else {
        found
    }
}

/// `found`, or a Mirror yielding `words` where their rows mirror themselves
/// (see [`mirroring`]) and it costs less. Its head is searched as rows of
/// their own, and a Match of it tried whatever [`offer_match`]'s estimate
/// says: the heads of a Fourier basis repeat words rows apart, which the
/// estimate's sample of the first rows misses, rejecting a Match that codes
/// such heads far smaller. Its differences are searched as words that are
/// not floats and not rows, so that they are not mirrored again.
fn offer_mirror(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    found: Program<Literal>,
) -> Program<Literal> {
    let Some(m) = mirroring(words, hint) else {
        return found;
    };
    let (head, diffs) = mirror_streams(words, m);
    let head_hint = Hint {
        rows: Some(m.kept()),
        columns: None,
        ..hint
    };
    let plain = Hint {
        float: None,
        rows: None,
        columns: None,
    };
    // The two searches are independent: run them at once.
    let (head, diffs) = rayon::join(
        || {
            let found = astar_sample_refit(&head, width, head_hint, opts);
            match head.len() {
                2..=MATCH_WORDS => {
                    let cost = exact_cost(&found);
                    try_match(&head, width, head_hint, opts, (found, cost))
                }
                _ => found,
            }
        },
        || search_shared(&diffs, width, plain, opts),
    );
    let ty = Type {
        width,
        len: words.len(),
    };
    let mirrored = mirror_program(ty, m, head, diffs);
    if exact_cost(&mirrored) < exact_cost(&found) && runs_to(&mirrored, words) {
        mirrored
    } else {
        found
    }
}

/// `found`, or one or two ColumnScans yielding `words` where the tensor's
/// columns change slowly down its rows (see [`best_order`]) and that costs
/// less. The updates are searched as words that are not floats and whose
/// place in their rows is not given, so that they are not scanned again,
/// and no deeper than the default level searches: a deeper search of a
/// sinusoidal table's updates found fields whose code tables the chunks
/// then shared worse (minilm-positions 1,136 bytes larger at level 7 than
/// at level 6), and more effort must never write a larger archive.
fn offer_column_scan(
    words: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    opts: &SynthOptions,
    found: Program<Literal>,
) -> Program<Literal> {
    let Some(row) = hint.columns.map(|c| c.row) else {
        return found;
    };
    let Some((order, updates)) = best_order(words, row, width) else {
        return found;
    };
    let plain = Hint {
        float: None,
        columns: None,
        ..hint
    };
    let ty = Type {
        width,
        len: words.len(),
    };
    // A scan's updates repeat where its rows do (a sinusoid's slow
    // columns), so they are offered a Match in widened chunks too (scans
    // are rare, and the length still bounded).
    let opts = no_deeper_than_default(opts);
    let updates = search_shared_matching(&updates, width, plain, &opts, SCAN_MATCH_WORDS);
    let scanned = (0..order).fold(updates, |p, _| column_scan_program(ty, row, p));
    if exact_cost(&scanned) < exact_cost(&found) && runs_to(&scanned, words) {
        scanned
    } else {
        found
    }
}
