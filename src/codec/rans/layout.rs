//! The layout of a rANS stream, the same for its encoder and decoder
//! (docs/FORMAT.md, "rANS (tag 3)" and "rANS (tag 4, version 6)"): lanes
//! in groups, the head byte, and the bounds of a state.

#![forbid(unsafe_code)]

/// States in a group; changing it changes the byte format.
pub(super) const LANES: usize = 32;
/// The states of a stream: `G` groups of [`LANES`].
pub(super) type Groups<const G: usize> = [[u32; LANES]; G];
/// A stream's head byte holds the scale in its low bits and log2 of the
/// number of groups (0 or 1) from this bit on. (Four groups would cost more
/// bytes of states and decoded no faster than two.)
pub(super) const GROUPS_SHIFT: u32 = 4;
/// In a seeded stream's head byte (tag 4), the precision of its table's
/// counts is in the bits from this one on, and the group bit is bit 4 alone.
pub(super) const PRECISION_SHIFT: u32 = 5;
/// Lower bound of a normalised state; also every lane's initial state.
pub(super) const STATE_LOW: u32 = 1 << 16;
/// Frequencies sum to 2^scale with scale <= 14, so `2^(32 - scale) * freq`
/// bounds stay >= 2^18 and one 16-bit renormalisation always suffices.
pub(super) const MAX_SCALE: u32 = 14;

/// The two forms of a rANS literal: tag 3's (frequencies as varints, every
/// state starting at [`STATE_LOW`]; format versions 1 to 5, read only) and
/// tag 4's (a table of counts to a few bits, states seeded with the last
/// words; version 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::codec) enum Form {
    Varints,
    Seeded,
}

/// The scale, log2 of the group count and the table's precision in a
/// stream's head byte, unchecked. In tag 3's form bits 4-7 are all the
/// group count, and the table holds exact frequencies.
pub(in crate::codec) fn head_fields(head: u8, form: Form) -> (u32, u8, u32) {
    let scale = (head & ((1 << GROUPS_SHIFT) - 1)) as u32;
    match form {
        Form::Varints => (scale, head >> GROUPS_SHIFT, 0),
        Form::Seeded => (
            scale,
            head >> GROUPS_SHIFT & 1,
            (head >> PRECISION_SHIFT) as u32,
        ),
    }
}

/// Number of lanes that code at least one word (only those store a state).
pub(in crate::codec) fn used_lanes(n: usize, groups: usize) -> usize {
    n.min(groups * LANES)
}
