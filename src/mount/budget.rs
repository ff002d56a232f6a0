//! The memory of the mount's chunk cache: every buffer it holds (chunks kept,
//! being decoded, spare) counted against one capacity, spare buffers kept for
//! reuse, and the rule for when a decode may go beyond the capacity.

#![forbid(unsafe_code)]

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// A decoder's buffer (kept without a copy) that goes back to the cache's
/// spares when the last reader lets go of it, wherever that happens: a chunk
/// evicted while a reply still sends it comes back once the reply is sent.
pub struct Buffer {
    /// The memory, all of it initialised: a buffer is zeroed once, when
    /// first allocated, and only overwritten after that.
    pub(super) bytes: Vec<u8>,
    /// How many of `bytes` are the chunk's.
    pub(super) len: usize,
    pub(super) budget: Arc<Budget>,
}

/// The memory of the cache's buffers against its capacity. (Locked on its
/// own, and only ever after `State`, since a buffer may come back while the
/// state is locked; a buffer is never let go of while this is locked.)
pub(super) struct Budget {
    pub(super) capacity: usize,
    pub(super) held: Mutex<Held>,
    /// Signalled when a decode ends or starts waiting: a read waiting for
    /// room looks again.
    pub(super) room: Condvar,
}

/// What the budget counts (buffer capacities, in bytes).
#[derive(Default)]
pub(super) struct Held {
    /// Buffers of the chunks in `State::ready`.
    pub(super) cached: usize,
    /// Buffers of decodes in progress.
    pub(super) decoding: usize,
    /// Buffers of decodes let go beyond the budget (see
    /// `ChunkCache::get_or_decode`), not counted in it: reads of chunks
    /// that fit go on meanwhile.
    beyond: usize,
    /// Buffers of chunks no one holds any more, handed to the next decodes:
    /// reusing them spares the page faults and zeroing of fresh memory.
    spares: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// Decodes in progress that are not waiting, for room or for another
    /// decode: while there is one, it will free memory or let its read go on,
    /// so a read finding no room waits.
    active: usize,
    /// The most `total() + beyond` has been.
    #[cfg(test)]
    pub(super) peak: usize,
}

/// Most bytes of spare buffers kept.
pub(super) const SPARE_BYTES: usize = 8 << 20;

/// Most spare buffers kept, so that finding one stays quick when they are tiny.
const SPARE_COUNT: usize = 256;

/// Whether a buffer of `size` bytes suits a chunk of `len`: large enough, and
/// not so large that a small chunk ties up memory the cache counts as its.
pub(super) fn suits(size: usize, len: usize) -> bool {
    size >= len && size <= 2 * len.next_power_of_two()
}

/// Bytes of a fresh buffer for a chunk of `len`: rounded up to a power of
/// two, so that a tensor's shorter last chunk leaves room for a full chunk
/// when its buffer is reused. (Calloc leaves the pages past `len` untouched
/// until they are used.)
pub(super) fn fresh_size(len: usize) -> usize {
    len.next_power_of_two()
}

/// Who asks for a buffer when the budget has no room for it.
#[derive(Clone, Copy)]
pub(super) enum Asker {
    /// Read-ahead, which does without.
    Ahead,
    /// A read, which goes over the budget rather than wait for nothing: once
    /// no decode but its own `mine` is active, no other can free memory.
    Read { mine: usize },
}

/// Where a decode's buffer is counted.
#[derive(Clone, Copy)]
pub(super) enum Counted {
    Within,
    Beyond,
}

impl Budget {
    pub(super) fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `buffer` for later decodes if there is room, in the budget and
    /// among the spares. (An empty one is what a buffer reused in place
    /// leaves behind: nothing to lock for.)
    fn keep(&self, buffer: Vec<u8>) {
        let size = buffer.capacity();
        if size == 0 {
            return;
        }
        let mut held = self.lock();
        if held.total() + size <= self.capacity
            && held.spares.len() < SPARE_COUNT
            && held.spare_bytes + size <= SPARE_BYTES
        {
            held.spare_bytes += size;
            held.spares.push(buffer);
            held.note_peak();
        }
    }
}

impl Held {
    fn total(&self) -> usize {
        self.cached + self.decoding + self.spare_bytes
    }

    /// Whether `adding` more bytes fit the budget, after freeing as many
    /// spare buffers as that takes.
    pub(super) fn fits(&mut self, adding: usize, capacity: usize) -> bool {
        while self.total() + adding > capacity {
            let Some(spare) = self.spares.pop() else {
                return false;
            };
            self.spare_bytes -= spare.capacity();
        }
        true
    }

    /// Where a new buffer of `size` bytes for `asker` is counted, if it may
    /// be taken now.
    pub(super) fn place(&mut self, size: usize, asker: Asker, capacity: usize) -> Option<Counted> {
        // (A reader may have let go of a buffer, kept spare, since room was made.)
        if self.fits(size, capacity) {
            return Some(Counted::Within);
        }
        match asker {
            Asker::Read { mine } if self.active == mine => Some(Counted::Beyond),
            _ => None,
        }
    }

    /// Counts a decode into a buffer of `size` bytes (reused or fresh).
    pub(super) fn start_decode(&mut self, size: usize, counted: Counted) {
        match counted {
            Counted::Within => self.decoding += size,
            Counted::Beyond => self.beyond += size,
        }
        self.active += 1;
        self.note_peak();
    }

    pub(super) fn end_decode(&mut self, size: usize, counted: Counted) {
        match counted {
            Counted::Within => self.decoding -= size,
            Counted::Beyond => self.beyond -= size,
        }
        self.active -= 1;
    }

    /// The smallest spare buffer that suits `len` bytes, if there is one.
    pub(super) fn take_spare(&mut self, len: usize) -> Option<Vec<u8>> {
        // Among equals, the last one back: the likeliest to be in the CPU
        // caches still.
        let (i, _) = (self.spares.iter().enumerate().rev())
            .filter(|(_, b)| suits(b.len(), len))
            .min_by_key(|(_, b)| b.len())?;
        let buffer = self.spares.swap_remove(i);
        self.spare_bytes -= buffer.capacity();
        Some(buffer)
    }

    fn note_peak(&mut self) {
        #[cfg(test)]
        {
            self.peak = self.peak.max(self.total() + self.beyond);
        }
    }
}

/// A read's decodes that wait for another decode or for room: they are not
/// active meanwhile (see `Held::active`), and are again when it drops.
pub(super) struct Waiting<'a> {
    pub(super) budget: &'a Budget,
    /// The read's decodes in progress around this request.
    pub(super) enclosing: usize,
    /// Whether they are marked waiting.
    pub(super) begun: bool,
}

impl Waiting<'_> {
    /// Marks the enclosing decodes waiting, once: a read whose own decodes
    /// are all that is active may then go over the budget.
    pub(super) fn begin(&mut self, held: &mut Held) {
        if !self.begun && self.enclosing > 0 {
            held.active -= self.enclosing;
            self.budget.room.notify_all();
        }
        self.begun = true;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.begun {
            self.budget.lock().active += self.enclosing;
        }
    }
}

impl Buffer {
    /// Bytes of memory it takes.
    pub(super) fn capacity(&self) -> usize {
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
        self.budget.keep(std::mem::take(&mut self.bytes));
    }
}
