//! Compares the decoding speed of archives on a busy machine: decodes every
//! chunk of each archive in memory, taking them in turn for ROUNDS rounds, and
//! prints the median and least thread CPU time per archive. CPU time leaves
//! out the time other work holds the core, which made wall-clock medians
//! (benches/decode.rs) vary by 2x on the shared 2-core machine.
//!
//!   cargo run --release --example decode_cpu -- ROUNDS A.brv B.brv ...

use brevis::Archive;

/// CPU time this thread has used, in milliseconds.
fn thread_cpu_ms() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// Milliseconds of CPU time to decode every chunk of `archive` into `buffer`.
fn decode_all(archive: &Archive, buffer: &mut [u8]) -> f64 {
    let start = thread_cpu_ms();
    for (i, chunk) in archive.chunks().iter().enumerate() {
        let out = &mut buffer[..chunk.src_len as usize];
        archive.decode_chunk_into(i, out).expect("decodes");
    }
    thread_cpu_ms() - start
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: decode_cpu ROUNDS ARCHIVE...";
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).expect(usage);
    let paths: Vec<String> = args.collect();
    assert!(rounds > 0 && !paths.is_empty(), "{usage}");
    let archives: Vec<Archive> = paths
        .iter()
        .map(|p| Archive::open(p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect();
    let largest = archives
        .iter()
        .flat_map(|a| a.chunks().iter().map(|c| c.src_len))
        .max();
    let mut buffer = vec![0u8; largest.unwrap_or(0) as usize];
    let mut times = vec![Vec::with_capacity(rounds); archives.len()];
    for _ in 0..rounds {
        for (archive, times) in archives.iter().zip(&mut times) {
            times.push(decode_all(archive, &mut buffer));
        }
    }
    for (path, mut times) in paths.iter().zip(times) {
        times.sort_by(f64::total_cmp);
        let (median, least) = (times[times.len() / 2], times[0]);
        println!("{path}: median {median:.3} ms, least {least:.3} ms ({rounds} rounds)");
    }
}
