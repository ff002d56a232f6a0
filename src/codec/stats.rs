//! One pass over a stream gathers everything the size estimates need: the
//! largest word and, for alphabets of at most `MAX_SYMBOLS` words, the count of
//! each distinct word in each quarter of the stream (Huffman sizes its four
//! interleaved bitstreams from these without encoding).

#![forbid(unsafe_code)]

use std::sync::OnceLock;

use super::huffman::quarter_ranges;
use super::index::{SymbolIndex, WordTable};
use super::rans::Model;
use super::symbols::MAX_SYMBOLS;
use super::width::{check_width, word_mask};

/// Statistics of one stream, computed once and shared by every size estimate.
pub struct Stats {
    max: u32,
    alphabet: Option<Alphabet>,
}

/// The distinct words of a stream with their per-quarter counts.
pub(super) struct Alphabet {
    /// Distinct words in increasing order.
    pub(super) words: Vec<u32>,
    /// `quarters[i][q]`: occurrences of `words[i]` in quarter `q` of the stream.
    pub(super) quarters: Vec<[u32; 4]>,
    width: u32,
    /// Built on first use: only the encoders and the rANS size need it.
    index: OnceLock<SymbolIndex>,
    /// The rANS model and its cost of the words, chosen on first use:
    /// estimating, sizing and encoding a stream share it.
    pub(super) rans: OnceLock<(Model, i128)>,
}

impl Alphabet {
    /// Total occurrences of each word.
    /// Bits of an order-0 code of the words (tables not counted).
    pub(super) fn order0_bits(&self) -> f64 {
        let totals = self.totals();
        let n = totals.iter().sum::<u64>() as usize;
        order0_bits(totals, n)
    }

    pub(super) fn totals(&self) -> Vec<u64> {
        self.quarters
            .iter()
            .map(|q| q.iter().map(|&c| c as u64).sum())
            .collect()
    }

    pub(super) fn index(&self) -> &SymbolIndex {
        self.index
            .get_or_init(|| SymbolIndex::new(&self.words, self.width))
    }

    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// The width of the stream's words.
    pub(super) fn width(&self) -> u32 {
        self.width
    }
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("max", &self.max)
            .field("distinct", &self.distinct())
            .finish()
    }
}

impl Stats {
    /// Panics if a word does not fit in `width` bits or the stream has 2^32
    /// words or more (caller bugs).
    pub fn new(words: &[u32], width: u32) -> Stats {
        check_width(width);
        assert!(words.len() <= u32::MAX as usize, "stream too long");
        let alphabet = if uses_dense_count(width) {
            count_dense(words, width)
        } else {
            count_hashed(words, width)
        };
        let max = match &alphabet {
            Some(a) => a.words.last().copied().unwrap_or(0),
            None => words.iter().copied().max().unwrap_or(0),
        };
        assert!(max <= word_mask(width), "word exceeds width {width}");
        Stats { max, alphabet }
    }

    /// These statistics as a literal keeps them until it is encoded: without
    /// the symbol index, which can take 2^width entries and is quick to
    /// build again.
    pub fn kept(mut self) -> Stats {
        if let Some(alphabet) = &mut self.alphabet {
            alphabet.index.take();
        }
        self
    }

    /// Whether the stream holds one word (or none) throughout.
    pub fn is_constant(&self) -> bool {
        self.distinct().is_some_and(|d| d <= 1)
    }

    /// Number of distinct words, or None when there are more than 4096.
    pub fn distinct(&self) -> Option<usize> {
        self.alphabet.as_ref().map(Alphabet::len)
    }

    /// The most frequent word and how often it occurs (the smallest such
    /// word on a tie), or None when there are more than 4096 distinct words
    /// or none.
    pub fn mode(&self) -> Option<(u32, u64)> {
        let a = self.alphabet.as_ref()?;
        let total = |q: &[u32; 4]| q.iter().map(|&c| c as u64).sum::<u64>();
        let counted = a.words.iter().zip(&a.quarters);
        let (&word, count) = (counted.map(|(w, q)| (w, total(q))))
            .max_by_key(|&(&w, count)| (count, std::cmp::Reverse(w)))?;
        Some((word, count))
    }

    /// The statistics of the stream of `f(w)` for each word `w` of this
    /// one, where `f` is one-to-one on `width`-bit words (a Map's inverse):
    /// the same counts under new labels, as [`Stats::new`] of that stream
    /// gives them, without a pass over its words. None where this stream
    /// has more than 4096 distinct words (its largest mapped word needs
    /// the pass).
    fn relabelled(&self, f: impl Fn(u32) -> u32) -> Option<Stats> {
        let a = self.alphabet.as_ref()?;
        let mut pairs: Vec<(u32, [u32; 4])> = (a.words.iter().zip(&a.quarters))
            .map(|(&w, &q)| (f(w), q))
            .collect();
        pairs.sort_unstable_by_key(|&(w, _)| w);
        assert!(
            pairs.windows(2).all(|p| p[0].0 < p[1].0),
            "relabelling is one-to-one"
        );
        let max = pairs.last().map_or(0, |&(w, _)| w);
        assert!(max <= word_mask(a.width), "word exceeds width {}", a.width);
        let (words, quarters) = pairs.into_iter().unzip();
        let alphabet = Some(Alphabet::new(words, quarters, a.width));
        Some(Stats { max, alphabet })
    }

    /// The statistics of the stream of `f(w)` for each word `w` of this
    /// one, where `f` is one-to-one on their width (a Map's inverse), as
    /// [`Stats::new`] of that stream gives them: the same counts under new
    /// labels, or, beyond 4096 distinct words, as many distinct words again
    /// and the largest mapped word, `max()`, found without storing the
    /// stream.
    pub fn mapped(&self, f: impl Fn(u32) -> u32, max: impl FnOnce() -> u32) -> Stats {
        self.relabelled(f).unwrap_or_else(|| Stats {
            max: max(),
            alphabet: None,
        })
    }

    /// The largest word (0 for an empty stream).
    pub fn max(&self) -> u32 {
        self.max
    }

    pub(super) fn alphabet(&self) -> Option<&Alphabet> {
        self.alphabet.as_ref()
    }
}

/// Direct counting costs 4 * 2^width counters to clear and scan, so it pays
/// only for narrow words. Wider words up to 16 bits, in streams long enough
/// to amortise a `2^width` array of ids, look ids up directly; the rest hash.
fn uses_dense_count(width: u32) -> bool {
    width <= DENSE_MAX_WIDTH
}

fn uses_direct_ids(n: usize, width: u32) -> bool {
    width <= 16 && n >= 1 << width
}

/// Widest words counted with plain per-quarter histograms.
const DENSE_MAX_WIDTH: u32 = 12;

/// Up to this width, a histogram counts into several interleaved tables,
/// so that runs of equal words do not wait on each other's increments (a
/// store-to-load dependency); they are summed afterwards. Wider, the
/// tables would outgrow the caches.
const SPLIT_MAX_WIDTH: u32 = 10;
const SPLITS: usize = 4;
const _: () = assert!(SPLITS == 4, "SplitHistogram::add counts into four tables");

fn count_dense(words: &[u32], width: u32) -> Option<Alphabet> {
    let size = 1usize << width;
    let mut counts = vec![0u32; 4 * size];
    let quarter = words.len().div_ceil(4);
    if width <= PAIR_MAX_WIDTH && quarter >= PAIR_MIN_WORDS_PER_SLOT << (2 * width) {
        let mut pairs = PairHistogram::new(width);
        for (q, range) in quarter_ranges(words.len()).into_iter().enumerate() {
            pairs.count(&words[range], &mut counts[q * size..(q + 1) * size]);
        }
    } else {
        count_quarters_in_step(words, &mut counts, size);
    }
    let mut distinct = Vec::new();
    let mut quarters = Vec::new();
    for w in 0..size {
        let per_quarter = std::array::from_fn(|q| counts[q * size + w]);
        if per_quarter != [0; 4] {
            if distinct.len() == MAX_SYMBOLS {
                return None;
            }
            distinct.push(w as u32);
            quarters.push(per_quarter);
        }
    }
    Some(Alphabet::new(distinct, quarters, width))
}

/// Counts each quarter of `words` (see `quarter_ranges`) into its own
/// table of `size` counts in `counts`, the four quarters in step: four
/// increments in flight to four tables, none waiting on another where one
/// word runs on (a store-to-load dependency), and the tables are the
/// quarters' counts, nothing to clear or sum between quarters. Panics on a
/// word of `size` or more (a caller bug).
fn count_quarters_in_step(words: &[u32], counts: &mut [u32], size: usize) {
    let quarters = quarter_ranges(words.len()).map(|range| &words[range]);
    let (t0, rest) = counts.split_at_mut(size);
    let (t1, rest) = rest.split_at_mut(size);
    let (t2, t3) = rest.split_at_mut(size);
    let [w0, w1, w2, w3] = quarters;
    // Quarters are of non-increasing lengths: zipped to the last's.
    for (((&a, &b), &c), &d) in w0.iter().zip(w1).zip(w2).zip(w3) {
        t0[a as usize] += 1;
        t1[b as usize] += 1;
        t2[c as usize] += 1;
        t3[d as usize] += 1;
    }
    let common = w3.len();
    for (table, quarter) in [t0, t1, t2].into_iter().zip([w0, w1, w2]) {
        (quarter[common..].iter()).for_each(|&w| table[w as usize] += 1);
    }
}

/// A histogram of words below `size`, counted into [`SPLITS`] interleaved
/// tables (word `i` into table `i % SPLITS`) where `size` is at most
/// `2^SPLIT_MAX_WIDTH`, so that runs of one word do not make each increment
/// wait for the one before (a store-to-load dependency), else into one: a
/// word's count is the sum of its counts in the tables.
pub(crate) struct SplitHistogram {
    tables: Vec<u32>,
    size: usize,
}

impl SplitHistogram {
    pub(crate) fn new(size: usize) -> SplitHistogram {
        let tables = match size <= 1 << SPLIT_MAX_WIDTH {
            true => SPLITS,
            false => 1,
        };
        SplitHistogram {
            tables: vec![0; tables * size],
            size,
        }
    }

    /// Counts `words`. Panics on a word of `size` or more (a caller bug).
    pub(crate) fn add(&mut self, words: &[u32]) {
        if self.tables.len() == self.size {
            words.iter().for_each(|&w| self.tables[w as usize] += 1);
            return;
        }
        let (t0, rest) = self.tables.split_at_mut(self.size);
        let (t1, rest) = rest.split_at_mut(self.size);
        let (t2, t3) = rest.split_at_mut(self.size);
        let mut groups = words.chunks_exact(SPLITS);
        for g in &mut groups {
            t0[g[0] as usize] += 1;
            t1[g[1] as usize] += 1;
            t2[g[2] as usize] += 1;
            t3[g[3] as usize] += 1;
        }
        for &w in groups.remainder() {
            t0[w as usize] += 1;
        }
    }

    /// How many times `w` was counted.
    pub(crate) fn count(&self, w: usize) -> u32 {
        self.tables[w..].iter().step_by(self.size).sum()
    }
}

/// Widest words counted in pairs (see [`PairHistogram`]): a pair of them
/// indexes a table of at most 2^10 counts.
const PAIR_MAX_WIDTH: u32 = 5;

/// A quarter of a stream is counted in pairs only where it holds at least
/// this many words for each slot of the pair tables: summing a pair table
/// into the words' counts costs about a slot what an increment saves.
const PAIR_MIN_WORDS_PER_SLOT: usize = 4;

/// A histogram of narrow words (at most [`PAIR_MAX_WIDTH`] bits) that
/// counts each two consecutive words as one pair, in four interleaved
/// tables of pairs: half the increments, and fewer of them wait on the one
/// before where one word runs on (a sign and exponent's top bits, nearly
/// constant). A word's count is the sum of the pairs it is the first or the
/// second word of. The gain is largest where one value runs on nearly
/// throughout, whose increments would otherwise wait on each other.
struct PairHistogram {
    tables: Vec<u32>,
    width: u32,
}

impl PairHistogram {
    fn new(width: u32) -> PairHistogram {
        assert!(width <= PAIR_MAX_WIDTH);
        PairHistogram {
            tables: vec![0; 4 << (2 * width)],
            width,
        }
    }

    /// Writes the count of each word of `words` into `counts` (2^width
    /// of them). Panics on a word of `width` bits or more (a caller bug).
    fn count(&mut self, words: &[u32], counts: &mut [u32]) {
        let width = self.width;
        let wide = words.iter().fold(0, |acc, &w| acc | w);
        assert!(wide >> width == 0, "word exceeds width {width}");
        let slots = 1 << (2 * width);
        self.tables.fill(0);
        let (t0, rest) = self.tables.split_at_mut(slots);
        let (t1, rest) = rest.split_at_mut(slots);
        let (t2, t3) = rest.split_at_mut(slots);
        let pair = |a: u32, b: u32| (a | b << width) as usize;
        let mut groups = words.chunks_exact(8);
        for g in &mut groups {
            t0[pair(g[0], g[1])] += 1;
            t1[pair(g[2], g[3])] += 1;
            t2[pair(g[4], g[5])] += 1;
            t3[pair(g[6], g[7])] += 1;
        }
        counts.fill(0);
        for &w in groups.remainder() {
            counts[w as usize] += 1;
        }
        let low = (1 << width) - 1;
        for (i, (((a, b), c), d)) in t0.iter().zip(&*t1).zip(&*t2).zip(&*t3).enumerate() {
            let n = a + b + c + d;
            counts[i & low] += n;
            counts[i >> width] += n;
        }
    }
}

fn count_hashed(words: &[u32], width: u32) -> Option<Alphabet> {
    if uses_direct_ids(words.len(), width) {
        // id + 1 of each word seen so far, 0 if none.
        let mut ids = vec![0u16; 1 << width];
        return count_by_id(words, width, |w, fresh| {
            // Indexing panics on a word wider than `width`: a caller bug.
            let slot = &mut ids[w as usize];
            if *slot == 0 {
                *slot = fresh + 1;
            }
            *slot - 1
        });
    }
    let mut table = WordTable::new();
    count_by_id(words, width, |w, fresh| table.get_or_insert(w, fresh))
}

/// Counts with ids in order of first appearance: `id(w, fresh)` returns the
/// id of `w`, giving it `fresh` if it has none yet. Stops at the first word
/// beyond `MAX_SYMBOLS` distinct ones.
#[inline(always)]
fn count_by_id(words: &[u32], width: u32, mut id: impl FnMut(u32, u16) -> u16) -> Option<Alphabet> {
    let mut distinct: Vec<u32> = Vec::new();
    let mut quarters: Vec<[u32; 4]> = Vec::new();
    for (q, range) in quarter_ranges(words.len()).into_iter().enumerate() {
        for &w in &words[range] {
            let id = id(w, distinct.len() as u16) as usize;
            if id == distinct.len() {
                if id == MAX_SYMBOLS {
                    return None;
                }
                distinct.push(w);
                quarters.push([0; 4]);
            }
            quarters[id][q] += 1;
        }
    }
    // Ids follow first appearance; the formats want words sorted by value.
    let mut order: Vec<usize> = (0..distinct.len()).collect();
    order.sort_unstable_by_key(|&i| distinct[i]);
    let sorted = order.iter().map(|&i| distinct[i]).collect();
    let sorted_quarters = order.iter().map(|&i| quarters[i]).collect();
    Some(Alphabet::new(sorted, sorted_quarters, width))
}

impl Alphabet {
    fn new(words: Vec<u32>, quarters: Vec<[u32; 4]>, width: u32) -> Self {
        Alphabet {
            words,
            quarters,
            width,
            index: OnceLock::new(),
            rans: OnceLock::new(),
        }
    }
}

/// Bits of an order-0 code of `n` symbols with these counts (tables not
/// counted): the sum of `count * log2(n / count)`.
pub fn order0_bits(counts: impl IntoIterator<Item = u64>, n: usize) -> f64 {
    let n = n as f64;
    (counts.into_iter())
        .filter(|&c| c > 0)
        .map(|c| c as f64 * (n / c as f64).log2())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::xorshift;
    use std::collections::BTreeMap;

    /// A word wider than the stream's width is a caller's bug that panics,
    /// in the pair counting too (whose pairs of narrow words index tables
    /// where such a word could land unnoticed).
    #[test]
    #[should_panic(expected = "word exceeds width")]
    fn pair_counting_refuses_a_wide_word() {
        let mut words = vec![3u32; 40_000];
        words[5] = 16;
        Stats::new(&words, 4);
    }

    /// Every counting path (pairs, split and plain dense histograms, direct
    /// ids, hashing) gives the sorted words and per-quarter counts of a plain
    /// map, and gives up beyond `MAX_SYMBOLS` distinct words.
    #[test]
    fn every_counting_path_matches_a_map() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for (width, n, alphabet) in [
            (1u32, 7usize, 2u64),
            (1, 40_001, 2),
            (3, 4099, 5),
            (4, 70_000, 16),
            (5, 40_000, 3),
            (5, 16_387, 32),
            (8, 1001, 256),
            (8, 5, 3),
            (10, 4099, 1000),
            (11, 3000, 2048),
            (12, 20_000, 4096),
            (14, 20_000, 3000),
            (14, 1000, 500),
            (16, 70_000, 4096),
            (16, 70_000, 5000),
            (20, 9000, 4097),
            (23, 50_000, 1 << 23),
        ] {
            let mask = u32::MAX >> (32 - width);
            let words: Vec<u32> = (0..n)
                .map(|_| {
                    let r = xorshift(&mut seed);
                    ((r % alphabet) as u32).wrapping_mul(0x9E37_79B1) & mask
                })
                .collect();
            let mut map: BTreeMap<u32, [u32; 4]> = BTreeMap::new();
            for (q, range) in quarter_ranges(n).into_iter().enumerate() {
                for &w in &words[range] {
                    map.entry(w).or_default()[q] += 1;
                }
            }
            let stats = Stats::new(&words, width);
            assert_eq!(stats.max(), words.iter().copied().max().unwrap());
            match stats.alphabet() {
                Some(a) => {
                    assert_eq!(a.words, map.keys().copied().collect::<Vec<_>>());
                    assert_eq!(a.quarters, map.values().copied().collect::<Vec<_>>());
                }
                None => assert!(map.len() > MAX_SYMBOLS, "width {width} n {n}"),
            }
        }
    }
}
