//! Recognising sequential readers among the reads of one open file. A file
//! may be read by several streams at once: a loader that maps it and touches
//! each tensor on two threads (torch does) faults in two places tens of MB
//! apart, and the kernel sends their reads interleaved on the one handle.
//! Each stream is followed on its own, as the kernel's read-ahead follows one,
//! so that every one of them gets its chunks decoded ahead.

#![forbid(unsafe_code)]

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

/// A read that lands within this distance of where a stream's last read
/// ended continues it: the kernel sends a stream's read-ahead requests
/// concurrently, so they arrive slightly out of order.
pub const SEQUENTIAL_SLACK: u64 = 4 << 20;

/// Streams followed per handle. Beyond this many, the one read least
/// recently is forgotten.
const STREAMS: usize = 8;

/// One reader going forward through the file.
#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    /// Source offset where its last read ended.
    last_end: u64,
    /// Chunks before this one have been queued for decoding ahead of it.
    ahead_until: usize,
    /// When it was last read, in reads of the handle (for forgetting).
    used: u64,
}

/// The streams of one handle.
#[derive(Debug)]
pub struct Streams {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    streams: Vec<Stream>,
    reads: u64,
}

/// What a read means for decoding ahead.
#[derive(Debug, PartialEq, Eq)]
pub struct Step {
    /// Chunks before this one had been queued for the read's stream before
    /// it (0 for a read that starts a stream).
    pub queued_until: usize,
    /// The chunks to queue now: those of `next..stop` not queued for the
    /// stream yet, if the read continues one.
    pub wanted: Option<Range<usize>>,
}

impl Streams {
    /// A handle's streams: one, at the start of the file, as a reader that
    /// opens a file most often starts there.
    pub fn new() -> Streams {
        Streams {
            state: Mutex::new(State {
                streams: vec![Stream::default()],
                reads: 0,
            }),
        }
    }

    /// Records a read of `[offset, end)`, whose next chunk is `next` and
    /// whose read-ahead would end before chunk `stop`: the stream it
    /// continues moves to `end` and has the chunks up to `stop` queued;
    /// a read that continues none starts a stream, forgetting the one read
    /// least recently if there are too many.
    pub fn record(&self, offset: u64, end: u64, next: usize, stop: usize) -> Step {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.reads += 1;
        let used = state.reads;
        let nearest = (state.streams.iter_mut())
            .filter(|s| offset.abs_diff(s.last_end) <= SEQUENTIAL_SLACK)
            .min_by_key(|s| offset.abs_diff(s.last_end));
        if let Some(stream) = nearest {
            let queued_until = stream.ahead_until;
            let start = queued_until.max(next);
            // Out-of-order requests of a stream must not move it back.
            stream.last_end = stream.last_end.max(end);
            stream.ahead_until = queued_until.max(stop);
            stream.used = used;
            return Step {
                queued_until,
                wanted: (start < stop).then_some(start..stop),
            };
        }
        let fresh = Stream {
            last_end: end,
            ahead_until: 0,
            used,
        };
        if state.streams.len() < STREAMS {
            state.streams.push(fresh);
        } else if let Some(oldest) = state.streams.iter_mut().min_by_key(|s| s.used) {
            *oldest = fresh;
        }
        Step {
            queued_until: 0,
            wanted: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    /// Whether a read of `[offset, end)` continues a stream, in a file of 1 MiB chunks.
    fn continues(streams: &Streams, offset: u64, end: u64) -> bool {
        let next = (end / MB) as usize + 1;
        streams.record(offset, end, next, next + 8).wanted.is_some()
    }

    #[test]
    fn a_reader_from_the_start_is_sequential_at_once() {
        let streams = Streams::new();
        assert!(continues(&streams, 0, MB));
        assert!(continues(&streams, MB, 2 * MB));
    }

    #[test]
    fn two_interleaved_streams_are_each_followed() {
        let streams = Streams::new();
        let (a, b) = (100 * MB, 300 * MB);
        assert!(!continues(&streams, a, a + MB));
        assert!(!continues(&streams, b, b + MB));
        for k in 1..10 {
            assert!(continues(&streams, a + k * MB, a + (k + 1) * MB));
            assert!(continues(&streams, b + k * MB, b + (k + 1) * MB));
        }
    }

    #[test]
    fn each_stream_queues_its_own_chunks_once() {
        let streams = Streams::new();
        let (a, b) = (100 * MB, 300 * MB);
        assert_eq!(streams.record(a, a + MB, 101, 109).wanted, None);
        assert_eq!(streams.record(b, b + MB, 301, 309).wanted, None);
        let step = streams.record(a + MB, a + 2 * MB, 102, 110);
        assert_eq!(
            step,
            Step {
                queued_until: 0,
                wanted: Some(102..110)
            }
        );
        assert_eq!(
            streams.record(b + MB, b + 2 * MB, 302, 310).wanted,
            Some(302..310)
        );
        let step = streams.record(a + 2 * MB, a + 3 * MB, 103, 111);
        assert_eq!(
            step,
            Step {
                queued_until: 110,
                wanted: Some(110..111)
            }
        );
        // Nothing new to queue.
        assert_eq!(
            streams.record(a + 2 * MB, a + 3 * MB, 103, 111).wanted,
            None
        );
    }

    #[test]
    fn out_of_order_requests_do_not_move_a_stream_back() {
        let streams = Streams::new();
        streams.record(0, 4 * MB, 4, 12);
        assert!(streams.record(2 * MB, 3 * MB, 3, 11).queued_until == 12);
        // Still continues from 4 MB, not 3 MB.
        assert!(continues(&streams, 4 * MB + SEQUENTIAL_SLACK, 9 * MB));
    }

    #[test]
    fn a_random_read_is_not_sequential_and_the_oldest_stream_is_forgotten() {
        let streams = Streams::new();
        for k in 1..=STREAMS as u64 {
            assert!(!continues(&streams, k * 100 * MB, k * 100 * MB + MB));
        }
        // The stream at 0 was the least recently read: forgotten.
        assert!(!continues(&streams, MB, 2 * MB));
        assert!(continues(&streams, 201 * MB, 202 * MB));
    }
}
