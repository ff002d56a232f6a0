//! BitPack literals (docs/FORMAT.md, "BitPack (tag 1)"): one byte `k` (the
//! bit length of the largest word), then every word in `k` bits, packed
//! LSB-first.

use super::bits::BitWriter;
use super::word::{Put, Word};
use crate::wire::{Reader, WireError};

/// Number of bits needed to write `v` (0 for 0).
pub(super) fn bit_len(v: u32) -> u32 {
    32 - v.leading_zeros()
}

fn packed_bytes(n: usize, k: u32) -> usize {
    (n as u64 * k as u64).div_ceil(8) as usize
}

/// Payload size in bytes (without the tag).
pub(super) fn size(n: usize, max: u32) -> usize {
    1 + packed_bytes(n, bit_len(max))
}

pub(super) fn encode(words: &[u32], max: u32, out: &mut Vec<u8>) {
    let k = bit_len(max);
    out.push(k as u8);
    // Whole groups of 8 words fill whole bytes: packed a group at a time,
    // then the rest field by field.
    let whole = if (1..=GROUP_MAX_BITS).contains(&k) {
        words.len() / 8 * 8
    } else {
        0
    };
    let at = out.len();
    out.resize(at + whole / 8 * k as usize, 0);
    pack_groups(&words[..whole], k, &mut out[at..]);
    let rest = &words[whole..];
    let mut bits = BitWriter::new(out, packed_bytes(rest.len(), k));
    for &w in rest {
        bits.put(w, k);
        // Fields of one width fill the accumulator periodically: a branch
        // that predicts well, and fewer stores than a flush per field.
        if bits.pending() >= 32 {
            bits.flush();
        }
    }
    bits.finish();
}

/// Widest fields [`pack_groups`] takes: all of them, 8 fields filling at
/// most 256 bits.
const GROUP_MAX_BITS: u32 = 32;

/// Packs groups of 8 words of `k` bits (`1..=GROUP_MAX_BITS`; a multiple of
/// 8 words) into `k` bytes each, filling `out`.
fn pack_groups(words: &[u32], k: u32, out: &mut [u8]) {
    macro_rules! by_width {
        ($($k:literal)*) => {
            match k {
                $($k => pack_groups_const::<$k>(words, out),)*
                _ => assert!(words.is_empty(), "no group packing of {k}-bit fields"),
            }
        };
    }
    by_width!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32);
}

/// [`pack_groups`] with the width a constant, so that every field's place
/// in the group's four 64-bit lanes is known when compiling: straight-line
/// shifts and ors, far faster than packing field by field through a
/// [`BitWriter`] (F32's 21- and 23-bit mantissas among them).
fn pack_groups_const<const K: usize>(words: &[u32], out: &mut [u8]) {
    for (group, bytes) in words.chunks_exact(8).zip(out.chunks_exact_mut(K)) {
        let mut lanes = [0u64; 4];
        for (i, &w) in group.iter().enumerate() {
            let (lane, shift) = (K * i / 64, K * i % 64);
            lanes[lane] |= u64::from(w) << shift;
            if shift + K > 64 {
                // The field's high bits spill into the next lane.
                lanes[lane + 1] |= u64::from(w) >> (64 - shift);
            }
        }
        let mut le = [0u8; 32];
        for (to, lane) in le.chunks_exact_mut(8).zip(lanes) {
            to.copy_from_slice(&lane.to_le_bytes());
        }
        bytes.copy_from_slice(&le[..K]);
    }
}

/// The 8 bytes starting at `at`, with zeros past the end of `bytes`.
fn load_u64(bytes: &[u8], at: usize) -> u64 {
    match bytes.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut le = [0u8; 8];
            let rest = bytes.get(at..).unwrap_or(&[]);
            le[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(le)
        }
    }
}

/// Window a group of 8 words is read from: 8 words of up to 32 bits span at most
/// 32 bytes, and the last 8-byte load starts at most 28 bytes in.
const WINDOW: usize = 40;

/// Unpacks whole groups of 8 words (8 words of `K` bits are exactly `K` bytes)
/// from word `from` (a multiple of 8) on, while a full window stays inside
/// `bytes`; returns how many words are done. `K` is a constant so the shifts
/// and offsets compile to immediates.
fn unpack_const<const K: usize, T: Word, P: Put>(
    bytes: &[u8],
    from: usize,
    out: &mut [T],
    put: P,
) -> usize {
    let mask = (1u64 << K) - 1;
    let groups = match bytes.len().checked_sub(WINDOW) {
        Some(room) => (room / K + 1).min(out.len() / 8),
        None => 0,
    };
    let first = from / 8;
    for (g, words) in out.chunks_exact_mut(8).enumerate().take(groups).skip(first) {
        let window: &[u8; WINDOW] = bytes[g * K..g * K + WINDOW].try_into().expect("window");
        for (j, w) in words.iter_mut().enumerate() {
            let bit = j * K;
            let at = bit / 8;
            let le: [u8; 8] = window[at..at + 8].try_into().expect("8 bytes");
            put.put(w, ((u64::from_le_bytes(le) >> (bit % 8)) & mask) as u32);
        }
    }
    (groups * 8).max(from)
}

/// Unpacks words from word `from` on in groups, stopping short of the end
/// where a group's window would not fit; returns how many words are done.
fn unpack_groups<T: Word, P: Put>(
    k: u32,
    bytes: &[u8],
    from: usize,
    out: &mut [T],
    put: P,
) -> usize {
    macro_rules! dispatch {
        ($($k:literal)*) => {
            match k {
                0 => {
                    out[from..].iter_mut().for_each(|o| put.put(o, 0));
                    out.len()
                }
                $($k => unpack_const::<$k, T, P>(bytes, from, out, put),)*
                _ => from,
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
}

/// Unpacks words from index `from` on, one at a time.
fn unpack_tail<T: Word, P: Put>(k: u32, bytes: &[u8], from: usize, out: &mut [T], put: P) {
    let mask = (1u64 << k) - 1;
    for (i, o) in out.iter_mut().enumerate().skip(from) {
        let bit = i as u64 * k as u64;
        // Starting at most 7 bits into a byte, a word of <= 32 bits fits in 64.
        let word = load_u64(bytes, (bit / 8) as usize) >> (bit % 8);
        put.put(o, (word & mask) as u32);
    }
}

pub(super) fn decode<T: Word, P: Put>(
    r: &mut Reader,
    width: u32,
    out: &mut [T],
    put: P,
) -> Result<(), WireError> {
    let k = r.u8()? as u32;
    if k > width {
        return Err(r.error("bitpack width exceeds the literal width"));
    }
    let bytes = r.bytes(packed_bytes(out.len(), k))?;
    let done = unpack_simd(k, bytes, out, put);
    let done = unpack_groups(k, bytes, done, out, put);
    unpack_tail(k, bytes, done, out, put);
    let used = (out.len() as u64 * k as u64 % 8) as u32;
    if used != 0 && bytes.last().is_some_and(|&b| b >> used != 0) {
        return Err(r.error("bitpack padding bits are not zero"));
    }
    Ok(())
}

/// Unpacks a prefix of the words with SIMD where the CPU has it; returns how
/// many words it did (a multiple of 8, possibly 0).
#[inline]
fn unpack_simd<T: Word, P: Put>(k: u32, bytes: &[u8], out: &mut [T], put: P) -> usize {
    #[cfg(target_arch = "x86_64")]
    if (1..=avx512::MAX_K).contains(&k) && avx512::available() {
        // SAFETY: `available` checked that the CPU has the kernel's features.
        return unsafe { avx512::unpack(k, bytes, out, put) };
    }
    #[cfg(target_arch = "x86_64")]
    if (1..=avx2::MAX_K).contains(&k) && avx2::available() {
        // SAFETY: `available` checked that the CPU has AVX2.
        return unsafe { avx2::unpack(k, bytes, out, put) };
    }
    let _ = (k, bytes, out, put);
    0
}

/// For the SIMD unpackers: the byte indices that give lane `j` of `N` the 4
/// bytes from the one holding bit `j * k` (counted from byte `base(j)` of the
/// lane's load), and each lane's shift down to its word.
#[cfg(target_arch = "x86_64")]
fn lane_table<const N: usize>(k: u32, base: impl Fn(usize) -> usize) -> ([[u8; 4]; N], [u32; N]) {
    let mut gather = [[0u8; 4]; N];
    let mut shifts = [0u32; N];
    for (j, (bytes, shift)) in gather.iter_mut().zip(&mut shifts).enumerate() {
        let bit = j * k as usize;
        for (b, byte) in bytes.iter_mut().enumerate() {
            *byte = (bit / 8 - base(j) + b) as u8;
        }
        *shift = (bit % 8) as u32;
    }
    (gather, shifts)
}

/// Unpacking with AVX2, as the AVX-512 kernel does on half the lanes: each
/// 128-bit half of a vector takes four words, its lanes gathering the 4
/// bytes that hold their word with one in-lane byte shuffle of a 16-byte
/// load (the second half loaded from the byte that holds word 4's first
/// bit), then shifting and masking.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::word::{Put, Word};
    use std::arch::x86_64::*;

    /// Words per step: one vector of u32 lanes.
    const STEP: usize = 8;
    /// Bytes each half of a step loads.
    const LOAD: usize = 16;
    /// Widest word a lane can gather: starting up to 7 bits into its first
    /// byte, it must end within 4 bytes.
    pub(super) const MAX_K: u32 = 25;

    /// Whether the CPU (and, in tests, the test) allows this kernel.
    pub(super) fn available() -> bool {
        super::super::simd::level() >= super::super::simd::Simd::Avx2
    }

    /// Unpacks whole steps of 8 words of `k` bits (`1..=MAX_K`) while both
    /// of the step's 16-byte loads stay inside `bytes`; returns the words
    /// done.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn unpack<T: Word, P: Put>(
        k: u32,
        bytes: &[u8],
        out: &mut [T],
        put: P,
    ) -> usize {
        debug_assert!((1..=MAX_K).contains(&k));
        // 8 words of k bits are k bytes; word 4 starts in byte k / 2.
        let (stride, half) = (k as usize, (4 * k / 8) as usize);
        let steps = match bytes.len().checked_sub(half + LOAD) {
            Some(room) => (room / stride + 1).min(out.len() / STEP),
            None => 0,
        };
        let (gather, shifts) = lanes(k, half);
        let mask = _mm256_set1_epi32(((1u32 << k) - 1) as i32);
        for s in 0..steps {
            // SAFETY: `s * stride + half + LOAD <= bytes.len()` by the
            // choice of `steps`, and `half` is at least 0.
            let (lo, hi) = unsafe {
                let at = bytes.as_ptr().add(s * stride);
                (
                    _mm_loadu_si128(at.cast()),
                    _mm_loadu_si128(at.add(half).cast()),
                )
            };
            let words = _mm256_shuffle_epi8(_mm256_set_m128i(hi, lo), gather);
            let words = _mm256_and_si256(_mm256_srlv_epi32(words, shifts), mask);
            // SAFETY: `(s + 1) * STEP <= out.len()` by the choice of `steps`,
            // and every word has at most `k <= T::BITS` bits.
            unsafe { store(out.as_mut_ptr().add(s * STEP), words, put) };
        }
        steps * STEP
    }

    /// The in-lane byte shuffle that gives lane `j` the 4 bytes from the one
    /// holding bit `j * k` (counted from byte `half` for the upper four),
    /// and each lane's shift down to its word.
    #[target_feature(enable = "avx2")]
    fn lanes(k: u32, half: usize) -> (__m256i, __m256i) {
        let (gather, shifts) = super::lane_table::<STEP>(k, |j| if j < 4 { 0 } else { half });
        // SAFETY: both arrays are exactly 32 bytes.
        unsafe {
            (
                _mm256_loadu_si256(gather.as_ptr().cast()),
                _mm256_loadu_si256(shifts.as_ptr().cast()),
            )
        }
    }

    /// Puts 8 words (u32 lanes) into `out[..8]`, narrowed to `T`.
    ///
    /// # Safety
    /// `out` must be valid for 8 `T`s, and every word must fit `T`.
    #[target_feature(enable = "avx2")]
    unsafe fn store<T: Word, P: Put>(out: *mut T, words: __m256i, put: P) {
        let words = match put.or_in() {
            None => words,
            Some(m) => {
                // SAFETY: the caller guarantees `out` holds 8 `T`s.
                let old = unsafe { load_widened(out) };
                let old = _mm256_sll_epi32(old, _mm_cvtsi32_si128(m.pending as i32));
                _mm256_or_si256(
                    old,
                    _mm256_sll_epi32(words, _mm_cvtsi32_si128(m.shift as i32)),
                )
            }
        };
        // SAFETY: the caller guarantees `out` holds 8 `T`s: 8, 16 or 32
        // bytes. Narrowing truncates each lane, as the `T` shift above would.
        unsafe {
            match size_of::<T>() {
                1 => {
                    // Each lane's low byte, to the first 4 bytes of its half.
                    let low = _mm256_setr_epi8(
                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, //
                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                    );
                    let picked = _mm256_shuffle_epi8(words, low);
                    let first = _mm256_extract_epi32::<0>(picked) as u32 as u64;
                    let second = _mm256_extract_epi32::<4>(picked) as u32 as u64;
                    std::ptr::write_unaligned(out.cast::<u64>(), first | second << 32);
                }
                2 => {
                    // Masked first, so that packing never saturates.
                    let low = _mm256_and_si256(words, _mm256_set1_epi32(0xffff));
                    let packed = _mm256_packus_epi32(low, low);
                    let ordered = _mm256_permute4x64_epi64::<0b1000>(packed);
                    _mm_storeu_si128(out.cast(), _mm256_castsi256_si128(ordered));
                }
                _ => _mm256_storeu_si256(out.cast(), words),
            }
        }
    }

    /// The 8 `T`s at `out`, widened to u32 lanes.
    ///
    /// # Safety
    /// `out` must be valid for 8 `T`s.
    #[target_feature(enable = "avx2")]
    unsafe fn load_widened<T: Word>(out: *const T) -> __m256i {
        // SAFETY: the caller guarantees `out` holds 8 `T`s: 8, 16 or 32 bytes.
        unsafe {
            match size_of::<T>() {
                1 => _mm256_cvtepu8_epi32(_mm_loadl_epi64(out.cast())),
                2 => _mm256_cvtepu16_epi32(_mm_loadu_si128(out.cast())),
                _ => _mm256_loadu_si256(out.cast()),
            }
        }
    }
}

/// Unpacking with AVX-512: each of 16 u32 lanes gathers the 4 bytes holding
/// its word with one byte permutation (VBMI) of a 64-byte load, shifts its
/// word down by its own amount and masks it. Modelled on the usual SIMD
/// bit-unpacking scheme (shuffle, variable shift, mask) of integer
/// compression libraries.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::word::{Put, Word};
    use std::arch::x86_64::*;

    /// Words per step: one vector of u32 lanes.
    const STEP: usize = 16;
    /// Bytes each step loads.
    const LOAD: usize = 64;
    /// Widest word a lane can gather: starting up to 7 bits into its first
    /// byte, it must end within 4 bytes.
    pub(super) const MAX_K: u32 = 25;

    /// Whether the CPU (and, in tests, the test) allows this kernel.
    pub(super) fn available() -> bool {
        use std::arch::is_x86_feature_detected as has;
        super::super::simd::level() == super::super::simd::Simd::Avx512
            && has!("avx512bw")
            && has!("avx512vbmi")
    }

    /// Unpacks whole steps of 16 words of `k` bits (`1..=MAX_K`) while the
    /// step's 64-byte load stays inside `bytes`; returns the words done.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, BW and VBMI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) unsafe fn unpack<T: Word, P: Put>(
        k: u32,
        bytes: &[u8],
        out: &mut [T],
        put: P,
    ) -> usize {
        debug_assert!((1..=MAX_K).contains(&k));
        // 16 words of k bits are 2k bytes.
        let stride = 2 * k as usize;
        let steps = match bytes.len().checked_sub(LOAD) {
            Some(room) => (room / stride + 1).min(out.len() / STEP),
            None => 0,
        };
        let (gather, shifts) = lanes(k);
        let mask = _mm512_set1_epi32(((1u32 << k) - 1) as i32);
        for s in 0..steps {
            // SAFETY: `s * stride + LOAD <= bytes.len()` by the choice of `steps`.
            let v = unsafe { _mm512_loadu_si512(bytes.as_ptr().add(s * stride).cast()) };
            let words = _mm512_permutexvar_epi8(gather, v);
            let words = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), mask);
            // SAFETY: `(s + 1) * STEP <= out.len()` by the choice of `steps`,
            // and every word has at most `k <= T::BITS` bits.
            unsafe { store(out.as_mut_ptr().add(s * STEP), words, put) };
        }
        steps * STEP
    }

    /// The byte permutation that gives lane `j` the 4 bytes from the one
    /// holding bit `j * k`, and each lane's shift down to its word.
    #[target_feature(enable = "avx512f")]
    fn lanes(k: u32) -> (__m512i, __m512i) {
        let (gather, shifts) = super::lane_table::<STEP>(k, |_| 0);
        // SAFETY: both arrays are exactly 64 bytes.
        unsafe {
            (
                _mm512_loadu_si512(gather.as_ptr().cast()),
                _mm512_loadu_si512(shifts.as_ptr().cast()),
            )
        }
    }

    /// Puts 16 words (u32 lanes) into `out[..16]`, narrowed to `T`.
    ///
    /// # Safety
    /// `out` must be valid for 16 `T`s, and every word must fit `T`.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn store<T: Word, P: Put>(out: *mut T, words: __m512i, put: P) {
        let words = match put.or_in() {
            None => words,
            Some(m) => {
                // SAFETY: the caller guarantees `out` holds 16 `T`s.
                let old = unsafe { load_widened(out) };
                let old = _mm512_sll_epi32(old, _mm_cvtsi32_si128(m.pending as i32));
                _mm512_or_si512(
                    old,
                    _mm512_sll_epi32(words, _mm_cvtsi32_si128(m.shift as i32)),
                )
            }
        };
        // SAFETY: the caller guarantees `out` holds 16 `T`s. Narrowing
        // truncates each lane, as the `T` shift above would.
        unsafe {
            match size_of::<T>() {
                1 => _mm_storeu_si128(out.cast(), _mm512_cvtepi32_epi8(words)),
                2 => _mm256_storeu_si256(out.cast(), _mm512_cvtepi32_epi16(words)),
                _ => _mm512_storeu_si512(out.cast(), words),
            }
        }
    }

    /// The 16 `T`s at `out`, widened to u32 lanes.
    ///
    /// # Safety
    /// `out` must be valid for 16 `T`s.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load_widened<T: Word>(out: *const T) -> __m512i {
        // SAFETY: the caller guarantees `out` holds 16 `T`s: 16, 32 or 64 bytes.
        unsafe {
            match size_of::<T>() {
                1 => _mm512_cvtepu8_epi32(_mm_loadu_si128(out.cast())),
                2 => _mm512_cvtepu16_epi32(_mm256_loadu_si256(out.cast())),
                _ => _mm512_loadu_si512(out.cast()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::simd::{tests::with_limit, Simd};
    use super::super::tests::xorshift;
    use super::super::{decode, decode_or_in, OrIn, Word};

    /// Each kernel in turn (where the CPU has it), then the portable code.
    const LIMITS: [Simd; 3] = [Simd::Avx512, Simd::Avx2, Simd::None];

    /// Word `i` of `k` bits, read bit by bit: the reference for the unpackers.
    fn naive(payload: &[u8], k: u32, i: usize) -> u32 {
        (0..k as usize).fold(0, |w, b| {
            let bit = i * k as usize + b;
            w | ((payload[bit / 8] >> (bit % 8)) as u32 & 1) << b
        })
    }

    /// Random payload bytes for `n` words of `k` bits, as tag, `k` and bytes
    /// with zero padding bits.
    fn random_encoding(k: u32, n: usize, seed: &mut u64) -> Vec<u8> {
        let mut payload: Vec<u8> = (0..super::packed_bytes(n, k))
            .map(|_| xorshift(seed) as u8)
            .collect();
        let used = (n * k as usize % 8) as u32;
        if let (Some(last), true) = (payload.last_mut(), used != 0) {
            *last &= (1u8 << used) - 1;
        }
        [vec![1, k as u8], payload].concat()
    }

    /// Decodes into `T`, with SIMD up to `limit`, overwriting or oring in.
    fn unpack<T: Word>(
        input: &[u8],
        width: u32,
        n: usize,
        limit: Simd,
        or_in: Option<OrIn>,
    ) -> Vec<T> {
        let mut out = vec![T::from_u32(0x5A5A_5A5A & (u32::MAX >> (32 - T::BITS))); n];
        let used = with_limit(limit, || match or_in {
            None => decode(input, width, &mut out),
            Some(m) => decode_or_in(input, width, m, &mut out),
        });
        assert_eq!(used, Ok(input.len()));
        out
    }

    /// Every word width and type, with lengths around the SIMD kernel's
    /// steps and windows: the SIMD and portable unpackers match the bit-by-bit
    /// reference, overwriting and oring in.
    fn check_type<T: Word>(seed: &mut u64) {
        for k in 0..=T::BITS {
            let width = k.max(1);
            for n in (0..80).chain([255, 256, 257, 1000, 4099]) {
                let input = random_encoding(k, n, seed);
                let want: Vec<u32> = (0..n).map(|i| naive(&input[2..], k, i)).collect();
                let m = OrIn {
                    pending: xorshift(seed) as u32 % T::BITS,
                    shift: xorshift(seed) as u32 % (T::BITS - width + 1),
                };
                let fill = T::from_u32(0x5A5A_5A5A & (u32::MAX >> (32 - T::BITS)));
                for simd in LIMITS {
                    let got = unpack::<T>(&input, width, n, simd, None);
                    assert!(
                        got.iter().map(|w| w.to_u32()).eq(want.iter().copied()),
                        "k {k} n {n} simd {simd:?}"
                    );
                    let got = unpack::<T>(&input, width, n, simd, Some(m));
                    let merged = want
                        .iter()
                        .map(|&w| fill << m.pending | T::from_u32(w) << m.shift);
                    assert!(
                        got.iter().copied().eq(merged),
                        "k {k} n {n} simd {simd:?} {m:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn unpackers_match_the_bitwise_reference() {
        let mut seed = 0x9E37_79B9_7F4A_7C15;
        check_type::<u8>(&mut seed);
        check_type::<u16>(&mut seed);
        check_type::<u32>(&mut seed);
    }

    /// Memory whose last byte is followed by an inaccessible page, so that
    /// any read or write past its end faults.
    struct Guarded {
        base: *mut u8,
        size: usize,
    }

    impl Guarded {
        fn new(pages: usize) -> Guarded {
            let page = 4096;
            let size = (pages + 1) * page;
            // SAFETY: an anonymous private mapping, checked below, then the
            // last page made inaccessible; both calls only touch this mapping.
            unsafe {
                let base = libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(base, libc::MAP_FAILED);
                let guard = base.cast::<u8>().add(size - page);
                assert_eq!(libc::mprotect(guard.cast(), page, libc::PROT_NONE), 0);
                Guarded {
                    base: base.cast(),
                    size: size - page,
                }
            }
        }

        /// The last `len` bytes before the guard page, as `T`s.
        fn tail<T: Word>(&mut self, len: usize) -> &mut [T] {
            let bytes = len * size_of::<T>();
            assert!(bytes <= self.size);
            // SAFETY: the range lies inside the accessible part of the
            // mapping, which this borrow holds exclusively, and starts
            // aligned for `T` since it ends on a page boundary.
            unsafe { std::slice::from_raw_parts_mut(self.base.add(self.size - bytes).cast(), len) }
        }
    }

    impl Drop for Guarded {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping made in `new`.
            unsafe { libc::munmap(self.base.cast(), self.size + 4096) };
        }
    }

    /// Input and output that end right before a guard page: the unpackers
    /// (the SIMD ones load 16 or 64 bytes at a time) touch nothing past either.
    #[test]
    fn unpackers_stay_inside_input_and_output() {
        for limit in LIMITS {
            with_limit(limit, unpackers_stay_inside);
        }
    }

    fn unpackers_stay_inside() {
        let mut seed = 0x2545_F491_4F6C_DD1D;
        let (mut input, mut output) = (Guarded::new(8), Guarded::new(8));
        for k in 0..=32 {
            for n in [0, 1, 15, 16, 17, 31, 32, 33, 100, 513, 4096] {
                let encoding = random_encoding(k, n, &mut seed);
                input.tail(encoding.len()).copy_from_slice(&encoding);
                let encoding = &*input.tail::<u8>(encoding.len());
                let out = output.tail::<u32>(n);
                assert_eq!(decode(encoding, k.max(1), out), Ok(encoding.len()));
                let m = OrIn {
                    pending: 1,
                    shift: 0,
                };
                assert_eq!(decode_or_in(encoding, k.max(1), m, out), Ok(encoding.len()));
                if k <= 8 {
                    let out = output.tail::<u8>(n);
                    assert_eq!(decode(encoding, k.max(1), out), Ok(encoding.len()));
                }
            }
        }
    }
}
