//! A whole archive from arbitrary bytes: opening it (framing, trailer, index)
//! and reading all of it must give an error or the bytes it claims, never panic
//! or allocate from an unchecked length.
#![no_main]

use brevis::Archive;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("brevis-fuzz-{}.brv", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(archive) = Archive::open_unmapped(&path) {
        // Read in bounded pieces: the claimed length itself is untrusted.
        let mut buf = vec![0u8; 1 << 16];
        let mut at = 0;
        while at < archive.len().min(1 << 24) {
            match archive.read_at(at, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => at += n as u64,
            }
        }
    }
});
