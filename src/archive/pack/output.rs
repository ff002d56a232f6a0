//! Writing the archive: the head, each batch's records in order as they are
//! packed (a run of a tensor's chunks held back until its last is packed,
//! to share code tables, see `share`), then the index of their entries and
//! the trailer, and the head again once the format version the records
//! need is known.

#![forbid(unsafe_code)]

use super::bases::Bases;
use super::input::Input;
use super::plan::Planned;
pub(super) use super::share::Record;
use super::share::{share, RUN_BYTES};
use crate::archive::decode::record_version;
use crate::archive::format::{
    encode_trailer, head, BaseEntry, ChunkEntry, Index, FORMAT_VERSION, HEAD_MAGIC, TRAILER_LEN,
};
use crate::archive::RowMap;
use crate::atomic::start_writeback;
use crate::error::{IoContext, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Sizes of a finished pack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackSummary {
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The archive being written: records so far and their index entries.
pub(super) struct Output<'a> {
    writer: BufWriter<&'a File>,
    path: &'a Path,
    /// The chunks to be written, and the records of the run of a tensor's
    /// chunks held back to share code tables, with the tables so far.
    plan: &'a [Planned],
    /// Whether runs are held back to share tables at all.
    share: bool,
    held: Vec<Record>,
    held_bytes: u64,
    tables: Vec<Vec<u8>>,
    chunks: Vec<ChunkEntry>,
    records_len: u64,
    /// The oldest format version that holds the records written so far.
    version: u8,
}

impl<'a> Output<'a> {
    /// Starts the archive in `file` (at `path`), which will hold the
    /// chunks of `plan`, with its head's magic; with `share`, the records
    /// of runs of a tensor's chunks may share code tables.
    pub(super) fn start(
        file: &'a File,
        path: &'a Path,
        plan: &'a [Planned],
        share: bool,
    ) -> Result<Output<'a>> {
        let mut out = Output {
            writer: BufWriter::with_capacity(1 << 20, file),
            path,
            plan,
            share,
            held: Vec::new(),
            held_bytes: 0,
            tables: Vec::new(),
            chunks: Vec::with_capacity(plan.len()),
            records_len: 0,
            version: 1,
        };
        out.writer.write_all(&HEAD_MAGIC).at(path)?;
        Ok(out)
    }

    pub(super) fn write(&mut self, records: Vec<Record>) -> Result<()> {
        for record in records {
            let planned = &self.plan[self.chunks.len() + self.held.len()];
            self.held.push(record);
            self.held_bytes += planned.len;
            let run_ends = planned.class.is_none() || planned.nth + 1 == planned.count;
            if run_ends || self.held_bytes >= RUN_BYTES || !self.share {
                self.write_held()?;
            }
        }
        // What is written syncs as packing goes on (see `start_writeback`).
        self.writer.flush().at(self.path)?;
        start_writeback(self.writer.get_ref());
        Ok(())
    }

    /// Writes the records held, with the code tables they may share.
    fn write_held(&mut self) -> Result<()> {
        let mut held = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        if held.len() >= 2 {
            share(&mut held, &mut self.tables);
        }
        for (chunk, record) in held {
            if self.version < FORMAT_VERSION {
                let needs = record_version(&record, chunk.layout, chunk.src_len as usize);
                self.version = self.version.max(needs);
            }
            self.writer.write_all(&record).at(self.path)?;
            self.records_len += record.len() as u64;
            self.chunks.push(chunk);
        }
        Ok(())
    }

    /// Ends the archive of `input`, whose bytes hash to `sha256`, once every
    /// record is written: its index and trailer, then its head (written
    /// before the version was known), all synced.
    pub(super) fn finish(self, input: &Input, sha256: [u8; 32]) -> Result<PackSummary> {
        assert!(self.held.is_empty(), "every run of chunks ends by the last");
        let Output {
            mut writer,
            path,
            tables,
            mut chunks,
            records_len,
            version,
            ..
        } = self;
        let (bases, rows) = referenced(&input.bases, &mut chunks);
        let index = Index {
            source_len: input.size,
            sha256,
            chunk_size: input.chunk,
            bases,
            rows,
            tables,
            chunks,
        };
        let version = index.version().max(version);
        let index = index.encode_as(version);
        let index_offset = HEAD_MAGIC.len() as u64 + records_len;
        writer.write_all(&index).at(path)?;
        writer
            .write_all(&encode_trailer(index_offset, &index))
            .at(path)?;
        writer.flush().at(path)?;
        let file = *writer.get_ref();
        drop(writer);
        file.write_all_at(&head(version), 0).at(path)?;
        file.sync_all().at(path)?;
        Ok(PackSummary {
            bytes_in: input.size,
            bytes_out: index_offset + index.len() as u64 + TRAILER_LEN as u64,
        })
    }
}

/// The bases and row maps `chunks` reference, each in the order first
/// referenced, with the chunks' spans (and the maps' bases) renumbered to
/// match: an archive names only the bases and maps it needs.
fn referenced(bases: &Bases, chunks: &mut [ChunkEntry]) -> (Vec<BaseEntry>, Vec<RowMap>) {
    let (mut order, mut maps) = (Vec::new(), Vec::new());
    for span in chunks.iter_mut().filter_map(|c| c.base.as_mut()) {
        span.base = number(&mut order, span.base);
        span.rows = span.rows.map(|m| number(&mut maps, m));
    }
    let rows = maps.iter().map(|&m| {
        let mut map = bases.map(m).clone();
        map.base = number(&mut order, map.base);
        map
    });
    let rows = rows.collect();
    (
        order.iter().map(|&w| bases.entry(w).clone()).collect(),
        rows,
    )
}

/// The place of `w` in `order`, which takes it last if it is not there.
fn number(order: &mut Vec<u32>, w: u32) -> u32 {
    match order.iter().position(|&o| o == w) {
        Some(k) => k as u32,
        None => {
            order.push(w);
            order.len() as u32 - 1
        }
    }
}
