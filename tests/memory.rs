//! Peak memory of the `brevis` command line on large headers. In a test
//! binary of its own: a child's peak RSS as `wait4` reports it includes the
//! peak of the process that started it (recorded when the child replaced
//! its copy of that process's memory with the program), so the tests of
//! other files, running beside it in one process, would count.

#[path = "common/cli.rs"]
mod cli;
mod common;

use cli::*;
use common::*;
use std::process::Command;

/// Runs `brevis args` to success and returns its peak resident memory, KiB.
// The child is reaped by `wait4`, which also gives its resource usage.
#[allow(clippy::zombie_processes)]
fn peak_rss_kib(args: &[&str]) -> u64 {
    let child = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` holds integers only, so all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals; `pid` is our unreaped child.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{args:?}"
    );
    usage.ru_maxrss as u64
}

#[test]
fn a_header_of_many_tensors_packs_in_bounded_memory() {
    // 200,000 one-byte tensors: a 15.7 MB header. Holding it all as JSON
    // values, and every chunk's record at once, took 297 MB.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let file = one_byte_tensors(&data);
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "many.safetensors", &file);
    let dst = dir.path().join("many.brv");
    let peak = peak_rss_kib(&["pack", "-q", s(&src), s(&dst)]);
    assert!(peak < 200 << 10, "peak RSS {peak} KiB");
    ok(&["verify", "-q", s(&dst), "--against", s(&src)]);
    // Its report's rows go out as they are done: 74 and 83 MB here, as a
    // table and as JSON; 215 and 963 MB when the report was built whole.
    for json in [&[][..], &["--json"]] {
        let peak = peak_rss_kib(&[&["inspect", "-q", s(&dst)], json].concat());
        assert!(peak < 120 << 10, "inspect {json:?}: peak RSS {peak} KiB");
    }
}
