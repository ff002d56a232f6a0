//! Learning the search's prior from a deterministic sample of the file's
//! chunks (before packing, or for `brevis calibrate`).

#![forbid(unsafe_code)]

use super::bases::{BaseSources, Bases};
use super::encode::to_lanes;
use super::input::{Extent, Input};
use super::options::PackOptions;
use super::plan::{Chunking, Planned};
use super::residual::residual;
use crate::error::Result;
use crate::synth::{learn_prior, Hint, Prior, SynthOptions};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Chunks searched to learn a prior: at most this many per stratum, and in all.
/// More chunks in all learn no better prior and take longer; fewer learn a
/// worse one for some files.
const SAMPLE_PER_STRATUM: usize = 2;
const SAMPLE_TOTAL: usize = 8;
/// One sampled chunk per this many chunks of a stratum.
const SAMPLE_EVERY: usize = 48;
/// Words of each sampled lane the prior is learned from: the search's cost
/// grows with them, the prior (which productions help) hardly does: a prior
/// from this many words packs as one from whole chunks does.
const SAMPLE_WORDS: usize = 1 << 16;
/// Expansions per sampled chunk when learning a prior. A sampled search
/// spends about as long on its budget as on its root's expansion, so a
/// smaller budget saves little time; a larger one learns no better prior,
/// and a smaller one a worse one.
pub const CALIBRATION_BUDGET: usize = 32;

/// The search options of `opts`, with a prior learned from `input`'s
/// sampled chunks where they ask for one.
pub(super) fn synth_options(input: &Input, opts: &PackOptions) -> Result<SynthOptions> {
    let mut synth = opts.synth.clone();
    if opts.learn_prior && synth.budget > 0 && synth.prior.is_uniform() {
        synth.prior = Arc::new(learned_prior(input)?);
    }
    Ok(synth)
}

/// The prior learned from `input`'s sampled chunks.
fn learned_prior(input: &Input) -> Result<Prior> {
    Ok(learn_prior(&sample(input)?, CALIBRATION_BUDGET))
}
/// A lane of a sampled chunk: its words, their width and hint.
type Sampled = (Arc<[u32]>, u32, Hint);

/// A deterministic sample of the file's tensor chunks, stratified by dtype and
/// size: every `SAMPLE_EVERY`-th chunk of each stratum (at least one, at most
/// `SAMPLE_PER_STRATUM`), `SAMPLE_TOTAL` in all, as lane streams.
fn sample(input: &Input) -> Result<Vec<Sampled>> {
    let mut strata: BTreeMap<(usize, u32, Option<usize>), Vec<&Planned>> = BTreeMap::new();
    for p in input.plan.iter().filter(|p| p.element.known) {
        let layout = p.element.layout;
        let float = p.element.float.map(|f| f as usize);
        let size = 64 - p.len.leading_zeros();
        strata
            .entry((layout.element_bytes(), size, float))
            .or_default()
            .push(p);
    }
    let mut picked: Vec<&Planned> = Vec::new();
    for members in strata.values() {
        let take = members.len().div_ceil(SAMPLE_EVERY).min(SAMPLE_PER_STRATUM);
        picked.extend((0..take).map(|i| members[i * members.len() / take]));
    }
    picked.truncate(SAMPLE_TOTAL);
    // Each sampled chunk read and split a task of its own (they are the
    // prior's wait before packing starts), in the order picked.
    let per_chunk: Vec<Vec<_>> = (picked.par_iter().with_max_len(1))
        .map(|p| sample_chunk(input, p))
        .collect::<Result<_>>()?;
    Ok(per_chunk.into_iter().flatten().collect())
}

/// The lanes of the planned chunk `p` as the prior samples them: their first
/// `SAMPLE_WORDS` words, so only that many elements of it are read (every
/// lane holds one word per element).
fn sample_chunk(input: &Input, p: &Planned) -> Result<Vec<Sampled>> {
    let layout = p.element.layout;
    let p = Planned {
        len: p.len.min((SAMPLE_WORDS * layout.element_bytes()) as u64),
        ..*p
    };
    // A chunk with a base is sampled as what it will be coded as most
    // often: its residual against the base.
    let extent = Extent::read(input, &[p])?;
    let bytes = match p.base {
        Some(_) => residual(&extent.bytes, &extent.base, layout).bytes,
        None => extent.bytes,
    };
    let hint = Hint {
        float: p.element.float,
        rows: None,
        columns: None,
    };
    let width = layout.lane_width();
    Ok((to_lanes(&bytes, layout).into_iter())
        .map(|lane| (lane, width, hint))
        .collect())
}

/// Learns a prior from a sample of the safetensors file `src` (for `--prior`).
pub fn calibrate(src: &Path, chunk_size: usize) -> Result<Prior> {
    let bases = Bases::open(&BaseSources::default(), src)?;
    let input = Input::open(src, Chunking::fixed(chunk_size), bases)?;
    learned_prior(&input)
}
