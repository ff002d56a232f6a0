//! Packing a safetensors file into an archive.
//!
//! The file is planned into chunks (`plan`; their widths: `width`) against
//! its bases (`bases`; rows found among a base tensor's: `rows`), a prior is learned from a sample of them (`sample`),
//! and the chunks are packed in parallel (`chunk`, `encode`; against a base:
//! `residual`) by the tasks of `pipeline`, read and hashed ahead of them in
//! batches of a chunk a thread (`input`, `read_ahead`), a few batches at a
//! time, and their records written in source order behind them (`output`,
//! `write_behind`; a run of a tensor's chunks re-coded with shared code
//! tables, `share`): memory is bounded by threads x chunk size, plus a
//! run's records, and the bytes do not depend on the thread count.

#![forbid(unsafe_code)]

mod bases;
mod chunk;
mod encode;
mod input;
mod options;
mod output;
mod pipeline;
mod plan;
mod read_ahead;
mod residual;
mod rows;
mod sample;
mod share;
#[cfg(test)]
mod tests;
mod width;
mod write_behind;

pub use bases::{BaseOpener, BaseSources};
pub use encode::{encode_record, literal_fallbacks};
pub use options::{PackOptions, DEFAULT_CHUNK_BYTES, DEFAULT_LEVEL, LEVELS};
pub use output::PackSummary;
pub use sample::{calibrate, CALIBRATION_BUDGET};

use crate::atomic::{stamp, write_atomically};
use crate::error::{Error, IoContext, Result};
use bases::Bases;
use input::{batches, Input};
use output::Output;
use plan::Chunking;
use read_ahead::read_ahead;
use sample::synth_options;
use std::fs::File;
use std::path::Path;
use write_behind::write_behind;

/// Packs the safetensors file `src` into the archive `dst`, written under a
/// temporary name and renamed into place. `progress` receives source bytes done.
pub fn pack_file(
    src: &Path,
    dst: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let bases = Bases::open(&opts.bases, dst)?;
    let input = Input::open(src, Chunking::of(opts), bases)?;
    let original = input.file.metadata().at(src)?;
    write_atomically(dst, |tmp| {
        let summary = write_archive(&input, tmp, opts, progress)?;
        stamp(tmp, &original)?;
        Ok(summary)
    })
}

/// Writes the archive of `input` to the file `tmp`: the search's options
/// (with a prior learned while the first batch is read), then every chunk
/// packed and written in order, then the index. The source is read and
/// hashed ahead of the workers, and the records written behind them, each
/// on a thread of its own.
fn write_archive(
    input: &Input,
    tmp: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let plan = &input.plan;
    let file = File::create(tmp).at(tmp)?;
    let mut out = Output::start(&file, tmp, plan, opts.share_tables)?;
    let threads = rayon::current_num_threads() as u64;
    let ranges: Vec<_> = batches(plan, input.chunk, threads).collect();
    let sha256 = std::thread::scope(|scope| {
        let (source, reader) = read_ahead(scope, input, &ranges);
        let (sink, writer) = write_behind(scope, &mut out, progress);
        let packed = synth_options(input, opts)
            .and_then(|synth| pipeline::pack_all(input, &ranges, &synth, source, sink));
        let written = writer.join().expect("the writer does not panic");
        let sha256 = reader.join().expect("the reader does not panic");
        // A failed write stops packing: its error is the one to report.
        written?;
        packed?;
        Ok::<_, Error>(sha256.expect("every batch read once all are packed"))
    })?;
    out.finish(input, sha256)
}
