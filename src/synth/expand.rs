//! Target-directed expansions: each picks an operator and derives, from the
//! target, the exact streams its children must yield, under the contract that
//! children yielding those streams make the parent yield the target.

use super::production::Production;
use super::Hint;
use crate::dsl::{
    mask, scaled_word, to_f32, Fields, FloatFormat, Literal, MapOp, Op, Program, ScanOp, Type,
    MAX_PALETTE_INDEX_WIDTH, SCALED_FORMATS,
};
use std::sync::Arc;

/// An operator applied at a hole, with the streams its children must yield.
#[derive(Clone, Debug)]
pub struct Expansion {
    pub shape: Shape,
    pub children: Vec<(Type, Arc<[u32]>)>,
}

/// An operator with the parameters derived from a target (children not yet built).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Parts end at these offsets (the last is the stream's length).
    Concat(Arc<[usize]>),
    Repeat {
        times: usize,
    },
    Map(MapOp),
    Scan {
        op: ScanOp,
        init: u32,
    },
    Merge(Fields),
    /// Tables of at most `2^index_width` words per group of `group` words.
    Palette {
        group: usize,
        index_width: u32,
    },
    /// Floats of `format` made from a scale per group of `group` words and
    /// integers of `int_width` bits.
    Scaled {
        group: usize,
        format: FloatFormat,
        int_width: u32,
    },
}

/// Longest period a Repeat looks for.
const MAX_PERIOD: usize = 1 << 16;
/// Most parts a Concat splits a stream into.
const MAX_CONCAT_PARTS: usize = 16;

impl Shape {
    pub fn production(&self) -> Production {
        match self {
            Shape::Concat(_) => Production::Concat,
            Shape::Repeat { .. } => Production::Repeat,
            Shape::Map(op) => Production::of_map(*op),
            Shape::Scan { op, .. } => Production::of_scan(*op),
            Shape::Merge(fields) => Production::of_fields(*fields),
            Shape::Palette { .. } => Production::Palette,
            Shape::Scaled { .. } => Production::Scaled,
        }
    }

    /// How many children the node has at `width`.
    pub fn arity(&self, width: u32) -> usize {
        match self {
            Shape::Concat(ends) => ends.len(),
            Shape::Merge(fields) => fields.widths(width).len(),
            Shape::Palette { .. } | Shape::Scaled { .. } => 2,
            _ => 1,
        }
    }

    /// The streams the children must yield for the node to yield `t`.
    /// Panics where [`Self::try_children`] finds none: callers pass shapes
    /// derived from `t`.
    pub fn children(&self, t: &[u32], width: u32) -> Vec<(Type, Arc<[u32]>)> {
        self.try_children(t, width)
            .expect("a shape proposed for a stream yields it")
    }

    /// The streams the children must yield for the node to yield `t`, if it
    /// can: a Palette or Scaled shape may not hold every group of `t` (shapes
    /// propose them from a first group; a re-fit tries another chunk).
    pub fn try_children(&self, t: &[u32], width: u32) -> Option<Vec<(Type, Arc<[u32]>)>> {
        Some(match self {
            Shape::Concat(ends) => {
                let mut start = 0;
                (ends.iter())
                    .map(|&end| {
                        let part = child(width, t[start..end].into());
                        start = end;
                        part
                    })
                    .collect()
            }
            Shape::Repeat { times } => vec![child(width, t[..t.len() / times].into())],
            Shape::Map(op) => vec![child(
                width,
                t.iter().map(|&y| op.invert(y, width)).collect(),
            )],
            Shape::Scan { op, init } => {
                let mut prev = *init;
                let updates = t
                    .iter()
                    .map(|&x| {
                        let d = op.delta(prev, x, width);
                        prev = x;
                        d
                    })
                    .collect();
                vec![child(width, updates)]
            }
            Shape::Merge(fields) => (fields.widths(width).into_iter())
                .zip(fields.shifts(width))
                .map(|(w, shift)| child(w, t.iter().map(|x| (x >> shift) & mask(w)).collect()))
                .collect(),
            Shape::Palette { group, index_width } => {
                let (values, indices) = palette_streams(t, *group, *index_width)?;
                vec![
                    child(width, values.into()),
                    child(*index_width, indices.into()),
                ]
            }
            Shape::Scaled {
                group,
                format,
                int_width,
            } => {
                let (scales, ints) = scaled_streams(t, *group, *format, *int_width)?;
                vec![child(32, scales.into()), child(*int_width, ints.into())]
            }
        })
    }

    /// The node with these parameters over already-built children.
    pub fn build<L>(&self, ty: Type, mut kids: Vec<Program<L>>) -> Program<L> {
        let mut one = || Box::new(kids.pop().expect("one child"));
        let op = match self {
            Shape::Concat(_) => Op::Concat(kids),
            Shape::Repeat { times } => Op::Repeat {
                times: *times,
                body: one(),
            },
            Shape::Map(op) => Op::Map {
                op: *op,
                body: one(),
            },
            Shape::Scan { op, init } => Op::Scan {
                op: *op,
                init: *init,
                updates: one(),
            },
            Shape::Merge(fields) => Op::Merge {
                fields: *fields,
                parts: kids,
            },
            Shape::Palette { group, index_width } => {
                let indices = Box::new(kids.pop().expect("two children"));
                Op::Palette {
                    group: *group,
                    index_width: *index_width,
                    values: Box::new(kids.pop().expect("two children")),
                    indices,
                }
            }
            Shape::Scaled {
                group,
                format,
                int_width,
            } => {
                let ints = Box::new(kids.pop().expect("two children"));
                Op::Scaled {
                    group: *group,
                    format: *format,
                    int_width: *int_width,
                    scales: Box::new(kids.pop().expect("two children")),
                    ints,
                }
            }
        };
        Program { ty, op }
    }
}

impl Expansion {
    /// Builds the program with each child completed by `complete(stream, width)`.
    pub fn complete_with(
        &self,
        mut complete: impl FnMut(Arc<[u32]>, u32) -> Program<Literal>,
    ) -> Program<Literal> {
        let kids: Vec<_> = (self.children.iter())
            .map(|(ty, s)| complete(s.clone(), ty.width))
            .collect();
        let len = match self.shape {
            Shape::Concat(_) => self.children.iter().map(|(t, _)| t.len).sum(),
            Shape::Repeat { times } => self.children[0].0.len * times,
            // One index or integer per word (the first child is per group).
            Shape::Palette { .. } | Shape::Scaled { .. } => self.children[1].0.len,
            _ => self.children[0].0.len,
        };
        let width = match self.shape {
            Shape::Merge(_) => self.children.iter().map(|(t, _)| t.width).sum(),
            Shape::Scaled { format, .. } => format.width(),
            _ => self.children[0].0.width,
        };
        self.shape.build(Type { width, len }, kids)
    }
}

/// Narrowest words a Palette is tried for (16-bit floats and integers).
const PALETTE_MIN_WIDTH: u32 = 16;

/// Group lengths a Palette is tried at.
const PALETTE_GROUPS: [usize; 5] = [16, 32, 64, 128, 256];

/// Palette shapes that fit `t`: for each group length, the narrowest index
/// that holds every group's distinct words, where the tables take at most
/// half the words and the stream has [`PALETTE_SPREAD`] times as many
/// distinct words as a table (else they would not pay for themselves). A group's first
/// words decide cheaply for most streams, which have too many distinct words.
fn palettes(t: &[u32], width: u32) -> Vec<Shape> {
    let mut out = Vec::new();
    // Narrower words have alphabets a literal's table codes well.
    if width < PALETTE_MIN_WIDTH {
        return out;
    }
    for group in PALETTE_GROUPS.into_iter().filter(|&g| 2 * g <= t.len()) {
        let most = (group / 2).min(1 << MAX_PALETTE_INDEX_WIDTH);
        let fits = |words: &[u32]| distinct_at_most(words, most);
        let Some(first) = fits(&t[..group]) else {
            continue;
        };
        let Some(distinct) =
            (t.chunks(group).skip(1)).try_fold(first, |d, g| Some(d.max(fits(g)?)))
        else {
            continue;
        };
        let index_width = usize::BITS - (distinct.max(2) - 1).leading_zeros();
        let table = 1 << index_width;
        if index_width < width && table <= group / 2 && has_distinct(t, PALETTE_SPREAD * table) {
            out.push(Shape::Palette { group, index_width });
        }
    }
    out
}

/// A Palette pays where the whole stream has many more distinct words than
/// each group (a literal codes a small alphabet as well): at least this many
/// times its tables' length.
const PALETTE_SPREAD: usize = 4;

/// Whether `words` has more than `most` distinct words.
fn has_distinct(words: &[u32], most: usize) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(most + 1);
    words.iter().any(|w| {
        seen.insert(*w);
        seen.len() > most
    })
}

/// The number of distinct words of `words`, if at most `most`.
fn distinct_at_most(words: &[u32], most: usize) -> Option<usize> {
    let mut sorted = words.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() <= most).then_some(sorted.len())
}

/// A Palette's children for `t`: each group's distinct words in increasing
/// order, padded to `2^index_width` by repeating the largest (values), and
/// each word's place in its group's table (indices); None if a group has
/// more distinct words than a table holds.
pub fn palette_streams(t: &[u32], group: usize, index_width: u32) -> Option<(Vec<u32>, Vec<u32>)> {
    let table = crate::dsl::palette_table_len(index_width);
    let mut values =
        Vec::with_capacity(crate::dsl::palette_values_len(t.len(), group, index_width));
    let mut indices = Vec::with_capacity(t.len());
    for words in t.chunks(group) {
        let start = values.len();
        values.extend_from_slice(words);
        values[start..].sort_unstable();
        let mut kept = start;
        for i in start..values.len() {
            if i == start || values[i] != values[kept - 1] {
                values[kept] = values[i];
                kept += 1;
            }
        }
        if kept - start > table {
            return None;
        }
        values.truncate(kept);
        let tab = &values[start..];
        indices.extend(words.iter().map(|w| tab.partition_point(|v| v < w) as u32));
        let last = values[kept - 1];
        values.resize(start + table, last);
    }
    Some((values, indices))
}

/// Group lengths a Scaled node is tried at, largest first: those of common
/// quantizers.
const SCALED_GROUPS: [usize; 4] = [256, 128, 64, 32];

/// Largest integer magnitude the search looks for (8-bit quantization).
const SCALED_MAX_INT: u32 = 127;

/// Width of the integers of the Scaled nodes the packer makes: magnitudes up
/// to [`SCALED_MAX_INT`] and a sign. A wider field costs nothing: literals code
/// the integers' values, not their width.
const SCALED_INT_WIDTH: u32 = 8;

/// Groups a Scaled shape is checked on before it is proposed: enough to see
/// a group length that straddles rows of a per-row quantizer.
const SCALED_PROBE_GROUPS: usize = 4;

/// The Scaled shape with the longest group whose first few groups are each a
/// scale times small integers (the first group decides cheaply for most
/// streams, whose words are not); whether every group is, deriving the
/// children finds out.
fn scaled(t: &[u32], width: u32, hint: Hint) -> Option<Shape> {
    let format = hint
        .float
        .filter(|f| SCALED_FORMATS.contains(f) && f.width() == width)?;
    let group = SCALED_GROUPS
        .into_iter()
        .filter(|&g| 2 * g <= t.len())
        .find(|&g| {
            (t.chunks(g).take(SCALED_PROBE_GROUPS))
                .all(|words| group_scale(words, format).is_some())
        })?;
    Some(Shape::Scaled {
        group,
        format,
        int_width: SCALED_INT_WIDTH,
    })
}

/// A scale and integers (magnitude and sign, as [`scaled_word`] reads them)
/// whose products, rounded to `format`, are `words`, with magnitudes of at
/// most [`SCALED_MAX_INT`]. From each of a few rough guesses of the scale
/// (the smallest magnitude over 1 to 4, the largest over the top level of
/// common quantizers), [`fit`] finds the integers and the interval of scales
/// that round every product to its word, from which a few scales are tried.
/// This finds scales kept in the checkpoint's dtype and wider ones alike (a
/// quantizer that computes in binary32 and stores BF16).
fn group_scale(words: &[u32], format: FloatFormat) -> Option<(f32, Vec<u32>)> {
    let sign = 1u32 << (format.width() - 1);
    let magnitudes: Vec<f32> = words.iter().map(|&w| to_f32(format, w & !sign)).collect();
    let signs = || words.iter().map(move |&w| (w & sign != 0) as u32);
    let mut order: Vec<usize> = (0..words.len()).filter(|&i| magnitudes[i] > 0.0).collect();
    order.sort_by(|&a, &b| magnitudes[a].total_cmp(&magnitudes[b]));
    let (Some(&first), Some(&last)) = (order.first(), order.last()) else {
        // Signed zeros only: any scale times 0.
        return Some((1.0, signs().collect()));
    };
    let (smallest, largest) = (magnitudes[first], magnitudes[last]);
    let divided = [1.0, 2.0, 3.0, 4.0].map(|d| smallest / d);
    let tops = [7.0, 8.0, 15.0, 16.0, 127.0, 128.0].map(|q| largest / q);
    divided.into_iter().chain(tops).find_map(|guess| {
        let (qs, interval) = fit(words, &magnitudes, &order, guess, format)?;
        let ints: Vec<u32> = (qs.iter().zip(signs())).map(|(q, s)| q << 1 | s).collect();
        let scale = scales_within(interval).find(|scale| {
            (ints.iter().zip(words)).all(|(&q, &w)| scaled_word(format, scale.to_bits(), q) == w)
        })?;
        Some((scale, ints))
    })
}

/// How far from a guess the scale may be: more than the rounding of the word
/// a guess is made from.
const GUESS_SLACK: f64 = 1.0 / 64.0;

/// The integer magnitude of each word near `guess` and the interval of
/// scales that round each integer's product to its word. Words are taken
/// from the smallest: the small integers, which a rough scale cannot get
/// wrong, narrow the interval before the large ones, which a scale off by
/// the rounding of a word could round to a neighbour, are chosen (the one
/// whose word's interval still meets it). None if a word has no such
/// integer of at most [`SCALED_MAX_INT`].
fn fit(
    words: &[u32],
    magnitudes: &[f32],
    order: &[usize],
    guess: f32,
    format: FloatFormat,
) -> Option<(Vec<u32>, (f64, f64))> {
    if !guess.is_normal() {
        return None;
    }
    let guess = guess as f64;
    let (mut low, mut high) = (guess * (1.0 - GUESS_SLACK), guess * (1.0 + GUESS_SLACK));
    let mut qs = vec![0u32; words.len()];
    for &i in order {
        let (below, above) = rounding_interval(words[i], format);
        let near = (magnitudes[i] as f64 / ((low + high) / 2.0)).round();
        let q = [near, near - 1.0, near + 1.0].into_iter().find(|&q| {
            (1.0..=SCALED_MAX_INT as f64).contains(&q) && below / q <= high && above / q >= low
        })?;
        low = low.max(below / q);
        high = high.min(above / q);
        qs[i] = q as u32;
    }
    Some((qs, (low, high)))
}

/// The magnitudes that round to the magnitude of `word` in `format`,
/// widened by [`INTERVAL_SLACK`] so that a product exactly on a bound (a tie
/// rounded to even) stays in.
fn rounding_interval(word: u32, format: FloatFormat) -> (f64, f64) {
    let m = word & !(1u32 << (format.width() - 1));
    let value = to_f32(format, m) as f64;
    let below = to_f32(format, m - 1) as f64;
    let above = to_f32(format, m + 1) as f64;
    let above = if above.is_finite() {
        above
    } else {
        2.0 * value - below
    };
    (
        (value + below) / 2.0 * (1.0 - INTERVAL_SLACK),
        (value + above) / 2.0 * (1.0 + INTERVAL_SLACK),
    )
}

/// Relative slack of each bound of [`rounding_interval`]; the scales tried
/// are checked exactly, so a wider interval only costs a failed try.
const INTERVAL_SLACK: f64 = 1e-9;

/// Scales in `[low, high]` to try, fewest mantissa bits first (as a
/// quantizer's BF16 or F16 scale has, so that the scales code small), then
/// the middle.
fn scales_within((low, high): (f64, f64)) -> impl Iterator<Item = f32> {
    let middle = ((low + high) / 2.0) as f32;
    let short = [7, 10, 16].into_iter().filter_map(move |kept| {
        let drop = 23 - kept;
        let bits = (middle.to_bits() + (1 << (drop - 1))) & !((1 << drop) - 1);
        let scale = f32::from_bits(bits);
        (low <= scale as f64 && scale as f64 <= high).then_some(scale)
    });
    short.chain(std::iter::once(middle))
}

/// A Scaled node's children for `t`: one scale per group of `group` words
/// and each word's integer (in `int_width` bits); None if a group has no
/// scale (of those [`group_scale`] guesses) or needs wider integers.
pub fn scaled_streams(
    t: &[u32],
    group: usize,
    format: FloatFormat,
    int_width: u32,
) -> Option<(Vec<u32>, Vec<u32>)> {
    let mut scales = Vec::with_capacity(t.len().div_ceil(group));
    let mut ints = Vec::with_capacity(t.len());
    for words in t.chunks(group) {
        let (scale, qs) = group_scale(words, format)?;
        if qs.iter().any(|&q| q > mask(int_width)) {
            return None;
        }
        scales.push(scale.to_bits());
        ints.extend(qs);
    }
    Some((scales, ints))
}

/// Every canonical shape for a hole whose target is `t` (of `width`-bit words)
/// under a parent made by `parent`, with parameters derived from `t`, among the
/// productions `allowed` accepts (the others are not even scanned for). A uniform
/// stream has none: Const is final. Only cheap scans of `t` happen here; child
/// streams are derived by [`Shape::children`] when a search needs them.
pub fn shapes(
    t: &[u32],
    width: u32,
    hint: Hint,
    parent: Option<Production>,
    allowed: &dyn Fn(Production) -> bool,
) -> Vec<Shape> {
    if t.iter().all(|&w| w == t[0]) {
        return Vec::new();
    }
    // Not canonical: a Concat in a Concat, a Repeat in a Repeat, a Map in a Map
    // of the same kind.
    let repeats_parent = |p: Production| {
        parent == Some(p)
            && (matches!(
                p,
                Production::Concat | Production::Repeat | Production::Palette
            ) || p.is_map())
    };
    let wanted = |p: Production| allowed(p) && !repeats_parent(p);
    // Most often useful first: searches that cannot rank shapes before deriving
    // their children take them in this order.
    let mut out = Vec::new();
    if wanted(Production::Concat) {
        out.extend(concat_ends(t).map(|ends| Shape::Concat(ends.into())));
    }
    if wanted(Production::Repeat) {
        out.extend(period(t).map(|p| Shape::Repeat { times: t.len() / p }));
    }
    if wanted(Production::Palette) {
        out.extend(palettes(t, width));
    }
    if wanted(Production::Scaled) {
        out.extend(scaled(t, width, hint));
    }
    out.extend(
        merge_fields(width, hint.float)
            .into_iter()
            .map(Shape::Merge),
    );
    out.extend([ScanOp::Add, ScanOp::Xor].map(|op| Shape::Scan { op, init: t[0] }));
    if Production::ALL.into_iter().any(|p| p.is_map() && wanted(p)) {
        out.extend(map_ops(t, width).into_iter().map(Shape::Map));
    }
    out.retain(|s| wanted(s.production()));
    out
}

/// Every canonical expansion of a hole that yields it, with its children's
/// streams.
pub fn expansions(
    t: &Arc<[u32]>,
    width: u32,
    hint: Hint,
    parent: Option<Production>,
) -> Vec<Expansion> {
    shapes(t, width, hint, parent, &|_| true)
        .into_iter()
        .filter_map(|shape| {
            let children = shape.try_children(t, width)?;
            Some(Expansion { children, shape })
        })
        .collect()
}

fn child(width: u32, words: Arc<[u32]>) -> (Type, Arc<[u32]>) {
    let len = words.len();
    (Type { width, len }, words)
}

/// Ends of Concat parts at boundaries where the stream's character changes: the
/// edges of long runs of one word (zero padding, constant regions) and the edges of
/// blocks whose magnitude (bit length of the largest word) shifts.
fn concat_ends(t: &[u32]) -> Option<Vec<usize>> {
    let mut cuts = run_edges(t);
    if cuts.is_empty() {
        cuts = magnitude_edges(t);
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.retain(|&c| c > 0 && c < t.len());
    if cuts.is_empty() {
        return None;
    }
    if cuts.len() >= MAX_CONCAT_PARTS {
        // Keep evenly spread cuts; the search can split parts further.
        let step = cuts.len().div_ceil(MAX_CONCAT_PARTS - 1);
        cuts = cuts.into_iter().step_by(step).collect();
    }
    cuts.push(t.len());
    Some(cuts)
}

/// Start and end of every run of one word at least max(16, n/32) long.
///
/// A run of at least `2h` words holds two words `h` apart at some multiple of `h`,
/// so only those pairs are compared; a hit is grown to its maximal run. On data
/// without long runs this reads one word in `h`.
fn run_edges(t: &[u32]) -> Vec<usize> {
    let min_run = (t.len() / 32).max(16);
    let h = min_run / 2;
    let mut edges = Vec::new();
    let (mut j, mut covered) = (0, 0);
    while j + h < t.len() {
        if j >= covered && t[j] == t[j + h] {
            let v = t[j];
            let mut start = j;
            while start > 0 && t[start - 1] == v {
                start -= 1;
            }
            let mut end = j + 1;
            while end < t.len() && t[end] == v {
                end += 1;
            }
            if end - start >= min_run {
                edges.extend([start, end]);
            }
            covered = end;
        }
        j += h;
    }
    edges
}

/// Edges between blocks (n/16 words, at least 64) whose largest words differ in
/// bit length by at least 2.
fn magnitude_edges(t: &[u32]) -> Vec<usize> {
    let block = (t.len() / 16).max(64);
    let bits: Vec<u32> = t
        .chunks(block)
        .map(|c| 32 - c.iter().max().copied().unwrap_or(0).leading_zeros())
        .collect();
    (1..bits.len())
        .filter(|&i| bits[i].abs_diff(bits[i - 1]) >= 2)
        .map(|i| i * block)
        .collect()
}

/// The shortest exact period that divides the length (longer periods would be
/// Repeats of Repeats, which are not canonical).
fn period(t: &[u32]) -> Option<usize> {
    let n = t.len();
    divisors(n)
        .into_iter()
        .filter(|&p| p <= (n / 2).min(MAX_PERIOD))
        .find(|&p| t[p..] == t[..n - p])
}

/// The divisors of `n` in increasing order, in O(sqrt n).
fn divisors(n: usize) -> Vec<usize> {
    let (mut low, mut high) = (Vec::new(), Vec::new());
    let mut d = 1;
    while d * d <= n {
        if n.is_multiple_of(d) {
            low.push(d);
            if d * d != n {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

/// Maps worth trying, with constants taken from the target: xor with the most
/// frequent word (it becomes zero), add that brings the smallest word to zero,
/// zigzag (small signed values), gray, rotations (sign bit to the bottom, halves
/// swapped, top bit to the bottom) and bit reversal.
fn map_ops(t: &[u32], width: u32) -> Vec<MapOp> {
    let min = *t.iter().min().expect("non-empty");
    let mut ops = vec![
        MapOp::Xor(most_frequent(t)),
        MapOp::Add(min),
        MapOp::Zigzag,
        MapOp::Gray,
        MapOp::Rotate(1),
        MapOp::Rotate(width / 2),
        MapOp::Rotate(width.saturating_sub(1)),
        MapOp::BitReverse,
    ];
    ops.dedup();
    ops.retain(|op| op.is_valid(width));
    ops
}

/// The most frequent word among the first 4096 (ties: the smallest word).
fn most_frequent(t: &[u32]) -> u32 {
    let mut sample: Vec<u32> = t.iter().take(4096).copied().collect();
    sample.sort_unstable();
    let mut best = (0usize, sample[0]);
    for run in sample.chunk_by(|a, b| a == b) {
        if run.len() > best.0 {
            best = (run.len(), run[0]);
        }
    }
    best.1
}

/// The Merge layouts worth trying at `width`: the tensor's float format (or bf16
/// for the high half of an f32), byte planes, splits at byte and nibble
/// boundaries that differ from byte planes, and bit planes for narrow words.
fn merge_fields(width: u32, float: Option<FloatFormat>) -> Vec<Fields> {
    let mut out = Vec::new();
    let upcast_half = (float == Some(FloatFormat::F32)).then_some(FloatFormat::Bf16);
    out.extend(
        [float, upcast_half]
            .into_iter()
            .flatten()
            .filter(|f| f.width() == width)
            .map(Fields::Float),
    );
    out.push(Fields::BytePlanes);
    out.extend(
        [8, 16, 24, 4]
            .into_iter()
            .filter(|&low| !(width == 16 && low == 8))
            .map(|low| Fields::Split { low }),
    );
    if width <= 8 {
        out.push(Fields::BitPlanes);
    }
    out.retain(|f| f.is_valid(width));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every maximal run of at least `min_run` words, by a plain scan.
    fn runs_by_scan(t: &[u32]) -> Vec<usize> {
        let min_run = (t.len() / 32).max(16);
        let mut edges = Vec::new();
        let mut start = 0;
        for run in t.chunk_by(|a, b| a == b) {
            if run.len() >= min_run {
                edges.extend([start, start + run.len()]);
            }
            start += run.len();
        }
        edges
    }

    proptest::proptest! {
        #[test]
        fn run_edges_finds_every_long_run(
            runs in proptest::collection::vec((0u32..3, 1usize..60), 1..40),
        ) {
            let t: Vec<u32> = runs.iter().flat_map(|&(v, n)| std::iter::repeat_n(v, n)).collect();
            proptest::prop_assert_eq!(run_edges(&t), runs_by_scan(&t));
        }
    }
}
