//! Column scans: a table whose columns change slowly down its rows, coded
//! as its differences down the columns (format version 11).
//!
//! A sinusoidal position embedding (the sine and cosine of a row's position
//! times a frequency per column, as speech and translation models store
//! theirs) changes little from one row to the next in its slow columns,
//! and by a nearly steady step: each word less the word a row above it is
//! small, and the differences of those smaller still, where a byte plane's
//! histogram sees every value of a sine. Offered at a lane's root beside
//! the search's program where the tensor has rows (see `super::passes`).

use super::cost::sampled_planes_cost;
use crate::dsl::{mask, Literal, Op, Program, Type};
use std::sync::Arc;

/// Differences taken at most: a sine's second differences are a multiple
/// of itself, small where its frequency is; a third order gains little.
pub(super) const MAX_ORDER: usize = 2;

/// A column scan is searched only where a sample of its updates is
/// estimated to code at most `1 - 1/this` times the words' own estimate:
/// most tensors' rows are unrelated, and their differences code larger.
const MIN_GAIN_DIVISOR: usize = 16;

/// The updates a ColumnScan of rows of `row` words needs to yield `words`:
/// each word less the word a row above it (modulo `2^width`), the first row
/// as it is.
pub fn column_updates(words: &[u32], row: usize, width: u32) -> Arc<[u32]> {
    let m = mask(width);
    (words.iter().enumerate())
        .map(|(i, &w)| match i.checked_sub(row) {
            Some(above) => w.wrapping_sub(words[above]) & m,
            None => w,
        })
        .collect()
}

/// The ColumnScan node of type `ty`, rows of `row` words, over `updates`.
pub fn column_scan_program(ty: Type, row: usize, updates: Program<Literal>) -> Program<Literal> {
    Program {
        ty,
        op: Op::ColumnScan {
            row,
            updates: Box::new(updates),
        },
    }
}

/// Words of a lane whose updates are estimated before any is taken of all
/// of it.
const SAMPLE_WORDS: usize = 1 << 16;

/// The order (1 or 2: how many times the differences are taken) whose
/// updates of `words` (rows of `row` words, at least two) a sample of
/// them estimates smallest, and those updates of all the words, where that
/// estimate is enough below the words' own (see [`MIN_GAIN_DIVISOR`]).
pub(super) fn best_order(words: &[u32], row: usize, width: u32) -> Option<(usize, Arc<[u32]>)> {
    if row == 0 || words.len() < 2 * row {
        return None;
    }
    let sample = &words[..words.len().min(SAMPLE_WORDS.max(2 * row))];
    let plain = sampled_planes_cost(sample, width);
    let orders = std::iter::successors(Some(column_updates(sample, row, width)), |u| {
        Some(column_updates(u, row, width))
    });
    let costs = (1..=MAX_ORDER)
        .zip(orders)
        .map(|(order, updates)| (order, sampled_planes_cost(&updates, width)));
    let best = (costs
        .filter(|&(_, cost)| cost * MIN_GAIN_DIVISOR <= plain * (MIN_GAIN_DIVISOR - 1)))
    .min_by_key(|&(_, cost)| cost);
    let (order, _) = best?;
    let first = column_updates(words, row, width);
    let updates = (1..order).fold(first, |u, _| column_updates(&u, row, width));
    Some((order, updates))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsl::execute;

    /// F16 words of a sinusoidal position table: `rows` positions of
    /// `dims` columns, sines then cosines of geometric frequencies.
    pub(crate) fn sinusoids(rows: usize, dims: usize) -> Vec<u32> {
        let half = dims / 2;
        let step = (10000f64).ln() / (half - 1) as f64;
        let mut out = Vec::with_capacity(rows * dims);
        for t in 0..rows {
            let angle = |j: usize| t as f64 * (-step * j as f64).exp();
            out.extend((0..half).map(|j| f16_bits(angle(j).sin())));
            out.extend((0..half).map(|j| f16_bits(angle(j).cos())));
        }
        out
    }

    /// The F16 word nearest `x` (|x| <= 1, normal or zero), truncated.
    fn f16_bits(x: f64) -> u32 {
        let bits = (x as f32).to_bits();
        let sign = (bits >> 16) & 0x8000;
        let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
        if exp <= 0 {
            return sign;
        }
        sign | (exp as u32) << 10 | (bits >> 13) & 0x3ff
    }

    #[test]
    fn updates_run_back_to_their_words() {
        let words = sinusoids(40, 24);
        for order in 1..=MAX_ORDER {
            let mut updates: Arc<[u32]> = words.as_slice().into();
            for _ in 0..order {
                updates = column_updates(&updates, 24, 16);
            }
            let mut program = crate::synth::leaf(updates, 16).0;
            for _ in 0..order {
                let ty = program.ty;
                program = column_scan_program(ty, 24, program);
            }
            let mut out = vec![0u32; words.len()];
            execute(&program, &mut out).unwrap();
            assert_eq!(out, words, "order {order}");
        }
    }

    /// A table in one chunk too long for the search to offer a Match
    /// (a widened chunk) keeps the Match of its updates' repeats.
    #[test]
    fn a_long_tables_updates_are_offered_a_match() {
        use crate::synth::options::{MATCH_WORDS, SCAN_MATCH_WORDS};
        use crate::synth::{refit_or_search, Columns, Hint, SynthOptions};
        let words: Arc<[u32]> = sinusoids(1500, 384).into();
        let long = MATCH_WORDS + 1..=SCAN_MATCH_WORDS;
        assert!(long.contains(&words.len()));
        let hint = Hint {
            float: Some(crate::dsl::FloatFormat::F16),
            rows: Some(384),
            columns: Some(Columns { row: 384, first: 0 }),
        };
        let opts = SynthOptions::default();
        let program = refit_or_search(&words, 16, hint, &opts, &[], true).unwrap();
        let shown = program.to_string();
        assert!(
            shown.starts_with("column scan") && shown.contains("match("),
            "{shown}"
        );
    }

    #[test]
    fn a_sinusoid_table_takes_differences_and_noise_does_not() {
        let words = sinusoids(300, 64);
        let (order, _) = best_order(&words, 64, 16).expect("a sinusoid table");
        assert_eq!(order, 2);
        let mut x = 0x9E37_79B9u32;
        let noise: Vec<u32> = (0..words.len())
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                0x2000 | x & 0x0fff
            })
            .collect();
        assert!(best_order(&noise, 64, 16).is_none());
    }
}
