//! Huffman: a canonical prefix code over the stream's distinct words, with
//! codes of at most 12 bits so that one 4096-entry table lookup decodes a word.
//!
//! The stream is cut into four quarters, each coded as its own bitstream, so
//! the decoder can run four independent dependency chains at once.

use super::bits::BitWriter;
use super::codelen::{limited_lengths, limited_lengths_within};
use super::index::SymbolIndex;
use super::stats::{quarter_ranges, Alphabet};
use super::symbols::{self, SymbolSet, Values};
use super::{Stats, Word};
use crate::wire::{put_varint, varint_len, Reader, WireError};
use std::cell::RefCell;

pub(super) const MAX_LEN: u32 = 12;
pub(super) const TABLE_SIZE: usize = 1 << MAX_LEN;
pub(super) const PEEK_MASK: u64 = TABLE_SIZE as u64 - 1;

/// Huffman needs at least two words (a one-word code would be incomplete).
pub(super) fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 2)
}

mod decode;
mod encode;
mod multi;
mod one_bit;
#[cfg(test)]
mod tests;

use decode::*;
pub(super) use decode::{decode, read_table};
use encode::*;
pub(super) use encode::{encode, size, size_within};
use multi::*;
use one_bit::*;
