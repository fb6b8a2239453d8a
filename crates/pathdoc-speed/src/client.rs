//! Client side of the speed check: negotiate a test, open the data streams, run the hot loops,
//! sample TCP_INFO on both ends every interval, and turn the samples into [`DirectionResult`]s.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use pathdoc_core::units::format_rate;
use pathdoc_core::Progress;
use pathdoc_proto::{read_frame, write_frame, Channel, CheckKind, ProtoError};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::analysis::{
    wire_estimate, DirectionResult, HostCpuUse, Interval, SenderTotals, Side, StreamInterval,
};
use crate::service::side_sample;
use crate::spec::{
    parse_tag, stream_tag, ClientMsg, Direction, HostTcpSettings, Mode, ServerMsg, SideSample,
    StreamSample, TestSpec,
};
use crate::stream::{configure, RunningStream, StopRule};

/// Deadline for connecting and for each handshake and control answer.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// After Ctrl-C, how long to wait for the server's last samples before giving up on them.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeedOptions {
    pub mode: Mode,
    pub streams: u32,
    pub duration: Duration,
    pub bytes: Option<u64>,
    /// Congestion control for the senders on both ends.
    pub cc: Option<String>,
    /// SO_SNDBUF/SO_RCVBUF on both ends.
    pub window: Option<u32>,
    pub interval: Duration,
}

impl Default for SpeedOptions {
    fn default() -> Self {
        SpeedOptions {
            mode: Mode::Upload,
            streams: 1,
            duration: Duration::from_secs(10),
            bytes: None,
            cc: None,
            window: None,
            interval: Duration::from_secs(1),
        }
    }
}

/// Why a test could not run.
#[derive(Debug, thiserror::Error)]
pub enum SpeedError {
    #[error("cannot reach the pathdoc server at {server}")]
    Connect {
        server: SocketAddr,
        source: ProtoError,
    },
    #[error("the server refused the test: {0}")]
    Refused(String),
    /// The server had no room for the test (its session or its streams): a `server-busy`
    /// WARN in the report, not a failure.
    #[error("the server was busy: {}", .0.message)]
    Busy(pathdoc_core::busy::ServerBusy),
    #[error("protocol error")]
    Proto(#[from] ProtoError),
    #[error("I/O error on a data stream")]
    Io(#[from] std::io::Error),
    #[error("the server stopped answering: {0}")]
    Lost(String),
}

/// A `refused` answer: for want of room (it names its bound) the server was busy.
fn refused(reason: String, load: Option<pathdoc_proto::LoadLimit>) -> SpeedError {
    match load {
        Some(load) => SpeedError::Busy(busy_of(reason, Some(load))),
        None => SpeedError::Refused(reason),
    }
}

/// A connection the server turned away. A refusal for want of room is recognised by its code
/// (`limit-exceeded`), not by the `load` field: servers before that field send the code alone,
/// and their refused stream connections read as a failure otherwise.
fn refused_connection(e: ProtoError) -> SpeedError {
    match e {
        ProtoError::Refused(r) if r.is_load() => SpeedError::Busy(busy_of(r.message, r.load)),
        e => SpeedError::Proto(e),
    }
}

fn busy_of(
    message: String,
    load: Option<pathdoc_proto::LoadLimit>,
) -> pathdoc_core::busy::ServerBusy {
    let (reason, limit) = load.map(|l| (l.reason, l.limit)).unzip();
    pathdoc_core::busy::ServerBusy::new(message, reason, limit)
}

/// One complete test: the directions measured and both hosts' settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedRun {
    pub mode: Mode,
    pub congestion_control: Option<String>,
    pub directions: Vec<DirectionResult>,
    pub client_host: HostTcpSettings,
    pub server_host: HostTcpSettings,
    /// The user interrupted the test: `directions` hold what was measured until then.
    #[serde(default)]
    pub interrupted: bool,
}

async fn open_data(
    server: SocketAddr,
    token: Option<String>,
    session: pathdoc_proto::SessionId,
    tag: u32,
    opts: &SpeedOptions,
) -> Result<Arc<std::net::TcpStream>, SpeedError> {
    let socket = if server.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    pathdoc_sys::source::bind_tcp(&socket, &server)?;
    if let Some(w) = opts.window {
        // Before connect, so the window scale in our SYN matches the buffer.
        socket.set_recv_buffer_size(w)?;
        socket.set_send_buffer_size(w)?;
    }
    let stream = tokio::time::timeout(STEP_TIMEOUT, socket.connect(server))
        .await
        .map_err(|_| SpeedError::Connect {
            server,
            source: ProtoError::Timeout(STEP_TIMEOUT, "data connection"),
        })?
        .map_err(|e| SpeedError::Connect {
            server,
            source: e.into(),
        })?;
    let (conn, _) =
        pathdoc_proto::handshake(stream, token, Channel::Data { session, tag }, STEP_TIMEOUT)
            .await
            .map_err(refused_connection)?;
    let stream = conn.into_inner().into_std()?;
    stream.set_nonblocking(false)?;
    let sending = parse_tag(tag).0 == Direction::Upload;
    configure(
        &stream,
        None,
        if sending { opts.cc.as_deref() } else { None },
    )?;
    Ok(Arc::new(stream))
}

/// Run one test against `server`.
/// `cancel` is the user's Ctrl-C/SIGTERM: once it fires the data streams stop (within
/// [`crate::stream::POLL`]), the server is told to stop and its last samples are collected
/// (bounded by [`CANCEL_GRACE`]), the control connection is closed, and what was measured so far
/// comes back as a [`SpeedRun`] with `interrupted` set rather than as an error.
pub async fn run_test(
    server: SocketAddr,
    token: Option<String>,
    opts: &SpeedOptions,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<SpeedRun, SpeedError> {
    let client_host = crate::host::tcp_settings();
    let interrupted = |server_host: HostTcpSettings| SpeedRun {
        mode: opts.mode,
        congestion_control: opts.cc.clone(),
        directions: Vec::new(),
        client_host: client_host.clone(),
        server_host,
        interrupted: true,
    };
    // Phase 1: control connection, test accepted, data connections attached.
    let setup = async {
        let (conn, welcome) = pathdoc_proto::connect(
            server,
            token.clone(),
            Channel::Control {
                check: CheckKind::Speed,
                resume: None,
            },
            STEP_TIMEOUT,
        )
        .await
        .map_err(|source| match source {
            ProtoError::Refused(r) if r.is_load() => SpeedError::Busy(busy_of(r.message, r.load)),
            source => SpeedError::Connect { server, source },
        })?;
        let (mut rd, mut wr) = conn.into_inner().into_split();
        let spec = TestSpec {
            mode: opts.mode,
            streams: opts.streams,
            duration_ms: opts.duration.as_millis() as u64,
            bytes: opts.bytes,
            server_cc: opts.cc.clone(),
            window: opts.window,
            interval_ms: opts.interval.as_millis() as u64,
        };
        write_frame(&mut wr, &ClientMsg::Start(spec.clone())).await?;
        let (duration, server_host) = match timeout(
            read_frame::<_, ServerMsg>(&mut rd),
            "the test to be accepted",
        )
        .await??
        {
            ServerMsg::Accepted { duration_ms, host } => (Duration::from_millis(duration_ms), host),
            ServerMsg::Refused { reason, load } => return Err(refused(reason, load)),
            other => return Err(SpeedError::Lost(format!("unexpected {other:?}"))),
        };
        if duration < opts.duration {
            progress.note(&format!(
                "throughput: the server caps tests at {:.0} s",
                duration.as_secs_f64()
            ));
        }
        // Before any stream runs, so the probe sees the bottleneck with only others' traffic.
        // Download tests only (`pathdoc check` runs one after the upload): a bidirectional test
        // has its own upload in the queue, and the probe would delay its start.
        let capacity = if opts.mode == Mode::Download {
            let session = welcome.session;
            tokio::task::spawn_blocking(move || crate::train::probe_download(server, session))
                .await
                .ok()
        } else {
            None
        };
        let mut data = Vec::new();
        for tag in stream_tags(opts) {
            data.push((
                tag,
                open_data(server, token.clone(), welcome.session, tag, opts).await?,
            ));
        }
        Ok((rd, wr, spec, duration, server_host, data, welcome, capacity))
    };
    let (rd, mut wr, spec, duration, server_host, data, welcome, capacity) = tokio::select! {
        r = setup => r?,
        _ = cancel.cancelled() => return Ok(interrupted(HostTcpSettings::default())),
    };
    // Phase 2: run the streams, sampling both ends.
    let (tx, mut rx) = mpsc::channel::<Result<ServerMsg, ProtoError>>(64);
    let reader = tokio::spawn(async move {
        let mut rd = rd;
        loop {
            let msg = read_frame::<_, ServerMsg>(&mut rd).await;
            let end = msg.is_err();
            if tx.send(msg).await.is_err() || end {
                return;
            }
        }
    });
    let result = drive(
        opts, &spec, duration, data, &mut wr, &mut rx, progress, cancel,
    )
    .await;
    reader.abort();
    // Dropping the write half closes the control connection: the server ends the test.
    drop(wr);
    // Frees the session (and this client's session slot) on the server at once.
    let _ = pathdoc_proto::end_session(server, token.clone(), &welcome).await;
    let Driven {
        client: client_samples,
        server: server_samples,
        interrupted: was_interrupted,
    } = match result {
        Ok(d) => d,
        Err(_) if cancel.is_cancelled() => return Ok(interrupted(server_host)),
        Err(e) => return Err(e),
    };
    // Phase 3: turn both ends' samples into per-direction results.
    let mut directions = build_directions(
        opts,
        &client_samples,
        &server_samples,
        &client_host,
        &server_host,
        server.is_ipv6(),
    );
    for d in &mut directions {
        if d.direction == Direction::Download {
            d.capacity = capacity.clone();
        }
    }
    Ok(SpeedRun {
        mode: opts.mode,
        congestion_control: opts.cc.clone(),
        directions,
        client_host,
        server_host,
        interrupted: was_interrupted,
    })
}

fn stream_tags(opts: &SpeedOptions) -> Vec<u32> {
    let mut tags = Vec::new();
    for d in [Direction::Upload, Direction::Download] {
        let on = if d == Direction::Upload {
            opts.mode.uploads()
        } else {
            opts.mode.downloads()
        };
        if on {
            tags.extend((0..opts.streams).map(|i| stream_tag(d, i)));
        }
    }
    tags
}

async fn timeout<T>(
    f: impl std::future::Future<Output = T>,
    what: &'static str,
) -> Result<T, SpeedError> {
    tokio::time::timeout(STEP_TIMEOUT, f).await.map_err(|_| {
        SpeedError::Lost(format!(
            "no answer within {STEP_TIMEOUT:?} waiting for {what}"
        ))
    })
}

/// Both ends' samples of one test, and whether the user interrupted it.
struct Driven {
    client: Vec<SideSample>,
    server: Vec<SideSample>,
    interrupted: bool,
}

/// How the measuring loop ended.
enum LoopEnd {
    Done,
    Interrupted,
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    opts: &SpeedOptions,
    spec: &TestSpec,
    duration: Duration,
    data: Vec<(u32, Arc<std::net::TcpStream>)>,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    rx: &mut mpsc::Receiver<Result<ServerMsg, ProtoError>>,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<Driven, SpeedError> {
    let mut server_samples = Vec::new();
    let started = tokio::select! {
        m = timeout(rx.recv(), "the test to start") => m?,
        _ = cancel.cancelled() => {
            return Ok(Driven { client: Vec::new(), server: Vec::new(), interrupted: true });
        }
    };
    match started {
        Some(Ok(ServerMsg::Started)) => {}
        Some(Ok(ServerMsg::Refused { reason, load })) => return Err(refused(reason, load)),
        Some(Ok(other)) => return Err(SpeedError::Lost(format!("unexpected {other:?}"))),
        Some(Err(e)) => return Err(e.into()),
        None => return Err(SpeedError::Lost("control connection closed".into())),
    }
    let t0 = Instant::now();
    let cpu0 = pathdoc_sys::cpu_usage::process_cpu_time()
        .map(|c| c.total())
        .unwrap_or(0.0);
    let stop = Arc::new(AtomicBool::new(false));
    let end = t0 + duration;
    let mut streams = start_streams(spec, data, &stop, end)?;
    let mut client_samples = vec![side_sample(&streams, t0, cpu0)];
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + opts.interval, opts.interval);
    let mut next_check = tokio::time::interval(Duration::from_millis(50));
    let outcome: Result<LoopEnd, SpeedError> = loop {
        tokio::select! {
            _ = tick.tick() => {
                let s = side_sample(&streams, t0, cpu0);
                report_progress(progress, client_samples.last(), &s, t0, duration);
                client_samples.push(s);
            }
            _ = next_check.tick() => {
                let bytes_done = spec.bytes.is_some() && streams.iter().all(|s| if s.sending { s.delivered_all() } else { s.finished() });
                if Instant::now() >= end || bytes_done {
                    break Ok(LoopEnd::Done);
                }
            }
            _ = cancel.cancelled() => break Ok(LoopEnd::Interrupted),
            msg = rx.recv() => match msg {
                Some(Ok(ServerMsg::Samples { sample })) => server_samples.push(sample),
                Some(Ok(other)) => break Err(SpeedError::Lost(format!("unexpected {other:?} during the test"))),
                Some(Err(e)) => break Err(e.into()),
                None => break Err(SpeedError::Lost("control connection closed during the test".into())),
            }
        }
    };
    // The state at the end of the measured interval, then stop.
    let last = side_sample(&streams, t0, cpu0);
    if client_samples.last().is_none_or(|s| last.t - s.t > 0.05) {
        client_samples.push(last);
    } else if let Some(l) = client_samples.last_mut() {
        *l = last;
    }
    stop.store(true, Ordering::Relaxed);
    let interrupted = matches!(outcome, Ok(LoopEnd::Interrupted));
    let stop_sent = write_frame(wr, &ClientMsg::Stop).await;
    let finished = if outcome.is_ok() && stop_sent.is_ok() {
        // After Ctrl-C the user waits: take the server's last samples only if they come quickly.
        let patience = if interrupted {
            CANCEL_GRACE
        } else {
            STEP_TIMEOUT
        };
        match tokio::time::timeout(patience, final_samples(rx, &mut server_samples)).await {
            Ok(r) => r,
            Err(_) if interrupted => Ok(()),
            Err(_) => Err(SpeedError::Lost(format!(
                "no answer within {STEP_TIMEOUT:?} waiting for the server's results"
            ))),
        }
    } else {
        Ok(())
    };
    let _ = tokio::task::spawn_blocking(move || {
        for s in &mut streams {
            let _ = s.join();
        }
    })
    .await;
    outcome?;
    stop_sent?;
    finished?;
    Ok(Driven {
        client: client_samples,
        server: server_samples,
        interrupted,
    })
}

/// Collect the server's samples until its `Finished`.
async fn final_samples(
    rx: &mut mpsc::Receiver<Result<ServerMsg, ProtoError>>,
    server_samples: &mut Vec<SideSample>,
) -> Result<(), SpeedError> {
    loop {
        match rx.recv().await {
            Some(Ok(ServerMsg::Samples { sample })) => server_samples.push(sample),
            Some(Ok(ServerMsg::Finished { sample })) => {
                server_samples.push(sample);
                return Ok(());
            }
            Some(Ok(other)) => {
                return Err(SpeedError::Lost(format!("unexpected {other:?} at the end")))
            }
            Some(Err(e)) => return Err(e.into()),
            None => {
                return Err(SpeedError::Lost(
                    "control connection closed before the results".into(),
                ))
            }
        }
    }
}

fn start_streams(
    spec: &TestSpec,
    data: Vec<(u32, Arc<std::net::TcpStream>)>,
    stop: &Arc<AtomicBool>,
    end: Instant,
) -> Result<Vec<RunningStream>, SpeedError> {
    let mut streams = Vec::new();
    for (tag, stream) in data {
        let sending = parse_tag(tag).0 == Direction::Upload;
        let budget = if sending {
            spec.stream_byte_budget(tag)
        } else {
            None
        };
        // Senders stop by themselves at the end; receivers wait for EOF (plus slack).
        let deadline = if sending {
            end
        } else {
            end + Duration::from_secs(5)
        };
        streams.push(RunningStream::start(
            tag,
            sending,
            stream,
            StopRule {
                stop: stop.clone(),
                deadline,
                byte_budget: budget,
            },
        )?);
    }
    Ok(streams)
}

/// The current rate per direction from this end's own samples, so it shows from the first
/// interval on without waiting for the server's: bytes the server acknowledged for uploads, bytes
/// this end's application read for downloads.
fn report_progress(
    progress: &dyn Progress,
    previous: Option<&SideSample>,
    now: &SideSample,
    t0: Instant,
    duration: Duration,
) {
    let mut parts = Vec::new();
    if let Some(a) = previous {
        let dt = now.t - a.t;
        for d in [Direction::Upload, Direction::Download] {
            let count = |s: &SideSample| match d {
                Direction::Upload => sum(s, d, |x| x.info.bytes_acked),
                Direction::Download => sum(s, d, |x| x.app_bytes),
            };
            if dt > 0.0 && now.streams.iter().any(|x| parse_tag(x.tag).0 == d) {
                parts.push(format!(
                    "{} {}",
                    d.short(),
                    format_rate(count(now).saturating_sub(count(a)) as f64 * 8.0 / dt)
                ));
            }
        }
    }
    progress.status(&format!(
        "throughput: {} ({:.0} of {:.0} s)",
        parts.join(", "),
        t0.elapsed().as_secs_f64(),
        duration.as_secs_f64()
    ));
}

fn streams_of(s: &SideSample, d: Direction) -> impl Iterator<Item = &StreamSample> {
    s.streams.iter().filter(move |x| parse_tag(x.tag).0 == d)
}

/// Each stream's share of the interval from sample `a` to `b` (only with two or more streams).
fn per_stream(a: &SideSample, b: &SideSample, d: Direction, dt: f64) -> Vec<StreamInterval> {
    if streams_of(b, d).count() < 2 {
        return Vec::new();
    }
    streams_of(b, d)
        .filter_map(|sb| {
            let sa = streams_of(a, d).find(|x| x.tag == sb.tag)?;
            Some(StreamInterval {
                stream: parse_tag(sb.tag).1,
                goodput_bps: sb.info.bytes_acked.saturating_sub(sa.info.bytes_acked) as f64 * 8.0
                    / dt,
                retransmits: u64::from(sb.info.total_retrans)
                    .saturating_sub(u64::from(sa.info.total_retrans)),
                cwnd_bytes: sb.info.cwnd_bytes(),
                rtt_us: sb.info.rtt,
            })
        })
        .collect()
}

fn sum(s: &SideSample, d: Direction, f: impl Fn(&StreamSample) -> u64) -> u64 {
    streams_of(s, d).map(f).sum()
}

/// Turn both sides' samples into per-direction results (pure; unit-tested).
pub fn build_directions(
    opts: &SpeedOptions,
    client: &[SideSample],
    server: &[SideSample],
    client_host: &HostTcpSettings,
    server_host: &HostTcpSettings,
    ipv6: bool,
) -> Vec<DirectionResult> {
    let same_host = match (&client_host.host_id, &server_host.host_id) {
        (Some(a), Some(b)) => Some(a == b),
        _ => None,
    };
    let mut out = Vec::new();
    for d in [Direction::Upload, Direction::Download] {
        let ends = match d {
            Direction::Upload => Ends {
                senders: client,
                receivers: server,
                sender_side: Side::Client,
                receiver_side: Side::Server,
                sender_host: client_host,
                receiver_host: server_host,
            },
            Direction::Download => Ends {
                senders: server,
                receivers: client,
                sender_side: Side::Server,
                receiver_side: Side::Client,
                sender_host: server_host,
                receiver_host: client_host,
            },
        };
        let on = if d == Direction::Upload {
            opts.mode.uploads()
        } else {
            opts.mode.downloads()
        };
        if !on {
            continue;
        }
        if let Some(mut r) = direction_result(d, opts, &ends, ipv6) {
            r.same_host = same_host;
            out.push(r);
        }
    }
    out
}

/// The two ends of one direction.
struct Ends<'a> {
    senders: &'a [SideSample],
    receivers: &'a [SideSample],
    sender_side: Side,
    receiver_side: Side,
    sender_host: &'a HostTcpSettings,
    receiver_host: &'a HostTcpSettings,
}

/// Whole-host CPU use between the samples that bound `[from, to]` seconds.
fn host_use(samples: &[SideSample], from: f64, to: f64) -> Option<HostCpuUse> {
    let at = |t: f64| {
        samples
            .iter()
            .rfind(|s| s.t <= t + 0.05)
            .or(samples.first())
    };
    let (a, b) = (at(from)?.host_cpu?, at(to)?.host_cpu?);
    let total = b.total().saturating_sub(a.total());
    if total == 0 {
        return None;
    }
    let share = |x: u64| x as f64 / total as f64;
    Some(HostCpuUse {
        busy: share(b.busy().saturating_sub(a.busy())),
        steal: share(b.steal.saturating_sub(a.steal)),
        softirq: share(b.softirq.saturating_sub(a.softirq)),
        cpus: b.cpus,
    })
}

fn host_busy(a: Option<&SideSample>, b: Option<&SideSample>) -> Option<f64> {
    let (a, b) = (a?.host_cpu?, b?.host_cpu?);
    let total = b.total().saturating_sub(a.total());
    (total > 0).then(|| b.busy().saturating_sub(a.busy()) as f64 / total as f64)
}

/// The sample of `samples` nearest in time to `t` (the two ends sample on their own clocks,
/// both counted from the start of the data).
fn nearest(samples: &[SideSample], t: f64) -> Option<&SideSample> {
    samples
        .iter()
        .min_by(|x, y| (x.t - t).abs().total_cmp(&(y.t - t).abs()))
}

fn intervals_of(d: Direction, ends: &Ends, ipv6: bool) -> Vec<Interval> {
    let senders = ends.senders;
    let info0 = senders
        .last()
        .and_then(|s| streams_of(s, d).next())
        .map(|x| x.info)
        .unwrap_or_default();
    let mut intervals = Vec::new();
    for w in senders.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let dt = b.t - a.t;
        if dt <= 0.0 {
            continue;
        }
        let dsum = |f: fn(&StreamSample) -> u64| sum(b, d, f).saturating_sub(sum(a, d, f));
        let busy = dsum(|x| x.info.busy_time);
        let frac = |v: u64| {
            if busy == 0 {
                0.0
            } else {
                v as f64 / busy as f64
            }
        };
        let bs: Vec<_> = streams_of(b, d).map(|x| x.info).collect();
        let n = bs.len().max(1) as u64;
        let goodput_i = dsum(|x| x.info.bytes_acked) as f64 * 8.0 / dt;
        let sent = dsum(|x| x.info.bytes_sent);
        let retrans_bytes = dsum(|x| x.info.bytes_retrans);
        let retrans_share = if sent == 0 {
            0.0
        } else {
            retrans_bytes as f64 / sent as f64
        };
        let cores = |x: Option<&SideSample>, y: Option<&SideSample>| match (x, y) {
            (Some(x), Some(y)) if y.t > x.t => Some((y.cpu_seconds - x.cpu_seconds) / (y.t - x.t)),
            _ => None,
        };
        let (ra, rb) = (nearest(ends.receivers, a.t), nearest(ends.receivers, b.t));
        intervals.push(Interval {
            start_s: a.t,
            end_s: b.t,
            goodput_bps: goodput_i,
            wire_ip_bps: wire_estimate(
                goodput_i,
                info0.snd_mss,
                ipv6,
                info0.timestamps(),
                retrans_share,
            )
            .ip_bps,
            retransmits: dsum(|x| u64::from(x.info.total_retrans)),
            cwnd_bytes: bs.iter().map(|x| x.cwnd_bytes()).sum(),
            snd_wnd_bytes: bs.iter().map(|x| u64::from(x.snd_wnd)).sum(),
            rtt_us: (bs.iter().map(|x| u64::from(x.rtt)).sum::<u64>() / n) as u32,
            min_rtt_us: bs
                .iter()
                .map(|x| x.min_rtt)
                .filter(|&r| r > 0)
                .min()
                .unwrap_or(0),
            delivery_rate_bps: bs.iter().map(|x| x.delivery_rate as f64 * 8.0).sum(),
            pacing_rate_bps: bs.iter().map(|x| x.pacing_rate as f64 * 8.0).sum(),
            rwnd_limited: frac(dsum(|x| x.info.rwnd_limited)),
            sndbuf_limited: frac(dsum(|x| x.info.sndbuf_limited)),
            sender_cpu_cores: cores(Some(a), Some(b)),
            receiver_cpu_cores: cores(ra, rb),
            rttvar_us: (bs.iter().map(|x| u64::from(x.rttvar)).sum::<u64>() / n) as u32,
            bytes_sent: sent,
            bytes_retrans: retrans_bytes,
            dsack_dups: dsum(|x| u64::from(x.info.dsack_dups)),
            busy_us: busy,
            rwnd_limited_us: dsum(|x| x.info.rwnd_limited),
            sndbuf_limited_us: dsum(|x| x.info.sndbuf_limited),
            // The kernel reports ssthresh 0 (or "infinite") until a stream leaves initial slow start.
            slow_start: bs.is_empty()
                || bs
                    .iter()
                    .any(|x| x.snd_ssthresh == 0 || x.snd_ssthresh >= 0x7fff_ffff),
            sender_host_busy: host_busy(Some(a), Some(b)),
            receiver_host_busy: host_busy(ra, rb),
            streams: per_stream(a, b, d, dt),
        });
    }
    intervals
}

fn direction_result(
    d: Direction,
    opts: &SpeedOptions,
    ends: &Ends,
    ipv6: bool,
) -> Option<DirectionResult> {
    let senders = ends.senders;
    let first = senders.first()?;
    let last = senders.last()?;
    let delta = |f: fn(&StreamSample) -> u64| sum(last, d, f).saturating_sub(sum(first, d, f));
    // By time: the interval between the first and last samples. By bytes: the whole transfer
    // from the start (t0, before the streams began), since bytes sent before the first sample
    // are part of the requested payload (at loopback speed that is several MiB).
    let by_bytes = opts.bytes.is_some();
    let duration = if by_bytes { last.t } else { last.t - first.t };
    // Acknowledged payload per stream, capped at what the application wrote: after the sender's
    // shutdown the peer's ACK of our FIN counts one extra sequence number in tcpi_bytes_acked.
    let payload: u64 = streams_of(last, d)
        .map(|x| {
            let before = streams_of(first, d)
                .find(|y| y.tag == x.tag)
                .filter(|_| !by_bytes);
            let acked = x
                .info
                .bytes_acked
                .saturating_sub(before.map_or(0, |y| y.info.bytes_acked));
            let written = x
                .app_bytes
                .saturating_sub(before.map_or(0, |y| y.app_bytes));
            acked.min(written)
        })
        .sum();
    let goodput = if duration > 0.0 {
        payload as f64 * 8.0 / duration
    } else {
        0.0
    };
    let infos: Vec<_> = streams_of(last, d).map(|x| x.info).collect();
    let info0 = infos.first().copied().unwrap_or_default();
    let intervals = intervals_of(d, ends, ipv6);
    let rtts: Vec<u32> = intervals
        .iter()
        .map(|i| i.rtt_us)
        .filter(|&r| r > 0)
        .collect();
    let mean_rtt = if rtts.is_empty() {
        info0.rtt
    } else {
        (rtts.iter().map(|&r| u64::from(r)).sum::<u64>() / rtts.len() as u64) as u32
    };
    let max_over = |f: fn(&StreamSample) -> u64| {
        senders
            .iter()
            .flat_map(|s| streams_of(s, d))
            .map(f)
            .max()
            .unwrap_or(0)
    };
    let sender = SenderTotals {
        bytes_sent: delta(|x| x.info.bytes_sent),
        bytes_retrans: delta(|x| x.info.bytes_retrans),
        bytes_acked: payload,
        retransmits: delta(|x| u64::from(x.info.total_retrans)),
        busy_us: delta(|x| x.info.busy_time),
        rwnd_limited_us: delta(|x| x.info.rwnd_limited),
        sndbuf_limited_us: delta(|x| x.info.sndbuf_limited),
        min_rtt_us: infos
            .iter()
            .map(|x| x.min_rtt)
            .filter(|&r| r > 0)
            .min()
            .unwrap_or(0),
        mean_rtt_us: mean_rtt,
        snd_mss: info0.snd_mss,
        pmtu: info0.pmtu,
        timestamps: info0.timestamps(),
        max_snd_wnd: max_over(|x| u64::from(x.info.snd_wnd)),
        max_cwnd_bytes: max_over(|x| x.info.cwnd_bytes()),
        reord_seen: delta(|x| u64::from(x.info.reord_seen)),
        dsack_dups: delta(|x| u64::from(x.info.dsack_dups)),
        has_chronographs: info0.has(pathdoc_sys::tcp_info::field::SNDBUF_LIMITED),
        congestion_control: opts
            .cc
            .clone()
            .or_else(|| ends.sender_host.default_cc.clone())
            .unwrap_or_default(),
    };
    let cores = |s: &[SideSample]| match (s.first(), s.last()) {
        (Some(a), Some(b)) if b.t > a.t => Some((b.cpu_seconds - a.cpu_seconds) / (b.t - a.t)),
        _ => None,
    };
    let wire = wire_estimate(
        goodput,
        sender.snd_mss,
        ipv6,
        sender.timestamps,
        if sender.bytes_acked == 0 {
            0.0
        } else {
            sender.bytes_retrans as f64 / sender.bytes_acked as f64
        },
    );
    let result = DirectionResult {
        direction: d,
        streams: streams_of(last, d).count() as u32,
        duration_s: duration,
        payload_bytes: payload,
        goodput_bps: goodput,
        wire,
        ipv6,
        sender_side: ends.sender_side,
        receiver_side: ends.receiver_side,
        sender,
        receiver_ooo_packets: ends
            .receivers
            .last()
            .map(|s| sum(s, d, |x| u64::from(x.info.rcv_ooopack)))
            .unwrap_or(0),
        sender_cpu_cores: cores(senders),
        receiver_cpu_cores: cores(ends.receivers),
        sender_cpus: ends.sender_host.cpus,
        receiver_cpus: ends.receiver_host.cpus,
        receiver_tcp_rmem: ends.receiver_host.tcp_rmem,
        sender_tcp_wmem: ends.sender_host.tcp_wmem,
        window_option: opts.window,
        intervals,
        phases: Default::default(),
        sender_host_cpu: None,
        receiver_host_cpu: None,
        same_host: None,
        capacity: None,
    }
    .with_phases();
    // Host CPU over the part the verdicts are judged on.
    let (from, to) = match &result.phases.steady {
        Some(s) => (s.start_s, s.end_s),
        None => (first.t, last.t),
    };
    Some(DirectionResult {
        sender_host_cpu: host_use(senders, from, to),
        receiver_host_cpu: host_use(ends.receivers, from, to),
        ..result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server from before the refusal's `load` field turns a stream's data connection away
    /// for want of room with the code alone: the test is a server-busy WARN, not a failure.
    #[tokio::test]
    async fn a_stream_refused_by_code_alone_is_the_server_being_busy() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        let message = "it allows 16 throughput streams at once per client address";
        let fake = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            pathdoc_proto::read_preamble(&mut s).await.unwrap();
            let _: serde_json::Value = read_frame(&mut s).await.unwrap();
            pathdoc_proto::write_preamble(&mut s).await.unwrap();
            // The older server's frame, verbatim: no `load`.
            let refused = serde_json::json!({
                "type": "refused", "code": "limit-exceeded", "message": message,
            });
            write_frame(&mut s, &refused).await.unwrap();
        });
        let session = pathdoc_proto::SessionId(7);
        let tag = stream_tag(Direction::Upload, 0);
        let err = open_data(server, None, session, tag, &SpeedOptions::default())
            .await
            .unwrap_err();
        fake.await.unwrap();
        let SpeedError::Busy(busy) = err else {
            panic!("a refusal for load read as a failure: {err:?}");
        };
        assert_eq!(
            (busy.message.as_str(), busy.reason, busy.limit),
            (message, None, None)
        );
        // Another code stays a failure (check-failed): it is not load.
        let denied = ProtoError::Refused(pathdoc_proto::Refusal {
            code: pathdoc_proto::RefusalCode::AuthFailed,
            message: "wrong token".into(),
            load: None,
        });
        assert!(matches!(refused_connection(denied), SpeedError::Proto(_)));
    }
    use pathdoc_sys::cpu_usage::HostCpuTimes;
    use pathdoc_sys::tcp_info::{TcpInfo, KERNEL_STRUCT_LEN};

    /// One upload stream's sample at second `t`: 5 MB acknowledged per second after a slow
    /// first second, 100 segments lost in it; the host at `busy` of its 2 cores.
    fn sample(t: f64, receiver: bool, busy: u64) -> SideSample {
        let k = t as u64;
        let acked = if k == 0 {
            0
        } else {
            2_000_000 + (k - 1) * 5_000_000
        };
        let info = TcpInfo {
            kernel_len: KERNEL_STRUCT_LEN as u32,
            snd_mss: 1448,
            snd_cwnd: 400,
            snd_wnd: 4 << 20,
            rtt: 30_000,
            min_rtt: 20_000,
            snd_ssthresh: if k == 0 { 0 } else { 300 },
            bytes_acked: acked,
            bytes_sent: acked + 100_000,
            bytes_retrans: if k == 0 { 0 } else { 144_800 },
            total_retrans: if k == 0 { 0 } else { 100 },
            busy_time: k * 1_000_000,
            ..TcpInfo::default()
        };
        SideSample {
            t,
            cpu_seconds: 0.1 * t,
            streams: vec![StreamSample {
                tag: stream_tag(Direction::Upload, 0),
                app_bytes: if receiver { acked } else { acked + 1_000_000 },
                info,
            }],
            host_cpu: Some(HostCpuTimes {
                user: k * busy,
                idle: k * (200 - busy),
                cpus: 2,
                ..HostCpuTimes::default()
            }),
        }
    }

    #[test]
    fn samples_become_intervals_phases_and_host_cpu() {
        let client: Vec<_> = (0..=5).map(|k| sample(k as f64, false, 190)).collect();
        let server: Vec<_> = (0..=5)
            .map(|k| sample(k as f64 + 0.01, true, 190))
            .collect();
        let host = |id: &str| HostTcpSettings {
            cpus: 2,
            default_cc: Some("cubic".into()),
            host_id: Some(id.into()),
            ..HostTcpSettings::default()
        };
        let opts = SpeedOptions::default();
        let d = build_directions(&opts, &client, &server, &host("a"), &host("a"), false);
        assert_eq!(d.len(), 1);
        let up = &d[0];
        assert_eq!(up.intervals.len(), 5);
        // The flag is read at each interval's end: slow start was over by the end of the first.
        assert!(up.intervals.iter().all(|i| !i.slow_start));
        assert_eq!(up.intervals[1].goodput_bps, 40e6);
        assert_eq!(up.intervals[1].sender_host_busy, Some(0.95));
        assert_eq!(up.same_host, Some(true));
        // Slow start ended within the first second; the steady state is the flat 40 Mbit/s.
        assert_eq!(up.phases.slow_start_end_s, Some(1.0));
        let steady = up.phases.steady.as_ref().unwrap();
        assert_eq!((steady.first_interval, steady.goodput_bps), (1, 40e6));
        let cpu = up.sender_host_cpu.unwrap();
        assert!((cpu.busy - 0.95).abs() < 1e-9 && cpu.cpus == 2, "{cpu:?}");
        // A different kernel on the other end.
        let d = build_directions(&opts, &client, &server, &host("a"), &host("b"), false);
        assert_eq!(d[0].same_host, Some(false));
        let d = build_directions(
            &opts,
            &client,
            &server,
            &host("a"),
            &HostTcpSettings::default(),
            false,
        );
        assert_eq!(d[0].same_host, None, "an older server sends no host id");
    }
}
