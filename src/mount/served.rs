//! How much of each chunk of an open archive the kernel has been sent. Once
//! all of a chunk's bytes have gone out, the kernel's page cache holds them
//! and asks again only if it drops them: the decoded chunk is done with, and
//! read-ahead that reaches it (a stream running into pages another stream
//! read) has nothing to do there. A chunk partly sent is kept, as the rest
//! of it is likely asked for soon: a file's chunks start a header's length
//! past the kernel's 1 MiB-aligned reads, so most reads take the end of one
//! chunk and the start of the next.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

pub struct Served {
    bytes: Vec<AtomicU64>,
}

impl Served {
    /// Nothing sent yet of any of `chunks` chunks.
    pub fn new(chunks: usize) -> Served {
        Served {
            bytes: (0..chunks).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts `n` more bytes of chunk `i` (of `len` bytes) sent; returns
    /// whether that completes it. Bytes the kernel asks for again (after
    /// dropping its pages) count again, so a chunk may complete early then;
    /// it is only decoded again if asked for.
    pub fn add(&self, i: usize, n: u64, len: u64) -> bool {
        let before = self.bytes[i].fetch_add(n, Ordering::Relaxed);
        before < len && before + n >= len
    }

    /// Whether all `len` bytes of chunk `i` have been sent.
    pub fn complete(&self, i: usize, len: u64) -> bool {
        self.bytes[i].load(Ordering::Relaxed) >= len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_completes_once_when_its_last_byte_goes_out() {
        let served = Served::new(3);
        assert!(!served.add(1, 4000, 10_000));
        assert!(!served.complete(1, 10_000));
        assert!(served.add(1, 6000, 10_000));
        assert!(served.complete(1, 10_000));
        assert!(!served.add(1, 100, 10_000), "completes only once");
        assert!(!served.complete(0, 10_000) && !served.complete(2, 10_000));
    }
}
