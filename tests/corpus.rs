//! The real checkpoints of the corpus (scripts/fetch-corpus.sh) round-trip bit for
//! bit and verify.

mod common;

use brevis::archive::{self, Archive, PackOptions};

#[test]
fn corpus_checkpoints_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for src in common::corpus_files() {
        let name = src
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let brv = dir.path().join(format!("{name}.brv"));
        let summary = archive::pack_file(&src, &brv, &PackOptions::default(), &|_| {}).unwrap();
        assert_eq!(
            archive::literal_fallbacks(),
            0,
            "{name}: a record failed to decode back"
        );
        let a = Archive::open(&brv).unwrap();
        archive::verify(&a, Some(&src), &|_| {}).unwrap();
        let out = dir.path().join(format!("{name}.safetensors"));
        archive::unpack_file(&a, &out, &|_| {}).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(),
            "{name} differs"
        );
        eprintln!(
            "{name}: {} -> {} bytes",
            summary.bytes_in, summary.bytes_out
        );
        std::fs::remove_file(out).unwrap();
    }
}
