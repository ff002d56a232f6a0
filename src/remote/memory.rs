//! The memory cache of fetched blocks, which knows what of each block its
//! readers have had, so that fetching ahead never evicts what is still to
//! be read.

use lru::LruCache;
use rangemap::RangeSet;
use std::ops::Range;
use std::sync::Arc;

/// Bytes per cached block: a random read fetches at most one block more on
/// each side than it needs.
pub const BLOCK: u64 = 64 << 10;

/// A block: the object's identity (key and version) and its index.
pub(super) type BlockId = (Arc<str>, u64);
pub(super) type Block = Arc<Vec<u8>>;

/// The memory cache: blocks in LRU order, each with the bytes of it that
/// reads have had. A block read through is the first to evict (its readers
/// have its bytes); blocks fetched ahead of their readers are added only
/// while the blocks not read through take at most half the capacity, so that
/// fetching ahead never evicts a block before it is read through.
pub(super) struct Memory {
    blocks: LruCache<BlockId, Kept>,
    bytes: usize,
    /// Bytes of the blocks kept that are not read through.
    pending: usize,
    capacity: usize,
}

struct Kept {
    block: Block,
    /// The byte ranges of it that reads have had, until it is read through.
    read: RangeSet<usize>,
    through: bool,
}

impl Memory {
    /// An empty cache of `capacity` bytes.
    pub(super) fn new(capacity: usize) -> Memory {
        Memory {
            blocks: LruCache::unbounded(),
            bytes: 0,
            pending: 0,
            capacity,
        }
    }

    /// Block `id`, if kept; one not read through yet becomes the most
    /// recently used (one read through stays among the first to evict).
    pub(super) fn get(&mut self, id: &BlockId) -> Option<Block> {
        let through = self.blocks.peek(id)?.through;
        let kept = match through {
            true => self.blocks.peek(id),
            false => self.blocks.get(id),
        };
        kept.map(|kept| kept.block.clone())
    }

    /// Bytes of the blocks kept.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether block `id` is kept (without making it recently used).
    pub(super) fn contains(&self, id: &BlockId) -> bool {
        self.blocks.contains(id)
    }

    pub(super) fn keep(&mut self, id: BlockId, block: Block) {
        let len = block.len();
        let kept = Kept {
            block,
            read: RangeSet::new(),
            through: false,
        };
        if let Some(old) = self.blocks.put(id, kept) {
            self.forget(&old);
        }
        self.bytes += len;
        self.pending += len;
        while self.bytes > self.capacity {
            let Some((_, old)) = self.blocks.pop_lru() else {
                break;
            };
            self.forget(&old);
        }
    }

    fn forget(&mut self, kept: &Kept) {
        self.bytes -= kept.block.len();
        if !kept.through {
            self.pending -= kept.block.len();
        }
    }

    /// Notes that bytes `range` of block `id` were read; a block read
    /// through is demoted.
    pub(super) fn read(&mut self, id: &BlockId, range: Range<usize>) {
        let Some(kept) = self.blocks.peek_mut(id) else {
            return;
        };
        if kept.through || range.is_empty() {
            return;
        }
        kept.read.insert(range);
        let len = kept.block.len();
        if kept.read.gaps(&(0..len)).next().is_none() {
            kept.through = true;
            kept.read = RangeSet::new();
            self.pending -= len;
            self.blocks.demote(id);
        }
    }

    /// Bytes that blocks fetched ahead of their readers may still add.
    pub(super) fn room(&self) -> u64 {
        (self.capacity / 2).saturating_sub(self.pending) as u64
    }
}
