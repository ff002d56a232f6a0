//! The decoder of `decode_lanes` with SIMD (docs/FORMAT.md, "rANS (tag 3)":
//! Decoding). A group's 32 lanes live in four vectors of 8 (AVX2) or two of 16
//! (AVX-512), and all groups of a stream decode together, so there are 4 to 8
//! independent dependency chains: the loop is bound by each chain's latency
//! (gather, multiply, renormalise) more than by throughput. Table lookups are
//! gathers. The renormalisation words for the lanes that need one are spread to
//! them by a permutation chosen by the mask of those lanes (AVX2), or by an
//! expand under that mask (AVX-512).

use super::dest::Dest;
use super::layout::{Groups, LANES, STATE_LOW};
use super::table::{DecodeTable, Slots};
use crate::codec::word::Word;
use std::arch::x86_64::*;
use std::ops::Range;

/// The 32 lane states as four vectors of eight. (A helper rather than
/// `array::from_fn`: a closure does not get the caller's target features,
/// so its intrinsics would become calls unless it happened to be inlined.)
#[target_feature(enable = "avx2")]
#[inline]
fn load_quarters(states: &[u32; LANES]) -> [__m256i; 4] {
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
fn store_quarters(x: [__m256i; 4], states: &mut [u32; LANES]) {
    for (quarter, v) in states.chunks_exact_mut(8).zip(x) {
        // SAFETY: each store writes the 8 u32 of one quarter of `states`.
        unsafe { _mm256_storeu_si256(quarter.as_mut_ptr() as *mut __m256i, v) };
    }
}

const _: () = assert!(LANES == 32 && STATE_LOW == 1 << 16);

/// # Safety
/// The CPU must support AVX2 and POPCNT.
#[target_feature(enable = "avx2,popcnt")]
pub(super) unsafe fn decode_avx2<T: Word, const G: usize, D: Dest<T> + ?Sized>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    words: Range<usize>,
) -> (usize, usize) {
    // SAFETY: the caller checked the CPU features, which are all `decode` needs.
    unsafe { decode_table::<T, Ymm, G, D>(groups, table, data, out, words) }
}

/// # Safety
/// The CPU must support AVX2, POPCNT and AVX-512F.
#[target_feature(enable = "avx2,popcnt,avx512f")]
pub(super) unsafe fn decode_avx512<T: Word, const G: usize, D: Dest<T> + ?Sized>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    words: Range<usize>,
) -> (usize, usize) {
    // SAFETY: the caller checked the CPU features, which are all `decode` needs.
    unsafe { decode_table::<T, Zmm, G, D>(groups, table, data, out, words) }
}

/// Where a decoder's gathers read: the `2^scale` slots of a
/// [`DecodeTable`], 4-byte entries in the fused layout, 8-byte ones in the
/// wide layout.
struct Tables {
    slots: *const u8,
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
    unsafe fn step<const FUSED: bool>(&mut self, tables: &Tables) -> Self {
        let mut words = *self;
        for (x, word) in self.vectors().iter_mut().zip(words.vectors()) {
            // SAFETY: the caller upholds this method's contract, which is
            // `step_vector`'s.
            *word = unsafe { step_vector::<Self::Vector, FUSED>(x, tables) };
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
unsafe fn decode_table<T: Word, B: Block, const G: usize, D: Dest<T> + ?Sized>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    words: Range<usize>,
) -> (usize, usize) {
    // SAFETY: as for `decode`, which the caller upholds.
    unsafe {
        match table.slots {
            Slots::Fused(_) => decode::<T, B, G, D, true>(groups, table, data, out, words),
            Slots::Wide(_) => decode::<T, B, G, D, false>(groups, table, data, out, words),
        }
    }
}

/// As `super::decode_lanes` for whole rounds of `G * LANES` of the
/// stream's words `words` (from `words.start`, a multiple of a round,
/// into `out`'s spans) while `data` holds at least a round more words;
/// returns the words decoded and the words read. `FUSED`: whether the
/// table has the fused layout.
///
/// # Safety
/// The CPU must have the features `B` uses.
#[inline(always)]
unsafe fn decode<T: Word, B: Block, const G: usize, D: Dest<T> + ?Sized, const FUSED: bool>(
    groups: &mut Groups<G>,
    table: &DecodeTable,
    data: &[u8],
    out: &mut D,
    words: Range<usize>,
) -> (usize, usize) {
    let size = 1usize << table.scale;
    // Gathers index the tables by `x & (size - 1)`, so they stay inside them.
    let slots = match &table.slots {
        Slots::Fused(fused) => {
            assert!(FUSED && fused.len() == size);
            fused.as_ptr() as *const u8
        }
        Slots::Wide(wide) => {
            assert!(!FUSED && wide.len() == size);
            wide.as_ptr() as *const u8
        }
    };
    let tables = Tables {
        slots,
        scale: table.scale,
    };
    // SAFETY: the caller has the CPU features `B` uses (this function's
    // contract), as every call on `B` below needs.
    let mut x = [unsafe { B::load(&groups[0]) }; G];
    for (x, states) in x.iter_mut().zip(groups.iter()) {
        // SAFETY: as above.
        *x = unsafe { B::load(states) };
    }
    let round = G * LANES;
    let mut pos = 0usize;
    let mut done = 0usize;
    for start in (words.start..words.end.saturating_sub(round - 1)).step_by(round) {
        // Each group reads at most `LANES` words from where the
        // previous one stopped.
        if 2 * (pos + round) > data.len() {
            break;
        }
        let chunk = out.span(start, round);
        // Step every group first: they are independent chains, and only
        // renormalisation ties them together (through the position of
        // the next word).
        let mut words = x;
        for (x, words) in x.iter_mut().zip(&mut words) {
            // SAFETY: the tables are as asserted above, and the states
            // are renormalised (the caller validated the initial ones).
            *words = unsafe { x.step::<FUSED>(&tables) };
        }
        for (words, block) in words.iter().zip(chunk.chunks_exact_mut(LANES)) {
            // SAFETY: `block` holds 32 words, and every word decoded
            // from a validated table fits `T`.
            unsafe { words.store_words(block.as_mut_ptr()) };
        }
        for x in &mut x {
            // SAFETY: `2 * (pos + LANES) <= data.len()` by the check
            // above, since earlier groups advanced `pos` by at most
            // `LANES` each.
            pos += unsafe { x.renormalise(data.as_ptr().add(2 * pos)) };
        }
        done += round;
    }
    for (x, states) in x.iter().zip(groups.iter_mut()) {
        // SAFETY: as for `B::load` above.
        unsafe { x.store(states) };
    }
    (done, pos)
}

/// One SIMD vector of 32-bit lanes: the operations of a decoding step.
/// As for [`Block`], every method must be inlined into a caller with
/// the target features its intrinsics need.
///
/// # Safety
/// Every method needs the CPU features of the implementing type (AVX2 for
/// `__m256i`, AVX-512F for `__m512i`); `gather` and `gather_wide` also need their reads to be
/// in bounds.
pub(super) trait Vector: Copy {
    /// # Safety
    /// As for the trait.
    unsafe fn splat(value: i32) -> Self;
    /// # Safety
    /// As for the trait.
    unsafe fn and(self, other: Self) -> Self;
    /// # Safety
    /// As for the trait.
    unsafe fn add(self, other: Self) -> Self;
    /// # Safety
    /// As for the trait.
    unsafe fn mullo(self, other: Self) -> Self;
    /// # Safety
    /// As for the trait.
    unsafe fn shr<const N: i32>(self) -> Self;
    /// # Safety
    /// As for the trait.
    unsafe fn shr_by(self, count: __m128i) -> Self;
    /// The 4 bytes at `base + 4 * index` of each lane.
    ///
    /// # Safety
    /// Every one of them must be readable.
    unsafe fn gather(base: *const i32, index: Self) -> Self;
    /// The 8 bytes at `base + 8 * index` of each lane, as their low and
    /// their high halves.
    ///
    /// # Safety
    /// Every one of them must be readable.
    unsafe fn gather_wide(base: *const i64, index: Self) -> (Self, Self);
}

/// Decodes one word per lane of `x` (see [`Block::step`]), leaving `x`
/// un-renormalised; returns the words.
///
/// # Safety
/// As for [`Block::step`], and the CPU must have `V`'s features.
#[inline(always)]
unsafe fn step_vector<V: Vector, const FUSED: bool>(x: &mut V, t: &Tables) -> V {
    // SAFETY: the caller has the CPU features and `t` points at valid tables (this function's contract).
    unsafe {
        let slot = x.and(V::splat((1 << t.scale) - 1));
        let (word, freq, offset) = if FUSED {
            let entry = V::gather(t.slots as *const i32, slot);
            let low12 = V::splat(0xfff);
            (
                entry.shr::<24>(),
                entry.shr::<12>().and(low12),
                entry.and(low12),
            )
        } else {
            let (entry, word) = V::gather_wide(t.slots as *const i64, slot);
            (word, entry.shr::<16>(), entry.and(V::splat(0xffff)))
        };
        let quotient = x.shr_by(_mm_cvtsi32_si128(t.scale as i32));
        *x = freq.mullo(quotient).add(offset);
        word
    }
}

impl Vector for __m256i {
    #[inline(always)]
    unsafe fn splat(value: i32) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm256_set1_epi32(value) }
    }
    #[inline(always)]
    unsafe fn and(self, other: Self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm256_and_si256(self, other) }
    }
    #[inline(always)]
    unsafe fn add(self, other: Self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm256_add_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn mullo(self, other: Self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm256_mullo_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn shr<const N: i32>(self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm256_srli_epi32::<N>(self) }
    }
    #[inline(always)]
    unsafe fn shr_by(self, count: __m128i) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm256_srl_epi32(self, count) }
    }
    #[inline(always)]
    unsafe fn gather(base: *const i32, index: Self) -> Self {
        // SAFETY: the caller has the CPU features, and every lane's 4 bytes are readable (the method's contract).
        unsafe { _mm256_i32gather_epi32::<4>(base, index) }
    }
    #[inline(always)]
    unsafe fn gather_wide(base: *const i64, index: Self) -> (Self, Self) {
        // SAFETY: the caller has the CPU features, and every lane's 8 bytes are readable (the method's contract).
        unsafe {
            let lanes = |half: __m128i| {
                // Entries of 4 lanes, then their low halves before their high ones.
                let entries = _mm256_i32gather_epi64::<8>(base, half);
                _mm256_permutevar8x32_epi32(entries, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7))
            };
            let first = lanes(_mm256_castsi256_si128(index));
            let second = lanes(_mm256_extracti128_si256::<1>(index));
            (
                _mm256_permute2x128_si256::<0x20>(first, second),
                _mm256_permute2x128_si256::<0x31>(first, second),
            )
        }
    }
}

impl Vector for __m512i {
    #[inline(always)]
    unsafe fn splat(value: i32) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm512_set1_epi32(value) }
    }
    #[inline(always)]
    unsafe fn and(self, other: Self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm512_and_si512(self, other) }
    }
    #[inline(always)]
    unsafe fn add(self, other: Self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm512_add_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn mullo(self, other: Self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm512_mullo_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn shr<const N: i32>(self) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe {
            // (This intrinsic's immediate is a u32, which a const generic
            // cannot convert to; a constant count becomes an immediate shift.)
            _mm512_srl_epi32(self, _mm_cvtsi32_si128(N))
        }
    }
    #[inline(always)]
    unsafe fn shr_by(self, count: __m128i) -> Self {
        // SAFETY: the caller has this vector type's CPU features (the trait's contract).
        unsafe { _mm512_srl_epi32(self, count) }
    }
    #[inline(always)]
    unsafe fn gather(base: *const i32, index: Self) -> Self {
        // SAFETY: the caller has the CPU features, and every lane's 4 bytes are readable (the method's contract).
        unsafe { _mm512_i32gather_epi32::<4>(index, base) }
    }
    #[inline(always)]
    unsafe fn gather_wide(base: *const i64, index: Self) -> (Self, Self) {
        // SAFETY: the caller has the CPU features, and every lane's 8 bytes are readable (the method's contract).
        unsafe {
            let first = _mm512_i32gather_epi64::<8>(_mm512_castsi512_si256(index), base);
            let second = _mm512_i32gather_epi64::<8>(_mm512_extracti64x4_epi64::<1>(index), base);
            let low = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let high = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            (
                _mm512_permutex2var_epi32(first, low, second),
                _mm512_permutex2var_epi32(first, high, second),
            )
        }
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
        // SAFETY: the caller has this type's CPU features (the trait's contract).
        unsafe { Ymm(load_quarters(states)) }
    }

    #[inline(always)]
    unsafe fn store(self, states: &mut [u32; LANES]) {
        // SAFETY: the caller has this type's CPU features (the trait's contract).
        unsafe { store_quarters(self.0, states) }
    }

    /// Narrowing packs with unsigned saturation, which keeps every word
    /// that fits `T` unchanged.
    #[inline(always)]
    unsafe fn store_words<T: Word>(self, out: *mut T) {
        // SAFETY: the caller has the CPU features, `out` has room for 32 `T`s and every word fits `T` (the method's contract).
        unsafe {
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
    }

    #[inline(always)]
    unsafe fn renormalise(&mut self, data: *const u8) -> usize {
        // SAFETY: the caller has the CPU features and `data` has `2 * LANES` readable bytes (the method's contract).
        unsafe {
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
        // SAFETY: the caller has this type's CPU features (the trait's contract).
        unsafe {
            let at = states.as_ptr();
            Zmm([
                _mm512_loadu_si512(at as *const _),
                _mm512_loadu_si512(at.add(16) as *const _),
            ])
        }
    }

    #[inline(always)]
    unsafe fn store(self, states: &mut [u32; LANES]) {
        // SAFETY: the caller has this type's CPU features (the trait's contract).
        unsafe {
            let at = states.as_mut_ptr();
            _mm512_storeu_si512(at as *mut _, self.0[0]);
            _mm512_storeu_si512(at.add(16) as *mut _, self.0[1]);
        }
    }

    /// Narrowing truncates, which keeps every word that fits `T`.
    #[inline(always)]
    unsafe fn store_words<T: Word>(self, out: *mut T) {
        // SAFETY: the caller has the CPU features, `out` has room for 32 `T`s and every word fits `T` (the method's contract).
        unsafe {
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
    }

    #[inline(always)]
    unsafe fn renormalise(&mut self, data: *const u8) -> usize {
        // SAFETY: the caller has the CPU features and `data` has `2 * LANES` readable bytes (the method's contract).
        unsafe {
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
