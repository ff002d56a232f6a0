//! One archive in a store opened by its URL, without a mount: for the Python
//! package and the commands that read an archive where it is stored. Bases
//! named by relative paths resolve in the same store.

use std::path::Path;

use super::object::{Opener, Remote};
use super::store::{split_url, RemoteOptions, Store};
use crate::archive::Archive;
use crate::error::{Error, IoContext, Result};

/// Bytes of fetched blocks kept in memory, enough for two read windows.
const MEMORY: usize = 64 << 20;

/// Opens the archive at `url` (`s3://BUCKET/KEY.brv`, or `http(s)://` of a
/// server answering range requests): its trailer and index now, its records
/// by ranged GETs as they are read (each chunk checked as it is decoded).
pub fn open_archive(url: &str, options: RemoteOptions) -> Result<Archive> {
    let at = Path::new(url);
    let (_, key) = split_url(url).at(at)?;
    let mut opener = opener(url, options)?;
    let Some(info) = opener.remote.store.head(&key).at(at)? else {
        return Err(Error::invalid(at, "no such archive in the store"));
    };
    opener.known = Some(info);
    Archive::open_with(url, &opener)
}

/// Opens archives of the store of `url` by their URLs (as bases of an
/// archive being packed: read where they are stored, like `open_archive`'s).
pub fn opener(url: &str, options: RemoteOptions) -> Result<Opener> {
    let store = Store::connect(url, options).at(Path::new(url))?;
    Ok(Opener {
        remote: Remote::new(store, MEMORY, None),
        known: None,
    })
}
