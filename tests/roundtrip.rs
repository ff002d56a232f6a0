//! Every safetensors file, including the format's odd corners, comes back bit for bit
//! through pack, read_at, unpack and verify.

mod common;

use brevis::archive::{self, Archive, PackOptions};
use common::*;
use proptest::prelude::*;
use std::path::Path;

fn pack(src: &Path, chunk_size: usize) -> std::path::PathBuf {
    let dst = src.with_extension("brv");
    let opts = PackOptions {
        chunk_size,
        ..PackOptions::default()
    };
    archive::pack_file(src, &dst, &opts, &|_| {}).unwrap();
    // Every record the search produced decoded back (none fell back to plain
    // literals, in this or any other pack of this process so far).
    assert_eq!(
        archive::literal_fallbacks(),
        0,
        "a record failed to decode back"
    );
    dst
}

/// Packs `bytes`, then checks read_at of the whole file, unpack and verify.
fn assert_round_trip(bytes: &[u8], chunk_size: usize) {
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "m.safetensors", bytes);
    let brv = pack(&src, chunk_size);
    let a = Archive::open(&brv).unwrap();
    assert_eq!(a.len(), bytes.len() as u64);
    let mut all = vec![0u8; bytes.len() + 10];
    assert_eq!(a.read_at(0, &mut all).unwrap(), bytes.len());
    assert!(all[..bytes.len()] == *bytes, "read_at differs");
    let out = dir.path().join("out.safetensors");
    archive::unpack_file(&a, &out, &|_| {}).unwrap();
    assert!(std::fs::read(&out).unwrap() == bytes, "unpack differs");
    archive::verify(&a, Some(&src), &|_| {}).unwrap();
}

#[test]
fn every_dtype_and_special_value_round_trips() {
    let file = build(&every_dtype(), &Extras::default());
    for chunk in [64, 1000, 1 << 20] {
        assert_round_trip(&file, chunk);
    }
}

#[test]
fn header_quirks_gaps_and_trailing_bytes_round_trip() {
    let extras = Extras {
        metadata: Some(r#"{"format":"pt","note":"é ünïcode"}"#.into()),
        pad: 13,
        gap: 5,
        trailing: noise(3, 777),
        reverse_keys: true,
    };
    let file = build(&every_dtype(), &extras);
    assert_round_trip(&file, 256);
    let only_header = build(
        &[],
        &Extras {
            metadata: Some("{}".into()),
            ..Extras::default()
        },
    );
    assert_round_trip(&only_header, 256);
}

#[test]
fn structured_tensors_round_trip_and_shrink() {
    let periodic: Vec<u8> = (0..4096u32)
        .flat_map(|i| ((i % 64) as f32).to_le_bytes())
        .collect();
    let upcast: Vec<u8> = noise(5, 8192)
        .chunks(2)
        .flat_map(|c| [0, 0, c[0], c[1] & 0x3f])
        .collect();
    let file = build(
        &[
            tensor("periodic", "F32", &[64, 64], periodic),
            tensor("upcast", "F32", &[4096], upcast),
            tensor("zeros", "F32", &[4096], vec![0; 16384]),
        ],
        &Extras::default(),
    );
    assert_round_trip(&file, 1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "s.safetensors", &file);
    let size = std::fs::metadata(pack(&src, 1 << 20)).unwrap().len();
    assert!(
        size * 3 < file.len() as u64,
        "{size} bytes for {}",
        file.len()
    );
}

#[test]
fn refuses_files_that_are_not_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("short", b"abc".to_vec()),
        ("text", b"hello world, not a checkpoint".to_vec()),
        ("json", {
            let mut v = 4u64.to_le_bytes().to_vec();
            v.extend(b"[1] ");
            v
        }),
    ] {
        let src = write_temp(dir.path(), name, &bytes);
        let dst = dir.path().join(format!("{name}.brv"));
        let err = archive::pack_file(&src, &dst, &PackOptions::default(), &|_| {}).unwrap_err();
        assert!(
            err.to_string().contains("not a valid safetensors file"),
            "{err}"
        );
        assert!(err.to_string().contains(name), "{err}");
        assert!(!dst.exists());
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
}

#[test]
fn corruption_is_reported_with_file_and_offset() {
    let (dir, _, brv) = sample_archive();
    let a = Archive::open(dir.path().join("m.brv")).unwrap();
    // Damage the middle of the largest record.
    let i = (0..a.chunks().len())
        .max_by_key(|&i| a.chunks()[i].rec_len)
        .unwrap();
    let at = a.record_offset(i) as usize + a.chunks()[i].rec_len as usize / 2;
    let mut bad = brv.clone();
    bad[at] ^= 0x5a;
    let path = write_temp(dir.path(), "bad.brv", &bad);
    let a = Archive::open(&path).unwrap();
    let start = a.chunk_range(i).start;
    let err = a.read_at(start, &mut [0u8; 16]).unwrap_err().to_string();
    assert!(
        err.contains("bad.brv") && err.contains("corrupt archive at byte"),
        "{err}"
    );
    assert!(archive::verify(&a, None, &|_| {}).is_err());
    let mut bad_index = brv.clone();
    let n = bad_index.len();
    bad_index[n - 40] ^= 1;
    let err = Archive::open(write_temp(dir.path(), "idx.brv", &bad_index))
        .err()
        .unwrap();
    assert!(err.to_string().contains("idx.brv"), "{err}");
}

#[test]
fn an_unmapped_archive_truncated_after_opening_gives_errors_not_signals() {
    let (dir, file, brv) = sample_archive();
    let path = write_temp(dir.path(), "t.brv", &brv);
    let a = Archive::open_unmapped(&path).unwrap();
    let mut all = vec![0u8; file.len()];
    a.read_at(0, &mut all).unwrap();
    assert!(all == file);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(brv.len() as u64 / 2)
        .unwrap();
    let err = a.read_at(0, &mut all).unwrap_err().to_string();
    assert!(err.contains("t.brv"), "{err}");
    assert!(err.contains("cannot read the record at byte"), "{err}");
    // unpack and verify read this way too: an error, never a signal, and no
    // output left behind.
    let out = dir.path().join("out.safetensors");
    assert!(archive::unpack_file(&a, &out, &|_| {}).is_err());
    assert!(!out.exists());
    assert!(archive::verify(&a, None, &|_| {}).is_err());
}

fn sample_archive() -> (tempfile::TempDir, Vec<u8>, Vec<u8>) {
    let file = build(
        &every_dtype(),
        &Extras {
            gap: 3,
            trailing: noise(1, 50),
            ..Extras::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "m.safetensors", &file);
    let brv = std::fs::read(pack(&src, 300)).unwrap();
    (dir, file, brv)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_ranges_read_the_original_bytes(start in 0usize..5000, len in 0usize..3000) {
        thread_local! {
            static FIXTURE: (tempfile::TempDir, Vec<u8>, Vec<u8>) = sample_archive();
        }
        FIXTURE.with(|(dir, file, _)| {
            let path = dir.path().join("m.brv");
            for a in [Archive::open(&path).unwrap(), Archive::open_unmapped(&path).unwrap()] {
                let start = start % file.len();
                let mut buf = vec![0u8; len];
                let n = a.read_at(start as u64, &mut buf).unwrap();
                let end = (start + len).min(file.len());
                prop_assert_eq!(n, end - start);
                prop_assert!(buf[..n] == file[start..end]);
            }
            Ok(())
        })?;
    }

    /// A damaged archive either fails with an error or yields exactly the original.
    #[test]
    fn damaged_archives_never_yield_wrong_bytes(flips in prop::collection::vec((any::<usize>(), 0u8..8), 1..4), cut in any::<Option<usize>>()) {
        thread_local! {
            static FIXTURE: (tempfile::TempDir, Vec<u8>, Vec<u8>) = sample_archive();
        }
        FIXTURE.with(|(dir, file, brv)| {
            let mut bad = brv.clone();
            for (at, bit) in &flips {
                let k = at % bad.len();
                bad[k] ^= 1 << bit;
            }
            if let Some(c) = cut {
                bad.truncate(c % bad.len());
            }
            let path = dir.path().join(format!("bad{:?}.brv", std::thread::current().id()));
            std::fs::write(&path, &bad).unwrap();
            for a in [Archive::open(&path), Archive::open_unmapped(&path)].into_iter().flatten() {
                let mut out = vec![0u8; a.len() as usize];
                if a.read_at(0, &mut out).is_ok() {
                    prop_assert!(out == *file, "wrong bytes returned without an error");
                }
                if archive::verify(&a, None, &|_| {}).is_ok() {
                    prop_assert_eq!(a.len() as usize, file.len());
                }
            }
            Ok(())
        })?;
    }
}

/// An archive whose two records were swapped along with their index entries
/// (index checksum recomputed) passes every chunk checksum, but is not the
/// original: unpack refuses it by its SHA-256 and writes nothing, as verify
/// does, and unpacks the original, on one thread (digest, then write) and on
/// two (side by side).
#[test]
fn unpack_refuses_consistently_swapped_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let t = |name, seed| tensor(name, "U8", &[4096], noise(seed, 4096));
    let src = write_temp(
        dir.path(),
        "m.safetensors",
        &build(&[t("a", 1), t("b", 2)], &Extras::default()),
    );
    let a = Archive::open(pack(&src, 4096)).unwrap();
    let (i, j) = (1, 2);
    assert_eq!(a.chunks()[i].src_len, a.chunks()[j].src_len);
    let mut index = a.index().clone();
    index.chunks.swap(i, j);
    let mut records: Vec<Vec<u8>> = (0..a.chunks().len())
        .map(|k| a.record(k).unwrap().into_owned())
        .collect();
    records.swap(i, j);
    // The records may need a newer version than the index (a header of copies).
    let bytes = archive::assemble(records.iter().map(Vec::as_slice), &index, a.version());
    let swapped = write_temp(dir.path(), "swapped.brv", &bytes);
    let swapped = Archive::open(&swapped).unwrap();
    let out = dir.path().join("out.safetensors");
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads);
        pool.build().unwrap().install(|| {
            let err = archive::unpack_file(&swapped, &out, &|_| {}).unwrap_err();
            assert!(err.to_string().contains("SHA-256"), "{threads}: {err}");
            assert!(!out.exists(), "unpack left its output");
            let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert_eq!(left.len(), 3, "unpack left a temporary: {left:?}");
            let err = archive::verify(&swapped, None, &|_| {}).unwrap_err();
            assert!(err.to_string().contains("SHA-256"), "{threads}: {err}");
            // The same chunks in their order pass, digest and all.
            let good = dir.path().join("good.safetensors");
            archive::unpack_file(&a, &good, &|_| {}).unwrap();
            assert!(std::fs::read(&good).unwrap() == std::fs::read(&src).unwrap());
            std::fs::remove_file(&good).unwrap();
        });
    }
}

/// Packing gives the same bytes on one, two and three threads (batches of
/// different sizes, chunks packed in whatever order their tasks finish), with
/// chunks re-fit from programs searched on other chunks of their tensor, also
/// where a tensor's data changes kind part-way (its first chunks nearly
/// constant), and reports its progress in order up to the whole file;
/// structured tensors keep their small programs in
/// every chunk (an arange's chunks start at different values, so one chunk's
/// Scan does not fit the others and they are searched), and the archive is
/// within 1% of searching every chunk.
#[test]
fn packing_with_refits_is_deterministic_and_keeps_structure() {
    let dir = tempfile::tempdir().unwrap();
    let weights: Vec<u8> = noise(3, 4 * 8192)
        .chunks(2)
        .flat_map(|c| [c[0], 0x3c | (c[1] & 0x81)])
        .collect();
    let arange: Vec<u8> = (0..8192i64).flat_map(|i| (7 * i).to_le_bytes()).collect();
    let rows: Vec<u8> = noise(4, 256).repeat(64);
    let mut uneven = vec![0u8; 4 * 4096];
    uneven[100] = 1;
    uneven.extend(&weights[..8 * 4096]);
    // BF16 values stored as F32: their searches run on two threads at once.
    let upcast: Vec<u8> = (weights[..4 * 4096].chunks(2))
        .flat_map(|bf16| [0, 0, bf16[0], bf16[1]])
        .collect();
    let file = build(
        &[
            tensor("weights", "BF16", &[16384], weights.clone()),
            tensor("uneven", "BF16", &[24576], uneven),
            tensor("arange", "I64", &[8192], arange.clone()),
            tensor("rows", "U8", &[64, 256], rows.clone()),
            tensor("upcast", "F32", &[8192], upcast.clone()),
        ],
        &Extras::default(),
    );
    let src = write_temp(dir.path(), "m.safetensors", &file);
    let pack_with = |threads: usize, refit: bool, name: &str| {
        let mut opts = PackOptions {
            chunk_size: 4096,
            adapt_chunks: false,
            ..PackOptions::default()
        };
        if !refit {
            opts.synth.refit_slack = None;
        }
        let dst = dir.path().join(name);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let seen = std::sync::Mutex::new(Vec::new());
        let progress = |n| seen.lock().unwrap().push(n);
        pool.install(|| archive::pack_file(&src, &dst, &opts, &progress))
            .unwrap();
        let seen = seen.into_inner().unwrap();
        assert!(seen.len() > 2, "{threads} threads, progress {seen:?}");
        assert!(seen.is_sorted() && seen.last() == Some(&(file.len() as u64)));
        std::fs::read(dst).unwrap()
    };
    let one = pack_with(1, true, "1.brv");
    let two = pack_with(2, true, "2.brv");
    assert!(one == two, "-j1 and -j2 archives differ");
    assert!(
        one == pack_with(3, true, "3.brv"),
        "-j1 and -j3 archives differ"
    );
    let searched = pack_with(2, false, "searched.brv");
    assert!(
        one.len() * 100 <= searched.len() * 101,
        "re-fit {} bytes, searched {}",
        one.len(),
        searched.len()
    );
    let a = Archive::open(dir.path().join("1.brv")).unwrap();
    let mut all = vec![0u8; file.len()];
    a.read_at(0, &mut all).unwrap();
    assert!(all == file);
    // Every chunk of the arange is a few bytes, not a literal.
    let header_len = file.len() - weights.len() - arange.len() - rows.len() - upcast.len();
    let start = (header_len + weights.len()) as u64;
    for i in (0..a.chunks().len()).filter(|&i| {
        let r = a.chunk_range(i);
        r.start >= start && r.end <= start + arange.len() as u64
    }) {
        assert!(
            a.chunks()[i].rec_len < 64,
            "arange chunk {i}: {} bytes",
            a.chunks()[i].rec_len
        );
    }
    assert_eq!(archive::literal_fallbacks(), 0);
}

/// A 2 MB archive of constant chunks that declares 8 TiB: unpack refuses it
/// up front for lack of space, instead of writing until the disk is full.
#[test]
fn unpack_checks_the_declared_size_against_free_space() {
    let dir = tempfile::tempdir().unwrap();
    let chunk = archive::MAX_CHUNK_BYTES;
    let count = 1u64 << 17;
    let zeros = vec![0u8; chunk as usize];
    let entry = archive::ChunkEntry {
        layout: brevis::safetensors::Layout::Bytes,
        src_len: chunk,
        rec_len: 2,
        checksum: twox_hash::XxHash3_64::oneshot(&zeros),
        base: None,
    };
    let index = archive::Index {
        source_len: chunk * count,
        sha256: [0; 32],
        chunk_size: chunk,
        bases: Vec::new(),
        rows: Vec::new(),
        tables: Vec::new(),
        chunks: vec![entry; count as usize],
    };
    let const_zero: &[u8] = &[1, 0];
    let bytes = archive::assemble(
        std::iter::repeat_n(const_zero, count as usize),
        &index,
        index.version(),
    );
    assert!(bytes.len() < 3 << 20);
    let bomb = write_temp(dir.path(), "bomb.brv", &bytes);
    let a = Archive::open(&bomb).unwrap();
    assert_eq!(a.len(), 8 << 40);
    // A chunk of it decodes (the archive is valid): it is only too large.
    let mut first = vec![1u8; 4096];
    a.read_at(0, &mut first).unwrap();
    assert!(first.iter().all(|&b| b == 0));
    let out = dir.path().join("out.safetensors");
    let err = archive::unpack_file(&a, &out, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs 8796093022208 bytes"), "{err}");
    assert!(!out.exists());
}

/// Unpacking on two threads writes each batch while it decodes the next: it
/// gives the original, reports progress in order, and a damaged chunk in the
/// last batch fails it with the archive's name, leaving no output.
#[test]
fn unpack_on_two_threads_checks_every_batch() {
    let dir = tempfile::tempdir().unwrap();
    let len: usize = 5 << 20;
    let file = build(
        &[tensor("a", "U8", &[len as u64], noise(5, len))],
        &Extras::default(),
    );
    let src = write_temp(dir.path(), "m.safetensors", &file);
    let brv = pack(&src, 1 << 16);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let a = Archive::open(&brv).unwrap();
    let out = dir.path().join("out.safetensors");
    let seen = std::sync::Mutex::new(Vec::new());
    let progress = |n| seen.lock().unwrap().push(n);
    pool.install(|| archive::unpack_file(&a, &out, &progress))
        .unwrap();
    assert!(std::fs::read(&out).unwrap() == file);
    let seen = seen.into_inner().unwrap();
    assert!(seen.len() > 2, "one batch only: {seen:?}");
    assert!(seen.is_sorted() && seen.last() == Some(&(file.len() as u64)));

    let i = a.chunks().len() - 1;
    let mut bad = std::fs::read(&brv).unwrap();
    bad[a.record_offset(i) as usize + a.chunks()[i].rec_len as usize / 2] ^= 0x5a;
    let b = Archive::open(write_temp(dir.path(), "bad.brv", &bad)).unwrap();
    let out = dir.path().join("bad.safetensors");
    let err = pool.install(|| archive::unpack_file(&b, &out, &|_| {}));
    let err = err.unwrap_err().to_string();
    assert!(err.contains("bad.brv"), "{err}");
    assert!(!out.exists());
}
