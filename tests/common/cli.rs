//! Running the `brevis` binary from tests (included by the tests that do).
#![allow(dead_code)] // each test binary uses a different subset

use std::path::Path;
use std::process::{Command, Output};

pub fn brevis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `brevis args`, asserts it succeeded, returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = brevis(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `brevis args`, asserts it failed with status 1 and every one of
/// `why` in its error output.
pub fn fails_with(args: &[&str], why: &[&str]) {
    let out = brevis(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    for w in why {
        assert!(err.contains(w), "{args:?}: expected '{w}' in: {err}");
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
