//! The one way every command opens a file it reads: regular files only, so
//! that a FIFO or a device given as an input is refused at once instead of
//! blocking (a FIFO's `open` waits for a writer) or being acted on.

#![forbid(unsafe_code)]

use crate::error::{IoContext, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` if it is a regular file (symbolic links followed). Anything
/// else is refused without being opened (opening a device may act on it);
/// the file is then opened without blocking and checked again, so a FIFO put
/// in its place meanwhile is refused too instead of waiting for a writer.
pub fn open_regular(path: &Path) -> io::Result<File> {
    if !std::fs::metadata(path)
        .map_err(|e| dangling(path, e))?
        .is_file()
    {
        return Err(io::Error::other("not a regular file"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    // (O_NONBLOCK changes nothing for a regular file: its reads never block.)
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// The SHA-256 of the file at `path`, read once from start to end.
pub fn sha256_of(path: &Path) -> Result<[u8; 32]> {
    let mut file = open_regular(path).at(path)?;
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf).at(path)? {
            0 => return Ok(sha.finalize().into()),
            n => sha.update(&buf[..n]),
        }
    }
}

/// `error`, said plainly when `path` is a symbolic link to nothing (the
/// system's "No such file" would name a path the user can see).
fn dangling(path: &Path, error: io::Error) -> io::Error {
    match std::fs::read_link(path) {
        Ok(target) if error.kind() == io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "a symbolic link to {}, which does not exist",
                target.display()
            ),
        ),
        _ => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_open_and_dangling_links_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(open_regular(&file).is_ok());
        let err = open_regular(dir.path()).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink("gone", &link).unwrap();
        let err = open_regular(&link).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a symbolic link to gone, which does not exist"
        );
        let err = open_regular(&dir.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
