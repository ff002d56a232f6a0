//! Lower bounds of what a root operator's program can cost, from its
//! children's streams and their word counts alone (no codec sized): the
//! search uses them to set aside operators that cannot beat its best.

use super::cost::decode_penalty;
use super::expand::Operator;
use super::leaf::{leaf_lower_bound, leaf_lower_bound_of};
use super::stream::is_constant;
use crate::codec::Stats;
use crate::dsl::{encoded_len, Literal, Program, Type};
use rayon::prelude::*;
use std::sync::Arc;

/// Smallest possible encoded program (a Const with a one-byte word).
pub(super) const MIN_PROGRAM_LEN: usize = 2;

/// The statistics of the child of a Map `operator` of `width`-bit words whose
/// statistics are `parent`: a Map's words are one-to-one with its child's,
/// so the child's counts are its parent's relabelled, without counting
/// them again. None for other operators, or where they are not known.
pub(super) fn mapped_stats(
    operator: &Operator,
    width: u32,
    parent: Option<&Stats>,
) -> Option<Stats> {
    match operator {
        Operator::Map(op) => parent?.relabelled(|y| op.invert(y, width)),
        _ => None,
    }
}

/// A cost no completion of `operator` at the root by leaves is below: its
/// node's bytes and decode penalty plus its children's leaf lower bounds
/// (no cost is, where the operator does not yield the stream after all).
/// Deriving the children's streams and counting their words is all it
/// costs (for a Map's child, relabelling its parent's counts, `stats`,
/// where known): no codec is sized.
pub(super) fn root_bound(op: &Operator, stream: &[u32], ty: Type, stats: Option<&Stats>) -> usize {
    // A Map's child bounded from its relabelled statistics needs no words.
    if let Some(child) = mapped_stats(op, ty.width, stats) {
        return node_bound(op, ty, &[ty]) + leaf_lower_bound_of(ty.len, ty.width, &child);
    }
    let Some(children) = op.try_children(stream, ty.width) else {
        return usize::MAX;
    };
    let types: Vec<Type> = children.iter().map(|&(ty, _)| ty).collect();
    let leaves: usize = (children.iter())
        .map(|(ty, s)| leaf_lower_bound(s, ty.width))
        .sum();
    node_bound(op, ty, &types) + leaves
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
type Unsized = (Type, Arc<[u32]>, Option<Stats>);

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
) -> Option<(Vec<Unsized>, usize)> {
    let kids = op.try_children(stream, ty.width)?;
    let kids: Vec<_> = match mapped_stats(op, ty.width, parent) {
        // A Map has one child.
        Some(stats) => {
            let mut stats = Some(stats);
            (kids.into_iter())
                .map(|(ty, s)| (ty, s, stats.take()))
                .collect()
        }
        None => (kids.into_par_iter().with_max_len(1))
            .map(|(ty, s)| {
                let stats = (!is_constant(&s)).then(|| Stats::new(&s, ty.width));
                (ty, s, stats)
            })
            .collect(),
    };
    let types: Vec<Type> = kids.iter().map(|&(ty, ..)| ty).collect();
    let leaves: usize = (kids.iter())
        .map(|(ty, s, stats)| match stats {
            Some(stats) => leaf_lower_bound_of(s.len(), ty.width, stats),
            None => MIN_PROGRAM_LEN,
        })
        .sum();
    Some((kids, node_bound(op, ty, &types) + leaves))
}
