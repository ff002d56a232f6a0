//! An archive's index from arbitrary bytes, as each format version reads
//! it (bases, row maps, code tables, chunk entries): an error or an index, never a panic
//! or an allocation from an unchecked length. (Whole archives reach the
//! index only past its checksum; this target reaches it at once.)
#![no_main]

use brevis::archive::{Index, FORMAT_VERSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for version in 1..=FORMAT_VERSION {
        if let Ok(index) = Index::decode(data, data.len() as u64, version) {
            // What it reads names only the bases and maps it has.
            for span in index.chunks.iter().filter_map(|c| c.base) {
                assert!((span.base as usize) < index.bases.len());
                assert!(span.rows.is_none_or(|m| (m as usize) < index.rows.len()));
            }
            // Code tables are framed within the index, none empty.
            let framed: usize = index.tables.iter().map(Vec::len).sum();
            assert!(framed <= data.len() && index.tables.iter().all(|t| !t.is_empty()));
        }
    }
});
