//! A bounded cache of fetched bytes on local disk, so that a mount started
//! again (or another mount on the machine) does not fetch them again.
//!
//! Entries are keyed by everything that identifies the bytes: the store, the
//! object's key, its version (ETag) and the range. An object replaced in the
//! store has another ETag, so its old bytes are never found for it. Each file
//! repeats its identity and a checksum of its bytes, checked on every hit, so a
//! damaged or foreign file is a miss, never wrong bytes. Only files named as
//! this cache names them are ever read or removed.
//!
//! Entries are written by a thread of their own, so that a read waits for
//! the store only, never for the local disk: at most [`QUEUE`] entries wait
//! to be written, and an entry that finds the queue full is not kept (a
//! later mount fetches those bytes again). Dropping the cache writes what
//! waits.

#![forbid(unsafe_code)]

use lru::LruCache;
use sha2::{Digest, Sha256};
use std::hash::Hasher;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

const MAGIC: &[u8; 8] = b"BRVBLK1\n";
const SUFFIX: &str = ".blk";
/// Entries waiting to be written, at most: with entries of up to 1 MiB, a
/// bounded amount of memory however slow the disk.
pub const QUEUE: usize = 64;

pub struct DiskCache {
    files: Arc<Files>,
    /// To the writing thread; `None` once dropped.
    queue: Option<SyncSender<(String, Vec<u8>)>>,
    writer: Option<JoinHandle<()>>,
}

/// The entries in the cache's folder, shared with the writing thread.
struct Files {
    dir: PathBuf,
    capacity: u64,
    state: Mutex<State>,
}

struct State {
    /// File name to size, least recently used first.
    files: LruCache<String, u64>,
    bytes: u64,
}

impl DiskCache {
    /// The cache in `dir` (created if missing), holding at most `capacity`
    /// bytes; what it already holds is kept, oldest evicted first.
    pub fn open(dir: &Path, capacity: u64) -> io::Result<DiskCache> {
        let files = Arc::new(Files::open(dir, capacity)?);
        let (queue, waiting) = sync_channel::<(String, Vec<u8>)>(QUEUE);
        let writing = files.clone();
        let writer = std::thread::Builder::new()
            .name("brevis-disk-cache".into())
            .spawn(move || {
                for (identity, data) in waiting {
                    writing.write(&identity, &data);
                }
            })?;
        Ok(DiskCache {
            files,
            queue: Some(queue),
            writer: Some(writer),
        })
    }

    /// The bytes stored under `identity`, if present and intact.
    pub fn get(&self, identity: &str) -> Option<Vec<u8>> {
        self.files.get(identity)
    }

    /// Stores `data` under `identity` soon (evicting the least recently used
    /// entries beyond the capacity), or not at all if too many entries wait
    /// to be written. Failures only cost a later fetch.
    pub fn put(&self, identity: &str, data: Vec<u8>) {
        let Some(queue) = &self.queue else { return };
        if let Err(TrySendError::Full((identity, _))) = queue.try_send((identity.into(), data)) {
            log::debug!(
                "{}: not kept, the disk is behind",
                self.files.path(&identity).display()
            );
        }
    }

    /// Bytes held now (entries still waiting to be written not counted).
    pub fn held_bytes(&self) -> u64 {
        self.files.lock().bytes
    }
}

impl Drop for DiskCache {
    /// Writes the entries still waiting.
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Files {
    fn open(dir: &Path, capacity: u64) -> io::Result<Files> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if is_entry_name(&name) && meta.is_file() {
                found.push((meta.modified().ok(), name, meta.len()));
            } else if name.starts_with(".tmp-") && name.ends_with(SUFFIX) {
                // Left by a process that stopped while writing.
                let _ = std::fs::remove_file(entry.path());
            }
        }
        found.sort();
        let files = Files {
            dir: dir.to_path_buf(),
            capacity,
            state: Mutex::new(State {
                files: LruCache::unbounded(),
                bytes: 0,
            }),
        };
        {
            let mut state = files.lock();
            for (_, name, len) in found {
                state.files.put(name, len);
                state.bytes += len;
            }
        }
        files.evict();
        Ok(files)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn path(&self, identity: &str) -> PathBuf {
        self.dir.join(entry_name(identity))
    }

    fn get(&self, identity: &str) -> Option<Vec<u8>> {
        let name = entry_name(identity);
        self.lock().files.get(&name)?;
        let path = self.dir.join(&name);
        let bytes = std::fs::read(&path).ok()?;
        match unwrap_entry(&bytes, identity) {
            Some(data) => Some(data.to_vec()),
            None => {
                log::warn!("{}: damaged cache entry, removed", path.display());
                self.remove(&name);
                None
            }
        }
    }

    /// Writes an entry (to a temporary file renamed into place, so that a
    /// reader never sees half of it) and evicts beyond the capacity.
    fn write(&self, identity: &str, data: &[u8]) {
        let name = entry_name(identity);
        let mut head = Vec::with_capacity(identity.len() + 20);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(identity.len() as u32).to_le_bytes());
        head.extend_from_slice(identity.as_bytes());
        head.extend_from_slice(&checksum(data).to_le_bytes());
        let temp = self.dir.join(format!(".tmp-{}-{name}", std::process::id()));
        let written = std::fs::File::create(&temp)
            .and_then(|mut file| file.write_all(&head).and_then(|()| file.write_all(data)))
            .and_then(|()| std::fs::rename(&temp, self.dir.join(&name)));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            log::warn!("{}: cannot write to the cache: {e}", self.dir.display());
            return;
        }
        let len = (head.len() + data.len()) as u64;
        {
            let mut state = self.lock();
            if let Some(old) = state.files.put(name, len) {
                state.bytes -= old;
            }
            state.bytes += len;
        }
        self.evict();
    }

    fn remove(&self, name: &str) {
        let mut state = self.lock();
        if let Some(len) = state.files.pop(name) {
            state.bytes -= len;
        }
        let _ = std::fs::remove_file(self.dir.join(name));
    }

    fn evict(&self) {
        let mut state = self.lock();
        while state.bytes > self.capacity {
            let Some((name, len)) = state.files.pop_lru() else {
                break;
            };
            state.bytes -= len;
            let _ = std::fs::remove_file(self.dir.join(name));
        }
    }
}

/// The file name of an entry: a hash of its identity.
fn entry_name(identity: &str) -> String {
    let hash = Sha256::digest(identity.as_bytes());
    let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}{SUFFIX}")
}

fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(SUFFIX)
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The data of an entry file, if it is intact and holds `identity`.
fn unwrap_entry<'a>(file: &'a [u8], identity: &str) -> Option<&'a [u8]> {
    let rest = file.strip_prefix(MAGIC)?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    let (stored, rest) = rest.split_at_checked(len)?;
    let (sum, data) = rest.split_first_chunk::<8>()?;
    (stored == identity.as_bytes() && u64::from_le_bytes(*sum) == checksum(data)).then_some(data)
}

fn checksum(data: &[u8]) -> u64 {
    let mut hasher = twox_hash::XxHash3_64::default();
    hasher.write(data);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "s3://b/m.brv\0etag1\0+0+10";
    const OTHER_ETAG: &str = "s3://b/m.brv\0etag2\0+0+10";

    #[test]
    fn entries_come_back_only_under_their_identity_and_intact() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::open(dir.path(), 1 << 20).unwrap();
        files.write(KEY, b"0123456789");
        assert_eq!(files.get(KEY).as_deref(), Some(&b"0123456789"[..]));
        assert_eq!(files.get(OTHER_ETAG), None, "another ETag");
        // A damaged file is a miss, and removed.
        let path = files.path(KEY);
        let mut bytes = std::fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(files.get(KEY), None);
        assert!(!path.exists());
    }

    #[test]
    fn the_least_recently_used_go_first_and_files_not_its_own_stay() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        let files = Files::open(dir.path(), 3000).unwrap();
        let block = vec![7u8; 900];
        for i in 0..3 {
            files.write(&format!("k{i}"), &block);
        }
        assert!(files.get("k0").is_some(), "k0 is now the most recent");
        files.write("k3", &block);
        assert!(files.lock().bytes <= 3000);
        assert!(files.get("k1").is_none(), "k1 was the least recently used");
        assert!(files.get("k0").is_some() && files.get("k3").is_some());
        // Reopened, it finds its entries again.
        drop(files);
        let again = DiskCache::open(dir.path(), 3000).unwrap();
        assert!(again.get("k3").is_some());
        assert!(again.held_bytes() <= 3000);
        assert!(dir.path().join("notes.txt").exists());
    }

    #[test]
    fn entries_put_are_written_by_the_time_the_cache_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
        // Fewer than the queue holds: none is turned away.
        let entries: Vec<(String, Vec<u8>)> = (0..QUEUE / 2)
            .map(|i| (format!("k{i}"), vec![i as u8; 100_000]))
            .collect();
        for (identity, data) in &entries {
            cache.put(identity, data.clone());
        }
        drop(cache);
        let again = DiskCache::open(dir.path(), 1 << 30).unwrap();
        for (identity, data) in &entries {
            assert_eq!(again.get(identity).as_ref(), Some(data), "{identity}");
        }
        let leftovers = std::fs::read_dir(dir.path()).unwrap().flatten();
        assert!(leftovers
            .into_iter()
            .all(|e| !e.file_name().to_string_lossy().starts_with(".tmp-")));
    }
}
