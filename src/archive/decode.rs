//! Reading one chunk: a record's programs decoded, validated and run, their
//! lane words put back into the chunk's little-endian bytes.

#![forbid(unsafe_code)]

use super::format::{
    COLUMN_SCAN_VERSION, MATCH_VERSION, MIRROR_VERSION, PARTITION_VERSION, QUANTIZED_VERSION,
    SEEDED_RANS_VERSION, SPARSE_VERSION, TABLES_VERSION,
};
use crate::codec::Word;
use crate::codec::{peek_codec, Codec};
use crate::dsl::{self, decode_program, decode_program_in, with_scratch, Limits, Type};
use crate::safetensors::Layout;
use crate::wire::WireError;

/// Writes one lane's words into their places in the little-endian output bytes.
fn from_lane<T: Word>(words: &[T], lane: usize, layout: Layout, out: &mut [u8]) {
    let size = size_of::<T>();
    let at = lane * size;
    for (o, w) in out.chunks_exact_mut(layout.element_bytes()).zip(words) {
        o[at..at + size].copy_from_slice(&w.to_u32().to_le_bytes()[..size]);
    }
}

/// Decodes a record of a format `version` archive, whose index holds the
/// shared code tables `tables`, into `out` (the chunk's source bytes).
/// Offsets in errors are relative to the record's start. The caller
/// verifies the checksum.
pub fn decode_record(
    record: &[u8],
    layout: Layout,
    (version, tables): (u8, &[Vec<u8>]),
    out: &mut [u8],
) -> Result<(), WireError> {
    let lanes = Lanes {
        layout,
        limits: program_limits(version),
        tables,
    };
    match layout {
        Layout::Bytes => decode_lanes::<u8>(record, lanes, out),
        Layout::Half => decode_lanes::<u16>(record, lanes, out),
        Layout::Word | Layout::Double => decode_lanes::<u32>(record, lanes, out),
    }
}

/// How a record's lanes are read: their layout, the programs' limits and
/// the archive's shared code tables.
#[derive(Clone, Copy)]
struct Lanes<'t> {
    layout: Layout,
    limits: Limits,
    tables: &'t [Vec<u8>],
}

/// What a format `version` archive's programs may be: the operators for
/// quantized weights only from [`QUANTIZED_VERSION`] on.
pub fn program_limits(version: u8) -> Limits {
    Limits {
        quantized: version >= QUANTIZED_VERSION,
        matches: version >= MATCH_VERSION,
        sparse: version >= SPARSE_VERSION,
        seeded_rans: version >= SEEDED_RANS_VERSION,
        partition: version >= PARTITION_VERSION,
        mirror: version >= MIRROR_VERSION,
        shared_tables: version >= TABLES_VERSION,
        column_scan: version >= COLUMN_SCAN_VERSION,
        ..Limits::default()
    }
}

/// The oldest format version that can hold `record` (a record the packer
/// made, which decodes): the newest of the versions its programs' operators
/// need ([`QUANTIZED_VERSION`] for an operator for quantized weights,
/// [`MATCH_VERSION`] for a Match, [`SPARSE_VERSION`] for a Sparse node,
/// [`SEEDED_RANS_VERSION`] for a rANS literal of tag 4,
/// [`PARTITION_VERSION`] for a Partition, [`MIRROR_VERSION`] for a Mirror,
/// [`TABLES_VERSION`] for a literal whose code table is shared,
/// [`COLUMN_SCAN_VERSION`] for a ColumnScan), else 1.
pub fn record_version(record: &[u8], layout: Layout, src_len: usize) -> u8 {
    fn needs(p: &dsl::Program<dsl::EncodedLit>) -> u8 {
        let own = match p.op {
            dsl::Op::Palette { .. } | dsl::Op::Scaled { .. } => QUANTIZED_VERSION,
            dsl::Op::Match { .. } => MATCH_VERSION,
            dsl::Op::Sparse { .. } => SPARSE_VERSION,
            dsl::Op::Partition { .. } => PARTITION_VERSION,
            dsl::Op::Mirror { .. } => MIRROR_VERSION,
            dsl::Op::ColumnScan { .. } => COLUMN_SCAN_VERSION,
            dsl::Op::Lit(l) => match peek_codec(l.bytes) {
                Ok(Codec::Rans) => SEEDED_RANS_VERSION,
                Ok(Codec::Shared) => TABLES_VERSION,
                _ => 1,
            },
            _ => 1,
        };
        p.children().map(needs).fold(own, u8::max)
    }
    let ty = Type {
        width: layout.lane_width(),
        len: src_len / layout.element_bytes(),
    };
    let (mut pos, mut version) = (0, 1);
    for _ in 0..layout.lanes() {
        let Ok((program, used)) = decode_program(&record[pos..], ty, Limits::default()) else {
            break;
        };
        version = version.max(needs(&program));
        pos += used;
    }
    version
}

/// `decode_record` with lane words held as `T`, whose width is the lane width.
fn decode_lanes<T: Word>(record: &[u8], lanes: Lanes, out: &mut [u8]) -> Result<(), WireError> {
    let Lanes {
        layout,
        limits,
        tables,
    } = lanes;
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
        let (program, used) = decode_program_in(record, ty, limits, tables)?;
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
            let program = decode_program_in(&record[pos..], ty, limits, tables);
            let (program, used) = program.map_err(at)?;
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
