//! The end of a text report, below the findings: the provenance footer (when, where and how the
//! report was made) and the bottom line (the one or two things to fix, on which host).

use std::time::Duration;

use pathdoc_core::report::{CHECK_FAILED, CHECK_INTERRUPTED, CHECK_NOT_RUN};
use pathdoc_core::{units, AddressFamily, Finding, Remedy, Report, Status};

/// How many fixes the bottom line names; the findings above hold the rest.
const FIXES_SHOWN: usize = 2;

/// Two lines: when and on what the run was made, and the command line. Empty for reports saved
/// before provenance existed.
pub fn provenance(report: &Report) -> String {
    let Some(p) = &report.provenance else {
        return String::new();
    };
    let took = if p.duration_s.is_finite() && p.duration_s >= 0.0 {
        units::format_duration(Duration::from_secs_f64(p.duration_s))
    } else {
        format!("{} s", p.duration_s)
    };
    format!(
        "Run: {} for {took} · pathdoc {} (commit {}) · on {} ({})\nCommand: {}\n",
        p.started,
        p.pathdoc_version,
        p.commit,
        p.hostname,
        p.os,
        p.command_line_text()
    )
}

/// "Fix first:" with the worst problems' remedies and their hosts, or "nothing to fix".
pub fn bottom_line(report: &Report) -> String {
    let problems: Vec<&Finding> = {
        let mut p: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| is_verdict(f) && f.status >= Status::Warn)
            .collect();
        // Worst first; otherwise the report's own order (stable sort).
        p.sort_by_key(|f| std::cmp::Reverse(f.status));
        p
    };
    if problems.is_empty() {
        return nothing_to_fix(report);
    }
    let fixes = distinct_fixes(&problems);
    let more = fixes.len().saturating_sub(FIXES_SHOWN);
    let mut s = String::from("Bottom line — fix first:\n");
    for (i, fix) in fixes.iter().take(FIXES_SHOWN).enumerate() {
        let (f, remedy) = (fix.finding, fix.remedy);
        // In a run over both families, which one the fix is for.
        let families = match fix.families.as_slice() {
            _ if !report.both_families() => String::new(),
            [] => String::new(),
            [one] if f.title.starts_with(&format!("{one} only")) => format!(", {one} only"),
            [one] => format!(", {one}"),
            _ => ", IPv4 and IPv6".to_string(),
        };
        s.push_str(&format!(
            "  {}. {} ({} {}{families})\n",
            i + 1,
            fix_line(f, remedy, &fix.hosts),
            f.status,
            f.check
        ));
        if let Some(cmd) = remedy.and_then(|r| r.command.as_deref()) {
            if let Some(first) = cmd.lines().find(|l| !l.trim().is_empty()) {
                let etc = if cmd.lines().count() > 1 { " …" } else { "" };
                s.push_str(&format!("       {}{etc}\n", first.trim()));
            }
        }
    }
    if more > 0 {
        s.push_str(&format!(
            "  and {more} more problem{} above.\n",
            if more == 1 { "" } else { "s" }
        ));
    }
    s
}

/// One thing to do: the first remedy of a problem, with every host and family it applies to.
struct Fix<'a> {
    finding: &'a Finding,
    remedy: Option<&'a Remedy>,
    hosts: Vec<String>,
    families: Vec<AddressFamily>,
}

/// The problems' first remedies, one entry per distinct fix: the same fix for both directions,
/// both ends or both families is one thing to do.
fn distinct_fixes<'a>(problems: &[&'a Finding]) -> Vec<Fix<'a>> {
    let mut fixes: Vec<Fix<'a>> = Vec::new();
    for f in problems {
        let r = f.remedies.first();
        let host = r.and_then(|r| r.host.as_ref()).map(|h| h.to_string());
        let same = fixes.iter().position(|fix| {
            matches!((fix.remedy, r), (Some(a), Some(b)) if a.description == b.description && a.command == b.command)
        });
        let i = match same {
            Some(i) => i,
            None => {
                fixes.push(Fix {
                    finding: f,
                    remedy: r,
                    hosts: Vec::new(),
                    families: Vec::new(),
                });
                fixes.len() - 1
            }
        };
        let fix = &mut fixes[i];
        if let Some(h) = host.filter(|h| !fix.hosts.contains(h)) {
            fix.hosts.push(h);
        }
        if let Some(family) = f.family.filter(|x| !fix.families.contains(x)) {
            fix.families.push(family);
        }
    }
    fixes
}

/// A finding about the path, not the runner's note that a check did not run.
fn is_verdict(f: &Finding) -> bool {
    !matches!(
        f.id.as_str(),
        CHECK_FAILED | CHECK_INTERRUPTED | CHECK_NOT_RUN
    )
}

fn fix_line(f: &Finding, remedy: Option<&Remedy>, hosts: &[String]) -> String {
    match remedy {
        Some(r) => {
            let what = first_sentence(&r.description);
            match hosts {
                [] => what.to_string(),
                hosts => format!("{}: {what}", capitalized(&hosts.join(" and "))),
            }
        }
        None => format!("{} (no fix named: see above)", f.title),
    }
}

fn nothing_to_fix(report: &Report) -> String {
    let undecided = report
        .findings
        .iter()
        .any(|f| f.status == Status::Inconclusive);
    let line = if report.could_not_run() {
        "Bottom line: nothing measured, so nothing to fix yet (see why above)."
    } else if report.interrupted {
        "Bottom line: nothing to fix found before the run was interrupted."
    } else if undecided {
        "Bottom line: nothing proven to fix; the INCONCLUSIVE findings above say what to rerun."
    } else {
        "Bottom line: nothing to fix."
    };
    format!("{line}\n")
}

fn first_sentence(text: &str) -> &str {
    match text.find(". ") {
        Some(i) => &text[..=i],
        None => text,
    }
}

fn capitalized(text: &str) -> String {
    let mut c = text.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathdoc_core::{Host, Provenance};

    fn problem(id: &str, status: Status, host: Host, what: &str) -> Finding {
        Finding::new("idle", id, status, format!("{id} title")).remedy(
            Remedy::new(what)
                .on(host)
                .with_command("ServerAliveInterval 60"),
        )
    }

    #[test]
    fn names_the_worst_two_fixes_and_their_hosts() {
        let mut r = Report::new(pathdoc_core::Command::Check, "host");
        r.findings.push(problem(
            "w",
            Status::Warn,
            Host::Server,
            "Raise the buffer. More text.",
        ));
        r.findings.push(problem(
            "f",
            Status::Fail,
            Host::Client,
            "Add a keepalive. Why.",
        ));
        r.findings.push(problem(
            "f2",
            Status::Fail,
            Host::Isp,
            "Ask for a longer timeout.",
        ));
        r.findings
            .push(Finding::new("mtu", "ok", Status::Pass, "fine"));
        let s = bottom_line(&r);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "Bottom line — fix first:");
        assert_eq!(lines[1], "  1. On the client: Add a keepalive. (FAIL idle)");
        assert_eq!(lines[2], "       ServerAliveInterval 60");
        assert_eq!(
            lines[3],
            "  2. By your ISP: Ask for a longer timeout. (FAIL idle)"
        );
        assert_eq!(lines[5], "  and 1 more problem above.");
    }

    #[test]
    fn one_fix_for_both_ends_is_one_line_naming_both() {
        let mut r = Report::new(pathdoc_core::Command::Speed, "host");
        r.findings
            .push(problem("cpu", Status::Warn, Host::Server, "Free the CPU."));
        r.findings
            .push(problem("cpu", Status::Warn, Host::Client, "Free the CPU."));
        let s = bottom_line(&r);
        assert!(
            s.contains("  1. On the server and on the client: Free the CPU. (WARN idle)"),
            "{s}"
        );
        assert!(!s.contains("  2."), "{s}");
    }

    #[test]
    fn healthy_interrupted_and_undecided_runs_say_so() {
        let mut r = Report::new(pathdoc_core::Command::Check, "host");
        r.findings
            .push(Finding::new("mtu", "ok", Status::Pass, "fine"));
        assert_eq!(bottom_line(&r), "Bottom line: nothing to fix.\n");
        r.findings
            .push(Finding::new("idle", "x", Status::Inconclusive, "undecided"));
        assert!(bottom_line(&r).contains("nothing proven to fix"));
        r.interrupted = true;
        assert!(bottom_line(&r).contains("interrupted"));
    }

    #[test]
    fn footer_says_when_where_and_how() {
        let mut r = Report::new(pathdoc_core::Command::Check, "host");
        assert_eq!(provenance(&r), "");
        r.provenance = Some(Provenance {
            started: "2026-11-26T15:54:05+01:00".into(),
            duration_s: 72.0,
            pathdoc_version: "0.1.0".into(),
            commit: "abc".into(),
            hostname: "laptop".into(),
            os: "Linux 6.1.0 #1 SMP x86_64".into(),
            command_line: vec!["pathdoc".into(), "check".into(), "host".into()],
        });
        let s = provenance(&r);
        assert!(
            s.starts_with("Run: 2026-11-26T15:54:05+01:00 for 1 min 12 s"),
            "{s}"
        );
        assert!(
            s.contains("pathdoc 0.1.0 (commit abc) · on laptop (Linux 6.1.0"),
            "{s}"
        );
        assert!(s.contains("\nCommand: pathdoc check host\n"), "{s}");
    }
}
