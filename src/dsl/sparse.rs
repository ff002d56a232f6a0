//! The Sparse operator's exceptions placed into its fill (docs/FORMAT.md,
//! "Programs": `Sparse`), each position checked before it is written.

/// Writes a Sparse node's exceptions into `out` (already filled): value `i`
/// goes `gaps[i]` words past the one before it (the first, `gaps[0]` words
/// from the start). A position past the end is refused before anything is
/// written there. Work is O(gaps.len()).
pub fn place_sparse<T: Copy>(
    out: &mut [T],
    gaps: &[u32],
    values: &[T],
) -> Result<(), &'static str> {
    let mut at = 0usize;
    for (&gap, &value) in gaps.iter().zip(values) {
        at += gap as usize;
        let Some(o) = out.get_mut(at) else {
            return Err("sparse exception past the output");
        };
        *o = value;
        at += 1;
    }
    Ok(())
}
