//! An archive named on the command line: a local path, or (with the `remote`
//! feature) the URL of an object in a store, read by range.

use std::path::Path;

use crate::archive::Archive;
use crate::error::Result;

/// Whether `path` is the URL of an object in a store (`s3://`, `http(s)://`)
/// rather than a local path.
pub fn is_url(path: &Path) -> bool {
    #[cfg(feature = "remote")]
    return path.to_str().is_some_and(crate::remote::is_remote);
    #[cfg(not(feature = "remote"))]
    {
        let _ = path;
        false
    }
}

/// Opens the archive at `path` without mapping it: a local file read by
/// `pread`, or an object in a store (credentials and endpoint from the AWS
/// environment) with its bases beside it in the store.
pub fn open_archive(path: &Path) -> Result<Archive> {
    #[cfg(feature = "remote")]
    return open_archive_with(path, crate::remote::RemoteOptions::default());
    #[cfg(not(feature = "remote"))]
    Archive::open_unmapped(path)
}

/// [`open_archive`], an object in a store read with `options`.
#[cfg(feature = "remote")]
pub fn open_archive_with(path: &Path, options: crate::remote::RemoteOptions) -> Result<Archive> {
    match path.to_str().filter(|p| crate::remote::is_remote(p)) {
        Some(url) => crate::remote::open_archive(url, options),
        None => Archive::open_unmapped(path),
    }
}
