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

/// How a decoder puts each word into its output slot: overwriting it, or
/// oring the word in as one field of a Merge (see [`OrIn`]).
pub(super) trait Put: Copy {
    /// The shifts to or in with, or None to overwrite. Constant per type, so
    /// the branch on it compiles away.
    fn or_in(self) -> Option<OrIn>;

    #[inline(always)]
    fn put<T: Word>(self, slot: &mut T, word: u32) {
        *slot = match self.or_in() {
            None => T::from_u32(word),
            Some(m) => m.apply(*slot, word),
        };
    }
}

/// Writes each word over its slot.
#[derive(Clone, Copy, Debug)]
pub(super) struct Overwrite;

impl Put for Overwrite {
    #[inline(always)]
    fn or_in(self) -> Option<OrIn> {
        None
    }
}

/// Ors a Merge field into words that hold the fields before it:
/// `slot = slot << pending | word << shift`, both shifts below `T::BITS`.
/// Shifting the earlier fields here saves a pass over the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrIn {
    pub pending: u32,
    pub shift: u32,
}

impl OrIn {
    /// `slot` with its earlier fields shifted into place and `word` ored in.
    #[inline(always)]
    pub fn apply<T: Word>(self, slot: T, word: u32) -> T {
        slot << self.pending | T::from_u32(word) << self.shift
    }

    /// Ors each of `words` into its slot of `out` (as [`OrIn::apply`]).
    pub fn apply_all<T: Word, F: Word>(self, out: &mut [T], words: &[F]) {
        #[cfg(target_arch = "x86_64")]
        if super::simd::level() >= super::simd::Simd::Avx2 {
            // SAFETY: `level` checked that the CPU has AVX2.
            return unsafe { self.apply_all_avx2(out, words) };
        }
        self.apply_each(out, words)
    }

    /// [`OrIn::apply_each`] compiled for AVX2: a Merge whose field is decoded
    /// in scratch runs it over every word, and the baseline x86-64 build
    /// does it in 128-bit vectors only.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn apply_all_avx2<T: Word, F: Word>(self, out: &mut [T], words: &[F]) {
        self.apply_each(out, words)
    }

    #[inline(always)]
    fn apply_each<T: Word, F: Word>(self, out: &mut [T], words: &[F]) {
        for (o, &w) in out.iter_mut().zip(words) {
            *o = self.apply(*o, w.to_u32());
        }
    }
}

impl Put for OrIn {
    #[inline(always)]
    fn or_in(self) -> Option<OrIn> {
        Some(self)
    }
}
