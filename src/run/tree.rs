//! A run's jobs: for a source file or folder and a destination, which files
//! are transformed (packed or unpacked), which are copied, and where each one
//! goes; and the archives under a folder.

#![forbid(unsafe_code)]

use crate::atomic::is_temp_name;
use crate::error::{Error, IoContext, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Pack or unpack, depending on the command.
    Transform,
    /// Copy as is.
    Copy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub action: Action,
    pub len: u64,
}

/// What to do with outputs that exist already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Fail before writing anything.
    Refuse,
    /// Replace them.
    Overwrite,
    /// Leave them and plan no job for them (outputs are written atomically,
    /// so one that exists is whole: this resumes an interrupted run).
    Skip,
}

impl Existing {
    /// `jobs` with their outputs that exist (as `exists` says) refused,
    /// overwritten or skipped.
    pub fn apply(self, mut jobs: Vec<Job>, exists: impl Fn(&Job) -> bool) -> Result<Vec<Job>> {
        match self {
            Existing::Refuse => {
                if let Some(job) = jobs.iter().find(|j| exists(j)) {
                    return Err(Error::invalid(
                        &job.dst,
                        "already exists (use --force to overwrite, --skip-existing to keep)",
                    ));
                }
            }
            Existing::Overwrite => {}
            Existing::Skip => jobs.retain(|j| !exists(j)),
        }
        Ok(jobs)
    }
}

/// Plans the jobs that pack or unpack `src` into `dst`. Files ending in `from_ext` are
/// transformed and renamed to `to_ext`; in directory mode every other file is
/// copied. A single file (or the URL of one object in a store) is always
/// transformed; if `dst` is a directory it goes inside it. Existing outputs
/// are refused, overwritten or skipped.
pub fn plan(
    src: &Path,
    dst: &Path,
    from_ext: &str,
    to_ext: &str,
    existing: Existing,
) -> Result<Vec<Job>> {
    if super::open::is_url(src) {
        let job = single_job(src, dst, (from_ext, to_ext), 0);
        return existing.apply(vec![job], |job| std::fs::symlink_metadata(&job.dst).is_ok());
    }
    let meta = std::fs::metadata(src).at(src)?;
    let jobs = if meta.is_dir() {
        if dst.starts_with(src) {
            return Err(Error::invalid(
                dst,
                "destination lies inside the source directory",
            ));
        }
        let mut jobs = Vec::new();
        walk(src, dst, from_ext, to_ext, &mut jobs)?;
        jobs
    } else if !meta.is_file() {
        // A FIFO or device would block or never end.
        return Err(Error::invalid(src, "is not a regular file or a directory"));
    } else {
        vec![single_job(src, dst, (from_ext, to_ext), meta.len())]
    };
    for job in &jobs {
        if same_file(&job.src, &job.dst) {
            return Err(Error::invalid(&job.dst, "is the source itself"));
        }
    }
    existing.apply(jobs, |job| std::fs::symlink_metadata(&job.dst).is_ok())
}

/// The job that transforms the one file `src` (of `len` bytes) into `dst`, or
/// into the folder `dst` if it is one or ends in '/' (made if need be, as for
/// cp), renamed from `.from` to `.to`.
fn single_job(src: &Path, dst: &Path, (from, to): (&str, &str), len: u64) -> Job {
    let folder = dst.as_os_str().as_encoded_bytes().ends_with(b"/");
    let dst = match dst.is_dir() || folder {
        true => dst.join(
            renamed(src, from, to).unwrap_or_else(|| src.file_name().unwrap_or_default().into()),
        ),
        false => dst.to_path_buf(),
    };
    Job {
        src: src.to_path_buf(),
        dst,
        action: Action::Transform,
        len,
    }
}

/// `root` itself if it is a file, else every file under it ending in `.ext`,
/// sorted (a store of archives).
pub fn find(root: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    if !std::fs::metadata(root).at(root)?.is_dir() {
        return Ok(vec![root.to_path_buf()]);
    }
    let mut jobs = Vec::new();
    walk(root, Path::new(""), ext, ext, &mut jobs)?;
    Ok(jobs
        .into_iter()
        .filter(|j| j.action == Action::Transform)
        .map(|j| j.src)
        .collect())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `name.from_ext` -> `name.to_ext`, or None if the name does not end in `from_ext`.
pub fn renamed(path: &Path, from_ext: &str, to_ext: &str) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(from_ext)?.strip_suffix('.')?;
    (!stem.is_empty()).then(|| PathBuf::from(format!("{stem}.{to_ext}")))
}

/// The jobs of the files `(path relative to src, length)` listed in a
/// folder `src` (local, or a store prefix written as its URL), into `dst`:
/// files ending in `from_ext` are transformed and renamed to `to_ext`, every
/// other one is copied; temporaries are left out. Sorted by path, so that
/// output and errors do not depend on listing order. Two files that would
/// make one output (`m.brv` and a plain `m.safetensors`, unpacked) are an
/// error naming both: whichever was written last would silently replace the
/// other.
pub fn plan_listing(
    src: &Path,
    dst: &Path,
    files: impl IntoIterator<Item = (PathBuf, u64)>,
    from_ext: &str,
    to_ext: &str,
) -> Result<Vec<Job>> {
    let mut files: Vec<(PathBuf, u64)> = files
        .into_iter()
        .filter(|(rel, _)| {
            // The temporaries of a run still writing, or of one that was killed.
            !rel.iter()
                .any(|part| part.to_str().is_some_and(is_temp_name))
        })
        .collect();
    files.sort();
    let jobs: Vec<Job> = files
        .into_iter()
        .map(|(rel, len)| {
            let (action, out) = match renamed(&rel, from_ext, to_ext) {
                Some(new) => (Action::Transform, rel.with_file_name(new)),
                None => (Action::Copy, rel.clone()),
            };
            Job {
                src: src.join(&rel),
                dst: dst.join(out),
                action,
                len,
            }
        })
        .collect();
    refuse_shared_outputs(&jobs)?;
    Ok(jobs)
}

/// An error naming both sources if two of `jobs` write one output.
fn refuse_shared_outputs(jobs: &[Job]) -> Result<()> {
    let mut by_output: Vec<&Job> = jobs.iter().collect();
    by_output.sort_by(|a, b| a.dst.cmp(&b.dst));
    match by_output.windows(2).find(|w| w[0].dst == w[1].dst) {
        Some(pair) => Err(Error::invalid(
            &pair[0].dst,
            format!(
                "would be written from both {} and {}; rename or move one of them",
                pair[0].src.display(),
                pair[1].src.display()
            ),
        )),
        None => Ok(()),
    }
}

fn walk(src: &Path, dst: &Path, from_ext: &str, to_ext: &str, jobs: &mut Vec<Job>) -> Result<()> {
    let mut files = Vec::new();
    list_files(src, Path::new(""), &mut Vec::new(), &mut files)?;
    jobs.extend(plan_listing(src, dst, files, from_ext, to_ext)?);
    Ok(())
}

/// Every regular file under `dir` (which is `root/rel`), with its length.
/// `above` holds the device and inode of each folder on the way down, so that
/// a symbolic link back to one of them is an error rather than an endless
/// walk. A dangling symbolic link is listed (with length 0) so that its job
/// fails naming it, and `--keep-going` goes on past it.
fn list_files(
    dir: &Path,
    rel: &Path,
    above: &mut Vec<(u64, u64)>,
    files: &mut Vec<(PathBuf, u64)>,
) -> Result<()> {
    let here = std::fs::metadata(dir).at(dir)?;
    if let Some(k) = above.iter().position(|&id| id == (here.dev(), here.ino())) {
        let depth = above.len() - k;
        let reason =
            format!("a symbolic link loop: this folder is its own ancestor {depth} level(s) up");
        return Err(Error::invalid(dir, reason));
    }
    above.push((here.dev(), here.ino()));
    let mut entries = std::fs::read_dir(dir)
        .at(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .at(dir)?;
    // Sorted so that errors do not depend on directory order.
    entries.sort();
    for path in entries {
        let name = path.file_name().expect("entries have names");
        if name.to_str().is_some_and(is_temp_name) {
            continue;
        }
        let meta = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path.is_symlink() => {
                files.push((rel.join(name), 0));
                continue;
            }
            meta => meta.at(&path)?,
        };
        if meta.is_dir() {
            list_files(&path, &rel.join(name), above, files)?;
        } else if meta.is_file() {
            files.push((rel.join(name), meta.len()));
        }
    }
    above.pop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_fifos_and_devices_are_not_packed() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("m.safetensors"), b"x").unwrap();
        std::fs::write(src.join(".m.brv.tmp4242"), b"half").unwrap();
        let fifo = src.join("pipe");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let jobs = plan(
            &src,
            &dir.path().join("out"),
            "safetensors",
            "brv",
            Existing::Refuse,
        )
        .unwrap();
        let names: Vec<_> = jobs.iter().map(|j| j.src.file_name().unwrap()).collect();
        assert_eq!(names, ["m.safetensors"]);
        let err = plan(
            &fifo,
            &dir.path().join("p.brv"),
            "safetensors",
            "brv",
            Existing::Refuse,
        )
        .unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert!(plan(
            Path::new("/dev/null"),
            Path::new("n"),
            "a",
            "b",
            Existing::Refuse
        )
        .is_err());
    }

    #[test]
    fn a_trailing_slash_makes_the_destination_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("m.safetensors");
        std::fs::write(&src, b"x").unwrap();
        let out = dir.path().join("new");
        let slash = PathBuf::from(format!("{}/", out.display()));
        let jobs = plan(&src, &slash, "safetensors", "brv", Existing::Refuse).unwrap();
        assert_eq!(jobs[0].dst, out.join("m.brv"));
        let jobs = plan(&src, &out, "safetensors", "brv", Existing::Refuse).unwrap();
        assert_eq!(jobs[0].dst, out);
    }

    #[test]
    fn a_listing_plans_as_the_folder_it_lists() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("b/c")).unwrap();
        let files = [
            ("b/c/m.safetensors", 3),
            ("b.json", 2),
            ("a.safetensors", 1),
            ("b/x", 4),
        ];
        for (rel, len) in files {
            std::fs::write(src.join(rel), vec![0u8; len]).unwrap();
        }
        let local = plan(
            &src,
            Path::new("/out"),
            "safetensors",
            "brv",
            Existing::Overwrite,
        );
        // The same files as a store would list them, in another order, with
        // a temporary of a killed run.
        let mut listed: Vec<(PathBuf, u64)> = files
            .iter()
            .map(|(rel, len)| (PathBuf::from(rel), *len as u64))
            .collect();
        listed.push(("b/.m.brv.tmp42".into(), 9));
        listed.reverse();
        let remote = plan_listing(&src, Path::new("/out"), listed, "safetensors", "brv").unwrap();
        assert_eq!(local.unwrap(), remote);
        assert_eq!(remote[0].dst, Path::new("/out/a.brv"));
        assert_eq!(remote[1].src, src.join("b/c/m.safetensors"));
    }

    #[test]
    fn renames_only_matching_extensions() {
        let r = |p: &str| renamed(Path::new(p), "safetensors", "brv");
        assert_eq!(r("a/model.safetensors"), Some("model.brv".into()));
        assert_eq!(r("config.json"), None);
        assert_eq!(r(".safetensors"), None);
        assert_eq!(r("xsafetensors"), None);
    }

    #[test]
    fn plans_a_directory_and_refuses_existing_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/m.safetensors"), b"x").unwrap();
        std::fs::write(src.join("config.json"), b"{}").unwrap();
        let dst = dir.path().join("out");
        let jobs = plan(&src, &dst, "safetensors", "brv", Existing::Refuse).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].dst, dst.join("config.json"));
        assert_eq!(jobs[0].action, Action::Copy);
        assert_eq!(jobs[1].dst, dst.join("sub/m.brv"));
        assert_eq!(jobs[1].action, Action::Transform);
        std::fs::create_dir_all(dst.join("sub")).unwrap();
        std::fs::write(dst.join("sub/m.brv"), b"old").unwrap();
        let err = plan(&src, &dst, "safetensors", "brv", Existing::Refuse).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert!(plan(&src, &dst, "safetensors", "brv", Existing::Overwrite).is_ok());
        let rest = plan(&src, &dst, "safetensors", "brv", Existing::Skip).unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].dst, dst.join("config.json"));
        assert!(plan(
            &src,
            &src.join("x"),
            "safetensors",
            "brv",
            Existing::Overwrite
        )
        .is_err());
    }

    #[test]
    fn two_sources_of_one_output_are_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("m.brv"), b"archive").unwrap();
        std::fs::write(src.join("m.safetensors"), b"plain").unwrap();
        let out = dir.path().join("out");
        // Unpacking: m.brv -> m.safetensors, and the plain m.safetensors copied.
        let err = plan(&src, &out, "brv", "safetensors", Existing::Refuse).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("m.safetensors: would be written from both"),
            "{text}"
        );
        assert!(
            text.contains("src/m.brv") && text.contains("src/m.safetensors"),
            "{text}"
        );
        // Packing: m.safetensors -> m.brv, and the plain m.brv copied.
        let err = plan(&src, &out, "safetensors", "brv", Existing::Overwrite).unwrap_err();
        assert!(
            err.to_string().contains("would be written from both"),
            "{err}"
        );
    }

    #[test]
    fn dangling_links_are_listed_and_link_loops_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("x")).unwrap();
        std::fs::write(src.join("m.safetensors"), b"x").unwrap();
        std::os::unix::fs::symlink("nowhere", src.join("gone.json")).unwrap();
        let jobs = plan(
            &src,
            &dir.path().join("o"),
            "safetensors",
            "brv",
            Existing::Refuse,
        );
        let names: Vec<_> = jobs.unwrap().into_iter().map(|j| j.src).collect();
        assert_eq!(names, [src.join("gone.json"), src.join("m.safetensors")]);
        std::os::unix::fs::symlink("..", src.join("x/a")).unwrap();
        std::os::unix::fs::symlink("..", src.join("x/b")).unwrap();
        let err = plan(
            &src,
            &dir.path().join("o"),
            "safetensors",
            "brv",
            Existing::Refuse,
        );
        let text = err.unwrap_err().to_string();
        assert!(text.contains("src/x/a: a symbolic link loop"), "{text}");
        assert!(find(&src, "brv").is_err());
    }
}
