//! Ctrl-C and SIGTERM during `check` and `speed`: the first fires the `CancellationToken` the
//! checks watch (they stop probing, release their server session and return what they measured),
//! and the command prints the partial report and exits 130. A second signal exits at once.

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// How long the checks get to stop after the first signal before the command stops waiting and
/// reports what it has.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Start listening for SIGINT and SIGTERM on the current tokio runtime; the returned token fires
/// on the first one. Must be called from within the runtime.
pub fn install(quiet: bool) -> std::io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let fired = token.clone();
    tokio::spawn(async move {
        let first = tokio::select! {
            _ = int.recv() => "Ctrl-C",
            _ = term.recv() => "SIGTERM",
        };
        if !quiet {
            crate::errln!(
                "\npathdoc: {first}: stopping the checks and keeping what was measured (up to {} s; Ctrl-C again quits at once)",
                STOP_GRACE.as_secs()
            );
        }
        fired.cancel();
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        crate::errln!("pathdoc: interrupted twice: quitting without a report");
        std::process::exit(pathdoc_core::report::exit::INTERRUPTED);
    });
    Ok(token)
}
