//! Packing arbitrary chunk bytes: the search and every coder must produce a
//! record that decodes back to the bytes, never one that falls back to plain
//! literals (which would mean a search or coder bug) and never a panic. The
//! input's second byte gives the rows the words lie in (none below 2), so
//! that rows that mirror themselves become Mirrors, and columns that differ
//! take classes.
#![no_main]

use brevis::archive::{decode_record, encode_record, literal_fallbacks};
use brevis::safetensors::Layout;
use brevis::synth::{Columns, Hint, SynthOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [pick, row, bytes @ ..] = data else {
        return;
    };
    let layout = Layout::ALL[*pick as usize % Layout::ALL.len()];
    let whole = bytes.len() / layout.element_bytes() * layout.element_bytes();
    let bytes = &bytes[..whole];
    if bytes.is_empty() {
        return;
    }
    let rows = (*row >= 2).then_some(*row as usize);
    let columns = rows.map(|row| Columns { row, first: 0 });
    let hint = Hint { float: None, rows, columns };
    let record = encode_record(bytes, layout, hint, &SynthOptions::default());
    assert_eq!(literal_fallbacks(), 0, "a searched record did not decode back");
    let mut out = vec![0u8; bytes.len()];
    decode_record(&record, layout, (brevis::archive::FORMAT_VERSION, &[]), &mut out).expect("a packed record decodes");
    assert!(out == bytes, "a packed record decodes to other bytes");
});
