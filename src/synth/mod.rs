//! Program synthesis: finds a small program that yields a target word stream.
//!
//! Synthesis is target-directed: an *expansion* picks an operator and derives, from
//! the target, the exact streams its children must yield, so any completion of the
//! children yields the target by construction. A bounded A* ([`astar`]) explores
//! partial programs in the order of a production prior learned from the checkpoint
//! itself ([`learn_prior`]); open holes are completed by their best *leaf* (a
//! constant or the smallest literal encoding), and the smallest complete program
//! wins.
//!
//! The entry points, one per job:
//!
//! - [`refit_or_search`]: a chunk's lane, as the packer finds it (templates
//!   from other chunks re-fit, else [`search_stream`]); then
//!   [`partition_rows`] offers its literals a Partition of the tensor's rows.
//! - [`split_records`]: a chunk's lane of bytes holding block-quantized
//!   weights (GGUF's blocks), its fields split apart where that is smaller.
//! - [`columns_in_classes`]: a chunk's lane of a matrix's bytes, its
//!   columns in classes where they differ in offset (per-channel zero points).
//! - [`search_stream`]: a stream without templates: the search on its first
//!   words, with a Match and a Mirror offered beside it.
//! - [`astar`]: the bounded A* search alone, with the productions it chose.
//! - [`learn_prior`]: the prior, from sample streams searched as packing
//!   searches them.
//! - [`leaf()`]: the cheapest program that stores a stream as it is.
//!
//! The rooms: `passes` holds the order of the passes; `cost` what they
//! weigh programs by; `options` how hard they search; `stream` what they
//! know of a stream besides its words; `search` the A* and `expand` the
//! operators it expands holes with (`palette`, `scaled` find two of them);
//! `leaf` and `sparse` the leaves; `refit` templates; `matches`, `mirror`,
//! `partition`, `columns` and `records` the nodes offered beside the search's program; `upcast`
//! the special case of bf16 values stored as f32; `learn`, `prior`,
//! `context` and `production` the prior.

#![forbid(unsafe_code)]

mod bound;
mod columns;
mod columnscan;
mod context;
mod cost;
mod expand;
mod leaf;
mod learn;
mod matches;
mod mirror;
mod options;
mod palette;
mod partition;
mod passes;
pub mod prior;
mod production;
mod records;
mod refit;
mod scaled;
mod search;
mod sparse;
mod stream;
mod upcast;

pub use columns::columns_in_classes;
pub use columnscan::{column_scan_program, column_updates};
pub use context::{Context, Position};
pub use cost::{
    cost, exact_cost, order0_bytes, plane_counts, prediction_slack, runs_to, strided_planes_cost,
};
pub use expand::{expansions, operators, Expansion, Operator};
pub use leaf::{leaf, sparse_leaf};
pub use learn::learn_prior;
pub use matches::{match_program, match_streams};
pub use mirror::{mirror_program, mirror_streams};
pub use options::{
    Order, SearchLimits, SynthOptions, DEFAULT_BUDGET, DEFAULT_REFIT_SLACK, MATCH_WORDS,
    SEARCH_WORDS,
};
pub use palette::palette_streams;
pub use partition::{partition_rows, MIN_GROUP};
pub use passes::{refit_or_search, search_stream};
pub use prior::Prior;
pub use production::Production;
pub use records::{split_records, Field, LAYOUTS};
pub use refit::Template;
pub use scaled::scaled_streams;
pub use search::{astar, Found};
pub use stream::{Columns, Hint};
