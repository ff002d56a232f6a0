//! The command line of `brevis`: its commands and their arguments, as clap
//! parses them, and the options they ask for.

use brevis::archive::{self, PackOptions, DEFAULT_CHUNK_BYTES};
use brevis::error::{Error, IoContext, Result};
use brevis::run::Existing;
use brevis::synth::{Order, Prior};
use brevis::units::parse_size;
use clap::{Parser, Subcommand};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Lossless, random-access compression of safetensors checkpoints.
///
/// Every chunk of every tensor is stored as a small program that regenerates its
/// exact bytes. Archives are checksummed, deterministic and written atomically.
#[derive(Parser)]
#[command(name = "brevis", version, about, long_about)]
pub struct Cli {
    /// Worker threads (default: all cores). Output is identical for any count.
    #[arg(short = 'j', long = "threads", global = true, value_name = "N")]
    pub threads: Option<usize>,
    /// No progress bar or summary line.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
pub struct PackArgs {
    /// A .safetensors file or a directory; or s3://BUCKET[/PREFIX] (gs://,
    /// az://), every object under which is a file of the directory
    /// (credentials from the AWS_*, GOOGLE_* or AZURE_* environment variables).
    pub src: PathBuf,
    /// The archive to write, or the directory to mirror into; or
    /// s3://BUCKET[/PREFIX] (gs://, az://), where each output is uploaded whole.
    pub dst: PathBuf,
    #[command(flatten)]
    pub outputs: OutputArgs,
    /// Source bytes per independently decodable chunk, in bytes or with
    /// a K, M or G suffix (64 B to 64M). Left out: 256K, and 512K or 1M
    /// for a tensor whose bytes' statistics say wider chunks code it
    /// smaller (they pay for their code tables fewer times); a tensor
    /// coded against a base takes whole chunks of the base's. A last
    /// chunk takes in a remainder shorter than half a chunk.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<usize>,
    /// Code tensors against a base: an archive (e.g. the model a checkpoint
    /// was fine-tuned from), or for a directory SRC a directory of archives
    /// matched by relative path. Tensors of the same name, dtype and shape
    /// are stored as their XOR with the base's where that is smaller. The
    /// archives then need the base, found by its path relative to them and
    /// checked by its SHA-256, to be read.
    #[arg(long, value_name = "BASE")]
    pub base: Option<PathBuf>,
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
    pub dedup: Option<Option<PathBuf>>,
    /// Pack only shard I of N (0-based) of a directory's files, as one of
    /// N machines of a cluster job: every shard computes the same
    /// size-balanced split, and their outputs together are what one
    /// machine writes. `auto` takes I and N from a Slurm job array,
    /// `auto/N` takes I from a Kubernetes Indexed Job (see
    /// docs/CLUSTER.md). Outputs already complete and of their source are
    /// kept, so a shard can be run again; others are overwritten.
    #[arg(long, value_name = "I/N|auto|auto/N")]
    pub shard: Option<String>,
    /// Overwrite an archive even where other archives of DST (or of the
    /// --dedup store) need it as their base and it would now hold
    /// another source: they can then no longer be read. Without it such
    /// a run is refused, naming them.
    #[arg(long)]
    pub break_dependants: bool,
    #[command(flatten)]
    pub search: SearchArgs,
}

// The arguments of `brevis calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// A .safetensors file.
    pub src: PathBuf,
    /// The prior file to write.
    pub prior: PathBuf,
    /// Overwrite PRIOR if it exists.
    #[arg(long)]
    pub force: bool,
    /// Source bytes per chunk, as for pack.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULT_CHUNK_BYTES, value_parser = parse_size)]
    pub chunk_size: usize,
}

// The arguments of `brevis detach`.
#[derive(clap::Args)]
pub struct DetachArgs {
    /// An archive packed against a base.
    pub src: PathBuf,
    /// The archive to write.
    pub dst: PathBuf,
    /// Overwrite DST if it exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub search: SearchArgs,
}

// The arguments of `brevis unpack`.
#[derive(clap::Args)]
pub struct UnpackArgs {
    /// A .brv archive (or its URL: s3://BUCKET/KEY.brv, https://...) or a
    /// directory.
    pub src: PathBuf,
    /// The file to write, or the directory to mirror into.
    pub dst: PathBuf,
    #[command(flatten)]
    pub outputs: OutputArgs,
}

// The arguments of `brevis verify`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// A .brv archive (or its URL: s3://BUCKET/KEY.brv, https://...) or a
    /// directory of them.
    pub archive: PathBuf,
    /// Also compare every byte with this original file (for a directory:
    /// the directory of originals, matched by relative path).
    #[arg(long, value_name = "ORIGINAL")]
    pub against: Option<PathBuf>,
}

// The arguments of `brevis inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    /// A .brv archive or a directory of them.
    pub archive: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What pack and unpack do with outputs that exist, and with failures.
#[derive(clap::Args)]
pub struct OutputArgs {
    /// Overwrite outputs that already exist.
    #[arg(long, conflicts_with = "skip_existing")]
    pub force: bool,
    /// Leave outputs that already exist and write the others: resumes an
    /// interrupted run (outputs are written whole or not at all).
    #[arg(long)]
    pub skip_existing: bool,
    /// For a directory, go on with the other files after one fails, report
    /// every failure, and exit with status 1 at the end.
    #[arg(long)]
    pub keep_going: bool,
}

impl OutputArgs {
    pub fn existing(&self) -> Existing {
        match (self.force, self.skip_existing) {
            (true, _) => Existing::Overwrite,
            (_, true) => Existing::Skip,
            _ => Existing::Refuse,
        }
    }
}

/// How pack searches for each chunk's program.
#[derive(clap::Args)]
pub struct SearchArgs {
    /// Effort, 1 (fastest) to 9 (smallest), also given as -1 .. -9 as with
    /// zstd and xz. Level 5 re-fits programs searched on a few chunks per
    /// tensor class (dtype and shape) to the others at a budget of 8; lower
    /// levels search less and re-fit more loosely, and 1 and 2 do not code
    /// a matrix's rows in classes nor share code tables between a tensor's
    /// chunks; from 7 on the search looks at whole chunks
    /// instead of their first 64Ki words and puts the columns of a matrix of
    /// bytes in classes where they differ in offset (per-channel zero
    /// points: smaller, slower to decode), and 8 and 9 search every chunk at
    /// budgets of 64 and 256 (see docs/PERFORMANCE.md for sizes and speeds).
    #[arg(long, value_name = "1-9", default_value_t = archive::DEFAULT_LEVEL,
          value_parser = clap::value_parser!(u8).range(1..=9))]
    pub level: u8,
    /// States the search expands per searched chunk after the root's
    /// expansion, instead of the level's (0: every operator tried at the
    /// root only, with no learned prior).
    #[arg(long, value_name = "N")]
    pub budget: Option<usize>,
    /// Expand states best-first by estimated size instead of the A* order.
    #[arg(long)]
    pub no_astar: bool,
    /// Use uniform production costs instead of a prior learned from the file.
    #[arg(long, conflicts_with = "prior")]
    pub no_prior: bool,
    /// Use this prior (from `brevis calibrate`) instead of learning one.
    #[arg(long, value_name = "FILE")]
    pub prior: Option<PathBuf>,
    /// Search every chunk instead of re-fitting programs found on others.
    #[arg(long)]
    pub no_refit: bool,
}

impl SearchArgs {
    /// The pack options these arguments ask for, with chunks of
    /// `chunk_size` if given (else the default size, wider where it pays,
    /// and following a base's).
    pub fn options(&self, chunk_size: Option<usize>) -> Result<PackOptions> {
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
pub fn expand_level_flags(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
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
