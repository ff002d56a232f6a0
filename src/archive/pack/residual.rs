//! Packing against a base: a chunk of a tensor that the base archive's source
//! also has may store the XOR of its bytes with the base's bytes at the same
//! place in that tensor, or their difference. A fine-tune differs from its
//! base model in few bits of most values, so the residual codes far smaller
//! than the values themselves; an identical tensor codes as constants.

#![forbid(unsafe_code)]

use crate::archive::combine::Combine;
use crate::safetensors::Layout;
use crate::synth::strided_planes_cost;

/// A chunk's bytes combined with its base's, and what they cost.
pub struct Residual {
    pub combine: Combine,
    pub bytes: Vec<u8>,
    /// The order-0 cost of its byte planes (see `planes_cost`).
    pub cost: usize,
}

/// The cheaper residual of `bytes` against `base` (see [`Combine`]), by the
/// order-0 cost of its byte planes; XOR where they tie.
pub fn residual(bytes: &[u8], base: &[u8], layout: Layout) -> Residual {
    let [xor, difference] = [Combine::Xor, Combine::Difference].map(|combine| {
        let bytes = combine.residual(bytes, base, layout);
        let cost = planes_cost(&bytes, layout);
        Residual {
            combine,
            bytes,
            cost,
        }
    });
    if difference.cost < xor.cost {
        difference
    } else {
        xor
    }
}

/// Which coding of a chunk with a base to try: `(residual, plain)`, at least
/// one of them.
///
/// The order-0 costs of both sets of byte planes decide where one is clearly
/// cheaper (by a sixteenth); where they are close, both are coded and the
/// smaller record kept.
pub fn candidates(bytes: &[u8], residual: &Residual, layout: Layout) -> (bool, bool) {
    let (plain, delta) = (planes_cost(bytes, layout), residual.cost);
    // At least one is tried: the residual where both cost nothing.
    (delta * 16 <= plain * 17, plain * 16 < delta * 17)
}

/// The order-0 cost of the byte planes of `bytes`' lanes (the planes of
/// the elements' bytes: every layout's lanes split its elements on byte
/// boundaries).
fn planes_cost(bytes: &[u8], layout: Layout) -> usize {
    strided_planes_cost(bytes, layout.element_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_chunks_code_as_residuals_and_unrelated_ones_plainly() {
        let layout = Layout::Half;
        let try_both = |bytes: &[u8], residual: &[u8]| {
            let residual = Residual {
                combine: Combine::Xor,
                bytes: residual.to_vec(),
                cost: planes_cost(residual, layout),
            };
            candidates(bytes, &residual, layout)
        };
        let a: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
            .collect();
        let zero = vec![0u8; a.len()];
        assert_eq!(try_both(&a, &zero), (true, false));
        let skewed: Vec<u8> = a.iter().map(|b| b & 1).collect();
        assert_eq!(try_both(&skewed, &a), (false, true));
        assert_eq!(try_both(&a, &a), (true, true), "close: both");
        // Chunks too short to cost anything still get one coding.
        assert_eq!(try_both(&[7, 7], &[0, 0]), (true, false));
        assert_eq!(try_both(&[0, 0], &[0, 0]), (true, false));
    }

    /// A tensor is read to be looked up by content only where the store
    #[test]
    fn the_residual_is_the_cheaper_combination() {
        let layout = Layout::Half;
        let base: Vec<u8> = (0..2048u16)
            .flat_map(|i| (0x3c00 + i).to_le_bytes())
            .collect();
        // One more in the last place than the base: XOR flips the bits a
        // carry runs through, the difference is 1 throughout.
        let next: Vec<u8> = (0..2048u16)
            .flat_map(|i| (0x3c01 + i).to_le_bytes())
            .collect();
        let r = residual(&next, &base, layout);
        assert!(matches!(r.combine, Combine::Difference));
        assert_eq!(r.cost, planes_cost(&r.bytes, layout));
        assert_eq!(r.bytes, Combine::Difference.residual(&next, &base, layout));
        let same = residual(&base, &base, layout);
        assert!(matches!(same.combine, Combine::Xor), "a tie is XOR");
    }
}
