//! The tag byte that starts each program node (docs/FORMAT.md, "Programs"),
//! as the encoder writes it and the decoder reads it.

pub(super) const TAG_LIT: u8 = 0;
pub(super) const TAG_CONST: u8 = 1;
pub(super) const TAG_CONCAT: u8 = 2;
pub(super) const TAG_REPEAT: u8 = 3;
pub(super) const TAG_MAP: u8 = 4;
pub(super) const TAG_SCAN: u8 = 5;
pub(super) const TAG_MERGE: u8 = 6;
pub(super) const TAG_PALETTE: u8 = 7;
pub(super) const TAG_SCALED: u8 = 8;
pub(super) const TAG_MATCH: u8 = 9;
pub(super) const TAG_SPARSE: u8 = 10;
pub(super) const TAG_PARTITION: u8 = 11;
pub(super) const TAG_MIRROR: u8 = 12;
pub(super) const TAG_COLUMN_SCAN: u8 = 13;
