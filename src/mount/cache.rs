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
    ready: LruCache<ChunkKey, Chunk>,
    /// Bytes held by `ready` (buffer capacities).
    bytes: usize,
    decoding: HashMap<ChunkKey, Arc<Flight>>,
    /// Buffers of evicted chunks, handed to the next decodes: reusing them
    /// spares the page faults and zeroing of fresh memory.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
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
    pub fn demote(&self, key: ChunkKey) {
        self.lock().ready.demote(&key);
    }

    /// The chunk for `key`, decoded by `decode` if no one holds or is decoding
    /// it. `decode` gets a buffer to decode into (a spare one or empty, of any
    /// length) and returns it filled. A failed decode is reported to everyone
    /// waiting on it and not kept, so a later read tries again.
    pub fn get_or_decode(
        &self,
        key: ChunkKey,
        decode: impl FnOnce(Vec<u8>) -> Result<Vec<u8>, String>,
    ) -> Result<Chunk, String> {
        let (flight, buffer) = {
            let mut state = self.lock();
            if let Some(chunk) = state.ready.get(&key) {
                return Ok(chunk.clone());
            }
            if let Some(flight) = state.decoding.get(&key) {
                let flight = flight.clone();
                drop(state);
                return flight.wait();
            }
            let flight = Arc::new(Flight::default());
            state.decoding.insert(key, flight.clone());
            let buffer = state.spare.pop().unwrap_or_default();
            state.spare_bytes -= buffer.capacity();
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
                    if let Some(old) = state.ready.put(key, chunk.clone()) {
                        state.evicted(old);
                    }
                    while state.bytes > self.capacity {
                        let (_, evicted) = state.ready.pop_lru().expect("bytes > 0");
                        state.evicted(evicted);
                    }
                }
            }
        }
        *flight.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        flight.done.notify_all();
    }
}

impl State {
    /// Accounts for a chunk leaving `ready`, keeping its buffer as a spare if no
    /// reader holds it any more and there is room.
    fn evicted(&mut self, chunk: Chunk) {
        self.bytes -= chunk.capacity();
        if let Ok(buffer) = Arc::try_unwrap(chunk) {
            if self.spare_bytes + buffer.capacity() <= SPARE_BYTES {
                self.spare_bytes += buffer.capacity();
                self.spare.push(buffer);
            }
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
                .get_or_decode((0, i), |_| Ok(vec![i as u8; 100]))
                .unwrap();
        }
        assert_eq!(cache.held_bytes(), 200);
        assert!(!cache.contains((0, 0)), "oldest chunk evicted");
        assert!(cache.contains((0, 1)) && cache.contains((0, 2)));
        // Touching 1 makes 2 the least recent.
        cache.get_or_decode((0, 1), |_| unreachable!()).unwrap();
        cache.get_or_decode((0, 3), |_| Ok(vec![3; 100])).unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 2)));
        // A demoted chunk goes first, though it was used last.
        cache.demote((0, 3));
        cache.get_or_decode((0, 4), |_| Ok(vec![4; 100])).unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 3)));
    }

    #[test]
    fn evicted_buffers_are_handed_to_later_decodes() {
        let cache = ChunkCache::new(100);
        cache.get_or_decode((0, 0), |_| Ok(vec![1; 100])).unwrap();
        let held = cache.get_or_decode((0, 1), |_| Ok(vec![2; 100])).unwrap();
        // Chunk 0 was evicted while no one held it: its buffer comes back.
        let chunk = cache
            .get_or_decode((0, 2), |spare| {
                assert_eq!(spare, vec![1; 100]);
                Ok(spare)
            })
            .unwrap();
        assert_eq!(chunk.len(), 100);
        // Chunk 1 was evicted while a reader held it: its buffer stays theirs.
        cache
            .get_or_decode((0, 3), |spare| {
                assert!(spare.is_empty(), "a held chunk's buffer must not be reused");
                Ok(vec![4; 100])
            })
            .unwrap();
        assert_eq!(held[0], 2);
    }

    #[test]
    fn oversized_chunks_are_served_but_not_kept() {
        let cache = ChunkCache::new(10);
        let chunk = cache.get_or_decode((1, 0), |_| Ok(vec![7; 11])).unwrap();
        assert_eq!(&chunk[..], &[7; 11]);
        assert_eq!(cache.held_bytes(), 0);
        assert!(!cache.contains((1, 0)));
    }

    #[test]
    fn errors_reach_the_reader_and_are_not_kept() {
        let cache = ChunkCache::new(1000);
        let err = cache
            .get_or_decode((0, 0), |_| Err("bad".into()))
            .unwrap_err();
        assert_eq!(err, "bad");
        assert!(!cache.contains((0, 0)));
        let ok = cache.get_or_decode((0, 0), |_| Ok(vec![1])).unwrap();
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
                        .get_or_decode((9, 9), |_| {
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
            cache.get_or_decode((2, 2), |_| panic!("decoder bug"))
        }));
        assert!(caught.is_err());
        assert!(!cache.contains((2, 2)), "the flight ended");
        let ok = cache.get_or_decode((2, 2), |_| Ok(vec![1, 2])).unwrap();
        assert_eq!(&ok[..], &[1, 2]);
    }
}
