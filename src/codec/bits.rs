//! Least-significant-bit-first bit writing, shared by bit packing and Huffman.

#![forbid(unsafe_code)]

/// Appends exactly a given number of bytes of bit fields to a byte vector,
/// first field in the lowest bits. Fields gather in a 64-bit accumulator;
/// a flush stores all of it at the current byte and moves on by the whole
/// bytes it filled. Neither has a branch, which the encoders' loops of one
/// field per word would mispredict: callers flush at least after every
/// [`BitWriter::ROOM`] bits of fields. The vector holds [`SLACK`] bytes
/// past the end until [`BitWriter::finish`].
pub(super) struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Byte the accumulator's lowest bit goes to.
    at: usize,
    /// Where the promised bytes end.
    end: usize,
    acc: u64,
    /// Bits pending in `acc`; below 8 after a flush.
    nbits: u32,
}

/// Bytes past the end that a store of the accumulator may touch.
const SLACK: usize = 8;

impl<'a> BitWriter<'a> {
    /// Bits of fields that fit between two flushes.
    pub(super) const ROOM: u32 = 56;

    /// A writer of `bytes` bytes to append to `out`.
    pub(super) fn new(out: &'a mut Vec<u8>, bytes: usize) -> Self {
        let at = out.len();
        out.resize(at + bytes + SLACK, 0);
        BitWriter {
            out,
            at,
            end: at + bytes,
            acc: 0,
            nbits: 0,
        }
    }

    /// Adds the low `bits` bits of `value` (`value < 2^bits`, `bits <= 32`).
    #[inline]
    pub(super) fn put(&mut self, value: u32, bits: u32) {
        debug_assert!(self.nbits + bits < 64, "no flush for {} bits", self.nbits);
        self.acc |= (value as u64) << self.nbits;
        self.nbits += bits;
    }

    /// Bits added since the last flush, and those it left.
    #[inline]
    pub(super) fn pending(&self) -> u32 {
        self.nbits
    }

    /// Stores the pending bits; panics past the promised bytes.
    #[inline]
    pub(super) fn flush(&mut self) {
        self.out[self.at..self.at + SLACK].copy_from_slice(&self.acc.to_le_bytes());
        let whole = self.nbits / 8;
        self.at += whole as usize;
        self.acc >>= 8 * whole;
        self.nbits -= 8 * whole;
    }

    /// Ends the fields, zero-padded to a whole byte, which must end the
    /// promised bytes, and drops the slack.
    pub(super) fn finish(mut self) {
        self.flush();
        let written = self.at + self.nbits.div_ceil(8) as usize;
        assert_eq!(written, self.end, "bit writer given the wrong length");
        self.out.truncate(self.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    /// Fields of random widths, flushed after each one or only when the
    /// next could overflow the room, come out as a bit-by-bit reference
    /// writes them, and a writer promised the wrong length refuses to end.
    #[test]
    fn fields_come_out_lowest_bit_first_however_often_flushed() {
        let mut seed = 5;
        let fields: Vec<(u32, u32)> = (0..10_000)
            .map(|_| {
                let bits = 1 + xorshift(&mut seed) as u32 % 32;
                let value = xorshift(&mut seed) as u32 & (u32::MAX >> (32 - bits));
                (value, bits)
            })
            .collect();
        let total: u32 = fields.iter().map(|&(_, b)| b).sum();
        let mut reference = vec![0u8; total.div_ceil(8) as usize];
        let mut at = 0;
        for &(value, bits) in &fields {
            for k in 0..bits {
                reference[at / 8] |= ((value >> k & 1) as u8) << (at % 8);
                at += 1;
            }
        }
        for lazily in [false, true] {
            let mut out = vec![0xaa];
            let mut w = BitWriter::new(&mut out, reference.len());
            for &(value, bits) in &fields {
                if !lazily || w.pending() + bits > BitWriter::ROOM {
                    w.flush();
                }
                w.put(value, bits);
            }
            w.finish();
            assert_eq!(out[0], 0xaa);
            assert_eq!(out[1..], reference[..]);
        }
        let short = std::panic::catch_unwind(|| {
            let mut out = Vec::new();
            let mut w = BitWriter::new(&mut out, 1);
            w.put(0x1ff, 9);
            w.finish();
        });
        assert!(short.is_err());
    }
}
