//! Whole-archive decoding: unpack to a file, and verify.
//!
//! Both decode segments in parallel batches and feed them, in order, to a SHA-256
//! of the whole source, which must match the digest the archive recorded.

use super::Archive;
use crate::error::{Error, IoContext, Result};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

/// Segments decoded per parallel batch, per thread.
const BATCH_PER_THREAD: usize = 4;

/// Decodes every segment in order, passing each verified chunk to `sink`, and
/// checks the whole-file SHA-256. `progress` receives source bytes done.
pub fn for_each_chunk(
    archive: &Archive,
    progress: &(dyn Fn(u64) + Sync),
    mut sink: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut sha = Sha256::new();
    let n = archive.segments().len();
    let batch = BATCH_PER_THREAD * rayon::current_num_threads();
    for first in (0..n).step_by(batch) {
        let decoded: Vec<Vec<u8>> = (first..n.min(first + batch))
            .into_par_iter()
            .map(|i| archive.decode_segment(i))
            .collect::<Result<_>>()?;
        for (i, bytes) in (first..).zip(&decoded) {
            sha.update(bytes);
            sink(archive.segment_range(i).start, bytes)?;
        }
        progress(archive.segment_range(n.min(first + batch) - 1).end);
    }
    if <[u8; 32]>::from(sha.finalize()) != archive.sha256() {
        return Err(Error::corrupt(
            archive.path(),
            0,
            "decoded bytes do not match the recorded SHA-256 of the original",
        ));
    }
    Ok(())
}

/// Decodes `archive` into `dst` (under a temporary name, renamed when verified).
pub fn unpack_file(archive: &Archive, dst: &Path, progress: &(dyn Fn(u64) + Sync)) -> Result<()> {
    let tmp = super::writer::temp_path(dst);
    let result = (|| {
        let file = File::create(&tmp).at(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        for_each_chunk(archive, progress, |_, bytes| out.write_all(bytes).at(&tmp))?;
        out.flush().at(&tmp)?;
        drop(out);
        file.sync_all().at(&tmp)?;
        std::fs::rename(&tmp, dst).at(dst)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Decodes everything and checks every chunk checksum and the SHA-256; with
/// `original`, also compares every byte with that file.
pub fn verify(
    archive: &Archive,
    original: Option<&Path>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    let Some(path) = original else {
        return for_each_chunk(archive, progress, |_, _| Ok(()));
    };
    let mut file = File::open(path).at(path)?;
    let len = file.metadata().at(path)?.len();
    if len != archive.len() {
        return Err(Error::invalid(
            path,
            format!("is {len} bytes, the archive holds {} bytes", archive.len()),
        ));
    }
    let mut expected = Vec::new();
    for_each_chunk(archive, progress, |offset, bytes| {
        expected.resize(bytes.len(), 0);
        file.read_exact(&mut expected).at(path)?;
        match bytes.iter().zip(&expected).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(k) => Err(Error::invalid(
                path,
                format!("differs from the archive at byte {}", offset + k as u64),
            )),
        }
    })
}
