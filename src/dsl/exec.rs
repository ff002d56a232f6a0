//! The executor: runs a program into a caller's buffer of words.
//!
//! Every node writes its output straight into its slice of the caller's buffer;
//! only Merge needs scratch space, one buffer per call reused across its parts.

use super::{Literal, Op, Program};
use std::cell::RefCell;

thread_local! {
    /// Word buffers reused across calls on this thread (one per nesting level in use).
    static SCRATCH: RefCell<Vec<Vec<u32>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a scratch buffer of `len` words (contents unspecified). Reusing
/// buffers keeps decoding from page-faulting fresh memory for every chunk.
pub fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u32]) -> R) -> R {
    let mut buf = SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let result = f(&mut buf[..len]);
    SCRATCH.with(|s| s.borrow_mut().push(buf));
    result
}

/// Where a literal's words come from.
pub trait LiteralSource {
    type Error;
    /// Writes exactly `out.len()` words of `width` bits.
    fn write_words(&self, width: u32, out: &mut [u32]) -> Result<(), Self::Error>;
}

impl LiteralSource for Literal {
    type Error = std::convert::Infallible;
    fn write_words(&self, _width: u32, out: &mut [u32]) -> Result<(), Self::Error> {
        out.copy_from_slice(&self.words);
        Ok(())
    }
}

/// Runs `p` into `out`, which must hold exactly `p.ty.len` words. The program must
/// be well typed (as built by the synthesizer or accepted by `decode_program`).
pub fn execute<L: LiteralSource>(p: &Program<L>, out: &mut [u32]) -> Result<(), L::Error> {
    debug_assert_eq!(out.len(), p.ty.len);
    let width = p.ty.width;
    match &p.op {
        Op::Lit(lit) => lit.write_words(width, out)?,
        Op::Const(w) => out.fill(*w),
        Op::Concat(parts) => {
            let mut rest = out;
            for part in parts {
                let (head, tail) = rest.split_at_mut(part.ty.len);
                execute(part, head)?;
                rest = tail;
            }
        }
        Op::Repeat { body, .. } => {
            let period = body.ty.len;
            execute(body, &mut out[..period])?;
            // Doubling copies: log2(times) memmoves instead of one per period.
            let mut filled = period;
            while filled < out.len() {
                let n = filled.min(out.len() - filled);
                out.copy_within(..n, filled);
                filled += n;
            }
        }
        Op::Map { op, body } => {
            execute(body, out)?;
            let op = *op;
            out.iter_mut().for_each(|x| *x = op.apply(*x, width));
        }
        Op::Scan { op, init, updates } => {
            execute(updates, out)?;
            let mut acc = *init;
            for x in out.iter_mut() {
                acc = op.step(acc, *x, width);
                *x = acc;
            }
        }
        Op::Merge { fields, parts } => {
            let shifts = fields.shifts(width);
            // The first field is built in place; the others go through scratch.
            let (first, rest) = parts.split_first().expect("merge has fields");
            execute(first, out)?;
            out.iter_mut().for_each(|o| *o <<= shifts[0]);
            with_scratch(out.len(), |scratch| {
                for (part, shift) in rest.iter().zip(&shifts[1..]) {
                    execute(part, scratch)?;
                    for (o, s) in out.iter_mut().zip(scratch.iter()) {
                        *o |= s << shift;
                    }
                }
                Ok(())
            })?;
        }
    }
    Ok(())
}
