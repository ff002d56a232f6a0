//! Target-directed expansions: each picks an operator and derives its children's
//! streams from the target, under the contract that children yielding those
//! streams make the parent yield the target.

use super::Hint;
use crate::dsl::{mask, Fields, FloatFormat, Literal, MapOp, Op, Program, ScanOp, Type};
use std::sync::Arc;

/// An operator applied at a hole, with the streams its children must yield.
#[derive(Clone, Debug)]
pub struct Expansion {
    pub shape: Shape,
    pub children: Vec<(Type, Arc<[u32]>)>,
}

/// The operator of an expansion with its parameters (children not yet built).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Repeat { times: usize },
    Map(MapOp),
    Scan { op: ScanOp, init: u32 },
    Merge(Fields),
}

/// Longest period a Repeat looks for.
const MAX_PERIOD: usize = 1 << 16;

impl Expansion {
    /// Builds the program with each child completed by `complete(stream, width)`.
    pub fn complete_with(
        &self,
        mut complete: impl FnMut(Arc<[u32]>, u32) -> Program<Literal>,
    ) -> Program<Literal> {
        let mut kids = self
            .children
            .iter()
            .map(|(ty, s)| complete(s.clone(), ty.width));
        let parent_len = |k: &Program<Literal>| k.ty.len;
        match self.shape {
            Shape::Repeat { times } => {
                let body = kids.next().expect("repeat has a body");
                let ty = Type {
                    width: body.ty.width,
                    len: parent_len(&body) * times,
                };
                Program {
                    ty,
                    op: Op::Repeat {
                        times,
                        body: Box::new(body),
                    },
                }
            }
            Shape::Map(op) => {
                let body = kids.next().expect("map has a body");
                Program {
                    ty: body.ty,
                    op: Op::Map {
                        op,
                        body: Box::new(body),
                    },
                }
            }
            Shape::Scan { op, init } => {
                let updates = kids.next().expect("scan has updates");
                Program {
                    ty: updates.ty,
                    op: Op::Scan {
                        op,
                        init,
                        updates: Box::new(updates),
                    },
                }
            }
            Shape::Merge(fields) => {
                let parts: Vec<_> = kids.collect();
                let ty = Type {
                    width: parts.iter().map(|p| p.ty.width).sum(),
                    len: parts[0].ty.len,
                };
                Program {
                    ty,
                    op: Op::Merge { fields, parts },
                }
            }
        }
    }
}

/// Every expansion of a hole whose target is `t` (of `width`-bit words).
pub fn expansions(t: &Arc<[u32]>, width: u32, hint: Hint) -> Vec<Expansion> {
    let mut out = Vec::new();
    out.extend(repeat(t, width));
    out.extend(scans(t, width));
    out.extend(offset_map(t, width));
    for fields in merge_fields(width, hint.float) {
        out.push(merge(t, width, fields));
    }
    out
}

fn child(width: u32, words: Vec<u32>) -> (Type, Arc<[u32]>) {
    (
        Type {
            width,
            len: words.len(),
        },
        words.into(),
    )
}

/// Repeat of the shortest exact period, if the stream has one.
fn repeat(t: &[u32], width: u32) -> Option<Expansion> {
    let n = t.len();
    let period = (1..=(n / 2).min(MAX_PERIOD))
        .filter(|p| n.is_multiple_of(*p))
        .find(|&p| t[p..] == t[..n - p])?;
    Some(Expansion {
        shape: Shape::Repeat { times: n / period },
        children: vec![child(width, t[..period].to_vec())],
    })
}

/// Scans whose updates are the differences between neighbours; starting from the
/// first word makes the first update zero.
fn scans(t: &[u32], width: u32) -> Vec<Expansion> {
    if t.len() < 2 {
        return Vec::new();
    }
    [ScanOp::Add, ScanOp::Xor]
        .into_iter()
        .map(|op| {
            let mut prev = t[0];
            let updates = t
                .iter()
                .map(|&x| {
                    let d = op.delta(prev, x, width);
                    prev = x;
                    d
                })
                .collect();
            Expansion {
                shape: Shape::Scan { op, init: t[0] },
                children: vec![child(width, updates)],
            }
        })
        .collect()
}

/// Map add(min) that brings the words down to start at zero, when that shortens
/// their bit length (entropy coders do not care; bit packing does).
fn offset_map(t: &[u32], width: u32) -> Option<Expansion> {
    let (min, max) = (t.iter().min()?, t.iter().max()?);
    let bits = |x: u32| 32 - x.leading_zeros();
    if *min == 0 || bits(max - min) == bits(*max) {
        return None;
    }
    let op = MapOp::Add(*min);
    let body = t.iter().map(|&y| op.invert(y, width)).collect();
    Some(Expansion {
        shape: Shape::Map(op),
        children: vec![child(width, body)],
    })
}

/// The Merge layouts worth trying at `width`.
fn merge_fields(width: u32, float: Option<FloatFormat>) -> Vec<Fields> {
    let mut out = Vec::new();
    if let Some(f) = float.filter(|f| f.width() == width) {
        out.push(Fields::Float(f));
    }
    if width >= 16 && width.is_multiple_of(8) {
        out.push(Fields::BytePlanes);
    }
    if width == 32 {
        out.push(Fields::Split { low: 16 });
    }
    if (2..=8).contains(&width) {
        out.push(Fields::BitPlanes);
    }
    out
}

fn merge(t: &[u32], width: u32, fields: Fields) -> Expansion {
    let children = fields
        .widths(width)
        .into_iter()
        .zip(fields.shifts(width))
        .map(|(w, shift)| child(w, t.iter().map(|x| (x >> shift) & mask(w)).collect()))
        .collect();
    Expansion {
        shape: Shape::Merge(fields),
        children,
    }
}
