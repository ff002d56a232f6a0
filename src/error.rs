//! The crate's error type: every failure names the file it concerns and why.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a valid safetensors file: {reason}", path.display())]
    NotSafetensors { path: PathBuf, reason: String },
    #[error("{}: corrupt archive at byte {offset}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    pub fn invalid(path: &Path, reason: impl Into<String>) -> Error {
        Error::Invalid {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// This error, naming `to` where it named `from` (a temporary's
    /// failure reported as its destination's).
    pub fn renamed(self, from: &Path, to: &Path) -> Error {
        let swap = |path: PathBuf| match path == from {
            true => to.to_path_buf(),
            false => path,
        };
        match self {
            Error::Io { path, source } => Error::Io {
                path: swap(path),
                source,
            },
            Error::NotSafetensors { path, reason } => Error::NotSafetensors {
                path: swap(path),
                reason,
            },
            Error::Corrupt {
                path,
                offset,
                reason,
            } => Error::Corrupt {
                path: swap(path),
                offset,
                reason,
            },
            Error::Invalid { path, reason } => Error::Invalid {
                path: swap(path),
                reason,
            },
        }
    }
}

/// Attaches a path to `std::io` results.
pub trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
