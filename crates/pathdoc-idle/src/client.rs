//! The client side of the idle check: opens the probe connections, keeps a heartbeat on the
//! control connection, fires tests when the schedule says so, judges them, and builds the report.
//!
//! [`run`] reads as its phases: connect and measure the round-trip time, discover the path
//! (culprit search), plan the probe groups, run the TCP probes (with the UDP bindings beside
//! them), collect the server's view, and judge. The probe loop's steps are the methods of
//! [`tcp::TcpRun`]; the control connection lives in [`control`], probe sockets in [`probes`],
//! and turning what was measured into findings and JSON in [`results`].
//!
//! Outages: the control connection carries a heartbeat. When it stops (Wi-Fi drop, sleep,
//! address change) the client notes an outage starting at the last confirmed heartbeat, resumes
//! the session with backoff, and discards every test whose window overlaps the outage, so an
//! outage is never read as a NAT timeout. A test is only judged once a heartbeat sent after its
//! window was answered. Suspend is detected by comparing wall-clock and monotonic time.

mod control;
mod probes;
mod results;
mod tcp;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use pathdoc_core::{Finding, Progress};
use pathdoc_proto::{connect, Channel, CheckKind, FramedConn, ProtoError, SessionId};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::culprit;
use crate::duration::to_ms;
use crate::hops::{self, PathHops};
use crate::proto::{ControlReply, ControlRequest, ServerProbeRecord};
use crate::schedule::{plan_ladder, LadderPlan, RFC4787_FLOOR, RFC4787_RECOMMENDED, RFC5382_FLOOR};
use crate::udp_client;

pub use control::Outage;
use control::{exchange, lock, request, ControlCtx, Health, Request};
use probes::Group;
pub use probes::{Mode, TestRow};

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
    /// Most path splits the culprit search tests, after hops 1..=N (two probe groups each): it
    /// names the box among the first N + 1 routers, later ones as "beyond hop N".
    pub culprit_splits: usize,
    /// Test UDP bindings too (RFC 4787 REQ-5/REQ-6).
    pub udp: bool,
}

/// An idle run's settings before its server is known: validated up front (usage errors before
/// any network work), and made an [`IdleConfig`] only by [`IdleOptions::for_server`], so no
/// run can start against a placeholder address.
#[derive(Debug, Clone)]
pub struct IdleOptions(IdleConfig);

impl Default for IdleOptions {
    fn default() -> Self {
        IdleOptions(IdleConfig::new(SocketAddr::from(([0, 0, 0, 0], 0))))
    }
}

impl IdleOptions {
    /// The settings to change (`server` and `token` are set by [`IdleOptions::for_server`]).
    pub fn settings(&mut self) -> &mut IdleConfig {
        &mut self.0
    }

    pub fn validate(&self) -> Result<(), IdleError> {
        self.0.validate()
    }

    /// The run against `server`.
    pub fn for_server(&self, server: SocketAddr, token: Option<String>) -> IdleConfig {
        IdleConfig {
            server,
            token,
            ..self.0.clone()
        }
    }
}

impl IdleConfig {
    pub fn new(server: SocketAddr) -> Self {
        IdleConfig {
            server,
            token: None,
            horizon: crate::defaults::HORIZON,
            resolution: crate::defaults::RESOLUTION,
            max_probes: crate::defaults::MAX_PROBES as usize,
            client_initiated: true,
            keepalive: true,
            grace: None,
            culprit: true,
            // Home router + ISP CPE + CGN chains with a router or two between them: 5 routers.
            culprit_splits: 4,
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
    /// The run was cut short by the cancellation token: the findings are what was measured
    /// until then (each says so), and `data.idle.interrupted` is true.
    pub interrupted: bool,
}

/// Run the idle check.
/// `cancel` is the user's Ctrl-C/SIGTERM: once it fires the check stops probing, releases its
/// server session, and returns what it measured so far (marked interrupted) rather than an error.
pub async fn run(
    cfg: &IdleConfig,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<IdleResult, IdleError> {
    cfg.validate()?;
    let start = Instant::now();
    // Phase 1: the control connection, the round-trip time and the grace it gives probes.
    progress.status("idle: connecting and measuring the round-trip time");
    let mut link = match ControlLink::open(cfg, start).await {
        // No room for the session: a server-busy WARN, not a failure.
        Err(IdleError::Connect(_, ProtoError::Refused(r))) if r.is_load() => {
            let (reason, limit) = r.load.map(|l| (l.reason, l.limit)).unzip();
            let busy = pathdoc_core::busy::ServerBusy::new(r.message, reason, limit);
            return Ok(IdleResult {
                findings: vec![crate::verdict::server_busy(&busy)],
                data: serde_json::json!({ "server": cfg.server.to_string(), "refused": busy }),
                interrupted: false,
            });
        }
        r => r?,
    };
    // Phase 2: the path's routers and where to split it (culprit search).
    progress.status("idle: counting the routers to the server (culprit search)");
    let path = discover_path(cfg, &link, progress).await;
    // Phase 3: which probe groups run, with how many connections each.
    let plan = plan_groups(cfg, &path);
    announce_plan(&path, &plan, link.grace, progress);
    // Phase 4: UDP bindings beside the TCP probes, then the TCP probe loop itself.
    let hard_end = cfg.horizon + link.grace * 4 + link.heartbeat * 6 + Duration::from_secs(10);
    let udp = UdpSide::start(cfg, &link, hard_end);
    let mut tcp = tcp::TcpRun::new(
        cfg,
        &link,
        plan.groups,
        hard_end,
        udp.end_bound(&link),
        cancel.clone(),
    );
    tcp.run(progress).await;
    let elapsed = start.elapsed();
    let session_ended = lock(&link.health).session_ended.is_some();
    if tcp.interrupted_at.is_some() || session_ended {
        udp.stop();
    }
    let health = link.health.clone();
    let udp = udp
        .finish(
            cancel,
            || lock(&health).session_ended.is_some(),
            |eta| {
                progress.status(&format!(
                    "idle: {}, TCP done, UDP bindings' last tests; done within {}",
                    pathdoc_core::units::format_duration(start.elapsed()),
                    pathdoc_core::units::format_duration(eta)
                ))
            },
            tcp.eta_after_tcp(&link),
        )
        .await;
    // Phase 5: the server's view of how each probe ended, then release the session. Both have
    // deadlines: the ETA counts on them.
    progress.status("idle: collecting the server's records and ending the session");
    let (records, udp_refused) = tokio::time::timeout(
        tcp::TEARDOWN - Duration::from_secs(5),
        fetch_server_records(&link.requests),
    )
    .await
    .unwrap_or_default();
    link.finish().await;
    for note in std::mem::take(&mut lock(&link.health).notes) {
        progress.note(&note);
    }
    tcp.apply_server_view(&records);
    // Phase 6: findings and the JSON probe table.
    let health = lock(&link.health);
    Ok(results::build(results::Inputs {
        cfg,
        session: link.session,
        grace: link.grace,
        heartbeat: link.heartbeat,
        elapsed,
        health: &health,
        path: path.hops.as_ref(),
        path_note: path.note.as_deref(),
        splits: &path.splits,
        plan: &plan.main,
        keepalive_interval: plan.keepalive_interval,
        tcp: &tcp,
        udp,
        udp_refused,
    }))
}

/// The control connection after the handshake: the session, the task that owns the
/// connection (heartbeats, resumption) and the channel every request goes through.
struct ControlLink {
    session: SessionId,
    server: SocketAddr,
    token: Option<String>,
    welcome: pathdoc_proto::Welcome,
    start: Instant,
    grace: Duration,
    heartbeat: Duration,
    health: Arc<Mutex<Health>>,
    requests: mpsc::Sender<Request>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlLink {
    /// Connect, measure the round-trip time with a few heartbeats, and hand the connection to
    /// the control task.
    async fn open(cfg: &IdleConfig, start: Instant) -> Result<Self, IdleError> {
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
        let rtt = measure_rtt(&mut conn)
            .await
            .map_err(|e| IdleError::Connect(cfg.server, e))?;
        let grace = cfg.grace.unwrap_or_else(|| {
            (rtt * 4 + Duration::from_millis(500))
                .clamp(Duration::from_millis(500), Duration::from_secs(10))
        });
        let health = Arc::new(Mutex::new(Health {
            outages: Vec::new(),
            confirmed: start.elapsed(),
            rtt,
            notes: Vec::new(),
            suspended: false,
            public_addr: pathdoc_core::addr::unmapped(welcome.observed),
            v6_no_nat: welcome.observed.is_ipv6()
                && conn
                    .stream()
                    .local_addr()
                    .is_ok_and(|l| l.ip() == welcome.observed.ip()),
            lost_at: None,
            session_ended: None,
        }));
        let (requests, rx) = mpsc::channel::<Request>(16);
        let task = tokio::spawn(control::control_task(
            ControlCtx {
                cfg: cfg.clone(),
                session: welcome.session,
                start,
                health: health.clone(),
            },
            Some(conn),
            rx,
        ));
        Ok(ControlLink {
            session: welcome.session,
            server: cfg.server,
            token: cfg.token.clone(),
            welcome,
            start,
            grace,
            heartbeat: cfg.heartbeat(),
            health,
            requests,
            task,
        })
    }

    fn rtt(&self) -> Duration {
        lock(&self.health).rtt
    }

    /// Tell the server the run is over and let the control task end.
    async fn finish(&mut self) {
        // A session the server ended has nothing to finish; the control task only answers
        // errors then.
        if lock(&self.health).session_ended.is_none() {
            let _ = tokio::time::timeout(
                Duration::from_secs(3),
                request(&self.requests, ControlRequest::Finish),
            )
            .await;
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.task).await;
            // Frees the session (and this client's session slot) on the server at once.
            let _ =
                pathdoc_proto::end_session(self.server, self.token.clone(), &self.welcome).await;
        }
        self.task.abort();
    }
}

/// Round-trip time from a few heartbeats (the slowest of three).
async fn measure_rtt(conn: &mut FramedConn) -> Result<Duration, ProtoError> {
    let mut rtt = Duration::ZERO;
    for seq in 0..3 {
        let t0 = Instant::now();
        exchange(
            conn,
            &ControlRequest::Heartbeat { seq },
            Duration::from_secs(5),
        )
        .await?;
        rtt = rtt.max(t0.elapsed());
    }
    Ok(rtt)
}

/// What hop discovery found, and the splits the culprit search tests.
struct PathView {
    hops: Option<PathHops>,
    /// Why the culprit search cannot run, when it cannot.
    note: Option<String>,
    splits: Vec<usize>,
}

async fn discover_path(cfg: &IdleConfig, link: &ControlLink, progress: &dyn Progress) -> PathView {
    let mut view = PathView {
        hops: None,
        note: None,
        splits: Vec::new(),
    };
    if !cfg.culprit {
        return view;
    }
    let wait = (link.rtt() * 4 + Duration::from_millis(300))
        .clamp(Duration::from_millis(500), Duration::from_secs(3));
    match hops::discover(cfg.server, link.session, wait).await {
        Ok(Some(p)) => view.hops = Some(p),
        Ok(None) => {
            view.note = Some(
                "hop discovery got no answer from the server's UDP port (blocked?)".to_string(),
            )
        }
        Err(e) => view.note = Some(format!("hop discovery failed: {e}")),
    }
    if let Some(note) = &view.note {
        progress.note(&format!("idle: {note}; skipping the culprit-hop search"));
    }
    view.splits = view
        .hops
        .as_ref()
        .map(|p| culprit::splits_for(p.routers, cfg.culprit_splits))
        .unwrap_or_default();
    view
}

/// The probe groups of a run: the ordinary ladders, the culprit groups, and the keepalive
/// probes (always last).
struct GroupPlan {
    groups: Vec<Group>,
    /// The server-initiated ladder's plan (reported in `data.idle.plan`).
    main: LadderPlan,
    warm_interval: Duration,
    keepalive_interval: Duration,
}

/// Split the connection budget: keepalive probes take two; culprit groups get 40 % of the
/// rest at a coarser resolution if needed; the ordinary ladders share what remains.
fn plan_groups(cfg: &IdleConfig, path: &PathView) -> GroupPlan {
    let mut modes = vec![Mode::ServerInitiated];
    if cfg.client_initiated {
        modes.push(Mode::ClientInitiated);
    }
    let keepalive_count = if cfg.keepalive { 2 } else { 0 };
    let total = cfg.max_probes.saturating_sub(keepalive_count);
    let culprit_groups = path.splits.len() * 2;
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
    if let (Some(p), true) = (&path.hops, culprit_groups > 0) {
        let b = (culprit_total / culprit_groups).max(6);
        // Fewest connections a ladder needs is about 2·√(H/r): coarsen r until it fits.
        let min_r = cfg.horizon.as_secs_f64() * 4.0 / (b * b) as f64;
        let steps = (min_r / cfg.resolution.as_secs_f64()).ceil().max(1.0) as u32;
        let r = cfg.resolution * steps;
        for &h in &path.splits {
            let plan = plan_ladder(cfg.horizon, r, b, Some(RFC5382_FLOOR));
            groups.push(Group::warm(Mode::NearWarm, plan.clone(), h, h as u8));
            groups.push(Group::warm(Mode::FarWarm, plan, h, (p.routers - h) as u8));
        }
    }
    let main = groups[0].ladder.plan.clone();
    // Keepalive-only probes: a degenerate group whose slots are never scheduled by a ladder.
    let keepalive_interval = cfg
        .resolution
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    groups.push(Group::new(
        Mode::Keepalive,
        LadderPlan {
            coarse_targets: vec![cfg.horizon; keepalive_count],
            fine_offsets: vec![],
            ..main.clone()
        },
    ));
    GroupPlan {
        groups,
        main,
        warm_interval: Duration::from_secs(cfg.resolution.as_secs().clamp(1, 60)),
        keepalive_interval,
    }
}

fn announce_plan(path: &PathView, plan: &GroupPlan, grace: Duration, progress: &dyn Progress) {
    let fmt = pathdoc_core::units::format_duration;
    if let Some(p) = &path.hops {
        let addrs: Vec<String> = p
            .addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}:{}", i + 1, a.map_or("*".to_string(), |a| a.to_string())))
            .collect();
        progress.note(&format!(
            "idle: {}; {}, keepalives every {}",
            routers_text(p.routers, &addrs),
            splits_text(&path.splits),
            fmt(plan.warm_interval),
        ));
    }
    let main = &plan.main;
    progress.note(&format!(
        "idle: testing idle times up to {} at {} resolution with {} connections per probe mode (coarse every {}), grace {}",
        fmt(main.horizon),
        fmt(main.resolution),
        main.connections(),
        fmt(main.coarse_spacing),
        fmt(grace),
    ));
}

/// "2 routers to the server (1:192.168.1.1 2:*)", or "no router to the server" (same link).
fn routers_text(routers: usize, addrs: &[String]) -> String {
    match routers {
        0 => "no router to the server (same link)".to_string(),
        1 => format!("1 router to the server ({})", addrs.join(" ")),
        n => format!("{n} routers to the server ({})", addrs.join(" ")),
    }
}

/// Where the culprit search splits the path, in words rather than a debug list.
fn splits_text(splits: &[usize]) -> String {
    match splits {
        // With one router or none there is no box to tell apart from another.
        [] => "no culprit search (needs two routers or more)".to_string(),
        [one] => format!("culprit search splits the path after hop {one}"),
        many => {
            let list: Vec<String> = many.iter().map(|h| h.to_string()).collect();
            format!(
                "culprit search splits the path after hops {}",
                list.join(", ")
            )
        }
    }
}

/// The UDP half, running on its own task beside the TCP probes.
struct UdpSide {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: Option<tokio::task::JoinHandle<udp_client::UdpReport>>,
    plan: Option<LadderPlan>,
}

impl UdpSide {
    /// UDP bindings run on their own ladders up to a little past the 5-min recommendation of
    /// RFC 4787 REQ-5 (or the horizon, if shorter); they finish even when the TCP part ended
    /// first (at most 5 min 10 s into the run), and stop at the hard end.
    fn start(cfg: &IdleConfig, link: &ControlLink, hard_end: Duration) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let plan = cfg.udp.then(|| {
            plan_ladder(
                cfg.horizon
                    .min(RFC4787_RECOMMENDED + Duration::from_secs(10)),
                cfg.resolution,
                udp_client::BINDINGS_PER_CLASS,
                Some(RFC4787_FLOOR),
            )
        });
        let task = plan.clone().map(|plan| {
            let tx = link.requests.clone();
            let request: udp_client::Requester = Arc::new(move |req| {
                let tx = tx.clone();
                Box::pin(async move { request(&tx, req).await })
            });
            let h = link.health.clone();
            let health: udp_client::HealthView = Arc::new(move || {
                let h = lock(&h);
                let outages = h
                    .outages
                    .iter()
                    .map(|(s, e, _)| (*s, e.unwrap_or(Duration::MAX)))
                    .collect();
                (h.confirmed, outages)
            });
            tokio::spawn(udp_client::run_udp(udp_client::UdpSetup {
                server: cfg.server,
                session: link.session,
                plan,
                grace: link.grace,
                heartbeat: link.heartbeat,
                refresh_interval: Duration::from_secs(cfg.resolution.as_secs().clamp(1, 60)),
                start: link.start,
                hard_end,
                request,
                health,
                stop: stop.clone(),
            }))
        });
        UdpSide { stop, task, plan }
    }

    /// The latest time the UDP part can still be running: its last coarse test on a stream
    /// binding (opened after its warm-up exchanges, each up to four graces), the refresh
    /// bindings' test after the longest timeout, each judged within a grace and 8 heartbeats.
    fn end_bound(&self, link: &ControlLink) -> Duration {
        let Some(plan) = &self.plan else {
            return Duration::ZERO;
        };
        let judge = link.grace + link.heartbeat * 8 + Duration::from_secs(2);
        let warm_up = (udp_client::STREAM_GAP + link.grace * 4) * 3;
        let last_open = plan.fine_offsets.last().copied().unwrap_or_default();
        last_open + warm_up + plan.horizon + judge + plan.resolution + judge
    }

    /// Stop the UDP ladders now (interrupted, session ended).
    fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Wait for the UDP ladders to finish and collect their report (at once when cancelled
    /// or when `ended` says the server ended the session), telling `status` the time left
    /// (from `end`) every second.
    async fn finish(
        self,
        cancel: &CancellationToken,
        ended: impl Fn() -> bool,
        status: impl Fn(Duration),
        end: impl Fn() -> Duration,
    ) -> Option<udp_client::UdpReport> {
        let mut task = self.task?;
        while !ended() {
            tokio::select! {
                r = &mut task => return r.ok(),
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => status(end()),
            }
        }
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        match tokio::time::timeout(Duration::from_secs(8), &mut task).await {
            Ok(r) => r.ok(),
            Err(_) => {
                task.abort();
                None
            }
        }
    }
}

/// The server's record of every probe (how it saw each connection end), a page at a time,
/// and the UDP bindings it refused for want of room.
async fn fetch_server_records(
    requests: &mpsc::Sender<Request>,
) -> (
    std::collections::HashMap<u32, ServerProbeRecord>,
    Option<crate::proto::RefusedBindings>,
) {
    let mut records = std::collections::HashMap::new();
    let mut refused = None;
    let mut after = None;
    for _ in 0..64 {
        match request(requests, ControlRequest::Results { after }).await {
            Ok(ControlReply::Results {
                records: page,
                more,
                udp_refused,
            }) => {
                after = page.last().map(|r| r.tag);
                records.extend(page.into_iter().map(|r| (r.tag, r)));
                refused = udp_refused.or(refused);
                if !more {
                    break;
                }
            }
            _ => break,
        }
    }
    (records, refused)
}

/// Milliseconds helper re-exported for callers building configs from flags.
pub fn millis(d: Duration) -> u64 {
    to_ms(d)
}

#[cfg(test)]
mod tests {
    use super::{routers_text, splits_text};

    /// The plan note is read by users: words, no Rust debug lists ("hop(s) []", "()").
    #[test]
    fn the_plan_note_reads_as_words() {
        assert_eq!(routers_text(0, &[]), "no router to the server (same link)");
        assert_eq!(
            routers_text(1, &["1:192.168.1.1".into()]),
            "1 router to the server (1:192.168.1.1)"
        );
        assert_eq!(
            splits_text(&[]),
            "no culprit search (needs two routers or more)"
        );
        assert_eq!(
            splits_text(&[1, 2, 3]),
            "culprit search splits the path after hops 1, 2, 3"
        );
        assert!(!splits_text(&[]).contains('['));
    }
}
