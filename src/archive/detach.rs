//! Re-packing an archive without its base: its source decoded (every check
//! of `unpack` made) and packed again on its own.

#![forbid(unsafe_code)]

use super::pack::{pack_file, BaseSources, PackOptions, PackSummary};
use super::reader::Archive;
use super::unpack::unpack_file;
use crate::error::Result;
use std::path::Path;

/// Writes `dst`, an archive of `archive`'s source that needs no base: the
/// source is decoded (every check of `unpack` made) to a hidden temporary
/// beside `dst`, packed with `opts` and no base, and removed.
pub fn detach(
    archive: &Archive,
    dst: &Path,
    opts: &PackOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PackSummary> {
    let original = crate::atomic::temp_path(&dst.with_extension("safetensors"));
    let opts = PackOptions {
        bases: BaseSources::default(),
        ..opts.clone()
    };
    let result = unpack_file(archive, &original, &|_| {})
        .and_then(|()| pack_file(&original, dst, &opts, progress));
    let _ = std::fs::remove_file(&original);
    result
}
