//! Where the mounted tree lives: a local directory, or (with the `remote`
//! feature) a prefix of an object store. The tree of [`super::nodes`] asks a
//! backend what a path is, what a folder holds and how to open a file, and is
//! the same for both.

#![forbid(unsafe_code)]

use crate::archive::{Archive, ByteSource, FileSource};

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The name ending of the archives a mount presents.
pub const ARCHIVE_SUFFIX: &str = ".brv";

/// What the mount shows of a real entry.
#[derive(Clone, Debug)]
pub struct Meta {
    pub is_dir: bool,
    pub len: u64,
    /// 512-byte blocks the entry takes where it is stored.
    pub blocks: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Identifies this version of a file: a new version gets a new inode, so
    /// the kernel never mixes pages of two.
    pub version: String,
    /// A directory's identity however it is reached (device and inode), so
    /// that one a symbolic link shows inside itself is found; None where
    /// nothing links (an object store) and for files.
    pub dir_id: Option<(u64, u64)>,
}

/// Space figures for `statfs`.
pub struct Space {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

pub trait Backend: Send + Sync {
    /// What `path` is (symbolic links followed), or None if nothing.
    fn stat(&self, path: &Path) -> Option<Meta>;
    /// The entries of folder `dir` that can be stat'ed, by name.
    fn list(&self, dir: &Path) -> io::Result<Vec<(OsString, Meta)>>;
    /// Opens the archive at `path`, as the version `meta` describes.
    fn open_archive(&self, path: &Path, meta: &Meta) -> crate::Result<Archive>;
    /// Opens the plain file at `path`, as the version `meta` describes.
    fn open_plain(&self, path: &Path, meta: &Meta) -> io::Result<Box<dyn ByteSource>>;
    fn space(&self) -> io::Result<Space>;
    /// Counters worth showing (as the `user.brevis.stats` attribute), if any.
    fn stats(&self) -> Option<String> {
        None
    }
    /// Whether `path` is a symbolic link to an archive (a file named `.brv`).
    fn links_to_archive(&self, _path: &Path) -> bool {
        false
    }
}

/// A local directory; paths are real paths.
pub struct Local {
    /// The archives folder, whose filesystem `statfs` reports.
    pub root: PathBuf,
}

impl Backend for Local {
    fn stat(&self, path: &Path) -> Option<Meta> {
        // Only files and folders: a FIFO or device could block its readers.
        let meta = std::fs::metadata(path).ok()?;
        (meta.is_file() || meta.is_dir()).then(|| local_meta(&meta))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(OsString, Meta)>> {
        Ok(std::fs::read_dir(dir)?
            .flatten()
            .filter_map(|entry| Some((entry.file_name(), self.stat(&entry.path())?)))
            .collect())
    }

    fn open_archive(&self, path: &Path, _meta: &Meta) -> crate::Result<Archive> {
        Archive::open_unmapped(path)
    }

    fn links_to_archive(&self, path: &Path) -> bool {
        let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
        let target = || std::fs::canonicalize(path).ok();
        link && target().is_some_and(|t| {
            t.as_os_str()
                .as_bytes()
                .ends_with(ARCHIVE_SUFFIX.as_bytes())
        })
    }

    fn open_plain(&self, path: &Path, _meta: &Meta) -> io::Result<Box<dyn ByteSource>> {
        Ok(Box::new(FileSource::open(path)?))
    }

    /// The archives folder's filesystem, as read-only mounts report theirs:
    /// `df` shows its real use and free space, not a full disk.
    fn space(&self) -> io::Result<Space> {
        let st = crate::space::statvfs(&self.root)?;
        Ok(Space {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: st.f_namemax as u32,
            frsize: st.f_frsize as u32,
        })
    }
}

fn local_meta(meta: &std::fs::Metadata) -> Meta {
    let time = |secs: i64, nanos: i64| {
        let since = Duration::new(secs.unsigned_abs(), nanos as u32);
        if secs >= 0 {
            UNIX_EPOCH + since
        } else {
            UNIX_EPOCH - since
        }
    };
    // Directories are identified without size and mtime, which change
    // whenever their entries do.
    let version = match meta.is_dir() {
        true => format!("{}:{}", meta.dev(), meta.ino()),
        false => format!(
            "{}:{}:{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec()
        ),
    };
    Meta {
        is_dir: meta.is_dir(),
        len: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        version,
        dir_id: meta.is_dir().then(|| (meta.dev(), meta.ino())),
    }
}
