//! Writes the golden archives of a format version, with their originals, into
//! a new folder:
//!
//!   cargo run --release --example golden -- tests/golden/v1 1
//!   cargo run --release --example golden -- tests/golden/v2 2
//!
//! Golden archives freeze what a version decodes: they are never regenerated.
//! This refuses to write into a folder that exists; a new format version gets
//! a new folder beside the old ones, which stay.
//!
//! Most archives are packed by the real packer from generated checkpoints
//! (floats of every width, integers, structure, the safetensors format's odd
//! corners). One, `handmade`, holds programs built by hand for what the search
//! seldom picks on small inputs: every Map and Scan kind, every Merge field
//! set, Raw and BitPack literals, rANS at scales 12 to 14. Its tensors are the
//! outputs of those programs, and its records are replaced by them after
//! packing; each is checked to decode to its tensor before it is written.
//!
//! Version 2 adds bases: `base` is a version 1 archive, `tuned` (its weights
//! moved a little, one tensor unchanged, one new, one resized) is packed
//! against it, and `tuned-again` (moved again) against `tuned`, a chain.
//!
//! Version 6 adds rANS literals of tag 4: the weight files of version 1's set
//! packed again.
//!
//! Version 7 adds the Partition operator: matrices whose rows differ in
//! scale.
//!
//! Version 8 adds the Mirror operator: rows that are their own mirror
//! image.
//!
//! Version 9 adds row maps: `rows-base` (an embedding and a head of 256
//! rows) is the base of `rows-extended` (40 rows appended to both),
//! `rows-pruned` (200 of them, shuffled) and `rows-trained` (the extended
//! one with its old rows moved by a unit in their last place).
//!
//! Version 10 adds shared code tables: matrices whose chunks' literals
//! share one table a tensor.
//!
//! Version 11 adds the ColumnScan operator: sinusoidal position tables,
//! whose columns change slowly down their rows.
//!
//! Version 4 adds differences from a base: `difference-tuned` (every value of
//! every float width moved by a few units in its last place) is packed against
//! `difference-base`.

#[path = "../tests/common/mod.rs"]
mod common;

use brevis::archive::{
    decode_record, pack_file, Archive, BaseSources, ChunkEntry, Combine, Index, PackOptions,
};
use brevis::codec::{self, Codec, Stats};
use brevis::dsl::{self, encode_program, Fields, FloatFormat, Literal, MapOp, Op, Program};
use brevis::dsl::{ScanOp, Type};
use brevis::safetensors::Layout;
use common::{build, noise, tensor, Extras, Tensor};
use std::path::Path;
use std::sync::Arc;

fn main() {
    let usage = "usage: golden FOLDER VERSION";
    let dir = std::env::args().nth(1).expect(usage);
    let version: u8 = std::env::args().nth(2).expect(usage).parse().expect(usage);
    let dir = Path::new(&dir);
    assert!(
        !dir.exists(),
        "{} exists: golden archives are never regenerated",
        dir.display()
    );
    std::fs::create_dir_all(dir).unwrap();
    match version {
        1 => {
            for (name, bytes, chunk) in packed() {
                let src = dir.join(format!("{name}.safetensors"));
                std::fs::write(&src, bytes).unwrap();
                pack(&src, chunk, None);
            }
            handmade(dir);
        }
        2 => based(dir),
        3 => dequantized(dir),
        4 => {
            differences(dir);
            // The Match operator's archives (file names `match*`).
            matched(dir);
        }
        5 => sparse(dir),
        6 => seeded_rans(dir),
        7 => partitioned(dir),
        8 => mirrored(dir),
        9 => row_maps(dir),
        10 => shared_tables(dir),
        11 => column_scans(dir),
        _ => panic!("{usage}: VERSION is 1 to 11"),
    }
}

/// Version 3: checkpoints quantized to a few levels per group of a row and
/// stored back in wide dtypes (BF16, F16, F32), which the packer stores as
/// Scaled nodes, and per-group codebooks, which it stores as Palettes.
fn dequantized(dir: &Path) {
    let plain = Extras::default();
    // Weights rounded to `levels` multiples of a per-group scale.
    let quantized = |seed, groups: usize, group: usize, levels: f32| -> Vec<f32> {
        let w = f32s(groups * group, seed, 0.02);
        w.chunks(group)
            .flat_map(|g| {
                let scale = g.iter().fold(0f32, |m, x| m.max(x.abs())) / levels;
                g.iter().map(move |x| (x / scale).round() * scale)
            })
            .collect()
    };
    let w4 = quantized(31, 256, 64, 7.0);
    let w3 = quantized(32, 64, 128, 3.0);
    // Each group of 128 drawn from 8 values of its own.
    let w = f32s(128 * 128 + 8 * 128, 33, 0.02);
    let books = (0..128 * 128).map(|i| {
        let book = &w[128 * 128 + (i / 128) * 8..][..8];
        bf16(book[(w[i].to_bits() as usize >> 7) % 8])
    });
    let tensors = vec![
        tensor("books.bf16", "BF16", &[128, 128], bytes16(books)),
        tensor(
            "q4.bf16",
            "BF16",
            &[128, 128],
            bytes16(w4.iter().map(|&x| bf16(x))),
        ),
        // Rounded to nearest, as numpy and torch convert.
        tensor(
            "q4.f16",
            "F16",
            &[128, 128],
            bytes16(
                w4.iter()
                    .map(|&x| dsl::round_to(FloatFormat::F16, x) as u16),
            ),
        ),
        tensor(
            "q3.f32",
            "F32",
            &[64, 128],
            bytes32(w3.iter().map(|x| x.to_bits())),
        ),
    ];
    let src = dir.join("dequantized.safetensors");
    std::fs::write(&src, build(&tensors, &plain)).unwrap();
    let a = pack(&src, 16 * 1024, None);
    assert_eq!(a.version(), 3, "palettes make a version 3 archive");
}

/// Version 4: a checkpoint whose values moved by a few units in their last
/// place, of every element width (F8_E4M3, BF16, F16, F32, F64), packed
/// against its base as differences; one tensor is unchanged (an XOR).
fn differences(dir: &Path) {
    let mut rng = Rng(41);
    // `word` moved by `delta` units in sign-magnitude order (`bits` wide).
    let nudge = |word: u64, bits: u32, delta: i64| -> u64 {
        let mask = u64::MAX >> (64 - bits);
        let flip = |v: u64| v ^ (((v >> (bits - 1)) & 1) * (mask >> 1));
        flip(flip(word).wrapping_add(delta as u64) & mask)
    };
    let w = f32s(4096, 42, 0.02);
    let words: [(&str, u32, Vec<u64>); 5] = [
        (
            "fp8",
            8,
            w.iter().map(|x| (x.to_bits() >> 24) as u64).collect(),
        ),
        ("bf16", 16, w.iter().map(|&x| bf16(x) as u64).collect()),
        ("f16", 16, w.iter().map(|&x| f16(x) as u64).collect()),
        ("f32", 32, w.iter().map(|x| x.to_bits() as u64).collect()),
        ("f64", 64, w.iter().map(|&x| (x as f64).to_bits()).collect()),
    ];
    let dtype = |name: &str| match name {
        "fp8" => "F8_E4M3",
        other => Box::leak(other.to_uppercase().into_boxed_str()),
    };
    let file = |moved: bool, rng: &mut Rng| {
        let mut tensors: Vec<Tensor> = words
            .iter()
            .map(|(name, bits, ws)| {
                let bytes = ws
                    .iter()
                    .flat_map(|&v| {
                        let delta = (rng.next() % 5) as i64 - 2;
                        let v = if moved { nudge(v, *bits, delta) } else { v };
                        v.to_le_bytes()[..*bits as usize / 8].to_vec()
                    })
                    .collect();
                tensor(name, dtype(name), &[64, 64], bytes)
            })
            .collect();
        let ids = (0..512i64).flat_map(|i| i.to_le_bytes()).collect();
        tensors.push(tensor("position_ids", "I64", &[512], ids));
        build(&tensors, &Extras::default())
    };
    let base = dir.join("difference-base.safetensors");
    std::fs::write(&base, file(false, &mut rng)).unwrap();
    pack(&base, 16 << 10, None);
    let tuned = dir.join("difference-tuned.safetensors");
    std::fs::write(&tuned, file(true, &mut rng)).unwrap();
    let a = pack(&tuned, 16 << 10, Some(&base.with_extension("brv")));
    assert_eq!(a.version(), 4, "differences make a version 4 archive");
    for layout in Layout::ALL {
        let differs = |c: &ChunkEntry| {
            c.layout == layout && c.base.is_some_and(|s| s.combine == Combine::Difference)
        };
        assert!(a.chunks().iter().any(differs), "{layout:?}");
    }
}

/// Version 4, the Match operator: a checkpoint whose words repeat earlier
/// ones (an STFT-like basis of windowed cosines and sines, rows of BF16
/// weights copied from earlier rows) and whose long JSON header repeats
/// names, which the packer stores as copies of earlier words.
fn matched(dir: &Path) {
    let plain = Extras::default();
    let n = 64usize;
    let basis = (0..2 * (n / 2 + 1)).flat_map(|row| {
        let (k, sine) = (row % (n / 2 + 1), row > n / 2);
        (0..n).map(move |i| {
            let tau = 2.0 * std::f64::consts::PI;
            let window = 0.5 - 0.5 * (tau * i as f64 / n as f64).cos();
            let phase = tau * ((k * i) % n) as f64 / n as f64;
            let wave = if sine { phase.sin() } else { phase.cos() };
            ((window * wave) as f32).to_bits()
        })
    });
    let w = f32s(64 * 64, 41, 0.02);
    let mut rng = Rng(42);
    let mut rows: Vec<u16> = Vec::new();
    for r in 0..64 {
        let from = (!rng.next().is_multiple_of(4) && r > 0).then(|| rng.next() as usize % r);
        let row: Vec<u16> = match from {
            Some(f) => rows[f * 64..f * 64 + 64].to_vec(),
            None => w[r * 64..r * 64 + 64].iter().map(|&x| bf16(x)).collect(),
        };
        rows.extend(row);
    }
    let mut tensors = vec![
        tensor("stft.basis", "F32", &[66, 1, 64], bytes32(basis)),
        tensor("rows.bf16", "BF16", &[64, 64], bytes16(rows)),
    ];
    for layer in 0..24 {
        for part in ["attention.norm.bias", "feed_forward.norm.bias"] {
            let b = f32s(16, 50 + layer, 0.01);
            let name = format!("encoder.layer.{layer}.{part}");
            tensors.push(tensor(
                &name,
                "F32",
                &[16],
                bytes32(b.iter().map(|x| x.to_bits())),
            ));
        }
    }
    let src = dir.join("match-basis.safetensors");
    std::fs::write(&src, build(&tensors, &plain)).unwrap();
    let a = pack(&src, 16 * 1024, None);
    assert_eq!(a.version(), 4, "copies make a version 4 archive");
}

/// Version 5, the Sparse operator: tensors that are one word nearly
/// everywhere (pruned F32 weights, a U8 mask, small I16 differences whose
/// high bytes are mostly zero), which the packer stores as a fill word, the
/// gaps between the other words and their values.
fn sparse(dir: &Path) {
    let mut rng = Rng(51);
    let n = 16 * 1024;
    // One word in about 20 (F32, U8) or 200 (I16's high bytes) differs.
    let mut pick = |one_in: u64| rng.next().is_multiple_of(one_in);
    let w = f32s(n, 52, 0.02);
    let pruned: Vec<u32> = (w.iter())
        .map(|x| if pick(20) { x.to_bits() } else { 0 })
        .collect();
    let mask: Vec<u8> = (0..n)
        .map(|i| if pick(20) { (i % 7) as u8 + 1 } else { 0 })
        .collect();
    let small = f32s(n, 53, 30.0);
    // Zigzagged, as a difference from a base is: small magnitudes keep the
    // high byte zero.
    let zigzag = |v: i16| ((v << 1) ^ (v >> 15)) as u16;
    let diffs: Vec<u16> = (small.iter())
        .map(|&x| match pick(200) {
            true => zigzag((x as i16).wrapping_mul(97)),
            false => zigzag(x as i16),
        })
        .collect();
    let tensors = vec![
        tensor("pruned.weight", "F32", &[128, 128], bytes32(pruned)),
        tensor("attention.mask", "U8", &[128, 128], mask),
        tensor("steps.delta", "I16", &[128, 128], bytes16(diffs)),
    ];
    let src = dir.join("sparse-pruned.safetensors");
    std::fs::write(&src, build(&tensors, &Extras::default())).unwrap();
    let a = pack(&src, 16 * 1024, None);
    assert_eq!(a.version(), 5, "sparse streams make a version 5 archive");
}

/// Version 6: rANS literals of tag 4 (tables of counts to a few bits, seeded
/// states), written by the packer for the weight files of every float width
/// of version 1's set that take rANS: streams of one lane group and two, at
/// several scales.
fn seeded_rans(dir: &Path) {
    for (name, bytes, chunk) in packed().into_iter().filter(|p| p.0.ends_with("weights")) {
        let src = dir.join(format!("{name}.safetensors"));
        std::fs::write(&src, bytes).unwrap();
        // Files whose streams code smaller without rANS are version 1's.
        if pack(&src, chunk, None).version() != 6 {
            std::fs::remove_file(&src).unwrap();
            std::fs::remove_file(src.with_extension("brv")).unwrap();
        }
    }
}

/// Version 7, the Partition operator: matrices whose rows have scales of
/// several orders of magnitude (an embedding's tokens), which the packer
/// codes as classes of rows. F16 rows of 256 in chunks of 64 KiB (groups
/// of whole rows), BF16 rows of 384 in chunks of 64 KiB (chunks start
/// inside rows: groups of 128) and F32 rows of 128.
fn partitioned(dir: &Path) {
    let mut rng = Rng(71);
    // Each row's scale: 2^-7 to 2^-4.
    let mut rows = |n: usize, row: usize| -> Vec<f32> {
        let noise = f32s(n, rng.next(), 1.0);
        (noise.chunks(row))
            .flat_map(|r| {
                let scale = (-7.0 + (rng.next() % 4) as f32).exp2();
                r.iter().map(move |x| x * scale).collect::<Vec<_>>()
            })
            .collect()
    };
    let f16s = rows(256 * 256, 256);
    let bf16s = rows(128 * 384, 384);
    let f32s = rows(256 * 128, 128);
    let tensors = vec![
        tensor(
            "embed.f16",
            "F16",
            &[256, 256],
            bytes16(f16s.iter().map(|&x| f16(x))),
        ),
        tensor(
            "embed.bf16",
            "BF16",
            &[128, 384],
            bytes16(bf16s.iter().map(|&x| bf16(x))),
        ),
        tensor(
            "embed.f32",
            "F32",
            &[256, 128],
            bytes32(f32s.iter().map(|x| x.to_bits())),
        ),
    ];
    let src = dir.join("rows-of-scales.safetensors");
    std::fs::write(&src, build(&tensors, &Extras::default())).unwrap();
    let a = pack(&src, 64 * 1024, None);
    assert_eq!(a.version(), 7, "classes of rows make a version 7 archive");
}

/// Version 8, the Mirror operator: an STFT basis of windowed cosines and
/// sines whose rows are their mirror image (the cosines) or its negation
/// (the sines, whose zeros keep their sign, as silero-vad's do), F32 in
/// chunks of 64 KiB (the last chunk two rows, which re-fit the first's
/// program), and BF16 rows of symmetric filters (palindromes of 33 words),
/// which the packer stores as each row's first half and the differences of
/// the rest from their mirror words.
fn mirrored(dir: &Path) {
    let n = 128usize;
    let half = n / 2 + 1;
    let basis = (0..2 * half).flat_map(|row| {
        let (k, sine) = (row % half, row >= half);
        let head: Vec<f32> = (0..half)
            .map(|i| {
                let tau = 2.0 * std::f64::consts::PI;
                let window = 0.5 - 0.5 * (tau * i as f64 / n as f64).cos();
                let phase = tau * ((k * i) % n) as f64 / n as f64;
                let wave = if sine { phase.sin() } else { phase.cos() };
                (window * wave) as f32
            })
            .collect();
        let tail = (half..n).map(|i| head[n - i]);
        let tail = tail.map(|x| if sine && x != 0.0 { -x } else { x });
        let row: Vec<u32> = head.iter().copied().chain(tail).map(f32::to_bits).collect();
        row
    });
    let filters = f32s(32 * 17, 83, 0.05);
    let palindromes = filters.chunks(17).flat_map(|h| {
        let rest = h[..16].iter().rev();
        h.iter().chain(rest).map(|&x| bf16(x)).collect::<Vec<_>>()
    });
    let tensors = vec![
        tensor(
            "stft.basis",
            "F32",
            &[2 * half as u64, 1, n as u64],
            bytes32(basis),
        ),
        tensor("filters.bf16", "BF16", &[32, 33], bytes16(palindromes)),
    ];
    let src = dir.join("mirror-basis.safetensors");
    std::fs::write(&src, build(&tensors, &Extras::default())).unwrap();
    let a = pack(&src, 64 * 1024, None);
    assert_eq!(a.version(), 8, "mirrored rows make a version 8 archive");
}

/// Version 11, column scans: sinusoidal position tables (a row per
/// position, the sines and then the cosines of its product with a
/// geometric series of frequencies), F16 in chunks of 16 KiB (so that
/// chunks start inside a row and re-fit the first's program) and F32 whole,
/// which the packer stores as twice the differences down their columns.
fn column_scans(dir: &Path) {
    let table = |rows: usize, dims: usize| -> Vec<f32> {
        let half = dims / 2;
        let step = 10000f64.ln() / (half - 1) as f64;
        let angle = move |t: usize, j: usize| t as f64 * (-step * j as f64).exp();
        (0..rows)
            .flat_map(|t| {
                let sines = (0..half).map(move |j| angle(t, j).sin() as f32);
                sines.chain((0..half).map(move |j| angle(t, j).cos() as f32))
            })
            .collect()
    };
    let tensors = vec![
        tensor(
            "encoder.embed_positions.weight",
            "F16",
            &[600, 96],
            bytes16(table(600, 96).into_iter().map(f16)),
        ),
        tensor(
            "decoder.embed_positions.weight",
            "F32",
            &[128, 64],
            bytes32(table(128, 64).into_iter().map(f32::to_bits)),
        ),
    ];
    let src = dir.join("sinusoids.safetensors");
    std::fs::write(&src, build(&tensors, &Extras::default())).unwrap();
    let a = pack(&src, 16 * 1024, None);
    assert_eq!(a.version(), 11, "column scans make a version 11 archive");
}

/// Version 10, shared code tables: weight matrices of F16, BF16 and F32
/// in chunks of 16 KiB, whose chunks' literals (their words' high bytes,
/// say) draw on the same few words, so that the packer codes them with
/// one table a tensor, held in the index; and a U8 matrix of counts,
/// geometric (each count a quarter as likely again as the one before),
/// which rANS codes smaller than Huffman's whole bits.
fn shared_tables(dir: &Path) {
    let mut rng = Rng(103);
    let counts = (0..512 * 256).map(|_| {
        let (mut k, mut x) = (0u8, rng.next());
        while x % 4 < 3 && k < 60 {
            (k, x) = (k + 1, (x / 4) ^ rng.next());
        }
        k
    });
    let w = f32s(3 * 64 * 1024, 101, 0.02);
    let (f16s, rest) = w.split_at(128 * 1024);
    let (bf16s, f32s) = rest.split_at(32 * 1024);
    let tensors = vec![
        tensor(
            "layer.f16",
            "F16",
            &[256, 512],
            bytes16(f16s.iter().map(|&x| f16(x))),
        ),
        tensor(
            "layer.bf16",
            "BF16",
            &[128, 256],
            bytes16(bf16s.iter().map(|&x| bf16(x))),
        ),
        tensor(
            "layer.f32",
            "F32",
            &[256, 128],
            bytes32(f32s[..32 * 1024].iter().map(|x| x.to_bits())),
        ),
        tensor("counts.u8", "U8", &[512, 256], counts.collect()),
    ];
    let src = dir.join("shared-weights.safetensors");
    std::fs::write(&src, build(&tensors, &Extras::default())).unwrap();
    let a = pack(&src, 16 * 1024, None);
    assert_eq!(a.version(), 10, "shared tables make a version 10 archive");
    let tags: Vec<u8> = a.index().tables.iter().map(|t| t[0]).collect();
    println!("shared tables' tags: {tags:?}");
    assert!(
        tags.contains(&2) && tags.contains(&4),
        "Huffman and rANS tables"
    );
}

/// Packs `src` beside itself with the default search, `chunk` bytes and
/// `base`, if any.
fn pack(src: &Path, chunk: usize, base: Option<&Path>) -> Archive {
    let dst = src.with_extension("brv");
    let opts = PackOptions {
        chunk_size: chunk,
        adapt_chunks: false,
        bases: BaseSources {
            named: base.map(Path::to_path_buf).into_iter().collect(),
            ..BaseSources::default()
        },
        ..PackOptions::default()
    };
    pack_file(src, &dst, &opts, &|_| {}).unwrap();
    Archive::open(&dst).unwrap()
}

/// Deterministic xorshift words.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Roughly normal, mean 0 (sum of uniforms).
    fn normal(&mut self, std: f64) -> f64 {
        let sum: f64 = (0..4)
            .map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        (sum - 2.0) * std * 1.7
    }
}

fn f32s(n: usize, seed: u64, std: f64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.normal(std) as f32).collect()
}

fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

fn f16(x: f32) -> u16 {
    // Normal range only (the weights here are well inside it).
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign as u16;
    }
    (sign | (exp as u32) << 10 | ((b >> 13) & 0x3ff)) as u16
}

fn bytes16(words: impl IntoIterator<Item = u16>) -> Vec<u8> {
    words.into_iter().flat_map(u16::to_le_bytes).collect()
}

fn bytes32(words: impl IntoIterator<Item = u32>) -> Vec<u8> {
    words.into_iter().flat_map(u32::to_le_bytes).collect()
}

/// The generated checkpoints packed as they are: name, file, chunk size.
fn packed() -> Vec<(&'static str, Vec<u8>, usize)> {
    let plain = Extras::default();
    // A file of one weight tensor `w`.
    let weights =
        |dtype: &str, shape: &[u64], data| build(&[tensor("w", dtype, shape, data)], &plain);
    let w = f32s(32 * 1024, 1, 0.02);
    let f32_file = weights("F32", &[64, 512], bytes32(w.iter().map(|x| x.to_bits())));
    // 128 KiB chunks of BF16: streams long enough for two rANS lane groups.
    let b = f32s(128 * 1024, 2, 0.02);
    let bf16_file = weights("BF16", &[256, 512], bytes16(b.iter().map(|&x| bf16(x))));
    let h = f32s(32 * 1024, 3, 0.05);
    let f16_file = weights("F16", &[128, 256], bytes16(h.iter().map(|&x| f16(x))));
    let mut fp8 = Vec::new();
    for (k, dtype) in ["F8_E4M3", "F8_E5M2"].into_iter().enumerate() {
        let mut rng = Rng(10 + k as u64);
        // Small magnitudes: a few exponents, any mantissa, both signs.
        let data = (0..64 * 1024)
            .map(|_| {
                let r = rng.next();
                let exp = if k == 0 {
                    4 + (r % 5) as u8
                } else {
                    10 + (r % 5) as u8
                };
                let shift = if k == 0 { 3 } else { 2 };
                (((r >> 8) & 1) as u8) << 7 | exp << shift | ((r >> 16) as u8 & ((1 << shift) - 1))
            })
            .collect();
        fp8.push(tensor(&format!("w.{dtype}"), dtype, &[256, 256], data));
    }
    fp8.push(tensor(
        "w.scale",
        "F32",
        &[1],
        0.0123f32.to_le_bytes().to_vec(),
    ));
    let fp8_file = build(&fp8, &plain);
    let mut structured = vec![
        tensor("zeros", "F32", &[1024], vec![0; 4096]),
        tensor(
            "ones",
            "BF16",
            &[2048],
            bytes16(std::iter::repeat_n(0x3f80, 2048)),
        ),
        tensor(
            "position_ids",
            "I64",
            &[1, 4096],
            (0..4096i64).flat_map(|i| i.to_le_bytes()).collect(),
        ),
        tensor(
            "arange",
            "I32",
            &[8192],
            bytes32((0..8192u32).map(|i| i * 3 + 17)),
        ),
    ];
    let row = noise(5, 512);
    structured.push(tensor("periodic_rows", "U8", &[64, 512], row.repeat(64)));
    let mut half = vec![0u8; 8192];
    half.extend(noise(6, 8192));
    structured.push(tensor("half_zero", "U8", &[16384], half));
    let up = f32s(16 * 1024, 7, 0.02);
    structured.push(tensor(
        "upcast",
        "F32",
        &[16 * 1024],
        bytes32(up.iter().map(|&x| (bf16(x) as u32) << 16)),
    ));
    let structured_file = build(&structured, &plain);
    // A BF16 model saved as F32: the low half of every word is zero.
    let u = f32s(32 * 1024, 9, 0.02);
    let upcast_file = weights(
        "F32",
        &[64, 512],
        bytes32(u.iter().map(|&x| (bf16(x) as u32) << 16)),
    );
    let corners = Extras {
        metadata: Some(r#"{"format":"pt","note":"golden"}"#.into()),
        pad: 5,
        gap: 3,
        trailing: noise(8, 13),
        reverse_keys: true,
    };
    let corners_file = build(&common::every_dtype(), &corners);
    let header_only = build(
        &[],
        &Extras {
            metadata: Some(r#"{"empty":"yes"}"#.into()),
            ..Extras::default()
        },
    );
    vec![
        ("f32-weights", f32_file, 64 << 10),
        ("bf16-weights", bf16_file, 128 << 10),
        ("f16-weights", f16_file, 256 << 10),
        ("fp8-weights", fp8_file, 256 << 10),
        ("structured", structured_file, 16 << 10),
        ("upcast-weights", upcast_file, 256 << 10),
        ("every-dtype-and-corners", corners_file, 256 << 10),
        ("header-only", header_only, 256 << 10),
        ("tiny-chunks", build(&structured[..4], &plain), 64),
    ]
}

/// Version 9: a vocabulary's embedding and head extended, pruned and
/// reordered, and extended with their old rows trained, each against the
/// base they were made from, as row maps of its rows (by XOR where the
/// rows are the base's, by differences where they moved).
fn row_maps(dir: &Path) {
    let v = common::vocabulary(256, 64, 40, 200);
    // The extended file's old embedding rows, their BF16 words moved by
    // up to a unit in their last place.
    let mut trained = v.extended.clone();
    let layout =
        brevis::safetensors::parse(trained.len() as u64, |n| Ok(trained[..n as usize].to_vec()))
            .unwrap();
    let embed = &layout.tensors[0];
    assert_eq!(embed.name, "model.embed_tokens.weight");
    let old = (embed.start as usize)..(embed.start as usize + 256 * 64 * 2);
    let moves = noise(91, old.len() / 2);
    for (word, m) in trained[old].chunks_exact_mut(2).zip(moves) {
        let w = u16::from_le_bytes([word[0], word[1]]);
        let w = w.wrapping_add(m as u16 % 3).wrapping_sub(1);
        word.copy_from_slice(&w.to_le_bytes());
    }
    let base = dir.join("rows-base.safetensors");
    std::fs::write(&base, &v.base).unwrap();
    pack(&base, 8 << 10, None);
    let files = [
        ("rows-extended", v.extended),
        ("rows-pruned", v.pruned),
        ("rows-trained", trained),
    ];
    for (name, bytes) in files {
        let src = dir.join(format!("{name}.safetensors"));
        std::fs::write(&src, bytes).unwrap();
        let a = pack(&src, 8 << 10, Some(&base.with_extension("brv")));
        assert_eq!(a.version(), 9, "row maps make a version 9 archive");
        assert!(a
            .chunks()
            .iter()
            .any(|c| c.base.is_some_and(|s| s.rows.is_some())));
    }
    let trained = Archive::open(dir.join("rows-trained.brv")).unwrap();
    let moved = |c: &ChunkEntry| {
        c.base
            .is_some_and(|s| s.rows.is_some() && s.combine == Combine::Difference)
    };
    assert!(
        trained.chunks().iter().any(moved),
        "rows differ from the base's"
    );
}

/// The version 2 set: a base, a fine-tune against it, and a checkpoint
/// against the fine-tune.
fn based(dir: &Path) {
    let plain = Extras::default();
    let n = 16 * 1024;
    let w = f32s(n, 21, 0.02);
    let moved = |w: &[f32], seed| -> Vec<f32> {
        let step = f32s(w.len(), seed, 0.001);
        w.iter().zip(step).map(|(a, d)| a * (1.0 + d)).collect()
    };
    let ids: Vec<u8> = (0..1024i64).flat_map(|i| i.to_le_bytes()).collect();
    let file = |w: &[f32], extra: Vec<Tensor>| {
        let mut tensors = vec![
            tensor(
                "embed",
                "F32",
                &[16, 1024],
                bytes32(w.iter().map(|x| x.to_bits())),
            ),
            tensor(
                "head",
                "BF16",
                &[16, 1024],
                bytes16(w.iter().map(|&x| bf16(x))),
            ),
            tensor("position_ids", "I64", &[1024], ids.clone()),
        ];
        tensors.extend(extra);
        build(&tensors, &plain)
    };
    let resized = |len: usize| {
        tensor(
            "norm",
            "F32",
            &[len as u64],
            bytes32((0..len as u32).map(|i| i * 7)),
        )
    };
    let tuned = moved(&w, 22);
    let again = moved(&tuned, 23);
    let new = tensor(
        "classifier",
        "F16",
        &[256],
        bytes16(f32s(256, 24, 0.1).iter().map(|&x| f16(x))),
    );
    let files = [
        ("base", file(&w, vec![resized(64)]), None),
        (
            "tuned",
            file(&tuned, vec![resized(128), new]),
            Some("base.brv"),
        ),
        (
            "tuned-again",
            file(&again, vec![resized(128)]),
            Some("tuned.brv"),
        ),
    ];
    for (name, bytes, base) in files {
        let src = dir.join(format!("{name}.safetensors"));
        std::fs::write(&src, bytes).unwrap();
        let archive = pack(&src, 16 << 10, base.map(|b| dir.join(b)).as_deref());
        let expected = if base.is_some() { 2 } else { 1 };
        assert_eq!(archive.index().version(), expected, "{name}");
    }
}

/// A literal of `words` with a chosen codec.
fn lit(words: Vec<u32>, width: u32, codec: Codec) -> Program<Literal> {
    let stats = Stats::new(&words, width);
    let size = codec::encoded_size(codec, &words, width, &stats)
        .unwrap_or_else(|| panic!("{} does not apply", codec.name()));
    let ty = Type {
        width,
        len: words.len(),
    };
    let words: Arc<[u32]> = words.into();
    Program {
        ty,
        op: Op::Lit(Literal::new(codec, size, words, stats)),
    }
}

fn node(ty: Type, op: Op<Literal>) -> Program<Literal> {
    Program { ty, op }
}

/// Words of `width` bits with about `bits` bits of entropy each.
fn skewed(n: usize, width: u32, bits: u32, seed: u64) -> Vec<u32> {
    let mut rng = Rng(seed);
    let mask = dsl::mask(width);
    (0..n)
        .map(|_| {
            let r = rng.next();
            let small = (r & ((1 << bits) - 1)) as u32;
            // Mostly small words, sometimes a wide one.
            if (r >> 40).is_multiple_of(64) {
                (r >> 8) as u32 & mask
            } else {
                small & mask
            }
        })
        .collect()
}

/// The programs of `handmade`, one tensor each: (name, dtype, programs per lane).
fn handmade_programs() -> Vec<(&'static str, &'static str, Vec<Program<Literal>>)> {
    let n = 4096;
    let t = |width| Type { width, len: n };
    let body = |width, seed| lit(skewed(n, width, 5, seed), width, Codec::Huffman);
    let map = |op, width, seed| {
        node(
            t(width),
            Op::Map {
                op,
                body: Box::new(body(width, seed)),
            },
        )
    };
    let scan = |op, width, seed| {
        node(
            t(width),
            Op::Scan {
                op,
                init: 5,
                updates: Box::new(body(width, seed)),
            },
        )
    };
    let merge = |fields: Fields, width: u32, seed: u64| {
        let parts = fields
            .widths(width)
            .into_iter()
            .enumerate()
            .map(|(k, w)| lit(skewed(n, w, w.min(3), seed + k as u64), w, Codec::Huffman))
            .collect();
        node(t(width), Op::Merge { fields, parts })
    };
    let rans = |len: usize, distinct_bits: u32, seed| {
        lit(skewed(len, 16, distinct_bits, seed), 16, Codec::Rans)
    };
    let concat = node(
        Type {
            width: 8,
            len: 3 * n,
        },
        Op::Concat(vec![
            node(t(8), Op::Const(0)),
            lit(skewed(n, 8, 8, 40), 8, Codec::Raw),
            node(
                t(8),
                Op::Repeat {
                    times: 4,
                    body: Box::new(lit(skewed(n / 4, 8, 3, 41), 8, Codec::BitPack)),
                },
            ),
        ]),
    );
    vec![
        ("map.xor", "U16", vec![map(MapOp::Xor(0x3c00), 16, 1)]),
        ("map.add", "U16", vec![map(MapOp::Add(1000), 16, 2)]),
        ("map.zigzag", "I16", vec![map(MapOp::Zigzag, 16, 3)]),
        ("map.gray", "U32", vec![map(MapOp::Gray, 32, 4)]),
        ("map.rotate", "U32", vec![map(MapOp::Rotate(7), 32, 5)]),
        ("map.bitrev", "U8", vec![map(MapOp::BitReverse, 8, 6)]),
        ("scan.xor", "U32", vec![scan(ScanOp::Xor, 32, 7)]),
        (
            "scan.add",
            "I64",
            vec![scan(ScanOp::Add, 32, 8), scan(ScanOp::Add, 32, 9)],
        ),
        (
            "merge.split",
            "U16",
            vec![merge(Fields::Split { low: 5 }, 16, 10)],
        ),
        ("merge.bits", "U8", vec![merge(Fields::BitPlanes, 8, 20)]),
        (
            "merge.bytes",
            "U32",
            vec![merge(Fields::BytePlanes, 32, 30)],
        ),
        (
            "merge.bf16",
            "BF16",
            vec![merge(Fields::Float(FloatFormat::Bf16), 16, 35)],
        ),
        (
            "merge.f16",
            "F16",
            vec![merge(Fields::Float(FloatFormat::F16), 16, 38)],
        ),
        (
            "merge.e5m2",
            "F8_E5M2",
            vec![merge(Fields::Float(FloatFormat::E5M2), 8, 40)],
        ),
        ("concat.const.raw.repeat.bitpack", "U8", vec![concat]),
        ("rans.short", "U16", vec![rans(4096, 10, 50)]),
        ("rans.mid", "U16", vec![rans(8192, 11, 51)]),
        ("rans.long", "U16", vec![rans(65536, 10, 52)]),
    ]
}

/// Packs the outputs of `handmade_programs` as a checkpoint, then replaces
/// each tensor's record with its program.
fn handmade(dir: &Path) {
    let programs = handmade_programs();
    let tensors: Vec<Tensor> = programs
        .iter()
        .map(|(name, dtype, lanes)| {
            let layout = brevis::safetensors::Element::of_dtype(dtype).layout;
            let data = lane_bytes(lanes, layout);
            let elements = (data.len() / layout.element_bytes()) as u64;
            tensor(name, dtype, &[elements], data)
        })
        .collect();
    let src = dir.join("handmade.safetensors");
    let bytes = build(&tensors, &Extras::default());
    std::fs::write(&src, &bytes).unwrap();
    let packed = pack(&src, 1 << 20, None);
    let mut chunks: Vec<ChunkEntry> = packed.chunks().to_vec();
    let mut records: Vec<Vec<u8>> = (0..chunks.len())
        .map(|i| packed.record(i).unwrap().into_owned())
        .collect();
    // Tensors are laid out in order after the header, one chunk each.
    assert_eq!(chunks.len(), 1 + programs.len(), "one chunk per tensor");
    for (k, (_, _, lanes)) in programs.iter().enumerate() {
        let i = k + 1;
        let mut record = Vec::new();
        lanes.iter().for_each(|p| encode_program(p, &mut record));
        let range = packed.chunk_range(i);
        let want = &bytes[range.start as usize..range.end as usize];
        let mut got = vec![0u8; want.len()];
        decode_record(&record, chunks[i].layout, (1, &[]), &mut got).unwrap();
        assert!(got == want, "handmade record {k} decodes to its tensor");
        chunks[i].rec_len = record.len() as u64;
        records[i] = record;
    }
    let index = Index {
        chunks,
        ..packed.index().clone()
    };
    let out = brevis::archive::assemble(records.iter().map(Vec::as_slice), &index, index.version());
    std::fs::write(src.with_extension("brv"), out).unwrap();
}

/// The little-endian bytes of a tensor whose lanes are the programs' outputs.
fn lane_bytes(lanes: &[Program<Literal>], layout: Layout) -> Vec<u8> {
    let words: Vec<Vec<u32>> = lanes
        .iter()
        .map(|p| {
            let mut out = vec![0u32; p.ty.len];
            dsl::execute(p, &mut out).unwrap();
            out
        })
        .collect();
    let size = layout.element_bytes() / layout.lanes();
    (0..words[0].len())
        .flat_map(|e| {
            words
                .iter()
                .flat_map(move |lane| lane[e].to_le_bytes()[..size].to_vec())
        })
        .collect()
}
