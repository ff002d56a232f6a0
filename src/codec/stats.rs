//! One pass over a stream gathers everything the size estimates need: the
//! largest word and, for alphabets of at most `MAX_SYMBOLS` words, the count of
//! each distinct word in each quarter of the stream (Huffman sizes its four
//! interleaved bitstreams from these without encoding).

use std::ops::Range;
use std::sync::OnceLock;

use super::index::{SymbolIndex, WordTable};
use super::{word_mask, MAX_SYMBOLS};

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
}

impl Alphabet {
    /// Total occurrences of each word.
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
}

/// The word ranges of the four quarters of a stream of `n` words: quarter `q`
/// is `[q*c, (q+1)*c)` clipped to `n`, with `c = ceil(n / 4)`.
pub(super) fn quarter_ranges(n: usize) -> [Range<usize>; 4] {
    let c = n.div_ceil(4);
    std::array::from_fn(|q| (q * c).min(n)..((q + 1) * c).min(n))
}

impl Stats {
    /// Panics if a word does not fit in `width` bits or the stream has 2^32
    /// words or more (caller bugs).
    pub fn new(words: &[u32], width: u32) -> Stats {
        super::check_width(width);
        assert!(words.len() <= u32::MAX as usize, "stream too long");
        let alphabet = if uses_dense_count(words.len(), width) {
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

    /// Number of distinct words, or None when there are more than 4096.
    pub fn distinct(&self) -> Option<usize> {
        self.alphabet.as_ref().map(Alphabet::len)
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
/// only for narrow words or streams long enough to amortise that.
fn uses_dense_count(n: usize, width: u32) -> bool {
    width <= 12 || (width <= 16 && n >= 1 << width)
}

fn count_dense(words: &[u32], width: u32) -> Option<Alphabet> {
    let size = 1usize << width;
    let mut counts = vec![0u32; 4 * size];
    for (q, range) in quarter_ranges(words.len()).into_iter().enumerate() {
        let table = &mut counts[q * size..(q + 1) * size];
        for &w in &words[range] {
            // Indexing panics on a word wider than `width`: a caller bug.
            table[w as usize] += 1;
        }
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

fn count_hashed(words: &[u32], width: u32) -> Option<Alphabet> {
    let mut table = WordTable::new();
    let mut distinct: Vec<u32> = Vec::new();
    let mut quarters: Vec<[u32; 4]> = Vec::new();
    for (q, range) in quarter_ranges(words.len()).into_iter().enumerate() {
        for &w in &words[range] {
            let id = table.get_or_insert(w, distinct.len() as u16) as usize;
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
        }
    }
}
