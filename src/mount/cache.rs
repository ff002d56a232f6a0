//! Decoded chunks shared by every reader of the mount: an LRU with
//! single-flight decoding, so that readers wanting one chunk decode it once,
//! within one memory budget for every buffer it holds: the chunks it keeps,
//! the ones being decoded, and spare buffers kept for reuse.

#![forbid(unsafe_code)]

use lru::LruCache;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use super::budget::Buffer;
use super::budget::{fresh_size, suits, Asker, Budget, Counted, Held, Waiting};

/// A chunk: which archive (an id the caller keeps unique per archive file) and
/// which of its chunks.
pub type ChunkKey = (u64, usize);

/// Decoded bytes of one chunk, already verified against its checksum.
pub type Chunk = Arc<Buffer>;

pub struct ChunkCache {
    state: Mutex<State>,
    budget: Arc<Budget>,
    /// Chunks decoded and their bytes, since the start: against the bytes
    /// read, they show what read-ahead wasted or what was decoded twice.
    decodes: AtomicU64,
    decoded_bytes: AtomicU64,
}

struct State {
    ready: LruCache<ChunkKey, Ready>,
    decoding: HashMap<ChunkKey, Arc<Flight>>,
}

/// A decoded chunk in the cache.
struct Ready {
    chunk: Chunk,
    /// A reader went past its end (see `ChunkCache::demote`).
    read_through: bool,
}

/// How long a read waits for room before it looks again, should a change
/// have gone unsignalled.
const RECHECK: Duration = Duration::from_millis(100);

/// One decode in progress, awaited by the readers that arrived after it started.
#[derive(Default)]
struct Flight {
    result: Mutex<Option<Result<Chunk, String>>>,
    done: Condvar,
}

/// What a reader of a chunk finds.
enum Attempt<'a> {
    Ready(Chunk),
    /// Another reader is decoding it.
    Decoding(Arc<Flight>),
    /// The caller is to decode it into this buffer.
    Admitted(Arc<Flight>, Vec<u8>, Counted),
    /// No room for its buffer. The budget stays locked, so that no change is
    /// missed before the caller waits on it.
    NoRoom(MutexGuard<'a, Held>),
}

impl ChunkCache {
    /// A cache whose buffers (chunks kept, being decoded, spare) take at most
    /// `capacity` bytes, but for a read that would otherwise wait for nothing
    /// (see `get_or_decode`). A chunk larger than that is not kept.
    pub fn new(capacity: usize) -> ChunkCache {
        ChunkCache {
            state: Mutex::new(State {
                ready: LruCache::unbounded(),
                decoding: HashMap::new(),
            }),
            budget: Arc::new(Budget {
                capacity,
                held: Mutex::default(),
                room: Condvar::new(),
            }),
            decodes: AtomicU64::new(0),
            decoded_bytes: AtomicU64::new(0),
        }
    }

    /// Chunks decoded since the start, and their bytes.
    pub fn decoded(&self) -> (u64, u64) {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        (get(&self.decodes), get(&self.decoded_bytes))
    }

    /// Bytes of decoded chunks held now.
    #[cfg(test)]
    pub(super) fn held_bytes(&self) -> usize {
        self.budget.lock().cached
    }

    /// The most bytes its buffers (kept, being decoded, spare) have taken.
    #[cfg(test)]
    pub(super) fn peak_bytes(&self) -> usize {
        self.budget.lock().peak
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
    ///
    /// `enclosing`: decodes in progress that wait for this one (a fine-tune's
    /// chunk waits for its base's). When its buffer does not fit the budget,
    /// the read waits until it does, or until no decode but those is active
    /// (not waiting itself): then it goes beyond the budget, as nothing else
    /// could free memory. Reads of chunks that fit go on meanwhile, but none
    /// goes beyond while it is active: chunks larger than the budget are
    /// decoded one at a time (with the base chunks a decode needs, one per
    /// level).
    pub fn get_or_decode(
        &self,
        key: ChunkKey,
        len: usize,
        enclosing: usize,
        decode: impl FnOnce(&mut [u8]) -> Result<(), String>,
    ) -> Result<Chunk, String> {
        let mut waiting = Waiting {
            budget: &self.budget,
            enclosing,
            begun: false,
        };
        loop {
            let mine = if waiting.begun { 0 } else { enclosing };
            match self.attempt(key, len, Asker::Read { mine }) {
                Attempt::Ready(chunk) => return Ok(chunk),
                Attempt::Decoding(flight) => {
                    waiting.begin(&mut self.budget.lock());
                    return flight.wait();
                }
                Attempt::Admitted(flight, buffer, counted) => {
                    drop(waiting);
                    return self.decode_into(key, &flight, (buffer, counted), len, decode);
                }
                Attempt::NoRoom(mut held) => {
                    waiting.begin(&mut held);
                    drop(self.budget.room.wait_timeout(held, RECHECK));
                }
            }
        }
    }

    /// Decodes `key` as `get_or_decode` does, ahead of its reader, unless it is
    /// decoded or being decoded already, or its buffer does not fit the
    /// budget. Errors are left for the read that needs the chunk to report.
    pub fn decode_ahead(
        &self,
        key: ChunkKey,
        len: usize,
        decode: impl FnOnce(&mut [u8]) -> Result<(), String>,
    ) {
        if let Attempt::Admitted(flight, buffer, counted) = self.attempt(key, len, Asker::Ahead) {
            let _ = self.decode_into(key, &flight, (buffer, counted), len, decode);
        }
    }

    /// The chunk if it is there or being decoded, else a buffer to decode it
    /// into if the budget has room for one (reused, or fresh memory after
    /// freeing spares and evicting chunks) or `asker` goes over it.
    fn attempt(&self, key: ChunkKey, len: usize, asker: Asker) -> Attempt<'_> {
        let mut state = self.lock();
        if let Some(ready) = state.ready.get_mut(&key) {
            ready.read_through = false;
            return Attempt::Ready(ready.chunk.clone());
        }
        if let Some(flight) = state.decoding.get(&key) {
            return Attempt::Decoding(flight.clone());
        }
        // Read-ahead evicts no chunk with bytes still to send (it would be
        // decoded again when they are asked for): it takes spares, chunks
        // read through, or room the budget has.
        let reused = state.reusable(len, &self.budget).or_else(|| match asker {
            Asker::Ahead => None,
            Asker::Read { .. } => state.make_room(len, &self.budget),
        });
        let (buffer, counted) = match reused {
            Some(buffer) => {
                let mut held = self.budget.lock();
                // It left the count when taken: spares a reader let go of
                // since may have filled its place, and make way for it again.
                held.fits(buffer.capacity(), self.budget.capacity);
                held.start_decode(buffer.capacity(), Counted::Within);
                (buffer, Counted::Within)
            }
            None => {
                let size = fresh_size(len);
                let mut held = self.budget.lock();
                let Some(counted) = held.place(size, asker, self.budget.capacity) else {
                    return Attempt::NoRoom(held);
                };
                held.start_decode(size, counted);
                (vec![0; size], counted)
            }
        };
        let flight = Arc::new(Flight::default());
        state.decoding.insert(key, flight.clone());
        Attempt::Admitted(flight, buffer, counted)
    }

    /// Runs an admitted decode of `key` into `bytes` and lands its result.
    fn decode_into(
        &self,
        key: ChunkKey,
        flight: &Flight,
        (mut bytes, counted): (Vec<u8>, Counted),
        len: usize,
        decode: impl FnOnce(&mut [u8]) -> Result<(), String>,
    ) -> Result<Chunk, String> {
        // If `decode` panics, waiters must not sleep forever: the guard ends the
        // flight with an error as it unwinds.
        let mut landing = Landing {
            cache: self,
            key,
            size: bytes.capacity(),
            counted,
            flight,
            result: Some(Err("the decoder panicked".to_string())),
        };
        self.decodes.fetch_add(1, Ordering::Relaxed);
        self.decoded_bytes.fetch_add(len as u64, Ordering::Relaxed);
        let result = decode(&mut bytes[..len]).map(|()| {
            Arc::new(Buffer {
                bytes,
                len,
                budget: self.budget.clone(),
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

    /// Ends the decode of `key`, whose buffer took `size` bytes: a decoded
    /// chunk that fits is kept (evicting others until the budget is kept),
    /// and readers waiting for it or for room are woken.
    fn land(
        &self,
        key: ChunkKey,
        (size, counted): (usize, Counted),
        flight: &Flight,
        result: Result<Chunk, String>,
    ) {
        {
            let mut state = self.lock();
            state.decoding.remove(&key);
            let keep = result
                .as_ref()
                .ok()
                .filter(|_| size <= self.budget.capacity);
            let replaced = keep.and_then(|chunk| {
                let ready = Ready {
                    chunk: chunk.clone(),
                    read_through: false,
                };
                state.ready.put(key, ready)
            });
            {
                let mut held = self.budget.lock();
                held.end_decode(size, counted);
                if keep.is_some() {
                    held.cached += size;
                }
                if let Some(old) = &replaced {
                    held.cached -= old.chunk.capacity();
                }
            }
            drop(replaced);
            state.shrink(&self.budget, None);
        }
        self.budget.room.notify_all();
        *flight.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        flight.done.notify_all();
    }
}

impl State {
    /// A spare buffer of at least `len` bytes, else the buffer of a chunk read
    /// through (least recent first). Read-through chunks too small for `len`,
    /// or still held by a reader, leave the cache on the way; their buffers
    /// become spares once no one holds them.
    fn reusable(&mut self, len: usize, budget: &Budget) -> Option<Vec<u8>> {
        if let Some(buffer) = budget.lock().take_spare(len) {
            return Some(buffer);
        }
        while self.ready.peek_lru().is_some_and(|(_, r)| r.read_through) {
            let (_, ready) = self.ready.pop_lru().expect("peeked");
            budget.lock().cached -= ready.chunk.capacity();
            if let Ok(mut buffer) = Arc::try_unwrap(ready.chunk) {
                if suits(buffer.bytes.len(), len) {
                    return Some(std::mem::take(&mut buffer.bytes));
                }
            }
        }
        None
    }

    /// Frees spare buffers, then evicts the least recent chunks, until a
    /// decode of `len` bytes fits the budget, and returns the buffer of an
    /// evicted chunk that suits it, if no reader held one. Nothing when the
    /// decode would not fit even then: other decodes hold the room, or the
    /// chunk is larger than the budget (it is decoded without emptying the
    /// cache).
    fn make_room(&mut self, len: usize, budget: &Budget) -> Option<Vec<u8>> {
        if budget.lock().decoding + fresh_size(len) > budget.capacity {
            return None;
        }
        self.shrink(budget, Some(len))
    }

    /// Frees spare buffers, then evicts the least recent chunks, until the
    /// budget has room for a decode of `wanted` bytes (none: until it is
    /// kept). The first evicted buffer no reader holds that suits `wanted`
    /// is returned for it, if it fits; others are freed at once rather than
    /// kept spare (they would be freed next).
    fn shrink(&mut self, budget: &Budget, wanted: Option<usize>) -> Option<Vec<u8>> {
        let mut reused: Option<Vec<u8>> = None;
        loop {
            let mut held = budget.lock();
            let adding = match (&reused, wanted) {
                (Some(buffer), _) => buffer.capacity(),
                (None, Some(len)) => fresh_size(len),
                (None, None) => 0,
            };
            if held.fits(adding, budget.capacity) {
                return reused;
            }
            // Nothing left to let go of: a buffer found does not fit.
            let (_, evicted) = self.ready.pop_lru()?;
            held.cached -= evicted.chunk.capacity();
            drop(held);
            if let Ok(mut buffer) = Arc::try_unwrap(evicted.chunk) {
                let bytes = std::mem::take(&mut buffer.bytes);
                if reused.is_none() && wanted.is_some_and(|len| suits(bytes.len(), len)) {
                    reused = Some(bytes);
                }
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
    /// Bytes of its buffer.
    size: usize,
    counted: Counted,
    flight: &'a Flight,
    result: Option<Result<Chunk, String>>,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let result = self.result.take().expect("set until drop");
        let buffer = (self.size, self.counted);
        self.cache.land(self.key, buffer, self.flight, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::budget::SPARE_BYTES;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    /// Decodes `key` into `want.len()` bytes, checking that the buffer the
    /// decoder is handed holds `want` (a reused buffer's bytes, or zeros).
    fn decode_expecting(cache: &ChunkCache, key: ChunkKey, want: &[u8], why: &str) {
        let check = |buffer: &mut [u8]| {
            assert_eq!(buffer, want, "{why}");
            Ok(())
        };
        cache.get_or_decode(key, want.len(), 0, check).unwrap();
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
            cache.get_or_decode((0, i), 128, 0, fill(i as u8)).unwrap();
        }
        assert_eq!(cache.held_bytes(), 256);
        assert!(!cache.contains((0, 0)), "oldest chunk evicted");
        assert!(cache.contains((0, 1)) && cache.contains((0, 2)));
        // Touching 1 makes 2 the least recent.
        let one = cache
            .get_or_decode((0, 1), 128, 0, |_| unreachable!())
            .unwrap();
        assert_eq!(&one[..], &[1; 128]);
        cache.get_or_decode((0, 3), 128, 0, fill(3)).unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 2)));
        // A demoted chunk goes first, though it was used last.
        cache.demote((0, 3));
        cache.get_or_decode((0, 4), 128, 0, fill(4)).unwrap();
        assert!(cache.contains((0, 1)) && !cache.contains((0, 3)));
    }

    #[test]
    fn evicted_buffers_are_handed_to_later_decodes() {
        let cache = ChunkCache::new(256);
        cache.get_or_decode((0, 0), 128, 0, fill(1)).unwrap();
        let held = cache.get_or_decode((0, 1), 128, 0, fill(2)).unwrap();
        // Room for chunk 2 is made by evicting chunk 0, which no one holds:
        // its buffer comes back.
        decode_expecting(&cache, (0, 2), &[1; 128], "");
        // Chunk 1 was evicted while a reader held it: its buffer stays theirs.
        decode_expecting(
            &cache,
            (0, 3),
            &[0; 128],
            "a held chunk's buffer must not be reused",
        );
        assert_eq!(&held[..], &[2; 128]);
        assert!(cache.peak_bytes() <= 256);

        // Until they let go of it: it is spare when the budget has room.
        let cache = ChunkCache::new(1 << 20);
        let held = cache.get_or_decode((0, 0), 128, 0, fill(4)).unwrap();
        cache.demote((0, 0));
        decode_expecting(&cache, (0, 1), &[0; 128], "still held");
        drop(held);
        decode_expecting(&cache, (0, 2), &[4; 128], "the buffer the reader let go of");
    }

    #[test]
    fn read_through_chunks_lend_their_buffers_first() {
        let cache = ChunkCache::new(1 << 20);
        cache.get_or_decode((0, 0), 128, 0, fill(1)).unwrap();
        cache.get_or_decode((0, 1), 128, 0, fill(2)).unwrap();
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
            .get_or_decode((0, 1), 128, 0, |_| unreachable!())
            .unwrap();
        for i in 4..=6 {
            cache.get_or_decode((0, i), 128, 0, fill(0)).unwrap();
        }
        assert!(!cache.contains((0, 2)) && !cache.contains((0, 3)));
        assert!(cache.contains((0, 1)), "read again: not to be taken");
    }

    #[test]
    fn buffers_are_reused_for_chunks_they_fit() {
        let cache = ChunkCache::new(1 << 20);
        // A tensor's last, shorter chunk gets room for a full one.
        cache.get_or_decode((0, 0), 100, 0, fill(1)).unwrap();
        cache.demote((0, 0));
        let longer = cache
            .get_or_decode((0, 1), 120, 0, |buffer| {
                assert_eq!(buffer.len(), 120);
                assert_eq!(buffer[..100], [1; 100], "the shorter chunk's buffer");
                buffer.fill(2);
                Ok(())
            })
            .unwrap();
        assert_eq!(longer.len(), 120);
        drop(longer);
        // A buffer too small is passed over, and stays spare.
        cache.get_or_decode((0, 2), 10, 0, fill(3)).unwrap();
        cache.demote((0, 1));
        cache.demote((0, 2));
        decode_expecting(&cache, (0, 3), &[2; 100], "chunk 1's buffer");
        decode_expecting(&cache, (0, 4), &[3; 10], "the spare that fits");
        // A buffer far larger than a chunk is left for a chunk it suits.
        cache.get_or_decode((0, 5), 1024, 0, fill(5)).unwrap();
        cache.demote((0, 5));
        decode_expecting(&cache, (0, 6), &[0; 10], "fresh, not the 1 KiB buffer");
        decode_expecting(&cache, (0, 7), &[5; 1000], "");
    }

    #[test]
    fn the_smallest_spare_that_suits_is_taken() {
        let cache = ChunkCache::new(1 << 20);
        for (i, len) in [(0, 200), (1, 100), (2, 60)] {
            cache.get_or_decode((0, i), len, 0, fill(i as u8)).unwrap();
        }
        for i in 0..3 {
            cache.demote((0, i));
        }
        // The read-through chunks are all too small for a long one: their
        // buffers (256, 128 and 64 bytes) become spares.
        cache.get_or_decode((0, 3), 300, 0, fill(3)).unwrap();
        decode_expecting(&cache, (0, 4), &[2; 60], "chunk 2's 64 bytes");
    }

    #[test]
    fn a_read_through_buffer_is_reused_even_when_too_large_to_keep_spare() {
        let len = SPARE_BYTES + 1;
        let cache = ChunkCache::new(4 * len.next_power_of_two());
        cache.get_or_decode((0, 0), len, 0, fill(7)).unwrap();
        cache.demote((0, 0));
        cache
            .get_or_decode((0, 1), len, 0, |buffer| {
                assert!(buffer.iter().all(|&b| b == 7), "chunk 0's buffer");
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn oversized_chunks_are_served_but_not_kept() {
        let cache = ChunkCache::new(10);
        let chunk = cache.get_or_decode((1, 0), 11, 0, fill(7)).unwrap();
        assert_eq!(&chunk[..], &[7; 11]);
        assert_eq!(cache.held_bytes(), 0);
        assert!(!cache.contains((1, 0)));
    }

    #[test]
    fn errors_reach_the_reader_and_are_not_kept() {
        let cache = ChunkCache::new(1000);
        let err = cache
            .get_or_decode((0, 0), 100, 0, |_| Err("bad".into()))
            .unwrap_err();
        assert_eq!(err, "bad");
        assert!(!cache.contains((0, 0)));
        let ok = cache.get_or_decode((0, 0), 1, 0, fill(1)).unwrap();
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
                        .get_or_decode((9, 9), 1000, 0, |buffer| {
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
            cache.get_or_decode((2, 2), 2, 0, |_| panic!("decoder bug"))
        }));
        assert!(caught.is_err());
        assert!(!cache.contains((2, 2)), "the flight ended");
        let ok = cache
            .get_or_decode((2, 2), 2, 0, |buffer| {
                buffer.copy_from_slice(&[1, 2]);
                Ok(())
            })
            .unwrap();
        assert_eq!(&ok[..], &[1, 2]);
    }
}
