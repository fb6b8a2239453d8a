//! Progress on stderr, never on stdout (stdout is the report).
//!
//! - stderr is a terminal: an indicatif spinner line for the status, notes printed above it.
//! - otherwise (piped, redirected, nohup): plain lines `[mm:ss] message` — every note, and a
//!   status line when the phase changes or, within one phase, at most every [`PLAIN_CADENCE`], so
//!   a two-hour idle check shows it is alive in a log without flooding it.
//! - `--quiet`: nothing.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::Global;

/// Longest gap between two status lines of the same phase in plain mode.
pub const PLAIN_CADENCE: Duration = Duration::from_secs(30);

pub struct TerminalProgress {
    mode: Mode,
    /// Put before every line while set: the address family a run over both is in ("IPv6: ").
    label: Mutex<Option<String>>,
}

enum Mode {
    Bar(ProgressBar),
    Plain(Mutex<Plain>),
    Quiet,
}

struct Plain {
    start: Instant,
    /// Phase of the last status line printed, and when.
    last: Option<(String, Instant)>,
    cadence: Duration,
}

impl TerminalProgress {
    pub fn new(global: Global) -> Self {
        let mode = if global.quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            Mode::Bar(bar)
        } else {
            Mode::Plain(Mutex::new(Plain {
                start: Instant::now(),
                last: None,
                cadence: plain_cadence(),
            }))
        };
        TerminalProgress {
            mode,
            label: Mutex::new(None),
        }
    }

    /// Prefix every status and note with `label` (`None`: no prefix), so a run over both
    /// address families says which one is running.
    pub fn set_label(&self, label: Option<&str>) {
        *self.label.lock().unwrap_or_else(|e| e.into_inner()) = label.map(str::to_string);
    }

    fn labelled<'a>(&self, message: &'a str) -> std::borrow::Cow<'a, str> {
        match &*self.label.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(l) => format!("{l}: {message}").into(),
            None => message.into(),
        }
    }

    pub fn finish(&self) {
        if let Mode::Bar(bar) = &self.mode {
            bar.finish_and_clear();
        }
    }
}

/// `PATHDOC_PROGRESS_INTERVAL` (a duration, e.g. `5s`) overrides the plain-mode cadence: tests
/// scale it down with the idle check, as they scale the check itself.
fn plain_cadence() -> Duration {
    std::env::var("PATHDOC_PROGRESS_INTERVAL")
        .ok()
        .and_then(|v| pathdoc_core::units::parse_duration(&v).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(PLAIN_CADENCE)
}

impl Plain {
    fn line(&self, message: &str) {
        let secs = self.start.elapsed().as_secs();
        let stamp = if secs >= 3600 {
            format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
        } else {
            format!("{:02}:{:02}", secs / 60, secs % 60)
        };
        // One line each: a newline in a server's text must not start a line of its own.
        let message = pathdoc_core::text::terminal_safe_line(message);
        crate::errln!("[{stamp}] {message}");
    }
}

impl pathdoc_core::Progress for TerminalProgress {
    fn status(&self, message: &str) {
        let message = &*self.labelled(message);
        match &self.mode {
            // The bar writes to the terminal itself, past the print macros' escaping.
            Mode::Bar(bar) => {
                bar.set_message(pathdoc_core::text::terminal_safe_line(message).into_owned())
            }
            Mode::Plain(plain) => {
                let mut p = plain.lock().unwrap_or_else(|e| e.into_inner());
                let phase = phase_of(message);
                let due = match &p.last {
                    None => true,
                    Some((last, at)) => *last != phase || at.elapsed() >= p.cadence,
                };
                if due {
                    p.line(message);
                    p.last = Some((phase, Instant::now()));
                }
            }
            Mode::Quiet => {}
        }
    }

    fn note(&self, message: &str) {
        let message = &*self.labelled(message);
        match &self.mode {
            Mode::Bar(bar) => bar.println(pathdoc_core::text::terminal_safe_line(message)),
            Mode::Plain(plain) => plain
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .line(message),
            Mode::Quiet => {}
        }
    }
}

impl Drop for TerminalProgress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What a status line says once its numbers are taken out: "idle: 3 min 10 s elapsed, no result
/// yet; ETA at most 2 h" and "idle: 3 min 40 s elapsed, …" are one phase; "…, timeout between …"
/// is the next one.
fn phase_of(message: &str) -> String {
    // Units, and the "of" of "(3 of 10 s)".
    const FILLER: [&str; 16] = [
        "µs", "ms", "s", "min", "h", "bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s", "B", "KiB",
        "MiB", "GiB", "%", "of",
    ];
    message
        .split_whitespace()
        .filter(|w| {
            let bare = w.trim_matches(|c: char| c.is_ascii_punctuation() && c != '%');
            !w.chars().any(|c| c.is_ascii_digit()) && !FILLER.contains(&bare)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_units_do_not_make_a_new_phase() {
        let a = phase_of("idle: 10 s elapsed, no result yet; ETA at most 2 h 9 min");
        let b = phase_of("idle: 1 h 2 min 10 s elapsed, no result yet; ETA at most 1 h 7 min");
        let c = phase_of("idle: 1 h 2 min 40 s elapsed, timeout between 50 s and 1 min; ETA soon");
        assert_eq!(a, b);
        assert_ne!(b, c);
        assert_eq!(
            phase_of("throughput: upload 941 Mbit/s (3 of 10 s)"),
            phase_of("throughput: upload 1.02 Gbit/s (9 of 10 s)")
        );
        assert_ne!(
            phase_of("mtu: server→client round 2: 8 sizes"),
            phase_of("mtu: client→server round 1: 8 sizes")
        );
    }
}
