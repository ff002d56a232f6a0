//! The decoder's side of the literal codecs: a literal's tag, then its
//! codec's decoder, which checks every byte it reads (docs/FORMAT.md,
//! "Literals"). It imports none of the encoders.
//!
//! Encodings are self-delimiting, so `decode` reports how many bytes it
//! consumed.

use super::symbols::SymbolSet;
use super::tag::{peek_codec, Codec};
use super::word::{OrIn, Overwrite, Put, Word};
use super::{bitpack, huffman, rans, raw};
use crate::wire::{Reader, WireError};

/// Decodes exactly `out.len()` words of `width` bits from the start of `input`
/// and returns the number of bytes consumed. Never panics on any input; panics
/// if `T` is too narrow for `width` (a caller bug).
pub fn decode<T: Word>(input: &[u8], width: u32, out: &mut [T]) -> Result<usize, WireError> {
    decode_in(input, &[], width, out)
}

/// `decode`, for a literal of an archive whose index holds the shared code
/// tables `tables` (format version 10): a literal of tag 5 names one of
/// them.
pub fn decode_in<T: Word>(
    input: &[u8],
    tables: &[Vec<u8>],
    width: u32,
    out: &mut [T],
) -> Result<usize, WireError> {
    decode_with(input, tables, width, out, Overwrite)
}

/// The codec that codes a literal's words: its tag's, or for a literal of
/// tag 5 that of the shared table it names in `tables`.
pub fn coded_with(input: &[u8], tables: &[Vec<u8>]) -> Result<Codec, WireError> {
    match peek_codec(input)? {
        Codec::Shared => peek_codec(shared_table(&mut Reader::new(&input[1..]), tables)?),
        codec => Ok(codec),
    }
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
    decode_with(input, &[], width, out, or_in)
}

/// Whether `decode_rows` takes encodings whose words `codec` codes (see
/// [`coded_with`]): rANS of tag 4, whose decoders write whole rounds of
/// words in place.
pub fn writes_rows(codec: Codec) -> bool {
    codec == Codec::Rans
}

/// `decode_in`, but word `k` goes to row `rows[k / group]` of `out` (rows
/// of `group` words), at `k % group` in it: a Partition's class decoded
/// straight into its rows. `None` (nothing read) unless `group` is a
/// multiple of [`ROWS_ROUND`](super::ROWS_ROUND) and every row lies in
/// `out`. Panics if the literal's words are not coded with a codec that
/// passes [`writes_rows`] (a caller bug: check with `coded_with` first).
pub fn decode_rows<T: Word>(
    input: &[u8],
    tables: &[Vec<u8>],
    width: u32,
    out: &mut [T],
    group: usize,
    rows: &[u32],
) -> Option<Result<usize, WireError>> {
    let mut rows = rans::Rows::new(out, group, rows)?;
    let decoded = open_literal(input, width, T::BITS).and_then(|(mut r, codec)| {
        match own_or_shared_table(&mut r, codec, tables, width)? {
            Table::Rans(head) if head.seeded() => rans::decode_words(&mut r, &head, &mut rows)?,
            _ => panic!("{} cannot write rows", codec.name()),
        }
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
    tables: &[Vec<u8>],
    width: u32,
    out: &mut [T],
    put: P,
) -> Result<usize, WireError> {
    let (mut r, codec) = open_literal(input, width, T::BITS)?;
    match (codec, put.or_in()) {
        (Codec::Raw, _) => raw::decode(&mut r, width, out, put)?,
        (Codec::BitPack, _) => bitpack::decode(&mut r, width, out, put)?,
        (_, None) => match own_or_shared_table(&mut r, codec, tables, width)? {
            Table::Huffman(set) => huffman::decode_words(&mut r, set, out)?,
            Table::Rans(head) => rans::decode_words(&mut r, &head, out)?,
        },
        (_, Some(_)) => panic!("{} cannot or words in", codec.name()),
    }
    Ok(r.pos())
}

/// What a Huffman or rANS literal says of its symbols before its coded
/// words, read and checked.
enum Table {
    Huffman(SymbolSet),
    Rans(rans::Head),
}

/// The table of a literal of `codec` (Huffman, rANS or shared), `r` past
/// its tag: read from the literal, or for a shared literal, its table's
/// number read from the literal and the table from `tables`.
fn own_or_shared_table(
    r: &mut Reader,
    codec: Codec,
    tables: &[Vec<u8>],
    width: u32,
) -> Result<Table, WireError> {
    if codec != Codec::Shared {
        return read_table(r, codec, width);
    }
    let at = r.pos();
    let bytes = shared_table(r, tables)?;
    // The table's offsets are in the index, not the record: name the literal.
    let wrong = |reason| WireError { at, reason };
    let (mut t, codec) = open_literal(bytes, width, 32).map_err(|e| wrong(e.reason))?;
    if !matches!(codec, Codec::Huffman | Codec::Rans) {
        return Err(wrong("shared code table of a codec without a table"));
    }
    let table = read_table(&mut t, codec, width).map_err(|e| wrong(e.reason))?;
    if !t.is_empty() {
        return Err(wrong("shared code table has trailing bytes"));
    }
    Ok(table)
}

/// The shared table a literal of tag 5 names (`r` past its tag).
fn shared_table<'t>(r: &mut Reader, tables: &'t [Vec<u8>]) -> Result<&'t [u8], WireError> {
    let most = tables.len().saturating_sub(1) as u64;
    if tables.is_empty() {
        return Err(r.error("shared literal in an archive without code tables"));
    }
    let k = r.varint_max(most, "shared literal names a code table the index lacks")?;
    Ok(&tables[k as usize])
}

/// Reads the table of a literal of `codec`, a Huffman or rANS codec.
fn read_table(r: &mut Reader, codec: Codec, width: u32) -> Result<Table, WireError> {
    Ok(match codec {
        Codec::Huffman => Table::Huffman(huffman::read_table(r, width)?),
        Codec::Rans => Table::Rans(rans::read_table(r, width, rans::Form::Seeded)?),
        Codec::RansV1 => Table::Rans(rans::read_table(r, width, rans::Form::Varints)?),
        Codec::Raw | Codec::BitPack | Codec::Shared => {
            unreachable!("{} has no table", codec.name())
        }
    })
}

/// Bytes of the code table at the start of an encoding of `width`-bit words:
/// what a Huffman or rANS literal says of its symbols (their words, code
/// lengths or counts, and rANS's head byte) before the coded words; 0 for Raw
/// and BitPack, and for a literal whose table is shared (that table is the
/// index's). Read and checked as the decoder reads it; never panics on any
/// input.
pub fn table_len(input: &[u8], width: u32) -> Result<usize, WireError> {
    let (mut r, codec) = open_literal(input, width, 32)?;
    match codec {
        Codec::Raw | Codec::BitPack | Codec::Shared => return Ok(0),
        _ => drop(read_table(&mut r, codec, width)?),
    }
    Ok(r.pos() - 1)
}
