//! The language: every operator round-trips random streams of every width through
//! target-directed construction, canonical encoding, strict decoding and execution;
//! the decoder survives arbitrary bytes.

use brevis::codec::{Codec, Stats, Word};
use brevis::dsl::*;
use brevis::synth::{
    column_scan_program, column_updates, expansions, match_program, match_streams, mirror_program,
    mirror_streams, palette_streams, prediction_slack, scaled_streams, search_stream, sparse_leaf,
    Hint, SynthOptions,
};
use brevis::wire::WireError;
use proptest::prelude::*;
use std::sync::Arc;

/// The best leaf for a stream.
fn leaf(words: Arc<[u32]>, width: u32) -> Program<Literal> {
    brevis::synth::leaf(words, width).0
}

fn stream() -> impl Strategy<Value = (u32, Vec<u32>)> {
    (1u32..=32).prop_flat_map(|width| {
        let word = prop_oneof![
            3 => any::<u32>().prop_map(move |w| w & mask(width)),
            2 => (0u32..4).prop_map(move |w| w & mask(width)),
        ];
        (Just(width), prop::collection::vec(word, 1..300))
    })
}

/// Executes a decoded program into `T` words, widened back to u32.
fn execute_as<T: Word>(p: &Program<EncodedLit<'_>>) -> Result<Vec<u32>, WireError> {
    let mut out = vec![T::default(); p.ty.len];
    execute(p, &mut out)?;
    Ok(out.iter().map(|w| w.to_u32()).collect())
}

/// Executes a decoded program into every word type wide enough for it and
/// checks they agree (the same words, or the same error).
fn execute_all(p: &Program<EncodedLit<'_>>) -> Result<Vec<u32>, WireError> {
    let wide = execute_as::<u32>(p);
    if p.ty.width <= 16 {
        assert_eq!(execute_as::<u16>(p), wide, "u16 differs");
    }
    if p.ty.width <= 8 {
        assert_eq!(execute_as::<u8>(p), wide, "u8 differs");
    }
    wide
}

/// The canonical encoding of `p`.
fn encoded(p: &Program<Literal>) -> Vec<u8> {
    let mut bytes = Vec::new();
    encode_program(p, &mut bytes);
    bytes
}

/// Encodes, decodes with the strict decoder and executes (into every word type).
fn through_bytes(p: &Program<Literal>) -> Vec<u32> {
    let bytes = encoded(p);
    // rANS literals are weighed at a predicted size, the others exactly.
    let slack = prediction_slack(p);
    let weighed = encoded_len(p);
    assert!(
        bytes.len().abs_diff(weighed) <= slack,
        "encoded_len {weighed} disagrees with {} bytes: {p}",
        bytes.len()
    );
    let (decoded, used) = decode_program(&bytes, p.ty, Limits::default())
        .unwrap_or_else(|e| panic!("decoder rejects {p}: {e}"));
    assert_eq!(used, bytes.len());
    execute_all(&decoded).unwrap_or_else(|e| panic!("{p} fails: {e}"))
}

fn map_ops(width: u32, t: &[u32]) -> Vec<MapOp> {
    let mut ops = vec![
        MapOp::Zigzag,
        MapOp::Gray,
        MapOp::BitReverse,
        MapOp::Xor(t[0]),
        MapOp::Add(t[t.len() - 1]),
    ];
    ops.extend([1, width / 2, width - 1].map(MapOp::Rotate));
    ops.into_iter().filter(|m| m.is_valid(width)).collect()
}

fn fields(width: u32) -> Vec<Fields> {
    let mut f = vec![
        Fields::BitPlanes,
        Fields::BytePlanes,
        Fields::Split { low: 1 },
        Fields::Split { low: width / 2 },
    ];
    f.extend(FloatFormat::ALL.map(Fields::Float));
    f.into_iter().filter(|f| f.is_valid(width)).collect()
}

/// Programs for `t` built by every operator from target-derived child streams.
fn constructions(width: u32, t: &[u32]) -> Vec<Program<Literal>> {
    let ty = Type {
        width,
        len: t.len(),
    };
    let target: Arc<[u32]> = t.into();
    let mut out = vec![leaf(target.clone(), width)];
    for op in map_ops(width, t) {
        let body = t.iter().map(|&y| op.invert(y, width)).collect::<Vec<_>>();
        out.push(Program {
            ty,
            op: Op::Map {
                op,
                body: Box::new(leaf(body.into(), width)),
            },
        });
    }
    for f in fields(width) {
        let parts = f
            .widths(width)
            .into_iter()
            .zip(f.shifts(width))
            .map(|(w, s)| {
                leaf(
                    t.iter()
                        .map(|x| (x >> s) & mask(w))
                        .collect::<Vec<_>>()
                        .into(),
                    w,
                )
            })
            .collect();
        out.push(Program {
            ty,
            op: Op::Merge { fields: f, parts },
        });
    }
    if t.len() >= 3 {
        let cuts = [t.len() / 3, 2 * t.len() / 3];
        let pieces = [&t[..cuts[0]], &t[cuts[0]..cuts[1]], &t[cuts[1]..]];
        let parts = pieces
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| leaf(p.to_vec().into(), width))
            .collect::<Vec<_>>();
        if parts.len() >= 2 {
            out.push(Program {
                ty,
                op: Op::Concat(parts),
            });
        }
    }
    // Palettes of every group length and index width that hold the stream.
    for group in [2, 5, t.len()]
        .into_iter()
        .filter(|&g| g >= 2 && g <= t.len())
    {
        for index_width in (1..=MAX_PALETTE_INDEX_WIDTH).filter(|&w| w < width) {
            let Some((values, indices)) = palette_streams(t, group, index_width) else {
                continue;
            };
            out.push(Program {
                ty,
                op: Op::Palette {
                    group,
                    index_width,
                    values: Box::new(leaf(values.into(), width)),
                    indices: Box::new(leaf(indices.into(), index_width)),
                },
            });
        }
    }
    // Copies of earlier words, where the matcher finds any.
    if let Some(streams) = match_streams(t, width) {
        let kids = (streams.into_iter())
            .map(|(ty, s)| leaf(s, ty.width))
            .collect();
        out.push(match_program(ty, kids));
    }
    // The first word as a fill, where some word differs from it.
    if t.iter().any(|&w| w != t[0]) {
        out.push(sparse_leaf(t, width, t[0]));
    }
    out.extend(
        expansions(
            &target,
            width,
            Hint {
                float: None,
                rows: None,
                columns: None,
            },
            None,
        )
        .iter()
        .map(|e| e.complete_with(leaf)),
    );
    out
}

/// Scales times small integers, rounded to `format`: what a quantized
/// checkpoint stored back in a wide dtype holds. As a max-abs quantizer
/// makes them, each group's integer of largest magnitude is 7 or -7.
fn quantized() -> impl Strategy<Value = (FloatFormat, usize, Vec<u32>)> {
    let format = prop::sample::select(SCALED_FORMATS.to_vec());
    (format, 1usize..40, 1usize..6).prop_flat_map(|(format, group, groups)| {
        let n = group * groups;
        let ints = prop::collection::vec(-6i32..=6, n);
        let tops = prop::collection::vec((0..group, any::<bool>()), groups);
        // Scales whose products stay normal and finite in every format.
        let scales = prop::collection::vec(0x3900u32..0x4500, groups);
        (Just(format), Just(group), ints, tops, scales).prop_map(
            |(format, group, mut ints, tops, scales)| {
                for (k, (at, negative)) in tops.into_iter().enumerate() {
                    ints[k * group + at] = if negative { -7 } else { 7 };
                }
                let words = ints
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| {
                        // A BF16 scale (as a binary32), times the integer.
                        let scale = f32::from_bits(scales[i / group] << 16);
                        round_to(format, scale * q as f32)
                    })
                    .collect();
                (format, group, words)
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Where the packer finds scales for a quantized stream, the Scaled node
    /// over them yields the stream through bytes, in every word type.
    #[test]
    fn scaled_integers_yield_their_target((format, group, t) in quantized()) {
        let width = format.width();
        let found = scaled_streams(&t, group, format, 4);
        prop_assert!(found.is_some(), "no scales found for {:x?}", t);
        let (scales, ints) = found.unwrap();
        let p = Program {
            ty: Type { width, len: t.len() },
            op: Op::Scaled {
                group,
                format,
                int_width: 4,
                scales: Box::new(leaf(scales.into(), 32)),
                ints: Box::new(leaf(ints.into(), 4)),
            },
        };
        prop_assert_eq!(through_bytes(&p), t);
    }

    #[test]
    fn every_operator_yields_its_target((width, t) in stream()) {
        for p in constructions(width, &t) {
            prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        }
        let best = search_stream(&t, width, Hint { float: None, rows: None, columns: None }, &SynthOptions::default());
        prop_assert_eq!(through_bytes(&best), t);
    }

    #[test]
    fn repeat_yields_its_target((width, base) in stream(), times in 2usize..6) {
        let t: Vec<u32> = base.iter().copied().cycle().take(base.len() * times).collect();
        let p = search_stream(&t, width, Hint { float: None, rows: None, columns: None }, &SynthOptions::default());
        prop_assert_eq!(through_bytes(&p), t);
    }

    #[test]
    fn decoder_survives_arbitrary_bytes(bytes: Vec<u8>, width in 0u32..40, len in 0usize..5000) {
        let ty = Type { width, len };
        if let Ok((p, used)) = decode_program(&bytes, ty, Limits::default()) {
            prop_assert!(used <= bytes.len());
            let _ = execute_all(&p);
        }
    }

    #[test]
    fn decoder_survives_damaged_programs((width, t) in stream(), at: usize, bit in 0u8..8) {
        for p in constructions(width, &t) {
            let mut bytes = encoded(&p);
            let k = at % bytes.len();
            bytes[k] ^= 1 << bit;
            if let Ok((q, _)) = decode_program(&bytes, p.ty, Limits::default()) {
                let _ = execute_all(&q);
            }
        }
    }
}

/// A literal of `words` stored with `codec`, if it applies.
fn literal(words: Vec<u32>, width: u32, codec: Codec) -> Option<Program<Literal>> {
    let stats = Stats::new(&words, width);
    let size = brevis::codec::encoded_size(codec, &words, width, &stats)?;
    let ty = Type {
        width,
        len: words.len(),
    };
    let words = words.into();
    Some(Program {
        ty,
        op: Op::Lit(Literal::new(codec, size, words, stats)),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Upcast-like f32 words (zero low 16 bits) as sign, exponent and a
    /// nested Merge of the high mantissa and a zero constant, with every
    /// codec in every field: whichever fields can be ored in without
    /// scratch, and in whatever order, the words come out the same.
    #[test]
    fn merges_with_fields_of_every_codec(
        bf16 in prop::collection::vec(any::<u16>(), 1..3000),
        codecs in prop::array::uniform3(0usize..4),
    ) {
        let t: Vec<u32> = bf16.iter().map(|&h| (h as u32) << 16).collect();
        let field = |shift: u32, width: u32, pick: usize| {
            let words = t.iter().map(|&x| x >> shift & mask(width)).collect();
            literal(words, width, Codec::ALL[pick])
        };
        let (Some(sign), Some(exponent), Some(high)) =
            (field(31, 1, codecs[0]), field(23, 8, codecs[1]), field(16, 7, codecs[2]))
        else {
            return Ok(());
        };
        let len = t.len();
        let zeros = Program { ty: Type { width: 16, len }, op: Op::Const(0) };
        let mantissa = Program {
            ty: Type { width: 23, len },
            op: Op::Merge { fields: Fields::Split { low: 16 }, parts: vec![high, zeros] },
        };
        let p = Program {
            ty: Type { width: 32, len },
            op: Op::Merge {
                fields: Fields::Float(FloatFormat::F32),
                parts: vec![sign, exponent, mantissa],
            },
        };
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let mut direct = vec![0u32; len];
        execute(&p, &mut direct).unwrap();
        prop_assert_eq!(direct, t);
    }
}

/// Asserts that decoding `bytes` as a program of type `ty` fails, saying `why`.
fn rejected(bytes: &[u8], ty: Type, why: &str) {
    let err = decode_program(bytes, ty, Limits::default())
        .err()
        .unwrap_or_else(|| panic!("accepted {bytes:?}"));
    assert!(err.reason.contains(why), "{bytes:?}: {err}");
}

#[test]
fn decoder_rejects_non_canonical_programs() {
    let ty = Type { width: 8, len: 4 };
    let reject = |bytes: &[u8], why: &str| rejected(bytes, ty, why);
    reject(&[1, 0x80, 0x00], "non-canonical varint");
    reject(&[1, 0x80, 0x02], "constant exceeds width");
    reject(&[3, 0, 1, 7], "repeat of a constant");
    reject(&[3, 1, 1, 7], "does not divide");
    reject(&[4, 0, 0, 1, 3], "identity");
    reject(&[4, 4, 8, 1, 3], "identity");
    reject(&[4, 0, 1, 4, 0, 2, 1, 3], "same map kind");
    reject(&[6, 7, 1, 0, 1, 0], "do not fit");
    reject(&[2, 0, 4, 1, 0, 1, 0], "exceed");
    reject(&[2, 0, 0, 1, 0, 1, 0], "empty concat part");
    reject(&[200], "unknown operator");
    let deep: Vec<u8> = std::iter::repeat_n([4u8, 2, 4, 3], 40)
        .flatten()
        .chain([1, 0])
        .collect();
    reject(&deep, "too deeply");
}

/// A tiny record cannot make the decoder work without bound: 32 bit planes,
/// each under a chain of 30 scans, yield 992 words per output word and are
/// refused before anything runs (a real program yields at most 72).
#[test]
fn programs_that_do_too_much_work_are_refused() {
    let n = 4096;
    let t = |width| Type { width, len: n };
    let chain = |depth: usize| {
        let mut p = Program {
            ty: t(1),
            op: Op::Const(1),
        };
        for _ in 0..depth {
            p = Program {
                ty: t(1),
                op: Op::Scan {
                    op: ScanOp::Xor,
                    init: 0,
                    updates: Box::new(p),
                },
            };
        }
        p
    };
    let planes = |depth| Program {
        ty: t(32),
        op: Op::Merge {
            fields: Fields::BitPlanes,
            parts: (0..32).map(|_| chain(depth)).collect(),
        },
    };
    let mut heavy = Vec::new();
    encode_program(&planes(30), &mut heavy);
    assert!(heavy.len() < 3000, "{} bytes", heavy.len());
    let err = decode_program(&heavy, t(32), Limits::default()).unwrap_err();
    assert_eq!(err.reason, "program does more work than its output allows");
    // Bit planes under two scans each (97 words per word) are within bounds.
    let mut light = Vec::new();
    encode_program(&planes(2), &mut light);
    assert!(decode_program(&light, t(32), Limits::default()).is_ok());
}

/// Streams made of copies of their own earlier words (of every width), with
/// literal words between them.
fn repeated() -> impl Strategy<Value = (u32, Vec<u32>)> {
    let step = prop_oneof![
        1 => any::<u32>().prop_map(|w| (0usize, 0usize, w)),
        2 => (1usize..200, 1usize..40).prop_map(|(d, l)| (d, l, 0)),
    ];
    (1u32..=32, prop::collection::vec(step, 1..60)).prop_map(|(width, steps)| {
        let mut t: Vec<u32> = Vec::new();
        for (dist, len, word) in steps {
            if dist == 0 || dist > t.len() {
                t.push(word & mask(width));
            } else {
                for _ in 0..len {
                    t.push(t[t.len() - dist]);
                }
            }
        }
        (width, t)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The matcher's parse of a repeated stream, as a Match node, yields the
    /// stream through bytes in every word type; a version 3 reader (no
    /// Match) refuses it as an unknown operator.
    #[test]
    fn match_yields_its_target((width, t) in repeated()) {
        let Some(streams) = match_streams(&t, width) else {
            return Ok(());
        };
        let ty = Type { width, len: t.len() };
        let kids = streams.into_iter().map(|(ty, s)| leaf(s, ty.width)).collect();
        let p = match_program(ty, kids);
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let bytes = encoded(&p);
        let v3 = Limits { matches: false, ..Limits::default() };
        let err = decode_program(&bytes, ty, v3).unwrap_err();
        prop_assert_eq!(err.reason, "unknown operator");
    }
}

/// A Match node of `n` words of 8 bits over literal words and tokens as
/// given (runs, lengths - 1, distances - 1), encoded.
fn match_bytes(n: usize, lits: &[u32], runs: &[u32], lens: &[u32], dists: &[u32]) -> Vec<u8> {
    let tw = count_width(n);
    let kids = vec![
        leaf(lits.into(), 8),
        leaf(runs.into(), tw),
        leaf(lens.into(), tw),
        leaf(dists.into(), tw),
    ];
    let p = match_program(Type { width: 8, len: n }, kids);
    encoded(&p)
}

/// Decodes `bytes` as a program of type `ty`, which must use them all, and
/// runs it into every word type.
fn run_bytes(bytes: &[u8], ty: Type) -> Result<Vec<u32>, WireError> {
    let (p, used) = decode_program(bytes, ty, Limits::default()).expect("decodes");
    assert_eq!(used, bytes.len());
    execute_all(&p)
}

/// Hostile tokens decode (the decoder cannot see them) but never run: every
/// copy is checked against the words already produced and left to produce.
#[test]
fn match_refuses_hostile_copies() {
    let ty = Type { width: 8, len: 8 };
    let run = |bytes: &[u8]| run_bytes(bytes, ty);
    let refused = |bytes: Vec<u8>, why: &str| {
        let err = run(&bytes).expect_err(why);
        assert!(err.reason.contains(why), "{err}");
    };
    // Well formed: 1 2 3, copy 3 from 3 back, then 9, copy 1 from 1 back.
    let ok = match_bytes(8, &[1, 2, 3, 9], &[3, 1], &[2, 0], &[2, 0]);
    assert_eq!(run(&ok).unwrap(), [1, 2, 3, 1, 2, 3, 9, 9]);
    // An overlapping copy: 5, then 7 copies of the word 1 back.
    let fill = match_bytes(8, &[5], &[1], &[6], &[0]);
    assert_eq!(run(&fill).unwrap(), [5; 8]);
    // A copy at the start: distance 1 reaches before the output (the
    // smallest distance there is: distances are stored minus 1, so 0
    // cannot be written).
    refused(
        match_bytes(8, &[1, 2, 3], &[0, 3], &[0, 3], &[0, 0]),
        "before the output",
    );
    // A distance beyond what is produced.
    refused(
        match_bytes(8, &[1, 2, 3, 4], &[2], &[3], &[2]),
        "before the output",
    );
    // A copy longer than the words left.
    refused(match_bytes(8, &[1, 2], &[2], &[6], &[1]), "past the output");
    // A literal run longer than the literals.
    refused(
        match_bytes(8, &[1, 2], &[3], &[0], &[0]),
        "exceed the literals",
    );
    // Literals and copies that make fewer words than the output...
    refused(
        match_bytes(8, &[1, 2], &[2], &[1], &[1]),
        "do not make the output",
    );
    // ... and more.
    refused(
        match_bytes(8, &[1, 2, 3, 4, 5], &[2], &[3], &[1]),
        "do not make the output",
    );
}

/// [`run_matches`] as its rules read, a word at a time: what the decoder's
/// blocks of words must agree with.
fn matches_word_by_word(
    n: usize,
    lits: &[u32],
    tokens: &[(u32, u32, u32)],
) -> Result<Vec<u32>, &'static str> {
    let mut out = Vec::with_capacity(n);
    let mut p = 0;
    for &(run, len, dist) in tokens {
        let (run, len, dist) = (run as usize, len as usize + 1, dist as usize + 1);
        if run > lits.len() - p || run > n - out.len() {
            return Err("match literal runs exceed the literals or the output");
        }
        out.extend_from_slice(&lits[p..p + run]);
        p += run;
        if dist > out.len() {
            return Err("match copy reaches before the output");
        }
        if len > n - out.len() {
            return Err("match copy runs past the output");
        }
        for _ in 0..len {
            out.push(out[out.len() - dist]);
        }
    }
    if lits.len() - p != n - out.len() {
        return Err("match literals and copies do not make the output");
    }
    out.extend_from_slice(&lits[p..]);
    Ok(out)
}

/// A Match's words, literals and tokens (run, length - 1, distance - 1):
/// tokens that follow the rules, of runs and copies short and long, near
/// and far, and at times one field of one token made anything.
fn match_tokens() -> impl Strategy<Value = (usize, Vec<u32>, Vec<(u32, u32, u32)>)> {
    let token = (
        prop_oneof![3 => 0u32..2, 1 => 0u32..24],
        prop_oneof![3 => 0u32..2, 1 => 0u32..24],
        any::<u32>(),
    );
    let hostile =
        prop::option::weighted(0.25, (any::<prop::sample::Index>(), 0usize..3, 0u32..100));
    (prop::collection::vec(token, 0..40), 0usize..12, hostile).prop_map(|(steps, tail, hostile)| {
        let mut made = 0u32;
        let mut tokens: Vec<(u32, u32, u32)> = (steps.into_iter())
            .map(|(run, len, far)| {
                made += run;
                let dist = far % made.max(1);
                made += len + 1;
                (run, len, dist)
            })
            .collect();
        let runs: u32 = tokens.iter().map(|t| t.0).sum();
        let lits = (0..runs as usize + tail)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761) >> 24)
            .collect();
        if let (Some((at, field, value)), false) = (hostile, tokens.is_empty()) {
            let k = at.index(tokens.len());
            let t = &mut tokens[k];
            *[&mut t.0, &mut t.1, &mut t.2][field] = value;
        }
        (made as usize + tail, lits, tokens)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Tokens that follow the rules, and hostile ones (runs past the
    /// literals, copies from before the start or past the end), give the
    /// words or the refusal that the rules say, in every word type.
    #[test]
    fn match_tokens_run_as_their_rules_say((n, lits, tokens) in match_tokens()) {
        let want = matches_word_by_word(n, &lits, &tokens);
        let runs: Vec<u32> = tokens.iter().map(|t| t.0).collect();
        let lens: Vec<u32> = tokens.iter().map(|t| t.1).collect();
        let dists: Vec<u32> = tokens.iter().map(|t| t.2).collect();
        let mut wide = vec![0u32; n];
        let got = run_matches(&mut wide, &lits, &runs, &lens, &dists).map(|()| wide);
        prop_assert_eq!(&got, &want);
        let narrow: Vec<u8> = lits.iter().map(|&w| w as u8).collect();
        let mut bytes = vec![0u8; n];
        let got = run_matches(&mut bytes, &narrow, &runs, &lens, &dists)
            .map(|()| bytes.iter().map(|&b| u32::from(b)).collect::<Vec<_>>());
        prop_assert_eq!(got, want);
    }
}

#[test]
fn decoder_checks_match_counts() {
    let ty = Type { width: 8, len: 4 };
    let reject = |bytes: &[u8], why: &str| rejected(bytes, ty, why);
    // At most n - 1 copies (the first word is a literal)...
    reject(&[9, 3, 0], "more copies than words");
    // ... and copies and literals at most n words.
    reject(&[9, 1, 2], "exceed its words");
    reject(&[9, 0x81, 0x00], "non-canonical varint");
    assert!(matches!(
        decode_program(&[9, 0, 0], Type { width: 8, len: 1 }, Limits::default()),
        Err(WireError {
            reason: "match of fewer than two words",
            ..
        })
    ));
}

/// Streams of one word nearly everywhere (of every width): the fill, with
/// other words at random places.
fn sparse() -> impl Strategy<Value = (u32, Vec<u32>)> {
    (1u32..=32, 256usize..3000, any::<u32>()).prop_flat_map(|(width, n, fill)| {
        let fill = fill & mask(width);
        let exception = (0..n, any::<u32>()).prop_map(move |(at, w)| (at, w & mask(width)));
        let exceptions = prop::collection::vec(exception, 1..(n / 8).max(2));
        (Just(width), exceptions).prop_map(move |(width, exceptions)| {
            let mut t = vec![fill; n];
            exceptions.into_iter().for_each(|(at, w)| t[at] = w);
            (width, t)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A Sparse node yields its stream through bytes in every word type, and
    /// the best leaf is never larger than the literal alone; a version 4
    /// reader (no Sparse) refuses it as an unknown operator.
    #[test]
    fn sparse_yields_its_target((width, t) in sparse()) {
        let ty = Type { width, len: t.len() };
        let fill = t[t.len() - 1];
        prop_assume!(t.iter().any(|&w| w != fill));
        let p = sparse_leaf(&t, width, fill);
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let bytes = encoded(&p);
        let v4 = Limits { sparse: false, ..Limits::default() };
        let err = decode_program(&bytes, ty, v4).unwrap_err();
        prop_assert_eq!(err.reason, "unknown operator");
        let best = leaf(t.clone().into(), width);
        prop_assert_eq!(&through_bytes(&best), &t, "{}", best);
    }
}

/// A Sparse node of `n` words of 8 bits around `fill` with the given gaps
/// and values, encoded.
fn sparse_bytes(n: usize, fill: u32, gaps: &[u32], values: &[u32]) -> Vec<u8> {
    let p = Program {
        ty: Type { width: 8, len: n },
        op: Op::Sparse {
            fill,
            gaps: Box::new(leaf(gaps.into(), count_width(n))),
            values: Box::new(leaf(values.into(), 8)),
        },
    };
    encoded(&p)
}

/// Gaps that lead past the output decode (the decoder cannot see them) but
/// never run.
#[test]
fn sparse_refuses_gaps_past_the_output() {
    let ty = Type { width: 8, len: 8 };
    let run = |bytes: &[u8]| run_bytes(bytes, ty);
    let ok = sparse_bytes(8, 0, &[1, 0, 4], &[7, 8, 9]);
    assert_eq!(run(&ok).unwrap(), [0, 7, 8, 0, 0, 0, 0, 9]);
    let first = sparse_bytes(8, 5, &[0], &[1]);
    assert_eq!(run(&first).unwrap(), [1, 5, 5, 5, 5, 5, 5, 5]);
    for gaps in [[1, 0, 5], [3, 3, 0], [7, 0, 0], [0, 0, 7]] {
        let err = run(&sparse_bytes(8, 0, &gaps, &[7, 8, 9])).unwrap_err();
        assert!(err.reason.contains("past the output"), "{gaps:?}: {err}");
    }
}

#[test]
fn decoder_checks_sparse_counts() {
    let ty = Type { width: 8, len: 4 };
    let reject = |bytes: &[u8], why: &str| rejected(bytes, ty, why);
    // The fill fits the width...
    reject(&[10, 0x80, 0x02, 0], "fill exceeds width");
    // ... and at most n - 1 words are exceptions.
    reject(&[10, 0, 3], "as many exceptions as words");
    reject(&[10, 0, 0x80, 0x00], "non-canonical varint");
    assert!(matches!(
        decode_program(&[10, 0, 0], Type { width: 8, len: 1 }, Limits::default()),
        Err(WireError {
            reason: "sparse node of fewer than two words",
            ..
        })
    ));
}

/// A Partition of `t` into groups of `group` words with the given classes
/// (one per group, every class of `0..k` used): each class's words as its
/// best leaf.
fn partition_of(
    t: &[u32],
    width: u32,
    group: usize,
    classes: &[u32],
    k: usize,
) -> Program<Literal> {
    let mut parts = vec![Vec::new(); k];
    for (g, &c) in t.chunks(group).zip(classes) {
        parts[c as usize].extend_from_slice(g);
    }
    Program {
        ty: Type {
            width,
            len: t.len(),
        },
        op: Op::Partition {
            group,
            classes: Box::new(leaf(classes.into(), count_width(k))),
            parts: parts.into_iter().map(|p| leaf(p.into(), width)).collect(),
        },
    }
}

/// Streams with a group length and a class per group, every class of
/// `0..k` used (`2 <= k <= 16`).
fn partitioned() -> impl Strategy<Value = (u32, Vec<u32>, usize, Vec<u32>, usize)> {
    (
        stream(),
        1usize..40,
        2usize..=MAX_PARTITION_CLASSES,
        any::<u64>(),
    )
        .prop_filter_map("a class per group", |((width, t), group, k, seed)| {
            let groups = t.len().div_ceil(group);
            (groups >= k).then(|| {
                // The first k groups take each class once, the rest any.
                let mut s = seed | 1;
                let classes = (0..groups)
                    .map(|g| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        if g < k {
                            (k - 1 - g) as u32
                        } else {
                            (s % k as u64) as u32
                        }
                    })
                    .collect();
                (width, t, group, classes, k)
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A Partition yields its stream through bytes in every word type, and
    /// a version 6 reader (no Partition) refuses it as an unknown operator.
    #[test]
    fn partition_yields_its_target((width, t, group, classes, k) in partitioned()) {
        let p = partition_of(&t, width, group, &classes, k);
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let v6 = Limits { partition: false, ..Limits::default() };
        let ty = Type { width, len: t.len() };
        let err = decode_program(&encoded(&p), ty, v6).unwrap_err();
        prop_assert_eq!(err.reason, "unknown operator");
    }

    /// A ColumnScan (once or twice) yields its stream through bytes in
    /// every word type from the differences down its columns, and a
    /// version 10 reader (no ColumnScan) refuses it as an unknown operator.
    #[test]
    fn column_scan_yields_its_target((width, t) in stream(), row in 1usize..40, twice in any::<bool>()) {
        prop_assume!(t.len() > row);
        let order = 1 + twice as usize;
        let updates = (0..order).fold(Arc::from(&t[..]), |u, _| column_updates(&u, row, width));
        let ty = Type { width, len: t.len() };
        let p = (0..order).fold(leaf(updates.to_vec().into(), width), |p, _| column_scan_program(ty, row, p));
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let v10 = Limits { column_scan: false, ..Limits::default() };
        let err = decode_program(&encoded(&p), ty, v10).unwrap_err();
        prop_assert_eq!(err.reason, "unknown operator");
    }

    /// A Partition whose classes are a Repeat of a row's classes, and a
    /// tail that starts the row again or is any other classes, yields its
    /// stream through bytes (the decoder gathers the first by repeats).
    #[test]
    fn partition_of_repeated_classes_yields_its_target(
        (width, t) in stream(),
        (group, k, times) in (1usize..6, 2usize..5, 2usize..6),
        extra in prop::collection::vec(0u32..4, 0..8),
        (tail, prefix) in (prop::collection::vec(0u32..4, 0..6), any::<bool>()),
    ) {
        prop_assume!(!t.is_empty());
        let row: Vec<u32> = (0..k as u32).chain(extra.iter().map(|c| c % k as u32)).collect();
        let tail: Vec<u32> = match prefix {
            true => row[..tail.len().min(row.len())].to_vec(),
            false => tail.iter().map(|c| c % k as u32).collect(),
        };
        let classes: Vec<u32> = (0..times).flat_map(|_| row.iter().copied()).chain(tail.iter().copied()).collect();
        let len = classes.len() * group;
        let t: Vec<u32> = (0..len).map(|i| t[i % t.len()]).collect();
        let mut p = partition_of(&t, width, group, &classes, k);
        let Op::Partition { classes: ids, .. } = &mut p.op else { unreachable!() };
        let class_width = count_width(k);
        let repeat = Program {
            ty: Type { width: class_width, len: times * row.len() },
            op: Op::Repeat { times, body: Box::new(leaf(row.into(), class_width)) },
        };
        **ids = match tail.is_empty() {
            true => repeat,
            false => Program {
                ty: Type { width: class_width, len: classes.len() },
                op: Op::Concat(vec![repeat, leaf(tail.into(), class_width)]),
            },
        };
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    /// The high bytes of 16-bit words as a Partition of rows of a multiple
    /// of 64 words whose classes are rANS literals (decoded straight into
    /// their rows), merged with the low bytes as a literal of every codec,
    /// alone or beside a nested Merge: the words come out the same in
    /// every word type, through bytes and executed directly.
    #[test]
    fn partitions_of_rans_rows_merge_with_every_field(
        rows in 2usize..40,
        group in prop_oneof![Just(64usize), Just(128), Just(320)],
        k in 2usize..=4,
        low_codec in 0usize..4,
        nested in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let classes: Vec<u32> = (0..rows)
            .map(|r| if r < k { r as u32 } else { (next() % k as u64) as u32 })
            .collect();
        // Each class's rows around a scale of their own.
        let t: Vec<u32> = (0..rows * group)
            .map(|i| {
                let high = (classes[i / group] as u64 * 40 + next() % 24) as u32;
                high << 8 | (next() % 256) as u32
            })
            .collect();
        let len = t.len();
        let mut parts = vec![Vec::new(); k];
        for (row, &c) in t.chunks(group).zip(&classes) {
            parts[c as usize].extend(row.iter().map(|&w| w >> 8));
        }
        let Some(parts) = parts.into_iter().map(|p| literal(p, 8, Codec::Rans)).collect::<Option<Vec<_>>>()
        else {
            return Ok(());
        };
        let high = Program {
            ty: Type { width: 8, len },
            op: Op::Partition {
                group,
                classes: Box::new(leaf(classes.clone().into(), count_width(k))),
                parts,
            },
        };
        let low_words = t.iter().map(|&w| w & 0xff).collect();
        let Some(low) = literal(low_words, 8, Codec::ALL[low_codec]) else {
            return Ok(());
        };
        let low = if nested {
            // The low byte as a nested Merge of two nibbles.
            let nibble = |shift: u32| leaf(t.iter().map(|&w| w >> shift & 15).collect(), 4);
            Program {
                ty: Type { width: 8, len },
                op: Op::Merge { fields: Fields::Split { low: 4 }, parts: vec![nibble(4), nibble(0)] },
            }
        } else {
            low
        };
        let p = Program {
            ty: Type { width: 16, len },
            op: Op::Merge { fields: Fields::Split { low: 8 }, parts: vec![high, low] },
        };
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let mut direct = vec![0u32; len];
        execute(&p, &mut direct).unwrap();
        prop_assert_eq!(direct, t);
    }
}

/// A Partition of 8 words of 8 bits in groups of `group`, with `classes`
/// and parts of the given lengths (of words 1, 2, 3, ... in order), encoded
/// by hand: the decoder cannot see what the classes say, only execution
/// can.
fn partition_bytes(group: usize, classes: &[u32], lens: &[usize]) -> Vec<u8> {
    let mut bytes = vec![11, group as u8 - 1, lens.len() as u8 - 2];
    bytes.extend(lens[..lens.len() - 1].iter().map(|&n| n as u8));
    let lit = |words: Vec<u32>, width: u32| leaf(words.into(), width);
    let ids = lit(classes.to_vec(), count_width(lens.len()));
    encode_program(&ids, &mut bytes);
    let mut next = 1;
    for &n in lens {
        let words: Vec<u32> = (next..next + n as u32).collect();
        next += n as u32;
        encode_program(&lit(words, 8), &mut bytes);
    }
    bytes
}

/// Classes without a part, or taking more words than their part holds,
/// decode (the decoder cannot see them) but never run.
#[test]
fn partition_refuses_classes_its_parts_do_not_hold() {
    let ty = Type { width: 8, len: 8 };
    let run = |bytes: &[u8]| run_bytes(bytes, ty);
    // Groups of 3: classes 1, 0, 1 take 3 words of part 1, 3 of part 0, 2
    // of part 1.
    let ok = partition_bytes(3, &[1, 0, 1], &[3, 5]);
    assert_eq!(run(&ok).unwrap(), [4, 5, 6, 1, 2, 3, 7, 8]);
    // Three classes take words of 2 bits, which may say 3.
    let err = run(&partition_bytes(3, &[3, 0, 1], &[3, 3, 2])).unwrap_err();
    assert!(err.reason.contains("without a part"), "{err}");
    for classes in [[0, 0, 1], [1, 1, 1], [0, 1, 0]] {
        let err = run(&partition_bytes(3, &classes, &[3, 5])).unwrap_err();
        assert!(
            err.reason.contains("longer than its part"),
            "{classes:?}: {err}"
        );
    }
}

/// Rows of 64 words, whose classes' literals write straight into them,
/// refuse the same classes as groups gathered from scratch, before any
/// literal runs: encoded (rANS parts) and in memory.
#[test]
fn partition_rows_refuse_classes_their_parts_do_not_hold() {
    let partition = |classes: &[u32], lens: &[usize]| {
        let parts = lens
            .iter()
            .map(|&n| literal((0..n as u32).map(|w| w % 7).collect(), 8, Codec::Rans).unwrap())
            .collect();
        let ids = leaf(classes.to_vec().into(), count_width(lens.len()));
        Program {
            ty: Type { width: 8, len: 192 },
            op: Op::Partition {
                group: 64,
                classes: Box::new(ids),
                parts,
            },
        }
    };
    let run = |p: &Program<Literal>| {
        let bytes = encoded(p);
        let (decoded, _) = decode_program(&bytes, p.ty, Limits::default()).unwrap();
        let mut out = vec![0u16; 192];
        let from_bytes = execute(&decoded, &mut out).map_err(|e| e.reason);
        let mut out = vec![0u16; 192];
        assert_eq!(execute(p, &mut out).map_err(|e| e.0), from_bytes, "{p}");
        from_bytes
    };
    assert_eq!(run(&partition(&[1, 0, 1], &[64, 128])), Ok(()));
    let err = run(&partition(&[3, 0, 1], &[64, 64, 64])).unwrap_err();
    assert!(err.contains("without a part"), "{err}");
    for classes in [[0, 0, 1], [1, 1, 1], [0, 1, 0]] {
        let err = run(&partition(&classes, &[64, 128])).unwrap_err();
        assert!(err.contains("longer than its part"), "{classes:?}: {err}");
    }
}

#[test]
fn decoder_checks_partition_counts() {
    let ty = Type { width: 8, len: 4 };
    let reject = |bytes: &[u8], why: &str| rejected(bytes, ty, why);
    // Groups of at most n words, ...
    reject(&[11, 4], "group longer than its program");
    // ... at most min(n, 16) classes, ...
    reject(&[11, 0, 3], "more classes than words");
    // ... and parts of at least one word that leave one for each after.
    reject(&[11, 0, 0, 0], "empty partition part");
    reject(&[11, 0, 1, 3], "parts exceed its length");
    reject(&[11, 0x80, 0x00], "non-canonical varint");
    let many = Type { width: 8, len: 100 };
    rejected(&[11, 0, 15], many, "more classes than words or allowed");
    assert!(matches!(
        decode_program(&[11, 0, 0], Type { width: 8, len: 1 }, Limits::default()),
        Err(WireError {
            reason: "partition of fewer than two words",
            ..
        })
    ));
}

/// Rows that mirror themselves, of every width: rows of `row` words whose
/// last `tail` words are their mirror words xor the row's mask, but for a
/// few strays; with a mirroring that fits.
fn mirrored() -> impl Strategy<Value = (u32, Vec<u32>, Mirroring)> {
    (1u32..=32, 2usize..40, 1usize..20, any::<bool>()).prop_flat_map(|(width, row, rows, mid)| {
        let tail = if mid { row / 2 } else { (row - 1) / 2 }.max(1);
        let pivot = if mid || 2 * tail >= row { row - 1 } else { row };
        let m = Mirroring { row, tail, pivot };
        let word = any::<u32>().prop_map(move |w| w & mask(width));
        let words = prop::collection::vec(word, row * rows);
        let masks = prop::collection::vec(prop_oneof![Just(0u32), Just(mask(width))], rows);
        let strays = prop::collection::vec((0..row * rows, any::<u32>()), 0..4);
        (Just(width), words, masks, strays).prop_map(move |(width, mut t, masks, strays)| {
            for (r, words) in t.chunks_mut(row).enumerate() {
                for c in row - tail..row {
                    words[c] = words[pivot - c] ^ masks[r];
                }
            }
            strays
                .into_iter()
                .for_each(|(at, w)| t[at] = w & mask(width));
            (width, t, m)
        })
    })
}

/// The Mirror node of `t` with mirroring `m`, its head and differences as
/// their best leaves.
fn mirror_of(t: &[u32], width: u32, m: Mirroring) -> Program<Literal> {
    let (head, diffs) = mirror_streams(t, m);
    let ty = Type {
        width,
        len: t.len(),
    };
    mirror_program(ty, m, leaf(head, width), leaf(diffs, width))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A Mirror yields its rows through bytes in every word type, whatever
    /// its rows and strays; a version 7 reader (no Mirror) refuses it as an
    /// unknown operator.
    #[test]
    fn mirror_yields_its_target((width, t, m) in mirrored()) {
        prop_assert!(m.fits(t.len()));
        let p = mirror_of(&t, width, m);
        prop_assert_eq!(&through_bytes(&p), &t, "{}", p);
        let ty = Type { width, len: t.len() };
        let v7 = Limits { mirror: false, ..Limits::default() };
        let err = decode_program(&encoded(&p), ty, v7).unwrap_err();
        prop_assert_eq!(err.reason, "unknown operator");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    /// Synthesized with their rows known, mirrored rows (strays and all)
    /// yield a program that runs to them and codes no larger than the one
    /// found without the rows: a Mirror is kept only where it is smaller.
    #[test]
    fn known_rows_never_code_larger((width, t, m) in mirrored()) {
        let opts = SynthOptions::default();
        let hint = |rows| Hint { float: None, rows, columns: None };
        let with_rows = search_stream(&t, width, hint(Some(m.row)), &opts);
        prop_assert_eq!(&through_bytes(&with_rows), &t, "{}", with_rows);
        let without = search_stream(&t, width, hint(None), &opts);
        let cost = brevis::synth::exact_cost;
        prop_assert!(cost(&with_rows) <= cost(&without), "{} vs {}", with_rows, without);
    }
}

/// The bytes of a Mirror of 8-bit words with these parameters (encoded as
/// `row - 2`, `tail - 1`, `pivot + 1 - row`) and two constant children.
fn mirror_bytes(row: u8, tail: u8, pivot_offset: u8) -> Vec<u8> {
    vec![12, row - 2, tail - 1, pivot_offset, 1, 5, 1, 0]
}

/// Every parameter of a Mirror is checked against the node's length before
/// its children are read: rows that do not divide it, a tail longer than
/// half a row, a pivot that would read a mirrored word or past the row.
#[test]
fn decoder_checks_mirror_parameters() {
    let ty = Type { width: 8, len: 12 };
    let run = |bytes: &[u8]| run_bytes(bytes, ty);
    // Rows of 4 whose last word mirrors column 0, 1 or 2, whose last two
    // mirror columns 1 and 0; rows of 6 whose last two mirror 3 and 2.
    assert_eq!(run(&mirror_bytes(4, 1, 0)).unwrap(), [5; 12]);
    assert_eq!(run(&mirror_bytes(4, 2, 0)).unwrap(), [5; 12]);
    assert_eq!(run(&mirror_bytes(6, 2, 2)).unwrap(), [5; 12]);
    let reject = |bytes: &[u8], why: &str| rejected(bytes, ty, why);
    reject(
        &mirror_bytes(5, 1, 0),
        "mirror rows do not divide its words",
    );
    reject(&[12, 11], "mirror row longer than its program");
    reject(
        &mirror_bytes(4, 3, 0),
        "mirror tail longer than half its row",
    );
    reject(
        &mirror_bytes(6, 2, 3),
        "mirror pivot reads past its kept words",
    );
    reject(
        &mirror_bytes(4, 2, 1),
        "mirror pivot reads past its kept words",
    );
    assert!(matches!(
        decode_program(
            &[12, 0, 0, 0, 1, 5, 1, 0],
            Type { width: 8, len: 1 },
            Limits::default()
        ),
        Err(WireError {
            reason: "mirror of fewer than two words",
            ..
        })
    ));
}
