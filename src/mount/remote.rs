//! A prefix of an object store as the mounted tree: folders are the
//! prefixes ending in `/`, files the objects, each object's version its ETag.
//! Nothing is listed ahead: a lookup asks the store (HEAD), a directory
//! listing lists one level; the kernel caches both for the attribute timeout,
//! which bounds how long a change in the store takes to show.

use super::backend::{Backend, Meta, Space};
use crate::archive::{Archive, ByteSource};
use crate::remote::store::UNTAGGED;
use crate::remote::{ObjectInfo, Opener, Remote};
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

/// A store's objects; paths are keys relative to the bucket.
pub struct RemoteTree {
    pub remote: Arc<Remote>,
    /// The key of the folder mounted, a folder whatever the store lists.
    pub root: String,
    /// Owner of every file shown: the user serving the mount.
    pub uid: u32,
    pub gid: u32,
    /// Time shown for folders, which a store does not keep: the mount's start.
    pub mounted: SystemTime,
}

impl RemoteTree {
    fn file_meta(&self, info: &ObjectInfo) -> Meta {
        Meta {
            is_dir: false,
            len: info.len,
            blocks: info.len.div_ceil(512),
            atime: info.modified,
            mtime: info.modified,
            ctime: info.modified,
            mode: 0o444,
            uid: self.uid,
            gid: self.gid,
            version: info.version.clone(),
            dir_id: None,
        }
    }

    fn dir_meta(&self) -> Meta {
        Meta {
            is_dir: true,
            len: 0,
            blocks: 0,
            atime: self.mounted,
            mtime: self.mounted,
            ctime: self.mounted,
            mode: 0o555,
            uid: self.uid,
            gid: self.gid,
            version: String::new(),
            dir_id: None,
        }
    }

    /// The object a file's `meta` was taken from (the version it shows).
    fn object(&self, path: &Path, meta: &Meta) -> io::Result<ObjectInfo> {
        let key = key(path)?;
        // An object without ETag has a version that cannot be a condition.
        let etag = !meta.version.starts_with(UNTAGGED);
        Ok(ObjectInfo {
            key,
            len: meta.len,
            modified: meta.mtime,
            version: meta.version.clone(),
            etag,
        })
    }
}

fn key(path: &Path) -> io::Result<String> {
    path.to_str()
        .map(|k| k.trim_matches('/').to_string())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a key that is not UTF-8"))
}

/// The traffic of the mount, in its log when it ends.
impl Drop for RemoteTree {
    fn drop(&mut self) {
        let root = self.remote.url(&self.root);
        log::info!("{root}: {}", self.remote.store.stats.to_json());
    }
}

impl Backend for RemoteTree {
    fn stat(&self, path: &Path) -> Option<Meta> {
        let key = key(path).ok()?;
        if key == self.root {
            return Some(self.dir_meta());
        }
        match self.remote.store.head(&key) {
            Ok(Some(info)) => return Some(self.file_meta(&info)),
            Ok(None) => {}
            Err(e) => {
                log::warn!("{}: {e}", self.remote.url(&key));
                return None;
            }
        }
        // A folder is a prefix that something is stored under.
        let (objects, folders) = self.remote.store.list(&key).ok()?;
        (!objects.is_empty() || !folders.is_empty()).then(|| self.dir_meta())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(OsString, Meta)>> {
        let (objects, folders) = self.remote.store.list(&key(dir)?)?;
        // (Consoles store folders as empty objects named `dir/`: no name.)
        let files = objects.iter().filter_map(|info| {
            let name = info.key.rsplit('/').next().filter(|n| !n.is_empty())?;
            Some((OsString::from(name), self.file_meta(info)))
        });
        let dirs = folders
            .into_iter()
            .map(|f| (OsString::from(f), self.dir_meta()));
        Ok(files.chain(dirs).collect())
    }

    fn open_archive(&self, path: &Path, meta: &Meta) -> crate::Result<Archive> {
        let url = self.remote.url(&key(path).unwrap_or_default());
        let info = self
            .object(path, meta)
            .map_err(|e| crate::Error::io(Path::new(&url), e))?;
        let opener = Opener {
            remote: self.remote.clone(),
            known: Some(info),
        };
        Archive::open_with(&url, &opener)
    }

    fn open_plain(&self, path: &Path, meta: &Meta) -> io::Result<Box<dyn ByteSource>> {
        Ok(Box::new(self.remote.object(self.object(path, meta)?)))
    }

    /// A store has no fixed size: nothing used, nothing free.
    fn space(&self) -> io::Result<Space> {
        Ok(Space {
            blocks: 0,
            bfree: 0,
            bavail: 0,
            files: 0,
            ffree: 0,
            bsize: 4096,
            namelen: 1024,
            frsize: 4096,
        })
    }

    fn stats(&self) -> Option<String> {
        Some(self.remote.store.stats.to_json())
    }
}
