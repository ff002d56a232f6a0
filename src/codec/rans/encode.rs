//! The encoder, and the sizer that runs the same branch-free steps without
//! storing output (the renormalisation count depends on the exact states).

use super::*;

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

/// Per-symbol data of the sizing simulation, 8 bytes so that one table
/// lookup (or two 32-bit gathers) fetches all of it.
///
/// `packed` is `(freq - 1) | start << 14 | l << 28` with `l = ceil(log2
/// freq)`: `freq <= 2^14`, `start < 2^14` and `l <= 14` fit their fields.
/// `magic` is the Granlund-Montgomery multiplier
/// `floor(2^32 * (2^l - freq) / freq) + 1`, below 2^32 since `2^l < 2 * freq`
/// for `freq >= 2` (and 1 for `freq == 1`). It gives `floor(y / freq)` for
/// every `y < 2^32` with one 32x32->64 multiplication (see `quotient`); the
/// test `size_quotient_is_exact` checks it for every frequency.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C)]
pub(super) struct SizeSymbol {
    pub(super) packed: u32,
    pub(super) magic: u32,
}

pub(super) const FIELD: u32 = (1 << 14) - 1;
const _: () = assert!(MAX_SCALE == 14);

impl SizeSymbol {
    pub(super) fn new(freq: u32, start: u32) -> SizeSymbol {
        assert!((1..=1 << MAX_SCALE).contains(&freq) && start <= FIELD);
        let l = ceil_log2(freq as usize);
        let magic = ((1u64 << 32) * ((1u64 << l) - freq as u64) / freq as u64 + 1) as u32;
        SizeSymbol {
            packed: (freq - 1) | start << 14 | l << 28,
            magic,
        }
    }

    /// `floor(y / freq)` for any `y < 2^32`: with `t = mulhi(y, magic) <= y`,
    /// `(t + ((y - t) >> min(l, 1))) >> max(l - 1, 0)` (no step overflows).
    #[inline(always)]
    pub(super) fn quotient(self, y: u32) -> u32 {
        let l = self.packed >> 28;
        let sh1 = l.min(1);
        let t = ((y as u64 * self.magic as u64) >> 32) as u32;
        (t + ((y - t) >> sh1)) >> (l - sh1)
    }

    /// One encoder step on state `x` with frequencies summing to
    /// `2^scale`: returns the new state and whether it renormalised. The
    /// the rANS step after renormalisation:
    /// `x >= 2^(32 - scale) * freq` iff `x >> (32 - scale) > freq - 1`, and
    /// `2^scale - freq == (2^scale - 1) - (freq - 1)`. Wrapping arithmetic
    /// matches the SIMD version (valid models never wrap).
    #[inline(always)]
    pub(super) fn step(self, x: u32, scale: u32) -> (u32, bool) {
        let fm1 = self.packed & FIELD;
        let renorm = ((x as u64) >> (32 - scale)) as u32 > fm1;
        let y = if renorm { x >> 16 } else { x };
        let start = (self.packed >> 14) & FIELD;
        let cmpl = ((1u32 << scale) - 1).wrapping_sub(fm1);
        let next = y
            .wrapping_add(start)
            .wrapping_add(self.quotient(y).wrapping_mul(cmpl));
        (next, renorm)
    }
}

pub(super) fn size_symbols(model: &Model) -> Vec<SizeSymbol> {
    let mut start = 0;
    model
        .freqs
        .iter()
        .map(|&freq| {
            let s = SizeSymbol::new(freq, start);
            start += freq;
            s
        })
        .collect()
}

/// Streams shorter than this are sized by the scalar loop only.
pub(super) const SIMD_MIN_WORDS: usize = 4 * LANES;

/// Widest words for which the SIMD sizer looks symbols up by word directly
/// (a table of `2^width` entries), skipping the rank lookup.
pub(super) const DIRECT_MAX_WIDTH: u32 = 12;

/// As `count_emitted`, but faster: with AVX2 the whole blocks of `LANES`
/// words run in vectors of eight lanes (see [`run_fast`]).
pub(super) fn count_emitted_fast<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
) -> usize {
    run_fast(words, alphabet, model, &mut [[STATE_LOW; LANES]; G], None)
}

/// Codes `words` from `groups`, keeping the renormalisation words in `kept`
/// if given, and returns their number: the tail block (coded first) by the
/// scalar loop, the whole blocks with SIMD where they can.
fn run_fast<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    groups: &mut Groups<G>,
    mut kept: Option<&mut Kept>,
) -> usize {
    let symbols = size_symbols(model);
    let (index, scale) = (alphabet.index(), model.scale);
    let mut emitted = 0usize;
    let mut scalar = |words: &[u32], first, groups: &mut Groups<G>, mut kept: Option<&mut Kept>| {
        let mut step = |renorm: bool, low| {
            if let Some(kept) = kept.as_deref_mut() {
                kept.words[kept.count] = low;
                kept.count += renorm as usize;
            }
            emitted += renorm as usize;
        };
        run(words, first, groups, index, &symbols, scale, &mut step);
    };
    let whole = words.len() - words.len() % LANES;
    scalar(&words[whole..], whole / LANES, groups, kept.as_deref_mut());
    let bulk = &words[..whole];
    match bulk_simd(bulk, alphabet, &symbols, scale, groups, kept.as_deref_mut()) {
        Some(bulk_count) => emitted + bulk_count,
        None => {
            scalar(bulk, 0, groups, kept);
            emitted
        }
    }
}

/// Where an encoding run keeps the renormalisation words: the low 16 bits
/// of each state that renormalises go to `words[count]`, in the order of
/// [`run`]. Each step writes there, and `count` moves on only past the ones
/// that renormalise; the SIMD loop writes eight words at a time, so `words`
/// holds [`KEPT_SLACK`] beyond the most a run keeps.
pub(super) struct Kept<'a> {
    pub words: &'a mut [u16],
    pub count: usize,
}

/// Words past the kept ones a run may write (see [`Kept`]).
pub(super) const KEPT_SLACK: usize = 8;

/// Runs the whole blocks of `bulk` with AVX2 when the CPU has it, the
/// stream is long enough and the words are at most 16 bits wide (there is a
/// direct rank array), keeping the renormalisation words in `kept` if
/// given, and returns their number; otherwise returns None and leaves
/// `groups` and `kept` alone.
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
        let direct;
        let lookup = if width <= DIRECT_MAX_WIDTH && (width <= 8 || bulk.len() >= 8 << width) {
            let mut table = vec![SizeSymbol::default(); 1 << width];
            for (&w, &s) in alphabet.words.iter().zip(symbols) {
                table[w as usize] = s;
            }
            direct = table;
            simd_encode::Lookup::Direct(&direct)
        } else {
            simd_encode::Lookup::Ranked {
                ranks: alphabet.index().dense_ranks()?,
                symbols,
            }
        };
        // SAFETY: the CPU supports AVX2 and POPCNT, as checked just above.
        return Some(unsafe { simd_encode::run(bulk, &lookup, scale, groups, kept) });
    }
    let _ = (bulk, alphabet, symbols, scale, groups, kept);
    None
}

/// Payload size in bytes (without the tag): runs the coder without output,
/// since the renormalisation count depends on the exact state sequence.
pub(in crate::codec) fn size(words: &[u32], stats: &Stats) -> Option<usize> {
    let alphabet = applicable(stats)?;
    let model = Model::new(alphabet, words.len());
    let emitted = match model.groups {
        1 => count_emitted_fast::<1>(words, alphabet, &model),
        _ => count_emitted_fast::<2>(words, alphabet, &model),
    };
    Some(payload_size(words.len(), alphabet, &model, emitted))
}

/// About the least [`size`] may be, from the model alone, without a pass
/// over the words: the renormalisations that the model's cost in bits
/// implies, less the bits the used lanes' final states hold. Below [`size`]
/// by little (see the tests): the packer sizes rANS exactly only where
/// this says it may win.
pub(in crate::codec) fn estimate(n: usize, stats: &Stats) -> Option<usize> {
    let alphabet = applicable(stats)?;
    let (model, emitted) = estimated_emitted(n, alphabet);
    Some(payload_size(n, alphabet, &model, emitted))
}

/// Bits a lane's final state holds beyond its initial [`STATE_LOW`]: states
/// end in `[2^16, 2^32)`.
const FINAL_STATE_BITS: i128 = 16;

/// The estimate is lowered by 1/this of itself: an encoding step rounds its
/// state down, by up to a quarter of a bit where a frequency nears the
/// state's lower bound, so a stream of many rare words may code a little
/// below its model's cost (by 1/23000 at most in the tests).
const ROUNDING_MARGIN: usize = 2048;

/// The model of `n` words of `alphabet`, and about the fewest
/// renormalisation words its coder may emit (see [`estimate`]).
fn estimated_emitted(n: usize, alphabet: &Alphabet) -> (Model, usize) {
    let (model, cost) = Model::with_cost(alphabet, n);
    let kept = (FINAL_STATE_BITS * used_lanes(n, model.groups) as i128) << 16;
    let emitted = (((cost - kept).max(0) >> 16) as usize).div_ceil(16);
    (model, emitted - emitted / ROUNDING_MARGIN)
}

/// Payload bytes of a stream of `n` words with `model` that emits `emitted`
/// renormalisation words: table, states, the count and the words.
fn payload_size(n: usize, alphabet: &Alphabet, model: &Model, emitted: usize) -> usize {
    let table = symbols::size(&alphabet.words, &model.freqs, Values::Varints);
    let states = 4 * used_lanes(n, model.groups);
    1 + table + states + varint_len(emitted as u64) + 2 * emitted
}

pub(in crate::codec) fn encode(words: &[u32], stats: &Stats, out: &mut Vec<u8>) -> bool {
    let Some(alphabet) = applicable(stats) else {
        return false;
    };
    let model = Model::new(alphabet, words.len());
    match model.groups {
        1 => encode_groups::<1>(words, alphabet, &model, out),
        _ => encode_groups::<2>(words, alphabet, &model, out),
    }
    true
}

/// Encodes a stream with `model`'s frequencies and `G` groups of lanes.
pub(super) fn encode_groups<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    out: &mut Vec<u8>,
) {
    out.push(model.scale as u8 | (G.trailing_zeros() as u8) << GROUPS_SHIFT);
    symbols::write(&alphabet.words, &model.freqs, Values::Varints, out);
    // Each word emits at most one renormalisation word; every word writes
    // its low bits at `count`, kept only if it did emit, so `count <= n`
    // (the SIMD loop writes eight at a time).
    let mut emitted = vec![0u16; words.len() + KEPT_SLACK];
    let mut groups = [[STATE_LOW; LANES]; G];
    let mut kept = Kept {
        words: &mut emitted,
        count: 0,
    };
    let count = run_fast(words, alphabet, model, &mut groups, Some(&mut kept));
    for state in &groups.as_flattened()[..used_lanes(words.len(), G)] {
        out.extend_from_slice(&state.to_le_bytes());
    }
    put_varint(out, count as u64);
    out.extend(emitted[..count].iter().rev().flat_map(|w| w.to_le_bytes()));
}
