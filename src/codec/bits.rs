//! Least-significant-bit-first bit writing, shared by bit packing and Huffman.

#![forbid(unsafe_code)]

/// Appends fields of up to 32 bits to a byte vector, first field in the lowest bits.
pub(super) struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    /// Bits pending in `acc`; below 32 between calls, so a 32-bit field always fits.
    nbits: u32,
}

impl<'a> BitWriter<'a> {
    pub(super) fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            nbits: 0,
        }
    }

    /// Appends the low `bits` bits of `value` (`value < 2^bits`, `bits <= 32`).
    #[inline]
    pub(super) fn put(&mut self, value: u32, bits: u32) {
        self.acc |= (value as u64) << self.nbits;
        self.nbits += bits;
        if self.nbits >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.nbits -= 32;
        }
    }

    /// Flushes the pending bits, zero-padded to a whole byte.
    pub(super) fn finish(self) {
        let tail = self.nbits.div_ceil(8) as usize;
        self.out.extend_from_slice(&self.acc.to_le_bytes()[..tail]);
    }
}
