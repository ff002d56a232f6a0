//! One step of the rANS encoder (docs/FORMAT.md, "rANS (tag 3)": Encoder),
//! shared by its scalar and SIMD loops: each symbol's frequency, start and the
//! reciprocal that divides by the frequency, and where the renormalisation
//! words go.

#![forbid(unsafe_code)]

use super::layout::MAX_SCALE;
use super::model::{ceil_log2, Model};

/// Per-symbol data of the sizing simulation, 8 bytes so that one table
/// lookup (or two 32-bit gathers) fetches all of it.
///
/// `packed` is `(freq - 1) | start << 14 | l << 28` with `l = ceil(log2
/// freq)`: `freq <= 2^14`, `start < 2^14` and `l <= 14` fit their fields.
/// `magic` is the Granlund-Montgomery multiplier
/// `floor(2^32 * (2^l - freq) / freq) + 1`, below 2^32 since `2^l < 2 * freq`
/// for `freq >= 2` (and 1 for `freq == 1`). It gives `floor(y / freq)` for
/// every `y < 2^32` with one 32x32->64 multiplication (see `quotient`); the
/// test `size_quotient_is_exact` checks it for every frequency.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C)]
pub(super) struct SizeSymbol {
    pub(super) packed: u32,
    pub(super) magic: u32,
}

pub(super) const FIELD: u32 = (1 << 14) - 1;
const _: () = assert!(MAX_SCALE == 14);

impl SizeSymbol {
    pub(super) fn new(freq: u32, start: u32) -> SizeSymbol {
        assert!((1..=1 << MAX_SCALE).contains(&freq) && start <= FIELD);
        let l = ceil_log2(freq as usize);
        let magic = ((1u64 << 32) * ((1u64 << l) - freq as u64) / freq as u64 + 1) as u32;
        SizeSymbol {
            packed: (freq - 1) | start << 14 | l << 28,
            magic,
        }
    }

    pub(super) fn freq(self) -> u32 {
        (self.packed & FIELD) + 1
    }

    pub(super) fn start(self) -> u32 {
        (self.packed >> 14) & FIELD
    }

    /// `floor(y / freq)` for any `y < 2^32`: with `t = mulhi(y, magic) <= y`,
    /// `(t + ((y - t) >> min(l, 1))) >> max(l - 1, 0)` (no step overflows).
    #[inline(always)]
    pub(super) fn quotient(self, y: u32) -> u32 {
        let l = self.packed >> 28;
        let sh1 = l.min(1);
        let t = ((y as u64 * self.magic as u64) >> 32) as u32;
        (t + ((y - t) >> sh1)) >> (l - sh1)
    }

    /// One encoder step on state `x` with frequencies summing to
    /// `2^scale`: returns the new state and whether it renormalised. The
    /// the rANS step after renormalisation:
    /// `x >= 2^(32 - scale) * freq` iff `x >> (32 - scale) > freq - 1`, and
    /// `2^scale - freq == (2^scale - 1) - (freq - 1)`. Wrapping arithmetic
    /// matches the SIMD version (valid models never wrap).
    #[inline(always)]
    pub(super) fn step(self, x: u32, scale: u32) -> (u32, bool) {
        let fm1 = self.packed & FIELD;
        let renorm = ((x as u64) >> (32 - scale)) as u32 > fm1;
        let y = if renorm { x >> 16 } else { x };
        let start = (self.packed >> 14) & FIELD;
        let cmpl = ((1u32 << scale) - 1).wrapping_sub(fm1);
        let next = y
            .wrapping_add(start)
            .wrapping_add(self.quotient(y).wrapping_mul(cmpl));
        (next, renorm)
    }
}

pub(super) fn size_symbols(model: &Model) -> Vec<SizeSymbol> {
    let mut start = 0;
    model
        .freqs
        .iter()
        .map(|&freq| {
            let s = SizeSymbol::new(freq, start);
            start += freq;
            s
        })
        .collect()
}

/// Where an encoding run keeps the renormalisation words: the low 16 bits
/// of each state that renormalises go to `words[count]`, in the order of
/// [`run`](super::encode::run). Each step writes there, and `count` moves on only past the ones
/// that renormalise; the SIMD loop writes eight words at a time, so `words`
/// holds [`KEPT_SLACK`] beyond the most a run keeps.
pub(super) struct Kept<'a> {
    pub words: &'a mut [u16],
    pub count: usize,
}

/// Words past the kept ones a run may write (see [`Kept`]).
pub(super) const KEPT_SLACK: usize = 16;
