//! Serving reads of one open archive, apart from the FUSE binding: which chunks
//! a read needs, getting them verified from the shared cache (decoding the
//! missing ones in parallel), demoting the ones it went past, and queueing
//! read-ahead for a sequential reader. Unit-tested without a kernel.

#![forbid(unsafe_code)]

use super::cache::{Chunk, ChunkCache};
use super::served::Served;
use super::streams::Streams;
use crate::archive::Archive;
use crate::runs::runs;
use rayon::prelude::*;
use std::io::IoSlice;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open archive and where its readers are going.
pub struct ArchiveReader {
    /// Distinguishes this archive version's chunks in the shared cache.
    id: u64,
    archive: Arc<Archive>,
    streams: Streams,
    served: Arc<Served>,
}

/// The verified chunks that answer one read, and the part of each it wants.
pub struct ReadReply {
    pieces: Vec<(Chunk, Range<usize>)>,
}

impl ReadReply {
    /// The reply's bytes as slices of the chunks, in order, for one vectored write.
    pub fn slices(&self) -> Vec<IoSlice<'_>> {
        self.pieces
            .iter()
            .map(|(chunk, range)| IoSlice::new(&chunk[range.clone()]))
            .collect()
    }
}

impl ArchiveReader {
    /// A reader of `archive`, whose chunks are cached under `id` (its
    /// [`Archive::content_id`] in the mount: the chunks of archives with one
    /// id are interchangeable, and a changed archive has another).
    pub fn new(id: u64, archive: Arc<Archive>) -> ArchiveReader {
        ArchiveReader {
            id,
            served: Arc::new(Served::new(archive.chunks().len())),
            archive,
            streams: Streams::new(),
        }
    }

    /// Source bytes `[offset, offset + size)` clipped at the end of the file,
    /// from verified chunks only; `Err` when a chunk fails to decode or verify
    /// (logged with the archive and offset). A sequential reader gets the next
    /// `read_ahead` bytes queued for decoding.
    pub fn read(
        &self,
        cache: &Arc<ChunkCache>,
        offset: u64,
        size: u32,
        read_ahead: u64,
    ) -> Result<ReadReply, ()> {
        let archive = &self.archive;
        let end = archive.len().min(offset.saturating_add(size as u64));
        if offset >= end {
            return Ok(ReadReply { pieces: Vec::new() });
        }
        let span = archive.chunk_at(offset)..archive.chunk_at(end - 1) + 1;
        self.prefetch(cache, span.clone())?;
        let step = self
            .streams
            .record(offset, end, span.end, self.ahead_stop(end, read_ahead));
        // A stream's first reads, with nothing queued past them yet, queue
        // read-ahead after offering their own chunks to the pool and before
        // taking them: the pool takes this read's chunks first, as the
        // reader waits on them, then goes on to the read-ahead at once
        // rather than after this read's decodes and while its reply is
        // written.
        let queued_early = step.queued_until <= span.end;
        let done = self.offer_span(cache, span.clone());
        if queued_early {
            self.read_ahead(cache, step.wanted.clone());
        }
        let chunks = self.take_span(cache, span.clone(), &done)?;
        // Chunks whose every byte has now been sent are done with (the
        // kernel keeps the pages). Past the first reads they are demoted
        // before read-ahead is queued, so that its decodes take their buffers
        // (at once, or as spares once the reply has let go of them) rather
        // than fresh memory.
        for i in span.clone() {
            let range = archive.chunk_range(i);
            let sent = end.min(range.end) - offset.max(range.start);
            if self.served.add(i, sent, range.end - range.start) {
                cache.demote((self.id, i));
            }
        }
        if !queued_early {
            self.read_ahead(cache, step.wanted);
        }
        let pieces = span
            .zip(chunks)
            .map(|(i, chunk)| {
                let range = archive.chunk_range(i);
                let from = offset.max(range.start) - range.start;
                let to = end.min(range.end) - range.start;
                (chunk, from as usize..to as usize)
            })
            .collect();
        Ok(ReadReply { pieces })
    }

    /// Offers the chunks of `span` after its first to the decoding pool, in
    /// batches (see [`batches`]), whose free threads decode them while the
    /// reader takes them in order ([`ArchiveReader::take_span`], given the
    /// flag returned here). A batch is decoded from its last chunk back, so
    /// that the pool and the reader, going forward, meet once rather than
    /// taking turns chunk by chunk, each waiting for the other's decode.
    fn offer_span(&self, cache: &Arc<ChunkCache>, span: Range<usize>) -> Arc<AtomicBool> {
        let done = Arc::new(AtomicBool::new(false));
        for batch in batches(&self.archive, span.start + 1..span.end) {
            let (cache, archive, id, done) =
                (cache.clone(), self.archive.clone(), self.id, done.clone());
            rayon::spawn(move || {
                for i in batch.rev() {
                    // Reached after the read took it: nothing left to help with.
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    decode_ahead(&cache, id, &archive, i);
                }
            });
        }
        done
    }

    /// The chunks of `span`, in order. The calling thread takes each chunk
    /// itself (from the cache, waiting for a decode of it already under way,
    /// or decoding it), so a read never waits for the decoding pool to get to
    /// it behind other files' work; then it tells the pool's helpers offered
    /// the span (`done`) that there is nothing left to help with.
    fn take_span(
        &self,
        cache: &ChunkCache,
        span: Range<usize>,
        done: &AtomicBool,
    ) -> Result<Vec<Chunk>, ()> {
        let chunks = span
            .map(|i| load(cache, self.id, &self.archive, i))
            .collect();
        done.store(true, Ordering::Relaxed);
        chunks
    }

    /// The chunk before which read-ahead of `distance` bytes past `end`
    /// stops (none at the end of the file, or with `distance` 0).
    fn ahead_stop(&self, end: u64, distance: u64) -> usize {
        let len = self.archive.len();
        if distance == 0 || end >= len {
            return 0;
        }
        self.archive
            .chunk_at(end.saturating_add(distance).min(len - 1))
            + 1
    }

    /// Queues decoding of the `wanted` chunks (those of a sequential
    /// stream's read-ahead not queued yet), so that they are ready when the
    /// reader gets there.
    fn read_ahead(&self, cache: &Arc<ChunkCache>, wanted: Option<Range<usize>>) {
        let Some(wanted) = wanted.and_then(|w| self.missing(cache, w)) else {
            return;
        };
        let (cache, archive, id) = (cache.clone(), self.archive.clone(), self.id);
        let served = self.served.clone();
        rayon::spawn(move || {
            // Errors are left for the read that needs the chunk to report, and
            // so are chunks the cache has no room for now. Chunks decoded
            // meanwhile are skipped by `decode_ahead`, and so are chunks the
            // kernel has been sent by the time their turn comes (another
            // stream's, or this one's when the job ran late): their records
            // are not fetched either, as the cache of fetched bytes may have
            // let them go since.
            let fresh = |&i: &usize| !served.complete(i, archive.chunks()[i].src_len);
            let needed = |i: &usize| fresh(i) && !cache.contains((id, *i));
            for run in runs(wanted.clone().filter(needed)) {
                let _ = archive.prefetch(run);
            }
            (batches(&archive, wanted).into_par_iter().with_max_len(1)).for_each(|batch| {
                batch
                    .filter(fresh)
                    .for_each(|i| decode_ahead(&cache, id, &archive, i))
            });
        });
    }

    /// Asks the archive to fetch the records of the chunks of `span` that are
    /// not decoded yet in one go (a remote archive; nothing for a local one),
    /// rather than one request per chunk as they are decoded. If it cannot,
    /// the read fails now (logged), rather than wait for each chunk's fetch
    /// to fail again.
    fn prefetch(&self, cache: &ChunkCache, span: Range<usize>) -> Result<(), ()> {
        let Some(missing) = self.missing(cache, span) else {
            return Ok(());
        };
        self.archive
            .prefetch(missing)
            .map_err(|e| log::error!("{e}"))
    }

    /// The chunks of `span` from the first to the last that the cache does
    /// not hold, or None if it holds them all.
    fn missing(&self, cache: &ChunkCache, span: Range<usize>) -> Option<Range<usize>> {
        let absent = |&i: &usize| !cache.contains((self.id, i));
        let first = span.clone().find(absent)?;
        let last = span.rev().find(absent)?;
        Some(first..last + 1)
    }
}

/// Source bytes worth a job of the decoding pool: decoding them takes many
/// times what handing a job to a thread and waking it costs. A file
/// of small tensors (one chunk each) offered chunk by chunk spent more time
/// handing them over than decoding them.
const BATCH_BYTES: u64 = 128 << 10;

/// `chunks` cut into runs of at least [`BATCH_BYTES`] source bytes (the
/// last may be shorter), one job of the decoding pool each.
fn batches(archive: &Archive, chunks: Range<usize>) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (chunks.start, 0);
    for i in chunks.clone() {
        bytes += archive.chunks()[i].src_len;
        if bytes >= BATCH_BYTES {
            runs.push(start..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < chunks.end {
        runs.push(start..chunks.end);
    }
    runs
}

/// Chunk `i` of an archive, from the cache or decoded and verified into it.
fn load(cache: &ChunkCache, id: u64, archive: &Archive, i: usize) -> Result<Chunk, ()> {
    cached(cache, id, archive, i, 0).map_err(|message| log::error!("{message}"))
}

/// Decodes chunk `i` of an archive into the cache ahead of the read that will
/// want it, if the cache has room and no one has it (see
/// [`ChunkCache::decode_ahead`]).
fn decode_ahead(cache: &ChunkCache, id: u64, archive: &Archive, i: usize) {
    let len = archive.chunks()[i].src_len as usize;
    // This runs as a job of the decoding pool, where a panic (a decoder bug)
    // would abort the mount: it fails this chunk's decode instead, which the
    // read that needs the chunk then retries and reports.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.decode_ahead((id, i), len, |buffer| decode(cache, archive, i, 1, buffer))
    }));
    if decoded.is_err() {
        log::error!("{}: decoding chunk {i} panicked", archive.path().display());
    }
}

/// Chunk `i` of `archive` under `id`, from the cache or decoded into it,
/// for a read with `enclosing` decodes in progress that wait for it (see
/// [`ChunkCache::get_or_decode`]).
fn cached(
    cache: &ChunkCache,
    id: u64,
    archive: &Archive,
    i: usize,
    enclosing: usize,
) -> Result<Chunk, String> {
    let len = archive.chunks()[i].src_len as usize;
    cache.get_or_decode((id, i), len, enclosing, |buffer| {
        decode(cache, archive, i, enclosing + 1, buffer)
    })
}

/// Decodes chunk `i` of `archive` into `buffer`. The chunks of its bases it
/// needs come through the cache too (under their [`Archive::content_id`]), so
/// that a base shared by several presented files, or presented itself, is
/// decoded once; `enclosing` counts this decode and those around it.
fn decode(
    cache: &ChunkCache,
    archive: &Archive,
    i: usize,
    enclosing: usize,
    buffer: &mut [u8],
) -> Result<(), String> {
    let read_base = |base: &Archive, offset, len, use_bytes: &mut dyn FnMut(&[u8])| {
        read_base(
            cache,
            base,
            offset..offset + len as u64,
            use_bytes,
            enclosing,
        )
    };
    archive
        .decode_chunk_with(i, buffer, &read_base)
        .map_err(|e| e.to_string())
}

/// Lends `use_bytes` the `span` of `base`'s source bytes, from its chunks
/// in the cache, for a decode with `enclosing` decodes in progress (itself
/// included): in place where one chunk holds the span (as it does for a
/// tensor packed in whole chunks of its base's), else copied together.
fn read_base(
    cache: &ChunkCache,
    base: &Archive,
    span: Range<u64>,
    use_bytes: &mut dyn FnMut(&[u8]),
    enclosing: usize,
) -> Result<(), String> {
    let id = base.content_id();
    // Once used, a base chunk is demoted: the dependant's reader is going
    // past it too, so its buffer is the next base chunk's, instead of fresh
    // memory (a page fault per 4 KiB), and it is evicted before chunks
    // decoded ahead.
    let first = base.chunk_at(span.start);
    let range = base.chunk_range(first);
    if span.end <= range.end {
        let chunk = cached(cache, id, base, first, enclosing)?;
        use_bytes(&chunk[(span.start - range.start) as usize..(span.end - range.start) as usize]);
        cache.demote((id, first));
        return Ok(());
    }
    crate::scratch::with_bytes((span.end - span.start) as usize, |bytes| {
        let mut at = span.start;
        while at < span.end {
            let j = base.chunk_at(at);
            let range = base.chunk_range(j);
            let stop = range.end.min(span.end);
            let chunk = cached(cache, id, base, j, enclosing)?;
            let to = (at - span.start) as usize..(stop - span.start) as usize;
            bytes[to].copy_from_slice(
                &chunk[(at - range.start) as usize..(stop - range.start) as usize],
            );
            cache.demote((id, j));
            at = stop;
        }
        use_bytes(bytes);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{pack_file, PackOptions};
    use std::time::{Duration, Instant};

    /// A packed archive of `len` noisy bytes in one U8 tensor, cut in chunks
    /// of `chunk` bytes, and its original.
    fn archive(len: usize, chunk: usize) -> (Arc<Archive>, Vec<u8>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let header =
            format!("{{\"t\":{{\"dtype\":\"U8\",\"shape\":[{len}],\"data_offsets\":[0,{len}]}}}}");
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        bytes.extend((0..len).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 60) as u8
        }));
        let (src, brv) = (dir.path().join("m.safetensors"), dir.path().join("m.brv"));
        std::fs::write(&src, &bytes).unwrap();
        let opts = PackOptions {
            chunk_size: chunk,
            adapt_chunks: false,
            ..PackOptions::default()
        };
        pack_file(&src, &brv, &opts, &|_| {}).unwrap();
        (Arc::new(Archive::open(&brv).unwrap()), bytes, dir)
    }

    fn concat(reply: &ReadReply) -> Vec<u8> {
        reply.slices().iter().flat_map(|s| s.to_vec()).collect()
    }

    #[test]
    fn batches_cover_the_chunks_in_runs_of_at_least_the_batch_size() {
        let (archive, _, _dir) = archive(600_000, 20_000);
        let n = archive.chunks().len();
        let bytes =
            |r: &Range<usize>| -> u64 { r.clone().map(|i| archive.chunks()[i].src_len).sum() };
        for span in [0..n, 1..n, 3..7, 5..5] {
            let runs = batches(&archive, span.clone());
            let covered: Vec<usize> = runs.iter().flat_map(|r| r.clone()).collect();
            assert_eq!(covered, span.collect::<Vec<_>>());
            for (k, run) in runs.iter().enumerate() {
                assert!(!run.is_empty());
                // Each run stops at the first chunk that brings it to the size.
                assert!(bytes(&(run.start..run.end - 1)) < BATCH_BYTES);
                if k + 1 < runs.len() {
                    assert!(bytes(run) >= BATCH_BYTES);
                }
            }
        }
    }

    #[test]
    fn reads_anywhere_equal_the_original_and_stop_at_its_end() {
        let (archive, original, _dir) = archive(20_000, 4096);
        let cache = Arc::new(ChunkCache::new(1 << 20));
        let reader = ArchiveReader::new(1, archive);
        let n = original.len() as u64;
        for (offset, size) in [
            (0, 1),
            (0, 5000),
            (4000, 9000),
            (n - 10, 100),
            (n, 4),
            (n + 5, 4),
        ] {
            let reply = reader.read(&cache, offset, size, 0).unwrap();
            let from = (offset as usize).min(original.len());
            let to = (offset as usize + size as usize).min(original.len());
            assert_eq!(concat(&reply), &original[from..to], "{offset}+{size}");
        }
    }

    #[test]
    fn a_sequential_reader_gets_the_next_chunks_decoded_ahead() {
        let (archive, _, _dir) = archive(64 * 1024, 4096);
        let cache = Arc::new(ChunkCache::new(1 << 20));
        let reader = ArchiveReader::new(7, archive.clone());
        reader.read(&cache, 0, 4096, 16 * 1024).unwrap();
        // Read-ahead runs on the thread pool: wait a bounded time for it.
        let ahead = archive.chunk_at(4096 + 16 * 1024);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cache.contains((7, ahead)) {
            assert!(
                Instant::now() < deadline,
                "chunk {ahead} was not decoded ahead"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let beyond = archive.chunk_at(4096 + 16 * 1024 + 8192);
        assert!(
            !cache.contains((7, beyond)),
            "read-ahead went past its distance"
        );
    }

    #[test]
    fn a_fine_tunes_base_chunks_come_through_the_cache_and_serve_the_base() {
        let (fine, tuned, dir) = fine_tune(20_000, 4096);
        let base = Archive::open(dir.path().join("m.brv")).unwrap();
        let mut original = vec![0; base.len() as usize];
        base.read_at(0, &mut original).unwrap();
        assert!(fine.chunks().iter().any(|c| c.base.is_some()));

        // A read of one chunk stored against the base decodes the base's
        // chunk under the base's id (a copy of the base opened apart has the
        // same id), where a reader of the base finds it: with the base's
        // records damaged since, its bytes can only come from the cache.
        let i = fine.chunks().iter().position(|c| c.base.is_some()).unwrap();
        let range = fine.chunk_range(i);
        let cache = Arc::new(ChunkCache::new(1 << 20));
        let reader = ArchiveReader::new(fine.content_id(), fine.clone());
        let reply = reader.read(&cache, range.start, 10, 0).unwrap();
        let start = range.start as usize;
        assert_eq!(concat(&reply), &tuned[start..start + 10]);
        let id = base.content_id();
        let j = base.chunk_at(range.start);
        assert!(cache.contains((id, j)));
        let again = Archive::open(dir.path().join("m.brv")).unwrap();
        assert_eq!(again.content_id(), id);
        assert_ne!(fine.content_id(), id);
        let path = dir.path().join("m.brv");
        let mut bytes = std::fs::read(&path).unwrap();
        let record = again.record_offset(j) as usize..(again.record_offset(j + 1)) as usize;
        bytes[record].iter_mut().for_each(|b| *b ^= 0x55);
        std::fs::write(&path, bytes).unwrap();
        let damaged = Arc::new(Archive::open(&path).unwrap());
        let of_base = base.chunk_range(j);
        let reply = ArchiveReader::new(id, damaged)
            .read(&cache, of_base.start, 10, 0)
            .unwrap();
        let start = of_base.start as usize;
        assert_eq!(concat(&reply), &original[start..start + 10]);
    }

    /// [`archive`]'s file with a few bytes changed, packed against it:
    /// the fine-tune's archive and its original.
    fn fine_tune(len: usize, chunk: usize) -> (Arc<Archive>, Vec<u8>, tempfile::TempDir) {
        fine_tune_of(len, chunk, chunk)
    }

    /// A fine-tune of a base packed with `base_chunk`-byte chunks, packed
    /// against it with `chunk`-byte chunks.
    fn fine_tune_of(
        len: usize,
        base_chunk: usize,
        chunk: usize,
    ) -> (Arc<Archive>, Vec<u8>, tempfile::TempDir) {
        let (_base, original, dir) = archive(len, base_chunk);
        let mut tuned = original;
        tuned.iter_mut().skip(200).step_by(97).for_each(|b| *b ^= 1);
        let src = dir.path().join("tuned.safetensors");
        std::fs::write(&src, &tuned).unwrap();
        let opts = PackOptions {
            chunk_size: chunk,
            adapt_chunks: false,
            bases: crate::archive::BaseSources {
                named: vec![dir.path().join("m.brv")],
                ..Default::default()
            },
            ..PackOptions::default()
        };
        let brv = dir.path().join("tuned.brv");
        pack_file(&src, &brv, &opts, &|_| {}).unwrap();
        (Arc::new(Archive::open(&brv).unwrap()), tuned, dir)
    }

    /// The whole file, read front to back in reads of `step` bytes.
    fn read_all(reader: &ArchiveReader, cache: &Arc<ChunkCache>, step: u32, ahead: u64) -> Vec<u8> {
        let mut read = Vec::new();
        for at in (0..reader.archive.len()).step_by(step as usize) {
            read.extend(concat(&reader.read(cache, at, step, ahead).unwrap()));
        }
        read
    }

    #[test]
    fn a_sequential_reader_of_a_fine_tune_reuses_the_base_chunks_buffers() {
        let (fine, tuned, _dir) = fine_tune(80_000, 4096);
        let with_base = fine.chunks().iter().filter(|c| c.base.is_some()).count();
        assert!(with_base >= 15);

        let cache = Arc::new(ChunkCache::new(1 << 20));
        let reader = ArchiveReader::new(fine.content_id(), fine.clone());
        assert!(read_all(&reader, &cache, 4096, 0) == tuned);
        // Chunks of both archives cycle through a few buffers, where each base
        // chunk used to take fresh memory and stay until evicted.
        let held = cache.held_bytes();
        assert!(
            held <= 4 * 8192,
            "{held} bytes held after {with_base} base chunks"
        );
    }

    /// Eight threads read `archive` whole at once, with read-ahead as the
    /// mount sets it (half the cache), through a cache of `capacity` bytes:
    /// what each reads, and the most bytes the cache's buffers took.
    fn read_together(archive: &Arc<Archive>, capacity: usize) -> (Vec<Vec<u8>>, usize) {
        let cache = Arc::new(ChunkCache::new(capacity));
        let (done, results) = std::sync::mpsc::channel();
        for t in 0..8 {
            let (cache, done) = (cache.clone(), done.clone());
            let reader = ArchiveReader::new(archive.content_id(), archive.clone());
            std::thread::spawn(move || {
                let step = 4096 + 1024 * t;
                let read = read_all(&reader, &cache, step, capacity as u64 / 2);
                done.send(read).unwrap();
            });
        }
        // A deadlock fails the test rather than hang it.
        let reads = (0..8)
            .map(|_| {
                results
                    .recv_timeout(Duration::from_secs(60))
                    .expect("a reader is stuck")
            })
            .collect();
        (reads, cache.peak_bytes())
    }

    #[test]
    fn concurrent_readers_keep_the_cache_s_buffers_within_its_capacity() {
        // Chunks that fit several times, and chunks larger than the cache:
        // those are decoded one at a time, beyond it.
        for (chunk, capacity, bound) in
            [(4096, 3 * 4096, 3 * 4096), (64 << 10, 48 << 10, 112 << 10)]
        {
            let (archive, original, _dir) = archive(512 << 10, chunk);
            let (reads, peak) = read_together(&archive, capacity);
            assert!(reads.iter().all(|read| *read == original));
            assert!(
                peak <= bound,
                "{peak} bytes of buffers with {chunk}-byte chunks, a cache of {capacity}"
            );
        }
    }

    #[test]
    fn a_fine_tunes_chunk_may_span_chunks_of_its_base() {
        // Chunks of 8 KiB against a base's of 4 KiB: each needs two base
        // chunks, put together; chunks of 4 KiB against 8 KiB take part of
        // one in place.
        for (base_chunk, chunk) in [(4096, 8192), (8192, 4096)] {
            let (fine, tuned, dir) = fine_tune_of(80_000, base_chunk, chunk);
            let base = Archive::open(dir.path().join("m.brv")).unwrap();
            let spans_two = |i: usize| {
                let span = fine.chunks()[i]
                    .base
                    .map(|b| b.offset..b.offset + fine.chunks()[i].src_len);
                span.is_some_and(|s| base.chunk_at(s.start) != base.chunk_at(s.end - 1))
            };
            let spanning = (0..fine.chunks().len()).any(spans_two);
            assert_eq!(spanning, chunk > base_chunk);
            let cache = Arc::new(ChunkCache::new(1 << 20));
            let reader = ArchiveReader::new(fine.content_id(), fine.clone());
            assert!(read_all(&reader, &cache, 3000, 0) == tuned);
        }
    }

    #[test]
    fn a_fine_tune_reads_through_a_cache_of_one_chunk() {
        let (fine, tuned, _dir) = fine_tune(80_000, 4096);
        let (reads, peak) = read_together(&fine, 4096);
        assert!(reads.iter().all(|read| *read == tuned));
        // A fine-tune's chunk that fits, and the base chunk its decode needs,
        // decoded beyond the budget rather than wait for nothing.
        assert!(peak <= 2 * 4096, "{peak} bytes of buffers");
    }

    #[test]
    fn a_random_reader_gets_no_read_ahead() {
        let (archive, _, _dir) = archive(6 << 20, 256 << 10);
        let cache = Arc::new(ChunkCache::new(16 << 20));
        let reader = ArchiveReader::new(3, archive.clone());
        // Farther than the slack from where the last read ended (0 at open),
        // within one chunk.
        let far = archive
            .chunk_range(archive.chunk_at(crate::mount::streams::SEQUENTIAL_SLACK + (1 << 20)));
        reader.read(&cache, far.start + 10, 100, 1 << 20).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let decoded = (0..archive.chunks().len()).filter(|&i| cache.contains((3, i)));
        assert_eq!(decoded.count(), 1, "only the chunk read is decoded");
    }

    #[test]
    fn a_corrupt_chunk_fails_the_reads_that_touch_it_only() {
        let (archive, original, dir) = archive(20_000, 4096);
        let bad = 2;
        let at = archive.record_offset(bad) + archive.chunks()[bad].rec_len / 2;
        let path = dir.path().join("m.brv");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at as usize] ^= 0x55;
        std::fs::write(&path, bytes).unwrap();
        let damaged = Arc::new(Archive::open(&path).unwrap());
        let cache = Arc::new(ChunkCache::new(1 << 20));
        let reader = ArchiveReader::new(9, damaged.clone());
        let range = damaged.chunk_range(bad);
        assert!(reader.read(&cache, range.start, 10, 0).is_err());
        let before = damaged.chunk_range(bad - 1);
        let reply = reader.read(&cache, before.start, 10, 0).unwrap();
        let start = before.start as usize;
        assert_eq!(concat(&reply), &original[start..start + 10]);
    }
}
