//! What a pack is asked for: chunk sizes, the search's options, and the
//! effort levels that set them.

#![forbid(unsafe_code)]

use super::bases::BaseSources;
use crate::synth::{SynthOptions, DEFAULT_BUDGET, DEFAULT_REFIT_SLACK, MATCH_WORDS, SEARCH_WORDS};

/// Default source bytes per chunk; see `docs/FORMAT.md` for the measured trade-off.
pub const DEFAULT_CHUNK_BYTES: usize = 256 << 10;

#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Source bytes per chunk (rounded down to whole elements).
    pub chunk_size: usize,
    /// Let a tensor take chunks of twice or four times `chunk_size` (up to
    /// 1 MiB) where its bytes' statistics say they code smaller (see
    /// `width::tensor_chunk`), and a tensor coded against a base whole chunks
    /// of the base's (see `width::against_base`); false keeps every chunk at
    /// `chunk_size`.
    pub adapt_chunks: bool,
    pub synth: SynthOptions,
    /// Learn a prior from a sample of the file before packing (unless the search
    /// is root-only or `synth.prior` was already given).
    pub learn_prior: bool,
    /// Let the literals of runs of a tensor's chunks share code tables
    /// held once in the index (format version 10) where that is smaller:
    /// a few KB per file at some packing time, which the fastest levels
    /// do not spend.
    pub share_tables: bool,
    /// Archives whose sources the new archive may reference (see
    /// [`BaseSources`]). The archive will need those it references to be
    /// read.
    pub bases: BaseSources,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions::at_level(DEFAULT_LEVEL)
    }
}

/// Effort levels, as zstd's and xz's: higher is slower, and larger than the
/// default only where a deeper search of a tensor's first chunk re-fits its
/// later chunks worse (see docs/PERFORMANCE.md).
pub const LEVELS: std::ops::RangeInclusive<u8> = 1..=9;
/// The level `brevis pack` uses unless told otherwise.
pub const DEFAULT_LEVEL: u8 = 5;

impl PackOptions {
    /// The options of effort `level` (clamped to [`LEVELS`]): the search
    /// budget per searched chunk, whether a prior is learned, and how closely
    /// a re-fit must match its template (levels 8 and 9 search every chunk);
    /// levels 1 and 2 offer no Partitions (see `synth::partition_rows`) and
    /// share no code tables; only levels 7 and up put columns in classes (see
    /// `synth::columns_in_classes`), as those decode slower.
    pub fn at_level(level: u8) -> PackOptions {
        // (budget, learn a prior, re-fit slack)
        let (budget, learn_prior, refit_slack) = match level.clamp(1, 9) {
            1 => (0, false, Some(20)),
            2 => (1, false, Some(50)),
            3 => (2, true, Some(DEFAULT_REFIT_SLACK)),
            4 => (4, true, Some(DEFAULT_REFIT_SLACK)),
            5 => (DEFAULT_BUDGET, true, Some(DEFAULT_REFIT_SLACK)),
            6 => (16, true, Some(DEFAULT_REFIT_SLACK)),
            7 => (32, true, Some(DEFAULT_REFIT_SLACK)),
            8 => (64, true, None),
            _ => (256, true, None),
        };
        // From level 7 on the search looks at whole default-sized chunks:
        // a deeper search on a sample may find what re-fits the rest worse.
        let search_words = match level {
            ..=6 => SEARCH_WORDS,
            _ => MATCH_WORDS,
        };
        PackOptions {
            chunk_size: DEFAULT_CHUNK_BYTES,
            adapt_chunks: true,
            synth: SynthOptions {
                budget,
                refit_slack,
                search_words,
                partitions: level >= 3,
                columns: level >= 7,
                ..SynthOptions::default()
            },
            learn_prior,
            share_tables: level >= 3,
            bases: BaseSources::default(),
        }
    }
}
