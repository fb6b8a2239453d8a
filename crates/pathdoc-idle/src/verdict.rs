//! Turning ladder outcomes into findings: PASS/FAIL per RFC requirement, the evidence, and the
//! fix on the host it applies to. Pure functions; the client fills the inputs from what its
//! probes saw.
//!
//! Rules that hold for every finding here: evidence that contradicts itself (a probe died after
//! a shorter idle time than another survived) is INCONCLUSIVE, never FAIL; remedies about the
//! box that forgets come from [`crate::owner`] only, so two findings never advise differently;
//! a session the server ended, a run that was interrupted and a probe mode that did not run or
//! finish are findings that say so, never read as a timeout or an outage.

use std::time::Duration;

use pathdoc_core::units::format_duration;
use pathdoc_core::CheckName;
use pathdoc_core::{Direction, Evidence, Finding, FindingId, Host, Quantity, Remedy, Status};
use serde::Serialize;

use crate::culprit::{CulpritAnalysis, Location, Segment};
use crate::hops::PathHops;
use crate::owner::{box_remedies, Fault, Owner};
use crate::schedule::{RFC4787_FLOOR, RFC4787_RECOMMENDED, RFC5382_FLOOR};
use crate::udp_client::{UdpClass, UdpClassReport, UdpReport};

const CHECK: CheckName = CheckName::Idle;

/// Every finding id the idle check emits.
pub const FINDING_IDS: &[FindingId] = &[
    FindingId {
        id: "tcp-idle-timeout",
        meaning: "when an idle TCP connection is forgotten (server-initiated probes), against RFC 5382 REQ-5 (≥ 2 h 4 min): FAIL below, PASS when no timeout up to ≥ 2 h 4 min, INFO for a shorter run without timeout, INCONCLUSIVE when the evidence contradicts itself or nothing could be judged",
    },
    FindingId {
        id: "tcp-state-rebuilt",
        meaning: "whether client-initiated probes revive an expired connection: WARN when only outbound traffic revives it, INFO otherwise",
    },
    FindingId {
        id: "tcp-keepalive-refresh",
        meaning: "whether TCP keepalives keep the state: PASS, WARN when they do not, INFO when not tested (with why)",
    },
    FindingId {
        id: "tcp-idle-culprit-hop",
        meaning: "which hop forgets first (hop field), with the other boxes' timeouts: FAIL below RFC 5382's floor, INCONCLUSIVE when it cannot be located (with why)",
    },
    FindingId {
        id: "udp-single-exchange-timeout",
        meaning: "when a UDP binding that saw one request and reply is forgotten, against RFC 4787 REQ-5 (≥ 2 min, 5 min recommended): FAIL/WARN/PASS, INFO for a lower bound, INCONCLUSIVE when contradictory or not measured",
    },
    FindingId {
        id: "udp-stream-timeout",
        meaning: "the same for a UDP binding with traffic both ways (a VPN, QUIC or VoIP flow gone quiet)",
    },
    FindingId {
        id: "udp-inbound-refresh",
        meaning: "RFC 4787 REQ-6: whether datagrams from the server alone keep a binding alive (direction server-to-client): INFO",
    },
    FindingId {
        id: "idle-outages",
        meaning: "the control connection lost its heartbeat (network outage, suspend, address change); tests overlapping it were discarded: INFO",
    },
    FindingId {
        id: "idle-session-ended",
        meaning: "the server ended the session (its --max-session-secs, a restart or shutdown) before the run was done: INCONCLUSIVE, never read as an outage or a timeout",
    },
    FindingId {
        id: "server-busy",
        meaning: "the server had no room for the check's session or for probe connections or UDP bindings (a pool full, shared out between other clients, or this client's own cap), with the server's words, the bound it refused by and its limit (and how many probe connections and UDP bindings it refused), a retry hint and the operator's fix: WARN",
    },
    FindingId {
        id: "probe-mode-not-run",
        meaning: "a probe mode did not run or did not finish (interrupted, session ended, the run's deadline, no UDP answer), with why: INFO",
    },
];

/// The check's session was refused for want of room: nothing ran.
pub fn server_busy(busy: &pathdoc_core::busy::ServerBusy) -> Finding {
    pathdoc_core::busy::describe(
        Finding::new(CHECK, "server-busy", Status::Warn, ""),
        "the idle check",
        busy,
    )
}

/// Probe connections and UDP bindings the server refused for want of room: the tests they
/// were for were retried or are missing, which the user must see. One finding for both, with
/// the words of the first kind refused.
pub fn probes_busy(
    connections: u32,
    bindings: u32,
    busy: &pathdoc_core::busy::ServerBusy,
) -> Finding {
    let count = |n: u32, one: &str, many: &str| match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    };
    let what = match (connections, bindings) {
        (c, 0) => count(c, "probe connection", "probe connections"),
        (0, b) => count(b, "UDP binding", "UDP bindings"),
        (c, b) => format!(
            "{} and {}",
            count(c, "probe connection", "probe connections"),
            count(b, "UDP binding", "UDP bindings")
        ),
    };
    let mut f = pathdoc_core::busy::describe(
        Finding::new(CHECK, "server-busy", Status::Warn, ""),
        &what,
        busy,
    );
    for (n, name) in [
        (connections, "probe connections refused"),
        (bindings, "UDP bindings refused"),
    ] {
        if n > 0 {
            f = f.evidence(Evidence::new(name, Quantity::Count(u64::from(n))));
        }
    }
    f
}

/// How a probe's test failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeathKind {
    /// Nothing arrived and nobody sent a reset: a box forgot the state and drops packets.
    SilentDrop,
    /// A reset ended the connection but neither endpoint's socket sent it: a middlebox did
    /// (or, for a client-initiated probe, the server's kernel for a 4-tuple it no longer
    /// recognises, i.e. state rebuilt with a new public port).
    MiddleboxReset,
    /// The server's side closed or reset the connection first.
    ServerClosed,
    /// A UDP reply came back from a different public port: the binding was rebuilt.
    NewPublicPort,
}

/// What one ladder (one probe mode) established.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LadderOutcome {
    /// Longest idle survived.
    #[serde(rename = "lower_s", with = "crate::duration::secs::option")]
    pub lower: Option<Duration>,
    /// Shortest idle after which the probe died.
    #[serde(rename = "upper_s", with = "crate::duration::secs::option")]
    pub upper: Option<Duration>,
    #[serde(rename = "resolution_s", with = "crate::duration::secs")]
    pub resolution: Duration,
    #[serde(rename = "horizon_s", with = "crate::duration::secs")]
    pub horizon: Duration,
    pub tests: u32,
    pub lost_to_outage: u32,
    pub contradictions: u32,
    /// How the dead probes died, with counts.
    pub deaths: Vec<(DeathKind, u32)>,
}

impl LadderOutcome {
    fn bracket(&self) -> String {
        match (self.lower, self.upper) {
            (l, Some(u)) => format!(
                "between {} and {}",
                format_duration(l.unwrap_or_default()),
                format_duration(u)
            ),
            (Some(l), None) => format!("none up to {}", format_duration(l)),
            (None, None) => "unknown".into(),
        }
    }

    /// The timeout estimate (midpoint of the bracket) and its ± half-width.
    pub fn estimate(&self) -> Option<(Duration, Duration)> {
        let u = self.upper?;
        let l = self.lower.unwrap_or_default().min(u);
        Some(((l + u) / 2, (u - l) / 2))
    }

    fn main_death(&self) -> Option<DeathKind> {
        self.deaths.iter().max_by_key(|(_, n)| *n).map(|(k, _)| *k)
    }

    /// Some probe died after an idle time no longer than another survived.
    pub fn contradicts_itself(&self) -> bool {
        self.contradictions > 0
    }
}

/// The server ended the session before the run was done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionEnd {
    /// When, since the start of the run.
    #[serde(rename = "at_s", with = "crate::duration::secs")]
    pub at: Duration,
    /// What the client saw (e.g. the server's refusal to resume).
    pub seen: String,
}

/// Context shared by the findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub elapsed: Duration,
    pub horizon: Duration,
    pub outages: u32,
    pub outage_time: Duration,
    pub public_addr: String,
    /// IPv6 with no address translation (the server saw the client's own address): the box that
    /// forgets is a stateful firewall, judged by RFC 6092 REC-35 rather than RFC 5382 (NAT).
    pub v6_firewall: bool,
    /// The server ended the session.
    pub session_end: Option<SessionEnd>,
    /// The user interrupted the run at this time.
    pub interrupted: Option<Duration>,
}

impl RunSummary {
    /// How to get a run that tests `need` idle: a longer `--idle-max` only if this run's was
    /// shorter (`suggest` is that flag's value); a run cut short that already allowed it was
    /// the user's own default run, so the advice is to let one finish.
    fn longer_run_hint(&self, need: Duration, suggest: &str) -> String {
        if self.horizon < need {
            format!("run with --idle-max {suggest}")
        } else {
            format!(
                "this run's --idle-max {} already allows that: run it again under tmux or nohup and let it finish",
                format_duration(self.horizon)
            )
        }
    }

    /// Why tests stopped early, in words, if they did.
    fn cut_short(&self) -> Option<String> {
        if let Some(at) = self.interrupted {
            return Some(format!(
                "the run was interrupted after {}",
                format_duration(at)
            ));
        }
        self.session_end.as_ref().map(|e| {
            format!(
                "the server ended the session after {}",
                format_duration(e.at)
            )
        })
    }
}

fn death_words(k: DeathKind) -> &'static str {
    match k {
        DeathKind::SilentDrop => {
            "silently dropped (no reset: the probe data never arrived and was never acknowledged)"
        }
        DeathKind::MiddleboxReset => "reset by a middlebox (a RST neither endpoint's socket sent)",
        DeathKind::ServerClosed => "closed by the server side",
        DeathKind::NewPublicPort => "answered from a new public port (the binding was rebuilt)",
    }
}

/// A keepalive interval comfortably below a timeout: half of the longest idle that survived,
/// at least 1 s, in whole seconds.
pub fn safe_interval(lower: Duration) -> u64 {
    (lower.as_secs() / 2).max(1)
}

/// What the keepalive-only probes showed at the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeepaliveOutcome {
    #[serde(rename = "interval_s", with = "crate::duration::secs")]
    pub interval: Duration,
    /// How long they carried no data when finally tested.
    #[serde(rename = "idle_data_s", with = "crate::duration::secs")]
    pub idle_data: Duration,
    pub alive: u32,
    pub dead: u32,
}

/// The keepalive probes' part of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Keepalive {
    /// Turned off (`--idle-no-keepalive`).
    Off,
    Tested(KeepaliveOutcome),
    /// Enabled but not tested, and why.
    NotRun(String),
}

/// Keepalives every `interval` s on the client and the server (ssh, the kernel, applications):
/// what keeps any connection alive whoever owns the box.
fn keepalive_remedies(interval: u64) -> Vec<Remedy> {
    vec![
        Remedy::new(format!("ssh: send a keepalive every {interval} s, well below the timeout (~/.ssh/config)"))
            .on(Host::Client)
            .with_command(format!("Host *\n    ServerAliveInterval {interval}\n    ServerAliveCountMax 3")),
        Remedy::new("sshd: the same from the server's side (/etc/ssh/sshd_config)")
            .on(Host::Server)
            .with_command(format!("ClientAliveInterval {interval}\nClientAliveCountMax 3")),
        Remedy::new("Linux: start TCP keepalives before the timeout (applications must enable SO_KEEPALIVE)")
            .on(Host::BothEnds)
            .with_command(format!(
                "sysctl -w net.ipv4.tcp_keepalive_time={interval} net.ipv4.tcp_keepalive_intvl={} net.ipv4.tcp_keepalive_probes=5",
                (interval / 3).max(1)
            )),
        Remedy::new(format!(
            "Send an application-level keepalive at least every {interval} s on idle connections"
        ))
        .on(Host::Other { name: "applications you write".into() }),
    ]
}

/// The rule an established TCP connection's idle timeout is judged by: RFC 5382 REQ-5 for a NAT,
/// and for an IPv6 stateful firewall that translates nothing RFC 6092 REC-35 (the same floor).
pub fn tcp_requirement(v6_firewall: bool) -> &'static str {
    if v6_firewall {
        "RFC 6092 REC-35 (IPv6 stateful firewalls, no NAT here): an established TCP connection's idle timeout MUST NOT be less than 2 h 4 min"
    } else {
        "RFC 5382 REQ-5: an established TCP connection's idle timeout MUST NOT be less than 2 h 4 min"
    }
}

/// Findings for TCP: the RFC 5382 REQ-5 verdict from server-initiated probes, what
/// client-initiated probes add (state rebuilt by outbound traffic?) and whether TCP keepalives
/// keep the state. `owner` is the box that forgets, as far as the culprit search located it.
pub fn tcp_findings(
    server: &LadderOutcome,
    client: Option<&LadderOutcome>,
    keepalive: &Keepalive,
    run: &RunSummary,
    owner: &Owner,
) -> Vec<Finding> {
    let mut out = vec![TimeoutVerdict::new(server, run, owner).finding()];
    if let (Some(c), Some(su)) = (client, server.upper) {
        out.push(state_rebuilt_finding(c, su, run));
    }
    if let Some(su) = server.upper.filter(|_| !server.contradicts_itself()) {
        out.extend(keepalive_finding(keepalive, su));
    }
    out
}

/// The `tcp-idle-timeout` finding: one of four shapes (contradicting results, a bracketed
/// timeout, no timeout up to the longest idle tested, nothing judged), all with the same
/// requirement, hop and run evidence.
struct TimeoutVerdict<'a> {
    server: &'a LadderOutcome,
    run: &'a RunSummary,
    owner: &'a Owner,
    /// " (why the run was cut short; …)", or empty.
    cut: String,
}

impl<'a> TimeoutVerdict<'a> {
    fn new(server: &'a LadderOutcome, run: &'a RunSummary, owner: &'a Owner) -> Self {
        let cut = run
            .cut_short()
            .map(|why| format!(" ({why}; this is what was measured until then)"))
            .unwrap_or_default();
        TimeoutVerdict {
            server,
            run,
            owner,
            cut,
        }
    }

    fn finding(&self) -> Finding {
        if self.server.contradicts_itself() {
            return self.contradiction();
        }
        match (self.server.lower, self.server.upper) {
            (lower, Some(upper)) => self.bracketed(lower.unwrap_or_default(), upper),
            (Some(lower), None) => self.no_timeout_up_to(lower),
            (None, None) => self.nothing_judged(),
        }
    }

    fn base(&self, status: Status, title: String) -> Finding {
        let req = tcp_requirement(self.run.v6_firewall);
        let f = Finding::new(CHECK, "tcp-idle-timeout", status, title).requirement(req);
        match self.owner.hop() {
            Some(h) if self.server.upper.is_some() => f.hop(h as u32),
            _ => f,
        }
    }

    fn common(&self, f: Finding) -> Finding {
        let (server, run) = (self.server, self.run);
        f.evidence(Evidence::new(
            "server-initiated probes tested",
            Quantity::Count(server.tests as u64),
        ))
        .evidence(Evidence::new(
            "resolution",
            Quantity::duration(server.resolution),
        ))
        .evidence(
            Evidence::new("run time", Quantity::duration(run.elapsed))
                .with_detail(format!("horizon {}", format_duration(run.horizon))),
        )
        .evidence(Evidence::new(
            "public address seen by the server",
            Quantity::Text(run.public_addr.clone()),
        ))
    }

    fn contradiction(&self) -> Finding {
        self.common(
            self.base(Status::Inconclusive, "idle-timeout results contradict each other".into())
            .summary(format!(
                "Some server-initiated probes died after an idle time no longer than others survived ({} such tests; \
                 longest idle survived {}, shortest that killed {}). A box that forgets by idle time alone never does that: \
                 the path loses packets or state for other reasons. Not judged; re-run on a quieter path.{}",
                self.server.contradictions,
                self.server.lower.map_or("none".into(), format_duration),
                self.server.upper.map_or("none".into(), format_duration),
                self.cut,
            ))
            .evidence(Evidence::new("contradicting tests", Quantity::Count(self.server.contradictions as u64))),
    )
    }

    fn bracketed(&self, lower: Duration, upper: Duration) -> Finding {
        let (est, pm) = self.server.estimate().unwrap_or_default();
        // A timeout of exactly the floor complies ("MUST NOT be less than"): FAIL only when
        // the shortest idle that killed a probe is below it.
        let status = if upper < RFC5382_FLOOR {
            Status::Fail
        } else {
            Status::Pass
        };
        let how = self.server.main_death().map(death_words).unwrap_or("lost");
        let interval = safe_interval(lower);
        let who = match self.owner {
            Owner::Unknown => "A stateful box on the path".to_string(),
            o => capitalize(&o.words()),
        };
        let mut f = self.base(status, format!("idle TCP connections are dropped after {} ± {}", format_duration(est), format_duration(pm)))
                .summary(format!(
                    "A probe the server sent after {} idle got through; after {} idle it was {how}. {who} forgets idle \
                     connections {}{}. Any connection silent longer than that (an idle ssh session, a transfer waiting on a \
                     slow peer) dies without notice.{}",
                    format_duration(lower),
                    format_duration(upper),
                    self.server.bracket(),
                    if status == Status::Fail { ", below the 2 h 4 min the RFC requires" } else { "" },
                self.cut,
                ))
                .evidence(Evidence::new("longest idle survived", Quantity::duration(lower)))
                .evidence(Evidence::new("shortest idle that killed the connection", Quantity::duration(upper)).with_detail(how));
        for (k, n) in &self.server.deaths {
            f = f.evidence(Evidence::new(
                format!("probes {}", death_words(*k)),
                Quantity::Count(*n as u64),
            ));
        }
        f = self.common(f).remedies(keepalive_remedies(interval));
        if status == Status::Fail {
            f = f.remedies(box_remedies(
                self.owner,
                Fault::TcpEstablished {
                    timeout: est,
                    pm,
                    v6_firewall: self.run.v6_firewall,
                },
            ));
        }
        f
    }

    fn no_timeout_up_to(&self, lower: Duration) -> Finding {
        let proven = lower >= RFC5382_FLOOR;
        // Short of the floor, the run measured a lower bound: information, not a pass.
        let status = if proven { Status::Pass } else { Status::Info };
        self.common(
                self.base(status, format!("no idle timeout up to {}", format_duration(lower))).summary(if proven {
                    format!("Every server-initiated probe got through, the longest after {} idle: this path meets REQ-5.", format_duration(lower))
                } else {
                    format!(
                        "Every server-initiated probe got through, the longest after {} idle. The run was shorter than the \
                         2 h 4 min floor, so REQ-5 itself is not proven; to prove it, {}.{}",
                        format_duration(lower),
                        self.run.longer_run_hint(RFC5382_FLOOR, "2h10m"),
                        self.cut,
                    )
                }),
            )
            .evidence(Evidence::new("longest idle survived", Quantity::duration(lower)))
    }

    fn nothing_judged(&self) -> Finding {
        let why = match self.run.cut_short() {
                Some(why) => format!("{}: no server-initiated test had finished.", capitalize(&why)),
                None => format!(
                    "None of the probes produced a usable result ({} lost to outages of the control connection, {} in total). \
                     Check connectivity to the server and re-run.",
                    self.server.lost_to_outage,
                    format_duration(self.run.outage_time)
                ),
            };
        self.common(
            self.base(Status::Inconclusive, "no idle probe could be judged".into())
                .summary(why),
        )
    }
}

/// `tcp-state-rebuilt`: do client-initiated probes survive where server-initiated ones died
/// (after `su`, the shortest idle that killed one)?
fn state_rebuilt_finding(c: &LadderOutcome, su: Duration, run: &RunSummary) -> Finding {
    match c.upper {
        None if c.lower.is_some_and(|l| l >= su) => Finding::new(CHECK, "tcp-state-rebuilt", Status::Warn, "outbound traffic revives an expired connection, inbound does not")
            .summary(format!(
                "Client-initiated probes still got answers after {} idle, although server-initiated ones died after {}: the \
                 box rebuilds the state when the client speaks first (mid-stream pickup), but data from the server after an \
                 idle period is lost. Interactive sessions revive when you type; server pushes and long downloads waiting \
                 on the server die.",
                format_duration(c.lower.unwrap_or_default()),
                format_duration(su)
            ))
            .evidence(Evidence::new("client-initiated: longest idle answered", Quantity::duration(c.lower.unwrap_or_default())))
            .evidence(Evidence::new("server-initiated: shortest idle that died", Quantity::duration(su)))
            .remedy(Remedy::new("Keep the connection busy from either side more often than the timeout (the keepalives of tcp-idle-timeout)").on(Host::BothEnds)),
        Some(cu) => {
            let how = c.main_death().map(death_words).unwrap_or("lost");
            Finding::new(CHECK, "tcp-state-rebuilt", Status::Info, "expired connections stay dead in both directions")
                .summary(format!(
                    "Client-initiated probes died too, after {} idle ({how}): the box does not rebuild state from mid-stream \
                     packets, so once the timeout passes the connection is gone for good.",
                    c.bracket()
                ))
                .evidence(Evidence::new("client-initiated: shortest idle that died", Quantity::duration(cu)).with_detail(how))
        }
        None => Finding::new(CHECK, "tcp-state-rebuilt", Status::Info, "client-initiated probes inconclusive")
            .summary(format!(
                "Client-initiated probes did not run long enough to compare with the server-initiated ones (longest idle answered: {}){}.",
                c.lower.map_or("none".into(), format_duration),
                run.cut_short().map(|w| format!("; {w}")).unwrap_or_default()
            )),
    }
}

/// `tcp-keepalive-refresh`: whether TCP keepalive probes keep the state past the timeout `su`.
fn keepalive_finding(keepalive: &Keepalive, su: Duration) -> Option<Finding> {
    match keepalive {
        Keepalive::Off => None,
        Keepalive::NotRun(why) => Some(
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Info, "TCP keepalive probes were not tested")
                .summary(format!("The keepalive probes were not tested: {why}. Whether keepalives keep the state is unknown.")),
        ),
        Keepalive::Tested(k) if k.idle_data <= su => Some(
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Info, "TCP keepalive effect not measured")
                .summary("The keepalive probes were not idle longer than the timeout, so they prove nothing either way."),
        ),
        Keepalive::Tested(k) if k.alive > 0 && k.dead == 0 => Some(
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Pass, "TCP keepalives keep the connection alive")
                .summary(format!(
                    "Connections with TCP keepalives every {} carried no data for {} (longer than the timeout) and still \
                     received the server's probe: keepalives refresh the state, so the sysctl/ssh fixes work.",
                    format_duration(k.interval),
                    format_duration(k.idle_data)
                ))
                .evidence(Evidence::new("keepalive probes alive", Quantity::Count(k.alive as u64))),
        ),
        Keepalive::Tested(k) => Some(
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Warn, "TCP keepalives do not keep the connection alive")
                .summary(format!(
                    "Connections with TCP keepalives every {} still died after {} without data: the box ignores keepalive \
                     segments. Only data keeps the state: use an application keepalive (ssh ServerAliveInterval).",
                    format_duration(k.interval),
                    format_duration(k.idle_data)
                ))
                .evidence(Evidence::new("keepalive probes dead", Quantity::Count(k.dead as u64)))
                .remedy(
                    Remedy::new("Use keepalives that carry data: ssh's ServerAliveInterval, or one in your application")
                        .on(Host::Client),
                ),
        ),
    }
}

/// Findings about the run itself: outages, a session the server ended, probe modes that did
/// not run.
pub fn run_findings(
    run: &RunSummary,
    not_run: &[(String, String)],
    lost_to_outage: u32,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if run.outages > 0 {
        out.push(
            Finding::new(CHECK, "idle-outages", Status::Info, format!("the path to the server was down {} time(s) during the run", run.outages))
                .summary(format!(
                    "The control connection's heartbeats stopped for {} in total (network outage, sleep or address change). \
                     Probes whose test fell inside an outage were discarded, not counted as timeouts ({lost_to_outage} \
                     server-initiated).",
                    format_duration(run.outage_time),
                ))
                .evidence(Evidence::new("outages", Quantity::Count(run.outages as u64)))
                .evidence(Evidence::new("time without control connection", Quantity::duration(run.outage_time))),
        );
    }
    if let Some(end) = &run.session_end {
        out.push(
            Finding::new(CHECK, "idle-session-ended", Status::Inconclusive, format!("the server ended the session after {}", format_duration(end.at)))
                .summary(format!(
                    "The pathdoc server closed this check's session {} into the run ({}): its session limit \
                     (--max-session-secs), a restart or a shutdown. Tests that had not finished by then were not run; they \
                     are neither timeouts nor outages. Re-run with --idle-max below the server's session limit, or ask its \
                     operator to raise --max-session-secs (the full idle check needs 2 h 10 min).",
                    format_duration(end.at),
                    end.seen
                ))
                .evidence(Evidence::new("session ended at", Quantity::duration(end.at)).with_detail(end.seen.clone()))
                .remedy(
                    Remedy::new("Allow sessions long enough for the idle check (2 h 10 min plus margin)")
                        .on(Host::Server)
                        .with_command("pathdoc server --max-session-secs 10800"),
                ),
        );
    }
    for (mode, why) in not_run {
        out.push(
            Finding::new(
                CHECK,
                "probe-mode-not-run",
                Status::Info,
                format!("{mode}: not run to the end"),
            )
            .summary(format!("{}: {why}.", capitalize(mode))),
        );
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn segment_words(seg: &Segment) -> String {
    let hops = if seg.first_hop == seg.last_hop {
        format!("hop {}", seg.first_hop)
    } else {
        format!("hops {}–{}", seg.first_hop, seg.last_hop)
    };
    let one = seg.first_hop == seg.last_hop;
    match (seg.lower, seg.upper) {
        (l, Some(u)) => format!(
            "{hops} {} after {} (between {} and {})",
            if one { "forgets" } else { "forget" },
            format_duration((l.unwrap_or_default() + u) / 2),
            format_duration(l.unwrap_or_default()),
            format_duration(u)
        ),
        (Some(l), None) => format!(
            "{hops} {} state for ≥ {}",
            if one { "keeps" } else { "keep" },
            format_duration(l)
        ),
        (None, None) => format!("{hops}: not measured"),
    }
}

/// The box that forgets, for every finding of the report: the culprit hop when the search
/// located it, the only router when there is one, otherwise unknown.
pub fn culprit_owner(analysis: Option<&CulpritAnalysis>, path: Option<&PathHops>) -> Owner {
    match (analysis.map(|a| &a.location), path) {
        (Some(Location::Hop(c)), Some(p)) => Owner::of(p, *c),
        _ => Owner::of_only_router(path),
    }
}

/// `tcp-idle-culprit-hop`: which hop forgets first, from [`crate::culprit::infer`]. `owner` is
/// [`culprit_owner`] of the same analysis.
pub fn culprit_finding(
    t0: &LadderOutcome,
    analysis: Option<&CulpritAnalysis>,
    path: Option<&PathHops>,
    why_not: Option<&str>,
    owner: &Owner,
    v6_firewall: bool,
) -> Finding {
    let id = "tcp-idle-culprit-hop";
    let (est, pm) = t0.estimate().unwrap_or_default();
    let timeout = format!("{} ± {}", format_duration(est), format_duration(pm));
    let (Some(a), Some(path)) = (analysis, path) else {
        return Finding::new(
            CHECK,
            id,
            Status::Inconclusive,
            "could not locate the hop that forgets",
        )
        .summary(format!(
            "The culprit-hop search needs the hop count to the server: {}.",
            why_not.unwrap_or("hop discovery did not run")
        ));
    };
    let status = if t0.upper.is_some_and(|u| u < RFC5382_FLOOR) {
        Status::Fail
    } else {
        Status::Info
    };
    let segments = |a: &CulpritAnalysis| {
        let mut text = String::new();
        if let Some(s) = &a.before {
            text.push_str(&format!(" Before it, {}.", segment_words(s)));
        }
        if let Some(s) = &a.after {
            text.push_str(&format!(" After it, {}.", segment_words(s)));
        }
        text
    };
    let mut f = match &a.location {
        Location::Hop(c) => {
            let c = *c;
            let how = if path.routers == 1 {
                "It is the only router on the path (or one of the endpoints' own firewalls)."
                    .to_string()
            } else {
                format!(
                    "Probe groups were kept warm by TTL-limited keepalives on parts of the path: those with hop {c} \
                     left cold died after the same idle time as unrefreshed connections, those with hop {c} kept warm \
                     lived longer."
                )
            };
            let tie = if a.tie_after {
                " A box after it forgets after the same time (within the resolution): both must be fixed."
            } else {
                ""
            };
            Finding::new(
                CHECK,
                id,
                status,
                format!("{} forgets idle connections first, after {timeout}", owner.words()),
            )
            .hop(c as u32)
            .summary(format!("{how}{tie}{}", segments(a)))
            .evidence(
                Evidence::new("culprit hop", Quantity::Count(c as u64)).with_detail(
                    path.addr(c)
                        .map_or("no ICMP answer".to_string(), |a| a.to_string()),
                ),
            )
            .evidence(
                Evidence::new("its idle timeout", Quantity::duration(est))
                    .with_detail(format!("± {}", format_duration(pm))),
            )
            .remedies(if status == Status::Fail {
                box_remedies(
                    owner,
                    Fault::TcpEstablished {
                        timeout: est,
                        pm,
                        v6_firewall,
                    },
                )
            } else {
                Vec::new()
            })
        }
        Location::Beyond(k) => Finding::new(
            CHECK,
            id,
            Status::Inconclusive,
            format!("the box that forgets after {timeout} is beyond hop {k}"),
        )
        .summary(format!(
            "Keeping hops 1–{k} warm did not help, keeping everything after hop {k} warm did: the box is after \
             hop {k}, and the search tested splits after hops 1–{k} only (raise --idle-culprit-depth to look \
             further).{}",
            segments(a)
        )),
        Location::Undetermined => Finding::new(
            CHECK,
            id,
            Status::Inconclusive,
            "could not locate the hop that forgets",
        )
        .summary(format!(
            "The keep-warm probe groups did not give a consistent answer ({}).",
            why_not.unwrap_or(
                "too short a run, outages, or boxes that do not refresh state on keepalives"
            )
        )),
    };
    f = f.evidence(Evidence::new(
        "routers to the server",
        Quantity::Count(path.routers as u64),
    ));
    for seg in a.before.iter().chain(a.after.iter()) {
        let value = match seg.upper {
            Some(u) => Quantity::duration((seg.lower.unwrap_or_default() + u) / 2),
            None => Quantity::Text(format!(
                "≥ {}",
                format_duration(seg.lower.unwrap_or_default())
            )),
        };
        f = f.evidence(Evidence::new(
            if seg.first_hop == seg.last_hop {
                format!("hop {}: idle timeout", seg.first_hop)
            } else {
                format!(
                    "hops {}–{}: shortest idle timeout",
                    seg.first_hop, seg.last_hop
                )
            },
            value,
        ));
    }
    f
}

/// One UDP binding class's verdict against RFC 4787 REQ-5.
fn udp_class_finding(c: &UdpClassReport, run: &RunSummary, owner: &Owner) -> Finding {
    let req = "RFC 4787 REQ-5: a UDP mapping MUST NOT expire in less than 2 min; 5 min or more RECOMMENDED";
    let stream = c.class == UdpClass::Stream;
    let id = if stream {
        "udp-stream-timeout"
    } else {
        "udp-single-exchange-timeout"
    };
    let (what, how_made) = if stream {
        (
            "UDP flows with traffic both ways",
            "bindings that exchanged datagrams both ways over 2.5 s, then went silent (a VPN, QUIC or VoIP flow gone quiet)",
        )
    } else {
        (
            "UDP bindings after a single exchange",
            "bindings that saw one datagram each way, then silence (a DNS query, a STUN binding request, a SIP REGISTER)",
        )
    };
    let o = &c.outcome;
    let base = |status, title: String| {
        Finding::new(CHECK, id, status, title)
            .requirement(req)
            .evidence(
                Evidence::new("bindings tested", Quantity::Count(o.tests as u64))
                    .with_detail(how_made),
            )
            .evidence(Evidence::new(
                "resolution",
                Quantity::duration(o.resolution),
            ))
    };
    let cut = run.cut_short().filter(|_| !c.finished);
    if o.contradicts_itself() {
        return base(Status::Inconclusive, format!("{what}: results contradict each other")).summary(format!(
            "A datagram sent after {} of silence was lost although one sent after a longer silence ({}) arrived ({} such \
             tests). A NAT that forgets this class of binding by idle time alone never does that: datagrams were lost, or \
             the NAT does not treat bindings consistently (RFC 4787 REQ-11). Not judged; re-run on a quieter path.",
            o.upper.map_or("?".into(), format_duration),
            o.lower.map_or("?".into(), format_duration),
            o.contradictions
        ))
        .evidence(Evidence::new("contradicting tests", Quantity::Count(o.contradictions as u64)));
    }
    match (o.lower, o.upper) {
        (lower, Some(upper)) => {
            let (est, pm) = o.estimate().unwrap_or_default();
            let status = if upper < RFC4787_FLOOR {
                Status::Fail
            } else if upper <= RFC4787_RECOMMENDED {
                Status::Warn
            } else {
                Status::Pass
            };
            let lower = lower.unwrap_or_default();
            let interval = safe_interval(lower);
            let mut f = base(status, format!("{what} expire after {} ± {}", format_duration(est), format_duration(pm)))
                .summary(format!(
                    "A datagram the server sent after {} of silence reached the client; one sent after {} of silence did not \
                     arrive: the NAT had forgotten the binding and dropped it without a word. {} silent longer than that lose \
                     their binding, and datagrams from the server no longer reach the client.",
                    format_duration(lower),
                    format_duration(upper),
                    if stream { "Flows" } else { "Bindings made by one request and reply" }
                ) + match status {
                    Status::Warn => " That meets RFC 4787's 2-min MUST but not its recommended 5 min.",
                    Status::Pass => " That meets RFC 4787 REQ-5 including the recommended 5 min.",
                    _ => "",
                })
                .evidence(Evidence::new("longest silence survived", Quantity::duration(lower)))
                .evidence(Evidence::new("shortest silence that lost the binding", Quantity::duration(upper)).with_detail("the server's datagram did not arrive"))
                .remedy(
                    Remedy::new(format!(
                        "Send something on idle UDP flows at least every {interval} s (WireGuard: PersistentKeepalive; \
                         other applications: their keepalive or refresh interval)"
                    ))
                    .on(Host::Client)
                    .with_command(format!("PersistentKeepalive = {interval}")),
                );
            if status >= Status::Warn {
                f = f.remedies(box_remedies(
                    owner,
                    Fault::Udp {
                        stream,
                        timeout: est,
                        pm,
                    },
                ));
            }
            f
        }
        (Some(lower), None) => {
            let status = if lower >= RFC4787_FLOOR {
                Status::Pass
            } else {
                Status::Info
            };
            let summary = if lower >= RFC4787_RECOMMENDED {
                format!(
                    "Every datagram the server sent arrived, the longest after {} of silence: bindings last at least the \
                     recommended 5 min.",
                    format_duration(lower)
                )
            } else if lower >= RFC4787_FLOOR {
                format!(
                    "Every datagram the server sent arrived, the longest after {} of silence: the 2-min MUST is met; the \
                     run was too short to test the recommended 5 min ({}).",
                    format_duration(lower),
                    run.longer_run_hint(RFC4787_RECOMMENDED, "6min or more")
                )
            } else {
                format!(
                    "Every datagram the server sent arrived, the longest after {} of silence, but the run was shorter than \
                     the 2 min RFC 4787 requires, so REQ-5 is neither met nor violated as far as this run can tell{} ({}).",
                    format_duration(lower),
                    cut.as_deref().map(|w| format!(": {w}")).unwrap_or_default(),
                    run.longer_run_hint(RFC4787_RECOMMENDED, "6min or more")
                )
            };
            base(
                status,
                format!("{what}: no timeout up to {}", format_duration(lower)),
            )
            .summary(summary)
            .evidence(Evidence::new(
                "longest silence survived",
                Quantity::duration(lower),
            ))
        }
        (None, None) => {
            let slots = c.plan.connections() as u32;
            let why = if let Some(w) = cut {
                format!("{w} before any of these tests finished")
            } else if c.open_failed >= slots && slots > 0 {
                "the server never answered the bindings' first datagram: UDP to the server's port is blocked or filtered \
                 on the way"
                    .to_string()
            } else {
                "no test of this class finished".to_string()
            };
            base(Status::Inconclusive, format!("{what}: not measured"))
                .summary(format!("Not measured: {why}."))
        }
    }
}

/// RFC 4787 REQ-5 per binding class and REQ-6 (inbound refresh). `owner` is the NAT when the
/// path locates it ([`culprit_owner`] applies to TCP; for UDP only a single-router path does).
pub fn udp_findings(udp: &UdpReport, run: &RunSummary, owner: &Owner) -> Vec<Finding> {
    let mut out = vec![
        udp_class_finding(&udp.single_exchange, run, owner),
        udp_class_finding(&udp.stream, run, owner),
    ];
    let longest = [&udp.single_exchange, &udp.stream]
        .iter()
        .filter(|c| !c.outcome.contradicts_itself())
        .filter_map(|c| c.outcome.upper)
        .max();
    if let (Some((alive, dead)), Some(upper)) = (udp.inbound_refresh, longest) {
        let f = if alive > 0 && dead == 0 {
            Finding::new(CHECK, "udp-inbound-refresh", Status::Info, "inbound traffic refreshes UDP bindings")
                .summary(format!(
                    "Bindings that only received datagrams from the server (one every {}) outlived the {} timeout: the NAT \
                     refreshes a binding on inbound traffic too (RFC 4787 REQ-6 allows this).",
                    format_duration(udp.refresh_interval),
                    format_duration(upper)
                ))
        } else {
            Finding::new(CHECK, "udp-inbound-refresh", Status::Info, "only outbound traffic refreshes UDP bindings")
                .summary(format!(
                    "Bindings that only received datagrams from the server (one every {}) still expired (silence longer \
                     than {}): keepalives must come from the client side (RFC 4787 REQ-6: outbound refresh is required, \
                     inbound optional).",
                    format_duration(udp.refresh_interval),
                    format_duration(upper)
                ))
        };
        out.push(
            f.direction(Direction::ServerToClient)
                .requirement("RFC 4787 REQ-6: outbound traffic MUST refresh a binding; inbound MAY")
                .evidence(Evidence::new(
                    "bindings alive",
                    Quantity::Count(alive as u64),
                ))
                .evidence(Evidence::new(
                    "bindings expired",
                    Quantity::Count(dead as u64),
                )),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::culprit::{CulpritAnalysis, Location, Segment};
    use crate::hops::PathHops;
    use crate::schedule::plan_ladder;

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    fn ladder(lower: Option<u64>, upper: Option<u64>) -> LadderOutcome {
        LadderOutcome {
            lower: lower.map(s),
            upper: upper.map(s),
            resolution: s(10),
            horizon: s(7800),
            tests: 30,
            lost_to_outage: 0,
            contradictions: 0,
            deaths: upper
                .map(|_| vec![(DeathKind::SilentDrop, 2)])
                .unwrap_or_default(),
        }
    }

    fn run() -> RunSummary {
        RunSummary {
            elapsed: s(3700),
            horizon: s(7800),
            outages: 0,
            outage_time: s(0),
            public_addr: "203.0.113.1:4000".into(),
            v6_firewall: false,
            session_end: None,
            interrupted: None,
        }
    }

    fn path() -> PathHops {
        PathHops {
            routers: 2,
            addrs: vec![
                Some("192.168.1.1".parse().unwrap()),
                Some("100.64.1.1".parse().unwrap()),
            ],
        }
    }

    #[test]
    fn a_session_the_server_had_no_room_for_is_a_warning_with_its_figures() {
        let f = server_busy(&pathdoc_core::busy::ServerBusy::new(
            "it allows 1 concurrent session per client address (127.0.0.1)",
            Some("sessions-per-client".into()),
            Some(1),
        ));
        assert_eq!((f.id.as_str(), f.status), ("server-busy", Status::Warn));
        assert_eq!(f.title, "the server was busy: the idle check not run");
        assert!(f.remedies[1].description.contains("--max-sessions-per-ip"));
        all_remedies_have_hosts(&[f]);
        let busy = pathdoc_core::busy::ServerBusy::new(
            "the server is busy",
            Some("idle-probes-fair-share".into()),
            Some(4),
        );
        let p = probes_busy(37, 0, &busy);
        assert_eq!(p.title, "the server was busy: 37 probe connections not run");
        assert!(p.remedies[1].description.contains("--max-idle-probes"));
        assert!(p.evidence.iter().any(|e| e.value == Quantity::Count(37)));
        let u = probes_busy(0, 1, &busy);
        assert_eq!(u.title, "the server was busy: 1 UDP binding not run");
        let both = probes_busy(2, 12, &busy);
        assert_eq!(
            both.title,
            "the server was busy: 2 probe connections and 12 UDP bindings not run"
        );
        let names: Vec<&str> = both.evidence.iter().map(|e| e.name.as_str()).collect();
        assert!(names.contains(&"UDP bindings refused"), "{names:?}");
    }

    fn all_remedies_have_hosts(f: &[Finding]) {
        for f in f {
            for r in &f.remedies {
                assert!(r.host.is_some(), "{}: remedy without host: {r:?}", f.id);
            }
            assert!(
                FINDING_IDS.iter().any(|i| i.id == f.id),
                "unregistered id {}",
                f.id
            );
        }
    }

    #[test]
    fn tcp_verdicts_follow_the_rfc_floor() {
        // (lower, upper, expected status, a remedy mentions)
        let table = [
            (
                Some(3590),
                Some(3600),
                Status::Fail,
                Some("ServerAliveInterval 1795"),
            ),
            (Some(7790), None, Status::Pass, None),
            (
                Some(7500),
                Some(7510),
                Status::Pass,
                Some("ServerAliveInterval 3750"),
            ),
            (None, None, Status::Inconclusive, None),
            (Some(20), None, Status::Info, None),
        ];
        for (l, u, status, remedy) in table {
            let f = tcp_findings(
                &ladder(l, u),
                None,
                &Keepalive::Off,
                &run(),
                &Owner::Unknown,
            );
            all_remedies_have_hosts(&f);
            let f = &f[0];
            assert_eq!(f.status, status, "{l:?}/{u:?}: {}", f.title);
            if let Some(text) = remedy {
                assert!(
                    f.remedies
                        .iter()
                        .any(|r| r.command.as_deref().unwrap_or("").contains(text)),
                    "{:?}",
                    f.remedies
                );
            }
        }
    }

    /// A default run (--idle-max 2h10m) interrupted after an hour: the advice is to let such a
    /// run finish, not to pass the --idle-max the user already ran with. A run whose
    /// --idle-max was short is told the longer one.
    #[test]
    fn an_interrupted_default_run_is_told_to_finish_not_to_rerun_the_default() {
        let interrupted = RunSummary {
            interrupted: Some(s(3600)),
            ..run()
        };
        let f = &tcp_findings(
            &ladder(Some(3590), None),
            None,
            &Keepalive::Off,
            &interrupted,
            &Owner::Unknown,
        )[0];
        let text = &f.summary;
        assert_eq!(f.status, Status::Info, "{text}");
        assert!(!text.contains("run with --idle-max 2h10m"), "{text}");
        assert!(text.contains("let it finish"), "{text}");
        assert!(text.contains("the run was interrupted after"), "{text}");

        let short = RunSummary {
            horizon: s(600),
            ..run()
        };
        let f = &tcp_findings(
            &ladder(Some(590), None),
            None,
            &Keepalive::Off,
            &short,
            &Owner::Unknown,
        )[0];
        let text = &f.summary;
        assert!(text.contains("run with --idle-max 2h10m"), "{text}");
    }

    #[test]
    fn rebuilt_state_is_named_when_only_inbound_dies() {
        let server = ladder(Some(50), Some(60));
        let client = ladder(Some(7790), None);
        let findings = tcp_findings(
            &server,
            Some(&client),
            &Keepalive::Off,
            &run(),
            &Owner::Unknown,
        );
        let f = findings
            .iter()
            .find(|f| f.id == "tcp-state-rebuilt")
            .unwrap();
        assert_eq!(f.status, Status::Warn);
        let client = ladder(Some(50), Some(60));
        let findings = tcp_findings(
            &server,
            Some(&client),
            &Keepalive::Off,
            &run(),
            &Owner::Unknown,
        );
        let f = findings
            .iter()
            .find(|f| f.id == "tcp-state-rebuilt")
            .unwrap();
        assert_eq!(f.status, Status::Info);
    }

    #[test]
    fn contradicting_evidence_is_never_a_failure() {
        // Both kinds: a survivor beyond the shortest death, and a death below the longest survival.
        for (lower, upper) in [(100, 60), (50, 60)] {
            let mut l = ladder(Some(lower), Some(upper));
            l.contradictions = 1;
            let f = tcp_findings(&l, None, &Keepalive::Off, &run(), &Owner::Unknown);
            assert_eq!(f[0].status, Status::Inconclusive, "{lower}/{upper}");
            assert!(f[0].summary.contains("Not judged"), "{}", f[0].summary);
        }
        let mut r = run();
        r.outages = 1;
        r.outage_time = s(30);
        assert!(run_findings(&r, &[], 0)
            .iter()
            .any(|f| f.id == "idle-outages"));
    }

    #[test]
    fn one_owner_decides_the_advice_of_every_finding() {
        let t0 = ladder(Some(29), Some(30));
        let a = CulpritAnalysis {
            location: Location::Hop(2),
            tie_after: false,
            before: Some(Segment {
                first_hop: 1,
                last_hop: 1,
                lower: Some(s(600)),
                upper: None,
            }),
            after: None,
        };
        let owner = culprit_owner(Some(&a), Some(&path()));
        let c = culprit_finding(&t0, Some(&a), Some(&path()), None, &owner, false);
        assert_eq!(c.id, "tcp-idle-culprit-hop");
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.hop, Some(2));
        assert!(
            c.title.contains("carrier's CGN (hop 2, 100.64.1.1"),
            "{}",
            c.title
        );
        assert!(
            c.summary.contains("hop 1 keeps state for ≥ 10 min"),
            "{}",
            c.summary
        );
        let tcp = tcp_findings(&t0, None, &Keepalive::Off, &run(), &owner);
        assert_eq!(tcp[0].hop, Some(2));
        // The ISP's CGN: no sysctl "on your router" anywhere, the same ISP advice in both.
        for f in [&c, &tcp[0]] {
            assert!(
                f.remedies.iter().all(|r| !r
                    .command
                    .as_deref()
                    .unwrap_or("")
                    .contains("nf_conntrack")),
                "{}: {:?}",
                f.id,
                f.remedies
            );
            assert!(f.remedies.iter().any(|r| r.host == Some(Host::Isp)));
        }
        all_remedies_have_hosts(&[c, tcp[0].clone()]);
        // The home router: its sysctl on the router at hop 1, or the ISP if it is their modem.
        let a = CulpritAnalysis {
            location: Location::Hop(1),
            ..a
        };
        let owner = culprit_owner(Some(&a), Some(&path()));
        let c = culprit_finding(&t0, Some(&a), Some(&path()), None, &owner, false);
        assert!(c.title.contains("(hop 1, 192.168.1.1)"), "{}", c.title);
        let sysctl = c
            .remedies
            .iter()
            .find(|r| {
                r.command
                    .as_deref()
                    .unwrap_or("")
                    .contains("nf_conntrack_tcp_timeout_established")
            })
            .unwrap();
        assert_eq!(
            sysctl.host,
            Some(Host::Router {
                hop: Some(1),
                address: Some("192.168.1.1".into())
            })
        );
        assert!(sysctl.description.starts_with("If you administer"));
        assert!(c.remedies.iter().any(|r| r.host == Some(Host::Isp)));
        let f = culprit_finding(&t0, None, None, Some("UDP blocked"), &Owner::Unknown, false);
        assert_eq!(f.status, Status::Inconclusive);
        assert!(f.summary.contains("UDP blocked"));
    }

    fn class(class: UdpClass, lower: Option<u64>, upper: Option<u64>) -> UdpClassReport {
        UdpClassReport {
            class,
            plan: plan_ladder(s(310), s(10), 40, Some(RFC4787_FLOOR)),
            outcome: ladder(lower, upper),
            finished: true,
            open_failed: 0,
        }
    }

    fn udp(single: UdpClassReport, stream: UdpClassReport) -> UdpReport {
        UdpReport {
            single_exchange: single,
            stream,
            inbound_refresh: None,
            inbound_refresh_not_run: None,
            refresh_interval: s(10),
            tests: vec![],
        }
    }

    #[test]
    fn udp_verdicts_per_class() {
        let table = [
            (Some(50), Some(60), Status::Fail),
            (Some(200), Some(210), Status::Warn),
            (Some(400), Some(410), Status::Pass),
            (Some(360), None, Status::Pass),
            (Some(150), None, Status::Pass),
            (Some(20), None, Status::Info),
            (None, None, Status::Inconclusive),
        ];
        for (l, u, status) in table {
            let r = udp(
                class(UdpClass::SingleExchange, l, u),
                class(UdpClass::Stream, Some(400), None),
            );
            let f = udp_findings(&r, &run(), &Owner::Unknown);
            all_remedies_have_hosts(&f);
            assert_eq!(f[0].id, "udp-single-exchange-timeout");
            assert_eq!(f[0].status, status, "{l:?}/{u:?}");
            assert_eq!(f[1].id, "udp-stream-timeout");
            let text = format!("{} {}", f[0].title, f[0].summary).to_lowercase();
            for tcp_word in ["reset", "acknowledged"] {
                assert!(
                    !text.contains(tcp_word),
                    "TCP word `{tcp_word}` for UDP: {text}"
                );
            }
        }
    }

    #[test]
    fn udp_evidence_that_contradicts_itself_is_inconclusive() {
        // The bug this replaces: "expire after 30.1 s ± 0 µs" while a binding survived 35.1 s.
        let mut single = class(UdpClass::SingleExchange, Some(35), Some(30));
        single.outcome.contradictions = 1;
        let f = udp_findings(
            &udp(single, class(UdpClass::Stream, None, None)),
            &run(),
            &Owner::Unknown,
        );
        assert_eq!(f[0].status, Status::Inconclusive);
        assert!(f[0].title.contains("contradict"), "{}", f[0].title);
        let mut u = udp(
            class(UdpClass::SingleExchange, Some(29), Some(30)),
            class(UdpClass::Stream, Some(109), Some(110)),
        );
        u.inbound_refresh = Some((2, 0));
        let f = udp_findings(&u, &run(), &Owner::Unknown);
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[1].status, Status::Fail);
        let r = f.iter().find(|f| f.id == "udp-inbound-refresh").unwrap();
        assert_eq!(r.direction, Some(Direction::ServerToClient));
        assert!(r.summary.contains("1 min 50 s"), "{}", r.summary);
        // Exactly the floor complies: not a failure.
        let u = udp(
            class(UdpClass::SingleExchange, Some(115), Some(120)),
            class(UdpClass::Stream, None, None),
        );
        assert_eq!(
            udp_findings(&u, &run(), &Owner::Unknown)[0].status,
            Status::Warn
        );
    }

    #[test]
    fn keepalive_findings_need_a_long_enough_test_or_say_why_not() {
        let server = ladder(Some(50), Some(60));
        let k = |idle| {
            Keepalive::Tested(KeepaliveOutcome {
                interval: s(10),
                idle_data: s(idle),
                alive: 2,
                dead: 0,
            })
        };
        let status = |k: &Keepalive| {
            tcp_findings(&server, None, k, &run(), &Owner::Unknown)
                .into_iter()
                .find(|f| f.id == "tcp-keepalive-refresh")
                .map(|f| (f.status, f.summary))
        };
        assert_eq!(status(&k(100)).unwrap().0, Status::Pass);
        assert_eq!(status(&k(30)).unwrap().0, Status::Info);
        let (st, summary) = status(&Keepalive::NotRun("the run ended first".into())).unwrap();
        assert_eq!(st, Status::Info);
        assert!(summary.contains("the run ended first"), "{summary}");
        assert!(status(&Keepalive::Off).is_none());
    }

    #[test]
    fn a_session_the_server_ended_is_said_as_such() {
        let mut r = run();
        r.session_end = Some(SessionEnd {
            at: s(6),
            seen: "the server refused to resume it: session is unknown or expired".into(),
        });
        let f = run_findings(
            &r,
            &[("UDP bindings".into(), "the server ended the session".into())],
            0,
        );
        assert_eq!(f[0].id, "idle-session-ended");
        assert_eq!(f[0].status, Status::Inconclusive);
        assert!(f[0].summary.contains("--max-session-secs"));
        assert!(f.iter().all(|f| f.id != "idle-outages"));
        assert_eq!(f[1].id, "probe-mode-not-run");
        all_remedies_have_hosts(&f);
        let tcp = tcp_findings(
            &ladder(Some(5), None),
            None,
            &Keepalive::Off,
            &r,
            &Owner::Unknown,
        );
        assert!(
            tcp[0].summary.contains("ended the session"),
            "{}",
            tcp[0].summary
        );
        let u = udp(
            UdpClassReport {
                finished: false,
                ..class(UdpClass::SingleExchange, None, None)
            },
            class(UdpClass::Stream, None, None),
        );
        let f = udp_findings(&u, &r, &Owner::Unknown);
        assert!(
            f[0].summary.contains("ended the session"),
            "{}",
            f[0].summary
        );
        assert!(!f[0].summary.contains("blocked"), "{}", f[0].summary);
    }
}
