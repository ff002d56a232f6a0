//! Taking the signals that end a process (SIGINT, SIGTERM, SIGHUP) on one
//! thread of its own, so that what must happen before it ends (a mount
//! unmounted, temporaries removed) runs as ordinary code, not in a handler.

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it
/// starts afterwards) and returns the set, for [`wait`]. Call it before any
/// other thread starts, so that every thread inherits the mask and only the
/// one that waits takes them.
pub fn block() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use, and only valid
    // signal numbers are added; pthread_sigmask gets valid pointers.
    // Test: `a_blocked_signal_is_taken_by_wait`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for one of the signals [`block`] blocked and returns its number.
pub fn wait(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: both pointers are valid for the call; sigwait only fails for an
    // invalid set, which `block` never builds.
    // Test: `a_blocked_signal_is_taken_by_wait`.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_taken_by_wait() {
        // On a thread of its own, and sent to that thread only: the test
        // harness's other threads keep the default action, which would end
        // the process.
        let taken = std::thread::spawn(|| {
            let set = block();
            // SAFETY: sends a blocked signal to this very thread, where it
            // waits until `wait` takes it.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGHUP) };
            wait(&set)
        });
        assert_eq!(taken.join().unwrap(), libc::SIGHUP);
    }
}
