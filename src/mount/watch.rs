//! Watching the archives directory with inotify, so that archives added,
//! replaced or removed while mounted show at once even though the kernel is told
//! to cache names and attributes for a long time.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// Changes that can alter what a directory shows: entries appearing, vanishing,
/// being renamed over, or rewritten in place.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF;

pub struct Watcher {
    fd: OwnedFd,
    /// Watch descriptor to the inode of the directory it watches.
    dirs: Mutex<HashMap<i32, u64>>,
}

impl Watcher {
    pub fn new() -> io::Result<Watcher> {
        // SAFETY: inotify_init1 takes no pointers; the result is checked below.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Watcher {
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            dirs: Mutex::new(HashMap::new()),
        })
    }

    /// Starts reporting changes in `dir`, shown as inode `ino`. Watching a
    /// directory again just refreshes its inode.
    pub fn watch(&self, dir: &Path, ino: u64) -> io::Result<()> {
        let path = CString::new(dir.as_os_str().as_bytes())?;
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), MASK) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        self.lock().insert(wd, ino);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, u64>> {
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads events until the descriptor fails, calling `changed(dir inode, real
    /// entry name)` for each change. Meant for a thread of its own.
    pub fn run(&self, changed: impl Fn(u64, &OsStr)) -> io::Error {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is valid for writes of its length for the call.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return err;
            }
            for (wd, mask, name) in parse_events(&buf[..n as usize]) {
                if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF) != 0 {
                    self.lock().remove(&wd);
                    continue;
                }
                let dir = self.lock().get(&wd).copied();
                if let (Some(dir), Some(name)) = (dir, name) {
                    changed(dir, &name);
                }
            }
        }
    }
}

/// Splits a buffer of `struct inotify_event` records into (watch, mask, name).
/// The kernel writes whole records; a malformed tail is ignored.
fn parse_events(mut buf: &[u8]) -> Vec<(i32, u32, Option<OsString>)> {
    const HEAD: usize = 16; // wd: i32, mask: u32, cookie: u32, len: u32
    let mut events = Vec::new();
    while buf.len() >= HEAD {
        let word = |i: usize| u32::from_ne_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
        let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
        let Some(name) = buf.get(HEAD..HEAD + len) else {
            break;
        };
        // The name is NUL-padded; an empty name means the directory itself.
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        let name = (!name.is_empty()).then(|| OsStr::from_bytes(name).to_os_string());
        events.push((wd, mask, name));
        buf = &buf[HEAD + len..];
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn parses_records_and_ignores_a_torn_tail() {
        let mut buf = Vec::new();
        for (wd, name) in [(3i32, &b"model.brv\0\0\0"[..]), (4, &b""[..])] {
            buf.extend_from_slice(&wd.to_ne_bytes());
            buf.extend_from_slice(&libc::IN_MOVED_TO.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            buf.extend_from_slice(name);
        }
        buf.extend_from_slice(&[1, 2, 3]);
        let events = parse_events(&buf);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].0, 3);
        assert_eq!(events[0].2.as_deref(), Some(OsStr::new("model.brv")));
        assert_eq!(events[1].2, None);
        // A record whose name runs past the end is not read.
        let mut torn = buf[..16].to_vec();
        torn[12..16].copy_from_slice(&100u32.to_ne_bytes());
        assert!(parse_events(&torn).is_empty());
    }

    #[test]
    fn reports_a_rename_into_a_watched_directory() {
        let dir = tempfile::tempdir().unwrap();
        let watcher = Arc::new(Watcher::new().unwrap());
        watcher.watch(dir.path(), 7).unwrap();
        let (tx, rx) = mpsc::channel();
        let w = watcher.clone();
        std::thread::spawn(move || {
            w.run(|ino, name| {
                let _ = tx.send((ino, name.to_os_string()));
            })
        });
        std::fs::write(dir.path().join(".m.brv.tmp1"), b"x").unwrap();
        std::fs::rename(dir.path().join(".m.brv.tmp1"), dir.path().join("m.brv")).unwrap();
        let renamed_in = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(5)).ok())
            .any(|event| event == (7, OsString::from("m.brv")));
        assert!(renamed_in, "no event for the renamed archive");
    }
}
