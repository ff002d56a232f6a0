//! Reading the source ahead of packing, on a thread of its own that also
//! hashes it: the workers take each batch already read, and neither the
//! reads nor the SHA-256 of the file wait on them (on one worker they took
//! about an eighth of its time). The workers send the buffers of batches
//! they are done with back to be read into again: freed on their threads,
//! the allocator kept them apart from this one's, and packing minilm-f32
//! on one worker peaked at 114 MB rather than 43.

#![forbid(unsafe_code)]

use super::input::{Extent, Input};
use crate::error::Result;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

/// Batches read and waiting for the workers beyond those they hold (see
/// `pipeline::WINDOW_BATCHES`): one is enough to keep them from waiting,
/// as reading and hashing a batch is much faster than packing it.
const READ_AHEAD_BATCHES: usize = 1;

/// The ends of the reading thread's channels that the workers hold: the
/// batches read, each one's bytes or the error that stopped the reading,
/// and the buffers to read into again.
pub(super) type Source = (Receiver<Result<Extent>>, Sender<Vec<u8>>);

/// Starts reading `input`'s batches `ranges` (of its plan), in order, on a
/// thread of `scope`, into the buffers sent back where there are any. The
/// thread's result is the SHA-256 of the batches' bytes, or None where the
/// receiver of batches was dropped before the last.
pub(super) fn read_ahead<'s>(
    scope: &'s Scope<'s, '_>,
    input: &'s Input,
    ranges: &'s [Range<usize>],
) -> (Source, ScopedJoinHandle<'s, Option<[u8; 32]>>) {
    let (batches, received) = sync_channel(READ_AHEAD_BATCHES);
    let (spare, spares) = channel();
    let reader = scope.spawn(move || read_and_hash(input, ranges, batches, spares));
    ((received, spare), reader)
}

fn read_and_hash(
    input: &Input,
    ranges: &[Range<usize>],
    batches: SyncSender<Result<Extent>>,
    spares: Receiver<Vec<u8>>,
) -> Option<[u8; 32]> {
    let mut sha = Sha256::new();
    for range in ranges {
        let buffer = spares.try_recv().unwrap_or_default();
        let read = Extent::read_into(input, &input.plan[range.clone()], buffer);
        if let Ok(extent) = &read {
            sha.update(&extent.bytes);
        }
        let failed = read.is_err();
        if batches.send(read).is_err() || failed {
            return None;
        }
    }
    Some(sha.finalize().into())
}
