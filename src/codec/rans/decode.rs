//! The decoder of rANS literals (docs/FORMAT.md, "rANS (tag 3)" and "rANS
//! (tag 4, version 6)"): a stream's head and table, checked, then its words,
//! portably (specialised per scale) or, for the bulk of a long stream, with
//! the SIMD decoders where the CPU has them.

use std::ops::Range;

use super::dest::Dest;
use super::freqs::table_freqs;
use super::layout::{head_fields, used_lanes, Form, Groups, LANES, MAX_SCALE, STATE_LOW};
#[cfg(target_arch = "x86_64")]
use super::simd_decode;
use super::table::{DecodeTable, Lookup};
use crate::codec::simd::{level as simd_level, Simd};
use crate::codec::symbols::{self, SymbolSet, Values};
use crate::codec::word::Word;
use crate::wire::{Reader, WireError};

/// Decodes one word from state `x`, leaving the state un-renormalised. For
/// a state in `[2^16, 2^32)` no overflow is possible:
/// `freq * (x >> SCALE) + offset < freq * ((x >> SCALE) + 1) <= 2^32`.
#[inline(always)]
pub(super) fn step<const SCALE: u32, T: Word>(lookup: Lookup<'_, SCALE>, x: &mut u32) -> T {
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
pub(super) fn renormalise_fast(states: &mut [u32; LANES], window: &[u8; 2 * LANES]) -> usize {
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
pub(super) fn renormalise_slow(
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

/// A stream's head and table, read and checked: its scale, the log2 of
/// its lane groups, its words with their frequencies, and its form.
pub(in crate::codec) struct Head {
    scale: u32,
    groups_log2: u8,
    set: SymbolSet,
    form: Form,
}

impl Head {
    /// Whether the stream is of tag 4, whose states may start seeded.
    pub(in crate::codec) fn seeded(&self) -> bool {
        self.form == Form::Seeded
    }
}

/// Decodes a stream's words (after its head and table) with `head`, from
/// `r`: the same reader for a literal that holds its table, another for
/// one whose table is shared.
pub(in crate::codec) fn decode_words<T: Word, D: Dest<T> + ?Sized>(
    r: &mut Reader,
    head: &Head,
    out: &mut D,
) -> Result<(), WireError> {
    let table = DecodeTable::new(&head.set, head.scale)
        .ok_or_else(|| r.error("rans frequencies do not sum to 2^scale"))?;
    if head.groups_log2 == 1 {
        decode_groups::<T, 2, D>(r, &table, out, head.form)
    } else {
        decode_groups::<T, 1, D>(r, &table, out, head.form)
    }
}

/// A stream's head and table (after the tag), checked.
pub(in crate::codec) fn read_table(
    r: &mut Reader,
    width: u32,
    form: Form,
) -> Result<Head, WireError> {
    let (scale, groups_log2, precision) = head_fields(r.u8()?, form);
    if scale > MAX_SCALE {
        return Err(r.error("rans scale above 14"));
    }
    if groups_log2 > 1 {
        return Err(r.error("rans lane groups above 2"));
    }
    let set = match form {
        Form::Varints => symbols::read(r, width, Values::Varints, 1 << scale)?,
        Form::Seeded => {
            let mut set = symbols::read(r, width, Values::Rounded(precision), u32::MAX)?;
            if set.words.len() > 1 << scale {
                return Err(r.error("rans table has more words than slots"));
            }
            set.values = table_freqs(&set.values, scale);
            set
        }
    };
    Ok(Head {
        scale,
        groups_log2,
        set,
        form,
    })
}

/// Reads the states, seed count and renormalisation words of a stream with
/// `G` groups of lanes, and decodes it with `table`.
pub(super) fn decode_groups<T: Word, const G: usize, D: Dest<T> + ?Sized>(
    r: &mut Reader,
    table: &DecodeTable,
    out: &mut D,
    form: Form,
) -> Result<(), WireError> {
    let n = out.words();
    let mut groups = [[STATE_LOW; LANES]; G];
    for state in &mut groups.as_flattened_mut()[..used_lanes(n, G)] {
        let at = r.pos();
        *state = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes"));
        if *state < STATE_LOW {
            return Err(WireError {
                at,
                reason: "rans state below 2^16",
            });
        }
    }
    let seeded = match form {
        Form::Varints => 0,
        Form::Seeded => {
            let most = n as u64;
            r.varint_max(most, "rans seeds more words than the stream has")? as usize
        }
    };
    let max_words = r.remaining() as u64 / 2;
    let count = r.varint_max(max_words, "rans data runs past the end of data")? as usize;
    let at = r.pos();
    let data = r.bytes(2 * count)?;
    let coded = n - seeded;
    if decode_any_scale(&mut groups, table, data, out, coded) != count {
        return Err(WireError {
            at,
            reason: "rans data not consumed exactly",
        });
    }
    if !out.with_words(coded..n, |seeds| unseed(&mut groups, table, coded, seeds)) {
        return Err(r.error("rans state below 2^16 before its seeded words"));
    }
    if groups.as_flattened().iter().any(|&x| x != STATE_LOW) {
        return Err(r.error("rans final state does not match the initial state"));
    }
    Ok(())
}

/// Decodes the seeded words `seeds`, words `first..` of the stream, from
/// their lanes' states `STATE_LOW + v`: each steps `v` as the coder steps a
/// state, without renormalising. False if a state is below `STATE_LOW`.
fn unseed<T: Word, const G: usize>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    first: usize,
    seeds: &mut [T],
) -> bool {
    let mask = (1 << table.scale) - 1;
    for (i, o) in (first..).zip(seeds) {
        let x = &mut groups[(i / LANES) % G][i % LANES];
        let Some(v) = x.checked_sub(STATE_LOW) else {
            return false;
        };
        let (freq, offset, word) = table.entry((v & mask) as usize);
        // At most `v`, as `freq <= 2^scale`: no overflow.
        *x = STATE_LOW + freq * (v >> table.scale) + offset;
        *o = T::from_u32(word);
    }
    true
}

/// Decodes the first `end` words of `out` and returns how many
/// renormalisation words it read (possibly more than `data` holds, when
/// the input is corrupt). Uses a SIMD decoder for the bulk when the CPU
/// has one, then the portable one specialised for the table's scale, so
/// that the shift and mask are constants and the table index needs no
/// bounds check.
pub(super) fn decode_any_scale<T: Word, const G: usize, D: Dest<T> + ?Sized>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    end: usize,
) -> usize {
    let (done, pos) = decode_bulk_simd(groups, table, data, out, end);
    macro_rules! dispatch {
        ($out:ident, $($scale:literal)*) => {
            match table.scale {
                $($scale => decode_lanes::<$scale, T, G>(groups, table, data, pos, $out),)*
                _ => unreachable!("rans scale is validated to be at most 14"),
            }
        };
    }
    const _: () = assert!(MAX_SCALE == 14);
    out.with_words(
        done..end,
        |rest| dispatch!(rest, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    )
}

/// Decodes whole rounds of `G * LANES` of the first `end` words of `out`
/// (one block per group) with SIMD; returns the words decoded and the
/// words read. Does nothing without AVX2.
#[inline]
pub(super) fn decode_bulk_simd<T: Word, const G: usize, D: Dest<T> + ?Sized>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    end: usize,
) -> (usize, usize) {
    let (done, pos) = simd_rounds(groups, table, data, out, 0..end);
    // The SIMD loop stops where a round could read past `data`, which in a
    // stream of a few bits a word leaves thousands of words to the portable
    // decoder. The rounds left decode from a copy of the rest padded with
    // zeros, which is what the portable decoder reads past the end, so a
    // corrupt stream decodes to the same words and the same count. (A rest
    // of a round or more means there is no SIMD decoder; an odd last byte is
    // no word to the portable decoder, so it is left out.)
    let rest = &data[2 * pos..data.len() & !1];
    if end - done < G * LANES || rest.len() >= 2 * G * LANES {
        return (done, pos);
    }
    let mut padded = [0u8; 4 * 2 * LANES];
    let padded = &mut padded[..rest.len() + 2 * G * LANES];
    padded[..rest.len()].copy_from_slice(rest);
    let (more, read) = simd_rounds(groups, table, padded, out, done..end);
    (done + more, pos + read)
}

/// Whole rounds of the words `words` of `out` with SIMD while a full round
/// of renormalisation words remains in `data`.
#[inline]
fn simd_rounds<T: Word, const G: usize, D: Dest<T> + ?Sized>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    words: Range<usize>,
) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    match simd_level() {
        Simd::Avx512 => {
            // SAFETY: `simd_level` checked that the CPU has these features.
            return unsafe { simd_decode::decode_avx512(groups, table, data, out, words) };
        }
        Simd::Avx2 => {
            // SAFETY: as above.
            return unsafe { simd_decode::decode_avx2(groups, table, data, out, words) };
        }
        Simd::None => {}
    }
    let _ = (groups, table, data, out, words);
    (0, 0)
}

/// Decodes `out.len()` words with tables of `2^SCALE` entries, starting at
/// renormalisation word `pos` with a block of group 0, and returns how many
/// words were read in all.
pub(super) fn decode_lanes<const SCALE: u32, T: Word, const G: usize>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    mut pos: usize,
    out: &mut [T],
) -> usize {
    let lookup = Lookup::<SCALE>::new(&table.slots);
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
pub(super) fn step_block<const SCALE: u32, T: Word>(
    lookup: Lookup<'_, SCALE>,
    block: &mut [T],
    states: &mut [u32; LANES],
) {
    for (o, x) in block.iter_mut().zip(states.iter_mut()) {
        *o = step(lookup, x);
    }
}
