//! Huffman literals (docs/FORMAT.md, "Huffman (tag 2)"): a canonical prefix
//! code over the stream's distinct words, with codes of at most 12 bits so
//! that one 4096-entry table lookup decodes a word.
//!
//! The stream is cut into four quarters, each coded as its own bitstream, so
//! the decoder can run four independent dependency chains at once.
//!
//! `code` is what both sides derive from the code lengths; the decoder
//! (`decode`, over `table`, `streams`, `multi` and `one_bit`) imports
//! nothing of the encoder (`encode`).

mod code;
mod decode;
mod encode;
mod multi;
mod one_bit;
mod streams;
mod table;
#[cfg(test)]
mod tests;

pub(super) use code::quarter_ranges;
pub(super) use decode::{decode_words, read_table};
pub(super) use encode::{
    applicable, code_lengths, encode, encode_table, encode_words, size, size_within,
};
