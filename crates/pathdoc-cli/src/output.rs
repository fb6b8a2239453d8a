//! Rendering reports and errors for humans (default) or as versioned JSON (`--json`).

use std::io::Write;

use pathdoc_core::{Finding, Remedy, Report, Status};

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

/// Human rendering: one block per finding, evidence indented under it, remedies last.
pub fn render_text(report: &Report) -> String {
    let mut s = String::new();
    for finding in &report.findings {
        render_finding(&mut s, finding);
        s.push('\n');
    }
    let overall = report.overall();
    let verdict = match overall {
        Status::Pass | Status::Info => "no problem found",
        Status::Warn => "works, but below recommendation",
        Status::Fail => "problem found",
        Status::Inconclusive => "not decided: see the reasons above",
    };
    s.push_str(&format!(
        "Overall: {} ({verdict}) — {}\n",
        overall, report.target
    ));
    s
}

/// A short rendering for the lab demo: one line per finding; problems also get their first
/// evidence lines and the first fix.
pub fn render_compact(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    for f in &report.findings {
        lines.push(format!("[{}] {}", f.status.label(), f.title));
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
    s.push_str(&format!(
        "[{:<5}] {}: {}\n",
        f.status.label(),
        f.check,
        f.title
    ));
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

/// Errors go to stderr, as text or as a JSON object with the same schema tag.
pub fn print_error(err: &anyhow::Error, global: Global) {
    if global.json {
        let doc = serde_json::json!({
            "schema": pathdoc_core::report::SCHEMA_VERSION,
            "error": format!("{err:#}"),
        });
        println!("{doc}");
    } else {
        eprintln!("pathdoc: error: {err:#}");
    }
}
