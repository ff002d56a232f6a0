//! Runs of consecutive numbers: the blocks of an object fetched in one
//! request each, the chunks of an archive whose records are fetched together.

#![forbid(unsafe_code)]

use std::ops::Range;

/// `sorted` (ascending, no repeats) as runs of consecutive numbers.
pub fn runs<T>(sorted: impl IntoIterator<Item = T>) -> Vec<Range<T>>
where
    T: Copy + PartialEq + std::ops::Add<Output = T> + From<u8>,
{
    let mut out: Vec<Range<T>> = Vec::new();
    for n in sorted {
        match out.last_mut() {
            Some(run) if run.end == n => run.end = n + T::from(1),
            _ => out.push(n..n + T::from(1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_make_one_run() {
        assert_eq!(runs([1u64, 2, 3, 7, 9, 10]), vec![1..4, 7..8, 9..11]);
        assert_eq!(runs(5usize..9), vec![5..9]);
        assert!(runs(Vec::<u64>::new()).is_empty());
    }
}
