//! `brevis._brevis`: the Rust side of the Python package. An archive opened
//! for random access and read straight into buffers the caller owns (numpy
//! arrays, torch tensors' memory), in parallel with the GIL released; and
//! pack, unpack and verify over the library. `python/brevis/` builds the
//! safetensors-like API on it.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use brevis::archive::{self, Archive as Inner, PackOptions};
use brevis::error::Error;
use brevis::remote::RemoteOptions;
use brevis::run::{self, tree, Existing, Job};
use brevis::safetensors::{self, Metadata, SourceLayout};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use rayon::prelude::*;
use std::path::PathBuf;

create_exception!(
    _brevis,
    BrevisError,
    PyException,
    "An archive or checkpoint that could not be read or written; the message names the \
     file and the reason (and for a damaged archive, the byte offset)."
);

fn to_py(e: Error) -> PyErr {
    BrevisError::new_err(e.to_string())
}

/// An open `.brv` archive (and its bases, if it was packed against some).
#[pyclass(frozen, module = "brevis._brevis")]
struct Archive {
    inner: Inner,
}

#[pymethods]
impl Archive {
    /// Opens the archive at `path`, a local path or the URL of an object
    /// (`s3://BUCKET/KEY`, `https://HOST/PATH`; credentials and endpoint from
    /// the AWS environment variables), checking its framing and index. From a
    /// store, a request that takes longer than `timeout` seconds, retries
    /// included, fails the read that needed it.
    #[new]
    #[pyo3(signature = (path, timeout = 60.0))]
    fn new(py: Python<'_>, path: PathBuf, timeout: f64) -> PyResult<Archive> {
        let timeout = std::time::Duration::try_from_secs_f64(timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| PyValueError::new_err("timeout must be a positive number of seconds"))?;
        let options = RemoteOptions {
            timeout,
            ..RemoteOptions::default()
        };
        let inner = py
            .allow_threads(|| run::open_archive_with(&path, options))
            .map_err(to_py)?;
        Ok(Archive { inner })
    }

    /// Length of the original file in bytes.
    #[getter]
    fn source_len(&self) -> u64 {
        self.inner.len()
    }

    /// The archive's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// Fills `buffer` (writable and C-contiguous: a numpy array, a bytearray)
    /// with the original's bytes from `offset`, decoding only the chunks
    /// they lie in, in parallel, each checked against its checksum.
    fn read_into(&self, py: Python<'_>, offset: u64, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = Target::of(buffer)?;
        self.check_span(offset, target.len)?;
        py.allow_threads(|| {
            // SAFETY: see `Target::slice`; `target` (and the buffer export it
            // holds) outlives the slice, which no other code here aliases.
            let out = unsafe { target.slice() };
            read_parallel(&self.inner, offset, out)
        })
        .map_err(to_py)
    }

    /// Fills each `(offset, buffer)` as `read_into` does, all in parallel
    /// (every chunk checked against its checksum). With `check_sha256`, also
    /// checks the SHA-256 of the whole original, as `brevis unpack` does:
    /// its bytes in order, the buffers where they hold them and the rest
    /// decoded, hashed on one thread beside the decoding.
    #[pyo3(signature = (targets, check_sha256 = false))]
    fn read_all_into(
        &self,
        py: Python<'_>,
        targets: Vec<(u64, Bound<'_, PyAny>)>,
        check_sha256: bool,
    ) -> PyResult<()> {
        let mut spans = Vec::with_capacity(targets.len());
        for (offset, buffer) in &targets {
            let target = Target::of(buffer)?;
            self.check_span(*offset, target.len)?;
            spans.push((*offset, target));
        }
        spans.sort_by_key(|(offset, _)| *offset);
        if spans
            .windows(2)
            .any(|w| w[0].0 + w[0].1.len as u64 > w[1].0)
        {
            return Err(PyValueError::new_err("the buffers' spans overlap"));
        }
        let all: Vec<&Target> = spans.iter().map(|(_, t)| t).collect();
        if Target::overlap(&all) {
            return Err(PyValueError::new_err("two buffers share memory"));
        }
        py.allow_threads(|| {
            // SAFETY: as in `read_into`; the spans are disjoint buffers, each
            // sliced once.
            let slices: Vec<(u64, &mut [u8])> = spans
                .iter()
                .map(|(o, t)| (*o, unsafe { t.slice() }))
                .collect();
            whole::decode_and_check(&self.inner, slices, check_sha256)
        })
        .map_err(to_py)
    }

    /// The original's safetensors header, checked as the packer checks it
    /// (the same code, the same size limit): its tensors, as `(name, dtype,
    /// shape, start, end)` in the order of their bytes (offsets in the
    /// original), and its `__metadata__` as `(key, value)` pairs, or None.
    fn header(&self, py: Python<'_>) -> PyResult<(Vec<Tensor>, Option<Metadata>)> {
        let layout = py
            .allow_threads(|| source_layout(&self.inner))
            .map_err(to_py)?;
        let tensors = (layout.tensors.into_iter())
            .map(|t| (t.name, t.dtype, t.shape, t.start, t.end))
            .collect();
        Ok((tensors, layout.metadata))
    }

    /// Decodes everything, checking every chunk checksum and the SHA-256 of
    /// the original.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| archive::verify(&self.inner, None, &|_| {}))
            .map_err(to_py)
    }
}

impl Archive {
    fn check_span(&self, offset: u64, len: usize) -> PyResult<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.inner.len() => Ok(()),
            _ => Err(PyValueError::new_err(format!(
                "bytes {offset}..+{len} lie beyond the original's {} bytes",
                self.inner.len()
            ))),
        }
    }
}

/// A tensor of `Archive.header`: name, dtype, shape, start and end.
type Tensor = (String, String, Vec<u64>, u64, u64);

/// The layout of `archive`'s original, parsed and checked by the packer's
/// own code. An archive that cannot be read fails with its own error, not as
/// an original that is not safetensors.
fn source_layout(archive: &Inner) -> brevis::Result<SourceLayout> {
    let mut unreadable = None;
    let parsed = safetensors::parse(archive.len(), |n| {
        let mut head = vec![0; n as usize];
        (archive.read_at(0, &mut head).map(|_| head)).map_err(|e| {
            unreadable = Some(e);
            std::io::ErrorKind::Other.into()
        })
    });
    match (parsed, unreadable) {
        (_, Some(e)) => Err(e),
        (Ok(layout), None) => Ok(layout),
        (Err(reason), None) => {
            let reason = format!("its original is not a safetensors file: {reason}");
            Err(Error::invalid(archive.path(), reason))
        }
    }
}

/// A writable, C-contiguous array's memory, the array held while this lives.
/// Its address comes from numpy's array interface rather than the buffer
/// protocol, which the stable ABI of the Python versions supported (3.9+)
/// lacks; any other object with the buffer protocol (a bytearray) is seen
/// through a numpy view of it.
struct Target {
    array: Py<PyAny>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is only dereferenced through `slice`, whose callers
// guarantee exclusive use; the reference in `array` keeps the memory alive on
// any thread.
unsafe impl Send for Target {}
// SAFETY: as for Send: shared references never touch the memory.
unsafe impl Sync for Target {}

impl Target {
    fn of(obj: &Bound<'_, PyAny>) -> PyResult<Target> {
        let py = obj.py();
        let array = match obj.hasattr("__array_interface__")? {
            true => obj.clone(),
            false => {
                let numpy = py.import("numpy")?;
                let view = numpy.call_method1("frombuffer", (obj, "uint8"));
                view.map_err(|_| PyValueError::new_err("expected a numpy array or a bytearray"))?
            }
        };
        let interface = array.getattr("__array_interface__")?;
        let (address, readonly): (usize, bool) = interface.get_item("data")?.extract()?;
        if readonly {
            return Err(PyValueError::new_err("the buffer is read-only"));
        }
        if !interface.get_item("strides")?.is_none() {
            return Err(PyValueError::new_err("the buffer is not C-contiguous"));
        }
        let len: usize = array.getattr("nbytes")?.extract()?;
        Ok(Target {
            array: array.unbind(),
            ptr: address as *mut u8,
            len,
        })
    }

    /// Whether two targets share memory (the same array passed twice, or
    /// views of one): decoding into both would alias it.
    fn overlap(targets: &[&Target]) -> bool {
        let mut spans: Vec<(usize, usize)> = targets
            .iter()
            .filter(|t| t.len > 0)
            .map(|t| (t.ptr as usize, t.ptr as usize + t.len))
            .collect();
        spans.sort_unstable();
        spans.windows(2).any(|w| w[0].1 > w[1].0)
    }

    /// The buffer's bytes.
    ///
    /// # Safety
    /// No other reference to the buffer's memory may be used while the slice
    /// lives: the caller reads into memory it allocated for this read and
    /// has not shared (a fresh numpy array or tensor).
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self) -> &mut [u8] {
        let _held = &self.array;
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: numpy's interface says `len` writable, contiguous bytes are
        // at `ptr`, and the array held in `self.array` keeps them alive (numpy
        // refuses to resize an array others hold); exclusivity is the
        // caller's promise, and `Target::overlap` refuses two targets in one
        // memory.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// `archive.read_at` split at chunk boundaries, the pieces decoded in
/// parallel (a piece that is a whole chunk is decoded straight into `out`).
fn read_parallel(archive: &Inner, offset: u64, out: &mut [u8]) -> brevis::Result<()> {
    let end = offset + out.len() as u64;
    let mut pieces = Vec::new();
    let (mut at, mut rest) = (offset, out);
    while at < end {
        let stop = archive.chunk_range(archive.chunk_at(at)).end.min(end);
        let (head, tail) = rest.split_at_mut((stop - at) as usize);
        pieces.push((at, head));
        (at, rest) = (stop, tail);
    }
    pieces
        .into_par_iter()
        .try_for_each(|(at, piece)| archive.read_at(at, piece).map(drop))
}

mod whole {
    use super::read_parallel;
    use brevis::archive::Archive;
    use brevis::error::{Error, Result};
    use rayon::prelude::*;
    use sha2::{Digest, Sha256};
    use std::ops::Range;
    use std::thread::ScopedJoinHandle;

    /// Source bytes decoded per step: the previous step's bytes are hashed
    /// while these decode.
    const STEP_BYTES: u64 = 8 << 20;

    /// Bytes of the span of `len` at `at` that go into a step with `room`
    /// bytes left: up to a chunk boundary within the room, else the rest of
    /// the first chunk (a chunk is never cut, so none is decoded twice).
    fn piece_len(archive: &Archive, at: u64, len: u64, room: u64) -> u64 {
        let end = at + len;
        if end - at <= room {
            return len;
        }
        let boundary = archive.chunk_range(archive.chunk_at(at + room)).start;
        let first_end = archive.chunk_range(archive.chunk_at(at)).end;
        boundary.max(first_end).min(end) - at
    }

    /// Decodes `spans` (sorted, disjoint) in parallel, every chunk checked,
    /// and with `sha256` checks the SHA-256 of the whole original: its bytes
    /// in order, the spans' where they hold them and the rest decoded for the
    /// hash. Hashing, which is sequential, runs beside the decoding of the
    /// next spans, and so does fetching the records of the spans after those
    /// (from a store: a few large requests ahead of the decoders instead of
    /// one per record as they decode).
    pub fn decode_and_check(
        archive: &Archive,
        spans: Vec<(u64, &mut [u8])>,
        sha256: bool,
    ) -> Result<()> {
        let mut hash = sha256.then(|| InOrder {
            archive,
            sha: Sha256::new(),
            at: 0,
            scratch: Vec::new(),
        });
        // Steps of about STEP_BYTES, a long span (a 1 GB embedding) cut at
        // chunk boundaries: a step's records are fetched before it decodes
        // and must stay in the reader's memory until they are used.
        let mut steps: Vec<Vec<(u64, &mut [u8])>> = Vec::new();
        let mut room = 0;
        for (mut at, mut rest) in spans {
            while !rest.is_empty() {
                if room == 0 {
                    steps.push(Vec::new());
                    room = STEP_BYTES;
                }
                let take = piece_len(archive, at, rest.len() as u64, room);
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(take as usize);
                room = room.saturating_sub(take);
                steps.last_mut().expect("pushed").push((at, piece));
                at += take;
                rest = tail;
            }
        }
        let chunks: Vec<Range<usize>> = steps
            .iter()
            .map(|step| {
                let (first, last) = (step.first().expect("a step"), step.last().expect("a step"));
                let end = last.0 + last.1.len() as u64;
                archive.chunk_at(first.0)..archive.chunk_at(end - 1) + 1
            })
            .collect();
        let mut done: Vec<(u64, &[u8])> = Vec::new();
        // The records of the next two steps are fetched while a step
        // decodes, each on a thread of its own: two requests in flight keep
        // a link busy through the work between one's last byte and the
        // next's first.
        std::thread::scope(|scope| {
            let fetch = |k: usize| {
                let chunks = chunks.get(k).cloned();
                chunks.map(|chunks| scope.spawn(move || archive.prefetch(chunks)))
            };
            let landed = |fetch: Option<ScopedJoinHandle<'_, Result<()>>>| match fetch {
                Some(fetch) => fetch
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e)),
                None => Ok(()),
            };
            landed(fetch(0))?;
            let mut next = fetch(1);
            for (k, step) in steps.iter_mut().enumerate() {
                let after = fetch(k + 2);
                let (decoded, hashed) = rayon::join(
                    || {
                        step.par_iter_mut()
                            .try_for_each(|(at, out)| read_parallel(archive, *at, out))
                    },
                    || hash.as_mut().map_or(Ok(()), |h| h.feed(&done)),
                );
                decoded?;
                hashed?;
                landed(std::mem::replace(&mut next, after))?;
                done = std::mem::take(step)
                    .into_iter()
                    .map(|(at, out)| (at, &*out))
                    .collect();
            }
            Ok::<(), Error>(())
        })?;
        match hash {
            Some(mut hash) => {
                hash.feed(&done)?;
                hash.finish()
            }
            None => Ok(()),
        }
    }

    /// The SHA-256 of an archive's original, fed in order.
    struct InOrder<'a> {
        archive: &'a Archive,
        sha: Sha256,
        /// Source offset hashed up to.
        at: u64,
        scratch: Vec<u8>,
    }

    impl InOrder<'_> {
        /// Hashes up to the end of `spans` (sorted, after what was hashed),
        /// decoding the bytes between them.
        fn feed(&mut self, spans: &[(u64, &[u8])]) -> Result<()> {
            for (offset, bytes) in spans {
                self.gap(*offset)?;
                self.sha.update(bytes);
                self.at = offset + bytes.len() as u64;
            }
            Ok(())
        }

        fn gap(&mut self, to: u64) -> Result<()> {
            self.scratch.resize((to - self.at) as usize, 0);
            self.archive.read_at(self.at, &mut self.scratch)?;
            self.sha.update(&self.scratch);
            self.at = to;
            Ok(())
        }

        fn finish(mut self) -> Result<()> {
            self.gap(self.archive.len())?;
            if <[u8; 32]>::from(self.sha.finalize()) != self.archive.sha256() {
                let reason = "decoded bytes do not match the recorded SHA-256 of the original";
                return Err(Error::corrupt(self.archive.path(), 0, reason));
            }
            Ok(())
        }
    }
}

/// `dedup` as Python passes it: a flag, or the folder of the store.
#[derive(FromPyObject)]
enum Dedup {
    Flag(bool),
    Store(PathBuf),
}

/// Packs `src` (a .safetensors file, or a folder: other files are copied)
/// into `dst` at effort `level` (1-9), against the archive or folder of
/// archives `base` if given. With `dedup` (True, or the store's folder),
/// tensors are matched by content too, against `base`, the archives
/// already in the store (by default `dst`) and the files packed before.
/// With `force`, an archive that others need as their base is only
/// replaced by one of another source if `break_dependants` says so.
/// Returns the bytes written.
#[pyfunction]
// Each is a keyword argument of the Python function.
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (src, dst, *, level = archive::DEFAULT_LEVEL, base = None, dedup = Dedup::Flag(false), force = false, break_dependants = false))]
fn pack(
    py: Python<'_>,
    src: PathBuf,
    dst: PathBuf,
    level: u8,
    base: Option<PathBuf>,
    dedup: Dedup,
    force: bool,
    break_dependants: bool,
) -> PyResult<u64> {
    if !archive::LEVELS.contains(&level) {
        return Err(PyValueError::new_err(format!(
            "level {level} is not 1 to 9"
        )));
    }
    let dedup = match &dedup {
        Dedup::Flag(false) => None,
        Dedup::Flag(true) => Some(None),
        Dedup::Store(store) => Some(Some(store.as_path())),
    };
    py.allow_threads(|| {
        let jobs = plan(&src, &dst, ("safetensors", "brv"), force)?;
        if !break_dependants {
            run::refuse_orphaning(&src, &dst, dedup.flatten(), &jobs)?;
        }
        let bases = run::RunBases::new(&src, &dst, base.as_deref(), dedup, &jobs)?;
        run_jobs(&jobs, |job| {
            let opts = PackOptions {
                bases: bases.of(job, &jobs),
                ..PackOptions::at_level(level)
            };
            archive::pack_file(&job.src, &job.dst, &opts, &|_| {}).map(|s| s.bytes_out)
        })
    })
    .map_err(to_py)
}

/// Restores the original of the archive `src` (or of every archive in a
/// folder; other files are copied) at `dst`, after every check. Returns the
/// bytes written.
#[pyfunction]
#[pyo3(signature = (src, dst, *, force = false))]
fn unpack(py: Python<'_>, src: PathBuf, dst: PathBuf, force: bool) -> PyResult<u64> {
    py.allow_threads(|| {
        let jobs = plan(&src, &dst, ("brv", "safetensors"), force)?;
        run_jobs(&jobs, |job| {
            let archive = Inner::open_unmapped(&job.src)?;
            archive::unpack_file(&archive, &job.dst, &|_| {})?;
            Ok(archive.len())
        })
    })
    .map_err(to_py)
}

/// Decodes the archive `path` (or every archive under a folder) fully,
/// checking every chunk checksum and the SHA-256 of each original.
#[pyfunction]
fn verify(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    py.allow_threads(|| {
        tree::find(&path, "brv")?.iter().try_for_each(|p| {
            let archive = Inner::open_unmapped(p)?;
            archive::verify(&archive, None, &|_| {})
        })
    })
    .map_err(to_py)
}

/// Writes at `dst` an archive whose original is `original` followed by zero
/// bytes up to `source_len` bytes in all, checking nothing of it: for tests
/// of what readers do with an original the packer refuses (an archive made
/// by hand, or by an older packer). Zeros cost a few bytes per 16 MiB, so the
/// archive of a large original can be small. `sha256`, if given, is recorded instead of the original's.
#[pyfunction]
#[pyo3(signature = (dst, original, source_len = None, sha256 = None))]
fn _store_unchecked(
    py: Python<'_>,
    dst: PathBuf,
    original: &[u8],
    source_len: Option<u64>,
    sha256: Option<[u8; 32]>,
) -> PyResult<()> {
    let padding = source_len.map_or(Some(0), |n| n.checked_sub(original.len() as u64));
    let padding = padding
        .ok_or_else(|| PyValueError::new_err("source_len is below the original's length"))?;
    py.allow_threads(|| unchecked::write(&dst, original, padding, sha256))
        .map_err(to_py)
}

mod unchecked {
    use brevis::archive::{assemble, encode_record, record_version, ChunkEntry, Index};
    use brevis::error::Error;
    use brevis::safetensors::Layout;
    use brevis::synth::{Hint, SynthOptions};
    use sha2::{Digest, Sha256};
    use std::path::Path;
    use twox_hash::XxHash3_64;

    /// Bytes of `original` per chunk.
    const CHUNK: usize = 64 << 10;
    /// Zero bytes per chunk of the padding: every whole one has one record.
    const ZEROS: u64 = 16 << 20;

    /// The archive of `original` and `padding` zero bytes, each chunk coded
    /// as bytes by the quickest search, recording `sha256` if given.
    pub fn write(
        dst: &Path,
        original: &[u8],
        padding: u64,
        sha256: Option<[u8; 32]>,
    ) -> brevis::Result<()> {
        let opts = SynthOptions {
            budget: 0,
            ..SynthOptions::default()
        };
        let (mut records, mut chunks, mut sha) = (Vec::new(), Vec::new(), Sha256::new());
        let mut push = |bytes: &[u8], times: u64| {
            let hint = Hint {
                float: None,
                rows: None,
                columns: None,
            };
            let record = encode_record(bytes, Layout::Bytes, hint, &opts);
            let entry = ChunkEntry {
                layout: Layout::Bytes,
                src_len: bytes.len() as u64,
                rec_len: record.len() as u64,
                checksum: XxHash3_64::oneshot(bytes),
                base: None,
            };
            for _ in 0..times {
                sha.update(bytes);
                records.push(record.clone());
                chunks.push(entry);
            }
        };
        original.chunks(CHUNK).for_each(|c| push(c, 1));
        let zeros = vec![0; ZEROS.min(padding) as usize];
        let (whole, rest) = (padding / ZEROS, (padding % ZEROS) as usize);
        if whole > 0 {
            push(&zeros, whole);
        }
        if rest > 0 {
            push(&zeros[..rest], 1);
        }
        let index = Index {
            source_len: original.len() as u64 + padding,
            sha256: sha256.unwrap_or_else(|| sha.finalize().into()),
            chunk_size: CHUNK as u64,
            bases: Vec::new(),
            rows: Vec::new(),
            tables: Vec::new(),
            chunks,
        };
        let needs = (records.iter().zip(&index.chunks))
            .map(|(r, c)| record_version(r, c.layout, c.src_len as usize));
        let version = needs.fold(index.version(), u8::max);
        let bytes = assemble(records.iter().map(Vec::as_slice), &index, version);
        std::fs::write(dst, bytes).map_err(|e| Error::io(dst, e))
    }
}

/// The jobs that pack or unpack `src` into `dst` as the command line does,
/// renaming `from` files to `to` (other files are copied).
fn plan(
    src: &std::path::Path,
    dst: &std::path::Path,
    (from, to): (&str, &str),
    force: bool,
) -> brevis::Result<Vec<Job>> {
    let existing = if force {
        Existing::Overwrite
    } else {
        Existing::Refuse
    };
    tree::plan(src, dst, from, to, existing)
}

/// Runs `jobs` in order: `each` for the files to transform, a copy for the
/// others. Returns the bytes written.
fn run_jobs(jobs: &[Job], each: impl Fn(&Job) -> brevis::Result<u64>) -> brevis::Result<u64> {
    let tally = run::run_jobs(jobs, false, &(), |job, progress| {
        run::local_job(job, progress, |job, _| each(job))
    })?;
    Ok(tally.bytes_out)
}

#[pymodule]
fn _brevis(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("BrevisError", m.py().get_type::<BrevisError>())?;
    m.add_class::<Archive>()?;
    m.add_function(wrap_pyfunction!(pack, m)?)?;
    m.add_function(wrap_pyfunction!(unpack, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(_store_unchecked, m)?)?;
    Ok(())
}
