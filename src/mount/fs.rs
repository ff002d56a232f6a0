//! The FUSE operations: a read-only view of the archives directory in which
//! every archive reads as the original file, decoded chunk by chunk on demand.

use super::cache::ChunkCache;
use super::nodes::{Kind, LookupError, Node, Nodes};
use super::read::ArchiveReader;
use super::watch::Watcher;
use crate::archive::ByteSource;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyXattr,
    Request,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// How the mount serves reads.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Bytes of decoded chunks kept in memory.
    pub cache_bytes: usize,
    /// How long the kernel may cache names and attributes. Changes seen by the
    /// watcher are pushed to the kernel at once regardless.
    pub ttl: Duration,
    /// Source bytes decoded ahead of a handle that reads sequentially (at most
    /// half the cache, so that chunks decoded ahead are not evicted unread).
    pub read_ahead_bytes: u64,
}

/// The largest read the kernel is asked to send, and read-ahead it is asked for.
const MAX_READ: u32 = 1 << 20;

pub struct BrevisFs {
    nodes: Nodes,
    cache: Arc<ChunkCache>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_handle: AtomicU64,
    watcher: Option<Arc<Watcher>>,
    ttl: Duration,
    /// Source bytes decoded ahead of a sequential reader (see `ServeOptions`).
    read_ahead_bytes: u64,
    /// Threads taking requests from the kernel, and how many of them are
    /// waiting for chunks to decode (see [`BrevisFs::read_archive`]).
    loops: usize,
    waiting: Arc<AtomicUsize>,
    /// Bytes of presented archives answered to reads.
    served_bytes: Arc<AtomicU64>,
}

/// One read counted among those waiting for chunks while it lives.
struct Waiting {
    counter: Arc<AtomicUsize>,
    /// How many were waiting, this one included, when it started.
    count: usize,
}

impl Waiting {
    fn start(counter: &Arc<AtomicUsize>) -> Waiting {
        let count = counter.fetch_add(1, Ordering::AcqRel) + 1;
        Waiting {
            counter: counter.clone(),
            count,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An open file.
enum Handle {
    Archive(ArchiveReader),
    Plain(Box<dyn ByteSource>),
}

/// The extended attribute that holds the mount's counters (chunks decoded,
/// bytes read) and its backend's (bytes fetched from a store, requests,
/// cache hits), as JSON.
const STATS_XATTR: &str = "user.brevis.stats";

impl BrevisFs {
    /// A view of `nodes`; `watcher` (if any) is told of every directory shown so
    /// that changes in it reach the kernel.
    /// `loops` threads take requests from the kernel.
    pub fn new(
        nodes: Nodes,
        watcher: Option<Arc<Watcher>>,
        options: ServeOptions,
        loops: usize,
    ) -> BrevisFs {
        BrevisFs {
            nodes,
            cache: Arc::new(ChunkCache::new(options.cache_bytes)),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            watcher,
            ttl: options.ttl,
            read_ahead_bytes: options.read_ahead_bytes.min(options.cache_bytes as u64 / 2),
            loops,
            waiting: Arc::new(AtomicUsize::new(0)),
            served_bytes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Answers a read of an archive. The thread taking requests decodes what
    /// the read needs itself, unless every other such thread is already
    /// waiting on decodes: then the read is answered from a thread of its
    /// own, so that one always stays free for other files (a slow archive
    /// never holds up reads of the rest).
    fn read_archive(&self, handle: Arc<Handle>, offset: u64, size: u32, reply: ReplyData) {
        let (cache, ahead) = (self.cache.clone(), self.read_ahead_bytes);
        let served = self.served_bytes.clone();
        let waiting = Waiting::start(&self.waiting);
        // With one thread there is none to keep free.
        let spare = waiting.count < self.loops || self.loops == 1;
        let answer = move || {
            let Handle::Archive(reader) = handle.as_ref() else {
                unreachable!("archive reads are of archive handles");
            };
            let result = reader.read(&cache, offset, size, ahead);
            drop(waiting);
            match result {
                // The reply goes out straight from the chunks, with no copy
                // into one buffer (see vendor/fuser/PATCHED.md).
                Ok(data) => {
                    let slices = data.slices();
                    let len: usize = slices.iter().map(|s| s.len()).sum();
                    served.fetch_add(len as u64, Ordering::Relaxed);
                    reply.data_vectored(&slices)
                }
                Err(()) => reply.error(Errno::EIO),
            }
        };
        if spare {
            answer();
        } else if let Err(e) = std::thread::Builder::new().spawn(answer) {
            // The reply, dropped with the closure, answers EIO.
            log::error!("cannot start a thread for a read: {e}");
        }
    }

    /// The counters of `user.brevis.stats`: the mount's own, then its
    /// backend's, in one JSON object.
    fn stats(&self) -> String {
        let (decodes, decoded_bytes) = self.cache.decoded();
        let served = self.served_bytes.load(Ordering::Relaxed);
        let own = format!(
            "\"read_bytes\":{served},\"decodes\":{decodes},\"decoded_bytes\":{decoded_bytes}"
        );
        match self.nodes.backend().stats() {
            // The backend's is an object too: its members follow ours.
            Some(theirs) => format!("{{{own},{}", theirs.trim_start_matches('{')),
            None => format!("{{{own}}}"),
        }
    }

    fn attr(&self, ino: u64, node: &Node) -> FileAttr {
        let meta = &node.meta;
        let (kind, nlink) = match node.kind {
            Kind::Dir => (FileType::Directory, 2),
            Kind::Plain | Kind::Archive => (FileType::RegularFile, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size: node.size(),
            // Blocks of the real file: `du` through the mount shows the space
            // the archives take.
            blocks: meta.blocks,
            atime: meta.atime,
            mtime: meta.mtime,
            ctime: meta.ctime,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: (meta.mode & 0o555) as u16,
            nlink,
            uid: meta.uid,
            gid: meta.gid,
            rdev: 0,
            blksize: MAX_READ,
            flags: 0,
        }
    }

    fn handle(&self, fh: FileHandle) -> Option<Arc<Handle>> {
        let handles = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        handles.get(&fh.0).cloned()
    }

    fn add_handle(&self, handle: Handle) -> FileHandle {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let mut handles = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        handles.insert(fh, Arc::new(handle));
        FileHandle(fh)
    }
}

/// How a failed lookup reaches the caller.
fn errno(err: LookupError) -> Errno {
    match err {
        LookupError::NotFound => Errno::ENOENT,
        LookupError::NotADirectory => Errno::ENOTDIR,
        LookupError::BadArchive(message) => {
            log::error!("{message}");
            Errno::EIO
        }
    }
}

impl Filesystem for BrevisFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Ask for the largest read-ahead the kernel allows, up to MAX_READ.
        if let Err(max) = config.set_max_readahead(MAX_READ) {
            let _ = config.set_max_readahead(max);
        }
        let _ =
            config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS | InitFlags::FUSE_ASYNC_READ);
        if let Some(watcher) = &self.watcher {
            if let Some(root) = self.nodes.get(super::nodes::ROOT) {
                watch_dir(watcher, &root, super::nodes::ROOT);
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.nodes.lookup(parent.0, name) {
            Ok((ino, node)) => {
                if let (Kind::Dir, Some(watcher)) = (node.kind, &self.watcher) {
                    watch_dir(watcher, &node, ino);
                }
                reply.entry(&self.ttl, &self.attr(ino, &node), Generation(0));
            }
            Err(err) => reply.error(errno(err)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.nodes.get(ino.0) {
            Some(node) => reply.attr(&self.ttl, &self.attr(ino.0, &node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        let Some(node) = self.nodes.get(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let handle = match (node.kind, node.archive) {
            (Kind::Archive, Some(archive)) => {
                Handle::Archive(ArchiveReader::new(archive.content_id(), archive))
            }
            (Kind::Plain, _) => match self.nodes.backend().open_plain(&node.real, &node.meta) {
                Ok(file) => Handle::Plain(file),
                Err(e) => {
                    log::warn!("{}: {e}", node.real.display());
                    return reply.error(Errno::from(e));
                }
            },
            _ => return reply.error(Errno::EISDIR),
        };
        // Archives never change under an inode (a new version is a new inode),
        // so pages read once stay valid across opens. Nothing is ever written,
        // so a close need not wait for a flush round trip.
        let flags = match handle {
            Handle::Archive(_) => FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH,
            Handle::Plain(_) => FopenFlags::FOPEN_NOFLUSH,
        };
        reply.opened(self.add_handle(handle), flags);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(handle) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        match handle.as_ref() {
            Handle::Archive(_) => self.read_archive(handle, offset, size, reply),
            Handle::Plain(file) => {
                let len = file.len().saturating_sub(offset).min(size as u64);
                let mut buf = vec![0u8; len as usize];
                match file.read_exact_at(&mut buf, offset) {
                    Ok(()) => reply.data(&buf),
                    Err(e) => {
                        log::error!(
                            "{}: reading {len} bytes at {offset}: {e}",
                            node_name(&self.nodes, ino)
                        );
                        reply.error(Errno::EIO)
                    }
                }
            }
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut handles = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        handles.remove(&fh.0);
        reply.ok();
    }

    /// Only kernels that predate FOPEN_NOFLUSH ask.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    /// The space of where the archives are, so `df` shows something true;
    /// nothing can be written here.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.nodes.backend().space() {
            Ok(st) => reply.statfs(
                st.blocks, st.bfree, st.bavail, st.files, st.ffree, st.bsize, st.namelen, st.frsize,
            ),
            Err(e) => reply.error(Errno::from(e)),
        }
    }

    /// Only `user.brevis.stats`, on every inode.
    fn getxattr(&self, _req: &Request, _ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let stats = (name == STATS_XATTR).then(|| self.stats());
        match stats {
            Some(text) if size == 0 => reply.size(text.len() as u32),
            Some(text) if text.len() <= size as usize => reply.data(text.as_bytes()),
            Some(_) => reply.error(Errno::ERANGE),
            None => reply.error(Errno::ENODATA),
        }
    }

    /// No ioctls: answered at once and quietly, as for a file without them
    /// (Python's `open()` asks whether every file is a terminal).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        // A size query gets the list's length, a read the names, each NUL-ended.
        let names = format!("{STATS_XATTR}\0");
        match size {
            0 => reply.size(names.len() as u32),
            n if names.len() <= n as usize => reply.data(names.as_bytes()),
            _ => reply.error(Errno::ERANGE),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = match self.nodes.list(ino.0) {
            Ok(listed) => listed,
            Err(err) => return reply.error(errno(err)),
        };
        let dots = [
            (ino.0, Kind::Dir, OsStr::new(".").to_os_string()),
            (ino.0, Kind::Dir, OsStr::new("..").to_os_string()),
        ];
        let all = dots.into_iter().chain(listed);
        for (i, (child, kind, name)) in all.enumerate().skip(offset as usize) {
            let kind = match kind {
                Kind::Dir => FileType::Directory,
                Kind::Plain | Kind::Archive => FileType::RegularFile,
            };
            if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }
}

/// The real path of inode `ino`, for messages.
fn node_name(nodes: &Nodes, ino: INodeNo) -> String {
    nodes.get(ino.0).map_or_else(
        || format!("inode {}", ino.0),
        |n| n.real.display().to_string(),
    )
}

fn watch_dir(watcher: &Watcher, node: &Node, ino: u64) {
    if let Err(e) = watcher.watch(&node.real, ino) {
        log::warn!(
            "{}: cannot watch for changes ({e}); they show after the attribute timeout",
            node.real.display()
        );
    }
}
