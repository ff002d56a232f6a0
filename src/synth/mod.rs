//! Program synthesis: finds a small program that yields a target word stream.
//!
//! Synthesis is target-directed: an *expansion* picks an operator and derives, from
//! the target, the exact streams its children must yield, so any completion of the
//! children yields the target by construction. The search completes each child with
//! its best *leaf* (a constant or the smallest literal encoding) and keeps the
//! smallest complete program.

mod expand;

pub use expand::{expansions, Expansion};

use crate::codec::{self, Stats};
use crate::dsl::{self, encoded_len, FloatFormat, Literal, Op, Program, Type};
use std::sync::Arc;

/// What the synthesizer knows about a stream besides its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    /// The float format of the tensor's dtype, when the words are floats.
    pub float: Option<FloatFormat>,
}

/// The cheapest program that stores `words` directly: a constant if they are all
/// equal, otherwise the literal with the smallest exact encoding.
pub fn leaf(words: Arc<[u32]>, width: u32) -> Program<Literal> {
    let ty = Type {
        width,
        len: words.len(),
    };
    if words.iter().all(|w| *w == words[0]) {
        return Program {
            ty,
            op: Op::Const(words[0]),
        };
    }
    let stats = Stats::new(&words, width);
    let (codec, size) = codec::best(&words, width, &stats);
    Program {
        ty,
        op: Op::Lit(Literal { codec, size, words }),
    }
}

/// The smallest program among the leaf and every expansion at the root with its
/// children completed by leaves.
pub fn synthesize(words: &[u32], width: u32, hint: Hint) -> Program<Literal> {
    let target: Arc<[u32]> = words.into();
    let mut best = leaf(target.clone(), width);
    let mut best_len = encoded_len(&best);
    for expansion in expansions(&target, width, hint) {
        let candidate = expansion.complete_with(leaf);
        let len = encoded_len(&candidate);
        if len < best_len {
            best = candidate;
            best_len = len;
        }
    }
    debug_assert!(runs_to(&best, words));
    best
}

/// Whether `p` executes to exactly `target`.
pub fn runs_to(p: &Program<Literal>, target: &[u32]) -> bool {
    let mut out = vec![0u32; p.ty.len];
    let Ok(()) = dsl::execute(p, &mut out);
    out == target
}
