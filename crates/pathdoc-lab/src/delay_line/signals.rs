//! SIGTERM/SIGINT turn into a stop flag, so `pathdoc lab delay-line` exits cleanly with its stats.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::DelayLineError;

static TERMINATION_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn request_termination(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    TERMINATION_REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs SIGTERM and SIGINT handlers for the whole process and returns the flag they set.
///
/// Pass the flag to [`super::run_delay_line`] as its `stop`; blocked calls notice it within 100 ms.
pub fn stop_on_termination_signals() -> Result<&'static AtomicBool, DelayLineError> {
    let action = SigAction::new(
        SigHandler::Handler(request_termination),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
        unsafe { sigaction(signal, &action) }.map_err(|errno| DelayLineError::Io {
            context: format!("installing a {signal} handler"),
            source: errno.into(),
        })?;
    }
    Ok(&TERMINATION_REQUESTED)
}
