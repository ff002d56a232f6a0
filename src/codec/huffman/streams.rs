//! The four quarters' bitstreams of a Huffman literal and the bit reader of
//! each (docs/FORMAT.md, "Huffman (tag 2)": Bit order, Quarters).

#![forbid(unsafe_code)]

use super::code::quarter_ranges;
use super::table::{Table, PEEK_MASK};
use crate::codec::word::Word;
use crate::wire::{Reader, WireError};

/// The four quarters' bitstreams, as stored after the symbol set.
pub(super) struct Streams<'a> {
    /// All four streams, concatenated.
    pub(super) data: &'a [u8],
    /// Where `data` starts in the input, for errors.
    pub(super) at: usize,
    /// Byte offset in `data` where each stream starts, and where it ends.
    pub(super) starts: [usize; 4],
    pub(super) ends: [usize; 4],
}

impl Streams<'_> {
    pub(super) fn error(&self, reason: &'static str) -> WireError {
        WireError {
            at: self.at,
            reason,
        }
    }
}

/// Reads the four streams' lengths, then their bytes.
pub(super) fn read_streams<'a>(r: &mut Reader<'a>) -> Result<Streams<'a>, WireError> {
    let mut ends = [0usize; 4];
    let mut total = 0usize;
    for end in &mut ends {
        let remaining = r.remaining().saturating_sub(total) as u64;
        total += r.varint_max(remaining, "huffman stream runs past the end of data")? as usize;
        *end = total;
    }
    let at = r.pos();
    let data = r.bytes(total)?;
    let mut starts = [0; 4];
    starts[1..].copy_from_slice(&ends[..3]);
    Ok(Streams {
        data,
        at,
        starts,
        ends,
    })
}

/// `out` split into the four quarters the streams decode.
pub(super) fn quarters<T>(out: &mut [T]) -> [&mut [T]; 4] {
    let [r0, r1, r2, _] = quarter_ranges(out.len());
    let (q0, rest) = out.split_at_mut(r0.len());
    let (q1, rest) = rest.split_at_mut(r1.len());
    let (q2, q3) = rest.split_at_mut(r2.len());
    [q0, q1, q2, q3]
}

/// A bit reader over one stream inside the concatenated streams, least
/// significant bit first. It may read into the next stream or past the end
/// (as zeros); `finish` rejects any such overrun. Keeping only a bit position
/// and a buffer per stream lets four readers live in registers.
pub(super) struct Bits {
    /// Bit offset of the next unread bit in the concatenated streams.
    pub(super) pos: usize,
    /// Byte offset where this stream ends.
    pub(super) end: usize,
    /// Bits from `pos` on; at least 12 valid after each refill's budget.
    pub(super) buf: u64,
}

/// The 8 bytes starting at `at`, with zeros past the end of `data`.
#[inline(always)]
pub(super) fn load_u64(data: &[u8], at: usize) -> u64 {
    match data.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => load_tail(data, at),
    }
}

#[cold]
pub(super) fn load_tail(data: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    let rest = data.get(at..).unwrap_or(&[]);
    le[..rest.len()].copy_from_slice(rest);
    u64::from_le_bytes(le)
}

impl Bits {
    pub(super) fn new(start: usize, end: usize) -> Self {
        Bits {
            pos: start * 8,
            end,
            buf: 0,
        }
    }

    /// Loads the 64 bits at the byte holding `pos`; after dropping the bits
    /// before `pos`, at least 57 remain.
    #[inline(always)]
    pub(super) fn refill(&mut self, data: &[u8]) {
        self.buf = load_u64(data, self.pos / 8) >> (self.pos % 8);
    }

    /// Decodes one word; needs at least 12 valid bits.
    #[inline(always)]
    pub(super) fn decode<T: Word>(&mut self, table: &Table) -> T {
        let entry = table[(self.buf & PEEK_MASK) as usize];
        let len = entry as u32 & 15;
        self.buf >>= len;
        self.pos += len as usize;
        T::from_u32((entry >> 32) as u32)
    }

    pub(super) fn decode_rest<T: Word>(
        mut self,
        data: &[u8],
        table: &Table,
        out: &mut [T],
    ) -> Result<(), &'static str> {
        for o in out {
            self.refill(data);
            *o = self.decode(table);
        }
        self.finish(data)
    }

    /// Checks the stream was consumed exactly: no bits read past its end, no
    /// whole byte left over, and zero padding bits in its last byte.
    pub(super) fn finish(mut self, data: &[u8]) -> Result<(), &'static str> {
        let end = self.end as u64 * 8;
        let pos = self.pos as u64;
        if pos > end {
            return Err("huffman stream overrun");
        }
        let left = end - pos;
        if left >= 8 {
            return Err("huffman stream has unread bytes");
        }
        self.refill(data);
        if self.buf & ((1 << left) - 1) != 0 {
            return Err("huffman padding bits are not zero");
        }
        Ok(())
    }
}
