//! What an archive holds: per tensor, its sizes before and after, the programs its
//! chunks became and the codecs their literals use.

#![forbid(unsafe_code)]

use crate::archive::{Archive, Combine};
use crate::codec;
use crate::dsl::{decode_program, describe, EncodedLit, Op, Program, Type};
use crate::error::{Error, Result};
use crate::safetensors::TensorInfo;
use crate::synth::Production;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One row of the report: a tensor, or the header and other non-tensor bytes.
#[derive(Clone, Debug)]
pub struct Row {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub chunks: usize,
    /// How many of its chunks store a residual against a base.
    pub base_chunks: usize,
    /// How many of those store the difference from the base's values (the
    /// others store the XOR with its bytes).
    pub difference_chunks: usize,
    /// The first chunk's programs (one per lane), in readable form.
    pub program: String,
    /// How many literals use each codec, over all chunks.
    pub codecs: BTreeMap<&'static str, usize>,
    /// How many program nodes each production made, over all chunks.
    pub productions: BTreeMap<&'static str, usize>,
}

pub struct Report {
    pub rows: Vec<Row>,
    /// The archives this one references, as its index names them.
    pub bases: Vec<String>,
    pub source_len: u64,
    pub archive_len: u64,
}

/// Builds the report; every record is parsed (not executed) and checked.
pub fn inspect(archive: &Archive) -> Result<Report> {
    let layout = (archive.source_layout())
        .map_err(|reason| Error::invalid(archive.path(), format!("archived header: {reason}")))?;
    let mut rows: Vec<Row> = layout.tensors.iter().map(Row::of_tensor).collect();
    let mut other = Row::new("(header, gaps and trailing bytes)", "", vec![]);
    // Tensors are sorted and disjoint; empty ones own no chunk.
    let spans: Vec<(u64, u64, usize)> = (layout.tensors.iter().enumerate())
        .filter(|(_, t)| t.start < t.end)
        .map(|(k, t)| (t.start, t.end, k))
        .collect();
    for i in 0..archive.chunks().len() {
        let start = archive.chunk_range(i).start;
        let k = spans.partition_point(|s| s.1 <= start);
        let row = match spans.get(k) {
            Some(&(s, _, idx)) if s <= start => &mut rows[idx],
            _ => &mut other,
        };
        row.add_chunk(archive, i)?;
    }
    rows.push(other);
    Ok(Report {
        rows,
        bases: archive
            .index()
            .bases
            .iter()
            .map(|b| b.path.clone())
            .collect(),
        source_len: archive.len(),
        archive_len: archive.archive_len(),
    })
}

impl Row {
    fn of_tensor(t: &TensorInfo) -> Row {
        Row::new(&t.name, &t.dtype, t.shape.clone())
    }

    fn new(name: &str, dtype: &str, shape: Vec<u64>) -> Row {
        Row {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape,
            bytes_in: 0,
            bytes_out: 0,
            chunks: 0,
            base_chunks: 0,
            difference_chunks: 0,
            program: String::new(),
            codecs: BTreeMap::new(),
            productions: BTreeMap::new(),
        }
    }

    fn add_chunk(&mut self, archive: &Archive, i: usize) -> Result<()> {
        let seg = archive.chunks()[i];
        self.bytes_in += seg.src_len;
        self.bytes_out += seg.rec_len;
        self.chunks += 1;
        self.base_chunks += seg.base.is_some() as usize;
        let differs = seg.base.is_some_and(|s| s.combine == Combine::Difference);
        self.difference_chunks += differs as usize;
        let record = archive.record(i)?;
        let ty = Type {
            width: seg.layout.lane_width(),
            len: (seg.src_len / seg.layout.element_bytes() as u64) as usize,
        };
        let limits = crate::archive::program_limits(archive.version());
        let mut pos = 0;
        let mut lanes = Vec::new();
        for _ in 0..seg.layout.lanes() {
            let (p, used) = decode_program(&record[pos..], ty, limits).map_err(|e| {
                let at = archive.record_offset(i) + (pos + e.at) as u64;
                Error::corrupt(archive.path(), at, e.reason)
            })?;
            self.count(&p);
            lanes.push(describe(&p, &|l: &EncodedLit| literal_name(l).to_string()));
            pos += used;
        }
        if self.program.is_empty() {
            let with_base = match seg.base.map(|s| s.combine) {
                None => "",
                Some(Combine::Xor) => "base ^ ",
                Some(Combine::Difference) => "base + ",
            };
            self.program = format!("{with_base}{}", lanes.join(" | "));
        }
        Ok(())
    }

    fn count(&mut self, p: &Program<EncodedLit>) {
        *self
            .productions
            .entry(Production::of_op(&p.op).name())
            .or_default() += 1;
        if let Op::Lit(l) = &p.op {
            *self.codecs.entry(literal_name(l)).or_default() += 1;
        }
        p.children().for_each(|c| self.count(c));
    }

    pub fn ratio(&self) -> f64 {
        self.bytes_in as f64 / self.bytes_out.max(1) as f64
    }

    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name, "dtype": self.dtype, "shape": self.shape,
            "bytes_in": self.bytes_in, "bytes_out": self.bytes_out, "ratio": self.ratio(),
            "chunks": self.chunks, "base_chunks": self.base_chunks,
            "difference_chunks": self.difference_chunks, "program": self.program,
            "codecs": self.codecs, "productions": self.productions,
        })
    }
}

fn literal_name(l: &EncodedLit) -> &'static str {
    codec::peek_codec(l.bytes).map_or("invalid", |c| c.name())
}

impl Report {
    /// How many program nodes each production made, over the whole archive.
    pub fn productions(&self) -> BTreeMap<&'static str, usize> {
        let mut all = BTreeMap::new();
        for row in &self.rows {
            for (p, n) in &row.productions {
                *all.entry(*p).or_default() += n;
            }
        }
        all
    }

    pub fn to_json(&self) -> Value {
        json!({
            "source_bytes": self.source_len,
            "archive_bytes": self.archive_len,
            "ratio": self.source_len as f64 / self.archive_len.max(1) as f64,
            "bases": self.bases,
            "productions": self.productions(),
            "tensors": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
        })
    }
}
