//! Packing whole files whose source or output fails part way.

use super::*;

/// A safetensors file of one U8 tensor of `n` patterned bytes.
fn one_tensor_file(n: usize) -> Vec<u8> {
    let header = format!(r#"{{"a":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend((0..n).map(|i| (i * 7 % 251) as u8));
    file
}

/// Chunks of 4 KiB, so that a small file makes many batches.
fn small_chunks() -> PackOptions {
    PackOptions {
        chunk_size: 4096,
        adapt_chunks: false,
        ..PackOptions::default()
    }
}

/// A source cut short while it is packed fails the packing with its
/// path, on one thread and on two, whichever task's read meets the end
/// (a batch's, or a representative's read ahead), and nothing waits for
/// the chunks that could not be read.
#[test]
fn a_source_cut_short_while_packed_fails_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let n = 64 << 10;
    let file = one_tensor_file(n);
    let src = dir.path().join("m.safetensors");
    let tmp = dir.path().join("out.brv");
    let opts = small_chunks();
    for (threads, kept) in [(1, 3), (1, 10), (2, 3), (2, 10), (2, 15)] {
        std::fs::write(&src, &file).unwrap();
        let bases = Bases::open(&opts.bases, &tmp).unwrap();
        let input = Input::open(&src, Chunking::of(&opts), bases).unwrap();
        let cut = file.len() - n + kept * 4096;
        let f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
        f.set_len(cut as u64).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
        let packed = pool
            .unwrap()
            .install(|| write_archive(&input, &tmp, &opts, &|_| {}));
        let err = packed.expect_err("a source cut short").to_string();
        assert!(err.contains("m.safetensors"), "{threads} threads: {err}");
    }
}

/// A write that fails mid-pack (a full disk: `/dev/full` takes no
/// byte) ends packing with the output's path and the reason, on one
/// thread and on several, while chunks are still being packed.
#[test]
fn a_failing_write_ends_packing_with_the_outputs_path() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let file = one_tensor_file(256 << 10);
    let src = dir.path().join("m.safetensors");
    std::fs::write(&src, &file).unwrap();
    let full = Path::new("/dev/full");
    let opts = small_chunks();
    for threads in [1, 2, 3] {
        let bases = Bases::open(&opts.bases, full).unwrap();
        let input = Input::open(&src, Chunking::of(&opts), bases).unwrap();
        let reported = AtomicU64::new(0);
        let progress = |at: u64| reported.store(at, Ordering::Relaxed);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
        let packed = pool
            .unwrap()
            .install(|| write_archive(&input, full, &opts, &progress));
        let err = packed.expect_err("a full disk").to_string();
        assert!(
            err.contains("/dev/full") && err.contains("No space left"),
            "{threads} threads: {err}"
        );
        // It stopped at the first batch it could not write.
        assert!(
            reported.load(Ordering::Relaxed) < file.len() as u64,
            "{threads} threads"
        );
    }
}
