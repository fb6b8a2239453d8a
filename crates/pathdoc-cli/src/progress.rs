//! Progress on stderr with indicatif: a spinner line for status, printed lines for notes.
//! Silent under `--json` or when stderr is not a terminal (notes still go to stderr then).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

use crate::Global;

pub struct TerminalProgress {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl TerminalProgress {
    pub fn new(global: Global) -> Self {
        let interactive = !global.json && std::io::stderr().is_terminal();
        let bar = interactive.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        TerminalProgress {
            bar,
            quiet: global.json,
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl pathdoc_core::Progress for TerminalProgress {
    fn status(&self, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.to_string());
        }
    }

    fn note(&self, message: &str) {
        match &self.bar {
            Some(bar) => bar.println(message),
            None if !self.quiet => eprintln!("{message}"),
            None => {}
        }
    }
}

impl Drop for TerminalProgress {
    fn drop(&mut self) {
        self.finish();
    }
}
