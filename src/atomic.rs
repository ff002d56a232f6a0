//! Outputs appear whole or not at all: each is written under a hidden
//! temporary name beside its destination (so the rename stays within one
//! filesystem), synced, then renamed into place. A failure removes the
//! temporary and leaves whatever was at the destination untouched; a rename
//! over a symbolic link replaces the link, never the file it points to.

#![deny(unsafe_code)]

use crate::error::{Error, IoContext, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A hidden name beside `dst` for this process's temporary.
pub fn temp_path(dst: &Path) -> PathBuf {
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = format!(".{}.tmp{}", name.unwrap_or_default(), std::process::id());
    dst.with_file_name(tmp)
}

/// Whether `name` is a temporary name made by [`temp_path`]: a file still being
/// written, which readers of a directory should not show.
pub fn is_temp_name(name: &str) -> bool {
    match name.strip_prefix('.').and_then(|n| n.rsplit_once(".tmp")) {
        Some((_, pid)) => !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Makes `dst` with `write`, which writes (and syncs) the file at the path it
/// is given; renames it to `dst` only if `write` succeeds. Temporaries of
/// `dst` left by runs that were killed are removed first. A failure names
/// `dst`: the temporary is gone by the time the user reads it. A `dst` that
/// is there and is neither a regular file nor a symbolic link (a device
/// such as `/dev/null`, a pipe, a directory) is refused before anything is
/// written: a rename would put a file in its place.
pub fn write_atomically<T>(dst: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    if let Ok(meta) = std::fs::symlink_metadata(dst) {
        let kind = meta.file_type();
        if !kind.is_file() && !kind.is_symlink() {
            let reason = "is there and not a regular file; brevis replaces only files";
            return Err(Error::invalid(dst, reason));
        }
    }
    remove_stale_temps(dst);
    let tmp = temp_path(dst);
    let live = Live::add(&tmp);
    let result = write(&tmp).and_then(|value| {
        std::fs::rename(&tmp, dst).at(dst)?;
        Ok(value)
    });
    let result = result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.renamed(&tmp, dst)
    });
    drop(live);
    result
}

/// The temporaries this process is writing now, for [`remove_temporaries`].
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// One entry of [`LIVE`], removed from it when dropped.
struct Live(PathBuf);

impl Live {
    fn add(tmp: &Path) -> Live {
        lock_live().push(tmp.to_path_buf());
        Live(tmp.to_path_buf())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut live = lock_live();
        if let Some(k) = live.iter().position(|p| *p == self.0) {
            live.swap_remove(k);
        }
    }
}

fn lock_live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // A panic elsewhere while it was held leaves a list that is still whole.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes the temporaries this process is writing and returns how many it
/// removed: for a process about to end on a signal, which would otherwise
/// leave them behind. The list stays locked (the process ends holding it),
/// so no write starts after this; one under way can no longer be renamed
/// into place, its file being gone.
pub fn remove_temporaries() -> usize {
    let live = lock_live();
    let removed = live
        .iter()
        .filter(|tmp| std::fs::remove_file(tmp).is_ok())
        .count();
    std::mem::forget(live);
    removed
}

/// Removes the temporaries of `dst` whose process no longer runs (best
/// effort: a folder that cannot be read keeps them).
fn remove_stale_temps(dst: &Path) {
    let (Some(dir), Some(name)) = (dst.parent(), dst.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp", name.to_string_lossy());
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let dead =
            is_temp_name(&file_name.to_string_lossy()) && !Path::new("/proc").join(pid).exists();
        if dead {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Starts writing back to the disk what has been written to `file` so far,
/// without waiting for it: an output written in batches then syncs as it
/// goes, and its final sync waits only for the last batches' writeback
/// rather than the whole file's. Only a hint: the final sync is what makes the
/// file durable, so an error (a filesystem without it) changes nothing.
pub fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range takes a descriptor and integers and
        // touches no memory of ours; the descriptor is `file`'s, open for
        // the call. Test: `writeback_keeps_the_bytes_and_any_descriptor`.
        #[allow(unsafe_code)]
        let _ =
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Copies `src` to `dst` atomically and durably, with its modification time
/// and permissions; returns the bytes copied.
pub fn copy_file(src: &Path, dst: &Path) -> Result<u64> {
    write_atomically(dst, |tmp| {
        let mut from = crate::input::open_regular(src).at(src)?;
        let mut to = File::create(tmp).at(tmp)?;
        let copied = std::io::copy(&mut from, &mut to).at(tmp)?;
        to.sync_all().at(tmp)?;
        stamp(tmp, &from.metadata().at(src)?)?;
        Ok(copied)
    })
}

/// Gives the file at `path` the access and modification times and the
/// permissions of `like`, as `cp -p` and `tar` do: an archive keeps its
/// original's, and an unpacked file or a copy gets them back, so `rsync -a`
/// and `make` see the files as unchanged.
pub fn stamp(path: &Path, like: &std::fs::Metadata) -> Result<()> {
    let times = std::fs::FileTimes::new()
        .set_accessed(like.accessed().at(path)?)
        .set_modified(like.modified().at(path)?);
    let file = File::options().write(true).open(path).at(path)?;
    file.set_times(times).at(path)?;
    std::fs::set_permissions(path, like.permissions()).at(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Writeback started between writes leaves the file's bytes as written,
    /// and a descriptor it cannot write back (read only) is left alone.
    #[test]
    fn writeback_keeps_the_bytes_and_any_descriptor() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = File::create(&path).unwrap();
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for part in bytes.chunks(70_000) {
            file.write_all(part).unwrap();
            start_writeback(&file);
        }
        file.sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let reader = File::open(&path).unwrap();
        start_writeback(&reader);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    #[test]
    fn temp_names_are_recognised() {
        let tmp = temp_path(Path::new("/a/model.brv"));
        assert!(is_temp_name(tmp.file_name().unwrap().to_str().unwrap()));
        for shown in ["model.brv", ".hidden", ".x.tmp", ".x.tmpfile", "x.tmp12"] {
            assert!(!is_temp_name(shown), "{shown}");
        }
    }

    #[test]
    fn temporaries_of_killed_runs_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("m.brv");
        // PIDs above the kernel's limit (2^22) never run; ours does.
        let dead = dir.path().join(".m.brv.tmp4194305");
        let own_parent = dir
            .path()
            .join(format!(".m.brv.tmp{}", std::os::unix::process::parent_id()));
        let other = dir.path().join(".n.brv.tmp4194305");
        for p in [&dead, &own_parent, &other] {
            std::fs::write(p, b"partial").unwrap();
        }
        write_atomically(&dst, |tmp| std::fs::write(tmp, b"new").at(tmp)).unwrap();
        assert!(!dead.exists(), "a dead run's temporary is left");
        assert!(own_parent.exists() && other.exists());
        assert_eq!(std::fs::read(&dst).unwrap(), b"new");
    }

    #[test]
    fn a_failed_write_leaves_the_destination_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("config.json");
        std::fs::write(&dst, b"old").unwrap();
        let result: Result<()> = write_atomically(&dst, |tmp| {
            std::fs::write(tmp, b"half of the new").unwrap();
            Err(Error::invalid(tmp, "disk full"))
        });
        assert!(result.is_err());
        assert_eq!(std::fs::read(&dst).unwrap(), b"old");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "temporary left"
        );
    }

    #[test]
    fn a_device_or_a_directory_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        for dst in [Path::new("/dev/null"), dir.path()] {
            let err = write_atomically(dst, |tmp| {
                std::fs::write(tmp, b"new").unwrap();
                Ok(())
            });
            let err = err.unwrap_err().to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }
        let null = std::fs::metadata("/dev/null").unwrap();
        assert!(!null.file_type().is_file(), "/dev/null is still a device");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_failed_copy_leaves_nothing_under_the_final_name() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("tokenizer.bin");
        // A directory is refused before anything is made.
        let err = copy_file(dir.path(), &dst).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        // Reading this regular file fails (EIO at address 0) after the
        // temporary was created.
        let err = copy_file(Path::new("/proc/self/mem"), &dst).unwrap_err();
        // Named as the destination: the temporary is gone.
        let err = err.to_string();
        assert!(err.contains(&*dst.to_string_lossy()), "{err}");
        assert!(!err.contains(".tokenizer.bin.tmp"), "{err}");
        assert!(!dst.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "temporary left"
        );
    }

    #[test]
    fn a_copy_replaces_a_symlink_not_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let (src, victim, dst) = (
            dir.path().join("src"),
            dir.path().join("victim"),
            dir.path().join("dst"),
        );
        std::fs::write(&src, b"new").unwrap();
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, &dst).unwrap();
        assert_eq!(copy_file(&src, &dst).unwrap(), 3);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&dst).unwrap(), b"new");
        assert!(!std::fs::symlink_metadata(&dst).unwrap().is_symlink());
    }
}
