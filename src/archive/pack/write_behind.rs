//! Writing the archive behind packing, on a thread of its own: the workers
//! hand each batch's records over and go on packing while they are written
//! (on one worker the writes took about a sixteenth of its time).

#![forbid(unsafe_code)]

use super::output::{Output, Record};
use crate::error::Result;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

/// Batches of records handed over and not yet written: a few, so that a
/// worker seldom waits for the disk, while a slow disk still holds packing
/// back rather than let records pile up.
const WRITE_BEHIND_BATCHES: usize = 3;

/// A batch's records, in order, and where its last chunk ends in the source.
pub(super) type Written = (Vec<Record>, u64);

/// Starts writing the batches of records sent to the returned sender to
/// `out`, in the order sent, on a thread of `scope`; `progress` receives
/// the source bytes written after each. The thread stops at the first
/// error, which is its result, and drops the receiver, so that later sends
/// fail.
pub(super) fn write_behind<'s>(
    scope: &'s Scope<'s, '_>,
    out: &'s mut Output,
    progress: &'s (dyn Fn(u64) + Sync),
) -> (SyncSender<Written>, ScopedJoinHandle<'s, Result<()>>) {
    let (sender, batches) = sync_channel(WRITE_BEHIND_BATCHES);
    let writer = scope.spawn(move || write_all(out, batches, progress));
    (sender, writer)
}

fn write_all(
    out: &mut Output,
    batches: Receiver<Written>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    for (records, end) in batches {
        out.write(records)?;
        progress(end);
    }
    Ok(())
}
