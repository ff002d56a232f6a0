//! Scratch memory for decoding, shared by every thread: a buffer is taken
//! from one pool and given back, so that memory one thread faulted in
//! serves the next chunk on any thread. Kept per thread, a fresh mount's
//! request and decoding threads (six by default) each faulted in their own
//! records and partition scratch on their first chunks, and each kept them.

#![forbid(unsafe_code)]

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Largest buffer the pool keeps: several times what a chunk of the
/// default size needs. One for an unusually large chunk is let go of, so
/// that a long-lived process (the mount) does not hold it for good.
pub const KEEP_BYTES: usize = 8 << 20;

/// Most bytes the pool keeps in all: the scratch of several decodes at
/// once (a record, and a chunk's words or a Partition's classes).
const POOL_BYTES: usize = 32 << 20;

/// Spare buffers, in `u32`s, whose alignment suits every word type.
static POOL: Mutex<Vec<Vec<u32>>> = Mutex::new(Vec::new());

/// Runs `f` on `len` words of scratch (contents unspecified).
pub fn with_words<R>(len: usize, f: impl FnOnce(&mut [u32]) -> R) -> R {
    let mut buf = take(len);
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let out = f(&mut buf[..len]);
    give_back(buf);
    out
}

/// Runs `f` on `len` bytes of scratch (contents unspecified).
pub fn with_bytes<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    with_words(len.div_ceil(size_of::<u32>()), |words| {
        f(&mut bytemuck::cast_slice_mut(words)[..len])
    })
}

/// The smallest spare buffer of at least `len` words, else the largest
/// (grown by the caller), else a new one.
fn take(len: usize) -> Vec<u32> {
    let mut pool = lock();
    let size = |i: &usize| pool[*i].len();
    let fits = (0..pool.len()).filter(|i| size(i) >= len).min_by_key(size);
    match fits.or_else(|| (0..pool.len()).max_by_key(size)) {
        Some(i) => pool.swap_remove(i),
        None => Vec::new(),
    }
}

/// Keeps `buf` for later unless it is too large, letting go of the
/// smallest spares while the pool holds more than [`POOL_BYTES`]. (A new
/// buffer is made only when the pool is empty, so it never holds more
/// buffers than were in use at once.)
fn give_back(buf: Vec<u32>) {
    if buf.len() * size_of::<u32>() > KEEP_BYTES {
        return;
    }
    let mut pool = lock();
    pool.push(buf);
    while pool
        .iter()
        .map(|b| b.len() * size_of::<u32>())
        .sum::<usize>()
        > POOL_BYTES
    {
        let smallest = (0..pool.len())
            .min_by_key(|&i| pool[i].len())
            .expect("a buffer");
        pool.swap_remove(smallest);
    }
}

fn lock() -> MutexGuard<'static, Vec<Vec<u32>>> {
    // The pool is consistent at every unlock: a panic elsewhere leaves it usable.
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nested scratch is distinct, every length is given, and memory is
    /// reused: the pool never holds more than its bound.
    #[test]
    fn scratch_is_distinct_when_nested_and_the_pool_stays_bounded() {
        with_words(1000, |a| {
            a.fill(1);
            with_bytes(4001, |b| {
                assert_eq!(b.len(), 4001);
                b.fill(2);
            });
            assert!(a.iter().all(|&w| w == 1));
        });
        for len in [10, 1 << 20, KEEP_BYTES / 4, 3, (1 << 20) + 1] {
            with_words(len, |w| assert_eq!(w.len(), len));
        }
        // Too large to keep: used, then let go of.
        with_bytes(KEEP_BYTES + 1, |b| assert_eq!(b.len(), KEEP_BYTES + 1));
        let held: usize = lock().iter().map(|b| b.len() * size_of::<u32>()).sum();
        assert!(held <= POOL_BYTES);
        assert!(lock()
            .iter()
            .all(|b| b.len() * size_of::<u32>() <= KEEP_BYTES));
    }
}
