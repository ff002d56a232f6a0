//! Throughput of the literal codecs on synthetic streams shaped like bf16
//! checkpoint data: the exponent byte (~30 values, ~2.6 bits of entropy), the
//! low byte of mantissa (near-uniform over 256 values), the 7-bit mantissa
//! (near-uniform over 128 values) and whole 16-bit words
//! (thousands of distinct values). Counters are in words.

use brevis::codec::{self, Codec, Stats};
use divan::counter::ItemsCount;
use divan::{black_box, Bencher};

fn main() {
    print_sizes();
    divan::main();
}

/// The compressed size per codec, to sanity-check what the timings are for.
fn print_sizes() {
    for kind in KINDS {
        let (words, width) = stream(kind);
        let stats = Stats::new(&words, width);
        let sizes: Vec<String> = Codec::ALL
            .iter()
            .filter_map(|&c| {
                let size = codec::encoded_size(c, &words, width, &stats)?;
                Some(format!("{}={size}", c.name()))
            })
            .collect();
        println!(
            "{kind}: {N} words, distinct={:?}, {}",
            stats.distinct(),
            sizes.join(" ")
        );
    }
}

const N: usize = 131_072;
const KINDS: [&str; 4] = ["exponent", "mantissa", "mantissa7", "bf16"];

/// bf16 bit patterns of roughly normal weights (sum of uniforms, sd ~0.02).
fn bf16_words() -> Vec<u32> {
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32
    };
    (0..N)
        .map(|_| {
            let x = ((0..4).map(|_| uniform()).sum::<f32>() - 2.0) * 0.035;
            x.to_bits() >> 16
        })
        .collect()
}

/// The stream of `kind` and its width.
fn stream(kind: &str) -> (Vec<u32>, u32) {
    let words = bf16_words();
    match kind {
        "exponent" => (words.iter().map(|w| (w >> 7) & 0xff).collect(), 8),
        "mantissa" => (words.iter().map(|w| w & 0xff).collect(), 8),
        "mantissa7" => (words.iter().map(|w| w & 0x7f).collect(), 7),
        _ => (words, 16),
    }
}

fn bench_decode(bencher: Bencher, kind: &str, codec: Codec) {
    let (words, width) = stream(kind);
    let mut buf = Vec::new();
    assert!(codec::encode_with(codec, &words, width, &mut buf));
    let mut out = vec![0; words.len()];
    bencher.counter(ItemsCount::new(N)).bench_local(|| {
        codec::decode(black_box(&buf), width, &mut out).unwrap();
    });
    assert_eq!(out, words);
}

fn bench_encode(bencher: Bencher, kind: &str, codec: Codec) {
    let (words, width) = stream(kind);
    let mut buf = Vec::new();
    bencher.counter(ItemsCount::new(N)).bench_local(|| {
        buf.clear();
        codec::encode_with(codec, black_box(&words), width, &mut buf)
    });
}

#[divan::bench(args = KINDS)]
fn decode_huffman(bencher: Bencher, kind: &str) {
    bench_decode(bencher, kind, Codec::Huffman);
}

#[divan::bench(args = KINDS)]
fn decode_rans(bencher: Bencher, kind: &str) {
    bench_decode(bencher, kind, Codec::Rans);
}

#[divan::bench(args = KINDS)]
fn encode_huffman(bencher: Bencher, kind: &str) {
    bench_encode(bencher, kind, Codec::Huffman);
}

#[divan::bench(args = KINDS)]
fn encode_rans(bencher: Bencher, kind: &str) {
    bench_encode(bencher, kind, Codec::Rans);
}

/// Stats plus exact sizes of all four codecs: what the caller pays per candidate.
#[divan::bench(args = KINDS)]
fn stats_and_best(bencher: Bencher, kind: &str) {
    let (words, width) = stream(kind);
    bencher.counter(ItemsCount::new(N)).bench_local(|| {
        let stats = Stats::new(black_box(&words), width);
        codec::best(&words, width, &stats)
    });
}

/// Stats plus the Huffman size alone (no rANS simulation).
#[divan::bench(args = KINDS)]
fn stats_and_huffman_size(bencher: Bencher, kind: &str) {
    let (words, width) = stream(kind);
    bencher.counter(ItemsCount::new(N)).bench_local(|| {
        let stats = Stats::new(black_box(&words), width);
        codec::encoded_size(Codec::Huffman, &words, width, &stats)
    });
}

/// Stats alone: the histogram every candidate pays for.
#[divan::bench(args = KINDS)]
fn stats_only(bencher: Bencher, kind: &str) {
    let (words, width) = stream(kind);
    bencher
        .counter(ItemsCount::new(N))
        .bench_local(|| Stats::new(black_box(&words), width));
}

/// The exact rANS size alone, from prebuilt stats (its rank index built).
#[divan::bench(args = KINDS)]
fn rans_size(bencher: Bencher, kind: &str) {
    let (words, width) = stream(kind);
    let stats = Stats::new(&words, width);
    codec::encoded_size(Codec::Rans, &words, width, &stats);
    bencher
        .counter(ItemsCount::new(N))
        .bench_local(|| codec::encoded_size(Codec::Rans, black_box(&words), width, &stats));
}
