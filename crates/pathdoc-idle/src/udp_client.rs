//! The UDP half of the idle check (RFC 4787 REQ-5/REQ-6), on the same schedule engine as TCP.
//!
//! Each binding is a connected UDP socket on its own source port. It sends one OPEN datagram
//! (retried until the server answers), then stays silent. A test asks the server over the
//! control connection (`FireUdp`) to send a PROBE to the binding's public address; it arrived
//! or not. A binding that got its probe answers it (outbound traffic, which REQ-6 says MUST
//! refresh the binding), so it can be reused like a surviving TCP probe.
//!
//! REQ-6: two more bindings receive only inbound `REFRESH` datagrams from the server (never
//! answered) and are tested once the ladder has found the timeout: alive means inbound
//! traffic refreshes bindings.

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

/// Tags of UDP bindings live in their own range (TCP probe tags are `group << 16 | slot`).
const UDP_TAG_BASE: u32 = 0x4000_0000;
/// Tags of the inbound-refresh bindings.
const REFRESH_TAG_BASE: u32 = 0x5000_0000;
/// Bindings that test inbound refresh.
const REFRESH_BINDINGS: usize = 2;

/// What the UDP part found.
#[derive(Debug, Clone, Serialize)]
pub struct UdpReport {
    pub plan: LadderPlan,
    pub outcome: LadderOutcome,
    /// Inbound-refresh bindings (alive, dead) when they could be tested.
    pub inbound_refresh: Option<(u32, u32)>,
    #[serde(rename = "refresh_interval_s", with = "crate::duration::secs")]
    pub refresh_interval: Duration,
    pub tests: Vec<UdpTest>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UdpTest {
    pub tag: u32,
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

enum Ev {
    Opened(usize, Duration),
    OpenFailed(usize),
    Probe(usize, u64, Duration),
}

struct Binding {
    sock: Option<Arc<UdpSocket>>,
    pending: Option<(Duration, Duration, u64, Duration)>, // fired, deadline, nonce, idle
    arrived: Option<(u64, Duration)>,
    opening: bool,
}

#[allow(clippy::too_many_arguments)]
async fn open_binding(
    server: SocketAddr,
    session: SessionId,
    slot: usize,
    tag: u32,
    answer_probes: bool,
    grace: Duration,
    start: Instant,
    tx: mpsc::UnboundedSender<Ev>,
) -> Option<Arc<UdpSocket>> {
    let bind = pathdoc_sys::source::udp_bind_addr(&server);
    let sock = match UdpSocket::bind(bind).await {
        Ok(s) => s,
        Err(_) => {
            let _ = tx.send(Ev::OpenFailed(slot));
            return None;
        }
    };
    if sock.connect(server).await.is_err() {
        let _ = tx.send(Ev::OpenFailed(slot));
        return None;
    }
    let datagram = move |kind: u16, nonce: u64| {
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
    };
    let sock = Arc::new(sock);
    let mut buf = [0u8; 1024];
    let mut opened = false;
    for _ in 0..4 {
        let _ = sock.send(&datagram(udp_kind::OPEN, 0)).await;
        let deadline = Instant::now() + grace;
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            if let Ok((h, _)) = UdpHeader::decode(&buf[..n]) {
                if h.kind == udp_kind::OPEN {
                    opened = true;
                    break;
                }
            }
        }
        if opened {
            break;
        }
    }
    if !opened {
        let _ = tx.send(Ev::OpenFailed(slot));
        return None;
    }
    let _ = tx.send(Ev::Opened(slot, start.elapsed()));
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
            if answered == Some(p.nonce) {
                continue;
            }
            answered = Some(p.nonce);
            if tx.send(Ev::Probe(slot, p.nonce, start.elapsed())).is_err() {
                return;
            }
            if answer_probes {
                // Outbound traffic refreshes the binding (REQ-6 MUST) so the survivor is reused.
                let _ = reader.send(&datagram(udp_kind::PROBE, p.nonce)).await;
            }
        }
    });
    Some(sock)
}

/// Run the UDP ladder and the inbound-refresh bindings until done, `stop` or `hard_end`.
// Slot indices address the ladder, the bindings and the tags together.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub(crate) async fn run_udp(
    server: SocketAddr,
    session: SessionId,
    plan: LadderPlan,
    grace: Duration,
    heartbeat: Duration,
    refresh_interval: Duration,
    start: Instant,
    hard_end: Duration,
    request: Requester,
    health: HealthView,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> UdpReport {
    let mut ladder = Ladder::new(plan.clone());
    let n = ladder.slots.len();
    let mut bindings: Vec<Binding> = (0..n + REFRESH_BINDINGS)
        .map(|_| Binding {
            sock: None,
            pending: None,
            arrived: None,
            opening: false,
        })
        .collect();
    let tag = |i: usize| {
        if i < n {
            UDP_TAG_BASE + i as u32
        } else {
            REFRESH_TAG_BASE + (i - n) as u32
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Ev>();
    let (sock_tx, mut sock_rx) = mpsc::unbounded_channel::<(usize, Arc<UdpSocket>)>();
    let mut refresh_opened: Vec<usize> = Vec::new();
    let mut refresh_started = false;
    let mut refresh_done: Option<(u32, u32)> = None;
    let mut refresh_fired = false;
    let mut tests = Vec::new();
    let mut nonce: u64 = rand::random();
    let tick = (plan.resolution / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        let now = start.elapsed();
        while let Ok((i, s)) = sock_rx.try_recv() {
            bindings[i].sock = Some(s);
        }
        while let Ok(ev) = rx.try_recv() {
            match ev {
                Ev::Opened(i, at) if i < n => ladder.opened(i, at),
                Ev::Opened(i, _) => refresh_opened.push(i),
                Ev::OpenFailed(i) if i < n => ladder.lost_slot(i),
                Ev::OpenFailed(_) => {}
                Ev::Probe(i, nonce, at) => bindings[i].arrived = Some((nonce, at)),
            }
        }
        // Open bindings whose time has come (refresh bindings at the start).
        for i in 0..n + REFRESH_BINDINGS {
            let due = if i < n {
                ladder.slots[i].state == SlotState::Pending && ladder.open_at(i) <= now
            } else {
                true
            };
            if due && !bindings[i].opening {
                bindings[i].opening = true;
                let (tx, sock_tx) = (tx.clone(), sock_tx.clone());
                let t = tag(i);
                tokio::spawn(async move {
                    if let Some(s) =
                        open_binding(server, session, i, t, i < n, grace, start, tx).await
                    {
                        let _ = sock_tx.send((i, s));
                    }
                });
            }
        }
        if !refresh_started && refresh_opened.len() == REFRESH_BINDINGS {
            refresh_started = true;
            let tags = refresh_opened.iter().map(|&i| tag(i)).collect();
            let _ = request(ControlRequest::UdpRefresh {
                tags,
                interval_ms: to_ms(refresh_interval),
            })
            .await;
        }
        // Judge tests.
        let (confirmed, outages) = health();
        for i in 0..n + REFRESH_BINDINGS {
            let Some((fired, deadline, pnonce, idle)) = bindings[i].pending else {
                continue;
            };
            if now < deadline {
                continue;
            }
            let overlap = outages
                .iter()
                .any(|&(s, e)| s <= deadline && e >= fired.saturating_sub(heartbeat));
            if !overlap && confirmed < deadline && now < deadline + heartbeat * 8 {
                continue;
            }
            bindings[i].pending = None;
            let arrived = bindings[i]
                .arrived
                .is_some_and(|(n, at)| n == pnonce && at <= deadline);
            let (result, outcome) = if overlap || (!arrived && confirmed < deadline) {
                (TestResult::Lost, "lost to outage")
            } else if arrived {
                (TestResult::Alive { idle }, "alive")
            } else {
                (TestResult::Dead { idle }, "dead")
            };
            if i < n {
                ladder.record(i, result, now);
            } else {
                let r = refresh_done.get_or_insert((0, 0));
                match result {
                    TestResult::Alive { .. } => r.0 += 1,
                    TestResult::Dead { .. } => r.1 += 1,
                    TestResult::Lost => {}
                }
            }
            tests.push(UdpTest {
                tag: tag(i),
                fired_s: fired.as_secs_f64(),
                idle_s: idle.as_secs_f64(),
                outcome: outcome.into(),
                inbound_refresh: i >= n,
            });
        }
        // Fire due tests; the refresh bindings once the ladder is done.
        // The TCP side ending stops the UDP ladder too: UDP never lengthens the run.
        let stopped = stop.load(std::sync::atomic::Ordering::Relaxed);
        let mut fire: Vec<usize> = if stopped { Vec::new() } else { ladder.due(now) };
        let done = stopped || ladder.finished(now);
        if done && !refresh_fired {
            refresh_fired = true;
            if ladder.upper.is_some() {
                fire.extend(refresh_opened.iter().copied());
            }
        }
        if !fire.is_empty() {
            nonce += 1;
            let tags: Vec<u32> = fire.iter().map(|&i| tag(i)).collect();
            let reply = request(ControlRequest::FireUdp { tags, nonce }).await;
            let now = start.elapsed();
            let fired: HashMap<u32, crate::proto::Fired> = match reply {
                Ok(ControlReply::Fired { fired }) => {
                    fired.into_iter().map(|f| (f.tag, f)).collect()
                }
                _ => HashMap::new(),
            };
            for i in fire {
                match fired.get(&tag(i)) {
                    Some(f) if f.sent => {
                        let idle = f.idle_ms.map(ms).unwrap_or_default();
                        bindings[i].pending = Some((now, now + grace, nonce, idle));
                    }
                    _ if i < n => ladder.record(i, TestResult::Lost, now),
                    _ => {}
                }
            }
        }
        let busy = bindings.iter().any(|b| b.pending.is_some());
        if (done && refresh_fired && !busy) || now > hard_end {
            break;
        }
        tokio::time::sleep(tick).await;
    }
    drop(bindings);
    let mut deaths = Vec::new();
    let dead = tests
        .iter()
        .filter(|t| !t.inbound_refresh && t.outcome == "dead")
        .count() as u32;
    if dead > 0 {
        deaths.push((DeathKind::SilentDrop, dead));
    }
    let outcome = LadderOutcome {
        lower: ladder.lower,
        upper: ladder.upper,
        resolution: plan.resolution,
        horizon: plan.horizon,
        tests: tests.iter().filter(|t| !t.inbound_refresh).count() as u32,
        lost_to_outage: tests
            .iter()
            .filter(|t| t.outcome == "lost to outage")
            .count() as u32,
        contradictions: ladder.contradictions,
        deaths,
    };
    UdpReport {
        plan,
        outcome,
        inbound_refresh: refresh_done,
        refresh_interval,
        tests,
    }
}
