//! rANS: static range asymmetric numeral systems over the stream's distinct
//! words, with 32 or 64 interleaved 32-bit states so the decoder has many
//! independent dependency chains (vectors of 8 or 16 lanes, or plenty of
//! scalar work to overlap).
//!
//! The states form one or two groups of 32 lanes. Word `i` is coded by lane
//! `i % 32` of group `(i / 32) % groups`, i.e. blocks of 32 words take the
//! groups in turn. Long streams take two groups: a SIMD decoder is bound by
//! the latency of each lane's step, so twice the independent chains decode
//! faster. States live in `[2^16, 2^32)` and renormalise by whole 16-bit
//! words, which all lanes share in one stream. A stream of tag 4 starts its
//! states seeded with its last words and keeps its table as counts to a few
//! bits (see `encode::seed` and `codec::shape`); tag 3's are only read.
//! The encoder runs backwards, so the decoder reads that stream forwards.
//! The encoder divides by multiplying with exact reciprocals, and sizing runs
//! the same branch-free loop without storing output.

use super::index::SymbolIndex;
use super::shape;
use super::simd::{level as simd_level, Simd};
use super::stats::Alphabet;
use super::symbols::{self, SymbolSet, Values};
use super::{Stats, Word};
use crate::wire::{put_varint, varint_len, Reader, WireError};

/// States in a group; changing it changes the byte format.
pub(super) const LANES: usize = 32;
/// The states of a stream: `G` groups of [`LANES`].
pub(super) type Groups<const G: usize> = [[u32; LANES]; G];
/// A stream's head byte holds the scale in its low bits and log2 of the
/// number of groups (0 or 1) from this bit on. (Four groups would cost more
/// bytes of states and decoded no faster than two.)
pub(super) const GROUPS_SHIFT: u32 = 4;
/// In a seeded stream's head byte (tag 4), the precision of its table's
/// counts is in the bits from this one on, and the group bit is bit 4 alone.
pub(super) const PRECISION_SHIFT: u32 = 5;
/// A stream takes two groups when the extra states cost at most 1/this of
/// its estimated size, i.e. from 32000 bytes on: the second group's states
/// are 128 bytes, and a long stream decodes much faster with two, its SIMD
/// decoder having twice the independent chains.
pub(super) const GROUP_COST: i128 = 250;
/// Lower bound of a normalised state; also every lane's initial state.
pub(super) const STATE_LOW: u32 = 1 << 16;
/// Frequencies sum to 2^scale with scale <= 14, so `2^(32 - scale) * freq`
/// bounds stay >= 2^18 and one 16-bit renormalisation always suffices.
pub(super) const MAX_SCALE: u32 = 14;

/// The two forms of a rANS literal: tag 3's (frequencies as varints, every
/// state starting at [`STATE_LOW`]; format versions 1 to 5, read only) and
/// tag 4's (a table of counts to a few bits, states seeded with the last
/// words; version 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::codec) enum Form {
    Varints,
    Seeded,
}

/// The scale, log2 of the group count and the table's precision in a
/// stream's head byte, unchecked. In tag 3's form bits 4-7 are all the
/// group count, and the table holds exact frequencies.
pub(super) fn head_fields(head: u8, form: Form) -> (u32, u8, u32) {
    let scale = (head & ((1 << GROUPS_SHIFT) - 1)) as u32;
    match form {
        Form::Varints => (scale, head >> GROUPS_SHIFT, 0),
        Form::Seeded => (
            scale,
            head >> GROUPS_SHIFT & 1,
            (head >> PRECISION_SHIFT) as u32,
        ),
    }
}

pub(super) fn applicable(stats: &Stats) -> Option<&Alphabet> {
    stats.alphabet().filter(|a| a.len() >= 1)
}

/// Number of groups the encoder gives a stream whose words cost `bits`
/// (in 1/65536ths, as [`Model::cost`]).
pub(super) fn group_count(bits: i128) -> usize {
    // The second group's states: 32 of 32 bits.
    const EXTRA_BITS: i128 = (LANES as i128 * 32) << 16;
    if EXTRA_BITS * GROUP_COST <= bits {
        2
    } else {
        1
    }
}

/// Number of lanes that code at least one word (only those store a state).
pub(super) fn used_lanes(n: usize, groups: usize) -> usize {
    n.min(groups * LANES)
}

pub(super) fn ceil_log2(x: usize) -> u32 {
    usize::BITS - x.saturating_sub(1).leading_zeros()
}

mod decode;
mod encode;
mod model;
#[cfg(target_arch = "x86_64")]
mod simd_decode;
#[cfg(target_arch = "x86_64")]
mod simd_encode;
#[cfg(test)]
pub(super) mod tests;

use decode::*;
pub(super) use decode::{decode, read_table, Rows};
use encode::*;
pub(super) use encode::{encode, predict, size};
pub(in crate::codec) use model::Model;
use model::*;
