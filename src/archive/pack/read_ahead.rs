//! Reading the source ahead of packing, on a thread of its own that also
//! hashes it: the workers take each batch already read, and neither the
//! reads nor the SHA-256 of the file wait on them (on one worker they took
//! about an eighth of its time).

#![forbid(unsafe_code)]

use super::input::{Extent, Input};
use crate::error::Result;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

/// Batches read and waiting for the workers beyond those they hold (see
/// `pipeline::WINDOW_BATCHES`): one is enough to keep them from waiting,
/// as reading and hashing a batch is much faster than packing it.
const READ_AHEAD_BATCHES: usize = 1;

/// Starts reading `input`'s batches `ranges` (of its plan), in order, on a
/// thread of `scope`: the receiver gets each batch's bytes, or the error
/// that stopped the reading. The thread's result is the SHA-256 of the
/// batches' bytes, or None where the receiver was dropped before the last.
pub(super) fn read_ahead<'s>(
    scope: &'s Scope<'s, '_>,
    input: &'s Input,
    ranges: &'s [Range<usize>],
) -> (
    Receiver<Result<Extent>>,
    ScopedJoinHandle<'s, Option<[u8; 32]>>,
) {
    let (batches, received) = sync_channel(READ_AHEAD_BATCHES);
    let reader = scope.spawn(move || read_and_hash(input, ranges, batches));
    (received, reader)
}

fn read_and_hash(
    input: &Input,
    ranges: &[Range<usize>],
    batches: SyncSender<Result<Extent>>,
) -> Option<[u8; 32]> {
    let mut sha = Sha256::new();
    for range in ranges {
        let read = Extent::read(input, &input.plan[range.clone()]);
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
