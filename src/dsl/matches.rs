//! The Match operator's tokens run into its output (docs/FORMAT.md,
//! "Programs": `Match`), each checked before the words it guards are
//! written.

/// Copies of at most this many words are made word by word: a call of
/// `memmove` costs more than the copy (copies and literal runs of a few
/// words are most of a Match's tokens, so those calls would take much of
/// its decoding).
const SHORT_COPY: usize = 16;

/// Words a short run or copy moves at once, whatever its length: one
/// fixed-size move with no branch on the length. The words past the run's
/// end are written over by the tokens after it, as a Match's output is made
/// in order and every word of it is made.
const BLOCK: usize = 8;

/// `dst.copy_from_slice(src)`, word by word when short (see [`SHORT_COPY`]).
#[inline(always)]
fn copy_words<T: Copy>(dst: &mut [T], src: &[T]) {
    if dst.len() <= SHORT_COPY {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Moves `BLOCK` words from `src` to `out[o..]`.
#[inline(always)]
fn put_block<T: Copy>(out: &mut [T], o: usize, src: [T; BLOCK]) {
    out[o..o + BLOCK].copy_from_slice(&src);
}

/// The `BLOCK` words at `words[at..]`.
#[inline(always)]
fn block<T: Copy>(words: &[T], at: usize) -> [T; BLOCK] {
    words[at..at + BLOCK].try_into().expect("BLOCK words")
}

/// Runs a Match's tokens into `out` (see [`Op::Match`](super::Op::Match)):
/// literal runs from `lits`, copies of `lens[i] + 1` words from
/// `dists[i] + 1` words back. Every run and copy is checked against what is
/// already produced and what is left, so hostile tokens are refused, never
/// followed: a copy from before the output's start or past its end, literal
/// runs beyond the literals, literals and copies that do not make exactly
/// `out.len()` words. On a refusal `out` holds words of no meaning. Work is
/// O(out.len() + runs.len()).
pub fn run_matches<T: Copy>(
    out: &mut [T],
    lits: &[T],
    runs: &[u32],
    lens: &[u32],
    dists: &[u32],
) -> Result<(), &'static str> {
    let n = out.len();
    let (mut o, mut p) = (0usize, 0usize);
    for ((&run, &len), &dist) in runs.iter().zip(lens).zip(dists) {
        let run = run as usize;
        if run > lits.len() - p || run > n - o {
            return Err("match literal runs exceed the literals or the output");
        }
        if run <= 1 {
            // Most tokens carry no literal or one. One word is moved either
            // way, with no branch on which: where the run is empty, the copy
            // after it writes over that word.
            if let (Some(d), Some(&s)) = (out.get_mut(o), lits.get(p)) {
                *d = s;
            }
        } else if run <= BLOCK && BLOCK <= lits.len() - p && BLOCK <= n - o {
            put_block(out, o, block(lits, p));
        } else {
            copy_words(&mut out[o..o + run], &lits[p..p + run]);
        }
        o += run;
        p += run;
        let (len, dist) = (len as usize + 1, dist as usize + 1);
        if dist > o {
            return Err("match copy reaches before the output");
        }
        if len > n - o {
            return Err("match copy runs past the output");
        }
        if len == 1 {
            // A copy of one word, the most common, moves one word: a block
            // (read across the blocks the tokens just before stored) decodes
            // slower.
            out[o] = out[o - dist];
        } else if len <= BLOCK && dist >= BLOCK && BLOCK <= n - o {
            // The block read ends before `o`: it holds only words made.
            put_block(out, o, block(out, o - dist));
        } else if dist >= len && len > SHORT_COPY {
            out.copy_within(o - dist..o - dist + len, o);
        } else {
            // Word by word, forwards: an overlapping copy takes words it
            // has just written.
            for j in o..o + len {
                out[j] = out[j - dist];
            }
        }
        o += len;
    }
    if lits.len() - p != n - o {
        return Err("match literals and copies do not make the output");
    }
    out[o..].copy_from_slice(&lits[p..]);
    Ok(())
}
