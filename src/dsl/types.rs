//! A program's type `b[n]` (docs/FORMAT.md, "Programs": a program's type is
//! never stored), and the widths that follow from a type.

/// Widest word the language models.
pub const MAX_WIDTH: u32 = 32;

/// The type `width[len]` of a program's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub width: u32,
    pub len: usize,
}

/// Mask of the low `width` bits.
pub fn mask(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    }
}

/// Width of the counts a node of `len` words stores (a Match's tokens, a
/// Sparse node's gaps): every count below `len` fits (at least 1 bit).
pub fn count_width(len: usize) -> u32 {
    (usize::BITS - len.saturating_sub(1).leading_zeros()).max(1)
}
