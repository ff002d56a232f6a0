//! The tensor language: typed programs whose execution yields a stream of words.
//!
//! A program of type `b[n]` yields `n` words of `b` bits (1 <= b <= 32). Types flow
//! top-down: a parent's type fixes its children's types, so the encoding stores only
//! what the parent cannot imply (a Concat's part lengths). See `docs/FORMAT.md`.

#![forbid(unsafe_code)]

mod encoding;
mod exec;
mod ops;
mod scaled;

pub use encoding::{
    decode_program, encode_program, encoded_len, exact_len, EncodedLit, Limits,
    MAX_PALETTE_INDEX_WIDTH,
};
pub use exec::{execute, with_scratch, LiteralSource, Refused};
pub use ops::{Fields, FloatFormat, MapOp, ScanOp};
pub use scaled::{round_to, scaled_word, to_f32, MAX_SCALED_INT_WIDTH, SCALED_FORMATS};

use crate::codec::{self, Codec, Stats};
use std::fmt;
use std::sync::Arc;

/// Widest word the language models.
pub const MAX_WIDTH: u32 = 32;

/// The type `width[len]` of a program's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub width: u32,
    pub len: usize,
}

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
    /// [`scaled_word`]), as a quantized checkpoint stored back in a wide
    /// dtype is.
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
    /// [`run_matches`] for the rules a decoder checks.
    Match { parts: Box<[Program<L>; 4]> },
    /// One word nearly everywhere (format version 5): `fill`, except at the
    /// positions the gaps lead to, which take `values` in order. `gaps` are
    /// `t[c]` words, `t = count_width(n)`: gap `i` is the number of fill
    /// words before exception `i` since the one before it. See
    /// [`place_sparse`] for the rule a decoder checks.
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
    /// smaller apart. See [`gather_partition`] for the rule a decoder checks.
    Partition {
        group: usize,
        classes: Box<Program<L>>,
        parts: Vec<Program<L>>,
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

/// Mask of the low `width` bits.
pub fn mask(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    }
}

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
            Op::Scan { updates, .. } => (&[], Some(updates), None),
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

/// Entries of each table of a Palette whose indices are `index_width` bits.
pub fn palette_table_len(index_width: u32) -> usize {
    1 << index_width
}

/// Words of the `values` of a Palette of `len` words in groups of `group`.
pub fn palette_values_len(len: usize, group: usize, index_width: u32) -> usize {
    len.div_ceil(group) * palette_table_len(index_width)
}

/// Width of the counts a node of `len` words stores (a Match's tokens, a
/// Sparse node's gaps): every count below `len` fits (at least 1 bit).
pub fn count_width(len: usize) -> u32 {
    (usize::BITS - len.saturating_sub(1).leading_zeros()).max(1)
}

/// Copies of at most this many words are made word by word: a call of
/// `memmove` costs more than the copy (copies and literal runs of a few
/// words are most of a Match's tokens, so those calls would take much of
/// its decoding).
const SHORT_COPY: usize = 16;

/// Words a short run or copy moves at once, whatever its length: one
/// fixed-size move with no branch on the length. The words past the run's
/// end are written over by the tokens after it, as a Match's output is made
/// in order and every word of it is made.
const BLOCK: usize = 8;

/// `dst.copy_from_slice(src)`, word by word when short (see [`SHORT_COPY`]).
#[inline(always)]
fn copy_words<T: Copy>(dst: &mut [T], src: &[T]) {
    if dst.len() <= SHORT_COPY {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Moves `BLOCK` words from `src` to `out[o..]`.
#[inline(always)]
fn put_block<T: Copy>(out: &mut [T], o: usize, src: [T; BLOCK]) {
    out[o..o + BLOCK].copy_from_slice(&src);
}

/// The `BLOCK` words at `words[at..]`.
#[inline(always)]
fn block<T: Copy>(words: &[T], at: usize) -> [T; BLOCK] {
    words[at..at + BLOCK].try_into().expect("BLOCK words")
}

/// Runs a Match's tokens into `out` (see [`Op::Match`]): literal runs from
/// `lits`, copies of `lens[i] + 1` words from `dists[i] + 1` words back.
/// Every run and copy is checked against what is already produced and what
/// is left, so hostile tokens are refused, never followed: a copy from
/// before the output's start or past its end, literal runs beyond the
/// literals, literals and copies that do not make exactly `out.len()` words.
/// On a refusal `out` holds words of no meaning. Work is
/// O(out.len() + runs.len()).
pub fn run_matches<T: Copy>(
    out: &mut [T],
    lits: &[T],
    runs: &[u32],
    lens: &[u32],
    dists: &[u32],
) -> Result<(), &'static str> {
    let n = out.len();
    let (mut o, mut p) = (0usize, 0usize);
    for ((&run, &len), &dist) in runs.iter().zip(lens).zip(dists) {
        let run = run as usize;
        if run > lits.len() - p || run > n - o {
            return Err("match literal runs exceed the literals or the output");
        }
        if run <= 1 {
            // Most tokens carry no literal or one. One word is moved either
            // way, with no branch on which: where the run is empty, the copy
            // after it writes over that word.
            if let (Some(d), Some(&s)) = (out.get_mut(o), lits.get(p)) {
                *d = s;
            }
        } else if run <= BLOCK && BLOCK <= lits.len() - p && BLOCK <= n - o {
            put_block(out, o, block(lits, p));
        } else {
            copy_words(&mut out[o..o + run], &lits[p..p + run]);
        }
        o += run;
        p += run;
        let (len, dist) = (len as usize + 1, dist as usize + 1);
        if dist > o {
            return Err("match copy reaches before the output");
        }
        if len > n - o {
            return Err("match copy runs past the output");
        }
        if len == 1 {
            // A copy of one word, the most common, moves one word: a block
            // (read across the blocks the tokens just before stored) decodes
            // slower.
            out[o] = out[o - dist];
        } else if len <= BLOCK && dist >= BLOCK && BLOCK <= n - o {
            // The block read ends before `o`: it holds only words made.
            put_block(out, o, block(out, o - dist));
        } else if dist >= len && len > SHORT_COPY {
            out.copy_within(o - dist..o - dist + len, o);
        } else {
            // Word by word, forwards: an overlapping copy takes words it
            // has just written.
            for j in o..o + len {
                out[j] = out[j - dist];
            }
        }
        o += len;
    }
    if lits.len() - p != n - o {
        return Err("match literals and copies do not make the output");
    }
    out[o..].copy_from_slice(&lits[p..]);
    Ok(())
}

/// Writes a Sparse node's exceptions into `out` (already filled): value `i`
/// goes `gaps[i]` words past the one before it (the first, `gaps[0]` words
/// from the start). A position past the end is refused before anything is
/// written there. Work is O(gaps.len()).
pub fn place_sparse<T: Copy>(
    out: &mut [T],
    gaps: &[u32],
    values: &[T],
) -> Result<(), &'static str> {
    let mut at = 0usize;
    for (&gap, &value) in gaps.iter().zip(values) {
        at += gap as usize;
        let Some(o) = out.get_mut(at) else {
            return Err("sparse exception past the output");
        };
        *o = value;
        at += 1;
    }
    Ok(())
}

/// Classes a Partition has at most: each holds a stream of its own, with
/// its own code tables.
pub const MAX_PARTITION_CLASSES: usize = 16;

/// Puts a Partition's groups into `out` with `put` (a copy, or an or into
/// a Merge's field): group `i` (of `group` words, the last one what is
/// left) is the next words of `parts[classes[i]]`, the parts lying end to
/// end in `words` with the given lengths. A class without a part, or one
/// whose groups take more words than its part holds, is refused before
/// anything is read past the part. As the lengths sum to `out.len()`, every
/// part is then used up exactly. Work is O(out.len() + classes.len()).
pub fn gather_partition<T, F>(
    out: &mut [T],
    group: usize,
    classes: &[u32],
    (words, lens): (&[F], &[usize]),
    mut put: impl FnMut(&mut [T], &[F]),
) -> Result<(), &'static str> {
    let mut next = [0usize; MAX_PARTITION_CLASSES];
    let mut end = [0usize; MAX_PARTITION_CLASSES];
    let mut at = 0;
    for (c, &len) in lens.iter().enumerate() {
        next[c] = at;
        at += len;
        end[c] = at;
    }
    for (rows, &class) in out.chunks_mut(group).zip(classes) {
        let c = class as usize;
        if c >= lens.len() {
            return Err("partition class without a part");
        }
        if rows.len() > end[c] - next[c] {
            return Err("partition class longer than its part");
        }
        put(rows, &words[next[c]..next[c] + rows.len()]);
        next[c] += rows.len();
    }
    Ok(())
}

/// Where a Mirror's rows take their mirrored words from: rows of `row`
/// words whose last `tail` words, at column `c`, mirror column `pivot - c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mirroring {
    pub row: usize,
    pub tail: usize,
    pub pivot: usize,
}

impl Mirroring {
    /// Whether a Mirror of `len` words may mirror so: the rows are whole
    /// (`len` a multiple of `row`), each keeps at least as many words as it
    /// mirrors, and every mirrored word reads a kept one (`row - 1 <= pivot
    /// <= 2 * (row - tail) - 1`).
    pub fn fits(self, len: usize) -> bool {
        let Mirroring { row, tail, pivot } = self;
        row >= 2
            && len.is_multiple_of(row)
            && (1..=row / 2).contains(&tail)
            && pivot >= row - 1
            && pivot < 2 * (row - tail)
    }

    /// The words each row keeps: its head's.
    pub fn kept(self) -> usize {
        self.row - self.tail
    }
}

/// Makes a Mirror's rows in `out` (see [`Op::Mirror`]), whose first
/// `out.len() / at.row * at.kept()` words hold the head's words: each
/// row's kept words are moved to its place (the last row first, as every
/// row moves forward), then its last `at.tail` words read their mirror
/// words xor the next of `diffs`. `at` must fit `out` (see
/// [`Mirroring::fits`]) and `diffs` hold `at.tail` words a row, which the
/// program's types guarantee. Work is O(out.len()).
pub fn mirror_rows<T: codec::Word>(out: &mut [T], at: Mirroring, diffs: &[T]) {
    let kept = at.kept();
    let rows = out.len() / at.row;
    for r in (1..rows).rev() {
        out.copy_within(r * kept..(r + 1) * kept, r * at.row);
    }
    for (words, diffs) in out
        .chunks_exact_mut(at.row)
        .zip(diffs.chunks_exact(at.tail))
    {
        let (head, mirrored) = words.split_at_mut(kept);
        for (c, (w, &d)) in (kept..).zip(mirrored.iter_mut().zip(diffs)) {
            *w = T::from_u32(head[at.pivot - c].to_u32() ^ d.to_u32());
        }
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
