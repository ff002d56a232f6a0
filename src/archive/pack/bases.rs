//! Finding each tensor's base: the `--base` archives matched by tensor
//! name (a fine-tune's tensors against the model it was tuned from), and
//! with deduplication any archive's tensors matched by content, kept within
//! the bases a reader opens.

#![forbid(unsafe_code)]

use crate::archive::format::{valid_base_path, BaseEntry};
use crate::archive::reader::{Archive, MAX_BASE_DEPTH, MAX_OPENED_BASES};
use crate::error::{Error, IoContext, Result};
use crate::safetensors::TensorInfo;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

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
        let rewritten = dst.canonicalize().ok();
        let folder = dst.parent().filter(|f| !f.as_os_str().is_empty());
        let folder = folder.unwrap_or(Path::new("."));
        let mut bases = Bases {
            archives: Vec::new(),
            tensors: HashMap::new(),
            contents: HashMap::new(),
            admitted: Admitted::default(),
        };
        let store = sources.store.iter().filter(|_| sources.dedup);
        let named = sources.named.len();
        for (k, path) in sources.named.iter().chain(store).enumerate() {
            // Read with positional reads, not a map: a base truncated while
            // the pack reads it is then an error naming it, not a SIGBUS.
            let archive = Archive::open_unmapped(path)?;
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
                path: relative_path(folder, path)?,
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

    /// Which base has a tensor of `t`'s name, dtype and shape, or else (with
    /// deduplication) of its dtype and content, and where its bytes start in
    /// that base's source; `fingerprint(step)` gives the fingerprint of
    /// `t`'s bytes cut into chunks of `step` bytes. A base is only taken
    /// while a reader can still open all the bases taken (see [`Admitted`]).
    pub fn offset_of(
        &mut self,
        t: &TensorInfo,
        mut fingerprint: impl FnMut(u64) -> Result<u64>,
    ) -> Result<Option<(u32, u64)>> {
        if let Some((which, b)) = self.tensors.get(&t.name) {
            let same = b.dtype == t.dtype && b.shape == t.shape;
            let load = self.archives[*which as usize].0.bases_load();
            if same && b.end - b.start == t.end - t.start && self.admitted.admit(*which, load) {
                return Ok(Some((*which, b.start)));
            }
        }
        let kind = (t.dtype.clone(), t.end - t.start);
        let Some(steps) = self.contents.get(&kind).filter(|_| t.start < t.end) else {
            return Ok(None);
        };
        for (&step, prints) in steps {
            if let Some(&held) = prints.get(&fingerprint(step)?) {
                let load = self.archives[held.which as usize].0.bases_load();
                if self.admitted.admit(held.which, load) {
                    return Ok(Some((held.which, held.start)));
                }
            }
        }
        Ok(None)
    }

    /// The length of base `which`'s chunk that starts at `offset`, if one
    /// does (an empty tensor at the end of the base has none).
    pub fn chunk_at(&self, which: u32, offset: u64) -> Option<u64> {
        let archive = &self.archives[which as usize].0;
        if offset >= archive.len() {
            return None;
        }
        let range = archive.chunk_range(archive.chunk_at(offset));
        (range.start == offset).then(|| range.end - range.start)
    }

    /// Base `which`'s source bytes from `offset`, each chunk checked.
    pub fn read(&self, which: u32, offset: u64, out: &mut [u8]) -> Result<()> {
        let archive = &self.archives[which as usize].0;
        archive.read_at(offset, out).map(|_| ())
    }
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
    archive
        .bases()
        .iter()
        .any(|b| b.path().canonicalize().is_ok_and(|p| p == target) || needs(b, target))
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
    /// (see [`Archive::bases_load`]), is, or can now be, referenced.
    fn admit(&mut self, which: u32, (opened, levels): (usize, usize)) -> bool {
        if self.taken.contains(&which) {
            return true;
        }
        let fits = self.opened + 1 + opened <= MAX_OPENED_BASES && Self::deep_enough(levels);
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

/// `to` as a `/`-separated path relative to the folder `from`, both taken
/// from their canonical forms (`to` must exist; `from` is the folder a new
/// archive will be written in).
fn relative_path(from: &Path, to: &Path) -> Result<String> {
    let from = from.canonicalize().at(from)?;
    let target = to.canonicalize().at(to)?;
    let (a, b): (Vec<Component>, Vec<Component>) =
        (from.components().collect(), target.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
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
        let rel = relative_path(&root.join("tuned"), &root.join("base/sub/m.brv")).unwrap();
        assert_eq!(rel, "../base/sub/m.brv");
        let here = relative_path(&root.join("base/sub"), &root.join("base/sub/m.brv")).unwrap();
        assert_eq!(here, "m.brv");
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
        for t in [tensor("x", "F32", 8192), tensor("y", "I32", 4096)] {
            assert_eq!(bases.offset_of(&t, count).unwrap(), None);
        }
        assert_eq!(
            reads.get(),
            0,
            "no stored tensor has their dtype and length"
        );
        bases.offset_of(&tensor("z", "F32", 4096), count).unwrap();
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
        let err = bases.read(0, 200_000, &mut out).unwrap_err().to_string();
        assert!(err.contains("m.brv"), "{err}");
    }
}
