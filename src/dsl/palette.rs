//! The size of a Palette's tables (docs/FORMAT.md, "Programs": `Palette`):
//! a table of `2^k` words per group, `k` at most
//! [`MAX_PALETTE_INDEX_WIDTH`] bits.

/// Entries of each table of a Palette whose indices are `index_width` bits.
pub fn palette_table_len(index_width: u32) -> usize {
    1 << index_width
}

/// Words of the `values` of a Palette of `len` words in groups of `group`.
pub fn palette_values_len(len: usize, group: usize, index_width: u32) -> usize {
    len.div_ceil(group) * palette_table_len(index_width)
}

/// Widest index a Palette takes: tables of at most 256 words.
pub const MAX_PALETTE_INDEX_WIDTH: u32 = 8;
