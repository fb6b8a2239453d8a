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
    // A shell starts background jobs (`pathdoc check … &` in a script) with SIGINT ignored so
    // that Ctrl-C meant for the foreground leaves them alone; keep it that way.
    let mut int = if inherited_ignore(libc::SIGINT) {
        None
    } else {
        Some(signal(SignalKind::interrupt())?)
    };
    let mut term = signal(SignalKind::terminate())?;
    let fired = token.clone();
    tokio::spawn(async move {
        let first = tokio::select! {
            Some(_) = recv(&mut int) => "Ctrl-C",
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
            Some(_) = recv(&mut int) => {}
            _ = term.recv() => {}
        }
        crate::errln!("pathdoc: interrupted twice: quitting without a report");
        std::process::exit(pathdoc_core::report::exit::INTERRUPTED);
    });
    Ok(token)
}

/// The next signal of an optional stream; pending forever when there is none.
async fn recv(stream: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match stream {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Whether `signo` was set to "ignore" by whoever started us.
fn inherited_ignore(signo: libc::c_int) -> bool {
    // SAFETY: sigaction with a null new action only reads the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signo, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}
