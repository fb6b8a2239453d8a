//! Probe connections and their bookkeeping: the probe modes, opening a probe connection and
//! reading what arrives on it, the per-mode groups (a ladder plus its sockets and test rows), and
//! the keep-warm socket settings of the culprit search.

use std::net::SocketAddr;
use std::time::Duration;

use pathdoc_proto::{connect, Channel, ProtoError, SessionId};
use serde::Serialize;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::IdleConfig;
use crate::proto::{ProbeMessage, ServerSawEnd};
use crate::schedule::{Ladder, LadderPlan};
use crate::verdict::DeathKind;

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
    pub(super) fn server_fired(self) -> bool {
        matches!(self, Mode::ServerInitiated | Mode::NearWarm | Mode::FarWarm)
    }
    pub(super) fn warm(self) -> bool {
        matches!(self, Mode::NearWarm | Mode::FarWarm)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ClientSawEnd {
    Closed,
    Reset,
    Error,
}

pub(super) enum ProbeEvent {
    Opened {
        writer: OwnedWriteHalf,
        observed: SocketAddr,
    },
    OpenFailed(String),
    /// The server had no room for the probe connection (its idle-probe or connection pool).
    Refused(pathdoc_core::busy::ServerBusy),
    Message(ProbeMessage),
    Ended(ClientSawEnd),
}

pub(super) struct Event {
    pub(super) group: usize,
    pub(super) slot: usize,
    pub(super) at: Duration,
    pub(super) event: ProbeEvent,
}

pub(super) fn tag_of(group: usize, slot: usize) -> u32 {
    (group as u32) << 16 | slot as u32
}

pub(super) async fn open_probe(
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
        Err(ProtoError::Refused(r)) if r.is_load() => {
            let (reason, limit) = r.load.map(|l| (l.reason, l.limit)).unzip();
            let busy = pathdoc_core::busy::ServerBusy::new(r.message, reason, limit);
            return send(ProbeEvent::Refused(busy));
        }
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

pub(super) struct Pending {
    pub(super) fired: Duration,
    pub(super) deadline: Duration,
    pub(super) nonce: u64,
    pub(super) idle: Duration,
}

pub(super) struct ProbeState {
    pub(super) writer: Option<OwnedWriteHalf>,
    pub(super) observed: Option<SocketAddr>,
    pub(super) arrived: Option<(u64, Duration)>,
    pub(super) ended: Option<(ClientSawEnd, Duration)>,
    pub(super) pending: Option<Pending>,
    pub(super) opening: bool,
    /// Keep-warm settings must be (re)applied: after opening and after surviving a test.
    pub(super) needs_warm: bool,
    /// The socket's TTL before keep-warm lowered it.
    pub(super) default_ttl: Option<u32>,
}

pub(super) struct Group {
    pub(super) mode: Mode,
    pub(super) ladder: Ladder,
    pub(super) probes: Vec<ProbeState>,
    pub(super) rows: Vec<TestRow>,
    pub(super) lost_to_outage: u32,
    /// Culprit groups: the hop after which the path is split, and the keepalive TTL.
    pub(super) split: usize,
    pub(super) warm_ttl: u8,
}

impl Group {
    pub(super) fn warm(mode: Mode, plan: LadderPlan, split: usize, warm_ttl: u8) -> Self {
        Group {
            split,
            warm_ttl,
            ..Group::new(mode, plan)
        }
    }

    pub(super) fn new(mode: Mode, plan: LadderPlan) -> Self {
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
pub(super) fn warm_near(
    writer: &OwnedWriteHalf,
    ttl: u8,
    interval: Duration,
    hold: Duration,
) -> std::io::Result<u32> {
    let sock = socket2::SockRef::from(writer.as_ref());
    let default_ttl = pathdoc_sys::pmtu::hop_limit(writer.as_ref())?;
    let ka = socket2::TcpKeepalive::new()
        .with_time(interval)
        .with_interval(interval);
    sock.set_tcp_user_timeout(Some(hold))?;
    pathdoc_sys::pmtu::set_hop_limit(writer.as_ref(), u32::from(ttl))?;
    sock.set_tcp_keepalive(&ka)?;
    Ok(default_ttl)
}

/// Undo [`warm_near`] before the server's probe: no more keepalives (one sent at full TTL
/// would refresh the whole path), and the client's ACKs reach the server again.
pub(super) fn cool_near(writer: &OwnedWriteHalf, default_ttl: u32) {
    let sock = socket2::SockRef::from(writer.as_ref());
    let _ = sock.set_keepalive(false);
    let _ = pathdoc_sys::pmtu::set_hop_limit(writer.as_ref(), default_ttl);
}

pub(super) fn overlaps_outage(
    outages: &[(Duration, Option<Duration>, String)],
    from: Duration,
    to: Duration,
    now: Duration,
) -> bool {
    outages
        .iter()
        .any(|(s, e, _)| *s <= to && e.unwrap_or(now) >= from)
}
