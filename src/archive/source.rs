//! Where an archive's bytes come from when they are not memory-mapped: a
//! local file read with positional reads, or (with the `remote` feature) an
//! object in a store fetched by byte range. The reader asks for ranges it has
//! checked lie inside the archive and verifies everything it decodes, so a
//! source only has to return the bytes or an error.

#![forbid(unsafe_code)]

use crate::input::open_regular;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes of one archive, read by range.
pub trait ByteSource: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> u64;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`; the range lies inside `len`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// A hint that `range` is about to be read: a remote source fetches it
    /// now, in as few requests as it can, rather than record by record, and
    /// says if it cannot; a local file has the kernel read it ahead.
    fn prefetch(&self, _range: Range<u64>) -> io::Result<()> {
        Ok(())
    }
}

/// Opens the sources of archives by path: the archive asked for and the bases
/// it names (by paths relative to its own), so bases resolve in the same store.
pub trait SourceOpener: Sync {
    fn open(&self, path: &Path) -> io::Result<Box<dyn ByteSource>>;
}

/// A local file read with positional reads.
pub struct FileSource {
    file: File,
    len: u64,
}

impl FileSource {
    /// Opens `path`, which must be a regular file (not a FIFO or device, where
    /// opening or reading could block).
    pub fn open(path: &Path) -> io::Result<FileSource> {
        let file = open_regular(path)?;
        let len = file.metadata()?.len();
        Ok(FileSource { file, len })
    }
}

impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Asks the kernel to start reading `range` into the page cache and
    /// returns at once, so that the disk works while the records before it
    /// decode (a reader's own read-ahead only follows its reads).
    fn prefetch(&self, range: Range<u64>) -> io::Result<()> {
        // `None` would mean to the end of the file.
        let Some(len) = std::num::NonZeroU64::new(range.end.saturating_sub(range.start)) else {
            return Ok(());
        };
        // Only a hint: a kernel that cannot take it loses nothing but time.
        let advice = rustix::fs::Advice::WillNeed;
        let _ = rustix::fs::fadvise(&self.file, range.start, Some(len), advice);
        Ok(())
    }
}

/// Opens archives as local files, read with positional reads.
pub struct LocalFiles;

impl SourceOpener for LocalFiles {
    fn open(&self, path: &Path) -> io::Result<Box<dyn ByteSource>> {
        Ok(Box::new(FileSource::open(path)?))
    }
}
