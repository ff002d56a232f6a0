//! rANS decoding tables (docs/FORMAT.md, "rANS (tag 3)": slots and `c_j`): what
//! each of a stream's `2^scale` slots decodes to, in one of two layouts, built
//! portably or with AVX-512, and the portable decoder's view of them.

use crate::codec::simd::{level as simd_level, Simd};
use crate::codec::symbols::SymbolSet;
use crate::codec::word::Word;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

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
            return Slots::Fused(unsafe { fused_slots_avx512(set, size) });
        }
        Slots::Fused(fused_slots(set, size))
    }

    /// The wide layout of `size` slots, as [`Slots::fused`] builds it.
    pub(super) fn wide(set: &SymbolSet, size: usize) -> Slots {
        #[cfg(target_arch = "x86_64")]
        if simd_level() >= Simd::Avx512 {
            // SAFETY: `simd_level` checked that the CPU has AVX-512F.
            return Slots::Wide(unsafe { wide_slots_avx512(set, size) });
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
    pub(super) fn entry(&self, slot: usize) -> (u32, u32, u32) {
        match &self.slots {
            Slots::Fused(table) => unpack_fused(table[slot]),
            Slots::Wide(table) => unpack_wide(table[slot]),
        }
    }
}

/// The fused slots of `set` (as [`fused_slots`] makes them), 16 a
/// store; see [`fill_slots`].
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
pub(super) unsafe fn fused_slots_avx512(set: &SymbolSet, size: usize) -> Vec<u32> {
    let ramp = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let high = |word: u32, freq: u32| _mm512_set1_epi32(fused_high(word, freq) as i32);
    // SAFETY: the CPU has AVX-512F (this function's contract).
    unsafe { fill_slots(set, size, high, ramp, _mm512_set1_epi32(16)) }
}

/// The wide slots of `set` (as [`wide_slots`] makes them), 8 a
/// store; see [`fill_slots`].
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
pub(super) unsafe fn wide_slots_avx512(set: &SymbolSet, size: usize) -> Vec<u64> {
    let ramp = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    let high = |word: u32, freq: u32| _mm512_set1_epi64(wide_high(word, freq) as i64);
    // SAFETY: the CPU has AVX-512F (this function's contract).
    unsafe { fill_slots(set, size, high, ramp, _mm512_set1_epi64(8)) }
}

/// The `size` slots of `set`, a vector of them a store: each symbol's
/// `high(word, freq)` or'd with the offsets `ramp` (0 to the lanes - 1),
/// then `step` (the lanes) added for the next store. A symbol's last store
/// runs on into the next symbol's slots, which that symbol's stores then
/// overwrite, or into a vector's worth of spare capacity past the end
/// (offsets past `freq - 1` may carry into the frequency's bits: only in
/// those slots). Tables are mostly symbols of a few dozen to a few hundred
/// slots, too short for a compiled loop with a scalar tail. Panics unless
/// the frequencies sum to `size`.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn fill_slots<E: bytemuck::Pod>(
    set: &SymbolSet,
    size: usize,
    high: impl Fn(u32, u32) -> __m512i,
    ramp: __m512i,
    step: __m512i,
) -> Vec<E> {
    let lanes = size_of::<__m512i>() / size_of::<E>();
    let mut table: Vec<E> = Vec::with_capacity(size + lanes);
    let slots = table.as_mut_ptr();
    let mut start = 0;
    for (&word, &freq) in set.words.iter().zip(&set.values) {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        let mut entries = unsafe { _mm512_or_si512(high(word, freq), ramp) };
        let end = start + freq as usize;
        assert!(end <= size, "frequencies beyond the table's size");
        let mut at = start;
        while at < end {
            // SAFETY: `at < end <= size` (asserted above), so the vector's
            // slots from `at` are within the capacity of `size + lanes`;
            // the CPU has AVX-512F. (Adding 32-bit lanes adds to the
            // offsets in the low bits of 64-bit slots too: none carries
            // out of its 32 bits.)
            unsafe {
                _mm512_storeu_si512(slots.add(at) as *mut __m512i, entries);
                entries = _mm512_add_epi32(entries, step);
            }
            at += lanes;
        }
        start = end;
    }
    assert_eq!(start, size, "frequencies short of the table's size");
    // SAFETY: the stores above wrote every slot below `start == size`.
    unsafe { table.set_len(size) };
    table
}
