//! rANS: static range asymmetric numeral systems over the stream's distinct
//! words, with eight interleaved 32-bit states so the decoder has eight
//! independent dependency chains.
//!
//! Word `i` is coded by lane `i % 8`. States live in `[2^16, 2^32)` and
//! renormalise by whole 16-bit words, which all lanes share in one stream.
//! The encoder runs backwards, so the decoder reads that stream forwards.

use super::index::SymbolIndex;
use super::stats::Alphabet;
use super::symbols::{self, SymbolSet, Values};
use super::Stats;
use crate::wire::{put_varint, varint_len, Reader, WireError};

const LANES: usize = 8;
/// Lower bound of a normalised state; also every lane's initial state.
const STATE_LOW: u32 = 1 << 16;
/// Frequencies sum to 2^scale with scale <= 14, so `2^(32 - scale) * freq`
/// bounds stay >= 2^18 and one 16-bit renormalisation always suffices.
const MAX_SCALE: u32 = 14;

fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 1)
}

/// Number of lanes that code at least one word (only those store a state).
fn used_lanes(n: usize) -> usize {
    n.min(LANES)
}

fn ceil_log2(x: usize) -> u32 {
    usize::BITS - x.saturating_sub(1).leading_zeros()
}

/// Quantised frequencies summing to `2^scale`, per symbol rank.
struct Model {
    scale: u32,
    freqs: Vec<u32>,
}

impl Model {
    /// The scale is about log2(n): a finer one would cost table bytes that a
    /// short stream cannot recoup. A single word needs no precision at all.
    fn new(alphabet: &Alphabet, n: usize) -> Model {
        let scale = if alphabet.len() == 1 {
            0
        } else {
            ceil_log2(n).clamp(ceil_log2(alphabet.len()), MAX_SCALE)
        };
        let freqs = normalize(&alphabet.totals(), n as u64, scale);
        Model { scale, freqs }
    }
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

/// What the encoder needs per symbol.
struct EncSymbol {
    freq: u32,
    start: u32,
    /// States at or above this must renormalise before coding the symbol.
    limit: u64,
}

fn enc_symbols(model: &Model) -> Vec<EncSymbol> {
    let mut start = 0;
    model
        .freqs
        .iter()
        .map(|&freq| {
            let s = EncSymbol {
                freq,
                start,
                limit: (1u64 << (32 - model.scale)) * freq as u64,
            };
            start += freq;
            s
        })
        .collect()
}

/// Encodes `words` backwards, handing each renormalisation word to `emit`, and
/// returns the final states. Used both to size and to encode.
fn run(
    words: &[u32],
    index: &SymbolIndex,
    symbols: &[EncSymbol],
    scale: u32,
    mut emit: impl FnMut(u16),
) -> [u32; LANES] {
    let mut states = [STATE_LOW; LANES];
    let mut put = |x: &mut u32, w: u32| {
        let s = &symbols[index.rank(w)];
        if *x as u64 >= s.limit {
            emit(*x as u16);
            *x >>= 16;
        }
        *x = ((*x / s.freq) << scale) + *x % s.freq + s.start;
    };
    let whole = words.len() - words.len() % LANES;
    for (lane, &w) in words[whole..].iter().enumerate().rev() {
        put(&mut states[lane], w);
    }
    for chunk in words[..whole].chunks_exact(LANES).rev() {
        for lane in (0..LANES).rev() {
            put(&mut states[lane], chunk[lane]);
        }
    }
    states
}

/// Payload size in bytes (without the tag): runs the coder without output,
/// since the renormalisation count depends on the exact state sequence.
pub(super) fn size(words: &[u32], stats: &Stats) -> Option<usize> {
    let alphabet = applicable(stats)?;
    let model = Model::new(alphabet, words.len());
    let mut emitted = 0usize;
    let symbols = enc_symbols(&model);
    run(words, alphabet.index(), &symbols, model.scale, |_| {
        emitted += 1
    });
    let table = symbols::size(&alphabet.words, &model.freqs, Values::Varints);
    Some(1 + table + 4 * used_lanes(words.len()) + varint_len(emitted as u64) + 2 * emitted)
}

pub(super) fn encode(words: &[u32], stats: &Stats, out: &mut Vec<u8>) -> bool {
    let Some(alphabet) = applicable(stats) else {
        return false;
    };
    let model = Model::new(alphabet, words.len());
    out.push(model.scale as u8);
    symbols::write(&alphabet.words, &model.freqs, Values::Varints, out);
    let mut emitted = Vec::new();
    let symbols = enc_symbols(&model);
    let states = run(words, alphabet.index(), &symbols, model.scale, |w| {
        emitted.push(w)
    });
    for state in &states[..used_lanes(words.len())] {
        out.extend_from_slice(&state.to_le_bytes());
    }
    put_varint(out, emitted.len() as u64);
    out.reserve(2 * emitted.len());
    for w in emitted.iter().rev() {
        out.extend_from_slice(&w.to_le_bytes());
    }
    true
}

/// Slot -> symbol tables for a validated model.
struct DecodeTable {
    scale: u32,
    mask: u32,
    /// `freq << 16 | (slot - start)` of the symbol owning each slot.
    entries: Vec<u32>,
    /// The word owning each slot.
    words: Vec<u32>,
}

impl DecodeTable {
    /// Fails unless the frequencies (each >= 1) sum to exactly `2^scale`.
    fn new(set: &SymbolSet, scale: u32) -> Option<DecodeTable> {
        let size = 1usize << scale;
        if set.values.iter().map(|&f| f as u64).sum::<u64>() != size as u64 {
            return None;
        }
        let mut entries = Vec::with_capacity(size);
        let mut words = Vec::with_capacity(size);
        for (&word, &freq) in set.words.iter().zip(&set.values) {
            entries.extend((0..freq).map(|offset| freq << 16 | offset));
            words.extend(std::iter::repeat_n(word, freq as usize));
        }
        Some(DecodeTable {
            scale,
            mask: size as u32 - 1,
            entries,
            words,
        })
    }

    /// Decodes one word from state `x`, leaving the state un-renormalised.
    /// For a state in `[2^16, 2^32)` no overflow is possible:
    /// `freq * (x >> scale) + offset < freq * ((x >> scale) + 1) <= 2^32`.
    #[inline(always)]
    fn step(&self, x: &mut u32) -> u32 {
        let slot = (*x & self.mask) as usize;
        let entry = self.entries[slot];
        *x = (entry >> 16) * (*x >> self.scale) + (entry & 0xffff);
        self.words[slot]
    }
}

/// Renormalises the lanes in lane order, each taking the next word if its
/// state fell below 2^16 (then it is >= 4, so one word restores the range).
/// Branch-free, and the word positions form a short add chain instead of
/// each load waiting for the previous lane's.
#[inline(always)]
fn renormalise(states: &mut [u32], src: &mut Source) {
    let mut pos = src.pos;
    for x in states {
        let renorm = *x < STATE_LOW;
        let next = *x << 16 | src.word_at(pos);
        *x = if renorm { next } else { *x };
        pos += renorm as usize;
    }
    src.pos = pos;
}

/// The shared renormalisation words; past the end it yields zeros while the
/// position keeps counting, so an overrun is detected afterwards.
struct Source<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Source<'_> {
    /// The word at `pos`, or 0 past the end.
    #[inline(always)]
    fn word_at(&self, pos: usize) -> u32 {
        let at = 2 * pos;
        match self.data.get(at..at + 2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as u32,
            None => 0,
        }
    }
}

pub(super) fn decode(r: &mut Reader, width: u32, out: &mut [u32]) -> Result<(), WireError> {
    let scale = r.u8()? as u32;
    if scale > MAX_SCALE {
        return Err(r.error("rans scale above 14"));
    }
    let set = symbols::read(r, width, Values::Varints, 1 << scale)?;
    let table = DecodeTable::new(&set, scale)
        .ok_or_else(|| r.error("rans frequencies do not sum to 2^scale"))?;
    let mut states = [STATE_LOW; LANES];
    for state in &mut states[..used_lanes(out.len())] {
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
    let mut src = Source {
        data: r.bytes(2 * count)?,
        pos: 0,
    };
    decode_lanes(&mut states, &table, &mut src, out);
    if src.pos != count {
        return Err(WireError {
            at,
            reason: "rans data not consumed exactly",
        });
    }
    if states != [STATE_LOW; LANES] {
        return Err(r.error("rans final state does not match the initial state"));
    }
    Ok(())
}

fn decode_lanes(states: &mut [u32; LANES], table: &DecodeTable, src: &mut Source, out: &mut [u32]) {
    let mut chunks = out.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (o, x) in chunk.iter_mut().zip(states.iter_mut()) {
            *o = table.step(x);
        }
        renormalise(states, src);
    }
    let tail = chunks.into_remainder();
    for (o, x) in tail.iter_mut().zip(states.iter_mut()) {
        *o = table.step(x);
    }
    renormalise(&mut states[..tail.len()], src);
}
