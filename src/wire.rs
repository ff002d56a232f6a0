//! Byte-level primitives shared by every encoder and decoder: canonical LEB128
//! varints and a bounds-checked cursor over untrusted input.
//!
//! Every read is checked against the end of the input, and a varint must use the
//! fewest bytes that represent it, so each value has exactly one encoding.

#![forbid(unsafe_code)]

use std::fmt;

/// Why a read from untrusted bytes failed; `at` is the offset inside the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    pub at: usize,
    pub reason: &'static str,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.reason, self.at)
    }
}

impl std::error::Error for WireError {}

/// Appends `v` as an unsigned LEB128 varint (7 bits per byte, low bits first).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

/// A cursor over untrusted bytes. Reads never panic; they fail with the offset.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Offset of the next unread byte.
    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not read yet, without reading them.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// An error at the current offset.
    pub fn error(&self, reason: &'static str) -> WireError {
        WireError {
            at: self.pos,
            reason,
        }
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error("unexpected end of data"))?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `n` bytes; fails before touching memory if fewer remain.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(self.error("length runs past the end of data"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u64_le(&mut self) -> Result<u64, WireError> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A canonical varint: at most 10 bytes, no redundant trailing zero byte,
    /// no bits beyond 64.
    pub fn varint(&mut self) -> Result<u64, WireError> {
        let start = self.pos;
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            let payload = (b & 0x7f) as u64;
            if i == 9 && payload > 1 {
                self.pos = start;
                return Err(self.error("varint overflows 64 bits"));
            }
            v |= payload << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    self.pos = start;
                    return Err(self.error("non-canonical varint"));
                }
                return Ok(v);
            }
        }
        self.pos = start;
        Err(self.error("varint longer than 10 bytes"))
    }

    /// A varint that must be at most `max`; `what` names it in the error.
    pub fn varint_max(&mut self, max: u64, what: &'static str) -> Result<u64, WireError> {
        let at = self.pos;
        let v = self.varint()?;
        if v > max {
            return Err(WireError { at, reason: what });
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trips(v: u64) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.varint().unwrap(), v);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn varint_never_panics(bytes: Vec<u8>) {
            let _ = Reader::new(&bytes).varint();
        }
    }

    #[test]
    fn rejects_non_canonical_and_overflowing_varints() {
        assert!(Reader::new(&[0x80, 0x00]).varint().is_err());
        assert!(Reader::new(&[0xff; 10]).varint().is_err());
        let mut max = Vec::new();
        put_varint(&mut max, u64::MAX);
        assert_eq!(Reader::new(&max).varint().unwrap(), u64::MAX);
        assert!(Reader::new(&[0x80]).varint().is_err());
    }
}
