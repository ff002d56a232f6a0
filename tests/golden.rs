//! The golden archives of each format version (tests/golden/vN, written once by
//! `examples/golden.rs`, never regenerated) still decode to their originals,
//! through every reading path; together they use every operator, codec, rANS
//! scale and lane-group count, layout and dtype mapping; and they are the bytes
//! that were frozen (tests/golden/vN/SHA256SUMS).

use brevis::archive::{self, Archive, ChunkEntry, Combine};
use brevis::codec::{peek_codec, Codec};
use brevis::dsl::{decode_program, EncodedLit, Fields, Op, Program, Type};
use brevis::safetensors::Layout;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn golden_dir(version: u8) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/v{version}"))
}

/// The archives of a version's folder, sorted.
fn archives(version: u8) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(golden_dir(version))
        .expect("golden folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "brv"))
        .collect();
    found.sort();
    found
}

/// Golden archives of each version, and how many each version has at least.
const VERSIONS: [(u8, usize); 11] = [
    (1, 10),
    (2, 3),
    (3, 1),
    (4, 3),
    (5, 1),
    (6, 4),
    (7, 1),
    (8, 1),
    (9, 4),
    (10, 1),
    (11, 1),
];

#[test]
fn golden_archives_decode_to_their_originals() {
    for (version, least) in VERSIONS {
        let found = archives(version);
        assert!(found.len() >= least, "only {} golden archives", found.len());
        decode_every_way(found);
    }
}

/// `brevis inspect` reads every version's literals, rANS's old form among
/// them: a row has code table bytes exactly where it has Huffman or rANS
/// literals, and the archive's are its rows'.
#[test]
fn golden_archives_inspect_with_their_code_tables() {
    let entropy_coded = ["huffman", "rans", "rans-v1"];
    let mut seen = BTreeSet::new();
    for (version, _) in VERSIONS {
        for brv in archives(version) {
            let a = Archive::open(&brv).unwrap();
            let mut of_rows = 0;
            let report = brevis::inspect::inspect(&a, |row| {
                let coded = entropy_coded.iter().any(|c| row.codecs.contains_key(c));
                assert_eq!(
                    coded,
                    row.table_bytes > 0,
                    "{}: {}",
                    brv.display(),
                    row.name
                );
                seen.extend(row.codecs.keys().copied());
                of_rows += row.table_bytes;
                Ok(())
            })
            .unwrap();
            assert_eq!(report.table_bytes, of_rows, "{}", brv.display());
            assert!(report.table_bytes < report.archive_len);
        }
    }
    assert!(entropy_coded.iter().all(|c| seen.contains(c)), "{seen:?}");
}

fn decode_every_way(found: Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    for brv in found {
        let original = std::fs::read(brv.with_extension("safetensors")).unwrap();
        let a = Archive::open(&brv).unwrap();
        let mut all = vec![0u8; original.len()];
        assert_eq!(a.read_at(0, &mut all).unwrap(), original.len());
        assert!(all == original, "{}: read_at differs", brv.display());
        archive::verify(&a, Some(&brv.with_extension("safetensors")), &|_| {}).unwrap();
        let out = dir.path().join("out.safetensors");
        archive::unpack_file(&a, &out, &|_| {}).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == original,
            "{}: unpack differs",
            brv.display()
        );
        let unmapped = Archive::open_unmapped(&brv).unwrap();
        let mut all = vec![0u8; original.len()];
        unmapped.read_at(0, &mut all).unwrap();
        assert!(all == original, "{}: unmapped read differs", brv.display());
    }
}

#[test]
fn golden_archives_are_the_frozen_bytes() {
    for (version, _) in VERSIONS {
        frozen(version);
    }
}

/// Every file of a version's folder has the SHA-256 its SHA256SUMS lists.
fn frozen(version: u8) {
    let dir = golden_dir(version);
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let mut listed = 0;
    for line in sums.lines() {
        let (sum, name) = line.split_once("  ").expect("sha256sum format");
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(hex(&Sha256::digest(&bytes)), sum, "{name} changed");
        listed += 1;
    }
    let files = std::fs::read_dir(&dir).unwrap().count() - 1;
    assert_eq!(listed, files, "every golden file is listed in SHA256SUMS");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What one program node shows of the format: its operator and kind, or its
/// literal's codec (with scale and lane groups for rANS).
fn features(p: &Program<EncodedLit>, out: &mut BTreeSet<String>) {
    let feature = match &p.op {
        Op::Lit(l) => match peek_codec(l.bytes).unwrap() {
            Codec::RansV1 => {
                let head = l.bytes[1];
                out.insert(format!("rans groups {}", 1 << (head >> 4)));
                format!("rans scale {}", head & 15)
            }
            Codec::Rans => {
                let head = l.bytes[1];
                out.insert(format!("seeded rans groups {}", 1 << (head >> 4 & 1)));
                out.insert(format!("seeded rans precision {}", head >> 5));
                format!("seeded rans scale {}", head & 15)
            }
            codec => format!("lit {}", codec.name()),
        },
        Op::Const(_) => "const".into(),
        Op::Concat(_) => "concat".into(),
        Op::Repeat { .. } => "repeat".into(),
        // Kinds by name, without their parameters.
        Op::Map { op, .. } => format!("map {}", op.to_string().split(' ').next().unwrap()),
        Op::Scan { op, .. } => format!("scan {op}"),
        Op::Merge { fields, .. } => {
            format!("merge {}", fields.to_string().split(' ').next().unwrap())
        }
        Op::Palette { .. } => "palette".into(),
        Op::Scaled { format, .. } => format!("scaled {}", Fields::Float(*format)),
        Op::Match { .. } => "match".into(),
        Op::Sparse { .. } => "sparse".into(),
        Op::Partition { parts, .. } => format!("partition {}", parts.len()),
        Op::ColumnScan { .. } => "column scan".into(),
        Op::Mirror { at, .. } => {
            let about = if at.pivot == at.row {
                "past the row"
            } else {
                "its middle"
            };
            format!("mirror about {about}")
        }
    };
    out.insert(feature);
    p.children().for_each(|c| features(c, out));
}

/// Everything the golden archives of `version` exercise.
fn coverage(version: u8) -> BTreeSet<String> {
    coverage_of(version, archives(version))
}

/// Everything the golden archives `found` of `version` exercise.
fn coverage_of(version: u8, found: Vec<PathBuf>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for brv in found {
        let a = Archive::open(&brv).unwrap();
        for (i, chunk) in a.chunks().iter().enumerate() {
            seen.insert(format!("layout {:?}", chunk.layout));
            let record = a.record(i).unwrap();
            let ty = Type {
                width: chunk.layout.lane_width(),
                len: (chunk.src_len / chunk.layout.element_bytes() as u64) as usize,
            };
            let mut pos = 0;
            for _ in 0..chunk.layout.lanes() {
                let (p, used) =
                    decode_program(&record[pos..], ty, archive::program_limits(version)).unwrap();
                features(&p, &mut seen);
                pos += used;
            }
        }
        let original = std::fs::read(brv.with_extension("safetensors")).unwrap();
        let header = brevis::safetensors::parse(original.len() as u64, |n| {
            Ok(original[..n as usize].to_vec())
        })
        .unwrap();
        for t in header.tensors {
            seen.insert(format!("dtype {}", t.dtype));
        }
    }
    seen
}

#[test]
fn golden_archives_cover_the_whole_format() {
    let seen = coverage(1);
    let mut want: Vec<String> = [
        "const",
        "concat",
        "repeat",
        "lit raw",
        "lit bitpack",
        "lit huffman",
        "map xor",
        "map add",
        "map zigzag",
        "map gray",
        "map rotl",
        "map bitrev",
        "scan xor",
        "scan add",
        "merge f32",
        "merge bf16",
        "merge f16",
        "merge e4m3",
        "merge e5m2",
        "merge split",
        "merge bits",
        "merge bytes",
        "rans scale 12",
        "rans scale 13",
        "rans scale 14",
        "rans groups 1",
        "rans groups 2",
        "layout Bytes",
        "layout Half",
        "layout Word",
        "layout Double",
    ]
    .map(String::from)
    .to_vec();
    for dtype in [
        "F64", "I64", "U64", "F32", "I32", "U32", "F16", "BF16", "I16", "U16", "I8", "U8", "BOOL",
        "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E3M2",
    ] {
        want.push(format!("dtype {dtype}"));
    }
    let missing: Vec<&String> = want.iter().filter(|w| !seen.contains(*w)).collect();
    assert!(
        missing.is_empty(),
        "not covered: {missing:?}\nseen: {seen:?}"
    );
}

#[test]
fn version_3_golden_archives_use_its_operators_and_earlier_versions_refuse_them() {
    let seen = coverage(3);
    for feature in ["palette", "scaled f32", "scaled bf16", "scaled f16"] {
        assert!(seen.contains(feature), "{feature} not covered: {seen:?}");
    }
    for brv in archives(3) {
        let mut bytes = std::fs::read(&brv).unwrap();
        assert_eq!(bytes[7], 3);
        // The same bytes labelled version 2 must not decode: a Palette is not
        // an operator of version 2.
        bytes[7] = 2;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relabelled.brv");
        std::fs::write(&path, bytes).unwrap();
        let err = match Archive::open(&path) {
            // A version 3 index without bases lists none, which version 2 forbids.
            Err(e) => e.to_string(),
            Ok(a) => archive::verify(&a, None, &|_| {}).unwrap_err().to_string(),
        };
        assert!(err.contains("relabelled.brv"), "{err}");
        assert!(
            err.contains("unknown operator") || err.contains("lists no base"),
            "{err}"
        );
    }
}

/// The version 4 golden archives of the Match operator (named `match*`).
fn match_archives() -> Vec<PathBuf> {
    let named = |p: &PathBuf| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("match")
    };
    archives(4).into_iter().filter(named).collect()
}

#[test]
fn version_4_match_archives_use_copies_and_earlier_versions_refuse_them() {
    let found = match_archives();
    assert!(!found.is_empty(), "no match* archive in tests/golden/v4");
    let seen = coverage_of(4, found.clone());
    assert!(seen.contains("match"), "match not covered: {seen:?}");
    // A Match is not an operator of version 3.
    found
        .iter()
        .for_each(|brv| refused_as_older(brv, 4, "unknown operator"));
}

/// `brv` labelled `version` (in `dir`, beside any base copied there) must
/// not open: its index holds what that version's does not. The message.
fn index_refused_as(brv: &Path, version: u8, dir: &Path) -> String {
    let mut bytes = std::fs::read(brv).unwrap();
    bytes[7] = version;
    let path = dir.join("relabelled.brv");
    std::fs::write(&path, bytes).unwrap();
    let err = Archive::open(&path).err().expect("refused").to_string();
    assert!(err.contains("relabelled.brv"), "{err}");
    err
}

/// The golden archive `brv` of `version`, labelled `version - 1`, must not
/// decode: it uses an operator that version does not have.
fn refused_as_older(brv: &Path, version: u8, reason: &str) {
    let mut bytes = std::fs::read(brv).unwrap();
    assert_eq!(bytes[7], version);
    bytes[7] = version - 1;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relabelled.brv");
    std::fs::write(&path, bytes).unwrap();
    let a = Archive::open(&path).unwrap();
    let err = archive::verify(&a, None, &|_| {}).unwrap_err().to_string();
    assert!(err.contains("relabelled.brv"), "{err}");
    assert!(err.contains(reason), "{err}");
}

#[test]
fn version_5_golden_archives_use_sparse_nodes_and_version_4_refuses_them() {
    let found = archives(5);
    let seen = coverage_of(5, found.clone());
    assert!(seen.contains("sparse"), "sparse not covered: {seen:?}");
    for layout in ["Bytes", "Half", "Word"] {
        assert!(
            seen.contains(&format!("layout {layout}")),
            "{layout}: {seen:?}"
        );
    }
    // A Sparse node is not an operator of version 4.
    found
        .iter()
        .for_each(|brv| refused_as_older(brv, 5, "unknown operator"));
}

#[test]
fn version_6_golden_archives_use_seeded_rans_and_version_5_refuses_them() {
    let found = archives(6);
    let seen = coverage_of(6, found.clone());
    let seeded: Vec<&String> = seen
        .iter()
        .filter(|f| f.starts_with("seeded rans"))
        .collect();
    for feature in ["seeded rans groups 1", "seeded rans groups 2"] {
        assert!(seen.contains(feature), "{feature} not covered: {seen:?}");
    }
    let scales = seeded.iter().filter(|f| f.contains("scale")).count();
    let precisions = seeded.iter().filter(|f| f.contains("precision")).count();
    assert!(scales >= 3 && precisions >= 2, "{seeded:?}");
    // A rANS literal of tag 4 is not a codec of version 5.
    found
        .iter()
        .for_each(|brv| refused_as_older(brv, 6, "needs format version 6"));
}

#[test]
fn version_7_golden_archives_use_partitions_and_version_6_refuses_them() {
    let found = archives(7);
    let seen = coverage_of(7, found.clone());
    let counts = seen.iter().filter(|f| f.starts_with("partition")).count();
    assert!(counts >= 1, "no partition: {seen:?}");
    for dtype in ["F16", "BF16", "F32"] {
        assert!(
            seen.contains(&format!("dtype {dtype}")),
            "{dtype}: {seen:?}"
        );
    }
    // A Partition is not an operator of version 6.
    found
        .iter()
        .for_each(|brv| refused_as_older(brv, 7, "unknown operator"));
}

#[test]
fn version_8_golden_archives_use_mirrors_and_version_7_refuses_them() {
    let found = archives(8);
    let seen = coverage_of(8, found.clone());
    for feature in [
        "mirror about past the row",
        "mirror about its middle",
        "dtype F32",
        "dtype BF16",
    ] {
        assert!(seen.contains(feature), "{feature} not covered: {seen:?}");
    }
    // A Mirror is not an operator of version 7.
    found
        .iter()
        .for_each(|brv| refused_as_older(brv, 8, "unknown operator"));
}

#[test]
fn version_10_golden_archives_share_code_tables_and_version_9_refuses_them() {
    let found = archives(10);
    for brv in &found {
        let a = Archive::open(brv).unwrap();
        assert_eq!(a.version(), 10);
        assert!(!a.index().tables.is_empty(), "{}", brv.display());
        // Labelled version 9, the index has no table of code tables.
        let tmp = tempfile::tempdir().unwrap();
        let err = index_refused_as(brv, 9, tmp.path());
        assert!(err.contains("corrupt"), "{err}");
    }
    let seen = coverage(10);
    assert!(seen.contains("lit shared"), "{seen:?}");
}

#[test]
fn version_11_golden_archives_scan_columns_and_version_10_refuses_them() {
    let found = archives(11);
    let seen = coverage_of(11, found.clone());
    for feature in ["column scan", "dtype F16", "dtype F32"] {
        assert!(seen.contains(feature), "{feature} not covered: {seen:?}");
    }
    // A ColumnScan is not an operator of version 10.
    found
        .iter()
        .for_each(|brv| refused_as_older(brv, 11, "unknown operator"));
}

#[test]
fn version_9_golden_archives_gather_rows_of_their_base_and_version_8_refuses_them() {
    let dir = golden_dir(9);
    for (name, difference) in [("extended", false), ("pruned", false), ("trained", true)] {
        let brv = dir.join(format!("rows-{name}.brv"));
        let a = Archive::open(&brv).unwrap();
        assert_eq!(a.version(), 9, "{name}");
        assert_eq!(a.index().rows.len(), 2, "{name}: embedding and head");
        let in_rows = |combine| {
            let of = move |c: &ChunkEntry| {
                c.base
                    .is_some_and(|s| s.rows.is_some() && s.combine == combine)
            };
            a.chunks().iter().any(of)
        };
        assert!(in_rows(Combine::Xor), "{name}");
        assert_eq!(in_rows(Combine::Difference), difference, "{name}");
        // Labelled version 8, the index has no table of row maps.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::copy(dir.join("rows-base.brv"), tmp.path().join("rows-base.brv")).unwrap();
        let err = index_refused_as(&brv, 8, tmp.path());
        assert!(err.contains("corrupt"), "{err}");
    }
    let pruned = Archive::open(dir.join("rows-pruned.brv")).unwrap();
    let runs = pruned.index().rows[0].runs();
    assert!(runs.len() > 100, "reordered rows: a run each");
}

#[test]
fn a_version_this_build_does_not_know_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(golden_dir(1).join("structured.brv")).unwrap();
    bytes[7] = archive::FORMAT_VERSION + 1;
    let path = dir.path().join("newer.brv");
    std::fs::write(&path, bytes).unwrap();
    let Err(err) = Archive::open(&path) else {
        panic!("an archive of a newer version was opened");
    };
    let err = err.to_string();
    let newer = format!(
        "format version {} is not supported",
        archive::FORMAT_VERSION + 1
    );
    assert!(err.contains(&newer), "{err}");
    assert!(err.contains("newer.brv"), "{err}");
    assert!(
        !err.contains("corrupt"),
        "a newer archive is not called corrupt: {err}"
    );
}

#[test]
fn version_4_golden_archives_are_differences_from_their_base_and_version_3_refuses_them() {
    let tuned = golden_dir(4).join("difference-tuned.brv");
    let a = Archive::open(&tuned).unwrap();
    assert_eq!(a.version(), 4);
    for layout in Layout::ALL {
        let differs = |c: &ChunkEntry| {
            c.layout == layout && c.base.is_some_and(|s| s.combine == Combine::Difference)
        };
        assert!(a.chunks().iter().any(differs), "{layout:?}");
    }
    // Labelled version 3, the difference flag is no layout.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        golden_dir(4).join("difference-base.brv"),
        dir.path().join("difference-base.brv"),
    )
    .unwrap();
    let err = index_refused_as(&tuned, 3, dir.path());
    assert!(err.contains("unknown chunk layout"), "{err}");
}

#[test]
fn version_2_golden_archives_reference_their_bases() {
    let tuned = Archive::open(golden_dir(2).join("tuned.brv")).unwrap();
    assert_eq!(tuned.index().version(), 2);
    assert_eq!(tuned.index().bases[0].path, "base.brv");
    assert!(tuned.chunks().iter().any(|c| c.base.is_some()));
    assert!(tuned.chunks().iter().any(|c| c.base.is_none()));
    let again = Archive::open(golden_dir(2).join("tuned-again.brv")).unwrap();
    assert_eq!(again.bases()[0].bases().len(), 1, "a chain of two bases");
}
