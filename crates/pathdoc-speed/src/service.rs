//! Server side of the speed check: a [`Service`] that accepts a test spec on the control
//! connection, attaches the session's data connections, runs their hot loops on threads and
//! streams its TCP_INFO samples and CPU use back to the client.
//!
//! Bounds: at most [`MAX_STREAMS`] streams per direction, test length capped at the server's
//! `max_test_duration`, every wait has a deadline, and the data threads stop on their own at the
//! hard deadline even if the control connection vanishes.

use std::collections::HashSet;
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pathdoc_proto::{read_frame, write_frame, CheckKind, FramedConn};
use pathdoc_server::{Service, ServiceError, Session};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::spec::{
    parse_tag, stream_tag, ClientMsg, Direction, ServerMsg, SideSample, TestSpec, MAX_STREAMS,
};
use crate::stream::{configure, RunningStream, StopRule};

/// How long the client has to attach all data connections after `Accepted`.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a control connection may sit idle between tests.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Slack after the test's end before the server stops by itself.
const GRACE: Duration = Duration::from_secs(3);

/// The speed check's server side.
#[derive(Debug, Default)]
pub struct SpeedService {
    /// Requests of each capacity-probe train so far ([`crate::train`]).
    trains: crate::train::TrainCounter,
}

impl SpeedService {
    pub fn new() -> Self {
        SpeedService::default()
    }
}

#[derive(Default)]
struct SessionState {
    inner: Mutex<StateInner>,
    attached: Notify,
}

#[derive(Default)]
struct StateInner {
    spec: Option<TestSpec>,
    expected: HashSet<u32>,
    attached: Vec<(u32, Arc<TcpStream>, oneshot::Sender<()>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Check a client's spec against the server's limits; the returned spec is what will run.
pub fn validate(spec: &TestSpec, max_duration: Duration) -> Result<TestSpec, String> {
    if spec.streams == 0 || spec.streams > MAX_STREAMS {
        return Err(format!(
            "streams must be 1..={MAX_STREAMS}, got {}",
            spec.streams
        ));
    }
    if spec.duration_ms == 0 {
        return Err("test duration must be positive".into());
    }
    if !(100..=5000).contains(&spec.interval_ms) {
        return Err(format!(
            "sampling interval must be 100..=5000 ms, got {}",
            spec.interval_ms
        ));
    }
    if let Some(w) = spec.window {
        if !(4096..=(1 << 30)).contains(&w) {
            return Err(format!("window must be 4 KiB..1 GiB, got {w}"));
        }
    }
    if let Some(cc) = &spec.server_cc {
        if cc.is_empty()
            || cc.len() > 15
            || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(format!("invalid congestion control name {cc:?}"));
        }
    }
    let mut out = spec.clone();
    out.duration_ms = spec.duration_ms.min(max_duration.as_millis() as u64);
    Ok(out)
}

fn tags(spec: &TestSpec) -> HashSet<u32> {
    let mut t = HashSet::new();
    for i in 0..spec.streams {
        if spec.mode.uploads() {
            t.insert(stream_tag(Direction::Upload, i));
        }
        if spec.mode.downloads() {
            t.insert(stream_tag(Direction::Download, i));
        }
    }
    t
}

/// Whether this host accepts `cc` on a TCP socket (loads the module when allowed).
fn cc_usable(cc: &str) -> Result<(), String> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|e| e.to_string())?;
    pathdoc_sys::tcp_info::set_congestion_control(&sock, cc)
        .map_err(|e| format!("the server cannot use congestion control {cc:?}: {e}"))
}

pub(crate) fn side_sample(streams: &[RunningStream], t0: Instant, cpu0: f64) -> SideSample {
    let cpu = pathdoc_sys::cpu_usage::process_cpu_time()
        .map(|c| c.total())
        .unwrap_or(cpu0);
    SideSample {
        t: t0.elapsed().as_secs_f64(),
        cpu_seconds: cpu - cpu0,
        streams: streams.iter().filter_map(|s| s.sample().ok()).collect(),
        host_cpu: pathdoc_sys::cpu_usage::host_cpu_times().ok(),
    }
}

#[async_trait]
impl Service for SpeedService {
    fn check(&self) -> CheckKind {
        CheckKind::Speed
    }

    /// A capacity-probe train: on its last request, as many replies of the same size as
    /// requests arrived, back to back (their spread at the client measures the bottleneck).
    async fn udp(
        &self,
        session: Arc<Session>,
        kind: u16,
        payload: &[u8],
        from: std::net::SocketAddr,
    ) -> Option<Vec<u8>> {
        if kind != crate::train::REQUEST {
            return None;
        }
        let msg = crate::train::TrainMsg::decode(payload)?;
        let (arrived, len) = self.trains.note(session.id, msg, payload.len())?;
        let t0 = std::time::Instant::now();
        for seq in 0..arrived {
            // The send time lets the client tell the path's spreading from the sender's own.
            let reply = crate::train::TrainMsg {
                train: msg.train,
                seq,
                count: arrived,
                sent_ns: t0.elapsed().as_nanos() as u64,
            };
            let mut body = reply.encode();
            // Never more bytes than the requests brought (anti-amplification).
            body.truncate(len);
            if session
                .send_udp(from, crate::train::REPLY, &body)
                .await
                .is_err()
            {
                break;
            }
        }
        None
    }

    async fn control(
        &self,
        session: Arc<Session>,
        conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        let state = session.state::<SessionState>();
        let peer = conn.peer();
        let (mut rd, mut wr) = conn.into_inner().into_split();
        let (tx, mut rx) = mpsc::channel::<Result<ClientMsg, pathdoc_proto::ProtoError>>(4);
        let reader = tokio::spawn(async move {
            loop {
                let msg = read_frame::<_, ClientMsg>(&mut rd).await;
                // A frame that is not a message of ours is answered and the connection goes
                // on; anything else (closed, oversized, broken) ends it.
                let end =
                    matches!(&msg, Err(e) if !matches!(e, pathdoc_proto::ProtoError::Malformed(_)));
                if tx.send(msg).await.is_err() || end {
                    return;
                }
            }
        });
        let result = async {
            loop {
                let msg = match tokio::time::timeout(IDLE_TIMEOUT, rx.recv()).await {
                    Err(_) => return Ok(()),
                    Ok(None) | Ok(Some(Err(pathdoc_proto::ProtoError::Closed))) => return Ok(()),
                    Ok(Some(Err(pathdoc_proto::ProtoError::Malformed(m)))) => {
                        let reason = format!("malformed message: {m}");
                        send(&mut wr, &ServerMsg::Refused { reason, load: None }).await?;
                        continue;
                    }
                    Ok(Some(Err(e))) => {
                        let reason = e.to_string();
                        let _ = send(&mut wr, &ServerMsg::Refused { reason, load: None }).await;
                        return Err(e.into());
                    }
                    Ok(Some(Ok(m))) => m,
                };
                // A late stop after the test ended by itself: nothing to do.
                let ClientMsg::Start(spec) = msg else {
                    continue;
                };
                let checked = validate(&spec, session.limits.max_test_duration)
                    .and_then(|s| s.server_cc.as_deref().map(cc_usable).transpose().map(|_| s));
                let spec = match checked {
                    Ok(s) => s,
                    Err(reason) => {
                        send(&mut wr, &ServerMsg::Refused { reason, load: None }).await?;
                        continue;
                    }
                };
                // One thread per stream: the server-wide stream budget decides, before anything
                // is started, and the client is told why when it says no.
                let threads = tags(&spec).len() as u32;
                let hold = match session.budgets().streams.try_take(session.client, threads) {
                    Ok(hold) => hold,
                    Err(refuse) => {
                        session.refused(peer, &refuse);
                        send(
                            &mut wr,
                            &ServerMsg::Refused {
                                reason: refuse.message,
                                load: Some(pathdoc_proto::LoadLimit {
                                    reason: refuse.reason.to_string(),
                                    limit: refuse.limit,
                                }),
                            },
                        )
                        .await?;
                        continue;
                    }
                };
                run_one_test(&session, &state, spec, &mut wr, &mut rx).await?;
                drop(hold);
            }
        }
        .await;
        reader.abort();
        let mut inner = lock(&state.inner);
        inner.spec = None;
        inner.expected.clear();
        inner.attached.clear();
        result
    }

    fn admit_data(
        &self,
        session: &Arc<Session>,
        tag: u32,
    ) -> Result<Option<pathdoc_server::Reservation>, pathdoc_server::Refuse> {
        let state = session.state::<SessionState>();
        let inner = lock(&state.inner);
        let message = match &inner.spec {
            None => "a data connection before a test was started (send start first)".to_string(),
            Some(_) if !inner.expected.contains(&tag) => {
                format!("data stream tag {tag:#x} is not one the running test expects")
            }
            Some(_) => return Ok(None),
        };
        Err(pathdoc_server::Refuse {
            reason: "unexpected-data",
            limit: 0,
            message,
        })
    }

    async fn data(
        &self,
        session: Arc<Session>,
        tag: u32,
        conn: FramedConn,
        _permit: pathdoc_server::ConnectionPermit,
    ) -> Result<(), ServiceError> {
        let state = session.state::<SessionState>();
        let stream = conn.into_inner().into_std()?;
        stream.set_nonblocking(false)?;
        let (done_tx, done_rx) = oneshot::channel();
        {
            let mut inner = lock(&state.inner);
            let Some(spec) = inner.spec.clone() else {
                return Err(ServiceError::BadRequest(
                    "data connection before a test was started".into(),
                ));
            };
            if !inner.expected.remove(&tag) {
                return Err(ServiceError::BadRequest(format!(
                    "unexpected data stream tag {tag:#x}"
                )));
            }
            let sending = parse_tag(tag).0 == Direction::Download;
            configure(
                &stream,
                stream_window(spec.window, sending, tcp_wmem_max()),
                if sending {
                    spec.server_cc.as_deref()
                } else {
                    None
                },
            )?;
            inner.attached.push((tag, Arc::new(stream), done_tx));
        }
        state.attached.notify_one();
        // Keep the connection (and its permit) alive until the test is over.
        let limit = session.limits.max_test_duration + ATTACH_TIMEOUT + GRACE * 4;
        let _ = tokio::time::timeout(limit, done_rx).await;
        Ok(())
    }
}

async fn run_one_test(
    session: &Session,
    state: &SessionState,
    spec: TestSpec,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    rx: &mut mpsc::Receiver<Result<ClientMsg, pathdoc_proto::ProtoError>>,
) -> Result<(), ServiceError> {
    let want = tags(&spec);
    {
        let mut inner = lock(&state.inner);
        inner.spec = Some(spec.clone());
        inner.expected = want.clone();
        inner.attached.clear();
    }
    send(
        wr,
        &ServerMsg::Accepted {
            duration_ms: spec.duration_ms,
            host: crate::host::tcp_settings(),
        },
    )
    .await?;
    let attach_deadline = Instant::now() + ATTACH_TIMEOUT;
    loop {
        if lock(&state.inner).attached.len() == want.len() {
            break;
        }
        let left = attach_deadline.saturating_duration_since(Instant::now());
        if left.is_zero()
            || tokio::time::timeout(left, state.attached.notified())
                .await
                .is_err()
        {
            let reason = {
                let mut inner = lock(&state.inner);
                let reason = format!(
                    "only {} of {} data connections arrived within {:?}",
                    inner.attached.len(),
                    want.len(),
                    ATTACH_TIMEOUT
                );
                inner.spec = None;
                inner.attached.clear();
                reason
            };
            send(wr, &ServerMsg::Refused { reason, load: None }).await?;
            return Ok(());
        }
    }
    let attached = std::mem::take(&mut lock(&state.inner).attached);
    lock(&state.inner).spec = None;
    let duration = Duration::from_millis(spec.duration_ms);
    let t0 = Instant::now();
    let cpu0 = pathdoc_sys::cpu_usage::process_cpu_time()
        .map(|c| c.total())
        .unwrap_or(0.0);
    let stop = Arc::new(AtomicBool::new(false));
    let hard_end = t0 + duration + GRACE;
    let mut streams = Vec::new();
    let mut done = Vec::new();
    for (tag, stream, done_tx) in attached {
        let sending = parse_tag(tag).0 == Direction::Download;
        let budget = if sending {
            spec.stream_byte_budget(tag)
        } else {
            None
        };
        let rule = StopRule {
            stop: stop.clone(),
            deadline: hard_end,
            byte_budget: budget,
        };
        match RunningStream::start(tag, sending, stream, rule) {
            Ok(s) => streams.push(s),
            Err(e) => {
                // Out of threads (a task limit): stop what started and say so.
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                finish_streams(streams).await;
                let reason = format!("the server could not start a stream thread: {e}");
                send(wr, &ServerMsg::Refused { reason, load: None }).await?;
                return Ok(());
            }
        }
        done.push(done_tx);
    }
    streams.sort_by_key(|s| s.tag);
    send(wr, &ServerMsg::Started).await?;
    let first = side_sample(&streams, t0, cpu0);
    send(wr, &ServerMsg::Samples { sample: first }).await?;
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_millis(spec.interval_ms),
        Duration::from_millis(spec.interval_ms),
    );
    let outcome: Result<(), ServiceError> = loop {
        tokio::select! {
            _ = tick.tick() => {
                let sample = side_sample(&streams, t0, cpu0);
                if let Err(e) = send(wr, &ServerMsg::Samples { sample }).await {
                    break Err(e);
                }
            }
            msg = rx.recv() => match msg {
                Some(Ok(ClientMsg::Stop)) => break Ok(()),
                Some(Ok(ClientMsg::Start(_))) => break Err(ServiceError::BadRequest("Start while a test is running".into())),
                Some(Err(e)) => break Err(e.into()),
                None => break Ok(()),
            },
            _ = tokio::time::sleep_until(hard_end.into()) => break Ok(()),
            _ = session.cancel.cancelled() => break Ok(()),
        }
    };
    // In byte mode the client stops once it has read every byte; our last ACKs may still be in
    // flight, and the final sample must count them, so wait (bounded) until all is acknowledged.
    if spec.bytes.is_some() {
        let patience = tokio::time::Instant::now() + Duration::from_secs(2);
        while streams.iter().any(|s| s.sending && !s.delivered_all())
            && tokio::time::Instant::now() < patience
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // The state at the moment the client said stop: the end of the measured interval.
    let last = side_sample(&streams, t0, cpu0);
    session.add_bytes(
        last.streams.iter().map(|s| s.info.bytes_acked).sum(),
        last.streams.iter().map(|s| s.info.bytes_received).sum(),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let streams = join_streams(streams).await;
    let finished = match outcome {
        Ok(()) => send(wr, &ServerMsg::Finished { sample: last }).await,
        Err(e) => Err(e),
    };
    // The client has its results; what the server still queues for a client that does not
    // read is released instead of lingering in orphaned sockets.
    release_streams(streams).await;
    for d in done {
        let _ = d.send(());
    }
    finished
}

/// How long a finished download's queued bytes may take to reach a reading client before the
/// server resets the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Wait for the stream threads (they stop within [`crate::stream::POLL`] of the stop flag).
async fn join_streams(mut streams: Vec<RunningStream>) -> Vec<RunningStream> {
    let joined = tokio::task::spawn_blocking(move || {
        for s in &mut streams {
            let _ = s.join();
        }
        streams
    })
    .await;
    joined.unwrap_or_else(|_| {
        tracing::warn!("speed data threads panicked");
        Vec::new()
    })
}

/// Close finished streams without leaving their send queues behind.
async fn release_streams(streams: Vec<RunningStream>) {
    let sockets: Vec<&TcpStream> = streams.iter().map(|s| &*s.stream).collect();
    pathdoc_server::closing::release_send_queues(&sockets, CLOSE_GRACE).await;
}

async fn finish_streams(streams: Vec<RunningStream>) {
    release_streams(join_streams(streams).await).await;
}

/// Write one control message, bounded by [`pathdoc_server::SEND_TIMEOUT`].
async fn send(
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    msg: &ServerMsg,
) -> Result<(), ServiceError> {
    let t = pathdoc_server::SEND_TIMEOUT;
    tokio::time::timeout(t, write_frame(wr, msg))
        .await
        .map_err(|_| pathdoc_proto::ProtoError::Timeout(t, "the client to read"))??;
    Ok(())
}

/// The window (SO_SNDBUF/SO_RCVBUF) a server stream gets: the client's, except that a stream
/// the server sends on gets at most half of `net.ipv4.tcp_wmem`'s max, because the kernel
/// doubles what is set: so no client window gives a stream more kernel send memory than
/// autotuning could, and the server's total stays within docs/server.md's bound
/// (streams × tcp_wmem max).
pub fn stream_window(window: Option<u32>, sending: bool, wmem_max: u64) -> Option<u32> {
    let cap = u32::try_from(wmem_max / 2).unwrap_or(u32::MAX).max(4096);
    window.map(|w| if sending { w.min(cap) } else { w })
}

/// `net.ipv4.tcp_wmem`'s max here (4 MiB when unreadable, the kernel's usual value).
fn tcp_wmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_window_never_buys_a_sending_stream_more_than_tcp_wmem() {
        use super::stream_window;
        let four_mib = 4 << 20;
        // The kernel doubles SO_SNDBUF: 2 MiB set is the 4 MiB autotuning could reach.
        assert_eq!(stream_window(Some(1 << 30), true, four_mib), Some(2 << 20));
        assert_eq!(
            stream_window(Some(64 << 10), true, four_mib),
            Some(64 << 10)
        );
        // Receiving streams keep the client's window (it is receive memory, capped by rmem).
        assert_eq!(stream_window(Some(1 << 30), false, four_mib), Some(1 << 30));
        assert_eq!(stream_window(None, true, four_mib), None);
        // The doubled value really stays within tcp_wmem's max on this kernel.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let wmem = super::tcp_wmem_max();
        let w = stream_window(Some(1 << 30), true, wmem).unwrap();
        super::configure(&s, Some(w), None).unwrap();
        let sndbuf = socket2::SockRef::from(&s).send_buffer_size().unwrap() as u64;
        assert!(sndbuf <= wmem.max(8192), "{sndbuf} > {wmem}");
    }
    use super::*;
    use crate::spec::Mode;

    fn spec() -> TestSpec {
        TestSpec {
            mode: Mode::Both,
            streams: 2,
            duration_ms: 5000,
            bytes: None,
            server_cc: None,
            window: None,
            interval_ms: 1000,
        }
    }

    #[test]
    fn validation_bounds_every_field() {
        let max = Duration::from_secs(3);
        assert_eq!(
            validate(&spec(), max).unwrap().duration_ms,
            3000,
            "capped at the server limit"
        );
        let bad: &[fn(&mut TestSpec)] = &[
            |s| s.streams = 0,
            |s| s.streams = MAX_STREAMS + 1,
            |s| s.duration_ms = 0,
            |s| s.interval_ms = 10,
            |s| s.window = Some(1),
            |s| s.server_cc = Some("../../etc".into()),
        ];
        for tweak in bad {
            let mut s = spec();
            tweak(&mut s);
            assert!(validate(&s, max).is_err(), "{s:?}");
        }
        assert_eq!(tags(&spec()).len(), 4);
    }
}
