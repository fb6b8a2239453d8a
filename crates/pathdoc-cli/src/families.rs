//! `pathdoc check` over both address families: a name with A and AAAA records is checked over
//! each, and the report says which family every finding is about. A problem found over one
//! family only is headed "IPv6 only: …; IPv4 is fine" and says what the user's applications will
//! do about it (RFC 6724 address selection, RFC 8305 Happy Eyeballs).

use pathdoc_core::report::{CHECK_FAILED, CHECK_INTERRUPTED, CHECK_NOT_RUN, FAMILY_UNREACHABLE};
use pathdoc_core::{AddressFamily, CheckName, Finding, Host, Remedy, Report, Status};
use pathdoc_proto::preflight::{AttemptError, PreflightError, Reached};

use crate::cmd::client::TargetPlan;

/// Each family's preflight, in the order the families run (the preferred one first).
pub type Reach = [(AddressFamily, Result<Reached, PreflightError>)];

/// The report's `target`: the name as typed and every address reached.
pub fn target_label(plan: &TargetPlan, reached: &Reach) -> String {
    let shown = plan.shown();
    let addrs: Vec<String> = reached
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().map(|r| r.addr.to_string()))
        .collect();
    match addrs.as_slice() {
        [one] if *one == shown => shown,
        [] => shown,
        all => format!("{shown} ({})", all.join(" and ")),
    }
}

/// One family's findings and data into the whole run's report: every finding names its family,
/// and in a run over both the data goes under `data.<family>`.
pub fn merge(report: &mut Report, one: Report, family: AddressFamily, both: bool) {
    report
        .findings
        .extend(one.findings.into_iter().map(|f| f.family(family)));
    if both {
        report.data.insert(
            family.key().to_string(),
            serde_json::Value::Object(one.data),
        );
    } else {
        report.data.extend(one.data);
    }
    report.interrupted |= one.interrupted;
}

/// A family of a dual-stack name over which the server did not answer (the other one did).
pub fn unreachable(
    family: AddressFamily,
    plan: &TargetPlan,
    error: Option<&PreflightError>,
    check: CheckName,
) -> Finding {
    let other = family.other();
    let decisive = error.and_then(PreflightError::decisive);
    let what = decisive.map_or_else(|| "no answer".to_string(), |(_, e)| e.to_string());
    let lost = matches!(
        decisive,
        Some((
            _,
            AttemptError::ConnectTimeout(_) | AttemptError::Unreachable(_)
        ))
    );
    let addrs: Vec<String> = error
        .map(|e| e.attempts.iter().map(|(a, _)| a.to_string()).collect())
        .unwrap_or_default();
    let host = &plan.target.host;
    let port = plan.port;
    let (status, consequence, remedy) = if lost {
        (
            Status::Warn,
            format!(
                "Browsers and curl try {other} 250 ms later (Happy Eyeballs, RFC 8305) and connect \
                 with that delay; ssh and most other tools try the addresses one after the other \
                 and wait for each {family} connect to time out first."
            ),
            Remedy::new(format!(
                "Let TCP and UDP port {port} through over {family} in the server's firewall and \
                 any firewall in front of it; `tracepath -6 {host}` from here shows how far {family} \
                 packets get."
            ))
            .on(Host::Server)
            .with_command(format!(
                "nft add rule inet filter input meta nfproto ipv6 tcp dport {port} accept"
            )),
        )
    } else {
        let seen = match decisive {
            Some((_, AttemptError::ConnectionRefused)) => format!(
                "Nothing listens on port {port} there over {family} (the connect was refused): the \
                 server may listen on an {other} address only (`pathdoc server` listens on \
                 0.0.0.0:{port} unless told otherwise)."
            ),
            _ => format!("Something answers there over {family}, but not as this pathdoc server."),
        };
        (
            Status::Info,
            format!("{seen} That is no fault of the path."),
            Remedy::new(format!(
                "Start the server on every address family: `pathdoc server --listen [::]:{port}` \
                 accepts {other} and {family} alike."
            ))
            .on(Host::Server),
        )
    };
    Finding::new(
        check,
        FAMILY_UNREACHABLE,
        status,
        format!(
            "{family} only: the server does not answer over {family} ({what}); the checks ran over {other} only"
        ),
    )
    .family(family)
    .summary(format!(
        "{host} has {family} addresses ({}) and {other} ones; over {family} the pathdoc handshake \
         failed: {what}. {consequence}",
        addrs.join(", ")
    ))
    .evidence(pathdoc_core::Evidence::new(
        format!("{family} connect to port {port}"),
        pathdoc_core::Quantity::Text(what.clone()),
    ))
    .remedy(remedy)
}

/// A finding about the path, not the runner's note that a check did not run.
fn is_verdict(f: &Finding) -> bool {
    !matches!(
        f.id.as_str(),
        CHECK_FAILED | CHECK_INTERRUPTED | CHECK_NOT_RUN | FAMILY_UNREACHABLE
    )
}

fn is_problem(f: &Finding) -> bool {
    is_verdict(f) && f.status >= Status::Warn
}

/// In a run over both families: head every problem the other family does not have "IPv6 only:
/// …" and say which family the user's applications use. Only when the other family ran the same
/// check to a verdict; a check that could not run there proves nothing.
pub fn compare(report: &mut Report) {
    let Some(preferred) = report.families.first().map(|r| r.family) else {
        return;
    };
    let snapshot = report.findings.clone();
    for f in report.findings.iter_mut().filter(|f| is_problem(f)) {
        let Some(family) = f.family else { continue };
        let other = family.other();
        let theirs = |x: &&Finding| x.family == Some(other) && x.check == f.check;
        let ran = snapshot.iter().filter(theirs).any(is_verdict)
            && !snapshot
                .iter()
                .filter(theirs)
                .any(|x| x.id == CHECK_FAILED || x.id == CHECK_INTERRUPTED);
        let shared = snapshot
            .iter()
            .filter(theirs)
            .any(|x| x.id == f.id && x.status >= Status::Warn);
        if !ran || shared {
            continue;
        }
        let other_clean = !snapshot
            .iter()
            .any(|x| x.family == Some(other) && is_problem(x));
        let tail = if other_clean {
            format!("; {other} is fine")
        } else {
            format!("; {other} does not have it")
        };
        f.title = format!("{family} only: {}{tail}", f.title);
        let sep = if f.summary.is_empty() { "" } else { " " };
        f.summary = format!("{}{sep}{}", f.summary, applications(family, preferred));
    }
}

/// What the user's applications do about a problem of `family` only, given the family this
/// host prefers for the server (the resolver's first address: RFC 6724 as configured here).
fn applications(family: AddressFamily, preferred: AddressFamily) -> String {
    let other = family.other();
    if family == preferred {
        format!(
            "Your applications meet it: this host prefers {family} for this server (RFC 6724 \
             address selection), and ssh, browsers and curl use {family} whenever its connection \
             opens (Happy Eyeballs, RFC 8305) — the connection does open, the failure comes \
             after, so they do not fall back to {other}, and a test over {other} does not \
             reproduce it. Until it is fixed, `ssh -{o}` / `curl -{o}` go over {other}.",
            o = if other == AddressFamily::Ipv4 { 4 } else { 6 }
        )
    } else {
        format!(
            "This host prefers {preferred} for this server (RFC 6724), so its applications use \
             {family} only when {preferred} fails to connect; clients that prefer {family} (or \
             have only {family}) meet it."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathdoc_core::FamilyRun;

    fn run(families: [AddressFamily; 2], findings: Vec<Finding>) -> Report {
        let mut r = Report::new(pathdoc_core::Command::Check, "server:7224");
        r.families = families
            .iter()
            .map(|&family| FamilyRun {
                family,
                address: None,
            })
            .collect();
        r.findings = findings;
        r
    }

    fn f(family: AddressFamily, id: &str, status: Status) -> Finding {
        Finding::new("mtu", id, status, format!("{id} title")).family(family)
    }

    use AddressFamily::{Ipv4, Ipv6};

    #[test]
    fn a_problem_of_one_family_is_headed_so_and_says_what_applications_do() {
        let mut r = run(
            [Ipv6, Ipv4],
            vec![
                f(Ipv6, "pmtud-black-hole", Status::Fail),
                f(Ipv4, "pmtud-black-hole", Status::Pass),
                f(Ipv4, "path-mtu", Status::Pass),
            ],
        );
        compare(&mut r);
        let bh = &r.findings[0];
        assert_eq!(bh.title, "IPv6 only: pmtud-black-hole title; IPv4 is fine");
        assert!(
            bh.summary.contains("Happy Eyeballs, RFC 8305"),
            "{}",
            bh.summary
        );
        assert!(bh.summary.contains("`ssh -4`"), "{}", bh.summary);
        assert_eq!(r.findings[1].title, "pmtud-black-hole title");
    }

    #[test]
    fn shared_problems_and_checks_that_did_not_run_over_the_other_family_are_left_alone() {
        let mut r = run(
            [Ipv4, Ipv6],
            vec![
                f(Ipv4, "a", Status::Warn),
                f(Ipv6, "a", Status::Fail),
                f(Ipv4, "b", Status::Fail),
                f(Ipv6, CHECK_FAILED, Status::Inconclusive),
            ],
        );
        compare(&mut r);
        assert!(r.findings.iter().all(|x| !x.title.contains("only")));
        // The other family has a problem of its own: "fine" would contradict it.
        let mut r = run(
            [Ipv4, Ipv6],
            vec![f(Ipv4, "a", Status::Warn), f(Ipv6, "b", Status::Fail)],
        );
        compare(&mut r);
        assert_eq!(
            r.findings[0].title,
            "IPv4 only: a title; IPv6 does not have it"
        );
        assert!(
            r.findings[1].summary.contains("prefers IPv4"),
            "{}",
            r.findings[1].summary
        );
    }
}
