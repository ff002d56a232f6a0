//! The encoder's loop with AVX2 or AVX-512, sizing or encoding: the 32
//! lanes of a group are four vectors of eight (AVX2) or two of sixteen,
//! each an independent dependency chain. Symbol data comes from gathers;
//! the division is `SizeSymbol::quotient` lane by lane.

use super::simd_decode::{load_quarters, store_quarters};
use super::{Groups, Kept, SizeSymbol, FIELD, KEPT_SLACK, LANES};
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
    mut kept: Option<&mut Kept>,
) -> usize {
    const _: () = assert!(KEPT_SLACK >= 8);
    // SAFETY: the caller has AVX2 and POPCNT (this function's contract); the accesses are bounded as the comments below say.
    unsafe {
        assert!(words.len().is_multiple_of(LANES) && scale <= 14);
        let (symbols, ranks, word_mask) = lookup.bounds();
        let word_mask = _mm256_set1_epi32(word_mask as i32);
        let last_rank = _mm256_set1_epi32(symbols.len() as i32 - 1);
        let low16 = _mm256_set1_epi32(0xffff);
        let field = _mm256_set1_epi32(FIELD as i32);
        let one = _mm256_set1_epi32(1);
        let full_m1 = _mm256_set1_epi32((1i32 << scale) - 1);
        let shift = _mm_cvtsi32_si128(32 - scale as i32);
        let base = symbols.as_ptr() as *const i32;
        let mut states = groups.each_ref().map(|g| load_quarters(g));
        let mut count = _mm256_setzero_si256();
        for (block, chunk) in words.chunks_exact(LANES).enumerate().rev() {
            let x = &mut states[block % G];
            // Lanes from the last, as the scalar encoder emits.
            for (quarter, x) in x.iter_mut().enumerate().rev() {
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
                if let Some(kept) = kept.as_deref_mut() {
                    keep(*x, renorm, kept);
                }
                *x = _mm256_add_epi32(base_state, _mm256_mullo_epi32(q, cmpl));
            }
        }
        for (x, states) in states.into_iter().zip(groups) {
            store_quarters(x, states);
        }
        let mut lanes = [0u32; 8];
        // SAFETY: `lanes` is 32 bytes.
        _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, count);
        lanes.iter().map(|&c| c as usize).sum()
    }
}

/// [`run`] with AVX-512: the same states, renormalisations and kept words,
/// sixteen lanes a vector, so half the instructions a word.
///
/// # Safety
/// The CPU must support AVX2, POPCNT and AVX-512F.
#[target_feature(enable = "avx2,popcnt,avx512f")]
pub(super) unsafe fn run_avx512<const G: usize>(
    words: &[u32],
    lookup: &Lookup,
    scale: u32,
    groups: &mut Groups<G>,
    mut kept: Option<&mut Kept>,
) -> usize {
    const _: () = assert!(KEPT_SLACK >= 16);
    // SAFETY: the caller has the CPU features (this function's contract); the accesses are bounded as the comments below say.
    unsafe {
        assert!(words.len().is_multiple_of(LANES) && scale <= 14);
        let (symbols, ranks, word_mask) = lookup.bounds();
        let word_mask = _mm512_set1_epi32(word_mask as i32);
        let last_rank = _mm512_set1_epi32(symbols.len() as i32 - 1);
        let low16 = _mm512_set1_epi32(0xffff);
        let field = _mm512_set1_epi32(FIELD as i32);
        let one = _mm512_set1_epi32(1);
        let full_m1 = _mm512_set1_epi32((1i32 << scale) - 1);
        let shift = _mm_cvtsi32_si128(32 - scale as i32);
        let base = symbols.as_ptr() as *const i32;
        let at = |g: &[u32; LANES], h: usize| g[16 * h..].as_ptr() as *const __m512i;
        let mut states = groups
            .each_ref()
            .map(|g| [_mm512_loadu_si512(at(g, 0)), _mm512_loadu_si512(at(g, 1))]);
        let mut count = 0;
        for (block, chunk) in words.chunks_exact(LANES).enumerate().rev() {
            let x = &mut states[block % G];
            // Lanes from the last, as the scalar encoder emits.
            for (half, x) in x.iter_mut().enumerate().rev() {
                // SAFETY: `chunk` holds 32 words; this reads 16 at `16 * half`.
                let w = _mm512_loadu_si512(chunk.as_ptr().add(16 * half) as *const __m512i);
                let w = _mm512_and_si512(w, word_mask);
                let id = match ranks {
                    None => w,
                    Some(ranks) => {
                        // SAFETY: as in `run`, each index is at most
                        // `ranks.len() - 2`: its 4 bytes end inside `ranks`.
                        let r = _mm512_i32gather_epi32::<2>(w, ranks.as_ptr() as *const i32);
                        _mm512_min_epu32(_mm512_and_si512(r, low16), last_rank)
                    }
                };
                // SAFETY: every `id` is below `symbols.len()`, as in `run`.
                let a = _mm512_i32gather_epi32::<8>(id, base);
                let m = _mm512_i32gather_epi32::<8>(id, base.add(1));
                let fm1 = _mm512_and_si512(a, field);
                let renorm = _mm512_cmpgt_epu32_mask(_mm512_srl_epi32(*x, shift), fm1);
                count += renorm.count_ones() as usize;
                let y = _mm512_mask_blend_epi32(renorm, *x, _mm512_srli_epi32::<16>(*x));
                let even = _mm512_mul_epu32(y, m);
                let odd = _mm512_mul_epu32(_mm512_srli_epi64::<32>(y), _mm512_srli_epi64::<32>(m));
                let t = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(even), odd);
                let l = _mm512_srli_epi32::<28>(a);
                let sh1 = _mm512_min_epu32(l, one);
                let sh2 = _mm512_sub_epi32(l, sh1);
                let half_step = _mm512_srlv_epi32(_mm512_sub_epi32(y, t), sh1);
                let q = _mm512_srlv_epi32(_mm512_add_epi32(t, half_step), sh2);
                let start = _mm512_and_si512(_mm512_srli_epi32::<14>(a), field);
                let cmpl = _mm512_sub_epi32(full_m1, fm1);
                let base_state = _mm512_add_epi32(y, start);
                if let Some(kept) = kept.as_deref_mut() {
                    keep_avx512(*x, renorm, kept);
                }
                *x = _mm512_add_epi32(base_state, _mm512_mullo_epi32(q, cmpl));
            }
        }
        for (x, states) in states.into_iter().zip(groups) {
            for (h, v) in x.into_iter().enumerate() {
                // SAFETY: each store writes the 16 u32 of one half of `states`.
                _mm512_storeu_si512(states[16 * h..].as_mut_ptr() as *mut __m512i, v);
            }
        }
        count
    }
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

/// Keeps the low 16 bits of the states `x` that renormalise (`renorm` all
/// ones), the last lane first, as the scalar encoder emits them: a
/// permutation moves them to the front, and all eight low halves are
/// stored at `kept.count`, which moves on past the ones that renormalise.
/// `kept.words` must hold 8 words from there (see [`KEPT_SLACK`]).
#[target_feature(enable = "avx2,popcnt")]
fn keep(x: __m256i, renorm: __m256i, kept: &mut Kept) {
    let mask = _mm256_movemask_ps(_mm256_castsi256_ps(renorm)) as usize;
    let to = &mut kept.words[kept.count..kept.count + KEPT_SLACK];
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
