//! The literal codecs: arbitrary bytes decoded with each codec's tag (and
//! their code tables measured, and as a literal of a shared table) must give an error or words, never a panic or
//! a read past the input; and arbitrary
//! words encoded with every codec that applies must decode to themselves,
//! using exactly the encoded bytes.
#![no_main]

use brevis::codec::{decode, decode_in, decode_rows, encode_with, table_len, Codec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [w, lo, hi, rest @ ..] = data else {
        return;
    };
    let width = 1 + (*w as u32 % 32);
    let n = u16::from_le_bytes([*lo, *hi]) as usize % 5000;
    // Decoding untrusted bytes, behind each codec's tag.
    for tag in 0..6u8 {
        let mut input = vec![tag];
        input.extend_from_slice(rest);
        let mut out = vec![0u32; n];
        if let Ok(used) = decode(&input, width, &mut out) {
            assert!(used <= input.len());
        }
        if let Ok(table) = table_len(&input, width) {
            assert!(table < input.len());
        }
    }
    // A literal of tag 5 naming a shared table, the table and the words'
    // bytes both untrusted: the table behind a Huffman or rANS tag, cut
    // from the same bytes at a place they pick.
    let cut = (*lo as usize).min(rest.len());
    for tag in [2u8, 4] {
        let table = [&[tag], &rest[..cut]].concat();
        let input = [&[5u8, 0], &rest[cut..]].concat();
        let mut out = vec![0u32; n];
        if let Ok(used) = decode_in(&input, &[table], width, &mut out) {
            assert!(used <= input.len());
        }
    }
    // Untrusted rANS bytes decoded into rows of a Partition's class, the
    // rows (some repeated) picked by the same bytes: the same.
    let rows: Vec<u32> = rest.iter().take(n / 64).map(|&b| u32::from(b % 8)).collect();
    let mut input = vec![4u8]; // rANS, tag 4
    input.extend_from_slice(rest);
    let mut out = vec![0u32; 8 * 64];
    if let Some(Ok(used)) = decode_rows(&input, &[], width, &mut out, 64, &rows) {
        assert!(used <= input.len());
    }
    // Round trips of words made from the same bytes.
    let mask = if width == 32 { u32::MAX } else { (1 << width) - 1 };
    let words: Vec<u32> = rest
        .chunks(4)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            // Skew towards few values, as real streams are.
            let x = u32::from_le_bytes(b);
            (if x & 0x100 == 0 { x & 0xf } else { x }) & mask
        })
        .collect();
    for codec in Codec::ALL {
        let mut encoded = Vec::new();
        if !encode_with(codec, &words, width, &mut encoded) {
            continue;
        }
        encoded.extend_from_slice(&[0xa5; 7]);
        let mut out = vec![0u32; words.len()];
        let used = decode(&encoded, width, &mut out).expect("an encoding decodes");
        assert_eq!(used, encoded.len() - 7, "{codec:?} used the wrong byte count");
        assert!(out == words, "{codec:?} round trip differs");
    }
});
