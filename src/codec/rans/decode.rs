//! Decoding tables and the portable decoder, specialised per scale; the bulk
//! of a long stream goes to the SIMD decoders where the CPU has them.

use super::*;
use std::ops::Range;

/// Slot -> symbol tables for a validated model, of exactly `2^scale` entries.
pub(super) struct DecodeTable {
    pub(super) scale: u32,
    pub(super) slots: Slots,
}

/// What each slot decodes to, in one of two layouts.
pub(super) enum Slots {
    /// `word << 24 | freq << 12 | (slot - start)`, where all three fit: byte
    /// words, frequencies below 2^12 (at any scale, as `slot - start <
    /// freq`). One lookup per step of 4 bytes. SIMD decoders are bound by
    /// their gathers: one 4-byte lookup instead of two (a word table and a
    /// `freq, offset` table) decodes faster, though its table (64 KiB at
    /// scale 14) no longer fits the L1 cache. Tables that do fit it at 14 (a
    /// byte word per slot, 16 KiB, and `freq, start` per word) decode slower
    /// than this one: the second lookup waits for the first, and the SIMD
    /// loop is bound by that latency.
    Fused(Vec<u32>),
    /// `word << 32 | freq << 16 | (slot - start)` for every other model
    /// (`freq <= 2^14` and `slot - start < 2^14` each fit 16 bits): still
    /// one lookup per step, of 8 bytes. Gathering 8-byte entries loads half
    /// as many elements as two 4-byte gathers from separate word and
    /// `freq, offset` tables, so 16-bit words decode faster.
    Wide(Vec<u64>),
}

/// Whether the fused layout holds every symbol of a model.
pub(super) fn fits_fused(set: &SymbolSet) -> bool {
    const FUSED_FIELD: u32 = (1 << 12) - 1;
    set.words
        .iter()
        .zip(&set.values)
        .all(|(&w, &f)| w <= 0xff && f <= FUSED_FIELD)
}

impl DecodeTable {
    /// Fails unless the frequencies (each >= 1) sum to exactly `2^scale`.
    /// Takes the fused layout wherever it fits.
    pub(super) fn new(set: &SymbolSet, scale: u32) -> Option<DecodeTable> {
        let size = 1usize << scale;
        if set.values.iter().map(|&f| f as u64).sum::<u64>() != size as u64 {
            return None;
        }
        let slots = if fits_fused(set) {
            Slots::fused(set, size)
        } else {
            Slots::wide(set, size)
        };
        Some(DecodeTable { scale, slots })
    }
}

impl Slots {
    /// The fused layout of `size` slots; every symbol must fit it. Tables
    /// are built for every rANS stream decoded (each class of a Partition
    /// has its own), so with AVX-512 where the CPU has it. Panics unless
    /// the frequencies sum to `size`.
    pub(super) fn fused(set: &SymbolSet, size: usize) -> Slots {
        #[cfg(target_arch = "x86_64")]
        if simd_level() >= Simd::Avx512 {
            // SAFETY: `simd_level` checked that the CPU has AVX-512F.
            return Slots::Fused(unsafe { simd_decode::fused_slots_avx512(set, size) });
        }
        Slots::Fused(fused_slots(set, size))
    }

    /// The wide layout of `size` slots, as [`Slots::fused`] builds it.
    pub(super) fn wide(set: &SymbolSet, size: usize) -> Slots {
        #[cfg(target_arch = "x86_64")]
        if simd_level() >= Simd::Avx512 {
            // SAFETY: `simd_level` checked that the CPU has AVX-512F.
            return Slots::Wide(unsafe { simd_decode::wide_slots_avx512(set, size) });
        }
        Slots::Wide(wide_slots(set, size))
    }
}

/// A fused slot's fields above its offset: `word << 24 | freq << 12`.
pub(super) fn fused_high(word: u32, freq: u32) -> u32 {
    word << 24 | freq << 12
}

/// A wide slot's fields above its offset: `word << 32 | freq << 16`.
pub(super) fn wide_high(word: u32, freq: u32) -> u64 {
    u64::from(word) << 32 | u64::from(freq) << 16
}

/// The slots of [`Slots::fused`] one at a time.
pub(super) fn fused_slots(set: &SymbolSet, size: usize) -> Vec<u32> {
    slots_one_at_a_time(set, size, fused_high)
}

/// The slots of [`Slots::wide`] one at a time.
pub(super) fn wide_slots(set: &SymbolSet, size: usize) -> Vec<u64> {
    slots_one_at_a_time(set, size, wide_high)
}

/// Each symbol's `high(word, freq)` or'd with its offsets `0..freq`, in
/// symbol order; panics unless the frequencies sum to `size`.
fn slots_one_at_a_time<E>(set: &SymbolSet, size: usize, high: fn(u32, u32) -> E) -> Vec<E>
where
    E: Copy + From<u32> + std::ops::BitOr<Output = E>,
{
    let mut table = Vec::with_capacity(size);
    for (&word, &freq) in set.words.iter().zip(&set.values) {
        let high = high(word, freq);
        table.extend((0..freq).map(|offset| high | E::from(offset)));
    }
    assert_eq!(table.len(), size, "frequencies sum to the table's size");
    table
}

/// A table's slots for the portable decoder, cut to exactly `2^SCALE`
/// entries so that indexing by `x mod 2^SCALE` needs no bounds check.
#[derive(Clone, Copy)]
pub(super) enum Lookup<'a, const SCALE: u32> {
    Fused(&'a [u32]),
    Wide(&'a [u64]),
}

impl<'a, const SCALE: u32> Lookup<'a, SCALE> {
    pub(super) fn new(slots: &'a Slots) -> Self {
        let size = 1 << SCALE;
        match slots {
            Slots::Fused(table) => Lookup::Fused(&table[..size]),
            Slots::Wide(table) => Lookup::Wide(&table[..size]),
        }
    }

    /// `(freq, slot - start, word)` of `slot < 2^SCALE`.
    #[inline(always)]
    pub(super) fn get<T: Word>(self, slot: usize) -> (u32, u32, T) {
        let (freq, offset, word) = match self {
            Lookup::Fused(table) => unpack_fused(table[slot]),
            Lookup::Wide(table) => unpack_wide(table[slot]),
        };
        (freq, offset, T::from_u32(word))
    }
}

/// `(freq, slot - start, word)` of a fused slot entry.
#[inline(always)]
fn unpack_fused(e: u32) -> (u32, u32, u32) {
    (e >> 12 & 0xfff, e & 0xfff, e >> 24)
}

/// `(freq, slot - start, word)` of a wide slot entry.
#[inline(always)]
fn unpack_wide(e: u64) -> (u32, u32, u32) {
    (e as u32 >> 16, e as u32 & 0xffff, (e >> 32) as u32)
}

impl DecodeTable {
    /// `(freq, slot - start, word)` of `slot < 2^scale`.
    fn entry(&self, slot: usize) -> (u32, u32, u32) {
        match &self.slots {
            Slots::Fused(table) => unpack_fused(table[slot]),
            Slots::Wide(table) => unpack_wide(table[slot]),
        }
    }
}

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

pub(in crate::codec) fn decode<T: Word, D: Dest<T> + ?Sized>(
    r: &mut Reader,
    width: u32,
    out: &mut D,
    form: Form,
) -> Result<(), WireError> {
    let (scale, groups_log2, set) = read_table(r, width, form)?;
    let table = DecodeTable::new(&set, scale)
        .ok_or_else(|| r.error("rans frequencies do not sum to 2^scale"))?;
    if groups_log2 == 1 {
        decode_groups::<T, 2, D>(r, &table, out, form)
    } else {
        decode_groups::<T, 1, D>(r, &table, out, form)
    }
}

/// A stream's head and table (after the tag), checked: its scale, the log2
/// of its lane groups, and its words with their frequencies.
pub(in crate::codec) fn read_table(
    r: &mut Reader,
    width: u32,
    form: Form,
) -> Result<(u32, u8, SymbolSet), WireError> {
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
            let mut set = symbols::read(r, width, Values::Shape(precision), u32::MAX)?;
            if set.words.len() > 1 << scale {
                return Err(r.error("rans table has more words than slots"));
            }
            set.values = table_freqs(&set.values, scale);
            set
        }
    };
    Ok((scale, groups_log2, set))
}

/// Where a stream's words go: a slice, in order, or the rows of a
/// Partition's class ([`Rows`]). Spans of whole rounds (`G * LANES`
/// words from a multiple of that) are written in place by the SIMD
/// decoders; the rest through [`Dest::with_words`].
pub(in crate::codec) trait Dest<T> {
    /// Words of the stream.
    fn words(&self) -> usize;
    /// The slots of words `start..start + len`, a whole round.
    fn span(&mut self, start: usize, len: usize) -> &mut [T];
    /// Runs `f` on slots for the words of `range`, and puts them in place.
    fn with_words<R>(&mut self, range: Range<usize>, f: impl FnOnce(&mut [T]) -> R) -> R;
}

impl<T> Dest<T> for [T] {
    fn words(&self) -> usize {
        self.len()
    }

    #[inline(always)]
    fn span(&mut self, start: usize, len: usize) -> &mut [T] {
        &mut self[start..start + len]
    }

    fn with_words<R>(&mut self, range: Range<usize>, f: impl FnOnce(&mut [T]) -> R) -> R {
        f(&mut self[range])
    }
}

/// The rows of `out` that hold a stream: word `k` goes to row
/// `rows[k / group]`, at `k % group` in it. Rows are whole rounds of
/// lanes, so every round the SIMD decoders write lies in one row.
pub(in crate::codec) struct Rows<'a, T> {
    out: &'a mut [T],
    group: usize,
    rows: &'a [u32],
}

impl<'a, T: Word> Rows<'a, T> {
    /// None unless `group` is a multiple of [`crate::codec::ROWS_ROUND`]
    /// (the widest round) and every row lies in `out`.
    pub(in crate::codec) fn new(out: &'a mut [T], group: usize, rows: &'a [u32]) -> Option<Self> {
        let inside = |&r: &u32| {
            (r as usize + 1)
                .checked_mul(group)
                .is_some_and(|e| e <= out.len())
        };
        (group > 0 && group.is_multiple_of(crate::codec::ROWS_ROUND) && rows.iter().all(inside))
            .then_some(Rows { out, group, rows })
    }

    /// Where word `k` goes in `out`.
    fn at(&self, k: usize) -> usize {
        self.rows[k / self.group] as usize * self.group + k % self.group
    }
}

impl<T: Word> Dest<T> for Rows<'_, T> {
    fn words(&self) -> usize {
        self.rows.len().saturating_mul(self.group)
    }

    #[inline(always)]
    fn span(&mut self, start: usize, len: usize) -> &mut [T] {
        debug_assert!(start % self.group + len <= self.group);
        let at = self.at(start);
        &mut self.out[at..at + len]
    }

    fn with_words<R>(&mut self, range: Range<usize>, f: impl FnOnce(&mut [T]) -> R) -> R {
        let mut words = vec![T::default(); range.len()];
        let result = f(&mut words);
        for (k, w) in range.zip(words) {
            let at = self.at(k);
            self.out[at] = w;
        }
        result
    }
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
