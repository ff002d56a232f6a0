//! Which of an object's bytes the disk cache holds, under which entries: a
//! whole extent of [`EXTENT_BLOCKS`] blocks where a fetch covered one (one
//! file, one write and one read per MiB of a sequential reader's bytes), and
//! single blocks elsewhere (the edges of random reads).

#![forbid(unsafe_code)]

use super::disk::DiskCache;
use super::memory::BLOCK;
use std::ops::Range;

/// Blocks per extent: 1 MiB.
pub const EXTENT_BLOCKS: u64 = 16;
const EXTENT: u64 = EXTENT_BLOCKS * BLOCK;

/// One version of one object in the disk cache.
pub(super) struct OnDisk<'a> {
    pub cache: &'a DiskCache,
    /// The object's key and version (ETag), as the memory cache keys it.
    pub id: &'a str,
    pub len: u64,
}

impl OnDisk<'_> {
    /// Of the blocks `sorted`, those the cache holds, with their bytes, and
    /// the others.
    pub fn blocks(&self, sorted: &[u64]) -> (Vec<(u64, Vec<u8>)>, Vec<u64>) {
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for group in sorted.chunk_by(|a, b| a / EXTENT_BLOCKS == b / EXTENT_BLOCKS) {
            let extent = self.range(group[0] / EXTENT_BLOCKS * EXTENT, EXTENT);
            if let Some(bytes) = self.entry(extent.clone()) {
                for &b in group {
                    let piece = self.range(b * BLOCK, BLOCK);
                    let at = (piece.start - extent.start) as usize;
                    found.push((
                        b,
                        bytes[at..at + (piece.end - piece.start) as usize].to_vec(),
                    ));
                }
                continue;
            }
            for &b in group {
                match self.entry(self.range(b * BLOCK, BLOCK)) {
                    Some(bytes) => found.push((b, bytes)),
                    None => missing.push(b),
                }
            }
        }
        (found, missing)
    }

    /// Keeps `bytes`, fetched from the start of block `first`: the whole
    /// extents among them as extents, the rest as blocks.
    pub fn keep(&self, first: u64, bytes: &[u8]) {
        let start = first * BLOCK;
        let end = start + bytes.len() as u64;
        let mut at = start;
        while at < end {
            let whole = at.is_multiple_of(EXTENT).then(|| self.range(at, EXTENT));
            let range = match whole {
                Some(extent) if extent.end <= end => extent,
                _ => self.range(at, BLOCK),
            };
            if range.end > end || range.is_empty() {
                break; // (A short fetch, which the reader above refuses.)
            }
            let piece = &bytes[(range.start - start) as usize..(range.end - start) as usize];
            self.cache.put(&self.identity(&range), piece.to_vec());
            at = range.end;
        }
    }

    /// `len` bytes from `start` (a multiple of `len`), cut at the object's end.
    fn range(&self, start: u64, len: u64) -> Range<u64> {
        start..(start + len).min(self.len)
    }

    fn identity(&self, range: &Range<u64>) -> String {
        format!("{}\0{}+{}", self.id, range.start, range.end - range.start)
    }

    /// The bytes of `range`, if an entry holds exactly them.
    fn entry(&self, range: Range<u64>) -> Option<Vec<u8>> {
        let bytes = self.cache.get(&self.identity(&range))?;
        (bytes.len() as u64 == range.end - range.start).then_some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_kept_as_whole_extents_and_edge_blocks_and_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let len = 3 * EXTENT + 5 * BLOCK + 77;
        let object: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let expect =
            |b: u64| object[(b * BLOCK) as usize..((b + 1) * BLOCK).min(len) as usize].to_vec();
        let blocks = len.div_ceil(BLOCK);
        {
            let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
            let on = OnDisk {
                cache: &cache,
                id: "s3://b/m\0e1",
                len,
            };
            // Blocks 3.. to the end: extent 0 partly (blocks), 1 and 2 whole,
            // and the last, cut at the object's end, whole too.
            on.keep(3, &object[(3 * BLOCK) as usize..]);
            // A fetch that ends within an extent: blocks.
            on.keep(0, &object[..(2 * BLOCK) as usize]);
        }
        let files = std::fs::read_dir(dir.path()).unwrap().count() as u64;
        assert_eq!(files, 2 + (EXTENT_BLOCKS - 3) + 3);
        let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
        let on = OnDisk {
            cache: &cache,
            id: "s3://b/m\0e1",
            len,
        };
        let all: Vec<u64> = (0..blocks).collect();
        let (found, missing) = on.blocks(&all);
        assert_eq!(missing, vec![2]);
        assert_eq!(found.len() as u64, blocks - 1);
        for (b, bytes) in found {
            assert!(bytes == expect(b), "block {b}");
        }
        // Another version of the object finds nothing.
        let other = OnDisk {
            cache: &cache,
            id: "s3://b/m\0e2",
            len,
        };
        assert_eq!(other.blocks(&all).1, all);
    }
}
