//! Packing from and to object storage: `brevis pack s3://BUCKET/SRC
//! s3://BUCKET/DST` (either side may also be a local path). The jobs are
//! those of a local folder ([`tree::plan_listing`] on the listing), so a shard
//! takes the same share either way. Each source object is fetched to a local
//! temporary, packed (or copied) locally, and the result renamed into place
//! (local) or uploaded whole (store: one PUT or a multipart upload completed
//! only after every part is stored, so a killed run never leaves part of an
//! object under its final key).

#![forbid(unsafe_code)]

use super::shard;
use super::tree::{self, Action, Job};
use crate::archive::{verify, Archive, BaseOpener, BaseSources};
use crate::atomic::{is_temp_name, write_atomically};
use crate::error::{Error, IoContext, Result};
use crate::remote::object::{key_of, Opener, Remote};
use crate::remote::store::{is_remote, split_url, ObjectInfo, RemoteOptions, Store};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Memory cache for reading outputs' indexes by range.
const MEMORY: usize = 64 << 20;

/// One side of a run: a local path, or a store and the URL of a prefix
/// (or object) in it.
enum End {
    Local(PathBuf),
    Store(Arc<Remote>),
}

/// A pack run from or to object storage: the two sides of packing SRC into
/// DST, with what the store listings said about the sources and the outputs,
/// and a local folder for temporaries.
pub struct StoreRun {
    src: End,
    dst: End,
    /// Source objects by the URL written as the job's `src`.
    sources: HashMap<PathBuf, ObjectInfo>,
    /// Output objects by key, listed once.
    outputs: HashMap<String, ObjectInfo>,
    /// Where fetched sources and packed outputs wait, removed when dropped.
    work: PathBuf,
}

/// Whether either path names object storage.
pub fn involves_store(src: &Path, dst: &Path) -> bool {
    [src, dst].iter().any(|p| in_store(p))
}

fn url_of(path: &Path) -> Result<&str> {
    path.to_str()
        .ok_or_else(|| Error::invalid(path, "a store URL must be UTF-8"))
}

/// Whether `path` names object storage.
fn in_store(path: &Path) -> bool {
    path.to_str().is_some_and(is_remote)
}

impl End {
    /// The side `path` names: a local path, or a connection to a store.
    fn of(path: &Path, options: &RemoteOptions) -> Result<End> {
        if !in_store(path) {
            return Ok(End::Local(path.to_path_buf()));
        }
        let url = url_of(path)?;
        if url.starts_with("http") {
            return Err(Error::invalid(
                path,
                "pack reads and writes buckets (s3://, gs://, az://), not web servers",
            ));
        }
        let store = Store::connect(url, options.clone()).at(path)?;
        Ok(End::Store(Remote::new(store, MEMORY, None)))
    }
}

impl StoreRun {
    /// Plans packing `src` into `dst` (either a local path or an
    /// `s3://BUCKET[/PREFIX]` URL): the jobs, every one of them (existing
    /// outputs are for the caller to judge with [`StoreRun::exists`] and
    /// [`StoreRun::done_already`]).
    pub fn plan(
        src: &Path,
        dst: &Path,
        from_ext: &str,
        to_ext: &str,
        options: &RemoteOptions,
    ) -> Result<(StoreRun, Vec<Job>)> {
        let src_end = End::of(src, options)?;
        let dst_end = End::of(dst, options)?;
        let exts = (from_ext, to_ext);
        let Listing {
            jobs,
            sources,
            folder,
        } = match &src_end {
            End::Local(_) => local_jobs(src, dst, exts)?,
            End::Store(remote) => store_jobs(remote, src, dst, exts)?,
        };
        if let (End::Store(_), End::Store(_)) = (&src_end, &dst_end) {
            refuse_nested(src, dst)?;
        }
        let outputs = match &dst_end {
            End::Store(remote) => listed_outputs(remote, dst, folder, &jobs)?,
            End::Local(_) => HashMap::new(),
        };
        let pid = std::process::id();
        let work = work_folder(&dst_end, folder);
        remove_stale_work(&work);
        let run = StoreRun {
            src: src_end,
            dst: dst_end,
            sources,
            outputs,
            work: work.join(format!(".brevis-pack.tmp{pid}")),
        };
        Ok((run, jobs))
    }

    /// Whether `job`'s output exists.
    pub fn exists(&self, job: &Job) -> bool {
        match &self.dst {
            End::Local(_) => std::fs::symlink_metadata(&job.dst).is_ok(),
            End::Store(remote) => key_of(remote.store.root(), &job.dst)
                .is_ok_and(|key| self.outputs.contains_key(&key)),
        }
    }

    /// The length and modification time of `job`'s source.
    fn source(&self, job: &Job) -> Result<(u64, SystemTime)> {
        match &self.src {
            End::Local(_) => {
                let meta = std::fs::metadata(&job.src).at(&job.src)?;
                Ok((meta.len(), meta.modified().at(&job.src)?))
            }
            End::Store(_) => {
                let info = self.listed(job)?;
                Ok((info.len, info.modified))
            }
        }
    }

    fn listed(&self, job: &Job) -> Result<&ObjectInfo> {
        self.sources
            .get(&job.src)
            .ok_or_else(|| Error::invalid(&job.src, "not in the listing"))
    }

    /// Whether `job`'s output is already complete and of its source, as
    /// [`shard::done_already`] judges local ones. With a source in a store
    /// (whose SHA-256 is not known without fetching it all): a local output
    /// must also have the object's modification time (given to it when it
    /// was written). An output in a store must be at least as new as its
    /// source (to the second, as stores keep times) and of its length: an
    /// archive's index is read by range and must say so; a copy must be as
    /// long.
    pub fn done_already(&self, job: &Job) -> Result<bool> {
        let (len, modified) = self.source(job)?;
        match (&self.src, &self.dst) {
            (End::Local(_), End::Local(_)) => shard::done_already(job),
            (End::Store(_), End::Local(_)) => {
                let Ok(out) = std::fs::metadata(&job.dst) else {
                    return Ok(false);
                };
                if out.len() == 0 && len != 0 || out.modified().ok() != Some(modified) {
                    return Ok(false);
                }
                match job.action {
                    Action::Copy => Ok(out.len() == len),
                    Action::Transform => {
                        let Ok(archive) = Archive::open_unmapped(&job.dst) else {
                            return Ok(false);
                        };
                        Ok(archive.len() == len && verify(&archive, None, &|_| {}).is_ok())
                    }
                }
            }
            (_, End::Store(remote)) => {
                let key = key_of(remote.store.root(), &job.dst).at(&job.dst)?;
                let Some(out) = self.outputs.get(&key) else {
                    return Ok(false);
                };
                if out.modified < whole_seconds(modified) {
                    return Ok(false);
                }
                match job.action {
                    Action::Copy => Ok(out.len == len),
                    Action::Transform => {
                        let opener = Opener {
                            remote: remote.clone(),
                            known: Some(out.clone()),
                        };
                        let Ok(archive) = Archive::open_with(&job.dst, &opener) else {
                            return Ok(false);
                        };
                        Ok(archive.len() == len)
                    }
                }
            }
        }
    }

    /// Does `job`: `pack` packs a local source into a local archive and
    /// returns the archive's size. Returns the bytes written.
    pub fn run_job(
        &self,
        job: &Job,
        pack: impl FnOnce(&Path, &Path) -> Result<u64>,
    ) -> Result<u64> {
        if let End::Local(_) = self.dst {
            if let Some(parent) = job.dst.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).at(parent)?;
            }
        }
        // A copy from a store to a local folder goes straight to its place.
        if let (Action::Copy, End::Store(remote), End::Local(_)) =
            (job.action, &self.src, &self.dst)
        {
            let info = self.listed(job)?;
            return write_atomically(&job.dst, |tmp| fetch(remote, info, &job.src, tmp));
        }
        let fetched;
        let source = match &self.src {
            End::Local(_) => job.src.as_path(),
            End::Store(remote) => {
                std::fs::create_dir_all(&self.work).at(&self.work)?;
                fetched = Temporary(self.work.join("source"));
                fetch(remote, self.listed(job)?, &job.src, &fetched.0)?;
                fetched.0.as_path()
            }
        };
        // Errors name the source's URL, not its temporary.
        let named = |e: Error| e.renamed(source, &job.src);
        match (&self.dst, job.action) {
            (End::Local(_), Action::Copy) => {
                crate::atomic::copy_file(source, &job.dst).map_err(named)
            }
            (End::Local(_), Action::Transform) => pack(source, &job.dst).map_err(named),
            (End::Store(remote), _) => self.upload(remote, job, source, pack),
        }
    }

    /// Uploads `job`'s output to `remote`'s store whole: its source (at
    /// `source`, a local file) copied, or what `pack` makes of it in the work
    /// folder. Returns the bytes written; errors name the job's paths, not
    /// the temporaries'.
    fn upload(
        &self,
        remote: &Remote,
        job: &Job,
        source: &Path,
        pack: impl FnOnce(&Path, &Path) -> Result<u64>,
    ) -> Result<u64> {
        let key = key_of(remote.store.root(), &job.dst).at(&job.dst)?;
        let packed;
        let (upload, written) = match job.action {
            Action::Copy => (source, job.len),
            Action::Transform => {
                std::fs::create_dir_all(&self.work).at(&self.work)?;
                packed = Temporary(self.work.join("output"));
                let written = pack(source, &packed.0)
                    .map_err(|e| e.renamed(source, &job.src))
                    .map_err(|e| e.renamed(&packed.0, &job.dst))?;
                (packed.0.as_path(), written)
            }
        };
        remote.store.put_file(upload, &key).at(&job.dst)?;
        Ok(written)
    }
}

/// The base archive of a pack into a store (`pack --base URL`): an archive
/// in the store DST is in, read where it is stored, as the mount reads it.
pub struct StoreBase {
    url: PathBuf,
    opener: BaseOpener,
}

impl StoreBase {
    /// The base at `base` for packing into `dst`; an error naming `base` if
    /// the two are not in one store (an archive names its base by a path
    /// relative to its own) or `base` is not an archive there.
    pub fn new(base: &Path, dst: &Path, options: &RemoteOptions) -> Result<StoreBase> {
        let root = |path: &Path| match in_store(path) {
            true => split_url(url_of(path)?)
                .at(path)
                .map(|(root, _)| Some(root)),
            false => Ok(None),
        };
        let (at, into) = (root(base)?, root(dst)?);
        if at.is_none() || at != into {
            let reason = match into {
                Some(store) => format!("the base must be an archive in {store}, as DST is"),
                None => "a base in object storage needs DST in the same store \
                         (an archive names its base by a path relative to its own)"
                    .to_string(),
            };
            return Err(Error::invalid(base, reason));
        }
        let opener = crate::remote::opener(url_of(base)?, options.clone())?;
        // A missing or damaged base fails now, naming its URL.
        Archive::open_with(base, &opener)?;
        Ok(StoreBase {
            url: base.to_path_buf(),
            opener: BaseOpener(Arc::new(opener)),
        })
    }

    /// What `job`'s output is packed against.
    pub fn of(&self, job: &Job) -> BaseSources {
        BaseSources {
            named: vec![self.url.clone()],
            opener: Some(self.opener.clone()),
            written_as: Some(job.dst.clone()),
            ..BaseSources::default()
        }
    }
}

/// The jobs of a run, the source objects listed by the URL written as
/// their job's `src`, and whether SRC is a folder (or a prefix).
struct Listing {
    jobs: Vec<Job>,
    sources: HashMap<PathBuf, ObjectInfo>,
    folder: bool,
}

/// The jobs of a local SRC, `exts` the extensions renamed from and to.
fn local_jobs(src: &Path, dst: &Path, (from_ext, to_ext): (&str, &str)) -> Result<Listing> {
    let folder = std::fs::metadata(src).at(src)?.is_dir();
    let jobs = tree::plan(src, dst, from_ext, to_ext, tree::Existing::Overwrite)?;
    Ok(Listing {
        jobs,
        sources: HashMap::new(),
        folder,
    })
}

/// The jobs of SRC in `remote`'s store: those of the objects under its
/// prefix, or else of the one object it names.
fn store_jobs(remote: &Remote, src: &Path, dst: &Path, exts: (&str, &str)) -> Result<Listing> {
    let url = url_of(src)?;
    let (_, prefix) = split_url(url).at(src)?;
    let listed = remote.store.list_all(&prefix).at(src)?;
    let base = url.trim_end_matches('/');
    match listed.is_empty() {
        true => object_job(remote, (src, base, &prefix), dst, exts),
        false => prefix_jobs(listed, (base, &prefix), dst, exts),
    }
}

/// The job of the one object `prefix` (of SRC, written `base` without its
/// trailing '/'), as for a local file: into a folder DST under its new name.
fn object_job(
    remote: &Remote,
    (src, base, prefix): (&Path, &str, &str),
    dst: &Path,
    (from_ext, to_ext): (&str, &str),
) -> Result<Listing> {
    let single = match prefix.is_empty() {
        true => None,
        false => remote.store.head(prefix).at(src)?,
    };
    let Some(info) = single else {
        return Err(Error::invalid(src, "no objects under this prefix"));
    };
    let folder =
        dst.as_os_str().as_encoded_bytes().ends_with(b"/") || (!in_store(dst) && dst.is_dir());
    let out = match folder {
        true => dst.join(
            tree::renamed(Path::new(prefix), from_ext, to_ext)
                .unwrap_or_else(|| Path::new(prefix).file_name().unwrap_or_default().into()),
        ),
        false => dst.to_path_buf(),
    };
    let job = Job {
        src: PathBuf::from(base),
        dst: out,
        action: Action::Transform,
        len: info.len,
    };
    let sources = HashMap::from([(job.src.clone(), info)]);
    Ok(Listing {
        jobs: vec![job],
        sources,
        folder: false,
    })
}

/// The jobs of the objects `listed` under `prefix` (of SRC, written `base`
/// without its trailing '/'), as of a local folder of the same files.
fn prefix_jobs(
    listed: Vec<ObjectInfo>,
    (base, prefix): (&str, &str),
    dst: &Path,
    (from_ext, to_ext): (&str, &str),
) -> Result<Listing> {
    let mut sources = HashMap::new();
    let mut files = Vec::with_capacity(listed.len());
    for info in listed {
        let rel = match prefix.is_empty() {
            true => Some(info.key.as_str()),
            false => info
                .key
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('/')),
        };
        // Keys that are not plain relative paths ("a//b", "../x", a
        // trailing '/') have no place in a folder.
        let Some(rel) =
            rel.filter(|r| !r.is_empty() && r.split('/').all(|p| !matches!(p, "" | "." | "..")))
        else {
            log::warn!("{base}: skipping the key {}", info.key);
            continue;
        };
        files.push((PathBuf::from(rel), info.len));
        sources.insert(Path::new(base).join(rel), info);
    }
    let jobs = tree::plan_listing(Path::new(base), dst, files, from_ext, to_ext)?;
    Ok(Listing {
        jobs,
        sources,
        folder: true,
    })
}

/// Refuses a DST prefix inside the SRC prefix (both in a store).
fn refuse_nested(src: &Path, dst: &Path) -> Result<()> {
    let (s, d) = (url_of(src)?, url_of(dst)?);
    let (s, d) = (s.trim_end_matches('/'), d.trim_end_matches('/'));
    if d == s || d.starts_with(&format!("{s}/")) {
        return Err(Error::invalid(
            dst,
            "destination lies inside the source prefix",
        ));
    }
    Ok(())
}

/// The objects already in the store at the outputs of `jobs`, by key: the
/// listing of DST's prefix for a `folder` SRC, else each output looked up.
fn listed_outputs(
    remote: &Remote,
    dst: &Path,
    folder: bool,
    jobs: &[Job],
) -> Result<HashMap<String, ObjectInfo>> {
    let listed = match folder {
        true => {
            let (_, prefix) = split_url(url_of(dst)?).at(dst)?;
            remote.store.list_all(&prefix).at(dst)?
        }
        false => {
            let mut found = Vec::new();
            for job in jobs {
                let key = key_of(remote.store.root(), &job.dst).at(&job.dst)?;
                found.extend(remote.store.head(&key).at(&job.dst)?);
            }
            found
        }
    };
    Ok(listed.into_iter().map(|i| (i.key.clone(), i)).collect())
}

/// The folder the run's work folder goes in: a local DST folder (or a
/// local output's folder), or the system's temporary folder for a store.
fn work_folder(dst: &End, folder: bool) -> PathBuf {
    match dst {
        End::Local(dst) if folder => dst.clone(),
        End::Local(dst) => match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
        End::Store(_) => std::env::temp_dir(),
    }
}

impl Drop for StoreRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// A local file removed when dropped.
struct Temporary(PathBuf);

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Fetches the object `info` (named `url` in errors) to the file `path`,
/// with the object's modification time.
fn fetch(remote: &Remote, info: &ObjectInfo, url: &Path, path: &Path) -> Result<u64> {
    let written = remote.store.get_file(info, path).at(url)?;
    let times = std::fs::FileTimes::new().set_modified(info.modified);
    let file = std::fs::File::options().write(true).open(path).at(path)?;
    file.set_times(times).at(path)?;
    Ok(written)
}

/// `t` cut to whole seconds, as stores keep modification times.
fn whole_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(_) => t,
    }
}

/// Removes the work folders in `dir` of runs that were killed (best effort).
fn remove_stale_work(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| is_temp_name(n))
            .and_then(|n| n.strip_prefix(".brevis-pack.tmp"))
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
