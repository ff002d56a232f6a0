//! The context of a hole: where it sits in the program and what its target stream
//! looks like, bucketed coarsely so that the prior's counts generalise.

use super::production::Production;
use super::stream::Hint;
use crate::dsl::FloatFormat;

/// Number of context fields; a back-off level keeps a prefix of the importance order.
pub const FIELDS: usize = 10;

/// A hole's context as small bucket numbers, in order of importance:
/// width, parent operator, dtype, size, distinct ratio, child position, depth,
/// zero fraction, repetition ratio, entropy of adjacent differences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Context(pub [u8; FIELDS]);

/// Where a hole sits in its program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub parent: Option<Production>,
    pub child: usize,
    pub depth: usize,
}

impl Position {
    pub const ROOT: Position = Position {
        parent: None,
        child: 0,
        depth: 0,
    };
}

/// Neighbour pairs sampled for the stream statistics.
const SAMPLE_PAIRS: usize = 4096;

/// Value used for a field a back-off level forgets.
const ANY: u8 = u8::MAX;

/// How many fields each back-off level keeps, finest first.
pub const LEVELS: [usize; 4] = [FIELDS, 5, 2, 0];

impl Context {
    pub fn new(
        words: &[u32],
        width: u32,
        distinct: Option<usize>,
        pos: Position,
        hint: Hint,
    ) -> Context {
        // Buckets are coarse, so a strided sample of neighbour pairs is enough.
        let stride = (words.len() / SAMPLE_PAIRS).max(1);
        let (mut zeros, mut repeats, mut pairs) = (0usize, 0usize, 0usize);
        let mut deltas = [0u32; 256];
        for i in (1..words.len()).step_by(stride) {
            let (prev, w) = (words[i - 1], words[i]);
            zeros += (w == 0) as usize;
            repeats += (w == prev) as usize;
            deltas[(w.wrapping_sub(prev) & 0xff) as usize] += 1;
            pairs += 1;
        }
        let n = words.len().max(1);
        let fraction = |k: usize| k as f64 / pairs.max(1) as f64;
        Context([
            width_class(width),
            pos.parent.map_or(ANY - 1, |p| p.index() as u8),
            dtype_class(hint.float),
            size_class(n),
            distinct_class(distinct, n),
            pos.child.min(3) as u8,
            pos.depth.min(3) as u8,
            bucket(fraction(zeros), &[0.0, 0.5, 0.99]),
            bucket(fraction(repeats), &[0.05, 0.5, 0.99]),
            bucket(entropy(&deltas, pairs.max(1)), &[1.0, 4.0, 7.0]),
        ])
    }

    /// The context with only the first `keep` fields.
    pub fn backed_off(self, keep: usize) -> Context {
        let mut c = self;
        c.0[keep..].fill(ANY);
        c
    }
}

/// The number of thresholds strictly below `x`.
fn bucket(x: f64, thresholds: &[f64]) -> u8 {
    thresholds.iter().filter(|&&t| x > t).count() as u8
}

fn width_class(width: u32) -> u8 {
    match width {
        1 => 0,
        2..=7 => 1,
        8 => 2,
        9..=15 => 3,
        16 => 4,
        17..=31 => 5,
        _ => 6,
    }
}

fn dtype_class(float: Option<FloatFormat>) -> u8 {
    float.map_or(0, |f| {
        1 + FloatFormat::ALL.iter().position(|g| *g == f).unwrap_or(0) as u8
    })
}

fn size_class(n: usize) -> u8 {
    match n {
        0..=255 => 0,
        256..=4095 => 1,
        4096..=65535 => 2,
        _ => 3,
    }
}

fn distinct_class(distinct: Option<usize>, n: usize) -> u8 {
    match distinct {
        Some(1) => 0,
        Some(d) if d <= 16 => 1,
        Some(d) if d <= 256 => 2,
        Some(d) if d * 4 <= n => 3,
        _ => 4,
    }
}

/// Shannon entropy in bits of a histogram of `n` samples.
fn entropy(counts: &[u32], n: usize) -> f64 {
    let n = n as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_reflect_the_stream() {
        let hint = Hint {
            float: None,
            rows: None,
            columns: None,
        };
        let ramp: Vec<u32> = (0..1000).collect();
        let zeros = vec![0u32; 1000];
        let a = Context::new(&ramp, 32, None, Position::ROOT, hint);
        let b = Context::new(&zeros, 32, Some(1), Position::ROOT, hint);
        assert_eq!(a.0[9], 0, "a ramp has constant differences");
        assert_eq!(b.0[7], 3, "all zeros");
        assert_ne!(a, b);
        assert_eq!(a.backed_off(2), b.backed_off(2));
        assert_eq!(a.backed_off(0).0, [ANY; FIELDS]);
    }
}
