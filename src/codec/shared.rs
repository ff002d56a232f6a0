//! The encoder's side of code tables shared by many literals
//! (docs/FORMAT.md, "Shared code tables (version 10)"): a Huffman or rANS
//! code fitted to the words of all of them, its table stored once, and each
//! literal's words coded with it behind tag 5 and the table's number.

use super::stats::Stats;
use super::tag::Codec;
use super::{huffman, rans};
use crate::wire::put_varint;

/// A Huffman or rANS code fitted to the words of many literals.
pub struct SharedCode {
    stats: Stats,
    code: Code,
}

/// A Huffman code's lengths, or a rANS model.
enum Code {
    Huffman(Vec<u32>),
    Rans(rans::Model),
}

impl SharedCode {
    /// The code of `codec` (Huffman or rANS) for `words`, all the words of
    /// the `literals` literals that are to share it, of `width` bits; None
    /// where the codec does not apply (more than 4096 distinct words, or
    /// one word for Huffman).
    pub fn new(codec: Codec, words: &[u32], width: u32, literals: usize) -> Option<SharedCode> {
        let stats = Stats::new(words, width);
        let code = match codec {
            Codec::Huffman => Code::Huffman(huffman::code_lengths(huffman::applicable(&stats)?)),
            Codec::Rans => Code::Rans(rans::shared_model(rans::applicable(&stats)?, literals)),
            _ => return None,
        };
        Some(SharedCode { stats, code })
    }

    /// The table as the index holds it: the codec's tag, then its table.
    pub fn table(&self) -> Vec<u8> {
        let alphabet = self.stats.alphabet().expect("a codec that applies");
        let mut out = Vec::new();
        match &self.code {
            Code::Huffman(lengths) => {
                out.push(Codec::Huffman.tag());
                huffman::encode_table(alphabet, lengths, &mut out);
            }
            Code::Rans(model) => {
                out.push(Codec::Rans.tag());
                rans::encode_table(alphabet, model, &mut out);
            }
        }
        out
    }

    /// Appends the literal of `words`, each one of the words the code was
    /// fitted to, coded with it as the table numbered `number`.
    pub fn encode(&self, number: u32, words: &[u32], out: &mut Vec<u8>) {
        let alphabet = self.stats.alphabet().expect("a codec that applies");
        out.push(Codec::Shared.tag());
        put_varint(out, number as u64);
        match &self.code {
            Code::Huffman(lengths) => huffman::encode_words(words, alphabet, lengths, out),
            Code::Rans(model) => rans::encode_words(words, alphabet, model, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{coded_with, decode_in, table_len};
    use proptest::prelude::*;

    /// Literals of `words` cut in `parts`, each coded with a table fitted
    /// to all, decode to their words from the table's bytes.
    fn round_trip(codec: Codec, words: &[u32], width: u32, parts: usize) {
        let Some(code) = SharedCode::new(codec, words, width, parts) else {
            return;
        };
        let tables = vec![vec![0xee], code.table()];
        assert_eq!(table_len(&tables[1], width).unwrap(), tables[1].len() - 1);
        for part in words.chunks(words.len().div_ceil(parts).max(1)) {
            let mut literal = Vec::new();
            code.encode(1, part, &mut literal);
            literal.extend_from_slice(&[0xa5; 3]);
            assert_eq!(coded_with(&literal, &tables), Ok(codec));
            let mut out = vec![0u32; part.len()];
            let used = decode_in(&literal, &tables, width, &mut out).unwrap();
            assert_eq!(used, literal.len() - 3);
            assert_eq!(out, part);
        }
    }

    #[test]
    fn a_tensors_literals_share_a_table_of_either_codec() {
        let words: Vec<u32> = (0..100_000u32)
            .map(|i| ((i * 7919) >> 5) % 37 + (i % 3))
            .collect();
        for codec in [Codec::Huffman, Codec::Rans] {
            round_trip(codec, &words, 8, 7);
        }
    }

    #[test]
    fn a_shared_literal_needs_its_table() {
        let words = [1u32, 2, 3, 1, 1];
        let code = SharedCode::new(Codec::Rans, &words, 4, 1).unwrap();
        let mut literal = Vec::new();
        code.encode(1, &words, &mut literal);
        let mut out = [0u32; 5];
        let none = decode_in(&literal, &[], 4, &mut out).unwrap_err();
        assert_eq!(
            none.reason,
            "shared literal in an archive without code tables"
        );
        let short = decode_in(&literal, &[code.table()], 4, &mut out).unwrap_err();
        assert_eq!(
            short.reason,
            "shared literal names a code table the index lacks"
        );
        let raw = vec![vec![0, 1, 2]];
        let err = decode_in(&[5, 0], &raw, 4, &mut out).unwrap_err();
        assert_eq!(err.reason, "shared code table of a codec without a table");
        let mut long = code.table();
        long.push(0);
        let err = decode_in(&literal, &[long.clone(), long], 4, &mut out).unwrap_err();
        assert_eq!(err.reason, "shared code table has trailing bytes");
    }

    proptest! {
        #[test]
        fn shared_literals_round_trip(
            words in prop::collection::vec(0u32..64, 1..3000),
            width in 6u32..=16,
            parts in 1usize..6,
        ) {
            for codec in [Codec::Huffman, Codec::Rans] {
                round_trip(codec, &words, width, parts);
            }
        }

        #[test]
        fn untrusted_tables_and_literals_fail_without_panic(
            table in prop::collection::vec(any::<u8>(), 0..64),
            body in prop::collection::vec(any::<u8>(), 0..256),
            width in 1u32..=32,
            n in 0usize..300,
        ) {
            for tag in [2u8, 4] {
                let tables = vec![[&[tag], &table[..]].concat()];
                let literal = [&[5u8, 0], &body[..]].concat();
                let mut out = vec![0u32; n];
                if let Ok(used) = decode_in(&literal, &tables, width, &mut out) {
                    prop_assert!(used <= literal.len());
                }
                let _ = coded_with(&literal, &tables);
            }
        }
    }
}
