//! Hostile load against a running `pathdoc server` (issue #13), from many loopback source
//! addresses, and what it makes the server hold, read from outside the process: descriptors,
//! threads, RSS, and the kernel's send queues of the server's TCP sockets (/proc/net/tcp, which
//! also lists orphaned sockets after the server closed them).
//!
//! Each phase reproduces one finding of the issue and returns its figures; the load test
//! (crates/pathdoc-cli/tests/loopback/server_load.rs) asserts them against the documented caps, and the
//! `pathdoc-bench-attack` binary prints them for any server binary (before/after tables in
//! docs/server.md). Every step has a deadline; every socket the generator opens closes when its
//! phase returns.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use pathdoc_proto::{
    read_frame, read_preamble, write_frame, Channel, CheckKind, FramedConn, HelloReply, SessionId,
    UdpHeader,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::net::{connect_from, udp_from};

/// Deadline of every request/reply step.
const STEP: Duration = Duration::from_secs(10);

/// The server under attack.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub addr: SocketAddr,
    pub pid: u32,
}

/// What the server holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readings {
    /// Open descriptors of the server process.
    pub fds: u64,
    pub threads: u64,
    /// Resident memory of the server process, bytes.
    pub rss: u64,
    /// TCP sockets on the server's port (its own, including orphans it closed; not TIME_WAIT),
    /// from /proc/net/tcp.
    pub sockets: u64,
    /// Bytes in the send queues of those sockets (written, not yet acknowledged).
    pub queued: u64,
}

impl Readings {
    /// The larger of each reading.
    pub fn max(self, o: Readings) -> Readings {
        Readings {
            fds: self.fds.max(o.fds),
            threads: self.threads.max(o.threads),
            rss: self.rss.max(o.rss),
            sockets: self.sockets.max(o.sockets),
            queued: self.queued.max(o.queued),
        }
    }
}

/// Read the server's state now. `tcp` also walks /proc/net/tcp (costly with many sockets).
pub fn read(target: &Target, tcp: bool) -> Readings {
    let server = pathdoc_sys::process::footprint(target.pid);
    let (sockets, queued) = if tcp {
        server_port_queues(target.addr)
    } else {
        (0, 0)
    };
    Readings {
        fds: server.fds,
        threads: server.threads,
        rss: server.rss_bytes,
        sockets,
        queued,
    }
}

/// TCP sockets whose local port is the server's and the sum of their send queues.
fn server_port_queues(server: SocketAddr) -> (u64, u64) {
    let file = if server.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let port = format!(":{:04X}", server.port());
    let (mut sockets, mut queued) = (0, 0);
    for line in text.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(local), Some(_remote), Some(state), Some(queues)) =
            (fields.nth(1), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // 0A = LISTEN (the listener itself), 06 = TIME_WAIT (no queue, no descriptor).
        if !local.ends_with(&port) || state == "0A" || state == "06" {
            continue;
        }
        sockets += 1;
        let tx = queues.split(':').next().unwrap_or("0");
        queued += u64::from_str_radix(tx, 16).unwrap_or(0);
    }
    (sockets, queued)
}

/// Samples the server every `period` in the background and keeps the maximum of each reading.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<Mutex<Readings>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(target: Target, period: Duration, tcp: bool) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new(read(&target, tcp)));
        let (s, p) = (stop.clone(), peak.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let now = read(&target, tcp);
                let mut peak = p.lock().unwrap_or_else(|e| e.into_inner());
                *peak = peak.max(now);
                drop(peak);
                std::thread::sleep(period);
            }
        });
        Sampler {
            stop,
            peak,
            handle: Some(handle),
        }
    }

    /// Stop sampling; the peaks seen.
    pub fn finish(mut self) -> Readings {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let peak = *self.peak.lock().unwrap_or_else(|e| e.into_inner());
        peak
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How a connection attempt of the attacker ended.
#[derive(Debug, Default)]
pub struct Outcomes {
    pub accepted: AtomicU32,
    /// Turned away with a `refused` frame.
    pub refused: AtomicU32,
    /// Closed, reset or timed out without a frame.
    pub silent: AtomicU32,
    pub first_refusal: Mutex<Option<String>>,
    pub first_error: Mutex<Option<String>>,
}

impl Outcomes {
    pub(crate) fn refusal(&self, message: String) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_refusal.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(message);
    }

    pub(crate) fn error(&self, e: impl std::fmt::Display) {
        self.silent.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(e.to_string());
    }

    /// Count a handshake result; the connection when accepted.
    fn count(
        &self,
        r: Result<(FramedConn, pathdoc_proto::Welcome), pathdoc_proto::ProtoError>,
    ) -> Option<(FramedConn, SessionId)> {
        match r {
            Ok((conn, w)) => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
                Some((conn, w.session))
            }
            Err(pathdoc_proto::ProtoError::Refused(r)) => {
                self.refusal(r.message);
                None
            }
            Err(e) => {
                self.error(e);
                None
            }
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} accepted, {} refused with a reason, {} closed without one",
            self.accepted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.silent.load(Ordering::Relaxed)
        )
    }
}

pub(crate) async fn open(
    source: IpAddr,
    server: SocketAddr,
    channel: Channel,
    outcomes: &Outcomes,
) -> Option<(FramedConn, SessionId)> {
    let stream = match connect_from(source, server).await {
        Ok(s) => s,
        Err(e) => {
            outcomes.error(format!("{e:#}"));
            return None;
        }
    };
    outcomes.count(pathdoc_proto::handshake(stream, None, channel, STEP).await)
}

pub(crate) fn control(check: CheckKind) -> Channel {
    Channel::Control {
        check,
        resume: None,
    }
}

/// Item 4: refused connections. From `source`, fill the per-client connection cap with `hold`
/// silent connections, then open `flood` more (`concurrency` at once), each kept open for
/// `keep` without a word: how many descriptors do the refusals cost the server?
pub struct FloodResult {
    pub outcomes: Outcomes,
    pub baseline: Readings,
    pub peak: Readings,
    pub took: Duration,
}

pub async fn refusal_flood(
    target: Target,
    source: IpAddr,
    hold: u32,
    flood: u32,
    concurrency: usize,
    keep: Duration,
) -> anyhow::Result<FloodResult> {
    let baseline = read(&target, false);
    let mut held = Vec::new();
    for _ in 0..hold {
        held.push(connect_from(source, target.addr).await?);
    }
    let sampler = Sampler::start(target, Duration::from_millis(20), false);
    let outcomes = Arc::new(Outcomes::default());
    let slots = Arc::new(Semaphore::new(concurrency));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..flood {
        let slot = slots.clone().acquire_owned().await?;
        let (outcomes, server) = (outcomes.clone(), target.addr);
        tasks.spawn(async move {
            let _slot = slot;
            let mut stream = match connect_from(source, server).await {
                Ok(s) => s,
                Err(e) => return outcomes.error(format!("{e:#}")),
            };
            let reply = tokio::time::timeout(STEP, async {
                read_preamble(&mut stream).await?;
                read_frame::<_, HelloReply>(&mut stream).await
            })
            .await;
            match reply {
                Ok(Ok(HelloReply::Refused(r))) => outcomes.refusal(r.message),
                Ok(Ok(HelloReply::Welcome(_))) => {
                    outcomes.accepted.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(e)) => outcomes.error(e),
                Err(_) => outcomes.error("no reply within 10 s"),
            }
            tokio::time::sleep(keep).await;
        });
    }
    while tasks.join_next().await.is_some() {}
    let took = start.elapsed();
    let peak = sampler.finish();
    drop(held);
    let outcomes = Arc::try_unwrap(outcomes).unwrap_or_default();
    Ok(FloodResult {
        outcomes,
        baseline,
        peak,
        took,
    })
}

/// Items 1 and 2: mtu sessions whose client sends `down-target` (the server opens a connected
/// UDP probe socket for it), then leaves. `addresses` × `per_address` sessions, `concurrency`
/// at once. What does the server hold while they run and after the attacker has gone?
pub struct ProbeSocketResult {
    pub outcomes: Outcomes,
    /// Sessions whose down-target the server answered with the client's UDP address.
    pub probe_sockets: u32,
    pub baseline: Readings,
    pub peak: Readings,
    /// Readings at these times after the last attacker connection closed.
    pub after: Vec<(Duration, Readings)>,
}

pub async fn mtu_probe_sockets(
    target: Target,
    block: u8,
    addresses: u32,
    per_address: u32,
    concurrency: usize,
    after: &[Duration],
) -> anyhow::Result<ProbeSocketResult> {
    use pathdoc_mtu::wire::{Reply, Request, KIND_OPEN};
    let baseline = read(&target, false);
    let sampler = Sampler::start(target, Duration::from_millis(100), false);
    let outcomes = Arc::new(Outcomes::default());
    let sockets = Arc::new(AtomicU32::new(0));
    let slots = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    for a in 0..addresses {
        for _ in 0..per_address {
            let slot = slots.clone().acquire_owned().await?;
            let source = crate::net::source(block, a);
            let (outcomes, sockets, server) = (outcomes.clone(), sockets.clone(), target.addr);
            tasks.spawn(async move {
                let _slot = slot;
                let Some((mut conn, session)) =
                    open(source, server, control(CheckKind::Mtu), &outcomes).await
                else {
                    return;
                };
                let steps = async {
                    conn.send(&Request::Start).await?;
                    conn.recv_timeout::<Reply>(STEP, "started").await?;
                    let udp = udp_from(source).await?;
                    let mut open = Vec::new();
                    UdpHeader {
                        session,
                        kind: KIND_OPEN,
                    }
                    .encode(&mut open);
                    open.extend_from_slice(&[0u8; 8]);
                    for _ in 0..20 {
                        udp.send_to(&open, server).await?;
                        conn.send(&Request::DownTarget).await?;
                        if let Reply::DownTarget {
                            client_udp: Some(_),
                            ..
                        } = conn.recv_timeout::<Reply>(STEP, "down-target").await?
                        {
                            sockets.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    anyhow::Ok(())
                };
                if let Err(e) = steps.await {
                    outcomes.error(format!("{e:#}"));
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    let peak = sampler.finish();
    let left = Instant::now();
    let mut later = Vec::new();
    for &t in after {
        tokio::time::sleep(t.saturating_sub(left.elapsed())).await;
        later.push((t, read(&target, false)));
    }
    Ok(ProbeSocketResult {
        outcomes: Arc::try_unwrap(outcomes).unwrap_or_default(),
        probe_sockets: sockets.load(Ordering::Relaxed),
        baseline,
        peak,
        after: later,
    })
}

/// Item 3: kernel memory. One mtu session from `source` opens `connections` bulk-download data
/// connections (5 s each) and never reads them, holding them for `hold`. How many bytes does
/// the server queue, and does it keep them (orphans) after its own deadline?
pub struct BulkResult {
    pub outcomes: Outcomes,
    pub baseline: Readings,
    pub peak: Readings,
    /// While the attacker still holds its connections, 2 s after the server's 5 s deadline.
    pub after_deadline: Readings,
    /// 1 s after the attacker closed everything.
    pub after_leave: Readings,
}

pub async fn bulk_queues(
    target: Target,
    source: IpAddr,
    connections: u32,
    hold: Duration,
) -> anyhow::Result<BulkResult> {
    use pathdoc_mtu::wire::{BulkRequest, Reply, Request, MAX_BULK_MS, TAG_BULK};
    let baseline = read(&target, true);
    let outcomes = Outcomes::default();
    let (mut ctl, session) = open(source, target.addr, control(CheckKind::Mtu), &outcomes)
        .await
        .context("opening the mtu session")?;
    ctl.send(&Request::Start).await?;
    ctl.recv_timeout::<Reply>(STEP, "started").await?;
    let sampler = Sampler::start(target, Duration::from_millis(250), true);
    let start = Instant::now();
    let mut held = Vec::new();
    for _ in 0..connections {
        let channel = Channel::Data {
            session,
            tag: TAG_BULK,
        };
        if let Some((mut conn, _)) = open(source, target.addr, channel, &outcomes).await {
            if conn
                .send(&BulkRequest {
                    duration_ms: MAX_BULK_MS,
                })
                .await
                .is_ok()
            {
                held.push(conn);
            }
        }
    }
    let deadline = Duration::from_millis(u64::from(MAX_BULK_MS)) + Duration::from_secs(2);
    tokio::time::sleep(deadline.saturating_sub(start.elapsed())).await;
    let after_deadline = read(&target, true);
    tokio::time::sleep(hold.saturating_sub(start.elapsed())).await;
    let peak = sampler.finish();
    // Leave abruptly, as an attacker would (unread data: the kernel resets).
    for mut conn in held {
        let _ = conn.stream_mut().shutdown().await;
    }
    drop(ctl);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_leave = read(&target, true);
    Ok(BulkResult {
        outcomes,
        baseline,
        peak,
        after_deadline,
        after_leave,
    })
}

/// Item 5: many sessions from many addresses, each left to linger (control connection closed).
/// Meanwhile an unrelated client times its handshakes. What do sessions cost, and does
/// admission slow down?
pub struct SessionFloodResult {
    pub outcomes: Outcomes,
    pub baseline: Readings,
    pub peak: Readings,
    pub took: Duration,
    /// Handshake times of the unrelated client during the flood, sorted.
    pub handshakes: Vec<Duration>,
    /// How the unrelated client's attempts ended.
    pub observer: Outcomes,
}

pub async fn session_flood(
    target: Target,
    block: u8,
    addresses: u32,
    per_address: u32,
    concurrency: usize,
    observer_block: u8,
) -> anyhow::Result<SessionFloodResult> {
    let baseline = read(&target, false);
    let sampler = Sampler::start(target, Duration::from_millis(200), false);
    let outcomes = Arc::new(Outcomes::default());
    let done = Arc::new(AtomicBool::new(false));
    // The observer uses a fresh address for every handshake, so that its own lingering
    // sessions never count against it.
    let observer_task = {
        let (done, server) = (done.clone(), target.addr);
        tokio::spawn(async move {
            let mut times = Vec::new();
            let quiet = Outcomes::default();
            let mut i = 0;
            while !done.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let from = crate::net::source(observer_block, i);
                i += 1;
                if let Some((conn, _)) = open(from, server, control(CheckKind::Idle), &quiet).await
                {
                    times.push(t0.elapsed());
                    drop(conn);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (times, quiet)
        })
    };
    let slots = Arc::new(Semaphore::new(concurrency));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for a in 0..addresses {
        for _ in 0..per_address {
            let slot = slots.clone().acquire_owned().await?;
            let source = crate::net::source(block, a);
            let (outcomes, server) = (outcomes.clone(), target.addr);
            tasks.spawn(async move {
                let _slot = slot;
                drop(open(source, server, control(CheckKind::Idle), &outcomes).await);
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    let took = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let (mut handshakes, observer) = observer_task.await.unwrap_or_default();
    handshakes.sort();
    let peak = sampler.finish();
    Ok(SessionFloodResult {
        outcomes: Arc::try_unwrap(outcomes).unwrap_or_default(),
        baseline,
        peak,
        took,
        handshakes,
        observer,
    })
}

/// Item 5 (refresh) and 6 (de-duplication): one idle session opens a UDP binding and asks for
/// `udp-refresh` naming its tag `copies` times every 200 ms. How much does the server send in
/// `window`, and does it keep sending after the client's control connection closed?
pub struct RefreshResult {
    /// The server's answer to the request (`ok` or its error message).
    pub reply: String,
    pub bytes_in_window: u64,
    pub datagrams_in_window: u64,
    /// Datagrams that arrived in `after` once the control connection was closed (after a 1 s
    /// allowance for the server to notice).
    pub datagrams_after_leaving: u64,
}

pub async fn udp_refresh(
    target: Target,
    source: IpAddr,
    copies: u32,
    window: Duration,
    after: Duration,
) -> anyhow::Result<RefreshResult> {
    use pathdoc_idle::proto::{udp_kind, ControlReply, ControlRequest, UdpPayload};
    let outcomes = Outcomes::default();
    let (mut ctl, session) = open(source, target.addr, control(CheckKind::Idle), &outcomes)
        .await
        .context("opening the idle session")?;
    let udp = udp_from(source).await?;
    // A receive buffer big enough that the kernel drops nothing the server sends.
    let bytes: libc::c_int = 64 << 20;
    // SAFETY: setsockopt reads `bytes` for the given length; the fd is owned by `udp`.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&udp),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let mut datagram = Vec::new();
    UdpHeader {
        session,
        kind: udp_kind::OPEN,
    }
    .encode(&mut datagram);
    datagram.extend_from_slice(
        &UdpPayload {
            tag: 1,
            nonce: 1,
            observed: None,
        }
        .encode(pathdoc_idle::proto::UDP_PAD),
    );
    udp.send_to(&datagram, target.addr).await?;
    let mut buf = vec![0u8; 65536];
    tokio::time::timeout(STEP, udp.recv_from(&mut buf))
        .await
        .context("no answer to the UDP open")??;
    ctl.send(&ControlRequest::UdpRefresh {
        tags: vec![1; copies as usize],
        interval_ms: 200,
    })
    .await?;
    let reply = match ctl
        .recv_timeout::<ControlReply>(STEP, "refresh reply")
        .await
    {
        Ok(ControlReply::Ok) => "ok".to_string(),
        Ok(ControlReply::Error { message }) => message,
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error: {e}"),
    };
    let (bytes, datagrams) = count_datagrams(&udp, window).await;
    drop(ctl);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Drain what was sent before the server could notice, then count.
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::ZERO, udp.recv_from(&mut buf)).await {}
    let (_, after_leaving) = count_datagrams(&udp, after).await;
    Ok(RefreshResult {
        reply,
        bytes_in_window: bytes,
        datagrams_in_window: datagrams,
        datagrams_after_leaving: after_leaving,
    })
}

async fn count_datagrams(udp: &tokio::net::UdpSocket, window: Duration) -> (u64, u64) {
    let mut buf = vec![0u8; 65536];
    let (mut bytes, mut datagrams) = (0, 0);
    let end = tokio::time::Instant::now() + window;
    while let Ok(Ok((n, _))) = tokio::time::timeout_at(end, udp.recv_from(&mut buf)).await {
        bytes += n as u64;
        datagrams += 1;
    }
    (bytes, datagrams)
}

/// Item 6: concurrent throughput tests from many addresses, each asking for `streams` upload
/// streams and never sending: how many threads does the server start?
pub struct StreamsResult {
    pub outcomes: Outcomes,
    /// Tests the server started (answered `started`).
    pub started: u32,
    /// Tests the server refused with a reason (`refused` message of the speed check).
    pub refused_tests: u32,
    pub first_test_refusal: Option<String>,
    pub baseline: Readings,
    pub peak: Readings,
}

pub async fn stream_threads(
    target: Target,
    block: u8,
    tests: u32,
    streams: u32,
    duration: Duration,
) -> anyhow::Result<StreamsResult> {
    use pathdoc_speed::spec::{stream_tag, ClientMsg, Direction, Mode, ServerMsg, TestSpec};
    let baseline = read(&target, false);
    let sampler = Sampler::start(target, Duration::from_millis(100), false);
    let outcomes = Arc::new(Outcomes::default());
    let started = Arc::new(AtomicU32::new(0));
    let refused = Arc::new(AtomicU32::new(0));
    let first_refusal = Arc::new(Mutex::new(None::<String>));
    let mut tasks = JoinSet::new();
    for t in 0..tests {
        let source = crate::net::source(block, t);
        let (outcomes, started, refused, first_refusal, server) = (
            outcomes.clone(),
            started.clone(),
            refused.clone(),
            first_refusal.clone(),
            target.addr,
        );
        tasks.spawn(async move {
            let Some((ctl, session)) =
                open(source, server, control(CheckKind::Speed), &outcomes).await
            else {
                return;
            };
            let (mut rd, mut wr) = ctl.into_inner().into_split();
            let spec = TestSpec {
                mode: Mode::Upload,
                streams,
                duration_ms: duration.as_millis() as u64,
                bytes: None,
                server_cc: None,
                window: None,
                interval_ms: 1000,
            };
            let refuse = |reason: String| {
                refused.fetch_add(1, Ordering::Relaxed);
                first_refusal
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(reason);
            };
            if write_frame(&mut wr, &ClientMsg::Start(spec)).await.is_err() {
                return;
            }
            match tokio::time::timeout(STEP, read_frame::<_, ServerMsg>(&mut rd)).await {
                Ok(Ok(ServerMsg::Accepted { .. })) => {}
                Ok(Ok(ServerMsg::Refused { reason, .. })) => return refuse(reason),
                other => return outcomes.error(format!("start: {other:?}")),
            }
            let mut data = Vec::new();
            for i in 0..streams {
                let channel = Channel::Data {
                    session,
                    tag: stream_tag(Direction::Upload, i),
                };
                if let Some((conn, _)) = open(source, server, channel, &outcomes).await {
                    data.push(conn);
                }
            }
            match tokio::time::timeout(STEP, read_frame::<_, ServerMsg>(&mut rd)).await {
                Ok(Ok(ServerMsg::Started)) => {
                    started.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Ok(ServerMsg::Refused { reason, .. })) => return refuse(reason),
                other => return outcomes.error(format!("started: {other:?}")),
            }
            // Send nothing; hold until the server's own end of the test.
            tokio::time::sleep(duration + Duration::from_secs(1)).await;
            drop(data);
        });
    }
    while tasks.join_next().await.is_some() {}
    let peak = sampler.finish();
    let first_test_refusal = first_refusal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    Ok(StreamsResult {
        outcomes: Arc::try_unwrap(outcomes).unwrap_or_default(),
        started: started.load(Ordering::Relaxed),
        refused_tests: refused.load(Ordering::Relaxed),
        first_test_refusal,
        baseline,
        peak,
    })
}

/// Memory: idle sessions from `sessions` addresses, each registering `bindings` UDP bindings
/// (one datagram each, the cheapest state a client can make the server keep), then leaving them
/// to linger. What does the server's memory grow by per session?
pub struct RecordsResult {
    pub outcomes: Outcomes,
    /// Bindings the server answered (so registered).
    pub registered: u64,
    pub baseline: Readings,
    pub after: Readings,
}

pub async fn idle_records(
    target: Target,
    block: u8,
    sessions: u32,
    bindings: u32,
) -> anyhow::Result<RecordsResult> {
    use pathdoc_idle::proto::{udp_kind, UdpPayload, UDP_PAD};
    let baseline = read(&target, false);
    let outcomes = Outcomes::default();
    let mut registered = 0u64;
    for a in 0..sessions {
        let from = crate::net::source(block, a);
        let Some((ctl, session)) =
            open(from, target.addr, control(CheckKind::Idle), &outcomes).await
        else {
            continue;
        };
        let udp = udp_from(from).await?;
        let mut buf = vec![0u8; 2048];
        // In bursts of 64, then collect the answers (one per registered binding).
        for first in (0..bindings).step_by(64) {
            for tag in first..(first + 64).min(bindings) {
                let mut d = Vec::new();
                UdpHeader {
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
                udp.send_to(&d, target.addr).await?;
            }
            while let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(50), udp.recv_from(&mut buf)).await
            {
                registered += 1;
            }
        }
        drop(ctl);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(RecordsResult {
        outcomes,
        registered,
        baseline,
        after: read(&target, false),
    })
}

/// The `p`-th percentile of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Bytes counter for reports.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
