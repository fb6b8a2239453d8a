//! What the run measured, turned into findings (via the pure [`crate::verdict`] and
//! [`crate::culprit`]) and the JSON probe table of `report.data["idle"]`.

use std::collections::HashMap;
use std::time::Duration;

use pathdoc_proto::SessionId;

use super::control::{Health, Outage};
use super::probes::{Group, Mode};
use super::tcp::TcpRun;
use super::{IdleConfig, IdleResult};
use crate::culprit::{self, Split};
use crate::hops::PathHops;
use crate::owner::Owner;
use crate::proto::RefusedBindings;
use crate::schedule::LadderPlan;
use crate::udp_client::UdpReport;
use crate::verdict::{
    self, DeathKind, Keepalive, KeepaliveOutcome, LadderOutcome, RunSummary, SessionEnd,
};

/// Everything the judgement needs from the run.
pub(super) struct Inputs<'a> {
    pub cfg: &'a IdleConfig,
    pub session: SessionId,
    pub grace: Duration,
    pub heartbeat: Duration,
    pub elapsed: Duration,
    pub health: &'a Health,
    pub path: Option<&'a PathHops>,
    pub path_note: Option<&'a str>,
    pub splits: &'a [usize],
    pub plan: &'a LadderPlan,
    pub keepalive_interval: Duration,
    pub tcp: &'a TcpRun<'a>,
    pub udp: Option<UdpReport>,
    /// UDP bindings the server refused for want of room (its word, with the results).
    pub udp_refused: Option<RefusedBindings>,
}

/// One `server-busy` WARN for the probe connections and UDP bindings the server refused for
/// want of room, in the words of the connections' refusal when there was one.
fn probes_busy(
    tcp: Option<&(u32, pathdoc_core::busy::ServerBusy)>,
    udp: Option<&RefusedBindings>,
) -> Option<pathdoc_core::Finding> {
    let udp_busy = udp.map(|r| {
        pathdoc_core::busy::ServerBusy::new(
            r.message.clone(),
            Some(r.reason.clone()),
            Some(r.limit),
        )
    });
    let busy = tcp.map(|(_, b)| b).or(udp_busy.as_ref())?;
    let connections = tcp.map_or(0, |(n, _)| *n);
    let bindings = udp.map_or(0, |r| r.count);
    Some(verdict::probes_busy(connections, bindings, busy))
}

/// A ladder's outcome: its bracket and how its probes died.
pub(super) fn outcome(g: &Group) -> LadderOutcome {
    let mut deaths: HashMap<DeathKind, u32> = HashMap::new();
    for r in &g.rows {
        if let Some(d) = r.death {
            *deaths.entry(d).or_default() += 1;
        }
    }
    let mut deaths: Vec<(DeathKind, u32)> = deaths.into_iter().collect();
    deaths.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    LadderOutcome {
        lower: g.ladder.lower,
        upper: g.ladder.upper,
        resolution: g.ladder.plan.resolution,
        horizon: g.ladder.plan.horizon,
        tests: g.rows.len() as u32,
        lost_to_outage: g.lost_to_outage,
        contradictions: g.ladder.contradictions,
        deaths,
    }
}

/// What the keepalive probes showed, or why they were not tested.
fn keepalive(
    tcp: &TcpRun<'_>,
    cfg: &IdleConfig,
    interval: Duration,
    cut: Option<&str>,
) -> Keepalive {
    if !cfg.keepalive {
        return Keepalive::Off;
    }
    let ka = tcp.keepalive_group();
    if !ka.rows.is_empty() {
        let alive = ka.rows.iter().filter(|r| r.outcome == "alive").count() as u32;
        let dead = ka.rows.iter().filter(|r| r.outcome == "dead").count() as u32;
        let idle = ka
            .rows
            .iter()
            .map(|r| Duration::from_secs_f64(r.idle_s))
            .max()
            .unwrap_or_default();
        return Keepalive::Tested(KeepaliveOutcome {
            interval,
            idle_data: idle,
            alive,
            dead,
        });
    }
    match tcp.keepalive_not_run(cut) {
        Some(why) => Keepalive::NotRun(why),
        None => Keepalive::Off,
    }
}

/// The culprit groups' outcomes per split: the far-warm group measures the near segment, the
/// near-warm group the far one.
fn split_outcomes(ladders: &[Group], splits: &[usize]) -> Vec<Split> {
    splits
        .iter()
        .map(|&h| {
            let find = |m: Mode| {
                ladders
                    .iter()
                    .find(|g| g.mode == m && g.split == h)
                    .map(outcome)
            };
            Split {
                hop: h,
                near: find(Mode::FarWarm),
                far: find(Mode::NearWarm),
            }
        })
        .collect()
}

pub(super) fn build(i: Inputs<'_>) -> IdleResult {
    let h = i.health;
    let ladders = i.tcp.ladders();
    let outage_time: Duration = h
        .outages
        .iter()
        .map(|(s, e, _)| e.unwrap_or(i.elapsed).saturating_sub(*s))
        .sum();
    let run = RunSummary {
        elapsed: i.elapsed,
        horizon: i.cfg.horizon,
        outages: h.outages.len() as u32,
        outage_time,
        public_addr: h.public_addr.to_string(),
        v6_firewall: h.v6_no_nat,
        session_end: h.session_ended.as_ref().map(|(at, seen)| SessionEnd {
            at: *at,
            seen: seen.clone(),
        }),
        interrupted: i.tcp.interrupted_at,
    };
    let cut = match (run.interrupted, &run.session_end) {
        (Some(_), _) => Some("the run was interrupted".to_string()),
        (None, Some(_)) => Some("the server ended the session".to_string()),
        _ => None,
    };
    let server_outcome = outcome(&ladders[0]);
    let client_outcome = ladders
        .iter()
        .find(|g| g.mode == Mode::ClientInitiated)
        .map(outcome);
    // Which box forgets: decided once, used by every finding's remedies.
    let splits = split_outcomes(ladders, i.splits);
    let analysis = i
        .path
        .map(|p| culprit::infer(&server_outcome, &splits, p.routers));
    let owner = verdict::culprit_owner(analysis.as_ref(), i.path);
    let keepalive = keepalive(i.tcp, i.cfg, i.keepalive_interval, cut.as_deref());
    let mut findings = verdict::tcp_findings(
        &server_outcome,
        client_outcome.as_ref(),
        &keepalive,
        &run,
        &owner,
    );
    let mut not_run: Vec<(String, String)> = Vec::new();
    match &i.udp {
        Some(u) => {
            findings.extend(verdict::udp_findings(
                u,
                &run,
                &Owner::of_only_router(i.path),
            ));
            let any_timeout = [&u.single_exchange, &u.stream]
                .iter()
                .any(|c| c.outcome.upper.is_some());
            if let (Some(why), true) = (&u.inbound_refresh_not_run, any_timeout) {
                let why = cut.clone().unwrap_or_else(|| why.clone());
                not_run.push(("the inbound-refresh test (RFC 4787 REQ-6)".into(), why));
            }
        }
        None if i.cfg.udp => not_run.push((
            "UDP bindings".into(),
            cut.clone()
                .unwrap_or_else(|| "the UDP part did not report before the run's deadline".into()),
        )),
        None => {}
    }
    if server_outcome.upper.is_some() && i.cfg.culprit {
        let unfinished = ladders
            .iter()
            .filter(|g| g.mode.warm())
            .any(|g| !g.ladder.finished(i.elapsed));
        let why = match (i.path_note, unfinished) {
            (Some(note), _) => Some(note.to_string()),
            (None, true) => Some(format!(
                "{} before the keep-warm groups pinned their timeouts",
                cut.as_deref().unwrap_or("the run reached its deadline")
            )),
            _ => None,
        };
        findings.push(verdict::culprit_finding(
            &server_outcome,
            analysis.as_ref(),
            i.path,
            why.as_deref(),
            &owner,
            h.v6_no_nat,
        ));
    }
    findings.extend(verdict::run_findings(
        &run,
        &not_run,
        ladders[0].lost_to_outage,
    ));
    if let Some(f) = probes_busy(i.tcp.refused.as_ref(), i.udp_refused.as_ref()) {
        findings.push(f);
    }
    let early_stop = i
        .tcp
        .finished_at
        .is_some_and(|t| t + i.cfg.resolution < i.cfg.horizon);
    let data = serde_json::json!({
        "session": i.session.to_string(),
        "public_addr": h.public_addr.to_string(),
        "rtt_s": h.rtt.as_secs_f64(),
        "grace_s": i.grace.as_secs_f64(),
        "heartbeat_s": i.heartbeat.as_secs_f64(),
        "elapsed_s": i.elapsed.as_secs_f64(),
        "early_stop": early_stop,
        "probes_refused_busy": i.tcp.refused.as_ref().map_or(0, |(n, _)| *n),
        "udp_bindings_refused_busy": i.udp_refused.as_ref().map_or(0, |r| r.count),
        "interrupted": run.interrupted.is_some(),
        "session_end": run.session_end,
        "plan": i.plan,
        "outages": h.outages.iter().map(|(s, e, c)| Outage { start_s: s.as_secs_f64(), end_s: e.map(|e| e.as_secs_f64()), cause: c.clone() }).collect::<Vec<_>>(),
        "udp": i.udp,
        "path": i.path,
        "culprit": analysis,
        "splits": splits,
        "ladders": ladders.iter().map(|g| serde_json::json!({
            "mode": g.mode,
            "split": (g.split > 0).then_some(g.split),
            "warm_ttl": (g.split > 0).then_some(g.warm_ttl),
            "outcome": outcome(g),
            "connections": g.ladder.slots.len(),
        })).collect::<Vec<_>>(),
        "keepalive": match &keepalive {
            Keepalive::Tested(k) => serde_json::to_value(k).unwrap_or_default(),
            Keepalive::NotRun(why) => serde_json::json!({ "not_run": why }),
            Keepalive::Off => serde_json::Value::Null,
        },
        "tests": i.tcp.groups.iter().flat_map(|g| g.rows.iter().cloned()).collect::<Vec<_>>(),
    });
    IdleResult {
        findings,
        data,
        interrupted: run.interrupted.is_some(),
    }
}
