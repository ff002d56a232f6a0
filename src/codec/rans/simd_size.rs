//! The sizing loop of `count_emitted_fast` with AVX2: the 32 lanes are four
//! vectors of eight, each an independent dependency chain. Symbol data comes
//! from gathers; the division is `SizeSymbol::quotient` lane by lane.

use super::simd_decode::{load_quarters, store_quarters};
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
    // SAFETY: the caller has AVX2 (this function's contract); the accesses are bounded as the comments below say.
    unsafe {
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
