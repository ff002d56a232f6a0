//! Literal codecs. TEMPORARY raw-only implementation so the rest of the crate
//! builds while the real coders are written; replaced before landing.

use crate::wire::Reader;
pub use crate::wire::WireError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    Raw,
    BitPack,
    Huffman,
    Rans,
}

impl Codec {
    pub const ALL: [Codec; 4] = [Codec::Raw, Codec::BitPack, Codec::Huffman, Codec::Rans];
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::BitPack => "bitpack",
            Codec::Huffman => "huffman",
            Codec::Rans => "rans",
        }
    }
}

pub struct Stats {
    max: u32,
}

impl Stats {
    pub fn new(words: &[u32], _width: u32) -> Stats {
        Stats {
            max: words.iter().copied().max().unwrap_or(0),
        }
    }
    pub fn distinct(&self) -> Option<usize> {
        None
    }
    pub fn max(&self) -> u32 {
        self.max
    }
}

fn word_bytes(width: u32) -> usize {
    width.div_ceil(8) as usize
}

pub fn encoded_size(codec: Codec, words: &[u32], width: u32, _stats: &Stats) -> Option<usize> {
    (codec == Codec::Raw).then(|| 1 + words.len() * word_bytes(width))
}

pub fn best(words: &[u32], width: u32, stats: &Stats) -> (Codec, usize) {
    (
        Codec::Raw,
        encoded_size(Codec::Raw, words, width, stats).unwrap(),
    )
}

pub fn encode_with(codec: Codec, words: &[u32], width: u32, out: &mut Vec<u8>) -> bool {
    if codec != Codec::Raw {
        return false;
    }
    out.push(0);
    let k = word_bytes(width);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes()[..k]);
    }
    true
}

pub fn encode(words: &[u32], width: u32, out: &mut Vec<u8>) -> Codec {
    encode_with(Codec::Raw, words, width, out);
    Codec::Raw
}

pub fn peek_codec(input: &[u8]) -> Result<Codec, WireError> {
    match Reader::new(input).u8()? {
        0 => Ok(Codec::Raw),
        _ => Err(Reader::new(input).error("unknown codec tag")),
    }
}

pub fn decode(input: &[u8], width: u32, out: &mut [u32]) -> Result<usize, WireError> {
    peek_codec(input)?;
    let mut r = Reader::new(input);
    r.u8()?;
    let k = word_bytes(width);
    let data = r.bytes(out.len().checked_mul(k).ok_or(r.error("too long"))?)?;
    for (o, c) in out.iter_mut().zip(data.chunks_exact(k)) {
        let mut b = [0u8; 4];
        b[..k].copy_from_slice(c);
        *o = u32::from_le_bytes(b);
        if width < 32 && *o >> width != 0 {
            return Err(r.error("word exceeds width"));
        }
    }
    Ok(r.pos())
}
