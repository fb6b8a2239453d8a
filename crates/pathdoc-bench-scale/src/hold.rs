//! The spread-out attacker of issue #20: from many loopback source addresses it holds every
//! slot of one server pool it can get (mtu sessions, bulk downloads, throughput streams, or
//! silent connections that never send a hello) and re-takes any slot that frees up, until
//! stopped. Meanwhile the load test runs legitimate checks from another address and counts
//! how many the server still serves (crates/pathdoc-cli/tests/server_load.rs).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pathdoc_proto::{read_frame, write_frame, Channel, CheckKind, FramedConn};
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;

use crate::attack::{control, open, Outcomes, Target};
use crate::net::connect_from;

/// Deadline of each request/reply step.
const STEP: Duration = Duration::from_secs(10);

/// Which pool the attacker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Live mtu sessions: a control connection each, kept open.
    MtuSessions,
    /// MTU bulk downloads (5 s each, never read), one per session, re-asked when done.
    Bulk,
    /// Throughput tests of this many upload streams that never send, re-started when done.
    Streams(u32),
    /// Connections that never send a preamble (so never authenticate), re-opened when closed.
    Silent,
    /// Idle-check probe records: an idle session per slot that opens this many UDP bindings
    /// (no descriptor on the server, the cheapest record to make it keep) and re-sends the
    /// `OPEN` of each one not yet answered; one binding is one unit held.
    IdleProbes(u32),
}

/// A running attack; [`Holder::stop`] ends it and returns what it got.
pub struct Holder {
    stop: Arc<AtomicBool>,
    tasks: JoinSet<()>,
    /// Slots held right now.
    pub held: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
    pub outcomes: Arc<Outcomes>,
}

/// What the attacker got.
pub struct HoldResult {
    pub outcomes: Outcomes,
    /// Most slots held at once (sampled at each take).
    pub peak_held: u32,
}

impl Holder {
    /// From `addresses` sources of block `block` (`127.<block>.x.y`), `per_address` slots each;
    /// a slot refused or lost is re-tried every `retake`.
    pub fn start(
        target: Target,
        pool: Pool,
        block: u8,
        addresses: u32,
        per_address: u32,
        retake: Duration,
    ) -> Holder {
        let sources = (0..addresses)
            .map(|a| crate::net::source(block, a))
            .collect();
        Holder::start_from(target, pool, sources, per_address, retake)
    }

    /// The same from the given source addresses (e.g. many addresses of one IPv6 /64 inside a
    /// test's namespace, where the whole /64 is local).
    pub fn start_from(
        target: Target,
        pool: Pool,
        sources: Vec<IpAddr>,
        per_address: u32,
        retake: Duration,
    ) -> Holder {
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU32::new(0));
        let peak = Arc::new(AtomicU32::new(0));
        let outcomes = Arc::new(Outcomes::default());
        let mut tasks = JoinSet::new();
        for source in sources {
            for _ in 0..per_address {
                let slot = Slot {
                    target,
                    source,
                    stop: stop.clone(),
                    held: held.clone(),
                    peak: peak.clone(),
                    outcomes: outcomes.clone(),
                };
                tasks.spawn(slot.run(pool, retake));
            }
        }
        Holder {
            stop,
            tasks,
            held,
            peak,
            outcomes,
        }
    }

    /// Stop, close everything, and return the figures.
    pub async fn stop(mut self) -> HoldResult {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
        let peak_held = self.peak.load(Ordering::Relaxed);
        HoldResult {
            outcomes: Arc::try_unwrap(self.outcomes).unwrap_or_default(),
            peak_held,
        }
    }
}

/// One slot the attacker keeps taking.
struct Slot {
    target: Target,
    source: IpAddr,
    stop: Arc<AtomicBool>,
    held: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
    outcomes: Arc<Outcomes>,
}

impl Slot {
    async fn run(self, pool: Pool, retake: Duration) {
        while !self.stop.load(Ordering::Relaxed) {
            let got = match pool {
                Pool::MtuSessions => self.mtu_session().await,
                Pool::Bulk => self.bulk().await,
                Pool::Streams(n) => self.streams(n).await,
                Pool::Silent => self.silent().await,
                Pool::IdleProbes(n) => self.idle_probes(n, retake).await,
            };
            if !got {
                tokio::time::sleep(retake).await;
            }
        }
    }

    fn took(&self) {
        let now = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn released(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    /// Hold until stopped, `most` passed, or `conn`'s peer closes.
    async fn hold(&self, conn: &mut tokio::net::TcpStream, most: Duration) {
        let end = tokio::time::Instant::now() + most;
        let mut buf = [0u8; 4096];
        while !self.stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < end {
            match tokio::time::timeout(Duration::from_millis(100), conn.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                _ => {}
            }
        }
    }

    /// Wait (checking the stop flag) without reading anything.
    async fn wait(&self, most: Duration) {
        let end = tokio::time::Instant::now() + most;
        while !self.stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn mtu_session(&self) -> bool {
        let channel = control(CheckKind::Mtu);
        let Some((conn, _)) = open(self.source, self.target.addr, channel, &self.outcomes).await
        else {
            return false;
        };
        self.took();
        let mut stream = conn.into_inner();
        self.hold(&mut stream, Duration::from_secs(3600)).await;
        self.released();
        true
    }

    async fn bulk(&self) -> bool {
        use pathdoc_mtu::wire::{BulkRequest, Reply, Request, MAX_BULK_MS, TAG_BULK};
        let server = self.target.addr;
        let Some((mut ctl, session)) =
            open(self.source, server, control(CheckKind::Mtu), &self.outcomes).await
        else {
            return false;
        };
        if ctl.send(&Request::Start).await.is_err()
            || ctl.recv_timeout::<Reply>(STEP, "started").await.is_err()
        {
            return false;
        }
        // One bulk download per session at a time: ask again whenever the last one ended.
        while !self.stop.load(Ordering::Relaxed) {
            let channel = Channel::Data {
                session,
                tag: TAG_BULK,
            };
            let Some((mut conn, _)) = open(self.source, server, channel, &self.outcomes).await
            else {
                self.wait(Duration::from_millis(200)).await;
                continue;
            };
            let request = BulkRequest {
                duration_ms: MAX_BULK_MS,
            };
            if conn.send(&request).await.is_err() {
                continue;
            }
            self.took();
            // Never read: the server fills the send queue and gives up at its deadline.
            self.wait(Duration::from_millis(u64::from(MAX_BULK_MS) + 500))
                .await;
            self.released();
        }
        true
    }

    async fn streams(&self, streams: u32) -> bool {
        use pathdoc_speed::spec::{stream_tag, ClientMsg, Direction, Mode, ServerMsg, TestSpec};
        let server = self.target.addr;
        let Some((ctl, session)) = open(
            self.source,
            server,
            control(CheckKind::Speed),
            &self.outcomes,
        )
        .await
        else {
            return false;
        };
        let (mut rd, mut wr) = ctl.into_inner().into_split();
        let duration = Duration::from_secs(5);
        let spec = TestSpec {
            mode: Mode::Upload,
            streams,
            duration_ms: duration.as_millis() as u64,
            bytes: None,
            server_cc: None,
            window: None,
            interval_ms: 1000,
        };
        if write_frame(&mut wr, &ClientMsg::Start(spec)).await.is_err() {
            return false;
        }
        match tokio::time::timeout(STEP, read_frame::<_, ServerMsg>(&mut rd)).await {
            Ok(Ok(ServerMsg::Accepted { .. })) => {}
            Ok(Ok(ServerMsg::Refused { reason, .. })) => {
                self.outcomes.refusal(reason);
                return false;
            }
            _ => return false,
        }
        let mut data: Vec<FramedConn> = Vec::new();
        for i in 0..streams {
            let channel = Channel::Data {
                session,
                tag: stream_tag(Direction::Upload, i),
            };
            if let Some((conn, _)) = open(self.source, server, channel, &self.outcomes).await {
                data.push(conn);
            }
        }
        for _ in 0..streams {
            self.took();
        }
        // Send nothing; hold until the server's own end of the test.
        self.wait(duration + Duration::from_secs(1)).await;
        for _ in 0..streams {
            self.released();
        }
        drop(data);
        true
    }

    async fn idle_probes(&self, bindings: u32, retake: Duration) -> bool {
        use pathdoc_idle::proto::{ControlReply, ControlRequest};
        let server = self.target.addr;
        let Some((mut ctl, session)) = open(
            self.source,
            server,
            control(CheckKind::Idle),
            &self.outcomes,
        )
        .await
        else {
            return false;
        };
        let Ok(udp) = crate::net::udp_from(self.source).await else {
            return false;
        };
        let mut answered = std::collections::HashSet::new();
        let mut heartbeat = tokio::time::Instant::now();
        let mut seq = 0;
        while !self.stop.load(Ordering::Relaxed) {
            for tag in (0..bindings).filter(|t| !answered.contains(t)) {
                let _ = udp.send_to(&open_binding(session, tag), server).await;
            }
            // Answers until the next re-take: each new one is a record the server keeps.
            let until = tokio::time::Instant::now() + retake;
            let mut buf = [0u8; 1024];
            while let Ok(Ok((n, _))) = tokio::time::timeout_at(until, udp.recv_from(&mut buf)).await
            {
                if let Some(tag) = answered_tag(&buf[..n]) {
                    if tag < bindings && answered.insert(tag) {
                        self.took();
                    }
                }
            }
            // The control connection must not fall silent (the server ends it after 60 s).
            if heartbeat.elapsed() >= Duration::from_secs(10) {
                heartbeat = tokio::time::Instant::now();
                seq += 1;
                let alive = ctl.send(&ControlRequest::Heartbeat { seq }).await.is_ok()
                    && ctl
                        .recv_timeout::<ControlReply>(STEP, "heartbeat")
                        .await
                        .is_ok();
                if !alive {
                    break;
                }
            }
        }
        for _ in 0..answered.len() {
            self.released();
        }
        true
    }

    async fn silent(&self) -> bool {
        let Ok(mut stream) = connect_from(self.source, self.target.addr).await else {
            return false;
        };
        self.took();
        // Never a byte: held until the server's handshake deadline closes it.
        self.hold(&mut stream, Duration::from_secs(3600)).await;
        self.released();
        // Re-take at once: the slot is free now.
        true
    }
}

/// An idle-check `OPEN` of binding `tag` in `session`.
fn open_binding(session: pathdoc_proto::SessionId, tag: u32) -> Vec<u8> {
    use pathdoc_idle::proto::{udp_kind, UdpPayload, UDP_PAD};
    let mut d = Vec::new();
    pathdoc_proto::UdpHeader {
        session,
        kind: udp_kind::OPEN,
    }
    .encode(&mut d);
    d.extend_from_slice(
        &UdpPayload {
            tag,
            nonce: 0,
            observed: None,
        }
        .encode(UDP_PAD),
    );
    d
}

/// The binding an answer to an `OPEN` is for.
fn answered_tag(datagram: &[u8]) -> Option<u32> {
    let (header, payload) = pathdoc_proto::UdpHeader::decode(datagram).ok()?;
    (header.kind == pathdoc_idle::proto::udp_kind::OPEN)
        .then(|| pathdoc_idle::proto::UdpPayload::decode(payload))
        .flatten()
        .map(|p| p.tag)
}
