//! The `.brv` container: a source file's bytes as independently decodable chunks,
//! each a program, with an index for random access. Byte layout: `docs/FORMAT.md`.
//!
//! `pack` writes archives; the rest reads them: `reader` opens one (and its
//! bases) for reads at any offset, `decode` turns a record back into its
//! chunk, `combine` and `rows` add back a base's bytes, `tables` frames the
//! index's shared code tables, `unpack` decodes and checks whole archives; `detach` does both.

mod combine;
mod decode;
mod detach;
mod format;
mod pack;
mod reader;
mod rows;
mod source;
mod tables;
mod unpack;

pub use combine::Combine;
pub use decode::{decode_record, program_limits, record_version};
pub use detach::detach;
pub use format::{
    assemble, BaseEntry, BaseSpan, ChunkEntry, Index, DIFFERENCE_VERSION, FORMAT_VERSION,
    HEAD_MAGIC, MATCH_VERSION, MAX_CHUNK_BYTES, MIRROR_VERSION, PARTITION_VERSION,
    QUANTIZED_VERSION, ROWS_VERSION, SEEDED_RANS_VERSION, SPARSE_VERSION, TABLES_VERSION,
    TRAILER_LEN,
};
pub use pack::{
    calibrate, encode_record, literal_fallbacks, pack_file, BaseOpener, BaseSources, PackOptions,
    PackSummary, CALIBRATION_BUDGET, DEFAULT_CHUNK_BYTES, DEFAULT_LEVEL, LEVELS,
};
pub use reader::{Archive, ReadBase, MAX_BASE_DEPTH, MAX_OPENED_BASES};
pub use rows::{RowMap, Run};
pub use source::{ByteSource, FileSource, LocalFiles, SourceOpener};
pub use unpack::{for_each_chunk, unpack_file, verify};
