//! `brevis`: pack safetensors checkpoints into `.brv` archives and back. A
//! function per command (its arguments are in `args`), over `brevis::run`
//! and `brevis::archive`.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod args;

use args::{
    expand_level_flags, CalibrateArgs, Cli, Command, DetachArgs, InspectArgs, PackArgs, UnpackArgs,
    VerifyArgs,
};
use brevis::archive::{self, Archive, PackOptions};
use brevis::error::{Error, IoContext, Result};
use brevis::inspect;
use brevis::remote::RemoteOptions;
use brevis::run::store::{involves_store, StoreBase, StoreRun};
use brevis::run::{self, shard, tree, Action, Existing, Job, RunBases, Shard, Tally, Watch};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Packing allocates and frees chunk-sized buffers on every worker thread;
/// glibc's per-thread arenas return them to the kernel and fault them in
/// again each time, mimalloc keeps them. Its v2 line (Cargo.toml): it peaks
/// at less memory than v3 at the same speed (see docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so printing to a reader that has gone (`brevis
    // inspect ... | head`) would panic. Let it end the process quietly, as
    // it does other command-line tools.
    // SAFETY: sets the default disposition of one signal before any other
    // thread exists; no handler runs. Test: `a_closed_output_pipe_ends_quietly`.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|out, record| {
            let level = record.level().as_str().to_lowercase();
            writeln!(out, "brevis: {level}: {}", record.args())
        })
        .init();
    let cli = Cli::parse_from(expand_level_flags(std::env::args_os()));
    end_cleanly_on_signals();
    if let Some(n) = cli.threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
        if let Err(e) = pool {
            eprintln!("brevis: error: cannot start {n} threads: {e}");
            return ExitCode::FAILURE;
        }
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("brevis: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP remove the temporaries of the outputs
/// being written before the process ends (with 128 + the signal's number,
/// as a shell reports it). Called before any other thread starts.
fn end_cleanly_on_signals() {
    let signals = brevis::signals::block();
    std::thread::spawn(move || {
        let signal = brevis::signals::wait(&signals);
        if brevis::atomic::remove_temporaries() > 0 {
            eprintln!("brevis: stopped by signal {signal}; the outputs being written were removed");
        }
        std::process::exit(128 + signal);
    });
}

/// Does the command.
fn run(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Pack(args) => pack(cli, args),
        Command::Calibrate(args) => calibrate(cli, args),
        Command::Detach(args) => detach(cli, args),
        Command::Unpack(args) => unpack(cli, args),
        Command::Verify(args) => verify(cli, args),
        Command::Inspect(args) => inspect(args),
    }
}

/// `brevis pack`: between local paths (see [`pack_local`]), or from or to
/// object storage (see [`pack_with_store`]).
fn pack(cli: &Cli, args: &PackArgs) -> Result<()> {
    let opts = args.search.options(args.chunk_size)?;
    let base_in_store = args.base.as_deref().is_some_and(|b| involves_store(b, b));
    if involves_store(&args.src, &args.dst) || base_in_store {
        if args.dedup.is_some() {
            return Err(Error::invalid(
                &args.src,
                "--dedup is not supported with object-store URLs yet",
            ));
        }
        return pack_with_store(cli, args, &opts);
    }
    pack_local(cli, args, &opts)
}

/// `pack` between local paths: the jobs (of a shard, if asked), each file
/// packed against its bases (see [`RunBases`]) with `opts`.
fn pack_local(cli: &Cli, args: &PackArgs, opts: &PackOptions) -> Result<()> {
    let (src, dst, shard) = (args.src.as_path(), args.dst.as_path(), &args.shard);
    let (jobs, planned) = match shard {
        Some(spec) => {
            let (mine, all) = parse_shard(src, spec)?.pack_jobs(src, dst)?;
            (mine, Some(all))
        }
        None => {
            let jobs = tree::plan(src, dst, "safetensors", "brv", args.outputs.existing())?;
            (jobs, None)
        }
    };
    let skipped = args.outputs.existing() == Existing::Skip || shard.is_some();
    if !skipped {
        warn_if_nothing_to_pack(src, &jobs);
    }
    if args.dedup.is_some() && shard.is_some() {
        let reason = "--dedup with --shard: a shard would see other shards' outputs \
                      at times that vary; pack with --dedup in one process";
        return Err(Error::invalid(src, reason));
    }
    let dedup = args.dedup.as_ref().map(Option::as_deref);
    if !args.break_dependants {
        run::refuse_orphaning(src, dst, dedup.flatten(), &jobs)?;
    }
    let bases = RunBases::new(src, dst, args.base.as_deref(), dedup, &jobs)?;
    let packed = run_jobs(
        cli,
        Direction::Pack,
        (src, &jobs),
        args.outputs.keep_going,
        |job, progress| {
            run::local_job(job, progress, |job, progress| {
                let opts = PackOptions {
                    bases: bases.of(job, &jobs),
                    ..opts.clone()
                };
                let summary = archive::pack_file(&job.src, &job.dst, &opts, progress)?;
                Ok(summary.bytes_out)
            })
        },
    );
    if let Some(planned) = planned {
        warn_if_source_changed(src, dst, &planned);
    }
    packed
}

/// Warns when the files of `src` are no longer those a shard's share was
/// cut from (`planned`, see [`shard::source_changed`]).
fn warn_if_source_changed(src: &Path, dst: &Path, planned: &[Job]) {
    if shard::source_changed(src, dst, planned) {
        eprintln!(
            "brevis: warning: {}: its files changed while this shard ran, so the \
             shards may have split different lists and packed none of some files; \
             run every shard again (complete outputs are kept)",
            src.display()
        );
    }
}

/// The shard that `spec` names, or an error naming `src`.
fn parse_shard(src: &Path, spec: &str) -> Result<Shard> {
    Shard::parse(spec, |name| std::env::var(name).ok())
        .map_err(|reason| Error::invalid(src, format!("--shard {spec}: {reason}")))
}

/// Warns when `jobs` pack nothing: SRC holds no safetensors file.
fn warn_if_nothing_to_pack(src: &Path, jobs: &[Job]) {
    if !jobs.iter().any(|j| j.action == Action::Transform) {
        eprintln!(
            "brevis: warning: {}: no .safetensors files; {} other file(s) copied \
             unchanged (.bin, .pt, .gguf and other formats are copied, not compressed)",
            src.display(),
            jobs.len()
        );
    }
}

/// `pack` where SRC or DST (or both) is an object-store URL: the same jobs and
/// shares as for local folders, each source fetched to a local temporary and
/// each output uploaded whole (see `brevis::run::store`).
fn pack_with_store(cli: &Cli, args: &PackArgs, opts: &PackOptions) -> Result<()> {
    let (src, dst, outputs) = (args.src.as_path(), args.dst.as_path(), &args.outputs);
    let shard = args.shard.as_deref();
    let shard = shard.map(|spec| parse_shard(src, spec)).transpose()?;
    // A connection to the store closed by its other end must fail that
    // request (which is retried), not end the process: the network code
    // writes to sockets without MSG_NOSIGNAL.
    // SAFETY: sets the disposition of one signal to "ignore"; no handler
    // runs. Test: a multipart upload whose parts fail, in tests/remote.rs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let options = RemoteOptions::default();
    let base = args.base.as_deref();
    let base = base
        .map(|base| StoreBase::new(base, dst, &options))
        .transpose()?;
    let (store_run, jobs) = StoreRun::plan(src, dst, "safetensors", "brv", &options)?;
    let jobs = match shard {
        Some(shard) => shard.todo(jobs, |job| store_run.done_already(job))?,
        None => (outputs.existing()).apply(jobs, |job| store_run.exists(job))?,
    };
    if shard.is_none() && outputs.existing() != Existing::Skip {
        warn_if_nothing_to_pack(src, &jobs);
    }
    run_jobs(
        cli,
        Direction::Pack,
        (src, &jobs),
        outputs.keep_going,
        |job, progress| {
            store_run.run_job(job, |from, to| {
                let opts = PackOptions {
                    bases: base.as_ref().map(|b| b.of(job)).unwrap_or_default(),
                    ..opts.clone()
                };
                Ok(archive::pack_file(from, to, &opts, progress)?.bytes_out)
            })
        },
    )
}

/// `brevis calibrate`: writes the prior learned from SRC.
fn calibrate(cli: &Cli, args: &CalibrateArgs) -> Result<()> {
    let CalibrateArgs {
        src,
        prior,
        force,
        chunk_size,
    } = args;
    refuse_to_overwrite(prior, *force)?;
    let learned = archive::calibrate(src, *chunk_size)?;
    let text = format!("{:#}\n", learned.to_json());
    brevis::atomic::write_atomically(prior, |tmp| {
        let mut file = std::fs::File::create(tmp).at(tmp)?;
        file.write_all(text.as_bytes()).at(tmp)?;
        file.sync_all().at(tmp)
    })?;
    if !cli.quiet {
        let counts: Vec<String> = learned
            .totals()
            .iter()
            .map(|(p, n)| format!("{p}:{n}"))
            .collect();
        println!(
            "{}: learned from {}: {}",
            prior.display(),
            src.display(),
            counts.join(" ")
        );
    }
    Ok(())
}

/// `brevis detach`: writes DST, SRC's archive packed without its base.
fn detach(cli: &Cli, args: &DetachArgs) -> Result<()> {
    let DetachArgs {
        src,
        dst,
        force,
        search,
    } = args;
    refuse_to_overwrite(dst, *force)?;
    let started = Instant::now();
    let archive = Archive::open_unmapped(src)?;
    let bar = progress_bar(cli, archive.len());
    let opts = search.options(None)?;
    let summary = archive::detach(&archive, dst, &opts, &|done| bar.set_position(done));
    bar.finish_and_clear();
    let summary = summary?;
    if !cli.quiet {
        println!(
            "{}: {} bytes, needs no base ({} bytes against its base; {:.2} s)",
            dst.display(),
            summary.bytes_out,
            archive.archive_len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// An error if `path` exists and `--force` was not given.
fn refuse_to_overwrite(path: &Path, force: bool) -> Result<()> {
    match !force && std::fs::symlink_metadata(path).is_ok() {
        true => Err(Error::invalid(
            path,
            "already exists (use --force to overwrite)",
        )),
        false => Ok(()),
    }
}

/// `brevis unpack`: restores the originals of SRC's archives at DST.
fn unpack(cli: &Cli, args: &UnpackArgs) -> Result<()> {
    let UnpackArgs { src, dst, outputs } = args;
    let jobs = tree::plan(src, dst, "brv", "safetensors", outputs.existing())?;
    run_jobs(
        cli,
        Direction::Unpack,
        (src, &jobs),
        outputs.keep_going,
        |job, progress| {
            run::local_job(job, progress, |job, progress| {
                let archive = run::open_archive(&job.src)?;
                archive::unpack_file(&archive, &job.dst, progress)?;
                Ok(archive.len())
            })
        },
    )
}

/// `brevis verify`: one archive (see [`verify_one`]), or every archive
/// under a folder and then a summary.
fn verify(cli: &Cli, args: &VerifyArgs) -> Result<()> {
    let VerifyArgs { archive, against } = args;
    if run::is_url(archive) {
        return verify_one(cli, archive, against.as_deref()).map(drop);
    }
    let found = tree::find(archive, "brv")?;
    if found.len() == 1 && found[0] == *archive {
        return verify_one(cli, archive, against.as_deref()).map(drop);
    }
    let (failed, needed) = verify_each(cli, archive, &found, against.as_deref());
    if !cli.quiet {
        for (base, n) in &needed {
            println!("{}: a base that {n} archive(s) need", base.display());
        }
        println!(
            "verified {} archive(s) under {}: {} OK, {failed} failed",
            found.len(),
            archive.display(),
            found.len() - failed
        );
    }
    if failed > 0 {
        return Err(Error::invalid(
            archive,
            format!("{failed} of {} archive(s) failed", found.len()),
        ));
    }
    Ok(())
}

/// Verifies the archives `found` under the folder `archive` (see
/// [`verify_one`]), each against its original in the folder `against` if
/// given, and reports those that fail. Returns how many failed, and each
/// base with how many verified archives need it.
fn verify_each(
    cli: &Cli,
    archive: &Path,
    found: &[PathBuf],
    against: Option<&Path>,
) -> (usize, BTreeMap<PathBuf, usize>) {
    // Each base, with how many verified archives need it.
    let mut needed: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let failed = found
        .iter()
        .filter(|path| {
            let original = against.map(|dir| {
                let rel = path.strip_prefix(archive).unwrap_or(path);
                dir.join(rel).with_extension("safetensors")
            });
            match verify_one(cli, path, original.as_deref()) {
                Ok(bases) => {
                    bases
                        .into_iter()
                        .for_each(|b| *needed.entry(b).or_default() += 1);
                    false
                }
                Err(e) => {
                    eprintln!("brevis: error: {e}");
                    true
                }
            }
        })
        .count();
    (failed, needed)
}

/// Verifies one archive, against its original if given, with a progress bar
/// and a line saying what matched; returns the paths of the bases it needs.
fn verify_one(cli: &Cli, archive: &Path, against: Option<&Path>) -> Result<Vec<PathBuf>> {
    let started = Instant::now();
    let a = run::open_archive(archive)?;
    let bar = progress_bar(cli, a.len());
    let result = archive::verify(&a, against, &|done| bar.set_position(done));
    bar.finish_and_clear();
    result?;
    if !cli.quiet {
        let what = if against.is_some() {
            "chunk checksums, SHA-256 and every byte"
        } else {
            "chunk checksums and SHA-256"
        };
        let bases: Vec<String> = a
            .bases()
            .iter()
            .map(|b| b.path().display().to_string())
            .collect();
        let against_bases = match bases.is_empty() {
            true => String::new(),
            false => format!("; against base {}", bases.join(", ")),
        };
        println!(
            "{}: OK ({} chunks, {} bytes; {what} match{against_bases}; {:.2} s)",
            archive.display(),
            a.chunks().len(),
            a.len(),
            started.elapsed().as_secs_f64()
        );
    }
    // Named alike whichever folder refers to them.
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    Ok(a.bases().iter().map(|b| canonical(b.path())).collect())
}

/// `brevis inspect`: the report of one archive, or of every archive under
/// a folder (see [`inspect::write_reports`]), on standard output.
fn inspect(args: &InspectArgs) -> Result<()> {
    let InspectArgs { archive, json } = args;
    let found = tree::find(archive, "brv")?;
    let single = found.len() == 1 && found[0] == *archive;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    inspect::write_reports(&found, single, *json, &mut out)?;
    out.flush().at(Path::new(inspect::OUTPUT))
}

/// Which way `run_jobs` transforms files.
#[derive(Clone, Copy)]
enum Direction {
    Pack,
    Unpack,
}

/// A run's progress bar.
struct Bar(ProgressBar);

impl Watch for Bar {
    fn started(&self, job: &Job) {
        self.0.set_message(job.src.display().to_string());
    }

    fn done(&self, done: u64) {
        self.0.set_position(done);
    }

    fn failed(&self, error: &Error) {
        self.0.suspend(|| eprintln!("brevis: error: {error}"));
    }
}

/// Runs the jobs in order (see [`run::run_jobs`]) with a progress bar and a
/// summary line: `work` does one and returns the size of what it wrote. A
/// failed job ends the run, or with `keep_going` is reported and the others
/// run; the run then fails at the end, naming how many failed.
fn run_jobs(
    cli: &Cli,
    direction: Direction,
    (src, jobs): (&Path, &[Job]),
    keep_going: bool,
    work: impl Fn(&Job, &(dyn Fn(u64) + Sync)) -> Result<u64>,
) -> Result<()> {
    let started = Instant::now();
    let total: u64 = jobs.iter().map(|j| j.len).sum();
    let bar = Bar(progress_bar(cli, total));
    let tally = run::run_jobs(jobs, keep_going, &bar, work)?;
    bar.0.finish_and_clear();
    if !cli.quiet {
        print_summary(direction, &tally, started.elapsed());
    }
    tally.failures(src)
}

/// The summary line of a run of jobs that took `took`.
fn print_summary(direction: Direction, tally: &Tally, took: Duration) {
    let Tally {
        bytes_in,
        bytes_out,
        transformed,
        copied,
        ..
    } = *tally;
    let secs = took.as_secs_f64();
    // Original size over archive size, whichever way the jobs went.
    let (original, archived) = match direction {
        Direction::Pack => (bytes_in, bytes_out),
        Direction::Unpack => (bytes_out, bytes_in),
    };
    let ratio = original.max(1) as f64 / archived.max(1) as f64;
    let copied = if copied > 0 {
        format!(" (+{copied} copied)")
    } else {
        String::new()
    };
    // Written, not printed: with SIGPIPE ignored (a run that talks to a
    // store) a reader that has gone is an error to leave, not a panic.
    let _ = writeln!(
        std::io::stdout(),
        "{} {transformed} file(s){copied}: {} -> {} bytes, ratio {:.4}, {:.2} s, {:.1} MB/s",
        match direction {
            Direction::Pack => "packed",
            Direction::Unpack => "unpacked",
        },
        bytes_in,
        bytes_out,
        ratio,
        secs,
        original as f64 / 1e6 / secs.max(1e-9)
    );
}

fn progress_bar(cli: &Cli, total: u64) -> ProgressBar {
    if cli.quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {decimal_bytes}/{decimal_total_bytes} \
         {decimal_bytes_per_sec} {wide_msg}",
    )
    .expect("valid template");
    bar.set_style(style);
    bar
}
