//! Property tests over every codec: exact sizes, round trips, `best`'s choice,
//! and decoding of corrupt or arbitrary bytes without panics.

use super::encode::expected_size;
use super::simd::Simd;
use super::width::word_mask;
use super::*;
use crate::wire::Reader;
use proptest::prelude::*;

/// Distributions of the words of the streams the tests draw from.
#[derive(Clone, Copy, Debug)]
enum Distribution {
    Uniform,
    /// Geometric: word k has probability about 2^-(k+1): heavily skewed.
    Geometric,
    /// A handful of distinct, widely spread words.
    Few(u32),
    Single,
    /// Thousands of distinct words, to cross the 4096-symbol boundary.
    Many(u32),
}

/// A small deterministic generator (xorshift64; `seed` must not be 0), so
/// streams are cheap to build and replay. Shared by the crate's unit tests.
pub(crate) fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn stream(dist: Distribution, width: u32, len: usize, seed: u64) -> Vec<u32> {
    let mask = word_mask(width);
    let mut seed = seed | 1;
    let pool: Vec<u32> = (0..4096)
        .map(|_| xorshift(&mut seed) as u32 & mask)
        .collect();
    (0..len)
        .map(|_| {
            let r = xorshift(&mut seed);
            match dist {
                Distribution::Uniform => r as u32 & mask,
                Distribution::Geometric => (r.trailing_zeros() + (r >> 60) as u32 % 2) & mask,
                Distribution::Few(k) => pool[(r % k as u64) as usize],
                Distribution::Single => pool[0],
                Distribution::Many(k) => (r % k as u64) as u32 & mask,
            }
        })
        .collect()
}

fn distribution_strategy() -> impl Strategy<Value = Distribution> {
    prop_oneof![
        Just(Distribution::Uniform),
        Just(Distribution::Geometric),
        (2u32..40).prop_map(Distribution::Few),
        Just(Distribution::Single),
        (3000u32..5000).prop_map(Distribution::Many),
    ]
}

fn len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..40, 4 => 40usize..3000, 1 => 3000usize..100_000]
}

/// Runs `f` with all SIMD kernels allowed, or none.
pub(super) fn with_simd<R>(allowed: bool, f: impl FnOnce() -> R) -> R {
    let limit = if allowed { Simd::Avx512 } else { Simd::None };
    super::simd::tests::with_limit(limit, f)
}

/// Decodes `n` words into `T`s, widened back to u32 for comparison, with and
/// without SIMD (which must agree); where the codec can, also ors them in
/// and checks that against oring the decoded words in.
fn decode_as<T: Word>(input: &[u8], width: u32, n: usize) -> Result<(Vec<u32>, usize), WireError> {
    let decode_into = |simd| {
        let mut out = vec![T::default(); n];
        with_simd(simd, || decode(input, width, &mut out)).map(|used| (out, used))
    };
    let result = decode_into(true);
    assert_eq!(
        result,
        decode_into(false),
        "SIMD and portable decoding differ"
    );
    if peek_codec(input).is_ok_and(ors_in) {
        check_or_in(input, width, n, &result);
    }
    let (out, used) = result?;
    Ok((out.iter().map(|w| w.to_u32()).collect(), used))
}

/// Checks `decode_or_in` against oring the words `decoded` (or failing like
/// it), with and without SIMD, over arbitrary earlier fields and shifts.
fn check_or_in<T: Word>(
    input: &[u8],
    width: u32,
    n: usize,
    decoded: &Result<(Vec<T>, usize), WireError>,
) {
    let mut seed = (n as u64) << 8 | width as u64 | 1;
    let pending = xorshift(&mut seed) as u32 % T::BITS;
    let shift = xorshift(&mut seed) as u32 % (T::BITS - width + 1);
    let or_in = OrIn { pending, shift };
    let earlier: Vec<T> = (0..n)
        .map(|_| T::from_u32(xorshift(&mut seed) as u32 & word_mask(T::BITS)))
        .collect();
    for simd in [true, false] {
        let mut out = earlier.clone();
        let used = with_simd(simd, || decode_or_in(input, width, or_in, &mut out));
        let Ok((words, want_used)) = decoded else {
            assert_eq!(
                used.unwrap_err(),
                decoded.clone().unwrap_err(),
                "or_in error"
            );
            continue;
        };
        assert_eq!(used, Ok(*want_used), "or_in used");
        for ((&o, &e), &w) in out.iter().zip(&earlier).zip(words) {
            assert_eq!(o, e << pending | w << shift, "or_in {or_in:?}, simd {simd}");
        }
    }
}

/// Decodes `n` words into every word type wide enough for `width`, checks
/// that all give the same words and bytes used, or the same error, and
/// returns that result.
pub(super) fn decode_all(
    input: &[u8],
    width: u32,
    n: usize,
) -> Result<(Vec<u32>, usize), WireError> {
    let wide = decode_as::<u32>(input, width, n);
    if width <= 16 {
        assert_eq!(decode_as::<u16>(input, width, n), wide, "u16 differs");
    }
    if width <= 8 {
        assert_eq!(decode_as::<u8>(input, width, n), wide, "u8 differs");
    }
    wide
}

/// Encodes with `codec`, checks the exact size, and decodes (into every word
/// type that fits) from a buffer followed by unrelated bytes.
fn check_round_trip(codec: Codec, words: &[u32], width: u32, stats: &Stats) {
    let size = encoded_size(codec, words, width, stats);
    let mut buf = vec![0xAB];
    let applied = encode_with(codec, words, width, &mut buf);
    assert_eq!(applied, size.is_some(), "{codec:?} applicability");
    let Some(size) = size else {
        assert_eq!(
            buf,
            [0xAB],
            "{codec:?} appended bytes although it does not apply"
        );
        return;
    };
    assert_eq!(buf.len() - 1, size, "{codec:?} encoded_size is not exact");
    assert_eq!(peek_codec(&buf[1..]).unwrap(), codec);
    buf.extend_from_slice(&[0x5A; 9]);
    let (out, used) = decode_all(&buf[1..], width, words.len()).unwrap();
    assert_eq!(used, size, "{codec:?} consumed the wrong number of bytes");
    assert!(out == words, "{codec:?} round trip differs");
}

/// `best` sizes every codec a literal may take, each once.
#[test]
fn best_sizes_every_codec_once() {
    let name = |c: &Codec| c.name();
    let mut sized: Vec<_> = super::SIZING_ORDER.iter().map(name).collect();
    let mut all: Vec<_> = Codec::ALL.iter().map(name).collect();
    sized.sort_unstable();
    all.sort_unstable();
    assert_eq!(sized, all);
}

/// A split histogram counts every word once, with its tables interleaved
/// (narrow words, runs of one word) or single (wide words).
#[test]
fn split_histograms_count_every_word() {
    let mut seed = 11;
    for size in [16usize, 1 << 10, 1 << 12] {
        let words: Vec<u32> = (0..5_003)
            .map(|i| match i % 700 < 300 {
                true => 3,
                false => (xorshift(&mut seed) % size as u64) as u32,
            })
            .collect();
        let mut histogram = SplitHistogram::new(size);
        histogram.add(&words[..2_000]);
        histogram.add(&words[2_000..]);
        let mut expected = vec![0u32; size];
        words.iter().for_each(|&w| expected[w as usize] += 1);
        let counts: Vec<u32> = (0..size).map(|w| histogram.count(w)).collect();
        assert_eq!(counts, expected, "size {size}");
    }
}

/// Each quarter's counts are its own words' however the stream's length
/// divides (quarters of unequal lengths, empty ones), for every width
/// counted densely, in pairs or not.
#[test]
fn dense_counts_are_each_quarters_words() {
    let mut seed = 5;
    for width in [1u32, 4, 5, 6, 8, 11, 12] {
        for n in (0..12).chain([1_001, 40_003]) {
            let words: Vec<u32> = (0..n)
                .map(|i| match i % 9 < 4 {
                    true => 1,
                    false => (xorshift(&mut seed) & word_mask(width) as u64) as u32,
                })
                .collect();
            let stats = Stats::new(&words, width);
            let Some(alphabet) = stats.alphabet() else {
                assert!(words.is_empty() || width > 12, "width {width} n {n}");
                continue;
            };
            let mut expected = std::collections::BTreeMap::<u32, [u32; 4]>::new();
            for (q, range) in super::huffman::quarter_ranges(n).into_iter().enumerate() {
                for &w in &words[range] {
                    expected.entry(w).or_default()[q] += 1;
                }
            }
            let found = alphabet
                .words
                .iter()
                .copied()
                .zip(alphabet.quarters.iter().copied());
            assert!(found.eq(expected), "width {width} n {n}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_codec_round_trips_with_exact_size(
        width in 1u32..=32, dist in distribution_strategy(), len in len_strategy(), seed: u64,
    ) {
        let words = stream(dist, width, len, seed);
        let stats = Stats::new(&words, width);
        for codec in Codec::ALL {
            check_round_trip(codec, &words, width, &stats);
            // The search skips candidates by the lower bound: never above the size.
            let size = encoded_size(codec, &words, width, &stats);
            if let Some(size) = size {
                prop_assert!(size_lower_bound(words.len(), width, &stats) <= size, "{:?}", codec);
            }
            // `best` skips Huffman where it is sure to exceed a bound: never
            // where its exact size is within it, and it sizes it exactly.
            if let (Codec::Huffman, Some(size)) = (codec, size) {
                for most in [size, size + 1, usize::MAX] {
                    let expected = expected_size(codec, &words, width, &stats, most);
                    prop_assert_eq!(expected, Some(size));
                }
                for most in [0, size / 2, size - 1] {
                    let expected = expected_size(codec, &words, width, &stats, most);
                    prop_assert!(expected.is_none() || expected == Some(size));
                }
            }
        }
    }

    /// Mapped statistics are those of the mapped stream, with or without an
    /// alphabet: the bijections here are a Map's kinds (xor, add, rotation,
    /// reversal).
    #[test]
    fn mapped_stats_are_the_mapped_streams(
        width in 1u32..=32, dist in distribution_strategy(), len in len_strategy(), seed: u64,
        c: u32, kind in 0usize..4,
    ) {
        let words = stream(dist, width, len, seed);
        let m = word_mask(width);
        let rotate = |w: u32, r: u32| match r % width {
            0 => w,
            r => (w << r | w >> (width - r)) & m,
        };
        let f = |w: u32| match kind {
            0 => w ^ (c & m),
            1 => w.wrapping_add(c) & m,
            2 => rotate(w, c),
            _ => w.reverse_bits() >> (32 - width),
        };
        let stats = Stats::new(&words, width);
        let mapped: Vec<u32> = words.iter().map(|&w| f(w)).collect();
        let direct = Stats::new(&mapped, width);
        let r = stats.mapped(f, || words.iter().map(|&w| f(w)).max().unwrap_or(0));
        prop_assert_eq!(r.max(), direct.max());
        match (r.alphabet(), direct.alphabet()) {
            (Some(a), Some(d)) => {
                prop_assert_eq!(&a.words, &d.words);
                prop_assert_eq!(&a.quarters, &d.quarters);
            }
            (None, None) => {}
            _ => prop_assert!(false, "mapped {:?}, direct {:?}", r, direct),
        }
    }

    #[test]
    fn best_is_the_true_minimum_but_for_rans_predictions(
        width in 1u32..=32, dist in distribution_strategy(), len in 0usize..3000, seed: u64,
    ) {
        let words = stream(dist, width, len, seed);
        let stats = Stats::new(&words, width);
        let sizes: Vec<_> = Codec::ALL
            .iter()
            .filter_map(|&c| encoded_size(c, &words, width, &stats).map(|s| (c, s)))
            .collect();
        let min = sizes.iter().map(|&(_, s)| s).min().unwrap();
        let (codec, size) = best(&words, width, &stats);
        prop_assert_eq!(Some(size), expected_size(codec, &words, width, &stats, usize::MAX));
        let exact = sizes.iter().find(|&&(c, _)| c == codec).unwrap().1;
        // Only a rANS prediction may lead it off the least size, by little.
        let rans = sizes.iter().any(|&(c, _)| c == Codec::Rans);
        let slack = if rans { super::rans_prediction_slack(min) } else { 0 };
        prop_assert!(exact <= min + slack, "{:?} codes {} bytes, the least is {}", codec, exact, min);
        if !rans {
            prop_assert_eq!(Some(&(codec, size)), sizes.iter().find(|&&(_, s)| s == min));
        }
        let mut buf = Vec::new();
        prop_assert_eq!(encode(&words, width, &mut buf), codec);
        prop_assert_eq!(buf.len(), exact);
    }

    #[test]
    fn corrupt_encodings_never_panic(
        width in 1u32..=32, dist in distribution_strategy(), len in 0usize..2000, seed: u64,
        codec_pick in 0usize..4, flips in prop::collection::vec(any::<(usize, u8)>(), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let words = stream(dist, width, len, seed);
        let mut buf = Vec::new();
        if !encode_with(Codec::ALL[codec_pick], &words, width, &mut buf) {
            return Ok(());
        }
        let mut flipped = buf.clone();
        for &(at, bit) in &flips {
            let at = at % flipped.len();
            flipped[at] ^= 1 << (bit % 8);
        }
        let _ = decode_all(&flipped, width, words.len());
        let truncated = &buf[..cut.index(buf.len())];
        prop_assert!(decode_all(truncated, width, words.len()).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        width in 1u32..=32, bytes in prop::collection::vec(any::<u8>(), 0..300), len in 0usize..500,
    ) {
        if let Ok((out, used)) = decode_all(&bytes, width, len) {
            prop_assert!(used <= bytes.len());
            prop_assert!(out.iter().all(|&w| w <= word_mask(width)));
        }
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_tag_never_panic(
        width in 1u32..=32, tag in 0u8..5, bytes in prop::collection::vec(any::<u8>(), 0..300),
        len in 0usize..500,
    ) {
        let mut input = vec![tag];
        input.extend_from_slice(&bytes);
        let _ = decode_all(&input, width, len);
        if let Ok(table) = table_len(&input, width) {
            prop_assert!(table < input.len());
        }
    }

    #[test]
    fn table_len_ends_where_the_coded_words_begin(
        width in 1u32..=32, dist in distribution_strategy(), len in 0usize..3000, seed: u64,
    ) {
        let words = stream(dist, width, len, seed);
        for codec in Codec::ALL {
            let mut buf = Vec::new();
            if !encode_with(codec, &words, width, &mut buf) {
                continue;
            }
            let table = table_len(&buf, width).expect("an encoding's table reads");
            let mut r = Reader::new(&buf[1 + table..]);
            // What follows the table: Huffman's four bitstreams with their
            // lengths; rANS's lane states, two counts and its 16-bit words.
            let rest = match codec {
                Codec::Raw | Codec::BitPack => {
                    prop_assert_eq!(table, 0);
                    continue;
                }
                Codec::Huffman => (0..4).map(|_| r.varint().unwrap() as usize).sum(),
                _ => {
                    let (_, groups_log2, _) = rans::head_fields(buf[1], rans::Form::Seeded);
                    r.bytes(4 * rans::used_lanes(len, 1 << groups_log2)).unwrap();
                    r.varint().unwrap();
                    2 * r.varint().unwrap() as usize
                }
            };
            prop_assert_eq!(1 + table + r.pos() + rest, buf.len(), "{:?}", codec);
        }
    }
}

/// Long streams of the distributions the product meets (bf16 exponent and
/// mantissa bytes, 16-bit words with thousands of values) at every width.
#[test]
fn long_streams_round_trip_at_every_width() {
    for width in 1..=32 {
        for dist in [
            Distribution::Geometric,
            Distribution::Few(30),
            Distribution::Uniform,
            Distribution::Many(4000),
        ] {
            let words = stream(dist, width, 100_000, width as u64);
            let stats = Stats::new(&words, width);
            for codec in Codec::ALL {
                check_round_trip(codec, &words, width, &stats);
            }
        }
    }
}

fn decode_err(input: &[u8], width: u32, n: usize) -> &'static str {
    decode_all(input, width, n).unwrap_err().reason
}

#[test]
fn rejects_invalid_tables() {
    // Huffman, range [0, 1] with lengths 1 and 2: Kraft sum 3/4, incomplete.
    assert_eq!(
        decode_err(&[2, 2, 0, 0x21, 0, 0, 0, 0], 8, 0),
        "huffman code is not complete"
    );
    // Huffman lengths 1, 1, 1: over-subscribed.
    assert_eq!(
        decode_err(&[2, 4, 0, 0x11, 0x01], 8, 0),
        "huffman code is not complete"
    );
    // Huffman length 13.
    assert_eq!(
        decode_err(&[2, 2, 0, 0xD1], 8, 0),
        "symbol value out of range"
    );
    // Range [254, 256] does not fit 8 bits.
    assert_eq!(
        decode_err(&[2, 4, 0xFE, 0x01, 0x11], 8, 0),
        "symbol range exceeds the literal width"
    );
    // rANS scale 1, symbols 0 and 1 with frequencies 1 and 2: sum 3 != 2.
    assert_eq!(
        decode_err(&[3, 1, 2, 0, 1, 2], 8, 0),
        "rans frequencies do not sum to 2^scale"
    );
    // Raw byte 0x80 in a 7-bit literal.
    assert_eq!(
        decode_err(&[0, 0x80], 7, 1),
        "raw word exceeds the literal width"
    );
    // BitPack k = 9 in an 8-bit literal.
    assert_eq!(
        decode_err(&[1, 9], 8, 0),
        "bitpack width exceeds the literal width"
    );
    assert_eq!(decode_err(&[9], 8, 0), "unknown literal codec tag");
}

#[test]
fn rejects_unconsumed_and_mismatched_streams() {
    let words: Vec<u32> = (0..1000).map(|i| (i * i % 7) as u32).collect();
    for codec in [Codec::Huffman, Codec::Rans] {
        let mut buf = Vec::new();
        assert!(encode_with(codec, &words, 8, &mut buf));
        // Decoding fewer words than were encoded leaves data unread.
        assert!(decode_all(&buf, 8, 999).is_err(), "{codec:?}");
    }
}

/// Small streams of every distribution through every codec, at widths that
/// take each word type, decoded by the portable decoders (and SIMD ones where
/// the CPU has them). Small enough for `scripts/test.sh` to run under Miri, where
/// only the portable decoders run.
#[test]
fn small_streams_round_trip_in_every_codec() {
    // Under Miri, fewer: one width per word type, one length.
    let (distributions, widths, lens): (&[Distribution], &[u32], &[usize]) = if cfg!(miri) {
        (
            &[Distribution::Few(3), Distribution::Geometric],
            &[5, 12, 23],
            &[130],
        )
    } else {
        (
            &[
                Distribution::Single,
                Distribution::Few(3),
                Distribution::Geometric,
                Distribution::Uniform,
            ],
            &[1, 5, 8, 12, 16, 23, 32],
            &[1, 7, 33, 130],
        )
    };
    for (k, &dist) in distributions.iter().enumerate() {
        for &width in widths {
            for &len in lens {
                let words = stream(dist, width, len, k as u64 * 97 + len as u64);
                let stats = Stats::new(&words, width);
                for codec in Codec::ALL {
                    check_round_trip(codec, &words, width, &stats);
                }
            }
        }
    }
}

#[test]
fn tiny_streams_use_every_applicable_codec() {
    for words in [vec![], vec![5], vec![5, 5, 5], vec![1, 2]] {
        let stats = Stats::new(&words, 3);
        for codec in Codec::ALL {
            check_round_trip(codec, &words, 3, &stats);
        }
    }
    let stats = Stats::new(&[7], 3);
    assert_eq!(encoded_size(Codec::Huffman, &[7], 3, &stats), None);
    assert!(encoded_size(Codec::Rans, &[7], 3, &stats).is_some());
}

#[test]
fn distinct_counts_up_to_the_limit() {
    let words: Vec<u32> = (0..4096).collect();
    assert_eq!(Stats::new(&words, 20).distinct(), Some(4096));
    assert_eq!(Stats::new(&words, 12).distinct(), Some(4096));
    let words: Vec<u32> = (0..4097).collect();
    assert_eq!(Stats::new(&words, 20).distinct(), None);
    assert_eq!(Stats::new(&words, 13).distinct(), None);
}
