//! Packing a safetensors file into an archive.
//!
//! The file is planned into chunks (`plan`; their widths: `width`) against
//! its bases (`bases`; rows found among a base tensor's: `rows`), a prior is learned from a sample of them (`sample`),
//! and the chunks are packed in parallel (`chunk`, `encode`; against a base:
//! `residual`) and their records written in source order (`output`) by the
//! tasks of `pipeline`, read in batches of a chunk a thread (`input`), a few
//! batches at a time: memory is bounded by threads x chunk size and the
//! bytes do not depend on the thread count.

#![forbid(unsafe_code)]

mod bases;
mod chunk;
mod encode;
mod input;
mod options;
mod output;
mod pipeline;
mod plan;
mod residual;
mod rows;
mod sample;
#[cfg(test)]
mod tests;
mod width;

pub use bases::{BaseOpener, BaseSources};
pub use encode::{encode_record, literal_fallbacks};
pub use options::{PackOptions, DEFAULT_CHUNK_BYTES, DEFAULT_LEVEL, LEVELS};
pub use output::PackSummary;
pub use sample::{calibrate, CALIBRATION_BUDGET};

use crate::atomic::{stamp, write_atomically};
use crate::error::{IoContext, Result};
use bases::Bases;
use input::{batches, Extent, Input};
use output::Output;
use plan::Chunking;
use sample::synth_options;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::path::Path;

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
/// packed and written in order, then the index.
fn write_archive(
    input: &Input,
    tmp: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let plan = &input.plan;
    let file = File::create(tmp).at(tmp)?;
    let mut out = Output::start(&file, tmp, plan.len())?;
    let mut sha = Sha256::new();
    let threads = rayon::current_num_threads() as u64;
    let ranges: Vec<_> = batches(plan, input.chunk, threads).collect();
    // The first batch is read while the prior is learned.
    let (synth, first) = rayon::join(
        || synth_options(input, opts),
        || {
            ranges
                .first()
                .map(|r| Extent::read(input, &plan[r.clone()]))
        },
    );
    let synth = &synth?;
    if let Some(first) = first.transpose()? {
        let output = (&mut out, &mut sha);
        pipeline::pack_all(input, &ranges, first, synth, output, progress)?;
    }
    out.finish(input, sha.finalize().into())
}
