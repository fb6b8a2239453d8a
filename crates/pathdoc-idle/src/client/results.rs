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
use crate::schedule::LadderPlan;
use crate::udp_client::UdpReport;
use crate::verdict::{self, DeathKind, KeepaliveOutcome, LadderOutcome, RunSummary};

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

/// What the keepalive probes showed, if any was tested.
fn keepalive_outcome(ka: &Group, interval: Duration) -> Option<KeepaliveOutcome> {
    (!ka.probes.is_empty() && !ka.rows.is_empty()).then(|| {
        let alive = ka.rows.iter().filter(|r| r.outcome == "alive").count() as u32;
        let dead = ka.rows.iter().filter(|r| r.outcome == "dead").count() as u32;
        let idle = ka
            .rows
            .iter()
            .map(|r| Duration::from_secs_f64(r.idle_s))
            .max()
            .unwrap_or_default();
        KeepaliveOutcome {
            interval,
            idle_data: idle,
            alive,
            dead,
        }
    })
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
    let ka = i.tcp.keepalive_group();
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
    };
    let server_outcome = outcome(&ladders[0]);
    let client_outcome = ladders
        .iter()
        .find(|g| g.mode == Mode::ClientInitiated)
        .map(outcome);
    let keepalive = keepalive_outcome(ka, i.keepalive_interval);
    let mut findings =
        verdict::tcp_findings(&server_outcome, client_outcome.as_ref(), keepalive, &run);
    let splits = split_outcomes(ladders, i.splits);
    let analysis = i
        .path
        .map(|p| culprit::infer(&server_outcome, &splits, p.routers));
    if let Some(u) = &i.udp {
        findings.extend(verdict::udp_findings(&u.outcome, u.inbound_refresh));
    }
    if server_outcome.upper.is_some() && i.cfg.culprit {
        findings.push(verdict::culprit_finding(
            &server_outcome,
            analysis.as_ref(),
            i.path,
            i.path_note,
        ));
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
        "keepalive": keepalive,
        "tests": i.tcp.groups.iter().flat_map(|g| g.rows.iter().cloned()).collect::<Vec<_>>(),
    });
    IdleResult { findings, data }
}
