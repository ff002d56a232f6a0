//! Finding each tensor's base: the `--base` archives matched by tensor
//! name (a fine-tune's tensors against the model it was tuned from), and
//! with deduplication any archive's tensors matched by content, and a
//! tensor whose rows are rows of a base tensor (of its name, if it has one)
//! as a row map of them (see `rows`), kept within the bases a reader opens.

#![forbid(unsafe_code)]

use super::rows::{find_rows, sections, BaseRows};
use crate::archive::format::{valid_base_path, BaseEntry};
use crate::archive::reader::{Archive, MAX_BASE_DEPTH, MAX_OPENED_BASES};
use crate::archive::source::SourceOpener;
use crate::archive::RowMap;
use crate::error::{Error, IoContext, Result};
use crate::safetensors::TensorInfo;
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Where a tensor's bytes, or a chunk's, lie in a base: a span of base
/// `which`'s source from `offset`, or of the bytes of row map `map` (of
/// that base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Origin {
    pub(super) which: u32,
    pub(super) map: Option<u32>,
    pub(super) offset: u64,
}

impl Origin {
    /// The place `n` bytes further on.
    pub(super) fn plus(self, n: u64) -> Origin {
        Origin {
            offset: self.offset + n,
            ..self
        }
    }
}

/// Bytes of base tensors a pack holds decoded for its row maps at most: a
/// tensor whose base tensor would take more is not matched by rows.
const MAX_HELD_BYTES: u64 = 8 << 30;

/// Base tensors of other names whose rows a tensor is looked for in, at
/// most (those nearest its row count first): each is decoded to be looked
/// in.
const ROW_CANDIDATES: usize = 2;

/// A row map of a pack, and the decoded bytes of the base tensor its rows
/// are from (shared by the maps of one base tensor).
struct Gathered {
    map: RowMap,
    bytes: Arc<Vec<u8>>,
}

/// The base archives of a pack, opened, with the tensors of their sources.
pub struct Bases {
    /// Each archive, and how the archive being written names it.
    archives: Vec<(Archive, BaseEntry)>,
    /// Each tensor name of the archives matched by name, with the first
    /// archive (in the given order) that has it.
    tensors: HashMap<String, (u32, TensorInfo)>,
    /// With deduplication, each tensor by its content: per dtype and length,
    /// per chunk length the fingerprint of its chunks' checksums (see
    /// [`Archive::fingerprint`]), with the first archive that has it and
    /// where, preferring one that holds it plainly (so that references do
    /// not chain). A tensor is looked up by reading it once per chunk length
    /// stored for its dtype and length, and only those.
    contents: HashMap<Kind, BTreeMap<u64, HashMap<u64, Holder>>>,
    /// What the archive being written references so far, kept within what
    /// a reader opens (see [`Admitted`]).
    admitted: Admitted,
    /// The row maps made so far, numbered in order.
    maps: Vec<Gathered>,
    /// The base tensors decoded for row maps, by base and start.
    held: HashMap<(u32, u64), Arc<Vec<u8>>>,
}

/// A tensor's dtype and length in bytes. With its fingerprint at a chunk
/// length, what identifies its content (a hint: a match is coded as a
/// residual like any other, so a collision costs size, never correctness).
type Kind = (String, u64);

/// Which base holds a content, where in its source, and whether its chunks
/// there are its own (not references to a base of its own).
#[derive(Clone, Copy)]
struct Holder {
    which: u32,
    start: u64,
    plain: bool,
}

/// Where the bases of a pack come from.
#[derive(Clone, Debug, Default)]
pub struct BaseSources {
    /// Archives whose tensors are matched by name (and with `dedup` by
    /// content too), in order of preference.
    pub named: Vec<PathBuf>,
    /// Archives whose tensors are matched by content only (with `dedup`):
    /// the store being packed into.
    pub store: Vec<PathBuf>,
    /// Match tensors by content.
    pub dedup: bool,
    /// Opens the bases where they are not local files (archives in object
    /// storage, read where they are stored); None: local files.
    pub opener: Option<BaseOpener>,
    /// Where the archive being written will be read, if not where it is
    /// written (an upload): it names its bases relative to that.
    pub written_as: Option<PathBuf>,
}

/// Opens base archives by path (see [`BaseSources::opener`]).
#[derive(Clone)]
pub struct BaseOpener(pub Arc<dyn SourceOpener + Send>);

impl std::fmt::Debug for BaseOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BaseOpener")
    }
}

impl Bases {
    /// Opens the archives of `sources` as bases of the archive to be written
    /// at `dst`, which will name each by its path relative to `dst`'s folder.
    /// Where several have a tensor of one name, the first is its base. With
    /// `dedup`, tensors are indexed by content from the archives' indexes
    /// (nothing is decoded but their headers). An archive that needs `dst`
    /// (which is being rewritten) is left out: referencing it would make a
    /// cycle.
    pub fn open(sources: &BaseSources, dst: &Path) -> Result<Bases> {
        let dst = sources.written_as.as_deref().unwrap_or(dst);
        let rewritten = match sources.opener {
            Some(_) => Some(dst.to_path_buf()),
            None => dst.canonicalize().ok(),
        };
        let folder = dst.parent().filter(|f| !f.as_os_str().is_empty());
        let folder = folder.unwrap_or(Path::new("."));
        let mut bases = Bases {
            archives: Vec::new(),
            tensors: HashMap::new(),
            contents: HashMap::new(),
            admitted: Admitted::default(),
            maps: Vec::new(),
            held: HashMap::new(),
        };
        let store = sources.store.iter().filter(|_| sources.dedup);
        let named = sources.named.len();
        for (k, path) in sources.named.iter().chain(store).enumerate() {
            // Read with positional reads, not a map: a base truncated while
            // the pack reads it is then an error naming it, not a SIGBUS.
            let archive = match &sources.opener {
                Some(opener) => Archive::open_with(path, opener.0.as_ref())?,
                None => Archive::open_unmapped(path)?,
            };
            if rewritten.as_deref().is_some_and(|d| needs(&archive, d)) {
                continue;
            }
            if k < named {
                warn_if_too_deep(&archive, dst);
            }
            let which = bases.archives.len() as u32;
            for t in source_tensors(&archive)? {
                if sources.dedup {
                    bases.index_content(&archive, which, &t);
                }
                if k < named {
                    bases.tensors.entry(t.name.clone()).or_insert((which, t));
                }
            }
            let entry = BaseEntry {
                sha256: archive.sha256(),
                source_len: archive.len(),
                path: relative_path(folder, path, sources.opener.is_none())?,
            };
            bases.archives.push((archive, entry));
        }
        Ok(bases)
    }

    /// Adds tensor `t` of base `which` to the index by content.
    fn index_content(&mut self, archive: &Archive, which: u32, t: &TensorInfo) {
        let Some((print, step)) = archive.fingerprint(t.start..t.end) else {
            return;
        };
        let chunks = archive.chunk_at(t.start)..=archive.chunk_at(t.end - 1);
        let holder = Holder {
            which,
            start: t.start,
            plain: archive.chunks()[chunks].iter().all(|c| c.base.is_none()),
        };
        let kind = (t.dtype.clone(), t.end - t.start);
        let prints = self.contents.entry(kind).or_default().entry(step);
        let held = prints.or_default().entry(print).or_insert(holder);
        if holder.plain && !held.plain {
            *held = holder;
        }
    }

    /// How the archive being written names base `which`.
    pub fn entry(&self, which: u32) -> &BaseEntry {
        &self.archives[which as usize].1
    }

    /// Where a base has `t`'s bytes: a tensor of its name, dtype and shape,
    /// or else (with deduplication) of its dtype and content; or else rows
    /// of a base tensor of its dtype and row shape, as a row map (see
    /// [`Bases::rows_of`]). `fingerprint(step)` gives the fingerprint of
    /// `t`'s bytes cut into chunks of `step` bytes, `read(offset, buffer)`
    /// its bytes. A base is only taken while a reader can still open all
    /// the bases taken (see [`Admitted`]).
    pub fn offset_of(
        &mut self,
        t: &TensorInfo,
        mut fingerprint: impl FnMut(u64) -> Result<u64>,
        read: impl FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<Option<Origin>> {
        let at = |which: u32, offset: u64| Origin {
            which,
            map: None,
            offset,
        };
        if let Some((which, b)) = self.tensors.get(&t.name) {
            let same = b.dtype == t.dtype && b.shape == t.shape;
            let load = self.archives[*which as usize].0.bases_load();
            if same && b.end - b.start == t.end - t.start && self.admitted.admit(*which, load) {
                return Ok(Some(at(*which, b.start)));
            }
        }
        let kind = (t.dtype.clone(), t.end - t.start);
        let steps = self.contents.get(&kind).filter(|_| t.start < t.end);
        for (&step, prints) in steps.into_iter().flatten() {
            if let Some(&held) = prints.get(&fingerprint(step)?) {
                let load = self.archives[held.which as usize].0.bases_load();
                if self.admitted.admit(held.which, load) {
                    return Ok(Some(at(held.which, held.start)));
                }
            }
        }
        self.rows_of(t, read)
    }

    /// A row map of `t`'s rows in the base tensor of its name where that has
    /// its dtype and row shape, or else in one of a few others that have
    /// (the nearest in row count first, where no base has a tensor of its
    /// name), if enough of them are found (see [`find_rows`]).
    fn rows_of(
        &mut self,
        t: &TensorInfo,
        mut read: impl FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<Option<Origin>> {
        let Some(row_len) = row_len(t) else {
            return Ok(None);
        };
        for (which, b) in self.row_candidates(t) {
            let load = self.archives[which as usize].0.bases_load();
            if !self.admitted.fits(which, load) {
                continue;
            }
            let Some(bytes) = self.hold(which, &b)? else {
                continue;
            };
            let base = BaseRows::new(&bytes, row_len as usize);
            let same_name = b.name == t.name;
            let found = find_rows(&base, t.shape[0], same_name, &mut read)?;
            drop(base);
            let Some(runs) = found else {
                continue;
            };
            let map = RowMap::new(which, b.start, row_len, runs).expect("rows of a tensor");
            self.admitted.admit(which, load);
            self.held.insert((which, b.start), bytes.clone());
            self.maps.push(Gathered { map, bytes });
            return Ok(Some(Origin {
                which,
                map: Some(self.maps.len() as u32 - 1),
                offset: 0,
            }));
        }
        Ok(None)
    }

    /// The base tensors `t`'s rows may be among: the one of its name if it
    /// has `t`'s dtype and row shape but not its shape; where no base has a
    /// tensor of its name, the [`ROW_CANDIDATES`] of its dtype and row shape
    /// nearest its row count.
    fn row_candidates(&self, t: &TensorInfo) -> Vec<(u32, TensorInfo)> {
        let like = |b: &TensorInfo| {
            b.dtype == t.dtype && b.shape.len() >= 2 && b.shape[1..] == t.shape[1..]
        };
        if let Some((which, b)) = self.tensors.get(&t.name) {
            let fits = like(b) && b.shape != t.shape && row_len(b).is_some();
            return fits.then(|| (*which, b.clone())).into_iter().collect();
        }
        let mut others: Vec<_> = (self.tensors.values())
            .filter(|(_, b)| like(b) && row_len(b).is_some())
            .map(|(which, b)| (*which, b.clone()))
            .collect();
        others.sort_by_key(|(which, b)| (b.shape[0].abs_diff(t.shape[0]), *which, b.start));
        others.truncate(ROW_CANDIDATES);
        others
    }

    /// The bytes of base `which`'s tensor `b`, decoded (each chunk checked),
    /// unless holding them besides those held would exceed
    /// [`MAX_HELD_BYTES`].
    fn hold(&mut self, which: u32, b: &TensorInfo) -> Result<Option<Arc<Vec<u8>>>> {
        if let Some(bytes) = self.held.get(&(which, b.start)) {
            return Ok(Some(bytes.clone()));
        }
        let held: u64 = self.held.values().map(|b| b.len() as u64).sum();
        if held + (b.end - b.start) > MAX_HELD_BYTES {
            return Ok(None);
        }
        let archive = &self.archives[which as usize].0;
        let mut bytes = vec![0u8; (b.end - b.start) as usize];
        // In pieces, on every thread: a vocabulary's embedding is large.
        let pieces = bytes.par_chunks_mut(4 << 20).enumerate();
        pieces.try_for_each(|(i, out)| {
            archive
                .read_at(b.start + (i as u64) * (4 << 20), out)
                .map(drop)
        })?;
        Ok(Some(Arc::new(bytes)))
    }

    /// The byte ranges of a tensor of `len` bytes at `origin` that are cut
    /// into chunks of `step` bytes apart (see [`sections`]): at runs of new
    /// rows of a quarter of a chunk or more.
    pub fn sections(&self, origin: Option<Origin>, len: u64, step: u64) -> Vec<(u64, u64)> {
        match origin.and_then(|o| o.map) {
            Some(m) => sections(self.map(m), step / 4),
            None => vec![(0, len)],
        }
    }

    /// Row map `map` of the pack, its base numbered as the pack numbers
    /// bases.
    pub fn map(&self, map: u32) -> &RowMap {
        &self.maps[map as usize].map
    }
    /// The length of the base's chunk that starts at `origin`, if one does
    /// (an empty tensor at the end of the base has none); for a row map,
    /// at its base tensor's start.
    pub fn chunk_at(&self, origin: Origin) -> Option<u64> {
        let offset = match origin.map {
            Some(m) => self.map(m).origin,
            None => origin.offset,
        };
        let archive = &self.archives[origin.which as usize].0;
        if offset >= archive.len() {
            return None;
        }
        let range = archive.chunk_range(archive.chunk_at(offset));
        (range.start == offset).then(|| range.end - range.start)
    }

    /// The base's bytes from `origin`, each chunk checked; a row map's from
    /// its base tensor's decoded bytes.
    pub fn read(&self, origin: Origin, out: &mut [u8]) -> Result<()> {
        let Some(m) = origin.map else {
            let archive = &self.archives[origin.which as usize].0;
            return archive.read_at(origin.offset, out).map(|_| ());
        };
        let Gathered { map, bytes } = &self.maps[m as usize];
        for (at, n, from) in map.pieces(origin.offset, out.len() as u64) {
            let piece = &mut out[at as usize..(at + n) as usize];
            match from {
                Some(from) => {
                    let from = (from - map.origin) as usize;
                    piece.copy_from_slice(&bytes[from..from + piece.len()]);
                }
                None => piece.fill(0),
            }
        }
        Ok(())
    }
}

/// The bytes of one row of `t` (its first dimension's), for a tensor of at
/// least two dimensions whose rows are whole bytes.
fn row_len(t: &TensorInfo) -> Option<u64> {
    let (len, rows) = (t.end - t.start, *t.shape.first()?);
    let whole = t.shape.len() >= 2 && rows > 0 && len % rows == 0 && len > 0;
    whole.then(|| len / rows)
}

/// Says so when the base `archive` (given by name) nests too deep for an
/// archive coded against it to be read: `dst` is then packed without it.
fn warn_if_too_deep(archive: &Archive, dst: &Path) {
    let levels = archive.bases_load().1;
    if !Admitted::deep_enough(levels) {
        log::warn!(
            "{}: its bases nest {levels} deep, and an archive coded against it would \
             nest deeper than {MAX_BASE_DEPTH}, which no reader opens: {} is packed \
             without it",
            archive.path().display(),
            dst.display()
        );
    }
}

/// Whether one of `archive`'s bases, or of theirs, is the file `target`
/// (a canonical path).
fn needs(archive: &Archive, target: &Path) -> bool {
    let is_target = |p: &Path| p == target || p.canonicalize().is_ok_and(|p| p == target);
    (archive.bases().iter()).any(|b| is_target(b.path()) || needs(b, target))
}

/// The bases an archive being written references, kept so that a reader
/// can open it: at most [`MAX_OPENED_BASES`] archives opened in all, and
/// chains shorter than [`MAX_BASE_DEPTH`].
#[derive(Default)]
struct Admitted {
    taken: BTreeSet<u32>,
    opened: usize,
}

impl Admitted {
    /// Whether an archive can reference a base whose bases nest `levels` deep.
    fn deep_enough(levels: usize) -> bool {
        levels + 2 < MAX_BASE_DEPTH
    }

    /// Whether base `which`, which opens `opened` archives `levels` deep
    /// (see [`Archive::bases_load`]), is, or could now be, referenced.
    fn fits(&self, which: u32, (opened, levels): (usize, usize)) -> bool {
        self.taken.contains(&which)
            || (self.opened + 1 + opened <= MAX_OPENED_BASES && Self::deep_enough(levels))
    }

    /// Whether base `which` (see [`Admitted::fits`]) is, or can now be,
    /// referenced; it is from now on if it can.
    fn admit(&mut self, which: u32, (opened, levels): (usize, usize)) -> bool {
        if self.taken.contains(&which) {
            return true;
        }
        let fits = self.fits(which, (opened, levels));
        if fits {
            self.taken.insert(which);
            self.opened += 1 + opened;
        }
        fits
    }
}

/// The tensors of an archive's source, from its archived header.
fn source_tensors(archive: &Archive) -> Result<Vec<TensorInfo>> {
    let layout = archive.source_layout().map_err(|reason| {
        let reason = format!("cannot be a base: its source is not safetensors: {reason}");
        Error::invalid(archive.path(), reason)
    })?;
    Ok(layout.tensors)
}

/// `to` as a `/`-separated path relative to the folder `from`: local paths
/// taken from their canonical forms (`to` must exist; `from` is the folder a
/// new archive will be written in), or else URLs of one store
/// (`s3://BUCKET/...`), whose scheme and bucket they must share.
fn relative_path(from: &Path, to: &Path, local: bool) -> Result<String> {
    let (from, target) = match local {
        true => (from.canonicalize().at(from)?, to.canonicalize().at(to)?),
        false => (from.to_path_buf(), to.to_path_buf()),
    };
    let (a, b): (Vec<Component>, Vec<Component>) =
        (from.components().collect(), target.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    if !local && common < 2 {
        let reason = format!(
            "a base in object storage must be in the store the archive is written to ({})",
            from.display()
        );
        return Err(Error::invalid(to, reason));
    }
    let mut rel = PathBuf::new();
    (common..a.len()).for_each(|_| rel.push(".."));
    b[common..].iter().for_each(|c| rel.push(c));
    rel.to_str()
        .map(|s| s.replace(std::path::MAIN_SEPARATOR, "/"))
        .filter(|s| valid_base_path(s))
        .ok_or_else(|| Error::invalid(to, "cannot be named as a base: its path is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{pack_file, PackOptions};

    #[test]
    fn relative_paths_climb_to_the_common_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("base/sub")).unwrap();
        std::fs::create_dir_all(root.join("tuned")).unwrap();
        std::fs::write(root.join("base/sub/m.brv"), b"x").unwrap();
        let rel = relative_path(&root.join("tuned"), &root.join("base/sub/m.brv"), true);
        assert_eq!(rel.unwrap(), "../base/sub/m.brv");
        let here = relative_path(&root.join("base/sub"), &root.join("base/sub/m.brv"), true);
        assert_eq!(here.unwrap(), "m.brv");
        // URLs of one store, as they are written.
        let url = |from: &str, to: &str| relative_path(Path::new(from), Path::new(to), false);
        let rel = url("s3://models/runs/7", "s3://models/base/m.brv").unwrap();
        assert_eq!(rel, "../../base/m.brv");
        let other = url("s3://models/runs", "s3://other/base/m.brv").unwrap_err();
        assert!(
            other.to_string().contains("s3://other/base/m.brv"),
            "{other}"
        );
        assert!(url("s3://models/a", "gs://models/a/m.brv").is_err());
    }

    /// has one of its dtype and length: reading it once per chunk length
    /// of every tensor in the store made `--dedup` cost a multiple of the
    /// pack.
    #[test]
    fn only_tensors_of_a_stored_dtype_and_length_are_read_to_be_matched() {
        let dir = tempfile::tempdir().unwrap();
        let header = r#"{"a":{"dtype":"F32","shape":[1024],"data_offsets":[0,4096]},"b":{"dtype":"F32","shape":[3],"data_offsets":[4096,4108]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend((0..4108u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
        let (src, brv) = (dir.path().join("m.safetensors"), dir.path().join("m.brv"));
        std::fs::write(&src, &bytes).unwrap();
        pack_file(&src, &brv, &PackOptions::default(), &|_| {}).unwrap();
        let sources = BaseSources {
            store: vec![brv],
            dedup: true,
            ..BaseSources::default()
        };
        let mut bases = Bases::open(&sources, &dir.path().join("out.brv")).unwrap();
        let tensor = |name: &str, dtype: &str, len: u64| TensorInfo {
            name: name.into(),
            dtype: dtype.into(),
            shape: vec![len / 4],
            start: 100,
            end: 100 + len,
        };
        let reads = std::cell::Cell::new(0);
        let count = |_| {
            reads.set(reads.get() + 1);
            Ok(0)
        };
        let no_read = |_: u64, _: &mut [u8]| unreachable!("a tensor of one dimension has no rows");
        for t in [tensor("x", "F32", 8192), tensor("y", "I32", 4096)] {
            assert_eq!(bases.offset_of(&t, count, no_read).unwrap(), None);
        }
        assert_eq!(
            reads.get(),
            0,
            "no stored tensor has their dtype and length"
        );
        bases
            .offset_of(&tensor("z", "F32", 4096), count, no_read)
            .unwrap();
        assert_eq!(reads.get(), 1, "one chunk length to look it up with");
    }

    #[test]
    fn a_base_truncated_while_packing_against_it_is_an_error_not_a_signal() {
        let dir = tempfile::tempdir().unwrap();
        let header = r#"{"a":{"dtype":"F32","shape":[65536],"data_offsets":[0,262144]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend((0..262144u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
        let (src, brv) = (dir.path().join("m.safetensors"), dir.path().join("m.brv"));
        std::fs::write(&src, &bytes).unwrap();
        let options = PackOptions {
            chunk_size: 4096,
            adapt_chunks: false,
            ..PackOptions::default()
        };
        pack_file(&src, &brv, &options, &|_| {}).unwrap();
        let sources = BaseSources {
            named: vec![brv.clone()],
            ..BaseSources::default()
        };
        let bases = Bases::open(&sources, &dir.path().join("out.brv")).unwrap();
        // Truncated in place after it was opened: its records are gone.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&brv)
            .unwrap()
            .set_len(100)
            .unwrap();
        let mut out = vec![0u8; 4096];
        let origin = Origin {
            which: 0,
            map: None,
            offset: 200_000,
        };
        let err = bases.read(origin, &mut out).unwrap_err().to_string();
        assert!(err.contains("m.brv"), "{err}");
    }
}
