//! The client side of the idle check: opens the probe connections, keeps a heartbeat on the
//! control connection, fires tests when the schedule says so, judges them, and builds the report.
//!
//! Outages: the control connection carries a heartbeat. When it stops (Wi-Fi drop, sleep,
//! address change) the client notes an outage starting at the last confirmed heartbeat, resumes
//! the session with backoff, and discards every test whose window overlaps the outage, so an
//! outage is never read as a NAT timeout. A test is only judged once a heartbeat sent after its
//! window was answered. Suspend is detected by comparing wall-clock and monotonic time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

use pathdoc_core::{Finding, Progress};
use pathdoc_proto::{connect, Channel, CheckKind, FramedConn, ProtoError, SessionId};
use serde::Serialize;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::culprit::{self, Split};
use crate::duration::{ms, to_ms};
use crate::hops::{self, PathHops};
use crate::proto::{
    ControlReply, ControlRequest, ProbeMessage, ProbeRequest, ServerProbeRecord, ServerSawEnd,
};
use crate::schedule::{
    plan_ladder, Ladder, LadderPlan, SlotState, TestResult, RFC4787_FLOOR, RFC4787_RECOMMENDED,
    RFC5382_FLOOR,
};
use crate::server::MAX_TAGS_PER_REQUEST;
use crate::udp_client;
use crate::verdict::{self, DeathKind, KeepaliveOutcome, LadderOutcome, RunSummary};

/// What to run.
#[derive(Debug, Clone)]
pub struct IdleConfig {
    pub server: SocketAddr,
    pub token: Option<String>,
    /// Longest idle time tested.
    pub horizon: Duration,
    /// Target resolution of the timeout.
    pub resolution: Duration,
    /// Most TCP probe connections to open in total.
    pub max_probes: usize,
    /// Run the client-initiated ladder too.
    pub client_initiated: bool,
    /// Run the keepalive-only probes.
    pub keepalive: bool,
    /// Fixed grace for a probe to arrive; default from the measured round-trip time.
    pub grace: Option<Duration>,
    /// Search for the hop that forgets first (TTL-limited keepalives on extra probe groups).
    pub culprit: bool,
    /// Most path splits the culprit search tests (two probe groups each).
    pub culprit_splits: usize,
    /// Test UDP bindings too (RFC 4787 REQ-5/REQ-6).
    pub udp: bool,
}

impl IdleConfig {
    pub fn new(server: SocketAddr) -> Self {
        IdleConfig {
            server,
            token: None,
            horizon: Duration::from_secs(7800),
            resolution: Duration::from_secs(10),
            max_probes: 240,
            client_initiated: true,
            keepalive: true,
            grace: None,
            culprit: true,
            culprit_splits: 3,
            udp: true,
        }
    }

    /// The settings' own consistency, checked before any network work.
    pub fn validate(&self) -> Result<(), IdleError> {
        if self.resolution < Duration::from_millis(200) || self.horizon < self.resolution * 2 {
            return Err(IdleError::Config(format!(
                "need resolution ≥ 200 ms and horizon ≥ 2 × resolution (got {:?} and {:?})",
                self.resolution, self.horizon
            )));
        }
        Ok(())
    }

    /// Heartbeat period: fast enough to notice an outage within the resolution, never slower
    /// than 15 s.
    pub fn heartbeat(&self) -> Duration {
        (self.resolution / 2).clamp(Duration::from_millis(250), Duration::from_secs(5))
    }
}

/// Errors that stop the check before it produced a verdict.
#[derive(Debug, thiserror::Error)]
pub enum IdleError {
    #[error("cannot reach the pathdoc server at {0}: {1}")]
    Connect(SocketAddr, ProtoError),
    #[error("invalid settings: {0}")]
    Config(String),
}

/// The check's result: findings plus the raw probe table for `report.data["idle"]`.
pub struct IdleResult {
    pub findings: Vec<Finding>,
    pub data: serde_json::Value,
}

// ---------------------------------------------------------------------------------------------
// Control connection

#[derive(Debug, Clone, Serialize)]
pub struct Outage {
    pub start_s: f64,
    pub end_s: Option<f64>,
    pub cause: String,
}

struct Health {
    outages: Vec<(Duration, Option<Duration>, String)>,
    /// Send time of the latest answered heartbeat: the path was up at least until then.
    confirmed: Duration,
    rtt: Duration,
    notes: Vec<String>,
    suspended: bool,
    public_addr: SocketAddr,
}

type Request = (
    ControlRequest,
    oneshot::Sender<Result<ControlReply, String>>,
);

struct ControlCtx {
    cfg: IdleConfig,
    session: SessionId,
    start: Instant,
    health: Arc<Mutex<Health>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn exchange(
    conn: &mut FramedConn,
    req: &ControlRequest,
    deadline: Duration,
) -> Result<ControlReply, ProtoError> {
    conn.send(req).await?;
    conn.recv_timeout(deadline, "the server's idle-check reply")
        .await
}

async fn control_task(
    ctx: ControlCtx,
    mut conn: Option<FramedConn>,
    mut rx: mpsc::Receiver<Request>,
) {
    let hb = ctx.cfg.heartbeat();
    let deadline = (hb * 3).max(Duration::from_secs(1));
    let mut seq = 0u64;
    let mut last_wall = SystemTime::now();
    let mut last_mono = Instant::now();
    let mut backoff = Duration::from_millis(250);
    loop {
        let Some(c) = conn.as_mut() else {
            // Reconnect, answering requests with an error meanwhile.
            tokio::select! {
                req = rx.recv() => match req {
                    Some((_, reply)) => { let _ = reply.send(Err("control connection down".into())); continue; }
                    None => return,
                },
                _ = tokio::time::sleep(backoff) => {}
            }
            let channel = Channel::Control {
                check: CheckKind::Idle,
                resume: Some(ctx.session),
            };
            match connect(ctx.cfg.server, ctx.cfg.token.clone(), channel, deadline).await {
                Ok((c, welcome)) => {
                    let now = ctx.start.elapsed();
                    let mut h = lock(&ctx.health);
                    if let Some(o) = h.outages.last_mut() {
                        if o.1.is_none() {
                            o.1 = Some(now);
                        }
                    }
                    if welcome.observed.ip() != h.public_addr.ip() {
                        let note = format!(
                            "idle: public address changed from {} to {}: earlier probes cannot be judged",
                            h.public_addr.ip(),
                            welcome.observed.ip()
                        );
                        h.notes.push(note);
                        h.suspended = true;
                    }
                    h.notes.push(format!(
                        "idle: control connection back after {:.1} s; resuming session",
                        now.as_secs_f64()
                    ));
                    conn = Some(c);
                    backoff = Duration::from_millis(250);
                }
                Err(ProtoError::Refused(r)) => {
                    lock(&ctx.health).notes.push(format!(
                        "idle: server refused to resume the session: {}",
                        r.message
                    ));
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
                Err(_) => backoff = (backoff * 2).min(Duration::from_secs(10)),
            }
            continue;
        };
        let sent_at = ctx.start.elapsed();
        let result = tokio::select! {
            _ = tokio::time::sleep(hb) => {
                seq += 1;
                let t0 = Instant::now();
                let r = exchange(c, &ControlRequest::Heartbeat { seq }, deadline).await;
                if r.is_ok() {
                    let mut h = lock(&ctx.health);
                    h.confirmed = sent_at.max(h.confirmed);
                    h.rtt = t0.elapsed();
                    // Monotonic time stops during suspend; the wall clock does not.
                    let wall = SystemTime::now().duration_since(last_wall).unwrap_or_default();
                    let mono = last_mono.elapsed();
                    if wall > mono + Duration::from_secs(2).max(hb) {
                        h.notes.push(format!("idle: the system was suspended for about {:.0} s: results after this are not trustworthy", (wall - mono).as_secs_f64()));
                        h.suspended = true;
                        let now = ctx.start.elapsed();
                        h.outages.push((now.saturating_sub(hb * 2), Some(now), "system suspended".into()));
                    }
                }
                last_wall = SystemTime::now();
                last_mono = Instant::now();
                r.map(|_| ())
            }
            req = rx.recv() => match req {
                Some((req, reply)) => {
                    let finish = req == ControlRequest::Finish;
                    let r = exchange(c, &req, deadline.max(Duration::from_secs(5))).await;
                    match r {
                        Ok(rep) => { let _ = reply.send(Ok(rep)); if finish { return; } Ok(()) }
                        Err(e) => { let _ = reply.send(Err(e.to_string())); Err(e) }
                    }
                }
                None => return,
            },
        };
        if let Err(e) = result {
            let mut h = lock(&ctx.health);
            let start = h.confirmed;
            h.outages.push((start, None, e.to_string()));
            h.notes.push(format!("idle: lost the control connection at {:.1} s ({e}); tests until it is back are discarded", ctx.start.elapsed().as_secs_f64()));
            conn = None;
        }
    }
}

/// Send one request through the control task. Fire requests naming more tags than the server
/// takes at once ([`MAX_TAGS_PER_REQUEST`], so that its reply fits a frame) go in batches and
/// their replies are merged.
async fn request(tx: &mpsc::Sender<Request>, req: ControlRequest) -> Result<ControlReply, String> {
    match req {
        ControlRequest::Fire { tags, nonce } if tags.len() > MAX_TAGS_PER_REQUEST => {
            fire_in_batches(tx, &tags, |tags| ControlRequest::Fire { tags, nonce }).await
        }
        ControlRequest::FireUdp { tags, nonce } if tags.len() > MAX_TAGS_PER_REQUEST => {
            fire_in_batches(tx, &tags, |tags| ControlRequest::FireUdp { tags, nonce }).await
        }
        req => request_one(tx, req).await,
    }
}

/// Every batch is tried; tags of a batch that failed are missing from the merged reply (the
/// caller counts them as not sent). Fails only when no batch got through.
async fn fire_in_batches(
    tx: &mpsc::Sender<Request>,
    tags: &[u32],
    make: impl Fn(Vec<u32>) -> ControlRequest,
) -> Result<ControlReply, String> {
    let mut fired = Vec::with_capacity(tags.len());
    let mut first_error = None;
    let mut any = false;
    for batch in tags.chunks(MAX_TAGS_PER_REQUEST) {
        match request_one(tx, make(batch.to_vec())).await {
            Ok(ControlReply::Fired { fired: part }) => {
                any = true;
                fired.extend(part);
            }
            Ok(ControlReply::Error { message }) => {
                first_error.get_or_insert(message);
            }
            Ok(other) => {
                first_error.get_or_insert(format!("unexpected reply to a fire request: {other:?}"));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if !any => Err(e),
        _ => Ok(ControlReply::Fired { fired }),
    }
}

async fn request_one(
    tx: &mpsc::Sender<Request>,
    req: ControlRequest,
) -> Result<ControlReply, String> {
    let (rtx, rrx) = oneshot::channel();
    tx.send((req, rtx))
        .await
        .map_err(|_| "control task ended".to_string())?;
    rrx.await.map_err(|_| "control task ended".to_string())?
}

// ---------------------------------------------------------------------------------------------
// Probe connections

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    ServerInitiated,
    ClientInitiated,
    Keepalive,
    /// Server-initiated probes whose hops `1..=split` are kept warm by client keepalives with
    /// TTL `split`: they measure the hops after the split.
    NearWarm,
    /// Server-initiated probes whose hops after the split are kept warm by server keepalives
    /// with TTL `routers − split`: they measure hops `1..=split`.
    FarWarm,
}

impl Mode {
    fn server_fired(self) -> bool {
        matches!(self, Mode::ServerInitiated | Mode::NearWarm | Mode::FarWarm)
    }
    fn warm(self) -> bool {
        matches!(self, Mode::NearWarm | Mode::FarWarm)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum ClientSawEnd {
    Closed,
    Reset,
    Error,
}

enum ProbeEvent {
    Opened {
        writer: OwnedWriteHalf,
        observed: SocketAddr,
    },
    OpenFailed(String),
    Message(ProbeMessage),
    Ended(ClientSawEnd),
}

struct Event {
    group: usize,
    slot: usize,
    at: Duration,
    event: ProbeEvent,
}

fn tag_of(group: usize, slot: usize) -> u32 {
    (group as u32) << 16 | slot as u32
}

async fn open_probe(
    cfg: IdleConfig,
    session: SessionId,
    group: usize,
    slot: usize,
    keepalive: Option<Duration>,
    start: Instant,
    tx: mpsc::UnboundedSender<Event>,
) {
    let send = |event| {
        let _ = tx.send(Event {
            group,
            slot,
            at: start.elapsed(),
            event,
        });
    };
    let channel = Channel::Data {
        session,
        tag: tag_of(group, slot),
    };
    let (conn, welcome) = match connect(
        cfg.server,
        cfg.token.clone(),
        channel,
        Duration::from_secs(10),
    )
    .await
    {
        Ok(x) => x,
        Err(e) => return send(ProbeEvent::OpenFailed(e.to_string())),
    };
    let stream = conn.into_inner();
    if let Some(interval) = keepalive {
        let ka = socket2::TcpKeepalive::new()
            .with_time(interval)
            .with_interval(interval)
            .with_retries(3);
        if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&ka) {
            return send(ProbeEvent::OpenFailed(format!("SO_KEEPALIVE: {e}")));
        }
    }
    let (mut rd, writer) = stream.into_split();
    send(ProbeEvent::Opened {
        writer,
        observed: welcome.observed,
    });
    loop {
        match pathdoc_proto::read_frame::<_, ProbeMessage>(&mut rd).await {
            Ok(m) => send(ProbeEvent::Message(m)),
            Err(e) => {
                let end = match &e {
                    ProtoError::Closed => ClientSawEnd::Closed,
                    ProtoError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionReset => {
                        ClientSawEnd::Reset
                    }
                    _ => ClientSawEnd::Error,
                };
                return send(ProbeEvent::Ended(end));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Test bookkeeping

#[derive(Debug, Clone, Serialize)]
pub struct TestRow {
    pub mode: Mode,
    pub tag: u32,
    pub fired_s: f64,
    /// Idle time of the connection when tested, as the server measured it where available.
    pub idle_s: f64,
    pub outcome: String,
    /// The client's public address and port the server saw when the probe connection opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub death: Option<DeathKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_saw: Option<ServerSawEnd>,
}

struct Pending {
    fired: Duration,
    deadline: Duration,
    nonce: u64,
    idle: Duration,
}

struct ProbeState {
    writer: Option<OwnedWriteHalf>,
    observed: Option<SocketAddr>,
    arrived: Option<(u64, Duration)>,
    ended: Option<(ClientSawEnd, Duration)>,
    pending: Option<Pending>,
    opening: bool,
    /// Keep-warm settings must be (re)applied: after opening and after surviving a test.
    needs_warm: bool,
    /// The socket's TTL before keep-warm lowered it.
    default_ttl: Option<u32>,
}

struct Group {
    mode: Mode,
    ladder: Ladder,
    probes: Vec<ProbeState>,
    rows: Vec<TestRow>,
    lost_to_outage: u32,
    /// Culprit groups: the hop after which the path is split, and the keepalive TTL.
    split: usize,
    warm_ttl: u8,
}

impl Group {
    fn warm(mode: Mode, plan: LadderPlan, split: usize, warm_ttl: u8) -> Self {
        Group {
            split,
            warm_ttl,
            ..Group::new(mode, plan)
        }
    }

    fn new(mode: Mode, plan: LadderPlan) -> Self {
        let ladder = Ladder::new(plan);
        let probes = (0..ladder.slots.len())
            .map(|_| ProbeState {
                writer: None,
                observed: None,
                arrived: None,
                ended: None,
                pending: None,
                opening: false,
                needs_warm: false,
                default_ttl: None,
            })
            .collect();
        Group {
            mode,
            ladder,
            probes,
            rows: Vec::new(),
            lost_to_outage: 0,
            split: 0,
            warm_ttl: 0,
        }
    }
}

/// Lower the TTL of a probe connection's socket and start keepalives that never give up
/// (TCP_USER_TIMEOUT `hold` makes the kernel ignore TCP_KEEPCNT), so only hops `1..=ttl`
/// see them. Returns the TTL to restore.
fn warm_near(
    writer: &OwnedWriteHalf,
    ttl: u8,
    interval: Duration,
    hold: Duration,
) -> std::io::Result<u32> {
    let sock = socket2::SockRef::from(writer.as_ref());
    let default_ttl = sock.ttl()?;
    let ka = socket2::TcpKeepalive::new()
        .with_time(interval)
        .with_interval(interval);
    sock.set_tcp_user_timeout(Some(hold))?;
    sock.set_ttl(u32::from(ttl))?;
    sock.set_tcp_keepalive(&ka)?;
    Ok(default_ttl)
}

/// Undo [`warm_near`] before the server's probe: no more keepalives (one sent at full TTL
/// would refresh the whole path), and the client's ACKs reach the server again.
fn cool_near(writer: &OwnedWriteHalf, default_ttl: u32) {
    let sock = socket2::SockRef::from(writer.as_ref());
    let _ = sock.set_keepalive(false);
    let _ = sock.set_ttl(default_ttl);
}

fn overlaps_outage(
    outages: &[(Duration, Option<Duration>, String)],
    from: Duration,
    to: Duration,
    now: Duration,
) -> bool {
    outages
        .iter()
        .any(|(s, e, _)| *s <= to && e.unwrap_or(now) >= from)
}

/// Run the idle check.
/// `cancel` is the user's Ctrl-C/SIGTERM: once it fires the check stops probing, releases its
/// server session, and returns what it measured so far (marked interrupted) rather than an error.
pub async fn run(
    cfg: &IdleConfig,
    progress: &dyn Progress,
    _cancel: &CancellationToken,
) -> Result<IdleResult, IdleError> {
    cfg.validate()?;
    let start = Instant::now();
    let hb = cfg.heartbeat();
    let channel = Channel::Control {
        check: CheckKind::Idle,
        resume: None,
    };
    let (mut conn, welcome) = connect(
        cfg.server,
        cfg.token.clone(),
        channel,
        Duration::from_secs(10),
    )
    .await
    .map_err(|e| IdleError::Connect(cfg.server, e))?;
    // Round-trip time from a few heartbeats sets the grace a probe gets to arrive.
    let mut rtt = Duration::ZERO;
    for seq in 0..3 {
        let t0 = Instant::now();
        exchange(
            &mut conn,
            &ControlRequest::Heartbeat { seq },
            Duration::from_secs(5),
        )
        .await
        .map_err(|e| IdleError::Connect(cfg.server, e))?;
        rtt = rtt.max(t0.elapsed());
    }
    let grace = cfg.grace.unwrap_or_else(|| {
        (rtt * 4 + Duration::from_millis(500))
            .clamp(Duration::from_millis(500), Duration::from_secs(10))
    });
    let session = welcome.session;
    let health = Arc::new(Mutex::new(Health {
        outages: Vec::new(),
        confirmed: start.elapsed(),
        rtt,
        notes: Vec::new(),
        suspended: false,
        public_addr: welcome.observed,
    }));
    let (ctl_tx, ctl_rx) = mpsc::channel::<Request>(16);
    let ctl = tokio::spawn(control_task(
        ControlCtx {
            cfg: cfg.clone(),
            session,
            start,
            health: health.clone(),
        },
        Some(conn),
        ctl_rx,
    ));

    // Culprit search: how many routers, which splits to test.
    let mut path: Option<PathHops> = None;
    let mut path_note = None;
    if cfg.culprit {
        let wait = (rtt * 4 + Duration::from_millis(300))
            .clamp(Duration::from_millis(500), Duration::from_secs(3));
        match hops::discover(cfg.server, welcome.session, wait).await {
            Ok(Some(p)) => path = Some(p),
            Ok(None) => {
                path_note = Some(
                    "hop discovery got no answer from the server's UDP port (blocked?)".to_string(),
                )
            }
            Err(e) => path_note = Some(format!("hop discovery failed: {e}")),
        }
    }
    if let Some(note) = &path_note {
        progress.note(&format!("idle: {note}; skipping the culprit-hop search"));
    }
    let splits = path
        .as_ref()
        .map(|p| culprit::splits_for(p.routers, cfg.culprit_splits))
        .unwrap_or_default();

    // Ladders share the connection budget; keepalive probes take two; culprit groups get
    // 40 % of it at a coarser resolution if needed.
    let mut modes = vec![Mode::ServerInitiated];
    if cfg.client_initiated {
        modes.push(Mode::ClientInitiated);
    }
    let keepalive_count = if cfg.keepalive { 2 } else { 0 };
    let total = cfg.max_probes.saturating_sub(keepalive_count);
    let culprit_groups = splits.len() * 2;
    let (main_total, culprit_total) = if culprit_groups > 0 {
        (total * 3 / 5, total - total * 3 / 5)
    } else {
        (total, 0)
    };
    let budget = main_total.max(modes.len() * 4) / modes.len();
    let mut groups: Vec<Group> = modes
        .iter()
        .map(|&m| {
            Group::new(
                m,
                plan_ladder(cfg.horizon, cfg.resolution, budget, Some(RFC5382_FLOOR)),
            )
        })
        .collect();
    let warm_interval = Duration::from_secs(cfg.resolution.as_secs().clamp(1, 60));
    let warm_hold = cfg.horizon * 2 + Duration::from_secs(120);
    if let (Some(p), true) = (&path, culprit_groups > 0) {
        let b = (culprit_total / culprit_groups).max(6);
        // Fewest connections a ladder needs is about 2·√(H/r): coarsen r until it fits.
        let min_r = cfg.horizon.as_secs_f64() * 4.0 / (b * b) as f64;
        let steps = (min_r / cfg.resolution.as_secs_f64()).ceil().max(1.0) as u32;
        let r = cfg.resolution * steps;
        for &h in &splits {
            let plan = plan_ladder(cfg.horizon, r, b, Some(RFC5382_FLOOR));
            groups.push(Group::warm(Mode::NearWarm, plan.clone(), h, h as u8));
            groups.push(Group::warm(Mode::FarWarm, plan, h, (p.routers - h) as u8));
        }
    }
    if let Some(p) = &path {
        let addrs: Vec<String> = p
            .addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}:{}", i + 1, a.map_or("*".to_string(), |a| a.to_string())))
            .collect();
        progress.note(&format!(
            "idle: {} router(s) to the server ({}); culprit search splits the path after hop(s) {:?}, keepalives every {}",
            p.routers,
            addrs.join(" "),
            splits,
            pathdoc_core::units::format_duration(warm_interval),
        ));
    }
    let plan = groups[0].ladder.plan.clone();
    progress.note(&format!(
        "idle: testing idle times up to {} at {} resolution with {} connections per probe mode (coarse every {}), grace {}",
        pathdoc_core::units::format_duration(plan.horizon),
        pathdoc_core::units::format_duration(plan.resolution),
        plan.connections(),
        pathdoc_core::units::format_duration(plan.coarse_spacing),
        pathdoc_core::units::format_duration(grace),
    ));
    // Keepalive-only probes: a degenerate group whose slots are never scheduled by a ladder.
    let keepalive_interval =
        (cfg.resolution).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut ka = Group::new(
        Mode::Keepalive,
        LadderPlan {
            coarse_targets: vec![cfg.horizon; keepalive_count],
            fine_offsets: vec![],
            ..plan.clone()
        },
    );
    let ka_index = groups.len();

    // UDP bindings run beside the TCP probes on their own ladder: up to a little past the
    // 5-min recommendation of RFC 4787 REQ-5 (or the horizon, if shorter).
    let hard_end = cfg.horizon + grace * 4 + hb * 6 + Duration::from_secs(10);
    let udp_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let udp_task = cfg.udp.then(|| {
        let udp_plan = plan_ladder(
            cfg.horizon
                .min(RFC4787_RECOMMENDED + Duration::from_secs(10)),
            cfg.resolution,
            60,
            Some(RFC4787_FLOOR),
        );
        let tx = ctl_tx.clone();
        let requester: udp_client::Requester = Arc::new(move |req| {
            let tx = tx.clone();
            Box::pin(async move { request(&tx, req).await })
        });
        let h = health.clone();
        let view: udp_client::HealthView = Arc::new(move || {
            let h = lock(&h);
            let outages = h
                .outages
                .iter()
                .map(|(s, e, _)| (*s, e.unwrap_or(Duration::MAX)))
                .collect();
            (h.confirmed, outages)
        });
        tokio::spawn(udp_client::run_udp(
            cfg.server,
            session,
            udp_plan,
            grace,
            hb,
            warm_interval,
            start,
            hard_end,
            requester,
            view,
            udp_stop.clone(),
        ))
    });
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    let tick = (cfg.resolution / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut nonce: u64 = rand::random();
    let mut finished_at = None;
    let mut last_status = Duration::ZERO;
    loop {
        let now = start.elapsed();
        for note in std::mem::take(&mut lock(&health).notes) {
            progress.note(&note);
        }
        // Events from probe connections.
        while let Ok(ev) = ev_rx.try_recv() {
            let g = if ev.group == ka_index {
                &mut ka
            } else {
                &mut groups[ev.group]
            };
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
        // Suspend or address change: nothing untested can be trusted any more.
        if lock(&health).suspended {
            for g in groups.iter_mut().chain(std::iter::once(&mut ka)) {
                for i in 0..g.ladder.slots.len() {
                    if matches!(g.ladder.slots[i].state, SlotState::Idle) {
                        g.ladder.lost_slot(i);
                    }
                }
            }
        }
        // Keep culprit groups warm: client-side TTL-limited keepalives now, server-side ones
        // with one request per TTL.
        let mut far: HashMap<u8, Vec<(usize, usize)>> = HashMap::new();
        for (gi, g) in groups.iter_mut().enumerate() {
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
                    Some(w) => warm_near(w, g.warm_ttl, warm_interval, warm_hold),
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
                interval_ms: to_ms(warm_interval),
            };
            if !matches!(request(&ctl_tx, req).await, Ok(ControlReply::Ok)) {
                for (gi, i) in list {
                    groups[gi].ladder.lost_slot(i);
                }
            }
        }
        // Open probes whose time has come.
        for (gi, g) in groups
            .iter_mut()
            .enumerate()
            .chain(std::iter::once((ka_index, &mut ka)))
        {
            for i in 0..g.probes.len() {
                if g.ladder.slots[i].state == SlotState::Pending
                    && !g.probes[i].opening
                    && g.ladder.open_at(i) <= now
                {
                    g.probes[i].opening = true;
                    let keep = (g.mode == Mode::Keepalive).then_some(keepalive_interval);
                    tokio::spawn(open_probe(
                        cfg.clone(),
                        session,
                        gi,
                        i,
                        keep,
                        start,
                        ev_tx.clone(),
                    ));
                }
            }
        }
        // Judge tests whose window has passed and been confirmed by a later heartbeat.
        let (confirmed, outages) = {
            let h = lock(&health);
            (h.confirmed, h.outages.clone())
        };
        for (gi, g) in groups
            .iter_mut()
            .enumerate()
            .chain(std::iter::once((ka_index, &mut ka)))
        {
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
        // Fire due tests.
        let all_done = groups.iter().all(|g| g.ladder.finished(now));
        let mut fire_tags = Vec::new();
        for (gi, g) in groups.iter_mut().enumerate() {
            for i in g.ladder.due(now) {
                match g.mode {
                    m if m.server_fired() => {
                        if m == Mode::NearWarm {
                            if let Some(w) = g.probes[i].writer.as_ref() {
                                cool_near(w, g.probes[i].default_ttl.unwrap_or(64));
                            }
                        }
                        fire_tags.push((gi, i))
                    }
                    _ => {
                        nonce += 1;
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
        // Keepalive probes are tested once the ladders are done.
        if all_done && finished_at.is_none() {
            finished_at = Some(now);
            for i in 0..ka.probes.len() {
                if ka.ladder.slots[i].state == SlotState::Idle {
                    ka.ladder.slots[i].state = SlotState::Testing;
                    fire_tags.push((ka_index, i));
                }
            }
        }
        if !fire_tags.is_empty() {
            nonce += 1;
            let tags: Vec<u32> = fire_tags.iter().map(|&(g, i)| tag_of(g, i)).collect();
            let reply = request(&ctl_tx, ControlRequest::Fire { tags, nonce }).await;
            let now = start.elapsed();
            let fired: HashMap<u32, crate::proto::Fired> = match reply {
                Ok(ControlReply::Fired { fired }) => {
                    fired.into_iter().map(|f| (f.tag, f)).collect()
                }
                _ => HashMap::new(),
            };
            for (gi, i) in fire_tags {
                let g = if gi == ka_index {
                    &mut ka
                } else {
                    &mut groups[gi]
                };
                match fired.get(&tag_of(gi, i)) {
                    Some(f) if f.sent => {
                        let idle = f.idle_ms.map(ms).unwrap_or_default();
                        g.probes[i].pending = Some(Pending {
                            fired: now,
                            deadline: now + grace,
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
        let ka_busy = ka.probes.iter().any(|p| p.pending.is_some());
        if (finished_at.is_some() && !ka_busy) || now > hard_end {
            break;
        }
        if now >= last_status + Duration::from_secs(1) {
            last_status = now;
            progress.status(&status_line(&groups, now, cfg.horizon));
        }
        tokio::time::sleep(tick).await;
    }
    let elapsed = start.elapsed();

    udp_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let udp = match udp_task {
        Some(t) => t.await.ok(),
        None => None,
    };
    // The server's view: how connections ended on its side.
    let mut records: HashMap<u32, ServerProbeRecord> = HashMap::new();
    let mut after = None;
    for _ in 0..64 {
        match request(&ctl_tx, ControlRequest::Results { after }).await {
            Ok(ControlReply::Results {
                records: page,
                more,
            }) => {
                after = page.last().map(|r| r.tag);
                records.extend(page.into_iter().map(|r| (r.tag, r)));
                if !more {
                    break;
                }
            }
            _ => break,
        }
    }
    let _ = request(&ctl_tx, ControlRequest::Finish).await;
    drop(ctl_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), ctl).await;

    // Refine how probes died with the server's view.
    for g in groups.iter_mut().chain(std::iter::once(&mut ka)) {
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
    let h = lock(&health);
    let outage_time: Duration = h
        .outages
        .iter()
        .map(|(s, e, _)| e.unwrap_or(elapsed).saturating_sub(*s))
        .sum();
    let run = RunSummary {
        elapsed,
        horizon: cfg.horizon,
        outages: h.outages.len() as u32,
        outage_time,
        public_addr: h.public_addr.to_string(),
    };
    let outcome = |g: &Group| {
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
    };
    let server_outcome = outcome(&groups[0]);
    let client_outcome = groups
        .iter()
        .find(|g| g.mode == Mode::ClientInitiated)
        .map(outcome);
    let keepalive = (keepalive_count > 0 && !ka.rows.is_empty()).then(|| {
        let alive = ka.rows.iter().filter(|r| r.outcome == "alive").count() as u32;
        let dead = ka.rows.iter().filter(|r| r.outcome == "dead").count() as u32;
        let idle = ka
            .rows
            .iter()
            .map(|r| Duration::from_secs_f64(r.idle_s))
            .max()
            .unwrap_or_default();
        KeepaliveOutcome {
            interval: keepalive_interval,
            idle_data: idle,
            alive,
            dead,
        }
    });
    let mut findings =
        verdict::tcp_findings(&server_outcome, client_outcome.as_ref(), keepalive, &run);
    let split_outcomes: Vec<Split> = splits
        .iter()
        .map(|&h| {
            let find = |m: Mode| {
                groups
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
        .collect();
    let analysis = path
        .as_ref()
        .map(|p| culprit::infer(&server_outcome, &split_outcomes, p.routers));
    if let Some(u) = &udp {
        findings.extend(verdict::udp_findings(&u.outcome, u.inbound_refresh));
    }
    if server_outcome.upper.is_some() && cfg.culprit {
        findings.push(verdict::culprit_finding(
            &server_outcome,
            analysis.as_ref(),
            path.as_ref(),
            path_note.as_deref(),
        ));
    }
    let early_stop = finished_at.is_some_and(|t| t + cfg.resolution < cfg.horizon);
    let data = serde_json::json!({
        "session": session.to_string(),
        "public_addr": h.public_addr.to_string(),
        "rtt_s": h.rtt.as_secs_f64(),
        "grace_s": grace.as_secs_f64(),
        "heartbeat_s": hb.as_secs_f64(),
        "elapsed_s": elapsed.as_secs_f64(),
        "early_stop": early_stop,
        "plan": plan,
        "outages": h.outages.iter().map(|(s, e, c)| Outage { start_s: s.as_secs_f64(), end_s: e.map(|e| e.as_secs_f64()), cause: c.clone() }).collect::<Vec<_>>(),
        "udp": udp,
        "path": path,
        "culprit": analysis,
        "splits": split_outcomes,
        "ladders": groups.iter().map(|g| serde_json::json!({
            "mode": g.mode,
            "split": (g.split > 0).then_some(g.split),
            "warm_ttl": (g.split > 0).then_some(g.warm_ttl),
            "outcome": outcome(g),
            "connections": g.ladder.slots.len(),
        })).collect::<Vec<_>>(),
        "keepalive": keepalive,
        "tests": groups.iter().chain(std::iter::once(&ka)).flat_map(|g| g.rows.iter().cloned()).collect::<Vec<_>>(),
    });
    Ok(IdleResult { findings, data })
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

/// Milliseconds helper re-exported for callers building configs from flags.
pub fn millis(d: Duration) -> u64 {
    to_ms(d)
}

#[cfg(test)]
mod fire_batch_tests {
    use super::*;

    /// A stand-in control task that answers fire requests like the server, refusing any request
    /// over the server's limit.
    fn answering_control() -> (mpsc::Sender<Request>, tokio::task::JoinHandle<Vec<usize>>) {
        let (tx, mut rx) = mpsc::channel::<Request>(4);
        let seen = tokio::spawn(async move {
            let mut sizes = Vec::new();
            while let Some((req, reply)) = rx.recv().await {
                let r = match req {
                    ControlRequest::Fire { tags, .. } | ControlRequest::FireUdp { tags, .. } => {
                        sizes.push(tags.len());
                        if tags.len() > MAX_TAGS_PER_REQUEST {
                            ControlReply::Error {
                                message: "too many".into(),
                            }
                        } else {
                            ControlReply::Fired {
                                fired: tags
                                    .into_iter()
                                    .map(|tag| crate::proto::Fired {
                                        tag,
                                        idle_ms: Some(1),
                                        sent: true,
                                        error: None,
                                    })
                                    .collect(),
                            }
                        }
                    }
                    _ => ControlReply::Ok,
                };
                let _ = reply.send(Ok(r));
            }
            sizes
        });
        (tx, seen)
    }

    #[tokio::test]
    async fn two_thousand_tags_go_in_batches_and_all_come_back() {
        let (tx, seen) = answering_control();
        let tags: Vec<u32> = (0..2000).collect();
        let reply = request(&tx, ControlRequest::Fire { tags, nonce: 3 }).await;
        let Ok(ControlReply::Fired { fired }) = reply else {
            panic!("unexpected reply {reply:?}");
        };
        assert_eq!(fired.len(), 2000);
        assert!(fired
            .iter()
            .enumerate()
            .all(|(i, f)| f.tag == i as u32 && f.sent));
        let udp = request(
            &tx,
            ControlRequest::FireUdp {
                tags: (0..501).collect(),
                nonce: 4,
            },
        )
        .await;
        assert!(matches!(udp, Ok(ControlReply::Fired { fired }) if fired.len() == 501));
        drop(tx);
        let sizes = seen.await.unwrap();
        assert_eq!(sizes, vec![500, 500, 500, 500, 500, 1]);
    }
}
