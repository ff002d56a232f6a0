//! Reading the layout of a `.safetensors` source: its header and where each tensor's
//! bytes lie. Parsing is tolerant of everything a valid file may contain (metadata,
//! any key order, padding, gaps, trailing bytes, unknown dtypes) and strict about
//! anything that would make it not a safetensors file.

#![forbid(unsafe_code)]

use crate::dsl::FloatFormat;
use serde_json::Value;

/// How a tensor's elements map to the language's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// One 8-bit word per byte (1-byte dtypes, unknown dtypes, header, gaps).
    Bytes,
    /// One 16-bit word per 2-byte element.
    Half,
    /// One 32-bit word per 4-byte element.
    Word,
    /// Two 32-bit lanes (low half, high half) per 8-byte element.
    Double,
}

impl Layout {
    pub const ALL: [Layout; 4] = [Layout::Bytes, Layout::Half, Layout::Word, Layout::Double];

    pub fn element_bytes(self) -> usize {
        match self {
            Layout::Bytes => 1,
            Layout::Half => 2,
            Layout::Word => 4,
            Layout::Double => 8,
        }
    }

    /// Width of each lane's words.
    pub fn lane_width(self) -> u32 {
        match self {
            Layout::Bytes => 8,
            Layout::Half => 16,
            Layout::Word | Layout::Double => 32,
        }
    }

    pub fn lanes(self) -> usize {
        match self {
            Layout::Double => 2,
            _ => 1,
        }
    }
}

/// What the packer knows of a dtype: its word layout and float format, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Element {
    pub layout: Layout,
    pub float: Option<FloatFormat>,
    /// False for dtypes this tool does not model; their bytes are carried as bytes.
    pub known: bool,
}

impl Element {
    pub const BYTES: Element = Element {
        layout: Layout::Bytes,
        float: None,
        known: false,
    };

    pub fn of_dtype(dtype: &str) -> Element {
        let (layout, float) = match dtype {
            "F64" | "I64" | "U64" => (Layout::Double, None),
            "F32" => (Layout::Word, Some(FloatFormat::F32)),
            "I32" | "U32" => (Layout::Word, None),
            "BF16" => (Layout::Half, Some(FloatFormat::Bf16)),
            "F16" => (Layout::Half, Some(FloatFormat::F16)),
            "I16" | "U16" => (Layout::Half, None),
            "F8_E4M3" => (Layout::Bytes, Some(FloatFormat::E4M3)),
            "F8_E5M2" => (Layout::Bytes, Some(FloatFormat::E5M2)),
            "I8" | "U8" | "BOOL" | "F8_E8M0" => (Layout::Bytes, None),
            _ => return Element::BYTES,
        };
        Element {
            layout,
            float,
            known: true,
        }
    }
}

/// Largest JSON header accepted (the limit the reference implementation sets).
pub const MAX_HEADER: u64 = 100 << 20;

/// One tensor as the header describes it, with absolute file offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub start: u64,
    pub end: u64,
}

/// A header's `__metadata__`: its keys and string values, in the header's order.
pub type Metadata = Vec<(String, String)>;

/// The parsed layout of a safetensors file.
#[derive(Clone, Debug)]
pub struct SourceLayout {
    /// Length of the 8-byte size prefix plus the JSON header.
    pub header_end: u64,
    /// Tensors in order of their data offsets.
    pub tensors: Vec<TensorInfo>,
    /// The header's `__metadata__`, if it has one.
    pub metadata: Option<Metadata>,
}

/// Parses the header of a file of `file_size` bytes; `read_header(n)` returns the
/// file's first `n` bytes (called for the size prefix, then for the whole header).
pub fn parse(
    file_size: u64,
    mut read_header: impl FnMut(u64) -> std::io::Result<Vec<u8>>,
) -> Result<SourceLayout, String> {
    if file_size < 8 {
        return Err(format!(
            "file is {file_size} bytes, shorter than the 8-byte header size"
        ));
    }
    let bytes = read_header(8).map_err(|e| e.to_string())?;
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if n == 0 || n > file_size - 8 {
        if looks_like_text(&bytes[..8]) {
            return Err(
                "it starts like JSON or text, not with the 8-byte header length \
                 of a safetensors file"
                    .into(),
            );
        }
        return Err(format!(
            "header size {n} does not fit in a file of {file_size} bytes"
        ));
    }
    if n > MAX_HEADER {
        return Err(format!(
            "header size {n} exceeds the limit of {MAX_HEADER} bytes"
        ));
    }
    let header = read_header(8 + n).map_err(|e| e.to_string())?;
    parse_header(&header[8..], 8 + n, file_size)
}

/// Whether a file's first bytes read as text (a JSON config, a tokenizer, a
/// README) rather than a little-endian length.
fn looks_like_text(start: &[u8]) -> bool {
    start
        .iter()
        .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace())
}

fn parse_header(json: &[u8], header_end: u64, file_size: u64) -> Result<SourceLayout, String> {
    if json.first() != Some(&b'{') {
        return Err("header does not start with '{'".into());
    }
    let visitor = Entries {
        header_end,
        file_size,
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    let (mut tensors, metadata) = serde::Deserializer::deserialize_map(&mut de, visitor)
        .and_then(|t| de.end().map(|()| t))
        .map_err(|e| match e.classify() {
            serde_json::error::Category::Data => format!("header is not a JSON object: {e}"),
            _ => format!("header is not valid JSON: {e}"),
        })
        .and_then(|t| t)?;
    tensors.sort_by_key(|t| (t.start, t.end));
    for pair in tensors.windows(2) {
        if pair[1].start < pair[0].end {
            return Err(format!(
                "tensors '{}' and '{}' overlap",
                pair[0].name, pair[1].name
            ));
        }
    }
    refuse_duplicate_names(&tensors)?;
    Ok(SourceLayout {
        header_end,
        tensors,
        metadata,
    })
}

/// A name given twice would leave readers that look tensors up by name (as
/// safetensors' loaders do) with one of two tensors.
fn refuse_duplicate_names(tensors: &[TensorInfo]) -> Result<(), String> {
    // Borrowed names, not a set of owned ones: a header of a million tensors
    // is not held twice.
    let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(format!("tensor '{}' appears twice in the header", w[0])),
        None => Ok(()),
    }
}

/// Reads the header's entries one at a time, each tensor's JSON dropped once
/// it is checked: a header of a million tensors would take gigabytes as one
/// JSON value.
struct Entries {
    header_end: u64,
    file_size: u64,
}

impl<'de> serde::de::Visitor<'de> for Entries {
    /// A header that is JSON but not a valid safetensors header is the inner
    /// error, so that its message is ours, not the JSON reader's.
    type Value = Result<(Vec<TensorInfo>, Option<Metadata>), String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut tensors = Vec::new();
        let mut metadata = None;
        while let Some(name) = map.next_key::<String>()? {
            let entry: Value = map.next_value()?;
            let parsed = if name != "__metadata__" {
                parse_tensor(name, &entry, self.header_end, self.file_size).map(|t| tensors.push(t))
            } else if metadata.is_none() {
                parse_metadata(entry).map(|m| metadata = Some(m))
            } else {
                Err("__metadata__ appears twice in the header".into())
            };
            match parsed {
                Ok(()) => {}
                // The rest is still read, so that invalid JSON later is
                // reported as such.
                Err(e) => {
                    while map
                        .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                        .is_some()
                    {}
                    return Ok(Err(e));
                }
            }
        }
        Ok(Ok((tensors, metadata)))
    }
}

/// `__metadata__` as safetensors reads it: an object of strings.
fn parse_metadata(entry: Value) -> Result<Metadata, String> {
    let bad = || "__metadata__ is not an object of strings".to_string();
    let Value::Object(map) = entry else {
        return Err(bad());
    };
    map.into_iter()
        .map(|(key, value)| match value {
            Value::String(s) => Ok((key, s)),
            _ => Err(bad()),
        })
        .collect()
}

fn parse_tensor(
    name: String,
    entry: &Value,
    header_end: u64,
    file_size: u64,
) -> Result<TensorInfo, String> {
    let bad = |what: &str| format!("tensor '{name}': {what}");
    let dtype = entry["dtype"]
        .as_str()
        .ok_or_else(|| bad("missing dtype"))?
        .to_string();
    let shape = entry["shape"]
        .as_array()
        .ok_or_else(|| bad("missing shape"))?
        .iter()
        .map(|d| {
            d.as_u64()
                .ok_or_else(|| bad("shape is not a list of sizes"))
        })
        .collect::<Result<Vec<u64>, String>>()?;
    let offsets = entry["data_offsets"]
        .as_array()
        .filter(|a| a.len() == 2)
        .ok_or_else(|| bad("data_offsets is not a pair"))?;
    let (Some(a), Some(b)) = (offsets[0].as_u64(), offsets[1].as_u64()) else {
        return Err(bad("data_offsets are not sizes"));
    };
    let (start, end) = (header_end.checked_add(a), header_end.checked_add(b));
    let (Some(start), Some(end)) = (start, end) else {
        return Err(bad("data_offsets overflow"));
    };
    if a > b || end > file_size {
        return Err(bad(&format!(
            "data_offsets [{a}, {b}] do not fit the file of {file_size} bytes"
        )));
    }
    let element = Element::of_dtype(&dtype);
    if element.known {
        let count = shape
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(*d))
            .and_then(|c| c.checked_mul(element.layout.element_bytes() as u64));
        if count != Some(b - a) {
            return Err(bad(&format!(
                "{} bytes do not hold shape {shape:?} of {dtype}",
                b - a
            )));
        }
    }
    Ok(TensorInfo {
        name,
        dtype,
        shape,
        start,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(header: &str, data_len: u64) -> Result<SourceLayout, String> {
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        let size = file.len() as u64 + data_len;
        parse(size, |n| Ok(file[..n as usize].to_vec()))
    }

    proptest::proptest! {
        /// Arbitrary bytes, and JSON-ish headers, are refused or parsed; never a panic.
        #[test]
        fn parser_survives_arbitrary_input(
            bytes: Vec<u8>,
            header in "[{}\\[\\]\":,0-9a-zA-Z_ ]{0,120}",
            data_len in 0u64..1000,
        ) {
            let _ = parse(bytes.len() as u64, |n| Ok(bytes[..(n as usize).min(bytes.len())].to_vec()))
                .map(|l| l.tensors.len());
            let _ = layout(&header, data_len);
        }
    }

    #[test]
    fn accepts_metadata_gaps_and_unknown_dtypes() {
        let h = r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},"__metadata__":{"k":"v"},"a":{"dtype":"X9","shape":[3],"data_offsets":[0,5]}}"#;
        let l = layout(h, 40).unwrap();
        assert_eq!(l.tensors[0].name, "a");
        assert_eq!(l.tensors[1].start, l.header_end + 16);
        assert_eq!(l.metadata, Some(vec![("k".into(), "v".into())]));
    }

    #[test]
    fn refuses_what_is_not_safetensors() {
        let cases = [
            ("[1,2]", 0, "start with"),
            ("{\"a\":1", 0, "not valid JSON"),
            (
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                8,
                "do not hold",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
                4,
                "do not fit",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
                6,
                "overlap",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#,
                0,
                "'a' appears twice",
            ),
            (r#"{"__metadata__":{"k":1}}"#, 0, "not an object of strings"),
            (r#"{"__metadata__":[]}"#, 0, "not an object of strings"),
            (
                r#"{"__metadata__":{},"__metadata__":{}}"#,
                0,
                "__metadata__ appears twice",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}}"#,
                16,
                "not a list of sizes",
            ),
        ];
        for (h, data, why) in cases {
            let e = layout(h, data).unwrap_err();
            assert!(e.contains(why), "{h}: {e}");
        }
        assert!(parse(4, |_| unreachable!()).is_err());
        assert!(parse(100, |_| Ok(u64::MAX.to_le_bytes().to_vec())).is_err());
    }
}
