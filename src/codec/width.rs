//! The width of a literal's words: 1 to 32 bits, never stored (docs/FORMAT.md,
//! "Literals").

#![forbid(unsafe_code)]

/// Panics on caller bugs (not on data): a width outside 1..=32.
pub(super) fn check_width(width: u32) {
    assert!(
        (1..=32).contains(&width),
        "literal width {width} not in 1..=32"
    );
}

/// All ones in the low `width` bits (1..=32).
pub(super) fn word_mask(width: u32) -> u32 {
    u32::MAX >> (32 - width)
}
