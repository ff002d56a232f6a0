//! Lower bounds of what a root operator's program can cost, from its
//! children's streams and their word counts alone (no codec sized): the
//! search uses them to set aside operators that cannot beat its best.

use super::cost::decode_penalty;
use super::expand::Operator;
use super::leaf::leaf_lower_bound_of;
use super::stream::is_constant;
use crate::codec::Stats;
use crate::dsl::{encoded_len, Literal, Max, Program, Type};
use rayon::prelude::*;
use std::sync::Arc;

/// Smallest possible encoded program (a Const with a one-byte word).
pub(super) const MIN_PROGRAM_LEN: usize = 2;

/// The statistics of the child of a Map `operator` of `stream`, `width`-bit
/// words whose statistics are `parent`: a Map's words are one-to-one with
/// its child's, so the child's counts are its parent's relabelled, and
/// beyond 4096 distinct words only its largest word is new (see
/// [`Stats::mapped`]): its stream is not stored. None for other operators,
/// or where the parent's statistics are not known.
fn mapped_stats(
    operator: &Operator,
    stream: &[u32],
    width: u32,
    parent: Option<&Stats>,
) -> Option<Stats> {
    match operator {
        Operator::Map(op) => {
            let max = || op.fold_inverse(stream, width, Max);
            Some(parent?.mapped(|y| op.invert(y, width), max))
        }
        _ => None,
    }
}

/// A cost no completion of `operator` at the root by leaves is below: its
/// node's bytes and decode penalty plus its children's leaf lower bounds
/// (no cost is, where the operator does not yield the stream after all).
/// Deriving the children's streams and counting their words is all it
/// costs (a Map's child's statistics follow from its parent's, `stats`,
/// where known, see [`mapped_stats`]): no codec is sized.
pub(super) fn root_bound(op: &Operator, stream: &[u32], ty: Type, stats: Option<&Stats>) -> usize {
    bounded_children(op, stream, ty, stats).map_or(usize::MAX, |(_, bound)| bound)
}

/// The bytes and decode penalty of the node of `op` at a hole of type `ty`
/// whose children are of `types`, without the children: its bytes with
/// constant children, less theirs.
fn node_bound(op: &Operator, ty: Type, types: &[Type]) -> usize {
    let consts: Vec<Program<Literal>> = (types.iter())
        .map(|&ty| Program {
            ty,
            op: crate::dsl::Op::Const(0),
        })
        .collect();
    let consts_len: usize = consts.iter().map(encoded_len).sum();
    encoded_len(&op.build(ty, consts)) - consts_len + decode_penalty(op.production(), ty)
}

/// A child's stream and its statistics (None for a constant), before its
/// leaf is sized.
pub(super) type Unsized = (Type, Arc<[u32]>, Option<Stats>);

/// A root operator's children as bounding it leaves them.
pub(super) enum Bounded {
    /// Each child's stream and statistics.
    Derived(Vec<Unsized>),
    /// A Map's one child, of its parent's type, with its statistics (see
    /// [`mapped_stats`]): its stream is derived only where its leaf is
    /// sized, and most Maps' bounds exceed the best.
    Mapped(Type, Box<Stats>),
}

impl Bounded {
    /// The holes and the words the children hold.
    pub(super) fn size(&self) -> (usize, usize) {
        match self {
            Bounded::Derived(kids) => (kids.len(), kids.iter().map(|(_, s, _)| s.len()).sum()),
            Bounded::Mapped(ty, _) => (1, ty.len),
        }
    }

    /// The children with their streams, a Map's derived by `op` from
    /// `stream` (`width`-bit words).
    pub(super) fn into_children(self, op: &Operator, stream: &[u32], width: u32) -> Vec<Unsized> {
        match self {
            Bounded::Derived(kids) => kids,
            Bounded::Mapped(ty, stats) => {
                let (_, words) = (op.children(stream, width).pop()).expect("a Map has a child");
                vec![(ty, words, Some(*stats))]
            }
        }
    }
}

/// The children `op` gives `stream` (of type `ty`, with statistics `parent`
/// where known), if it yields it, and a cost no completion of `op` by their
/// leaves is below (as [`root_bound`]): what bounding a root operator
/// derives, kept so that its leaves are sized from it only where the bound
/// may win.
pub(super) fn bounded_children(
    op: &Operator,
    stream: &[u32],
    ty: Type,
    parent: Option<&Stats>,
) -> Option<(Bounded, usize)> {
    if let Some(stats) = mapped_stats(op, stream, ty.width, parent) {
        let bound = node_bound(op, ty, &[ty]) + leaf_lower_bound_of(ty.len, ty.width, &stats);
        return Some((Bounded::Mapped(ty, Box::new(stats)), bound));
    }
    let kids: Vec<_> = (op
        .try_children(stream, ty.width)?
        .into_par_iter()
        .with_max_len(1))
    .map(|(ty, s)| {
        let stats = (!is_constant(&s)).then(|| Stats::new(&s, ty.width));
        (ty, s, stats)
    })
    .collect();
    let types: Vec<Type> = kids.iter().map(|&(ty, ..)| ty).collect();
    let leaves: usize = (kids.iter())
        .map(|(ty, s, stats)| match stats {
            Some(stats) => leaf_lower_bound_of(s.len(), ty.width, stats),
            None => MIN_PROGRAM_LEN,
        })
        .sum();
    Some((Bounded::Derived(kids), node_bound(op, ty, &types) + leaves))
}
