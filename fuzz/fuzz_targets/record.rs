//! A chunk record from arbitrary bytes: the program decoder, every codec and the
//! executor must return an error or bytes, never panic or run away.
#![no_main]

use brevis::archive::decode_record;
use brevis::safetensors::Layout;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [pick, lo, hi, record @ ..] = data else {
        return;
    };
    let layout = [Layout::Bytes, Layout::Half, Layout::Word, Layout::Double][*pick as usize % 4];
    // Up to 64 Ki elements: enough for every operator, small enough to run fast.
    let elements = 1 + u16::from_le_bytes([*lo, *hi]) as usize;
    let mut out = vec![0u8; elements * layout.element_bytes()];
    let _ = decode_record(record, layout, (brevis::archive::FORMAT_VERSION, &[]), &mut out);
});
