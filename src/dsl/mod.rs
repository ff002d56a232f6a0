//! The tensor language: typed programs whose execution yields a stream of words.
//!
//! A program of type `b[n]` yields `n` words of `b` bits (1 <= b <= 32). Types flow
//! top-down: a parent's type fixes its children's types, so the encoding stores only
//! what the parent cannot imply (a Concat's part lengths). See `docs/FORMAT.md`.
//!
//! `program` holds the trees, `types` their types; `exec` runs them, with
//! the operators that place their children's words in a file each
//! (`matches`, `sparse`, `partition`, `mirror`, `palette`), the Scaled
//! operator's arithmetic in `scaled` and Map, Scan and Merge in `ops`.
//! `encode` is the canonical encoder and `decode` the strict decoder of
//! untrusted programs; both use the node tags in `tag`.

#![forbid(unsafe_code)]

mod decode;
mod encode;
mod exec;
mod matches;
mod mirror;
mod ops;
mod palette;
mod partition;
mod program;
mod scaled;
mod sparse;
mod tag;
mod types;

pub use decode::{decode_program, decode_program_in, EncodedLit, Limits};
pub use encode::{encode_program, encoded_len, exact_len};
pub use exec::{execute, with_scratch, LiteralSource, Refused};
pub use matches::run_matches;
pub use mirror::{mirror_rows, Mirroring};
pub use ops::{Collect, Fields, FloatFormat, InverseFold, MapOp, Max, ScanOp};
pub use palette::{palette_table_len, palette_values_len, MAX_PALETTE_INDEX_WIDTH};
pub use partition::{gather_partition, MAX_PARTITION_CLASSES};
pub use program::{describe, Literal, Op, Program};
pub use scaled::{round_to, scaled_word, to_f32, MAX_SCALED_INT_WIDTH, SCALED_FORMATS};
pub use sparse::place_sparse;
pub use types::{count_width, mask, Type, MAX_WIDTH};
