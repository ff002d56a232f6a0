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
    if let Some(url) = path.to_str().filter(|p| crate::remote::is_remote(p)) {
        return crate::remote::open_archive(url, crate::remote::RemoteOptions::default());
    }
    Archive::open_unmapped(path)
}
