//! Rounded values (docs/FORMAT.md, "Symbol set (shared by Huffman and
//! rANS)"): the counts of a symbol set held to a few significant bits, in a
//! bit stream. A rANS table needs the proportions of its words, not
//! their exact counts: a count kept to `p` bits below its leading one is off
//! by at most 2^-(p+1) of itself, which costs the stream about 2^-2p / 17
//! bits a word, and neighbouring words of a weight field have counts of
//! about the same size, so bit lengths are coded as differences. This takes
//! a fraction of the bits a word that frequencies as varints take.
//!
//! Each value `v` is written as the zigzag of `bitlen(v)` minus the previous
//! value's bit length (0 before the first), in order-0 Exp-Golomb, then the
//! `min(p, bitlen(v) - 1)` bits just below its leading one. A reader takes
//! the middle of the range those bits leave (see [`quantise`]).

#![forbid(unsafe_code)]

use super::bits::BitWriter;
use crate::wire::{Reader, WireError};

/// Bits kept below a value's leading one at most: its precision is at most
/// 2^-8, beyond which no stream gains anything.
pub(super) const MAX_PRECISION: u32 = 7;

/// Longest bit length of a value (values are `u32`).
const MAX_BITLEN: u32 = 32;

/// Exp-Golomb codes of zigzagged bit-length differences of at most
/// `2 * MAX_BITLEN` have at most this many leading zeros.
const MAX_ZEROS: u32 = 6;

/// The value a reader takes for `v` written with precision `p`: `v` itself
/// when it has at most `p + 1` significant bits, else its leading `p + 1`
/// bits followed by the middle of the dropped bits' range (`1` then zeros).
pub(super) fn quantise(v: u32, p: u32) -> u32 {
    let dropped = bitlen(v).saturating_sub(p + 1);
    match dropped {
        0 => v,
        d => (v >> d << d) | 1 << (d - 1),
    }
}

fn bitlen(v: u32) -> u32 {
    u32::BITS - v.leading_zeros()
}

fn zigzag(d: i32) -> u32 {
    ((d << 1) ^ (d >> 31)) as u32
}

/// How one value after one of bit length `prev` is coded: `z`, the zigzag
/// of the bit-length difference plus one, its Exp-Golomb length `k`
/// (`2k + 1` bits), and the number of bits kept below the leading one.
fn steps(v: u32, prev: u32, p: u32) -> (u32, u32, u32) {
    let b = bitlen(v);
    let z = zigzag(b as i32 - prev as i32) + 1;
    (z, bitlen(z) - 1, p.min(b.saturating_sub(1)))
}

/// The fields of one value after one of bit length `prev`, each
/// `(bits, count)`: the Exp-Golomb marker and suffix of [`steps`]' `z`,
/// then the kept bits.
fn fields(v: u32, prev: u32, p: u32) -> [(u32, u32); 3] {
    let (z, k, kept) = steps(v, prev, p);
    let mantissa = (v >> (bitlen(v).saturating_sub(1) - kept)) & ((1 << kept) - 1);
    [(1 << k, k + 1), (z & ((1 << k) - 1), k), (mantissa, kept)]
}

/// Bits of one value after one of bit length `prev` (the lengths of its
/// [`fields`]).
fn value_bits(v: u32, prev: u32, p: u32) -> usize {
    let (_, k, kept) = steps(v, prev, p);
    (2 * k + 1 + kept) as usize
}

/// Bytes of a sequence of values written with precision `p`, given as its
/// non-zero values, each with the number of zeros before it: a zero after a
/// zero takes one bit, so this takes time in the non-zero values only.
pub(super) fn size(values: impl Iterator<Item = (u32, u64)>, p: u32) -> usize {
    let mut prev = 0;
    let mut bits = 0;
    for (v, zeros) in values {
        if zeros > 0 {
            bits += value_bits(0, prev, p) + (zeros - 1) as usize;
            prev = 0;
        }
        bits += value_bits(v, prev, p);
        prev = bitlen(v);
    }
    bits.div_ceil(8)
}

/// [`size`] of values none of which is zero.
pub(super) fn size_of(values: &[u32], p: u32) -> usize {
    size(values.iter().map(|&v| (v, 0)), p)
}

/// Appends `values` (the last not 0) with precision `p`, zero-padded to a
/// whole byte.
pub(super) fn write(values: &[u32], p: u32, out: &mut Vec<u8>) {
    assert_ne!(values.last(), Some(&0), "values end in a non-zero one");
    let mut w = BitWriter::new(out, size(with_zeros(values), p));
    let mut prev = 0;
    for &v in values {
        for (bits, count) in fields(v, prev, p) {
            w.put(bits, count);
        }
        w.flush();
        prev = bitlen(v);
    }
    w.finish();
}

/// The non-zero values of `values` with the number of zeros before each
/// (see [`size`]).
fn with_zeros(values: &[u32]) -> impl Iterator<Item = (u32, u64)> + '_ {
    let mut zeros = 0;
    values.iter().filter_map(move |&v| match v {
        0 => {
            zeros += 1;
            None
        }
        v => Some((v, std::mem::take(&mut zeros))),
    })
}

/// Reads `count` values written with precision `p`, handing each (as
/// [`quantise`] gives it) to `take`, then the padding, which must be zero.
/// A value of bit length 0 (the value 0) is refused unless `zero_ok`.
pub(super) fn read(
    r: &mut Reader,
    count: usize,
    p: u32,
    zero_ok: bool,
    mut take: impl FnMut(u32) -> Result<(), &'static str>,
) -> Result<(), WireError> {
    let at = r.pos();
    let fail = |reason| WireError { at, reason };
    let mut bits = BitReader {
        data: r.rest(),
        pos: 0,
    };
    let mut prev = 0u32;
    for _ in 0..count {
        let zeros = bits
            .zeros(MAX_ZEROS)
            .ok_or(fail("rounded value runs past the end of data"))?;
        if zeros > MAX_ZEROS {
            return Err(fail("rounded value length out of range"));
        }
        let suffix = bits
            .take(zeros)
            .ok_or(fail("rounded value runs past the end of data"))?;
        let z = (1 << zeros | suffix) - 1;
        // Un-zigzag: even z is a step up, odd a step down.
        let b = if z & 1 == 0 {
            prev.checked_add(z / 2)
        } else {
            prev.checked_sub(z.div_ceil(2))
        };
        let b = b
            .filter(|&b| b <= MAX_BITLEN)
            .ok_or(fail("rounded value length out of range"))?;
        if b == 0 && !zero_ok {
            return Err(fail("rounded value is zero"));
        }
        let kept = p.min(b.saturating_sub(1));
        let mantissa = bits
            .take(kept)
            .ok_or(fail("rounded value runs past the end of data"))?;
        let v = match b {
            0 => 0,
            b => quantise(
                (1u64 << (b - 1) | (mantissa as u64) << (b - 1 - kept)) as u32,
                p,
            ),
        };
        take(v).map_err(fail)?;
        prev = b;
    }
    let used = bits.pos.div_ceil(8);
    if !bits.pos.is_multiple_of(8) && bits.data[used - 1] >> (bits.pos % 8) != 0 {
        return Err(fail("rounded values' padding bits are not zero"));
    }
    r.bytes(used)?;
    Ok(())
}

/// Least-significant-bit-first reading of a byte slice, refusing to read
/// past its end.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl BitReader<'_> {
    fn bit(&mut self) -> Option<u32> {
        let byte = *self.data.get(self.pos / 8)?;
        let b = (byte >> (self.pos % 8)) & 1;
        self.pos += 1;
        Some(b as u32)
    }

    /// The next `n <= 32` bits as a number, first bit lowest.
    fn take(&mut self, n: u32) -> Option<u32> {
        let mut v = 0u32;
        for i in 0..n {
            v |= self.bit()? << i;
        }
        Some(v)
    }

    /// Counts zero bits up to and through the next one bit, stopping at
    /// `max + 1` zeros; None past the end.
    fn zeros(&mut self, max: u32) -> Option<u32> {
        let mut n = 0;
        while n <= max && self.bit()? == 0 {
            n += 1;
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;

    fn round_trip(values: &[u32], p: u32, zero_ok: bool) -> Vec<u32> {
        let mut out = Vec::new();
        write(values, p, &mut out);
        assert_eq!(out.len(), size(with_zeros(values), p));
        out.push(0xAB);
        let mut r = Reader::new(&out);
        let mut got = Vec::new();
        read(&mut r, values.len(), p, zero_ok, |v| {
            got.push(v);
            Ok(())
        })
        .unwrap();
        assert_eq!(r.remaining(), 1, "reads exactly its bytes");
        got
    }

    #[test]
    fn values_read_back_as_quantised() {
        let mut seed = 11;
        for p in 0..=MAX_PRECISION {
            let values: Vec<u32> = (0..300)
                .map(|i| match i % 7 {
                    6 => 0,
                    1 => u32::MAX,
                    _ => (xorshift(&mut seed) >> (xorshift(&mut seed) % 64)) as u32,
                })
                .collect();
            let expected: Vec<u32> = values.iter().map(|&v| quantise(v, p)).collect();
            assert_eq!(round_trip(&values, p, true), expected, "precision {p}");
        }
    }

    #[test]
    fn quantising_keeps_the_leading_bits_and_takes_the_middle() {
        assert_eq!(quantise(0, 0), 0);
        assert_eq!(quantise(1, 0), 1);
        assert_eq!(quantise(0b111, 0), 0b110);
        // 101 kept, 10000 the middle of the 5 bits dropped.
        assert_eq!(quantise(0b1011_0110, 2), 0b1011_0000);
        assert_eq!(quantise(0b1011, 3), 0b1011);
        for v in 1..5000u32 {
            for p in 0..=MAX_PRECISION {
                let q = quantise(v, p);
                // Within half a step of 2^(bitlen - 1 - p).
                let step = 1u32 << bitlen(v).saturating_sub(p + 1);
                assert!(v.abs_diff(q) <= step / 2, "{v} at {p}: {q}");
                assert_eq!(quantise(q, p), q, "a quantised value is kept");
            }
        }
    }

    #[test]
    fn reading_refuses_zeros_overruns_and_padding() {
        let mut out = Vec::new();
        write(&[5, 0, 7], 2, &mut out);
        let read_all = |bytes: &[u8], count, zero_ok| {
            read(&mut Reader::new(bytes), count, 2, zero_ok, |_| Ok(())).map_err(|e| e.reason)
        };
        assert!(read_all(&out, 3, true).is_ok());
        assert_eq!(read_all(&out, 3, false), Err("rounded value is zero"));
        assert_eq!(
            read_all(&out[..1], 3, true),
            Err("rounded value runs past the end of data")
        );
        let mut padded = out.clone();
        *padded.last_mut().unwrap() |= 0x80;
        assert_eq!(
            read_all(&padded, 3, true),
            Err("rounded values' padding bits are not zero")
        );
        // Seven leading zeros: no difference of bit lengths is that long.
        assert_eq!(
            read_all(&[0x80, 0xff], 1, true),
            Err("rounded value length out of range")
        );
        // A step down below bit length 0: z = 1.
        assert_eq!(
            read_all(&[0b010], 1, true),
            Err("rounded value length out of range")
        );
    }
}
