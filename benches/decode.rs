//! Decoding whole archives of the real corpus on one thread, in memory: every
//! chunk decoded and checked against its checksum, as the mount and unpack do,
//! without their file I/O. Counters are in bytes of the original file.
//!
//! The corpus comes from `BREVIS_CORPUS` (default ~/.cache/brevis-corpus, see
//! scripts/fetch-corpus.sh); archives are packed with the default options into
//! target/bench-archives, and packed again when their checkpoint or this
//! bench's build is newer than them (a change to the packer changes what
//! there is to decode). Set `BREVIS_BENCH_ARCHIVES` to a folder of archives
//! made another way (same names, NAME.brv) to compare them; those are packed
//! only if missing.

use brevis::{Archive, PackOptions};
use divan::counter::BytesCount;
use divan::Bencher;
use std::path::PathBuf;

const NAMES: [&str; 9] = [
    "minilm-f32",
    "minilm-bf16",
    "minilm-fp8",
    "minilm-upcast",
    "minilm-dequant4",
    "wordllama-f16",
    "criscross-f16",
    "silero-vad-f32",
    "fracast-int8",
];

fn main() {
    divan::main();
}

fn env_dir(var: &str, default: impl FnOnce() -> PathBuf) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(default)
}

/// The archive of corpus checkpoint `name`, packed first if missing or stale.
fn archive(name: &str) -> Archive {
    let corpus = env_dir("BREVIS_CORPUS", || {
        PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/brevis-corpus")
    });
    // Archives of our own making are packed again when outdated; given ones
    // only when missing.
    let (archives, ours) = match std::env::var_os("BREVIS_BENCH_ARCHIVES") {
        Some(dir) => (PathBuf::from(dir), false),
        None => (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-archives"),
            true,
        ),
    };
    let src = corpus.join(name).join("model.safetensors");
    let dst = archives.join(format!("{name}.brv"));
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    // An archive carries its source's modification time (as `pack` stamps
    // it): when it was written shows in its status change time.
    let packed = std::fs::metadata(&dst).ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        std::time::UNIX_EPOCH + std::time::Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
    });
    let build = std::env::current_exe().ok().and_then(|exe| modified(&exe));
    let outdated = packed < modified(&src) || packed < build;
    if packed.is_none() || (ours && outdated) {
        assert!(
            src.is_file(),
            "{} missing: run scripts/fetch-corpus.sh",
            src.display()
        );
        std::fs::create_dir_all(&archives).expect("archives folder");
        brevis::archive::pack_file(&src, &dst, &PackOptions::default(), &|_| ())
            .unwrap_or_else(|e| panic!("packing {name}: {e}"));
    }
    Archive::open(&dst).unwrap_or_else(|e| panic!("{e}"))
}

#[divan::bench(args = NAMES, sample_count = 20)]
fn decode_archive(bencher: Bencher, name: &str) {
    let archive = archive(name);
    let largest = archive.chunks().iter().map(|s| s.src_len).max();
    let mut buffer = vec![0u8; largest.unwrap_or(0) as usize];
    bencher
        .counter(BytesCount::new(archive.len()))
        .bench_local(|| {
            for i in 0..archive.chunks().len() {
                let out = &mut buffer[..archive.chunks()[i].src_len as usize];
                archive.decode_chunk_into(i, out).expect("decodes");
            }
        });
}
