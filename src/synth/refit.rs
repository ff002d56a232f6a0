//! Re-fitting a program found on one chunk to another chunk of the same
//! tensor: most chunks of a tensor take the same skeleton (the same
//! operators with the same parameters), so the packer searches one chunk of a
//! tensor and, for the others, derives the children's streams along that
//! skeleton and only picks new leaves. A full search runs again where the
//! re-fit costs noticeably more per word than the search's program did, or
//! much less (different data, which other operators may suit better).

use super::columnscan::{column_scan_program, column_updates};
use super::cost::cost;
use super::expand::{field, Operator};
use super::leaf::leaf;
use super::matches::{match_program, match_streams};
use super::mirror::{mirror_program, mirror_streams};
use crate::dsl::{Literal, Op, Program, Type};
use std::sync::Arc;

/// A found program's operators and parameters, without its literals (a
/// template is kept per tensor and must stay small: a re-fit picks each
/// literal's codec anew), and what it cost.
#[derive(Clone, Debug)]
pub struct Template {
    /// The program's operators and parameters, its literals left out.
    skeleton: Program<()>,
    /// [`cost`] of the program on the stream it was found for.
    cost: usize,
}

impl Template {
    /// The template of `p`, a program found for one chunk's lane, to
    /// re-fit to the same lane of the tensor's other chunks.
    pub fn of(p: &Program<Literal>) -> Template {
        Template {
            skeleton: skeleton_of(p),
            cost: cost(p),
        }
    }

    /// The template's skeleton over `words` (of the template's width) with
    /// new leaves, if the skeleton can yield them. A leaf over all of `words`
    /// holds them, not a copy.
    pub fn apply(&self, words: &Arc<[u32]>) -> Option<Program<Literal>> {
        refit(&self.skeleton, words.clone())
    }

    /// Whether `p`, applied to a stream, costs at most `1 + 1/slack` times the
    /// template's cost per word, plus `FIXED_ALLOWANCE`, and not less than
    /// `CHEAPER_DIVISOR` allows: a stream that codes much cheaper than the
    /// template's is different data, which other operators may suit better.
    pub fn fits(&self, p: &Program<Literal>, slack: usize) -> bool {
        let (len, slack) = (self.skeleton.ty.len as u128, slack as u128);
        let (cost, words) = (cost(p) as u128, p.ty.len as u128);
        let per_word = self.cost as u128 * words;
        let budget = per_word * (slack + 1) + FIXED_ALLOWANCE * len * slack;
        let floor = per_word - per_word / CHEAPER_DIVISOR;
        cost * len * slack <= budget && cost * len >= floor
    }

    /// The word width the template was found at.
    pub fn width(&self) -> u32 {
        self.skeleton.ty.width
    }
}

/// A re-fit costing less than `1 - 1/this` times its template per word is
/// searched: data that codes that much cheaper is different data, which
/// other operators may suit better (measured in docs/PERFORMANCE.md).
const CHEAPER_DIVISOR: u128 = 4;

/// Bytes a re-fit may cost beyond its template's per-word cost: tables and
/// headers do not shrink with a shorter chunk.
const FIXED_ALLOWANCE: u128 = 16;

/// The skeleton of `p`: its operators and parameters without literals. A
/// Partition is a leaf's alternative, chosen for each chunk's own words
/// (see [`super::partition::partition_rows`]): it is a leaf of the skeleton.
fn skeleton_of(p: &Program<Literal>) -> Program<()> {
    let kids = || p.children().map(skeleton_of).collect::<Vec<_>>();
    let one = || Box::new(skeleton_of(p.children().next().expect("one child")));
    let op = match &p.op {
        Op::Lit(_) | Op::Partition { .. } => Op::Lit(()),
        Op::Const(w) => Op::Const(*w),
        Op::Concat(_) => Op::Concat(kids()),
        Op::Repeat { times, .. } => Op::Repeat {
            times: *times,
            body: one(),
        },
        Op::Map { op, .. } => Op::Map {
            op: *op,
            body: one(),
        },
        Op::Scan { op, init, .. } => Op::Scan {
            op: *op,
            init: *init,
            updates: one(),
        },
        Op::Merge { fields, .. } => Op::Merge {
            fields: *fields,
            parts: kids(),
        },
        Op::Palette {
            group,
            index_width,
            values,
            indices,
        } => Op::Palette {
            group: *group,
            index_width: *index_width,
            values: Box::new(skeleton_of(values)),
            indices: Box::new(skeleton_of(indices)),
        },
        Op::Scaled {
            group,
            format,
            int_width,
            scales,
            ints,
        } => Op::Scaled {
            group: *group,
            format: *format,
            int_width: *int_width,
            scales: Box::new(skeleton_of(scales)),
            ints: Box::new(skeleton_of(ints)),
        },
        Op::Match { parts } => Op::Match {
            parts: Box::new(parts.each_ref().map(skeleton_of)),
        },
        Op::Sparse { fill, gaps, values } => Op::Sparse {
            fill: *fill,
            gaps: Box::new(skeleton_of(gaps)),
            values: Box::new(skeleton_of(values)),
        },
        Op::ColumnScan { row, .. } => Op::ColumnScan {
            row: *row,
            updates: one(),
        },
        Op::Mirror { at, head, diffs } => Op::Mirror {
            at: *at,
            head: Box::new(skeleton_of(head)),
            diffs: Box::new(skeleton_of(diffs)),
        },
    };
    Program { ty: p.ty, op }
}

/// `skeleton` over `target`: the same operators and parameters, children
/// derived from `target`, new leaves. None where the skeleton cannot yield
/// `target`.
fn refit(skeleton: &Program<()>, target: Arc<[u32]>) -> Option<Program<Literal>> {
    let width = skeleton.ty.width;
    let ty = Type {
        width,
        len: target.len(),
    };
    let node = match &skeleton.op {
        Op::Lit(_) | Op::Partition { .. } => return Some(leaf(target, width).0),
        // The matcher parses the new stream; its streams are re-fit.
        Op::Match { parts } => {
            let streams = match_streams(&target, width)?;
            // A chunk of another length has token words of another width:
            // those take a new leaf.
            let kids: Vec<Program<Literal>> = (streams.into_iter())
                .zip(parts.iter())
                .map(|((t, s), sub)| match t.width == sub.ty.width {
                    true => refit(sub, s),
                    false => Some(leaf(s, t.width).0),
                })
                .collect::<Option<_>>()?;
            return Some(match_program(ty, kids));
        }
        // A leaf: the new stream takes its own.
        Op::Const(_) | Op::Sparse { .. } => return Some(leaf(target, width).0),
        // The same rows, whether or not the new ones change as slowly.
        Op::ColumnScan { row, updates } => {
            if target.len() <= *row {
                return None;
            }
            let kid = refit(updates, column_updates(&target, *row, width))?;
            return Some(column_scan_program(ty, *row, kid));
        }
        // The same mirroring, whether or not the new rows mirror as well:
        // a re-fit is weighed against its template's cost.
        Op::Mirror { at, head, diffs } => {
            if target.is_empty() || !at.fits(target.len()) {
                return None;
            }
            let (h, d) = mirror_streams(&target, *at);
            let kids = (refit(head, h)?, refit(diffs, d)?);
            return Some(mirror_program(ty, *at, kids.0, kids.1));
        }
        Op::Concat(parts) => {
            // The same part lengths, the last one taking what is left.
            let mut ends: Vec<usize> = parts
                .iter()
                .scan(0, |at, q| {
                    *at += q.ty.len;
                    Some(*at)
                })
                .collect();
            let last = ends.len() - 1;
            if ends[last - 1] >= target.len() {
                return None;
            }
            ends[last] = target.len();
            Operator::Concat(ends.into())
        }
        Op::Repeat { times, .. } => {
            let period = target.len() / times;
            let periodic = target.len().is_multiple_of(*times)
                && target.chunks_exact(period).all(|c| c == &target[..period]);
            if !periodic {
                return None;
            }
            Operator::Repeat { times: *times }
        }
        Op::Map { op, .. } => Operator::Map(*op),
        Op::Scan { op, init, .. } => Operator::Scan {
            op: *op,
            init: *init,
        },
        Op::Merge { .. } => return refit_merge(skeleton, &target, 0),
        Op::Palette {
            group, index_width, ..
        } => Operator::Palette {
            group: *group,
            index_width: *index_width,
        },
        Op::Scaled {
            group,
            format,
            int_width,
            ..
        } => Operator::Scaled {
            group: *group,
            format: *format,
            int_width: *int_width,
        },
    };
    // A Palette's or Scaled node's groups may not all fit the new chunk.
    let kids: Vec<Program<Literal>> = node
        .try_children(&target, width)?
        .into_iter()
        .zip(skeleton.children())
        .map(|((_, stream), sub)| refit(sub, stream))
        .collect::<Option<_>>()?;
    // A Repeat of a constant is not canonical: the constant says it all.
    if let (Operator::Repeat { .. }, Op::Const(w)) = (&node, &kids[0].op) {
        return Some(Program {
            ty,
            op: Op::Const(*w),
        });
    }
    Some(node.build(ty, kids))
}

/// The Merge `skeleton` re-fit to the words of `target` shifted down by
/// `shift` bits (its own field of an enclosing Merge): the fields of nested
/// Merges are cut from `target` directly, not from their parents' streams,
/// so only the streams of the fields that are not Merges are written.
fn refit_merge(skeleton: &Program<()>, target: &[u32], shift: u32) -> Option<Program<Literal>> {
    let Op::Merge { fields, parts } = &skeleton.op else {
        unreachable!("refit_merge takes a Merge");
    };
    let width = skeleton.ty.width;
    let cut = (fields.widths(width).into_iter()).zip(fields.shifts(width));
    let kids: Vec<Program<Literal>> = (cut.zip(parts))
        .map(|((w, s), sub)| match sub.op {
            Op::Merge { .. } => refit_merge(sub, target, shift + s),
            _ => refit(sub, field(target, shift + s, w)),
        })
        .collect::<Option<_>>()?;
    let ty = Type {
        width,
        len: target.len(),
    };
    Some(Operator::Merge(*fields).build(ty, kids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;
    use crate::dsl::{Fields, FloatFormat, ScanOp};
    use crate::synth::cost::runs_to;

    fn arc(words: &[u32]) -> Arc<[u32]> {
        words.into()
    }

    fn words(seed: u64, n: usize) -> Vec<u32> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                0x3c00 | ((x >> 58) as u32 * 3) | ((x >> 20) as u32 & 0x3) << 8
            })
            .collect()
    }

    fn template(op: Op<Literal>, width: u32, len: usize) -> Template {
        Template::of(&Program {
            ty: Type { width, len },
            op,
        })
    }

    #[test]
    fn a_merge_refits_to_the_same_fields_and_runs_to_the_new_target() {
        let first = words(1, 4096);
        let found = Operator::Merge(Fields::Float(FloatFormat::F16));
        let kids: Vec<_> = found
            .children(&first, 16)
            .into_iter()
            .map(|(t, s)| leaf(s, t.width).0)
            .collect();
        let p = found.build(
            Type {
                width: 16,
                len: 4096,
            },
            kids,
        );
        let t = Template::of(&p);
        let second = words(2, 3000);
        let q = t
            .apply(&arc(&second))
            .filter(|q| t.fits(q, 10))
            .expect("same statistics refit within slack");
        assert!(matches!(q.op, Op::Merge { .. }));
        assert!(runs_to(&q, &second));
    }

    /// Fields of nested Merges are cut from the chunk's words directly: at
    /// their parents' shifts plus their own, three levels deep.
    #[test]
    fn nested_merges_refit_to_their_fields_at_every_depth() {
        let split = |low| Operator::Merge(Fields::Split { low });
        let ty = |width| Type { width, len: 3000 };
        let lit = |width| leaf(vec![1u32; 3000].into(), width).0;
        // 16 bits: the top 12 split into 4 and 8 (whose top 6 split into 2
        // and 4), the low 4 a leaf.
        let inner = split(4).build(ty(6), vec![lit(2), lit(4)]);
        let middle = split(2).build(ty(8), vec![inner, lit(2)]);
        let top = split(8).build(ty(12), vec![lit(4), middle]);
        let p = split(4).build(ty(16), vec![top, lit(4)]);
        let t = Template::of(&p);
        let target = words(3, 3000);
        let q = t.apply(&arc(&target)).expect("a merge yields any words");
        fn merges(p: &Program<()>, out: &mut Vec<(Type, Fields)>) {
            if let Op::Merge { fields, parts } = &p.op {
                out.push((p.ty, *fields));
                parts.iter().for_each(|c| merges(c, out));
            }
        }
        let (mut found, mut refit) = (Vec::new(), Vec::new());
        merges(&skeleton_of(&p), &mut found);
        merges(&skeleton_of(&q), &mut refit);
        assert_eq!((found.len(), &refit), (4, &found), "the same Merges");
        assert!(runs_to(&q, &target));
    }

    #[test]
    fn a_literal_refits_to_a_sparse_node_where_that_is_smaller() {
        // A template found where a stream of bytes took a literal; a
        // later chunk's stream is zero but for one word in about 250.
        let mut seed = 7;
        let later: Vec<u32> = (0..65536)
            .map(|_| match xorshift(&mut seed) {
                x if x.is_multiple_of(250) => (x >> 56) as u32 | 1,
                _ => 0,
            })
            .collect();
        let t = Template {
            skeleton: Program {
                ty: Type {
                    width: 8,
                    len: 65536,
                },
                op: Op::Lit(()),
            },
            cost: 1000,
        };
        let q = t.apply(&arc(&later)).unwrap();
        assert!(matches!(q.op, Op::Sparse { fill: 0, .. }), "{q}");
        assert!(runs_to(&q, &later));
    }

    #[test]
    fn a_scan_that_no_longer_fits_is_refused() {
        // An arange searched as add-scan updates of 3 from 0: a later chunk
        // of scattered words re-fits to updates as scattered, which cost far
        // more per word than the constant did. (One starting elsewhere
        // re-fits to a single large first update, which a Sparse leaf
        // stores in a few bytes.)
        let t = template(
            Op::Scan {
                op: ScanOp::Add,
                init: 0,
                updates: Box::new(Program {
                    ty: Type {
                        width: 32,
                        len: 1000,
                    },
                    op: Op::Const(3),
                }),
            },
            32,
            1000,
        );
        let later: Vec<u32> = (0..1000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) >> 8)
            .collect();
        assert!(!t.fits(&t.apply(&arc(&later)).unwrap(), 10));
        let elsewhere: Vec<u32> = (0..1000).map(|i| 100_000 + 3 * i).collect();
        let q = t.apply(&arc(&elsewhere)).unwrap();
        // 12 bytes of program and the Scan's decode penalty of 8.
        assert!(cost(&q) <= 20, "{q}");
        // With any slack at all a same-start stream re-fits exactly.
        let same: Vec<u32> = (0..500).map(|i| 3 * i + 3).collect();
        let q = t.apply(&arc(&same)).unwrap();
        assert!(t.fits(&q, 10));
        assert!(runs_to(&q, &same));
    }

    #[test]
    fn a_much_cheaper_stream_does_not_fit() {
        // Float-like noise found as a Merge of fields: nearly constant words
        // re-fit to tiny literals, far below the template's cost per word.
        let noisy = words(3, 4096);
        let found = Operator::Merge(Fields::Float(FloatFormat::F16));
        let kids: Vec<_> = found
            .children(&noisy, 16)
            .into_iter()
            .map(|(t, s)| leaf(s, t.width).0)
            .collect();
        let ty = Type {
            width: 16,
            len: 4096,
        };
        let t = Template::of(&found.build(ty, kids));
        let mut flat = vec![0x3c00; 4096];
        flat[7] = 0x3c01;
        let q = t.apply(&arc(&flat)).unwrap();
        assert!(runs_to(&q, &flat));
        assert!(!t.fits(&q, 10));
        assert!(t.fits(&t.apply(&arc(&words(4, 4096))).unwrap(), 10));
    }

    #[test]
    fn a_repeat_refits_only_to_periodic_targets() {
        let row: Vec<u32> = (0..64).map(|i| i * 7 % 13).collect();
        let body = leaf(row.clone().into(), 8).0;
        let t = template(
            Op::Repeat {
                times: 4,
                body: Box::new(body),
            },
            8,
            256,
        );
        let periodic = row.repeat(4);
        assert!(runs_to(&t.apply(&arc(&periodic)).unwrap(), &periodic));
        let mut broken = periodic.clone();
        broken[200] ^= 1;
        assert!(t.apply(&arc(&broken)).is_none());
        // A constant target: the Repeat of a Const becomes the Const alone.
        let q = t.apply(&arc(&[5; 256])).unwrap();
        assert_eq!(q.op, Op::Const(5));
    }
}
