//! Doing a run's jobs in order: each file transformed (packed or unpacked)
//! or copied, its output's folder made first, what was done tallied and
//! told to whoever watches the run as it goes.

#![forbid(unsafe_code)]

use super::tree::{Action, Job};
use crate::error::{Error, IoContext, Result};
use std::path::Path;

/// What a run of jobs tells whoever watches it (a progress bar); each
/// method does nothing unless implemented.
pub trait Watch: Sync {
    /// `job` starts.
    fn started(&self, _job: &Job) {}

    /// The run's jobs have done `done` source bytes.
    fn done(&self, _done: u64) {}

    /// A job failed with `error`, and the run goes on.
    fn failed(&self, _error: &Error) {}
}

/// Nobody watching.
impl Watch for () {}

/// What a run of jobs did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// The run's jobs.
    pub jobs: usize,
    /// Source bytes of the jobs done, and the bytes they wrote.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Jobs done that transformed their file, and that copied it.
    pub transformed: usize,
    pub copied: usize,
    /// Jobs that failed while the run went on.
    pub failed: usize,
}

impl Tally {
    /// Counts `job`, done, which wrote `written` bytes.
    fn add(&mut self, job: &Job, written: u64) {
        self.bytes_in += job.len;
        self.bytes_out += written;
        match job.action {
            Action::Transform => self.transformed += 1,
            Action::Copy => self.copied += 1,
        }
    }

    /// An error naming `src`, the run's source, and how many jobs failed,
    /// if any did.
    pub fn failures(&self, src: &Path) -> Result<()> {
        if self.failed > 0 {
            let reason = format!(
                "{} of {} file(s) failed (see above)",
                self.failed, self.jobs
            );
            return Err(Error::invalid(src, reason));
        }
        Ok(())
    }
}

/// Does `jobs` in order, telling `watch`: `work` does one (see
/// [`local_job`]), given a callback for its source bytes done, and returns
/// the size of what it wrote. A failed job ends the run, or with
/// `keep_going` is told to `watch` and the others run (see
/// [`Tally::failures`]).
pub fn run_jobs(
    jobs: &[Job],
    keep_going: bool,
    watch: &dyn Watch,
    work: impl Fn(&Job, &(dyn Fn(u64) + Sync)) -> Result<u64>,
) -> Result<Tally> {
    let mut tally = Tally {
        jobs: jobs.len(),
        ..Tally::default()
    };
    let mut done = 0u64;
    for job in jobs {
        watch.started(job);
        let base = done;
        let written = work(job, &|done| watch.done(base + done));
        done += job.len;
        watch.done(done);
        match written {
            Ok(written) => tally.add(job, written),
            Err(e) if keep_going => {
                watch.failed(&e);
                tally.failed += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(tally)
}

/// Does `job` between local paths: makes the output's folder, then copies,
/// or transforms with `transform`. Returns the bytes written.
pub fn local_job(
    job: &Job,
    progress: &(dyn Fn(u64) + Sync),
    transform: impl FnOnce(&Job, &(dyn Fn(u64) + Sync)) -> Result<u64>,
) -> Result<u64> {
    if let Some(parent) = job.dst.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).at(parent)?;
    }
    match job.action {
        Action::Transform => transform(job, progress),
        Action::Copy => crate::atomic::copy_file(&job.src, &job.dst),
    }
}
