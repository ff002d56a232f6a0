//! Packing one chunk: its bytes split into lanes of words, a program searched
//! for each lane, and the record checked by decoding it again. (Only the
//! packer links the search; readers need `decode` alone.)

#![forbid(unsafe_code)]

use crate::archive::decode::decode_record;
use crate::archive::format::FORMAT_VERSION;
use crate::dsl::encode_program;
use crate::safetensors::Layout;
use crate::synth::{self, Hint, SynthOptions, Template};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Records replaced by plain literals because they failed to decode back.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// How many records this process stored as plain literals because the
/// searched program did not decode back to its chunk: always 0 unless there
/// is a bug, which tests and fuzzing assert.
pub fn literal_fallbacks() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

/// Splits little-endian source bytes into the layout's lanes of words,
/// shared: a re-fit's literals hold a lane as it is rather than a copy.
pub(super) fn to_lanes(bytes: &[u8], layout: Layout) -> Vec<Arc<[u32]>> {
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

/// A chunk's record and its lanes' programs as templates.
pub struct Encoded {
    pub record: Vec<u8>,
    pub templates: Vec<Template>,
}

/// Synthesizes and encodes the record of one chunk, then decodes it again: a
/// record that would not reproduce `bytes` is never written (it is replaced by
/// plain literals, the bug is logged and counted in [`literal_fallbacks`]).
pub fn encode_record(bytes: &[u8], layout: Layout, hint: Hint, opts: &SynthOptions) -> Vec<u8> {
    let encoded = encode_record_like(bytes, layout, hint, opts, &[], true);
    encoded
        .expect("a chunk that may be searched is encoded")
        .record
}

/// [`encode_record`], re-fitting the first of `like` that fits (each one
/// template per lane, from other chunks of the same tensor). A lane none fits
/// is searched if `may_search`; otherwise the result is None.
pub fn encode_record_like(
    bytes: &[u8],
    layout: Layout,
    hint: Hint,
    opts: &SynthOptions,
    like: &[Vec<Template>],
    may_search: bool,
) -> Option<Encoded> {
    let lanes = to_lanes(bytes, layout);
    let mut record = Vec::new();
    let mut templates = Vec::with_capacity(lanes.len());
    for (k, lane) in lanes.iter().enumerate() {
        let width = layout.lane_width();
        let like: Vec<&Template> = like.iter().filter_map(|t| t.get(k)).collect();
        let program = synth::refit_or_search(lane, width, hint, opts, &like, may_search)?;
        // Templates are of the program before partitions: a re-fit is
        // weighed against the template's literals, and partitioned anew.
        templates.push(Template::of(&program));
        let program = match opts.partitions {
            true => synth::partition_rows(program, lane, hint),
            false => program,
        };
        let program = synth::split_records(program, lane, hint);
        // After the records: blocks whose fields are apart are left so.
        let program = match opts.columns {
            true => synth::columns_in_classes(program, lane, hint),
            false => program,
        };
        encode_program(&program, &mut record);
    }
    if decodes_to(&record, layout, bytes) {
        return Some(Encoded { record, templates });
    }
    // A bug in the search or the coders: never write it, and make it count.
    FALLBACKS.fetch_add(1, Ordering::Relaxed);
    log::error!("a synthesized record did not decode to its source; storing literals");
    record.clear();
    for lane in lanes {
        let (program, _) = synth::leaf(lane, layout.lane_width());
        encode_program(&program, &mut record);
    }
    // No template from a record that went wrong.
    Some(Encoded {
        record,
        templates: Vec::new(),
    })
}

/// Whether `record` decodes to `bytes`: into pooled scratch, which decoding
/// overwrites whole (as an archive's reader decodes), rather than a fresh
/// zeroed buffer a chunk.
fn decodes_to(record: &[u8], layout: Layout, bytes: &[u8]) -> bool {
    crate::scratch::with_bytes(bytes.len(), |check| {
        decode_record(record, layout, (FORMAT_VERSION, &[]), check).is_ok() && check == bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::decode_record;
    use crate::dsl::FloatFormat;
    use crate::synth::Hint;

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
                let hint = Hint {
                    float,
                    rows: None,
                    columns: None,
                };
                let record = encode_record(&bytes, layout, hint, &SynthOptions::default());
                let mut backing = vec![0u64; bytes.len() / 8 + 1];
                let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut backing);
                for start in [0, 1] {
                    let out = &mut buf[start..start + bytes.len()];
                    out.fill(0);
                    decode_record(&record, layout, (crate::archive::FORMAT_VERSION, &[]), out)
                        .unwrap();
                    assert!(out == bytes, "{layout:?} {float:?} at offset {start}");
                }
            }
        }
    }
}
