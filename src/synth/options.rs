//! How hard and in what order the passes search: the options a packer sets
//! (from its effort level and the command line) and their defaults.

use super::prior::Prior;
use crate::codec;
use std::sync::Arc;

/// Expansions per chunk after the root's (see docs/PERFORMANCE.md, *Search settings*).
pub const DEFAULT_BUDGET: usize = 8;

/// A re-fit is kept when it costs at most 1 + 1/this times its template per
/// word: that close to its template, a search of its own has little left
/// to find, and re-fitting takes a fraction of a search's time (measured in
/// docs/PERFORMANCE.md, *Search settings*).
pub const DEFAULT_REFIT_SLACK: usize = 100;

/// Words a search looks at by default: a longer stream is searched on its
/// first this many, and the program found is re-fit to all of it. The
/// search's cost grows with its words, the program it finds hardly does
/// (see *Where packing's time goes* in docs/PERFORMANCE.md); the highest
/// effort levels look at [`MATCH_WORDS`].
pub const SEARCH_WORDS: usize = 1 << 16;

/// Words beyond which no Match node is tried: the matcher's streams are
/// searched like any stream, and every candidate holds streams of the
/// words' length, so the memory stays bounded whatever `--chunk-size` is.
/// No stream of a default-sized chunk (256 KiB) is longer.
pub const MATCH_WORDS: usize = 1 << 18;

/// Words beyond which a ColumnScan's updates are offered no Match: no
/// stream of 16-bit or wider words of a chunk the packer widens (to 1 MiB,
/// with a remainder under half of it) is longer.
pub const SCAN_MATCH_WORDS: usize = 1 << 20;

/// How the search's open list is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// `g + h` with the prior's production costs.
    AStar,
    /// Smallest size first (best-first without the A* order): a pending state is
    /// ranked by its parent's size until materialized.
    EstimatedSize,
}

/// Bounds that keep one search finite. The holes and words bound what the
/// budget spends; the root operators a prior set aside are derived after
/// it, past them (each a few streams of the target's length).
#[derive(Clone, Copy, Debug)]
pub struct SearchLimits {
    /// Holes created per search.
    pub max_holes: usize,
    /// Nesting depth of expanded holes.
    pub max_depth: usize,
    /// Words held by all holes' streams, as a multiple of the target's length.
    pub max_words_factor: usize,
    /// Entries in the open list.
    pub max_open: usize,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits {
            max_holes: 4096,
            max_depth: 6,
            max_words_factor: 48,
            max_open: 1 << 16,
        }
    }
}

/// How hard and in what order to search.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    /// States expanded after the root's own expansion; 0 is the root-only search.
    pub budget: usize,
    pub order: Order,
    /// Production costs; uniform when nothing was learned.
    pub prior: Arc<Prior>,
    /// Below the root, productions the prior gives less probability are skipped.
    pub min_q: f64,
    pub limits: SearchLimits,
    /// Re-fit a tensor's first program to its other chunks where it costs at
    /// most `1 + 1/refit_slack` times as much per word (see
    /// [`super::Template`]); None searches every chunk.
    pub refit_slack: Option<usize>,
    /// Words of a stream the search looks at (see [`super::search_stream`]).
    pub search_words: usize,
    /// Offer the literals of matrix chunks a Partition of their rows (see
    /// [`super::partition_rows`]).
    pub partitions: bool,
    /// Offer matrices of bytes a Partition of their columns in classes (see
    /// [`super::columns_in_classes`]): smaller where columns differ in
    /// offset, but its single-byte groups decode at about half the speed.
    pub columns: bool,
    /// The codecs the search sizes its leaves with (see [`super::learn_prior`]).
    pub leaf_codecs: &'static [codec::Codec],
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            budget: DEFAULT_BUDGET,
            order: Order::AStar,
            prior: Arc::new(Prior::uniform()),
            min_q: 0.02,
            limits: SearchLimits::default(),
            refit_slack: Some(DEFAULT_REFIT_SLACK),
            search_words: SEARCH_WORDS,
            partitions: true,
            columns: false,
            leaf_codecs: &codec::SIZING_ORDER,
        }
    }
}
