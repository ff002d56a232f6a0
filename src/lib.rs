//! Brevis: lossless, random-access compression of `.safetensors` checkpoints.
//!
//! Every chunk of a tensor is stored as a small typed program (see [`dsl`]) whose
//! execution regenerates the chunk's exact bytes; literal words inside programs are
//! entropy coded by [`codec`]. [`archive`] holds the `.brv` container and its
//! random-access reader; [`run`] packs and unpacks many files (a folder, a
//! cluster job's share, a store prefix); [`mount`] the FUSE filesystem that
//! serves archives as the original files.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod archive;
pub mod atomic;
pub mod codec;
pub mod dsl;
pub mod error;
pub mod input;
pub mod inspect;
#[cfg(feature = "mount")]
pub mod mount;
#[cfg(feature = "remote")]
pub mod remote;
pub mod run;
pub mod runs;
pub mod safetensors;
pub mod scratch;
pub mod signals;
pub mod space;
pub mod synth;
pub mod units;
pub mod wire;

pub use archive::{Archive, PackOptions, PackSummary};
pub use error::{Error, Result};
