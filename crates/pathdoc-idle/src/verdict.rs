//! Turning ladder outcomes into findings: PASS/FAIL per RFC requirement, the evidence, and the
//! fix. Pure functions; the client fills the inputs from what its probes saw.

use std::net::IpAddr;
use std::time::Duration;

use pathdoc_core::units::format_duration;
use pathdoc_core::{Evidence, Finding, Quantity, Remedy, Status};
use serde::Serialize;

use crate::culprit::{CulpritAnalysis, Location, Segment};
use crate::hops::PathHops;
use crate::schedule::{RFC4787_FLOOR, RFC4787_RECOMMENDED, RFC5382_FLOOR};

const CHECK: &str = "idle";

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
}

/// Context shared by the findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub elapsed: Duration,
    pub horizon: Duration,
    pub outages: u32,
    pub outage_time: Duration,
    pub public_addr: String,
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

/// Findings for TCP: the RFC 5382 REQ-5 verdict from server-initiated probes, what
/// client-initiated probes add (state rebuilt by outbound traffic?) and whether TCP keepalives
/// keep the state.
pub fn tcp_findings(
    server: &LadderOutcome,
    client: Option<&LadderOutcome>,
    keepalive: Option<KeepaliveOutcome>,
    run: &RunSummary,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let req = "RFC 5382 REQ-5: an established TCP connection's idle timeout MUST NOT be less than 2 h 4 min";
    let base = |status, title: String| {
        Finding::new(CHECK, "tcp-idle-timeout", status, title).requirement(req)
    };
    let common = |f: Finding| {
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
    };
    let f = if server.contradictions > 0
        && server.lower.zip(server.upper).is_some_and(|(l, u)| l >= u)
    {
        base(Status::Inconclusive, "idle-timeout results contradict each other".into()).summary(format!(
            "Some probes died after a shorter idle time than others survived ({} contradictions): the path loses packets or \
             state for reasons other than idle time. Re-run on a quieter path.",
            server.contradictions
        ))
    } else {
        match (server.lower, server.upper) {
            (lower, Some(upper)) => {
                let lower = lower.unwrap_or_default();
                let (est, pm) = server.estimate().unwrap_or_default();
                let status = if upper <= RFC5382_FLOOR { Status::Fail } else { Status::Pass };
                let how = server.main_death().map(death_words).unwrap_or("lost");
                let interval = safe_interval(lower);
                let mut f = base(status, format!("idle TCP connections are dropped after {} ± {}", format_duration(est), format_duration(pm)))
                    .summary(format!(
                        "A probe the server sent after {} idle got through; after {} idle it was {how}. A stateful box on the path \
                         forgets idle connections {}{}. Any connection silent longer than that (an idle ssh session, a transfer \
                         waiting on a slow peer) dies without notice.",
                        format_duration(lower),
                        format_duration(upper),
                        server.bracket(),
                        if status == Status::Fail { ", below the 2 h 4 min the RFC requires" } else { "" }
                    ))
                    .evidence(Evidence::new("longest idle survived", Quantity::duration(lower)))
                    .evidence(Evidence::new("shortest idle that killed the connection", Quantity::duration(upper)).with_detail(how));
                for (k, n) in &server.deaths {
                    f = f.evidence(Evidence::new(format!("probes {}", death_words(*k)), Quantity::Count(*n as u64)));
                }
                f = common(f);
                f = f
                    .remedy(Remedy::new(format!("ssh: send a keepalive every {interval} s, well below the timeout (~/.ssh/config)"))
                        .with_command(format!("Host *\n    ServerAliveInterval {interval}\n    ServerAliveCountMax 3")))
                    .remedy(Remedy::new("Linux: start TCP keepalives before the timeout (applications must enable SO_KEEPALIVE)")
                        .with_command(format!(
                            "sysctl -w net.ipv4.tcp_keepalive_time={interval} net.ipv4.tcp_keepalive_intvl={} net.ipv4.tcp_keepalive_probes=5",
                            (interval / 3).max(1)
                        )))
                    .remedy(Remedy::new(format!(
                        "Applications you write: send an application-level keepalive at least every {interval} s on idle connections"
                    )));
                if status == Status::Fail {
                    f = f.remedy(Remedy::new(format!(
                        "Tell your ISP: \"Idle TCP connections through your network are dropped after about {} (measured with \
                         server-initiated probes, ±{}); RFC 5382 REQ-5 requires at least 2 hours 4 minutes. Please raise the \
                         established-connection timeout of your NAT/CGN or give me a public address.\"",
                        format_duration(est),
                        format_duration(pm)
                    )));
                }
                f
            }
            (Some(lower), None) => {
                let proven = lower >= RFC5382_FLOOR;
                // Short of the floor, the run measured a lower bound: information, not a pass.
                let status = if proven { Status::Pass } else { Status::Info };
                common(
                    base(status, format!("no idle timeout up to {}", format_duration(lower))).summary(if proven {
                        format!("Every server-initiated probe got through, the longest after {} idle: this path meets REQ-5.", format_duration(lower))
                    } else {
                        format!(
                            "Every server-initiated probe got through, the longest after {} idle. The run was shorter than the \
                             2 h 4 min floor, so REQ-5 itself is not proven; run with --idle-max 2h10m to prove it.",
                            format_duration(lower)
                        )
                    }),
                )
                .evidence(Evidence::new("longest idle survived", Quantity::duration(lower)))
            }
            (None, None) => common(base(Status::Inconclusive, "no idle probe could be judged".into()).summary(format!(
                "None of the probes produced a usable result ({} lost to outages of the control connection, {} in total). \
                 Check connectivity to the server and re-run.",
                server.lost_to_outage,
                format_duration(run.outage_time)
            ))),
        }
    };
    out.push(f);

    if let (Some(c), Some(su)) = (client, server.upper) {
        let f = match c.upper {
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
                .remedy(Remedy::new("Keep the connection busy from either side more often than the timeout (see the keepalive fixes above)")),
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
                .summary("Client-initiated probes did not run long enough to compare with the server-initiated ones."),
        };
        out.push(f);
    }

    if let (Some(k), Some(su)) = (keepalive, server.upper) {
        let f = if k.idle_data <= su {
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Info, "TCP keepalive effect not measured")
                .summary("The keepalive probes were not idle longer than the timeout, so they prove nothing either way.")
        } else if k.alive > 0 && k.dead == 0 {
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Pass, "TCP keepalives keep the connection alive")
                .summary(format!(
                    "Connections with TCP keepalives every {} carried no data for {} (longer than the timeout) and still \
                     received the server's probe: keepalives refresh the state, so the sysctl/ssh fixes work.",
                    format_duration(k.interval),
                    format_duration(k.idle_data)
                ))
                .evidence(Evidence::new("keepalive probes alive", Quantity::Count(k.alive as u64)))
        } else {
            Finding::new(CHECK, "tcp-keepalive-refresh", Status::Warn, "TCP keepalives do not keep the connection alive")
                .summary(format!(
                    "Connections with TCP keepalives every {} still died after {} without data: the box ignores keepalive \
                     segments. Only data keeps the state: use an application keepalive (ssh ServerAliveInterval).",
                    format_duration(k.interval),
                    format_duration(k.idle_data)
                ))
                .evidence(Evidence::new("keepalive probes dead", Quantity::Count(k.dead as u64)))
        };
        out.push(f);
    }

    if run.outages > 0 {
        out.push(
            Finding::new(CHECK, "idle-outages", Status::Info, format!("the path to the server was down {} time(s) during the run", run.outages))
                .summary(format!(
                    "The control connection's heartbeats stopped for {} in total (network outage, sleep or address change). \
                     Probes whose test fell inside an outage were discarded, not counted as timeouts ({} server-initiated).",
                    format_duration(run.outage_time),
                    server.lost_to_outage
                ))
                .evidence(Evidence::new("outages", Quantity::Count(run.outages as u64)))
                .evidence(Evidence::new("time without control connection", Quantity::duration(run.outage_time))),
        );
    }
    out
}

/// What kind of box an address suggests (the address a router answers TTL-expired probes
/// from is usually its inside one).
fn box_words(addr: Option<IpAddr>, hop: usize) -> String {
    match addr {
        Some(IpAddr::V4(v4)) if v4.is_private() => {
            if hop == 1 {
                format!("your own router/modem (hop {hop}, {v4})")
            } else {
                format!("a router inside your network (hop {hop}, {v4})")
            }
        }
        Some(IpAddr::V4(v4)) if (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64) => {
            format!(
                "the carrier's CGN (hop {hop}, {v4}; 100.64.0.0/10 is RFC 6598 carrier-NAT space)"
            )
        }
        Some(a) => format!("the box at hop {hop} ({a})"),
        None => format!("the box at hop {hop} (it does not answer TTL-expired probes)"),
    }
}

fn segment_words(seg: &Segment) -> String {
    let hops = if seg.first_hop == seg.last_hop {
        format!("hop {}", seg.first_hop)
    } else {
        format!("hops {}–{}", seg.first_hop, seg.last_hop)
    };
    match (seg.lower, seg.upper) {
        (l, Some(u)) => format!(
            "{hops} {} after {} (between {} and {})",
            if seg.first_hop == seg.last_hop {
                "forgets"
            } else {
                "forget"
            },
            format_duration((l.unwrap_or_default() + u) / 2),
            format_duration(l.unwrap_or_default()),
            format_duration(u)
        ),
        (Some(l), None) => format!(
            "{hops} {} state for ≥ {}",
            if seg.first_hop == seg.last_hop {
                "keeps"
            } else {
                "keep"
            },
            format_duration(l)
        ),
        (None, None) => format!("{hops}: not measured"),
    }
}

/// `tcp-idle-culprit-hop`: which hop forgets first, from [`crate::culprit::infer`].
pub fn culprit_finding(
    t0: &LadderOutcome,
    analysis: Option<&CulpritAnalysis>,
    path: Option<&PathHops>,
    why_not: Option<&str>,
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
    let status = if t0.upper.is_some_and(|u| u <= RFC5382_FLOOR) {
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
            let who = box_words(path.addr(c), c);
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
            let mut f = Finding::new(
                CHECK,
                id,
                status,
                format!("{who} forgets idle connections first, after {timeout}"),
            )
            .summary(format!("{how}{}", segments(a)))
            .evidence(
                Evidence::new("culprit hop", Quantity::Count(c as u64)).with_detail(
                    path.addr(c)
                        .map_or("no ICMP answer".to_string(), |a| a.to_string()),
                ),
            )
            .evidence(
                Evidence::new("its idle timeout", Quantity::duration(est))
                    .with_detail(format!("± {}", format_duration(pm))),
            );
            if a.tie_after {
                f = f.summary(format!(
                    "Hop {c} forgets after {timeout}, and a box after it forgets after the same time (within the \
                     resolution): both must be fixed.{}",
                    segments(a)
                ));
            }
            let own = matches!(path.addr(c), Some(IpAddr::V4(v4)) if v4.is_private());
            let remedy = if own {
                Remedy::new(format!(
                    "Reconfigure {who}: raise its TCP established-connection timeout to at least 2 h 4 min \
                     (RFC 5382 REQ-5); on a Linux-based router:"
                ))
                .with_command("sysctl -w net.netfilter.nf_conntrack_tcp_timeout_established=7440")
            } else {
                let ours = a
                    .before
                    .as_ref()
                    .map(|s| format!("; your side of the path is not the problem ({})", segment_words(s)))
                    .unwrap_or_default();
                Remedy::new(format!(
                    "Complain about {who}: it forgets idle connections after {timeout}{ours}. Ask your ISP to raise its \
                     established timeout to at least 2 h 4 min (RFC 5382 REQ-5) or for a public address."
                ))
            };
            f.remedy(remedy)
        }
        Location::Beyond(k) => Finding::new(
            CHECK,
            id,
            status,
            format!("the box that forgets after {timeout} is beyond hop {k}"),
        )
        .summary(format!(
            "Keeping hops 1–{k} warm did not help, keeping everything after hop {k} warm did: the box is after \
             hop {k} (the search tests splits after hops 1–{k} only).{}",
            segments(a)
        )),
        Location::Undetermined => Finding::new(
            CHECK,
            id,
            Status::Inconclusive,
            "could not locate the hop that forgets",
        )
        .summary(
            "The keep-warm probe groups did not give a consistent answer (too short a run, outages, or boxes \
             that do not refresh state on keepalives).",
        ),
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

/// RFC 4787 REQ-5 (UDP mapping ≥ 2 min, ≥ 5 min recommended) and REQ-6 (inbound refresh).
pub fn udp_findings(udp: &LadderOutcome, inbound_refresh: Option<(u32, u32)>) -> Vec<Finding> {
    let req = "RFC 4787 REQ-5: a UDP mapping MUST NOT expire in less than 2 min; 5 min or more RECOMMENDED";
    let mut out = Vec::new();
    let f = match (udp.lower, udp.upper) {
        (lower, Some(upper)) => {
            let (est, pm) = udp.estimate().unwrap_or_default();
            let status = if upper <= RFC4787_FLOOR {
                Status::Fail
            } else if upper <= RFC4787_RECOMMENDED {
                Status::Warn
            } else {
                Status::Pass
            };
            let interval = safe_interval(lower.unwrap_or_default());
            let how = udp.main_death().map(death_words).unwrap_or("lost");
            Finding::new(CHECK, "udp-binding-timeout", status, format!("UDP bindings expire after {} ± {}", format_duration(est), format_duration(pm)))
                .requirement(req)
                .summary(format!(
                    "A datagram the server sent after {} of silence reached the client; after {} it was {how}. UDP flows \
                     (VPNs, QUIC, VoIP, games) idle longer than that lose their binding.",
                    format_duration(lower.unwrap_or_default()),
                    format_duration(upper)
                ))
                .evidence(Evidence::new("longest silence survived", Quantity::duration(lower.unwrap_or_default())))
                .evidence(Evidence::new("shortest silence that broke the binding", Quantity::duration(upper)).with_detail(how))
                .evidence(Evidence::new("resolution", Quantity::duration(udp.resolution)))
                .remedy(Remedy::new(format!("Send something on idle UDP flows at least every {interval} s (e.g. WireGuard):"))
                    .with_command(format!("PersistentKeepalive = {interval}")))
        }
        (Some(lower), None) => Finding::new(
            CHECK,
            "udp-binding-timeout",
            // A run shorter than the floor measured a lower bound, not compliance.
            if lower >= RFC4787_FLOOR {
                Status::Pass
            } else {
                Status::Info
            },
            format!("no UDP binding timeout up to {}", format_duration(lower)),
        )
        .requirement(req)
        .summary(if lower >= RFC4787_RECOMMENDED {
            format!(
                "Every server-initiated datagram arrived, the longest after {} of silence: bindings last at least \
                 the recommended 5 min.",
                format_duration(lower)
            )
        } else if lower >= RFC4787_FLOOR {
            format!(
                "Every server-initiated datagram arrived, the longest after {} of silence: the 2-min MUST is met; \
                 the run was too short to test the recommended 5 min (run with --idle-max 6min or more).",
                format_duration(lower)
            )
        } else {
            format!(
                "Every server-initiated datagram arrived, the longest after {} of silence, but the run was shorter \
                 than the 2 min RFC 4787 requires, so REQ-5 is neither met nor violated as far as this run can tell \
                 (run with --idle-max 6min or more).",
                format_duration(lower)
            )
        })
        .evidence(Evidence::new(
            "longest silence survived",
            Quantity::duration(lower),
        )),
        (None, None) => Finding::new(
            CHECK,
            "udp-binding-timeout",
            Status::Inconclusive,
            "no UDP probe could be judged",
        )
        .requirement(req)
        .summary("No UDP probe produced a usable result; UDP to the server's port may be blocked."),
    };
    out.push(f);
    if let (Some((alive, dead)), Some(upper)) = (inbound_refresh, udp.upper) {
        let f = if alive > 0 && dead == 0 {
            Finding::new(CHECK, "udp-inbound-refresh", Status::Info, "inbound traffic refreshes UDP bindings")
                .summary(format!("Bindings that only received datagrams from the server outlived the {} timeout (RFC 4787 REQ-6 allows this).", format_duration(upper)))
        } else {
            Finding::new(CHECK, "udp-inbound-refresh", Status::Info, "only outbound traffic refreshes UDP bindings")
                .summary(format!(
                    "Bindings that only received datagrams from the server still expired after about {}: keepalives must come \
                     from the client side (RFC 4787 REQ-6: outbound refresh is required, inbound optional).",
                    format_duration(upper)
                ))
        };
        out.push(
            f.requirement("RFC 4787 REQ-6: outbound traffic MUST refresh a binding; inbound MAY"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::culprit::{CulpritAnalysis, Location, Segment};
    use crate::hops::PathHops;

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
            let f = &tcp_findings(&ladder(l, u), None, None, &run())[0];
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

    #[test]
    fn rebuilt_state_is_named_when_only_inbound_dies() {
        let server = ladder(Some(50), Some(60));
        let findings = tcp_findings(&server, Some(&ladder(Some(7790), None)), None, &run());
        let f = findings
            .iter()
            .find(|f| f.id == "tcp-state-rebuilt")
            .unwrap();
        assert_eq!(f.status, Status::Warn);
        let findings = tcp_findings(&server, Some(&ladder(Some(50), Some(60))), None, &run());
        let f = findings
            .iter()
            .find(|f| f.id == "tcp-state-rebuilt")
            .unwrap();
        assert_eq!(f.status, Status::Info);
    }

    #[test]
    fn contradictions_make_the_verdict_inconclusive_and_outages_are_reported() {
        let mut l = ladder(Some(100), Some(60));
        l.contradictions = 2;
        let mut r = run();
        r.outages = 1;
        r.outage_time = s(30);
        let f = tcp_findings(&l, None, None, &r);
        assert_eq!(f[0].status, Status::Inconclusive);
        assert!(f.iter().any(|f| f.id == "idle-outages"));
    }

    #[test]
    fn culprit_finding_names_the_box_and_the_other_hop() {
        let path = PathHops {
            routers: 2,
            addrs: vec![
                Some("192.168.1.1".parse().unwrap()),
                Some("100.64.1.1".parse().unwrap()),
            ],
        };
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
        let f = culprit_finding(&t0, Some(&a), Some(&path), None);
        assert_eq!(f.id, "tcp-idle-culprit-hop");
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.title.contains("carrier's CGN (hop 2, 100.64.1.1"),
            "{}",
            f.title
        );
        assert!(
            f.remedies[0]
                .description
                .contains("keeps state for ≥ 10 min"),
            "{:?}",
            f.remedies
        );
        let a = CulpritAnalysis {
            location: Location::Hop(1),
            ..a
        };
        let f = culprit_finding(&t0, Some(&a), Some(&path), None);
        assert!(
            f.title
                .contains("your own router/modem (hop 1, 192.168.1.1)"),
            "{}",
            f.title
        );
        assert!(f.remedies[0]
            .command
            .as_deref()
            .unwrap_or("")
            .contains("nf_conntrack_tcp_timeout_established"));
        let f = culprit_finding(&t0, None, None, Some("UDP blocked"));
        assert_eq!(f.status, Status::Inconclusive);
        assert!(f.summary.contains("UDP blocked"));
    }

    #[test]
    fn udp_verdicts() {
        let table = [
            (Some(50), Some(60), Status::Fail),
            (Some(200), Some(210), Status::Warn),
            (Some(400), Some(410), Status::Pass),
            (Some(360), None, Status::Pass),
            (Some(150), None, Status::Pass),
            (Some(20), None, Status::Info),
        ];
        for (l, u, status) in table {
            assert_eq!(
                udp_findings(&ladder(l, u), None)[0].status,
                status,
                "{l:?}/{u:?}"
            );
        }
    }

    #[test]
    fn keepalive_findings_need_a_long_enough_test() {
        let server = ladder(Some(50), Some(60));
        let k = KeepaliveOutcome {
            interval: s(10),
            idle_data: s(100),
            alive: 2,
            dead: 0,
        };
        let f = tcp_findings(&server, None, Some(k), &run());
        assert_eq!(
            f.iter()
                .find(|f| f.id == "tcp-keepalive-refresh")
                .unwrap()
                .status,
            Status::Pass
        );
        let k = KeepaliveOutcome {
            interval: s(10),
            idle_data: s(30),
            alive: 2,
            dead: 0,
        };
        let f = tcp_findings(&server, None, Some(k), &run());
        assert_eq!(
            f.iter()
                .find(|f| f.id == "tcp-keepalive-refresh")
                .unwrap()
                .status,
            Status::Info
        );
    }
}
