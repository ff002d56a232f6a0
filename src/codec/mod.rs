//! Literal codecs: lossless encodings of a stream of `n` words of `width` bits.
//!
//! Every encoding starts with one tag byte naming its codec, followed by that
//! codec's payload (see `docs/FORMAT.md`, "Literals"). Neither `n` nor `width` is stored:
//! the caller knows both. Encodings are self-delimiting, so `decode` reports how
//! many bytes it consumed.
//!
//! The caller typically tries many candidate streams and keeps the smallest, so
//! `encoded_size` is exact yet computed from a `Stats` summary where possible
//! instead of by encoding.

mod bitpack;
mod bits;
mod codelen;
mod huffman;
mod index;
mod rans;
mod raw;
mod shape;
mod simd;
mod stats;
mod symbols;
#[cfg(test)]
pub(crate) mod tests;
mod word;

pub use crate::wire::WireError;
pub(crate) use stats::SplitHistogram;
pub use stats::{order0_bits, Stats};
pub use word::{OrIn, Word};

use word::{Overwrite, Put};

use crate::wire::Reader;

/// Largest alphabet Huffman and rANS accept; it bounds every decoding table.
pub const MAX_SYMBOLS: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    Raw,
    BitPack,
    Huffman,
    /// rANS with a table of counts to a few bits and seeded states (tag 4,
    /// format version 6).
    Rans,
    /// rANS with frequencies as varints (tag 3, format versions 1 to 5):
    /// read, no longer written.
    RansV1,
}

impl Codec {
    /// Every codec written, in tie-breaking order for `best`.
    pub const ALL: [Codec; 4] = [Codec::Raw, Codec::BitPack, Codec::Huffman, Codec::Rans];
    /// Every codec read.
    pub const READ: [Codec; 5] = [
        Codec::Raw,
        Codec::BitPack,
        Codec::Huffman,
        Codec::Rans,
        Codec::RansV1,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::BitPack => "bitpack",
            Codec::Huffman => "huffman",
            Codec::Rans => "rans",
            Codec::RansV1 => "rans-v1",
        }
    }

    /// The tag byte that starts an encoding with this codec.
    fn tag(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::BitPack => 1,
            Codec::Huffman => 2,
            Codec::RansV1 => 3,
            Codec::Rans => 4,
        }
    }

    fn from_tag(tag: u8) -> Option<Codec> {
        Codec::READ.into_iter().find(|c| c.tag() == tag)
    }
}

/// Panics on caller bugs (not on data): a width outside 1..=32.
fn check_width(width: u32) {
    assert!(
        (1..=32).contains(&width),
        "literal width {width} not in 1..=32"
    );
}

/// Exact size in bytes of `encode_with(codec, ..)`'s output, or None if the codec does not apply.
pub fn encoded_size(codec: Codec, words: &[u32], width: u32, stats: &Stats) -> Option<usize> {
    check_width(width);
    let payload = match codec {
        Codec::Raw => raw::size(words.len(), width),
        Codec::BitPack => bitpack::size(words.len(), stats.max()),
        Codec::Huffman => huffman::size(stats)?,
        Codec::Rans => rans::size(words, stats)?,
        Codec::RansV1 => return None,
    };
    Some(1 + payload)
}

/// A size no encoding of `n` words with `stats` is below: Raw and BitPack
/// exactly; for Huffman and rANS the floor of the table of symbols both
/// write (see `symbols::size_floor`), plus the order-0 entropy of the words
/// (a prefix code, or a rANS stream with its states, never codes below it)
/// less 1/64 to absorb the floating-point sum. Costs no encoding and no
/// sizing: the search uses it to skip candidates that cannot win, such as
/// a 16-bit literal whose entropy is low but whose table of thousands of
/// words is not.
pub fn size_lower_bound(n: usize, width: u32, stats: &Stats) -> usize {
    check_width(width);
    let plain = raw::size(n, width).min(bitpack::size(n, stats.max()));
    let coded = (stats.alphabet()).map_or(usize::MAX, |a| {
        let entropy = (a.order0_bits() / 8.0 * (1.0 - 1.0 / 64.0)) as usize;
        symbols::size_floor(&a.words) + entropy
    });
    1 + plain.min(coded)
}

/// Bytes a rANS literal's predicted size (the size [`best`] reports for
/// rANS, about `size` bytes) may be off its exact size, either way: two a
/// lane of two groups, and 1/1024 of the exact size (the bound
/// `rans::tests` checks; 1/1000 of the prediction covers it).
pub fn rans_prediction_slack(size: usize) -> usize {
    128 + size / 1000
}

/// The codec expected to code `words` smallest, and the size it is
/// expected at: Raw, BitPack and Huffman are sized exactly, rANS is
/// predicted from its model ([`rans::predict`], a few bytes from its
/// exact size on average) since a pass of its coder costs about as much as
/// encoding, and the search weighs many streams it then drops. Ties are
/// broken by the order of Codec::ALL.
pub fn best(words: &[u32], width: u32, stats: &Stats) -> (Codec, usize) {
    best_of(&SIZING_ORDER, words, width, stats)
}

/// [`best`] among `codecs` (at least one, sized in that order).
pub fn best_of(codecs: &[Codec], words: &[u32], width: u32, stats: &Stats) -> (Codec, usize) {
    // (size, order, codec) of the best so far.
    let mut best = (usize::MAX, usize::MAX, Codec::Raw);
    for &codec in codecs {
        let order = (Codec::ALL.iter().position(|&c| c == codec)).expect("a codec of ALL");
        // The largest size with which this codec still beats the best.
        let most = match order < best.1 {
            true => best.0,
            false => best.0 - 1,
        };
        if let Some(size) = expected_size(codec, words, width, stats, most) {
            if (size, order) < (best.0, best.1) {
                best = (size, order, codec);
            }
        }
    }
    (best.2, best.0)
}

/// The order [`best`] sizes the codecs in: Huffman last, so that its code
/// lengths are built only where it may still beat the others (the search
/// sizes many streams that rANS or Raw code smaller, and limiting their
/// code lengths took most of the time sizing them).
pub const SIZING_ORDER: [Codec; 4] = [Codec::Raw, Codec::BitPack, Codec::Rans, Codec::Huffman];

/// [`encoded_size`], but rANS's predicted rather than found by a pass of
/// its coder, and None also where Huffman's is sure to exceed `most`: by
/// its floor (the table and the words' order-0 entropy), or by the length
/// of the unlimited Huffman code (see [`huffman::size_within`]).
fn expected_size(
    codec: Codec,
    words: &[u32],
    width: u32,
    stats: &Stats,
    most: usize,
) -> Option<usize> {
    match codec {
        Codec::Rans => Some(1 + rans::predict(words, stats)?),
        Codec::Huffman => Some(1 + huffman::size_within(stats, most.checked_sub(1)?)?),
        _ => encoded_size(codec, words, width, stats),
    }
}

/// Indices of `keys` (below 2^48, at most 2^16 of them) by increasing key,
/// then index: sorted as packed integers, without an indirection per
/// comparison, since code lengths and rANS frequencies are chosen for every
/// candidate stream while packing.
pub(crate) fn sorted_indices(keys: impl ExactSizeIterator<Item = u64>) -> Vec<usize> {
    const INDEX_BITS: u32 = 16;
    assert!(keys.len() <= 1 << INDEX_BITS, "too many keys");
    let mut packed: Vec<u64> = (keys.enumerate())
        .map(|(i, key)| {
            debug_assert!(key < 1 << (64 - INDEX_BITS), "key too large");
            key << INDEX_BITS | i as u64
        })
        .collect();
    packed.sort_unstable();
    let mask = (1 << INDEX_BITS) - 1;
    packed.into_iter().map(|k| (k & mask) as usize).collect()
}

/// Appends the encoding with `codec` (tag byte, then payload). Returns false
/// (and appends nothing) if the codec does not apply.
pub fn encode_with(codec: Codec, words: &[u32], width: u32, out: &mut Vec<u8>) -> bool {
    check_width(width);
    match codec {
        // These two need no histogram, so skip building one.
        Codec::Raw | Codec::BitPack => {
            let max = words.iter().copied().max().unwrap_or(0);
            assert!(max <= word_mask(width), "word exceeds width {width}");
            out.push(codec.tag());
            if codec == Codec::Raw {
                raw::encode(words, width, out);
            } else {
                bitpack::encode(words, max, out);
            }
            true
        }
        Codec::Huffman | Codec::Rans | Codec::RansV1 => {
            encode_with_stats(codec, words, width, &Stats::new(words, width), out)
        }
    }
}

/// Appends the smallest encoding and returns which codec it used.
pub fn encode(words: &[u32], width: u32, out: &mut Vec<u8>) -> Codec {
    let stats = Stats::new(words, width);
    let (codec, _) = best(words, width, &stats);
    let applied = encode_with_stats(codec, words, width, &stats, out);
    debug_assert!(applied, "best returned a codec that does not apply");
    codec
}

/// [`encode_with`] given the words' statistics.
pub fn encode_with_stats(
    codec: Codec,
    words: &[u32],
    width: u32,
    stats: &Stats,
    out: &mut Vec<u8>,
) -> bool {
    let start = out.len();
    out.push(codec.tag());
    let applied = match codec {
        Codec::Raw => {
            raw::encode(words, width, out);
            true
        }
        Codec::BitPack => {
            bitpack::encode(words, stats.max(), out);
            true
        }
        Codec::Huffman => huffman::encode(words, stats, out),
        Codec::Rans => rans::encode(words, stats, out),
        Codec::RansV1 => false,
    };
    if !applied {
        out.truncate(start);
    }
    applied
}

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

/// Rows that [`decode_rows`] writes into are a multiple of this many words:
/// the widest round of a rANS stream's lanes, which its SIMD decoders
/// write at once.
pub const ROWS_ROUND: usize = 2 * rans::LANES;

/// Whether `decode_rows` takes encodings with `codec`: rANS of tag 4, whose
/// decoders write whole rounds of words in place.
pub fn writes_rows(codec: Codec) -> bool {
    codec == Codec::Rans
}

/// `decode`, but word `k` goes to row `rows[k / group]` of `out` (rows of
/// `group` words), at `k % group` in it: a Partition's class decoded
/// straight into its rows. `None` (nothing read) unless `group` is a
/// multiple of [`ROWS_ROUND`] and every row lies in `out`. Panics if the codec does
/// not pass [`writes_rows`] (a caller bug: check with `peek_codec` first).
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

/// Which codec an encoding starting at `input` uses (reads the tag only).
pub fn peek_codec(input: &[u8]) -> Result<Codec, WireError> {
    let tag = Reader::new(input).u8()?;
    Codec::from_tag(tag).ok_or(WireError {
        at: 0,
        reason: "unknown literal codec tag",
    })
}

/// All ones in the low `width` bits (1..=32).
fn word_mask(width: u32) -> u32 {
    u32::MAX >> (32 - width)
}
