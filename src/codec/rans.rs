//! rANS: static range asymmetric numeral systems over the stream's distinct
//! words, with 32 or 64 interleaved 32-bit states so the decoder has many
//! independent dependency chains (vectors of 8 or 16 lanes, or plenty of
//! scalar work to overlap).
//!
//! The states form one or two groups of 32 lanes. Word `i` is coded by lane
//! `i % 32` of group `(i / 32) % groups`, i.e. blocks of 32 words take the
//! groups in turn. Long streams take two groups: a SIMD decoder is bound by
//! the latency of each lane's step, so twice the independent chains decode
//! faster. States live in `[2^16, 2^32)` and renormalise by whole 16-bit
//! words, which all lanes share in one stream.
//! The encoder runs backwards, so the decoder reads that stream forwards.
//! The encoder divides by multiplying with exact reciprocals, and sizing runs
//! the same branch-free loop without storing output.

use super::index::SymbolIndex;
use super::simd::{level as simd_level, Simd};
use super::stats::Alphabet;
use super::symbols::{self, SymbolSet, Values};
use super::{Stats, Word};
use crate::wire::{put_varint, varint_len, Reader, WireError};

/// States in a group; changing it changes the byte format.
const LANES: usize = 32;
/// The states of a stream: `G` groups of [`LANES`].
type Groups<const G: usize> = [[u32; LANES]; G];
/// A stream's head byte holds the scale in its low bits and log2 of the
/// number of groups (0 or 1) from this bit on. (Four groups decoded no faster
/// than two in the mount on the 2-core test machines, for 256 more bytes.)
const GROUPS_SHIFT: u32 = 4;
/// A stream takes two groups when the extra states cost at most 1/this of
/// its estimated size, i.e. from 32000 bytes on. Such a stream of 2^17
/// bytes decodes ~1.5x as fast with two, for 128 bytes (0.1%).
const GROUP_COST: i128 = 250;
/// Lower bound of a normalised state; also every lane's initial state.
const STATE_LOW: u32 = 1 << 16;
/// Frequencies sum to 2^scale with scale <= 14, so `2^(32 - scale) * freq`
/// bounds stay >= 2^18 and one 16-bit renormalisation always suffices.
const MAX_SCALE: u32 = 14;

/// The scale and log2 of the group count in a stream's head byte, unchecked.
fn head_fields(head: u8) -> (u32, u8) {
    (
        (head & ((1 << GROUPS_SHIFT) - 1)) as u32,
        head >> GROUPS_SHIFT,
    )
}

fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 1)
}

/// Number of groups the encoder gives a stream whose words cost `bits`
/// (in 1/65536ths, as [`Model::cost`]).
fn group_count(bits: i128) -> usize {
    // The second group's states: 32 of 32 bits.
    const EXTRA_BITS: i128 = (LANES as i128 * 32) << 16;
    if EXTRA_BITS * GROUP_COST <= bits {
        2
    } else {
        1
    }
}

/// Number of lanes that code at least one word (only those store a state).
fn used_lanes(n: usize, groups: usize) -> usize {
    n.min(groups * LANES)
}

fn ceil_log2(x: usize) -> u32 {
    usize::BITS - x.saturating_sub(1).leading_zeros()
}

/// Quantised frequencies summing to `2^scale`, per symbol rank, and the
/// number of lane groups.
struct Model {
    scale: u32,
    freqs: Vec<u32>,
    groups: usize,
}

/// The coarsest scale a long stream is coded at when that costs little: its
/// decoding tables (2^12 four-byte entries and as many words) stay in the L1
/// cache, which made decoding the F16 corpus file 16% faster than at scale 14.
/// Scale 13's fused table (32 KiB) still fits the L1 cache where 14's does
/// not: FP8 streams that 12 would cost too much decode ~5% faster at 13.
const FAST_SCALE: u32 = 12;

/// A stream takes a scale coarser than its finest when that makes it at most
/// 1/this larger.
const FAST_SCALE_COST: i128 = 300;

impl Model {
    /// The finest scale is about log2(n): a finer one would cost table bytes
    /// that a short stream cannot recoup. A single word needs no precision at
    /// all. Long streams drop to the coarsest scale from [`FAST_SCALE`] up
    /// whose frequencies cost at most 1/[`FAST_SCALE_COST`] more than the
    /// finest's. The groups follow from the size (see [`group_count`]).
    fn new(alphabet: &Alphabet, n: usize) -> Model {
        let counts = alphabet.totals();
        let (mut model, cost) = Model::quantised(&counts, alphabet.len(), n);
        model.groups = group_count(cost);
        model
    }

    /// The frequencies of [`Model::new`], with one group, and their cost.
    fn quantised(counts: &[u64], distinct: usize, n: usize) -> (Model, i128) {
        let at = |scale| {
            let model = Model {
                scale,
                freqs: normalize(counts, n as u64, scale),
                groups: 1,
            };
            let cost = model.cost(counts);
            (model, cost)
        };
        if distinct == 1 {
            return at(0);
        }
        let least = ceil_log2(distinct);
        let fine = at(ceil_log2(n).clamp(least, MAX_SCALE));
        (least.max(FAST_SCALE)..fine.0.scale)
            .map(at)
            .find(|coarse| (coarse.1 - fine.1) * FAST_SCALE_COST <= fine.1)
            .unwrap_or(fine)
    }

    /// Bits of coding `counts` with these frequencies, in 1/65536ths:
    /// the sum of `count * log2(2^scale / freq)`.
    fn cost(&self, counts: &[u64]) -> i128 {
        let one = (self.scale as i128) << 16;
        counts
            .iter()
            .zip(&self.freqs)
            .map(|(&count, &freq)| count as i128 * (one - LOG2_FREQ[freq as usize] as i128))
            .sum()
    }
}

/// `log2_q16` of every frequency a model can hold: models are sized for every
/// candidate stream while packing, so the logs are computed once.
static LOG2_FREQ: std::sync::LazyLock<Vec<u32>> = std::sync::LazyLock::new(|| {
    (0..=1u32 << MAX_SCALE)
        .map(|freq| log2_q16(freq.max(1)) as u32)
        .collect()
});

/// log2(x) for x >= 1, in 1/65536ths, by integer steps (repeated squaring of
/// the mantissa), so that choices made with it are the same on every machine.
fn log2_q16(x: u32) -> u64 {
    let int = 31 - x.leading_zeros();
    // The mantissa x / 2^int in [1, 2), with 30 fraction bits.
    let mut m = (x as u64) << (30 - int.min(30)) >> int.saturating_sub(30);
    let mut frac = 0u64;
    for bit in (0..16).rev() {
        m = (m * m) >> 30;
        if m >= 1 << 31 {
            m >>= 1;
            frac |= 1 << bit;
        }
    }
    (int as u64) << 16 | frac
}

/// Rounds `counts` (summing to `total`) to frequencies >= 1 summing to
/// `2^scale` (which is at least the number of counts). The rounding error is
/// settled on the largest frequencies, where one unit costs the fewest bits.
fn normalize(counts: &[u64], total: u64, scale: u32) -> Vec<u32> {
    let target = 1u64 << scale;
    let mut freqs: Vec<u64> = counts
        .iter()
        .map(|&c| ((c * target + total / 2) / total).max(1))
        .collect();
    let mut order: Vec<usize> = (0..freqs.len()).collect();
    order.sort_unstable_by_key(|&i| (std::cmp::Reverse(freqs[i]), i));
    let sum: u64 = freqs.iter().sum();
    if sum < target {
        freqs[order[0]] += target - sum;
    } else {
        let mut excess = sum - target;
        for &i in &order {
            let take = (freqs[i] - 1).min(excess);
            freqs[i] -= take;
            excess -= take;
        }
        debug_assert_eq!(excess, 0);
    }
    freqs.into_iter().map(|f| f as u32).collect()
}

/// Encodes `words`, which start at block `first` of the stream, backwards
/// from the states in `groups`. Before coding each word it calls
/// `emit(renorm, low)`: `renorm` tells whether the state renormalises,
/// emitting its low 16 bits `low` (passing both keeps the loop free of
/// unpredictable branches). Used both to size and to encode.
#[inline(always)]
fn run<const G: usize>(
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
fn count_emitted<const G: usize>(words: &[u32], index: &SymbolIndex, model: &Model) -> usize {
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
struct SizeSymbol {
    packed: u32,
    magic: u32,
}

const FIELD: u32 = (1 << 14) - 1;
const _: () = assert!(MAX_SCALE == 14);

impl SizeSymbol {
    fn new(freq: u32, start: u32) -> SizeSymbol {
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
    fn quotient(self, y: u32) -> u32 {
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
    fn step(self, x: u32, scale: u32) -> (u32, bool) {
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

fn size_symbols(model: &Model) -> Vec<SizeSymbol> {
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
const SIMD_MIN_WORDS: usize = 4 * LANES;

/// Widest words for which the SIMD sizer looks symbols up by word directly
/// (a table of `2^width` entries), skipping the rank lookup.
const DIRECT_MAX_WIDTH: u32 = 12;

/// As `count_emitted`, but faster: with AVX2 the whole blocks of `LANES`
/// words run in vectors of eight lanes. The tail block (coded first) is
/// always scalar.
fn count_emitted_fast<const G: usize>(words: &[u32], alphabet: &Alphabet, model: &Model) -> usize {
    let symbols = size_symbols(model);
    let index = alphabet.index();
    let scale = model.scale;
    let mut groups = [[STATE_LOW; LANES]; G];
    let mut emitted = 0usize;
    let mut count = |renorm, _| emitted += renorm as usize;
    let whole = words.len() - words.len() % LANES;
    let tail = &words[whole..];
    run(
        tail,
        whole / LANES,
        &mut groups,
        index,
        &symbols,
        scale,
        &mut count,
    );
    let bulk = &words[..whole];
    match count_bulk_simd(bulk, alphabet, &symbols, scale, &mut groups) {
        Some(bulk_count) => emitted += bulk_count,
        None => run(bulk, 0, &mut groups, index, &symbols, scale, &mut count),
    }
    emitted
}

/// Runs the whole blocks of `bulk` with AVX2 when the CPU has it, the
/// stream is long enough and the words are at most 16 bits wide (there is a
/// direct rank array); otherwise returns None and leaves `groups` alone.
#[inline]
fn count_bulk_simd<const G: usize>(
    bulk: &[u32],
    alphabet: &Alphabet,
    symbols: &[SizeSymbol],
    scale: u32,
    groups: &mut Groups<G>,
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
            avx2_size::Lookup::Direct(&direct)
        } else {
            avx2_size::Lookup::Ranked {
                ranks: alphabet.index().dense_ranks()?,
                symbols,
            }
        };
        let mut count = 0;
        for (group, states) in groups.iter_mut().enumerate() {
            let blocks = avx2_size::Blocks { group, groups: G };
            // SAFETY: the CPU supports AVX2, as checked just above.
            count += unsafe { avx2_size::count(bulk, blocks, &lookup, scale, states) };
        }
        return Some(count);
    }
    let _ = (bulk, alphabet, symbols, scale, groups);
    None
}

/// Payload size in bytes (without the tag): runs the coder without output,
/// since the renormalisation count depends on the exact state sequence.
pub(super) fn size(words: &[u32], stats: &Stats) -> Option<usize> {
    let alphabet = applicable(stats)?;
    let model = Model::new(alphabet, words.len());
    let emitted = match model.groups {
        1 => count_emitted_fast::<1>(words, alphabet, &model),
        _ => count_emitted_fast::<2>(words, alphabet, &model),
    };
    let table = symbols::size(&alphabet.words, &model.freqs, Values::Varints);
    let states = 4 * used_lanes(words.len(), model.groups);
    Some(1 + table + states + varint_len(emitted as u64) + 2 * emitted)
}

pub(super) fn encode(words: &[u32], stats: &Stats, out: &mut Vec<u8>) -> bool {
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
fn encode_groups<const G: usize>(
    words: &[u32],
    alphabet: &Alphabet,
    model: &Model,
    out: &mut Vec<u8>,
) {
    out.push(model.scale as u8 | (G.trailing_zeros() as u8) << GROUPS_SHIFT);
    symbols::write(&alphabet.words, &model.freqs, Values::Varints, out);
    // Each word emits at most one renormalisation word; every word writes
    // its low bits at `count`, kept only if it did emit, so `count <= n`.
    let mut emitted = vec![0u16; words.len() + 1];
    let mut count = 0usize;
    let symbols = size_symbols(model);
    let mut groups = [[STATE_LOW; LANES]; G];
    let mut keep = |renorm, low| {
        emitted[count] = low;
        count += renorm as usize;
    };
    let index = alphabet.index();
    run(
        words,
        0,
        &mut groups,
        index,
        &symbols,
        model.scale,
        &mut keep,
    );
    for state in &groups.as_flattened()[..used_lanes(words.len(), G)] {
        out.extend_from_slice(&state.to_le_bytes());
    }
    put_varint(out, count as u64);
    out.extend(emitted[..count].iter().rev().flat_map(|w| w.to_le_bytes()));
}

/// Slot -> symbol tables for a validated model, of exactly `2^scale` entries.
struct DecodeTable<T> {
    scale: u32,
    slots: Slots<T>,
}

/// What each slot decodes to, in one of two layouts.
enum Slots<T> {
    /// `word << 24 | freq << 12 | (slot - start)`, where all three fit: byte
    /// words, frequencies below 2^12 (at any scale, as `slot - start <
    /// freq`). One lookup per step, and one table to build, which for the
    /// byte alphabets of long streams costs less than the two below. SIMD
    /// decoders are bound by their gathers, so one lookup instead of two
    /// decoded FP8 streams at scale 14 ~1.15x as fast as the split layout,
    /// though its table (64 KiB) no longer fits the L1 cache.
    Fused(Vec<u32>),
    Split {
        /// `freq << 16 | (slot - start)` (`freq <= 2^14` and `slot - start
        /// < 2^14` each fit 16 bits).
        packed: Vec<u32>,
        /// The word of each slot in the output's word type (a narrow table
        /// stays in the L1 cache, which makes SIMD gathers faster), then
        /// `word_pad` zeros.
        words: Vec<T>,
    },
}

/// Whether the fused layout holds every symbol of a model.
fn fits_fused(set: &SymbolSet) -> bool {
    const FUSED_FIELD: u32 = (1 << 12) - 1;
    set.words
        .iter()
        .zip(&set.values)
        .all(|(&w, &f)| w <= 0xff && f <= FUSED_FIELD)
}

/// Zero words after the table: the SIMD decoder reads 4 bytes at each word.
fn word_pad<T>() -> usize {
    4 / size_of::<T>() - 1
}

impl<T: Word> DecodeTable<T> {
    /// Fails unless the frequencies (each >= 1) sum to exactly `2^scale`.
    /// The words must fit `T`. Takes the fused layout wherever it fits.
    fn new(set: &SymbolSet, scale: u32) -> Option<DecodeTable<T>> {
        let size = 1usize << scale;
        if set.values.iter().map(|&f| f as u64).sum::<u64>() != size as u64 {
            return None;
        }
        let slots = if fits_fused(set) {
            Slots::fused(set, size)
        } else {
            Slots::split(set, size)
        };
        Some(DecodeTable { scale, slots })
    }
}

impl<T: Word> Slots<T> {
    /// The fused layout of `size` slots; every symbol must fit it.
    fn fused(set: &SymbolSet, size: usize) -> Slots<T> {
        let mut table = Vec::with_capacity(size);
        for (&word, &freq) in set.words.iter().zip(&set.values) {
            let high = word << 24 | freq << 12;
            table.extend((0..freq).map(|offset| high | offset));
        }
        Slots::Fused(table)
    }

    /// The split layout of `size` slots.
    fn split(set: &SymbolSet, size: usize) -> Slots<T> {
        let mut packed = Vec::with_capacity(size);
        let mut words = Vec::with_capacity(size + word_pad::<T>());
        for (&word, &freq) in set.words.iter().zip(&set.values) {
            packed.extend((0..freq).map(|offset| freq << 16 | offset));
            words.extend(std::iter::repeat_n(T::from_u32(word), freq as usize));
        }
        words.resize(size + word_pad::<T>(), T::default());
        Slots::Split { packed, words }
    }
}

/// A table's slots for the portable decoder, cut to exactly `2^SCALE`
/// entries so that indexing by `x mod 2^SCALE` needs no bounds check.
#[derive(Clone, Copy)]
enum Lookup<'a, const SCALE: u32, T> {
    Fused(&'a [u32]),
    Split(&'a [u32], &'a [T]),
}

impl<'a, const SCALE: u32, T: Word> Lookup<'a, SCALE, T> {
    fn new(slots: &'a Slots<T>) -> Self {
        let size = 1 << SCALE;
        match slots {
            Slots::Fused(table) => Lookup::Fused(&table[..size]),
            Slots::Split { packed, words } => Lookup::Split(&packed[..size], &words[..size]),
        }
    }

    /// `(freq, slot - start, word)` of `slot < 2^SCALE`.
    #[inline(always)]
    fn get(self, slot: usize) -> (u32, u32, T) {
        match self {
            Lookup::Fused(table) => {
                let e = table[slot];
                (e >> 12 & 0xfff, e & 0xfff, T::from_u32(e >> 24))
            }
            Lookup::Split(packed, words) => {
                (packed[slot] >> 16, packed[slot] & 0xffff, words[slot])
            }
        }
    }
}

/// Decodes one word from state `x`, leaving the state un-renormalised. For
/// a state in `[2^16, 2^32)` no overflow is possible:
/// `freq * (x >> SCALE) + offset < freq * ((x >> SCALE) + 1) <= 2^32`.
#[inline(always)]
fn step<const SCALE: u32, T: Word>(lookup: Lookup<'_, SCALE, T>, x: &mut u32) -> T {
    let (freq, offset, word) = lookup.get((*x & ((1 << SCALE) - 1)) as usize);
    *x = freq * (*x >> SCALE) + offset;
    word
}

/// Renormalises the lanes in lane order, each taking the next word if its
/// state fell below 2^16 (then it is >= 4, so one word restores the range).
/// `window` holds the next `LANES` words, so no lane can read past it: lane
/// `k` reads window word `j <= k` (the number of earlier lanes that read).
/// Branch-free; returns how many words were taken.
#[inline(always)]
fn renormalise_fast(states: &mut [u32; LANES], window: &[u8; 2 * LANES]) -> usize {
    let mut j = 0usize;
    for x in states.iter_mut() {
        // `j < LANES` already; the mask only lets the compiler see it.
        let at = 2 * (j & (LANES - 1));
        const _: () = assert!(LANES.is_power_of_two());
        let next = *x << 16 | u16::from_le_bytes([window[at], window[at + 1]]) as u32;
        let renorm = *x < STATE_LOW;
        *x = if renorm { next } else { *x };
        j += renorm as usize;
    }
    j
}

/// As `renormalise_fast` for the last few words of the input, and for lanes
/// `..lanes` only: past the end it yields zeros while the position keeps
/// counting, so an overrun is detected afterwards. Takes and returns the
/// states by value so that the hot loop can keep them in registers.
#[cold]
#[inline(never)]
fn renormalise_slow(
    mut states: [u32; LANES],
    lanes: usize,
    data: &[u8],
    mut pos: usize,
) -> ([u32; LANES], usize) {
    for x in &mut states[..lanes] {
        if *x < STATE_LOW {
            let at = 2 * pos;
            let word = match data.get(at..at + 2) {
                Some(b) => u16::from_le_bytes([b[0], b[1]]) as u32,
                None => 0,
            };
            *x = *x << 16 | word;
            pos += 1;
        }
    }
    (states, pos)
}

pub(super) fn decode<T: Word>(r: &mut Reader, width: u32, out: &mut [T]) -> Result<(), WireError> {
    let (scale, groups_log2) = head_fields(r.u8()?);
    if scale > MAX_SCALE {
        return Err(r.error("rans scale above 14"));
    }
    if groups_log2 > 1 {
        return Err(r.error("rans lane groups above 2"));
    }
    let set = symbols::read(r, width, Values::Varints, 1 << scale)?;
    let table = DecodeTable::<T>::new(&set, scale)
        .ok_or_else(|| r.error("rans frequencies do not sum to 2^scale"))?;
    if groups_log2 == 1 {
        decode_groups::<T, 2>(r, &table, out)
    } else {
        decode_groups::<T, 1>(r, &table, out)
    }
}

/// Reads the states and renormalisation words of a stream with `G` groups
/// of lanes, and decodes it with `table`.
fn decode_groups<T: Word, const G: usize>(
    r: &mut Reader,
    table: &DecodeTable<T>,
    out: &mut [T],
) -> Result<(), WireError> {
    let mut groups = [[STATE_LOW; LANES]; G];
    for state in &mut groups.as_flattened_mut()[..used_lanes(out.len(), G)] {
        let at = r.pos();
        *state = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes"));
        if *state < STATE_LOW {
            return Err(WireError {
                at,
                reason: "rans state below 2^16",
            });
        }
    }
    let max_words = r.remaining() as u64 / 2;
    let count = r.varint_max(max_words, "rans data runs past the end of data")? as usize;
    let at = r.pos();
    let data = r.bytes(2 * count)?;
    if decode_any_scale(&mut groups, table, data, out) != count {
        return Err(WireError {
            at,
            reason: "rans data not consumed exactly",
        });
    }
    if groups.as_flattened().iter().any(|&x| x != STATE_LOW) {
        return Err(r.error("rans final state does not match the initial state"));
    }
    Ok(())
}

/// Decodes `out.len()` words and returns how many renormalisation words it
/// read (possibly more than `data` holds, when the input is corrupt). Uses
/// a SIMD decoder for the bulk when the CPU has one, then the portable one
/// specialised for the table's scale, so that the shift and mask are
/// constants and the table index needs no bounds check.
fn decode_any_scale<T: Word, const G: usize>(
    groups: &mut Groups<G>,
    table: &DecodeTable<T>,
    data: &[u8],
    out: &mut [T],
) -> usize {
    let (done, pos) = decode_bulk_simd(groups, table, data, out);
    let out = &mut out[done..];
    macro_rules! dispatch {
        ($($scale:literal)*) => {
            match table.scale {
                $($scale => decode_lanes::<$scale, T, G>(groups, table, data, pos, out),)*
                _ => unreachable!("rans scale is validated to be at most 14"),
            }
        };
    }
    const _: () = assert!(MAX_SCALE == 14);
    dispatch!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
}

/// Decodes whole rounds of `G * LANES` words (one block per group) with
/// SIMD while a full round of renormalisation words remains; returns the
/// words decoded and the words read. Does nothing without AVX2.
#[inline]
fn decode_bulk_simd<T: Word, const G: usize>(
    groups: &mut Groups<G>,
    table: &DecodeTable<T>,
    data: &[u8],
    out: &mut [T],
) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    match simd_level() {
        // SAFETY: `simd_level` checked that the CPU has these features.
        Simd::Avx512 => return unsafe { simd::decode_avx512(groups, table, data, out) },
        Simd::Avx2 => return unsafe { simd::decode_avx2(groups, table, data, out) },
        Simd::None => {}
    }
    let _ = (groups, table, data, out);
    (0, 0)
}

/// Decodes `out.len()` words with tables of `2^SCALE` entries, starting at
/// renormalisation word `pos` with a block of group 0, and returns how many
/// words were read in all.
fn decode_lanes<const SCALE: u32, T: Word, const G: usize>(
    groups: &mut Groups<G>,
    table: &DecodeTable<T>,
    data: &[u8],
    mut pos: usize,
    out: &mut [T],
) -> usize {
    let lookup = Lookup::<SCALE, T>::new(&table.slots);
    // A local copy whose address never escapes can live in registers.
    let mut st = *groups;
    let mut rounds = out.chunks_exact_mut(G * LANES);
    for round in &mut rounds {
        for (block, states) in round.chunks_exact_mut(LANES).zip(&mut st) {
            step_block(lookup, block, states);
            let window = data
                .get(2 * pos..2 * pos + 2 * LANES)
                .and_then(|w| <&[u8; 2 * LANES]>::try_from(w).ok());
            match window {
                Some(window) => pos += renormalise_fast(states, window),
                None => (*states, pos) = renormalise_slow(*states, LANES, data, pos),
            }
        }
    }
    let tail = rounds.into_remainder();
    for (block, states) in tail.chunks_mut(LANES).zip(&mut st) {
        step_block(lookup, block, states);
        (*states, pos) = renormalise_slow(*states, block.len(), data, pos);
    }
    *groups = st;
    pos
}

/// Decodes one word per lane into `block` (up to `LANES` words).
#[inline(always)]
fn step_block<const SCALE: u32, T: Word>(
    lookup: Lookup<'_, SCALE, T>,
    block: &mut [T],
    states: &mut [u32; LANES],
) {
    for (o, x) in block.iter_mut().zip(states.iter_mut()) {
        *o = step(lookup, x);
    }
}

/// The decoder of `decode_lanes` with SIMD. A group's 32 lanes live in four
/// vectors of 8 (AVX2) or two of 16 (AVX-512), and all groups of a stream
/// decode together, so there are 4 to 8 independent dependency chains: the
/// loop is bound by each chain's latency (gather, multiply, renormalise)
/// more than by throughput. Table lookups are gathers. The renormalisation
/// words for the lanes that need one are spread to them by a permutation
/// chosen by the mask of those lanes (AVX2), or by an expand under that mask
/// (AVX-512).
#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{DecodeTable, Groups, Slots, Word, LANES, STATE_LOW};
    use std::arch::x86_64::*;

    /// The 32 lane states as four vectors of eight. (A helper rather than
    /// `array::from_fn`: a closure does not get the caller's target features,
    /// so its intrinsics would become calls unless it happened to be inlined.)
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn load_quarters(states: &[u32; LANES]) -> [__m256i; 4] {
        let at = |q: usize| states[8 * q..][..8].as_ptr() as *const __m256i;
        // SAFETY: each load reads the 8 u32 of one quarter of `states`.
        unsafe {
            [
                _mm256_loadu_si256(at(0)),
                _mm256_loadu_si256(at(1)),
                _mm256_loadu_si256(at(2)),
                _mm256_loadu_si256(at(3)),
            ]
        }
    }

    /// Stores the four vectors of `load_quarters` back into `states`.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn store_quarters(x: [__m256i; 4], states: &mut [u32; LANES]) {
        for (quarter, v) in states.chunks_exact_mut(8).zip(x) {
            // SAFETY: each store writes the 8 u32 of one quarter of `states`.
            unsafe { _mm256_storeu_si256(quarter.as_mut_ptr() as *mut __m256i, v) };
        }
    }

    const _: () = assert!(LANES == 32 && STATE_LOW == 1 << 16);

    /// # Safety
    /// The CPU must support AVX2 and POPCNT.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn decode_avx2<T: Word, const G: usize>(
        groups: &mut Groups<G>,
        table: &DecodeTable<T>,
        data: &[u8],
        out: &mut [T],
    ) -> (usize, usize) {
        decode_table::<T, Ymm, G>(groups, table, data, out)
    }

    /// # Safety
    /// The CPU must support AVX2, POPCNT and AVX-512F.
    #[target_feature(enable = "avx2,popcnt,avx512f")]
    pub(super) unsafe fn decode_avx512<T: Word, const G: usize>(
        groups: &mut Groups<G>,
        table: &DecodeTable<T>,
        data: &[u8],
        out: &mut [T],
    ) -> (usize, usize) {
        decode_table::<T, Zmm, G>(groups, table, data, out)
    }

    /// Where a decoder's gathers read: the slots of a [`DecodeTable`] of
    /// `2^scale` entries, in the fused layout or in the split one (whose
    /// word table has the padding that 4-byte reads need).
    struct Tables {
        fused: *const i32,
        packed: *const i32,
        words: *const i32,
        scale: u32,
    }

    /// The 32 lane states of a group in SIMD vectors, and the steps of
    /// decoding them. Every method must be inlined into a caller with the
    /// target features its intrinsics need.
    trait Block: Copy {
        /// The vectors the lanes live in.
        type Vector: Vector;

        /// The block's vectors, in lane order.
        fn vectors(&mut self) -> &mut [Self::Vector];

        /// # Safety
        /// As for the trait.
        unsafe fn load(states: &[u32; LANES]) -> Self;

        /// # Safety
        /// As for the trait.
        unsafe fn store(self, states: &mut [u32; LANES]);

        /// Decodes one word per lane, leaving the states un-renormalised,
        /// and returns the words, zero-extended to 32 bits. `FUSED`: whether
        /// `tables` has the fused layout.
        ///
        /// # Safety
        /// `tables` must point at tables of `2^tables.scale` entries of
        /// that layout, and the states must be in `[2^16, 2^32)` (so no
        /// step overflows).
        #[inline(always)]
        unsafe fn step<T: Word, const FUSED: bool>(&mut self, tables: &Tables) -> Self {
            let mut words = *self;
            for (x, word) in self.vectors().iter_mut().zip(words.vectors()) {
                *word = step_vector::<Self::Vector, T, FUSED>(x, tables);
            }
            words
        }

        /// Stores the 32 words of [`Block::step`] as `T`s at `out`.
        ///
        /// # Safety
        /// `out` must have room for 32 `T`s, and every word must fit `T`.
        unsafe fn store_words<T: Word>(self, out: *mut T);

        /// Renormalises the lanes below 2^16, in lane order, each taking
        /// the next 16-bit word at `data`; returns how many it took.
        ///
        /// # Safety
        /// `data` must have `2 * LANES` readable bytes.
        unsafe fn renormalise(&mut self, data: *const u8) -> usize;
    }

    /// [`decode`] with the fused table if the stream has one.
    ///
    /// # Safety
    /// As for [`decode`].
    #[inline(always)]
    unsafe fn decode_table<T: Word, B: Block, const G: usize>(
        groups: &mut Groups<G>,
        table: &DecodeTable<T>,
        data: &[u8],
        out: &mut [T],
    ) -> (usize, usize) {
        match table.slots {
            Slots::Fused(_) => decode::<T, B, G, true>(groups, table, data, out),
            Slots::Split { .. } => decode::<T, B, G, false>(groups, table, data, out),
        }
    }

    /// As `super::decode_lanes` for whole rounds of `G * LANES` words while
    /// `data` holds at least that many more words; returns the words
    /// decoded and the words read. `FUSED`: whether the table has the fused
    /// layout.
    ///
    /// # Safety
    /// The CPU must have the features `B` uses.
    #[inline(always)]
    unsafe fn decode<T: Word, B: Block, const G: usize, const FUSED: bool>(
        groups: &mut Groups<G>,
        table: &DecodeTable<T>,
        data: &[u8],
        out: &mut [T],
    ) -> (usize, usize) {
        let size = 1usize << table.scale;
        let null = std::ptr::null();
        // Gathers index the tables by `x & (size - 1)`, so they stay inside
        // them (a word gather reads 4 bytes, which the padding covers).
        let scale = table.scale;
        let tables = match &table.slots {
            Slots::Fused(fused) => {
                assert!(FUSED && fused.len() == size);
                let fused = fused.as_ptr() as *const i32;
                Tables {
                    fused,
                    packed: null,
                    words: null,
                    scale,
                }
            }
            Slots::Split { packed, words } => {
                assert!(!FUSED && packed.len() == size);
                assert!((size - 1) * size_of::<T>() + 4 <= size_of_val(words.as_slice()));
                let packed = packed.as_ptr() as *const i32;
                let words = words.as_ptr() as *const i32;
                Tables {
                    fused: null,
                    packed,
                    words,
                    scale,
                }
            }
        };
        let mut x = [B::load(&groups[0]); G];
        for (x, states) in x.iter_mut().zip(groups.iter()) {
            *x = B::load(states);
        }
        let round = G * LANES;
        let mut pos = 0usize;
        let mut done = 0usize;
        for chunk in out.chunks_exact_mut(round) {
            // Each group reads at most `LANES` words from where the
            // previous one stopped.
            if 2 * (pos + round) > data.len() {
                break;
            }
            // Step every group first: they are independent chains, and only
            // renormalisation ties them together (through the position of
            // the next word).
            let mut words = x;
            for (x, words) in x.iter_mut().zip(&mut words) {
                // SAFETY: the tables are as asserted above, and the states
                // are renormalised (the caller validated the initial ones).
                *words = x.step::<T, FUSED>(&tables);
            }
            for (words, block) in words.iter().zip(chunk.chunks_exact_mut(LANES)) {
                // SAFETY: `block` holds 32 words, and every word decoded
                // from a validated table fits `T`.
                words.store_words(block.as_mut_ptr());
            }
            for x in &mut x {
                // SAFETY: `2 * (pos + LANES) <= data.len()` by the check
                // above, since earlier groups advanced `pos` by at most
                // `LANES` each.
                pos += x.renormalise(data.as_ptr().add(2 * pos));
            }
            done += round;
        }
        for (x, states) in x.iter().zip(groups.iter_mut()) {
            x.store(states);
        }
        (done, pos)
    }

    /// One SIMD vector of 32-bit lanes: the operations of a decoding step.
    /// As for [`Block`], every method must be inlined into a caller with
    /// the target features its intrinsics need.
    trait Vector: Copy {
        unsafe fn splat(value: i32) -> Self;
        unsafe fn and(self, other: Self) -> Self;
        unsafe fn add(self, other: Self) -> Self;
        unsafe fn mullo(self, other: Self) -> Self;
        unsafe fn shr<const N: i32>(self) -> Self;
        unsafe fn shr_by(self, count: __m128i) -> Self;
        /// The 4 bytes at `base + SCALE * index` of each lane.
        ///
        /// # Safety
        /// Every one of them must be readable.
        unsafe fn gather<const SCALE: i32>(base: *const i32, index: Self) -> Self;
    }

    /// Decodes one word per lane of `x` (see [`Block::step`], whose safety
    /// conditions it has), leaving `x` un-renormalised; returns the words.
    #[inline(always)]
    unsafe fn step_vector<V: Vector, T: Word, const FUSED: bool>(x: &mut V, t: &Tables) -> V {
        let slot = x.and(V::splat((1 << t.scale) - 1));
        let (word, freq, offset) = if FUSED {
            let entry = V::gather::<4>(t.fused, slot);
            let low12 = V::splat(0xfff);
            (
                entry.shr::<24>(),
                entry.shr::<12>().and(low12),
                entry.and(low12),
            )
        } else {
            let entry = V::gather::<4>(t.packed, slot);
            let word = match size_of::<T>() {
                1 => V::gather::<1>(t.words, slot),
                2 => V::gather::<2>(t.words, slot),
                _ => V::gather::<4>(t.words, slot),
            };
            let word_mask = V::splat((u32::MAX >> (32 - 8 * size_of::<T>())) as i32);
            let offset = entry.and(V::splat(0xffff));
            (word.and(word_mask), entry.shr::<16>(), offset)
        };
        let quotient = x.shr_by(_mm_cvtsi32_si128(t.scale as i32));
        *x = freq.mullo(quotient).add(offset);
        word
    }

    impl Vector for __m256i {
        #[inline(always)]
        unsafe fn splat(value: i32) -> Self {
            _mm256_set1_epi32(value)
        }
        #[inline(always)]
        unsafe fn and(self, other: Self) -> Self {
            _mm256_and_si256(self, other)
        }
        #[inline(always)]
        unsafe fn add(self, other: Self) -> Self {
            _mm256_add_epi32(self, other)
        }
        #[inline(always)]
        unsafe fn mullo(self, other: Self) -> Self {
            _mm256_mullo_epi32(self, other)
        }
        #[inline(always)]
        unsafe fn shr<const N: i32>(self) -> Self {
            _mm256_srli_epi32::<N>(self)
        }
        #[inline(always)]
        unsafe fn shr_by(self, count: __m128i) -> Self {
            _mm256_srl_epi32(self, count)
        }
        #[inline(always)]
        unsafe fn gather<const SCALE: i32>(base: *const i32, index: Self) -> Self {
            _mm256_i32gather_epi32::<SCALE>(base, index)
        }
    }

    impl Vector for __m512i {
        #[inline(always)]
        unsafe fn splat(value: i32) -> Self {
            _mm512_set1_epi32(value)
        }
        #[inline(always)]
        unsafe fn and(self, other: Self) -> Self {
            _mm512_and_si512(self, other)
        }
        #[inline(always)]
        unsafe fn add(self, other: Self) -> Self {
            _mm512_add_epi32(self, other)
        }
        #[inline(always)]
        unsafe fn mullo(self, other: Self) -> Self {
            _mm512_mullo_epi32(self, other)
        }
        #[inline(always)]
        unsafe fn shr<const N: i32>(self) -> Self {
            // (This intrinsic's immediate is a u32, which a const generic
            // cannot convert to; a constant count becomes an immediate shift.)
            _mm512_srl_epi32(self, _mm_cvtsi32_si128(N))
        }
        #[inline(always)]
        unsafe fn shr_by(self, count: __m128i) -> Self {
            _mm512_srl_epi32(self, count)
        }
        #[inline(always)]
        unsafe fn gather<const SCALE: i32>(base: *const i32, index: Self) -> Self {
            _mm512_i32gather_epi32::<SCALE>(index, base)
        }
    }

    /// A group as four AVX2 vectors of eight lanes.
    #[derive(Clone, Copy)]
    struct Ymm([__m256i; 4]);

    /// `PERM[mask][lane]`: for a lane whose bit is set in `mask`, the number
    /// of set bits below it, i.e. which of the next words it takes.
    static PERM: [[u32; 8]; 256] = {
        let mut table = [[0u32; 8]; 256];
        let mut mask = 0;
        while mask < 256 {
            let (mut lane, mut taken) = (0, 0);
            while lane < 8 {
                if mask >> lane & 1 == 1 {
                    table[mask][lane] = taken;
                    taken += 1;
                }
                lane += 1;
            }
            mask += 1;
        }
        table
    };

    impl Block for Ymm {
        type Vector = __m256i;

        fn vectors(&mut self) -> &mut [__m256i] {
            &mut self.0
        }

        #[inline(always)]
        unsafe fn load(states: &[u32; LANES]) -> Self {
            Ymm(load_quarters(states))
        }

        #[inline(always)]
        unsafe fn store(self, states: &mut [u32; LANES]) {
            store_quarters(self.0, states)
        }

        /// Narrowing packs with unsigned saturation, which keeps every word
        /// that fits `T` unchanged.
        #[inline(always)]
        unsafe fn store_words<T: Word>(self, out: *mut T) {
            let [a, b, c, d] = self.0;
            let out = out as *mut __m256i;
            match size_of::<T>() {
                1 => {
                    // Packing works within 128-bit halves: the 4-byte runs
                    // come out as a0-3 b0-3 c0-3 d0-3 a4-7 b4-7 c4-7 d4-7.
                    let halves =
                        _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
                    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
                    _mm256_storeu_si256(out, _mm256_permutevar8x32_epi32(halves, order));
                }
                2 => {
                    // 8-byte runs a0-3 b0-3 a4-7 b4-7, then the same for c, d.
                    for (i, (lo, hi)) in [(a, b), (c, d)].into_iter().enumerate() {
                        let packed = _mm256_packus_epi32(lo, hi);
                        _mm256_storeu_si256(
                            out.add(i),
                            _mm256_permute4x64_epi64::<0b11_01_10_00>(packed),
                        );
                    }
                }
                _ => {
                    for (i, v) in self.0.into_iter().enumerate() {
                        _mm256_storeu_si256(out.add(i), v);
                    }
                }
            }
        }

        #[inline(always)]
        unsafe fn renormalise(&mut self, data: *const u8) -> usize {
            let mut taken = 0;
            for x in &mut self.0 {
                let need = _mm256_cmpeq_epi32(_mm256_srli_epi32::<16>(*x), _mm256_setzero_si256());
                let bits = _mm256_movemask_ps(_mm256_castsi256_ps(need)) as usize;
                let raw = _mm_loadu_si128(data.add(2 * taken) as *const __m128i);
                // `bits < 256`, and each row holds 8 u32.
                let perm = _mm256_loadu_si256(PERM[bits & 255].as_ptr() as *const __m256i);
                let renormed = _mm256_or_si256(
                    _mm256_slli_epi32::<16>(*x),
                    _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(raw), perm),
                );
                *x = _mm256_blendv_epi8(*x, renormed, need);
                taken += bits.count_ones() as usize;
            }
            taken
        }
    }

    /// A group as two AVX-512 vectors of sixteen lanes.
    #[derive(Clone, Copy)]
    struct Zmm([__m512i; 2]);

    impl Block for Zmm {
        type Vector = __m512i;

        fn vectors(&mut self) -> &mut [__m512i] {
            &mut self.0
        }

        #[inline(always)]
        unsafe fn load(states: &[u32; LANES]) -> Self {
            let at = states.as_ptr();
            Zmm([
                _mm512_loadu_si512(at as *const _),
                _mm512_loadu_si512(at.add(16) as *const _),
            ])
        }

        #[inline(always)]
        unsafe fn store(self, states: &mut [u32; LANES]) {
            let at = states.as_mut_ptr();
            _mm512_storeu_si512(at as *mut _, self.0[0]);
            _mm512_storeu_si512(at.add(16) as *mut _, self.0[1]);
        }

        /// Narrowing truncates, which keeps every word that fits `T`.
        #[inline(always)]
        unsafe fn store_words<T: Word>(self, out: *mut T) {
            for (i, v) in self.0.into_iter().enumerate() {
                match size_of::<T>() {
                    1 => _mm_storeu_si128((out as *mut __m128i).add(i), _mm512_cvtepi32_epi8(v)),
                    2 => {
                        _mm256_storeu_si256((out as *mut __m256i).add(i), _mm512_cvtepi32_epi16(v))
                    }
                    _ => _mm512_storeu_si512((out as *mut __m512i).add(i) as *mut _, v),
                }
            }
        }

        #[inline(always)]
        unsafe fn renormalise(&mut self, data: *const u8) -> usize {
            let low = _mm512_set1_epi32(STATE_LOW as i32);
            let mut taken = 0;
            for x in &mut self.0 {
                let need = _mm512_cmplt_epu32_mask(*x, low);
                let raw = _mm256_loadu_si256(data.add(2 * taken) as *const __m256i);
                let shifted = _mm512_mask_slli_epi32::<16>(*x, need, *x);
                let next = _mm512_maskz_expand_epi32(need, _mm512_cvtepu16_epi32(raw));
                *x = _mm512_or_si512(shifted, next);
                taken += need.count_ones() as usize;
            }
            taken
        }
    }
}

/// The sizing loop of `count_emitted_fast` with AVX2: the 32 lanes are four
/// vectors of eight, each an independent dependency chain. Symbol data comes
/// from gathers; the division is `SizeSymbol::quotient` lane by lane.
#[cfg(target_arch = "x86_64")]
mod avx2_size {
    use super::simd::{load_quarters, store_quarters};
    use super::{SizeSymbol, FIELD, LANES};
    use std::arch::x86_64::*;

    const _: () = assert!(LANES == 32 && std::mem::size_of::<SizeSymbol>() == 8);

    /// How a word finds its `SizeSymbol`.
    pub(super) enum Lookup<'a> {
        /// Indexed by the word itself; the length is a power of two.
        Direct(&'a [SizeSymbol]),
        /// Through a dense rank array of `2^k + 1` entries (the last one
        /// padding), then the symbols by rank.
        Ranked {
            ranks: &'a [u16],
            symbols: &'a [SizeSymbol],
        },
    }

    /// Which blocks of `LANES` words one group of states codes: blocks
    /// `group`, `group + groups`, `group + 2 * groups` and so on.
    #[derive(Clone, Copy)]
    pub(super) struct Blocks {
        pub group: usize,
        pub groups: usize,
    }

    /// Codes the whole blocks of `words` that `blocks` selects (backwards,
    /// as `super::run`) from `states`, and returns the number of
    /// renormalisations. Words are masked to the table size and ranks
    /// clamped to the symbol count, so every gather stays inside its table
    /// whatever the words are.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn count(
        words: &[u32],
        blocks: Blocks,
        lookup: &Lookup,
        scale: u32,
        states: &mut [u32; LANES],
    ) -> usize {
        assert!(words.len().is_multiple_of(LANES) && scale <= 14 && blocks.groups >= 1);
        // (table base, its length) and, for ranked lookups, the rank array.
        let (symbols, ranks) = match *lookup {
            Lookup::Direct(table) => (table, None),
            Lookup::Ranked { ranks, symbols } => (symbols, Some(ranks)),
        };
        assert!(!symbols.is_empty() && symbols.len() <= 1 << 16);
        let word_mask = match ranks {
            None => {
                assert!(symbols.len().is_power_of_two());
                symbols.len() - 1
            }
            Some(ranks) => {
                assert!(ranks.len() >= 2 && (ranks.len() - 1).is_power_of_two());
                assert!(ranks.len() - 1 <= 1 << 16);
                ranks.len() - 2
            }
        };
        let word_mask = _mm256_set1_epi32(word_mask as i32);
        let last_rank = _mm256_set1_epi32(symbols.len() as i32 - 1);
        let low16 = _mm256_set1_epi32(0xffff);
        let field = _mm256_set1_epi32(FIELD as i32);
        let one = _mm256_set1_epi32(1);
        let full_m1 = _mm256_set1_epi32((1i32 << scale) - 1);
        let shift = _mm_cvtsi32_si128(32 - scale as i32);
        let base = symbols.as_ptr() as *const i32;
        let mut x = load_quarters(states);
        let mut count = _mm256_setzero_si256();
        let mine = words.chunks_exact(LANES).skip(blocks.group);
        for chunk in mine.step_by(blocks.groups).rev() {
            for (quarter, x) in x.iter_mut().enumerate() {
                // SAFETY: `chunk` holds 32 words; this reads 8 at `8 * quarter`.
                let w = _mm256_loadu_si256(chunk.as_ptr().add(8 * quarter) as *const __m256i);
                let w = _mm256_and_si256(w, word_mask);
                let id = match ranks {
                    None => w,
                    Some(ranks) => {
                        // SAFETY: each index is at most `ranks.len() - 2`, so
                        // the 4 bytes read at `2 * index` end inside `ranks`.
                        let r = _mm256_i32gather_epi32::<2>(ranks.as_ptr() as *const i32, w);
                        _mm256_min_epu32(_mm256_and_si256(r, low16), last_rank)
                    }
                };
                // SAFETY: every `id` is below `symbols.len()` (masked to it
                // for direct tables, clamped for ranks), and each symbol is
                // 8 bytes: `packed` at offset 0, `magic` at offset 4.
                let a = _mm256_i32gather_epi32::<8>(base, id);
                let m = _mm256_i32gather_epi32::<8>(base.add(1), id);
                // Renormalise: `x >> (32 - scale) > freq - 1` (both < 2^14).
                let fm1 = _mm256_and_si256(a, field);
                let renorm = _mm256_cmpgt_epi32(_mm256_srl_epi32(*x, shift), fm1);
                count = _mm256_sub_epi32(count, renorm);
                let y = _mm256_blendv_epi8(*x, _mm256_srli_epi32::<16>(*x), renorm);
                // t = mulhi(y, magic), even lanes then odd lanes.
                let even = _mm256_mul_epu32(y, m);
                let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(y), _mm256_srli_epi64::<32>(m));
                let t = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
                let l = _mm256_srli_epi32::<28>(a);
                let sh1 = _mm256_min_epu32(l, one);
                let sh2 = _mm256_sub_epi32(l, sh1);
                let half = _mm256_srlv_epi32(_mm256_sub_epi32(y, t), sh1);
                let q = _mm256_srlv_epi32(_mm256_add_epi32(t, half), sh2);
                let start = _mm256_and_si256(_mm256_srli_epi32::<14>(a), field);
                let cmpl = _mm256_sub_epi32(full_m1, fm1);
                let base_state = _mm256_add_epi32(y, start);
                *x = _mm256_add_epi32(base_state, _mm256_mullo_epi32(q, cmpl));
            }
        }
        store_quarters(x, states);
        let mut lanes = [0u32; 8];
        // SAFETY: `lanes` is 32 bytes.
        _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, count);
        lanes.iter().map(|&c| c as usize).sum()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::codec::simd::tests::with_limit;
    use crate::codec::{encode_with, Codec};

    use crate::codec::tests::xorshift;

    #[test]
    fn integer_log2_is_close_to_the_real_one() {
        for shift in 0..32 {
            assert_eq!(log2_q16(1 << shift), (shift as u64) << 16);
        }
        let mut seed = 7;
        for _ in 0..100_000 {
            let x = (xorshift(&mut seed) >> (xorshift(&mut seed) % 64)) as u32 | 1;
            let exact = (x as f64).log2() * 65536.0;
            let got = log2_q16(x) as f64;
            assert!(
                got <= exact && exact - got < 2.0,
                "log2({x}): {got} vs {exact}"
            );
        }
    }

    /// Scale of the model a stream of `counts` (word i repeated counts[i]
    /// times) gets.
    fn model_scale(counts: &[usize]) -> u32 {
        let words: Vec<u32> = counts
            .iter()
            .enumerate()
            .flat_map(|(w, &c)| std::iter::repeat_n(w as u32, c))
            .collect();
        let stats = Stats::new(&words, 8);
        Model::new(applicable(&stats).unwrap(), words.len()).scale
    }

    #[test]
    fn long_streams_take_the_fast_scale_only_when_it_costs_little() {
        // 256 equally likely words: 2^12 represents them exactly.
        assert_eq!(model_scale(&[512; 256]), FAST_SCALE);
        // One word takes almost everything: the rare ones' minimum frequency
        // at 2^12 takes 6% of the dominant word's share, costing far more
        // than the 1/FAST_SCALE_COST allowed.
        let mut skewed = vec![1; 256];
        skewed[0] = 130_000;
        assert_eq!(model_scale(&skewed), MAX_SCALE);
        // Less skewed: 2^12 still costs too much, 2^13 (half the rare words'
        // minimum share) little enough.
        let mut skewed = vec![1; 256];
        skewed[0] = 10_000;
        assert_eq!(model_scale(&skewed), FAST_SCALE + 1);
        // Short streams keep about log2(n) as before.
        assert_eq!(model_scale(&[4; 256]), 10);
    }

    /// The sizing reciprocal equals true division for every frequency a
    /// model can hold, at the edges of every quotient step and of the range.
    #[test]
    fn size_quotient_is_exact() {
        let mut seed = 0x1F83_D9AB_FB41_BD6Bu64;
        for freq in 1..=1u32 << MAX_SCALE {
            let s = SizeSymbol::new(freq, 0);
            assert_eq!(s.packed & FIELD, freq - 1);
            let check = |x: u32| assert_eq!(s.quotient(x), x / freq, "{x} / {freq}");
            for x in [0, 1, freq - 1, freq, freq + 1, u32::MAX, u32::MAX - 1] {
                check(x);
            }
            let top = u32::MAX / freq * freq;
            for x in [
                top,
                top - 1,
                top.wrapping_sub(freq),
                top - freq.min(top) + 1,
            ] {
                check(x);
            }
            for _ in 0..16 {
                let x = xorshift(&mut seed) as u32;
                check(x);
                check(x / freq * freq);
                check((x / freq * freq).wrapping_sub(1));
            }
        }
    }

    /// One step equals the rANS definition (renormalise when at or above the
    /// limit, then `(y / f) * 2^scale + y % f + start`), at the renormalisation
    /// bound and across the state range, for every scale.
    #[test]
    fn size_step_matches_the_encoder_step() {
        let mut seed = 0x6A09_E667_F3BC_C908u64;
        for scale in 0..=MAX_SCALE {
            let mut freqs = vec![1u32, 2, 3, (1 << scale) / 2 + 1, (1 << scale) - 1];
            freqs.extend((0..20).map(|_| 1 + (xorshift(&mut seed) % (1 << scale)) as u32));
            for freq in freqs.into_iter().filter(|&f| f >= 1 && f <= 1 << scale) {
                let start = (xorshift(&mut seed) % ((1u64 << scale) - freq as u64 + 1)) as u32;
                let fast = SizeSymbol::new(freq, start);
                // States at or above this renormalise before coding the symbol.
                let limit = (1u64 << (32 - scale)) * freq as u64;
                let limit_u32 = limit.min(1 << 32);
                let mut xs = vec![STATE_LOW, u32::MAX, (limit_u32 - 1) as u32];
                if limit < 1 << 32 {
                    xs.push(limit as u32);
                }
                xs.extend((0..50).map(|_| (xorshift(&mut seed) as u32).max(STATE_LOW)));
                for x in xs {
                    let renorm = x as u64 >= limit;
                    let y = if renorm { x >> 16 } else { x };
                    let want = ((y / freq) << scale) + y % freq + start;
                    assert_eq!(
                        fast.step(x, scale),
                        (want, renorm),
                        "scale {scale} freq {freq} x {x}"
                    );
                }
            }
        }
    }

    /// Renormalisation counts with `G` groups of the reference encoder loop
    /// and of the fast sizer, with and without SIMD.
    fn counts<const G: usize>(words: &[u32], width: u32) -> (usize, usize, usize) {
        let stats = Stats::new(words, width);
        let alphabet = stats.alphabet().expect("at most 4096 distinct");
        let model = Model::new(alphabet, words.len());
        let reference = count_emitted::<G>(words, alphabet.index(), &model);
        let simd = count_emitted_fast::<G>(words, alphabet, &model);
        let portable = with_limit(Simd::None, || {
            count_emitted_fast::<G>(words, alphabet, &model)
        });
        (reference, simd, portable)
    }

    /// The fast sizer (SIMD and portable, direct and ranked lookups) counts
    /// exactly the renormalisations of the encoder with one group and two
    /// on random streams of many lengths, widths, alphabets and skews, and
    /// `size` equals the encoding's length.
    #[test]
    fn fast_size_matches_the_encoder() {
        let mut seed = 0xBB67_AE85_84CA_A73Bu64;
        let mut lens: Vec<usize> = (1..70).collect();
        lens.extend([127, 128, 129, 159, 160, 161, 255, 256, 257, 1000, 4099]);
        // Long enough for the encoder to take two groups of the wider
        // alphabets (multiples of 7 are sized against the encoder, below).
        lens.extend([32_830, 32_837, 70_000]);
        for &n in &lens {
            for width in [1u32, 2, 7, 8, 11, 12, 13, 16, 20] {
                for alphabet in [1u64, 2, 3, 21, 256, 4096] {
                    let mask = u32::MAX >> (32 - width);
                    let spread = (xorshift(&mut seed) as u32) | 1;
                    let skew = xorshift(&mut seed) % 4;
                    let words: Vec<u32> = (0..n)
                        .map(|_| {
                            let r = xorshift(&mut seed);
                            let sym = match skew {
                                0 => r % alphabet,
                                1 => (r % alphabet) * (r >> 40 & 3) / 3,
                                2 => (r % alphabet).min(r >> 50 & 7),
                                _ => (r % alphabet) >> (r >> 59),
                            };
                            (sym as u32).wrapping_mul(spread) & mask
                        })
                        .collect();
                    let what = format!("n {n} width {width} alphabet {alphabet} skew {skew}");
                    for (reference, simd, portable) in
                        [counts::<1>(&words, width), counts::<2>(&words, width)]
                    {
                        assert_eq!(simd, reference, "{what}");
                        assert_eq!(portable, reference, "{what}");
                    }
                    if n % 7 == 0 {
                        let stats = Stats::new(&words, width);
                        let mut buf = Vec::new();
                        assert!(encode_with(Codec::Rans, &words, width, &mut buf));
                        let size = crate::codec::encoded_size(Codec::Rans, &words, width, &stats);
                        assert_eq!(size, Some(buf.len()), "{what}");
                    }
                }
            }
        }
    }

    /// The fused layout gives every slot the same word, frequency and offset
    /// as the split one, and is used only where all fit (byte words,
    /// frequencies below 2^12), at any scale.
    #[test]
    fn fused_layout_only_where_fields_fit() {
        let set = |words: Vec<u32>, values: Vec<u32>| SymbolSet { words, values };
        let table = |set: &SymbolSet, scale| DecodeTable::<u16>::new(set, scale).expect("valid");
        let is_fused = |t: DecodeTable<u16>| matches!(t.slots, Slots::Fused(_));
        fn agree<const SCALE: u32>(fused: &Slots<u16>, split: &Slots<u16>) {
            let fused = Lookup::<SCALE, u16>::new(fused);
            let split = Lookup::<SCALE, u16>::new(split);
            assert!(matches!(fused, Lookup::Fused(_)) && matches!(split, Lookup::Split(..)));
            for slot in 0..1 << SCALE {
                assert_eq!(
                    fused.get(slot),
                    split.get(slot),
                    "scale {SCALE} slot {slot}"
                );
            }
        }
        let bytes = set(vec![3, 200, 255], vec![1, 4094, 1]);
        agree::<12>(&table(&bytes, 12).slots, &Slots::split(&bytes, 1 << 12));
        let wide = set(vec![0, 9, 17, 254, 255], vec![4095, 4095, 4095, 4095, 4]);
        agree::<14>(&table(&wide, 14).slots, &Slots::split(&wide, 1 << 14));
        // A frequency of 2^12 (a lone symbol, or one at scale 14) or a word
        // above a byte does not fit.
        assert!(!is_fused(table(&set(vec![7], vec![4096]), 12)));
        assert!(!is_fused(table(&set(vec![0, 1], vec![4096, 12288]), 14)));
        assert!(!is_fused(table(&set(vec![0, 256], vec![2048, 2048]), 12)));
    }

    /// Both SIMD lookups agree with the scalar loop on long streams whose
    /// states sweep the whole range, including all-equal and extreme models.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_lookups_agree() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut seed = 0x3C6E_F372_FE94_F82Bu64;
        for (width, alphabet, n) in [
            (8u32, 256u64, 70_016usize),
            (8, 2, 4096),
            (8, 1, 4096),
            (12, 4096, 40_000),
            (7, 128, 3200),
            (16, 3000, 65_536),
        ] {
            let words: Vec<u32> = (0..n)
                .map(|_| {
                    let r = xorshift(&mut seed);
                    ((r % alphabet) >> (r >> 61)) as u32
                })
                .collect();
            let stats = Stats::new(&words, width);
            let alph = stats.alphabet().unwrap();
            let model = Model::new(alph, n);
            let symbols = size_symbols(&model);
            let one = count_emitted::<1>(&words, alph.index(), &model);
            let two = count_emitted::<2>(&words, alph.index(), &model);
            let mut direct = vec![SizeSymbol::default(); 1 << width];
            for (&w, &s) in alph.words.iter().zip(&symbols) {
                direct[w as usize] = s;
            }
            let ranked = avx2_size::Lookup::Ranked {
                ranks: alph.index().dense_ranks().unwrap(),
                symbols: &symbols,
            };
            let whole = n - n % LANES;
            assert_eq!(whole, n, "the test streams are whole groups");
            for lookup in [avx2_size::Lookup::Direct(&direct), ranked] {
                let count = |group, groups| {
                    let blocks = avx2_size::Blocks { group, groups };
                    let mut states = [STATE_LOW; LANES];
                    // SAFETY: the CPU supports AVX2, as checked above.
                    unsafe { avx2_size::count(&words, blocks, &lookup, model.scale, &mut states) }
                };
                let what = format!("width {width} alphabet {alphabet}");
                assert_eq!(count(0, 1), one, "{what}");
                assert_eq!(count(0, 2) + count(1, 2), two, "{what}");
            }
        }
    }

    /// Decodes `buf` with every decoder up to `limit` (the SIMD one for the
    /// bulk, then the portable one), into every word type that fits `width`
    /// (which must agree).
    fn decode_with(
        buf: &[u8],
        width: u32,
        n: usize,
        limit: Simd,
    ) -> Result<Vec<u32>, &'static str> {
        let result = with_limit(limit, || crate::codec::tests::decode_all(buf, width, n));
        result.map(|(out, _)| out).map_err(|e| e.reason)
    }

    /// A long byte stream with many rare words takes scale 14 (scale 12
    /// would cost the common words too much), and its table the fused
    /// layout while no frequency reaches 2^12; every decoder agrees on it.
    #[test]
    fn fused_tables_above_scale_12_decode_alike() {
        let mut seed = 0x6A09_E667_F3BC_C908u64;
        let mut words: Vec<u32> = (0..70_000)
            .map(|_| (xorshift(&mut seed) % 12) as u32)
            .collect();
        for (i, rare) in (12..252).enumerate() {
            words[i * 291] = rare;
        }
        let mut buf = Vec::new();
        assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
        let (scale, _) = head_fields(buf[1]);
        assert_eq!(scale, 14);
        let mut r = Reader::new(&buf[2..]);
        let set = symbols::read(&mut r, 8, Values::Varints, 1 << scale).expect("symbols");
        let table = DecodeTable::<u8>::new(&set, scale).expect("table");
        assert!(matches!(table.slots, Slots::Fused(_)));
        for level in simd_levels() {
            assert_eq!(decode_with(&buf, 8, words.len(), level), Ok(words.clone()));
        }
    }

    /// Every SIMD level this CPU has.
    fn simd_levels() -> Vec<Simd> {
        [Simd::None, Simd::Avx2, Simd::Avx512]
            .into_iter()
            .filter(|&l| with_limit(l, simd_level) == l)
            .collect()
    }

    /// Encodes `words` with `G` groups of lanes, tag included, as the
    /// encoder would if it chose `G` for this length.
    fn encode_groups_with_tag<const G: usize>(words: &[u32], width: u32) -> Option<Vec<u8>> {
        let stats = Stats::new(words, width);
        let mut buf = vec![Codec::Rans.tag()];
        let alphabet = applicable(&stats)?;
        let model = Model::new(alphabet, words.len());
        encode_groups::<G>(words, alphabet, &model, &mut buf);
        Some(buf)
    }

    /// A stream takes two groups when the extra states cost at most
    /// 1/GROUP_COST of its estimated size; the head byte says which, and
    /// each lane used stores a state.
    #[test]
    fn streams_take_two_groups_when_the_states_cost_little() {
        // 128 bytes of states for the second group.
        let enough = ((128 * GROUP_COST) * 8) << 16;
        assert_eq!(group_count(0), 1);
        assert_eq!(group_count(enough - 1), 1);
        assert_eq!(group_count(enough), 2);
        assert_eq!(group_count(enough << 20), 2);
        // Near-uniform bytes cost about one byte per word.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for (n, groups_log2) in [(20_000, 0), (40_000, 1)] {
            let words: Vec<u32> = (0..n).map(|_| xorshift(&mut seed) as u32 & 0xff).collect();
            let mut buf = Vec::new();
            assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
            assert_eq!(head_fields(buf[1]).1, groups_log2, "n {n}");
            let forced = match groups_log2 {
                0 => encode_groups_with_tag::<1>(&words, 8),
                _ => encode_groups_with_tag::<2>(&words, 8),
            };
            assert_eq!(Some(buf), forced, "n {n}");
        }
        let words = [3u32; 40];
        let one = encode_groups_with_tag::<1>(&words, 8).unwrap();
        let two = encode_groups_with_tag::<2>(&words, 8).unwrap();
        assert_eq!(two.len() - one.len(), 4 * 8, "8 more lanes hold a state");
        // A head asking for four groups is refused.
        let mut four = two.clone();
        four[1] += 1 << GROUPS_SHIFT;
        assert_eq!(
            decode_with(&four, 8, 40, Simd::None),
            Err("rans lane groups above 2")
        );
    }

    /// The AVX-512, AVX2 and portable decoders agree on valid streams of
    /// every length around the block and round sizes, with one group and
    /// two, and every scale, and on corrupt ones (same words or same
    /// error), including truncated renormalisation data, storing 8-, 16- and
    /// 32-bit words.
    #[test]
    fn simd_and_portable_decoders_agree() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut lens: Vec<usize> = (0..70).collect();
        lens.extend([95, 96, 97, 127, 128, 129, 160, 191, 192, 193, 255, 256, 257]);
        lens.extend([383, 384, 385, 1000, 4099, 70_000]);
        let cases = [
            (8, 1u64),
            (8, 2),
            (8, 21),
            (8, 256),
            (16, 2),
            (16, 256),
            (16, 3000),
            (32, 2),
            (32, 3000),
        ];
        let levels = simd_levels();
        println!("SIMD levels tested: {levels:?}");
        for &n in &lens {
            for (width, alphabet) in cases {
                let words: Vec<u32> = (0..n)
                    .map(|_| {
                        let r = xorshift(&mut seed);
                        // Skewed, so some lanes renormalise and others not;
                        // spread over all 32 bits in the widest case.
                        let w = ((r % alphabet) * (r >> 40 & 3) / 3) as u32;
                        if width == 32 {
                            w.wrapping_mul(0x9E37_79B1)
                        } else {
                            w
                        }
                    })
                    .collect();
                let encoded = [
                    encode_groups_with_tag::<1>(&words, width),
                    encode_groups_with_tag::<2>(&words, width),
                ];
                let Some(encoded) = encoded.into_iter().collect::<Option<Vec<_>>>() else {
                    assert_eq!(n, 0, "rans applies to every non-empty stream");
                    continue;
                };
                for buf in &encoded {
                    for &level in &levels {
                        assert_eq!(decode_with(buf, width, n, level).as_ref(), Ok(&words));
                    }
                }
                // Corrupt each group count in turn.
                let buf = &encoded[n % 2];
                for _ in 0..4 {
                    let mut bad = buf.clone();
                    let at = (xorshift(&mut seed) as usize) % bad.len();
                    bad[at] ^= 1 << (xorshift(&mut seed) % 8);
                    let cut = bad.len() - (xorshift(&mut seed) as usize % 3);
                    for input in [&bad[..], &bad[..cut]] {
                        let portable = decode_with(input, width, n, Simd::None);
                        for &level in &levels {
                            assert_eq!(
                                decode_with(input, width, n, level),
                                portable,
                                "n {n} width {width} alphabet {alphabet} {level:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
