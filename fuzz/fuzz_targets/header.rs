//! A safetensors header from arbitrary bytes: parsed or refused, never a panic.
#![no_main]

use brevis::safetensors::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse(data.len() as u64, |n| match data.get(..n as usize) {
        Some(head) => Ok(head.to_vec()),
        None => Err(std::io::ErrorKind::UnexpectedEof.into()),
    });
});
