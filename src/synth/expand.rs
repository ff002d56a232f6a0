//! Target-directed expansions: each picks an operator and derives, from the
//! target, the exact streams its children must yield, under the contract that
//! children yielding those streams make the parent yield the target.

use super::palette::{palette_streams, palettes};
use super::production::Production;
use super::scaled::{scaled, scaled_streams};
use super::stream::{is_constant, Hint};
use crate::codec::order0_bits;
use crate::dsl::{mask, Collect, Fields, FloatFormat, Literal, MapOp, Op, Program, ScanOp, Type};
use std::sync::Arc;

/// An operator applied at a hole, with the streams its children must yield.
#[derive(Clone, Debug)]
pub struct Expansion {
    pub operator: Operator,
    pub children: Vec<(Type, Arc<[u32]>)>,
}

/// An operator with the parameters derived from a target (children not yet built).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operator {
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

impl Operator {
    /// The production the prior counts for this operator.
    pub fn production(&self) -> Production {
        match self {
            Operator::Concat(_) => Production::Concat,
            Operator::Repeat { .. } => Production::Repeat,
            Operator::Map(op) => Production::of_map(*op),
            Operator::Scan { op, .. } => Production::of_scan(*op),
            Operator::Merge(fields) => Production::of_fields(*fields),
            Operator::Palette { .. } => Production::Palette,
            Operator::Scaled { .. } => Production::Scaled,
        }
    }

    /// How many children the node has at `width`.
    pub fn arity(&self, width: u32) -> usize {
        match self {
            Operator::Concat(ends) => ends.len(),
            Operator::Merge(fields) => fields.widths(width).len(),
            Operator::Palette { .. } | Operator::Scaled { .. } => 2,
            _ => 1,
        }
    }

    /// The streams the children must yield for the node to yield `t`.
    /// Panics where [`Self::try_children`] finds none: callers pass operators
    /// derived from `t`.
    pub fn children(&self, t: &[u32], width: u32) -> Vec<(Type, Arc<[u32]>)> {
        self.try_children(t, width)
            .expect("an operator proposed for a stream yields it")
    }

    /// The streams the children must yield for the node to yield `t`, if it
    /// can: a Palette or Scaled operator may not hold every group of `t` (operators
    /// propose them from a first group; a re-fit tries another chunk).
    pub fn try_children(&self, t: &[u32], width: u32) -> Option<Vec<(Type, Arc<[u32]>)>> {
        Some(match self {
            Operator::Concat(ends) => {
                let mut start = 0;
                (ends.iter())
                    .map(|&end| {
                        let part = child(width, t[start..end].into());
                        start = end;
                        part
                    })
                    .collect()
            }
            Operator::Repeat { times } => vec![child(width, t[..t.len() / times].into())],
            Operator::Map(op) => vec![child(width, op.fold_inverse(t, width, Collect))],
            Operator::Scan { op, init } => {
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
            Operator::Merge(fields) => (fields.widths(width).into_iter())
                .zip(fields.shifts(width))
                .map(|(w, shift)| child(w, field(t, shift, w)))
                .collect(),
            Operator::Palette { group, index_width } => {
                let (values, indices) = palette_streams(t, *group, *index_width)?;
                vec![
                    child(width, values.into()),
                    child(*index_width, indices.into()),
                ]
            }
            Operator::Scaled {
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
            Operator::Concat(_) => Op::Concat(kids),
            Operator::Repeat { times } => Op::Repeat {
                times: *times,
                body: one(),
            },
            Operator::Map(op) => Op::Map {
                op: *op,
                body: one(),
            },
            Operator::Scan { op, init } => Op::Scan {
                op: *op,
                init: *init,
                updates: one(),
            },
            Operator::Merge(fields) => Op::Merge {
                fields: *fields,
                parts: kids,
            },
            Operator::Palette { group, index_width } => {
                let indices = Box::new(kids.pop().expect("two children"));
                Op::Palette {
                    group: *group,
                    index_width: *index_width,
                    values: Box::new(kids.pop().expect("two children")),
                    indices,
                }
            }
            Operator::Scaled {
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
        let len = match self.operator {
            Operator::Concat(_) => self.children.iter().map(|(t, _)| t.len).sum(),
            Operator::Repeat { times } => self.children[0].0.len * times,
            // One index or integer per word (the first child is per group).
            Operator::Palette { .. } | Operator::Scaled { .. } => self.children[1].0.len,
            _ => self.children[0].0.len,
        };
        let width = match self.operator {
            Operator::Merge(_) => self.children.iter().map(|(t, _)| t.width).sum(),
            Operator::Scaled { format, .. } => format.width(),
            _ => self.children[0].0.width,
        };
        self.operator.build(Type { width, len }, kids)
    }
}

/// Every canonical operator for a hole whose target is `t` (of `width`-bit words)
/// under a parent made by `parent`, with parameters derived from `t`, among the
/// productions `allowed` accepts (the others are not even scanned for). A uniform
/// stream has none: Const is final. Only cheap scans of `t` happen here; child
/// streams are derived by [`Operator::children`] when a search needs them.
pub fn operators(
    t: &[u32],
    width: u32,
    hint: Hint,
    parent: Option<Production>,
    allowed: &dyn Fn(Production) -> bool,
) -> Vec<Operator> {
    if is_constant(t) {
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
    // Most often useful first: searches that cannot rank operators before deriving
    // their children take them in this order.
    let mut out = Vec::new();
    if wanted(Production::Concat) {
        out.extend(concat_ends(t).map(|ends| Operator::Concat(ends.into())));
    }
    if wanted(Production::Repeat) {
        out.extend(period(t).map(|p| Operator::Repeat { times: t.len() / p }));
    }
    if wanted(Production::Palette) {
        out.extend(
            (palettes(t, width).into_iter())
                .map(|(group, index_width)| Operator::Palette { group, index_width }),
        );
    }
    if wanted(Production::Scaled) {
        out.extend(
            scaled(t, width, hint).map(|(group, format, int_width)| Operator::Scaled {
                group,
                format,
                int_width,
            }),
        );
    }
    out.extend(
        (merge_fields(width, hint.float).into_iter())
            .chain(float_head(t, width, hint.float))
            .map(Operator::Merge),
    );
    out.extend([ScanOp::Add, ScanOp::Xor].map(|op| Operator::Scan { op, init: t[0] }));
    if Production::ALL.into_iter().any(|p| p.is_map() && wanted(p)) {
        out.extend(map_ops(t, width).into_iter().map(Operator::Map));
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
    operators(t, width, hint, parent, &|_| true)
        .into_iter()
        .filter_map(|operator| {
            let children = operator.try_children(t, width)?;
            Some(Expansion { children, operator })
        })
        .collect()
}

/// The `width`-bit field at bit `shift` of each of `words`: a Merge's child.
pub(super) fn field(words: &[u32], shift: u32, width: u32) -> Arc<[u32]> {
    words.iter().map(|x| (x >> shift) & mask(width)).collect()
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

/// Words of a stream that [`float_head`] chooses on.
const HEAD_SAMPLE: usize = 16384;
/// Most mantissa bits a float head takes.
const HEAD_MANTISSA: u32 = 4;
/// Bits of code table per distinct word, in [`float_head`]'s estimate.
const HEAD_TABLE_BITS: f64 = 12.0;

/// For 32-bit floats, a split that keeps the sign, exponent and top
/// mantissa bits together as one field, beside the layouts of
/// [`merge_fields`]. The top bits of a mantissa are not uniform (a binade's
/// values crowd toward one end in a bell-shaped distribution of weights),
/// and how they are spread depends on the exponent, which one field of
/// both lets a code table follow. It takes the number of mantissa bits (up to
/// [`HEAD_MANTISSA`]) whose head codes the stream smallest order-0 (from
/// its first words), its table counted; none where no mantissa bit pays for
/// its table. 16-bit floats get none: the search already splits off their
/// sign, exponent and 3 mantissa bits (a split at 4), so an extra candidate
/// would only take part of the search's budget.
fn float_head(t: &[u32], width: u32, float: Option<FloatFormat>) -> Option<Fields> {
    if float != Some(FloatFormat::F32) || width != 32 {
        return None;
    }
    let mantissa = FloatFormat::F32.widths()[2];
    let sample = &t[..t.len().min(HEAD_SAMPLE)];
    let cost = |bits: u32| {
        let low = mantissa - bits;
        let mut counts = vec![0u64; 1 << (width - low)];
        sample
            .iter()
            .for_each(|&w| counts[(w >> low) as usize] += 1);
        let distinct = counts.iter().filter(|&&c| c > 0).count();
        let table = distinct as f64 * HEAD_TABLE_BITS;
        let scale = t.len() as f64 / sample.len() as f64;
        order0_bits(counts, sample.len()) * scale + table + (low as usize * t.len()) as f64
    };
    let bits =
        (0..=HEAD_MANTISSA.min(mantissa - 1)).min_by(|&a, &b| cost(a).total_cmp(&cost(b)))?;
    let head = Fields::Split {
        low: mantissa - bits,
    };
    (bits > 0).then_some(head)
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

    /// `n` f32 words of `value(r)`, `r` pseudo-random.
    fn f32_words(n: usize, value: impl Fn(u64) -> f32) -> Arc<[u32]> {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        (0..n)
            .map(|_| value(crate::codec::tests::xorshift(&mut seed)).to_bits())
            .collect()
    }

    #[test]
    fn float_heads_take_the_mantissa_bits_that_pay() {
        let f32 = Some(FloatFormat::F32);
        // Sums of uniforms: about normal, so mantissas crowd toward their
        // binade's low end.
        let bell = f32_words(1 << 16, |x| {
            ((0..4).map(|k| (x >> (16 * k)) & 0xffff).sum::<u64>() as f32 / 65536.0 - 2.0) * 0.05
        });
        let Some(Fields::Split { low }) = float_head(&bell, 32, f32) else {
            panic!("no head for bell-shaped floats");
        };
        assert!((19..23).contains(&low), "{low}");
        // Uniform in [1, 2): one exponent, uniform mantissas: no bit pays.
        let flat = f32_words(1 << 16, |x| 1.0 + (x >> 40) as f32 / (1u64 << 24) as f32);
        assert_eq!(float_head(&flat, 32, f32), None);
        // Other widths and formats get none.
        assert_eq!(float_head(&bell, 32, None), None);
        assert_eq!(float_head(&bell, 16, Some(FloatFormat::Bf16)), None);
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
