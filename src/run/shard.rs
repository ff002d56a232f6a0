//! Packing a tree on many machines: each of N shards takes a share of the
//! files, the same share on every machine (a size-balanced assignment that
//! depends only on the files), so the union of the shards' outputs is what one
//! machine would write. A shard can be run again: outputs already complete and
//! checked are kept.

#![forbid(unsafe_code)]

use super::tree::{self, Action, Existing, Job};
use crate::archive::{verify, Archive};
use crate::error::{IoContext, Result};
use std::path::{Path, PathBuf};

/// This process's share: shard `index` of `count` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Parses `I/N`; `auto` (Slurm job arrays: `SLURM_ARRAY_TASK_ID`,
    /// `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_COUNT`); or `auto/N` (a
    /// Kubernetes Indexed Job of N completions: `JOB_COMPLETION_INDEX`).
    /// `env` looks up environment variables.
    pub fn parse(spec: &str, env: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let number = |s: &str, what: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{what} is not a number: '{s}'"))
        };
        let var = |name: &str| env(name).ok_or_else(|| format!("{name} is not set"));
        let (index, count) = match spec.split_once('/') {
            Some(("auto", n)) => (
                number(&var("JOB_COMPLETION_INDEX")?, "JOB_COMPLETION_INDEX")?,
                number(n, "the shard count")?,
            ),
            Some((i, n)) => (number(i, "the shard index")?, number(n, "the shard count")?),
            None if spec == "auto" => {
                let id = number(&var("SLURM_ARRAY_TASK_ID")?, "SLURM_ARRAY_TASK_ID")?;
                let min = env("SLURM_ARRAY_TASK_MIN")
                    .map_or(Ok(0), |m| number(&m, "SLURM_ARRAY_TASK_MIN"))?;
                let count = number(&var("SLURM_ARRAY_TASK_COUNT")?, "SLURM_ARRAY_TASK_COUNT")?;
                let index = id
                    .checked_sub(min)
                    .ok_or("SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN")?;
                (index, count)
            }
            None => return Err(format!("'{spec}' is not I/N, auto or auto/N")),
        };
        if count == 0 || index >= count {
            return Err(format!(
                "shard {index} of {count} does not exist (shards are 0 .. N-1)"
            ));
        }
        Ok(Shard { index, count })
    }

    /// This shard's jobs of `jobs` (see [`Shard::select`]), without those
    /// whose outputs `done` says are already complete and of their source.
    pub fn todo(&self, jobs: Vec<Job>, done: impl Fn(&Job) -> Result<bool>) -> Result<Vec<Job>> {
        let mut todo = Vec::new();
        for job in self.select(jobs) {
            if !done(&job)? {
                todo.push(job);
            }
        }
        Ok(todo)
    }

    /// This shard's jobs of packing the local `src` into `dst`, without
    /// those whose outputs are already complete and of their source (see
    /// [`done_already`]); and every job of the run, which the shares were
    /// cut from (see [`source_changed`]).
    pub fn pack_jobs(&self, src: &Path, dst: &Path) -> Result<(Vec<Job>, Vec<Job>)> {
        let all = tree::plan(src, dst, "safetensors", "brv", Existing::Overwrite)?;
        Ok((self.todo(all.clone(), done_already)?, all))
    }

    /// The jobs of this shard. Jobs go, largest first (ties by source path),
    /// to the shard with the fewest bytes so far (ties to the lowest index).
    pub fn select(&self, jobs: Vec<Job>) -> Vec<Job> {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by(|&a, &b| (jobs[b].len, &jobs[a].src).cmp(&(jobs[a].len, &jobs[b].src)));
        let mut load = vec![0u64; self.count];
        let mut mine = vec![false; jobs.len()];
        for k in order {
            let lightest = (0..self.count)
                .min_by_key(|&s| (load[s], s))
                .expect("a shard");
            load[lightest] += jobs[k].len.max(1);
            mine[k] = lightest == self.index;
        }
        jobs.into_iter()
            .zip(mine)
            .filter_map(|(j, m)| m.then_some(j))
            .collect()
    }
}

/// Whether the files of `src` are no longer those `planned` (every job of a
/// pack of `src` into `dst`) was made from: the shards, which each list SRC
/// when they start, may then have cut different shares and left files to
/// none of them.
pub fn source_changed(src: &Path, dst: &Path, planned: &[Job]) -> bool {
    let files = |jobs: &[Job]| -> Vec<(PathBuf, u64)> {
        jobs.iter().map(|j| (j.src.clone(), j.len)).collect()
    };
    let now = tree::plan(src, dst, "safetensors", "brv", Existing::Overwrite);
    !now.is_ok_and(|now| files(&now) == files(planned))
}

/// Whether `job`'s output is already complete and of its source: an archive
/// that decodes with every check and records the source's SHA-256, or a copy
/// of the same length and modification time. Anything else is done again.
pub fn done_already(job: &Job) -> Result<bool> {
    let Ok(out) = std::fs::metadata(&job.dst) else {
        return Ok(false);
    };
    let src = std::fs::metadata(&job.src).at(&job.src)?;
    match job.action {
        Action::Copy => Ok(out.len() == src.len() && out.modified().ok() == src.modified().ok()),
        Action::Transform => {
            let Ok(archive) = Archive::open_unmapped(&job.dst) else {
                return Ok(false);
            };
            if archive.len() != src.len() || archive.sha256() != crate::input::sha256_of(&job.src)?
            {
                return Ok(false);
            }
            Ok(verify(&archive, None, &|_| {}).is_ok())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn specs_name_a_shard_or_say_why_not() {
        let none = env(&[]);
        assert_eq!(Shard::parse("2/4", &none), Ok(Shard { index: 2, count: 4 }));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3")]);
        assert_eq!(
            Shard::parse("auto/8", &k8s),
            Ok(Shard { index: 3, count: 8 })
        );
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "10"),
        ]);
        assert_eq!(
            Shard::parse("auto", &slurm),
            Ok(Shard {
                index: 4,
                count: 10
            })
        );
        assert!(Shard::parse("4/4", &none)
            .unwrap_err()
            .contains("does not exist"));
        assert!(Shard::parse("auto", &none)
            .unwrap_err()
            .contains("SLURM_ARRAY_TASK_ID is not set"));
        assert!(Shard::parse("auto/2", &none)
            .unwrap_err()
            .contains("JOB_COMPLETION_INDEX"));
        assert!(Shard::parse("x", &none).is_err());
        assert!(Shard::parse("1/0", &none).is_err());
    }

    #[test]
    fn every_job_goes_to_exactly_one_shard_and_sizes_balance() {
        let jobs: Vec<Job> = (0..40u64)
            .map(|k| Job {
                src: PathBuf::from(format!("s/{k}")),
                dst: PathBuf::from(format!("d/{k}")),
                action: Action::Transform,
                len: (k * 7919) % 1000 + 1,
            })
            .collect();
        let count = 3;
        let shares: Vec<Vec<Job>> = (0..count)
            .map(|index| Shard { index, count }.select(jobs.clone()))
            .collect();
        let mut all: Vec<&Job> = shares.iter().flatten().collect();
        all.sort_by_key(|j| j.src.clone());
        let mut expected: Vec<&Job> = jobs.iter().collect();
        expected.sort_by_key(|j| j.src.clone());
        assert_eq!(all, expected);
        let loads: Vec<u64> = shares
            .iter()
            .map(|s| s.iter().map(|j| j.len).sum())
            .collect();
        let (max, min) = (loads.iter().max().unwrap(), loads.iter().min().unwrap());
        assert!(max - min <= 1000, "{loads:?}");
    }
}
