//! How long-running checks report progress without knowing about the terminal.

/// Receives progress from a running check. The CLI draws it on stderr; tests ignore it.
pub trait Progress: Send + Sync {
    /// Replace the current one-line status, e.g. "idle: 12 of 40 probes answered, ETA 3 min".
    fn status(&self, message: &str);
    /// A line worth keeping in the scrollback (an outage, a phase result).
    fn note(&self, message: &str);
}

/// Discards progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn status(&self, _message: &str) {}
    fn note(&self, _message: &str) {}
}
