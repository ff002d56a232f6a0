//! Which SIMD instruction sets the decoders may use. Each kernel still checks
//! that the CPU has its features; tests lower the limit on their thread to
//! check that every kernel gives the same results as the portable code.

#![forbid(unsafe_code)]

/// Instruction sets of the SIMD kernels, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Simd {
    None,
    /// AVX2 and POPCNT.
    Avx2,
    /// AVX-512 (each kernel names the extensions it needs).
    Avx512,
}

/// The widest SIMD the decoders may use.
#[cfg(not(test))]
#[inline(always)]
pub(super) fn limit() -> Simd {
    Simd::Avx512
}

#[cfg(test)]
pub(super) use tests::limit;

/// The widest level this CPU has and [`limit`] allows: AVX-512 means
/// AVX-512F and VL besides AVX2 and POPCNT. Kernels needing more extensions
/// check those too. Cheap enough for every call of a kernel: the CPU is
/// asked once.
pub(super) fn level() -> Simd {
    static DETECTED: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    (*DETECTED.get_or_init(detect)).min(limit())
}

/// The widest level this CPU has.
fn detect() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("popcnt") {
            if has!("avx512f") && has!("avx512vl") {
                return Simd::Avx512;
            }
            return Simd::Avx2;
        }
    }
    Simd::None
}

#[cfg(test)]
pub(super) mod tests {
    use super::Simd;
    use std::cell::Cell;

    thread_local! {
        static LIMIT: Cell<Simd> = const { Cell::new(Simd::Avx512) };
    }

    pub(in crate::codec) fn limit() -> Simd {
        LIMIT.with(|l| l.get())
    }

    /// Runs `f` with this thread's decoders limited to `limit`, and to any
    /// limit already set around it: a helper that allows all SIMD inside a
    /// test of one level keeps that level.
    pub(in crate::codec) fn with_limit<R>(limit: Simd, f: impl FnOnce() -> R) -> R {
        let outer = LIMIT.with(|l| l.replace(limit.min(l.get())));
        let result = f();
        LIMIT.with(|l| l.set(outer));
        result
    }
}
