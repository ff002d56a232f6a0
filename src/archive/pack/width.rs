//! How wide a tensor's chunks are: the chunk size, or a multiple of it
//! where the tensor's bytes' statistics say wider chunks code it smaller, or
//! whole chunks of its base's.

#![forbid(unsafe_code)]

use crate::error::Result;
use crate::safetensors::Element;
use crate::synth::{order0_bytes, plane_counts};

/// The chunk length of a tensor coded against a base whose chunks there
/// are `base_step` long: the base's, or where the base's chunks are shorter
/// than `chunk`, as many of them as fit it. Either way each chunk covers
/// whole base chunks, so a reader decodes each base chunk once; a chunk
/// inside a wider base chunk would make it decode that one again whenever
/// its cache let it go between them.
pub(super) fn against_base(base_step: u64, chunk: u64) -> u64 {
    if base_step >= chunk {
        base_step
    } else {
        chunk / base_step * base_step
    }
}

/// How many times the chunk size a tensor's chunks may be.
const WIDER_CHUNKS: [u64; 3] = [1, 2, 4];
/// Chunks of the widest size a tensor's choice is estimated on (its first
/// bytes).
const WIDTH_SAMPLE_CHUNKS: u64 = 4;
/// Chunks are not widened beyond this: wider ones pay for their tables in
/// a smaller share of their bytes, and it bounds the sample (4 MiB a tensor).
const WIDEST_CHUNK: u64 = 1 << 20;
/// Estimated bytes of a literal's code table per symbol, and of its other
/// fixed parts (rANS states, lengths), in [`tensor_chunk`]'s estimate: about
/// what byte planes' rANS tables take.
const TABLE_BYTES_PER_SYMBOL: usize = 1;
const LITERAL_FIXED_BYTES: usize = 150;
/// Tables a matrix's byte plane is estimated to take per chunk where its rows
/// may be coded in classes, each class with tables of its own: wide chunks
/// of such matrices take about as many classes as this, and counting fewer
/// tables underrates what narrow chunks pay for theirs, keeping chunks
/// narrow that code smaller wide.
const ROW_CLASS_TABLES: usize = 8;

/// Tables each byte plane of a tensor of `shape` takes per chunk in
/// [`tensor_chunk`]'s estimate.
pub(super) fn tables_per_plane(shape: &[u64], row_classes: bool) -> usize {
    if row_classes && shape.len() >= 2 {
        ROW_CLASS_TABLES
    } else {
        1
    }
}

/// The chunk size of a tensor of `len` bytes of `element`s, read by `read`:
/// of `chunk` and its multiples in [`WIDER_CHUNKS`], the one that codes its
/// first bytes smallest by an estimate (each chunk's byte planes coded
/// order-0, each with `tables` tables, or stored raw). Small chunks follow the
/// statistics where they change along the tensor; wide ones pay for their
/// tables and their coders' fixed parts fewer times, which on tensors of a
/// few chunks is most of what chunking costs them.
pub(super) fn tensor_chunk(
    len: u64,
    (element, tables): (Element, usize),
    chunk: u64,
    read: impl Fn(u64, &mut [u8]) -> Result<()>,
) -> Result<u64> {
    let e = element.layout.element_bytes() as u64;
    let narrow = (chunk / e).max(1) * e;
    // Widths that cut the tensor into two chunks or more (a remainder
    // under half a chunk joins the last): a tensor of one chunk would be
    // decoded by one thread of the mount's where two could share it.
    let widths: Vec<u64> = (WIDER_CHUNKS.iter().copied())
        .filter(|&m| 2 * len >= 3 * narrow * m && narrow * m <= WIDEST_CHUNK)
        .collect();
    if widths.len() < 2 {
        return Ok(chunk);
    }
    let widest = narrow * widths[widths.len() - 1];
    let mut sample = vec![0u8; (WIDTH_SAMPLE_CHUNKS * widest).min(len) as usize];
    read(0, &mut sample)?;
    // Each narrow chunk's planes are counted once; a wider chunk's counts
    // are the sum of its narrow ones'.
    let stride = e as usize;
    let pieces: Vec<(Vec<[u32; 256]>, usize)> = (sample.chunks(narrow as usize))
        .map(|piece| (plane_counts(piece, stride), piece.len() / stride))
        .collect();
    let cost = |m: u64| -> usize {
        (pieces.chunks(m as usize))
            .map(|group| {
                let mut counts = vec![[0u32; 256]; stride];
                for (piece, _) in group {
                    for (sum, plane) in counts.iter_mut().zip(piece) {
                        sum.iter_mut().zip(plane).for_each(|(s, c)| *s += c);
                    }
                }
                let n = group.iter().map(|(_, n)| n).sum();
                counts
                    .iter()
                    .map(|plane| estimated_plane_cost(plane, n, tables))
                    .sum::<usize>()
            })
            .sum()
    };
    let best = widths.iter().min_by_key(|&&m| cost(m));
    Ok(best.map_or(chunk, |m| narrow * m))
}

/// A byte plane of `n` bytes with these counts coded order-0 with `tables`
/// tables, or raw where that is smaller: an estimate of its literal's size.
fn estimated_plane_cost(counts: &[u32; 256], n: usize, tables: usize) -> usize {
    let symbols = counts.iter().filter(|&&c| c > 0).count();
    let table = tables * (TABLE_BYTES_PER_SYMBOL * symbols + LITERAL_FIXED_BYTES);
    (order0_bytes(std::slice::from_ref(counts), n) + table).min(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` BF16 words whose exponent is drawn from `exponents` (a noisy
    /// weight-like spread), the rest of the bits random.
    fn bf16_words(n: usize, exponents: &[u16], seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .flat_map(|_| {
                let r = next();
                // Later exponents of the list are rarer.
                let k = (r as u32).leading_zeros() as usize % exponents.len();
                let word = (r >> 32) as u16 & 0x807f | exponents[k] << 7;
                word.to_le_bytes()
            })
            .collect()
    }

    fn chunk_of(bytes: &[u8]) -> u64 {
        chunk_with_tables(bytes, 1)
    }

    fn chunk_with_tables(bytes: &[u8], tables: usize) -> u64 {
        let read = |at: u64, out: &mut [u8]| {
            out.copy_from_slice(&bytes[at as usize..][..out.len()]);
            Ok(())
        };
        let element = Element::of_dtype("BF16");
        tensor_chunk(bytes.len() as u64, (element, tables), 256 << 10, read).unwrap()
    }

    /// Statistics that change a little along the tensor: one table per plane
    /// pays for following them, a table per class of rows does not.
    #[test]
    fn matrices_whose_rows_take_classes_count_their_tables() {
        let pieces: Vec<u8> = (0..16u16)
            .flat_map(|k| {
                // The two commonest exponents swap places every 256 KiB.
                let (a, b) = if k % 2 == 0 { (110, 111) } else { (111, 110) };
                bf16_words(128 << 10, &[a, b, 112, 113, 114, 115], k as u64)
            })
            .collect();
        assert_eq!(chunk_with_tables(&pieces, 1), 256 << 10);
        assert_eq!(chunk_with_tables(&pieces, ROW_CLASS_TABLES), 1 << 20);
        assert_eq!(tables_per_plane(&[384, 1536], true), ROW_CLASS_TABLES);
        assert_eq!(tables_per_plane(&[384, 1536], false), 1);
        assert_eq!(tables_per_plane(&[1536], true), 1);
    }

    #[test]
    fn tensors_of_steady_statistics_take_wider_chunks() {
        let steady = bf16_words(4 << 20, &[120, 121, 119, 122, 118, 123], 7);
        assert_eq!(chunk_of(&steady), 1 << 20);
    }

    #[test]
    fn tensors_whose_statistics_change_keep_the_chunk_size() {
        // Every 256 KiB, another range of exponents: wider chunks would code
        // two ranges with one table.
        let pieces: Vec<u8> = (0..16u16)
            .flat_map(|k| {
                let base = 100 + 12 * (k % 2);
                bf16_words(128 << 10, &[base, base + 1, base + 2, base + 3], k as u64)
            })
            .collect();
        assert_eq!(chunk_of(&pieces), 256 << 10);
    }

    #[test]
    fn tensors_take_only_widths_that_leave_them_two_chunks() {
        let steady = |len: usize| bf16_words(len / 2, &[120, 121], 3);
        assert_eq!(chunk_of(&steady(256 << 10)), 256 << 10);
        assert_eq!(chunk_of(&steady(512 << 10)), 256 << 10);
        // 512 KiB and 256 KiB.
        assert_eq!(chunk_of(&steady(768 << 10)), 512 << 10);
        // At 1 MiB one chunk (its remainder under half a chunk): 512 KiB.
        assert_eq!(chunk_of(&steady(1280 << 10)), 512 << 10);
        assert_eq!(chunk_of(&steady(1536 << 10)), 1 << 20);
    }
}
