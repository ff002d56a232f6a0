//! Fixed parts of the archive: magic numbers, the index and the trailer.

#![forbid(unsafe_code)]

use super::combine::Combine;
use super::rows::{RowMap, MIN_MAP_LEN};
use super::tables::{decode_tables, encode_tables};
use crate::safetensors::Layout;
use crate::wire::{put_varint, Reader, WireError};

/// The newest format version this build writes and reads; it reads every
/// version from 1 up (any change to what a reader accepts is a new version).
/// An archive is written in the oldest version that can hold what it uses;
/// docs/FORMAT.md (*Version*) lists what each version adds, and the
/// `*_VERSION` constants below the first version of each feature.
pub const FORMAT_VERSION: u8 = 11;

/// The first version whose programs may use the operators for quantized
/// weights (Palette, Scaled).
pub const QUANTIZED_VERSION: u8 = 3;

/// The first version whose chunks may combine with their base as a
/// difference of values ([`Combine::Difference`]).
pub const DIFFERENCE_VERSION: u8 = 4;

/// The first version whose programs may use the Match operator (copies of
/// earlier words).
pub const MATCH_VERSION: u8 = 4;

/// The first version whose programs may use the Sparse operator (one word
/// nearly everywhere).
pub const SPARSE_VERSION: u8 = 5;

/// The first version whose literals may be rANS of tag 4 (a table of counts
/// to a few bits, states seeded with the stream's last words).
pub const SEEDED_RANS_VERSION: u8 = 6;

/// The first version whose programs may use the Partition operator (groups
/// of words drawn from a stream per class).
pub const PARTITION_VERSION: u8 = 7;

/// The first version whose programs may use the Mirror operator (rows that
/// are their own mirror image, up to a difference).
pub const MIRROR_VERSION: u8 = 8;

/// The first version whose chunks may combine with rows of a base's
/// tensor gathered by a row map (see [`RowMap`]).
pub const ROWS_VERSION: u8 = 9;

/// The first version whose index may hold code tables shared by literals
/// (literals of tag 5 name one).
pub const TABLES_VERSION: u8 = 10;

/// The first version whose programs may use the ColumnScan operator (sums
/// down the columns of rows).
pub const COLUMN_SCAN_VERSION: u8 = 11;

/// First 8 bytes of a version 1 archive: name, then the format version.
pub const HEAD_MAGIC: [u8; 8] = *b"BREVIS\x00\x01";

/// The head of an archive of format `version`.
pub fn head(version: u8) -> [u8; 8] {
    let mut head = HEAD_MAGIC;
    head[7] = version;
    head
}

/// Why an archive's head was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// Not the name: some other file, or too short.
    NotAnArchive,
    /// A brevis archive of a format version this build does not read.
    UnknownVersion(u8),
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::NotAnArchive => f.write_str("not a brevis archive (bad magic or too short)"),
            HeadError::UnknownVersion(v) => write!(
                f,
                "archive format version {v} is not supported: this brevis reads versions \
                 1 to {FORMAT_VERSION} (a newer archive needs a newer brevis)"
            ),
        }
    }
}

/// Checks an archive's first 8 bytes: the name, then a version this build
/// reads, which it returns.
pub fn check_head(head: &[u8]) -> Result<u8, HeadError> {
    if head.len() < HEAD_MAGIC.len() || head[..7] != HEAD_MAGIC[..7] {
        return Err(HeadError::NotAnArchive);
    }
    match head[7] {
        v @ 1..=FORMAT_VERSION => Ok(v),
        v => Err(HeadError::UnknownVersion(v)),
    }
}
/// Last 8 bytes of every archive.
pub const TAIL_MAGIC: [u8; 8] = *b"BRVINDEX";
/// Trailer: index offset, index length, index checksum, tail magic.
pub const TRAILER_LEN: usize = 32;
/// Largest source span one chunk may cover; bounds what a reader allocates.
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;
/// Smallest encoded chunk entry: layout, two 1-byte varints, checksum.
const MIN_ENTRY_LEN: usize = 11;
/// Smallest encoded base entry: SHA-256, source length, path length, a
/// one-byte path.
const MIN_BASE_LEN: usize = 35;
/// Longest path of a base, in bytes.
pub const MAX_BASE_PATH: u64 = 4096;
/// Bit of a version 2 chunk entry's first byte that says it references a base.
const REFERENCES_BASE: u8 = 0x80;
/// Bit of a version 4 chunk entry's first byte that says its record is the
/// difference from its base's values (with [`REFERENCES_BASE`] only).
const DIFFERENCE: u8 = 0x40;
/// Bit of a version 9 chunk entry's first byte that says its base span lies
/// in a row map's bytes, not in a base's source (with [`REFERENCES_BASE`]
/// only).
const ROWS: u8 = 0x20;

/// The checksum of chunks and of the index: XXH3-64 with seed 0 (the
/// implementation picks SSE2 or AVX2 at run time; checking every decoded
/// chunk makes its speed part of every read).
pub fn checksum(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// One chunk: a span of the source stored as one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkEntry {
    pub layout: Layout,
    /// Source bytes covered.
    pub src_len: u64,
    /// Bytes of the record in the archive.
    pub rec_len: u64,
    /// XXH3-64 (seed 0) of the decoded source bytes.
    pub checksum: u64,
    /// The span of a base's source the record's words are XORed with, if any.
    pub base: Option<BaseSpan>,
}

/// A span of a base's source, `src_len` bytes from `offset`; or of the
/// bytes a row map of that base stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseSpan {
    /// Which of the index's bases.
    pub base: u32,
    /// Which of the index's row maps (of base `base`) `offset` is in, if
    /// the span is one's.
    pub rows: Option<u32>,
    pub offset: u64,
    /// How the chunk's decoded record and the span make its bytes.
    pub combine: Combine,
}

/// Another archive whose source this one's chunks may reference: named by
/// the SHA-256 and length of that source, found by a path relative to the
/// folder of the archive that references it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseEntry {
    pub sha256: [u8; 32],
    pub source_len: u64,
    /// Relative, `/`-separated, UTF-8.
    pub path: String,
}

/// Everything an archive says about its source besides the records themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    pub source_len: u64,
    pub sha256: [u8; 32],
    /// Nominal chunk size the packer used (informational).
    pub chunk_size: u64,
    /// Archives whose sources chunks reference (format version 2 and later).
    pub bases: Vec<BaseEntry>,
    /// Rows of the bases gathered for chunks to reference (version 9).
    pub rows: Vec<RowMap>,
    /// Code tables shared by literals, each a Huffman or rANS literal's
    /// codec tag and table (version 10).
    pub tables: Vec<Vec<u8>>,
    pub chunks: Vec<ChunkEntry>,
}

fn layout_code(layout: Layout) -> u8 {
    Layout::ALL
        .iter()
        .position(|l| *l == layout)
        .expect("listed") as u8
}

impl Index {
    /// The oldest format version this index can be written in: 2 if it has
    /// bases, 4 if a chunk is a difference from its base, 9 if it has row
    /// maps, 10 if it has code tables (its records may need a later one).
    pub fn version(&self) -> u8 {
        let differs = |c: &ChunkEntry| c.base.is_some_and(|s| s.combine == Combine::Difference);
        if !self.tables.is_empty() {
            TABLES_VERSION
        } else if !self.rows.is_empty() {
            ROWS_VERSION
        } else if self.chunks.iter().any(differs) {
            DIFFERENCE_VERSION
        } else if self.bases.is_empty() {
            1
        } else {
            2
        }
    }

    /// The index as its oldest version writes it.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(self.version())
    }

    /// The index as format `version` (at least [`Self::version`]) writes it.
    pub fn encode_as(&self, version: u8) -> Vec<u8> {
        debug_assert!(version >= self.version());
        let mut out = Vec::with_capacity(48 + self.chunks.len() * 16);
        put_varint(&mut out, self.source_len);
        out.extend_from_slice(&self.sha256);
        put_varint(&mut out, self.chunk_size);
        if version >= 2 {
            put_varint(&mut out, self.bases.len() as u64);
            for b in &self.bases {
                out.extend_from_slice(&b.sha256);
                put_varint(&mut out, b.source_len);
                put_varint(&mut out, b.path.len() as u64);
                out.extend_from_slice(b.path.as_bytes());
            }
        }
        if version >= ROWS_VERSION {
            put_varint(&mut out, self.rows.len() as u64);
            self.rows.iter().for_each(|m| m.encode(&mut out));
        }
        if version >= TABLES_VERSION {
            encode_tables(&self.tables, &mut out);
        }
        put_varint(&mut out, self.chunks.len() as u64);
        for s in &self.chunks {
            let flag = match s.base.map(|span| span.combine) {
                None => 0,
                Some(Combine::Xor) => REFERENCES_BASE,
                Some(Combine::Difference) => REFERENCES_BASE | DIFFERENCE,
            };
            let rows = s.base.and_then(|span| span.rows).map_or(0, |_| ROWS);
            out.push(layout_code(s.layout) | flag | rows);
            put_varint(&mut out, s.src_len);
            put_varint(&mut out, s.rec_len);
            out.extend_from_slice(&s.checksum.to_le_bytes());
            if let Some(span) = s.base {
                debug_assert!(span
                    .rows
                    .is_none_or(|m| self.rows[m as usize].base == span.base));
                put_varint(&mut out, span.rows.unwrap_or(span.base) as u64);
                put_varint(&mut out, span.offset);
            }
        }
        out
    }

    /// Parses and checks the index of a `version` archive; `records_len` is the
    /// number of bytes between the head and the index, which the records must
    /// fill exactly.
    pub fn decode(buf: &[u8], records_len: u64, version: u8) -> Result<Index, WireError> {
        let mut r = Reader::new(buf);
        let source_len = r.varint()?;
        let sha256 = r.bytes(32)?.try_into().expect("32 bytes");
        let chunk_size = r.varint()?;
        let bases = if version >= 2 {
            bases(&mut r, version)?
        } else {
            Vec::new()
        };
        let rows = if version >= ROWS_VERSION {
            row_maps(&mut r, &bases)?
        } else {
            Vec::new()
        };
        let tables = if version >= TABLES_VERSION {
            decode_tables(&mut r)?
        } else {
            Vec::new()
        };
        let max_count = (r.remaining() / MIN_ENTRY_LEN) as u64;
        let count = r.varint_max(max_count, "chunk count exceeds index size")?;
        let mut chunks = Vec::with_capacity(count as usize);
        let (mut src_total, mut rec_total) = (0u64, 0u64);
        for _ in 0..count {
            let s = chunk(&mut r, (&bases, &rows), version)?;
            src_total += s.src_len;
            rec_total = rec_total.saturating_add(s.rec_len);
            chunks.push(s);
        }
        if !r.is_empty() {
            return Err(r.error("index has trailing bytes"));
        }
        if src_total != source_len {
            return Err(r.error("chunks do not cover the source exactly"));
        }
        if rec_total != records_len {
            return Err(r.error("records do not fill the space before the index"));
        }
        Ok(Index {
            source_len,
            sha256,
            chunk_size,
            bases,
            rows,
            tables,
            chunks,
        })
    }
}

/// The table of row maps of a version 9 index (maybe none).
fn row_maps(r: &mut Reader, bases: &[BaseEntry]) -> Result<Vec<RowMap>, WireError> {
    let max_count = (r.remaining() / MIN_MAP_LEN) as u64;
    let count = r.varint_max(max_count, "row map count exceeds index size")?;
    let lens: Vec<u64> = bases.iter().map(|b| b.source_len).collect();
    (0..count).map(|_| RowMap::decode(r, &lens)).collect()
}

/// The table of bases of a version 2 index (at least one) or of a later
/// version's (maybe none).
fn bases(r: &mut Reader, version: u8) -> Result<Vec<BaseEntry>, WireError> {
    let max_count = (r.remaining() / MIN_BASE_LEN) as u64;
    let count = r.varint_max(max_count, "base count exceeds index size")?;
    if count == 0 && version == 2 {
        return Err(r.error("a version 2 index lists no base"));
    }
    (0..count)
        .map(|_| {
            let sha256 = r.bytes(32)?.try_into().expect("32 bytes");
            let source_len = r.varint()?;
            let len = r.varint_max(MAX_BASE_PATH, "base path too long")?;
            let at = r.pos();
            let path = std::str::from_utf8(r.bytes(len as usize)?)
                .ok()
                .filter(|p| valid_base_path(p))
                .ok_or(WireError {
                    at,
                    reason: "base path is not a relative UTF-8 path",
                })?;
            Ok(BaseEntry {
                sha256,
                source_len,
                path: path.to_string(),
            })
        })
        .collect()
}

/// A base's path: relative, `/`-separated, with no empty component or NUL.
pub fn valid_base_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path.split('/').all(|c| !c.is_empty())
}

/// The bases and row maps of an index.
type Referenced<'a> = (&'a [BaseEntry], &'a [RowMap]);

fn chunk(r: &mut Reader, (bases, rows): Referenced, version: u8) -> Result<ChunkEntry, WireError> {
    let at = r.pos();
    let first = r.u8()?;
    let references = !bases.is_empty() && first & REFERENCES_BASE != 0;
    let differs = references && version >= DIFFERENCE_VERSION && first & DIFFERENCE != 0;
    let in_rows = references && version >= ROWS_VERSION && first & ROWS != 0;
    // Flags a version does not have are left in the layout code, which
    // then names no layout.
    let mut code = first;
    for (set, flag) in [
        (references, REFERENCES_BASE),
        (differs, DIFFERENCE),
        (in_rows, ROWS),
    ] {
        if set {
            code &= !flag;
        }
    }
    let combine = if differs {
        Combine::Difference
    } else {
        Combine::Xor
    };
    let layout = *Layout::ALL
        .get(code as usize)
        .ok_or_else(|| r.error("unknown chunk layout"))?;
    let src_len = r.varint_max(MAX_CHUNK_BYTES, "chunk longer than the maximum")?;
    if src_len == 0 || src_len % layout.element_bytes() as u64 != 0 {
        return Err(WireError {
            at,
            reason: "chunk length is zero or not whole elements",
        });
    }
    let rec_len = r.varint()?;
    let checksum = r.u64_le()?;
    let base = match (references, in_rows) {
        (false, _) => None,
        (true, false) => Some(span(r, bases, src_len, combine)?),
        (true, true) => Some(rows_span(r, rows, src_len, combine)?),
    };
    Ok(ChunkEntry {
        layout,
        src_len,
        rec_len,
        checksum,
        base,
    })
}

/// A chunk's span of a base: it must lie inside that base's source.
fn span(
    r: &mut Reader,
    bases: &[BaseEntry],
    src_len: u64,
    combine: Combine,
) -> Result<BaseSpan, WireError> {
    let base = r.varint_max(bases.len() as u64 - 1, "base number out of range")?;
    let at = r.pos();
    let offset = r.varint()?;
    let end = offset.checked_add(src_len);
    if end.is_none_or(|end| end > bases[base as usize].source_len) {
        return Err(WireError {
            at,
            reason: "base span beyond the base's source",
        });
    }
    Ok(BaseSpan {
        base: base as u32,
        rows: None,
        offset,
        combine,
    })
}

/// A chunk's span of a row map's bytes: it must lie inside them.
fn rows_span(
    r: &mut Reader,
    rows: &[RowMap],
    src_len: u64,
    combine: Combine,
) -> Result<BaseSpan, WireError> {
    let max = (rows.len() as u64).checked_sub(1);
    let max = max.ok_or_else(|| r.error("a chunk in rows of an index with no row map"))?;
    let map = r.varint_max(max, "row map number out of range")?;
    let at = r.pos();
    let offset = r.varint()?;
    let map_len = rows[map as usize].len();
    if offset.checked_add(src_len).is_none_or(|end| end > map_len) {
        return Err(WireError {
            at,
            reason: "base span beyond its row map",
        });
    }
    Ok(BaseSpan {
        base: rows[map as usize].base,
        rows: Some(map as u32),
        offset,
        combine,
    })
}

/// The trailer at the end of the file.
pub fn encode_trailer(index_offset: u64, index: &[u8]) -> [u8; TRAILER_LEN] {
    let mut t = [0u8; TRAILER_LEN];
    t[..8].copy_from_slice(&index_offset.to_le_bytes());
    t[8..16].copy_from_slice(&(index.len() as u64).to_le_bytes());
    t[16..24].copy_from_slice(&checksum(index).to_le_bytes());
    t[24..].copy_from_slice(&TAIL_MAGIC);
    t
}

/// A whole archive in memory: the head, `records` in order, then `index`
/// (which must describe them) and the trailer. For tools and tests that build
/// archives by hand; the packer writes the same layout as it goes.
pub fn assemble<'a>(
    records: impl IntoIterator<Item = &'a [u8]>,
    index: &Index,
    version: u8,
) -> Vec<u8> {
    let mut out = head(version).to_vec();
    records.into_iter().for_each(|r| out.extend_from_slice(r));
    let index_offset = out.len() as u64;
    let encoded = index.encode_as(version);
    out.extend_from_slice(&encoded);
    out.extend_from_slice(&encode_trailer(index_offset, &encoded));
    out
}

/// Index offset, length and checksum from a trailer.
pub fn decode_trailer(t: &[u8; TRAILER_LEN]) -> Option<(u64, u64, u64)> {
    let word = |i: usize| u64::from_le_bytes(t[i..i + 8].try_into().expect("8 bytes"));
    (t[24..] == TAIL_MAGIC).then(|| (word(0), word(8), word(16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Archives written by any version must keep verifying: XXH3-64 values
    /// for inputs of each length class (0, 1-3, 4-16, 17-128, 129-240, long),
    /// as computed by another implementation of it.
    #[test]
    fn checksum_is_xxh3_64() {
        let long: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let expected = [
            (0, 0x2d06800538d394c2),
            (3, 0xa1c4a8259b827291),
            (17, 0x47aad6b375eb4bba),
            (129, 0x9e2414800f83768a),
            (240, 0xb714c5fd22744964),
            (241, 0xbc424a2c480dd281),
            (1000, 0xa067b58e6ea5d2f2),
            (1 << 20, 0xe2786b358eab4a67),
        ];
        for (n, value) in expected {
            assert_eq!(checksum(&long[..n]), value, "{n} bytes");
        }
    }

    fn sample() -> Index {
        let seg = |layout, src_len, rec_len| ChunkEntry {
            layout,
            src_len,
            rec_len,
            checksum: src_len * 31 + rec_len,
            base: None,
        };
        Index {
            source_len: 4 + 4096 + 7,
            sha256: [7; 32],
            chunk_size: 4096,
            bases: Vec::new(),
            rows: Vec::new(),
            tables: Vec::new(),
            chunks: vec![
                seg(Layout::Bytes, 4, 9),
                seg(Layout::Word, 4096, 1000),
                seg(Layout::Bytes, 7, 3),
            ],
        }
    }

    #[test]
    fn heads_of_other_files_and_versions_are_refused_by_name() {
        assert_eq!(check_head(&HEAD_MAGIC), Ok(1));
        assert_eq!(check_head(&head(2)), Ok(2));
        assert_eq!(check_head(&head(3)), Ok(3));
        assert_eq!(check_head(&head(MATCH_VERSION)), Ok(MATCH_VERSION));
        let newer = FORMAT_VERSION + 1;
        assert_eq!(
            check_head(&head(newer)),
            Err(HeadError::UnknownVersion(newer))
        );
        assert_eq!(check_head(&head(0)), Err(HeadError::UnknownVersion(0)));
        let message = HeadError::UnknownVersion(newer).to_string();
        let expected = format!("version {newer} is not supported");
        assert!(message.contains(&expected), "{message}");
        assert_eq!(check_head(b"BREVIS\x00"), Err(HeadError::NotAnArchive));
        assert_eq!(check_head(b"{\"a\": 1}   "), Err(HeadError::NotAnArchive));
    }

    #[test]
    fn index_round_trips_and_checks_its_sums() {
        let index = sample();
        let bytes = index.encode();
        assert_eq!(index.version(), 1);
        assert_eq!(Index::decode(&bytes, 1012, 1).unwrap(), index);
        assert!(
            Index::decode(&bytes, 1013, 1).is_err(),
            "records must fill the space exactly"
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Index::decode(&longer, 1012, 1).is_err(), "trailing bytes");
    }

    fn with_base() -> Index {
        let mut index = sample();
        index.bases.push(BaseEntry {
            sha256: [9; 32],
            source_len: 10_000,
            path: "../base/model.brv".into(),
        });
        index.chunks[1].base = Some(BaseSpan {
            base: 0,
            rows: None,
            offset: 10_000 - 4096,
            combine: Combine::Xor,
        });
        index
    }

    fn with_difference() -> Index {
        let mut index = with_base();
        index.chunks[1].base.as_mut().unwrap().combine = Combine::Difference;
        index
    }

    #[test]
    fn a_difference_from_the_base_is_version_4_and_round_trips() {
        let index = with_difference();
        assert_eq!(index.version(), 4);
        let bytes = index.encode();
        assert_eq!(Index::decode(&bytes, 1012, 4).unwrap(), index);
        for older in [2, 3] {
            let err = Index::decode(&bytes, 1012, older).unwrap_err();
            assert_eq!(err.reason, "unknown chunk layout", "version {older}");
        }
        // The flag means nothing without a base.
        let mut alone = sample().encode_as(4);
        let at = alone.len() - 11;
        assert_eq!(alone[at], 0, "the last chunk's layout byte");
        alone[at] |= DIFFERENCE;
        let err = Index::decode(&alone, 1012, 4).unwrap_err();
        assert_eq!(err.reason, "unknown chunk layout");
        // An XOR span reads the same in every version that has bases.
        let xor = with_base().encode_as(4);
        assert_eq!(Index::decode(&xor, 1012, 4).unwrap(), with_base());
    }

    /// The middle chunk in rows of the base: 8 base rows of 512 bytes from
    /// byte 100, then 2 rows of its own.
    fn with_rows() -> Index {
        use crate::archive::rows::Run;
        let mut index = with_difference();
        let runs = vec![
            Run {
                rows: 8,
                from: Some(0),
            },
            Run {
                rows: 2,
                from: None,
            },
        ];
        index.rows.push(RowMap::new(0, 100, 512, runs).unwrap());
        let span = index.chunks[1].base.as_mut().unwrap();
        (span.rows, span.offset) = (Some(0), 1024);
        index
    }

    #[test]
    fn an_index_with_code_tables_is_version_10_and_round_trips() {
        let mut index = with_rows();
        index.tables = vec![vec![2, 1, 0, 0x11], vec![4; 300]];
        assert_eq!(index.version(), TABLES_VERSION);
        let bytes = index.encode();
        assert_eq!(Index::decode(&bytes, 1012, 10).unwrap(), index);
        assert!(
            Index::decode(&bytes, 1012, 9).is_err(),
            "no code tables in 9"
        );
        // Version 9's index is version 10's with no table after the maps.
        let none = with_rows();
        let (nine, ten) = (none.encode_as(9), none.encode_as(10));
        assert_eq!(Index::decode(&ten, 1012, 10).unwrap(), none);
        assert_eq!(ten.len(), nine.len() + 1);
    }

    #[test]
    fn an_index_with_row_maps_is_version_9_and_round_trips() {
        let index = with_rows();
        assert_eq!(index.version(), ROWS_VERSION);
        let bytes = index.encode();
        assert_eq!(Index::decode(&bytes, 1012, 9).unwrap(), index);
        assert!(Index::decode(&bytes, 1012, 8).is_err(), "no map table in 8");
        // The flag is a layout bit before version 9, and without a base.
        let mut flagged = with_difference().encode_as(8);
        // The middle chunk's entry: kind, two 2-byte varints, checksum,
        // base, a 2-byte offset; then the last chunk's 11 bytes.
        let at = flagged.len() - 11 - 16;
        assert_eq!(flagged[at], REFERENCES_BASE | DIFFERENCE | 2);
        flagged[at] |= ROWS;
        let err = Index::decode(&flagged, 1012, 8).unwrap_err();
        assert_eq!(err.reason, "unknown chunk layout");
        let mut beyond = with_rows();
        beyond.chunks[1].base.as_mut().unwrap().offset = 1025;
        let err = Index::decode(&beyond.encode(), 1012, 9).unwrap_err();
        assert_eq!(err.reason, "base span beyond its row map");
        let mut other = with_rows().encode();
        let at = other.len() - 11 - 2 - 1;
        assert_eq!(other[at], 0, "the middle chunk's map");
        other[at] = 1;
        let err = Index::decode(&other, 1012, 9).unwrap_err();
        assert_eq!(err.reason, "row map number out of range");
    }

    #[test]
    fn an_index_with_bases_is_version_2_and_round_trips() {
        let index = with_base();
        assert_eq!(index.version(), 2);
        let bytes = index.encode();
        assert_eq!(Index::decode(&bytes, 1012, 2).unwrap(), index);
        assert!(
            Index::decode(&bytes, 1012, 1).is_err(),
            "not a version 1 index"
        );
        let v1 = sample().encode();
        assert!(Index::decode(&v1, 1012, 2).is_err(), "no base table");
    }

    #[test]
    fn base_spans_and_paths_are_checked() {
        let mut beyond = with_base();
        beyond.chunks[1].base.as_mut().unwrap().offset += 1;
        let err = Index::decode(&beyond.encode(), 1012, 2).unwrap_err();
        assert_eq!(err.reason, "base span beyond the base's source");
        let mut missing = with_base();
        missing.chunks[1].base.as_mut().unwrap().base = 1;
        let err = Index::decode(&missing.encode(), 1012, 2).unwrap_err();
        assert_eq!(err.reason, "base number out of range");
        for path in ["/etc/passwd", "a//b", "a/", "a\0b"] {
            let mut bad = with_base();
            bad.bases[0].path = path.into();
            let err = Index::decode(&bad.encode(), 1012, 2).unwrap_err();
            assert_eq!(
                err.reason, "base path is not a relative UTF-8 path",
                "{path}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn index_decoder_survives_arbitrary_and_damaged_bytes(bytes: Vec<u8>, at: usize, bit in 0u8..8) {
            let _ = Index::decode(&bytes, bytes.len() as u64, 1);
            let _ = Index::decode(&bytes, bytes.len() as u64, 2);
            let _ = Index::decode(&bytes, bytes.len() as u64, 4);
            let _ = Index::decode(&bytes, bytes.len() as u64, 9);
            let indexes = [(sample(), 1), (with_base(), 2), (with_difference(), 4), (with_rows(), 9)];
            for (index, version) in indexes {
                let mut damaged = index.encode();
                let k = at % damaged.len();
                damaged[k] ^= 1 << bit;
                let _ = Index::decode(&damaged, 1012, version);
            }
        }
    }
}
