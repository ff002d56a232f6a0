//! Throughput of the literal codecs on synthetic streams shaped like bf16
//! checkpoint data: the exponent byte (~30 values, ~2.6 bits of entropy), the
//! low byte of mantissa (near-uniform over 256 values), the 7-bit mantissa
//! (near-uniform over 128 values) and whole 16-bit words
//! (thousands of distinct values). Counters are in words.

use brevis::archive;
use brevis::codec::{self, Codec, Stats};
use brevis::dsl::FloatFormat;
use brevis::safetensors::Layout;
use brevis::synth::{Hint, SynthOptions};
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
const KINDS: [&str; 5] = ["exponent", "mantissa", "mantissa7", "high12", "bf16"];

/// `n` roughly normal weights (sum of uniforms, sd ~0.02).
fn f32_values(n: usize) -> impl Iterator<Item = f32> {
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32
    };
    (0..n).map(move |_| ((0..4).map(|_| uniform()).sum::<f32>() - 2.0) * 0.035)
}

/// bf16 bit patterns of roughly normal weights.
fn bf16_words() -> Vec<u32> {
    f32_values(N).map(|x| x.to_bits() >> 16).collect()
}

/// The stream of `kind` and its width.
fn stream(kind: &str) -> (Vec<u32>, u32) {
    let words = bf16_words();
    match kind {
        "exponent" => (words.iter().map(|w| (w >> 7) & 0xff).collect(), 8),
        "mantissa" => (words.iter().map(|w| w & 0xff).collect(), 8),
        "mantissa7" => (words.iter().map(|w| w & 0x7f).collect(), 7),
        // The high field of bf16 words split 4 bits from the bottom.
        "high12" => (words.iter().map(|w| w >> 4).collect(), 12),
        _ => (words, 16),
    }
}

fn bench_decode(bencher: Bencher, kind: &str, codec: Codec) {
    let (words, width) = stream(kind);
    bench_decode_words(bencher, &words, width, codec);
}

fn bench_decode_words(bencher: Bencher, words: &[u32], width: u32, codec: Codec) {
    let mut buf = Vec::new();
    assert!(codec::encode_with(codec, words, width, &mut buf));
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

/// `N` uniform words of `width` bits.
fn uniform_words(width: u32) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..N)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u32 & (u32::MAX >> (32 - width))
        })
        .collect()
}

/// Uniform words of `width` bits, bit-packed, decoded into u32 words.
#[divan::bench(args = [1, 4, 7, 23])]
fn decode_bitpack(bencher: Bencher, width: u32) {
    bench_decode_words(bencher, &uniform_words(width), width, Codec::BitPack);
}

/// Uniform words of `width` bits bit-packed (F32's mantissas are 21 and 23
/// bits wide, BF16's 7).
#[divan::bench(args = [1, 4, 7, 21, 23])]
fn encode_bitpack(bencher: Bencher, width: u32) {
    let words = uniform_words(width);
    let mut buf = Vec::new();
    bencher.counter(ItemsCount::new(N)).bench_local(|| {
        buf.clear();
        codec::encode_with(Codec::BitPack, black_box(&words), width, &mut buf)
    });
}

/// A whole 256 KiB chunk of weights as stored (f32: sign, exponent and
/// mantissa fields; bf16: its own program), decoded into element bytes.
/// Counter in elements.
#[divan::bench(args = ["f32", "bf16"])]
fn decode_record(bencher: Bencher, dtype: &str) {
    let (bytes, layout, float) = match dtype {
        "f32" => {
            let bytes: Vec<u8> = f32_values(N / 2).flat_map(f32::to_le_bytes).collect();
            (bytes, Layout::Word, FloatFormat::F32)
        }
        _ => {
            let words = bf16_words();
            let bytes = words.iter().flat_map(|&w| (w as u16).to_le_bytes());
            (bytes.collect(), Layout::Half, FloatFormat::Bf16)
        }
    };
    let hint = Hint {
        float: Some(float),
        rows: None,
        columns: None,
    };
    let record = archive::encode_record(&bytes, layout, hint, &SynthOptions::default());
    let mut out = vec![0u8; bytes.len()];
    let elements = bytes.len() / layout.element_bytes();
    bencher.counter(ItemsCount::new(elements)).bench_local(|| {
        archive::decode_record(
            black_box(&record),
            layout,
            (archive::FORMAT_VERSION, &[]),
            &mut out,
        )
        .unwrap();
    });
    assert!(out == bytes);
}

#[divan::bench(args = KINDS)]
fn encode_huffman(bencher: Bencher, kind: &str) {
    bench_encode(bencher, kind, Codec::Huffman);
}

#[divan::bench(args = KINDS)]
fn encode_rans(bencher: Bencher, kind: &str) {
    bench_encode(bencher, kind, Codec::Rans);
}

/// Stats plus the choice of codec (exact sizes of those whose floor may win):
/// what the caller pays per candidate.
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
