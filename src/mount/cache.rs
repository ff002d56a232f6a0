//! Decoded chunks shared by every reader of the mount: an LRU bounded in bytes,
//! with single-flight decoding so that readers wanting one chunk decode it once.

#![forbid(unsafe_code)]

use lru::LruCache;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// A chunk: which archive (an id the caller keeps unique per archive file) and
/// which of its chunks.
pub type ChunkKey = (u64, usize);

/// Decoded bytes of one chunk, already verified against its checksum.
pub type Chunk = Arc<Buffer>;

/// A decoder's buffer (kept without a copy) that goes back to the cache's
/// spares when the last reader lets go of it, wherever that happens: a chunk
/// evicted while a reply still sends it comes back once the reply is sent.
pub struct Buffer {
    /// The memory, all of it initialised: a buffer is zeroed once, when
    /// first allocated, and only overwritten after that.
    bytes: Vec<u8>,
    /// How many of `bytes` are the chunk's.
    len: usize,
    spares: Arc<Spares>,
}

pub struct ChunkCache {
    capacity: usize,
    state: Mutex<State>,
    spares: Arc<Spares>,
}

struct State {
    ready: LruCache<ChunkKey, Ready>,
    /// Bytes held by `ready` (buffer capacities).
    bytes: usize,
    decoding: HashMap<ChunkKey, Arc<Flight>>,
}

/// Buffers of chunks no one holds any more, handed to the next decodes:
/// reusing them spares the page faults and zeroing of fresh memory. (Locked
/// on its own, and only ever after `State`, since a buffer may come back
/// while the state is locked.)
#[derive(Default)]
struct Spares(Mutex<SpareList>);

#[derive(Default)]
struct SpareList {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

/// A decoded chunk in the cache.
struct Ready {
    chunk: Chunk,
    /// A reader went past its end (see `ChunkCache::demote`).
    read_through: bool,
}

/// Most bytes of spare buffers kept.
const SPARE_BYTES: usize = 8 << 20;

/// Most spare buffers kept, so that finding one stays quick when they are tiny.
const SPARE_COUNT: usize = 256;

/// Whether a buffer of `size` bytes suits a chunk of `len`: large enough, and
/// not so large that a small chunk ties up memory the cache counts as its.
fn suits(size: usize, len: usize) -> bool {
    size >= len && size <= 2 * len.next_power_of_two()
}

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
            }),
            spares: Arc::default(),
        }
    }

    /// Bytes of decoded chunks held now.
    #[cfg(test)]
    pub(super) fn held_bytes(&self) -> usize {
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
    /// is decoding it. `decode` gets `len` bytes to overwrite (of a reused
    /// buffer or fresh memory). A failed decode is reported to everyone
    /// waiting on it and not kept, so a later read tries again.
    pub fn get_or_decode(
        &self,
        key: ChunkKey,
        len: usize,
        decode: impl FnOnce(&mut [u8]) -> Result<(), String>,
    ) -> Result<Chunk, String> {
        let (flight, mut bytes) = {
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
            let buffer = state.take_buffer(len, &self.spares);
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
        let result = decode(&mut bytes[..len]).map(|()| {
            Arc::new(Buffer {
                bytes,
                len,
                spares: self.spares.clone(),
            })
        });
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
                        state.bytes -= old.chunk.capacity();
                    }
                    while state.bytes > self.capacity {
                        let (_, evicted) = state.ready.pop_lru().expect("bytes > 0");
                        state.bytes -= evicted.chunk.capacity();
                    }
                }
            }
        }
        *flight.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        flight.done.notify_all();
    }
}

impl State {
    /// A buffer of at least `len` bytes for a new decode: a reused one if
    /// there is one large enough, else fresh memory, rounded up to a power of
    /// two so that a tensor's shorter last chunk leaves room for a full chunk
    /// when its buffer is reused. (Calloc leaves the pages past `len`
    /// untouched until they are used.)
    fn take_buffer(&mut self, len: usize, spares: &Spares) -> Vec<u8> {
        self.reusable(len, spares)
            .unwrap_or_else(|| vec![0; len.next_power_of_two()])
    }

    /// A spare buffer of at least `len` bytes, else the buffer of a chunk read
    /// through (least recent first). Read-through chunks too small for `len`,
    /// or still held by a reader, leave the cache on the way; their buffers
    /// become spares once no one holds them.
    fn reusable(&mut self, len: usize, spares: &Spares) -> Option<Vec<u8>> {
        if let Some(buffer) = spares.take(len) {
            return Some(buffer);
        }
        while self.ready.peek_lru().is_some_and(|(_, r)| r.read_through) {
            let (_, ready) = self.ready.pop_lru().expect("peeked");
            self.bytes -= ready.chunk.capacity();
            if let Ok(mut buffer) = Arc::try_unwrap(ready.chunk) {
                if suits(buffer.bytes.len(), len) {
                    return Some(std::mem::take(&mut buffer.bytes));
                }
            }
        }
        None
    }
}

impl Spares {
    fn lock(&self) -> MutexGuard<'_, SpareList> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The smallest spare buffer that suits `len` bytes, if there is one.
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        let mut list = self.lock();
        // Among equals, the last one back: the likeliest to be in the CPU
        // caches still.
        let (i, _) = (list.buffers.iter().enumerate().rev())
            .filter(|(_, b)| suits(b.len(), len))
            .min_by_key(|(_, b)| b.len())?;
        let buffer = list.buffers.swap_remove(i);
        list.bytes -= buffer.capacity();
        Some(buffer)
    }

    /// Keeps `buffer` for later decodes if there is room. (An empty one is
    /// what a buffer reused in place leaves behind: nothing to lock for.)
    fn keep(&self, buffer: Vec<u8>) {
        if buffer.capacity() == 0 {
            return;
        }
        let mut list = self.lock();
        if list.buffers.len() < SPARE_COUNT && list.bytes + buffer.capacity() <= SPARE_BYTES {
            list.bytes += buffer.capacity();
            list.buffers.push(buffer);
        }
    }
}

impl Buffer {
    /// Bytes of memory it takes.
    fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

impl std::ops::Deref for Buffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer of {} bytes", self.len)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.spares.keep(std::mem::take(&mut self.bytes));
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

    /// Decodes `key` into `want.len()` bytes, checking that the buffer the
    /// decoder is handed holds `want` (a reused buffer's bytes, or zeros).
    fn decode_expecting(cache: &ChunkCache, key: ChunkKey, want: &[u8], why: &str) {
        let check = |buffer: &mut [u8]| {
            assert_eq!(buffer, want, "{why}");
            Ok(())
        };
        cache.get_or_decode(key, want.len(), check).unwrap();
    }

    /// A decoder that fills the chunk with `byte`.
    fn fill(byte: u8) -> impl FnOnce(&mut [u8]) -> Result<(), String> {
        move |buffer| {
            buffer.fill(byte);
            Ok(())
        }
    }

    #[test]
    fn stays_within_capacity_and_evicts_least_recent() {
        let cache = ChunkCache::new(300);
        for i in 0..3 {
            cache.get_or_decode((0, i), 128, fill(i as u8)).unwrap();
        }
        assert_eq!(cache.held_bytes(), 256);
        assert!(!cache.contains((0, 0)), "oldest chunk evicted");
        assert!(cache.contains((0, 1)) && cache.contains((0, 2)));
        // Touching 1 makes 2 the least recent.
        let one = cache
            .get_or_decode((0, 1), 128, |_| unreachable!())
            .unwrap();
        assert_eq!(&one[..], &[1; 128]);
        cache.get_or_decode((0, 3), 128, fill(3)).unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 2)));
        // A demoted chunk goes first, though it was used last.
        cache.demote((0, 3));
        cache.get_or_decode((0, 4), 128, fill(4)).unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 3)));
    }

    #[test]
    fn evicted_buffers_are_handed_to_later_decodes() {
        let cache = ChunkCache::new(128);
        cache.get_or_decode((0, 0), 128, fill(1)).unwrap();
        let held = cache.get_or_decode((0, 1), 128, fill(2)).unwrap();
        // Chunk 0 was evicted while no one held it: its buffer comes back.
        decode_expecting(&cache, (0, 2), &[1; 128], "");
        // Chunk 1 was evicted while a reader held it: its buffer stays theirs.
        decode_expecting(
            &cache,
            (0, 3),
            &[0; 128],
            "a held chunk's buffer must not be reused",
        );
        assert_eq!(&held[..], &[2; 128]);
        // Until they let go of it.
        drop(held);
        decode_expecting(&cache, (0, 4), &[2; 128], "the buffer the reader let go of");
    }

    #[test]
    fn read_through_chunks_lend_their_buffers_first() {
        let cache = ChunkCache::new(1 << 20);
        cache.get_or_decode((0, 0), 128, fill(1)).unwrap();
        cache.get_or_decode((0, 1), 128, fill(2)).unwrap();
        cache.demote((0, 0));
        // Room is left, yet the chunk read through gives its buffer up.
        decode_expecting(&cache, (0, 2), &[1; 128], "");
        assert!(!cache.contains((0, 0)) && cache.contains((0, 1)));
        // A chunk not read through keeps its buffer: the next one is fresh.
        decode_expecting(&cache, (0, 3), &[0; 128], "");
        assert!(cache.contains((0, 1)) && cache.contains((0, 2)));
        // Nor does one read again after it was read through, when it comes
        // to be the least recent.
        for i in 1..=3 {
            cache.demote((0, i));
        }
        cache
            .get_or_decode((0, 1), 128, |_| unreachable!())
            .unwrap();
        for i in 4..=6 {
            cache.get_or_decode((0, i), 128, fill(0)).unwrap();
        }
        assert!(!cache.contains((0, 2)) && !cache.contains((0, 3)));
        assert!(cache.contains((0, 1)), "read again: not to be taken");
    }

    #[test]
    fn buffers_are_reused_for_chunks_they_fit() {
        let cache = ChunkCache::new(1 << 20);
        // A tensor's last, shorter chunk gets room for a full one.
        cache.get_or_decode((0, 0), 100, fill(1)).unwrap();
        cache.demote((0, 0));
        let longer = cache
            .get_or_decode((0, 1), 120, |buffer| {
                assert_eq!(buffer.len(), 120);
                assert_eq!(buffer[..100], [1; 100], "the shorter chunk's buffer");
                buffer.fill(2);
                Ok(())
            })
            .unwrap();
        assert_eq!(longer.len(), 120);
        drop(longer);
        // A buffer too small is passed over, and stays spare.
        cache.get_or_decode((0, 2), 10, fill(3)).unwrap();
        cache.demote((0, 1));
        cache.demote((0, 2));
        decode_expecting(&cache, (0, 3), &[2; 100], "chunk 1's buffer");
        decode_expecting(&cache, (0, 4), &[3; 10], "the spare that fits");
        // A buffer far larger than a chunk is left for a chunk it suits.
        cache.get_or_decode((0, 5), 1024, fill(5)).unwrap();
        cache.demote((0, 5));
        decode_expecting(&cache, (0, 6), &[0; 10], "fresh, not the 1 KiB buffer");
        decode_expecting(&cache, (0, 7), &[5; 1000], "");
    }

    #[test]
    fn the_smallest_spare_that_suits_is_taken() {
        let cache = ChunkCache::new(1 << 20);
        for (i, len) in [(0, 200), (1, 100), (2, 60)] {
            cache.get_or_decode((0, i), len, fill(i as u8)).unwrap();
        }
        for i in 0..3 {
            cache.demote((0, i));
        }
        // The read-through chunks are all too small for a long one: their
        // buffers (256, 128 and 64 bytes) become spares.
        cache.get_or_decode((0, 3), 300, fill(3)).unwrap();
        decode_expecting(&cache, (0, 4), &[2; 60], "chunk 2's 64 bytes");
    }

    #[test]
    fn a_read_through_buffer_is_reused_even_when_too_large_to_keep_spare() {
        let len = SPARE_BYTES + 1;
        let cache = ChunkCache::new(4 * len.next_power_of_two());
        cache.get_or_decode((0, 0), len, fill(7)).unwrap();
        cache.demote((0, 0));
        cache
            .get_or_decode((0, 1), len, |buffer| {
                assert!(buffer.iter().all(|&b| b == 7), "chunk 0's buffer");
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn oversized_chunks_are_served_but_not_kept() {
        let cache = ChunkCache::new(10);
        let chunk = cache.get_or_decode((1, 0), 11, fill(7)).unwrap();
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
        let ok = cache.get_or_decode((0, 0), 1, fill(1)).unwrap();
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
                        .get_or_decode((9, 9), 1000, |buffer| {
                            decodes.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            fill(5)(buffer)
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
        let ok = cache
            .get_or_decode((2, 2), 2, |buffer| {
                buffer.copy_from_slice(&[1, 2]);
                Ok(())
            })
            .unwrap();
        assert_eq!(&ok[..], &[1, 2]);
    }
}
