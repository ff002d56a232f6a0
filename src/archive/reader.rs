//! Random-access reading of an archive.

use super::decode::decode_record;
use super::format::{
    check_head, checksum, decode_trailer, BaseEntry, BaseSpan, ChunkEntry, HeadError, Index,
    HEAD_MAGIC, TRAILER_LEN,
};
use super::source::{ByteSource, LocalFiles, SourceOpener};
use crate::error::{Error, IoContext, Result};
use crate::input::open_regular;
use crate::safetensors::Layout;
use memmap2::Mmap;
use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// An open archive: its index in memory, its records read on demand.
pub struct Archive {
    path: PathBuf,
    bytes: Backing,
    index: Index,
    /// The format version of its head.
    version: u8,
    /// See [`Archive::content_id`].
    content_id: u64,
    /// Source offset where each chunk starts, plus the source length at the end.
    src_starts: Vec<u64>,
    /// Archive offset where each chunk's record starts, plus the index offset.
    rec_starts: Vec<u64>,
    /// The archives of the index's bases, in its order, opened and checked.
    bases: Vec<Archive>,
    /// For each row map, the base bytes its rows lie in, decoded once for
    /// [`Archive::decode_chunk_into`] where it is scattered (see
    /// [`Archive::held_rows`]), or why they could not be.
    held: Vec<OnceLock<std::result::Result<Vec<u8>, String>>>,
}

/// Most bytes of a base tensor an archive holds decoded for a scattered
/// row map; beyond, its rows are decoded where they lie as they are read.
const MAX_HELD_BYTES: u64 = 4 << 30;

/// How a chunk's base bytes are read: `(base, offset, len, use_bytes)`
/// calls `use_bytes` once with base's `len` checked source bytes from
/// `offset`, or says why it cannot. Lending them, rather than filling a
/// buffer, lets a cache of decoded chunks hand out a chunk in place.
pub type ReadBase<'a> =
    &'a dyn Fn(&Archive, u64, usize, &mut dyn FnMut(&[u8])) -> std::result::Result<(), String>;

/// How long a chain of bases may be: reading a chunk may decode a chunk of
/// each archive along it.
pub const MAX_BASE_DEPTH: usize = 8;
/// How many archives opening one may open in all, its bases' bases included
/// (a hostile index could otherwise name itself as many bases, many deep).
pub const MAX_OPENED_BASES: usize = 64;

/// Where an archive being opened sits among the bases of the one first
/// opened.
#[derive(Clone, Copy)]
struct Chain<'a> {
    how: How<'a>,
    depth: usize,
}

/// How the archives of a chain are opened.
#[derive(Clone, Copy)]
enum How<'a> {
    /// Local files, memory-mapped.
    Mapped,
    /// Sources opened by path, read by range.
    Sourced(&'a dyn SourceOpener),
}

/// Where record bytes come from.
enum Backing {
    /// Memory-mapped: no copy, for short-lived readers such as `unpack`.
    Mapped(Mmap),
    /// Reads by range: for long-lived readers (the mount), so that a file
    /// truncated under them gives an error instead of SIGBUS, and their resident
    /// memory holds only what they decoded; and for archives in object storage.
    Source(Box<dyn ByteSource>),
}

impl Backing {
    fn len(&self) -> u64 {
        match self {
            Backing::Mapped(map) => map.len() as u64,
            Backing::Source(source) => source.len(),
        }
    }

    /// `len` bytes at `offset`, which the caller has checked lie inside the file.
    fn read(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        match self {
            Backing::Mapped(map) => Ok(Cow::Borrowed(&map[offset as usize..][..len])),
            Backing::Source(source) => {
                // The length comes from the archive's trailer, which for an
                // object in a store may claim more than memory holds: an
                // error then, not an abort.
                let mut buf = Vec::new();
                buf.try_reserve_exact(len).map_err(std::io::Error::other)?;
                buf.resize(len, 0);
                source.read_exact_at(&mut buf, offset)?;
                Ok(Cow::Owned(buf))
            }
        }
    }

    /// Calls `f` with `len` bytes at `offset` (checked by the caller as for
    /// `read`). Positional reads go into scratch (see [`crate::scratch`]), so
    /// decoding many records neither allocates nor zeroes a buffer for each.
    fn with<R>(&self, offset: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> std::io::Result<R> {
        match self {
            Backing::Mapped(map) => Ok(f(&map[offset as usize..][..len])),
            Backing::Source(source) => crate::scratch::with_bytes(len, |buf| {
                source.read_exact_at(buf, offset).map(|()| f(buf))
            }),
        }
    }
}

impl Archive {
    /// Opens an archive memory-mapped and checks its framing and index, and
    /// opens its bases the same way. Records are checked as they are decoded.
    pub fn open(path: impl AsRef<Path>) -> Result<Archive> {
        let chain = Chain {
            how: How::Mapped,
            depth: 0,
        };
        Archive::open_at(path.as_ref(), chain, &mut 0)
    }

    /// Opens an archive that is read with positional reads instead of a map,
    /// and its bases the same way.
    pub fn open_unmapped(path: impl AsRef<Path>) -> Result<Archive> {
        Archive::open_with(path, &LocalFiles)
    }

    /// Opens the archive that `opener` gives for `path`, and its bases through
    /// the same opener (their paths resolved against `path`'s folder).
    pub fn open_with(path: impl AsRef<Path>, opener: &dyn SourceOpener) -> Result<Archive> {
        let chain = Chain {
            how: How::Sourced(opener),
            depth: 0,
        };
        Archive::open_at(path.as_ref(), chain, &mut 0)
    }

    /// Opens the archive at `path` and its bases; `opened` counts the bases
    /// opened so far.
    fn open_at(path: &Path, chain: Chain, opened: &mut usize) -> Result<Archive> {
        let backing = match chain.how {
            How::Mapped => Archive::map(path, &open_regular(path).at(path)?)?,
            How::Sourced(opener) => Backing::Source(opener.open(path).at(path)?),
        };
        let mut archive = Archive::with_backing(path, backing)?;
        archive.bases = open_bases(path, &archive.index.bases, chain, opened)?;
        archive.held = archive.index.rows.iter().map(|_| OnceLock::new()).collect();
        Ok(archive)
    }

    fn map(path: &Path, file: &File) -> Result<Backing> {
        // SAFETY: the map is read-only; archives are written once under a temporary
        // name and renamed, so a file is not modified while mapped by this tool.
        // Another process truncating it would fault reads, as with any mmap reader;
        // long-lived readers use `open_unmapped` for that reason.
        let map = unsafe { Mmap::map(file) }.at(path)?;
        Ok(Backing::Mapped(map))
    }

    fn with_backing(path: &Path, bytes: Backing) -> Result<Archive> {
        let (index, version, index_sum) =
            parse_framing(&bytes).map_err(|(offset, reason)| match reason {
                Framing::Io(e) => Error::io(path, e),
                Framing::Corrupt(reason) => Error::corrupt(path, offset, reason),
                Framing::Unsupported(reason) => Error::invalid(path, reason),
            })?;
        let prefix = |lens: &mut dyn Iterator<Item = u64>, first: u64| {
            let mut at = first;
            let mut v = vec![first];
            v.extend(lens.map(|l| {
                at += l;
                at
            }));
            v
        };
        let src_starts = prefix(&mut index.chunks.iter().map(|s| s.src_len), 0);
        let rec_starts = prefix(
            &mut index.chunks.iter().map(|s| s.rec_len),
            HEAD_MAGIC.len() as u64,
        );
        let mut id = index.sha256.to_vec();
        id.extend_from_slice(&index_sum.to_le_bytes());
        id.push(version);
        Ok(Archive {
            path: path.to_path_buf(),
            bytes,
            content_id: checksum(&id),
            index,
            version,
            src_starts,
            rec_starts,
            bases: Vec::new(),
            held: Vec::new(),
        })
    }

    /// The tensors of the original, from its header (decoded and checked):
    /// an error says why the original is not a safetensors file.
    pub fn source_layout(&self) -> std::result::Result<crate::safetensors::SourceLayout, String> {
        crate::safetensors::parse(self.len(), |n| {
            let mut header = vec![0u8; n as usize];
            self.read_at(0, &mut header)
                .map(|_| header)
                .map_err(std::io::Error::other)
        })
    }

    /// The archives this one's chunks reference, in the order of its index.
    pub fn bases(&self) -> &[Archive] {
        &self.bases
    }

    /// What a reader opens besides this archive when it opens it: how many
    /// archives in all (its bases, their bases ...; counted as
    /// [`MAX_OPENED_BASES`] counts them) and how many levels deep.
    pub fn bases_load(&self) -> (usize, usize) {
        self.bases.iter().fold((0, 0), |(opened, levels), b| {
            let (o, l) = b.bases_load();
            (opened + 1 + o, levels.max(1 + l))
        })
    }

    /// The XXH3-64 of the checksums of the chunks that tile the source bytes
    /// `range`, and the length of the first: a fingerprint of those bytes that
    /// needs no decoding, comparable with that of other bytes cut into chunks
    /// of that length. `None` where the chunks do not start and end exactly at
    /// the range, or vary in length before the last.
    pub fn fingerprint(&self, range: Range<u64>) -> Option<(u64, u64)> {
        if range.is_empty() || range.end > self.len() {
            return None;
        }
        let (first, last) = (self.chunk_at(range.start), self.chunk_at(range.end - 1));
        let step = self.chunk_range(first).end - range.start;
        let regular = (first..last).all(|i| self.index.chunks[i].src_len == step);
        if self.chunk_range(first).start != range.start
            || self.chunk_range(last).end != range.end
            || !regular
        {
            return None;
        }
        let sums = (first..=last).map(|i| self.index.chunks[i].checksum);
        Some((fingerprint(sums), step))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Length of the original file.
    pub fn len(&self) -> u64 {
        self.index.source_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SHA-256 of the original file.
    pub fn sha256(&self) -> [u8; 32] {
        self.index.sha256
    }

    /// Archive file size.
    pub fn archive_len(&self) -> u64 {
        self.bytes.len()
    }

    /// The archive's index, as checked when it was opened.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The format version of the archive's head.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Names what this archive's chunks decode to, for caches shared by
    /// several archives: the XXH3-64 of its source's SHA-256, its index's
    /// checksum and its version. Archives with the same id cut the same
    /// source into the same chunks (whatever their paths), so their chunks
    /// are interchangeable; any change to an archive changes its id.
    pub fn content_id(&self) -> u64 {
        self.content_id
    }

    pub fn chunks(&self) -> &[ChunkEntry] {
        &self.index.chunks
    }

    /// Source byte range of chunk `i`.
    pub fn chunk_range(&self, i: usize) -> Range<u64> {
        self.src_starts[i]..self.src_starts[i + 1]
    }

    /// Index of the chunk holding source byte `offset` (< len).
    pub fn chunk_at(&self, offset: u64) -> usize {
        self.src_starts.partition_point(|&s| s <= offset) - 1
    }

    /// Archive offset of chunk `i`'s record.
    pub fn record_offset(&self, i: usize) -> u64 {
        self.rec_starts[i]
    }

    /// The record bytes of chunk `i`.
    pub fn record(&self, i: usize) -> Result<Cow<'_, [u8]>> {
        let len = self.rec_starts[i + 1] - self.rec_starts[i];
        self.bytes
            .read(self.rec_starts[i], len as usize)
            .at(&self.path)
    }

    /// Maps the records of `chunks` into memory ahead of decoding them: for
    /// a sequential pass over the archive, one call per batch costs less than
    /// the page faults of touching the mapping. Only a hint (and nothing to do
    /// for an unmapped archive); kernels before Linux 5.14 reject it, which is
    /// harmless. A remote source fetches the records, in as few requests as
    /// it can, instead of one request per record as they are decoded; an
    /// error says it could not, so that a read can fail without trying again.
    pub fn prefetch(&self, chunks: Range<usize>) -> Result<()> {
        if chunks.is_empty() {
            return Ok(());
        }
        let (start, end) = (self.rec_starts[chunks.start], self.rec_starts[chunks.end]);
        match &self.bytes {
            #[cfg(target_os = "linux")]
            Backing::Mapped(map) => {
                let (at, len) = (start as usize, (end - start) as usize);
                let _ = map.advise_range(memmap2::Advice::PopulateRead, at, len);
            }
            #[cfg(not(target_os = "linux"))]
            Backing::Mapped(_) => {}
            Backing::Source(source) => {
                return source.prefetch(start..end).map_err(|e| {
                    let reason = format!("cannot read the records at bytes {start}..{end}: {e}");
                    Error::invalid(&self.path, reason)
                });
            }
        }
        Ok(())
    }

    /// Decodes chunk `i` into `out` (exactly its source length) and verifies its
    /// checksum; on any failure `out` must not be used.
    pub fn decode_chunk_into(&self, i: usize, out: &mut [u8]) -> Result<()> {
        self.decode_chunk_with(i, out, &|base, offset, len, use_bytes| {
            if let Some(held) = self.held_rows(base, offset, len) {
                use_bytes(held?);
                return Ok(());
            }
            crate::scratch::with_bytes(len, |bytes| {
                base.read_at(offset, bytes).map_err(|e| e.to_string())?;
                use_bytes(bytes);
                Ok(())
            })
        })
    }

    /// The base bytes `offset..offset + len` of `base` from where a
    /// scattered row map of this archive holds them decoded (decoding them
    /// on first use), if one does. A reordered vocabulary's chunk takes its
    /// rows from as many base chunks as it has rows: decoded where they lie,
    /// a whole read would decode the base tensor once per chunk. (The mount
    /// reads bases through its own cache instead.)
    fn held_rows(
        &self,
        base: &Archive,
        offset: u64,
        len: usize,
    ) -> Option<std::result::Result<&[u8], String>> {
        let (m, span) = (self.index.rows.iter().enumerate()).find_map(|(m, map)| {
            let span = map.base_span();
            let of_base = std::ptr::eq(&self.bases[map.base as usize], base);
            let inside = span.start <= offset && offset + len as u64 <= span.end;
            let small = span.end - span.start <= MAX_HELD_BYTES;
            (of_base && inside && small && map.scattered()).then_some((m, span))
        })?;
        let held = self.held[m].get_or_init(|| {
            // The length is the base's index's claim: an error, not an
            // abort, where memory does not hold it.
            let mut bytes = Vec::new();
            let len = (span.end - span.start) as usize;
            bytes.try_reserve_exact(len).map_err(|e| e.to_string())?;
            bytes.resize(len, 0);
            base.read_at(span.start, &mut bytes)
                .map(|_| bytes)
                .map_err(|e| e.to_string())
        });
        let at = (offset - span.start) as usize;
        Some(
            held.as_ref()
                .map(|b| &b[at..at + len])
                .map_err(Clone::clone),
        )
    }

    /// [`Archive::decode_chunk_into`], reading a base's source bytes with
    /// `read_base(base, offset, out)`, which must fill `out` with checked
    /// bytes or say why not (as a cache of decoded chunks does).
    pub fn decode_chunk_with(&self, i: usize, out: &mut [u8], read_base: ReadBase) -> Result<()> {
        let seg = &self.index.chunks[i];
        let base = self.rec_starts[i];
        let len = (self.rec_starts[i + 1] - base) as usize;
        self.bytes
            .with(base, len, |record| {
                decode_record(record, seg.layout, (self.version, &self.index.tables), out)
            })
            .map_err(|e| {
                // Most often the file was truncated after it was opened.
                let reason = format!("cannot read the record at byte {base} ({len} bytes): {e}");
                Error::invalid(&self.path, reason)
            })?
            .map_err(|e| Error::corrupt(&self.path, base + e.at as u64, e.reason))?;
        if let Some(span) = seg.base {
            self.combine_base(span, seg.layout, out, read_base)?;
        }
        if checksum(out) != seg.checksum {
            return Err(Error::corrupt(
                &self.path,
                base,
                format!(
                    "checksum mismatch in the chunk for source bytes {:?}",
                    self.chunk_range(i)
                ),
            ));
        }
        Ok(())
    }

    /// Combines `out`, a decoded residual, with the base's source bytes of
    /// `span` (which the index checked lie inside that source, or inside its
    /// row map's bytes), read and checked as any others. A row map's bytes
    /// are gathered a run at a time: the base's chunks a run covers are
    /// decoded once for it.
    fn combine_base(
        &self,
        span: BaseSpan,
        layout: Layout,
        out: &mut [u8],
        read_base: ReadBase,
    ) -> Result<()> {
        let base = &self.bases[span.base as usize];
        let len = out.len();
        let fail = |e| Error::invalid(&self.path, format!("reading its base: {e}"));
        let Some(map) = span.rows else {
            return read_base(base, span.offset, len, &mut |bytes| {
                span.combine.restore(out, bytes, layout)
            })
            .map_err(fail);
        };
        let map = &self.index.rows[map as usize];
        crate::scratch::with_bytes(len, |gathered| {
            for (at, n, from) in map.pieces(span.offset, len as u64) {
                let piece = &mut gathered[at as usize..(at + n) as usize];
                match from {
                    None => piece.fill(0),
                    Some(from) => read_base(base, from, piece.len(), &mut |bytes| {
                        piece.copy_from_slice(bytes)
                    })
                    .map_err(fail)?,
                }
            }
            span.combine.restore(out, gathered, layout);
            Ok(())
        })
    }

    /// Fills `buf` with source bytes starting at `offset`, decoding only the
    /// chunks that cover them. Returns the bytes read (short only at the end).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if offset >= self.len() || buf.is_empty() {
            return Ok(0);
        }
        let end = self.len().min(offset + buf.len() as u64);
        let mut at = offset;
        let mut scratch = Vec::new();
        while at < end {
            let i = self.chunk_at(at);
            let range = self.chunk_range(i);
            let stop = range.end.min(end);
            let dst = &mut buf[(at - offset) as usize..(stop - offset) as usize];
            if at == range.start && stop == range.end {
                self.decode_chunk_into(i, dst)?;
            } else {
                scratch.resize((range.end - range.start) as usize, 0);
                self.decode_chunk_into(i, &mut scratch)?;
                let from = (at - range.start) as usize;
                dst.copy_from_slice(&scratch[from..from + dst.len()]);
            }
            at = stop;
        }
        Ok((end - offset) as usize)
    }
}

/// The XXH3-64 of chunk checksums, each as 8 little-endian bytes (see
/// [`Archive::fingerprint`]).
pub fn fingerprint(checksums: impl Iterator<Item = u64>) -> u64 {
    let bytes: Vec<u8> = checksums.flat_map(u64::to_le_bytes).collect();
    super::format::checksum(&bytes)
}

/// Why the framing could not be read: the file, or its contents.
enum Framing {
    Io(std::io::Error),
    Corrupt(String),
    /// A valid archive this build cannot read.
    Unsupported(String),
}

/// Opens the archives of `bases`, named in the index of the archive at
/// `path`, and checks that each holds the source the index names.
fn open_bases(
    path: &Path,
    bases: &[BaseEntry],
    chain: Chain,
    opened: &mut usize,
) -> Result<Vec<Archive>> {
    let folder = path.parent().unwrap_or(Path::new(""));
    bases
        .iter()
        .map(|b| {
            let base_path = folder.join(&b.path);
            let fail = |reason: String| {
                let sha: String = b.sha256.iter().map(|x| format!("{x:02x}")).collect();
                let what = format!("needs the base archive {}", base_path.display());
                Error::invalid(
                    path,
                    format!("{what} (of a source with SHA-256 {sha}): {reason}"),
                )
            };
            if chain.depth + 1 >= MAX_BASE_DEPTH {
                return Err(fail(format!("bases nest deeper than {MAX_BASE_DEPTH}")));
            }
            *opened += 1;
            if *opened > MAX_OPENED_BASES {
                return Err(fail(format!("more than {MAX_OPENED_BASES} bases in all")));
            }
            let deeper = Chain {
                depth: chain.depth + 1,
                ..chain
            };
            let base =
                Archive::open_at(&base_path, deeper, opened).map_err(|e| fail(e.to_string()))?;
            if base.sha256() != b.sha256 || base.len() != b.source_len {
                return Err(fail("that archive holds another source".into()));
            }
            Ok(base)
        })
        .collect()
}

/// Checks magic numbers and trailer, then parses the index. Errors carry the
/// archive offset they concern.
fn parse_framing(bytes: &Backing) -> std::result::Result<(Index, u8, u64), (u64, Framing)> {
    let corrupt = |offset: u64, reason: &str| (offset, Framing::Corrupt(reason.to_string()));
    let read = |offset: u64, len: usize| {
        bytes
            .read(offset, len)
            .map_err(|e| (offset, Framing::Io(e)))
    };
    let len = bytes.len();
    let head = read(0, HEAD_MAGIC.len().min(len as usize))?;
    let version = check_head(&head).map_err(|e| match e {
        HeadError::NotAnArchive => corrupt(0, &e.to_string()),
        HeadError::UnknownVersion(_) => (0, Framing::Unsupported(e.to_string())),
    })?;
    if len < (HEAD_MAGIC.len() + TRAILER_LEN) as u64 {
        return Err(corrupt(0, "not a brevis archive (too short)"));
    }
    let trailer_at = len - TRAILER_LEN as u64;
    let trailer = read(trailer_at, TRAILER_LEN)?;
    let trailer: &[u8; TRAILER_LEN] = trailer[..].try_into().expect("trailer length");
    let (index_offset, index_len, index_checksum) = decode_trailer(trailer).ok_or_else(|| {
        let reason =
            format!("truncated or damaged: its {len} bytes do not end with an archive trailer");
        corrupt(trailer_at, &reason)
    })?;
    let fits = index_offset >= 8 && index_offset.checked_add(index_len) == Some(trailer_at);
    if !fits {
        return Err(corrupt(trailer_at, "index position does not fit the file"));
    }
    let index_bytes = read(index_offset, index_len as usize)?;
    if checksum(&index_bytes) != index_checksum {
        return Err(corrupt(index_offset, "index checksum mismatch"));
    }
    let index = Index::decode(
        &index_bytes,
        index_offset - HEAD_MAGIC.len() as u64,
        version,
    )
    .map_err(|e| corrupt(index_offset + e.at as u64, e.reason))?;
    Ok((index, version, index_checksum))
}
