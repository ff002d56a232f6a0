//! The mounted tree: which real entries of the archives directory the mount
//! shows, under which names, and the inode numbers it gives them.
//!
//! An inode stands for one version of one real file: its path plus the
//! version its backend gives it (device, inode, size and mtime of a local
//! file; the ETag of an object). An archive replaced while mounted is a
//! new version and gets a new inode, so the kernel never mixes pages of the old
//! and new archive in one file, and open handles keep reading the old one.

#![forbid(unsafe_code)]

use super::backend::{Backend, Meta, ARCHIVE_SUFFIX};
use crate::archive::Archive;
use crate::atomic::is_temp_name;
use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

pub const PRESENTED_SUFFIX: &str = ".safetensors";
pub const ROOT: u64 = 1;

/// Inodes listed but never looked up that are kept, the newest: a listing
/// gives the kernel no reference, so it never forgets them; beyond this
/// many the oldest are dropped (and numbered anew if listed again).
const LISTED_KEPT: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    /// A file shown as it is (config.json, tokenizers, READMEs).
    Plain,
    /// An archive shown as the original file it holds.
    Archive,
}

/// What the mount knows of one inode.
#[derive(Clone)]
pub struct Node {
    pub real: PathBuf,
    pub kind: Kind,
    pub meta: Meta,
    /// Open for `Kind::Archive` nodes that were looked up.
    pub archive: Option<Arc<Archive>>,
    /// For a directory with an identity: it and those it is shown inside.
    lineage: Option<Arc<Lineage>>,
}

/// A directory and the directories it is shown inside, up to the root, by
/// [`Meta::dir_id`]. Through a symbolic link a directory can be shown
/// inside itself (`x/up -> ..`), which would make the tree endless: such an
/// entry is left out, as `find -L` leaves out a loop.
struct Lineage {
    id: (u64, u64),
    parent: Option<Arc<Lineage>>,
}

impl Lineage {
    fn holds(&self, id: (u64, u64)) -> bool {
        std::iter::successors(Some(self), |l| l.parent.as_deref()).any(|l| l.id == id)
    }

    fn of(id: Option<(u64, u64)>, parent: Option<Arc<Lineage>>) -> Option<Arc<Lineage>> {
        id.map(|id| Arc::new(Lineage { id, parent }))
    }
}

impl Node {
    /// The node of this directory's entry `real`, of `meta`, if it is shown
    /// as `wanted`: archives must be files; plain entries are files or
    /// directories (the backend follows symbolic links and leaves out other
    /// kinds), but not this directory or one it is inside.
    fn child(&self, real: PathBuf, meta: Meta, wanted: Kind) -> Option<Node> {
        let kind = match (wanted, meta.is_dir) {
            (Kind::Archive | Kind::Plain, false) => wanted,
            (Kind::Plain, true) => Kind::Dir,
            _ => return None,
        };
        let id = meta.dir_id.filter(|_| kind == Kind::Dir);
        if id.is_some_and(|id| self.lineage.as_ref().is_some_and(|l| l.holds(id))) {
            return None;
        }
        Some(Node {
            real,
            kind,
            lineage: Lineage::of(id, self.lineage.clone()),
            meta,
            archive: None,
        })
    }

    /// Size of the file as the mount presents it.
    pub fn size(&self) -> u64 {
        match &self.archive {
            Some(archive) => archive.len(),
            None => self.meta.len,
        }
    }
}

/// The name under which a real directory entry is shown, or `None` if hidden.
pub fn presented_name(real: &OsStr) -> Option<OsString> {
    let name = real.to_str();
    if name.is_some_and(is_temp_name) {
        return None;
    }
    match real.as_bytes().strip_suffix(ARCHIVE_SUFFIX.as_bytes()) {
        Some(stem) => {
            let mut shown = OsStr::from_bytes(stem).to_os_string();
            shown.push(PRESENTED_SUFFIX);
            Some(shown)
        }
        None => Some(real.to_os_string()),
    }
}

/// The real entries that may be shown under `presented`, the preferred first:
/// an archive wins over a plain file of the presented name.
fn real_candidates(presented: &OsStr) -> Vec<(OsString, Kind)> {
    let bytes = presented.as_bytes();
    let hidden = presented.to_str().is_some_and(is_temp_name)
        || bytes.ends_with(ARCHIVE_SUFFIX.as_bytes())
        || bytes.contains(&b'/');
    if hidden {
        return Vec::new();
    }
    let mut candidates = Vec::new();
    if let Some(stem) = bytes.strip_suffix(PRESENTED_SUFFIX.as_bytes()) {
        let mut archive = OsStr::from_bytes(stem).to_os_string();
        archive.push(ARCHIVE_SUFFIX);
        candidates.push((archive, Kind::Archive));
    }
    candidates.push((presented.to_os_string(), Kind::Plain));
    candidates
}

/// Identity of one version of a real entry.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    real: PathBuf,
    version: String,
}

impl Key {
    fn of(real: &Path, meta: &Meta) -> Key {
        Key {
            real: real.to_path_buf(),
            version: meta.version.clone(),
        }
    }
}

/// The inodes the kernel knows, found by number or by real entry.
pub struct Nodes {
    backend: Box<dyn Backend>,
    state: Mutex<State>,
    /// The one entry of the root directory to show (a single archive
    /// mounted alone), if not all.
    only: Option<OsString>,
    /// Inodes only listed that are kept (see [`LISTED_KEPT`]).
    listed_kept: usize,
}

struct State {
    by_ino: HashMap<u64, Entry>,
    by_key: HashMap<Key, u64>,
    next_ino: u64,
    /// Inodes added by listings, oldest first: all that no lookup
    /// references are among them.
    listed: VecDeque<u64>,
}

impl State {
    /// Drops inode `ino` if the kernel holds no reference to it.
    fn drop_unreferenced(&mut self, ino: u64) {
        let unreferenced = self.by_ino.get(&ino).is_some_and(|e| e.lookups == 0);
        if unreferenced && ino != ROOT {
            let entry = self.by_ino.remove(&ino).expect("present");
            self.by_key.remove(&entry.key);
        }
    }
}

struct Entry {
    node: Node,
    key: Key,
    /// Lookups the kernel has not yet forgotten.
    lookups: u64,
}

/// Why a name could not be resolved.
#[derive(Debug)]
pub enum LookupError {
    NotFound,
    NotADirectory,
    /// The archive exists but cannot be opened; the message names it and why.
    BadArchive(String),
}

impl Nodes {
    /// The tree of `root` in `backend`, which must be a directory; with
    /// `only`, its root shows that entry alone.
    pub fn new(
        backend: Box<dyn Backend>,
        root: &Path,
        only: Option<OsString>,
    ) -> std::io::Result<Nodes> {
        let meta = backend
            .stat(root)
            .filter(|m| m.is_dir)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"))?;
        let key = Key::of(root, &meta);
        let node = Node {
            real: root.to_path_buf(),
            kind: Kind::Dir,
            lineage: Lineage::of(meta.dir_id, None),
            meta,
            archive: None,
        };
        let entry = Entry {
            node,
            key: key.clone(),
            // The root is never forgotten.
            lookups: 1,
        };
        Ok(Nodes {
            backend,
            state: Mutex::new(State {
                by_ino: HashMap::from([(ROOT, entry)]),
                by_key: HashMap::from([(key, ROOT)]),
                next_ino: ROOT + 1,
                listed: VecDeque::new(),
            }),
            only,
            listed_kept: LISTED_KEPT,
        })
    }

    /// Whether the entry `real_name` of directory `dir` is shown.
    fn shows(&self, dir: u64, real_name: &OsStr) -> bool {
        dir != ROOT || self.only.as_deref().is_none_or(|only| only == real_name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the maps consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, ino: u64) -> Option<Node> {
        self.lock().by_ino.get(&ino).map(|e| e.node.clone())
    }

    /// Resolves `name` in directory `parent` and counts one kernel lookup of the
    /// inode returned.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<(u64, Node), LookupError> {
        let dir = self.get(parent).ok_or(LookupError::NotFound)?;
        if dir.kind != Kind::Dir {
            return Err(LookupError::NotADirectory);
        }
        for (real_name, kind) in real_candidates(name) {
            if !self.shows(parent, &real_name) {
                continue;
            }
            let real = dir.real.join(&real_name);
            let Some(mut node) =
                (self.backend.stat(&real)).and_then(|m| self.entry_node(&dir, real, m, kind))
            else {
                continue;
            };
            let key = Key::of(&node.real, &node.meta);
            if node.kind == Kind::Archive {
                node.archive = Some(self.open_archive(&key, &node.meta)?);
            }
            return Ok(self.insert(key, node, 1));
        }
        Err(LookupError::NotFound)
    }

    /// Lists directory `ino` as the mount shows it: (inode, kind, name), sorted by
    /// name. Entries that vanish while listing are left out.
    pub fn list(&self, ino: u64) -> Result<Vec<(u64, Kind, OsString)>, LookupError> {
        let dir = self.get(ino).ok_or(LookupError::NotFound)?;
        if dir.kind != Kind::Dir {
            return Err(LookupError::NotADirectory);
        }
        let entries = match (&self.only, ino) {
            // One entry shown: asked for alone (a web server cannot list).
            (Some(only), ROOT) => {
                let meta = self.backend.stat(&dir.real.join(only));
                meta.map(|m| vec![(only.clone(), m)]).unwrap_or_default()
            }
            _ => self
                .backend
                .list(&dir.real)
                .map_err(|_| LookupError::NotFound)?,
        };
        let mut shown: HashMap<OsString, Node> = HashMap::new();
        for (real_name, meta) in entries.into_iter().filter(|e| self.shows(ino, &e.0)) {
            let Some(name) = presented_name(&real_name) else {
                continue;
            };
            let renamed = name.as_bytes() != real_name.as_bytes();
            let wanted = if renamed { Kind::Archive } else { Kind::Plain };
            let Some(node) = self.entry_node(&dir, dir.real.join(&real_name), meta, wanted) else {
                continue;
            };
            // An archive wins over a file of its presented name, as in `lookup`.
            if renamed || !shown.contains_key(&name) {
                shown.insert(name, node);
            }
        }
        let mut listed: Vec<_> = shown
            .into_iter()
            .map(|(name, node)| {
                let kind = node.kind;
                let key = Key::of(&node.real, &node.meta);
                (self.insert(key, node, 0).0, kind, name)
            })
            .collect();
        listed.sort_by(|a, b| a.2.cmp(&b.2));
        Ok(listed)
    }

    /// The node of `dir`'s entry `real`, of `meta`, if shown as `wanted`
    /// (see [`Node::child`]); a file that links to an archive is shown as
    /// the archive's presented file whatever its name (a snapshot's
    /// `model.safetensors -> ../../blobs/1a2b.brv`), not as its records.
    fn entry_node(&self, dir: &Node, real: PathBuf, meta: Meta, wanted: Kind) -> Option<Node> {
        let linked = wanted == Kind::Plain && !meta.is_dir && self.backend.links_to_archive(&real);
        let wanted = if linked { Kind::Archive } else { wanted };
        dir.child(real, meta, wanted)
    }

    /// The kernel forgot `count` lookups of `ino`; at zero the node is dropped.
    pub fn forget(&self, ino: u64, count: u64) {
        let mut state = self.lock();
        let Some(entry) = state.by_ino.get_mut(&ino) else {
            return;
        };
        entry.lookups = entry.lookups.saturating_sub(count);
        state.drop_unreferenced(ino);
    }

    /// Number of inodes held.
    pub fn len(&self) -> usize {
        self.lock().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The backend the tree is read from.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The archive behind a known version of a file, or newly opened.
    fn open_archive(&self, key: &Key, meta: &Meta) -> Result<Arc<Archive>, LookupError> {
        let known = {
            let state = self.lock();
            let ino = state.by_key.get(key);
            ino.and_then(|ino| state.by_ino[ino].node.archive.clone())
        };
        match known {
            Some(archive) => Ok(archive),
            None => (self.backend.open_archive(&key.real, meta))
                .map(Arc::new)
                .map_err(|e| LookupError::BadArchive(e.to_string())),
        }
    }

    /// Returns the inode of `node`'s version (`key`), adding it if new, and
    /// counts `lookups` more kernel references to it.
    fn insert(&self, key: Key, node: Node, lookups: u64) -> (u64, Node) {
        let mut state = self.lock();
        if let Some(&ino) = state.by_key.get(&key) {
            let entry = state.by_ino.get_mut(&ino).expect("maps agree");
            entry.lookups += lookups;
            if entry.node.archive.is_none() {
                entry.node.archive = node.archive;
            }
            return (ino, entry.node.clone());
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        state.by_key.insert(key.clone(), ino);
        let entry = Entry {
            node: node.clone(),
            key,
            lookups,
        };
        state.by_ino.insert(ino, entry);
        if lookups == 0 {
            state.listed.push_back(ino);
            while state.listed.len() > self.listed_kept {
                let oldest = state.listed.pop_front().expect("more than kept");
                state.drop_unreferenced(oldest);
            }
        }
        (ino, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(root: &Path) -> Box<dyn Backend> {
        Box::new(super::super::backend::Local {
            root: root.to_path_buf(),
        })
    }

    #[test]
    fn names_map_both_ways() {
        let shown = |s: &str| presented_name(OsStr::new(s)).map(|n| n.into_string().unwrap());
        assert_eq!(shown("model.brv").as_deref(), Some("model.safetensors"));
        assert_eq!(shown("config.json").as_deref(), Some("config.json"));
        assert_eq!(shown(".model.brv.tmp123"), None);
        let real = |s: &str| real_candidates(OsStr::new(s));
        assert_eq!(
            real("model.safetensors"),
            vec![
                ("model.brv".into(), Kind::Archive),
                ("model.safetensors".into(), Kind::Plain)
            ]
        );
        assert!(
            real("model.brv").is_empty(),
            "archives are only shown renamed"
        );
        assert!(real(".model.brv.tmp99").is_empty());
        assert_eq!(real("a.json"), vec![("a.json".into(), Kind::Plain)]);
    }

    #[test]
    fn replaced_files_get_new_inodes_and_forgotten_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), b"one").unwrap();
        let nodes = Nodes::new(local(dir.path()), dir.path(), None).unwrap();
        let (first, node) = nodes.lookup(ROOT, OsStr::new("a.json")).unwrap();
        assert_eq!((node.kind, node.size()), (Kind::Plain, 3));
        let (again, _) = nodes.lookup(ROOT, OsStr::new("a.json")).unwrap();
        assert_eq!(first, again);
        std::fs::write(dir.path().join("a.json"), b"second").unwrap();
        let (second, node) = nodes.lookup(ROOT, OsStr::new("a.json")).unwrap();
        assert_ne!(first, second);
        assert_eq!(node.size(), 6);
        nodes.forget(first, 2);
        assert!(nodes.get(first).is_none());
        assert!(nodes.get(second).is_some());
        assert!(matches!(
            nodes.lookup(ROOT, OsStr::new("missing")),
            Err(LookupError::NotFound)
        ));
    }

    #[test]
    fn a_single_archive_is_shown_alone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("config.json"), b"{}").unwrap();
        std::fs::write(d.join("other.brv"), b"another archive").unwrap();
        std::fs::write(d.join("m.brv"), b"not really an archive").unwrap();
        let nodes = Nodes::new(local(d), d, Some("m.brv".into())).unwrap();
        let names: Vec<_> = nodes.list(ROOT).unwrap().into_iter().map(|e| e.2).collect();
        assert_eq!(names, ["m.safetensors"]);
        assert!(matches!(
            nodes.lookup(ROOT, OsStr::new("config.json")),
            Err(LookupError::NotFound)
        ));
        assert!(matches!(
            nodes.lookup(ROOT, OsStr::new("other.safetensors")),
            Err(LookupError::NotFound)
        ));
    }

    #[test]
    fn listing_hides_temporaries_and_prefers_archives() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("config.json"), b"{}").unwrap();
        std::fs::write(d.join(".m.brv.tmp42"), b"partial").unwrap();
        std::fs::write(d.join("m.brv"), b"not really an archive").unwrap();
        std::fs::write(d.join("m.safetensors"), b"x").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        let nodes = Nodes::new(local(d), d, None).unwrap();
        let listed: Vec<_> = nodes
            .list(ROOT)
            .unwrap()
            .into_iter()
            .map(|(_, kind, name)| (kind, name.into_string().unwrap()))
            .collect();
        assert_eq!(
            listed,
            vec![
                (Kind::Plain, "config.json".to_string()),
                (Kind::Archive, "m.safetensors".to_string()),
                (Kind::Dir, "sub".to_string()),
            ]
        );
        match nodes.lookup(ROOT, OsStr::new("m.safetensors")) {
            Err(LookupError::BadArchive(msg)) => assert!(msg.contains("m.brv"), "{msg}"),
            _ => panic!("a broken archive must not resolve"),
        }
    }

    /// Every path shown under `ino`, each entry looked up as the kernel
    /// does; panics if there are more than `budget` (an endless tree).
    fn walk(nodes: &Nodes, ino: u64, at: &Path, budget: &mut usize) -> Vec<PathBuf> {
        let mut shown = Vec::new();
        for (_, _, name) in nodes.list(ino).unwrap() {
            *budget = budget.checked_sub(1).expect("a tree without end");
            let (child, node) = nodes.lookup(ino, &name).unwrap();
            shown.push(at.join(&name));
            if node.kind == Kind::Dir {
                shown.extend(walk(nodes, child, &at.join(&name), budget));
            }
        }
        shown
    }

    #[test]
    fn a_directory_linked_inside_itself_is_left_out() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("blobs")).unwrap();
        std::fs::create_dir_all(d.join("snapshots/main")).unwrap();
        std::fs::create_dir_all(d.join("x")).unwrap();
        std::fs::write(d.join("blobs/1a2b"), b"weights").unwrap();
        // As in a Hugging Face cache: files link to blobs, and a link to a
        // directory beside it is no loop.
        symlink(
            "../../blobs/1a2b",
            d.join("snapshots/main/model.safetensors"),
        )
        .unwrap();
        symlink("blobs", d.join("alias")).unwrap();
        symlink("..", d.join("x/a")).unwrap();
        symlink("..", d.join("x/b")).unwrap();
        symlink(".", d.join("x/here")).unwrap();
        let nodes = Nodes::new(local(d), d, None).unwrap();
        let mut shown = walk(&nodes, ROOT, Path::new(""), &mut 100);
        shown.sort();
        let expected = [
            "alias",
            "alias/1a2b",
            "blobs",
            "blobs/1a2b",
            "snapshots",
            "snapshots/main",
            "snapshots/main/model.safetensors",
            "x",
        ];
        assert_eq!(shown, expected.map(PathBuf::from));
        let main = nodes.lookup(ROOT, OsStr::new("snapshots")).unwrap().0;
        let main = nodes.lookup(main, OsStr::new("main")).unwrap().0;
        let (_, model) = nodes.lookup(main, OsStr::new("model.safetensors")).unwrap();
        assert_eq!((model.kind, model.size()), (Kind::Plain, 7));
        let x = nodes.lookup(ROOT, OsStr::new("x")).unwrap().0;
        assert!(matches!(
            nodes.lookup(x, OsStr::new("a")),
            Err(LookupError::NotFound)
        ));
    }

    #[test]
    fn a_file_linked_to_an_archive_shows_as_the_archive() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("1a2b.brv"), b"not really an archive").unwrap();
        symlink("1a2b.brv", d.join("model.safetensors")).unwrap();
        let nodes = Nodes::new(local(d), d, None).unwrap();
        let listed: Vec<_> = (nodes.list(ROOT).unwrap().into_iter())
            .map(|(_, kind, name)| (kind, name.into_string().unwrap()))
            .collect();
        let archive = |name: &str| (Kind::Archive, name.to_string());
        assert_eq!(
            listed,
            [archive("1a2b.safetensors"), archive("model.safetensors")]
        );
        // Opened as an archive, not read as one's records.
        assert!(matches!(
            nodes.lookup(ROOT, OsStr::new("model.safetensors")),
            Err(LookupError::BadArchive(_))
        ));
    }

    #[test]
    fn inodes_only_listed_are_kept_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("{i}.json")), b"{}").unwrap();
        }
        let mut nodes = Nodes::new(local(dir.path()), dir.path(), None).unwrap();
        nodes.listed_kept = 4;
        let (looked_up, _) = nodes.lookup(ROOT, OsStr::new("0.json")).unwrap();
        for _ in 0..3 {
            assert_eq!(nodes.list(ROOT).unwrap().len(), 10);
        }
        // The root, the one looked up, and the newest listed.
        assert!(nodes.len() <= 2 + 4, "{} inodes", nodes.len());
        assert!(nodes.get(looked_up).is_some(), "a looked-up inode stays");
        nodes.forget(looked_up, 1);
        assert!(nodes.len() <= 1 + 4, "{} inodes", nodes.len());
    }
}
