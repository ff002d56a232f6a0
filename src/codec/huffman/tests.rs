use super::code::*;
use super::multi::*;
use crate::codec::bits::BitWriter;
use crate::codec::symbols::{self, Values};
use crate::codec::tests::{decode_all, xorshift};
use crate::codec::width::word_mask;
use crate::codec::Codec;
use crate::wire::put_varint;
use std::collections::HashMap;

/// A random complete code: start from two 1-bit codes and repeatedly
/// split a code into two one bit longer (which keeps the Kraft sum 1).
fn random_lengths(seed: &mut u64, max_symbols: usize) -> Vec<u32> {
    let mut lengths = vec![1, 1];
    let splits = xorshift(seed) as usize % (max_symbols.max(2) - 1);
    for _ in 0..splits {
        let i = xorshift(seed) as usize % lengths.len();
        if lengths[i] < MAX_LEN {
            lengths[i] += 1;
            lengths.push(lengths[i]);
        }
    }
    lengths
}

/// Word by (length, canonical code).
type Codes = HashMap<(u32, u32), u32>;

/// Reference decoder, one bit at a time: the word whose canonical code
/// (most significant bit first) matches the bits read so far, or `None`
/// if the stream ends first.
fn decode_one(codes: &Codes, bits: &mut impl Iterator<Item = u32>) -> Option<u32> {
    let (mut code, mut len) = (0, 0);
    loop {
        code = code << 1 | bits.next()?;
        len += 1;
        if let Some(&word) = codes.get(&(len, code)) {
            return Some(word);
        }
    }
}

fn stream_bits(stream: &[u8]) -> impl Iterator<Item = u32> + '_ {
    (0..stream.len() * 8).map(|i| (stream[i / 8] >> (i % 8) & 1) as u32)
}

/// Reference decode of `n` words from the four streams, with the
/// format's checks: no bits past a stream, fewer than 8 left, all zero.
fn reference(codes: &Codes, streams: &[&[u8]; 4], n: usize) -> Option<Vec<u32>> {
    let mut words = Vec::with_capacity(n);
    for (stream, range) in streams.iter().zip(quarter_ranges(n)) {
        let mut bits = stream_bits(stream);
        for _ in range {
            words.push(decode_one(codes, &mut bits)?);
        }
        let rest: Vec<u32> = bits.collect();
        if rest.len() >= 8 || rest.contains(&1) {
            return None;
        }
    }
    Some(words)
}

/// A random code of `lengths` over `words` (of `width` bits): `n` random
/// words drawn with the probabilities the code implies, streams encoded
/// independently of the codec's encoder; then decoded with the right word
/// count, a different one (streams ending early or late), a flipped bit
/// and a stream a byte shorter or longer, each compared with the
/// reference decoder.
fn check_against_reference(seed: &mut u64, width: u32, words: &[u32], lengths: &[u32], n: usize) {
    let by_word: HashMap<u32, (u32, u32)> = canonical_codes(lengths)
        .into_iter()
        .zip(lengths)
        .zip(words)
        .map(|((code, &len), &word)| (word, (len, code)))
        .collect();
    let codes: Codes = by_word.iter().map(|(&w, &lc)| (lc, w)).collect();
    // Words with probability 2^-len: decode random bits.
    let mut random_bits = std::iter::repeat_with(|| xorshift(seed) as u32 & 1);
    let expected: Vec<u32> = (0..n)
        .map(|_| decode_one(&codes, &mut random_bits).expect("endless bits"))
        .collect();

    let mut streams: [Vec<u8>; 4] = Default::default();
    for (stream, range) in streams.iter_mut().zip(quarter_ranges(n)) {
        let bits_total: u64 = expected[range.clone()]
            .iter()
            .map(|w| by_word[w].0 as u64)
            .sum();
        let mut bits = BitWriter::new(stream, bits_total.div_ceil(8) as usize);
        for w in &expected[range] {
            let (len, code) = by_word[w];
            bits.put(reverse(code, len), len);
            bits.flush();
        }
        bits.finish();
    }
    for variant in 0..4 {
        let mut streams = streams.clone();
        let mut n = n;
        let q = xorshift(seed) as usize % 4;
        match variant {
            0 => {}
            1 => n = (n as i64 + xorshift(seed) as i64 % 20 - 10).max(0) as usize,
            2 => {
                if !streams[q].is_empty() {
                    let bit = xorshift(seed) as usize % (streams[q].len() * 8);
                    streams[q][bit / 8] ^= 1 << (bit % 8);
                }
            }
            _ => {
                if xorshift(seed).is_multiple_of(2) {
                    streams[q].pop();
                } else {
                    streams[q].push(xorshift(seed) as u8);
                }
            }
        }
        let mut input = vec![Codec::Huffman.tag()];
        symbols::write(words, lengths, Values::Nibbles, &mut input);
        for s in &streams {
            put_varint(&mut input, s.len() as u64);
        }
        for s in &streams {
            input.extend_from_slice(s);
        }
        let got = decode_all(&input, width, n).ok().map(|(words, _)| words);
        let slices = [0, 1, 2, 3].map(|q| streams[q].as_slice());
        let want = reference(&codes, &slices, n);
        assert!(
            got == want,
            "variant {variant}: width {width}, {} symbols, n {n}",
            words.len()
        );
        if variant == 0 {
            assert_eq!(want.as_deref(), Some(&expected[..]));
        }
    }
}

/// `count` distinct random words of `width` bits, sorted.
fn random_words(seed: &mut u64, width: u32, count: usize) -> Vec<u32> {
    let mask = word_mask(width) as u64;
    let mut words: Vec<u32> = Vec::new();
    while words.len() < count {
        words.push((xorshift(seed) & mask) as u32);
        words.sort_unstable();
        words.dedup();
    }
    words
}

/// Random codes at every width. Lengths reach past `MULTI_MIN_WORDS` so
/// both table kinds run, and codes repeat across decodes so the
/// per-thread table cache is hit, including by streams of other lengths.
#[test]
fn matches_reference_decoder() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut previous: Option<(u32, Vec<u32>, Vec<u32>)> = None;
    for case in 0..600 {
        let (width, words, lengths) = match previous.take() {
            Some(code) if case % 3 == 0 => code,
            _ => {
                let width = 1 + case as u32 % 32;
                let max_symbols = match xorshift(&mut seed) % 4 {
                    0 => 4096,
                    1 => 300,
                    _ => 20,
                };
                let max_symbols = max_symbols.min(word_mask(width) as usize + 1);
                let lengths = random_lengths(&mut seed, max_symbols);
                let words = random_words(&mut seed, width, lengths.len());
                (width, words, lengths)
            }
        };
        let n = match xorshift(&mut seed) % 8 {
            0 => MULTI_MIN_WORDS + xorshift(&mut seed) as usize % 30_000,
            _ => xorshift(&mut seed) as usize % 3000,
        };
        check_against_reference(&mut seed, width, &words, &lengths, n);
        previous = Some((width, words, lengths));
    }
}

/// Two-word codes, decoded by expanding bits: every width, and lengths
/// from empty through several SIMD steps with every tail, to long ones.
#[test]
fn one_bit_codes_match_reference_decoder() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for case in 0..400 {
        let width = 1 + case as u32 % 32;
        let words = random_words(&mut seed, width, 2);
        let n = match case % 4 {
            0 => case,
            1 => xorshift(&mut seed) as usize % 3000,
            _ => xorshift(&mut seed) as usize % 300_000,
        };
        check_against_reference(&mut seed, width, &words, &[1, 1], n);
    }
}
