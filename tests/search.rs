//! The search: its programs always reproduce their targets, budget 0 is the
//! root-only search, results do not depend on threads, and real structure
//! (constant regions, periodic rows, zero padding, upcast floats, ranges, position
//! ids) yields programs far smaller than the root-only search finds.

mod common;

use brevis::dsl::{encoded_len, mask, Literal, Mirroring, Op, Program};
use brevis::synth::{
    self, operators, runs_to, Hint, Order, Production, SearchLimits, SynthOptions,
};
use proptest::prelude::*;
use std::sync::Arc;

fn opts(budget: usize) -> SynthOptions {
    SynthOptions {
        budget,
        ..SynthOptions::default()
    }
}

/// What the search minimizes (encoded bytes plus decode penalties).
fn size(p: &Program<Literal>) -> usize {
    synth::exact_cost(p)
}

/// Bits of f32 weights drawn from a normal distribution (sigma 0.02), as in a
/// trained layer: about 20 exponents in use, mantissas uniform.
fn weights(seed: u64, n: usize) -> Vec<u32> {
    let bytes = common::noise(seed, n * 8);
    bytes
        .chunks(8)
        .map(|b| {
            let u1 = (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64 + 1.0) / 4294967297.0;
            let u2 = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as f64 / 4294967296.0;
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            ((z * 0.02) as f32).to_bits()
        })
        .collect()
}

struct Case {
    name: &'static str,
    words: Vec<u32>,
    width: u32,
    hint: Hint,
    /// The default search must need at most this fraction of the root-only cost.
    at_most: f64,
}

const F32: Hint = Hint {
    float: Some(brevis::dsl::FloatFormat::F32),
    rows: None,
    columns: None,
};
const INT: Hint = Hint {
    float: None,
    rows: None,
    columns: None,
};

fn structured_cases() -> Vec<Case> {
    let n = 16384;
    let w = weights(1, n);
    let mut constant_regions = w.clone();
    constant_regions[2000..6000].fill(0x3f80_0000);
    constant_regions[9000..14000].fill(0);
    let row: Vec<u32> = weights(2, 256);
    let periodic_rows: Vec<u32> = row.iter().copied().cycle().take(n).collect();
    let mut zero_padding = w.clone();
    zero_padding[n * 5 / 8..].fill(0);
    let upcast: Vec<u32> = w.iter().map(|x| x & 0xffff_0000).collect();
    let arange_f32: Vec<u32> = (0..n).map(|i| (i as f32).to_bits()).collect();
    let position_ids: Vec<u32> = (0..n as u32).map(|i| i % 512).collect();
    vec![
        Case {
            name: "constant regions",
            words: constant_regions,
            width: 32,
            hint: F32,
            at_most: 0.9,
        },
        Case {
            name: "periodic rows",
            words: periodic_rows,
            width: 32,
            hint: F32,
            at_most: 0.9,
        },
        Case {
            name: "zero padding",
            words: zero_padding,
            width: 32,
            hint: F32,
            at_most: 0.9,
        },
        // Byte planes at the root already isolate the zero low half.
        Case {
            name: "upcast floats",
            words: upcast,
            width: 32,
            hint: F32,
            at_most: 1.0,
        },
        Case {
            name: "arange (f32)",
            words: arange_f32,
            width: 32,
            hint: F32,
            at_most: 0.1,
        },
        // The root-only search already finds most of it: a Scan whose
        // updates are one word but every 512th, a Sparse leaf (169 of
        // 65,536 bytes); the default's copies of earlier words take less.
        Case {
            name: "position ids",
            words: position_ids,
            width: 32,
            hint: INT,
            at_most: 0.95,
        },
    ]
}

/// The search as `pack` runs it: a prior learned from the data, then A*.
fn packed(case: &Case, budget: usize) -> Program<Literal> {
    let sample = [(case.words.clone(), case.width, case.hint)];
    let prior = synth::learn_prior(&sample, brevis::archive::CALIBRATION_BUDGET);
    let opts = SynthOptions {
        budget,
        prior: Arc::new(prior),
        ..SynthOptions::default()
    };
    synth::search_stream(&case.words, case.width, case.hint, &opts)
}

#[test]
fn structure_is_found_beyond_the_root() {
    let mut report = Vec::new();
    for case in structured_cases() {
        // The root-only search (without the Match the packer may offer
        // beside it, which finds runs of one word too).
        let root = synth::astar(&case.words, case.width, case.hint, &opts(0)).program;
        let deep = packed(&case, synth::DEFAULT_BUDGET);
        let best_first = synth::search_stream(
            &case.words,
            case.width,
            case.hint,
            &SynthOptions {
                order: Order::EstimatedSize,
                ..opts(256)
            },
        );
        let bytes = case.words.len() * 4;
        report.push(format!(
            "{:<18} {bytes:>7} bytes: root-only {:>6}, default {:>6}, best-first 256 {:>6}  {}",
            case.name,
            size(&root),
            size(&deep),
            size(&best_first),
            deep
        ));
        assert!(runs_to(&deep, &case.words));
        let limit = (size(&root) as f64 * case.at_most) as usize;
        assert!(
            size(&deep) <= limit,
            "{}: {} > {limit}",
            case.name,
            size(&deep)
        );
    }
    eprintln!("{}", report.join("\n"));
}

/// Encodes, decodes and runs `p`: what an archive reader would get.
fn decoded(p: &Program<Literal>) -> Vec<u32> {
    let mut bytes = Vec::new();
    brevis::dsl::encode_program(p, &mut bytes);
    let (q, _) = brevis::dsl::decode_program(&bytes, p.ty, Default::default()).unwrap();
    let mut out = vec![0u32; p.ty.len];
    brevis::dsl::execute(&q, &mut out).unwrap();
    out
}

fn leaf_len(words: &[u32], width: u32) -> usize {
    encoded_len(&synth::leaf(words.into(), width).0)
}

/// The root-only candidates of `t` (its leaf, and each expansion at the
/// root completed by leaves) as (weighed cost, exact cost): the search
/// weighs rANS literals at predicted sizes.
fn root_only(t: &[u32], width: u32, hint: Hint) -> Vec<(usize, usize)> {
    let target: Arc<[u32]> = t.into();
    let mut candidates: Vec<Program<Literal>> = synth::expansions(&target, width, hint, None)
        .iter()
        .map(|e| e.complete_with(|s, w| synth::leaf(s, w).0))
        .collect();
    candidates.push(synth::leaf(target.clone(), width).0);
    candidates
        .iter()
        .map(|p| (synth::cost(p), size(p)))
        .collect()
}

/// The smallest program over the whole space of canonical expansions down to
/// `depth`, by exhaustive recursion (subprograms are independent, so each hole's
/// best is the best of its leaf and of each operator over its children's bests).
fn brute_force(
    t: &[u32],
    width: u32,
    hint: Hint,
    parent: Option<Production>,
    depth: usize,
) -> usize {
    let mut best = leaf_len(t, width);
    if depth == 0 {
        return best;
    }
    for operator in operators(t, width, hint, parent, &|_| true) {
        let kids = operator.children(t, width);
        let leaves: Vec<_> = kids
            .iter()
            .map(|(ty, s)| synth::leaf(s.clone(), ty.width).0)
            .collect();
        let ty = brevis::dsl::Type {
            width,
            len: t.len(),
        };
        let header = synth::cost(&operator.build(ty, leaves.clone()))
            - leaves.iter().map(synth::cost).sum::<usize>();
        let kids_best: usize = kids
            .iter()
            .map(|(ty, s)| brute_force(s, ty.width, hint, Some(operator.production()), depth - 1))
            .sum();
        best = best.min(header + kids_best);
    }
    best
}

/// Kinds of tensor [`generated`] makes.
const KINDS: usize = 6;

/// The default limits, or with the search's words bounded at `factor`
/// times its target's.
fn words_bound(factor: Option<usize>) -> SearchLimits {
    let default = SearchLimits::default();
    SearchLimits {
        max_words_factor: factor.unwrap_or(default.max_words_factor),
        ..default
    }
}

/// A stream of one of several kinds of tensor: f32 weights, BF16 values
/// stored as f32, an f32 range, position ids, weights with zeroed regions,
/// bf16 weights.
fn generated(kind: usize, n: usize, seed: u64) -> (Vec<u32>, u32, Hint) {
    let w = weights(seed, n);
    let bf16 = Hint {
        float: Some(brevis::dsl::FloatFormat::Bf16),
        rows: None,
        columns: None,
    };
    match kind {
        0 => (w, 32, F32),
        1 => (w.iter().map(|x| x & 0xffff_0000).collect(), 32, F32),
        2 => (
            (0..n).map(|i| (i as f32 * 0.5).to_bits()).collect(),
            32,
            F32,
        ),
        3 => ((0..n as u32).map(|i| i % 77).collect(), 32, INT),
        4 => {
            let mut z = w;
            z[n / 3..n / 2].fill(0);
            (z, 32, F32)
        }
        _ => (w.iter().map(|x| x >> 16).collect(), 16, bf16),
    }
}

fn small_stream() -> impl Strategy<Value = (u32, Vec<u32>)> {
    (1u32..=32).prop_flat_map(|width| {
        let word = prop_oneof![
            2 => any::<u32>().prop_map(move |w| w & mask(width)),
            3 => (0u32..3).prop_map(move |w| w & mask(width)),
        ];
        (Just(width), prop::collection::vec(word, 1..400))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn every_search_result_reproduces_its_target(
        (width, t) in small_stream(),
        budget in 0usize..40,
        best_first: bool,
        float in prop::option::of(0usize..5),
    ) {
        let hint = Hint { float: float.map(|f| brevis::dsl::FloatFormat::ALL[f]), rows: None, columns: None };
        let order = if best_first { Order::EstimatedSize } else { Order::AStar };
        let sample = [(t.clone(), width, hint)];
        let prior = Arc::new(synth::learn_prior(&sample, 8));
        for prior in [Arc::new(synth::Prior::uniform()), prior] {
            let opts = SynthOptions { budget, order, prior, ..SynthOptions::default() };
            let found = synth::astar(&t, width, hint, &opts);
            prop_assert!(runs_to(&found.program, &t));
            prop_assert_eq!(decoded(&found.program), t.clone());
            prop_assert_eq!(found.productions.len(), found.program.node_count());
        }
    }

    #[test]
    fn budget_zero_is_the_root_only_search((width, t) in small_stream(), float in prop::option::of(0usize..5)) {
        let hint = Hint { float: float.map(|f| brevis::dsl::FloatFormat::ALL[f]), rows: None, columns: None };
        let found = synth::astar(&t, width, hint, &opts(0)).program;
        // No larger than any candidate of the least weight, and no smaller
        // than the smallest candidate.
        let candidates = root_only(&t, width, hint);
        let least = candidates.iter().map(|c| c.0).min().unwrap();
        let lightest = candidates.iter().filter(|c| c.0 == least).map(|c| c.1).min().unwrap();
        let smallest = candidates.iter().map(|c| c.1).min().unwrap();
        prop_assert!(size(&found) <= lightest && size(&found) >= smallest,
            "{} not in {smallest}..={lightest}", size(&found));
        // A Match, where the packer offers one, is kept only if smaller.
        let packed = synth::search_stream(&t, width, hint, &opts(0));
        prop_assert!(size(&packed) <= size(&found));
        prop_assert!(runs_to(&packed, &t));
    }

    /// A prior may order the search but never make it worse than the root's
    /// best: the default search under a prior learned from another stream
    /// (which may rank this stream's best production as unlikely) is never
    /// larger than the root-only search, also where its budget fills the
    /// search's bounds on words (`factor`) before the unlikely operators are tried.
    #[test]
    fn a_learned_prior_never_loses_to_the_root_only_search(
        (kind, other, n, seed) in (0usize..KINDS, 0usize..KINDS, 64usize..3000, any::<u64>()),
        budget in 0usize..40,
        factor in prop::option::of(2usize..16),
    ) {
        let (t, width, hint) = generated(kind, n, seed);
        let sample = [generated(other, 2048, seed ^ 1)];
        let prior = Arc::new(synth::learn_prior(&sample, brevis::archive::CALIBRATION_BUDGET));
        let limits = words_bound(factor);
        let found = synth::astar(&t, width, hint, &SynthOptions { budget, prior, limits, ..opts(0) });
        let root = synth::astar(&t, width, hint, &SynthOptions { limits, ..opts(0) });
        prop_assert!(size(&found.program) <= size(&root.program),
            "{} > {} (kind {kind}, prior from kind {other})", size(&found.program), size(&root.program));
    }

    /// A larger budget expands the same states first, and more after: its
    /// program is never exactly larger, though the search weighs rANS
    /// literals at predicted sizes (it keeps a best only when exactly smaller).
    /// So also where the larger budget fills the search's bounds on words
    /// (`factor`) and the smaller one does not.
    #[test]
    fn a_larger_budget_is_never_larger(
        (kind, other, n, seed) in (0usize..KINDS, 0usize..KINDS, 2000usize..20000, any::<u64>()),
        budget in 0usize..6,
        extra in 1usize..30,
        factor in prop::option::of(2usize..16),
    ) {
        let (t, width, hint) = generated(kind, n, seed);
        let sample = [generated(other, 2048, seed ^ 1)];
        let prior = Arc::new(synth::learn_prior(&sample, brevis::archive::CALIBRATION_BUDGET));
        let limits = words_bound(factor);
        let opts = |budget| SynthOptions { budget, prior: prior.clone(), limits, ..opts(0) };
        let small = synth::astar(&t, width, hint, &opts(budget)).program;
        let large = synth::astar(&t, width, hint, &opts(budget + extra)).program;
        prop_assert!(size(&large) <= size(&small), "budget {}: {} > budget {budget}: {}",
            budget + extra, size(&large), size(&small));
    }

    #[test]
    fn unbounded_search_matches_brute_force(
        width in 1u32..=8,
        t in prop::collection::vec(0u32..6, 1..10),
    ) {
        let t: Vec<u32> = t.into_iter().map(|w| w & mask(width)).collect();
        let hint = Hint { float: None, rows: None, columns: None };
        let depth = 2;
        let opts = SynthOptions {
            budget: 1 << 20,
            limits: SearchLimits { max_depth: depth, ..SearchLimits::default() },
            ..opts(0)
        };
        let found = synth::search_stream(&t, width, hint, &opts);
        prop_assert_eq!(size(&found), brute_force(&t, width, hint, None, depth));
    }
}

/// A stream longer than the search looks at: the program found on its start
/// is re-fit to all of it, and still finds the structure of the whole.
#[test]
fn long_streams_are_searched_on_their_start_and_re_fit() {
    let hint = Hint {
        float: None,
        rows: None,
        columns: None,
    };
    let n = 2 * synth::SEARCH_WORDS + 5;
    let arange: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(3) + 17).collect();
    let p = synth::search_stream(&arange, 32, hint, &opts(8));
    assert!(runs_to(&p, &arange));
    let bytes = encoded_len(&p);
    assert!(bytes < 256, "a range of {n} words in {bytes} bytes");
    let w = weights(5, n);
    let p = synth::search_stream(
        &w,
        32,
        Hint {
            float: Some(brevis::dsl::FloatFormat::F32),
            rows: None,
            columns: None,
        },
        &opts(8),
    );
    assert!(runs_to(&p, &w));
    assert!(
        size(&p) < leaf_len(&w, 32),
        "weights re-fit no larger than a literal"
    );
}

/// Weights quantized to 15 levels per group of 64 and stored back as f32 (a
/// dequantized checkpoint): the search finds them as a scale per group times
/// small integers, far smaller than the best it finds for the weights
/// before quantization, and the re-fit of its template to another such chunk
/// keeps its Scaled node.
#[test]
fn dequantized_weights_become_scaled_integers() {
    let dequantized = |seed| -> Vec<u32> {
        weights(seed, 16384)
            .chunks(64)
            .flat_map(|g| {
                let g: Vec<f32> = g.iter().map(|&b| f32::from_bits(b)).collect();
                let scale = g.iter().fold(0f32, |m, x| m.max(x.abs())) / 7.0;
                g.into_iter()
                    .map(move |x| ((x / scale).round() * scale).to_bits())
            })
            .collect()
    };
    let t = dequantized(3);
    let p = packed(&case_of("dequantized", &t), synth::DEFAULT_BUDGET);
    assert!(runs_to(&p, &t));
    assert!(matches!(p.op, Op::Scaled { group: 64, .. }), "{p}");
    let without = synth::search_stream(&weights(3, 16384), 32, F32, &opts(synth::DEFAULT_BUDGET));
    assert!(
        size(&p) * 5 < size(&without),
        "scaled {} bytes, plain weights {}",
        size(&p),
        size(&without)
    );
    let other = dequantized(4);
    let refit = synth::Template::of(&p)
        .apply(&other[..].into())
        .expect("re-fits");
    assert!(runs_to(&refit, &other));
    assert!(matches!(refit.op, Op::Scaled { .. }));
}

/// Each group of 128 words drawn from 8 values of its own (a per-group
/// codebook, not multiples of one scale): the search finds a Palette.
#[test]
fn per_group_codebooks_become_a_palette() {
    let w = weights(7, 16384 + 8 * 128);
    let t: Vec<u32> = (0..16384)
        .map(|i| {
            let book = &w[16384 + (i / 128) * 8..][..8];
            book[(w[i] as usize >> 7) % 8]
        })
        .collect();
    let p = packed(&case_of("codebooks", &t), synth::DEFAULT_BUDGET);
    assert!(runs_to(&p, &t));
    assert!(matches!(p.op, Op::Palette { .. }), "{p}");
    assert!(size(&p) * 4 < t.len() * 4, "{} bytes", size(&p));
}

fn case_of(name: &'static str, t: &[u32]) -> Case {
    Case {
        name,
        words: t.to_vec(),
        width: 32,
        hint: F32,
        at_most: 1.0,
    }
}

/// Rows of a windowed cosine basis (as an STFT's convolution weights hold):
/// each row's second half mirrors its first and rows share values column by
/// column, so most words repeat an earlier word, but seldom two in a row.
/// The packer stores it as a Match, far smaller than the search's program,
/// and a JSON-like byte stream of repeated names too; plain weights are
/// not even parsed into copies.
#[test]
fn repeated_words_become_a_match() {
    let n = 64usize;
    let t: Vec<u32> = (0..48)
        .flat_map(|k| {
            (0..n).map(move |i| {
                let window = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos();
                let phase = 2.0 * std::f64::consts::PI * ((k * i) % n) as f64 / n as f64;
                ((window * phase.cos()) as f32).to_bits()
            })
        })
        .collect();
    let opts = opts(synth::DEFAULT_BUDGET);
    let p = synth::search_stream(&t, 32, F32, &opts);
    assert!(runs_to(&p, &t));
    assert!(matches!(p.op, Op::Match { .. }), "{p}");
    let plain = synth::astar(&t, 32, F32, &opts).program;
    assert!(
        size(&p) * 4 < size(&plain) * 3,
        "{} vs {}",
        size(&p),
        size(&plain)
    );
    // A header's worth of JSON: names and offsets that repeat.
    let json: String = (0..60)
        .map(|i| format!("\"layer.{}.attention.weight\":{{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[{},{}]}},", i % 12, i * 16384, (i + 1) * 16384))
        .collect();
    let bytes: Vec<u32> = json.bytes().map(u32::from).collect();
    let p = synth::search_stream(&bytes, 8, INT, &opts);
    assert!(runs_to(&p, &bytes));
    assert!(matches!(p.op, Op::Match { .. }), "{p}");
    // Weights: no Match, the search's program as before.
    let w = weights(5, 16384);
    let p = synth::search_stream(&w, 32, F32, &opts);
    assert_eq!(p, synth::astar(&w, 32, F32, &opts).program);
}

/// A basis of cosines and sines of `n` columns, `2 * (n / 2 + 1)` rows,
/// windowed by `a - (1 - a) cos` (0.5 Hann's, 0.54 Hamming's), made as an
/// STFT's is: each row's columns past `n / 2` are its columns below
/// mirrored (column `n - i` is column `i`), negated in the sine rows but
/// where they are zero.
fn fourier_basis(n: usize, a: f64) -> Vec<u32> {
    let half = n / 2 + 1;
    (0..2 * half)
        .flat_map(|row| {
            let (k, sine) = (row % half, row >= half);
            let head: Vec<f32> = (0..half)
                .map(|i| {
                    let tau = 2.0 * std::f64::consts::PI;
                    let window = a - (1.0 - a) * (tau * i as f64 / n as f64).cos();
                    let phase = tau * ((k * i) % n) as f64 / n as f64;
                    (window * if sine { phase.sin() } else { phase.cos() }) as f32
                })
                .collect();
            let tail = (half..n).map(|i| head[n - i]);
            let tail = tail.map(|x| if sine && x != 0.0 { -x } else { x });
            head.clone()
                .into_iter()
                .chain(tail)
                .map(f32::to_bits)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Rows that are their own mirror image become a Mirror where the stream's
/// rows are known, far smaller than the program found without them, and
/// its template re-fits another chunk of the same rows; a palindrome's rows
/// (about their middle) too. Weights in rows are left as they were.
#[test]
fn rows_that_mirror_themselves_become_a_mirror() {
    let opts = opts(synth::DEFAULT_BUDGET);
    let n = 128;
    let t = fourier_basis(n, 0.5);
    let rows = |row| Hint {
        rows: Some(row),
        ..F32
    };
    let p = synth::search_stream(&t, 32, rows(n), &opts);
    assert!(runs_to(&p, &t));
    let Op::Mirror { at, .. } = p.op else {
        panic!("not a mirror: {p}");
    };
    assert_eq!((at.row, at.tail, at.pivot), (n, n / 2 - 1, n));
    let plain = synth::search_stream(&t, 32, F32, &opts);
    assert!(
        size(&p) * 4 < size(&plain) * 3,
        "{} vs {}",
        size(&p),
        size(&plain)
    );
    // Another window's basis re-fits its template.
    let hamming: Arc<[u32]> = fourier_basis(n, 0.54).into();
    let refit = synth::Template::of(&p).apply(&hamming).expect("re-fits");
    assert!(runs_to(&refit, &hamming), "{refit}");
    assert!(matches!(refit.op, Op::Mirror { .. }), "{refit}");
    // Palindromes: rows of 33 whose last 16 words mirror their first 16.
    let w = weights(9, 64 * 17);
    let t: Vec<u32> = (w.chunks(17))
        .flat_map(|h| {
            h.iter()
                .chain(h[..16].iter().rev())
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    let p = synth::search_stream(&t, 32, rows(33), &opts);
    assert!(runs_to(&p, &t));
    let palindrome = Mirroring {
        row: 33,
        tail: 16,
        pivot: 32,
    };
    assert!(
        matches!(p.op, Op::Mirror { at, .. } if at == palindrome),
        "{p}"
    );
    // Weights in rows: no Mirror, the search's program as before.
    let w = weights(5, 16384);
    let p = synth::search_stream(&w, 32, rows(128), &opts);
    assert_eq!(p, synth::search_stream(&w, 32, F32, &opts));
}

/// The high bytes of a fine-tune's small differences from its base are
/// zero nearly everywhere: their leaf is a Sparse node (fill, gaps and
/// values), smaller than any literal of them, and the search's program of
/// the whole 16-bit differences takes it.
#[test]
fn a_stream_of_one_word_nearly_everywhere_becomes_sparse() {
    let noise = common::noise(11, 3 * 65536);
    // Zigzagged differences: mostly small, one in about 200 beyond a byte.
    let t: Vec<u32> = (noise.chunks(3))
        .map(|b| match b[2] {
            0 => u32::from(b[0]) << 8 | u32::from(b[1]),
            _ => (u32::from(b[0]) * u32::from(b[1])) >> 8,
        })
        .collect();
    let high: Vec<u32> = t.iter().map(|w| w >> 8).collect();
    let (p, _) = synth::leaf(high.clone().into(), 8);
    assert!(runs_to(&p, &high));
    assert!(matches!(p.op, Op::Sparse { fill: 0, .. }), "{p}");
    let stats = brevis::codec::Stats::new(&high, 8);
    let (_, literal) = brevis::codec::best(&high, 8, &stats);
    assert!(
        encoded_len(&p) * 10 < literal * 9,
        "{p}: {} vs {literal}",
        encoded_len(&p)
    );
    let found = synth::astar(&t, 16, INT, &opts(synth::DEFAULT_BUDGET)).program;
    assert!(runs_to(&found, &t));
    assert!(format!("{found}").contains("sparse"), "{found}");
}

/// `n` weights in `float`'s words, in rows of `row` whose scales cycle
/// through `scales` values (1 to `scales`).
fn scaled_rows(
    seed: u64,
    n: usize,
    row: usize,
    scales: usize,
    float: brevis::dsl::FloatFormat,
) -> Vec<u32> {
    (weights(seed, n).into_iter().enumerate())
        .map(|(i, w)| {
            let scale = (1 + (i / row * 5 + seed as usize) % scales) as f32;
            let x = f32::from_bits(w) * scale;
            match float.width() {
                32 => x.to_bits(),
                16 => x.to_bits() >> 16,
                _ => (x.to_bits() >> 24) & 0xff,
            }
        })
        .collect()
}

/// Finds a Partition node anywhere in `p`: its group length and class count.
fn partition_in(p: &Program<Literal>) -> Option<(usize, usize)> {
    match &p.op {
        Op::Partition { group, parts, .. } => Some((*group, parts.len())),
        _ => p.children().find_map(partition_in),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Rows of weights of every float format, with a scale per row from a
    /// few (or one), at row lengths that do and do not divide the stream:
    /// the program with partitions reproduces the words through its bytes
    /// and never costs more than the program without.
    #[test]
    fn partitions_reproduce_their_rows_and_never_cost_more(
        format in 0usize..5,
        row in prop::sample::select(vec![32usize, 100, 256, 384, 1000]),
        scales in 1usize..9,
        seed: u64,
    ) {
        let float = brevis::dsl::FloatFormat::ALL[format];
        let words = scaled_rows(seed, 20_000, row, scales, float);
        let width = float.width();
        let hint = Hint { float: Some(float), rows: Some(row), columns: None };
        let found = synth::search_stream(&words, width, hint, &opts(8));
        let p = synth::partition_rows(found.clone(), &words, hint);
        prop_assert_eq!(decoded(&p), words.clone(), "{}", p);
        prop_assert!(size(&p) <= size(&found), "{} > {}: {}", size(&p), size(&found), p);
    }
}

/// What a lane's program codes to in its chunk: with its literals
/// partitioned into classes of rows where that is smaller.
fn partitioned_size(p: &Program<Literal>, words: &[u32], hint: Hint) -> usize {
    size(&synth::partition_rows(p.clone(), words, hint))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A deeper search (a larger budget, or all of a long stream's words
    /// searched) never yields a lane that codes larger than the default
    /// search's once both are partitioned, as packing partitions them: the
    /// deeper search weighs its programs before partitions.
    #[test]
    fn a_deeper_search_never_codes_larger_than_the_default(
        format in 0usize..5,
        row in prop::sample::select(vec![64usize, 384, 1000]),
        scales in 1usize..9,
        budget in prop::sample::select(vec![16usize, 32]),
        whole in any::<bool>(),
        seed: u64,
    ) {
        let float = brevis::dsl::FloatFormat::ALL[format];
        // Longer than the default search looks at.
        let words: Arc<[u32]> = scaled_rows(seed, 2 * synth::SEARCH_WORDS, row, scales, float).into();
        let width = float.width();
        let hint = Hint { float: Some(float), rows: Some(row), columns: None };
        let at = |opts: &SynthOptions| {
            let p = synth::refit_or_search(&words, width, hint, opts, &[], true).unwrap();
            prop_assert!(runs_to(&p, &words), "{}", p);
            Ok(partitioned_size(&p, &words, hint))
        };
        let deeper = SynthOptions {
            search_words: if whole { synth::MATCH_WORDS } else { synth::SEARCH_WORDS },
            ..opts(budget)
        };
        let (d, s) = (at(&deeper)?, at(&opts(synth::DEFAULT_BUDGET))?);
        prop_assert!(d <= s, "budget {budget}: {d} > default {s}");
    }
}

/// F32 weights whose rows of 256 have one of four scales (an embedding's
/// tokens of different norms): a literal of their exponents becomes a
/// Partition of rows, smaller than the program without it, that yields the
/// words. Without rows (a 1-D tensor), or at rows too short, none is made.
#[test]
fn rows_of_different_scales_become_a_partition() {
    let n = 256 * 256;
    let words: Vec<u32> = (weights(91, n).into_iter().enumerate())
        .map(|(i, w)| (f32::from_bits(w) * [1.0f32, 3.0, 9.0, 27.0][(i / 256) * 7 % 4]).to_bits())
        .collect();
    let hint = |rows| Hint {
        float: Some(brevis::dsl::FloatFormat::F32),
        rows,
        columns: None,
    };
    let found = synth::search_stream(&words, 32, hint(None), &opts(8));
    assert_eq!(partition_in(&found), None, "{found}");
    let p = synth::partition_rows(found.clone(), &words, hint(Some(256)));
    assert_eq!(partition_in(&p).map(|(g, _)| g), Some(256), "{p}");
    assert!(runs_to(&p, &words), "{p}");
    let (with, without) = (size(&p), size(&found));
    assert!(with * 100 < without * 99, "{with} vs {without}: {p}");
    for rows in [None, Some(synth::MIN_GROUP - 1)] {
        let q = synth::partition_rows(found.clone(), &words, hint(rows));
        assert_eq!(q, found, "rows {rows:?}");
    }
}
