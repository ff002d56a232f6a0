//! The rANS encoder's loop (docs/FORMAT.md, "rANS (tag 3)": Encoder) with AVX2
//! or AVX-512, sizing or encoding: the 32 lanes of a group are four vectors of
//! eight (AVX2) or two of sixteen, each an independent dependency chain. Symbol
//! data comes from gathers; the division is `SizeSymbol::quotient` lane by
//! lane.

use super::layout::{Groups, LANES};
use super::simd_decode::Vector;
use super::step::{Kept, SizeSymbol, FIELD, KEPT_SLACK};
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

impl Lookup<'_> {
    /// The symbols, the rank array of a ranked lookup, and the mask that
    /// keeps every word's index inside the table it indexes (the symbols,
    /// or the ranks but their padding). Panics where the tables do not
    /// have the lengths the variants say.
    fn bounds(&self) -> (&[SizeSymbol], Option<&[u16]>, usize) {
        let (symbols, ranks) = match *self {
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
        (symbols, ranks, word_mask)
    }
}

/// Codes the whole blocks of `words` backwards from `groups`, as
/// `super::run` does (block `b` by group `b % G`), and returns the number
/// of renormalisations; with `kept`, also keeps their words. Words are
/// masked to the table size and ranks clamped to the symbol count, so every
/// gather stays inside its table whatever the words are.
///
/// # Safety
/// The CPU must support AVX2 and POPCNT.
#[target_feature(enable = "avx2,popcnt")]
pub(super) unsafe fn run<const G: usize>(
    words: &[u32],
    lookup: &Lookup,
    scale: u32,
    groups: &mut Groups<G>,
    kept: Option<&mut Kept>,
) -> usize {
    // SAFETY: the caller has AVX2 and POPCNT, `__m256i`'s features.
    unsafe { encode::<__m256i, G>(words, lookup, scale, groups, kept) }
}

/// [`run`] with AVX-512: sixteen lanes a vector, so half the instructions a
/// word.
///
/// # Safety
/// The CPU must support AVX2, POPCNT and AVX-512F.
#[target_feature(enable = "avx2,popcnt,avx512f")]
pub(super) unsafe fn run_avx512<const G: usize>(
    words: &[u32],
    lookup: &Lookup,
    scale: u32,
    groups: &mut Groups<G>,
    kept: Option<&mut Kept>,
) -> usize {
    // SAFETY: the caller has AVX-512F, `__m512i`'s features.
    unsafe { encode::<__m512i, G>(words, lookup, scale, groups, kept) }
}

/// The loop of [`run`] over vectors `V`: a group's 32 lanes are
/// `LANES / V::WIDTH` of them, taken from the last, as the scalar encoder
/// emits.
///
/// # Safety
/// The CPU must have `V`'s features.
#[inline(always)]
unsafe fn encode<V: Lanes, const G: usize>(
    words: &[u32],
    lookup: &Lookup,
    scale: u32,
    groups: &mut Groups<G>,
    mut kept: Option<&mut Kept>,
) -> usize {
    const { assert!(KEPT_SLACK >= 16 && LANES.is_multiple_of(V::WIDTH)) };
    let per_group = LANES / V::WIDTH;
    // SAFETY: the caller has `V`'s CPU features (this function's contract); the accesses are bounded as the comments below say.
    unsafe {
        assert!(words.len().is_multiple_of(LANES) && scale <= 14);
        let (symbols, ranks, word_mask) = lookup.bounds();
        let word_mask = V::splat(word_mask as i32);
        let last_rank = V::splat(symbols.len() as i32 - 1);
        let field = V::splat(FIELD as i32);
        let one = V::splat(1);
        let full_m1 = V::splat((1i32 << scale) - 1);
        let shift = _mm_cvtsi32_si128(32 - scale as i32);
        let base = symbols.as_ptr() as *const i32;
        // Vectors of a group's lanes (up to four), loaded from `groups`.
        let mut states = [[V::splat(0); 4]; G];
        for (x, g) in states.iter_mut().zip(groups.iter()) {
            for (v, x) in x[..per_group].iter_mut().enumerate() {
                // SAFETY: the `V::WIDTH` u32 from `v * V::WIDTH` are within the group.
                *x = V::load(g[v * V::WIDTH..].as_ptr());
            }
        }
        let mut count = 0;
        for (block, chunk) in words.chunks_exact(LANES).enumerate().rev() {
            let x = &mut states[block % G];
            for (v, x) in x[..per_group].iter_mut().enumerate().rev() {
                // SAFETY: `chunk` holds 32 words; this reads `V::WIDTH` of them.
                let w = V::load(chunk[v * V::WIDTH..].as_ptr()).and(word_mask);
                let id = match ranks {
                    None => w,
                    Some(ranks) => {
                        // SAFETY: each index is at most `ranks.len() - 2`, so
                        // the 4 bytes read at `2 * index` end inside `ranks`.
                        let r = V::gather_by::<2>(ranks.as_ptr() as *const i32, w);
                        r.and(V::splat(0xffff)).min(last_rank)
                    }
                };
                // SAFETY: every `id` is below `symbols.len()` (masked to it
                // for direct tables, clamped for ranks), and each symbol is
                // 8 bytes: `packed` at offset 0, `magic` at offset 4.
                let a = V::gather_by::<8>(base, id);
                let m = V::gather_by::<8>(base.add(1), id);
                // Renormalise: `x >> (32 - scale) > freq - 1` (both < 2^14).
                let fm1 = a.and(field);
                let renorm = x.shr_by(shift).above(fm1);
                count += V::count(renorm);
                let y = V::select(renorm, x.shr::<16>(), *x);
                let t = y.mulhi(m);
                let l = a.shr::<28>();
                let sh1 = l.min(one);
                let sh2 = l.sub(sh1);
                let half = y.sub(t).shr_each(sh1);
                let q = t.add(half).shr_each(sh2);
                let start = a.shr::<14>().and(field);
                let cmpl = full_m1.sub(fm1);
                let base_state = y.add(start);
                if let Some(kept) = kept.as_deref_mut() {
                    x.keep(renorm, kept);
                }
                *x = base_state.add(q.mullo(cmpl));
            }
        }
        for (x, g) in states.iter().zip(groups.iter_mut()) {
            for (v, x) in x[..per_group].iter().enumerate() {
                // SAFETY: as for the loads above.
                x.store(g[v * V::WIDTH..].as_mut_ptr());
            }
        }
        count
    }
}

/// The encoder's operations on a vector of 32-bit lanes, beyond the
/// decoder's. As for [`Vector`], every method must be inlined into a caller
/// with the target features its intrinsics need.
///
/// # Safety
/// Every method needs the CPU features of the implementing type; loads,
/// stores and gathers also need their memory to be in bounds.
trait Lanes: Vector {
    /// Lanes a vector.
    const WIDTH: usize;
    /// Which lanes a comparison holds for.
    type Mask: Copy;
    /// # Safety
    /// As for the trait: `WIDTH` u32 readable at `at`.
    unsafe fn load(at: *const u32) -> Self;
    /// # Safety
    /// As for the trait: `WIDTH` u32 writable at `at`.
    unsafe fn store(self, at: *mut u32);
    /// # Safety
    /// As for the trait.
    unsafe fn sub(self, other: Self) -> Self;
    /// Unsigned.
    ///
    /// # Safety
    /// As for the trait.
    unsafe fn min(self, other: Self) -> Self;
    /// Each lane shifted right by the count in the same lane of `counts`.
    ///
    /// # Safety
    /// As for the trait.
    unsafe fn shr_each(self, counts: Self) -> Self;
    /// The high 32 bits of each lane's unsigned 64-bit product.
    ///
    /// # Safety
    /// As for the trait.
    unsafe fn mulhi(self, other: Self) -> Self;
    /// The 4 bytes at `base + SCALE * index` of each lane.
    ///
    /// # Safety
    /// As for the trait: every one of them readable.
    unsafe fn gather_by<const SCALE: i32>(base: *const i32, index: Self) -> Self;
    /// The lanes where `self > other`, both below 2^31.
    ///
    /// # Safety
    /// As for the trait.
    unsafe fn above(self, other: Self) -> Self::Mask;
    /// `if_set` in the lanes of `mask`, else `otherwise`.
    ///
    /// # Safety
    /// As for the trait.
    unsafe fn select(mask: Self::Mask, if_set: Self, otherwise: Self) -> Self;
    /// # Safety
    /// As for the trait.
    unsafe fn count(mask: Self::Mask) -> usize;
    /// Keeps the low 16 bits of the lanes of `mask`, the last lane first,
    /// at `kept.count`, which moves on past them; writes `WIDTH` words there.
    ///
    /// # Safety
    /// As for the trait.
    unsafe fn keep(self, mask: Self::Mask, kept: &mut Kept);
}

impl Lanes for __m256i {
    const WIDTH: usize = 8;
    type Mask = __m256i;
    #[inline(always)]
    unsafe fn load(at: *const u32) -> Self {
        // SAFETY: the caller has AVX2 and 32 readable bytes at `at` (the trait's contract).
        unsafe { _mm256_loadu_si256(at as *const __m256i) }
    }
    #[inline(always)]
    unsafe fn store(self, at: *mut u32) {
        // SAFETY: the caller has AVX2 and 32 writable bytes at `at` (the trait's contract).
        unsafe { _mm256_storeu_si256(at as *mut __m256i, self) }
    }
    #[inline(always)]
    unsafe fn sub(self, other: Self) -> Self {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe { _mm256_sub_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn min(self, other: Self) -> Self {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe { _mm256_min_epu32(self, other) }
    }
    #[inline(always)]
    unsafe fn shr_each(self, counts: Self) -> Self {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe { _mm256_srlv_epi32(self, counts) }
    }
    #[inline(always)]
    unsafe fn mulhi(self, other: Self) -> Self {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe {
            // Even lanes, then odd lanes.
            let even = _mm256_mul_epu32(self, other);
            let odd = _mm256_mul_epu32(
                _mm256_srli_epi64::<32>(self),
                _mm256_srli_epi64::<32>(other),
            );
            _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd)
        }
    }
    #[inline(always)]
    unsafe fn gather_by<const SCALE: i32>(base: *const i32, index: Self) -> Self {
        // SAFETY: the caller has AVX2 and every lane's 4 bytes are readable (the trait's contract).
        unsafe { _mm256_i32gather_epi32::<SCALE>(base, index) }
    }
    #[inline(always)]
    unsafe fn above(self, other: Self) -> Self::Mask {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe { _mm256_cmpgt_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn select(mask: Self::Mask, if_set: Self, otherwise: Self) -> Self {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe { _mm256_blendv_epi8(otherwise, if_set, mask) }
    }
    #[inline(always)]
    unsafe fn count(mask: Self::Mask) -> usize {
        // SAFETY: the caller has AVX2 (the trait's contract).
        unsafe { _mm256_movemask_ps(_mm256_castsi256_ps(mask)).count_ones() as usize }
    }
    #[inline(always)]
    unsafe fn keep(self, mask: Self::Mask, kept: &mut Kept) {
        // SAFETY: the caller has AVX2 and POPCNT (the trait's contract).
        unsafe { keep(self, mask, kept) }
    }
}

impl Lanes for __m512i {
    const WIDTH: usize = 16;
    type Mask = __mmask16;
    #[inline(always)]
    unsafe fn load(at: *const u32) -> Self {
        // SAFETY: the caller has AVX-512F and 64 readable bytes at `at` (the trait's contract).
        unsafe { _mm512_loadu_si512(at as *const __m512i) }
    }
    #[inline(always)]
    unsafe fn store(self, at: *mut u32) {
        // SAFETY: the caller has AVX-512F and 64 writable bytes at `at` (the trait's contract).
        unsafe { _mm512_storeu_si512(at as *mut __m512i, self) }
    }
    #[inline(always)]
    unsafe fn sub(self, other: Self) -> Self {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe { _mm512_sub_epi32(self, other) }
    }
    #[inline(always)]
    unsafe fn min(self, other: Self) -> Self {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe { _mm512_min_epu32(self, other) }
    }
    #[inline(always)]
    unsafe fn shr_each(self, counts: Self) -> Self {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe { _mm512_srlv_epi32(self, counts) }
    }
    #[inline(always)]
    unsafe fn mulhi(self, other: Self) -> Self {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe {
            let even = _mm512_mul_epu32(self, other);
            let odd = _mm512_mul_epu32(
                _mm512_srli_epi64::<32>(self),
                _mm512_srli_epi64::<32>(other),
            );
            _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(even), odd)
        }
    }
    #[inline(always)]
    unsafe fn gather_by<const SCALE: i32>(base: *const i32, index: Self) -> Self {
        // SAFETY: the caller has AVX-512F and every lane's 4 bytes are readable (the trait's contract).
        unsafe { _mm512_i32gather_epi32::<SCALE>(index, base) }
    }
    #[inline(always)]
    unsafe fn above(self, other: Self) -> Self::Mask {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe { _mm512_cmpgt_epu32_mask(self, other) }
    }
    #[inline(always)]
    unsafe fn select(mask: Self::Mask, if_set: Self, otherwise: Self) -> Self {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe { _mm512_mask_blend_epi32(mask, otherwise, if_set) }
    }
    #[inline(always)]
    unsafe fn count(mask: Self::Mask) -> usize {
        mask.count_ones() as usize
    }
    #[inline(always)]
    unsafe fn keep(self, mask: Self::Mask, kept: &mut Kept) {
        // SAFETY: the caller has AVX-512F (the trait's contract).
        unsafe { keep_avx512(self, mask, kept) }
    }
}

/// Keeps the low 16 bits of the states `x` that renormalise (`renorm` all
/// ones), the last lane first, as the scalar encoder emits them: a
/// permutation moves them to the front, and all eight low halves are
/// stored at `kept.count`, which moves on past the ones that renormalise.
/// `kept.words` must hold 8 words from there (see [`KEPT_SLACK`]).
#[target_feature(enable = "avx2,popcnt")]
fn keep(x: __m256i, renorm: __m256i, kept: &mut Kept) {
    let mask = _mm256_movemask_ps(_mm256_castsi256_ps(renorm)) as usize;
    let to = &mut kept.words[kept.count..kept.count + 8];
    // SAFETY: `COMPACT`'s rows and `LOW_HALVES` are 32 bytes; `to` holds 8
    // u16, 16 bytes.
    unsafe {
        let order = _mm256_loadu_si256(COMPACT[mask].as_ptr() as *const __m256i);
        let moved = _mm256_permutevar8x32_epi32(x, order);
        // Each 128-bit half's four low halves to its low 8 bytes, then the
        // two halves' low 8 bytes together.
        let pick = _mm256_loadu_si256(LOW_HALVES.as_ptr() as *const __m256i);
        let halves = _mm256_shuffle_epi8(moved, pick);
        let low = _mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b00_00_10_00>(halves));
        _mm_storeu_si128(to.as_mut_ptr() as *mut __m128i, low);
    }
    kept.count += mask.count_ones() as usize;
}

/// [`keep`] for sixteen lanes: their order reversed, the renormalising
/// ones compressed to the front and narrowed to their low 16 bits, all
/// sixteen stored at `kept.count`. `kept.words` must hold 16 words from
/// there (see [`KEPT_SLACK`]).
#[target_feature(enable = "avx2,popcnt,avx512f")]
fn keep_avx512(x: __m512i, renorm: __mmask16, kept: &mut Kept) {
    let to = &mut kept.words[kept.count..kept.count + 16];
    let last_first = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    let reversed = _mm512_permutexvar_epi32(last_first, x);
    let moved = _mm512_maskz_compress_epi32(renorm.reverse_bits(), reversed);
    // SAFETY: `to` holds 16 u16, the 32 bytes stored.
    unsafe {
        _mm256_storeu_si256(
            to.as_mut_ptr() as *mut __m256i,
            _mm512_cvtepi32_epi16(moved),
        )
    };
    kept.count += renorm.count_ones() as usize;
}

/// Byte shuffle taking the low 16 bits of each 32-bit lane of a 128-bit
/// half to its first 8 bytes.
static LOW_HALVES: [i8; 32] = [
    0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, //
    0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
];

/// For each mask of renormalising lanes, the lanes that renormalise from
/// the last, then zeros: the permutation that moves their states to the
/// front in the order the scalar encoder emits them.
static COMPACT: [[u32; 8]; 256] = {
    let mut table = [[0u32; 8]; 256];
    let mut mask = 0;
    while mask < 256 {
        let (mut lane, mut at) = (8, 0);
        while lane > 0 {
            lane -= 1;
            if mask >> lane & 1 == 1 {
                table[mask][at] = lane as u32;
                at += 1;
            }
        }
        mask += 1;
    }
    table
};
