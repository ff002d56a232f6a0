//! The decoder's side of the literal codecs: a literal's tag, then its
//! codec's decoder, which checks every byte it reads (docs/FORMAT.md,
//! "Literals"). It imports none of the encoders.
//!
//! Encodings are self-delimiting, so `decode` reports how many bytes it
//! consumed.

use super::tag::{peek_codec, Codec};
use super::word::{OrIn, Overwrite, Put, Word};
use super::{bitpack, huffman, rans, raw};
use crate::wire::{Reader, WireError};

/// Decodes exactly `out.len()` words of `width` bits from the start of `input`
/// and returns the number of bytes consumed. Never panics on any input; panics
/// if `T` is too narrow for `width` (a caller bug).
pub fn decode<T: Word>(input: &[u8], width: u32, out: &mut [T]) -> Result<usize, WireError> {
    decode_with(input, width, out, Overwrite)
}

/// Whether `decode_or_in` takes encodings with `codec`: those whose words
/// come out one by one in order, so they can be ored in as they are decoded.
pub fn ors_in(codec: Codec) -> bool {
    matches!(codec, Codec::Raw | Codec::BitPack)
}

/// `decode`, but ors each word into its slot as a Merge field (see [`OrIn`])
/// instead of overwriting it, with no scratch buffer. On an error, `out` holds
/// unspecified words. Panics if the codec does not pass [`ors_in`] (a caller
/// bug: check with `peek_codec` first).
pub fn decode_or_in<T: Word>(
    input: &[u8],
    width: u32,
    or_in: OrIn,
    out: &mut [T],
) -> Result<usize, WireError> {
    assert!(
        or_in.pending < T::BITS && or_in.shift < T::BITS,
        "merge shifts {or_in:?} do not fit {} bits",
        T::BITS
    );
    decode_with(input, width, out, or_in)
}

/// Whether `decode_rows` takes encodings with `codec`: rANS of tag 4, whose
/// decoders write whole rounds of words in place.
pub fn writes_rows(codec: Codec) -> bool {
    codec == Codec::Rans
}

/// `decode`, but word `k` goes to row `rows[k / group]` of `out` (rows of
/// `group` words), at `k % group` in it: a Partition's class decoded
/// straight into its rows. `None` (nothing read) unless `group` is a
/// multiple of [`ROWS_ROUND`](super::ROWS_ROUND) and every row lies in
/// `out`. Panics if the codec does not pass [`writes_rows`] (a caller bug:
/// check with `peek_codec` first).
pub fn decode_rows<T: Word>(
    input: &[u8],
    width: u32,
    out: &mut [T],
    group: usize,
    rows: &[u32],
) -> Option<Result<usize, WireError>> {
    let mut rows = rans::Rows::new(out, group, rows)?;
    let decoded = open_literal(input, width, T::BITS).and_then(|(mut r, codec)| {
        assert!(writes_rows(codec), "{} cannot write rows", codec.name());
        rans::decode(&mut r, width, &mut rows, rans::Form::Seeded)?;
        Ok(r.pos())
    });
    Some(decoded)
}

/// A reader past a literal's codec tag, and the codec, after checking its
/// width against `bits` (those of the words it is decoded into).
fn open_literal(input: &[u8], width: u32, bits: u32) -> Result<(Reader<'_>, Codec), WireError> {
    let mut r = Reader::new(input);
    if !(1..=32).contains(&width) {
        return Err(r.error("literal width not in 1..=32"));
    }
    assert!(width <= bits, "{width}-bit words do not fit {bits} bits");
    let codec = peek_codec(input)?;
    r.u8()?;
    Ok((r, codec))
}

fn decode_with<T: Word, P: Put>(
    input: &[u8],
    width: u32,
    out: &mut [T],
    put: P,
) -> Result<usize, WireError> {
    let (mut r, codec) = open_literal(input, width, T::BITS)?;
    decode_body(&mut r, codec, width, out, put)?;
    Ok(r.pos())
}

/// Decodes the words of a literal of `codec` after its tag.
fn decode_body<T: Word, P: Put>(
    r: &mut Reader,
    codec: Codec,
    width: u32,
    out: &mut [T],
    put: P,
) -> Result<(), WireError> {
    match (codec, put.or_in()) {
        (Codec::Raw, _) => raw::decode(r, width, out, put)?,
        (Codec::BitPack, _) => bitpack::decode(r, width, out, put)?,
        (Codec::Huffman, None) => huffman::decode(r, width, out)?,
        (Codec::Rans, None) => rans::decode(r, width, out, rans::Form::Seeded)?,
        (Codec::RansV1, None) => rans::decode(r, width, out, rans::Form::Varints)?,
        (_, Some(_)) => panic!("{} cannot or words in", codec.name()),
    }
    Ok(())
}

/// Bytes of the code table at the start of an encoding of `width`-bit words:
/// what a Huffman or rANS literal says of its symbols (their words, code
/// lengths or counts, and rANS's head byte) before the coded words; 0 for Raw
/// and BitPack. Read and checked as the decoder reads it; never panics on
/// any input.
pub fn table_len(input: &[u8], width: u32) -> Result<usize, WireError> {
    let (mut r, codec) = open_literal(input, width, 32)?;
    match codec {
        Codec::Raw | Codec::BitPack => return Ok(0),
        Codec::Huffman => drop(huffman::read_table(&mut r, width)?),
        Codec::Rans => drop(rans::read_table(&mut r, width, rans::Form::Seeded)?),
        Codec::RansV1 => drop(rans::read_table(&mut r, width, rans::Form::Varints)?),
    }
    Ok(r.pos() - 1)
}
