//! Helpers of the tests that mount for real (`tests/mount.rs`,
//! `tests/remote.rs`): generated models and their archives, a running
//! `brevis-mount -f` unmounted when dropped, and reads that reach the server.

#![allow(dead_code)]

use super::common::*;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Chunk size for the generated archives: small, so that reads cross many chunks.
pub const CHUNK: &str = "65536";

pub fn brevis(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "brevis {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `brevis pack -q --force` with the small test chunk size: a file or a directory.
pub fn pack(src: &Path, dst: &Path) {
    brevis(&[
        "pack",
        "-q",
        "--force",
        "--chunk-size",
        CHUNK,
        s(src),
        s(dst),
    ]);
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The corpus checkpoint whose path contains `name` (see scripts/fetch-corpus.sh).
pub fn corpus_file(name: &str) -> PathBuf {
    let found = corpus_files()
        .into_iter()
        .find(|p| p.to_string_lossy().contains(name));
    found.unwrap_or_else(|| panic!("the corpus has no {name}"))
}

/// Peak resident memory of process `pid`, in KiB.
pub fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A model directory of generated checkpoints and plain files, and its archives.
pub struct Model {
    pub _dir: tempfile::TempDir,
    pub originals: PathBuf,
    pub archives: PathBuf,
}

/// Tensors of several dtypes, `scale` times 64 KiB of data each.
pub fn checkpoint(seed: u64, scale: usize) -> Vec<u8> {
    let mut tensors = every_dtype();
    let n = scale * 16384;
    let smooth: Vec<u8> = (0..n)
        .flat_map(|i| ((i as f32 * 0.001).sin() * 0.02).to_le_bytes())
        .collect();
    tensors.push(tensor("w.smooth", "F32", &[n as u64], smooth));
    tensors.push(tensor("w.noise", "BF16", &[n as u64], noise(seed, n * 2)));
    let extras = Extras {
        metadata: Some(r#"{"format":"pt"}"#.into()),
        ..Extras::default()
    };
    build(&tensors, &extras)
}

pub fn model() -> Model {
    let dir = tempfile::tempdir().unwrap();
    let originals = dir.path().join("model");
    std::fs::create_dir_all(originals.join("shards")).unwrap();
    std::fs::write(originals.join("model.safetensors"), checkpoint(1, 8)).unwrap();
    std::fs::write(
        originals.join("shards/part-2.safetensors"),
        checkpoint(2, 3),
    )
    .unwrap();
    std::fs::write(originals.join("config.json"), br#"{"hidden_size": 8}"#).unwrap();
    std::fs::write(originals.join("shards/tokenizer.json"), noise(3, 5000)).unwrap();
    let archives = dir.path().join("archives");
    pack(&originals, &archives);
    Model {
        _dir: dir,
        originals,
        archives,
    }
}

/// A running `brevis-mount -f`, unmounted and stopped when dropped.
pub struct Mounted {
    pub _dir: tempfile::TempDir,
    pub point: PathBuf,
    pub child: Child,
    pub log: PathBuf,
}

pub fn mount(archives: &Path, options: &[&str]) -> Mounted {
    mount_with(
        Command::new(env!("CARGO_BIN_EXE_brevis-mount")),
        archives,
        options,
    )
}

/// Mounts with `server` (brevis-mount, perhaps run as another user), on a
/// mountpoint that user owns.
pub fn mount_with(mut server: Command, archives: &Path, options: &[&str]) -> Mounted {
    let dir = tempfile::tempdir().unwrap();
    let point = dir.path().join("mnt");
    std::fs::create_dir(&point).unwrap();
    if running_as_root() {
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&point, Some(USER), Some(USER)).unwrap();
    }
    let log = dir.path().join("log");
    let child = server
        .args(["-f", s(archives), s(&point)])
        .args(options)
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut mounted = Mounted {
        _dir: dir,
        point,
        child,
        log,
    };
    let start = Instant::now();
    while !is_mounted(&mounted.point) {
        if let Some(status) = mounted.child.try_wait().unwrap() {
            panic!("brevis-mount exited with {status}: {}", mounted.log_text());
        }
        assert!(start.elapsed() < Duration::from_secs(20), "mount not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    mounted
}

/// The user that mounts without root: nobody.
pub const USER: u32 = 65534;

pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The user `as_user` runs commands as.
pub fn mounting_user() -> u32 {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if running_as_root() {
        USER
    } else {
        uid
    }
}

/// `program` run as `USER` when the tests run as root, else as the current
/// (non-root) user.
pub fn as_user(program: &str) -> Command {
    if !running_as_root() {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    let id = USER.to_string();
    command.args(["--reuid", &id, "--regid", &id, "--clear-groups", program]);
    command
}

pub fn is_mounted(point: &Path) -> bool {
    mount_line(point).is_some()
}

/// The line of /proc/self/mountinfo for the mount at `point`, if any.
pub fn mount_line(point: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = point.to_str().unwrap();
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(wanted))
        .map(str::to_string)
}

impl Mounted {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.point.join(rel)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill takes plain integers; the child is ours and not yet reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// Waits for the server to exit and returns whether it succeeded.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(start.elapsed() < limit, "server still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if is_mounted(&self.point) {
            let _ = Command::new("umount").arg("-l").arg(&self.point).status();
        }
    }
}

/// Every file under `root`, relative to it, sorted.
pub fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Opens a presented file so that every read reaches the server (no page cache).
pub fn open_direct(path: &Path) -> File {
    File::options()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap()
}

pub fn read_range(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match file.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// The counters of a mount (its `user.brevis.stats` attribute).
pub fn stats(m: &Mounted) -> serde_json::Value {
    let path = std::ffi::CString::new(m.point.to_str().unwrap()).unwrap();
    let name = c"user.brevis.stats";
    let mut buf = vec![0u8; 4096];
    // SAFETY: both strings are NUL-terminated; `buf` is valid for its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(n > 0, "getxattr: {}", std::io::Error::last_os_error());
    serde_json::from_slice(&buf[..n as usize]).unwrap()
}
