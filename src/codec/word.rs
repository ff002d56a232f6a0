//! The integer types decoded words are written into.

use std::fmt::Debug;
use std::ops::{BitOr, Shl};

/// An unsigned integer holding one decoded word: `u32` holds words of any
/// width, `u16` and `u8` hold words of at most 16 and 8 bits. Decoding an
/// 8- or 16-bit lane straight into its own type writes the output bytes
/// directly, instead of 4-byte words that a second pass would narrow.
///
/// Sealed: SIMD decoders store words by the type's size, which is only sound
/// for these three types.
///
/// Shifts and ors work in the type itself, so loops over narrow words
/// vectorize with narrow lanes; shifts are by less than `BITS`.
pub trait Word:
    sealed::Sealed
    + bytemuck::Pod
    + Default
    + Eq
    + Debug
    + Send
    + Sync
    + Shl<u32, Output = Self>
    + BitOr<Output = Self>
{
    /// Widest word this type holds.
    const BITS: u32;

    /// The low `BITS` bits of `w`; callers only pass words that fit.
    fn from_u32(w: u32) -> Self;

    fn to_u32(self) -> u32;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! impl_word {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}

        impl Word for $t {
            const BITS: u32 = <$t>::BITS;

            #[inline(always)]
            fn from_u32(w: u32) -> Self {
                w as $t
            }

            #[inline(always)]
            fn to_u32(self) -> u32 {
                self as u32
            }
        }
    )*};
}

impl_word!(u8, u16, u32);
