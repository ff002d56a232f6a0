//! Whole-archive decoding: unpack to a file, and verify.
//!
//! Both decode chunks in parallel batches, each checked against its chunk
//! checksum; verify also recomputes the SHA-256 of the whole source and compares
//! it with the digest the archive recorded.

#![forbid(unsafe_code)]

use super::Archive;
use crate::atomic::{stamp, start_writeback, write_atomically};
use crate::error::{Error, IoContext, Result};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::ops::Range;
use std::path::Path;

/// Source bytes decoded per parallel batch, per thread: a few default chunks
/// to share out, and runs long enough to write without buffering.
const BATCH_BYTES_PER_THREAD: u64 = 1 << 20;

/// Decodes every chunk in order, passing checksum-verified runs of source bytes
/// (with their offset) to `sink`. `progress` receives source bytes done. With
/// more than one thread, `sink` takes each batch while the next is decoded.
pub fn for_each_chunk(
    archive: &Archive,
    progress: &(dyn Fn(u64) + Sync),
    mut sink: impl FnMut(u64, &[u8]) -> Result<()> + Send,
) -> Result<()> {
    let target = BATCH_BYTES_PER_THREAD * rayon::current_num_threads() as u64;
    let mut batches = batches(archive, target);
    let mut give = |(start, end): (u64, u64), bytes: &[u8]| {
        sink(start, bytes)?;
        progress(end);
        Ok(())
    };
    // Two buffers for whole batches, reused: fresh allocations per chunk
    // would page-fault on every decoded byte.
    let (mut ready, mut spare) = (Vec::new(), Vec::new());
    if rayon::current_num_threads() == 1 {
        // Nothing to overlap: each batch goes to `sink` as soon as it is
        // decoded, while its bytes are in this core's cache.
        for batch in batches {
            let span = decode_batch(archive, batch, &mut ready)?;
            give(span, &ready)?;
        }
        return Ok(());
    }
    let mut done = match batches.next() {
        Some(batch) => decode_batch(archive, batch, &mut ready)?,
        None => return Ok(()),
    };
    loop {
        let next = batches.next();
        let (decoded, given) = rayon::join(
            || {
                next.map(|b| decode_batch(archive, b, &mut spare))
                    .transpose()
            },
            || give(done, &ready),
        );
        given?;
        let Some(span) = decoded? else {
            return Ok(());
        };
        done = span;
        std::mem::swap(&mut ready, &mut spare);
    }
}

/// Decodes the chunks `batch` into `buf` (resized to hold them), on all
/// threads if there are more than one, and returns the span of source bytes
/// they hold.
fn decode_batch(archive: &Archive, batch: Range<usize>, buf: &mut Vec<u8>) -> Result<(u64, u64)> {
    // Only a hint: a record that cannot be read fails its decode below.
    let _ = archive.prefetch(batch.clone());
    let start = archive.chunk_range(batch.start).start;
    let end = archive.chunk_range(batch.end - 1).end;
    buf.resize((end - start) as usize, 0);
    let mut slices = Vec::with_capacity(batch.len());
    let mut rest = buf.as_mut_slice();
    for i in batch {
        let (head, tail) = rest.split_at_mut(archive.chunks()[i].src_len as usize);
        slices.push((i, head));
        rest = tail;
    }
    let decode = |(i, out): (usize, &mut [u8])| archive.decode_chunk_into(i, out);
    match rayon::current_num_threads() {
        // A single worker would only take turns with this thread: decode
        // here instead.
        1 => slices.into_iter().try_for_each(decode)?,
        _ => slices
            .into_par_iter()
            .with_max_len(1)
            .try_for_each(decode)?,
    }
    Ok((start, end))
}

/// The archive's chunks in consecutive batches of about `target` source
/// bytes (and one chunk at least).
fn batches(archive: &Archive, target: u64) -> impl Iterator<Item = Range<usize>> + '_ {
    let n = archive.chunks().len();
    let mut first = 0;
    std::iter::from_fn(move || {
        (first < n).then(|| {
            let last = batch_end(archive, first, target);
            let batch = first..last;
            first = last;
            batch
        })
    })
}

/// The end of the batch starting at chunk `first`: it takes chunks until
/// they reach `target` source bytes, and at least one.
fn batch_end(archive: &Archive, first: usize, target: u64) -> usize {
    let start = archive.chunk_range(first).start;
    let mut last = first + 1;
    while last < archive.chunks().len() && archive.chunk_range(last - 1).end - start < target {
        last += 1;
    }
    last
}

/// Decodes `archive` into `dst`, which appears only once every chunk checksum
/// and the SHA-256 of the whole source have matched.
pub fn unpack_file(archive: &Archive, dst: &Path, progress: &(dyn Fn(u64) + Sync)) -> Result<()> {
    let folder = dst.parent().filter(|d| !d.as_os_str().is_empty());
    let folder = folder.unwrap_or(Path::new("."));
    let free = crate::space::available(folder).at(folder)?;
    if archive.len() > free {
        return Err(Error::invalid(
            dst,
            format!(
                "needs {} bytes, and its filesystem has {free} bytes free",
                archive.len()
            ),
        ));
    }
    // An archive read from a store has no local file whose time to keep.
    let stored = std::fs::metadata(archive.path()).ok();
    write_atomically(dst, |tmp| {
        let mut file = File::create(tmp).at(tmp)?;
        // Batches are long runs already: buffering them would only copy them.
        decode_whole(archive, progress, |_, bytes| {
            file.write_all(bytes).at(tmp)?;
            start_writeback(&file);
            Ok(())
        })?;
        file.sync_all().at(tmp)?;
        // The archive has its original's time and permissions (see `stamp`).
        match &stored {
            Some(stored) => stamp(tmp, stored),
            None => Ok(()),
        }
    })
}

/// Decodes everything and checks every chunk checksum and the SHA-256 of the
/// whole source; with `original`, also compares every byte with that file.
pub fn verify(
    archive: &Archive,
    original: Option<&Path>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    let mut compare = original
        .map(|p| Comparison::open(p, archive.len()))
        .transpose()?;
    decode_whole(archive, progress, |offset, bytes| {
        compare.as_mut().map_or(Ok(()), |c| c.check(offset, bytes))
    })
}

/// [`for_each_chunk`] over the whole source, then a check of its SHA-256: the
/// chunks' checksums guard each piece, the SHA-256 their order and the whole
/// (records swapped consistently with their index entries pass the first).
fn decode_whole(
    archive: &Archive,
    progress: &(dyn Fn(u64) + Sync),
    mut sink: impl FnMut(u64, &[u8]) -> Result<()> + Send,
) -> Result<()> {
    let mut sha = Sha256::new();
    // The digest takes about as long as decoding: on two threads or more it
    // runs beside the sink (a write, a comparison) rather than before it,
    // so that the decoding of the next batch is not left waiting for both.
    // On one, a join would only hand the work to the pool's thread and wait.
    let one_thread = rayon::current_num_threads() == 1;
    for_each_chunk(archive, progress, |offset, bytes| {
        if one_thread {
            sha.update(bytes);
            return sink(offset, bytes);
        }
        rayon::join(|| sha.update(bytes), || sink(offset, bytes)).1
    })?;
    if <[u8; 32]>::from(sha.finalize()) != archive.sha256() {
        return Err(Error::corrupt(
            archive.path(),
            0,
            "decoded bytes do not match the recorded SHA-256 of the original",
        ));
    }
    Ok(())
}

/// Byte-for-byte comparison with an original file read alongside.
struct Comparison<'a> {
    path: &'a Path,
    file: File,
    expected: Vec<u8>,
}

impl<'a> Comparison<'a> {
    fn open(path: &'a Path, len: u64) -> Result<Self> {
        let file = crate::input::open_regular(path).at(path)?;
        let actual = file.metadata().at(path)?.len();
        if actual != len {
            return Err(Error::invalid(
                path,
                format!("is {actual} bytes, the archive holds {len} bytes"),
            ));
        }
        Ok(Comparison {
            path,
            file,
            expected: Vec::new(),
        })
    }

    fn check(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.expected.resize(bytes.len(), 0);
        self.file.read_exact(&mut self.expected).at(self.path)?;
        match bytes.iter().zip(&self.expected).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(k) => Err(Error::invalid(
                self.path,
                format!("differs from the archive at byte {}", offset + k as u64),
            )),
        }
    }
}
