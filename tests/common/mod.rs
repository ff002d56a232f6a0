//! Builders of safetensors files for tests, including the odd corners of the format.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

pub fn tensor(name: &str, dtype: &str, shape: &[u64], data: Vec<u8>) -> Tensor {
    Tensor {
        name: name.into(),
        dtype: dtype.into(),
        shape: shape.to_vec(),
        data,
    }
}

/// How to lay out a file beyond its tensors.
#[derive(Default, Clone)]
pub struct Extras {
    /// Raw JSON of `__metadata__`, placed first.
    pub metadata: Option<String>,
    /// Bytes of spaces after the JSON (safetensors pads to 8).
    pub pad: usize,
    /// Unused bytes before each tensor's data.
    pub gap: usize,
    /// Bytes after the last tensor.
    pub trailing: Vec<u8>,
    /// Write the entries in reverse order in the JSON.
    pub reverse_keys: bool,
}

/// A safetensors file's bytes.
pub fn build(tensors: &[Tensor], extras: &Extras) -> Vec<u8> {
    let gap = noise(7, extras.gap);
    let mut data = Vec::new();
    let mut entries = Vec::new();
    for t in tensors {
        data.extend_from_slice(&gap);
        let start = data.len();
        data.extend_from_slice(&t.data);
        entries.push(format!(
            "\"{}\":{{\"dtype\":\"{}\",\"shape\":{:?},\"data_offsets\":[{},{}]}}",
            t.name,
            t.dtype,
            t.shape,
            start,
            data.len()
        ));
    }
    if extras.reverse_keys {
        entries.reverse();
    }
    if let Some(m) = &extras.metadata {
        entries.insert(0, format!("\"__metadata__\":{m}"));
    }
    let mut json = format!("{{{}}}", entries.join(","));
    json.push_str(&" ".repeat(extras.pad));
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    file.extend_from_slice(&data);
    file.extend_from_slice(&extras.trailing);
    file
}

/// Float bit patterns that must survive: NaN payloads, -0.0, infinities, subnormals.
pub fn special_f32() -> Vec<u8> {
    let bits: [u32; 8] = [
        0x7fc0_0001,
        0xffa0_beef,
        0x8000_0000,
        0x0000_0001,
        0x807f_ffff,
        0x7f80_0000,
        0xff80_0000,
        0x3f80_0000,
    ];
    bits.iter().flat_map(|b| b.to_le_bytes()).collect()
}

/// Every dtype safetensors knows, plus unknown ones, with awkward values.
pub fn every_dtype() -> Vec<Tensor> {
    let mut ts = Vec::new();
    let sizes = [
        ("F64", 8),
        ("I64", 8),
        ("U64", 8),
        ("F32", 4),
        ("I32", 4),
        ("U32", 4),
        ("F16", 2),
        ("BF16", 2),
        ("I16", 2),
        ("U16", 2),
        ("I8", 1),
        ("U8", 1),
        ("BOOL", 1),
        ("F8_E4M3", 1),
        ("F8_E5M2", 1),
        ("F8_E8M0", 1),
    ];
    for (k, (dtype, size)) in sizes.iter().enumerate() {
        let n = 37 + k as u64 * 11;
        let mut data = noise(k as u64, (n * size) as usize);
        if *dtype == "BOOL" {
            data.iter_mut().for_each(|b| *b &= 1);
        }
        ts.push(tensor(&format!("t.{dtype}"), dtype, &[n], data));
    }
    ts.push(tensor("specials", "F32", &[8], special_f32()));
    let arange: Vec<u8> = (0..300i64).flat_map(|i| i.to_le_bytes()).collect();
    ts.push(tensor("position_ids", "I64", &[1, 300], arange));
    ts.push(tensor("scalar", "F32", &[], 1.5f32.to_le_bytes().to_vec()));
    ts.push(tensor("empty", "F16", &[0, 4], vec![]));
    ts.push(tensor("future", "F6_E3M2", &[5], noise(99, 7)));
    ts.push(tensor("zeros", "BF16", &[2, 700], vec![0; 2800]));
    ts
}

/// A fresh temporary directory with `bytes` written to `name` inside it.
pub fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The corpus folder (see scripts/fetch-corpus.sh) and the checkpoints in it.
pub fn corpus_files() -> Vec<PathBuf> {
    let root = std::env::var_os("BREVIS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/brevis-corpus")
        });
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| {
            panic!(
                "corpus {} missing ({e}): run scripts/fetch-corpus.sh",
                root.display()
            )
        })
        .filter_map(|e| Some(e.ok()?.path().join("model.safetensors")))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "corpus in {} is incomplete: run scripts/fetch-corpus.sh",
        root.display()
    );
    files
}

/// A file of one one-byte U8 tensor per byte of `data`.
pub fn one_byte_tensors(data: &[u8]) -> Vec<u8> {
    let entries: Vec<String> = (0..data.len())
        .map(|i| {
            format!(
                "\"layer.{i}.weight\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[{i},{}]}}",
                i + 1
            )
        })
        .collect();
    let mut header = format!("{{{}}}", entries.join(",")).into_bytes();
    header.resize(header.len().div_ceil(8) * 8, b' ');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&header);
    file.extend_from_slice(data);
    file
}

/// A model with a vocabulary, and two fine-tunes that change it (see
/// [`vocabulary`]).
pub struct Vocabulary {
    pub base: Vec<u8>,
    /// `added` rows appended to `embed_tokens` and `lm_head`, and a layer's
    /// weights nudged.
    pub extended: Vec<u8>,
    /// `kept` rows of both, in a shuffled order.
    pub pruned: Vec<u8>,
}

/// A model of `embed_tokens` and `lm_head` (`vocab` rows of `hidden` BF16
/// weights) and one layer's weights, and its fine-tunes of [`Vocabulary`].
pub fn vocabulary(vocab: usize, hidden: usize, added: usize, kept: usize) -> Vocabulary {
    let rows = |seed: u64, n: usize| bf16_weights(seed, n * hidden);
    let (embed, head, layer) = (rows(1, vocab), rows(2, vocab), rows(3, hidden));
    let shape = |n: usize| [n as u64, hidden as u64];
    let file = |embed: Vec<u8>, head: Vec<u8>, layer: Vec<u8>| {
        let n = embed.len() / 2 / hidden;
        build(
            &[
                tensor("model.embed_tokens.weight", "BF16", &shape(n), embed),
                tensor("model.layers.0.mlp.weight", "BF16", &shape(hidden), layer),
                tensor("lm_head.weight", "BF16", &shape(n), head),
            ],
            &Extras::default(),
        )
    };
    let appended = |mut old: Vec<u8>, seed| {
        old.extend(rows(seed, added));
        old
    };
    let mut nudged = layer.clone();
    let flips = noise(4, nudged.len() / 2);
    for (k, flip) in flips.iter().enumerate() {
        nudged[2 * k] ^= flip & 3;
    }
    let mut order: Vec<usize> = (0..vocab).collect();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..vocab).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let row_bytes = 2 * hidden;
    let pick = |t: &[u8]| -> Vec<u8> {
        (order[..kept].iter())
            .flat_map(|&r| t[r * row_bytes..(r + 1) * row_bytes].to_vec())
            .collect()
    };
    Vocabulary {
        base: file(embed.clone(), head.clone(), layer.clone()),
        extended: file(
            appended(embed.clone(), 5),
            appended(head.clone(), 6),
            nudged,
        ),
        pruned: file(pick(&embed), pick(&head), layer),
    }
}

/// `n` BF16 words of weights: about normal, a few hundredths wide.
pub fn bf16_weights(seed: u64, n: usize) -> Vec<u8> {
    let bytes = noise(seed, 4 * n);
    (bytes.chunks_exact(4))
        .flat_map(|b| {
            let sum: f32 = b.iter().map(|&v| v as f32 / 255.0 - 0.5).sum();
            let bits = (sum * 0.03).to_bits();
            ((bits >> 16) as u16).to_le_bytes()
        })
        .collect()
}
