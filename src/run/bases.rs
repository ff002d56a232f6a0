//! What each file of one `pack` run is coded against: the `--base`
//! archives (for a folder of them, the one at the output's own path first)
//! and, when matching by content (`--dedup`), the archives already in the
//! store and the outputs the run packed before it. The command line and the
//! Python package both plan their runs with it.

#![forbid(unsafe_code)]

use super::tree::{self, Action, Job};
use crate::archive::{Archive, BaseSources, MAX_OPENED_BASES};
use crate::error::{Error, IoContext, Result};
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
            ..BaseSources::default()
        }
    }
}

/// The archives under a base folder (or the base archive itself): at most
/// as many as a reader opens for one archive.
pub fn base_archives(base: &Path) -> Result<Vec<PathBuf>> {
    std::fs::metadata(base).at(base)?;
    let found = tree::find(base, "brv")?;
    if found.len() > MAX_OPENED_BASES {
        let reason = format!(
            "holds {} archives; at most {MAX_OPENED_BASES} can be bases (give a folder of fewer)",
            found.len()
        );
        return Err(Error::invalid(base, reason));
    }
    Ok(found)
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
    found.retain(|a| !a.canonicalize().is_ok_and(|a| outputs.contains(&a)));
    found.retain(|a| match matchable(a) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("{e}; not matched against (--dedup)");
            false
        }
    });
    if found.len() > MAX_STORE_ARCHIVES {
        let reason = format!(
            "holds {} archives; --dedup indexes at most {MAX_STORE_ARCHIVES}",
            found.len()
        );
        return Err(Error::invalid(folder, reason));
    }
    Ok(found)
}

/// Whether the archive at `path` can be read as a base to match against:
/// one of the store's files may be anything (a damaged or foreign file, a
/// dangling link, an archive of a newer version or whose base is gone), and
/// such a file is left out rather than failing every pack that looks.
fn matchable(path: &Path) -> Result<()> {
    let archive = Archive::open_unmapped(path)?;
    archive.source_layout().map_err(|reason| {
        Error::invalid(path, format!("its source is not safetensors: {reason}"))
    })?;
    Ok(())
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

/// Most archives whose bases are read to find what an overwritten archive
/// is the base of (each is opened with its bases).
const MAX_SCANNED_DEPENDANTS: usize = 4096;

/// Refuses a run of `jobs` (packing `src` into `dst`, matching by content
/// against `store` if given) that would replace an archive other archives
/// need as their base with one of another source: they would all become
/// unreadable. Archives looked at: those of DST's tree (a folder SRC) or
/// folder (a file SRC), and of the store. An archive of the same source
/// (re-packed at another level) is no change to them and goes ahead.
pub fn refuse_orphaning(src: &Path, dst: &Path, store: Option<&Path>, jobs: &[Job]) -> Result<()> {
    let replaced: Vec<(&Job, PathBuf)> = jobs
        .iter()
        .filter(|j| j.action == Action::Transform)
        .filter_map(|j| Some((j, j.dst.canonicalize().ok()?)))
        .collect();
    if replaced.is_empty() {
        return Ok(());
    }
    let folder = match src.is_dir() {
        true => dst,
        false => replaced[0].0.dst.parent().unwrap_or(Path::new("")),
    };
    let scanned = neighbours(src.is_dir(), folder, store)?;
    let needed: Vec<(PathBuf, Vec<PathBuf>)> = scanned
        .iter()
        .filter_map(|path| {
            let archive = Archive::open_unmapped(path).ok()?;
            let bases = archive.bases().iter();
            Some((
                path.clone(),
                bases.filter_map(|b| b.path().canonicalize().ok()).collect(),
            ))
        })
        .collect();
    for (job, target) in replaced {
        let users: Vec<&Path> = (needed.iter())
            .filter(|(_, bases)| bases.contains(&target))
            .map(|(path, _)| path.as_path())
            .collect();
        if !users.is_empty() && !same_source(job)? {
            return Err(orphaning(&job.dst, &users));
        }
    }
    Ok(())
}

/// Whether the archive at `job.dst` holds `job.src` already.
fn same_source(job: &Job) -> Result<bool> {
    let Ok(old) = Archive::open_unmapped(&job.dst) else {
        return Ok(false);
    };
    Ok(old.len() == job.len && old.sha256() == crate::input::sha256_of(&job.src)?)
}

fn orphaning(base: &Path, users: &[&Path]) -> Error {
    let mut named: Vec<String> = users
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    if users.len() > 5 {
        named.push(format!("and {} more", users.len() - 5));
    }
    let reason = format!(
        "is the base of {} other archive(s) ({}), which could no longer be read if it \
         held another source; unpack or `brevis detach` them first, or pass \
         --break-dependants to replace it anyway",
        users.len(),
        named.join(", ")
    );
    Error::invalid(base, reason)
}

/// The archives that may need an output of a run (see [`refuse_orphaning`]):
/// those under `folder` (DST, for a folder SRC) or directly in it (the
/// output's folder, for a file SRC), and the store's.
fn neighbours(tree: bool, folder: &Path, store: Option<&Path>) -> Result<Vec<PathBuf>> {
    let folder = match folder.as_os_str().is_empty() {
        true => Path::new("."),
        false => folder,
    };
    let mut found = match (tree, folder.is_dir()) {
        (_, false) => Vec::new(),
        (true, true) => tree::find(folder, "brv")?,
        (false, true) => archives_in(folder)?,
    };
    if let Some(store) = store.filter(|s| s.is_dir()) {
        found.extend(tree::find(store, "brv")?);
    }
    found.sort();
    found.dedup();
    if found.len() > MAX_SCANNED_DEPENDANTS {
        let reason = format!(
            "holds {} archives; at most {MAX_SCANNED_DEPENDANTS} are read to find the \
             archives that need the ones being overwritten",
            found.len()
        );
        return Err(Error::invalid(folder, reason));
    }
    Ok(found)
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
