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
use tokio_util::sync::CancellationToken;

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
    /// When every ladder was done.
    pub(super) finished_at: Option<Duration>,
    /// The keepalive probes' test: fired once the server-initiated ladder found the timeout.
    keepalive: KeepaliveTest,
    cancel: CancellationToken,
    /// When the user interrupted the run.
    pub(super) interrupted_at: Option<Duration>,
    /// The latest time (since the start) the UDP part can still be running.
    udp_end: Duration,
    /// Probe connections the server refused for want of room, and what it said first.
    pub(super) refused: Option<(u32, pathdoc_core::busy::ServerBusy)>,
}

/// Where the keepalive probes' single test is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeepaliveTest {
    Waiting,
    Fired,
    Done,
    /// There is nothing to test against (no timeout found, or keepalives off).
    NotNeeded,
}

/// How long a fired test can take to be judged: its grace, then a heartbeat sent after it that
/// must come back (at most 8 heartbeats), plus a loop tick either side.
fn judge_time(grace: Duration, heartbeat: Duration, tick: Duration) -> Duration {
    grace + heartbeat * 8 + tick * 2
}

/// Time the loop may overrun its hard end by (requests in flight have their own deadlines).
pub(super) const LOOP_SLACK: Duration = Duration::from_secs(15);
/// What the run needs after the probe loop: the server's records and the session's end.
pub(super) const TEARDOWN: Duration = Duration::from_secs(15);

impl<'a> TcpRun<'a> {
    pub(super) fn new(
        cfg: &'a IdleConfig,
        link: &ControlLink,
        groups: Vec<Group>,
        hard_end: Duration,
        udp_end: Duration,
        cancel: CancellationToken,
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
            keepalive: if cfg.keepalive {
                KeepaliveTest::Waiting
            } else {
                KeepaliveTest::NotNeeded
            },
            cancel,
            interrupted_at: None,
            udp_end,
            refused: None,
        }
    }

    fn tick(&self) -> Duration {
        (self.cfg.resolution / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// Why the loop must stop now, if it must: interrupted, or the server ended the session.
    fn must_stop(&mut self, now: Duration) -> bool {
        if self.cancel.is_cancelled() {
            self.interrupted_at.get_or_insert(now);
            return true;
        }
        lock(&self.health).session_ended.is_some()
    }

    /// The keepalive group (always the last one).
    pub(super) fn keepalive_group(&self) -> &Group {
        self.groups.last().expect("the keepalive group exists")
    }

    /// The ordinary and culprit ladders (everything but the keepalive group).
    pub(super) fn ladders(&self) -> &[Group] {
        &self.groups[..self.groups.len() - 1]
    }

    /// Run until every ladder is done and the keepalive probes are judged, the hard end, an
    /// interruption, or the end of the session.
    pub(super) async fn run(&mut self, progress: &dyn Progress) {
        let tick = self.tick();
        let mut last_status = None;
        loop {
            let now = self.start.elapsed();
            for note in std::mem::take(&mut lock(&self.health).notes) {
                progress.note(&note);
            }
            if self.must_stop(now) {
                break;
            }
            self.take_events();
            self.distrust_after_suspend();
            self.keep_warm().await;
            self.open_due_probes(now);
            self.judge_finished_tests(now);
            let mut fire = self.due_tests(now).await;
            fire.extend(self.keepalive_tests(now));
            self.fire(fire).await;
            if self.keepalive == KeepaliveTest::Fired
                && !self
                    .keepalive_group()
                    .probes
                    .iter()
                    .any(|p| p.pending.is_some())
            {
                self.keepalive = KeepaliveTest::Done;
            }
            let all_done = self.ladders().iter().all(|g| g.ladder.finished(now));
            if all_done && self.finished_at.is_none() {
                self.finished_at = Some(now);
            }
            let keepalive_done = matches!(
                self.keepalive,
                KeepaliveTest::Done | KeepaliveTest::NotNeeded
            );
            if (all_done && keepalive_done) || now > self.hard_end {
                break;
            }
            if last_status.is_none_or(|t| now >= t + Duration::from_secs(1)) {
                last_status = Some(now);
                progress.status(&self.status_line(now));
            }
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = self.cancel.cancelled() => {}
            }
        }
    }

    /// An upper bound on the time until the whole check is over, from what is known now: the
    /// ladders' last tests (exact once a timeout is bracketed, the hard end before), the
    /// keepalive test after them, the UDP part, then the teardown. Never below what can happen.
    pub(super) fn eta(&self, now: Duration) -> Duration {
        let judge = judge_time(self.grace, self.heartbeat, self.tick());
        // A ladder with a lost test has no bound of its own: the hard end is the bound then.
        let last_fire = self
            .ladders()
            .iter()
            .map(|g| g.ladder.last_test_by(now))
            .try_fold(now, |m, t| t.map(|t| m.max(t)))
            .unwrap_or(self.hard_end);
        let mut tcp_end = last_fire + judge;
        if self.keepalive != KeepaliveTest::NotNeeded && self.keepalive != KeepaliveTest::Done {
            tcp_end += judge;
        }
        let loop_end = tcp_end.min(self.hard_end + LOOP_SLACK);
        let end = loop_end.max(self.udp_end.min(self.hard_end + LOOP_SLACK)) + TEARDOWN;
        let left = end.saturating_sub(now);
        // Whole seconds, rounded up: a bound must not be shortened by formatting.
        Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0))
    }

    /// The ETA once the probe loop is over (the UDP part and the teardown remain), as a
    /// function the waiting caller can ask every second.
    pub(super) fn eta_after_tcp(&self, link: &ControlLink) -> impl Fn() -> Duration {
        let (start, udp_end, hard_end) = (link.start, self.udp_end, self.hard_end);
        move || {
            let end = udp_end.min(hard_end + LOOP_SLACK) + TEARDOWN;
            let left = end.saturating_sub(start.elapsed());
            Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0))
        }
    }

    /// One self-contained line: elapsed time, phase, tests judged, the TCP bracket so far and
    /// the ETA bound (a front end may print it as is when not on a terminal).
    fn status_line(&self, now: Duration) -> String {
        let fmt = pathdoc_core::units::format_duration;
        let g = &self.groups[0];
        let known = match (g.ladder.lower, g.ladder.upper) {
            (l, Some(u)) => format!(
                "TCP timeout in ({}, {}]",
                fmt(l.unwrap_or_default()),
                fmt(u)
            ),
            (Some(l), None) => format!("TCP alive after {} idle", fmt(l)),
            (None, None) => "no TCP result yet".into(),
        };
        let others_busy = self.ladders()[1..].iter().any(|g| !g.ladder.finished(now));
        let phase = if self.keepalive == KeepaliveTest::Fired {
            "testing keepalives"
        } else if g.ladder.upper.is_none() {
            "probes aging"
        } else if !g.ladder.finished(now) {
            "pinning the timeout"
        } else if others_busy && self.ladders().iter().any(|g| g.mode.warm()) {
            "locating the culprit hop"
        } else {
            "finishing"
        };
        let judged: usize = self.groups.iter().map(|g| g.rows.len()).sum();
        format!(
            "idle: {}, {phase}, {judged} tests judged, {known}; done within {}",
            fmt(now),
            fmt(self.eta(now))
        )
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
                ProbeEvent::Refused(busy) => {
                    tracing::debug!(slot = ev.slot, reason = ?busy.reason, "probe refused: the server was busy");
                    g.ladder.lost_slot(ev.slot);
                    match &mut self.refused {
                        Some((n, _)) => *n += 1,
                        None => self.refused = Some((1, busy)),
                    }
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

    /// The keepalive probes, tested once the server-initiated ladder has pinned the timeout and
    /// they have been idle (no data) longer than it: they need not wait for the other ladders.
    fn keepalive_tests(&mut self, now: Duration) -> Vec<(usize, usize)> {
        if self.keepalive != KeepaliveTest::Waiting {
            return Vec::new();
        }
        let main = &self.groups[0].ladder;
        if !main.finished(now) {
            return Vec::new();
        }
        let Some(upper) = main.upper else {
            // No timeout: nothing for keepalives to outlive.
            self.keepalive = KeepaliveTest::NotNeeded;
            return Vec::new();
        };
        let r = self.cfg.resolution;
        let gi = self.groups.len() - 1;
        let ka = &mut self.groups[gi];
        let ready: Vec<usize> = (0..ka.probes.len())
            .filter(|&i| ka.ladder.slots[i].state == SlotState::Idle)
            .collect();
        let old_enough = ready.iter().all(|&i| {
            ka.ladder.slots[i]
                .last_activity
                .is_some_and(|at| now.saturating_sub(at) > upper + r)
        });
        let opening = (0..ka.probes.len()).any(|i| ka.ladder.slots[i].state == SlotState::Pending);
        if ready.is_empty() && !opening {
            self.keepalive = KeepaliveTest::Done; // none opened; the verdict says so
            return Vec::new();
        }
        if ready.is_empty() || !old_enough {
            return Vec::new();
        }
        self.keepalive = KeepaliveTest::Fired;
        ready
            .into_iter()
            .map(|i| {
                ka.ladder.slots[i].state = SlotState::Testing;
                (gi, i)
            })
            .collect()
    }

    /// Why the keepalive probes were not tested, when they were not (and were wanted).
    pub(super) fn keepalive_not_run(&self, cut_short: Option<&str>) -> Option<String> {
        match self.keepalive {
            KeepaliveTest::Done | KeepaliveTest::NotNeeded => {
                let ka = self.keepalive_group();
                (ka.rows.is_empty()
                    && !ka.probes.is_empty()
                    && self.groups[0].ladder.upper.is_some())
                .then(|| {
                    "the keepalive connections did not open or ended before their test".to_string()
                })
            }
            KeepaliveTest::Waiting | KeepaliveTest::Fired => Some(match cut_short {
                Some(why) => why.to_string(),
                None => "the run reached its deadline before their test".to_string(),
            }),
        }
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
