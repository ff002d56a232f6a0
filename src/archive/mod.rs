//! The `.brv` container: a source file's bytes as independently decodable chunks,
//! each a program, with an index for random access. Byte layout: `docs/FORMAT.md`.

mod base;
mod combine;
mod decode;
mod encode;
mod format;
mod pipeline;
mod reader;
mod run_bases;
mod source;
mod unpack;
mod writer;

pub use base::{base_archives, detach, BaseSources};
pub use combine::Combine;
pub use decode::{decode_record, program_limits, record_version};
pub use encode::{encode_record, literal_fallbacks};
pub use format::{
    assemble, BaseEntry, BaseSpan, ChunkEntry, Index, DIFFERENCE_VERSION, FORMAT_VERSION,
    HEAD_MAGIC, MATCH_VERSION, MAX_CHUNK_BYTES, MIRROR_VERSION, PARTITION_VERSION,
    QUANTIZED_VERSION, SEEDED_RANS_VERSION, SPARSE_VERSION, TRAILER_LEN,
};
pub use reader::{Archive, ReadBase, MAX_BASE_DEPTH, MAX_OPENED_BASES};
pub use run_bases::{refuse_orphaning, RunBases};
pub use source::{ByteSource, FileSource, LocalFiles, SourceOpener};
pub use unpack::{for_each_chunk, unpack_file, verify};
pub use writer::{
    calibrate, pack_file, PackOptions, PackSummary, CALIBRATION_BUDGET, DEFAULT_CHUNK_BYTES,
    DEFAULT_LEVEL, LEVELS,
};
