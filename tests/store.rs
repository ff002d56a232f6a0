//! Archives coded against a base: `pack --base`, what reading them needs, and
//! what happens when the base is missing or another file.

#[path = "common/cli.rs"]
mod cli;
mod common;

use cli::*;
use common::*;
use std::path::Path;

/// The format version an archive's index needs for its bases and row maps:
/// 2 where it names a base, else 1 (the head may say more: a header of
/// copies makes the archive version 4, shared code tables, which come with
/// any tensor of a few chunks, version 10).
fn index_version(p: &Path) -> u8 {
    let archive = brevis::archive::Archive::open_unmapped(p).unwrap();
    let mut index = archive.index().clone();
    index.tables.clear();
    index.version()
}

/// Floats near 0.02 in magnitude, as weights are.
fn weights(seed: u64, n: usize) -> Vec<f32> {
    noise(seed, 4 * n)
        .chunks_exact(4)
        .map(|c| (u32::from_le_bytes(c.try_into().unwrap()) as f32 / u32::MAX as f32 - 0.5) * 0.04)
        .collect()
}

fn f32_bytes(w: &[f32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bf16_bytes(w: &[f32]) -> Vec<u8> {
    w.iter()
        .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
        .collect()
}

/// A base checkpoint and a fine-tune of it: every weight moved by a small
/// relative step (as a few optimizer steps move them), a tensor the base does
/// not have, one whose shape changed, and one left exactly as it was.
fn base_and_tuned() -> (Vec<u8>, Vec<u8>) {
    let n = 96 * 1024;
    let w = weights(1, n);
    let step = weights(2, n);
    let tuned: Vec<f32> = w
        .iter()
        .zip(&step)
        .map(|(a, d)| a * (1.0 + d * 0.05))
        .collect();
    let ids: Vec<u8> = (0..512u64).flat_map(|i| i.to_le_bytes()).collect();
    let base = build(
        &[
            tensor("embed", "F32", &[96, 1024], f32_bytes(&w)),
            tensor("head", "BF16", &[96, 1024], bf16_bytes(&w)),
            tensor("ids", "I64", &[512], ids.clone()),
            tensor("resized", "F32", &[1024], f32_bytes(&w[..1024])),
        ],
        &Extras::default(),
    );
    let tuned = build(
        &[
            tensor("embed", "F32", &[96, 1024], f32_bytes(&tuned)),
            tensor("head", "BF16", &[96, 1024], bf16_bytes(&tuned)),
            tensor("ids", "I64", &[512], ids),
            tensor("resized", "F32", &[2048], f32_bytes(&w[..2048])),
            tensor("new", "F32", &[4096], f32_bytes(&step[..4096])),
        ],
        &Extras::default(),
    );
    (base, tuned)
}

/// Packs `base` into `root/base/model.brv` and returns its path.
fn packed_base(root: &Path, base: &[u8]) -> std::path::PathBuf {
    std::fs::create_dir_all(root.join("orig")).unwrap();
    let src = write_temp(&root.join("orig"), "base.safetensors", base);
    let brv = root.join("base/model.brv");
    std::fs::create_dir_all(brv.parent().unwrap()).unwrap();
    ok(&["pack", "-q", s(&src), s(&brv)]);
    brv
}

#[test]
fn a_fine_tune_packed_against_its_base_is_smaller_and_exact() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    let base_brv = packed_base(root, &base);
    let src = write_temp(&root.join("orig"), "tuned.safetensors", &tuned);
    let alone = root.join("alone.brv");
    ok(&["pack", "-q", s(&src), s(&alone)]);
    std::fs::create_dir_all(root.join("tuned")).unwrap();
    let delta = root.join("tuned/model.brv");
    ok(&["pack", "-q", "--base", s(&base_brv), s(&src), s(&delta)]);

    let (alone_len, delta_len) = (len(&alone), len(&delta));
    assert!(
        delta_len * 10 < alone_len * 7,
        "against its base {delta_len} bytes, alone {alone_len}"
    );
    assert_eq!(
        index_version(&delta),
        4,
        "an archive with chunks that are differences from their base is version 4"
    );
    assert_eq!(index_version(&alone), 1, "one without stays version 1");

    let out = root.join("out.safetensors");
    ok(&["unpack", "-q", s(&delta), s(&out)]);
    assert!(std::fs::read(&out).unwrap() == tuned);
    ok(&["verify", "-q", s(&delta), "--against", s(&src)]);

    // Detached, it needs no base: the same bytes as packing the original.
    let detached = root.join("detached.brv");
    ok(&["detach", "-q", s(&delta), s(&detached)]);
    assert!(std::fs::read(&detached).unwrap() == std::fs::read(&alone).unwrap());
    fails_with(
        &["detach", "-q", s(&delta), s(&detached)],
        &["already exists"],
    );
    let leftovers: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let report: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(&delta)])).unwrap();
    assert_eq!(report["bases"], serde_json::json!(["../base/model.brv"]));
    let row = |name: &str| {
        let rows = report["tensors"].as_array().unwrap();
        rows.iter().find(|r| r["name"] == name).unwrap().clone()
    };
    assert!(row("embed")["base_chunks"].as_u64().unwrap() > 0);
    assert!(row("head")["base_chunks"].as_u64().unwrap() > 0);
    // Values moved by a few units in their last place are differences from
    // the base; an unchanged tensor, all zeros either way, is an XOR.
    for name in ["embed", "head"] {
        assert_eq!(
            row(name)["difference_chunks"],
            row(name)["base_chunks"],
            "{name}"
        );
        assert!(row(name)["program"]
            .as_str()
            .unwrap()
            .starts_with("base + "));
    }
    assert!(row("ids")["base_chunks"].as_u64().unwrap() > 0);
    assert_eq!(row("ids")["difference_chunks"], 0);
    // Tensors the base lacks, or has in another shape, cannot reference it.
    assert_eq!(row("new")["base_chunks"], 0);
    assert_eq!(row("resized")["base_chunks"], 0);
    // An unchanged tensor costs next to nothing.
    assert!(
        row("ids")["bytes_out"].as_u64().unwrap() < 64,
        "{}",
        row("ids")
    );
}

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn the_same_checkpoint_against_itself_is_a_few_bytes_per_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = base_and_tuned();
    let base_brv = packed_base(dir.path(), &base);
    let src = dir.path().join("orig/base.safetensors");
    let again = dir.path().join("base/again.brv");
    ok(&["pack", "-q", "--base", s(&base_brv), s(&src), s(&again)]);
    assert!(len(&again) < 2048, "{} bytes", len(&again));
    ok(&["verify", "-q", s(&again), "--against", s(&src)]);
}

#[test]
fn output_against_a_base_is_identical_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    let base_brv = packed_base(root, &base);
    let src = write_temp(&root.join("orig"), "tuned.safetensors", &tuned);
    let (one, two) = (root.join("base/one.brv"), root.join("base/two.brv"));
    let base_arg = s(&base_brv);
    ok(&[
        "pack",
        "-q",
        "-j1",
        "--chunk-size",
        "16384",
        "--base",
        base_arg,
        s(&src),
        s(&one),
    ]);
    ok(&[
        "pack",
        "-q",
        "-j2",
        "--chunk-size",
        "16384",
        "--base",
        base_arg,
        s(&src),
        s(&two),
    ]);
    assert!(std::fs::read(&one).unwrap() == std::fs::read(&two).unwrap());
}

#[test]
fn a_missing_or_replaced_base_is_an_error_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    let base_brv = packed_base(root, &base);
    let src = write_temp(&root.join("orig"), "tuned.safetensors", &tuned);
    std::fs::create_dir_all(root.join("tuned")).unwrap();
    let delta = root.join("tuned/model.brv");
    ok(&["pack", "-q", "--base", s(&base_brv), s(&src), s(&delta)]);
    let out = root.join("out.safetensors");

    // Another checkpoint's archive in the base's place.
    let other = write_temp(&root.join("orig"), "other.safetensors", &tuned);
    std::fs::remove_file(&base_brv).unwrap();
    ok(&["pack", "-q", s(&other), s(&base_brv)]);
    for cmd in ["unpack", "verify", "inspect"] {
        let mut args = vec![cmd, "-q", s(&delta)];
        if cmd == "unpack" {
            args.push(s(&out));
        }
        fails_with(
            &args,
            &[s(&delta), "base/model.brv", "holds another source"],
        );
    }
    std::fs::remove_file(&base_brv).unwrap();
    fails_with(
        &["unpack", "-q", s(&delta), s(&out)],
        &[s(&delta), "needs the base archive", "No such file"],
    );
    assert!(!out.exists(), "nothing is written");
}

/// `pack --force` over an archive that others need as their base is
/// refused, naming them, unless the new archive holds the same source (its
/// dependants read as before) or `--break-dependants` says to.
#[test]
fn overwriting_a_base_of_other_archives_is_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    let base_brv = packed_base(root, &base);
    let src = write_temp(&root.join("orig"), "tuned.safetensors", &tuned);
    let delta = root.join("base/tuned.brv");
    ok(&["pack", "-q", "--base", s(&base_brv), s(&src), s(&delta)]);
    let before = std::fs::read(&base_brv).unwrap();
    for dedup in [&[][..], &["--dedup"]] {
        let args = [&["pack", "-q", "--force"], dedup, &[s(&src), s(&base_brv)]].concat();
        fails_with(
            &args,
            &[
                s(&base_brv),
                "is the base of 1 other archive",
                s(&delta),
                "--break-dependants",
            ],
        );
        assert_eq!(std::fs::read(&base_brv).unwrap(), before);
    }
    ok(&["verify", "-q", s(&delta)]);
    // The same source again, at another level: its dependant still reads.
    let base_src = root.join("orig/base.safetensors");
    ok(&["pack", "-q", "--force", "-1", s(&base_src), s(&base_brv)]);
    ok(&["verify", "-q", s(&delta)]);
    // Told to: replaced, and the dependant no longer reads.
    ok(&[
        "pack",
        "-q",
        "--force",
        "--break-dependants",
        s(&src),
        s(&base_brv),
    ]);
    fails_with(&["verify", "-q", s(&delta)], &["holds another source"]);
}

#[test]
fn a_directory_packs_against_a_directory_of_bases_by_tensor_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    for (name, bytes) in [("base", &base), ("tuned", &tuned)] {
        let model = root.join(name);
        std::fs::create_dir_all(model.join("sub")).unwrap();
        std::fs::write(model.join("sub/model.safetensors"), bytes).unwrap();
        std::fs::write(model.join("config.json"), b"{}").unwrap();
    }
    // The same fine-tune saved again with its tensors split otherwise, and a
    // file none of whose tensors the bases have.
    resharded(&tuned, 2, &root.join("tuned/resharded"));
    let other = build(
        &[tensor("unrelated", "F32", &[1024], noise(9, 4096))],
        &Extras::default(),
    );
    std::fs::write(root.join("tuned/other.safetensors"), other).unwrap();

    let store = root.join("store");
    ok(&["pack", "-q", s(&root.join("base")), s(&store.join("base"))]);
    let tuned_out = store.join("tuned");
    let base_dir = store.join("base");
    ok(&[
        "pack",
        "-q",
        "--base",
        s(&base_dir),
        s(&root.join("tuned")),
        s(&tuned_out),
    ]);
    let head = |p: &Path| index_version(p);
    assert_eq!(head(&tuned_out.join("sub/model.brv")), 4);
    assert_eq!(head(&tuned_out.join("resharded/1.brv")), 4);
    // Its second part's only tensor found in the bases is unchanged: an XOR.
    assert_eq!(head(&tuned_out.join("resharded/2.brv")), 2);
    assert_eq!(head(&tuned_out.join("other.brv")), 1, "packed alone");
    let alone = len(&tuned_out.join("sub/model.brv"));
    let split = len(&tuned_out.join("resharded/1.brv")) + len(&tuned_out.join("resharded/2.brv"));
    assert!(
        split < alone + alone / 20,
        "resharded {split} bytes, same split {alone}"
    );

    let report = ok(&["verify", s(&store)]);
    let base_archive = store.join("base/sub/model.brv").canonicalize().unwrap();
    let needed = format!("{}: a base that 3 archive(s) need", base_archive.display());
    assert!(report.contains(&needed), "{report}");
    assert!(report.contains("; against base "), "{report}");
    // One file against a base saved in two: it references both.
    let split = root.join("base-split");
    resharded(&base, 1, &split);
    ok(&["pack", "-q", s(&split), s(&store.join("base-split"))]);
    let two = store.join("two.brv");
    let src = root.join("tuned/sub/model.safetensors");
    ok(&[
        "pack",
        "-q",
        "--base",
        s(&store.join("base-split")),
        s(&src),
        s(&two),
    ]);
    let report: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(&two)])).unwrap();
    let bases = serde_json::json!(["base-split/1.brv", "base-split/2.brv"]);
    assert_eq!(report["bases"], bases);
    ok(&["verify", "-q", s(&two), "--against", s(&src)]);

    let unpacked = root.join("unpacked");
    ok(&["unpack", "-q", s(&tuned_out), s(&unpacked)]);
    for rel in [
        "sub/model.safetensors",
        "resharded/1.safetensors",
        "other.safetensors",
    ] {
        let got = std::fs::read(unpacked.join(rel)).unwrap();
        assert!(
            got == std::fs::read(root.join("tuned").join(rel)).unwrap(),
            "{rel}"
        );
    }
}

/// The tensors of `file` saved again in `dir` as two files, `1.safetensors`
/// with its first `at` tensors and `2.safetensors` with the others.
fn resharded(file: &[u8], at: usize, dir: &Path) {
    let tensors = safetensors_tensors(file);
    let (first, second) = tensors.split_at(at);
    std::fs::create_dir_all(dir).unwrap();
    for (name, part) in [("1.safetensors", first), ("2.safetensors", second)] {
        std::fs::write(dir.join(name), build(part, &Extras::default())).unwrap();
    }
}

/// The tensors of a file made by `build` (no gaps), in order.
fn safetensors_tensors(file: &[u8]) -> Vec<Tensor> {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&file[8..8 + n]).unwrap();
    let mut tensors: Vec<(u64, Tensor)> = header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(name, t)| {
            let offsets: Vec<u64> = serde_json::from_value(t["data_offsets"].clone()).unwrap();
            let shape: Vec<u64> = serde_json::from_value(t["shape"].clone()).unwrap();
            let data = file[8 + n + offsets[0] as usize..8 + n + offsets[1] as usize].to_vec();
            let dtype = t["dtype"].as_str().unwrap();
            (offsets[0], tensor(name, dtype, &shape, data))
        })
        .collect();
    tensors.sort_by_key(|(at, _)| *at);
    tensors.into_iter().map(|(_, t)| t).collect()
}

#[test]
fn a_base_that_is_not_an_archive_of_safetensors_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (_, tuned) = base_and_tuned();
    let src = write_temp(root, "tuned.safetensors", &tuned);
    let dst = root.join("out.brv");
    fails_with(
        &["pack", "-q", "--base", s(&src), s(&src), s(&dst)],
        &[s(&src), "not a brevis archive"],
    );
    fails_with(
        &[
            "pack",
            "-q",
            "--base",
            s(&root.join("none.brv")),
            s(&src),
            s(&dst),
        ],
        &["none.brv", "No such file"],
    );
    assert!(!dst.exists());
}

/// An archive of one constant chunk of 64 zeros whose index names `count`
/// bases: the archive `path`, holding a source of `sha256` and `len` bytes.
fn referencing(
    dir: &Path,
    name: &str,
    (path, sha256, len): (&str, [u8; 32], u64),
    count: usize,
) -> std::path::PathBuf {
    use brevis::archive::{assemble, BaseEntry, BaseSpan, ChunkEntry, Index};
    let zeros = [0u8; 64];
    let entry = BaseEntry {
        sha256,
        source_len: len,
        path: path.into(),
    };
    let index = Index {
        source_len: 64,
        sha256: [3; 32],
        chunk_size: 64,
        bases: vec![entry; count],
        rows: Vec::new(),
        tables: Vec::new(),
        chunks: vec![ChunkEntry {
            layout: brevis::safetensors::Layout::Bytes,
            src_len: 64,
            rec_len: 2,
            checksum: twox_hash::XxHash3_64::oneshot(&zeros),
            base: Some(BaseSpan {
                base: 0,
                rows: None,
                offset: 0,
                combine: brevis::archive::Combine::Xor,
            }),
        }],
    };
    let const_zero: &[u8] = &[1, 0];
    write_temp(dir, name, &assemble([const_zero], &index, index.version()))
}

#[test]
fn chains_of_bases_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    // Its own base: its index names its own source.
    let deep = referencing(dir.path(), "loop.brv", ("loop.brv", [3; 32], 64), 1);
    let Err(err) = brevis::archive::Archive::open(&deep) else {
        panic!("an archive that is its own base opened");
    };
    assert!(
        err.to_string().contains("bases nest deeper than 8"),
        "{err}"
    );
    // A hundred times the same good base.
    let (base, _) = base_and_tuned();
    let base_brv = packed_base(dir.path(), &base);
    let good = brevis::archive::Archive::open(&base_brv).unwrap();
    let named = ("base/model.brv", good.sha256(), good.len());
    let wide = referencing(dir.path(), "wide.brv", named, 100);
    let Err(err) = brevis::archive::Archive::open_unmapped(&wide) else {
        panic!("an archive with 100 bases opened");
    };
    assert!(
        err.to_string().contains("more than 64 bases in all"),
        "{err}"
    );
    // Sixty-four are allowed, and the chunk decodes: zeros XOR the base's
    // first 64 bytes, which its checksum (of zeros) refuses.
    let fine = referencing(dir.path(), "fine.brv", named, 64);
    let a = brevis::archive::Archive::open(&fine).unwrap();
    let err = a.read_at(0, &mut [0u8; 64]).unwrap_err().to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
}

#[test]
fn a_base_that_is_a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.brv");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let archive = referencing(dir.path(), "a.brv", ("fifo.brv", [3; 32], 64), 1);
    let Err(err) = brevis::archive::Archive::open(&archive) else {
        panic!("a FIFO opened as a base");
    };
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn dedup_finds_tensors_saved_under_other_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, _) = base_and_tuned();
    let base_brv = packed_base(root, &base);
    // The base's tensors under new names (as a model whose layers were
    // renamed, or whose tied weights were saved twice), and one new tensor.
    let mut renamed = safetensors_tensors(&base);
    for t in &mut renamed {
        t.name = format!("model.{}", t.name);
    }
    renamed.push(tensor("fresh", "F32", &[2048], noise(30, 8192)));
    let src = write_temp(
        root,
        "renamed.safetensors",
        &build(&renamed, &Extras::default()),
    );
    let (by_name, by_content) = (root.join("base/by-name.brv"), root.join("base/dedup.brv"));
    ok(&["pack", "-q", "--base", s(&base_brv), s(&src), s(&by_name)]);
    ok(&[
        "pack",
        "-q",
        "--base",
        s(&base_brv),
        "--dedup",
        s(&src),
        s(&by_content),
    ]);
    // No name matches: its matrices are found row by row in the base's
    // of their dtype and row shape (row maps), its vectors not at all.
    assert_eq!(index_version(&by_name), 9, "matrices matched by rows");
    let alone = root.join("alone.brv");
    ok(&["pack", "-q", s(&src), s(&alone)]);
    assert!(len(&by_name) * 2 < len(&alone), "rows found");
    assert!(
        len(&by_content) < len(&by_name),
        "deduplicated {} bytes, by rows {}",
        len(&by_content),
        len(&by_name)
    );
    ok(&["verify", "-q", s(&by_content), "--against", s(&src)]);
    ok(&["verify", "-q", s(&by_name), "--against", s(&src)]);
}

/// The bases an archive's index names, from `inspect --json`.
fn bases_named(archive: &Path) -> serde_json::Value {
    let report: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(archive)])).unwrap();
    report["bases"].clone()
}

#[test]
fn dedup_matches_earlier_files_of_a_run_and_archives_already_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let x = tensor("x", "F32", &[64, 256], noise(41, 65536));
    let y = tensor("y", "BF16", &[128, 256], noise(42, 65536));
    let renamed = |t: &Tensor, name: &str| Tensor {
        name: name.into(),
        ..t.clone()
    };
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let file = |tensors: &[Tensor]| build(tensors, &Extras::default());
    std::fs::write(src.join("a.safetensors"), file(&[x.clone(), y.clone()])).unwrap();
    let fresh = tensor("fresh", "F32", &[1024], noise(43, 4096));
    let b = file(&[renamed(&x, "copy.of.x"), fresh]);
    std::fs::write(src.join("b.safetensors"), &b).unwrap();

    let store = root.join("store");
    ok(&["pack", "-q", "--dedup", s(&src), s(&store)]);
    // The run's second file references its first, and is mostly references.
    assert_eq!(bases_named(&store.join("a.brv")), serde_json::json!([]));
    assert_eq!(
        bases_named(&store.join("b.brv")),
        serde_json::json!(["a.brv"])
    );
    assert!(
        len(&store.join("b.brv")) < 8192,
        "{}",
        len(&store.join("b.brv"))
    );

    // A file packed into the store later finds what is already there.
    let c = root.join("c.safetensors");
    std::fs::write(&c, file(&[renamed(&y, "tied.y")])).unwrap();
    ok(&["pack", "-q", "--dedup", s(&c), s(&store.join("c.brv"))]);
    assert_eq!(
        bases_named(&store.join("c.brv")),
        serde_json::json!(["a.brv"])
    );
    assert!(len(&store.join("c.brv")) < 4096);

    // A model packed into a folder of the store names the store to match.
    let d = root.join("d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("m.safetensors"), file(&[renamed(&x, "x2")])).unwrap();
    let store_arg = format!("--dedup={}", s(&store));
    ok(&["pack", "-q", &store_arg, s(&d), s(&store.join("d"))]);
    assert_eq!(
        bases_named(&store.join("d/m.brv")),
        serde_json::json!(["../a.brv"])
    );
    fails_with(
        &["pack", "--dedup=/nonexistent", s(&d), s(&root.join("e"))],
        &["/nonexistent", "--dedup=STORE: not a directory"],
    );

    // Packed again over itself, the run neither references an output it is
    // about to rewrite nor breaks the archives that depend on it.
    ok(&["pack", "-q", "--force", "--dedup", s(&src), s(&store)]);
    assert_eq!(
        bases_named(&store.join("b.brv")),
        serde_json::json!(["a.brv"])
    );
    ok(&["verify", "-q", s(&store)]);
    let out = root.join("out");
    ok(&["unpack", "-q", s(&store), s(&out)]);
    assert!(std::fs::read(out.join("b.safetensors")).unwrap() == b);
    assert!(std::fs::read(out.join("c.safetensors")).unwrap() == std::fs::read(&c).unwrap());

    fails_with(
        &[
            "pack",
            "--dedup",
            "--shard",
            "0/2",
            s(&src),
            s(&root.join("s")),
        ],
        &["--dedup with --shard"],
    );
}

#[test]
fn dedup_references_no_more_bases_than_a_reader_opens() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = root.join("store");
    std::fs::create_dir_all(&store).unwrap();
    // One small archive per tensor, more of them than a reader may open.
    let count = brevis::archive::MAX_OPENED_BASES + 6;
    let tensors: Vec<Tensor> = (0..count)
        .map(|i| tensor(&format!("t{i}"), "F32", &[256], noise(100 + i as u64, 1024)))
        .collect();
    for (i, t) in tensors.iter().enumerate() {
        let src = write_temp(
            root,
            &format!("{i}.safetensors"),
            &build(std::slice::from_ref(t), &Extras::default()),
        );
        ok(&["pack", "-q", s(&src), s(&store.join(format!("{i:03}.brv")))]);
    }
    let all = write_temp(
        root,
        "all.safetensors",
        &build(&tensors, &Extras::default()),
    );
    let out = store.join("all.brv");
    ok(&["pack", "-q", "--dedup", s(&all), s(&out)]);
    let named = bases_named(&out).as_array().unwrap().len();
    assert_eq!(
        named,
        brevis::archive::MAX_OPENED_BASES,
        "as many as a reader opens"
    );
    ok(&["verify", "-q", s(&out), "--against", s(&all)]);
}

/// `pack --base` against a base whose own bases nest too deep for a reader
/// packs without it and says so, naming the base.
#[test]
fn a_base_nested_too_deep_is_named_when_packing_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    let mut prev = packed_base(root, &base);
    let src = write_temp(&root.join("orig"), "tuned.safetensors", &tuned);
    // Each packed against the one before: the seventh's bases nest 6 deep.
    for k in 1..=6 {
        let next = root.join(format!("base/chain{k}.brv"));
        let out = brevis(&["pack", "-q", "--base", s(&prev), s(&src), s(&next)]);
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "link {k}");
        prev = next;
    }
    let last = root.join("base/last.brv");
    let out = brevis(&["pack", "-q", "--base", s(&prev), s(&src), s(&last)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("chain6.brv: its bases nest 6 deep"), "{err}");
    assert!(err.contains("is packed without it"), "{err}");
    assert_eq!(index_version(&last), 1, "no base named");
    ok(&["verify", "-q", s(&last)]);
}

/// A store whose files include junk (random bytes named .brv, a dangling
/// link, an archive whose base is gone) still serves `--dedup`: each such
/// file is named in a warning and left out.
#[test]
fn dedup_skips_what_it_cannot_read_in_the_store_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (base, tuned) = base_and_tuned();
    let base_brv = packed_base(root, &base);
    let store = base_brv.parent().unwrap();
    let src = write_temp(&root.join("orig"), "tuned.safetensors", &tuned);
    let orphan = store.join("orphan.brv");
    ok(&["pack", "-q", "--base", s(&base_brv), s(&src), s(&orphan)]);
    let moved = root.join("moved.brv");
    std::fs::rename(&base_brv, &moved).unwrap();
    std::fs::write(store.join("junk.brv"), noise(9, 4096)).unwrap();
    std::os::unix::fs::symlink("nowhere.brv", store.join("gone.brv")).unwrap();
    std::fs::rename(&moved, store.join("model2.brv")).unwrap();
    let out = root.join("out.brv");
    let dedup = format!("--dedup={}", s(store));
    let run = brevis(&["pack", "-q", &dedup, s(&src), s(&out)]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    for name in ["junk.brv", "gone.brv", "orphan.brv"] {
        assert!(err.contains(name), "{name} not named: {err}");
    }
    assert!(err.contains("not matched against (--dedup)"), "{err}");
    assert!(!err.contains("model2.brv"), "{err}");
    ok(&["verify", "-q", s(&out)]);
    // It matched the readable archive: the output needs it.
    assert_eq!(index_version(&out), 2);
}
