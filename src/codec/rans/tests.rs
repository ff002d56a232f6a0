#[cfg(target_arch = "x86_64")]
use super::simd_encode;
use super::{choose::*, decode::*, encode::*, freqs::*, layout::*, model::*, step::*, table::*};
use crate::codec::simd::{level as simd_level, tests::with_limit, Simd};
use crate::codec::symbols::{self, SymbolSet, Values};
use crate::codec::{codelen::sorted_indices, stats::Stats, tests::xorshift};
use crate::codec::{encode_with, Codec};
use crate::wire::Reader;

#[test]
fn integer_log2_is_close_to_the_real_one() {
    for shift in 0..32 {
        assert_eq!(log2_q16(1 << shift), (shift as u64) << 16);
    }
    let mut seed = 7;
    for _ in 0..100_000 {
        let x = (xorshift(&mut seed) >> (xorshift(&mut seed) % 64)) as u32 | 1;
        let exact = (x as f64).log2() * 65536.0;
        let got = log2_q16(x) as f64;
        assert!(
            got <= exact && exact - got < 2.0,
            "log2({x}): {got} vs {exact}"
        );
    }
}

/// The rule `normalize` settles an excess by, sorting every frequency:
/// from the largest down (the first of equals first), each to 1 at most.
fn normalize_by_sorting(counts: &[u32], scale: u32) -> Vec<u32> {
    let total: u64 = counts.iter().map(|&c| c as u64).sum();
    let target = 1u64 << scale;
    let mut freqs: Vec<u32> = (counts.iter())
        .map(|&c| ((c as u64 * target + total / 2) / total).max(1) as u32)
        .collect();
    let sum: u64 = freqs.iter().map(|&f| f as u64).sum();
    let order = sorted_indices(freqs.iter().map(|&f| target - f as u64));
    if sum < target {
        freqs[order[0]] += (target - sum) as u32;
    }
    let mut excess = sum.saturating_sub(target);
    for i in order {
        let take = (freqs[i] as u64 - 1).min(excess);
        freqs[i] -= take as u32;
        excess -= take;
    }
    freqs
}

proptest::proptest! {
    /// Settling the rounding error on the largest frequency alone or from a
    /// bisected threshold gives what sorting them all gives: the
    /// frequencies a decoder derives from a table, which the format fixes.
    /// Many counts at a coarse scale round up to 1 and take many
    /// frequencies to settle.
    #[test]
    fn normalize_settles_as_sorting_every_frequency_does(
        counts in proptest::collection::vec(
            proptest::prop_oneof![1u32..4, 1u32..100_000, proptest::strategy::Just(7u32)], 1..300),
        extra in 0u32..6,
    ) {
        let scale = (ceil_log2(counts.len()) + extra).min(MAX_SCALE);
        proptest::prop_assume!(counts.len() <= 1 << scale);
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        let got = normalize(&counts, total, scale);
        proptest::prop_assert_eq!(got.iter().map(|&f| f as u64).sum::<u64>(), 1 << scale);
        proptest::prop_assert_eq!(got, normalize_by_sorting(&counts, scale));
    }
}

/// Scale of the model a stream of `counts` (word i repeated counts[i]
/// times) gets.
fn model_scale(counts: &[usize]) -> u32 {
    let words: Vec<u32> = counts
        .iter()
        .enumerate()
        .flat_map(|(w, &c)| std::iter::repeat_n(w as u32, c))
        .collect();
    let stats = Stats::new(&words, 8);
    Model::of(applicable(&stats).unwrap()).0.scale
}

#[test]
fn streams_take_the_coarsest_scale_that_costs_little() {
    // 256 equally likely words: 2^8 represents them exactly, with the
    // smallest table.
    assert_eq!(model_scale(&[512; 256]), 8);
    assert_eq!(model_scale(&[4; 256]), 8);
    // One word takes almost everything: the rare ones' minimum frequency
    // at any coarser scale takes a share of the dominant word's that costs
    // far more than 1/SCALE_COST.
    let mut skewed = vec![1; 256];
    skewed[0] = 130_000;
    assert_eq!(model_scale(&skewed), MAX_SCALE);
    // Less skewed, shorter: 2^14 would cost table bytes (two-byte
    // frequencies) that the words do not recoup.
    let mut skewed = vec![1; 256];
    skewed[0] = 10_000;
    assert_eq!(model_scale(&skewed), 13);
}

/// The sizing reciprocal equals true division for every frequency a
/// model can hold, at the edges of every quotient step and of the range.
#[test]
fn size_quotient_is_exact() {
    let mut seed = 0x1F83_D9AB_FB41_BD6Bu64;
    for freq in 1..=1u32 << MAX_SCALE {
        let s = SizeSymbol::new(freq, 0);
        assert_eq!(s.packed & FIELD, freq - 1);
        let check = |x: u32| assert_eq!(s.quotient(x), x / freq, "{x} / {freq}");
        for x in [0, 1, freq - 1, freq, freq + 1, u32::MAX, u32::MAX - 1] {
            check(x);
        }
        let top = u32::MAX / freq * freq;
        for x in [
            top,
            top - 1,
            top.wrapping_sub(freq),
            top - freq.min(top) + 1,
        ] {
            check(x);
        }
        for _ in 0..16 {
            let x = xorshift(&mut seed) as u32;
            check(x);
            check(x / freq * freq);
            check((x / freq * freq).wrapping_sub(1));
        }
    }
}

/// One step equals the rANS definition (renormalise when at or above the
/// limit, then `(y / f) * 2^scale + y % f + start`), at the renormalisation
/// bound and across the state range, for every scale.
#[test]
fn size_step_matches_the_encoder_step() {
    let mut seed = 0x6A09_E667_F3BC_C908u64;
    for scale in 0..=MAX_SCALE {
        let mut freqs = vec![1u32, 2, 3, (1 << scale) / 2 + 1, (1 << scale) - 1];
        freqs.extend((0..20).map(|_| 1 + (xorshift(&mut seed) % (1 << scale)) as u32));
        for freq in freqs.into_iter().filter(|&f| f >= 1 && f <= 1 << scale) {
            let start = (xorshift(&mut seed) % ((1u64 << scale) - freq as u64 + 1)) as u32;
            let fast = SizeSymbol::new(freq, start);
            // States at or above this renormalise before coding the symbol.
            let limit = (1u64 << (32 - scale)) * freq as u64;
            let limit_u32 = limit.min(1 << 32);
            let mut xs = vec![STATE_LOW, u32::MAX, (limit_u32 - 1) as u32];
            if limit < 1 << 32 {
                xs.push(limit as u32);
            }
            xs.extend((0..50).map(|_| (xorshift(&mut seed) as u32).max(STATE_LOW)));
            for x in xs {
                let renorm = x as u64 >= limit;
                let y = if renorm { x >> 16 } else { x };
                let want = ((y / freq) << scale) + y % freq + start;
                assert_eq!(
                    fast.step(x, scale),
                    (want, renorm),
                    "scale {scale} freq {freq} x {x}"
                );
            }
        }
    }
}

/// Renormalisation counts with `G` groups of the reference encoder loop
/// and of the fast sizer, with and without SIMD.
fn counts<const G: usize>(words: &[u32], width: u32) -> (usize, usize, usize) {
    let stats = Stats::new(words, width);
    let alphabet = stats.alphabet().expect("at most 4096 distinct");
    let model = &Model::of(alphabet).0;
    let reference = count_emitted::<G>(words, alphabet.index(), model);
    let simd = count_emitted_fast::<G>(words, alphabet, model);
    let portable = with_limit(Simd::None, || {
        count_emitted_fast::<G>(words, alphabet, model)
    });
    (reference, simd, portable)
}

/// `n` random words of `width` bits over at most `alphabet` symbols, in one
/// of four skews (which it returns).
fn skewed_words(seed: &mut u64, n: usize, width: u32, alphabet: u64) -> (Vec<u32>, u64) {
    let mask = u32::MAX >> (32 - width);
    let spread = (xorshift(seed) as u32) | 1;
    let skew = xorshift(seed) % 4;
    let words = (0..n)
        .map(|_| {
            let r = xorshift(seed);
            let sym = match skew {
                0 => r % alphabet,
                1 => (r % alphabet) * (r >> 40 & 3) / 3,
                2 => (r % alphabet).min(r >> 50 & 7),
                _ => (r % alphabet) >> (r >> 59),
            };
            (sym as u32).wrapping_mul(spread) & mask
        })
        .collect();
    (words, skew)
}

/// On streams of every length, width and alphabet, the predicted size
/// (what the search weighs rANS streams at) is within two bytes a lane and
/// 1/1024 of the exact size either way.
#[test]
fn predicted_sizes_are_close_to_the_exact_size() {
    let mut seed = 0x3C6E_F372_FE94_F82Bu64;
    for n in [1, 2, 31, 33, 100, 1000, 4099, 32_830, 70_000, 262_144] {
        for width in [1u32, 8, 12, 16, 20] {
            for alphabet in [1u64, 2, 3, 21, 256, 4096] {
                let (words, skew) = skewed_words(&mut seed, n, width, alphabet);
                let what = format!("n {n} width {width} alphabet {alphabet} skew {skew}");
                let stats = Stats::new(&words, width);
                let exact = size(&words, &stats).unwrap();
                let slack = 2 * used_lanes(n, 2) + exact / 1024;
                let predicted = predict(&words, &stats).unwrap();
                assert!(
                    exact.abs_diff(predicted) <= slack,
                    "{what}: prediction {predicted} vs {exact}"
                );
            }
        }
    }
}

/// The fast sizer (SIMD and portable, direct and ranked lookups) counts
/// exactly the renormalisations of the encoder with one group and two
/// on random streams of many lengths, widths, alphabets and skews, and
/// `size` equals the encoding's length.
#[test]
fn fast_size_matches_the_encoder() {
    let mut seed = 0xBB67_AE85_84CA_A73Bu64;
    let mut lens: Vec<usize> = (1..70).collect();
    lens.extend([127, 128, 129, 159, 160, 161, 255, 256, 257, 1000, 4099]);
    // Long enough for the encoder to take two groups of the wider
    // alphabets (multiples of 7 are sized against the encoder, below).
    lens.extend([32_830, 32_837, 70_000]);
    for &n in &lens {
        for width in [1u32, 2, 7, 8, 11, 12, 13, 16, 20] {
            for alphabet in [1u64, 2, 3, 21, 256, 4096] {
                let (words, skew) = skewed_words(&mut seed, n, width, alphabet);
                let what = format!("n {n} width {width} alphabet {alphabet} skew {skew}");
                for (reference, simd, portable) in
                    [counts::<1>(&words, width), counts::<2>(&words, width)]
                {
                    assert_eq!(simd, reference, "{what}");
                    assert_eq!(portable, reference, "{what}");
                }
                if n % 7 == 0 {
                    let stats = Stats::new(&words, width);
                    let mut buf = Vec::new();
                    assert!(encode_with(Codec::Rans, &words, width, &mut buf));
                    let size = crate::codec::encoded_size(Codec::Rans, &words, width, &stats);
                    assert_eq!(size, Some(buf.len()), "{what}");
                }
            }
        }
    }
}

/// The fused layout gives every slot the same word, frequency and offset
/// as the wide one, and is used only where all fit (byte words,
/// frequencies below 2^12), at any scale.
#[test]
fn fused_layout_only_where_fields_fit() {
    let set = |words: Vec<u32>, values: Vec<u32>| SymbolSet { words, values };
    let table = |set: &SymbolSet, scale| DecodeTable::new(set, scale).expect("valid");
    let is_fused = |t: DecodeTable| matches!(t.slots, Slots::Fused(_));
    fn agree<const SCALE: u32>(fused: &Slots, wide: &Slots) {
        let fused = Lookup::<SCALE>::new(fused);
        let wide = Lookup::<SCALE>::new(wide);
        assert!(matches!(fused, Lookup::Fused(_)) && matches!(wide, Lookup::Wide(_)));
        for slot in 0..1 << SCALE {
            assert_eq!(
                fused.get::<u16>(slot),
                wide.get::<u16>(slot),
                "scale {SCALE} slot {slot}"
            );
        }
    }
    let bytes = set(vec![3, 200, 255], vec![1, 4094, 1]);
    agree::<12>(&table(&bytes, 12).slots, &Slots::wide(&bytes, 1 << 12));
    let many = set(vec![0, 9, 17, 254, 255], vec![4095, 4095, 4095, 4095, 4]);
    agree::<14>(&table(&many, 14).slots, &Slots::wide(&many, 1 << 14));
    // A frequency of 2^12 (a lone symbol, or one at scale 14) or a word
    // above a byte does not fit.
    assert!(!is_fused(table(&set(vec![7], vec![4096]), 12)));
    assert!(!is_fused(table(&set(vec![0, 1], vec![4096, 12288]), 14)));
    assert!(!is_fused(table(&set(vec![0, 256], vec![2048, 2048]), 12)));
}

/// Both SIMD lookups agree with the scalar loop, in the AVX2 and AVX-512
/// loops, on long streams whose states sweep the whole range, including
/// all-equal and extreme models.
#[cfg(target_arch = "x86_64")]
#[test]
fn simd_lookups_agree() {
    if !(std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("popcnt"))
    {
        return;
    }
    let mut seed = 0x3C6E_F372_FE94_F82Bu64;
    for (width, alphabet, n) in [
        (8u32, 256u64, 70_016usize),
        (8, 2, 4096),
        (8, 1, 4096),
        (12, 4096, 40_000),
        (7, 128, 3200),
        (16, 3000, 65_536),
    ] {
        let words: Vec<u32> = (0..n)
            .map(|_| {
                let r = xorshift(&mut seed);
                ((r % alphabet) >> (r >> 61)) as u32
            })
            .collect();
        let stats = Stats::new(&words, width);
        let alph = stats.alphabet().unwrap();
        let model = &Model::of(alph).0;
        let symbols = size_symbols(model);
        let one = count_emitted::<1>(&words, alph.index(), model);
        let two = count_emitted::<2>(&words, alph.index(), model);
        let mut direct = vec![SizeSymbol::default(); 1 << width];
        for (&w, &s) in alph.words.iter().zip(&symbols) {
            direct[w as usize] = s;
        }
        let ranked = simd_encode::Lookup::Ranked {
            ranks: alph.index().dense_ranks().unwrap(),
            symbols: &symbols,
        };
        let whole = n - n % LANES;
        assert_eq!(whole, n, "the test streams are whole groups");
        let avx512 = std::arch::is_x86_feature_detected!("avx512f");
        for lookup in [simd_encode::Lookup::Direct(&direct), ranked] {
            let what = format!("width {width} alphabet {alphabet}");
            let scale = model.scale;
            let mut one_group = [[STATE_LOW; LANES]; 1];
            // SAFETY: the CPU supports AVX2, as checked above.
            let count = unsafe { simd_encode::run(&words, &lookup, scale, &mut one_group, None) };
            assert_eq!(count, one, "{what}");
            let mut two_groups = [[STATE_LOW; LANES]; 2];
            // SAFETY: as above.
            let count = unsafe { simd_encode::run(&words, &lookup, scale, &mut two_groups, None) };
            assert_eq!(count, two, "{what}");
            if avx512 {
                let mut states = [[STATE_LOW; LANES]; 1];
                // SAFETY: the CPU supports AVX-512F, as checked above.
                let count =
                    unsafe { simd_encode::run_avx512(&words, &lookup, scale, &mut states, None) };
                assert_eq!((count, states), (one, one_group), "{what}, AVX-512");
                let mut states = [[STATE_LOW; LANES]; 2];
                // SAFETY: as above.
                let count =
                    unsafe { simd_encode::run_avx512(&words, &lookup, scale, &mut states, None) };
                assert_eq!((count, states), (two, two_groups), "{what}, AVX-512");
            }
        }
    }
}

/// The SIMD encoders (AVX2 and AVX-512, where the CPU has them) write the
/// same bytes as the scalar one, with one group and two, on streams with
/// and without a tail block and through every lookup (words, a dense rank
/// array, and ranks found per word for words wider than 16 bits).
#[test]
fn simd_and_scalar_encoders_agree() {
    let mut seed = 0x510E_527F_ADE6_82D1u64;
    for n in [128, 129, 159, 4096, 4099, 40_000, 70_016] {
        for width in [1u32, 8, 12, 16, 20, 32] {
            for alphabet in [2u64, 21, 256, 4096] {
                let (words, skew) = skewed_words(&mut seed, n, width, alphabet);
                let what = format!("n {n} width {width} alphabet {alphabet} skew {skew}");
                let scalar = with_limit(Simd::None, || {
                    (
                        encode_groups_with_tag::<1>(&words, width),
                        encode_groups_with_tag::<2>(&words, width),
                    )
                });
                for limit in [Simd::Avx2, Simd::Avx512] {
                    let simd = with_limit(limit, || {
                        (
                            encode_groups_with_tag::<1>(&words, width),
                            encode_groups_with_tag::<2>(&words, width),
                        )
                    });
                    assert_eq!(simd, scalar, "{what}, up to {limit:?}");
                }
            }
        }
    }
}

/// Decodes `buf` with every decoder up to `limit` (the SIMD one for the
/// bulk, then the portable one), into every word type that fits `width`
/// (which must agree).
fn decode_with(buf: &[u8], width: u32, n: usize, limit: Simd) -> Result<Vec<u32>, &'static str> {
    let result = with_limit(limit, || crate::codec::tests::decode_all(buf, width, n));
    result.map(|(out, _)| out).map_err(|e| e.reason)
}

/// The scale, log2 of the group count and decoding table of the encoded
/// rANS stream `buf` of `width`-bit words, and a reader at its states.
fn stream_head(buf: &[u8], width: u32) -> (u32, u8, DecodeTable, Reader<'_>) {
    let (scale, groups_log2, precision) = head_fields(buf[1], Form::Seeded);
    let mut r = Reader::new(&buf[2..]);
    let mut set =
        symbols::read(&mut r, width, Values::Rounded(precision), u32::MAX).expect("symbols");
    set.values = table_freqs(&set.values, scale);
    let table = DecodeTable::new(&set, scale).expect("table");
    (scale, groups_log2, table, r)
}

/// The states, number of seeded words and renormalisation words of the
/// stream at `r` (after its table), of `n` words in `G` groups.
fn stream_body<'a, const G: usize>(r: &mut Reader<'a>, n: usize) -> (Groups<G>, usize, &'a [u8]) {
    let mut groups = [[STATE_LOW; LANES]; G];
    for state in &mut groups.as_flattened_mut()[..used_lanes(n, G)] {
        *state = u32::from_le_bytes(r.bytes(4).expect("state").try_into().expect("4 bytes"));
    }
    let seeded = r.varint_max(n as u64, "seeded").expect("seeded") as usize;
    let count = r.varint_max(u64::MAX, "count").expect("count") as usize;
    (groups, seeded, r.bytes(2 * count).expect("data"))
}

/// A long byte stream with many rare words takes scale 14 (scale 12
/// would cost the common words too much), and its table the fused
/// layout while no frequency reaches 2^12; every decoder agrees on it.
#[test]
fn fused_tables_above_scale_12_decode_alike() {
    let mut seed = 0x6A09_E667_F3BC_C908u64;
    let mut words: Vec<u32> = (0..70_000)
        .map(|_| (xorshift(&mut seed) % 12) as u32)
        .collect();
    for (i, rare) in (12..252).enumerate() {
        words[i * 291] = rare;
    }
    let mut buf = Vec::new();
    assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
    let (scale, _, table, _) = stream_head(&buf, 8);
    assert_eq!(scale, 14);
    assert!(matches!(table.slots, Slots::Fused(_)));
    for level in simd_levels() {
        assert_eq!(decode_with(&buf, 8, words.len(), level), Ok(words.clone()));
    }
}

/// The SIMD decoders take every whole round of a stream, also the last
/// ones, whose renormalisation words end the stream: at a bit a word, the
/// last round that may read a whole round of words is some 1000 words
/// before the end, and those used to go to the portable decoder.
#[test]
fn simd_decodes_every_whole_round() {
    let mut seed = 0xBB67_AE85_84CA_A73Bu64;
    let words: Vec<u32> = (0..10_000)
        .map(|_| xorshift(&mut seed).is_multiple_of(5) as u32)
        .collect();
    let mut buf = Vec::new();
    assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
    let (_, groups_log2, table, mut r) = stream_head(&buf, 8);
    assert_eq!(groups_log2, 0);
    let (groups, seeded, data) = stream_body::<1>(&mut r, words.len());
    let coded = words.len() - seeded;
    for level in simd_levels().into_iter().filter(|&l| l != Simd::None) {
        let mut out = vec![0u8; coded];
        let mut states = groups;
        let (done, read) = with_limit(level, || {
            decode_bulk_simd(&mut states, &table, data, &mut out[..], coded)
        });
        assert_eq!(done, coded / LANES * LANES, "{level:?}");
        assert!(read <= data.len() / 2);
        let decoded: Vec<u32> = out[..done].iter().map(|&w| w as u32).collect();
        assert_eq!(decoded, words[..done], "{level:?}");
    }
}

/// Every decoder leaves the same words, count of words read and final
/// states as the portable one on valid, damaged and cut streams (also to
/// an odd length) of one
/// group and two, of bytes and of 16-bit words (both table layouts): the
/// SIMD decoders read a stream's last rounds from a zero-padded copy of its
/// end, which must read as the portable decoder reads past the end.
#[test]
fn every_decoder_reads_a_stream_alike_to_its_end() {
    let mut seed = 0x3C6E_F372_FE94_F82Bu64;
    for width in [8, 16] {
        for n in [100, 1000, 5000, 70_000] {
            let words: Vec<u32> = (0..n)
                .map(|_| {
                    let r = xorshift(&mut seed);
                    ((r % 300) * (r >> 40 & 1)) as u32 & ((1 << width) - 1)
                })
                .collect();
            let streams = [
                encode_groups_with_tag::<1>(&words, width),
                encode_groups_with_tag::<2>(&words, width),
            ];
            for buf in streams.into_iter().map(|b| b.expect("encodes")) {
                for damage in 0..6 {
                    let mut bad = buf.clone();
                    if damage > 0 {
                        let at = bad.len() - 1 - xorshift(&mut seed) as usize % (bad.len() / 4);
                        bad[at] ^= 1 << (xorshift(&mut seed) % 8);
                    }
                    let (_, groups_log2, table, r) = stream_head(&bad, width);
                    let cut = damage % 3;
                    let runs: Vec<_> = simd_levels()
                        .into_iter()
                        .map(|level| {
                            let read = |r| match groups_log2 {
                                0 => read_to_end::<1>(r, &table, n, cut),
                                _ => read_to_end::<2>(r, &table, n, cut),
                            };
                            with_limit(level, || read(r.clone()))
                        })
                        .collect();
                    assert!(runs.windows(2).all(|w| w[0] == w[1]), "width {width} n {n}");
                }
            }
        }
    }
}

/// The words, count of words read and final states of decoding the words
/// of `n` that are not seeded with `decode_any_scale` from the states and
/// data at `r`, its last `cut` bytes of data left out.
fn read_to_end<const G: usize>(
    mut r: Reader,
    table: &DecodeTable,
    n: usize,
    cut: usize,
) -> (Vec<u16>, usize, Vec<u32>) {
    let (mut groups, seeded, data) = stream_body::<G>(&mut r, n);
    let data = &data[..data.len().saturating_sub(cut)];
    let mut out = vec![0u16; n - seeded];
    let read = decode_any_scale(&mut groups, table, data, &mut out[..], n - seeded);
    (out, read, groups.as_flattened().to_vec())
}

/// Every SIMD level this CPU has.
fn simd_levels() -> Vec<Simd> {
    [Simd::None, Simd::Avx2, Simd::Avx512]
        .into_iter()
        .filter(|&l| with_limit(l, simd_level) == l)
        .collect()
}

/// Encodes `words` with `G` groups of lanes, tag included, as the
/// encoder would if it chose `G` for this length.
fn encode_groups_with_tag<const G: usize>(words: &[u32], width: u32) -> Option<Vec<u8>> {
    let stats = Stats::new(words, width);
    let mut buf = vec![Codec::Rans.tag()];
    let alphabet = applicable(&stats)?;
    let model = &Model::of(alphabet).0;
    encode_groups::<G>(words, alphabet, model, &mut buf);
    Some(buf)
}

/// A stream takes two groups when the extra states cost at most
/// 1/GROUP_COST of its estimated size; the head byte says which, and
/// each lane used stores a state.
#[test]
fn streams_take_two_groups_when_the_states_cost_little() {
    // 128 bytes of states for the second group.
    let enough = ((128 * GROUP_COST) * 8) << 16;
    assert_eq!(group_count(0), 1);
    assert_eq!(group_count(enough - 1), 1);
    assert_eq!(group_count(enough), 2);
    assert_eq!(group_count(enough << 20), 2);
    // Near-uniform bytes cost about one byte per word.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for (n, groups_log2) in [(20_000, 0), (40_000, 1)] {
        let words: Vec<u32> = (0..n).map(|_| xorshift(&mut seed) as u32 & 0xff).collect();
        let mut buf = Vec::new();
        assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
        assert_eq!(head_fields(buf[1], Form::Seeded).1, groups_log2, "n {n}");
        let forced = match groups_log2 {
            0 => encode_groups_with_tag::<1>(&words, 8),
            _ => encode_groups_with_tag::<2>(&words, 8),
        };
        assert_eq!(Some(buf), forced, "n {n}");
    }
    let words = [3u32; 40];
    let one = encode_groups_with_tag::<1>(&words, 8).unwrap();
    let two = encode_groups_with_tag::<2>(&words, 8).unwrap();
    assert_eq!(two.len() - one.len(), 4 * 8, "8 more lanes hold a state");
}

/// The AVX-512, AVX2 and portable decoders agree on valid streams of
/// every length around the block and round sizes, with one group and
/// two, and every scale, and on corrupt ones (same words or same
/// error), including truncated renormalisation data, storing 8-, 16- and
/// 32-bit words.
#[test]
fn simd_and_portable_decoders_agree() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut lens: Vec<usize> = (0..70).collect();
    lens.extend([95, 96, 97, 127, 128, 129, 160, 191, 192, 193, 255, 256, 257]);
    lens.extend([383, 384, 385, 1000, 4099, 70_000]);
    let cases = [
        (8, 1u64),
        (8, 2),
        (8, 21),
        (8, 256),
        (16, 2),
        (16, 256),
        (16, 3000),
        (32, 2),
        (32, 3000),
    ];
    let levels = simd_levels();
    println!("SIMD levels tested: {levels:?}");
    for &n in &lens {
        for (width, alphabet) in cases {
            let words: Vec<u32> = (0..n)
                .map(|_| {
                    let r = xorshift(&mut seed);
                    // Skewed, so some lanes renormalise and others not;
                    // spread over all 32 bits in the widest case.
                    let w = ((r % alphabet) * (r >> 40 & 3) / 3) as u32;
                    if width == 32 {
                        w.wrapping_mul(0x9E37_79B1)
                    } else {
                        w
                    }
                })
                .collect();
            let encoded = [
                encode_groups_with_tag::<1>(&words, width),
                encode_groups_with_tag::<2>(&words, width),
            ];
            let Some(encoded) = encoded.into_iter().collect::<Option<Vec<_>>>() else {
                assert_eq!(n, 0, "rans applies to every non-empty stream");
                continue;
            };
            for buf in &encoded {
                for &level in &levels {
                    assert_eq!(decode_with(buf, width, n, level).as_ref(), Ok(&words));
                }
            }
            // Corrupt each group count in turn.
            let buf = &encoded[n % 2];
            for _ in 0..4 {
                let mut bad = buf.clone();
                let at = (xorshift(&mut seed) as usize) % bad.len();
                bad[at] ^= 1 << (xorshift(&mut seed) % 8);
                let cut = bad.len() - (xorshift(&mut seed) as usize % 3);
                for input in [&bad[..], &bad[..cut]] {
                    let portable = decode_with(input, width, n, Simd::None);
                    for &level in &levels {
                        assert_eq!(
                            decode_with(input, width, n, level),
                            portable,
                            "n {n} width {width} alphabet {alphabet} {level:?}"
                        );
                    }
                }
            }
        }
    }
}

/// A stream's states are seeded with its last words, as many as fit every
/// state, and a decoder given another count of seeded words fails rather
/// than yield other words.
#[test]
fn states_are_seeded_and_the_seed_count_is_checked() {
    let mut seed = 0x1F83_D9AB_FB41_BD6Bu64;
    for n in [40, 5000, 70_000] {
        let (words, _) = skewed_words(&mut seed, n, 8, 256);
        let mut buf = Vec::new();
        assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
        let (_, groups_log2, _, mut r) = stream_head(&buf, 8);
        let lanes = used_lanes(n, 1 << groups_log2);
        for _ in 0..lanes {
            r.bytes(4).unwrap();
        }
        let at = buf.len() - r.remaining();
        let seeded = r.varint().unwrap() as usize;
        assert!(seeded >= lanes, "n {n}: {seeded} seeded words");
        assert!(seeded <= SEED_WORDS * lanes, "n {n}: {seeded} seeded words");
        assert_eq!(decode_with(&buf, 8, n, Simd::None), Ok(words.clone()));
        // One seeded word more or fewer (counts below 128: one varint byte).
        for other in [seeded - 1, seeded + 1] {
            let mut bad = buf.clone();
            bad[at] = other as u8;
            for level in simd_levels() {
                assert!(decode_with(&bad, 8, n, level).is_err(), "n {n} {other}");
            }
        }
    }
}

/// A stream decoded into rows (a Partition's class) puts each word where
/// decoding it into a slice and scattering it would, at every SIMD level,
/// in streams of one and two groups, with and without seeds, whose SIMD
/// rounds stop early or not; rows that are not whole rounds, or lie outside
/// the output, are refused.
#[test]
fn streams_decoded_into_rows_land_in_their_rows() {
    let mut seed = 0x5BE0_CD19_137E_2179u64;
    let mut two_groups = false;
    for (group, row_count, alphabet) in [
        (64, 3, 2),
        (64, 40, 200),
        (128, 130, 12),
        (256, 9, 256),
        (256, 1200, 256),
    ] {
        let (words, _) = skewed_words(&mut seed, group * row_count, 8, alphabet);
        let mut buf = Vec::new();
        assert!(encode_with(Codec::Rans, &words, 8, &mut buf));
        two_groups |= head_fields(buf[1], Form::Seeded).1 == 1;
        // The stream's rows among twice as many, in a shuffled order.
        let mut rows: Vec<u32> = (0..2 * row_count as u32).collect();
        for i in (1..rows.len()).rev() {
            rows.swap(i, xorshift(&mut seed) as usize % (i + 1));
        }
        rows.truncate(row_count);
        let mut want = vec![0xAAAAu16; 2 * group * row_count];
        for (k, &w) in words.iter().enumerate() {
            want[rows[k / group] as usize * group + k % group] = w as u16;
        }
        for level in simd_levels() {
            let mut out = vec![0xAAAAu16; want.len()];
            let used = with_limit(level, || {
                crate::codec::decode_rows(&buf, &[], 8, &mut out, group, &rows)
            });
            assert_eq!(used, Some(Ok(buf.len())), "{level:?} group {group}");
            assert!(out == want, "{level:?} group {group}");
        }
        let mut out = vec![0u16; want.len()];
        for (bad_group, bad_rows) in [
            (group / 2 + 16, &rows[..]),
            (group, &[2 * row_count as u32][..]),
        ] {
            let refused = crate::codec::decode_rows(&buf, &[], 8, &mut out, bad_group, bad_rows);
            assert!(refused.is_none());
        }
    }
    assert!(two_groups, "a stream of two groups of lanes");
}

/// The AVX-512 fills of fused and wide slots write what the portable ones
/// do, for symbols of 1 to thousands of slots at every scale, and refuse
/// frequencies that do not sum to the table's size.
#[cfg(target_arch = "x86_64")]
#[test]
fn simd_slot_fills_are_the_portable_ones() {
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return;
    }
    let mut seed = 5;
    for scale in 1..=MAX_SCALE {
        let size = 1usize << scale;
        for round in 0..20 {
            // Frequencies of at most `cap` summing to `size`, the last one
            // what is left.
            let cap = [40, 4095, 1 << 14][round % 3].min(size);
            let mut values = Vec::new();
            let mut left = size as u32;
            while left > 0 {
                let f = 1 + (xorshift(&mut seed) % cap as u64) as u32;
                values.push(f.min(left));
                left -= f.min(left);
            }
            let fits = values.len() <= 256 && values.iter().all(|&f| f < 4096);
            let words = (0..values.len() as u32).map(|w| w * 13 % 4096).collect();
            let set = SymbolSet { words, values };
            // SAFETY: the CPU has AVX-512F (checked above).
            let wide = unsafe { wide_slots_avx512(&set, size) };
            assert!(wide == wide_slots(&set, size), "scale {scale}");
            if fits {
                let set = SymbolSet {
                    words: (0..set.words.len() as u32).collect(),
                    ..set
                };
                // SAFETY: as above.
                let fused = unsafe { fused_slots_avx512(&set, size) };
                assert!(fused == fused_slots(&set, size), "scale {scale}");
            }
        }
    }
    let short = SymbolSet {
        words: vec![0, 1],
        values: vec![3, 4],
    };
    for size in [4, 8] {
        // SAFETY: as above.
        let fused = std::panic::catch_unwind(|| unsafe { fused_slots_avx512(&short, size) });
        // SAFETY: as above.
        let wide = std::panic::catch_unwind(|| unsafe { wide_slots_avx512(&short, size) });
        assert!(fused.is_err() && wide.is_err(), "sum 7 for {size} slots");
    }
}
