//! Tensors whose rows are rows of a base tensor (format version 9): a
//! fine-tune that extends its vocabulary, and one that prunes and reorders
//! it, store their embeddings as row maps of their base's, read back
//! exactly by every path, for a small part of their size.

mod common;

use brevis::archive::{pack_file, unpack_file, verify, Archive, BaseSources, PackOptions};
use brevis::safetensors::TensorInfo;
use common::vocabulary;
use std::path::{Path, PathBuf};

const VOCAB: usize = 2048;
const HIDDEN: usize = 512;
const ADDED: usize = 200;
const KEPT: usize = 1500;

/// Packs `src` to `dst` against `base`, if given.
fn pack(src: &Path, dst: &Path, base: Option<&Path>) -> Archive {
    let opts = PackOptions {
        bases: BaseSources {
            named: base.map(Path::to_path_buf).into_iter().collect(),
            ..BaseSources::default()
        },
        ..PackOptions::default()
    };
    pack_file(src, dst, &opts, &|_| {}).unwrap();
    Archive::open(dst).unwrap()
}

/// A folder with the base, its fine-tunes written out and the base packed.
struct Pairs {
    dir: tempfile::TempDir,
}

impl Pairs {
    fn new() -> Pairs {
        let dir = tempfile::tempdir().unwrap();
        let v = vocabulary(VOCAB, HIDDEN, ADDED, KEPT);
        for (name, bytes) in [
            ("base", &v.base),
            ("extended", &v.extended),
            ("pruned", &v.pruned),
        ] {
            std::fs::write(dir.path().join(format!("{name}.safetensors")), bytes).unwrap();
        }
        let pairs = Pairs { dir };
        pack(&pairs.src("base"), &pairs.brv("base"), None);
        pairs
    }

    fn src(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.safetensors"))
    }

    fn brv(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.brv"))
    }

    /// `name` packed against the base, checked to decode to its original
    /// by unpacking, verifying and reading at offsets.
    fn packed(&self, name: &str) -> Archive {
        let archive = pack(&self.src(name), &self.brv(name), Some(&self.brv("base")));
        let original = std::fs::read(self.src(name)).unwrap();
        let out = self.dir.path().join(format!("{name}.unpacked"));
        unpack_file(&archive, &out, &|_| {}).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == original,
            "{name} unpacks otherwise"
        );
        verify(&archive, Some(&self.src(name)), &|_| {}).unwrap();
        let mut some = vec![0u8; 5000];
        let at = original.len() as u64 / 3;
        archive.read_at(at, &mut some).unwrap();
        assert!(some[..] == original[at as usize..at as usize + 5000]);
        archive
    }
}

/// The bytes the records of `t`'s chunks take.
fn records_of(archive: &Archive, t: &TensorInfo) -> u64 {
    let chunks = archive.chunk_at(t.start)..=archive.chunk_at(t.end - 1);
    (archive.chunks()[chunks].iter()).map(|c| c.rec_len).sum()
}

fn tensors(archive: &Archive) -> Vec<TensorInfo> {
    archive.source_layout().unwrap().tensors
}

#[test]
fn an_extended_vocabulary_stores_its_old_rows_as_references() {
    let pairs = Pairs::new();
    let archive = pairs.packed("extended");
    // Row maps take version 9; the new rows' chunk may take a later operator.
    assert!(archive.version() >= 9, "version {}", archive.version());
    assert_eq!(archive.index().rows.len(), 2, "embed_tokens and lm_head");
    let new_rows = (ADDED * HIDDEN * 2) as u64;
    for t in tensors(&archive)
        .iter()
        .filter(|t| !t.name.contains("layers"))
    {
        let len = t.end - t.start;
        let stored = records_of(&archive, t);
        assert!(
            stored <= len / 100 + new_rows,
            "{}: {stored} bytes for {len}",
            t.name
        );
    }
    // The whole index, maps included, stays small.
    let index = archive.archive_len() - archive.chunks().iter().map(|c| c.rec_len).sum::<u64>();
    assert!(index < 4096, "{index}");
}

#[test]
fn a_pruned_and_reordered_vocabulary_stores_its_rows_as_references() {
    let pairs = Pairs::new();
    let archive = pairs.packed("pruned");
    assert_eq!(archive.version(), 9);
    let maps = &archive.index().rows;
    assert_eq!(maps.len(), 2);
    assert!(
        maps.iter().all(|m| m.runs().len() > KEPT / 2),
        "rows one by one"
    );
    // Against its size, the archive of the reordered rows (records, maps,
    // the layer unchanged) is under 1%.
    let size = std::fs::metadata(pairs.src("pruned")).unwrap().len();
    assert!(
        archive.archive_len() * 100 <= size,
        "{} of {size}",
        archive.archive_len()
    );
}

#[test]
fn a_missing_or_other_base_is_an_error_naming_it() {
    let pairs = Pairs::new();
    drop(pairs.packed("pruned"));
    std::fs::rename(pairs.brv("base"), pairs.brv("moved")).unwrap();
    let err = Archive::open(pairs.brv("pruned"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("pruned.brv") && err.contains("base.brv"),
        "{err}"
    );
    // Another archive in its place: refused before a byte is read.
    pack(&pairs.src("extended"), &pairs.brv("base"), None);
    let err = Archive::open(pairs.brv("pruned"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("holds another source"), "{err}");
}
