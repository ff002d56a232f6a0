//! The encoder's side of the literal codecs: the exact or expected size of
//! each codec's encoding, the choice of the smallest, and the encoding with
//! its tag (docs/FORMAT.md, "Literals").
//!
//! The caller typically tries many candidate streams and keeps the smallest, so
//! `encoded_size` is exact yet computed from a `Stats` summary where possible
//! instead of by encoding.

use super::stats::Stats;
use super::tag::Codec;
use super::width::{check_width, word_mask};
use super::{bitpack, huffman, rans, raw, symbols};

/// Exact size in bytes of `encode_with(codec, ..)`'s output, or None if the codec does not apply.
pub fn encoded_size(codec: Codec, words: &[u32], width: u32, stats: &Stats) -> Option<usize> {
    check_width(width);
    let payload = match codec {
        Codec::Raw => raw::size(words.len(), width),
        Codec::BitPack => bitpack::size(words.len(), stats.max()),
        Codec::Huffman => huffman::size(stats)?,
        Codec::Rans => rans::size(words, stats)?,
        Codec::RansV1 | Codec::Shared => return None,
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
/// predicted from its model ([`rans::predict`], within
/// [`rans_prediction_slack`] of its exact size) since a pass of its coder
/// costs about as much as encoding, and the search weighs many streams it
/// then drops. Ties are broken by the order of Codec::ALL.
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
pub(super) fn expected_size(
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
        Codec::Huffman | Codec::Rans | Codec::RansV1 | Codec::Shared => {
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
        Codec::RansV1 | Codec::Shared => false,
    };
    if !applied {
        out.truncate(start);
    }
    applied
}
