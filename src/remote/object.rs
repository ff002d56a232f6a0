//! Archives in a store read as byte sources: an object's bytes are fetched in
//! blocks of [`BLOCK`] bytes, the blocks a read misses in one request per run
//! of neighbours (parallel requests for long runs), and kept in a memory LRU
//! and, if configured, on disk. A reader that goes on where the last fetch of
//! the object ended gets a window that doubles up to [`MAX_WINDOW`] (or half
//! the memory cache, if less), so that sequential reads become few large
//! requests. A window only adds blocks never fetched before: where it would
//! run into blocks fetched already (by another reader of the object, which
//! has gone that way), it stops, so that a block is fetched again only when
//! a read asks for it after the cache let it go.
//!
//! Blocks are keyed by the object's version (ETag) and every GET is made
//! conditional on it, so the bytes of one object never mix two versions: a
//! replaced object makes the reads of the old one fail (EIO), never return
//! other bytes. The reader above checks every chunk's checksum besides.

#![forbid(unsafe_code)]

use super::disk::DiskCache;
use super::extents::OnDisk;
use super::memory::{Block, BlockId, Memory, BLOCK};
use super::store::{ObjectInfo, Store};
use crate::archive::{ByteSource, SourceOpener};
use crate::runs::runs;
use rangemap::RangeSet;
use std::collections::HashSet;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The first window of a sequential reader, and the largest.
const FIRST_WINDOW: u64 = 1 << 20;
pub const MAX_WINDOW: u64 = 32 << 20;
/// The smallest memory cache: two windows of 16 blocks.
pub const MIN_MEMORY: usize = 32 * BLOCK as usize;
/// Longest single request: longer runs are split into parallel requests.
const PART: u64 = 8 << 20;

/// A store with its caches, shared by every object read from it.
pub struct Remote {
    pub store: Store,
    memory: Mutex<Memory>,
    disk: Option<DiskCache>,
    /// Blocks being fetched, so that readers wanting one wait for it rather
    /// than fetch it again.
    inflight: Mutex<HashSet<BlockId>>,
    landed: Condvar,
    /// A sequential reader's largest window: at most half the memory cache,
    /// so that a window is not evicted before it is read.
    max_window: u64,
}

impl Remote {
    /// `store` with a memory cache of `memory` bytes (at least
    /// [`MIN_MEMORY`]; sequential windows are at most half of it) and an
    /// optional disk cache.
    pub fn new(store: Store, memory: usize, disk: Option<DiskCache>) -> Arc<Remote> {
        let capacity = memory.max(MIN_MEMORY);
        let max_window = (capacity as u64 / 2 / BLOCK * BLOCK).min(MAX_WINDOW);
        Arc::new(Remote {
            store,
            memory: Mutex::new(Memory::new(capacity)),
            disk,
            inflight: Mutex::new(HashSet::new()),
            landed: Condvar::new(),
            max_window,
        })
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn inflight(&self) -> MutexGuard<'_, HashSet<BlockId>> {
        self.inflight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cached(&self, id: &BlockId) -> Option<Block> {
        self.memory().get(id)
    }

    /// Whether block `id` is in the memory cache (not counted as a use).
    fn has(&self, id: &BlockId) -> bool {
        self.memory().contains(id)
    }

    /// Bytes that fetching ahead of readers may still take, the blocks in
    /// flight counted as not read through.
    fn room(&self, inflight: &HashSet<BlockId>) -> u64 {
        let flying = inflight.len() as u64 * BLOCK;
        self.memory().room().saturating_sub(flying)
    }

    /// The object as a byte source.
    pub fn object(self: &Arc<Remote>, info: ObjectInfo) -> RemoteObject {
        RemoteObject {
            id: format!("{}/{}\0{}", self.store.root(), info.key, info.version).into(),
            remote: self.clone(),
            info,
            sequence: Mutex::new(Sequence {
                next: u64::MAX,
                window: FIRST_WINDOW.min(self.max_window),
                fetched: RangeSet::new(),
            }),
        }
    }

    /// The object at `key`, as it is now.
    pub fn open(self: &Arc<Remote>, key: &str) -> io::Result<RemoteObject> {
        match self.store.head(key)? {
            Some(info) => Ok(self.object(info)),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such object")),
        }
    }

    /// How an archive at `key` is named in messages, and how bases are found
    /// relative to it.
    pub fn url(&self, key: &str) -> String {
        format!("{}/{key}", self.store.root())
    }
}

/// Where the last fetch of an object ended, how far the next sequential
/// one reaches, and which blocks were ever fetched.
struct Sequence {
    /// Block after the last fetched run.
    next: u64,
    window: u64,
    /// Blocks claimed for fetching so far, as runs (a sequential reader's
    /// make one): a window stops before them.
    fetched: RangeSet<u64>,
}

/// One version of one object.
pub struct RemoteObject {
    remote: Arc<Remote>,
    info: ObjectInfo,
    /// `root/key\0version`: the key of its blocks in the caches.
    id: Arc<str>,
    sequence: Mutex<Sequence>,
}

impl RemoteObject {
    pub fn info(&self) -> &ObjectInfo {
        &self.info
    }

    fn block_range(&self, block: u64) -> Range<u64> {
        let start = block * BLOCK;
        start..(start + BLOCK).min(self.info.len)
    }

    fn on_disk(&self) -> Option<OnDisk<'_>> {
        Some(OnDisk {
            cache: self.remote.disk.as_ref()?,
            id: &self.id,
            len: self.info.len,
        })
    }

    /// Blocks `wanted`, from the caches or fetched. Waits at most about two
    /// timeouts of the store, whatever other readers do.
    fn blocks(&self, wanted: Range<u64>) -> io::Result<Vec<Block>> {
        let deadline = Instant::now() + 2 * self.remote.store.timeout();
        let mut got: Vec<Option<Block>> = vec![None; (wanted.end - wanted.start) as usize];
        loop {
            let missing: Vec<u64> = wanted
                .clone()
                .filter(|&b| {
                    let slot = &mut got[(b - wanted.start) as usize];
                    if slot.is_none() {
                        *slot = self.remote.cached(&(self.id.clone(), b));
                    }
                    slot.is_none()
                })
                .collect();
            if missing.is_empty() {
                return Ok(got.into_iter().flatten().collect());
            }
            let (mine, theirs) = self.claim(&missing);
            if !mine.is_empty() {
                let fetched = self.fetch_mine(&mine);
                // Taken as fetched, not from the cache, which may have
                // evicted some already if the read is larger than it.
                for (b, block) in fetched? {
                    if wanted.contains(&b) {
                        got[(b - wanted.start) as usize] = Some(block);
                    }
                }
            }
            if !theirs.is_empty() && !self.await_others(&theirs, deadline) {
                let at = self.block_range(theirs[0]).start;
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{}: waiting for byte {at}", self.remote.url(&self.info.key)),
                ));
            }
            // Blocks fetched by others, or failed there: look again (a
            // failed one is then claimed and fetched here).
        }
    }

    /// Splits `missing` into blocks this reader fetches (now marked in
    /// flight, with the sequential window added) and blocks others fetch.
    /// Blocks that others fetched since `missing` was made are in neither.
    fn claim(&self, missing: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let mut inflight = self.remote.inflight();
        // Fetched blocks enter the cache before they leave `inflight`, so
        // under its lock a block is in flight, cached, or for us to fetch.
        let (theirs, rest): (Vec<u64>, Vec<u64>) = missing
            .iter()
            .partition(|&&b| inflight.contains(&(self.id.clone(), b)));
        let mut mine: Vec<u64> = rest
            .into_iter()
            .filter(|&b| !self.remote.has(&(self.id.clone(), b)))
            .collect();
        if let Some(&last) = mine.last() {
            // (The blocks claimed here will not be read through either.)
            let room = (self.remote.room(&inflight) / BLOCK).saturating_sub(mine.len() as u64);
            let window = self.window_after(mine[0], last + 1);
            let extra = window.start..window.end.min(window.start + room);
            for b in extra {
                // (Another object of the same version may have fetched it.)
                let id = (self.id.clone(), b);
                if inflight.contains(&id) || self.remote.has(&id) {
                    break;
                }
                mine.push(b);
            }
        }
        self.sequence()
            .fetched
            .extend(mine.iter().map(|&b| b..b + 1));
        for &b in &mine {
            inflight.insert((self.id.clone(), b));
        }
        (mine, theirs)
    }

    fn sequence(&self) -> MutexGuard<'_, Sequence> {
        self.sequence.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The blocks after `end` a fetch starting at `start` should add: a
    /// window that doubles while fetches follow each other, up to the first
    /// block fetched before.
    fn window_after(&self, start: u64, end: u64) -> Range<u64> {
        let mut seq = self.sequence();
        let sequential = seq.next <= start && start <= seq.next.saturating_add(seq.window / BLOCK);
        let max = self.remote.max_window;
        seq.window = match sequential {
            true => (seq.window * 2).min(max),
            false => FIRST_WINDOW.min(max),
        };
        let blocks = self.info.len.div_ceil(BLOCK);
        let mut stop = match sequential {
            true => (start + seq.window / BLOCK).clamp(end, blocks),
            false => end,
        };
        // A block fetched before is cached, in flight, or was let go of
        // after a reader had it: either way not worth fetching ahead.
        if let Some(taken) = seq.fetched.overlapping(end..stop).next() {
            stop = taken.start.max(end);
        }
        seq.next = stop;
        end..stop
    }

    /// Where the blocks `wanted`, fetched ahead of their reader, stop
    /// fitting the room for that: blocks kept or in flight cost nothing, the
    /// others a block each. (The reader fetches the rest as it reads them.)
    fn ahead_cut(&self, wanted: Range<u64>) -> u64 {
        let inflight = self.remote.inflight();
        let mut room = self.remote.room(&inflight) / BLOCK;
        for b in wanted.clone() {
            let id = (self.id.clone(), b);
            if inflight.contains(&id) || self.remote.has(&id) {
                continue;
            }
            if room == 0 {
                return b;
            }
            room -= 1;
        }
        wanted.end
    }

    /// Fetches the blocks `mine` claimed, and lets go of the claim.
    fn fetch_mine(&self, mine: &[u64]) -> io::Result<Vec<(u64, Block)>> {
        let fetched = self.fetch_claimed(mine);
        self.release(mine);
        fetched
    }

    fn release(&self, mine: &[u64]) {
        let mut inflight = self.remote.inflight();
        for &b in mine {
            inflight.remove(&(self.id.clone(), b));
        }
        self.remote.landed.notify_all();
    }

    /// Waits until none of `theirs` is in flight; false at the deadline.
    fn await_others(&self, theirs: &[u64], deadline: Instant) -> bool {
        let mut inflight = self.remote.inflight();
        loop {
            if !theirs
                .iter()
                .any(|&b| inflight.contains(&(self.id.clone(), b)))
            {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            let wait = left.min(Duration::from_millis(500));
            inflight = self
                .remote
                .landed
                .wait_timeout(inflight, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Blocks `mine`, also put in the memory cache: from disk where it has
    /// them, else fetched in one request per run of neighbours.
    fn fetch_claimed(&self, mine: &[u64]) -> io::Result<Vec<(u64, Block)>> {
        let mut sorted = mine.to_vec();
        sorted.sort_unstable();
        let (found, to_fetch) = match self.on_disk() {
            Some(disk) => disk.blocks(&sorted),
            None => (Vec::new(), sorted),
        };
        let hits: usize = found.iter().map(|(_, bytes)| bytes.len()).sum();
        let stats = &self.remote.store.stats;
        stats
            .disk_hit_bytes
            .fetch_add(hits as u64, Ordering::Relaxed);
        let mut out: Vec<(u64, Block)> = (found.into_iter())
            .map(|(b, bytes)| (b, Arc::new(bytes)))
            .collect();
        let runs = runs(to_fetch);
        let ranges: Vec<Range<u64>> = runs
            .iter()
            .flat_map(|run| {
                split(self.block_range(run.start).start..self.block_range(run.end - 1).end)
            })
            .collect();
        let results = self.remote.store.get_ranges(&self.info, &ranges);
        let mut failure = None;
        // (What did arrive is kept even if another part failed.)
        for (range, result) in ranges.iter().zip(results) {
            match result {
                Ok(bytes) => {
                    if let Some(disk) = self.on_disk() {
                        disk.keep(range.start / BLOCK, &bytes);
                    }
                    out.extend(cut(range.start, &bytes));
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let mut memory = self.remote.memory();
        for (b, block) in &out {
            memory.keep((self.id.clone(), *b), block.clone());
        }
        drop(memory);
        match failure {
            Some(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            None => Ok(out),
        }
    }
}

/// `bytes`, fetched from `start` (a block boundary), cut into blocks.
fn cut(start: u64, bytes: &[u8]) -> Vec<(u64, Block)> {
    let first = start / BLOCK;
    let pieces = bytes.chunks(BLOCK as usize).enumerate();
    pieces
        .map(|(i, piece)| (first + i as u64, Arc::new(piece.to_vec())))
        .collect()
}

/// `range` in pieces of at most `PART` bytes, cut at multiples of `PART`
/// (so that a piece holds whole extents of the disk cache).
fn split(range: Range<u64>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let end = ((at / PART + 1) * PART).min(range.end);
        out.push(at..end);
        at = end;
    }
    out
}

impl ByteSource for RemoteObject {
    fn len(&self) -> u64 {
        self.info.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        if buf.is_empty() {
            return Ok(());
        }
        if end > self.info.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        let first = offset / BLOCK;
        let blocks = self.blocks(first..(end - 1) / BLOCK + 1)?;
        let mut at = offset;
        for (i, block) in blocks.iter().enumerate() {
            let start = (first + i as u64) * BLOCK;
            let from = (at - start) as usize;
            let to = ((end - start) as usize).min(block.len());
            // A block is never shorter than its range (checked when fetched).
            let piece = block
                .get(from..to)
                .ok_or_else(|| io::Error::other("short block"))?;
            let dst = (at - offset) as usize;
            buf[dst..dst + piece.len()].copy_from_slice(piece);
            at += piece.len() as u64;
        }
        let mut memory = self.remote.memory();
        for b in first..(end - 1) / BLOCK + 1 {
            let start = b * BLOCK;
            let range = offset.max(start) - start..end.min(start + BLOCK) - start;
            memory.read(
                &(self.id.clone(), b),
                range.start as usize..range.end as usize,
            );
        }
        Ok(())
    }

    fn prefetch(&self, range: Range<u64>) -> io::Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        if range.end > self.info.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        let first = range.start / BLOCK;
        let cut = self.ahead_cut(first..(range.end - 1) / BLOCK + 1);
        let missing: Vec<u64> = (first..cut)
            .filter(|&b| !self.remote.has(&(self.id.clone(), b)))
            .collect();
        // A hint waits for no fetch of others: by the time one lands, its
        // blocks may have been read through and let go of, and fetching them
        // again would be for nothing.
        let (mine, _) = self.claim(&missing);
        match mine.is_empty() {
            true => Ok(()),
            false => self.fetch_mine(&mine).map(drop),
        }
    }
}

/// Opens archives of a store by their URL (`s3://bucket/key`): bases named
/// by relative paths resolve in the same store. The one archive whose version
/// is already known opens as that version.
pub struct Opener {
    pub remote: Arc<Remote>,
    pub known: Option<ObjectInfo>,
}

impl SourceOpener for Opener {
    fn open(&self, path: &Path) -> io::Result<Box<dyn ByteSource>> {
        let key = key_of(self.remote.store.root(), path)?;
        match self.known.as_ref().filter(|info| info.key == key) {
            Some(info) => Ok(Box::new(self.remote.object(info.clone()))),
            None => Ok(Box::new(self.remote.open(&key)?)),
        }
    }
}

/// The key of `path`, a URL under `root` whose `.` and `..` components are
/// resolved (a base path may climb folders, never above the bucket).
pub fn key_of(root: &str, path: &Path) -> io::Result<String> {
    let invalid = |why: &str| {
        let message = format!("{}: {why}", path.display());
        io::Error::new(io::ErrorKind::InvalidInput, message)
    };
    let text = path.to_str().ok_or_else(|| invalid("not UTF-8"))?;
    let rest = text
        .strip_prefix(root)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| invalid("not in this store"))?;
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts
                    .pop()
                    .ok_or_else(|| invalid("climbs above the store's root"))?;
            }
            name => parts.push(name),
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::store::RemoteOptions;
    use object_store::memory::InMemory;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
    use std::sync::atomic::Ordering;

    /// A store in memory holding `bytes` at `m.brv`, and the client to change it.
    fn remote(bytes: &[u8]) -> (Arc<Remote>, Arc<InMemory>) {
        remote_with(bytes, 0)
    }

    /// [`remote`] with a memory cache of `cache` bytes (at least [`MIN_MEMORY`]).
    fn remote_with(bytes: &[u8], cache: usize) -> (Arc<Remote>, Arc<InMemory>) {
        let memory = Arc::new(InMemory::new());
        let client: Arc<dyn ObjectStore> = memory.clone();
        let store = Store::with_client(client, "mem://".into(), RemoteOptions::default()).unwrap();
        let remote = Remote::new(store, cache, None);
        put(&remote, &memory, bytes);
        (remote, memory)
    }

    fn put(remote: &Remote, memory: &Arc<InMemory>, bytes: &[u8]) {
        let payload = PutPayload::from(bytes.to_vec());
        let path = object_store::path::Path::from("m.brv");
        let memory = memory.clone();
        let handle = remote.store.runtime();
        handle
            .block_on(async move { memory.put(&path, payload).await })
            .unwrap();
    }

    fn counter(remote: &Remote) -> (u64, u64) {
        let stats = &remote.store.stats;
        let fetched = stats.fetched_bytes.load(Ordering::Relaxed);
        (fetched, stats.requests.load(Ordering::Relaxed))
    }

    fn data(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| ((i * 2654435761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn reads_anywhere_equal_the_object_and_fetch_their_blocks_only() {
        let bytes = data(3 << 20);
        let (remote, _) = remote(&bytes);
        let object = remote.open("m.brv").unwrap();
        let (_, head) = counter(&remote);
        let mut buf = vec![0u8; 5000];
        object.read_exact_at(&mut buf, 1_000_000).unwrap();
        assert_eq!(buf, bytes[1_000_000..1_005_000]);
        assert_eq!(
            counter(&remote),
            (BLOCK, head + 1),
            "one block, one request"
        );
        // The same block again comes from memory.
        object.read_exact_at(&mut buf[..10], 1_000_100).unwrap();
        assert_eq!(counter(&remote).0, BLOCK);
        let mut tail = vec![0u8; 7];
        object
            .read_exact_at(&mut tail, bytes.len() as u64 - 7)
            .unwrap();
        assert_eq!(tail, bytes[bytes.len() - 7..]);
        let past = object.read_exact_at(&mut tail, bytes.len() as u64 - 3);
        assert!(past.is_err());
    }

    #[test]
    fn a_sequential_reader_fetches_each_byte_once_in_growing_requests() {
        let bytes = data(20 << 20);
        let (remote, _) = remote_with(&bytes, 2 * MAX_WINDOW as usize);
        let object = Arc::new(remote.open("m.brv").unwrap());
        let (_, head) = counter(&remote);
        // Four readers take turns over the same file, as the kernel's
        // concurrent read-ahead requests do.
        let mut out = vec![0u8; bytes.len()];
        std::thread::scope(|scope| {
            for (i, piece) in out.chunks_mut(128 << 10).enumerate() {
                let object = object.clone();
                let at = i as u64 * (128 << 10);
                scope.spawn(move || object.read_exact_at(piece, at).unwrap());
                if i % 4 == 3 {
                    std::thread::yield_now();
                }
            }
        });
        assert!(out == bytes);
        let (fetched, requests) = counter(&remote);
        assert_eq!(fetched, bytes.len() as u64, "each byte fetched once");
        assert!(requests - head < 40, "{} requests", requests - head);
    }

    #[test]
    fn a_read_larger_than_the_memory_cache_fetches_each_byte_once() {
        let bytes = data(80 << 20);
        let (remote, _) = remote(&bytes);
        let object = remote.open("m.brv").unwrap();
        let mut out = vec![0u8; bytes.len() - 1000];
        object.read_exact_at(&mut out, 1000).unwrap();
        assert!(out[..] == bytes[1000..]);
        assert_eq!(counter(&remote).0, bytes.len() as u64);
    }

    /// Reads `span` of `object` as a reader with read-ahead does: each step
    /// prefetches the next `ahead` bytes of the span, then reads `piece`
    /// bytes. What it read.
    fn read_ahead(object: &RemoteObject, span: Range<u64>, ahead: u64, piece: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = span.start;
        while at < span.end {
            let stop = (at + piece).min(span.end);
            let reach = (stop + ahead).min(span.end);
            object.prefetch(stop..reach).unwrap();
            let mut buf = vec![0u8; (stop - at) as usize];
            object.read_exact_at(&mut buf, at).unwrap();
            out.extend(buf);
            at = stop;
        }
        out
    }

    #[test]
    fn readers_ahead_of_a_small_cache_fetch_each_byte_once() {
        // A cache of 2 MiB, readers prefetching 3 MiB ahead: what does not
        // fit is fetched as it is read, never fetched ahead and let go of.
        let bytes = data(24 << 20);
        let (remote, _) = remote_with(&bytes, MIN_MEMORY);
        let object = remote.open("m.brv").unwrap();
        let len = bytes.len() as u64;
        let got = read_ahead(&object, 0..len, 3 << 20, 40_000);
        assert!(got == bytes);
        assert_eq!(counter(&remote).0, len, "each byte fetched once");

        // Two readers taking turns, from the start and from the middle, as
        // a loader touching a mapped file on two threads.
        let (remote, _) = remote_with(&bytes, MIN_MEMORY);
        let object = Arc::new(remote.open("m.brv").unwrap());
        let half = len / 2;
        let (a, b) = std::thread::scope(|scope| {
            let (one, two) = (object.clone(), object.clone());
            let a = scope.spawn(move || read_ahead(&one, 0..half, 1 << 20, 100_000));
            let b = scope.spawn(move || read_ahead(&two, half..len, 1 << 20, 100_000));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(a == bytes[..half as usize] && b == bytes[half as usize..]);
        let fetched = counter(&remote).0;
        // A block where the first stream meets the second's start, at most.
        assert!(fetched <= len + BLOCK, "{fetched} bytes fetched for {len}");
        assert!(remote.memory().bytes() <= MIN_MEMORY);
    }

    #[test]
    fn a_replaced_object_fails_reads_of_the_old_version_instead_of_mixing() {
        let bytes = data(1 << 20);
        let (remote, memory) = remote(&bytes);
        let object = remote.open("m.brv").unwrap();
        let mut buf = vec![0u8; 100];
        object.read_exact_at(&mut buf, 0).unwrap();
        put(
            &remote,
            &memory,
            &data(1 << 20).iter().map(|b| !b).collect::<Vec<_>>(),
        );
        let err = object.read_exact_at(&mut buf, 900_000).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StaleNetworkFileHandle, "{err}");
        assert!(
            err.to_string().contains("changed since it was opened"),
            "{err}"
        );
        // What was fetched before stays the old version's.
        object.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, bytes[..100]);
        let fresh = remote.open("m.brv").unwrap();
        fresh.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf[0], !bytes[0]);
    }

    #[test]
    fn keys_resolve_relative_paths_inside_the_store() {
        let key = |p: &str| key_of("s3://models", Path::new(p));
        assert_eq!(
            key("s3://models/tuned/../base/m.brv").unwrap(),
            "base/m.brv"
        );
        assert_eq!(key("s3://models/a/./b.brv").unwrap(), "a/b.brv");
        assert!(key("s3://models/../x.brv").is_err());
        assert!(key("s3://other/x.brv").is_err());
        assert!(key("s3://modelsx/y.brv").is_err());
    }

    #[test]
    fn long_runs_split_into_parts() {
        let parts = split(0..PART * 2 + 5);
        assert_eq!(parts, vec![0..PART, PART..2 * PART, 2 * PART..2 * PART + 5]);
        let parts = split(BLOCK..PART * 2);
        assert_eq!(parts, vec![BLOCK..PART, PART..2 * PART], "cut at multiples");
    }
}
