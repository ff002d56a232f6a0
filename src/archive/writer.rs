//! Packing a safetensors file into an archive.
//!
//! The source is planned into chunks (their widths and classes), a prior is
//! learned from a sample of them, and the chunks are packed in parallel and
//! their records written in source order (see `pipeline`), read in batches
//! of a chunk a thread, a few batches at a time: memory is bounded by
//! threads x chunk size and the bytes do not depend on the thread count.

#![forbid(unsafe_code)]

use super::base::{self, BaseSources, Bases};
use super::encode::{encode_record_like, to_lanes, Encoded};
use super::format::{
    checksum, encode_trailer, head, BaseSpan, ChunkEntry, Index, HEAD_MAGIC, MAX_CHUNK_BYTES,
};
use super::pipeline;
use crate::atomic::{stamp, start_writeback, write_atomically};
use crate::error::{Error, IoContext, Result};
use crate::safetensors::{self, Element, Layout, TensorInfo};
use crate::synth::{
    learn_prior, order0_bytes, plane_counts, Hint, Prior, SynthOptions, Template, DEFAULT_BUDGET,
    DEFAULT_REFIT_SLACK, MATCH_WORDS, SEARCH_WORDS,
};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Default source bytes per chunk; see `docs/FORMAT.md` for the measured trade-off.
pub const DEFAULT_CHUNK_BYTES: usize = 256 << 10;

#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Source bytes per chunk (rounded down to whole elements).
    pub chunk_size: usize,
    /// Let a tensor take chunks of twice or four times `chunk_size` (up to
    /// 1 MiB) where its bytes' statistics say they code smaller (see
    /// [`tensor_chunk`]), and a tensor coded against a base whole chunks of
    /// the base's (see [`against_base`]); false keeps every chunk at
    /// `chunk_size`.
    pub adapt_chunks: bool,
    pub synth: SynthOptions,
    /// Learn a prior from a sample of the file before packing (unless the search
    /// is root-only or `synth.prior` was already given).
    pub learn_prior: bool,
    /// Archives whose sources the new archive may reference (see
    /// [`BaseSources`]). The archive will need those it references to be
    /// read.
    pub bases: BaseSources,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions::at_level(DEFAULT_LEVEL)
    }
}

/// Effort levels, as zstd's and xz's: higher is slower, and larger than the
/// default only where a deeper search of a tensor's first chunk re-fits its
/// later chunks worse (see docs/PERFORMANCE.md).
pub const LEVELS: std::ops::RangeInclusive<u8> = 1..=9;
/// The level `brevis pack` uses unless told otherwise.
pub const DEFAULT_LEVEL: u8 = 5;

impl PackOptions {
    /// The options of effort `level` (clamped to [`LEVELS`]): the search
    /// budget per searched chunk, whether a prior is learned, and how closely
    /// a re-fit must match its template (levels 8 and 9 search every chunk);
    /// levels 1 and 2 offer no Partitions (see `synth::partition_rows`).
    pub fn at_level(level: u8) -> PackOptions {
        // (budget, learn a prior, re-fit slack)
        let (budget, learn_prior, refit_slack) = match level.clamp(1, 9) {
            1 => (0, false, Some(20)),
            2 => (1, false, Some(50)),
            3 => (2, true, Some(DEFAULT_REFIT_SLACK)),
            4 => (4, true, Some(DEFAULT_REFIT_SLACK)),
            5 => (DEFAULT_BUDGET, true, Some(DEFAULT_REFIT_SLACK)),
            6 => (16, true, Some(DEFAULT_REFIT_SLACK)),
            7 => (32, true, Some(DEFAULT_REFIT_SLACK)),
            8 => (64, true, None),
            _ => (256, true, None),
        };
        // From level 7 on the search looks at whole default-sized chunks:
        // a deeper search on a sample may find what re-fits the rest worse.
        let search_words = match level {
            ..=6 => SEARCH_WORDS,
            _ => MATCH_WORDS,
        };
        PackOptions {
            chunk_size: DEFAULT_CHUNK_BYTES,
            adapt_chunks: true,
            synth: SynthOptions {
                budget,
                refit_slack,
                search_words,
                partitions: level >= 3,
                ..SynthOptions::default()
            },
            learn_prior,
            bases: BaseSources::default(),
        }
    }
}

/// Chunks in a batch at most: a file of many tiny tensors would otherwise
/// hold the records of all of them at once.
const BATCH_CHUNKS_MAX: usize = 4096;
/// Source bytes per thread in a batch beyond which it takes fewer chunks
/// (one at least): a few batches are held at once, so large chunks would
/// otherwise multiply memory.
const BATCH_BYTES_PER_THREAD: u64 = 4 << 20;

/// Chunks searched to learn a prior: at most this many per stratum, and in all.
/// More chunks in all learn no better prior and take longer; fewer learn a
/// worse one for some files.
const SAMPLE_PER_STRATUM: usize = 2;
const SAMPLE_TOTAL: usize = 8;
/// One sampled chunk per this many chunks of a stratum.
const SAMPLE_EVERY: usize = 48;
/// Words of each sampled lane the prior is learned from: the search's cost
/// grows with them, the prior (which productions help) hardly does: a prior
/// from this many words packs as one from whole chunks does.
const SAMPLE_WORDS: usize = 1 << 16;
/// Expansions per sampled chunk when learning a prior. A sampled search
/// spends about as long on its budget as on its root's expansion, so a
/// smaller budget saves little time; a larger one learns no better prior,
/// and a smaller one a worse one.
pub const CALIBRATION_BUDGET: usize = 32;

/// Sizes of a finished pack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackSummary {
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A span of the source to become one chunk.
#[derive(Clone, Copy, Debug)]
pub(super) struct Planned {
    pub(super) start: u64,
    pub(super) len: u64,
    element: Element,
    /// The class of the tensor it is a piece of, if any: tensors of one dtype
    /// and shape, whose chunks re-fit programs searched on others (see
    /// `pipeline`).
    pub(super) class: Option<usize>,
    /// Whether its tensor is the first of its class.
    leads: bool,
    /// Its place among the chunks of its region, and their number.
    nth: u64,
    count: u64,
    /// Which base has its tensor, if one has, and where the same bytes of
    /// the tensor lie in that base's source.
    base: Option<(u32, u64)>,
    /// The length of the groups of its elements that lie in one row of its
    /// tensor (see [`Hint::rows`]).
    rows: Option<usize>,
}

impl Planned {
    /// Whether the chunk is searched afresh rather than re-fit from another
    /// chunk of its class: chunks outside tensors, and the representative of
    /// the tensor that leads its class.
    pub(super) fn searched(&self) -> bool {
        self.class.is_none() || (self.leads && self.nth == self.representative())
    }

    /// The chunk of its region whose program is the first template of a class:
    /// the middle one, as the first often differs from the rest (an
    /// embedding's first rows are its special tokens).
    fn representative(&self) -> u64 {
        (self.count - 1) / 2
    }
}

/// A region's last chunk takes in a remainder shorter than 1/this of a
/// chunk, rather than leave it a chunk of its own that pays for its code
/// tables again: a tensor a little longer than a chunk would otherwise pay
/// for two chunks' tables for little more than one chunk's bytes.
const TAIL_SHARE: u64 = 2;

/// The pieces `(offset, length)` that `len` bytes are cut into at `step`:
/// all `step` long but the last, which takes in a remainder shorter than
/// 1/[`TAIL_SHARE`] of a step (within [`MAX_CHUNK_BYTES`]).
pub(super) fn pieces(len: u64, step: u64) -> impl Iterator<Item = (u64, u64)> {
    let tail = len % step;
    let mut count = len.div_ceil(step);
    if count >= 2 && tail > 0 && tail * TAIL_SHARE < step && step + tail <= MAX_CHUNK_BYTES {
        count -= 1;
    }
    (0..count).map(move |nth| {
        let at = nth * step;
        (at, if nth + 1 == count { len - at } else { step })
    })
}

/// A tensor's class, whether it leads it, where a base has it, and its row
/// length in elements (see [`push_region`]).
type Region = (Option<usize>, bool, Option<(u32, u64)>, Option<u64>);

/// Splits `[start, end)` into chunks of whole elements (see [`pieces`]).
fn push_region(
    plan: &mut Vec<Planned>,
    (start, end): (u64, u64),
    element: Element,
    (class, leads, base, row): Region,
    chunk: u64,
) {
    let e = element.layout.element_bytes() as u64;
    let step = (chunk / e).max(1) * e;
    let cut: Vec<_> = pieces(end.saturating_sub(start), step).collect();
    let count = cut.len() as u64;
    plan.extend((0..count).zip(cut).map(|(nth, (at, len))| Planned {
        start: start + at,
        len,
        element,
        class,
        leads,
        nth,
        count,
        base: base.map(|(which, base_at)| (which, base_at + at)),
        rows: row.map(|row| gcd(row, at / e) as usize),
    }));
}

/// The greatest common divisor (`a` for `b = 0`).
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// An open source file, the chunks planned for it and its bases.
pub(super) struct Source<'a> {
    path: &'a Path,
    file: File,
    size: u64,
    chunk: u64,
    pub(super) plan: Vec<Planned>,
    bases: Bases,
}

impl<'a> Source<'a> {
    fn open(path: &'a Path, chunking: Chunking, bases: Bases) -> Result<Self> {
        let file = crate::input::open_regular(path).at(path)?;
        let size = file.metadata().at(path)?.len();
        let mut bases = bases;
        let plan = plan(path, &file, size, chunking, &mut bases)?;
        Ok(Source {
            path,
            file,
            size,
            chunk: chunking.chunk,
            plan,
            bases,
        })
    }

    fn read(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read_exact_at(buf, start).at(self.path)
    }

    /// Reads the bytes of the planned chunks `batch` (contiguous) into
    /// `buf`, and their bases' bytes at the same places into `base_buf`.
    fn read_run(&self, batch: &[Planned], buf: &mut Vec<u8>, base_buf: &mut Vec<u8>) -> Result<()> {
        let start = batch[0].start;
        let end = batch[batch.len() - 1].start + batch[batch.len() - 1].len;
        buf.resize((end - start) as usize, 0);
        self.read(start, buf)?;
        if batch.iter().any(|p| p.base.is_some()) {
            base_buf.resize(buf.len(), 0);
        }
        for p in batch {
            if let Some((which, at)) = p.base {
                let out = &mut base_buf[(p.start - start) as usize..][..p.len as usize];
                self.bases.read(which, at, out)?;
            }
        }
        Ok(())
    }
}

/// How a file is cut into chunks.
#[derive(Clone, Copy)]
struct Chunking {
    /// Source bytes per chunk.
    chunk: u64,
    /// See [`PackOptions::adapt_chunks`].
    adapt: bool,
    /// Whether a matrix's rows may be coded in classes, each with its own
    /// tables (see `SynthOptions::partitions`).
    row_classes: bool,
}

impl Chunking {
    /// The chunks `opts` ask for.
    fn of(opts: &PackOptions) -> Chunking {
        Chunking {
            adapt: opts.adapt_chunks,
            row_classes: opts.synth.partitions,
            ..Chunking::fixed(opts.chunk_size)
        }
    }

    /// Chunks of `chunk_size` bytes (clamped to what the format allows),
    /// never widened.
    fn fixed(chunk_size: usize) -> Chunking {
        Chunking {
            chunk: chunk_size.clamp(64, super::MAX_CHUNK_BYTES as usize) as u64,
            adapt: false,
            row_classes: false,
        }
    }
}

/// Chunks covering `[0, size)`: header, tensors, and any gaps between them;
/// with `adapt`, a tensor without a base may take wider chunks (see
/// [`tensor_chunk`]), and one with a base its base's chunks (see
/// [`against_base`]).
fn plan(
    src: &Path,
    file: &File,
    size: u64,
    chunking: Chunking,
    bases: &mut Bases,
) -> Result<Vec<Planned>> {
    let Chunking { chunk, adapt, .. } = chunking;
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
    let none = (None, false, None, None);
    push_region(&mut plan, (0, layout.header_end), bytes, none, chunk);
    // Each tensor's bytes, and where a base has them.
    let read_of = |t: &TensorInfo| {
        let start = t.start;
        move |at: u64, out: &mut [u8]| file.read_exact_at(out, start + at).at(src)
    };
    let found: Vec<_> = (layout.tensors.iter())
        .map(|t| {
            bases.offset_of(t, |step| {
                base::fingerprint(t.end - t.start, step, read_of(t))
            })
        })
        .collect::<Result<_>>()?;
    let elements: Vec<Element> = (layout.tensors.iter())
        .map(|t| Element::of_dtype(&t.dtype))
        .collect();
    // The chunk size of each tensor without a base, estimated in parallel,
    // each tensor a task of its own (their sizes differ a thousandfold).
    let each = (layout.tensors.par_iter().zip(&found).zip(&elements)).with_max_len(1);
    let steps: Vec<u64> = each
        .map(|((t, base), &element)| match (adapt, base) {
            (true, None) => {
                let tables = tables_per_plane(&t.shape, chunking.row_classes);
                tensor_chunk(t.end - t.start, (element, tables), chunk, read_of(t))
            }
            (true, Some((which, at))) => Ok(bases
                .chunk_at(*which, *at)
                .map_or(chunk, |step| against_base(step, chunk))),
            (false, _) => Ok(chunk),
        })
        .collect::<Result<_>>()?;
    let mut at = layout.header_end;
    let mut classes = HashMap::new();
    let tensors = layout.tensors.iter().zip(found).zip(elements).zip(steps);
    for (((t, base), element), step) in tensors {
        push_region(&mut plan, (at, t.start), bytes, none, chunk);
        // Chunks coded against a base are a class apart: their residuals against
        // the base look nothing like the values.
        let next = classes.len();
        let key = (&t.dtype, &t.shape, base.is_some());
        let class = *classes.entry(key).or_insert(next);
        // Rows of at least two elements (a matrix's last dimension).
        let row = (t.shape.len() >= 2).then(|| t.shape[t.shape.len() - 1]);
        let group = (Some(class), class == next, base, row.filter(|&r| r >= 2));
        push_region(&mut plan, (t.start, t.end), element, group, step);
        at = at.max(t.end);
    }
    push_region(&mut plan, (at, size), bytes, none, chunk);
    Ok(plan)
}

/// The chunk length of a tensor coded against a base whose chunks there
/// are `base_step` long: the base's, or where the base's chunks are shorter
/// than `chunk`, as many of them as fit it. Either way each chunk covers
/// whole base chunks, so a reader decodes each base chunk once; a chunk
/// inside a wider base chunk would make it decode that one again whenever
/// its cache let it go between them.
fn against_base(base_step: u64, chunk: u64) -> u64 {
    if base_step >= chunk {
        base_step
    } else {
        chunk / base_step * base_step
    }
}

/// How many times the chunk size a tensor's chunks may be.
const WIDER_CHUNKS: [u64; 3] = [1, 2, 4];
/// Chunks of the widest size a tensor's choice is estimated on (its first
/// bytes).
const WIDTH_SAMPLE_CHUNKS: u64 = 4;
/// Chunks are not widened beyond this: wider ones pay for their tables in
/// a smaller share of their bytes, and it bounds the sample (4 MiB a tensor).
const WIDEST_CHUNK: u64 = 1 << 20;
/// Estimated bytes of a literal's code table per symbol, and of its other
/// fixed parts (rANS states, lengths), in [`tensor_chunk`]'s estimate: about
/// what byte planes' rANS tables take.
const TABLE_BYTES_PER_SYMBOL: usize = 1;
const LITERAL_FIXED_BYTES: usize = 150;
/// Tables a matrix's byte plane is estimated to take per chunk where its rows
/// may be coded in classes, each class with tables of its own: wide chunks
/// of such matrices take about as many classes as this, and counting fewer
/// tables underrates what narrow chunks pay for theirs, keeping chunks
/// narrow that code smaller wide.
const ROW_CLASS_TABLES: usize = 8;

/// Tables each byte plane of a tensor of `shape` takes per chunk in
/// [`tensor_chunk`]'s estimate.
fn tables_per_plane(shape: &[u64], row_classes: bool) -> usize {
    if row_classes && shape.len() >= 2 {
        ROW_CLASS_TABLES
    } else {
        1
    }
}

/// The chunk size of a tensor of `len` bytes of `element`s, read by `read`:
/// of `chunk` and its multiples in [`WIDER_CHUNKS`], the one that codes its
/// first bytes smallest by an estimate (each chunk's byte planes coded
/// order-0, each with `tables` tables, or stored raw). Small chunks follow the
/// statistics where they change along the tensor; wide ones pay for their
/// tables fewer times. A tensor of a few chunks keeps `chunk`: wider chunks
/// there save little and make its cold reads through the mount slower.
fn tensor_chunk(
    len: u64,
    (element, tables): (Element, usize),
    chunk: u64,
    read: impl Fn(u64, &mut [u8]) -> Result<()>,
) -> Result<u64> {
    let e = element.layout.element_bytes() as u64;
    let narrow = (chunk / e).max(1) * e;
    let widest = narrow * WIDER_CHUNKS[WIDER_CHUNKS.len() - 1];
    if len < 2 * widest || widest > WIDEST_CHUNK {
        return Ok(chunk);
    }
    let mut sample = vec![0u8; (WIDTH_SAMPLE_CHUNKS * widest).min(len) as usize];
    read(0, &mut sample)?;
    // Each narrow chunk's planes are counted once; a wider chunk's counts
    // are the sum of its narrow ones'.
    let stride = e as usize;
    let pieces: Vec<(Vec<[u32; 256]>, usize)> = (sample.chunks(narrow as usize))
        .map(|piece| (plane_counts(piece, stride), piece.len() / stride))
        .collect();
    let cost = |m: u64| -> usize {
        (pieces.chunks(m as usize))
            .map(|group| {
                let mut counts = vec![[0u32; 256]; stride];
                for (piece, _) in group {
                    for (sum, plane) in counts.iter_mut().zip(piece) {
                        sum.iter_mut().zip(plane).for_each(|(s, c)| *s += c);
                    }
                }
                let n = group.iter().map(|(_, n)| n).sum();
                counts
                    .iter()
                    .map(|plane| estimated_plane_cost(plane, n, tables))
                    .sum::<usize>()
            })
            .sum()
    };
    let best = WIDER_CHUNKS.iter().min_by_key(|&&m| cost(m));
    Ok(best.map_or(chunk, |m| narrow * m))
}

/// A byte plane of `n` bytes with these counts coded order-0 with `tables`
/// tables, or raw where that is smaller: an estimate of its literal's size.
fn estimated_plane_cost(counts: &[u32; 256], n: usize, tables: usize) -> usize {
    let symbols = counts.iter().filter(|&&c| c > 0).count();
    let table = tables * (TABLE_BYTES_PER_SYMBOL * symbols + LITERAL_FIXED_BYTES);
    (order0_bytes(std::slice::from_ref(counts), n) + table).min(n)
}

/// Packs the safetensors file `src` into the archive `dst`, written under a
/// temporary name and renamed into place. `progress` receives source bytes done.
pub fn pack_file(
    src: &Path,
    dst: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let bases = Bases::open(&opts.bases, dst)?;
    let source = Source::open(src, Chunking::of(opts), bases)?;
    let original = source.file.metadata().at(src)?;
    write_atomically(dst, |tmp| {
        let summary = write_archive(&source, tmp, opts, progress)?;
        stamp(tmp, &original)?;
        Ok(summary)
    })
}

/// The search options of `opts`, with a prior learned from `source`'s
/// sampled chunks where they ask for one.
fn synth_options(source: &Source, opts: &PackOptions) -> Result<SynthOptions> {
    let mut synth = opts.synth.clone();
    if opts.learn_prior && synth.budget > 0 && synth.prior.is_uniform() {
        synth.prior = Arc::new(learned_prior(source)?);
    }
    Ok(synth)
}

/// The prior learned from `source`'s sampled chunks.
fn learned_prior(source: &Source) -> Result<Prior> {
    Ok(learn_prior(&sample(source)?, CALIBRATION_BUDGET))
}

fn write_archive(
    source: &Source,
    tmp: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let (plan, chunk, size) = (&source.plan, source.chunk, source.size);
    let out_file = File::create(tmp).at(tmp)?;
    let mut out = Output {
        writer: BufWriter::with_capacity(1 << 20, &out_file),
        path: tmp,
        chunks: Vec::with_capacity(plan.len()),
        records_len: 0,
        version: 1,
    };
    out.writer.write_all(&HEAD_MAGIC).at(tmp)?;
    let mut sha = Sha256::new();
    let threads = rayon::current_num_threads() as u64;
    let ranges: Vec<_> = batches(plan, chunk, threads).collect();
    // The first batch is read while the prior is learned.
    let (synth, first) = rayon::join(
        || synth_options(source, opts),
        || ranges.first().map(|r| Run::read(source, &plan[r.clone()])),
    );
    let synth = &synth?;
    if let Some(first) = first.transpose()? {
        let output = (&mut out, &mut sha);
        pipeline::pack_all(source, &ranges, first, synth, output, progress)?;
    }
    let Output {
        mut writer,
        mut chunks,
        records_len,
        version,
        ..
    } = out;
    let bases = referenced_bases(&source.bases, &mut chunks);
    let index = Index {
        source_len: size,
        sha256: sha.finalize().into(),
        chunk_size: chunk,
        bases,
        chunks,
    };
    let version = index.version().max(version);
    let index = index.encode_as(version);
    let index_offset = HEAD_MAGIC.len() as u64 + records_len;
    writer.write_all(&index).at(tmp)?;
    writer
        .write_all(&encode_trailer(index_offset, &index))
        .at(tmp)?;
    writer.flush().at(tmp)?;
    drop(writer);
    // The head was written before the version was known.
    out_file.write_all_at(&head(version), 0).at(tmp)?;
    out_file.sync_all().at(tmp)?;
    Ok(PackSummary {
        bytes_in: size,
        bytes_out: index_offset + index.len() as u64 + super::TRAILER_LEN as u64,
    })
}

/// The bases `chunks` reference, in the order first referenced, with the
/// chunks' spans renumbered to match: an archive names only the bases it
/// needs.
fn referenced_bases(bases: &Bases, chunks: &mut [ChunkEntry]) -> Vec<super::BaseEntry> {
    let mut order: Vec<u32> = Vec::new();
    for span in chunks.iter_mut().filter_map(|c| c.base.as_mut()) {
        let k = match order.iter().position(|&w| w == span.base) {
            Some(k) => k,
            None => {
                order.push(span.base);
                order.len() - 1
            }
        };
        span.base = k as u32;
    }
    order.iter().map(|&w| bases.entry(w).clone()).collect()
}

/// The archive being written: records so far and their index entries.
pub(super) struct Output<'a> {
    writer: BufWriter<&'a File>,
    path: &'a Path,
    chunks: Vec<ChunkEntry>,
    records_len: u64,
    /// The oldest format version that holds the records written so far.
    version: u8,
}

impl Output<'_> {
    pub(super) fn write(&mut self, records: Vec<(ChunkEntry, Vec<u8>)>) -> Result<()> {
        for (chunk, record) in records {
            if self.version < super::FORMAT_VERSION {
                let needs = super::record_version(&record, chunk.layout, chunk.src_len as usize);
                self.version = self.version.max(needs);
            }
            self.writer.write_all(&record).at(self.path)?;
            self.records_len += record.len() as u64;
            self.chunks.push(chunk);
        }
        // What is written syncs as packing goes on (see `start_writeback`).
        self.writer.flush().at(self.path)?;
        start_writeback(self.writer.get_ref());
        Ok(())
    }
}

/// The source bytes of a run of chunks, where they start in the source, and
/// their bases' bytes.
pub(super) struct Run {
    pub(super) bytes: Vec<u8>,
    start: u64,
    base: Vec<u8>,
}

impl Run {
    /// The bytes of the planned chunks `batch` (contiguous).
    pub(super) fn read(source: &Source, batch: &[Planned]) -> Result<Run> {
        let (mut bytes, mut base) = (Vec::new(), Vec::new());
        source.read_run(batch, &mut bytes, &mut base)?;
        let start = batch[0].start;
        Ok(Run { bytes, start, base })
    }

    /// The bytes of `p`, a chunk of the run.
    pub(super) fn piece(&self, p: &Planned) -> Piece<'_> {
        let at = (p.start - self.start) as usize..(p.start - self.start + p.len) as usize;
        Piece {
            bytes: &self.bytes[at.clone()],
            base: p.base.map(|offset| (&self.base[at], offset)),
        }
    }
}

/// A chunk's bytes, and the bytes of its base with which base it is and
/// their offset in its source.
#[derive(Clone, Copy)]
pub(super) struct Piece<'a> {
    bytes: &'a [u8],
    base: Option<(&'a [u8], (u32, u64))>,
}

/// The representative chunk (see [`Planned::representative`]) of the tensor
/// that leads its class, starts in the batch `range` of the plan and ends
/// after it, if it lies beyond the batch, and its bytes. (Tensors are
/// contiguous: only the batch's last one can reach beyond it.)
pub(super) fn representative_ahead(
    source: &Source,
    range: Range<usize>,
) -> Result<Option<(usize, Run)>> {
    let plan = &source.plan;
    let last = plan[range.end - 1];
    let started_here = last.nth as usize <= range.end - 1 - range.start;
    let r = range.end - 1 - last.nth as usize + last.representative() as usize;
    if last.class.is_none() || !last.leads || !started_here || r < range.end {
        return Ok(None);
    }
    Ok(Some((r, Run::read(source, &plan[r..r + 1])?)))
}

/// A class's templates, in the order they are tried: its representative's
/// programs, then those of the chunks searched since, newest first (each one
/// template per lane).
pub(super) type Templates = Vec<Vec<Template>>;

/// Templates a class keeps: a region of data unlike the representative's
/// gets its own without pushing out the representative's.
pub(super) const MAX_TEMPLATES: usize = 4;

/// Consecutive runs of planned chunks, as ranges of the plan, for `threads`
/// threads, the units the source is read and the archive written in (see
/// `pipeline`): a chunk a thread, and at least the bytes of as many chunks
/// of `chunk` bytes (many small tensors go together), within
/// `BATCH_BYTES_PER_THREAD` a thread (one chunk at least) and
/// `BATCH_CHUNKS_MAX` chunks.
///
/// Counting chunks keeps a tensor of wide chunks (see [`tensor_chunk`])
/// from taking fewer chunks a thread than others. Small batches are read
/// soon before they are packed, while their bytes are in the CPU's caches;
/// batches of several chunks a thread packed slower, with one thread too.
fn batches(plan: &[Planned], chunk: u64, threads: u64) -> impl Iterator<Item = Range<usize>> + '_ {
    let least_chunks = threads as usize;
    let least_bytes = chunk * threads;
    let most_bytes = BATCH_BYTES_PER_THREAD.max(chunk) * threads;
    let mut at = 0;
    std::iter::from_fn(move || {
        if at == plan.len() {
            return None;
        }
        let mut bytes = 0;
        let n = plan[at..]
            .iter()
            .take(BATCH_CHUNKS_MAX)
            .enumerate()
            .take_while(|(taken, p)| {
                let wanted = bytes < least_bytes || *taken < least_chunks;
                let take = wanted && bytes < most_bytes;
                bytes += p.len;
                take
            })
            .count();
        at += n;
        Some(at - n..at)
    })
}

/// The index entry and record of one chunk, re-fit from `like` or searched
/// (see [`encode_record_like`]). A chunk with a base is coded as its residual
/// against the base (see [`base::residual`]), as its own bytes, or both ways
/// keeping the smaller (see [`base::candidates`]); `like` holds templates of
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
    let Some((base_bytes, (which, offset))) = piece.base else {
        let encoded = encode_record_like(piece.bytes, layout, hint, synth, like, may_search)?;
        return Some(entry(encoded, None));
    };
    let residual = base::residual(piece.bytes, base_bytes, layout);
    let (try_residual, try_plain) = base::candidates(piece.bytes, &residual, layout);
    let span = BaseSpan {
        base: which,
        offset,
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

/// A lane of a sampled chunk: its words, their width and hint.
type Sampled = (Arc<[u32]>, u32, Hint);

/// A deterministic sample of the file's tensor chunks, stratified by dtype and
/// size: every `SAMPLE_EVERY`-th chunk of each stratum (at least one, at most
/// `SAMPLE_PER_STRATUM`), `SAMPLE_TOTAL` in all, as lane streams.
fn sample(source: &Source) -> Result<Vec<Sampled>> {
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
    // Each sampled chunk read and split a task of its own (they are the
    // prior's wait before packing starts), in the order picked.
    let per_chunk: Vec<Vec<_>> = (picked.par_iter().with_max_len(1))
        .map(|p| sample_chunk(source, p))
        .collect::<Result<_>>()?;
    Ok(per_chunk.into_iter().flatten().collect())
}

/// The lanes of the planned chunk `p` as the prior samples them: their first
/// `SAMPLE_WORDS` words, so only that many elements of it are read (every
/// lane holds one word per element).
fn sample_chunk(source: &Source, p: &Planned) -> Result<Vec<Sampled>> {
    let layout = p.element.layout;
    let p = Planned {
        len: p.len.min((SAMPLE_WORDS * layout.element_bytes()) as u64),
        ..*p
    };
    // A chunk with a base is sampled as what it will be coded as most
    // often: its residual against the base.
    let run = Run::read(source, &[p])?;
    let bytes = match p.base {
        Some(_) => base::residual(&run.bytes, &run.base, layout).bytes,
        None => run.bytes,
    };
    let hint = Hint {
        float: p.element.float,
        rows: None,
    };
    let width = layout.lane_width();
    Ok((to_lanes(&bytes, layout).into_iter())
        .map(|lane| (lane, width, hint))
        .collect())
}

/// Learns a prior from a sample of the safetensors file `src` (for `--prior`).
pub fn calibrate(src: &Path, chunk_size: usize) -> Result<Prior> {
    let bases = Bases::open(&BaseSources::default(), src)?;
    let source = Source::open(src, Chunking::fixed(chunk_size), bases)?;
    learned_prior(&source)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` BF16 words whose exponent is drawn from `exponents` (a noisy
    /// weight-like spread), the rest of the bits random.
    fn bf16_words(n: usize, exponents: &[u16], seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .flat_map(|_| {
                let r = next();
                // Later exponents of the list are rarer.
                let k = (r as u32).leading_zeros() as usize % exponents.len();
                let word = (r >> 32) as u16 & 0x807f | exponents[k] << 7;
                word.to_le_bytes()
            })
            .collect()
    }

    fn chunk_of(bytes: &[u8]) -> u64 {
        chunk_with_tables(bytes, 1)
    }

    fn chunk_with_tables(bytes: &[u8], tables: usize) -> u64 {
        let read = |at: u64, out: &mut [u8]| {
            out.copy_from_slice(&bytes[at as usize..][..out.len()]);
            Ok(())
        };
        let element = Element::of_dtype("BF16");
        tensor_chunk(bytes.len() as u64, (element, tables), 256 << 10, read).unwrap()
    }

    /// Statistics that change a little along the tensor: one table per plane
    /// pays for following them, a table per class of rows does not.
    #[test]
    fn matrices_whose_rows_take_classes_count_their_tables() {
        let pieces: Vec<u8> = (0..16u16)
            .flat_map(|k| {
                // The two commonest exponents swap places every 256 KiB.
                let (a, b) = if k % 2 == 0 { (110, 111) } else { (111, 110) };
                bf16_words(128 << 10, &[a, b, 112, 113, 114, 115], k as u64)
            })
            .collect();
        assert_eq!(chunk_with_tables(&pieces, 1), 256 << 10);
        assert_eq!(chunk_with_tables(&pieces, ROW_CLASS_TABLES), 1 << 20);
        assert_eq!(tables_per_plane(&[384, 1536], true), ROW_CLASS_TABLES);
        assert_eq!(tables_per_plane(&[384, 1536], false), 1);
        assert_eq!(tables_per_plane(&[1536], true), 1);
    }

    #[test]
    fn tensors_of_steady_statistics_take_wider_chunks() {
        let steady = bf16_words(4 << 20, &[120, 121, 119, 122, 118, 123], 7);
        assert_eq!(chunk_of(&steady), 1 << 20);
    }

    #[test]
    fn tensors_whose_statistics_change_keep_the_chunk_size() {
        // Every 256 KiB, another range of exponents: wider chunks would code
        // two ranges with one table.
        let pieces: Vec<u8> = (0..16u16)
            .flat_map(|k| {
                let base = 100 + 12 * (k % 2);
                bf16_words(128 << 10, &[base, base + 1, base + 2, base + 3], k as u64)
            })
            .collect();
        assert_eq!(chunk_of(&pieces), 256 << 10);
    }

    #[test]
    fn pieces_tile_the_region_and_take_in_short_tails() {
        let cut = |len, step| pieces(len, step).collect::<Vec<_>>();
        assert_eq!(cut(9, 4), [(0, 4), (4, 5)]);
        // Half a chunk stays a chunk of its own.
        assert_eq!(cut(10, 4), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(cut(8, 4), [(0, 4), (4, 4)]);
        assert_eq!(cut(3, 4), [(0, 3)]);
        assert_eq!(cut(0, 4), []);
        // Never beyond the format's longest chunk.
        let max = MAX_CHUNK_BYTES;
        assert_eq!(cut(max + 1, max), [(0, max), (max, 1)]);
        for len in 0..200 {
            for step in 1..40 {
                let p = cut(len, step);
                let mut at = 0;
                for &(start, n) in &p {
                    assert_eq!(start, at);
                    assert!(n > 0 && n < step + step.div_ceil(2));
                    at += n;
                }
                assert_eq!(at, len);
            }
        }
    }

    #[test]
    fn tensors_of_a_few_chunks_keep_the_chunk_size() {
        let small = bf16_words(512 << 10, &[120, 121], 3);
        assert_eq!(chunk_of(&small), 256 << 10);
    }

    /// A plan of chunks of these lengths, one after another.
    fn plan_of(lens: &[u64]) -> Vec<Planned> {
        let starts = lens.iter().scan(0, |at, len| {
            *at += len;
            Some(*at - len)
        });
        (starts.zip(lens))
            .map(|(start, &len)| Planned {
                start,
                len,
                element: Element::BYTES,
                class: None,
                leads: false,
                nth: 0,
                count: 1,
                base: None,
                rows: None,
            })
            .collect()
    }

    fn batch_lens(lens: &[u64], chunk: u64, threads: u64) -> Vec<usize> {
        let plan = plan_of(lens);
        batches(&plan, chunk, threads).map(|r| r.len()).collect()
    }

    /// A safetensors file of one U8 tensor of `n` patterned bytes.
    fn one_tensor_file(n: usize) -> Vec<u8> {
        let header = format!(r#"{{"a":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header.as_bytes());
        file.extend((0..n).map(|i| (i * 7 % 251) as u8));
        file
    }

    /// Chunks of 4 KiB, so that a small file makes many batches.
    fn small_chunks() -> PackOptions {
        PackOptions {
            chunk_size: 4096,
            adapt_chunks: false,
            ..PackOptions::default()
        }
    }

    /// A source cut short while it is packed fails the packing with its
    /// path, on one thread and on two, whichever task's read meets the end
    /// (a batch's, or a representative's read ahead), and nothing waits for
    /// the chunks that could not be read.
    #[test]
    fn a_source_cut_short_while_packed_fails_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let n = 64 << 10;
        let file = one_tensor_file(n);
        let src = dir.path().join("m.safetensors");
        let tmp = dir.path().join("out.brv");
        let opts = small_chunks();
        for (threads, kept) in [(1, 3), (1, 10), (2, 3), (2, 10), (2, 15)] {
            std::fs::write(&src, &file).unwrap();
            let bases = Bases::open(&opts.bases, &tmp).unwrap();
            let source = Source::open(&src, Chunking::of(&opts), bases).unwrap();
            let cut = file.len() - n + kept * 4096;
            let f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
            f.set_len(cut as u64).unwrap();
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
            let packed = pool
                .unwrap()
                .install(|| write_archive(&source, &tmp, &opts, &|_| {}));
            let err = packed.expect_err("a source cut short").to_string();
            assert!(err.contains("m.safetensors"), "{threads} threads: {err}");
        }
    }

    /// A write that fails mid-pack (a full disk: `/dev/full` takes no
    /// byte) ends packing with the output's path and the reason, on one
    /// thread and on several, while chunks are still being packed.
    #[test]
    fn a_failing_write_ends_packing_with_the_outputs_path() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let file = one_tensor_file(256 << 10);
        let src = dir.path().join("m.safetensors");
        std::fs::write(&src, &file).unwrap();
        let full = Path::new("/dev/full");
        let opts = small_chunks();
        for threads in [1, 2, 3] {
            let bases = Bases::open(&opts.bases, full).unwrap();
            let source = Source::open(&src, Chunking::of(&opts), bases).unwrap();
            let reported = AtomicU64::new(0);
            let progress = |at: u64| reported.store(at, Ordering::Relaxed);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
            let packed = pool
                .unwrap()
                .install(|| write_archive(&source, full, &opts, &progress));
            let err = packed.expect_err("a full disk").to_string();
            assert!(
                err.contains("/dev/full") && err.contains("No space left"),
                "{threads} threads: {err}"
            );
            // It stopped at the first batch it could not write.
            assert!(
                reported.load(Ordering::Relaxed) < file.len() as u64,
                "{threads} threads"
            );
        }
    }

    #[test]
    fn batches_take_chunks_for_every_thread_within_a_byte_bound() {
        const K: u64 = 1 << 10;
        // Default-sized chunks: one a thread.
        assert_eq!(batch_lens(&[256 * K; 5], 256 * K, 2), [2, 2, 1]);
        // Chunks four times as wide: still one a thread.
        assert_eq!(batch_lens(&[1024 * K; 5], 256 * K, 2), [2, 2, 1]);
        // On one thread, a chunk, or small ones up to a default chunk's bytes.
        assert_eq!(batch_lens(&[1024 * K; 3], 256 * K, 1), [1, 1, 1]);
        assert_eq!(batch_lens(&[256 * K; 3], 256 * K, 1), [1, 1, 1]);
        assert_eq!(batch_lens(&[64 * K; 10], 256 * K, 1), [4, 4, 2]);
        // Wider still: the bytes a thread bound them, or the chunk size
        // where it is larger.
        assert_eq!(batch_lens(&[4096 * K; 5], 256 * K, 2), [2, 2, 1]);
        assert_eq!(batch_lens(&[8192 * K; 3], 256 * K, 2), [1, 1, 1]);
        assert_eq!(batch_lens(&[16384 * K; 3], 16384 * K, 2), [2, 1]);
        // Small tensors go together up to the bytes of a default chunk a
        // thread.
        assert_eq!(batch_lens(&[64 * K; 20], 256 * K, 2), [8, 8, 4]);
        assert_eq!(batch_lens(&[16; 5000], 256 * K, 2), [BATCH_CHUNKS_MAX, 904]);
    }
}
