//! Programs: trees of operators whose execution yields a stream of words
//! (docs/FORMAT.md, "Programs"), with their literals as the synthesizer
//! holds them, and a readable one-line form.

use std::fmt;
use std::sync::Arc;

use super::mirror::Mirroring;
use super::ops::{Fields, FloatFormat, MapOp, ScanOp};
use super::types::Type;
use crate::codec::{self, Codec, Stats};

/// A program node with its type. `L` is how literals are held: words chosen by the
/// synthesizer ([`Literal`]) or encoded bytes borrowed from an archive (`&[u8]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program<L> {
    pub ty: Type,
    pub op: Op<L>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op<L> {
    /// Stored words, entropy coded.
    Lit(L),
    /// One word repeated `len` times.
    Const(u32),
    /// Outputs joined end to end; at least two parts, all of the parent's width.
    Concat(Vec<Program<L>>),
    /// The body's output repeated `times` (>= 2) times.
    Repeat { times: usize, body: Box<Program<L>> },
    /// A bijection applied to every word of the body.
    Map { op: MapOp, body: Box<Program<L>> },
    /// Running xor/add starting from `init` over the update words.
    Scan {
        op: ScanOp,
        init: u32,
        updates: Box<Program<L>>,
    },
    /// Words composed pointwise from fields, most significant field first.
    Merge {
        fields: Fields,
        parts: Vec<Program<L>>,
    },
    /// Few distinct words per group (format version 3): word `i` is entry
    /// `indices[i]` of the table of its group of `group` words, the tables
    /// being `values` cut into runs of `2^index_width` words.
    Palette {
        group: usize,
        index_width: u32,
        values: Box<Program<L>>,
        indices: Box<Program<L>>,
    },
    /// Floats made from integers and a scale per group (format version 3):
    /// word `i` is `scales[i / group] * ints[i]` rounded to `format` (see
    /// [`scaled_word`](super::scaled_word)), as a quantized checkpoint
    /// stored back in a wide dtype is.
    Scaled {
        group: usize,
        format: FloatFormat,
        int_width: u32,
        scales: Box<Program<L>>,
        ints: Box<Program<L>>,
    },
    /// Copies of earlier words (format version 4): the output is made of runs
    /// of literal words and copies of words already produced, as the token
    /// streams say. `parts` are the literal words `b[m]`, then three token
    /// streams of `t[k]` words, `t = count_width(n)`: per copy, the
    /// literal words before it, its length minus 1 and its distance minus 1
    /// (the literal words left after the last copy end the output). See
    /// [`run_matches`](super::run_matches) for the rules a decoder checks.
    Match { parts: Box<[Program<L>; 4]> },
    /// One word nearly everywhere (format version 5): `fill`, except at the
    /// positions the gaps lead to, which take `values` in order. `gaps` are
    /// `t[c]` words, `t = count_width(n)`: gap `i` is the number of fill
    /// words before exception `i` since the one before it. See
    /// [`place_sparse`](super::place_sparse) for the rule a decoder checks.
    Sparse {
        fill: u32,
        gaps: Box<Program<L>>,
        values: Box<Program<L>>,
    },
    /// Groups of words drawn from separate streams (format version 7): the
    /// words are cut into groups of `group` (the last may be shorter), each
    /// group's class is a word of `classes` (`t[ceil(n / group)]`, `t =
    /// count_width(parts.len())`), and the groups of class `c` are `parts[c]`
    /// cut in order. Rows of a weight matrix whose scales differ code
    /// smaller apart. See [`gather_partition`](super::gather_partition) for
    /// the rule a decoder checks.
    Partition {
        group: usize,
        classes: Box<Program<L>>,
        parts: Vec<Program<L>>,
    },
    /// Columns as running sums (format version 11): word `i` is the next
    /// word of `updates` plus, from the second row on, the word a row of
    /// `row` words above it (modulo `2^width`). A table whose columns
    /// change slowly down its rows (a sinusoidal position embedding's)
    /// leaves small updates; applied twice, their changes. `1 <= row < n`.
    ColumnScan {
        row: usize,
        updates: Box<Program<L>>,
    },
    /// Rows that mirror themselves (format version 8): the words are rows of
    /// `at.row` words; the first `at.row - at.tail` words of each row are
    /// the next words of `head`, and each of its last `at.tail` words, at
    /// column `c`, is the word at column `at.pivot - c` of the same row xor
    /// the next word of `diffs`. A basis of cosines and sines (an STFT's)
    /// is its rows' mirror image or its negation. See [`Mirroring::fits`]
    /// for the bounds a decoder checks.
    Mirror {
        at: Mirroring,
        head: Box<Program<L>>,
        diffs: Box<Program<L>>,
    },
}

/// A literal as the synthesizer holds it: the words and the codec chosen for them.
#[derive(Clone, Debug)]
pub struct Literal {
    /// Encoded size in bytes with `codec` as the search weighs it: exact
    /// for every codec but rANS, whose is predicted (see `codec::best`);
    /// the literal's exact size is known once it is encoded.
    pub size: usize,
    pub codec: Codec,
    pub words: Arc<[u32]>,
    /// The words' statistics, from choosing the codec: encoding the literal
    /// needs them again.
    pub stats: Arc<Stats>,
}

impl Literal {
    /// `words` to be coded with `codec` in `size` bytes, as `stats` of them
    /// showed.
    pub fn new(codec: Codec, size: usize, words: Arc<[u32]>, stats: Stats) -> Literal {
        Literal {
            size,
            codec,
            words,
            stats: Arc::new(stats.kept()),
        }
    }

    /// The literal's exact encoded size, for words of `width` bits: its
    /// `size`, but for rANS, whose size is found by a pass of the coder.
    pub fn exact_size(&self, width: u32) -> usize {
        match self.codec {
            Codec::Rans => codec::encoded_size(self.codec, &self.words, width, &self.stats)
                .expect("a literal's codec applies to its words"),
            _ => self.size,
        }
    }
}

/// Literals are their words and coding: the statistics follow from the words.
impl PartialEq for Literal {
    fn eq(&self, other: &Self) -> bool {
        (self.size, self.codec, &self.words) == (other.size, other.codec, &other.words)
    }
}

impl Eq for Literal {}

impl<L> Program<L> {
    /// Number of nodes, for reports.
    pub fn node_count(&self) -> usize {
        1 + self.children().map(Program::node_count).sum::<usize>()
    }

    pub fn children(&self) -> impl Iterator<Item = &Program<L>> {
        type Kids<'a, L> = (
            &'a [Program<L>],
            Option<&'a Program<L>>,
            Option<&'a Program<L>>,
        );
        let (slice, first, second): Kids<'_, L> = match &self.op {
            Op::Lit(_) | Op::Const(_) => (&[], None, None),
            Op::Concat(parts) | Op::Merge { parts, .. } => (parts, None, None),
            Op::Repeat { body, .. } | Op::Map { body, .. } => (&[], Some(body), None),
            Op::Scan { updates, .. } | Op::ColumnScan { updates, .. } => (&[], Some(updates), None),
            Op::Palette {
                values, indices, ..
            } => (&[], Some(values), Some(indices)),
            Op::Scaled { scales, ints, .. } => (&[], Some(scales), Some(ints)),
            Op::Match { parts } => (&parts[..], None, None),
            Op::Sparse { gaps, values, .. } => (&[], Some(gaps), Some(values)),
            Op::Partition { classes, parts, .. } => (parts, Some(classes), None),
            Op::Mirror { head, diffs, .. } => (&[], Some(head), Some(diffs)),
        };
        slice.iter().chain(first).chain(second)
    }
}

/// A readable one-line form, e.g. `merge[bf16](lit:huffman 8[4096], lit:raw 8[4096])`.
/// `literal_name` names a literal's codec.
pub fn describe<L>(p: &Program<L>, literal_name: &dyn Fn(&L) -> String) -> String {
    let t = p.ty;
    let inner = |q: &Program<L>| describe(q, literal_name);
    let list = |qs: &[Program<L>]| qs.iter().map(inner).collect::<Vec<_>>().join(", ");
    match &p.op {
        Op::Lit(l) => format!("lit:{} {}[{}]", literal_name(l), t.width, t.len),
        Op::Const(w) => format!("const {w:#x} {}[{}]", t.width, t.len),
        Op::Concat(parts) => format!("concat({})", list(parts)),
        Op::Repeat { times, body } => format!("repeat {times}x({})", inner(body)),
        Op::Map { op, body } => format!("map {op}({})", inner(body)),
        Op::Scan { op, init, updates } => format!("scan {op} from {init:#x}({})", inner(updates)),
        Op::ColumnScan { row, updates } => format!("column scan /{row}({})", inner(updates)),
        Op::Merge { fields, parts } => format!("merge[{fields}]({})", list(parts)),
        Op::Palette {
            group,
            values,
            indices,
            ..
        } => format!("palette /{group}({}, {})", inner(values), inner(indices)),
        Op::Scaled {
            group,
            format,
            scales,
            ints,
            ..
        } => format!(
            "scaled[{}] /{group}({}, {})",
            Fields::Float(*format),
            inner(scales),
            inner(ints)
        ),
        Op::Match { parts } => format!("match({})", list(&parts[..])),
        Op::Sparse { fill, gaps, values } => {
            format!("sparse {fill:#x}({}, {})", inner(gaps), inner(values))
        }
        Op::Partition {
            group,
            classes,
            parts,
        } => format!("partition /{group}({}; {})", inner(classes), list(parts)),
        Op::Mirror { at, head, diffs } => format!(
            "mirror /{} last {} from {}({}, {})",
            at.row,
            at.tail,
            at.pivot,
            inner(head),
            inner(diffs)
        ),
    }
}

impl fmt::Display for Program<Literal> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(self, &|l: &Literal| l.codec.name().to_string()))
    }
}
