//! What each file of one `pack` run is coded against: the `--base`
//! archives (for a folder of them, the one at the output's own path first)
//! and, when matching by content (`--dedup`), the archives already in the
//! store and the outputs the run packed before it. The command line and the
//! Python package both plan their runs with it.

#![forbid(unsafe_code)]

use super::{base_archives, BaseSources};
use crate::error::{Error, IoContext, Result};
use crate::tree::{self, Action, Job};
use std::path::{Path, PathBuf};

/// Most archives a store may hold for matching by content (each is opened
/// and its index read for every file packed).
const MAX_STORE_ARCHIVES: usize = 1024;

/// The bases of a pack run of `jobs` from SRC into DST.
#[derive(Default)]
pub struct RunBases {
    /// DST, which outputs' paths are relative to.
    dst: PathBuf,
    /// The `--base` given (an archive or a folder) and the archives it holds.
    base: Option<(PathBuf, Vec<PathBuf>)>,
    /// With matching by content: the archives in the store before the run
    /// that it does not rewrite.
    store: Option<Vec<PathBuf>>,
}

impl RunBases {
    /// The bases of packing `src` into `dst` as `jobs` do: against `base`
    /// (an archive or a folder of archives) if given; with `dedup`, matching
    /// by content too, against the archives of the store (`Some(STORE)`: its
    /// tree; `None`: DST's tree for a folder SRC, the archives beside DST
    /// for a file) without the outputs of `jobs`, which the run may rewrite.
    pub fn new(
        src: &Path,
        dst: &Path,
        base: Option<&Path>,
        dedup: Option<Option<&Path>>,
        jobs: &[Job],
    ) -> Result<RunBases> {
        let base = match base {
            Some(base) => Some((base.to_path_buf(), base_archives(base)?)),
            None => None,
        };
        let store = match dedup {
            Some(store) => Some(store_archives(src, dst, store, jobs)?),
            None => None,
        };
        Ok(RunBases {
            dst: dst.to_path_buf(),
            base,
            store,
        })
    }

    /// What `job` (one of the run's `jobs`) is matched against.
    pub fn of(&self, job: &Job, jobs: &[Job]) -> BaseSources {
        BaseSources {
            named: match &self.base {
                Some((base, found)) => bases_of(&self.dst, base, found, &job.dst),
                None => Vec::new(),
            },
            store: match &self.store {
                Some(kept) => before(kept, job, jobs),
                None => Vec::new(),
            },
            dedup: self.store.is_some(),
        }
    }
}

/// The base archives of `out`, an output of packing into `dst` against
/// `base`: `base` itself if it is an archive; for a folder, every archive
/// under it (`found`), the one at `out`'s path relative to `dst` (or at a lone
/// output's file name) first, so that its tensors win where names repeat.
fn bases_of(dst: &Path, base: &Path, found: &[PathBuf], out: &Path) -> Vec<PathBuf> {
    if !base.is_dir() {
        return vec![base.to_path_buf()];
    }
    let rel = out
        .strip_prefix(dst)
        .ok()
        .filter(|r| !r.as_os_str().is_empty());
    let same = rel
        .or_else(|| out.file_name().map(Path::new))
        .map(|rel| base.join(rel));
    let mut bases = found.to_vec();
    if let Some(k) = bases.iter().position(|b| Some(b) == same.as_ref()) {
        let first = bases.remove(k);
        bases.insert(0, first);
    }
    bases
}

/// The archives already in the store (see [`RunBases::new`]), without the
/// outputs of `jobs`.
fn store_archives(
    src: &Path,
    dst: &Path,
    store: Option<&Path>,
    jobs: &[Job],
) -> Result<Vec<PathBuf>> {
    let mut found = match store {
        Some(store) if !store.is_dir() => {
            return Err(Error::invalid(store, "--dedup=STORE: not a directory"));
        }
        Some(store) => tree::find(store, "brv")?,
        None if src.is_dir() => match dst.is_dir() {
            true => tree::find(dst, "brv")?,
            false => Vec::new(),
        },
        None => {
            let folder = dst.parent().filter(|p| !p.as_os_str().is_empty());
            let folder = folder.unwrap_or(Path::new("."));
            match folder.is_dir() {
                true => archives_in(folder)?,
                false => Vec::new(),
            }
        }
    };
    let folder = store.unwrap_or(dst);
    // Compared as canonical paths: an archive the run rewrites must not
    // become a base of anything, least of all of itself.
    let outputs: Vec<PathBuf> = jobs
        .iter()
        .filter_map(|j| j.dst.canonicalize().ok())
        .collect();
    found.retain(|a| a.canonicalize().is_ok_and(|a| !outputs.contains(&a)));
    if found.len() > MAX_STORE_ARCHIVES {
        let reason = format!(
            "holds {} archives; --dedup indexes at most {MAX_STORE_ARCHIVES}",
            found.len()
        );
        return Err(Error::invalid(folder, reason));
    }
    Ok(found)
}

/// What `job` is matched against by content: the archives `kept`, then the
/// outputs of the jobs before it that exist (written by this run, or kept).
fn before(kept: &[PathBuf], job: &Job, jobs: &[Job]) -> Vec<PathBuf> {
    let earlier = jobs.iter().take_while(|j| !std::ptr::eq(*j, job));
    let written = earlier
        .filter(|j| j.action == Action::Transform && j.dst.is_file())
        .map(|j| j.dst.clone());
    kept.iter().cloned().chain(written).collect()
}

/// The archives directly in `folder` (not hidden: temporaries are).
fn archives_in(folder: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(folder).at(folder)? {
        let path = entry.at(folder)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with('.') && name.ends_with(".brv") && path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}
