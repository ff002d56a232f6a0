//! rANS literals (docs/FORMAT.md, "rANS (tag 3)" and "rANS (tag 4, version
//! 6)"): static range asymmetric numeral systems over the stream's distinct
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
//! bits (see `encode::seed` and `codec::rounded`); tag 3's are only read.
//! The encoder runs backwards, so the decoder reads that stream forwards.
//! The encoder divides by multiplying with exact reciprocals, and sizing runs
//! the same branch-free loop without storing output.
//!
//! Both sides share `layout` (lanes, groups, the head byte) and `freqs` (a
//! table's frequencies). The decoder is `decode`, over `table`, `dest` and
//! `simd_decode`; the encoder is `encode`, over `model` and `choose` (the
//! stream's model), `step` and `simd_encode`. The decoder imports nothing of
//! the encoder.

mod choose;
mod decode;
mod dest;
mod encode;
mod freqs;
mod layout;
mod model;
#[cfg(target_arch = "x86_64")]
mod simd_decode;
#[cfg(target_arch = "x86_64")]
mod simd_encode;
mod step;
mod table;
#[cfg(test)]
pub(super) mod tests;

pub(super) use decode::{decode_words, read_table, Head};
pub(super) use dest::Rows;
pub use dest::ROWS_ROUND;
pub(super) use encode::{
    applicable, encode, encode_table, encode_words, predict, shared_model, size,
};
pub(super) use layout::Form;
#[cfg(test)]
pub(super) use layout::{head_fields, used_lanes};
pub(super) use model::Model;
