//! The server side of the mtu check ([`MtuService`]): sends server→client DF probes from the
//! server port on its own connected socket (so it reads its own ICMP error queue), records
//! which client→server probes arrived, saves the client's SYN on a one-shot listener, and
//! serves the timed bulk download.
//!
//! Bounds: probes per request, attempts, wait and probe size are capped ([`crate::wire`]), and
//! the server sends at most the session's UDP byte budget, only to an address that completed a
//! TCP handshake for the session and sent a datagram from it.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pathdoc_proto::{CheckKind, FramedConn, UdpHeader};
use pathdoc_server::{next_request, Service, ServiceError, Session};
use pathdoc_sys::pmtu;
use tokio::io::AsyncWriteExt;

use crate::wire::*;

/// How long the server waits for the next control message before giving up on the client.
const CONTROL_IDLE: Duration = Duration::from_secs(60);
/// Most client→server probe ids remembered per session.
const MAX_UP_IDS: usize = 8192;
/// One-shot SYN-saving listeners per session.
const MAX_MSS_LISTENERS: u32 = 4;

/// The mtu check's server side.
#[derive(Debug, Default)]
pub struct MtuService;

impl MtuService {
    pub fn new() -> Arc<Self> {
        Arc::new(MtuService)
    }
}

#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    client_udp: Option<SocketAddr>,
    /// (round, id) of every client→server probe that arrived, at most [`MAX_UP_IDS`]: a flat
    /// list, so a session's worst case is 8 bytes per datagram (64 KiB), whatever rounds a
    /// client invents.
    up_ids: Vec<(u32, u32)>,
    probe_sock: Option<Arc<UdpSocket>>,
    next_id: u32,
    mss: Option<(Option<u16>, Option<u32>)>,
    /// Listeners opened for this session; bounded so a client cannot pile up sockets.
    mss_listeners: u32,
    /// A listener (and the connection it accepted) is open now: one at a time, so a live
    /// session holds at most three descriptors besides its connections (probe socket,
    /// listener, the accepted connection).
    mss_listening: bool,
    bulk: Option<BulkServerStats>,
    /// The interface that carried the last bulk download.
    bulk_nic: Option<pathdoc_sys::nic::NicFacts>,
    /// A bulk download is running (at most one per session).
    bulk_running: bool,
}

/// A session's one bulk-download slot and its share of the server's bulk budget, held with the
/// data connection (see `Service::admit_data`).
struct BulkSlot {
    state: Arc<State>,
    _budget: pathdoc_server::BudgetHold,
}

impl Drop for BulkSlot {
    fn drop(&mut self) {
        self.state.lock().bulk_running = false;
    }
}

/// Drops the session's probe socket when the control connection ends, however it ends: only
/// the control connection can use it, so a lingering session keeps no UDP socket.
struct ProbeSocketRelease(Arc<State>);

impl Drop for ProbeSocketRelease {
    fn drop(&mut self) {
        self.0.lock().probe_sock = None;
    }
}

/// How long a finished bulk download's queued bytes may take to reach a reading client before
/// the server resets the connection (a client that does not read would otherwise leave them in
/// an orphaned socket).
const BULK_CLOSE_GRACE: Duration = Duration::from_secs(1);

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn read_tcp_mtu_probing() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mtu_probing")
        .ok()
        .map(|s| s.trim().to_string())
}

fn icmp_from_queue(e: &pmtu::QueuedError) -> Option<IcmpSeen> {
    if matches!(
        e.origin,
        pmtu::ErrorOrigin::Local | pmtu::ErrorOrigin::Other(_)
    ) {
        return None;
    }
    let fields = UdpHeader::decode(&e.payload)
        .ok()
        .and_then(|(_, p)| ProbeFields::decode(p));
    let kind = if e.is_too_big() {
        IcmpKind::TooBig
    } else if e.is_time_exceeded() {
        IcmpKind::TimeExceeded
    } else if e.is_port_unreachable() {
        IcmpKind::Unreachable
    } else {
        IcmpKind::Other
    };
    Some(IcmpSeen {
        id: fields.map(|f| f.id),
        round: fields.map(|f| f.round),
        kind,
        mtu: (kind == IcmpKind::TooBig).then_some(e.info),
        from: e.offender,
        icmp_type: e.icmp_type,
        icmp_code: e.icmp_code,
    })
}

/// The sender's interface MTU from a local "message too long" in a drained error queue (the
/// kernel names the MTU it refused against; for `IP_PMTUDISC_PROBE` sockets that is the
/// interface's, not a cached path MTU).
pub fn local_mtu(queue: &[pmtu::QueuedError]) -> Option<u32> {
    queue
        .iter()
        .filter(|e| e.origin == pmtu::ErrorOrigin::Local && e.is_too_big() && e.info > 0)
        .map(|e| e.info)
        .min()
}

/// Convert a drained error queue into the ICMP list of a probe reply (shared with the client).
pub fn icmp_list(queue: &[pmtu::QueuedError]) -> Vec<IcmpSeen> {
    queue.iter().filter_map(icmp_from_queue).collect()
}

/// Send one probe datagram; a pending error from an earlier ICMP may make the first send fail,
/// so retry once. Returns `Err(true)` when the local stack refuses the size (EMSGSIZE twice).
pub fn send_probe(sock: &UdpSocket, datagram: &[u8]) -> Result<(), bool> {
    let mut last = None;
    for _ in 0..2 {
        match sock.send(datagram) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.raw_os_error(),
        }
    }
    Err(last == Some(libc::EMSGSIZE))
}

/// Build a probe datagram payload (header + fields + padding) for an IP datagram of `size`.
pub fn probe_datagram(
    session: pathdoc_proto::SessionId,
    kind: u16,
    fields: ProbeFields,
    overhead: usize,
) -> Vec<u8> {
    let total = (fields.size as usize)
        .saturating_sub(overhead)
        .max(UdpHeader::LEN + PROBE_FIELDS);
    let mut d = Vec::with_capacity(total);
    UdpHeader { session, kind }.encode(&mut d);
    fields.encode(&mut d);
    d.resize(total, 0);
    d
}

impl MtuService {
    fn open_probe_socket(
        &self,
        session: &Session,
        conn: &FramedConn,
        to: SocketAddr,
    ) -> std::io::Result<UdpSocket> {
        let port = session.udp_local_addr()?.port();
        let local = SocketAddr::new(conn.local().ip(), port);
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(local),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        sock.set_reuse_address(true)?;
        sock.bind(&local.into())?;
        sock.connect(&to.into())?;
        let sock: UdpSocket = sock.into();
        pmtu::make_probe_socket(&sock)?;
        Ok(sock)
    }

    async fn handle(
        &self,
        session: &Arc<Session>,
        conn: &mut FramedConn,
        state: &Arc<State>,
        req: Request,
    ) -> Result<Option<Reply>, ServiceError> {
        Ok(Some(match req {
            Request::Start => Reply::Started {
                tcp_mtu_probing: read_tcp_mtu_probing(),
            },
            Request::DownTarget => self.down_target(session, conn, state)?,
            Request::ProbeDown {
                round,
                probes,
                attempts,
                wait_ms,
            } => probe_down(session, state, round, &probes, attempts, wait_ms).await?,
            Request::UpReceived { round } => {
                let ids = state
                    .lock()
                    .up_ids
                    .iter()
                    .filter(|(r, _)| *r == round)
                    .map(|(_, id)| *id)
                    .collect();
                Reply::UpReceived { round, ids }
            }
            Request::MssListen => mss_listen(session, conn, state)?,
            Request::MssResult => mss_result(state).await,
            Request::BulkStats => {
                // One lock for both: two guards in one expression would deadlock.
                let mut inner = state.lock();
                Reply::BulkStats {
                    stats: inner.bulk.take(),
                    nic: inner.bulk_nic.take(),
                }
            }
            Request::Done => return Ok(None),
        }))
    }

    /// Where server → client probes go (the client's UDP address as seen here), opening the
    /// probe socket on first use, and the route's MTU towards it.
    fn down_target(
        &self,
        session: &Arc<Session>,
        conn: &FramedConn,
        state: &Arc<State>,
    ) -> Result<Reply, ServiceError> {
        let (client_udp, existing) = {
            let g = state.lock();
            (g.client_udp, g.probe_sock.clone())
        };
        let mut route_mtu = None;
        if let Some(to) = client_udp {
            let sock = match existing {
                Some(s) if s.peer_addr().ok() == Some(to) => s,
                _ => {
                    let s = Arc::new(self.open_probe_socket(session, conn, to)?);
                    state.lock().probe_sock = Some(s.clone());
                    s
                }
            };
            route_mtu = pmtu::route_mtu(&sock).ok();
        }
        Ok(Reply::DownTarget {
            client_udp,
            route_mtu,
        })
    }
}

/// One round of server → client DF probes: check the request, send every probe `attempts`
/// times, wait `wait_ms`, then read what the error queue learnt (ICMP, the local MTU).
async fn probe_down(
    session: &Arc<Session>,
    state: &Arc<State>,
    round: u32,
    probes: &[ProbeSpec],
    attempts: u8,
    wait_ms: u32,
) -> Result<Reply, ServiceError> {
    if probes.len() > MAX_PROBES_PER_REQUEST
        || attempts == 0
        || attempts > MAX_ATTEMPTS
        || wait_ms > MAX_WAIT_MS
    {
        return Ok(Reply::Error { message: format!("at most {MAX_PROBES_PER_REQUEST} probes, 1..={MAX_ATTEMPTS} attempts, {MAX_WAIT_MS} ms wait") });
    }
    if probes
        .iter()
        .any(|p| !(MIN_PROBE_SIZE..=MAX_PROBE_SIZE).contains(&p.size) || p.ttl == Some(0))
    {
        return Ok(Reply::Error {
            message: format!("probe sizes must be {MIN_PROBE_SIZE}..={MAX_PROBE_SIZE} and TTL ≥ 1"),
        });
    }
    let Some(sock) = state.lock().probe_sock.clone() else {
        return Ok(Reply::Error {
            message: "no client UDP address yet: send the open datagram and ask down-target first"
                .into(),
        });
    };
    let overhead = pmtu::udp_overhead(&sock.peer_addr()?);
    let _ = pmtu::drain_error_queue(&sock);
    let sent = send_down_probes(session, state, &sock, round, probes, attempts, overhead)?;
    let Some(sent) = sent else {
        return Ok(Reply::Error {
            message: "session UDP budget exhausted".into(),
        });
    };
    tokio::time::sleep(Duration::from_millis(u64::from(wait_ms))).await;
    let queue = pmtu::drain_error_queue(&sock)?;
    Ok(Reply::DownSent {
        round,
        probes: sent,
        icmp: icmp_list(&queue),
        local_mtu: local_mtu(&queue),
    })
}

/// Send each probe `attempts` times, each with its own id; a size the local stack refused as
/// too big is not sent again. `None` when the session's UDP budget ran out.
fn send_down_probes(
    session: &Arc<Session>,
    state: &Arc<State>,
    sock: &UdpSocket,
    round: u32,
    probes: &[ProbeSpec],
    attempts: u8,
    overhead: usize,
) -> Result<Option<Vec<SentProbe>>, ServiceError> {
    let mut sent = Vec::new();
    let mut local_too_big: Vec<u16> = Vec::new();
    for spec in probes {
        let ttl = spec.ttl.unwrap_or(64);
        pmtu::set_ttl(sock, ttl)?;
        for _ in 0..attempts {
            let id = {
                let mut g = state.lock();
                g.next_id = g.next_id.wrapping_add(1);
                g.next_id
            };
            let fields = ProbeFields {
                round,
                id,
                size: spec.size,
                ttl,
            };
            let datagram = probe_datagram(session.id, KIND_DOWN_PROBE, fields, overhead);
            if !session.charge_udp(datagram.len()) {
                return Ok(None);
            }
            let local_error = if local_too_big.contains(&spec.size) {
                true
            } else {
                match send_probe(sock, &datagram) {
                    Ok(()) => false,
                    Err(too_big) => {
                        if too_big {
                            local_too_big.push(spec.size);
                        }
                        true
                    }
                }
            };
            sent.push(SentProbe {
                id,
                size: spec.size,
                ttl: spec.ttl,
                local_error,
            });
        }
    }
    pmtu::set_ttl(sock, 64)?;
    Ok(Some(sent))
}

/// Open a listener that saves the client's SYN (one at a time, a few per session): the MSS the
/// client announces and the one this end advertises, read by [`mss_result`].
fn mss_listen(
    session: &Arc<Session>,
    conn: &FramedConn,
    state: &Arc<State>,
) -> Result<Reply, ServiceError> {
    {
        let mut g = state.lock();
        if g.mss_listeners >= MAX_MSS_LISTENERS || g.mss_listening {
            return Ok(Reply::Error {
                message: format!(
                    "one MSS listener at a time and at most {MAX_MSS_LISTENERS} per session"
                ),
            });
        }
        g.mss_listeners += 1;
        g.mss_listening = true;
    }
    let addr = SocketAddr::new(conn.local().ip(), 0);
    let listener = std::net::TcpListener::bind(addr)?;
    pathdoc_sys::saved_syn::enable_save_syn(&listener)?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let listener = tokio::net::TcpListener::from_std(listener)?;
    state.lock().mss = None;
    tokio::spawn(read_one_syn(session.clone(), state.clone(), listener));
    Ok(Reply::MssListening { port })
}

/// The first connection from the session's client within 5 s: its SYN's MSS and our advmss.
async fn read_one_syn(session: Arc<Session>, state: Arc<State>, listener: tokio::net::TcpListener) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let cancel = session.cancel.clone();
    while let Some(Ok(Ok((stream, peer)))) = tokio::select! {
        _ = cancel.cancelled() => None,
        r = tokio::time::timeout_at(deadline.into(), listener.accept()) => Some(r),
    } {
        if !session.knows_addr(peer.ip()) {
            continue;
        }
        let syn_mss = pathdoc_sys::saved_syn::saved_syn(&stream)
            .ok()
            .and_then(|h| pathdoc_sys::saved_syn::syn_mss(&h));
        let advmss = pathdoc_sys::tcp_info::tcp_info(&stream)
            .ok()
            .map(|i| i.advmss());
        state.lock().mss = Some((syn_mss, advmss));
        // Hold the connection briefly so the client can read its TCP_INFO.
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.readable()).await;
        break;
    }
    state.lock().mss_listening = false;
}

/// What the MSS listener saw, waiting up to 2 s for its connection.
async fn mss_result(state: &Arc<State>) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some((syn_mss, server_advmss)) = state.lock().mss {
            return Reply::MssSeen {
                syn_mss,
                server_advmss,
            };
        }
        if Instant::now() > deadline {
            return Reply::Error {
                message: "no connection reached the MSS listener".into(),
            };
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[async_trait]
impl Service for MtuService {
    fn check(&self) -> CheckKind {
        CheckKind::Mtu
    }

    async fn control(
        &self,
        session: Arc<Session>,
        mut conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        let state = session.state::<State>();
        let _release = ProbeSocketRelease(state.clone());
        let what = "the next mtu request";
        let malformed = |message| Reply::Error { message };
        while let Some(req) =
            next_request(&session, &mut conn, CONTROL_IDLE, what, malformed).await?
        {
            let reply = match self.handle(&session, &mut conn, &state, req).await {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(e) => Reply::Error {
                    message: e.to_string(),
                },
            };
            conn.send(&reply).await?;
        }
        Ok(())
    }

    fn admit_data(
        &self,
        session: &Arc<Session>,
        tag: u32,
    ) -> Result<Option<pathdoc_server::Reservation>, pathdoc_server::Refuse> {
        if tag != TAG_BULK {
            return Err(pathdoc_server::Refuse {
                reason: "unexpected-data",
                limit: 0,
                message: format!("unknown mtu data tag {tag}"),
            });
        }
        let state = session.state::<State>();
        if state.lock().bulk_running {
            return Err(pathdoc_server::Refuse {
                reason: "bulk-per-session",
                limit: 1,
                message: "a bulk download of this session is already running; a session runs one at a time".into(),
            });
        }
        let budget = session.budgets().bulk.try_take(session.client, 1)?;
        state.lock().bulk_running = true;
        Ok(Some(Box::new(BulkSlot {
            state,
            _budget: budget,
        })))
    }

    async fn data(
        &self,
        session: Arc<Session>,
        tag: u32,
        mut conn: FramedConn,
        _permit: pathdoc_server::ConnectionPermit,
    ) -> Result<(), ServiceError> {
        if tag != TAG_BULK {
            return Err(ServiceError::BadRequest(format!(
                "unknown mtu data tag {tag}"
            )));
        }
        let state = session.state::<State>();
        let req: BulkRequest = conn
            .recv_timeout(Duration::from_secs(5), "the bulk request")
            .await?;
        let duration = Duration::from_millis(u64::from(req.duration_ms.min(MAX_BULK_MS)));
        let deadline = tokio::time::Instant::now() + duration;
        let chunk = vec![0u8; 64 * 1024];
        let icmp_before = pathdoc_sys::icmp_counters::too_big_received();
        let stream = conn.stream_mut();
        while tokio::time::Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, stream.write_all(&chunk)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let icmp_after = pathdoc_sys::icmp_counters::too_big_received();
        if let Ok(i) = pathdoc_sys::tcp_info::tcp_info(conn.stream()) {
            session.add_bytes(i.bytes_acked, i.bytes_received);
            state.lock().bulk = Some(BulkServerStats {
                bytes_acked: i.bytes_acked,
                snd_mss: i.snd_mss(),
                pmtu: i.pmtu(),
                total_retrans: i.total_retrans,
                data_segs_out: Some(i.data_segs_out),
                icmp_too_big_in: icmp_before
                    .zip(icmp_after)
                    .map(|(b, a)| a.saturating_sub(b)),
            });
        }
        let nic = conn
            .stream()
            .local_addr()
            .ok()
            .and_then(|a| pathdoc_sys::nic::facts_for_local_addr(a.ip()));
        state.lock().bulk_nic = nic;
        pathdoc_server::closing::release_send_queues(&[conn.stream()], BULK_CLOSE_GRACE).await;
        Ok(())
    }

    async fn udp(
        &self,
        session: Arc<Session>,
        kind: u16,
        payload: &[u8],
        from: SocketAddr,
    ) -> Option<Vec<u8>> {
        let state = session.state::<State>();
        let mut g = state.lock();
        match kind {
            KIND_OPEN => g.client_udp = Some(from),
            KIND_UP_PROBE => {
                if let Some(f) = ProbeFields::decode(payload) {
                    if g.up_ids.len() < MAX_UP_IDS {
                        g.up_ids.push((f.round, f.id));
                    }
                }
            }
            _ => {}
        }
        None
    }
}
