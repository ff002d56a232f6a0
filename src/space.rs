//! What a filesystem says about its space: checked before writing an output
//! whose size is known, so that a full disk is reported up front instead of
//! after writing a partial temporary.

use std::path::Path;

/// `statvfs(2)` of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a zeroed statvfs is a valid value to be overwritten; `path` is
    // NUL-terminated and both pointers are valid for the call. Test:
    // `available_space_is_reported`.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// Bytes an unprivileged writer may still use on the filesystem of `path`.
pub fn available(path: &Path) -> std::io::Result<u64> {
    let st = statvfs(path)?;
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_space_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        assert!(available(dir.path()).unwrap() > 0);
        let err = available(&dir.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(available(Path::new("bad\0path")).is_err());
    }
}
