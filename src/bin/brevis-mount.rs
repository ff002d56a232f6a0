//! `brevis-mount`: show a directory of `.brv` archives as the original files.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use brevis::mount::{self, MountOptions, ServeOptions};
use brevis::units::parse_size;
use clap::Parser;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Mount a directory of .brv archives as a read-only filesystem in which every
/// X.brv reads as X.safetensors, bit-identical to the original file.
///
/// Frameworks load from MOUNTPOINT unmodified (safetensors, torch, transformers,
/// memory-mapped or not). Only the chunks a read touches are decoded, each
/// checked against its checksum first; a chunk that fails gives EIO for the reads
/// that touch it and a log line naming the archive and offset. Other files
/// (config.json, tokenizers) show as they are; subdirectories are mirrored;
/// files of a pack still being written are hidden. Archives added or replaced
/// while mounted show at once; a file open before the change keeps reading the
/// version it opened.
///
/// Runs in the background once the mount is ready, unless -f. Unmount with
/// `umount MOUNTPOINT` (or `fusermount3 -u MOUNTPOINT` as a user), or send
/// SIGINT/SIGTERM: the server unmounts and exits; if files are still open it
/// detaches the mount and exits when they close.
///
/// ARCHIVES may also be object storage: s3://BUCKET[/PREFIX] (or one archive
/// in it), configured as AWS tools are (AWS_ACCESS_KEY_ID,
/// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL); gs://BUCKET[/PREFIX]
/// (GOOGLE_* variables) or az://CONTAINER[/PREFIX] (AZURE_* variables); or an
/// http(s):// URL of one archive on a web server that answers range requests. Each archive's
/// index is fetched once, then only the byte ranges of the records that reads
/// touch; every chunk is checked before use. A read the store cannot answer
/// within --remote-timeout (after retries) fails with EIO.
///
/// As root this needs only /dev/fuse. As another user it needs the fusermount3
/// helper (Debian: apt install fuse3) and read-write access to /dev/fuse, and
/// --allow-other needs `user_allow_other` in /etc/fuse.conf.
#[derive(Parser)]
#[command(name = "brevis-mount", version, about, long_about)]
struct Cli {
    /// Directory of archives (as written by `brevis pack DIR ARCHIVES`), or
    /// one .brv archive, shown alone as its .safetensors; or the same in
    /// object storage: s3://, gs://, az://BUCKET[/PREFIX], https://HOST/PATH/X.brv.
    archives: PathBuf,
    /// Directory to mount on (what it holds is hidden while mounted).
    mountpoint: PathBuf,
    /// Stay in the foreground and log to stderr.
    #[arg(short, long)]
    foreground: bool,
    /// Memory for decoded chunks, in bytes or with a K, M or G suffix: the
    /// chunks kept, those being decoded and spare buffers all count. A read
    /// waits for room, and read-ahead does without; a chunk larger than this
    /// is decoded one at a time, beyond it. The kernel's page cache keeps what
    /// was read besides this, so the chunk cache only needs to hold chunks
    /// between the reads that share them and those decoded ahead; a larger
    /// one helps random reads larger than the page cache.
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    cache_size: usize,
    /// Bytes decoded ahead of a reader that reads sequentially, so that both
    /// cores stay busy between the kernel's requests; at most half of
    /// --cache-size is used, and 0 turns it off.
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = parse_size)]
    read_ahead: usize,
    /// Seconds the kernel may cache names and attributes. Changes in the archives
    /// directory are pushed to the kernel at once; this bounds how long a change
    /// the server cannot see (e.g. on a network filesystem) takes to show.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    ttl: u64,
    /// Threads decoding chunks, as brevis's -j (default: one per core).
    #[arg(
        short = 'j',
        long = "threads",
        visible_alias = "jobs",
        value_name = "N"
    )]
    threads: Option<usize>,
    /// Threads taking requests from the kernel (decoding runs on the -j threads).
    #[arg(long, value_name = "N", default_value_t = 4)]
    request_threads: usize,
    /// Let other users read the mount (needs `user_allow_other` in
    /// /etc/fuse.conf when not root). File permissions still apply.
    #[arg(long)]
    allow_other: bool,
    /// In the background, append log lines to this file (default:
    /// $XDG_STATE_HOME/brevis/brevis-mount.log, i.e.
    /// ~/.local/state/brevis/brevis-mount.log). Errors such as a chunk that
    /// fails its checksum are always logged, with the archive and offset.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// More log lines: -v for each mount and unmount, -vv for every request.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Keep fetched (compressed) bytes in this folder too,
    /// keyed by object, ETag and range, so that a later mount fetches them
    /// once only. May be shared by several mounts.
    #[arg(long, value_name = "DIR", help_heading = "Object storage")]
    disk_cache: Option<PathBuf>,
    /// Most bytes the disk cache holds (least recently used
    /// evicted first).
    #[arg(long, value_name = "SIZE", default_value = "10G", value_parser = parse_size, help_heading = "Object storage")]
    disk_cache_size: usize,
    /// Memory for fetched (compressed) bytes (at least 2M; bytes fetched
    /// ahead of readers take at most half of it). Less makes torch's
    /// loading of a large checkpoint fetch some bytes twice.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size, help_heading = "Object storage")]
    fetch_cache_size: usize,
    /// Longest wait for one request, retries included; then
    /// the read that needed it fails with EIO.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 60,
        help_heading = "Object storage"
    )]
    remote_timeout: u64,
    /// Retries of a failed request (server errors, timeouts,
    /// dropped connections), with exponential backoff and jitter.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        help_heading = "Object storage"
    )]
    retries: usize,
}

/// glibc gives each thread that allocates an arena of its own and keeps
/// what each one held at its most: with the decoding and request threads
/// each taking chunk-sized buffers, that is several times what the chunk
/// cache bounds. Two arenas keep the mount near its `--cache-size` (test
/// `chunks_larger_than_the_cache_are_decoded_one_at_a_time`, docs/RELIABILITY.md).
fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt takes two integers and only sets a tunable of the
    // allocator; it is called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    let level = ["warn", "info", "debug"][cli.verbose.min(2) as usize];
    let (archives, mountpoint) = match mount::check_paths(&cli.archives, &cli.mountpoint) {
        Ok(paths) => paths,
        Err(e) => return fail(&e.to_string()),
    };
    let options = MountOptions {
        serve: ServeOptions {
            cache_bytes: cli.cache_size,
            ttl: Duration::from_secs(cli.ttl),
            read_ahead_bytes: cli.read_ahead as u64,
        },
        allow_other: cli.allow_other,
        request_threads: cli.request_threads,
        decode_threads: cli.threads,
        remote: mount::RemoteMountOptions {
            store: brevis::remote::RemoteOptions {
                timeout: Duration::from_secs(cli.remote_timeout.max(1)),
                retries: cli.retries,
            },
            disk_cache: cli.disk_cache.clone(),
            disk_cache_bytes: cli.disk_cache_size as u64,
            memory_bytes: cli.fetch_cache_size,
        },
    };
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level));
    if cli.foreground {
        logger.init();
        return match mount::serve(&archives, &mountpoint, &options, || {}) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string()),
        };
    }
    let path = cli.log.clone().unwrap_or_else(default_log);
    let log = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| File::options().create(true).append(true).open(&path));
    match log {
        Ok(file) => logger
            .target(env_logger::Target::Pipe(Box::new(file)))
            .init(),
        Err(e) => return fail(&format!("{}: {e}", path.display())),
    }
    in_background(|ready| mount::serve(&archives, &mountpoint, &options, ready))
}

/// Where a background server logs unless told: the user's state directory,
/// as the XDG base directories define it.
fn default_log() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    state.join("brevis/brevis-mount.log")
}

fn fail(message: &str) -> ExitCode {
    eprintln!("brevis-mount: error: {message}");
    ExitCode::FAILURE
}

/// Runs `serve` in a child process that outlives this one. This process waits
/// until the child reports that the mount is ready (exit 0) or that it failed
/// (its message, exit 1). Called before any thread exists, as fork requires.
fn in_background(serve: impl FnOnce(Box<dyn FnOnce()>) -> brevis::Result<()>) -> ExitCode {
    let mut fds = [0; 2];
    // SAFETY: `fds` is valid for two descriptors; the result is checked.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return fail(&format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors are fresh and owned only here.
    let (from_child, to_parent) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process has one thread here, so the child may do anything.
    match unsafe { libc::fork() } {
        -1 => fail(&format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(from_child);
            // SAFETY: setsid takes no arguments; it detaches from the terminal.
            unsafe { libc::setsid() };
            let report = File::from(to_parent);
            let status = child(report, serve);
            std::process::exit(status)
        }
        _ => {
            drop(to_parent);
            let mut message = String::new();
            let _ = File::from(from_child).read_to_string(&mut message);
            match message.as_str() {
                "ready" => ExitCode::SUCCESS,
                "" => fail("the server exited before the mount was ready"),
                failure => fail(failure),
            }
        }
    }
}

/// The background process: serves, telling the parent through `report` first
/// that the mount is ready or why it failed.
fn child(report: File, serve: impl FnOnce(Box<dyn FnOnce()>) -> brevis::Result<()>) -> i32 {
    let report = std::sync::Arc::new(std::sync::Mutex::new(Some(report)));
    let on_ready = report.clone();
    let ready = Box::new(move || {
        if let Some(mut file) = on_ready.lock().ok().and_then(|mut f| f.take()) {
            let _ = file.write_all(b"ready");
        }
        close_stdio();
    });
    match serve(ready) {
        Ok(()) => 0,
        Err(e) => {
            if let Some(mut file) = report.lock().ok().and_then(|mut f| f.take()) {
                let _ = file.write_all(e.to_string().as_bytes());
            }
            log::error!("{e}");
            1
        }
    }
}

/// Points stdin, stdout and stderr at /dev/null, so the process started from a
/// terminal or a pipe does not hold it open.
fn close_stdio() {
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this process owns.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}
