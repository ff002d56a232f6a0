//! Random reads through the library API: opens an archive and times `read_at` of
//! `LEN` bytes at pseudo-random offsets, printing the median and 90th percentile.
//!
//!   cargo run --release --example random_reads -- ARCHIVE [LEN] [COUNT]

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: random_reads ARCHIVE [LEN] [COUNT]");
        std::process::exit(2);
    };
    let len: usize = args.get(2).map_or(Ok(4096), |s| s.parse())?;
    let count: usize = args.get(3).map_or(Ok(2000), |s| s.parse())?;
    let archive = brevis::Archive::open(path)?;
    let mut buf = vec![0u8; len];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut micros = Vec::with_capacity(count);
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = x % archive.len().saturating_sub(len as u64).max(1);
        let started = Instant::now();
        archive.read_at(offset, &mut buf)?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    println!(
        "{path}: {count} reads of {len} bytes: median {:.1} us, p90 {:.1} us",
        at(0.5),
        at(0.9)
    );
    Ok(())
}
