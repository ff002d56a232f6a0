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
