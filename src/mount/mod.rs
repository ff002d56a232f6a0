//! The read-only FUSE filesystem behind `brevis-mount`: a directory of archives
//! shown as the original files, decoded chunk by chunk as they are read.
//!
//! Data flow of a read: the kernel asks for a byte range of a presented file
//! ([`fs`]); the archive's index names the chunks covering it; chunks missing
//! from the shared [`cache`] are decoded (in parallel, once each, checksums
//! verified) and the range is copied out of them. Names and inodes come from
//! [`nodes`], over a [`backend`]: a local directory, or a prefix of an object
//! store ([`remote`], whose records are fetched by range); [`watch`] tells the
//! kernel when a local archives directory changes.

mod backend;
mod budget;
mod cache;
mod fs;
mod nodes;
mod read;
#[cfg(feature = "remote")]
mod remote;
mod served;
mod streams;
mod watch;

pub use fs::{BrevisFs, ServeOptions};
pub use nodes::Nodes;

use crate::error::{Error, IoContext, Result};
use fuser::{Config, INodeNo, MountOption, SessionACL};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use watch::Watcher;

/// Everything `serve` needs besides the two paths.
#[derive(Clone, Debug)]
pub struct MountOptions {
    pub serve: ServeOptions,
    /// Let users other than the one mounting read the files.
    pub allow_other: bool,
    /// Threads taking requests from the kernel.
    pub request_threads: usize,
    /// Threads decoding chunks (default: one per core).
    pub decode_threads: Option<usize>,
    /// How archives in object storage are fetched and cached.
    #[cfg(feature = "remote")]
    pub remote: RemoteMountOptions,
}

/// How a mount of object storage fetches and caches.
#[cfg(feature = "remote")]
#[derive(Clone, Debug, Default)]
pub struct RemoteMountOptions {
    pub store: crate::remote::RemoteOptions,
    /// Folder of the disk cache of fetched bytes, if any.
    pub disk_cache: Option<PathBuf>,
    pub disk_cache_bytes: u64,
    /// Bytes of fetched (compressed) blocks kept in memory.
    pub memory_bytes: usize,
}

/// Checks that `archives` is a directory and `mountpoint` a directory that is not
/// already mounted on, with errors that say what to do.
/// A store URL is checked when the mount starts serving (connecting needs
/// threads, which must not exist before `serve`).
pub fn check_paths(archives: &Path, mountpoint: &Path) -> Result<(PathBuf, PathBuf)> {
    if crate::run::is_url(archives) {
        let mount = check_mountpoint(mountpoint, None)?;
        return Ok((archives.to_path_buf(), mount));
    }
    let archives = archives.canonicalize().at(archives)?;
    let (folder, _) = shown_archives(&archives).ok_or_else(|| {
        Error::invalid(
            &archives,
            "is neither a directory of archives nor a .brv archive",
        )
    })?;
    Ok((archives, check_mountpoint(mountpoint, Some(&folder))?))
}

/// Checks `mountpoint` is a directory not mounted on and not inside `folder`
/// (the archives folder, if local).
fn check_mountpoint(mountpoint: &Path, folder: Option<&Path>) -> Result<PathBuf> {
    // A FUSE mount whose server died answers ENOTCONN to every access.
    let stale = |e: &std::io::Error| e.raw_os_error() == Some(libc::ENOTCONN);
    let stale_mount = || {
        Error::invalid(
            mountpoint,
            "a stale mount is left here (its server is gone): run `umount MOUNTPOINT` \
             (`fusermount3 -u MOUNTPOINT` as a user) first",
        )
    };
    let mount = match mountpoint.canonicalize() {
        Ok(path) => path,
        Err(e) if stale(&e) => return Err(stale_mount()),
        Err(e) => return Err(Error::io(mountpoint, e)),
    };
    // (Its attributes may still be cached; opening it reaches the connection.)
    if std::fs::read_dir(&mount).is_err_and(|e| stale(&e)) {
        return Err(stale_mount());
    }
    if !mount.is_dir() {
        return Err(Error::invalid(&mount, "the mountpoint is not a directory"));
    }
    if is_mount_point(&mount)? {
        return Err(Error::invalid(
            &mount,
            "something is already mounted here; unmount it first",
        ));
    }
    if folder.is_some_and(|folder| mount.starts_with(folder)) {
        return Err(Error::invalid(
            &mount,
            "the mountpoint lies inside the archives folder",
        ));
    }
    Ok(mount)
}

/// The folder a mount shows, and the one archive in it to show if `archives`
/// is a single `.brv` file (presented alone, as its `.safetensors`); None if
/// it is neither a directory nor such a file.
fn shown_archives(archives: &Path) -> Option<(PathBuf, Option<OsString>)> {
    if archives.is_dir() {
        return Some((archives.to_path_buf(), None));
    }
    let is_archive = archives.extension().is_some_and(|e| e == "brv") && archives.is_file();
    let folder = archives.parent().filter(|_| is_archive)?;
    Some((
        folder.to_path_buf(),
        archives.file_name().map(OsString::from),
    ))
}

/// Whether `path` (canonical) is the mount point of some filesystem.
fn is_mount_point(path: &Path) -> Result<bool> {
    let info = Path::new("/proc/self/mountinfo");
    let text = std::fs::read_to_string(info).at(info)?;
    let wanted = path.as_os_str().as_encoded_bytes();
    // Field 5 is the mount point, with space, tab, newline and backslash escaped
    // as three octal digits.
    Ok(text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|field| unescape_octal(field) == wanted))
}

fn unescape_octal(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// What ends the wait in `serve`.
enum Event {
    Signal(i32),
    Ended(std::io::Result<()>),
}

/// Mounts `archives` at `mountpoint` (both checked by [`check_paths`]) and serves
/// it until it is unmounted or the process gets SIGINT, SIGTERM or SIGHUP, which
/// unmount it. Calls `ready` once the mount is in place.
///
/// Must be called before the process starts any thread: the signals are blocked
/// here so that every thread inherits the mask and only one thread takes them.
pub fn serve(
    archives: &Path,
    mountpoint: &Path,
    options: &MountOptions,
    ready: impl FnOnce(),
) -> Result<()> {
    let signals = crate::signals::block();
    // After the signals are blocked, so that the decoding threads inherit
    // it; now rather than on the first read, which would wait for them.
    let threads = options.decode_threads.map_or(0, |n| n.max(1));
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .map_err(|e| {
            Error::invalid(
                mountpoint,
                format!("cannot start the decoding threads: {e}"),
            )
        })?;
    let (nodes, watch) = match crate::run::is_url(archives) {
        #[cfg(feature = "remote")]
        true => (remote_nodes(archives, &options.remote)?, false),
        _ => (local_nodes(archives)?, true),
    };
    let watcher = match Watcher::new() {
        Ok(watcher) if watch => Some(Arc::new(watcher)),
        Ok(_) => None,
        Err(e) => {
            log::warn!("cannot watch for changes ({e}); they show after the attribute timeout");
            None
        }
    };
    let loops = options.request_threads.max(1);
    let fs = BrevisFs::new(nodes, watcher.clone(), options.serve.clone(), loops);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(format!("brevis:{}", archives.display())),
        MountOption::Subtype("brevis".into()),
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::DefaultPermissions,
    ];
    if options.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(loops);
    config.clone_fd = true;
    let mut session = fuser::Session::new(fs, mountpoint, &config)
        .map_err(|e| Error::invalid(mountpoint, mount_failure(e)))?;
    let mut unmounter = session.unmount_callable();
    let notifier = session.notifier();
    let (events, waiting) = mpsc::channel();
    if let Some(watcher) = watcher {
        std::thread::spawn(move || {
            let err = watcher.run(|dir, real_name| {
                if let Some(shown) = nodes::presented_name(real_name) {
                    // The kernel may not know the entry; then there is nothing to drop.
                    let _ = notifier.inval_entry(INodeNo(dir), &shown);
                }
            });
            log::warn!("stopped watching for changes: {err}");
        });
    }
    let ended = events.clone();
    std::thread::spawn(move || {
        let _ = ended.send(Event::Ended(session.run()));
    });
    std::thread::spawn(move || loop {
        if events
            .send(Event::Signal(crate::signals::wait(&signals)))
            .is_err()
        {
            break;
        }
    });
    // Only now: finding the mount's device asks the running server.
    raise_read_ahead(mountpoint);
    ready();
    let mut signalled = false;
    for event in waiting {
        match event {
            Event::Ended(result) => return session_end(mountpoint, result),
            Event::Signal(signal) if signalled => {
                log::warn!("signal {signal} again: exiting while files are still open");
                std::process::exit(1);
            }
            Event::Signal(signal) => {
                signalled = true;
                log::info!("signal {signal}: unmounting {}", mountpoint.display());
                if let Err(e) = unmounter.unmount() {
                    unmount_lazily(mountpoint, e);
                }
            }
        }
    }
    Ok(())
}

/// The tree of a local folder of archives, or of one archive shown alone.
fn local_nodes(archives: &Path) -> Result<Nodes> {
    let (folder, only) = shown_archives(archives)
        .ok_or_else(|| Error::invalid(archives, "is neither a directory nor a .brv archive"))?;
    let backend = Box::new(backend::Local {
        root: folder.clone(),
    });
    Nodes::new(backend, &folder, only).at(archives)
}

/// The tree of a store prefix (`s3://bucket/prefix`), or of one archive in
/// it shown alone; the store is reached once here, so that a wrong bucket,
/// endpoint or credentials fail the mount rather than its first read.
#[cfg(feature = "remote")]
fn remote_nodes(archives: &Path, options: &RemoteMountOptions) -> Result<Nodes> {
    use crate::remote::{split_url, DiskCache, Remote, Store};
    let url = archives.to_string_lossy();
    let (_, key) = split_url(&url).at(archives)?;
    let store = Store::connect(&url, options.store.clone()).at(archives)?;
    let disk = match &options.disk_cache {
        Some(dir) => Some(DiskCache::open(dir, options.disk_cache_bytes).at(dir)?),
        None => None,
    };
    let single = key.ends_with(backend::ARCHIVE_SUFFIX);
    if single && store.head(&key).at(archives)?.is_none() {
        return Err(Error::invalid(archives, "no such archive in the store"));
    }
    let (root, only) = match single {
        true => match key.rsplit_once('/') {
            Some((dir, name)) => (dir.to_string(), Some(OsString::from(name))),
            None => (String::new(), Some(OsString::from(key.as_str()))),
        },
        false => (key.clone(), None),
    };
    // Listing the root checks the bucket and credentials (a web server
    // cannot list: one archive is checked by the HEAD above).
    if !single {
        store.list(&root).at(archives)?;
    }
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let tree = remote::RemoteTree {
        remote: Remote::new(store, options.memory_bytes, disk),
        root: root.clone(),
        uid,
        gid,
        mounted: std::time::SystemTime::now(),
    };
    Nodes::new(Box::new(tree), Path::new(&root), only).at(archives)
}

/// The outcome of a session that ended. When the last open file of a lazily
/// unmounted mount closes (detached by us after a signal, or by `umount -l`),
/// the kernel may end the connection by aborting it rather than with ENODEV,
/// which the session reports as an error; it is the end the unmount asked
/// for, so it counts as a clean one.
fn session_end(mountpoint: &Path, result: std::io::Result<()>) -> Result<()> {
    match result {
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {
            log::info!("{}: the kernel ended the connection", mountpoint.display());
            Ok(())
        }
        other => other.map_err(|e| Error::io(mountpoint, e)),
    }
}

/// Why mounting failed, with what a user without root needs when permission
/// was the reason.
fn mount_failure(err: std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "cannot mount: {err}; without root this needs read-write access to \
             /dev/fuse and the fusermount3 helper (Debian: apt install fuse3)"
        ),
        _ => format!("cannot mount: {err}"),
    }
}

/// Raises the kernel's read-ahead for the mount (its default is 128 KiB), so
/// that sequential reads arrive as 1 MiB requests and the server has whole
/// chunks to decode in parallel. Needs root; without it the default stays.
fn raise_read_ahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let knob = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    if let Err(e) = std::fs::write(&knob, READ_AHEAD_KB.to_string()) {
        log::debug!("{knob}: {e}; the kernel's default read-ahead stays");
    }
}

/// The kernel read-ahead asked for, in KiB.
const READ_AHEAD_KB: u32 = 4096;

/// Unmounts lazily after a plain unmount failed (files still open): the mount
/// leaves the namespace now and the server ends when the last file closes.
fn unmount_lazily(mountpoint: &Path, cause: std::io::Error) {
    let path = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes());
    let Ok(path) = path else { return };
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let rc = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
    if rc == 0 {
        log::warn!(
            "{}: busy ({cause}); detached, serving open files until they close",
            mountpoint.display()
        );
    } else {
        log::error!(
            "{}: cannot unmount ({cause}; detach: {})",
            mountpoint.display(),
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aborted_connection_ends_the_session_cleanly() {
        let at = Path::new("/mnt/models");
        let aborted = std::io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert!(session_end(at, Err(aborted)).is_ok());
        assert!(session_end(at, Ok(())).is_ok());
        let other = std::io::Error::from_raw_os_error(libc::EIO);
        let err = session_end(at, Err(other)).unwrap_err().to_string();
        assert!(err.contains("/mnt/models"), "{err}");
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_octal(r"/mnt/my\040models"), b"/mnt/my models");
        assert_eq!(unescape_octal(r"/a\134b"), b"/a\\b");
        assert_eq!(unescape_octal(r"/odd\04"), b"/odd\\04");
    }

    #[test]
    fn paths_are_checked_before_mounting() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let missing = dir.path().join("missing");
        let err = check_paths(&missing, dir.path()).unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
        let err = check_paths(dir.path(), &file).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
        let err = check_paths(&file, dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("neither a directory of archives nor a .brv"),
            "{err}"
        );
        let single = dir.path().join("m.brv");
        std::fs::write(&single, b"x").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(check_paths(&single, elsewhere.path()).is_ok());
        let inside = dir.path().join("mnt");
        std::fs::create_dir(&inside).unwrap();
        let err = check_paths(dir.path(), &inside).unwrap_err().to_string();
        assert!(err.contains("inside the archives"), "{err}");
        assert!(
            check_paths(&inside, Path::new("/proc")).is_err(),
            "/proc is a mount point"
        );
        let other = tempfile::tempdir().unwrap();
        assert!(check_paths(dir.path(), other.path()).is_ok());
    }
}
