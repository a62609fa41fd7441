//! The qemu process itself: started so that it dies with its parent, and stopped so that the terminal it put in
//! raw mode is restored. Knows nothing of boots or consoles.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Makes the process `c` starts get SIGTERM when the thread that started it ends (a `run` or a test killed
/// before it could stop its VM takes the VM with it).
pub(super) fn dies_with_parent(c: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        c.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Asks qemu to quit (SIGTERM: it restores the terminal it put in raw mode), then kills it after 5 s.
pub(super) fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // SAFETY: kill(2) with a pid of a child not yet waited for, which cannot have been reused.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
