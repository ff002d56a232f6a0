//! Learning the production prior from a sample of the checkpoint's own
//! chunks, before any chunk is packed: each sample stream is searched as
//! packing would search it, and the productions of the programs found are
//! counted in their contexts.

use super::options::{Order, SynthOptions};
use super::prior::Prior;
use super::search::{astar, Found};
use super::stream::Hint;
use super::upcast::lane_as_searched;
use crate::codec;
use rayon::prelude::*;

/// The codecs a prior's search sizes its leaves with: a prior counts the
/// operators of the programs found, which Huffman's code lengths (much of
/// the sampled searches' sizing) hardly change where rANS's prediction
/// stands in for them, so the prior learned so packs as one learned with
/// Huffman does.
const LEARNING_CODECS: [codec::Codec; 3] =
    [codec::Codec::Raw, codec::Codec::BitPack, codec::Codec::Rans];

/// Learns a prior from sample streams: each is searched as packing searches it
/// (see `lane_as_searched`) without production costs (best-first by size,
/// `budget` expansions), and the productions of the programs found are counted
/// in their contexts. The search sizes its leaves without Huffman (see
/// `LEARNING_CODECS`).
pub fn learn_prior(samples: &[(impl AsRef<[u32]> + Sync, u32, Hint)], budget: usize) -> Prior {
    let opts = SynthOptions {
        budget,
        order: Order::EstimatedSize,
        leaf_codecs: &LEARNING_CODECS,
        ..SynthOptions::default()
    };
    let found: Vec<Found> = samples
        .par_iter()
        .with_max_len(1)
        .map(|(words, width, hint)| {
            let (words, width, hint) = lane_as_searched(words.as_ref(), *width, *hint);
            astar(&words, width, hint, &opts)
        })
        .collect();
    let mut prior = Prior::uniform();
    for f in &found {
        for (ctx, p) in &f.productions {
            prior.observe(*ctx, *p);
        }
    }
    prior
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;
    use crate::dsl::{Literal, Op, Program};
    use crate::synth::cost::runs_to;

    /// The codecs of `p`'s literals.
    fn literal_codecs(p: &Program<Literal>, out: &mut Vec<codec::Codec>) {
        if let Op::Lit(l) = &p.op {
            out.push(l.codec);
        }
        p.children().for_each(|c| literal_codecs(c, out));
    }

    /// A search sizes its leaves with its `leaf_codecs` only: a short
    /// stream of a few skewed symbols, which Huffman codes smallest, takes
    /// another codec without it (as when learning a prior).
    #[test]
    fn a_search_sizes_its_leaves_with_its_codecs_only() {
        let mut seed = 0x9e37_79b9;
        let words: Vec<u32> = (0..3000)
            .map(|_| (xorshift(&mut seed) % 64).trailing_zeros())
            .collect();
        let hint = Hint {
            float: None,
            rows: None,
            columns: None,
        };
        let found = |leaf_codecs| {
            let opts = SynthOptions {
                leaf_codecs,
                ..SynthOptions::default()
            };
            let p = astar(&words, 8, hint, &opts).program;
            assert!(runs_to(&p, &words));
            let mut codecs = Vec::new();
            literal_codecs(&p, &mut codecs);
            codecs
        };
        assert!(found(&codec::SIZING_ORDER).contains(&codec::Codec::Huffman));
        let learning = found(&LEARNING_CODECS);
        assert!(!learning.is_empty() && !learning.contains(&codec::Codec::Huffman));
    }
}
