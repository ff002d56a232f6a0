//! The tag byte that starts every literal and the codec it names
//! (docs/FORMAT.md, "Tag").

#![forbid(unsafe_code)]

use crate::wire::{Reader, WireError};

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
    /// Huffman or rANS words coded with a table the archive's index holds
    /// once for many literals (tag 5, format version 10).
    Shared,
}

impl Codec {
    /// Every codec written, in tie-breaking order for `best`.
    pub const ALL: [Codec; 4] = [Codec::Raw, Codec::BitPack, Codec::Huffman, Codec::Rans];
    /// Every codec read.
    pub const READ: [Codec; 6] = [
        Codec::Raw,
        Codec::BitPack,
        Codec::Huffman,
        Codec::Rans,
        Codec::RansV1,
        Codec::Shared,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::BitPack => "bitpack",
            Codec::Huffman => "huffman",
            Codec::Rans => "rans",
            Codec::RansV1 => "rans-v1",
            Codec::Shared => "shared",
        }
    }

    /// The tag byte that starts an encoding with this codec.
    pub(super) fn tag(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::BitPack => 1,
            Codec::Huffman => 2,
            Codec::RansV1 => 3,
            Codec::Rans => 4,
            Codec::Shared => 5,
        }
    }

    pub(super) fn from_tag(tag: u8) -> Option<Codec> {
        Codec::READ.into_iter().find(|c| c.tag() == tag)
    }
}

/// Which codec an encoding starting at `input` uses (reads the tag only).
pub fn peek_codec(input: &[u8]) -> Result<Codec, WireError> {
    let tag = Reader::new(input).u8()?;
    Codec::from_tag(tag).ok_or(WireError {
        at: 0,
        reason: "unknown literal codec tag",
    })
}
