//! The strict decoder of programs (docs/FORMAT.md, "Programs": canonical
//! form and bounds).
//!
//! The decoder is the gate for untrusted archives: it checks every width, length,
//! arity and parameter against the type the parent implies, bounds depth and node
//! count, and rejects encodings the encoder would never produce, all before a single
//! word is executed.

use super::exec::LiteralSource;
use super::mirror::Mirroring;
use super::ops::{Fields, FloatFormat, MapOp, ScanOp};
use super::palette::{palette_values_len, MAX_PALETTE_INDEX_WIDTH};
use super::partition::MAX_PARTITION_CLASSES;
use super::program::{Op, Program};
use super::scaled::{MAX_SCALED_INT_WIDTH, SCALED_FORMATS};
use super::tag::*;
use super::types::{count_width, mask, Type, MAX_WIDTH};
use crate::codec::{self, Codec, OrIn, Word};
use crate::wire::{Reader, WireError};

/// Bounds on the shape of a decoded program; anything larger is rejected.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_depth: usize,
    pub max_nodes: usize,
    /// Words all nodes may yield together, per word of the program's output
    /// (plus `max_nodes`): bounds the work of executing it, so that no chunk
    /// takes much longer to decode than a real one. The packer's search
    /// stays below 72 (48 words of streams per output word, plus Repeat
    /// bodies of at most half their node).
    pub max_work_factor: usize,
    /// Whether the Palette and Scaled operators are accepted (format version 3
    /// and later).
    pub quantized: bool,
    /// Whether the Match operator is accepted (format version 4 and later).
    pub matches: bool,
    /// Whether the Sparse operator is accepted (format version 5 and later).
    pub sparse: bool,
    /// Whether rANS literals of tag 4 are accepted (format version 6 and
    /// later).
    pub seeded_rans: bool,
    /// Whether the Partition operator is accepted (format version 7 and
    /// later).
    pub partition: bool,
    /// Whether the Mirror operator is accepted (format version 8 and later).
    pub mirror: bool,
    /// Whether literals whose code table is shared are accepted (format
    /// version 10 and later).
    pub shared_tables: bool,
    /// Whether the ColumnScan operator is accepted (format version 11 and
    /// later).
    pub column_scan: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 32,
            max_nodes: 1 << 16,
            max_work_factor: 128,
            quantized: true,
            matches: true,
            sparse: true,
            seeded_rans: true,
            partition: true,
            mirror: true,
            shared_tables: true,
            column_scan: true,
        }
    }
}

/// A literal inside an encoded program: its codec bytes, where they start in the
/// buffer given to `decode_program` (so errors can name an offset), and the
/// shared code tables of its archive (format version 10), which it may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodedLit<'a> {
    pub at: usize,
    pub bytes: &'a [u8],
    pub tables: &'a [Vec<u8>],
}

impl LiteralSource for EncodedLit<'_> {
    type Error = WireError;
    fn write_words<T: Word>(&self, width: u32, out: &mut [T]) -> Result<(), WireError> {
        self.check_used(codec::decode_in(self.bytes, self.tables, width, out))
    }

    fn ors_in(&self) -> bool {
        codec::coded_with(self.bytes, self.tables).is_ok_and(codec::ors_in)
    }

    fn or_words<T: Word>(&self, width: u32, or_in: OrIn, out: &mut [T]) -> Result<(), WireError> {
        self.check_used(codec::decode_or_in(self.bytes, width, or_in, out))
    }

    fn writes_rows(&self) -> bool {
        codec::coded_with(self.bytes, self.tables).is_ok_and(codec::writes_rows)
    }

    fn write_rows<T: Word>(
        &self,
        width: u32,
        out: &mut [T],
        group: usize,
        rows: &[u32],
    ) -> Result<(), WireError> {
        let used = codec::decode_rows(self.bytes, self.tables, width, out, group, rows).unwrap_or(
            Err(Self::refuse("partition rows the decoder does not take")),
        );
        self.check_used(used)
    }

    fn refuse(reason: &'static str) -> WireError {
        WireError { at: 0, reason }
    }
}

impl EncodedLit<'_> {
    /// Places a decoder's error within the whole buffer, and checks that
    /// the decoder used every byte of the literal.
    fn check_used(&self, used: Result<usize, WireError>) -> Result<(), WireError> {
        let used = used.map_err(|e| WireError {
            at: self.at + e.at,
            reason: e.reason,
        })?;
        if used != self.bytes.len() {
            return Err(WireError {
                at: self.at + used,
                reason: "literal has trailing bytes",
            });
        }
        Ok(())
    }
}

/// Decodes one program of type `ty` from the start of `buf`, returning it and the
/// number of bytes it used. Literal bytes are borrowed, not decoded.
pub fn decode_program(
    buf: &[u8],
    ty: Type,
    limits: Limits,
) -> Result<(Program<EncodedLit<'_>>, usize), WireError> {
    decode_program_in(buf, ty, limits, &[])
}

/// [`decode_program`] for a program of an archive whose index holds the
/// shared code tables `tables` (format version 10).
pub fn decode_program_in<'a>(
    buf: &'a [u8],
    ty: Type,
    limits: Limits,
    tables: &'a [Vec<u8>],
) -> Result<(Program<EncodedLit<'a>>, usize), WireError> {
    if ty.width == 0 || ty.width > MAX_WIDTH || ty.len == 0 {
        return Err(WireError {
            at: 0,
            reason: "program type out of range",
        });
    }
    let max_work = (ty.len as u64)
        .saturating_mul(limits.max_work_factor as u64)
        .saturating_add(limits.max_nodes as u64);
    let mut d = Decoder {
        r: Reader::new(buf),
        nodes: 0,
        work: 0,
        max_work,
        limits,
        tables,
    };
    let p = d.node(ty, 0)?;
    Ok((p, d.r.pos()))
}

struct Decoder<'a> {
    r: Reader<'a>,
    nodes: usize,
    /// Words yielded by the nodes so far, and the most allowed.
    work: u64,
    max_work: u64,
    limits: Limits,
    tables: &'a [Vec<u8>],
}

type Node<'a> = Program<EncodedLit<'a>>;

impl<'a> Decoder<'a> {
    fn fail<T>(&self, at: usize, reason: &'static str) -> Result<T, WireError> {
        Err(WireError { at, reason })
    }

    fn node(&mut self, ty: Type, depth: usize) -> Result<Node<'a>, WireError> {
        let at = self.r.pos();
        self.nodes += 1;
        if depth > self.limits.max_depth {
            return self.fail(at, "program nested too deeply");
        }
        if self.nodes > self.limits.max_nodes {
            return self.fail(at, "program has too many nodes");
        }
        self.work += ty.len as u64;
        if self.work > self.max_work {
            return self.fail(at, "program does more work than its output allows");
        }
        let op = match self.r.u8()? {
            TAG_LIT => {
                let size = self
                    .r
                    .varint_max(self.r.remaining() as u64, "literal longer than data")?;
                let start = self.r.pos();
                let bytes = self.r.bytes(size as usize)?;
                match codec::peek_codec(bytes) {
                    Ok(Codec::Rans) if !self.limits.seeded_rans => {
                        return self.fail(start, "rans literal of tag 4 needs format version 6")
                    }
                    Ok(Codec::Shared) if !self.limits.shared_tables => {
                        return self.fail(start, "shared literal needs format version 10")
                    }
                    _ => {}
                }
                Op::Lit(EncodedLit {
                    at: start,
                    bytes,
                    tables: self.tables,
                })
            }
            TAG_CONST => Op::Const(
                self.r
                    .varint_max(mask(ty.width) as u64, "constant exceeds width")?
                    as u32,
            ),
            TAG_CONCAT => self.concat(ty, depth)?,
            TAG_REPEAT => self.repeat(ty, depth)?,
            TAG_MAP => self.map(ty, depth)?,
            TAG_SCAN => {
                let kind = match self.r.u8()? {
                    0 => ScanOp::Xor,
                    1 => ScanOp::Add,
                    _ => return self.fail(at, "unknown scan kind"),
                };
                let init = self
                    .r
                    .varint_max(mask(ty.width) as u64, "scan start exceeds width")?
                    as u32;
                let updates = Box::new(self.node(ty, depth + 1)?);
                Op::Scan {
                    op: kind,
                    init,
                    updates,
                }
            }
            TAG_MERGE => self.merge(ty, depth)?,
            TAG_PALETTE if self.limits.quantized => self.palette(ty, depth)?,
            TAG_SCALED if self.limits.quantized => self.scaled(ty, depth)?,
            TAG_MATCH if self.limits.matches => self.matches(ty, depth)?,
            TAG_SPARSE if self.limits.sparse => self.sparse(ty, depth)?,
            TAG_PARTITION if self.limits.partition => self.partition(ty, depth)?,
            TAG_MIRROR if self.limits.mirror => self.mirror(ty, depth)?,
            TAG_COLUMN_SCAN if self.limits.column_scan => {
                if ty.len < 2 {
                    return self.fail(at, "column scan of fewer than two words");
                }
                let row = self.r.varint_max(
                    ty.len as u64 - 2,
                    "column scan row not shorter than its program",
                )? as usize
                    + 1;
                let updates = Box::new(self.node(ty, depth + 1)?);
                Op::ColumnScan { row, updates }
            }
            _ => return self.fail(at, "unknown operator"),
        };
        Ok(Program { ty, op })
    }

    fn concat(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        if ty.len < 2 {
            return self.fail(at, "concat of fewer than two words");
        }
        // Each part but the last stores a length of at least one byte, which
        // bounds the arity (and what is allocated for it) by the data left.
        let most = (ty.len as u64 - 2).min(self.r.remaining() as u64);
        let arity =
            self.r
                .varint_max(most, "concat has more parts than words or data")? as usize
                + 2;
        let why = ("concat parts exceed its length", "empty concat part");
        let lens = self.part_lens(at, ty.len, arity, why)?;
        let mut parts = Vec::with_capacity(arity);
        for len in lens {
            let part = self.node(
                Type {
                    width: ty.width,
                    len,
                },
                depth + 1,
            )?;
            if matches!(part.op, Op::Concat(_)) {
                return self.fail(at, "nested concat is not canonical");
            }
            parts.push(part);
        }
        Ok(Op::Concat(parts))
    }

    /// The lengths of `arity` parts of `len` words in all (a Concat's or a
    /// Partition's): `arity - 1` varints, each at least 1 and leaving at
    /// least one word for each part after it, the last part taking what is
    /// left. `why` says what is wrong with a length too long and one of 0.
    fn part_lens(
        &mut self,
        at: usize,
        len: usize,
        arity: usize,
        why: (&'static str, &'static str),
    ) -> Result<Vec<usize>, WireError> {
        let mut lens = Vec::with_capacity(arity);
        let mut left = len;
        for _ in 0..arity - 1 {
            // Every later part needs at least one word.
            let room = left - (arity - lens.len() - 1);
            let n = self.r.varint_max(room as u64, why.0)? as usize;
            if n == 0 {
                return self.fail(at, why.1);
            }
            left -= n;
            lens.push(n);
        }
        lens.push(left);
        Ok(lens)
    }

    fn repeat(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        let times = self.r.varint_max(
            (ty.len as u64).saturating_sub(2),
            "repeat count exceeds length",
        )? as usize
            + 2;
        if ty.len < 2 || !ty.len.is_multiple_of(times) {
            return self.fail(at, "repeat count does not divide the length");
        }
        let body = self.node(
            Type {
                width: ty.width,
                len: ty.len / times,
            },
            depth + 1,
        )?;
        if matches!(body.op, Op::Const(_) | Op::Repeat { .. }) {
            return self.fail(at, "repeat of a constant or repeat is not canonical");
        }
        Ok(Op::Repeat {
            times,
            body: Box::new(body),
        })
    }

    fn map(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        let code = self.r.u8()?;
        let mut param = || {
            self.r
                .varint_max(u32::MAX as u64, "map parameter exceeds 32 bits")
        };
        let op = match code {
            0 => MapOp::Xor(param()? as u32),
            1 => MapOp::Add(param()? as u32),
            2 => MapOp::Zigzag,
            3 => MapOp::Gray,
            4 => MapOp::Rotate(param()? as u32),
            5 => MapOp::BitReverse,
            _ => return self.fail(at, "unknown map kind"),
        };
        if !op.is_valid(ty.width) {
            return self.fail(at, "map parameter invalid or identity for this width");
        }
        let body = self.node(ty, depth + 1)?;
        if let Op::Map { op: inner, .. } = &body.op {
            if std::mem::discriminant(inner) == std::mem::discriminant(&op) {
                return self.fail(at, "map of the same map kind is not canonical");
            }
        }
        Ok(Op::Map {
            op,
            body: Box::new(body),
        })
    }

    fn merge(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        let fields = match self.r.u8()? {
            c @ 0..=4 => Fields::Float(FloatFormat::ALL[c as usize]),
            5 => Fields::Split {
                low: self.r.varint_max(31, "split point exceeds 31")? as u32,
            },
            6 => Fields::BitPlanes,
            7 => Fields::BytePlanes,
            _ => return self.fail(at, "unknown merge fields"),
        };
        if !fields.is_valid(ty.width) {
            return self.fail(at, "merge fields do not fit the width");
        }
        let parts = fields
            .widths(ty.width)
            .into_iter()
            .map(|width| self.node(Type { width, len: ty.len }, depth + 1))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Op::Merge { fields, parts })
    }

    fn palette(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        if ty.len < 2 {
            return self.fail(at, "palette of fewer than two words");
        }
        let group = self
            .r
            .varint_max(ty.len as u64 - 2, "palette group longer than its program")?
            as usize
            + 2;
        let index_width = self.r.u8()? as u32;
        if !(1..=MAX_PALETTE_INDEX_WIDTH).contains(&index_width) || index_width >= ty.width {
            return self.fail(
                at,
                "palette index width not in 1..=8 or not below the width",
            );
        }
        // The work bound (checked as each child is entered) bounds the
        // tables' length: a group must be long for its table to be large.
        let values = Type {
            width: ty.width,
            len: palette_values_len(ty.len, group, index_width),
        };
        let values = Box::new(self.node(values, depth + 1)?);
        let indices = Type {
            width: index_width,
            len: ty.len,
        };
        let indices = Box::new(self.node(indices, depth + 1)?);
        Ok(Op::Palette {
            group,
            index_width,
            values,
            indices,
        })
    }

    fn scaled(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        let group = self
            .r
            .varint_max(ty.len as u64 - 1, "scaled group longer than its program")?
            as usize
            + 1;
        let format = match SCALED_FORMATS.get(self.r.u8()? as usize) {
            Some(f) if f.width() == ty.width => *f,
            _ => return self.fail(at, "scaled format unknown or not of the width"),
        };
        let int_width = self.r.u8()? as u32;
        if !(1..=MAX_SCALED_INT_WIDTH).contains(&int_width) {
            return self.fail(at, "scaled integer width not in 1..=16");
        }
        let scales = Type {
            width: 32,
            len: ty.len.div_ceil(group),
        };
        let scales = Box::new(self.node(scales, depth + 1)?);
        let ints = Type {
            width: int_width,
            len: ty.len,
        };
        let ints = Box::new(self.node(ints, depth + 1)?);
        Ok(Op::Scaled {
            group,
            format,
            int_width,
            scales,
            ints,
        })
    }
}

impl<'a> Decoder<'a> {
    /// A Match: `k` copies and `m` literal words, each at least one; the
    /// first word is always a literal, so `k + m <= n`. What the tokens say
    /// is checked as they run (see [`run_matches`](super::run_matches)).
    fn matches(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        if ty.len < 2 {
            return self.fail(at, "match of fewer than two words");
        }
        let copies = self
            .r
            .varint_max(ty.len as u64 - 2, "match has more copies than words")?
            as usize
            + 1;
        let literals = self.r.varint_max(
            (ty.len - copies - 1) as u64,
            "match literals and copies exceed its words",
        )? as usize
            + 1;
        let lits = Type {
            width: ty.width,
            len: literals,
        };
        let tokens = Type {
            width: count_width(ty.len),
            len: copies,
        };
        let lits = self.node(lits, depth + 1)?;
        let runs = self.node(tokens, depth + 1)?;
        let lens = self.node(tokens, depth + 1)?;
        let dists = self.node(tokens, depth + 1)?;
        Ok(Op::Match {
            parts: Box::new([lits, runs, lens, dists]),
        })
    }
}

impl<'a> Decoder<'a> {
    /// A Sparse node: a fill word of the node's width and `c` exceptions,
    /// `1 <= c < n` (at least one word is the fill). Where the gaps lead is
    /// checked as they run (see [`place_sparse`](super::place_sparse)).
    fn sparse(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        if ty.len < 2 {
            return self.fail(at, "sparse node of fewer than two words");
        }
        let fill =
            self.r
                .varint_max(mask(ty.width) as u64, "sparse fill exceeds width")? as u32;
        let count = self.r.varint_max(
            ty.len as u64 - 2,
            "sparse node has as many exceptions as words",
        )? as usize
            + 1;
        let gaps = Type {
            width: count_width(ty.len),
            len: count,
        };
        let values = Type {
            width: ty.width,
            len: count,
        };
        let gaps = Box::new(self.node(gaps, depth + 1)?);
        let values = Box::new(self.node(values, depth + 1)?);
        Ok(Op::Sparse { fill, gaps, values })
    }
}

impl<'a> Decoder<'a> {
    /// A Partition: groups of `1 <= g <= n` words, `2 <= k <=`
    /// [`MAX_PARTITION_CLASSES`] classes, each with a part of at
    /// least one word, the parts' lengths summing to `n`. Whether the
    /// classes' groups fill their parts is checked as they run (see
    /// [`gather_partition`](super::gather_partition)).
    fn partition(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        if ty.len < 2 {
            return self.fail(at, "partition of fewer than two words");
        }
        let group = self
            .r
            .varint_max(ty.len as u64 - 1, "partition group longer than its program")?
            as usize
            + 1;
        let most = (ty.len - 2).min(MAX_PARTITION_CLASSES - 2) as u64;
        let k = self
            .r
            .varint_max(most, "partition has more classes than words or allowed")?
            as usize
            + 2;
        let why = ("partition parts exceed its length", "empty partition part");
        let lens = self.part_lens(at, ty.len, k, why)?;
        let classes = Type {
            width: count_width(k),
            len: ty.len.div_ceil(group),
        };
        let classes = Box::new(self.node(classes, depth + 1)?);
        let parts = lens
            .into_iter()
            .map(|len| {
                self.node(
                    Type {
                        width: ty.width,
                        len,
                    },
                    depth + 1,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Op::Partition {
            group,
            classes,
            parts,
        })
    }
}

impl<'a> Decoder<'a> {
    /// A Mirror: rows of `2 <= row <= n` words that divide `n`, the last
    /// `1 <= tail <= row / 2` of each mirrored from column `pivot - c`,
    /// `row - 1 <= pivot < 2 * (row - tail)` (see [`Mirroring::fits`]).
    fn mirror(&mut self, ty: Type, depth: usize) -> Result<Op<EncodedLit<'a>>, WireError> {
        let at = self.r.pos();
        if ty.len < 2 {
            return self.fail(at, "mirror of fewer than two words");
        }
        let row = self
            .r
            .varint_max(ty.len as u64 - 2, "mirror row longer than its program")?
            as usize
            + 2;
        if !ty.len.is_multiple_of(row) {
            return self.fail(at, "mirror rows do not divide its words");
        }
        let tail = self
            .r
            .varint_max(row as u64 / 2 - 1, "mirror tail longer than half its row")?
            as usize
            + 1;
        let pivot = self.r.varint_max(
            (row - 2 * tail) as u64,
            "mirror pivot reads past its kept words",
        )? as usize
            + row
            - 1;
        let at = Mirroring { row, tail, pivot };
        debug_assert!(at.fits(ty.len));
        let rows = ty.len / row;
        let head = Type {
            width: ty.width,
            len: rows * at.kept(),
        };
        let diffs = Type {
            width: ty.width,
            len: rows * tail,
        };
        let head = Box::new(self.node(head, depth + 1)?);
        let diffs = Box::new(self.node(diffs, depth + 1)?);
        Ok(Op::Mirror { at, head, diffs })
    }
}
