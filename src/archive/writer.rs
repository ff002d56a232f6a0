//! Packing a safetensors file into an archive.
//!
//! The source is read in batches of a few chunks per thread; chunks of a batch are
//! synthesized in parallel and their records written in source order, so memory is
//! bounded by threads x chunk size and the bytes do not depend on the thread count.

#![forbid(unsafe_code)]

use super::encode::{encode_record_like, to_lanes};
use super::format::{checksum, encode_trailer, ChunkEntry, Index, HEAD_MAGIC};
use crate::atomic::write_atomically;
use crate::error::{Error, IoContext, Result};
use crate::safetensors::{self, Element, Layout};
use crate::synth::{learn_prior, Hint, Prior, SynthOptions, Template};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Default source bytes per chunk; see `docs/FORMAT.md` for the measured trade-off.
pub const DEFAULT_CHUNK_BYTES: usize = 256 << 10;

#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Source bytes per chunk (rounded down to whole elements).
    pub chunk_size: usize,
    pub synth: SynthOptions,
    /// Learn a prior from a sample of the file before packing (unless the search
    /// is root-only or `synth.prior` was already given).
    pub learn_prior: bool,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            chunk_size: DEFAULT_CHUNK_BYTES,
            synth: SynthOptions::default(),
            learn_prior: true,
        }
    }
}

/// Chunks searched to learn a prior: at most this many per stratum, and in all.
const SAMPLE_PER_STRATUM: usize = 2;
const SAMPLE_TOTAL: usize = 12;
/// One sampled chunk per this many chunks of a stratum.
const SAMPLE_EVERY: usize = 48;
/// Expansions per sampled chunk when learning a prior.
pub const CALIBRATION_BUDGET: usize = 64;

/// Sizes of a finished pack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackSummary {
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A span of the source to become one chunk.
#[derive(Clone, Copy, Debug)]
struct Planned {
    start: u64,
    len: u64,
    element: Element,
    /// The tensor it is a piece of, if any: chunks of a tensor after its
    /// first re-fit the first one's programs (see `synth::Template`).
    tensor: Option<usize>,
    /// Whether it is the first chunk of its region.
    first: bool,
}

impl Planned {
    /// Whether the chunk is searched afresh rather than re-fit from its
    /// tensor's first chunk.
    fn searched(&self) -> bool {
        self.first || self.tensor.is_none()
    }
}

/// Splits `[start, end)` into chunks of whole elements.
fn push_region(
    plan: &mut Vec<Planned>,
    (start, end): (u64, u64),
    element: Element,
    tensor: Option<usize>,
    chunk: u64,
) {
    let e = element.layout.element_bytes() as u64;
    let step = (chunk / e).max(1) * e;
    let mut at = start;
    while at < end {
        let len = step.min(end - at);
        plan.push(Planned {
            start: at,
            len,
            element,
            tensor,
            first: at == start,
        });
        at += len;
    }
}

/// An open source file and the chunks planned for it.
struct Source<'a> {
    path: &'a Path,
    file: File,
    size: u64,
    chunk: u64,
    plan: Vec<Planned>,
}

impl<'a> Source<'a> {
    fn open(path: &'a Path, chunk_size: usize) -> Result<Self> {
        let file = File::open(path).at(path)?;
        let size = file.metadata().at(path)?.len();
        let chunk = chunk_size.clamp(64, super::MAX_CHUNK_BYTES as usize) as u64;
        let plan = plan(path, &file, size, chunk)?;
        Ok(Source {
            path,
            file,
            size,
            chunk,
            plan,
        })
    }

    fn read(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read_exact_at(buf, start).at(self.path)
    }
}

/// Chunks covering `[0, size)`: header, tensors, and any gaps between them.
fn plan(src: &Path, file: &File, size: u64, chunk: u64) -> Result<Vec<Planned>> {
    let layout = safetensors::parse(size, |n| {
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, 0).map(|_| buf)
    })
    .map_err(|reason| Error::NotSafetensors {
        path: src.to_path_buf(),
        reason,
    })?;
    let mut plan = Vec::new();
    let bytes = Element::BYTES;
    push_region(&mut plan, (0, layout.header_end), bytes, None, chunk);
    let mut at = layout.header_end;
    for (k, t) in layout.tensors.iter().enumerate() {
        push_region(&mut plan, (at, t.start), bytes, None, chunk);
        let element = Element::of_dtype(&t.dtype);
        push_region(&mut plan, (t.start, t.end), element, Some(k), chunk);
        at = at.max(t.end);
    }
    push_region(&mut plan, (at, size), bytes, None, chunk);
    Ok(plan)
}

/// Packs the safetensors file `src` into the archive `dst`, written under a
/// temporary name and renamed into place. `progress` receives source bytes done.
pub fn pack_file(
    src: &Path,
    dst: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let source = Source::open(src, opts.chunk_size)?;
    let mut synth = opts.synth.clone();
    if opts.learn_prior && synth.budget > 0 && synth.prior.is_uniform() {
        synth.prior = Arc::new(learn_prior(&sample(&source)?, CALIBRATION_BUDGET));
    }
    write_atomically(dst, |tmp| write_archive(&source, tmp, &synth, progress))
}

fn write_archive(
    source: &Source,
    tmp: &Path,
    synth: &SynthOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let (plan, chunk, size) = (&source.plan, source.chunk, source.size);
    let out_file = File::create(tmp).at(tmp)?;
    let mut out = BufWriter::with_capacity(1 << 20, &out_file);
    out.write_all(&HEAD_MAGIC).at(tmp)?;
    let mut sha = Sha256::new();
    let mut chunks = Vec::with_capacity(plan.len());
    let mut records_len = 0u64;
    let batch_bytes = chunk * 2 * rayon::current_num_threads() as u64;
    let mut buf = Vec::new();
    let mut done = 0u64;
    // Programs of the first chunk of each tensor still being packed.
    let mut templates: HashMap<usize, Vec<Template>> = HashMap::new();
    for batch in batches(plan, batch_bytes) {
        let start = batch[0].start;
        let end = batch[batch.len() - 1].start + batch[batch.len() - 1].len;
        buf.resize((end - start) as usize, 0);
        source.read(start, &mut buf)?;
        sha.update(&buf);
        let bytes = |p: &Planned| &buf[(p.start - start) as usize..][..p.len as usize];
        for (chunk, record) in pack_batch(batch, bytes, synth, &mut templates) {
            out.write_all(&record).at(tmp)?;
            records_len += record.len() as u64;
            chunks.push(chunk);
        }
        done += end - start;
        progress(done);
    }
    let index = Index {
        source_len: size,
        sha256: sha.finalize().into(),
        chunk_size: chunk,
        chunks,
    }
    .encode();
    let index_offset = HEAD_MAGIC.len() as u64 + records_len;
    out.write_all(&index).at(tmp)?;
    out.write_all(&encode_trailer(index_offset, &index))
        .at(tmp)?;
    out.flush().at(tmp)?;
    drop(out);
    out_file.sync_all().at(tmp)?;
    Ok(PackSummary {
        bytes_in: size,
        bytes_out: index_offset + index.len() as u64 + super::TRAILER_LEN as u64,
    })
}

/// The index entries and records of a batch's chunks, in order, packed in
/// parallel: first the chunks searched afresh, whose programs become their
/// tensors' `templates`, then the others, re-fit from those. Templates come
/// only from first chunks, so the output depends neither on the batches nor
/// on the thread count.
fn pack_batch<'a>(
    batch: &'a [Planned],
    bytes: impl Fn(&'a Planned) -> &'a [u8] + Sync,
    synth: &SynthOptions,
    templates: &mut HashMap<usize, Vec<Template>>,
) -> Vec<(ChunkEntry, Vec<u8>)> {
    templates.retain(|&t, _| batch.iter().any(|p| p.tensor == Some(t)));
    let mut packed = vec![None; batch.len()];
    for searched in [true, false] {
        let done: Vec<_> = (0..batch.len())
            .into_par_iter()
            .filter(|&k| batch[k].searched() == searched)
            .map(|k| {
                let p = &batch[k];
                let like = (p.tensor.filter(|_| !searched)).and_then(|t| templates.get(&t));
                (
                    k,
                    pack_chunk(bytes(p), p, synth, like.map_or(&[], Vec::as_slice)),
                )
            })
            .collect();
        for (k, (entry, record, lanes)) in done {
            if let Some(t) = batch[k].tensor.filter(|_| searched) {
                templates.insert(t, lanes);
            }
            packed[k] = Some((entry, record));
        }
    }
    packed
        .into_iter()
        .map(|r| r.expect("every chunk packed"))
        .collect()
}

/// Consecutive runs of planned chunks of about `target` source bytes each.
fn batches(plan: &[Planned], target: u64) -> impl Iterator<Item = &[Planned]> {
    let mut rest = plan;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let n = rest
            .iter()
            .take_while(|p| {
                let take = bytes < target;
                bytes += p.len;
                take
            })
            .count();
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Some(head)
    })
}

/// The index entry and record of one chunk, and its programs as templates.
fn pack_chunk(
    bytes: &[u8],
    p: &Planned,
    synth: &SynthOptions,
    like: &[Template],
) -> (ChunkEntry, Vec<u8>, Vec<Template>) {
    let layout: Layout = p.element.layout;
    let hint = Hint {
        float: p.element.float,
    };
    let (record, templates) = encode_record_like(bytes, layout, hint, synth, like);
    let chunk = ChunkEntry {
        layout,
        src_len: p.len,
        rec_len: record.len() as u64,
        checksum: checksum(bytes),
    };
    (chunk, record, templates)
}

/// A deterministic sample of the file's tensor chunks, stratified by dtype and
/// size: every `SAMPLE_EVERY`-th chunk of each stratum (at least one, at most
/// `SAMPLE_PER_STRATUM`), `SAMPLE_TOTAL` in all, as lane streams.
fn sample(source: &Source) -> Result<Vec<(Vec<u32>, u32, Hint)>> {
    let mut strata: BTreeMap<(usize, u32, Option<usize>), Vec<&Planned>> = BTreeMap::new();
    for p in source.plan.iter().filter(|p| p.element.known) {
        let layout = p.element.layout;
        let float = p.element.float.map(|f| f as usize);
        let size = 64 - p.len.leading_zeros();
        strata
            .entry((layout.element_bytes(), size, float))
            .or_default()
            .push(p);
    }
    let mut picked: Vec<&Planned> = Vec::new();
    for members in strata.values() {
        let take = members.len().div_ceil(SAMPLE_EVERY).min(SAMPLE_PER_STRATUM);
        picked.extend((0..take).map(|i| members[i * members.len() / take]));
    }
    picked.truncate(SAMPLE_TOTAL);
    let mut samples = Vec::new();
    for p in picked {
        let mut bytes = vec![0u8; p.len as usize];
        source.read(p.start, &mut bytes)?;
        let hint = Hint {
            float: p.element.float,
        };
        let width = p.element.layout.lane_width();
        for lane in to_lanes(&bytes, p.element.layout) {
            samples.push((lane, width, hint));
        }
    }
    Ok(samples)
}

/// Learns a prior from a sample of the safetensors file `src` (for `--prior`).
pub fn calibrate(src: &Path, chunk_size: usize) -> Result<Prior> {
    let source = Source::open(src, chunk_size)?;
    Ok(learn_prior(&sample(&source)?, CALIBRATION_BUDGET))
}
