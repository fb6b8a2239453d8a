//! Rendering reports and errors for humans (default) or as versioned JSON (`--json`).
//!
//! Everything the CLI prints goes through `outln!`/`out!`/`errln!`, which ignore write errors:
//! `pathdoc … | head` closes the pipe early, and that must not turn into a panic (Rust ignores
//! SIGPIPE, so a plain `println!` would panic on EPIPE). They also pass the text through
//! `pathdoc_core::text::terminal_safe`: much of what is printed came from a server, an sshd,
//! a capture or a report file, and an escape sequence in it must not reach the terminal.

/// `println!` that ignores a closed stdout.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{}", $crate::output::safe(&format!($($arg)*)));
    }};
}

/// `print!` that ignores a closed stdout.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), "{}", $crate::output::safe(&format!($($arg)*)));
    }};
}

/// `eprintln!` that ignores a closed stderr.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{}", $crate::output::safe(&format!($($arg)*)));
    }};
}

use std::io::Write;

/// What the print macros write: [`pathdoc_core::text::terminal_safe`] (newlines and tabs kept).
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    pathdoc_core::text::terminal_safe(text)
}

/// The report with every string in it escaped for one line of a terminal, so a field from a
/// server or a tampered file can neither send escapes nor start a line of its own.
pub fn terminal_safe_report(report: &Report) -> Report {
    // The text shows `data` only for `pathdoc speed` (its interval table). The rest is left out
    // rather than copied through a JSON value and back: `analyze --all` on 2 000 connections
    // spent 2.5 s and 80 MiB escaping summaries the text never prints.
    let shown = Report {
        schema: report.schema.clone(),
        pathdoc_version: report.pathdoc_version.clone(),
        command: report.command.clone(),
        target: report.target.clone(),
        findings: report.findings.clone(),
        data: if report.command == pathdoc_core::Command::Speed {
            report.data.clone()
        } else {
            serde_json::Map::new()
        },
        interrupted: report.interrupted,
        provenance: report.provenance.clone(),
        families: report.families.clone(),
    };
    let Ok(mut value) = serde_json::to_value(&shown) else {
        return shown;
    };
    // A remedy's command is several lines; the renderer indents each one.
    pathdoc_core::text::escape_json_strings(&mut value, &["command"]);
    serde_json::from_value(value).unwrap_or(shown)
}

use pathdoc_core::report::{CHECK_FAILED, CHECK_INTERRUPTED, CHECK_NOT_RUN};
use pathdoc_core::{Finding, Remedy, Report, Status};

use crate::error::{CliError, ERROR_SCHEMA};
use crate::Global;

/// Print a report in the selected format and return its exit code.
pub fn print_report(report: &Report, global: Global) -> i32 {
    let mut out = std::io::stdout().lock();
    if global.json {
        // A broken pipe on stdout is not worth a panic; the exit code still tells the story.
        let _ = serde_json::to_writer_pretty(&mut out, report);
        let _ = writeln!(out);
    } else {
        let _ = write!(out, "{}", render_text(report));
    }
    report.exit_code()
}

/// Human rendering: a pure function of the report, so `pathdoc report FILE.json` reproduces
/// exactly what the run printed. `pathdoc speed`'s per-interval table first (from the intervals
/// in `data`), then one block per finding, evidence indented under it, remedies last, then the
/// provenance footer, the bottom line (what to fix first) and the overall line.
pub fn render_text(report: &Report) -> String {
    // Fields from servers, captures and report files: escaped, one line each (see `safe`).
    let report = &terminal_safe_report(report);
    let mut s = String::new();
    if report.command == pathdoc_core::Command::Speed {
        s.push_str(&crate::speed_table::render(report));
    }
    // A run over both families: one section per family, in the order they ran.
    let mut section = None;
    for finding in &report.findings {
        if report.both_families() && finding.family != section {
            section = finding.family;
            if let Some(family) = section {
                s.push_str(&family_heading(report, family));
            }
        }
        render_finding(&mut s, finding);
        s.push('\n');
    }
    s.push_str(&crate::report_footer::provenance(report));
    s.push_str(&crate::report_footer::bottom_line(report));
    s.push_str(&overall_line(report));
    s
}

/// "── IPv6: [2001:db8::10]:7224 ──" above a family's findings.
fn family_heading(report: &Report, family: pathdoc_core::AddressFamily) -> String {
    let address = report
        .families
        .iter()
        .find(|r| r.family == family)
        .and_then(|r| r.address.as_deref())
        .map(|a| format!(" {a}"))
        .unwrap_or_else(|| " (not reached)".to_string());
    format!("── {family}{address} ──\n\n")
}

/// Each family's worst status, for the overall line of a run over both: "IPv6 FAIL, IPv4 PASS".
fn per_family(report: &Report) -> String {
    let parts: Vec<String> = report
        .families
        .iter()
        .map(|run| {
            if run.address.is_none() {
                return format!("{} not reached", run.family);
            }
            let worst = report
                .findings
                .iter()
                .filter(|f| f.family == Some(run.family))
                .map(|f| f.status)
                .max()
                .unwrap_or(Status::Pass);
            // PASS and INFO alike: nothing wrong over that family.
            let worst = if worst == Status::Info {
                Status::Pass
            } else {
                worst
            };
            format!("{} {worst}", run.family)
        })
        .collect();
    parts.join(", ")
}

/// The last line: what the run as a whole amounts to, in the same terms as the exit code.
fn overall_line(report: &Report) -> String {
    let target = &report.target;
    if report.interrupted {
        return format!("Overall: INTERRUPTED — partial results — {target}\n");
    }
    if report.could_not_run() {
        return format!("Overall: COULD NOT RUN (see the reasons above) — {target}\n");
    }
    let overall = report.overall();
    let verdict = match overall {
        Status::Pass | Status::Info => "no problem found",
        Status::Warn => "works, but below recommendation",
        Status::Fail => "problem found",
        Status::Inconclusive => "not decided: see the reasons above",
    };
    let mut failed: Vec<String> = Vec::new();
    for f in report.findings.iter().filter(|f| f.id == CHECK_FAILED) {
        let name = match f.family {
            Some(family) if report.both_families() => format!("{} over {family}", f.check),
            _ => f.check.clone(),
        };
        if !failed.contains(&name) {
            failed.push(name);
        }
    }
    let mut also = match failed.as_slice() {
        [] => String::new(),
        checks => format!("; could not run: {}", checks.join(", ")),
    };
    if report.both_families() {
        also.push_str(&format!("; {}", per_family(report)));
    }
    format!("Overall: {overall} ({verdict}{also}) — {target}\n")
}

/// A short rendering for the lab demo: one line per finding; problems also get their first
/// evidence lines and the first fix.
pub fn render_compact(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    for f in &report.findings {
        // "IPv6 only: …" titles name their family already.
        let family = match f.family {
            Some(family) if report.both_families() && !f.title.starts_with(family.label()) => {
                format!("{family}: ")
            }
            _ => String::new(),
        };
        lines.push(format!("[{}] {family}{}", f.status.label(), f.title));
        if f.status >= Status::Inconclusive {
            for e in f.evidence.iter().take(3) {
                lines.push(format!("    {}: {}", e.name, e.value));
            }
            if let Some(r) = f.remedies.first() {
                // Where and what in words first, so a bare command is never shown without the
                // host it belongs on.
                lines.push(format!("    fix {}", remedy_headline(r)));
                if let Some(cmd) = &r.command {
                    for line in cmd.lines() {
                        lines.push(format!("        {line}"));
                    }
                }
            }
        }
    }
    lines
}

fn render_finding(s: &mut String, f: &Finding) {
    // The runner's own findings say what happened to a check, not a verdict on the path.
    let label = match f.id.as_str() {
        CHECK_FAILED => "NOT RUN",
        CHECK_INTERRUPTED => "STOPPED",
        CHECK_NOT_RUN => "SKIPPED",
        _ => f.status.label(),
    };
    s.push_str(&format!("[{label:<5}] {}: {}\n", f.check, f.title));
    if !f.summary.is_empty() {
        for line in wrap(&f.summary, 90) {
            s.push_str(&format!("        {line}\n"));
        }
    }
    if let Some(req) = &f.requirement {
        s.push_str(&format!("        requirement: {req}\n"));
    }
    if !f.evidence.is_empty() {
        s.push_str("        evidence:\n");
        for e in &f.evidence {
            match &e.detail {
                Some(d) => s.push_str(&format!("          - {}: {} ({d})\n", e.name, e.value)),
                None => s.push_str(&format!("          - {}: {}\n", e.name, e.value)),
            }
        }
    }
    if !f.remedies.is_empty() {
        s.push_str("        fix:\n");
        for r in &f.remedies {
            match &r.host {
                Some(host) => s.push_str(&format!("          - {host}: {}\n", r.description)),
                None => s.push_str(&format!("          - {}\n", r.description)),
            }
            if let Some(c) = &r.command {
                for line in c.lines() {
                    s.push_str(&format!("              {line}\n"));
                }
            }
        }
    }
}

/// Compact form: "on the server: raise …" — the host, then the first sentence of the description.
fn remedy_headline(r: &Remedy) -> String {
    let first = first_sentence(&r.description);
    match &r.host {
        Some(host) => format!("{host}: {first}"),
        None => first.to_string(),
    }
}

fn first_sentence(text: &str) -> &str {
    match text.find(". ") {
        Some(i) => &text[..=i],
        None => text,
    }
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// An error that kept the command from running: text on stderr (one line, and a hint line when
/// there is a way out), or the `pathdoc.error/1` document on stdout under `--json`.
pub fn print_error(err: &CliError, command: &str, global: Global) {
    if global.json {
        let doc = error_document(err, command);
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer_pretty(&mut out, &doc);
        let _ = writeln!(out);
    } else {
        let line = pathdoc_core::text::terminal_safe_line;
        errln!("pathdoc: error: {}", line(&err.message));
        if let Some(hint) = &err.hint {
            errln!("pathdoc: hint: {}", line(hint));
        }
    }
}

/// The error document (docs/output.md), fields in this order.
#[derive(serde::Serialize)]
pub struct ErrorDocument<'a> {
    pub schema: &'static str,
    pub pathdoc_version: &'static str,
    /// The subcommand (`check`, `lab up`, …), `null` when none could be told.
    pub command: Option<&'a str>,
    pub error: &'a CliError,
    pub exit_code: i32,
}

pub fn error_document<'a>(err: &'a CliError, command: &'a str) -> ErrorDocument<'a> {
    ErrorDocument {
        schema: ERROR_SCHEMA,
        pathdoc_version: env!("CARGO_PKG_VERSION"),
        command: (!command.is_empty()).then_some(command),
        error: err,
        exit_code: pathdoc_core::report::exit::COULD_NOT_RUN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overall_lines_match_the_exit_codes() {
        let mut r = Report::new(pathdoc_core::Command::Check, "192.0.2.1:7224");
        r.findings.push(
            Finding::new(
                "mtu",
                CHECK_FAILED,
                Status::Inconclusive,
                "the mtu check could not run",
            )
            .summary("refused"),
        );
        let text = render_text(&r);
        assert!(text.contains("Overall: COULD NOT RUN"), "{text}");
        assert!(text.contains("[NOT RUN] mtu"), "{text}");
        r.findings.push(Finding::new(
            "idle",
            "udp-binding-timeout",
            Status::Info,
            "x",
        ));
        let text = render_text(&r);
        assert!(
            text.contains(
                "Overall: INCONCLUSIVE (not decided: see the reasons above; could not run: mtu)"
            ),
            "{text}"
        );
        r.interrupted = true;
        assert!(render_text(&r).contains("Overall: INTERRUPTED — partial results"));
    }

    #[test]
    fn a_run_over_both_families_has_a_section_each_and_says_each_verdict() {
        use pathdoc_core::{AddressFamily, FamilyRun};
        let mut r = Report::new(pathdoc_core::Command::Check, "server:7224");
        r.families = [AddressFamily::Ipv6, AddressFamily::Ipv4]
            .map(|family| FamilyRun {
                family,
                address: Some(format!("{}-addr", family.key())),
            })
            .to_vec();
        r.findings = vec![
            Finding::new("mtu", "pmtud-black-hole", Status::Fail, "IPv6 only: x")
                .family(AddressFamily::Ipv6),
            Finding::new("mtu", "path-mtu", Status::Pass, "fine").family(AddressFamily::Ipv4),
        ];
        let text = render_text(&r);
        let v6 = text.find("── IPv6 ipv6-addr ──").expect(&text);
        let v4 = text.find("── IPv4 ipv4-addr ──").expect(&text);
        assert!(v6 < text.find("IPv6 only: x").unwrap() && v4 > v6, "{text}");
        assert!(
            text.contains("Overall: FAIL (problem found; IPv6 FAIL, IPv4 PASS) — server:7224"),
            "{text}"
        );
        assert_eq!(
            render_compact(&r)[0],
            "[FAIL] IPv6 only: x",
            "the demo's lines name the family too"
        );
    }
}
