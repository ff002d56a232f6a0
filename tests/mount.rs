//! `brevis-mount` mounted for real (needs root or fusermount3, and /dev/fuse):
//! presented files equal their originals for whole reads, random ranges,
//! concurrent readers and the Python `safetensors` loaders; corruption, writes,
//! replacement, signals and memory behave as documented.

mod common;
#[path = "common/fuse.rs"]
mod fuse;

use common::*;
use fuse::*;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[test]
fn presented_tree_equals_the_originals() {
    let model = model();
    let m = mount(&model.archives, &[]);
    assert_eq!(files(&m.point), files(&model.originals));
    for rel in files(&model.originals) {
        let shown = std::fs::read(m.point.join(&rel)).unwrap();
        let original = std::fs::read(model.originals.join(&rel)).unwrap();
        assert!(shown == original, "{} differs", rel.display());
        let meta = std::fs::metadata(m.point.join(&rel)).unwrap();
        assert_eq!(meta.len(), original.len() as u64);
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o222,
            0
        );
    }
    // A real checkpoint of the corpus too.
    let real = corpus_file("fp8");
    let extra = tempfile::tempdir().unwrap();
    brevis(&["pack", "-q", s(&real), s(&extra.path().join("fp8.brv"))]);
    let m2 = mount(extra.path(), &[]);
    let shown = std::fs::read(m2.path("fp8.safetensors")).unwrap();
    assert!(
        shown == std::fs::read(&real).unwrap(),
        "corpus file differs"
    );
    assert!(
        m.log_text().is_empty() && m2.log_text().is_empty(),
        "{}",
        m.log_text()
    );
}

#[test]
fn random_ranges_equal_the_original() {
    let model = model();
    let m = mount(&model.archives, &["--cache-size", "1M"]);
    let original = std::fs::read(model.originals.join("model.safetensors")).unwrap();
    let file = open_direct(&m.path("model.safetensors"));
    let len = original.len() as u64;
    let chunk = CHUNK.parse::<u64>().unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for i in 0..3000 {
        let (offset, size) = match i % 4 {
            // Across a chunk boundary.
            0 => (
                (next(len / chunk) + 1) * chunk - next(300) - 1,
                1 + next(600),
            ),
            // Up to and past the end of the file.
            1 => (len - next(5000), 1 + next(10000)),
            // Large reads spanning several chunks.
            2 => (next(len), next(4 * chunk)),
            _ => (next(len), 1 + next(100)),
        };
        let got = read_range(&file, offset, size as usize).unwrap();
        let end = len.min(offset + size) as usize;
        assert!(
            got == original[offset as usize..end],
            "read {offset}+{size}"
        );
    }
    assert!(read_range(&file, len + 10, 100).unwrap().is_empty());
}

#[test]
fn a_read_across_thousands_of_tiny_tensors_equals_the_original() {
    // One read spans more chunks than a reply can be sent from without a copy.
    let dir = tempfile::tempdir().unwrap();
    let tensors: Vec<Tensor> = (0..3000)
        .map(|i| tensor(&format!("scale.{i:04}"), "F32", &[2], noise(i, 8)))
        .collect();
    let original = build(&tensors, &Extras::default());
    let src = write_temp(dir.path(), "tiny.safetensors", &original);
    let archives = dir.path().join("archives");
    std::fs::create_dir(&archives).unwrap();
    pack(&src, &archives.join("tiny.brv"));
    let m = mount(&archives, &[]);
    // The whole file, and exactly as many tensors as a reply is sent from
    // without a copy, and one more.
    let data = 8 + u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    for (offset, len) in [(0, original.len()), (data, 1023 * 8), (data, 1024 * 8)] {
        let path = m.path("tiny.safetensors");
        let (sent, read) = std::sync::mpsc::channel();
        std::thread::spawn(move || sent.send(read_range(&open_direct(&path), offset as u64, len)));
        let got = read
            .recv_timeout(Duration::from_secs(60))
            .expect("the read is answered")
            .unwrap();
        assert!(
            got == original[offset..offset + len],
            "{offset}+{len}: {}",
            m.log_text()
        );
    }
}

#[test]
fn a_symbolic_link_loop_ends_walks_and_file_links_read_as_their_targets() {
    use std::os::unix::fs::symlink;
    let model = model();
    let a = &model.archives;
    // As in a Hugging Face cache: a snapshot's files link to blobs.
    std::fs::create_dir_all(a.join("snapshots/main")).unwrap();
    std::fs::create_dir(a.join("blobs")).unwrap();
    let original = std::fs::read(model.originals.join("model.safetensors")).unwrap();
    std::fs::write(a.join("blobs/0a1b"), &original).unwrap();
    symlink("../../blobs/0a1b", a.join("snapshots/main/raw.safetensors")).unwrap();
    symlink("../../model.brv", a.join("snapshots/main/model.brv")).unwrap();
    symlink(
        "../../model.brv",
        a.join("snapshots/main/linked.safetensors"),
    )
    .unwrap();
    symlink("../../config.json", a.join("snapshots/main/config.json")).unwrap();
    // Two links back to the root: an endless tree, twice over at each level.
    std::fs::create_dir(a.join("x")).unwrap();
    symlink("..", a.join("x/a")).unwrap();
    symlink("..", a.join("x/b")).unwrap();
    let m = mount(a, &[]);
    let found = Command::new("timeout")
        .args(["60", "find", "."])
        .current_dir(&m.point)
        .output()
        .unwrap();
    assert!(found.status.success(), "find: {:?}", found.status);
    let mut listed: Vec<_> = String::from_utf8(found.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    listed.sort();
    let expected = [
        ".",
        "./blobs",
        "./blobs/0a1b",
        "./config.json",
        "./model.safetensors",
        "./shards",
        "./shards/part-2.safetensors",
        "./shards/tokenizer.json",
        "./snapshots",
        "./snapshots/main",
        "./snapshots/main/config.json",
        "./snapshots/main/linked.safetensors",
        "./snapshots/main/model.safetensors",
        "./snapshots/main/raw.safetensors",
        "./x",
    ];
    assert_eq!(listed, expected);
    for linked in ["model.safetensors", "raw.safetensors", "linked.safetensors"] {
        let shown = std::fs::read(m.path(&format!("snapshots/main/{linked}"))).unwrap();
        assert!(shown == original, "{linked} differs");
    }
    assert!(m.log_text().is_empty(), "{}", m.log_text());
}

/// A checkpoint of only the dtypes numpy has (no BF16 or FP8).
fn numpy_checkpoint() -> Vec<u8> {
    let n = 50_000u64;
    let floats: Vec<u8> = (0..n)
        .flat_map(|i| ((i as f32).cos() * 0.1).to_le_bytes())
        .collect();
    let halves: Vec<u8> = noise(4, 2 * n as usize);
    let ids: Vec<u8> = (0..n as i64).flat_map(|i| i.to_le_bytes()).collect();
    let tensors = [
        tensor("w", "F32", &[n / 100, 100], floats),
        tensor("h", "F16", &[n], halves),
        tensor("position_ids", "I64", &[1, n], ids),
        tensor("mask", "U8", &[7], vec![1, 0, 1, 1, 0, 0, 1]),
        tensor("scalar", "F64", &[], 2.5f64.to_le_bytes().to_vec()),
    ];
    build(&tensors, &Extras::default())
}

#[test]
fn python_safetensors_loads_through_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let originals = dir.path().join("model");
    std::fs::create_dir_all(originals.join("sub")).unwrap();
    std::fs::write(
        originals.join("sub/generated.safetensors"),
        numpy_checkpoint(),
    )
    .unwrap();
    std::fs::copy(
        corpus_file("wordllama"),
        originals.join("wordllama.safetensors"),
    )
    .unwrap();
    let archives = dir.path().join("archives");
    pack(&originals, &archives);
    let m = mount(&archives, &[]);
    let python = std::env::var("BREVIS_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench/load_through_mount.py");
    let out = Command::new(&python)
        .args([s(&script), s(&m.point), s(&originals)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{python} {}: {stdout}{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("checked 2 files"), "{stdout}");
    // Python's open() asks every file whether it is a terminal (an ioctl): a
    // default mount answers quietly, with nothing in its log.
    let presented = m.path("wordllama.safetensors");
    let open = format!("open({:?}, 'rb').read(8)", s(&presented));
    let status = Command::new(&python).args(["-c", &open]).status().unwrap();
    assert!(status.success());
    let log = m.log_text();
    assert!(!log.contains("Not Implemented"), "{log}");
    assert!(!log.contains("WARN"), "{log}");
}

#[test]
fn concurrent_threads_and_processes_read_correctly() {
    let model = model();
    let m = mount(&model.archives, &["--cache-size", "2M"]);
    let original = std::fs::read(model.originals.join("model.safetensors")).unwrap();
    let presented = m.path("model.safetensors");
    std::thread::scope(|scope| {
        for t in 0..8u64 {
            let (original, presented) = (&original, &presented);
            scope.spawn(move || {
                let file = open_direct(presented);
                let mut x = t + 1;
                for _ in 0..300 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let offset = (x >> 20) % original.len() as u64;
                    let size = (x >> 8) % 200_000;
                    let got = read_range(&file, offset, size as usize).unwrap();
                    let end = original.len().min((offset + size) as usize);
                    assert!(got == original[offset as usize..end], "thread {t}");
                }
            });
        }
    });
    let readers: Vec<Child> = (0..8)
        .map(|i| {
            let rel = ["model.safetensors", "shards/part-2.safetensors"][i % 2];
            Command::new("cmp")
                .arg(m.path(rel))
                .arg(model.originals.join(rel))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut reader in readers {
        assert!(
            reader.wait().unwrap().success(),
            "a cmp process found a difference"
        );
    }
}

/// The presented files read through memory maps, as safetensors, torch and
/// transformers read them: four threads fault each file in from their own
/// quarter on, wrapping around, and compare every byte with the original;
/// a fifth reads it with `read` meanwhile.
#[test]
fn memory_mapped_and_plain_reads_from_several_threads_equal_the_original() {
    let model = model();
    let m = mount(&model.archives, &["--cache-size", "2M"]);
    for rel in ["model.safetensors", "shards/part-2.safetensors"] {
        let original = std::fs::read(model.originals.join(rel)).unwrap();
        let file = File::open(m.path(rel)).unwrap();
        // SAFETY: a read-only map of a file of a read-only mount, which
        // nothing truncates while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        assert_eq!(map.len(), original.len());
        let piece = 64 << 10;
        let pieces = original.len().div_ceil(piece);
        assert!(pieces > 4, "{rel}: {} bytes", original.len());
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (map, original) = (&map, &original);
                scope.spawn(move || {
                    for k in 0..pieces {
                        let at = (k + t * pieces / 4) % pieces * piece;
                        let end = (at + piece).min(original.len());
                        assert!(
                            map[at..end] == original[at..end],
                            "{rel}: thread {t} at {at}"
                        );
                    }
                });
            }
            scope.spawn(|| assert!(std::fs::read(m.path(rel)).unwrap() == original, "{rel}"));
        });
    }
}

/// A file read once through a fresh mount has its chunks decoded about
/// once each: read in order with `read`, and through a map faulted in by two
/// threads from either half at once (as torch touches a tensor), whose reads
/// reach the server interleaved. Read-ahead may decode a few chunks that
/// the other stream has already had sent, not the whole file again.
#[test]
fn a_file_read_once_has_its_chunks_decoded_about_once() {
    let dir = tempfile::tempdir().unwrap();
    let (src, archives) = (dir.path().join("src"), dir.path().join("archives"));
    std::fs::create_dir_all(&src).unwrap();
    let original = checkpoint(5, 200);
    std::fs::write(src.join("big.safetensors"), &original).unwrap();
    pack(&src, &archives);
    let len = original.len() as u64;
    let decoded = |m: &Mounted| {
        let counters = stats(m);
        assert_eq!(counters["read_bytes"].as_u64(), Some(len));
        counters["decoded_bytes"].as_u64().unwrap()
    };

    let m = mount(&archives, &[]);
    let mut file = File::open(m.path("big.safetensors")).unwrap();
    let mut read = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        read.extend_from_slice(&buf[..n]);
    }
    assert!(read == original);
    let in_order = decoded(&m);
    assert!(in_order <= len + len / 50, "decoded {in_order} for {len}");
    drop(m);

    let m = mount(&archives, &[]);
    let file = File::open(m.path("big.safetensors")).unwrap();
    // SAFETY: a read-only map of a file of a read-only mount, which
    // nothing truncates while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let half = original.len() / 2;
    std::thread::scope(|scope| {
        for part in [0..half, half..original.len()] {
            let (map, original) = (&map, &original);
            scope.spawn(move || assert!(map[part.clone()] == original[part]));
        }
    });
    let two_streams = decoded(&m);
    assert!(
        two_streams <= len + len / 4,
        "decoded {two_streams} for {len}"
    );
    eprintln!("decoded in order {in_order}, two streams {two_streams}, of {len}");
}

#[test]
fn a_corrupt_chunk_fails_only_the_reads_that_touch_it() {
    let model = model();
    let path = model.archives.join("model.brv");
    let archive = brevis::Archive::open(&path).unwrap();
    let bad = archive.chunks().len() / 2;
    let at = archive.record_offset(bad) + archive.chunks()[bad].rec_len / 2;
    let bad_range = archive.chunk_range(bad);
    let before = archive.chunk_range(bad - 1);
    let after = archive.chunk_range(bad + 1);
    drop(archive);
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[at as usize..at as usize + 16] {
        *b ^= 0x5a;
    }
    std::fs::write(&path, bytes).unwrap();

    let m = mount(&model.archives, &[]);
    let original = std::fs::read(model.originals.join("model.safetensors")).unwrap();
    let file = open_direct(&m.path("model.safetensors"));
    for range in [&before, &after] {
        let got = read_range(&file, range.start, (range.end - range.start) as usize).unwrap();
        assert!(got == original[range.start as usize..range.end as usize]);
    }
    let touching = [
        (bad_range.start, 10),
        (bad_range.end - 1, 1),
        (before.end - 5, 10),
        (before.start, (after.end - before.start) as usize),
    ];
    for (offset, size) in touching {
        let err = read_range(&file, offset, size).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "read {offset}+{size}");
    }
    let log = m.log_text();
    assert!(
        log.contains(s(&path)) && log.contains("corrupt archive at byte"),
        "{log}"
    );
}

#[test]
fn writes_are_refused_as_read_only() {
    let model = model();
    let m = mount(&model.archives, &[]);
    let erofs = |result: std::io::Result<()>| {
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EROFS));
    };
    let presented = m.path("model.safetensors");
    erofs(File::options().write(true).open(&presented).map(drop));
    erofs(File::create(m.path("new.txt")).map(drop));
    erofs(std::fs::create_dir(m.path("newdir")));
    erofs(std::fs::remove_file(m.path("config.json")));
    erofs(std::fs::rename(&presented, m.path("moved.safetensors")));
    assert!(presented.is_file() && m.path("config.json").is_file());
    // `df` shows the filesystem holding the archives, with its free space, as
    // read-only mounts report theirs (not a full disk).
    let st = brevis::space::statvfs(&m.point).unwrap();
    assert!(st.f_blocks > 0 && st.f_bavail > 0);
    assert!(st.f_flag & libc::ST_RDONLY != 0);
}

#[test]
fn replaced_and_added_archives_show_without_mixing_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (checkpoint(10, 4), checkpoint(20, 6));
    let one_src = write_temp(dir.path(), "one.safetensors", &one);
    let two_src = write_temp(dir.path(), "two.safetensors", &two);
    let archives = dir.path().join("archives");
    std::fs::create_dir(&archives).unwrap();
    let target = archives.join("a.brv");
    pack(&one_src, &target);
    let m = mount(&archives, &[]);
    let presented = m.path("a.safetensors");
    let mut old = File::open(&presented).unwrap();
    let mut head = vec![0u8; 1000];
    old.read_exact(&mut head).unwrap();

    // `pack` writes a temporary file and renames it over the old archive.
    pack(&two_src, &target);
    pack(&one_src, &archives.join("b.brv"));
    let mut rest = Vec::new();
    old.read_to_end(&mut rest).unwrap();
    head.extend_from_slice(&rest);
    assert!(
        head == one,
        "an open file kept reading the version it opened"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read(&presented).unwrap() != two {
        assert!(
            Instant::now() < deadline,
            "the replaced archive never showed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(std::fs::read(m.path("b.safetensors")).unwrap() == one);
    let names: Vec<_> = std::fs::read_dir(&m.point)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn sigterm_unmounts_cleanly_even_with_files_open() {
    let model = model();
    let mut m = mount(&model.archives, &[]);
    m.signal(libc::SIGTERM);
    assert!(m.wait_exit(Duration::from_secs(10)), "{}", m.log_text());
    assert!(!is_mounted(&m.point));
    assert!(
        std::fs::read_dir(&m.point).unwrap().next().is_none(),
        "mountpoint usable"
    );

    let mut m = mount(&model.archives, &[]);
    let open = File::open(m.path("model.safetensors")).unwrap();
    m.signal(libc::SIGINT);
    let start = Instant::now();
    while is_mounted(&m.point) {
        assert!(start.elapsed() < Duration::from_secs(10), "not detached");
        std::thread::sleep(Duration::from_millis(20));
    }
    let original = std::fs::read(model.originals.join("model.safetensors")).unwrap();
    let mut bytes = Vec::new();
    (&open).read_to_end(&mut bytes).unwrap();
    assert!(
        bytes == original,
        "an open file keeps reading after the detach"
    );
    drop(open);
    assert!(m.wait_exit(Duration::from_secs(10)), "{}", m.log_text());
}

/// The non-root way the README documents: fusermount3 mounts and unmounts, and
/// the user reads the presented files. Needs fusermount3 and a /dev/fuse that
/// users may open, as distributions set it up (scripts/test.sh does).
#[test]
fn a_user_mounts_through_fusermount3() {
    let model = model();
    std::fs::set_permissions(model._dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let server = as_user(env!("CARGO_BIN_EXE_brevis-mount"));
    let mut m = mount_with(server, &model.archives, &[]);
    let line = mount_line(&m.point).unwrap();
    let user_id = format!("user_id={}", mounting_user());
    assert!(line.contains(&user_id), "mounted as the user: {line}");
    for rel in [
        "model.safetensors",
        "config.json",
        "shards/part-2.safetensors",
    ] {
        let status = as_user("cmp")
            .arg(m.path(rel))
            .arg(model.originals.join(rel))
            .status()
            .unwrap();
        assert!(status.success(), "{rel} differs when read by the user");
    }
    m.signal(libc::SIGTERM);
    assert!(m.wait_exit(Duration::from_secs(10)), "{}", m.log_text());
    assert!(!is_mounted(&m.point), "fusermount3 unmounted it");
}

#[test]
fn resident_memory_stays_within_the_cache_limit() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "big.safetensors", &checkpoint(5, 1024));
    let archives = dir.path().join("archives");
    std::fs::create_dir(&archives).unwrap();
    brevis(&["pack", "-q", s(&src), s(&archives.join("big.brv"))]);
    let cache = 8 << 20;
    let m = mount(&archives, &["--cache-size", &cache.to_string()]);
    let file = open_direct(&m.path("big.safetensors"));
    let len = std::fs::metadata(&src).unwrap().len();
    assert!(len > 4 * cache, "the file must be larger than the cache");
    let original = std::fs::read(&src).unwrap();
    let mut offset = 0;
    while offset < len {
        let got = read_range(&file, offset, 1 << 20).unwrap();
        assert!(got == original[offset as usize..offset as usize + got.len()]);
        offset += got.len() as u64;
    }
    let peak_kib = peak_rss_kib(m.pid());
    let constant = 32 << 20;
    eprintln!(
        "peak RSS {} MiB reading {} MiB with an 8 MiB cache",
        peak_kib >> 10,
        len >> 20
    );
    assert!(
        peak_kib * 1024 < cache + constant,
        "peak RSS {peak_kib} KiB"
    );
}

#[test]
fn bad_paths_are_refused_with_the_reason() {
    let model = model();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_brevis-mount"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let nowhere = model.archives.join("nowhere");
    let err = run(&[s(&nowhere), "/tmp"]);
    assert!(
        err.contains("nowhere") && err.contains("No such file"),
        "{err}"
    );
    let point = tempfile::tempdir().unwrap();
    let err = run(&[s(&model.archives), s(&point.path().join("missing"))]);
    assert!(err.contains("missing"), "{err}");
    let m = mount(&model.archives, &[]);
    let err = run(&[s(&model.archives), s(&m.point)]);
    assert!(err.contains("already mounted"), "{err}");
}

#[test]
fn runs_in_the_background_until_unmounted() {
    let model = model();
    // A damaged copy of an archive, whose read fails and is logged.
    let damaged = model.archives.join("damaged.brv");
    let mut bytes = std::fs::read(model.archives.join("model.brv")).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x10;
    std::fs::write(&damaged, bytes).unwrap();
    let point = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_brevis-mount"))
        .args([s(&model.archives), s(point.path())])
        .env("XDG_STATE_HOME", state.path())
        .status()
        .unwrap();
    assert!(status.success());
    // Ready when the command returns, without waiting.
    assert!(is_mounted(point.path()));
    let shown = std::fs::read(point.path().join("config.json")).unwrap();
    assert_eq!(
        shown,
        std::fs::read(model.originals.join("config.json")).unwrap()
    );
    let err = std::fs::read(point.path().join("damaged.safetensors")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    let status = Command::new("umount").arg(point.path()).status().unwrap();
    assert!(status.success() && !is_mounted(point.path()));
    // The error reached the log, in the user's state directory by default.
    let log = std::fs::read_to_string(state.path().join("brevis/brevis-mount.log")).unwrap();
    assert!(
        log.contains("damaged.brv") && log.contains("ERROR"),
        "{log}"
    );
}

#[test]
fn a_single_archive_mounts_alone() {
    let model = model();
    let m = mount(&model.archives.join("model.brv"), &["-j", "1"]);
    let shown: Vec<_> = std::fs::read_dir(&m.point)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(shown, ["model.safetensors"]);
    assert!(
        std::fs::read(m.path("model.safetensors")).unwrap()
            == std::fs::read(model.originals.join("model.safetensors")).unwrap()
    );
    assert!(!m.path("config.json").exists());
}

#[test]
fn a_killed_server_leaves_a_stale_mount_named_as_such() {
    let model = model();
    let mut m = mount(&model.archives, &[]);
    m.signal(libc::SIGKILL);
    m.child.wait().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_brevis-mount"))
        .args(["-f", s(&model.archives), s(&m.point)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("a stale mount is left here (its server is gone): run `umount MOUNTPOINT`"),
        "{err}"
    );
    let status = Command::new("umount").arg(&m.point).status().unwrap();
    assert!(status.success() && !is_mounted(&m.point));
}

/// Soak: readers on several threads read random ranges of several archives
/// through one mount, some with O_DIRECT and some through the page cache,
/// for BREVIS_SOAK_SECONDS (default 10; scripts/test.sh runs 60), every byte
/// checked. Reports reads, bytes, mismatches, errors and the server's peak
/// resident memory against its cache size; fails on any mismatch or error, or
/// a peak beyond the cache plus a fixed allowance.
#[test]
fn soak_random_reads_across_archives() {
    let seconds: u64 = std::env::var("BREVIS_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let originals = dir.path().join("model");
    std::fs::create_dir_all(&originals).unwrap();
    for (k, scale) in [(1u64, 64usize), (2, 16), (3, 4)] {
        std::fs::write(
            originals.join(format!("part-{k}.safetensors")),
            checkpoint(k, scale),
        )
        .unwrap();
    }
    std::fs::copy(corpus_file("fp8"), originals.join("fp8.safetensors")).unwrap();
    let archives = dir.path().join("archives");
    pack(&originals, &archives);
    let cache = 16usize << 20;
    let m = mount(&archives, &["--cache-size", &cache.to_string()]);
    let names = ["part-1", "part-2", "part-3", "fp8"].map(|n| format!("{n}.safetensors"));
    let expected: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(originals.join(n)).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (reads, bytes, mismatches, errors) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    std::thread::scope(|scope| {
        for t in 0..6u64 {
            let (expected, names, m) = (&expected, &names, &m);
            let (reads, bytes, mismatches, errors) = (&reads, &bytes, &mismatches, &errors);
            scope.spawn(move || {
                let files: Vec<File> = names
                    .iter()
                    .map(|n| match t % 2 {
                        0 => open_direct(&m.path(n)),
                        _ => File::open(m.path(n)).unwrap(),
                    })
                    .collect();
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                while Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let f = (x % 4) as usize;
                    let original = &expected[f];
                    let offset = (x >> 8) % original.len() as u64;
                    let size = ((x >> 40) % (1 << 20)) as usize + 1;
                    match read_range(&files[f], offset, size) {
                        Ok(got) => {
                            let end = original.len().min(offset as usize + size);
                            if got != original[offset as usize..end] {
                                mismatches.fetch_add(1, Ordering::Relaxed);
                            }
                            bytes.fetch_add(got.len() as u64, Ordering::Relaxed);
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let peak_kib = peak_rss_kib(m.pid());
    let (reads, bytes) = (reads.into_inner(), bytes.into_inner());
    let (mismatches, errors) = (mismatches.into_inner(), errors.into_inner());
    eprintln!(
        "soak {seconds} s: {reads} reads, {} MB, {mismatches} mismatches, {errors} errors; \
         server peak RSS {} MiB with a {} MiB cache",
        bytes / 1_000_000,
        peak_kib >> 10,
        cache >> 20
    );
    assert!(reads > 0 && mismatches == 0 && errors == 0);
    let allowance = 64 << 20;
    assert!(
        (peak_kib as usize) * 1024 < cache + allowance,
        "peak RSS {peak_kib} KiB"
    );
}

#[test]
fn a_checkpoint_packed_against_its_base_reads_through_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The base: a checkpoint; the fine-tune: the same with every weight's
    // low mantissa bits changed.
    let base = checkpoint(11, 2);
    let mut tuned = base.clone();
    let header_end = 8 + u64::from_le_bytes(base[..8].try_into().unwrap()) as usize;
    for (k, b) in tuned[header_end..].iter_mut().enumerate() {
        if k % 4 == 0 {
            *b ^= (k / 4 % 7) as u8;
        }
    }
    let originals = root.join("originals");
    std::fs::create_dir_all(&originals).unwrap();
    std::fs::write(originals.join("base.safetensors"), &base).unwrap();
    std::fs::write(originals.join("tuned.safetensors"), &tuned).unwrap();
    let store = root.join("store");
    std::fs::create_dir_all(store.join("tunes")).unwrap();
    pack(&originals.join("base.safetensors"), &store.join("base.brv"));
    brevis(&[
        "pack",
        "-q",
        "--chunk-size",
        CHUNK,
        "--base",
        s(&store.join("base.brv")),
        s(&originals.join("tuned.safetensors")),
        s(&store.join("tunes/tuned.brv")),
    ]);
    // Its index names a base (the head may say 4: a header of copies).
    let tuned_brv = brevis::archive::Archive::open_unmapped(store.join("tunes/tuned.brv")).unwrap();
    assert_eq!(tuned_brv.index().version(), 2);
    let m = mount(&store, &[]);
    let shown = std::fs::read(m.path("tunes/tuned.safetensors")).unwrap();
    assert!(shown == tuned, "the fine-tune differs through the mount");
    let shown = std::fs::read(m.path("base.safetensors")).unwrap();
    assert!(shown == base, "the base differs through the mount");
    // Presented files have their originals' modification times.
    let modified = |p: PathBuf| std::fs::metadata(p).unwrap().modified().unwrap();
    assert_eq!(
        modified(m.path("tunes/tuned.safetensors")),
        modified(originals.join("tuned.safetensors"))
    );
    assert!(m.log_text().is_empty(), "{}", m.log_text());
    drop(m);

    // With its base deleted, the fine-tune fails with EIO, naming both
    // files in the log; other files still read.
    std::fs::remove_file(store.join("base.brv")).unwrap();
    let m = mount(&store, &[]);
    let err = std::fs::read(m.path("tunes/tuned.safetensors")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(!m.path("base.safetensors").exists());
    let log = m.log_text();
    assert!(
        log.contains("tuned.brv") && log.contains("needs the base archive"),
        "{log}"
    );
}

#[test]
fn vocabularies_extended_and_reordered_against_their_base_read_through_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let (originals, store) = (dir.path().join("originals"), dir.path().join("store"));
    std::fs::create_dir_all(&originals).unwrap();
    std::fs::create_dir_all(&store).unwrap();
    let v = vocabulary(4096, 256, 300, 3000);
    let files = [
        ("base", &v.base),
        ("extended", &v.extended),
        ("pruned", &v.pruned),
    ];
    for (name, bytes) in files {
        std::fs::write(originals.join(format!("{name}.safetensors")), bytes).unwrap();
    }
    pack(&originals.join("base.safetensors"), &store.join("base.brv"));
    for name in ["extended", "pruned"] {
        let src = originals.join(format!("{name}.safetensors"));
        let base = store.join("base.brv");
        let dst = store.join(format!("{name}.brv"));
        brevis(&["pack", "-q", "--base", s(&base), s(&src), s(&dst)]);
        let archive = brevis::archive::Archive::open_unmapped(&dst).unwrap();
        assert!(archive.version() >= 9, "{name} is coded by row maps");
        assert_eq!(archive.index().rows.len(), 2, "{name}: embedding and head");
    }
    // A cache far smaller than the base's embedding: the reordered rows'
    // base chunks are evicted and decoded again as reads go.
    let m = mount(&store, &["--cache-size", "1M"]);
    for (name, original) in [("extended", &v.extended), ("pruned", &v.pruned)] {
        let shown = std::fs::read(m.path(&format!("{name}.safetensors"))).unwrap();
        assert!(shown == *original, "{name} differs through the mount");
        let file = open_direct(&m.path(&format!("{name}.safetensors")));
        for k in 0..50u64 {
            let at = (k * 7919 * 4096) % original.len() as u64 / 4096 * 4096;
            let got = read_range(&file, at, 12288).unwrap();
            let end = (at as usize + 12288).min(original.len());
            assert!(got == original[at as usize..end], "{name} at {at}");
        }
    }
    assert!(m.log_text().is_empty(), "{}", m.log_text());
    drop(m);
    // With its base gone, the reordered vocabulary fails with EIO, the log
    // naming both files.
    std::fs::remove_file(store.join("base.brv")).unwrap();
    let m = mount(&store, &[]);
    let err = std::fs::read(m.path("pruned.safetensors")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let log = m.log_text();
    assert!(
        log.contains("pruned.brv") && log.contains("base.brv"),
        "{log}"
    );
}

#[test]
fn an_archive_truncated_in_place_gives_errors_not_its_old_size() {
    let model = model();
    let m = mount(&model.archives, &[]);
    let shown = m.path("model.safetensors");
    assert!(std::fs::metadata(&shown).is_ok());
    let archive = model.archives.join("model.brv");
    let len = std::fs::metadata(&archive).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&archive)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    // The change is seen at once (inotify), not after the attribute timeout.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(&shown).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = std::fs::metadata(&shown).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let log = m.log_text();
    assert!(log.contains("model.brv: corrupt archive at byte"), "{log}");
    assert!(
        std::fs::read(m.path("config.json")).is_ok(),
        "other files still read"
    );
}

/// Writes `path`, an archive of `count` chunks of zeros, each as slow to
/// decode as the format lets a chunk be: 64 MiB, 31 Scans deep over a Const
/// (within the work bound of docs/FORMAT.md).
fn slow_archive(path: &Path, count: usize) {
    use brevis::archive::{self, ChunkEntry, Index, MAX_CHUNK_BYTES};
    use brevis::dsl::{encode_program, Literal, Op, Program, ScanOp, Type};
    let ty = Type {
        width: 32,
        len: MAX_CHUNK_BYTES as usize / 4,
    };
    let mut program: Program<Literal> = Program {
        ty,
        op: Op::Const(0),
    };
    for k in 0..31 {
        let op = [ScanOp::Xor, ScanOp::Add][k % 2];
        let updates = Box::new(program);
        program = Program {
            ty,
            op: Op::Scan {
                op,
                init: 0,
                updates,
            },
        };
    }
    let mut record = Vec::new();
    encode_program(&program, &mut record);
    let zeros = vec![0u8; MAX_CHUNK_BYTES as usize];
    let entry = ChunkEntry {
        layout: brevis::safetensors::Layout::Word,
        src_len: MAX_CHUNK_BYTES,
        rec_len: record.len() as u64,
        checksum: twox_hash::XxHash3_64::oneshot(&zeros),
        base: None,
    };
    let index = Index {
        source_len: MAX_CHUNK_BYTES * count as u64,
        sha256: [0; 32],
        chunk_size: MAX_CHUNK_BYTES,
        bases: Vec::new(),
        rows: Vec::new(),
        tables: Vec::new(),
        chunks: vec![entry; count],
    };
    let records = std::iter::repeat_n(&record[..], count);
    std::fs::write(path, archive::assemble(records, &index, 1)).unwrap();
}

/// How long reading `len` bytes at `offset` of `path` takes, bypassing the
/// page cache.
fn timed_read(path: &Path, offset: u64, len: usize) -> Duration {
    let start = Instant::now();
    read_range(&open_direct(path), offset, len).unwrap();
    start.elapsed()
}

/// While three readers keep a slow archive's chunks decoding, each with reads
/// of `slow_len` bytes at `slow_at(k)` (k = 0, 1, ...), every chunk of another
/// archive is read for the first time, `other_len` bytes every 64 KiB: the time
/// one slow chunk takes, and the slowest of those reads.
fn reads_beside_a_slow_archive(
    slow_at: fn(u64) -> u64,
    slow_len: usize,
    other_len: usize,
) -> (Duration, Duration) {
    let model = model();
    slow_archive(&model.archives.join("slow.brv"), 4);
    // Two threads take requests; slow chunks are too large to be cached.
    let m = mount(
        &model.archives,
        &["--request-threads", "2", "--cache-size", "16M"],
    );
    let slow = m.path("slow.safetensors");
    let one_slow = timed_read(&slow, 0, 4096);
    let busy = std::sync::atomic::AtomicBool::new(true);
    let worst = std::thread::scope(|scope| {
        for t in 0..3u64 {
            let (slow, busy) = (&slow, &busy);
            scope.spawn(move || {
                let mut k = t;
                while busy.load(Ordering::Relaxed) {
                    timed_read(slow, slow_at(k), slow_len);
                    k += 3;
                }
            });
        }
        std::thread::sleep(one_slow / 2);
        let other = m.path("model.safetensors");
        let len = std::fs::metadata(&other).unwrap().len();
        let worst = (0..len)
            .step_by(64 << 10)
            .map(|at| timed_read(&other, at, other_len))
            .max()
            .unwrap();
        busy.store(false, Ordering::Relaxed);
        worst
    });
    eprintln!("a slow chunk: {one_slow:?}; slowest read of another file meanwhile: {worst:?}");
    (one_slow, worst)
}

#[test]
fn a_slow_archive_does_not_hold_up_reads_of_other_files() {
    // Reads of one chunk, here and there in the slow archive.
    let (one_slow, worst) =
        reads_beside_a_slow_archive(|k| (k % 4) * (64 << 20) + k * 4096, 4096, 4096);
    assert!(
        worst * 4 < one_slow,
        "another file waited {worst:?}; a slow chunk takes {one_slow:?}"
    );
}

/// Reads that span several chunks, of the slow archive and of the other, go
/// through the decoding pool too: the slow ones must not make the others
/// wait for it.
#[test]
fn reads_of_several_chunks_are_not_held_up_by_a_slow_archive_s() {
    // Each slow read spans two of its 64 MiB chunks; each read of the other
    // archive spans two or three of its 64 KiB chunks.
    let (one_slow, worst) =
        reads_beside_a_slow_archive(|k| (k % 3 + 1) * (64 << 20) - 2048, 4096, 128 << 10);
    assert!(
        worst * 4 < one_slow,
        "another file waited {worst:?}; a slow chunk takes {one_slow:?}"
    );
}

/// Three readers of three checkpoints in chunks of 64 MiB, four times the
/// cache: the chunks are decoded one at a time, not one per reader and
/// decoding thread at once.
#[test]
fn chunks_larger_than_the_cache_are_decoded_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let archives = dir.path().join("archives");
    std::fs::create_dir(&archives).unwrap();
    let names = ["minilm-f32", "minilm-bf16", "minilm-upcast"];
    for name in names {
        let src = corpus_file(&format!("{name}/"));
        let brv = archives.join(format!("{name}.brv"));
        brevis(&["pack", "-q", "--chunk-size", "67108864", s(&src), s(&brv)]);
    }
    // As a user starts it: the mount limits glibc's arenas itself.
    let mut server = Command::new(env!("CARGO_BIN_EXE_brevis-mount"));
    server.env_remove("MALLOC_ARENA_MAX");
    let m = mount_with(server, &archives, &["--cache-size", "16M"]);
    std::thread::scope(|scope| {
        for name in names {
            let m = &m;
            scope.spawn(move || {
                let shown = std::fs::read(m.path(&format!("{name}.safetensors"))).unwrap();
                assert!(shown == std::fs::read(corpus_file(&format!("{name}/"))).unwrap());
            });
        }
    });
    let peak_kib = peak_rss_kib(m.pid());
    eprintln!("peak RSS {} MiB", peak_kib >> 10);
    // The 16 MiB cache, one 64 MiB chunk beyond it, and the decoder's work
    // on that chunk (147-163 MiB in all here). With each reader's chunk
    // decoded at once, 250-268 MiB.
    assert!(peak_kib < 224 << 10, "peak RSS {peak_kib} KiB");
}
