//! Packing one planned chunk: its record searched or re-fit, against its
//! base's bytes or not, and its index entry.

#![forbid(unsafe_code)]

use super::encode::{encode_record_like, Encoded};
use super::input::Piece;
use super::plan::Planned;
use super::residual::{candidates, residual};
use crate::archive::format::{checksum, BaseSpan, ChunkEntry};
use crate::safetensors::Layout;
use crate::synth::{Hint, SynthOptions, Template};

/// The index entry and record of one chunk, re-fit from `like` or searched
/// (see [`encode_record_like`]). A chunk with a base is coded as its residual
/// against the base (see [`residual`]), as its own bytes, or both ways
/// keeping the smaller (see [`candidates`]); `like` holds templates of
/// residuals, so coding its own bytes is a search, and gives no template.
pub(super) fn pack_chunk(
    piece: Piece,
    p: &Planned,
    synth: &SynthOptions,
    like: &[Vec<Template>],
    may_search: bool,
) -> Option<(ChunkEntry, Encoded)> {
    let layout: Layout = p.element.layout;
    let hint = Hint {
        float: p.element.float,
        rows: p.rows,
        columns: p.columns,
    };
    let entry = |encoded: Encoded, base| {
        let chunk = ChunkEntry {
            layout,
            src_len: p.len,
            rec_len: encoded.record.len() as u64,
            checksum: checksum(piece.bytes),
            base,
        };
        (chunk, encoded)
    };
    let Some((base_bytes, origin)) = piece.base else {
        let encoded = encode_record_like(piece.bytes, layout, hint, synth, like, may_search)?;
        return Some(entry(encoded, None));
    };
    let residual = residual(piece.bytes, base_bytes, layout);
    let (try_residual, try_plain) = candidates(piece.bytes, &residual, layout);
    let span = BaseSpan {
        base: origin.which,
        rows: origin.map,
        offset: origin.offset,
        combine: residual.combine,
    };
    let delta = try_residual
        .then(|| encode_record_like(&residual.bytes, layout, hint, synth, like, may_search))
        .map(|d| d.map(|d| entry(d, Some(span))));
    if matches!(delta, Some(None)) {
        // A misfit: searched later with the class's templates.
        return None;
    }
    let plain = try_plain.then(|| {
        let encoded = encode_record_like(piece.bytes, layout, hint, synth, &[], true);
        let encoded = encoded.expect("a chunk that may be searched is encoded");
        entry(
            Encoded {
                templates: Vec::new(),
                ..encoded
            },
            None,
        )
    });
    [delta.flatten(), plain]
        .into_iter()
        .flatten()
        .min_by_key(|(chunk, _)| chunk.rec_len)
}
