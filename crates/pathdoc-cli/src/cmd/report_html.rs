//! `--report FILE.html` on `check` and `speed`: the same report as a self-contained HTML page
//! (crates/pathdoc-html). The destination is tested before the run starts, so a long check is
//! never lost to a typo in the path; an existing file is replaced only when the new one is
//! complete.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use pathdoc_core::Report;

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Report")]
pub struct HtmlReportArgs {
    /// Also write the report as one self-contained HTML file with plots (no network needed to
    /// open it: inline SVG and CSS), e.g. to mail to your ISP.
    #[arg(long = "report", value_name = "FILE.html")]
    pub report: Option<PathBuf>,
}

/// A destination that was proven writable. Nothing is left on disk until [`PendingHtml::write`]
/// (so a run killed meanwhile leaves no stray file), and an existing report is replaced only by
/// a complete one.
pub struct PendingHtml {
    target: PathBuf,
    temp: PathBuf,
}

impl HtmlReportArgs {
    /// Check the destination now (before a possibly long run) by creating a temporary file
    /// beside it.
    pub fn prepare(&self) -> anyhow::Result<Option<PendingHtml>> {
        let Some(target) = &self.report else {
            return Ok(None);
        };
        if target.is_dir() {
            anyhow::bail!(
                "HTML report {}: is a directory; give a file name such as report.html",
                target.display()
            );
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .with_context(|| format!("HTML report {}: not a file name", target.display()))?;
        let temp = dir.join(format!(
            ".{}.pathdoc-{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        // Prove the directory is writable now, without leaving anything behind.
        std::fs::File::create(&temp).with_context(|| {
            format!(
                "HTML report {}: cannot write in {}",
                target.display(),
                dir.display()
            )
        })?;
        let _ = std::fs::remove_file(&temp);
        Ok(Some(PendingHtml {
            target: target.clone(),
            temp,
        }))
    }
}

impl PendingHtml {
    /// Render `report`, write it and move it into place. Says where it went on stderr.
    pub fn write(self, report: &Report) -> anyhow::Result<PathBuf> {
        let html = pathdoc_html::render(report, &crate::checks::figures(report));
        let mut file = std::fs::File::create(&self.temp)
            .with_context(|| format!("creating {}", self.temp.display()))?;
        file.write_all(html.as_bytes())
            .and_then(|_| file.sync_all())
            .with_context(|| format!("writing {}", self.temp.display()))?;
        drop(file);
        std::fs::rename(&self.temp, &self.target)
            .with_context(|| format!("moving the HTML report to {}", self.target.display()))?;
        eprintln!("pathdoc: HTML report written to {}", shown(&self.target));
        Ok(self.target.clone())
    }
}

impl Drop for PendingHtml {
    fn drop(&mut self) {
        if self.temp.exists() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// An absolute path when one can be had, so the user can paste it into a browser.
fn shown(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
