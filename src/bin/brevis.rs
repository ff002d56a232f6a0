//! `brevis`: pack safetensors checkpoints into `.brv` archives and back.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use brevis::archive::{self, Archive, PackOptions, DEFAULT_CHUNK_BYTES};
use brevis::error::{Error, IoContext, Result};
use brevis::inspect;
use brevis::remote::RemoteOptions;
use brevis::run::store::{involves_store, StoreRun};
use brevis::run::{self, shard, tree, Action, Existing, Job, RunBases, Shard, Tally, Watch};
use brevis::synth::{Order, Prior};
use brevis::units::parse_size;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Packing allocates and frees chunk-sized buffers on every worker thread;
/// glibc's per-thread arenas return them to the kernel and fault them in
/// again each time, mimalloc keeps them. Its v2 line (Cargo.toml): it peaks
/// at less memory than v3 at the same speed (see docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Lossless, random-access compression of safetensors checkpoints.
///
/// Every chunk of every tensor is stored as a small program that regenerates its
/// exact bytes. Archives are checksummed, deterministic and written atomically.
#[derive(Parser)]
#[command(name = "brevis", version, about, long_about)]
struct Cli {
    /// Worker threads (default: all cores). Output is identical for any count.
    #[arg(short = 'j', long = "threads", global = true, value_name = "N")]
    threads: Option<usize>,
    /// No progress bar or summary line.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pack a .safetensors file, or a model directory, into .brv archives.
    ///
    /// For a directory, every *.safetensors file becomes *.brv under DST at the
    /// same relative path and every other file (config.json, tokenizers) is copied.
    Pack(PackArgs),
    /// Learn a production prior from a sample of a checkpoint and write it to PRIOR
    /// (JSON), for `pack --prior PRIOR` to reuse on similar checkpoints.
    Calibrate(CalibrateArgs),
    /// Write an archive that needs no base from one packed with --base: its
    /// original is decoded (and checked) to a temporary beside DST, packed,
    /// and removed.
    Detach(DetachArgs),
    /// Restore the original files from a .brv archive or a directory of them.
    Unpack(UnpackArgs),
    /// Decode an archive fully, checking every chunk checksum and the SHA-256 of
    /// the original file. For a directory: every .brv archive under it, then a
    /// summary; the exit status is 1 if any fails.
    Verify(VerifyArgs),
    /// Show per tensor: dtype, shape, bytes before and after, ratio, program, codecs;
    /// and the bytes the code tables take. For a directory: every .brv archive under it.
    Inspect(InspectArgs),
}

// The arguments of `brevis pack`.
#[derive(clap::Args)]
struct PackArgs {
    /// A .safetensors file or a directory; or s3://BUCKET[/PREFIX], every
    /// object under which is a file of the directory (credentials from the
    /// AWS_* environment variables).
    src: PathBuf,
    /// The archive to write, or the directory to mirror into; or
    /// s3://BUCKET[/PREFIX], where each output is uploaded whole.
    dst: PathBuf,
    #[command(flatten)]
    outputs: OutputArgs,
    /// Source bytes per independently decodable chunk, in bytes or with
    /// a K, M or G suffix (64 B to 64M). Left out: 256K, and 512K or 1M
    /// for a tensor whose bytes' statistics say wider chunks code it
    /// smaller (they pay for their code tables fewer times); a tensor
    /// coded against a base takes whole chunks of the base's. A last
    /// chunk takes in a remainder shorter than half a chunk.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    chunk_size: Option<usize>,
    /// Code tensors against a base: an archive (e.g. the model a checkpoint
    /// was fine-tuned from), or for a directory SRC a directory of archives
    /// matched by relative path. Tensors of the same name, dtype and shape
    /// are stored as their XOR with the base's where that is smaller. The
    /// archives then need the base, found by its path relative to them and
    /// checked by its SHA-256, to be read.
    #[arg(long, value_name = "BASE")]
    base: Option<PathBuf>,
    /// Also match tensors by content (dtype and bytes), not only by name,
    /// against the --base archives, the archives already in the store
    /// (STORE and its subfolders; without =STORE, DST for a directory
    /// SRC, DST's folder for a file) and the files this run packed
    /// before: a tensor stored there under any name (re-uploads,
    /// repeated or tied weights, frozen layers of another checkpoint)
    /// becomes a reference to that copy, and its archive then needs that
    /// one to be read. Archives are indexed from their chunk checksums,
    /// without decoding.
    #[arg(long, value_name = "STORE", num_args = 0..=1, require_equals = true)]
    dedup: Option<Option<PathBuf>>,
    /// Pack only shard I of N (0-based) of a directory's files, as one of
    /// N machines of a cluster job: every shard computes the same
    /// size-balanced split, and their outputs together are what one
    /// machine writes. `auto` takes I and N from a Slurm job array,
    /// `auto/N` takes I from a Kubernetes Indexed Job (see
    /// docs/CLUSTER.md). Outputs already complete and of their source are
    /// kept, so a shard can be run again; others are overwritten.
    #[arg(long, value_name = "I/N|auto|auto/N")]
    shard: Option<String>,
    /// Overwrite an archive even where other archives of DST (or of the
    /// --dedup store) need it as their base and it would now hold
    /// another source: they can then no longer be read. Without it such
    /// a run is refused, naming them.
    #[arg(long)]
    break_dependants: bool,
    #[command(flatten)]
    search: SearchArgs,
}

// The arguments of `brevis calibrate`.
#[derive(clap::Args)]
struct CalibrateArgs {
    /// A .safetensors file.
    src: PathBuf,
    /// The prior file to write.
    prior: PathBuf,
    /// Overwrite PRIOR if it exists.
    #[arg(long)]
    force: bool,
    /// Source bytes per chunk, as for pack.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULT_CHUNK_BYTES, value_parser = parse_size)]
    chunk_size: usize,
}

// The arguments of `brevis detach`.
#[derive(clap::Args)]
struct DetachArgs {
    /// An archive packed against a base.
    src: PathBuf,
    /// The archive to write.
    dst: PathBuf,
    /// Overwrite DST if it exists.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    search: SearchArgs,
}

// The arguments of `brevis unpack`.
#[derive(clap::Args)]
struct UnpackArgs {
    /// A .brv archive or a directory.
    src: PathBuf,
    /// The file to write, or the directory to mirror into.
    dst: PathBuf,
    #[command(flatten)]
    outputs: OutputArgs,
}

// The arguments of `brevis verify`.
#[derive(clap::Args)]
struct VerifyArgs {
    /// A .brv archive or a directory of them.
    archive: PathBuf,
    /// Also compare every byte with this original file (for a directory:
    /// the directory of originals, matched by relative path).
    #[arg(long, value_name = "ORIGINAL")]
    against: Option<PathBuf>,
}

// The arguments of `brevis inspect`.
#[derive(clap::Args)]
struct InspectArgs {
    /// A .brv archive or a directory of them.
    archive: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// What pack and unpack do with outputs that exist, and with failures.
#[derive(clap::Args)]
struct OutputArgs {
    /// Overwrite outputs that already exist.
    #[arg(long, conflicts_with = "skip_existing")]
    force: bool,
    /// Leave outputs that already exist and write the others: resumes an
    /// interrupted run (outputs are written whole or not at all).
    #[arg(long)]
    skip_existing: bool,
    /// For a directory, go on with the other files after one fails, report
    /// every failure, and exit with status 1 at the end.
    #[arg(long)]
    keep_going: bool,
}

impl OutputArgs {
    fn existing(&self) -> Existing {
        match (self.force, self.skip_existing) {
            (true, _) => Existing::Overwrite,
            (_, true) => Existing::Skip,
            _ => Existing::Refuse,
        }
    }
}

/// How pack searches for each chunk's program.
#[derive(clap::Args)]
struct SearchArgs {
    /// Effort, 1 (fastest) to 9 (smallest), also given as -1 .. -9 as with
    /// zstd and xz. Level 5 re-fits programs searched on a few chunks per
    /// tensor class (dtype and shape) to the others at a budget of 8; lower
    /// levels search less and re-fit more loosely, and 1 and 2 do not code
    /// a matrix's rows in classes; from 7 on the search looks at whole chunks
    /// instead of their first 64Ki words, and 8 and 9 search every chunk at
    /// budgets of 64 and 256 (see docs/PERFORMANCE.md for sizes and speeds).
    #[arg(long, value_name = "1-9", default_value_t = archive::DEFAULT_LEVEL,
          value_parser = clap::value_parser!(u8).range(1..=9))]
    level: u8,
    /// States the search expands per searched chunk after the root's
    /// expansion, instead of the level's (0: every operator tried at the
    /// root only, with no learned prior).
    #[arg(long, value_name = "N")]
    budget: Option<usize>,
    /// Expand states best-first by estimated size instead of the A* order.
    #[arg(long)]
    no_astar: bool,
    /// Use uniform production costs instead of a prior learned from the file.
    #[arg(long, conflicts_with = "prior")]
    no_prior: bool,
    /// Use this prior (from `brevis calibrate`) instead of learning one.
    #[arg(long, value_name = "FILE")]
    prior: Option<PathBuf>,
    /// Search every chunk instead of re-fitting programs found on others.
    #[arg(long)]
    no_refit: bool,
}

impl SearchArgs {
    /// The pack options these arguments ask for, with chunks of
    /// `chunk_size` if given (else the default size, wider where it pays,
    /// and following a base's).
    fn options(&self, chunk_size: Option<usize>) -> Result<PackOptions> {
        let mut opts = PackOptions::at_level(self.level);
        if let Some(size) = chunk_size {
            opts.chunk_size = size;
            opts.adapt_chunks = false;
        }
        let synth = &mut opts.synth;
        if let Some(budget) = self.budget {
            synth.budget = budget;
        }
        if self.no_astar {
            synth.order = Order::EstimatedSize;
        }
        if let Some(path) = &self.prior {
            synth.prior = Arc::new(read_prior(path)?);
        }
        if self.no_refit {
            synth.refit_slack = None;
        }
        // At budget 0 a prior could only order the root's shapes, which are
        // all considered: learning one would be wasted time.
        opts.learn_prior &= !self.no_prior && self.prior.is_none() && opts.synth.budget > 0;
        Ok(opts)
    }
}

/// The command line with zstd-style level flags (`-1` .. `-9`, before any
/// `--`) spelled as `--level N`, which clap parses.
fn expand_level_flags(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut options_end = false;
    args.map(|arg| {
        options_end |= arg == "--";
        match arg.as_encoded_bytes() {
            &[b'-', digit @ b'1'..=b'9'] if !options_end => {
                format!("--level={}", digit as char).into()
            }
            _ => arg,
        }
    })
    .collect()
}

/// A prior file is a few kilobytes of JSON; anything far larger is not one.
const MAX_PRIOR_BYTES: u64 = 16 << 20;

fn read_prior(path: &Path) -> Result<Prior> {
    let file = brevis::input::open_regular(path).at(path)?;
    let mut text = String::new();
    (file.take(MAX_PRIOR_BYTES + 1).read_to_string(&mut text)).at(path)?;
    if text.len() as u64 > MAX_PRIOR_BYTES {
        return Err(Error::invalid(path, "not a prior file: larger than 16 MiB"));
    }
    let json = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(path, format!("not a prior file: {e}")))?;
    Prior::from_json(&json).map_err(|e| Error::invalid(path, format!("not a prior file: {e}")))
}

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
    if involves_store(&args.src, &args.dst) {
        if args.base.is_some() || args.dedup.is_some() {
            return Err(Error::invalid(
                &args.src,
                "--base and --dedup are not supported with object-store URLs yet",
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
                Ok(archive::pack_file(from, to, opts, progress)?.bytes_out)
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
    if !force && std::fs::symlink_metadata(prior).is_ok() {
        return Err(Error::invalid(
            prior,
            "already exists (use --force to overwrite)",
        ));
    }
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
    if !force && std::fs::symlink_metadata(dst).is_ok() {
        return Err(Error::invalid(
            dst,
            "already exists (use --force to overwrite)",
        ));
    }
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
                let archive = Archive::open_unmapped(&job.src)?;
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
    let found = tree::find(archive, "brv")?;
    if found.len() == 1 && found[0] == *archive {
        return verify_one(cli, archive, against.as_deref()).map(drop);
    }
    // Each base, with how many verified archives need it.
    let mut needed: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let failed = found
        .iter()
        .filter(|path| {
            let original = against.as_ref().map(|dir| {
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

/// Verifies one archive, against its original if given, with a progress bar
/// and a line saying what matched; returns the paths of the bases it needs.
fn verify_one(cli: &Cli, archive: &Path, against: Option<&Path>) -> Result<Vec<PathBuf>> {
    let started = Instant::now();
    let a = Archive::open_unmapped(archive)?;
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
