//! Decoded chunks shared by every reader of the mount: an LRU bounded in bytes,
//! with single-flight decoding so that readers wanting one chunk decode it once.

use lru::LruCache;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// A chunk: which archive (an id the caller keeps unique per archive file) and
/// which of its segments.
pub type ChunkKey = (u64, usize);

/// Decoded bytes of one chunk, already verified against its checksum. (A `Vec`
/// rather than a slice, so that the decoder's buffer is kept without a copy.)
pub type Chunk = Arc<Vec<u8>>;

pub struct ChunkCache {
    capacity: usize,
    state: Mutex<State>,
}

struct State {
    ready: LruCache<ChunkKey, Ready>,
    /// Bytes held by `ready` (buffer capacities).
    bytes: usize,
    decoding: HashMap<ChunkKey, Arc<Flight>>,
    /// Buffers of evicted chunks, handed to the next decodes: reusing them
    /// spares the page faults and zeroing of fresh memory.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
}

/// A decoded chunk in the cache.
struct Ready {
    chunk: Chunk,
    /// A reader went past its end (see `ChunkCache::demote`).
    read_through: bool,
}

/// Most bytes of spare buffers kept.
const SPARE_BYTES: usize = 8 << 20;

/// One decode in progress, awaited by the readers that arrived after it started.
#[derive(Default)]
struct Flight {
    result: Mutex<Option<Result<Chunk, String>>>,
    done: Condvar,
}

impl ChunkCache {
    /// A cache holding at most `capacity` bytes of decoded chunks (a chunk larger
    /// than that is decoded for its readers and not kept).
    pub fn new(capacity: usize) -> ChunkCache {
        ChunkCache {
            capacity,
            state: Mutex::new(State {
                ready: LruCache::unbounded(),
                bytes: 0,
                decoding: HashMap::new(),
                spare: Vec::new(),
                spare_bytes: 0,
            }),
        }
    }

    /// Bytes of decoded chunks held now.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Whether `key` is decoded or being decoded.
    pub fn contains(&self, key: ChunkKey) -> bool {
        let state = self.lock();
        state.ready.contains(&key) || state.decoding.contains_key(&key)
    }

    /// Makes `key` the first chunk to evict: its reader has gone past it, and
    /// the kernel's page cache holds what was read. Otherwise the chunks
    /// decoded ahead, which wait unread the longest, would be evicted first.
    ///
    /// Its buffer is also the first a new decode takes, before fresh memory: a
    /// sequential reader then cycles through about its read-ahead's worth of
    /// buffers, which stay mapped and warm in the CPU caches, where fresh ones
    /// cost a page fault per 4 KiB.
    pub fn demote(&self, key: ChunkKey) {
        let mut state = self.lock();
        if let Some(ready) = state.ready.peek_mut(&key) {
            ready.read_through = true;
            state.ready.demote(&key);
        }
    }

    /// The chunk for `key`, `len` bytes, decoded by `decode` if no one holds or
    /// is decoding it. `decode` gets a buffer of `len` bytes to overwrite (a
    /// reused one or fresh memory) and returns it filled. A failed decode is
    /// reported to everyone waiting on it and not kept, so a later read tries
    /// again.
    pub fn get_or_decode(
        &self,
        key: ChunkKey,
        len: usize,
        decode: impl FnOnce(Vec<u8>) -> Result<Vec<u8>, String>,
    ) -> Result<Chunk, String> {
        let (flight, buffer) = {
            let mut state = self.lock();
            if let Some(ready) = state.ready.get_mut(&key) {
                ready.read_through = false;
                return Ok(ready.chunk.clone());
            }
            if let Some(flight) = state.decoding.get(&key) {
                let flight = flight.clone();
                drop(state);
                return flight.wait();
            }
            let flight = Arc::new(Flight::default());
            state.decoding.insert(key, flight.clone());
            let buffer = state.take_buffer(len);
            (flight, buffer)
        };
        // If `decode` panics, waiters must not sleep forever: the guard ends the
        // flight with an error as it unwinds.
        let mut landing = Landing {
            cache: self,
            key,
            flight: &flight,
            result: Some(Err("the decoder panicked".to_string())),
        };
        let result = decode(buffer).map(Arc::new);
        landing.result = Some(result.clone());
        drop(landing);
        result
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every unlock, so a panic elsewhere while
        // holding the lock does not make it unusable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn land(&self, key: ChunkKey, flight: &Flight, result: Result<Chunk, String>) {
        {
            let mut state = self.lock();
            state.decoding.remove(&key);
            if let Ok(chunk) = &result {
                if chunk.capacity() <= self.capacity {
                    state.bytes += chunk.capacity();
                    let ready = Ready {
                        chunk: chunk.clone(),
                        read_through: false,
                    };
                    if let Some(old) = state.ready.put(key, ready) {
                        state.evicted(old.chunk);
                    }
                    while state.bytes > self.capacity {
                        let (_, evicted) = state.ready.pop_lru().expect("bytes > 0");
                        state.evicted(evicted.chunk);
                    }
                }
            }
        }
        *flight.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        flight.done.notify_all();
    }
}

impl State {
    /// A buffer of `len` bytes for a new decode: a reused one if there is one
    /// large enough, else fresh memory, rounded up to a power of two so that
    /// a tensor's shorter last chunk leaves room for a full chunk when its
    /// buffer is reused. (Calloc leaves the pages past `len` untouched until
    /// they are used.)
    fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut buffer = self
            .reusable(len)
            .unwrap_or_else(|| vec![0; len.next_power_of_two()]);
        // Only growth is zeroed: the decoder overwrites the rest.
        buffer.truncate(len);
        buffer.resize(len, 0);
        buffer
    }

    /// A spare buffer of at least `len` bytes, else the buffer of a chunk read
    /// through (least recent first). Read-through chunks too small for `len`
    /// leave the cache on the way, their buffers kept as spares.
    fn reusable(&mut self, len: usize) -> Option<Vec<u8>> {
        if let Some(i) = self.spare.iter().position(|b| b.capacity() >= len) {
            let buffer = self.spare.swap_remove(i);
            self.spare_bytes -= buffer.capacity();
            return Some(buffer);
        }
        while self.ready.peek_lru().is_some_and(|(_, r)| r.read_through) {
            let (_, ready) = self.ready.pop_lru().expect("peeked");
            self.bytes -= ready.chunk.capacity();
            match Arc::try_unwrap(ready.chunk) {
                Ok(buffer) if buffer.capacity() >= len => return Some(buffer),
                Ok(buffer) => self.keep_spare(buffer),
                // A reader still holds it: the buffer stays theirs.
                Err(_) => {}
            }
        }
        None
    }

    /// Accounts for a chunk leaving `ready`, keeping its buffer as a spare if no
    /// reader holds it any more.
    fn evicted(&mut self, chunk: Chunk) {
        self.bytes -= chunk.capacity();
        if let Ok(buffer) = Arc::try_unwrap(chunk) {
            self.keep_spare(buffer);
        }
    }

    /// Keeps `buffer` for later decodes if there is room among the spares.
    fn keep_spare(&mut self, buffer: Vec<u8>) {
        if self.spare_bytes + buffer.capacity() <= SPARE_BYTES {
            self.spare_bytes += buffer.capacity();
            self.spare.push(buffer);
        }
    }
}

impl Flight {
    fn wait(&self) -> Result<Chunk, String> {
        let mut result = self.result.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = result.as_ref() {
                return result.clone();
            }
            result = self
                .done
                .wait(result)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Ends a flight when dropped, whether its decode returned or unwound.
struct Landing<'a> {
    cache: &'a ChunkCache,
    key: ChunkKey,
    flight: &'a Flight,
    result: Option<Result<Chunk, String>>,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let result = self.result.take().expect("set until drop");
        self.cache.land(self.key, self.flight, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn stays_within_capacity_and_evicts_least_recent() {
        let cache = ChunkCache::new(250);
        for i in 0..3 {
            cache
                .get_or_decode((0, i), 100, |_| Ok(vec![i as u8; 100]))
                .unwrap();
        }
        assert_eq!(cache.held_bytes(), 200);
        assert!(!cache.contains((0, 0)), "oldest chunk evicted");
        assert!(cache.contains((0, 1)) && cache.contains((0, 2)));
        // Touching 1 makes 2 the least recent.
        cache
            .get_or_decode((0, 1), 100, |_| unreachable!())
            .unwrap();
        cache
            .get_or_decode((0, 3), 100, |_| Ok(vec![3; 100]))
            .unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 2)));
        // A demoted chunk goes first, though it was used last.
        cache.demote((0, 3));
        cache
            .get_or_decode((0, 4), 100, |_| Ok(vec![4; 100]))
            .unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 3)));
    }

    #[test]
    fn evicted_buffers_are_handed_to_later_decodes() {
        let cache = ChunkCache::new(100);
        cache
            .get_or_decode((0, 0), 100, |_| Ok(vec![1; 100]))
            .unwrap();
        let held = cache
            .get_or_decode((0, 1), 100, |_| Ok(vec![2; 100]))
            .unwrap();
        // Chunk 0 was evicted while no one held it: its buffer comes back.
        let chunk = cache
            .get_or_decode((0, 2), 100, |spare| {
                assert_eq!(spare, vec![1; 100]);
                Ok(spare)
            })
            .unwrap();
        assert_eq!(chunk.len(), 100);
        // Chunk 1 was evicted while a reader held it: its buffer stays theirs.
        cache
            .get_or_decode((0, 3), 100, |spare| {
                assert_eq!(spare, [0; 100], "a held chunk's buffer must not be reused");
                Ok(vec![4; 100])
            })
            .unwrap();
        assert_eq!(held[0], 2);
    }

    #[test]
    fn read_through_chunks_lend_their_buffers_first() {
        let cache = ChunkCache::new(1 << 20);
        cache
            .get_or_decode((0, 0), 100, |_| Ok(vec![1; 100]))
            .unwrap();
        cache
            .get_or_decode((0, 1), 100, |_| Ok(vec![2; 100]))
            .unwrap();
        cache.demote((0, 0));
        // Room is left, yet the chunk read through gives its buffer up.
        cache
            .get_or_decode((0, 2), 100, |buffer| {
                assert_eq!(buffer, [1; 100]);
                Ok(buffer)
            })
            .unwrap();
        assert!(!cache.contains((0, 0)) && cache.contains((0, 1)));
        // A chunk not read through keeps its buffer: the next one is fresh.
        cache
            .get_or_decode((0, 3), 100, |buffer| {
                assert_eq!(buffer, [0; 100]);
                Ok(buffer)
            })
            .unwrap();
        assert!(cache.contains((0, 1)) && cache.contains((0, 2)));
        // Nor does one read again after it was read through, when it comes
        // to be the least recent.
        for i in 1..=3 {
            cache.demote((0, i));
        }
        cache
            .get_or_decode((0, 1), 100, |_| unreachable!())
            .unwrap();
        for i in 4..=6 {
            cache.get_or_decode((0, i), 100, Ok).unwrap();
        }
        assert!(!cache.contains((0, 2)) && !cache.contains((0, 3)));
        assert!(cache.contains((0, 1)), "read again: not to be taken");
    }

    #[test]
    fn buffers_are_reused_for_chunks_they_fit() {
        let cache = ChunkCache::new(1 << 20);
        // A tensor's last, shorter chunk gets room for a full one.
        cache.get_or_decode((0, 0), 100, Ok).unwrap();
        cache.demote((0, 0));
        cache
            .get_or_decode((0, 1), 120, |buffer| {
                assert_eq!(buffer.len(), 120);
                assert!(buffer.capacity() >= 128, "the shorter chunk's buffer");
                Ok(buffer)
            })
            .unwrap();
        // A buffer too small is passed over, and stays spare.
        cache
            .get_or_decode((0, 2), 10, |_| Ok(vec![3; 10]))
            .unwrap();
        cache.demote((0, 1));
        cache.demote((0, 2));
        cache
            .get_or_decode((0, 3), 100, |buffer| {
                assert_eq!(buffer.len(), 100);
                assert!(buffer.capacity() >= 120);
                Ok(buffer)
            })
            .unwrap();
        cache
            .get_or_decode((0, 4), 10, |buffer| {
                assert_eq!(buffer, [3; 10], "the spare that fits");
                Ok(buffer)
            })
            .unwrap();
    }

    #[test]
    fn a_read_through_buffer_is_reused_even_when_too_large_to_keep_spare() {
        let len = SPARE_BYTES + 1;
        let cache = ChunkCache::new(4 * len);
        cache
            .get_or_decode((0, 0), len, |_| Ok(vec![7; len]))
            .unwrap();
        cache.demote((0, 0));
        cache
            .get_or_decode((0, 1), len, |buffer| {
                assert!(buffer.iter().all(|&b| b == 7), "chunk 0's buffer");
                Ok(buffer)
            })
            .unwrap();
    }

    #[test]
    fn oversized_chunks_are_served_but_not_kept() {
        let cache = ChunkCache::new(10);
        let chunk = cache
            .get_or_decode((1, 0), 11, |_| Ok(vec![7; 11]))
            .unwrap();
        assert_eq!(&chunk[..], &[7; 11]);
        assert_eq!(cache.held_bytes(), 0);
        assert!(!cache.contains((1, 0)));
    }

    #[test]
    fn errors_reach_the_reader_and_are_not_kept() {
        let cache = ChunkCache::new(1000);
        let err = cache
            .get_or_decode((0, 0), 100, |_| Err("bad".into()))
            .unwrap_err();
        assert_eq!(err, "bad");
        assert!(!cache.contains((0, 0)));
        let ok = cache.get_or_decode((0, 0), 100, |_| Ok(vec![1])).unwrap();
        assert_eq!(&ok[..], &[1]);
    }

    #[test]
    fn concurrent_readers_of_one_chunk_decode_it_once() {
        let cache = ChunkCache::new(1 << 20);
        let decodes = AtomicUsize::new(0);
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    let chunk = cache
                        .get_or_decode((9, 9), 1000, |_| {
                            decodes.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            Ok(vec![5; 1000])
                        })
                        .unwrap();
                    assert_eq!(&chunk[..], &[5; 1000][..]);
                });
            }
        });
        assert_eq!(decodes.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_panicking_decode_releases_its_waiters() {
        let cache = ChunkCache::new(1 << 20);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.get_or_decode((2, 2), 2, |_| panic!("decoder bug"))
        }));
        assert!(caught.is_err());
        assert!(!cache.contains((2, 2)), "the flight ended");
        let ok = cache.get_or_decode((2, 2), 2, |_| Ok(vec![1, 2])).unwrap();
        assert_eq!(&ok[..], &[1, 2]);
    }
}
