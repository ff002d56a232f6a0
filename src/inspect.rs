//! What an archive holds: per tensor, its sizes before and after, the programs its
//! chunks became and the codecs their literals use.

#![forbid(unsafe_code)]

use crate::archive::{Archive, Combine};
use crate::codec;
use crate::dsl::{decode_program, describe, EncodedLit, Op, Program, Type};
use crate::error::{Error, IoContext, Result};
use crate::safetensors::TensorInfo;
use crate::synth::Production;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// Bytes of its literals' code tables (see [`codec::table_len`]), over
    /// all chunks: what each chunk pays to say how its words are coded.
    pub table_bytes: u64,
    /// How many program nodes each production made, over all chunks.
    pub productions: BTreeMap<&'static str, usize>,
}

/// What is known of an archive before its rows, and the totals after them.
pub struct Report {
    /// The archives this one references, as its index names them.
    pub bases: Vec<String>,
    pub source_len: u64,
    pub archive_len: u64,
    /// How many program nodes each production made, over the whole archive
    /// (complete once every row has been given out).
    pub productions: BTreeMap<&'static str, usize>,
    /// Bytes of code tables over the whole archive (complete likewise).
    pub table_bytes: u64,
    /// Bytes of the code tables the index holds for literals to share
    /// (format version 10), not counted in `table_bytes`.
    pub shared_table_bytes: u64,
}

/// Reports on `archive`: gives `each` one row per tensor, in the order of
/// their bytes, then the header, gaps and trailing bytes' row, and returns
/// the totals. Every record is parsed (not executed) and checked. Rows go out
/// as they are done, so a header of a million tensors is not held twice.
pub fn inspect(archive: &Archive, mut each: impl FnMut(&Row) -> Result<()>) -> Result<Report> {
    let layout = (archive.source_layout())
        .map_err(|reason| Error::invalid(archive.path(), format!("archived header: {reason}")))?;
    let mut report = Report::of(archive);
    let mut other = Row::new("(header, gaps and trailing bytes)", "", vec![]);
    // Tensors are sorted and disjoint, and no chunk straddles a tensor's
    // bounds: the chunks before a tensor's start are the header's or gaps'.
    let count = archive.chunks().len();
    let mut i = 0;
    for tensor in &layout.tensors {
        let mut row = Row::of_tensor(tensor);
        for (owner, stop) in [(&mut other, tensor.start), (&mut row, tensor.end)] {
            while i < count && archive.chunk_range(i).start < stop {
                owner.add_chunk(archive, i)?;
                i += 1;
            }
        }
        report.add(&row);
        each(&row)?;
    }
    for i in i..count {
        other.add_chunk(archive, i)?;
    }
    report.add(&other);
    each(&other)?;
    Ok(report)
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
            table_bytes: 0,
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
            let corrupt = |e: codec::WireError| {
                let at = archive.record_offset(i) + (pos + e.at) as u64;
                Error::corrupt(archive.path(), at, e.reason)
            };
            let (p, used) = decode_program(&record[pos..], ty, limits).map_err(corrupt)?;
            self.count(&p).map_err(corrupt)?;
            lanes.push(describe(&p, &|l: &EncodedLit| literal_name(l).to_string()));
            pos += used;
        }
        if self.program.is_empty() {
            let with_base = match seg.base.map(|s| (s.combine, s.rows.is_some())) {
                None => "",
                Some((Combine::Xor, false)) => "base ^ ",
                Some((Combine::Difference, false)) => "base + ",
                Some((Combine::Xor, true)) => "base rows ^ ",
                Some((Combine::Difference, true)) => "base rows + ",
            };
            self.program = format!("{with_base}{}", lanes.join(" | "));
        }
        Ok(())
    }

    /// Counts the productions, codecs and table bytes of `p`; an error (at
    /// its offset in the lane's program) where a literal's table is corrupt.
    fn count(&mut self, p: &Program<EncodedLit>) -> std::result::Result<(), codec::WireError> {
        *self
            .productions
            .entry(Production::of_op(&p.op).name())
            .or_default() += 1;
        if let Op::Lit(l) = &p.op {
            *self.codecs.entry(literal_name(l)).or_default() += 1;
            let table = codec::table_len(l.bytes, p.ty.width).map_err(|e| codec::WireError {
                at: l.at + e.at,
                ..e
            })?;
            self.table_bytes += table as u64;
        }
        p.children().try_for_each(|c| self.count(c))
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
            "codecs": self.codecs, "table_bytes": self.table_bytes,
            "productions": self.productions,
        })
    }
}

fn literal_name(l: &EncodedLit) -> &'static str {
    codec::peek_codec(l.bytes).map_or("invalid", |c| c.name())
}

impl Report {
    fn of(archive: &Archive) -> Report {
        let bases = archive.index().bases.iter();
        Report {
            bases: bases.map(|b| b.path.clone()).collect(),
            source_len: archive.len(),
            archive_len: archive.archive_len(),
            productions: BTreeMap::new(),
            table_bytes: 0,
            shared_table_bytes: archive.index().tables.iter().map(|t| t.len() as u64).sum(),
        }
    }

    fn add(&mut self, row: &Row) {
        self.table_bytes += row.table_bytes;
        for (p, n) in &row.productions {
            *self.productions.entry(*p).or_default() += n;
        }
    }

    pub fn ratio(&self) -> f64 {
        self.source_len as f64 / self.archive_len.max(1) as f64
    }
}

/// Where a report goes, as errors name it.
pub const OUTPUT: &str = "standard output";

/// Writes the report of `archive` as a table, a line per row as it is done.
pub fn write_table(archive: &Archive, out: &mut impl Write) -> Result<()> {
    let at = Path::new(OUTPUT);
    for base in &archive.index().bases {
        let base = &base.path;
        writeln!(out, "base: {base} (chunks marked 'base ^' store their XOR with it, 'base +' their difference from its values; 'base rows' against its rows a row map gathers)").at(at)?;
    }
    writeln!(
        out,
        "{:<48} {:<8} {:<16} {:>12} {:>12} {:>7}  program / codecs",
        "tensor", "dtype", "shape", "bytes in", "bytes out", "ratio"
    )
    .at(at)?;
    let report = inspect(archive, |row| {
        let codecs: Vec<String> = row.codecs.iter().map(|(c, n)| format!("{c}:{n}")).collect();
        writeln!(
            out,
            "{:<48} {:<8} {:<16} {:>12} {:>12} {:>7.3}  {} [{}]",
            row.name,
            row.dtype,
            format!("{:?}", row.shape),
            row.bytes_in,
            row.bytes_out,
            row.ratio(),
            row.program,
            codecs.join(" ")
        )
        .at(at)
    })?;
    let productions: Vec<String> = (report.productions.iter())
        .map(|(p, n)| format!("{p}:{n}"))
        .collect();
    writeln!(out, "productions: {}", productions.join(" ")).at(at)?;
    let (source, archived) = (report.source_len, report.archive_len);
    let (tables, shared) = (report.table_bytes, report.shared_table_bytes);
    let share = 100.0 * (tables + shared) as f64 / archived.max(1) as f64;
    writeln!(
        out,
        "code tables: {tables} bytes, and {shared} in the index shared by chunks, {share:.3}% of the archive"
    )
    .at(at)?;
    let ratio = report.ratio();
    writeln!(out, "total: {source} -> {archived} bytes, ratio {ratio:.4}").at(at)
}

/// Writes the report of `archive` as one JSON object: its sizes and bases,
/// `tensors` (the rows, one per line as each is done), then `productions`.
pub fn write_json(archive: &Archive, out: &mut impl Write) -> Result<()> {
    let at = Path::new(OUTPUT);
    let head = Report::of(archive);
    let (source, archived) = (head.source_len, head.archive_len);
    let (ratio, bases) = (json!(head.ratio()), json!(head.bases));
    write!(
        out,
        "{{\"source_bytes\":{source},\"archive_bytes\":{archived},"
    )
    .at(at)?;
    write!(out, "\"ratio\":{ratio},\"bases\":{bases},\"tensors\":[").at(at)?;
    let mut first = true;
    let report = inspect(archive, |row| {
        let comma = if std::mem::take(&mut first) { "" } else { "," };
        write!(out, "{comma}\n{}", row.to_json()).at(at)
    })?;
    let (productions, tables) = (json!(report.productions), report.table_bytes);
    let shared = report.shared_table_bytes;
    writeln!(
        out,
        "\n],\"productions\":{productions},\"table_bytes\":{tables},\"shared_table_bytes\":{shared}}}"
    )
    .at(at)
}

/// Writes the reports of the archives at `paths`, as JSON or tables: an
/// archive asked for by name (`single`) as its report alone; several as a
/// list of `{"path", "report"}` objects in JSON, a heading line before each
/// table otherwise.
pub fn write_reports(
    paths: &[PathBuf],
    single: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let at = Path::new(OUTPUT);
    if json && !single {
        write!(out, "[").at(at)?;
    }
    for (k, path) in paths.iter().enumerate() {
        let archive = Archive::open_unmapped(path)?;
        let shown = Value::from(path.display().to_string());
        match (json, single) {
            (true, true) => write_json(&archive, out)?,
            (true, false) => {
                let comma = if k == 0 { "" } else { "," };
                write!(out, "{comma}{{\"path\":{shown},\"report\":").at(at)?;
                write_json(&archive, out)?;
                write!(out, "}}").at(at)?;
            }
            (false, true) => write_table(&archive, out)?,
            (false, false) => {
                writeln!(out, "== {}", path.display()).at(at)?;
                write_table(&archive, out)?;
            }
        }
    }
    if json && !single {
        writeln!(out, "]").at(at)?;
    }
    Ok(())
}
