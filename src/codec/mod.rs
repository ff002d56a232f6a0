//! Literal codecs: lossless encodings of a stream of `n` words of `width` bits.
//!
//! Every encoding starts with one tag byte naming its codec, followed by that
//! codec's payload (see `docs/FORMAT.md`, "Literals"). Neither `n` nor `width` is stored:
//! the caller knows both. Encodings are self-delimiting, so `decode` reports how
//! many bytes it consumed.
//!
//! The encoder's entry points are in `encode` (sizing, choosing and
//! encoding) and the decoder's in `decode`; both dispatch on the codec named
//! by `tag`. Under them are the codecs, `raw`, `bitpack`, `huffman` and
//! `rans` (the last two with their decoders apart from their encoders),
//! `shared` (the encoder of code tables shared by many literals, which
//! `decode` reads), and what the codecs share: `symbols` (the symbol set, its rANS counts as
//! `rounded` values), `bits`, `index`, `codelen`, `stats` (the statistics
//! the encoders size from), `width`, `word` and `simd`. No decoder file
//! imports an encoder file.

mod bitpack;
mod bits;
mod codelen;
mod decode;
mod encode;
mod huffman;
mod index;
mod rans;
mod raw;
mod rounded;
mod shared;
mod simd;
mod stats;
mod symbols;
mod tag;
#[cfg(test)]
pub(crate) mod tests;
mod width;
mod word;

pub use crate::wire::WireError;
pub use decode::{
    coded_with, decode, decode_in, decode_or_in, decode_rows, ors_in, table_len, writes_rows,
};
pub use encode::{
    best, best_of, encode, encode_with, encode_with_stats, encoded_size, rans_prediction_slack,
    size_lower_bound, SIZING_ORDER,
};
pub use rans::ROWS_ROUND;
pub use shared::SharedCode;
pub(crate) use stats::SplitHistogram;
pub use stats::{order0_bits, Stats};
pub use symbols::MAX_SYMBOLS;
pub use tag::{peek_codec, Codec};
pub use word::{OrIn, Word};
