//! One segment's record: a program per lane of its layout, and the conversion
//! between source bytes and lane words.

use crate::codec::Word;
use crate::dsl::{self, decode_program, encode_program, with_scratch, Limits, Type};
use crate::safetensors::Layout;
use crate::synth::{self, Hint, SynthOptions};
use crate::wire::WireError;

/// Splits little-endian source bytes into the layout's lanes of words.
pub(super) fn to_lanes(bytes: &[u8], layout: Layout) -> Vec<Vec<u32>> {
    match layout {
        Layout::Bytes => vec![bytes.iter().map(|&b| b as u32).collect()],
        Layout::Half => vec![bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect()],
        Layout::Word => vec![bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()],
        Layout::Double => (0..2)
            .map(|half| {
                bytes
                    .chunks_exact(8)
                    .map(|c| u32::from_le_bytes(c[4 * half..4 * half + 4].try_into().expect("4")))
                    .collect()
            })
            .collect(),
    }
}

/// Writes one lane's words into their places in the little-endian output bytes.
fn from_lane<T: Word>(words: &[T], lane: usize, layout: Layout, out: &mut [u8]) {
    let size = size_of::<T>();
    let at = lane * size;
    for (o, w) in out.chunks_exact_mut(layout.element_bytes()).zip(words) {
        o[at..at + size].copy_from_slice(&w.to_u32().to_le_bytes()[..size]);
    }
}

/// Synthesizes and encodes the record of one segment, then decodes it again: a
/// record that would not reproduce `bytes` is never written (it is replaced by
/// plain literals and the bug is logged).
pub fn encode_chunk(bytes: &[u8], layout: Layout, hint: Hint, opts: &SynthOptions) -> Vec<u8> {
    let lanes = to_lanes(bytes, layout);
    let mut record = Vec::new();
    for lane in &lanes {
        let program = synth::synthesize(lane, layout.lane_width(), hint, opts);
        encode_program(&program, &mut record);
    }
    let mut check = vec![0u8; bytes.len()];
    if decode_chunk(&record, layout, &mut check).is_ok() && check == bytes {
        return record;
    }
    log::error!("a synthesized record did not decode to its source; storing literals");
    record.clear();
    for lane in lanes {
        let (program, _) = synth::leaf(lane.into(), layout.lane_width());
        encode_program(&program, &mut record);
    }
    record
}

/// Decodes a record into `out` (the segment's source bytes). Offsets in errors are
/// relative to the record's start. The caller verifies the checksum.
pub fn decode_chunk(record: &[u8], layout: Layout, out: &mut [u8]) -> Result<(), WireError> {
    match layout {
        Layout::Bytes => decode_lanes::<u8>(record, layout, out),
        Layout::Half => decode_lanes::<u16>(record, layout, out),
        Layout::Word | Layout::Double => decode_lanes::<u32>(record, layout, out),
    }
}

/// `decode_chunk` with lane words held as `T`, whose width is the lane width.
fn decode_lanes<T: Word>(record: &[u8], layout: Layout, out: &mut [u8]) -> Result<(), WireError> {
    let ty = Type {
        width: layout.lane_width(),
        len: out.len() / layout.element_bytes(),
    };
    // A single lane's words are their own little-endian bytes: when the output
    // is aligned for them, the program runs straight into it, with no scratch
    // and no copy.
    if let (1, true, Ok(words)) = (
        layout.lanes(),
        cfg!(target_endian = "little"),
        bytemuck::try_cast_slice_mut::<u8, T>(out),
    ) {
        let (program, used) = decode_program(record, ty, Limits::default())?;
        dsl::execute(&program, words)?;
        return finish(record, used);
    }
    let mut pos = 0;
    with_scratch(ty.len, |words: &mut [T]| {
        for lane in 0..layout.lanes() {
            let at = |e: WireError| WireError {
                at: pos + e.at,
                reason: e.reason,
            };
            let (program, used) =
                decode_program(&record[pos..], ty, Limits::default()).map_err(at)?;
            dsl::execute(&program, words).map_err(at)?;
            from_lane(words, lane, layout, out);
            pos += used;
        }
        Ok(())
    })?;
    finish(record, pos)
}

/// A record must be used up exactly by its programs.
fn finish(record: &[u8], used: usize) -> Result<(), WireError> {
    if used != record.len() {
        return Err(WireError {
            at: used,
            reason: "record has trailing bytes",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsl::FloatFormat;

    /// Float-like elements: a few exponents, noisy mantissas.
    fn sample(len: usize) -> Vec<u8> {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        (0..len)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                if i % 2 == 1 {
                    0x3c + (seed >> 62) as u8
                } else {
                    seed as u8
                }
            })
            .collect()
    }

    /// Every layout decodes to its source whether the output is aligned for
    /// its lane words (decoded in place) or not (decoded through scratch).
    #[test]
    fn aligned_and_unaligned_outputs_agree() {
        let bytes = sample(8 * 3000);
        for layout in Layout::ALL {
            for float in [None, Some(FloatFormat::F16)] {
                let hint = Hint { float };
                let record = encode_chunk(&bytes, layout, hint, &SynthOptions::default());
                let mut backing = vec![0u64; bytes.len() / 8 + 1];
                let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut backing);
                for start in [0, 1] {
                    let out = &mut buf[start..start + bytes.len()];
                    out.fill(0);
                    decode_chunk(&record, layout, out).unwrap();
                    assert!(out == bytes, "{layout:?} {float:?} at offset {start}");
                }
            }
        }
    }
}
