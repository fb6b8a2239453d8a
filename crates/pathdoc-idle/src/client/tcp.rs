//! The TCP probe loop. Each tick runs the same steps, in order: take in what the probe
//! connections saw, distrust untested probes after a suspend, keep the culprit groups warm, open
//! the probes whose time has come, judge tests whose window has passed, fire the tests that are
//! due, and (once the ladders are done) test the keepalive probes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pathdoc_core::Progress;
use pathdoc_proto::SessionId;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::control::{lock, request, Health, Request};
use super::probes::{
    cool_near, open_probe, overlaps_outage, tag_of, warm_near, ClientSawEnd, Event, Group, Mode,
    Pending, ProbeEvent, TestRow,
};
use super::{ControlLink, IdleConfig};
use crate::duration::{ms, to_ms};
use crate::proto::{
    ControlReply, ControlRequest, Fired, ProbeMessage, ProbeRequest, ServerProbeRecord,
    ServerSawEnd,
};
use crate::schedule::{SlotState, TestResult};
use crate::verdict::DeathKind;

/// The state of the probe loop: every group (the keepalive group last) and what it needs to
/// talk to the server.
pub(super) struct TcpRun<'a> {
    cfg: &'a IdleConfig,
    session: SessionId,
    start: Instant,
    grace: Duration,
    heartbeat: Duration,
    hard_end: Duration,
    warm_interval: Duration,
    warm_hold: Duration,
    keepalive_interval: Duration,
    requests: mpsc::Sender<Request>,
    health: Arc<Mutex<Health>>,
    pub(super) groups: Vec<Group>,
    events: mpsc::UnboundedReceiver<Event>,
    event_tx: mpsc::UnboundedSender<Event>,
    nonce: u64,
    /// When every ladder was done (the keepalive probes are tested then).
    pub(super) finished_at: Option<Duration>,
}

impl<'a> TcpRun<'a> {
    pub(super) fn new(
        cfg: &'a IdleConfig,
        link: &ControlLink,
        groups: Vec<Group>,
        hard_end: Duration,
    ) -> Self {
        let (event_tx, events) = mpsc::unbounded_channel::<Event>();
        TcpRun {
            cfg,
            session: link.session,
            start: link.start,
            grace: link.grace,
            heartbeat: link.heartbeat,
            hard_end,
            warm_interval: Duration::from_secs(cfg.resolution.as_secs().clamp(1, 60)),
            warm_hold: cfg.horizon * 2 + Duration::from_secs(120),
            keepalive_interval: cfg
                .resolution
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
            requests: link.requests.clone(),
            health: link.health.clone(),
            groups,
            events,
            event_tx,
            nonce: rand::random(),
            finished_at: None,
        }
    }

    /// The keepalive group (always the last one).
    pub(super) fn keepalive_group(&self) -> &Group {
        self.groups.last().expect("the keepalive group exists")
    }

    /// The ordinary and culprit ladders (everything but the keepalive group).
    pub(super) fn ladders(&self) -> &[Group] {
        &self.groups[..self.groups.len() - 1]
    }

    /// Run until every ladder is done and the keepalive probes are judged, or the hard end.
    pub(super) async fn run(&mut self, progress: &dyn Progress) {
        let tick =
            (self.cfg.resolution / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut last_status = Duration::ZERO;
        loop {
            let now = self.start.elapsed();
            for note in std::mem::take(&mut lock(&self.health).notes) {
                progress.note(&note);
            }
            self.take_events();
            self.distrust_after_suspend();
            self.keep_warm().await;
            self.open_due_probes(now);
            self.judge_finished_tests(now);
            let all_done = self.ladders().iter().all(|g| g.ladder.finished(now));
            let mut fire = self.due_tests(now).await;
            if all_done && self.finished_at.is_none() {
                self.finished_at = Some(now);
                fire.extend(self.keepalive_tests());
            }
            self.fire(fire).await;
            let keepalive_busy = self
                .keepalive_group()
                .probes
                .iter()
                .any(|p| p.pending.is_some());
            if (self.finished_at.is_some() && !keepalive_busy) || now > self.hard_end {
                break;
            }
            if now >= last_status + Duration::from_secs(1) {
                last_status = now;
                progress.status(&status_line(&self.groups, now, self.cfg.horizon));
            }
            tokio::time::sleep(tick).await;
        }
    }

    /// Events from probe connections: opened, failed, a probe or pong arrived, ended.
    fn take_events(&mut self) {
        while let Ok(ev) = self.events.try_recv() {
            let g = &mut self.groups[ev.group];
            let p = &mut g.probes[ev.slot];
            match ev.event {
                ProbeEvent::Opened { writer, observed } => {
                    p.writer = Some(writer);
                    p.observed = Some(observed);
                    p.needs_warm = g.mode.warm();
                    g.ladder.opened(ev.slot, ev.at);
                }
                ProbeEvent::OpenFailed(e) => {
                    tracing::debug!(slot = ev.slot, error = %e, "probe did not open");
                    g.ladder.lost_slot(ev.slot);
                }
                ProbeEvent::Message(ProbeMessage::Probe { nonce, .. })
                | ProbeEvent::Message(ProbeMessage::Pong { nonce, .. }) => {
                    p.arrived = Some((nonce, ev.at));
                }
                ProbeEvent::Ended(end) => {
                    p.ended = Some((end, ev.at));
                    if p.pending.is_none() && g.ladder.slots[ev.slot].state == SlotState::Idle {
                        g.ladder.lost_slot(ev.slot);
                    }
                }
            }
        }
    }

    /// Suspend or address change: nothing untested can be trusted any more.
    fn distrust_after_suspend(&mut self) {
        if !lock(&self.health).suspended {
            return;
        }
        for g in self.groups.iter_mut() {
            for i in 0..g.ladder.slots.len() {
                if matches!(g.ladder.slots[i].state, SlotState::Idle) {
                    g.ladder.lost_slot(i);
                }
            }
        }
    }

    /// Keep culprit groups warm: client-side TTL-limited keepalives now, server-side ones with
    /// one request per TTL.
    async fn keep_warm(&mut self) {
        let mut far: HashMap<u8, Vec<(usize, usize)>> = HashMap::new();
        for (gi, g) in self.groups.iter_mut().enumerate() {
            if !g.mode.warm() {
                continue;
            }
            for i in 0..g.probes.len() {
                if !g.probes[i].needs_warm || g.ladder.slots[i].state != SlotState::Idle {
                    continue;
                }
                g.probes[i].needs_warm = false;
                if g.mode == Mode::FarWarm {
                    far.entry(g.warm_ttl).or_default().push((gi, i));
                    continue;
                }
                let r = match g.probes[i].writer.as_ref() {
                    Some(w) => warm_near(w, g.warm_ttl, self.warm_interval, self.warm_hold),
                    None => Err(std::io::Error::other("no socket")),
                };
                match r {
                    Ok(ttl) => {
                        g.probes[i].default_ttl.get_or_insert(ttl);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "keep-warm setup failed");
                        g.ladder.lost_slot(i);
                    }
                }
            }
        }
        for (ttl, list) in far {
            let tags = list.iter().map(|&(g, i)| tag_of(g, i)).collect();
            let req = ControlRequest::KeepWarm {
                tags,
                ttl,
                interval_ms: to_ms(self.warm_interval),
            };
            if !matches!(request(&self.requests, req).await, Ok(ControlReply::Ok)) {
                for (gi, i) in list {
                    self.groups[gi].ladder.lost_slot(i);
                }
            }
        }
    }

    /// Open the probe connections whose time has come.
    fn open_due_probes(&mut self, now: Duration) {
        for (gi, g) in self.groups.iter_mut().enumerate() {
            for i in 0..g.probes.len() {
                if g.ladder.slots[i].state == SlotState::Pending
                    && !g.probes[i].opening
                    && g.ladder.open_at(i) <= now
                {
                    g.probes[i].opening = true;
                    let keep = (g.mode == Mode::Keepalive).then_some(self.keepalive_interval);
                    tokio::spawn(open_probe(
                        self.cfg.clone(),
                        self.session,
                        gi,
                        i,
                        keep,
                        self.start,
                        self.event_tx.clone(),
                    ));
                }
            }
        }
    }

    /// Judge tests whose window has passed and been confirmed by a later heartbeat.
    fn judge_finished_tests(&mut self, now: Duration) {
        let hb = self.heartbeat;
        let (confirmed, outages) = {
            let h = lock(&self.health);
            (h.confirmed, h.outages.clone())
        };
        for (gi, g) in self.groups.iter_mut().enumerate() {
            for i in 0..g.probes.len() {
                let Some(pend) = &g.probes[i].pending else {
                    continue;
                };
                if now < pend.deadline {
                    continue;
                }
                let overlap =
                    overlaps_outage(&outages, pend.fired.saturating_sub(hb), pend.deadline, now);
                if !overlap && confirmed < pend.deadline && now < pend.deadline + hb * 8 {
                    continue; // wait for a heartbeat that proves the path was up
                }
                let pend = g.probes[i].pending.take().expect("checked above");
                let p = &g.probes[i];
                let arrived = p
                    .arrived
                    .is_some_and(|(n, at)| n == pend.nonce && at <= pend.deadline);
                let (result, outcome, death) = if overlap || (!arrived && confirmed < pend.deadline)
                {
                    g.lost_to_outage += 1;
                    (TestResult::Lost, "lost to outage".to_string(), None)
                } else if arrived {
                    (TestResult::Alive { idle: pend.idle }, "alive".into(), None)
                } else {
                    let death = match p.ended.map(|e| e.0) {
                        Some(ClientSawEnd::Reset) => DeathKind::MiddleboxReset,
                        Some(_) => DeathKind::ServerClosed,
                        None => DeathKind::SilentDrop,
                    };
                    (
                        TestResult::Dead { idle: pend.idle },
                        "dead".into(),
                        Some(death),
                    )
                };
                if g.mode != Mode::Keepalive {
                    g.ladder.record(i, result, now);
                    // A survivor is reused as a fresh connection: warm it again.
                    g.probes[i].needs_warm =
                        g.mode.warm() && matches!(result, TestResult::Alive { .. });
                } else {
                    g.ladder.slots[i].state = SlotState::Gone;
                }
                g.rows.push(TestRow {
                    mode: g.mode,
                    tag: tag_of(gi, i),
                    fired_s: pend.fired.as_secs_f64(),
                    idle_s: pend.idle.as_secs_f64(),
                    outcome,
                    observed: g.probes[i].observed,
                    death,
                    server_saw: None,
                });
            }
        }
    }

    /// The tests the ladders want now. Client-initiated ones are written here (they need no
    /// server request); server-fired ones are returned for one fire request.
    async fn due_tests(&mut self, now: Duration) -> Vec<(usize, usize)> {
        let mut fire = Vec::new();
        let grace = self.grace;
        for (gi, g) in self.groups.iter_mut().enumerate() {
            if g.mode == Mode::Keepalive {
                continue;
            }
            for i in g.ladder.due(now) {
                match g.mode {
                    m if m.server_fired() => {
                        if m == Mode::NearWarm {
                            if let Some(w) = g.probes[i].writer.as_ref() {
                                cool_near(w, g.probes[i].default_ttl.unwrap_or(64));
                            }
                        }
                        fire.push((gi, i))
                    }
                    _ => {
                        self.nonce += 1;
                        let nonce = self.nonce;
                        let idle =
                            now.saturating_sub(g.ladder.slots[i].last_activity.unwrap_or(now));
                        let ok = match g.probes[i].writer.as_mut() {
                            Some(w) => tokio::time::timeout(
                                grace,
                                pathdoc_proto::write_frame(w, &ProbeRequest::Ping { nonce }),
                            )
                            .await
                            .map(|r| r.is_ok())
                            .unwrap_or(false),
                            None => false,
                        };
                        if ok {
                            g.probes[i].pending = Some(Pending {
                                fired: now,
                                deadline: now + grace,
                                nonce,
                                idle,
                            });
                        } else {
                            g.ladder.record(i, TestResult::Dead { idle }, now);
                            g.rows.push(TestRow {
                                mode: g.mode,
                                tag: tag_of(gi, i),
                                fired_s: now.as_secs_f64(),
                                idle_s: idle.as_secs_f64(),
                                outcome: "dead".into(),
                                observed: g.probes[i].observed,
                                death: Some(DeathKind::MiddleboxReset),
                                server_saw: None,
                            });
                        }
                    }
                }
            }
        }
        fire
    }

    /// The keepalive probes, tested once the ladders are done.
    fn keepalive_tests(&mut self) -> Vec<(usize, usize)> {
        let gi = self.groups.len() - 1;
        let ka = &mut self.groups[gi];
        let mut fire = Vec::new();
        for i in 0..ka.probes.len() {
            if ka.ladder.slots[i].state == SlotState::Idle {
                ka.ladder.slots[i].state = SlotState::Testing;
                fire.push((gi, i));
            }
        }
        fire
    }

    /// One fire request for every server-fired test; what the server did not send is lost.
    async fn fire(&mut self, fire: Vec<(usize, usize)>) {
        if fire.is_empty() {
            return;
        }
        self.nonce += 1;
        let nonce = self.nonce;
        let tags: Vec<u32> = fire.iter().map(|&(g, i)| tag_of(g, i)).collect();
        let reply = request(&self.requests, ControlRequest::Fire { tags, nonce }).await;
        let now = self.start.elapsed();
        let fired: HashMap<u32, Fired> = match reply {
            Ok(ControlReply::Fired { fired }) => fired.into_iter().map(|f| (f.tag, f)).collect(),
            _ => HashMap::new(),
        };
        for (gi, i) in fire {
            let g = &mut self.groups[gi];
            match fired.get(&tag_of(gi, i)) {
                Some(f) if f.sent => {
                    let idle = f.idle_ms.map(ms).unwrap_or_default();
                    g.probes[i].pending = Some(Pending {
                        fired: now,
                        deadline: now + self.grace,
                        nonce,
                        idle,
                    });
                }
                _ => {
                    // Not sent: the control connection was down or the server's side ended.
                    if g.mode != Mode::Keepalive {
                        g.ladder.record(i, TestResult::Lost, now);
                    } else {
                        g.ladder.slots[i].state = SlotState::Gone;
                    }
                    g.lost_to_outage += u32::from(fired.is_empty());
                }
            }
        }
    }

    /// Refine how probes died with the server's view.
    pub(super) fn apply_server_view(&mut self, records: &HashMap<u32, ServerProbeRecord>) {
        for g in self.groups.iter_mut() {
            for row in g.rows.iter_mut() {
                if let Some(rec) = records.get(&row.tag) {
                    row.server_saw = rec.end.clone();
                    if row.death == Some(DeathKind::SilentDrop)
                        && rec.end == Some(ServerSawEnd::ResetByPeer)
                    {
                        row.death = Some(DeathKind::MiddleboxReset);
                    }
                }
            }
        }
    }
}

fn status_line(groups: &[Group], now: Duration, horizon: Duration) -> String {
    let fmt = pathdoc_core::units::format_duration;
    let g = &groups[0];
    let known = match (g.ladder.lower, g.ladder.upper) {
        (l, Some(u)) => format!(
            "timeout between {} and {}",
            fmt(l.unwrap_or_default()),
            fmt(u)
        ),
        (Some(l), None) => format!("alive after {} idle", fmt(l)),
        (None, None) => "no result yet".into(),
    };
    let eta = if g.ladder.upper.is_some() {
        "soon".to_string()
    } else {
        format!("at most {}", fmt(horizon.saturating_sub(now)))
    };
    format!("idle: {} elapsed, {known}; ETA {eta}", fmt(now))
}
