//! Reading the file being packed: opened and planned, read in batches of
//! consecutive chunks (with their bases' bytes), each chunk's bytes taken
//! from its batch's.

#![forbid(unsafe_code)]

use super::bases::{Bases, Origin};
use super::plan::{plan, Chunking, Planned};
use crate::error::{IoContext, Result};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Chunks in a batch at most: a file of many tiny tensors would otherwise
/// hold the records of all of them at once.
const BATCH_CHUNKS_MAX: usize = 4096;
/// Source bytes per thread in a batch beyond which it takes fewer chunks
/// (one at least): a few batches are held at once, so large chunks would
/// otherwise multiply memory.
const BATCH_BYTES_PER_THREAD: u64 = 4 << 20;

/// The file being packed, open, the chunks planned for it and its bases.
pub(super) struct Input<'a> {
    pub(super) path: &'a Path,
    pub(super) file: File,
    pub(super) size: u64,
    pub(super) chunk: u64,
    pub(super) plan: Vec<Planned>,
    pub(super) bases: Bases,
}

impl<'a> Input<'a> {
    /// Opens the safetensors file `path` and plans its chunks.
    pub(super) fn open(path: &'a Path, chunking: Chunking, bases: Bases) -> Result<Self> {
        let file = crate::input::open_regular(path).at(path)?;
        let size = file.metadata().at(path)?.len();
        let mut bases = bases;
        let plan = plan(path, &file, size, chunking, &mut bases)?;
        Ok(Input {
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
    fn read_extent(
        &self,
        batch: &[Planned],
        buf: &mut Vec<u8>,
        base_buf: &mut Vec<u8>,
    ) -> Result<()> {
        let start = batch[0].start;
        let end = batch[batch.len() - 1].start + batch[batch.len() - 1].len;
        buf.resize((end - start) as usize, 0);
        self.read(start, buf)?;
        if batch.iter().any(|p| p.base.is_some()) {
            base_buf.resize(buf.len(), 0);
        }
        for p in batch {
            if let Some(origin) = p.base {
                let out = &mut base_buf[(p.start - start) as usize..][..p.len as usize];
                self.bases.read(origin, out)?;
            }
        }
        Ok(())
    }
}

/// The source bytes of consecutive planned chunks (a batch, or a chunk read
/// on its own), where they start in the source, and their bases' bytes.
pub(super) struct Extent {
    pub(super) bytes: Vec<u8>,
    start: u64,
    pub(super) base: Vec<u8>,
}

impl Extent {
    /// The bytes of the planned chunks `batch` (contiguous).
    pub(super) fn read(input: &Input, batch: &[Planned]) -> Result<Extent> {
        Extent::read_into(input, batch, Vec::new())
    }

    /// [`Extent::read`] into `bytes`, a buffer of an extent done with.
    pub(super) fn read_into(input: &Input, batch: &[Planned], bytes: Vec<u8>) -> Result<Extent> {
        let (mut bytes, mut base) = (bytes, Vec::new());
        input.read_extent(batch, &mut bytes, &mut base)?;
        let start = batch[0].start;
        Ok(Extent { bytes, start, base })
    }

    /// The bytes of `p`, a chunk of the extent.
    pub(super) fn piece(&self, p: &Planned) -> Piece<'_> {
        let at = (p.start - self.start) as usize..(p.start - self.start + p.len) as usize;
        Piece {
            bytes: &self.bytes[at.clone()],
            base: p.base.map(|offset| (&self.base[at], offset)),
        }
    }
}

/// A chunk's bytes, and the bytes of its base with where they are.
#[derive(Clone, Copy)]
pub(super) struct Piece<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) base: Option<(&'a [u8], Origin)>,
}

/// The representative chunk (see [`Planned::representative`]) of the tensor
/// that leads its class, starts in the batch `range` of the plan and ends
/// after it, if it lies beyond the batch, and its bytes. (Tensors are
/// contiguous: only the batch's last one can reach beyond it.)
pub(super) fn representative_ahead(
    input: &Input,
    range: Range<usize>,
) -> Result<Option<(usize, Extent)>> {
    let plan = &input.plan;
    let last = plan[range.end - 1];
    let started_here = last.nth as usize <= range.end - 1 - range.start;
    let r = range.end - 1 - last.nth as usize + last.representative() as usize;
    if last.class.is_none() || !last.leads || !started_here || r < range.end {
        return Ok(None);
    }
    Ok(Some((r, Extent::read(input, &plan[r..r + 1])?)))
}

/// Consecutive runs of planned chunks, as ranges of the plan, for `threads`
/// threads, the units the source is read and the archive written in (see
/// `pipeline`): a chunk a thread, and at least the bytes of as many chunks
/// of `chunk` bytes (many small tensors go together), within
/// `BATCH_BYTES_PER_THREAD` a thread (one chunk at least) and
/// `BATCH_CHUNKS_MAX` chunks.
///
/// Counting chunks keeps a tensor of wide chunks (see `width::tensor_chunk`)
/// from taking fewer chunks a thread than others. Small batches are read
/// soon before they are packed, while their bytes are in the CPU's caches;
/// batches of several chunks a thread packed slower, with one thread too.
pub(super) fn batches(
    plan: &[Planned],
    chunk: u64,
    threads: u64,
) -> impl Iterator<Item = Range<usize>> + '_ {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::Element;

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
                columns: None,
            })
            .collect()
    }

    fn batch_lens(lens: &[u64], chunk: u64, threads: u64) -> Vec<usize> {
        let plan = plan_of(lens);
        batches(&plan, chunk, threads).map(|r| r.len()).collect()
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
