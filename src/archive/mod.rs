//! The `.brv` container: a source file's bytes as independently decodable chunks,
//! each a program, with an index for random access. Byte layout: `docs/FORMAT.md`.

mod chunk;
mod format;
mod reader;
mod unpack;
mod writer;

pub use chunk::{decode_chunk, encode_chunk};
pub use format::{Index, Segment, HEAD_MAGIC, MAX_SEGMENT_BYTES, TRAILER_LEN};
pub use reader::Archive;
pub use unpack::{for_each_chunk, unpack_file, verify};
pub use writer::{
    calibrate, is_temp_name, pack_file, PackOptions, PackSummary, CALIBRATION_BUDGET,
    DEFAULT_CHUNK_BYTES,
};
