//! The encoder of rANS literals of tag 4 (docs/FORMAT.md, "rANS (tag 4,
//! version 6)"), and the sizer that runs the same branch-free steps without
//! storing output (the renormalisation count depends on the exact states).

use super::choose::group_count;
use super::layout::{used_lanes, Groups, GROUPS_SHIFT, LANES, PRECISION_SHIFT, STATE_LOW};
use super::model::{log2_q16, Model, LOG2_FREQ};
#[cfg(target_arch = "x86_64")]
use super::simd_encode;
use super::step::{size_symbols, Kept, SizeSymbol, KEPT_SLACK};
use crate::codec::index::SymbolIndex;
use crate::codec::simd::{level as simd_level, Simd};
use crate::codec::stats::{Alphabet, Stats};
use crate::codec::symbols::{self, Values};
use crate::wire::{put_varint, varint_len};

pub(in crate::codec) fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 1)
}

/// Encodes `words`, which start at block `first` of the stream, backwards
/// from the states in `groups`. Before coding each word it calls
/// `emit(renorm, low)`: `renorm` tells whether the state renormalises,
/// emitting its low 16 bits `low` (passing both keeps the loop free of
/// unpredictable branches). Used both to size and to encode.
#[inline(always)]
pub(super) fn run<const G: usize>(
    words: &[u32],
    first: usize,
    groups: &mut Groups<G>,
    index: &SymbolIndex,
    symbols: &[SizeSymbol],
    scale: u32,
    emit: &mut impl FnMut(bool, u16),
) {
    for (block, words) in words.chunks(LANES).enumerate().rev() {
        let states = &mut groups[(first + block) % G];
        for (x, &w) in states.iter_mut().zip(words).rev() {
            let (next, renorm) = symbols[index.rank(w)].step(*x, scale);
            emit(renorm, *x as u16);
            *x = next;
        }
    }
}

/// Number of renormalisation words the encoder emits with `G` groups,
/// without storing them. The reference for the faster `count_emitted_fast`.
#[cfg(test)]
pub(super) fn count_emitted<const G: usize>(
    words: &[u32],
    index: &SymbolIndex,
    model: &Model,
) -> usize {
    let mut emitted = 0usize;
    let symbols = size_symbols(model);
    let mut groups = [[STATE_LOW; LANES]; G];
    let mut count = |renorm, _| emitted += renorm as usize;
    run(
        words,
        0,
        &mut groups,
        index,
        &symbols,
        model.scale,
        &mut count,
    );
    emitted
}

/// Streams shorter than this are sized by the scalar loop only.
pub(super) const SIMD_MIN_WORDS: usize = 4 * LANES;

/// Widest words for which the SIMD sizer looks symbols up by word directly
/// (a table of `2^width` entries), skipping the rank lookup.
pub(super) const DIRECT_MAX_WIDTH: u32 = 12;

/// As `count_emitted`, but faster: with AVX2 or AVX-512 the whole blocks of
/// `LANES` words run in vectors of eight or sixteen lanes (see [`run_fast`]).
#[cfg(test)]
pub(super) fn count_emitted_fast<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
) -> usize {
    let symbols = size_symbols(model);
    let mut groups = [[STATE_LOW; LANES]; G];
    run_fast(words, alphabet, &symbols, model.scale, &mut groups, None)
}

/// Words of a lane its seed takes at most: a stream of one word (which
/// costs nothing) would otherwise be decoded whole from its seeds.
pub(super) const SEED_WORDS: usize = 8;

/// Largest seed: a state `STATE_LOW + seed` must stay below 2^32.
const SEED_LIMIT: u64 = (1 << 32) - STATE_LOW as u64;

/// Codes the last words of `words` into the states of `groups` (all at
/// [`STATE_LOW`]), each state `STATE_LOW + v` with `v` the words of its lane
/// coded from 0 without renormalisation, for as long as every `v` fits (at
/// most [`SEED_WORDS`] a lane); returns how many words it took. A state
/// that starts at `STATE_LOW` holds 16 bits that code nothing; seeded, those
/// bits hold words (up to 2 bytes a lane, 128 a stream of two groups).
fn seed<const G: usize>(
    words: &[u32],
    index: &SymbolIndex,
    symbols: &[SizeSymbol],
    scale: u32,
    groups: &mut Groups<G>,
) -> usize {
    let most = (SEED_WORDS * LANES * G).min(words.len());
    for k in 0..most {
        let i = words.len() - 1 - k;
        let x = &mut groups[(i / LANES) % G][i % LANES];
        let s = symbols[index.rank(words[i])];
        let v = *x - STATE_LOW;
        let q = s.quotient(v);
        let next = ((q as u64) << scale) + (s.start() + v - q * s.freq()) as u64;
        if next >= SEED_LIMIT {
            return k;
        }
        *x = STATE_LOW + next as u32;
    }
    most
}

/// Codes `words` with `model` and `G` groups: the last ones into the
/// states' seeds (see [`seed`]), the rest by the coder, keeping its
/// renormalisation words in `kept` if given. Returns the final states, the
/// number of seeded words and the number of renormalisation words.
fn seeded_run<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    kept: Option<&mut Kept>,
) -> (Groups<G>, usize, usize) {
    let symbols = size_symbols(model);
    let mut groups = [[STATE_LOW; LANES]; G];
    let seeded = seed(words, alphabet.index(), &symbols, model.scale, &mut groups);
    let coded = &words[..words.len() - seeded];
    let emitted = run_fast(coded, alphabet, &symbols, model.scale, &mut groups, kept);
    (groups, seeded, emitted)
}

/// Codes `words` from `groups`, keeping the renormalisation words in `kept`
/// if given, and returns their number: the tail block (coded first) by the
/// scalar loop, the whole blocks with SIMD where they can.
fn run_fast<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    symbols: &[SizeSymbol],
    scale: u32,
    groups: &mut Groups<G>,
    mut kept: Option<&mut Kept>,
) -> usize {
    let index = alphabet.index();
    let mut emitted = 0usize;
    let mut scalar = |words: &[u32], first, groups: &mut Groups<G>, mut kept: Option<&mut Kept>| {
        let mut step = |renorm: bool, low| {
            if let Some(kept) = kept.as_deref_mut() {
                kept.words[kept.count] = low;
                kept.count += renorm as usize;
            }
            emitted += renorm as usize;
        };
        run(words, first, groups, index, symbols, scale, &mut step);
    };
    let whole = words.len() - words.len() % LANES;
    scalar(&words[whole..], whole / LANES, groups, kept.as_deref_mut());
    let bulk = &words[..whole];
    match bulk_simd(bulk, alphabet, symbols, scale, groups, kept.as_deref_mut()) {
        Some(bulk_count) => emitted + bulk_count,
        None => {
            scalar(bulk, 0, groups, kept);
            emitted
        }
    }
}

/// Runs the whole blocks of `bulk` with AVX-512 or AVX2, the widest the CPU
/// has, when the stream is long enough, keeping the renormalisation words in `kept` if
/// given, and returns their number; otherwise returns None and leaves
/// `groups` and `kept` alone. Words are looked up directly (narrow ones),
/// through the alphabet's dense rank array (up to 16 bits), or as their
/// ranks, found once per word (wider ones: a 32-bit literal of a float
/// stream's few values).
#[inline]
pub(super) fn bulk_simd<const G: usize>(
    bulk: &[u32],
    alphabet: &Alphabet,
    symbols: &[SizeSymbol],
    scale: u32,
    groups: &mut Groups<G>,
    kept: Option<&mut Kept>,
) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if bulk.len() >= SIMD_MIN_WORDS && simd_level() != Simd::None {
        let width = alphabet.width();
        let (direct, ranks_of_words);
        let (bulk, lookup) =
            if width <= DIRECT_MAX_WIDTH && (width <= 8 || bulk.len() >= 8 << width) {
                let mut table = vec![SizeSymbol::default(); 1 << width];
                for (&w, &s) in alphabet.words.iter().zip(symbols) {
                    table[w as usize] = s;
                }
                direct = table;
                (bulk, simd_encode::Lookup::Direct(&direct))
            } else if let Some(ranks) = alphabet.index().dense_ranks() {
                (bulk, simd_encode::Lookup::Ranked { ranks, symbols })
            } else {
                // Words too wide for a rank array: the loop runs over their
                // ranks, each looked up once here, through the symbols by rank
                // (padded to a power of two, as a direct table is).
                let index = alphabet.index();
                ranks_of_words = bulk
                    .iter()
                    .map(|&w| index.rank(w) as u32)
                    .collect::<Vec<_>>();
                let mut table = symbols.to_vec();
                table.resize(symbols.len().next_power_of_two(), SizeSymbol::default());
                direct = table;
                (&ranks_of_words[..], simd_encode::Lookup::Direct(&direct))
            };
        return Some(match simd_level() {
            // SAFETY: the CPU supports AVX-512F, AVX2 and POPCNT, as
            // `simd_level` checked.
            Simd::Avx512 => unsafe { simd_encode::run_avx512(bulk, &lookup, scale, groups, kept) },
            // SAFETY: the CPU supports AVX2 and POPCNT, as checked just above.
            _ => unsafe { simd_encode::run(bulk, &lookup, scale, groups, kept) },
        });
    }
    let _ = (bulk, alphabet, symbols, scale, groups, kept);
    None
}

/// Payload size in bytes (without the tag): runs the coder without output,
/// since the renormalisation count depends on the exact state sequence.
pub(in crate::codec) fn size(words: &[u32], stats: &Stats) -> Option<usize> {
    let alphabet = applicable(stats)?;
    let model = &Model::of(alphabet).0;
    let (seeded, emitted) = match model.groups {
        1 => seeded_and_emitted(seeded_run::<1>(words, alphabet, model, None)),
        _ => seeded_and_emitted(seeded_run::<2>(words, alphabet, model, None)),
    };
    Some(payload_size(words.len(), model, seeded, emitted))
}

/// The seeded words and renormalisation words of a [`seeded_run`].
fn seeded_and_emitted<const G: usize>(
    (_, seeded, emitted): (Groups<G>, usize, usize),
) -> (usize, usize) {
    (seeded, emitted)
}

/// What [`size`] is expected to be, without a pass over the words: the
/// renormalisations that the model's cost in bits implies, less the bits
/// the used lanes' states may hold, plus what the final states leave
/// unfilled, [`PREDICTED_LANE_BYTES`] a lane on average. It is off the
/// exact size by no more than
/// [`rans_prediction_slack`](crate::codec::rans_prediction_slack) allows
/// (the bound the tests check), while a pass of the coder costs as much as
/// encoding, and the search weighs many streams it then drops, so it weighs
/// rANS streams by this.
pub(in crate::codec) fn predict(words: &[u32], stats: &Stats) -> Option<usize> {
    let (model, seeded, emitted) = modelled(words, stats)?;
    let lanes = used_lanes(words.len(), model.groups);
    Some(payload_size(words.len(), model, seeded, emitted) + PREDICTED_LANE_BYTES * lanes / 8)
}

/// Eighths of a byte per used lane the exact size exceeds the model's
/// renormalisations by on average: a mean, not a bound, as what a final
/// state leaves unfilled depends on the exact states the coder ends in.
const PREDICTED_LANE_BYTES: usize = 7;

/// The model, the seeded words and the renormalisation words the model's
/// cost implies beyond what the states hold.
fn modelled<'a>(words: &[u32], stats: &'a Stats) -> Option<(&'a Model, usize, usize)> {
    let alphabet = applicable(stats)?;
    let (model, cost) = Model::of(alphabet);
    let (kept, seeded) = match model.groups {
        1 => state_bits::<1>(words, alphabet, model),
        _ => state_bits::<2>(words, alphabet, model),
    };
    let emitted = (((cost - kept).max(0) >> 16) as usize).div_ceil(16);
    Some((model, seeded, emitted))
}

/// At most how many bits of the words' cost (as [`Model::cost`]) the
/// states hold rather than the renormalisation words, and the number of
/// seeded words. A lane whose coding starts from state `x0` after its seeded
/// words of cost `c` ends in a state below 2^32, so its renormalisation
/// words hold at least its cost less `32 - log2(x0) + c` bits.
fn state_bits<const G: usize>(words: &[u32], alphabet: &Alphabet, model: &Model) -> (i128, usize) {
    let symbols = size_symbols(model);
    let mut groups = [[STATE_LOW; LANES]; G];
    let seeded = seed(words, alphabet.index(), &symbols, model.scale, &mut groups);
    let one = (model.scale as i128) << 16;
    let seeds: i128 = (words[words.len() - seeded..].iter())
        .map(|&w| one - LOG2_FREQ[model.freqs[alphabet.index().rank(w)] as usize] as i128)
        .sum();
    let states: i128 = (groups.as_flattened()[..used_lanes(words.len(), G)].iter())
        .map(|&x| (32 << 16) - log2_q16(x) as i128)
        .sum();
    (states + seeds, seeded)
}

/// Payload bytes of a stream of `n` words with `model` that seeds `seeded`
/// words and emits `emitted` renormalisation words: head, table, states,
/// the two counts and the words.
fn payload_size(n: usize, model: &Model, seeded: usize, emitted: usize) -> usize {
    let states = 4 * used_lanes(n, model.groups);
    let counts = varint_len(seeded as u64) + varint_len(emitted as u64);
    1 + model.table_bytes + states + counts + 2 * emitted
}

pub(in crate::codec) fn encode(words: &[u32], stats: &Stats, out: &mut Vec<u8>) -> bool {
    let Some(alphabet) = applicable(stats) else {
        return false;
    };
    let model = &Model::of(alphabet).0;
    match model.groups {
        1 => encode_groups::<1>(words, alphabet, model, out),
        _ => encode_groups::<2>(words, alphabet, model, out),
    }
    true
}

/// Encodes a stream with `model`'s table and `G` groups of lanes.
pub(super) fn encode_groups<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    out: &mut Vec<u8>,
) {
    write_table::<G>(alphabet, model, out);
    write_words::<G>(words, alphabet, model, out);
}

/// The model of streams that share one table fitted to all their words,
/// `alphabet`'s, `streams` of them: [`Model::of`]'s, but its lane groups
/// chosen for one stream's share of the cost, as each has states of its
/// own.
pub(in crate::codec) fn shared_model(alphabet: &Alphabet, streams: usize) -> Model {
    let (model, cost) = Model::of(alphabet);
    let groups = group_count(cost / streams.max(1) as i128);
    Model {
        groups,
        ..model.clone()
    }
}

/// Appends the head and table of a stream of `alphabet`'s words with
/// `model`.
pub(in crate::codec) fn encode_table(alphabet: &Alphabet, model: &Model, out: &mut Vec<u8>) {
    match model.groups {
        1 => write_table::<1>(alphabet, model, out),
        _ => write_table::<2>(alphabet, model, out),
    }
}

/// Appends what follows [`encode_table`]'s table in a stream of `words`
/// (each one of `alphabet`'s) with `model`: its states, counts and
/// renormalisation words.
pub(in crate::codec) fn encode_words(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    out: &mut Vec<u8>,
) {
    match model.groups {
        1 => write_words::<1>(words, alphabet, model, out),
        _ => write_words::<2>(words, alphabet, model, out),
    }
}

fn write_table<const G: usize>(alphabet: &Alphabet, model: &Model, out: &mut Vec<u8>) {
    let head =
        model.scale | (G.trailing_zeros() << GROUPS_SHIFT) | model.precision << PRECISION_SHIFT;
    out.push(head as u8);
    symbols::write(
        &alphabet.words,
        &model.table,
        Values::Rounded(model.precision),
        out,
    );
}

fn write_words<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    out: &mut Vec<u8>,
) {
    // Each word emits at most one renormalisation word; every word writes
    // its low bits at `count`, kept only if it did emit, so `count <= n`
    // (the SIMD loop writes eight at a time) and only what was written is
    // read: pooled scratch serves, rather than a zeroed buffer a literal.
    let kept_len = words.len() + KEPT_SLACK;
    crate::scratch::with_words(kept_len.div_ceil(2), |scratch| {
        let emitted = &mut bytemuck::cast_slice_mut::<u32, u16>(scratch)[..kept_len];
        let mut kept = Kept {
            words: emitted,
            count: 0,
        };
        let (groups, seeded, count) = seeded_run::<G>(words, alphabet, model, Some(&mut kept));
        for state in &groups.as_flattened()[..used_lanes(words.len(), G)] {
            out.extend_from_slice(&state.to_le_bytes());
        }
        put_varint(out, seeded as u64);
        put_varint(out, count as u64);
        out.extend(emitted[..count].iter().rev().flat_map(|w| w.to_le_bytes()));
    });
}
