//! Packing a planned file's chunks on the thread pool without barriers:
//! tasks take the source a batch at a time (as read and hashed ahead, see
//! `read_ahead`), pack chunks, and hand finished batches' records over in
//! order (to be written behind, see `write_behind`), each task starting the
//! tasks its result makes ready. At most [`WINDOW_BATCHES`] batches are in
//! memory, taken and not yet handed over.
//!
//! Chunks outside tensors are searched, and so is the representative chunk
//! of the tensor that leads each class (tensors of one dtype and shape): its
//! programs are the class's first template (a representative that lies
//! beyond the batch its tensor starts in is read and searched with that
//! batch). Every other chunk is re-fit from its class's templates (see
//! `synth::refit_or_search`); where none fits, the class's first such chunk
//! is searched and its programs join the templates of the chunks after it,
//! which are re-fit again. A chunk's templates thus follow from the chunks
//! before it in the file, whatever the batches, the thread count and the
//! order tasks finish in: the output depends on none of them. Classes share
//! nothing but the threads, so each goes through its searches and re-fits on
//! its own, and a thread done with one class's or batch's work takes up
//! another's rather than wait for a slower one.

use super::chunk::pack_chunk;
use super::input::{representative_ahead, Extent, Input};
use super::output::Record;
use super::read_ahead::Source;
use super::write_behind::Written;
use crate::error::{Error, Result};
use crate::synth::{SynthOptions, Template};
use rayon::ScopeFifo;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};

/// Batches in memory at once, taken and not yet handed over: the chunks of
/// a batch whose templates wait on a search in the one before are packed
/// meanwhile. With two, a thread done with a batch's last chunks often
/// waited; with four, packing was no faster and more is held in memory.
const WINDOW_BATCHES: usize = 3;

/// Re-fits of a class under way at once beyond its settled head, per
/// thread. A misfit sends the re-fits after it back to wait for its
/// search's templates, so this bounds the work each misfit throws away;
/// unbounded, a class of many tiny chunks that misfit often re-fit every
/// chunk in the window once per misfit.
const REFITS_AHEAD_PER_THREAD: usize = 4;

/// A class's templates, in the order they are tried: its representative's
/// programs, then those of the chunks searched since, newest first (each one
/// template per lane).
type Templates = Vec<Vec<Template>>;

/// Templates a class keeps: a region of data unlike the representative's
/// gets its own without pushing out the representative's.
const MAX_TEMPLATES: usize = 4;

/// Packs the chunks of `input`'s plan, which `source` sends in the batches
/// `ranges` (of the plan) and takes the batches' buffers back, and sends
/// each batch's records to `sink`, in order. A failed send of records
/// means the receiver stopped on an error of its own, which the caller
/// reports.
pub(super) fn pack_all(
    input: &Input,
    ranges: &[Range<usize>],
    synth: &SynthOptions,
    (source, spares): Source,
    sink: SyncSender<Written>,
) -> Result<()> {
    let packing = Packing {
        input,
        ranges,
        synth,
        refits_ahead: REFITS_AHEAD_PER_THREAD * rayon::current_num_threads(),
        source: Mutex::new(source),
        spares,
        sink,
        state: Mutex::new(State::default()),
    };
    rayon::scope_fifo(|s| {
        let tasks = packing.io(&mut packing.lock());
        packing.spawn(s, tasks);
    });
    let state = packing.state.into_inner().expect("no task panics");
    match state.error {
        Some(e) => Err(e),
        None => {
            assert_eq!(state.written, ranges.len(), "every batch handed over");
            Ok(())
        }
    }
}

/// What the tasks share.
struct Packing<'p> {
    input: &'p Input<'p>,
    ranges: &'p [Range<usize>],
    synth: &'p SynthOptions,
    /// Re-fits of a class under way at once (see [`REFITS_AHEAD_PER_THREAD`]).
    refits_ahead: usize,
    /// Taken from by one task at a time (see [`State::reading`]).
    source: Mutex<Receiver<Result<Extent>>>,
    /// Where the buffers of batches handed over go back to be read into.
    spares: Sender<Vec<u8>>,
    /// Sent to by one task at a time, in order (see [`State::writing`]).
    sink: SyncSender<Written>,
    state: Mutex<State>,
}

/// Where packing stands.
#[derive(Default)]
struct State {
    /// The batches read and not yet written, in order.
    window: VecDeque<Batch>,
    /// The batch to take next, and how many are handed over.
    next_read: usize,
    written: usize,
    /// Whether a task is taking the next batch, or handing the first in the
    /// window over.
    reading: bool,
    writing: bool,
    classes: HashMap<usize, Class>,
    /// Representatives searched before their batch is read, by their index
    /// in the plan, with their records once searched.
    ahead: HashMap<usize, Option<Record>>,
    /// The first error met; no task starts new work after it.
    error: Option<Error>,
}

/// A batch's bytes and its chunks' records so far.
struct Batch {
    range: Range<usize>,
    extent: Arc<Extent>,
    records: Vec<Option<Record>>,
    left: usize,
}

/// A class's templates, its chunks waiting, and its work under way.
#[derive(Default)]
struct Class {
    templates: Arc<Templates>,
    /// Chunks (indices in the plan) not packed and not under way, in
    /// order: those to be searched, which go before any re-fit, and those
    /// to be re-fit.
    searches: VecDeque<usize>,
    waiting: VecDeque<usize>,
    busy: Option<Busy>,
}

/// A class's work under way: a search, or the re-fits of the chunks that
/// were waiting, in order, with their results so far. Re-fits change no
/// template, so chunks that come to wait while a class re-fits join its
/// re-fits as there is room (until one misfits), and the fitting chunks at
/// their head are settled as they come, so that their batch can be written.
enum Busy {
    Search,
    Refits {
        chunks: Vec<usize>,
        /// Each chunk's record once re-fit, `None` where it misfit, or
        /// taken once settled (the first `settled` of them).
        results: Vec<Option<Option<Record>>>,
        settled: usize,
        left: usize,
    },
}

/// Work for the thread pool.
enum Task {
    Read,
    Write,
    Chunk(Job),
}

/// Packing one chunk: what it needs and what its result is for.
struct Job {
    /// The chunk's index in the plan.
    at: usize,
    /// The bytes it lies in: its batch's, or a representative's read ahead.
    extent: Arc<Extent>,
    templates: Arc<Templates>,
    role: Role,
}

/// What a packed chunk's result is for.
#[derive(Clone, Copy)]
enum Role {
    /// A chunk outside tensors, searched.
    Lone,
    /// A class's search.
    Search { class: usize },
    /// One of a class's re-fits, and its place among them.
    Refit { class: usize, slot: usize },
}

impl<'p> Packing<'p> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("no task panics")
    }

    fn spawn<'s>(&'s self, s: &ScopeFifo<'s>, tasks: Vec<Task>) {
        for task in tasks {
            s.spawn_fifo(move |s| {
                let more = match task {
                    Task::Read => self.read(),
                    Task::Write => self.write(),
                    Task::Chunk(job) => self.pack(job),
                };
                self.spawn(s, more);
            });
        }
    }

    /// Takes the next batch, read ahead, and admits it.
    fn read(&self) -> Vec<Task> {
        let b = self.lock().next_read;
        let read = self.source.lock().expect("no task panics").recv();
        match read.expect("the reader sends every batch or its error") {
            Ok(extent) => self.admit(b, extent),
            Err(e) => self.fail(e),
        }
    }

    /// Takes batch `b`'s bytes into the window: its chunks outside tensors
    /// are searched, the others wait in their classes, and a representative
    /// of a class that starts in it and lies beyond it is read and searched
    /// before the class's other chunks.
    fn admit(&self, b: usize, extent: Extent) -> Vec<Task> {
        let range = self.ranges[b].clone();
        let plan = &self.input.plan;
        let ahead = match representative_ahead(self.input, range.clone()) {
            Ok(ahead) => ahead,
            Err(e) => return self.fail(e),
        };
        let extent = Arc::new(extent);
        let mut state = self.lock();
        state.window.push_back(Batch {
            range: range.clone(),
            extent: extent.clone(),
            records: vec![None; range.len()],
            left: range.len(),
        });
        (state.next_read, state.reading) = (b + 1, false);
        let mut tasks = Vec::new();
        let mut classes = Vec::new();
        for at in range {
            match (state.ahead.get(&at).map(Option::is_some), plan[at].class) {
                (Some(true), _) => {
                    let record = state.ahead.remove(&at).flatten();
                    state.settle(at, record.expect("a representative searched ahead"));
                }
                // A representative still searched ahead: its search settles it.
                (Some(false), _) => {}
                (None, Some(c)) => {
                    let class = state.classes.entry(c).or_default();
                    match plan[at].searched() {
                        true => class.searches.push_back(at),
                        false => class.waiting.push_back(at),
                    }
                    classes.push(c);
                }
                (None, None) => {
                    let (extent, templates) = (extent.clone(), Arc::default());
                    let role = Role::Lone;
                    tasks.push(Task::Chunk(Job {
                        at,
                        extent,
                        templates,
                        role,
                    }));
                }
            }
        }
        if let Some((at, ahead_extent)) = ahead {
            let class = plan[at].class.expect("a representative is a tensor's");
            let c = state.classes.entry(class).or_default();
            c.busy = Some(Busy::Search);
            let templates = c.templates.clone();
            state.ahead.insert(at, None);
            tasks.push(Task::Chunk(Job {
                at,
                extent: Arc::new(ahead_extent),
                templates,
                role: Role::Search { class },
            }));
        }
        classes.dedup();
        for c in classes {
            tasks.extend(self.next_work(&mut state, c));
        }
        tasks.extend(self.io(&mut state));
        tasks
    }

    /// Packs one chunk, and takes its result in.
    fn pack(&self, job: Job) -> Vec<Task> {
        if self.lock().error.is_some() {
            return Vec::new();
        }
        let Job {
            at,
            extent,
            templates,
            role,
        } = job;
        let p = &self.input.plan[at];
        let may_search = !matches!(role, Role::Refit { .. });
        let packed = pack_chunk(extent.piece(p), p, self.synth, &templates, may_search);
        drop((extent, templates));
        let mut state = self.lock();
        let mut tasks = Vec::new();
        match role {
            Role::Lone => {
                let (entry, encoded) = packed.expect("a chunk that may be searched is encoded");
                state.settle(at, (entry, encoded.record));
            }
            Role::Search { class } => {
                let (entry, encoded) = packed.expect("a chunk that may be searched is encoded");
                let c = state.classes.get_mut(&class).expect("a class under way");
                learn(&mut c.templates, encoded.templates);
                c.busy = None;
                let record = (entry, encoded.record);
                // A representative searched ahead of its batch waits for it.
                match state.find(at).is_some() {
                    true => {
                        state.ahead.remove(&at);
                        state.settle(at, record);
                    }
                    false => drop(state.ahead.insert(at, Some(record))),
                }
                tasks.extend(self.next_work(&mut state, class));
            }
            Role::Refit { class, slot } => {
                let record = packed.map(|(entry, encoded)| (entry, encoded.record));
                match state.refit(class, slot, record) {
                    true => tasks.extend(self.refits_done(&mut state, class)),
                    false => tasks.extend(self.next_work(&mut state, class)),
                }
            }
        }
        tasks.extend(self.io(&mut state));
        tasks
    }

    /// Takes in a class's re-fits, all done, their fitting head settled:
    /// the first misfit, if any, is searched next; the chunks after it wait
    /// again, for its templates.
    fn refits_done(&self, state: &mut State, class: usize) -> Vec<Task> {
        let c = state.classes.get_mut(&class).expect("a class under way");
        let Some(Busy::Refits {
            chunks, settled, ..
        }) = c.busy.take()
        else {
            unreachable!("a class's re-fits under way")
        };
        let mut unsettled = chunks[settled..].iter();
        if let Some(&misfit) = unsettled.next() {
            c.searches.push_front(misfit);
        }
        for &at in unsettled.rev() {
            c.waiting.push_front(at);
        }
        self.next_work(state, class)
    }

    /// The next work of class `class`: with none under way, its first chunk
    /// to be searched, alone, or else the re-fits of its chunks waiting, in
    /// parallel; while it re-fits and none has misfit, the re-fits of the
    /// chunks waiting too (none of them to be searched). At most
    /// `refits_ahead` re-fits are under way beyond the settled ones.
    fn next_work(&self, state: &mut State, class: usize) -> Vec<Task> {
        let c = state.classes.get_mut(&class).expect("a class with chunks");
        let joining = match &c.busy {
            Some(Busy::Refits {
                results, settled, ..
            }) => {
                c.searches.is_empty()
                    && !results[*settled..].iter().any(|r| matches!(r, Some(None)))
            }
            Some(_) => false,
            None => true,
        };
        if !joining || (c.searches.is_empty() && c.waiting.is_empty()) {
            return Vec::new();
        }
        let templates = c.templates.clone();
        let jobs: Vec<(usize, Role)> = match c.searches.pop_front() {
            Some(at) => {
                c.busy = Some(Busy::Search);
                vec![(at, Role::Search { class })]
            }
            None => {
                let Busy::Refits {
                    chunks,
                    results,
                    settled,
                    left,
                } = c.busy.get_or_insert(Busy::Refits {
                    chunks: Vec::new(),
                    results: Vec::new(),
                    settled: 0,
                    left: 0,
                })
                else {
                    unreachable!("a class re-fitting")
                };
                let first = chunks.len();
                let room = (*settled + self.refits_ahead).saturating_sub(first);
                let joined = c.waiting.drain(..room.min(c.waiting.len()));
                chunks.extend(joined);
                results.resize_with(chunks.len(), || None);
                *left += chunks.len() - first;
                let roles = (first..chunks.len()).map(|slot| Role::Refit { class, slot });
                chunks[first..].iter().copied().zip(roles).collect()
            }
        };
        jobs.into_iter()
            .map(|(at, role)| {
                let extent = state.batch_of(at).extent.clone();
                let templates = templates.clone();
                Task::Chunk(Job {
                    at,
                    extent,
                    templates,
                    role,
                })
            })
            .collect()
    }

    /// Hands the first batch's records, all packed, over to be written.
    fn write(&self) -> Vec<Task> {
        let written = {
            let mut state = self.lock();
            let batch = state.window.pop_front().expect("a batch to write");
            // Its chunks are packed: no job holds its bytes any more. (The
            // reader may have stopped: then the buffer is let go of.)
            if let Ok(extent) = Arc::try_unwrap(batch.extent) {
                let _ = self.spares.send(extent.bytes);
            }
            let last = &self.input.plan[batch.range.end - 1];
            let records: Vec<Record> = (batch.records.into_iter())
                .map(|r| r.expect("every chunk packed"))
                .collect();
            (records, last.start + last.len)
        };
        // Before the next batch can be sent, so that they go in order.
        if self.sink.send(written).is_err() {
            let stopped = std::io::Error::other("the archive's writer stopped");
            return self.fail(Error::io(self.input.path, stopped));
        }
        let mut state = self.lock();
        (state.writing, state.written) = (false, state.written + 1);
        self.io(&mut state)
    }

    /// The taking and handing over that can start: the first batch's
    /// records once its chunks are packed, and the next batch while the
    /// window has room.
    fn io(&self, state: &mut State) -> Vec<Task> {
        let mut tasks = Vec::new();
        if state.error.is_some() {
            return tasks;
        }
        if !state.writing && state.window.front().is_some_and(|b| b.left == 0) {
            state.writing = true;
            tasks.push(Task::Write);
        }
        let room = state.next_read - state.written < WINDOW_BATCHES;
        if !state.reading && room && state.next_read < self.ranges.len() {
            state.reading = true;
            tasks.push(Task::Read);
        }
        tasks
    }

    fn fail(&self, e: Error) -> Vec<Task> {
        self.lock().error.get_or_insert(e);
        Vec::new()
    }
}

impl State {
    /// Takes in re-fit `slot` of class `class` (`None`: it misfit), and
    /// settles the fitting chunks at the head of the class's re-fits.
    /// Whether they are all done.
    fn refit(&mut self, class: usize, slot: usize, record: Option<Record>) -> bool {
        let c = self.classes.get_mut(&class).expect("a class under way");
        let Some(Busy::Refits {
            chunks,
            results,
            settled,
            left,
        }) = &mut c.busy
        else {
            unreachable!("a class's re-fits under way")
        };
        results[slot] = Some(record);
        *left -= 1;
        let done = *left == 0;
        let mut fit = Vec::new();
        while let Some(Some(Some(_))) = results.get(*settled) {
            let record = results[*settled]
                .take()
                .flatten()
                .expect("a re-fit that fits");
            fit.push((chunks[*settled], record));
            *settled += 1;
        }
        for (at, record) in fit {
            self.settle(at, record);
        }
        done
    }

    /// The batch in the window that chunk `at` lies in, if it was read and
    /// not yet written.
    fn find(&mut self, at: usize) -> Option<&mut Batch> {
        self.window.iter_mut().find(|b| b.range.contains(&at))
    }

    fn batch_of(&mut self, at: usize) -> &mut Batch {
        (self.find(at)).expect("a chunk of a batch read and not written")
    }

    /// Records chunk `at`'s entry and record.
    fn settle(&mut self, at: usize, record: Record) {
        let batch = self.batch_of(at);
        batch.records[at - batch.range.start] = Some(record);
        batch.left -= 1;
    }
}

/// Adds a search's programs to its class's templates: a class's first
/// template stays first; later ones go after it, newest first.
fn learn(templates: &mut Arc<Templates>, found: Vec<Template>) {
    if !found.is_empty() {
        let list = Arc::make_mut(templates);
        list.insert(list.len().min(1), found);
        list.truncate(MAX_TEMPLATES);
    }
}
