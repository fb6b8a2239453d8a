//! The UDP half of the idle check (RFC 4787 REQ-5/REQ-6), on the same schedule engine as TCP.
//!
//! NATs keep UDP bindings in (at least) two classes with different timers. Linux conntrack, for
//! one, gives a binding that has seen a single request and reply `nf_conntrack_udp_timeout`
//! (30 s by default) and one with traffic both ways after its first seconds
//! `nf_conntrack_udp_timeout_stream` (120 s); other NATs have "UDP initial" and "UDP
//! established" timers. A binding tested and reused moves from the first class into the second,
//! so mixing them in one ladder makes its evidence contradict itself. Each class therefore gets
//! its own ladder of bindings:
//!
//! * **single exchange**: one `OPEN` (retried until the server's echo), then silence. A binding
//!   is tested once: a probe that arrives is itself inbound traffic after the first seconds,
//!   which moves the binding into the other class, so survivors are never reused.
//! * **stream**: `OPEN` and echo, then two more exchanges [`STREAM_GAP`] apart (the last one past
//!   Linux's 2-s "still active" threshold), then silence. A binding that got its probe answers
//!   it (outbound traffic, which REQ-6 says MUST refresh), so it stays a stream and is reused.
//!
//! A test asks the server over the control connection (`FireUdp`) to send a PROBE to the
//! binding's public address; it arrived within the grace or not.
//!
//! REQ-6: two more bindings (single exchange at the start) receive only inbound `REFRESH`
//! datagrams from the server, never answered, and are tested once their silence exceeds the
//! longest timeout found: alive means inbound traffic refreshes bindings.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pathdoc_proto::{SessionId, UdpHeader};
use serde::Serialize;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::duration::{ms, to_ms};
use crate::proto::{udp_kind, ControlReply, ControlRequest, UdpPayload, UDP_PAD};
use crate::schedule::{Ladder, LadderPlan, SlotState, TestResult};
use crate::verdict::{DeathKind, LadderOutcome};

/// Tags of single-exchange bindings (TCP probe tags are `group << 16 | slot`).
const SINGLE_TAG_BASE: u32 = 0x4000_0000;
/// Tags of stream bindings.
const STREAM_TAG_BASE: u32 = 0x4800_0000;
/// Tags of the inbound-refresh bindings.
const REFRESH_TAG_BASE: u32 = 0x5000_0000;
/// Bindings that test inbound refresh.
const REFRESH_BINDINGS: usize = 2;
/// Time between the exchanges that make a stream binding: two gaps put the last exchange past
/// the 2 s after which Linux conntrack treats a replied flow as a stream.
pub const STREAM_GAP: Duration = Duration::from_millis(1250);
/// Bindings per class (sockets are cheap; NAT table entries are what we spare).
pub const BINDINGS_PER_CLASS: usize = 40;

/// The two classes of UDP binding a NAT may time out differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UdpClass {
    /// One request and its reply, then silence (DNS, a STUN binding request, a SIP REGISTER).
    SingleExchange,
    /// Traffic both ways over a few seconds, then silence (a VPN, QUIC or VoIP flow gone quiet).
    Stream,
}

impl UdpClass {
    fn tag_base(self) -> u32 {
        match self {
            UdpClass::SingleExchange => SINGLE_TAG_BASE,
            UdpClass::Stream => STREAM_TAG_BASE,
        }
    }
}

/// What one class's ladder found.
#[derive(Debug, Clone, Serialize)]
pub struct UdpClassReport {
    pub class: UdpClass,
    pub plan: LadderPlan,
    pub outcome: LadderOutcome,
    /// The ladder ran to its end (pinned the timeout, or reached its horizon alive).
    pub finished: bool,
    /// Bindings that never opened (the server never echoed OPEN).
    pub open_failed: u32,
}

/// What the UDP part found.
#[derive(Debug, Clone, Serialize)]
pub struct UdpReport {
    pub single_exchange: UdpClassReport,
    pub stream: UdpClassReport,
    /// Inbound-refresh bindings (alive, dead) when they could be tested.
    pub inbound_refresh: Option<(u32, u32)>,
    /// Why the inbound-refresh bindings were not tested, when they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inbound_refresh_not_run: Option<String>,
    #[serde(rename = "refresh_interval_s", with = "crate::duration::secs")]
    pub refresh_interval: Duration,
    pub tests: Vec<UdpTest>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UdpTest {
    pub tag: u32,
    /// `None` for the inbound-refresh bindings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<UdpClass>,
    pub fired_s: f64,
    pub idle_s: f64,
    pub outcome: String,
    pub inbound_refresh: bool,
}

/// Control requests go through the client's control task.
pub(crate) type Requester = Arc<
    dyn Fn(ControlRequest) -> futures_like::BoxFuture<Result<ControlReply, String>> + Send + Sync,
>;

pub(crate) mod futures_like {
    pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;
}

/// The client's health view, shared with the TCP side: outages and the latest confirmed time.
pub(crate) type HealthView = Arc<dyn Fn() -> (Duration, Vec<(Duration, Duration)>) + Send + Sync>;

/// Which binding an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    Class(usize, usize),
    Refresh(usize),
}

enum Ev {
    Opened(Who, Duration),
    OpenFailed(Who),
    Probe(Who, u64, Duration),
}

#[derive(Default)]
struct Binding {
    sock: Option<Arc<UdpSocket>>,
    pending: Option<Pending>,
    arrived: Option<(u64, Duration)>,
    opening: bool,
    opened_at: Option<Duration>,
}

#[derive(Clone, Copy)]
struct Pending {
    fired: Duration,
    deadline: Duration,
    nonce: u64,
    idle: Duration,
}

/// How a binding is set up and treated.
#[derive(Clone, Copy)]
struct OpenSpec {
    server: SocketAddr,
    session: SessionId,
    tag: u32,
    who: Who,
    /// Extra exchanges after the opening one (stream class).
    warm_exchanges: u32,
    /// Answer the server's probes (reused bindings must stay in their class).
    answer_probes: bool,
    grace: Duration,
    start: Instant,
}

fn datagram(session: SessionId, tag: u32, kind: u16, nonce: u64) -> Vec<u8> {
    let mut d = Vec::new();
    UdpHeader { session, kind }.encode(&mut d);
    d.extend_from_slice(
        &UdpPayload {
            tag,
            nonce,
            observed: None,
        }
        .encode(UDP_PAD),
    );
    d
}

/// Send `kind` until the server echoes it (4 tries, one grace each).
async fn exchange(sock: &UdpSocket, spec: &OpenSpec, kind: u16, nonce: u64) -> bool {
    let mut buf = [0u8; 1024];
    for _ in 0..4 {
        let _ = sock
            .send(&datagram(spec.session, spec.tag, kind, nonce))
            .await;
        let deadline = Instant::now() + spec.grace;
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            if let Ok((h, payload)) = UdpHeader::decode(&buf[..n]) {
                let echo_nonce = UdpPayload::decode(payload).map(|p| p.nonce);
                if h.kind == kind && (kind == udp_kind::OPEN || echo_nonce == Some(nonce)) {
                    return true;
                }
            }
        }
    }
    false
}

async fn open_binding(spec: OpenSpec, tx: mpsc::UnboundedSender<Ev>) -> Option<Arc<UdpSocket>> {
    let failed = || {
        let _ = tx.send(Ev::OpenFailed(spec.who));
        None
    };
    let bind = pathdoc_sys::source::udp_bind_addr(&spec.server);
    let Ok(sock) = UdpSocket::bind(bind).await else {
        return failed();
    };
    if sock.connect(spec.server).await.is_err() {
        return failed();
    }
    if !exchange(&sock, &spec, udp_kind::OPEN, 0).await {
        return failed();
    }
    // Stream class: more traffic both ways, the last exchange past the first 2 s.
    for i in 0..spec.warm_exchanges {
        tokio::time::sleep(STREAM_GAP).await;
        // Nonces below 16 are never used by fire requests (those start from a random u64).
        if !exchange(&sock, &spec, udp_kind::PROBE, u64::from(i) + 1).await {
            return failed();
        }
    }
    let _ = tx.send(Ev::Opened(spec.who, spec.start.elapsed()));
    let sock = Arc::new(sock);
    let reader = sock.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        let mut answered = None;
        loop {
            let Ok(n) = reader.recv(&mut buf).await else {
                return;
            };
            let Ok((h, payload)) = UdpHeader::decode(&buf[..n]) else {
                continue;
            };
            if h.kind != udp_kind::PROBE {
                continue; // refresh traffic is never answered
            }
            let Some(p) = UdpPayload::decode(payload) else {
                continue;
            };
            // The server echoes our answer: each probe is recorded and answered once.
            if answered == Some(p.nonce) || p.nonce <= 16 {
                continue;
            }
            answered = Some(p.nonce);
            if tx
                .send(Ev::Probe(spec.who, p.nonce, spec.start.elapsed()))
                .is_err()
            {
                return;
            }
            if spec.answer_probes {
                // Outbound traffic refreshes the binding (REQ-6 MUST) so the survivor is reused.
                let _ = reader
                    .send(&datagram(spec.session, spec.tag, udp_kind::PROBE, p.nonce))
                    .await;
            }
        }
    });
    Some(sock)
}

/// One class's ladder and its bindings.
struct ClassRun {
    class: UdpClass,
    ladder: Ladder,
    bindings: Vec<Binding>,
    open_failed: u32,
}

impl ClassRun {
    fn new(class: UdpClass, plan: LadderPlan) -> Self {
        let ladder = Ladder::new(plan);
        let bindings = (0..ladder.slots.len())
            .map(|_| Binding::default())
            .collect();
        ClassRun {
            class,
            ladder,
            bindings,
            open_failed: 0,
        }
    }

    fn tag(&self, i: usize) -> u32 {
        self.class.tag_base() + i as u32
    }

    fn report(&self, tests: &[UdpTest], stopped_early: bool, now: Duration) -> UdpClassReport {
        let mine: Vec<&UdpTest> = tests
            .iter()
            .filter(|t| t.class == Some(self.class))
            .collect();
        let dead = mine.iter().filter(|t| t.outcome == "dead").count() as u32;
        let outcome = LadderOutcome {
            lower: self.ladder.lower,
            upper: self.ladder.upper,
            resolution: self.ladder.plan.resolution,
            horizon: self.ladder.plan.horizon,
            tests: mine.len() as u32,
            lost_to_outage: mine
                .iter()
                .filter(|t| t.outcome == "lost to outage")
                .count() as u32,
            contradictions: self.ladder.contradictions,
            deaths: if dead > 0 {
                vec![(DeathKind::SilentDrop, dead)]
            } else {
                Vec::new()
            },
        };
        UdpClassReport {
            class: self.class,
            plan: self.ladder.plan.clone(),
            outcome,
            finished: !stopped_early || self.ladder.finished(now),
            open_failed: self.open_failed,
        }
    }
}

/// Everything `run_udp` needs from the client.
pub(crate) struct UdpSetup {
    pub server: SocketAddr,
    pub session: SessionId,
    pub plan: LadderPlan,
    pub grace: Duration,
    pub heartbeat: Duration,
    pub refresh_interval: Duration,
    pub start: Instant,
    /// Nothing is fired after this; the run ends at it at the latest.
    pub hard_end: Duration,
    pub request: Requester,
    pub health: HealthView,
    /// Set when the run must end now (interrupted, the server ended the session).
    pub stop: Arc<std::sync::atomic::AtomicBool>,
}

/// Run both classes' ladders and the inbound-refresh bindings until done, `stop` or `hard_end`.
/// Each tick: take in what the sockets saw, open the bindings whose time has come, start the
/// server's refresh traffic, judge tests whose window has passed, fire the due tests.
pub(crate) async fn run_udp(s: UdpSetup) -> UdpReport {
    let mut run = UdpRun::new(s);
    let tick = (run.s.plan.resolution / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let stopped_early = loop {
        let now = run.s.start.elapsed();
        run.take_events();
        let stopped = run.s.stop.load(std::sync::atomic::Ordering::Relaxed);
        if !stopped {
            run.open_due(now);
        }
        run.start_refresh().await;
        run.judge(now);
        let mut fire = Vec::new();
        if !stopped && now <= run.s.hard_end {
            fire = run.due_tests(now);
            fire.extend(run.refresh_tests(now));
        }
        run.fire(fire).await;
        let complete = run.complete(now);
        if complete || stopped || now > run.s.hard_end {
            break !complete;
        }
        tokio::time::sleep(tick).await;
    };
    run.report(stopped_early)
}

/// The UDP part's state: both classes, the refresh bindings, and the tests judged so far.
struct UdpRun {
    s: UdpSetup,
    classes: [ClassRun; 2],
    refresh: Vec<Binding>,
    tx: mpsc::UnboundedSender<Ev>,
    rx: mpsc::UnboundedReceiver<Ev>,
    sock_tx: mpsc::UnboundedSender<(Who, Arc<UdpSocket>)>,
    sock_rx: mpsc::UnboundedReceiver<(Who, Arc<UdpSocket>)>,
    refresh_started: bool,
    refresh_done: Option<(u32, u32)>,
    refresh_fired: bool,
    tests: Vec<UdpTest>,
    nonce: u64,
}

impl UdpRun {
    fn new(s: UdpSetup) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (sock_tx, sock_rx) = mpsc::unbounded_channel();
        UdpRun {
            classes: [
                ClassRun::new(UdpClass::SingleExchange, s.plan.clone()),
                ClassRun::new(UdpClass::Stream, s.plan.clone()),
            ],
            refresh: (0..REFRESH_BINDINGS).map(|_| Binding::default()).collect(),
            s,
            tx,
            rx,
            sock_tx,
            sock_rx,
            refresh_started: false,
            refresh_done: None,
            refresh_fired: false,
            tests: Vec::new(),
            // Fire nonces stay clear of the small ones the stream warm-up uses.
            nonce: rand::random::<u64>() | 0x1000,
        }
    }

    fn binding(&mut self, who: Who) -> &mut Binding {
        match who {
            Who::Class(c, i) => &mut self.classes[c].bindings[i],
            Who::Refresh(i) => &mut self.refresh[i],
        }
    }

    /// Sockets that opened, bindings that opened or failed, probes that arrived.
    fn take_events(&mut self) {
        while let Ok((who, sock)) = self.sock_rx.try_recv() {
            self.binding(who).sock = Some(sock);
        }
        while let Ok(ev) = self.rx.try_recv() {
            match ev {
                Ev::Opened(who, at) => {
                    if let Who::Class(c, i) = who {
                        self.classes[c].ladder.opened(i, at);
                    }
                    self.binding(who).opened_at = Some(at);
                }
                Ev::OpenFailed(Who::Class(c, i)) => {
                    self.classes[c].ladder.lost_slot(i);
                    self.classes[c].open_failed += 1;
                }
                Ev::OpenFailed(Who::Refresh(_)) => {}
                Ev::Probe(who, n, at) => self.binding(who).arrived = Some((n, at)),
            }
        }
    }

    fn spec(&self, tag: u32, who: Who, class: Option<UdpClass>) -> OpenSpec {
        OpenSpec {
            server: self.s.server,
            session: self.s.session,
            tag,
            who,
            warm_exchanges: if class == Some(UdpClass::Stream) {
                2
            } else {
                0
            },
            answer_probes: class == Some(UdpClass::Stream),
            grace: self.s.grace,
            start: self.s.start,
        }
    }

    /// Open the ladder bindings whose time has come, and the refresh bindings at the start.
    fn open_due(&mut self, now: Duration) {
        let mut open = Vec::new();
        for (c, class) in self.classes.iter().enumerate() {
            for i in 0..class.bindings.len() {
                let due = class.ladder.slots[i].state == SlotState::Pending
                    && class.ladder.open_at(i) <= now;
                if due && !class.bindings[i].opening {
                    open.push((class.tag(i), Who::Class(c, i), Some(class.class)));
                }
            }
        }
        for (i, b) in self.refresh.iter().enumerate() {
            if !b.opening {
                open.push((REFRESH_TAG_BASE + i as u32, Who::Refresh(i), None));
            }
        }
        for (tag, who, class) in open {
            self.binding(who).opening = true;
            spawn_open(
                self.spec(tag, who, class),
                self.tx.clone(),
                self.sock_tx.clone(),
            );
        }
    }

    /// Once both refresh bindings are open, ask the server for its inbound-only traffic.
    async fn start_refresh(&mut self) {
        if self.refresh_started || self.refresh.iter().any(|b| b.opened_at.is_none()) {
            return;
        }
        self.refresh_started = true;
        let tags = (0..REFRESH_BINDINGS)
            .map(|i| REFRESH_TAG_BASE + i as u32)
            .collect();
        let _ = (self.s.request)(ControlRequest::UdpRefresh {
            tags,
            interval_ms: to_ms(self.s.refresh_interval),
        })
        .await;
    }

    /// Judge tests whose window has passed and been confirmed by a later heartbeat.
    fn judge(&mut self, now: Duration) {
        let (confirmed, outages) = (self.s.health)();
        let heartbeat = self.s.heartbeat;
        let judge = |b: &mut Binding| -> Option<(Pending, TestResult, &'static str)> {
            let p = b.pending?;
            if now < p.deadline {
                return None;
            }
            let overlap = outages
                .iter()
                .any(|&(st, e)| st <= p.deadline && e >= p.fired.saturating_sub(heartbeat));
            if !overlap && confirmed < p.deadline && now < p.deadline + heartbeat * 8 {
                return None;
            }
            b.pending = None;
            let arrived = b
                .arrived
                .is_some_and(|(n, at)| n == p.nonce && at <= p.deadline);
            Some(if overlap || (!arrived && confirmed < p.deadline) {
                (p, TestResult::Lost, "lost to outage")
            } else if arrived {
                (p, TestResult::Alive { idle: p.idle }, "alive")
            } else {
                (p, TestResult::Dead { idle: p.idle }, "dead")
            })
        };
        for class in self.classes.iter_mut() {
            for i in 0..class.bindings.len() {
                let Some((p, result, outcome)) = judge(&mut class.bindings[i]) else {
                    continue;
                };
                class.ladder.record(i, result, now);
                if class.class == UdpClass::SingleExchange {
                    // The probe moved a surviving binding into the stream class: never reused.
                    class.ladder.slots[i].state = SlotState::Gone;
                }
                self.tests.push(UdpTest {
                    tag: class.tag(i),
                    class: Some(class.class),
                    fired_s: p.fired.as_secs_f64(),
                    idle_s: p.idle.as_secs_f64(),
                    outcome: outcome.into(),
                    inbound_refresh: false,
                });
            }
        }
        for (i, b) in self.refresh.iter_mut().enumerate() {
            let Some((p, result, outcome)) = judge(b) else {
                continue;
            };
            let r = self.refresh_done.get_or_insert((0, 0));
            match result {
                TestResult::Alive { .. } => r.0 += 1,
                TestResult::Dead { .. } => r.1 += 1,
                TestResult::Lost => {}
            }
            self.tests.push(UdpTest {
                tag: REFRESH_TAG_BASE + i as u32,
                class: None,
                fired_s: p.fired.as_secs_f64(),
                idle_s: p.idle.as_secs_f64(),
                outcome: outcome.into(),
                inbound_refresh: true,
            });
        }
    }

    /// The ladders' due tests.
    fn due_tests(&mut self, now: Duration) -> Vec<(Who, u32)> {
        let mut fire = Vec::new();
        for (c, class) in self.classes.iter_mut().enumerate() {
            for i in class.ladder.due(now) {
                fire.push((Who::Class(c, i), class.tag(i)));
            }
        }
        fire
    }

    /// The refresh bindings, once the ladders are done and their silence is longer than every
    /// timeout found (nothing to outlive when no binding timed out).
    fn refresh_tests(&mut self, now: Duration) -> Vec<(Who, u32)> {
        if self.refresh_fired || !self.classes.iter().all(|c| c.ladder.finished(now)) {
            return Vec::new();
        }
        let Some(longest) = self.classes.iter().filter_map(|c| c.ladder.upper).max() else {
            self.refresh_fired = true;
            return Vec::new();
        };
        let old_enough = self
            .refresh
            .iter()
            .filter_map(|b| b.opened_at)
            .all(|at| now.saturating_sub(at) > longest + self.s.plan.resolution);
        if !old_enough {
            return Vec::new();
        }
        self.refresh_fired = true;
        (0..REFRESH_BINDINGS)
            .filter(|&i| self.refresh[i].opened_at.is_some())
            .map(|i| (Who::Refresh(i), REFRESH_TAG_BASE + i as u32))
            .collect()
    }

    /// One fire request; what the server did not send is lost.
    async fn fire(&mut self, fire: Vec<(Who, u32)>) {
        if fire.is_empty() {
            return;
        }
        self.nonce += 1;
        let nonce = self.nonce;
        let tags: Vec<u32> = fire.iter().map(|&(_, t)| t).collect();
        let reply = (self.s.request)(ControlRequest::FireUdp { tags, nonce }).await;
        let now = self.s.start.elapsed();
        let fired: HashMap<u32, crate::proto::Fired> = match reply {
            Ok(ControlReply::Fired { fired }) => fired.into_iter().map(|f| (f.tag, f)).collect(),
            _ => HashMap::new(),
        };
        let grace = self.s.grace;
        for (who, tag) in fire {
            match (fired.get(&tag).filter(|f| f.sent), who) {
                (Some(f), _) => {
                    self.binding(who).pending = Some(Pending {
                        fired: now,
                        deadline: now + grace,
                        nonce,
                        idle: f.idle_ms.map(ms).unwrap_or_default(),
                    });
                }
                (None, Who::Class(c, i)) => self.classes[c].ladder.record(i, TestResult::Lost, now),
                (None, Who::Refresh(_)) => {}
            }
        }
    }

    /// Both ladders finished, the refresh test done, nothing in flight.
    fn complete(&self, now: Duration) -> bool {
        let busy = self
            .classes
            .iter()
            .flat_map(|c| c.bindings.iter())
            .chain(self.refresh.iter())
            .any(|b| b.pending.is_some());
        self.classes.iter().all(|c| c.ladder.finished(now)) && self.refresh_fired && !busy
    }

    fn report(self, stopped_early: bool) -> UdpReport {
        let now = self.s.start.elapsed();
        let inbound_refresh_not_run = match (self.refresh_done, self.refresh_fired) {
            (Some(_), _) => None,
            (None, true) if self.classes.iter().all(|c| c.ladder.upper.is_none()) => {
                Some("no UDP binding timed out, so there was nothing to outlive".to_string())
            }
            _ if self.refresh.iter().any(|b| b.opened_at.is_none()) => {
                Some("the refresh bindings did not open".to_string())
            }
            _ => Some("the run ended before their silence exceeded the timeout found".to_string()),
        };
        UdpReport {
            single_exchange: self.classes[0].report(&self.tests, stopped_early, now),
            stream: self.classes[1].report(&self.tests, stopped_early, now),
            inbound_refresh: self.refresh_done,
            inbound_refresh_not_run,
            refresh_interval: self.s.refresh_interval,
            tests: self.tests,
        }
    }
}

fn spawn_open(
    spec: OpenSpec,
    tx: mpsc::UnboundedSender<Ev>,
    sock_tx: mpsc::UnboundedSender<(Who, Arc<UdpSocket>)>,
) {
    tokio::spawn(async move {
        if let Some(sock) = open_binding(spec, tx).await {
            let _ = sock_tx.send((spec.who, sock));
        }
    });
}
