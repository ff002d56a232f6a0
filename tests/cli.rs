//! The `brevis` command line: directory mirroring, refusals, errors, determinism.

#[path = "common/cli.rs"]
mod cli;
mod common;

use cli::*;
use common::*;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;

fn fails(args: &[&str], why: &str) {
    fails_with(args, &[why]);
}

fn model_dir(root: &Path) -> std::path::PathBuf {
    let model = root.join("model");
    std::fs::create_dir_all(model.join("shard")).unwrap();
    std::fs::write(model.join("config.json"), br#"{"hidden": 8}"#).unwrap();
    std::fs::write(
        model.join("shard/a.safetensors"),
        build(&every_dtype(), &Extras::default()),
    )
    .unwrap();
    let b = build(
        &[tensor("w", "BF16", &[64, 64], noise(4, 8192))],
        &Extras {
            pad: 3,
            ..Extras::default()
        },
    );
    std::fs::write(model.join("b.safetensors"), b).unwrap();
    model
}

#[test]
fn packs_and_unpacks_a_model_directory() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let packed = dir.path().join("packed");
    let summary = ok(&["pack", s(&model), s(&packed)]);
    assert!(
        summary.contains("packed 2 file(s) (+1 copied)"),
        "{summary}"
    );
    assert!(packed.join("shard/a.brv").is_file() && packed.join("b.brv").is_file());
    assert_eq!(
        std::fs::read(packed.join("config.json")).unwrap(),
        br#"{"hidden": 8}"#
    );
    let verified = ok(&[
        "verify",
        s(&packed.join("b.brv")),
        "--against",
        s(&model.join("b.safetensors")),
    ]);
    assert!(verified.contains("OK"), "{verified}");
    let restored = dir.path().join("restored");
    ok(&["unpack", s(&packed), s(&restored)]);
    for rel in ["config.json", "shard/a.safetensors", "b.safetensors"] {
        assert_eq!(
            std::fs::read(restored.join(rel)).unwrap(),
            std::fs::read(model.join(rel)).unwrap(),
            "{rel}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(&packed.join("b.brv"))])).unwrap();
    assert_eq!(json["tensors"][0]["name"], "w");
    assert_eq!(json["tensors"][0]["bytes_in"], 8192);
    assert!(ok(&["inspect", s(&packed.join("shard/a.brv"))]).contains("position_ids"));
}

#[test]
fn output_is_identical_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let src = model.join("shard/a.safetensors");
    let one = dir.path().join("one.brv");
    let two = dir.path().join("two.brv");
    ok(&["pack", "-j1", "--chunk-size", "200", s(&src), s(&one)]);
    ok(&["pack", "-j2", "--chunk-size", "200", s(&src), s(&two)]);
    assert_eq!(std::fs::read(one).unwrap(), std::fs::read(two).unwrap());
}

/// `--chunk-size` takes sizes as the mount's options do: `1K` is 1024.
#[test]
fn chunk_sizes_take_units() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let src = model.join("shard/a.safetensors");
    let [k, bytes, default] = ["k.brv", "bytes.brv", "default.brv"].map(|n| dir.path().join(n));
    ok(&["pack", "--chunk-size", "1K", s(&src), s(&k)]);
    ok(&["pack", "--chunk-size", "1024", s(&src), s(&bytes)]);
    ok(&["pack", s(&src), s(&default)]);
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert_eq!(read(&k), read(&bytes));
    assert_ne!(read(&k), read(&default));
    let q = dir.path().join("q.brv");
    let out = brevis(&["pack", "--chunk-size", "4Q", s(&src), s(&q)]);
    let err = String::from_utf8_lossy(&out.stderr);
    // A usage error, as clap reports them.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown unit \"Q\"; use K, M or G"), "{err}");
    assert!(!q.exists());
}

/// `-1` .. `-9` are `--level`: every level round-trips, -9 is not larger than
/// -8 (both search every chunk, -9 with a larger budget: the same search
/// taken further), and levels outside 1..=9 are refused.
#[test]
fn effort_levels_pack_and_nine_is_not_larger_than_eight() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let src = model.join("shard/a.safetensors");
    let original = std::fs::read(&src).unwrap();
    let mut sizes = Vec::new();
    for level in ["-1", "-3", "--level=5", "-8", "-9"] {
        let dst = dir.path().join(format!("l{level}.brv"));
        ok(&["pack", "--chunk-size", "200", level, s(&src), s(&dst)]);
        let out = dir.path().join(format!("l{level}.safetensors"));
        ok(&["unpack", s(&dst), s(&out)]);
        assert!(
            std::fs::read(&out).unwrap() == original,
            "{level} round trip"
        );
        sizes.push(std::fs::metadata(&dst).unwrap().len());
    }
    assert!(sizes[4] <= sizes[3], "-8 and -9: {sizes:?}");
    let out = brevis(&[
        "pack",
        "--level",
        "10",
        s(&src),
        s(&dir.path().join("x.brv")),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("10 is not in 1..=9"));
}

#[test]
fn refuses_overwrites_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let src = model.join("b.safetensors");
    let dst = dir.path().join("b.brv");
    ok(&["pack", s(&src), s(&dst)]);
    let before = std::fs::read(&dst).unwrap();
    fails(&["pack", s(&src), s(&dst)], "already exists (use --force");
    ok(&["pack", "--force", s(&src), s(&dst)]);
    assert_eq!(std::fs::read(&dst).unwrap(), before);
    fails(
        &[
            "pack",
            s(&model.join("config.json")),
            s(&dir.path().join("c.brv")),
        ],
        "not a valid safetensors file",
    );
    fails(
        &[
            "pack",
            s(&dir.path().join("missing")),
            s(&dir.path().join("m.brv")),
        ],
        "missing",
    );
    fails(
        &["verify", s(&model.join("config.json"))],
        "not a brevis archive",
    );
    fails(
        &[
            "verify",
            s(&dst),
            "--against",
            s(&model.join("shard/a.safetensors")),
        ],
        "bytes, the archive holds",
    );
    let mut bad = before.clone();
    bad[20] ^= 0xff;
    let bad_path = write_temp(dir.path(), "bad.brv", &bad);
    // One thread decodes on the calling thread, more in a pool.
    for threads in ["-j1", "-j2"] {
        fails(
            &["verify", threads, s(&bad_path)],
            "bad.brv: corrupt archive at byte",
        );
        fails(
            &[
                "unpack",
                threads,
                s(&bad_path),
                s(&dir.path().join("bad.safetensors")),
            ],
            "corrupt archive",
        );
        assert!(
            !dir.path().join("bad.safetensors").exists(),
            "a failed unpack left output"
        );
    }
    assert_eq!(brevis(&["pack"]).status.code(), Some(2));
    assert!(ok(&["--help"]).contains("unpack"));
}

#[test]
fn search_knobs_and_a_reused_prior_give_valid_archives() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let src = model.join("shard/a.safetensors");
    let prior = dir.path().join("a.prior.json");
    let learned = ok(&["calibrate", s(&src), s(&prior)]);
    assert!(learned.contains("learned from"), "{learned}");
    fails(&["calibrate", s(&src), s(&prior)], "already exists");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&prior).unwrap()).unwrap();
    assert_eq!(json["brevis_prior"], 1);
    let runs: [&[&str]; 5] = [
        &["--budget", "0"],
        &["--budget", "32"],
        &["--no-astar"],
        &["--no-prior"],
        &["--prior", s(&prior)],
    ];
    for (k, flags) in runs.iter().enumerate() {
        let out = dir.path().join(format!("a{k}.brv"));
        let mut args = vec!["pack"];
        args.extend_from_slice(flags);
        args.extend([s(&src), s(&out)]);
        ok(&args);
        ok(&["verify", s(&out), "--against", s(&src)]);
    }
    let report: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(&dir.path().join("a1.brv"))])).unwrap();
    assert!(
        report["productions"]["lit"].as_u64().unwrap() > 0,
        "{report}"
    );
    // Code tables: the archive's are its tensors' and other bytes', and
    // there are some exactly where a literal is Huffman or rANS coded.
    let rows = report["tensors"].as_array().unwrap();
    let of_rows: u64 = rows
        .iter()
        .map(|r| r["table_bytes"].as_u64().unwrap())
        .sum();
    let tables = report["table_bytes"].as_u64().unwrap();
    assert_eq!(tables, of_rows, "{report}");
    for row in rows {
        let codecs = &row["codecs"];
        let coded = ["huffman", "rans"]
            .iter()
            .any(|c| codecs[c].as_u64().is_some());
        let has_table = row["table_bytes"].as_u64().unwrap() > 0;
        assert_eq!(coded, has_table, "{row}");
    }
    assert!(tables > 0 && tables < report["archive_bytes"].as_u64().unwrap());
    let table = ok(&["inspect", s(&dir.path().join("a1.brv"))]);
    assert!(
        table.contains(&format!("code tables: {tables} bytes")),
        "{table}"
    );
    std::fs::write(&prior, b"{\"not\": \"a prior\"}").unwrap();
    fails(
        &[
            "pack",
            "--prior",
            s(&prior),
            s(&src),
            s(&dir.path().join("x.brv")),
        ],
        "not a prior file",
    );
    let both = brevis(&[
        "pack",
        "--prior",
        s(&prior),
        "--no-prior",
        s(&src),
        s(&dir.path().join("x.brv")),
    ]);
    assert_eq!(
        both.status.code(),
        Some(2),
        "conflicting flags are a usage error"
    );
}

/// A reader that stops early (`brevis inspect ... | head`) ends the output
/// quietly, as for other command-line tools, without a panic.
#[test]
fn a_closed_output_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let archive = dir.path().join("a.brv");
    ok(&[
        "pack",
        "-q",
        s(&model.join("shard/a.safetensors")),
        s(&archive),
    ]);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(["inspect", s(&archive)])
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{err}");
}

/// `verify` and `inspect` take a folder of archives (a store) as they take one
/// archive: every archive under it, a summary, exit 1 if any fails.
#[test]
fn verify_and_inspect_take_a_folder_of_archives() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let store = dir.path().join("store");
    ok(&["pack", "-q", s(&model), s(&store)]);
    let out = ok(&["verify", s(&store)]);
    assert!(out.contains("verified 2 archive(s)"), "{out}");
    assert!(out.contains(": 2 OK, 0 failed"), "{out}");
    let out = ok(&["verify", s(&store), "--against", s(&model)]);
    assert!(out.contains("SHA-256 and every byte match"), "{out}");
    let out = ok(&["inspect", s(&store)]);
    assert!(
        out.contains("b.brv") && out.contains("shard/a.brv"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(&store)])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    // One damaged archive: the others still verify, the summary and status say so.
    let bad = store.join("b.brv");
    let mut bytes = std::fs::read(&bad).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&bad, bytes).unwrap();
    let out = brevis(&["verify", s(&store)]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(": 1 OK, 1 failed"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("b.brv"));
}

/// Errors say what is wrong in the user's terms, and a destination ending in
/// '/' is a folder to put the archive in.
#[test]
fn errors_name_the_problem_and_a_trailing_slash_means_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("config.json");
    std::fs::write(&json, br#"{"hidden_size": 384, "layers": 6}"#).unwrap();
    fails(
        &["pack", s(&json), s(&dir.path().join("c.brv"))],
        "config.json: not a valid safetensors file: it starts like JSON or text, not with \
         the 8-byte header length of a safetensors file",
    );
    let model = model_dir(dir.path());
    let out = dir.path().join("new");
    ok(&[
        "pack",
        "-q",
        s(&model.join("b.safetensors")),
        &format!("{}/", s(&out)),
    ]);
    let packed = out.join("b.brv");
    assert!(packed.is_file());
    let bytes = std::fs::read(&packed).unwrap();
    let cut = dir.path().join("cut.brv");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let len = bytes.len() - 100;
    fails(
        &["verify", s(&cut)],
        &format!("truncated or damaged: its {len} bytes do not end with an archive trailer"),
    );
    // A folder without checkpoints is copied, with a warning saying so.
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("pytorch_model.bin"), b"weights").unwrap();
    let run = brevis(&["pack", "-q", s(&plain), s(&dir.path().join("plain-out"))]);
    assert!(run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("no .safetensors files; 1 other file(s) copied unchanged"),
        "{err}"
    );
}

/// `--force` replaces what is at an output path, even a symbolic link, and
/// never writes through the link to the file it points to.
#[test]
fn force_replaces_a_symlink_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let out = dir.path().join("out");
    ok(&["pack", "-q", s(&model), s(&out)]);
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    for name in ["config.json", "b.brv"] {
        std::fs::remove_file(out.join(name)).unwrap();
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
    }
    ok(&["pack", "-q", "--force", s(&model), s(&out)]);
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    for name in ["config.json", "b.brv"] {
        assert!(!std::fs::symlink_metadata(out.join(name))
            .unwrap()
            .is_symlink());
    }
    ok(&["verify", s(&out.join("b.brv"))]);
}

/// A folder with one bad checkpoint: pack stops at it, or with --keep-going
/// packs the others and fails at the end naming it; a rerun with
/// --skip-existing writes only what is missing.
#[test]
fn keep_going_reports_every_failure_and_skip_existing_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    std::fs::write(model.join("0-bad.safetensors"), b"not a checkpoint").unwrap();
    std::os::unix::fs::symlink("nowhere", model.join("1-gone.json")).unwrap();
    let out = dir.path().join("out");
    fails(&["pack", "-q", s(&model), s(&out)], "0-bad.safetensors");
    assert!(!out.join("b.brv").exists(), "stopped at the first failure");
    let run = brevis(&["pack", "--keep-going", s(&model), s(&out)]);
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("0-bad.safetensors: not a valid safetensors file"),
        "{err}"
    );
    assert!(
        err.contains("1-gone.json: a symbolic link to nowhere, which does not exist"),
        "{err}"
    );
    assert!(err.contains("2 of 5 file(s) failed"), "{err}");
    std::fs::remove_file(model.join("1-gone.json")).unwrap();
    assert!(String::from_utf8_lossy(&run.stdout).contains("packed 2 file(s) (+1 copied)"));
    ok(&["verify", s(&out.join("b.brv"))]);
    // Resume: only the missing output is attempted (and fails again alone).
    std::fs::remove_file(model.join("0-bad.safetensors")).unwrap();
    std::fs::remove_file(out.join("config.json")).unwrap();
    let before = std::fs::metadata(out.join("b.brv"))
        .unwrap()
        .modified()
        .unwrap();
    let text = ok(&["pack", "--skip-existing", s(&model), s(&out)]);
    assert!(text.contains("packed 0 file(s) (+1 copied)"), "{text}");
    assert!(out.join("config.json").is_file());
    assert_eq!(
        std::fs::metadata(out.join("b.brv"))
            .unwrap()
            .modified()
            .unwrap(),
        before
    );
    fails(&["pack", s(&model), s(&out)], "--skip-existing to keep");
}

#[test]
fn files_keep_their_times_and_permissions_through_pack_and_unpack() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    let when = std::time::UNIX_EPOCH + std::time::Duration::new(1_000_000_000, 123_456_789);
    let set = |rel: &str, mode: u32| {
        let path = model.join(rel);
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(when).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    set("b.safetensors", 0o600);
    set("config.json", 0o640);
    let packed = dir.path().join("packed");
    let unpacked = dir.path().join("unpacked");
    ok(&["pack", "-q", s(&model), s(&packed)]);
    ok(&["unpack", "-q", s(&packed), s(&unpacked)]);
    let meta = |p: std::path::PathBuf| {
        let m = std::fs::metadata(&p).unwrap();
        (m.modified().unwrap(), m.permissions().mode() & 0o7777)
    };
    assert_eq!(meta(packed.join("b.brv")), (when, 0o600), "the archive");
    assert_eq!(meta(packed.join("config.json")), (when, 0o640), "a copy");
    assert_eq!(
        meta(unpacked.join("b.safetensors")),
        (when, 0o600),
        "unpacked"
    );
    assert_eq!(
        meta(unpacked.join("config.json")),
        (when, 0o640),
        "copied back"
    );
}

/// Every file under `root` with its bytes, by relative path.
fn tree_bytes(root: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn shards_packed_at_once_write_what_one_pack_writes_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(dir.path());
    for k in 0..5u64 {
        let t = tensor(
            "w",
            "BF16",
            &[32, 64 * (k + 1)],
            noise(20 + k, 4096 * (k as usize + 1)),
        );
        std::fs::write(
            model.join(format!("part-{k}.safetensors")),
            build(&[t], &Extras::default()),
        )
        .unwrap();
    }
    let whole = dir.path().join("whole");
    ok(&["pack", "-q", "-j1", s(&model), s(&whole)]);
    let sharded = dir.path().join("sharded");
    let n = 3;
    let running: Vec<_> = (0..n)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_brevis"))
                .args([
                    "pack",
                    "-q",
                    "-j1",
                    "--shard",
                    &format!("{i}/{n}"),
                    s(&model),
                    s(&sharded),
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in running {
        assert!(child.wait().unwrap().success());
    }
    assert!(
        tree_bytes(&sharded) == tree_bytes(&whole),
        "the shards' union differs"
    );

    // Run again: everything is kept but a damaged archive, packed anew.
    let damaged = sharded.join("part-3.brv");
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&damaged, bytes).unwrap();
    let mut packed = 0;
    for i in 0..n {
        let out = ok(&[
            "pack",
            "-j1",
            "--shard",
            &format!("{i}/{n}"),
            s(&model),
            s(&sharded),
        ]);
        packed += out.contains("packed 1 file(s)") as usize;
        assert!(
            out.contains("packed 0 file(s)") || out.contains("packed 1 file(s)"),
            "{out}"
        );
    }
    assert_eq!(packed, 1, "only the damaged archive is packed again");
    assert!(tree_bytes(&sharded) == tree_bytes(&whole));

    // auto/N reads the index of a Kubernetes Indexed Job.
    let k8s = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args([
            "pack",
            "-q",
            "--shard",
            "auto/3",
            s(&model),
            s(&dir.path().join("k8s")),
        ])
        .env("JOB_COMPLETION_INDEX", "7")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&k8s.stderr);
    assert!(err.contains("shard 7 of 3 does not exist"), "{err}");
}

/// Many tiny tensors of random bytes, whose re-fits misfit often (how
/// often depends on the bytes: these misfit): each misfit once sent every
/// re-fit after it in the window back to be re-fit again, so packing took
/// hours. The bound is far above a linear pack's time, far below that.
#[test]
fn many_tiny_tensors_of_random_bytes_pack_in_bounded_time() {
    let file = one_byte_tensors(&noise(3, 200_000));
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "random.safetensors", &file);
    let dst = dir.path().join("random.brv");
    let mut child = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(["pack", "-q", s(&src), s(&dst)])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("packing took over 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success());
    ok(&["verify", "-q", s(&dst), "--against", s(&src)]);
}

/// A FIFO given as a prior, as the original `verify --against` compares
/// with, or as the checkpoint `calibrate` learns from, is refused at once
/// instead of waiting for a writer; a prior file far larger than any prior
/// is refused without being read whole. (A writer opens the FIFO after 10 s,
/// so a build that waits on it fails here rather than hanging.)
#[test]
fn fifos_and_huge_files_as_prior_or_original_are_refused_without_blocking() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(
        dir.path(),
        "m.safetensors",
        &build(&every_dtype(), &Extras::default()),
    );
    let brv = dir.path().join("m.brv");
    ok(&["pack", "-q", s(&src), s(&brv)]);
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let (watch, path) = (done.clone(), fifo.clone());
    std::thread::spawn(move || {
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if watch.load(Ordering::Relaxed) {
                return;
            }
        }
        // Non-blocking: fails at once if no one is waiting to read.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path);
    });
    let out = dir.path().join("out.brv");
    fails(
        &["pack", "-q", "--prior", s(&fifo), s(&src), s(&out)],
        "not a regular file",
    );
    fails(
        &["verify", "-q", s(&brv), "--against", s(&fifo)],
        "not a regular file",
    );
    let prior = dir.path().join("prior.json");
    fails(
        &["calibrate", "-q", s(&fifo), s(&prior)],
        "not a regular file",
    );
    assert!(!prior.exists());
    done.store(true, Ordering::Relaxed);
    let huge = dir.path().join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    fails(
        &["pack", "-q", "--prior", s(&huge), s(&src), s(&out)],
        "larger than 16 MiB",
    );
    assert!(!out.exists());
}

/// 2^21 weight-like BF16 words (a few exponents), 4 MiB, with every
/// `nudge`-th word's low bit flipped.
fn weight_like_bf16(nudge: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..2usize << 20)
        .flat_map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let exponent = [120u16, 121, 119, 122][(x >> 62) as usize];
            let word = (x as u16 & 0x807f) | exponent << 7;
            (word ^ i.is_multiple_of(nudge) as u16).to_le_bytes()
        })
        .collect()
}

/// The longest chunk of an archive.
fn longest_chunk(brv: &Path) -> u64 {
    let archive = brevis::Archive::open_unmapped(brv).unwrap();
    archive.chunks().iter().map(|c| c.src_len).max().unwrap()
}

/// Left to itself, pack gives a tensor of steady statistics chunks of 1 MiB
/// (its code tables paid a quarter as often); `--chunk-size` is kept as given.
#[test]
fn chunks_widen_where_they_pay_unless_a_size_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let weights = tensor("w", "BF16", &[2 << 20], weight_like_bf16(usize::MAX));
    let src = write_temp(
        dir.path(),
        "m.safetensors",
        &build(&[weights], &Extras::default()),
    );
    let longest = longest_chunk;
    let (wide, fixed) = (dir.path().join("wide.brv"), dir.path().join("fixed.brv"));
    ok(&["pack", "-q", s(&src), s(&wide)]);
    ok(&["pack", "-q", "--chunk-size", "256K", s(&src), s(&fixed)]);
    assert_eq!(longest(&wide), 1 << 20);
    assert_eq!(longest(&fixed), 256 << 10);
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(
        size(&wide) < size(&fixed),
        "{} {}",
        size(&wide),
        size(&fixed)
    );
    for brv in [&wide, &fixed] {
        ok(&["verify", "-q", s(brv), "--against", s(&src)]);
    }
}

/// A tensor coded against a base takes whole chunks of the base's, so that
/// a reader decodes each base chunk once: the base's chunk length, or as
/// many of the base's shorter chunks as fit the default chunk size; a size
/// given with `--chunk-size` is kept. (The empty tensor last in both files
/// is matched too, and has no base chunk.)
#[test]
fn chunks_against_a_base_take_whole_chunks_of_its() {
    let dir = tempfile::tempdir().unwrap();
    let model = |nudge| {
        let weights = tensor("w", "BF16", &[2 << 20], weight_like_bf16(nudge));
        let empty = tensor("z", "BF16", &[0], Vec::new());
        build(&[weights, empty], &Extras::default())
    };
    let base_src = write_temp(dir.path(), "base.safetensors", &model(usize::MAX));
    let tuned = write_temp(dir.path(), "tuned.safetensors", &model(7));
    // The base's chunk size as given (none: the default, which widens to
    // 1 MiB here), that given to the tuned file, and the tuned file's chunks.
    let cases = [
        (None, None, 1 << 20),
        (Some("512K"), None, 512 << 10),
        (Some("64K"), None, 256 << 10),
        (None, Some("256K"), 256 << 10),
    ];
    for (i, (base_size, size, expected)) in cases.into_iter().enumerate() {
        let base = dir.path().join(format!("base{i}.brv"));
        let out = dir.path().join(format!("tuned{i}.brv"));
        let sized = |size: Option<&'static str>| size.map_or(vec![], |s| vec!["--chunk-size", s]);
        ok(&[
            &["pack", "-q"],
            &sized(base_size)[..],
            &[s(&base_src), s(&base)],
        ]
        .concat());
        let against = ["--base", s(&base), s(&tuned), s(&out)];
        ok(&[&["pack", "-q"], &sized(size)[..], &against[..]].concat());
        assert_eq!(longest_chunk(&out), expected, "case {i}");
        let archive = brevis::Archive::open_unmapped(&out).unwrap();
        assert!(archive.chunks().iter().any(|c| c.base.is_some()));
        ok(&["verify", "-q", s(&out), "--against", s(&tuned)]);
    }
}

/// The hidden temporaries in `dir` (outputs being written).
fn temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp"))
        .collect()
}

/// SIGINT or SIGTERM while `pack` and `unpack` write remove their
/// temporaries, and the process ends with 128 + the signal.
#[test]
fn signals_remove_the_temporaries_of_outputs_being_written() {
    let dir = tempfile::tempdir().unwrap();
    // Slow to pack at level 9 (every chunk searched at a high budget).
    let bytes = weight_like_bf16(7);
    let file = build(
        &[tensor("w", "BF16", &[2048, 1024], bytes)],
        &Extras::default(),
    );
    let src = write_temp(dir.path(), "m.safetensors", &file);
    let brv = dir.path().join("m.brv");
    ok(&["pack", "-q", s(&src), s(&brv)]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let runs: [(&[&str], i32); 2] = [
        (&["pack", "-q", "-9", "-j1", s(&src), s(&out)], libc::SIGINT),
        (&["unpack", "-q", s(&brv), s(&out)], libc::SIGTERM),
    ];
    for (args, signal) in runs {
        let mut child = Command::new(env!("CARGO_BIN_EXE_brevis"))
            .args(args)
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while temporaries(&out).is_empty() && child.try_wait().unwrap().is_none() {
            assert!(started.elapsed().as_secs() < 30, "no temporary appeared");
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        // SAFETY: signals a child of this test by its process id.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().unwrap();
        // Unpacking is fast: it may end before the signal comes (the pack
        // at level 9 takes seconds).
        if status.success() && args[0] == "unpack" {
            eprintln!("{args:?} finished before the signal");
            std::fs::remove_dir_all(&out).unwrap();
            std::fs::create_dir(&out).unwrap();
            continue;
        }
        assert_eq!(status.code(), Some(128 + signal), "{args:?}");
        assert_eq!(
            temporaries(&out),
            Vec::<std::path::PathBuf>::new(),
            "{args:?}"
        );
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "{args:?}");
    }
}

/// A file added to SRC while a shard packs may fall to no shard: the shard
/// says so at its end (and says nothing when SRC did not change).
#[test]
fn a_shard_warns_when_its_source_changed_while_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    let file = build(
        &[tensor("w", "BF16", &[2048, 1024], weight_like_bf16(7))],
        &Extras::default(),
    );
    std::fs::write(model.join("a.safetensors"), &file).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args([
            "pack",
            "-q",
            "-9",
            "-j1",
            "--shard",
            "0/1",
            s(&model),
            s(&out),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while temporaries(&out).is_empty() {
        assert!(started.elapsed().as_secs() < 30, "no temporary appeared");
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    std::fs::write(model.join("late.safetensors"), &file).unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{err}");
    assert!(
        err.contains("its files changed while this shard ran"),
        "{err}"
    );
    let again = brevis(&["pack", "-q", "-1", "--shard", "0/1", s(&model), s(&out)]);
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stderr), "");
    assert!(out.join("late.brv").exists());
}
