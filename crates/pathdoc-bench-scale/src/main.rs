//! `pathdoc-bench-scale`: does one `pathdoc server` hold ≥ 100 000 concurrent idle probe
//! connections with ≤ 2 KiB of its own memory per connection and fire server-initiated probes
//! on time (p99 error ≤ 100 ms)? Issue #3 §9.
//!
//! It starts the real `pathdoc server` on 127.0.0.1 as a child, opens idle-check sessions from
//! several 127.0.1.x source addresses (each has its own ephemeral port range towards the one
//! server port), each with its probe connections, and measures the server's RSS before and
//! after, its CPU time per phase, and for every probe the delay between the moment the client
//! meant it to be fired and its arrival. It prints a table; it is a benchmark, so it exits
//! non-zero only when it could not run (2).
//!
//! Modules: [`load`] (client connections and tasks), [`child`] (the server process),
//! [`procfs`] (memory, CPU, socket counters), [`stats`] (percentiles), [`null_server`]
//! (framework-only reference server for the memory breakdown).

mod load;
mod null_server;
mod stats;

use pathdoc_bench_scale::{child, procfs};

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::Parser;
use pathdoc_proto::{Channel, FramedConn};
use tokio::sync::{mpsc, Semaphore};

use crate::load::{Arrival, Command as CtlCommand, ControlStats};
use pathdoc_bench_scale::child::ServerProcess;

/// Targets of issue #3 §9.
const TARGET_CONNECTIONS: u64 = 100_000;
const TARGET_BYTES_PER_CONNECTION: f64 = 2048.0;
const TARGET_P99: Duration = Duration::from_millis(100);
/// Probe connections of the warm-up session (part of the baseline, not counted).
const WARMUP_PROBES: u32 = 64;
/// Descriptors each process keeps for everything but connections (stdio, epoll, listeners).
const FD_MARGIN: u64 = 100;

/// The load was cut to fit the descriptor limit.
#[derive(Debug, Clone, Copy)]
struct FdLimited {
    limit: u64,
    requested: u64,
}

#[derive(Parser, Debug)]
#[command(
    name = "pathdoc-bench-scale",
    about = "Idle server scale benchmark: many idle probe connections on one pathdoc server (loopback)"
)]
struct Args {
    /// The pathdoc binary to benchmark [default: `pathdoc` next to this program].
    #[arg(long)]
    pathdoc: Option<PathBuf>,
    /// Which server to measure: the real `pathdoc server`, or the server framework with a
    /// service that only holds connections (memory breakdown; no probes are fired).
    #[arg(long, value_enum, default_value = "pathdoc")]
    server: ServerKind,
    /// Idle-check sessions (one control connection each).
    #[arg(long, default_value_t = 50)]
    sessions: u32,
    /// Probe connections per session (the server allows at most 2048).
    #[arg(long, default_value_t = 2000)]
    probes_per_session: u32,
    /// Source addresses 127.0.1.1 ..= 127.0.1.N the connections are spread over.
    #[arg(long, default_value_t = 10)]
    source_ips: u32,
    /// Period of the fire schedule, milliseconds.
    #[arg(long, default_value_t = 100)]
    fire_interval_ms: u64,
    /// Probes fired per period, spread over all sessions; the schedule covers every probe
    /// connection once.
    #[arg(long, default_value_t = 1000)]
    fire_batch: u32,
    /// Connection attempts in flight at once while opening.
    #[arg(long, default_value_t = 256)]
    connect_concurrency: usize,
    /// Pause after opening before memory is read, seconds.
    #[arg(long, default_value_t = 3)]
    settle_secs: u64,
    /// Idle hold during which the server's CPU use is measured, seconds.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,
    /// Internal: run the reference server on this address.
    #[arg(long, hide = true)]
    serve_reference: Option<SocketAddr>,
    /// Internal: run the bare server on this address.
    #[arg(long, hide = true)]
    serve_bare: Option<SocketAddr>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ServerKind {
    /// The real `pathdoc server`.
    Pathdoc,
    /// pathdoc_server framework + a service that only holds connections.
    Reference,
    /// One plain tokio task per connection that answers the handshake and holds it.
    Bare,
}

impl ServerKind {
    fn describe(self) -> &'static str {
        match self {
            ServerKind::Pathdoc => "pathdoc server",
            ServerKind::Reference => "reference server (framework + hold-only service)",
            ServerKind::Bare => "bare tokio server (handshake + hold, no framework)",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let internal = match (args.serve_reference, args.serve_bare) {
        (Some(listen), _) => Some(null_server::run(listen)),
        (None, Some(listen)) => Some(null_server::run_bare(listen)),
        (None, None) => None,
    };
    if let Some(result) = internal {
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("reference server: {e:#}");
                ExitCode::from(2)
            }
        };
    }
    raise_fd_limit();
    if let Err(e) = child::install_signal_handler() {
        eprintln!("idle-scale: could not run: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idle-scale: could not start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // The root future runs on this (main) thread, which is where the server child is spawned:
    // its parent-death signal is tied to this thread.
    let result = runtime.block_on(run(args));
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idle-scale: could not run: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// One idle-check session of the load.
struct SessionLoad {
    /// Fire commands for its control task (pathdoc server only).
    commands: Option<mpsc::UnboundedSender<CtlCommand>>,
    /// The control connection itself when no task drives it (reference server).
    _idle_control: Option<FramedConn>,
}

/// Everything the probe readers and control tasks report into.
#[derive(Clone)]
struct Sinks {
    arrivals: mpsc::UnboundedSender<Arrival>,
    closed: Arc<AtomicU64>,
    control: Arc<ControlStats>,
    connect_slots: Arc<Semaphore>,
}

/// Open a session from `source` with `probes` probe connections whose arrival indices start at
/// `first_index`.
async fn open_session(
    source: IpAddr,
    server: SocketAddr,
    probes: u32,
    first_index: u32,
    drive_control: bool,
    sinks: &Sinks,
) -> anyhow::Result<SessionLoad> {
    let (control, session) = load::open(source, server, load::control_channel())
        .await
        .context("opening a control connection")?;
    let mut opening = tokio::task::JoinSet::new();
    for tag in 0..probes {
        let sinks = sinks.clone();
        opening.spawn(async move {
            let _slot = sinks.connect_slots.acquire_owned().await?;
            let (conn, _) = load::open(source, server, Channel::Data { session, tag }).await?;
            tokio::spawn(load::probe_reader(
                conn,
                first_index + tag,
                sinks.arrivals,
                sinks.closed,
            ));
            anyhow::Ok(())
        });
    }
    while let Some(opened) = opening.join_next().await {
        opened.context("probe opener panicked")??;
    }
    if !drive_control {
        return Ok(SessionLoad {
            commands: None,
            _idle_control: Some(control),
        });
    }
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(load::control_task(control, rx, sinks.control.clone()));
    Ok(SessionLoad {
        commands: Some(tx),
        _idle_control: None,
    })
}

/// Readings at one moment.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    memory: procfs::Memory,
    kernel: procfs::KernelSockets,
}

fn snapshot(server: &mut ServerProcess, phase: &str) -> anyhow::Result<Snapshot> {
    ensure_alive(server, phase)?;
    Ok(Snapshot {
        memory: procfs::memory(server.pid())?,
        kernel: procfs::kernel_sockets(),
    })
}

fn ensure_alive(server: &mut ServerProcess, phase: &str) -> anyhow::Result<()> {
    if !server.alive() {
        let log = server.log.lock().map(|l| l.join("\n")).unwrap_or_default();
        bail!("the server died {phase}; its stderr:\n{log}");
    }
    Ok(())
}

/// CPU use of the server over a phase.
#[derive(Debug, Clone, Copy, Default)]
struct CpuPhase {
    cpu: Duration,
    wall: Duration,
}

impl CpuPhase {
    fn percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

struct CpuClock {
    pid: u32,
    cpu: Duration,
    wall: Instant,
}

impl CpuClock {
    fn start(pid: u32) -> anyhow::Result<Self> {
        Ok(CpuClock {
            pid,
            cpu: procfs::cpu_time(pid)?,
            wall: Instant::now(),
        })
    }

    fn stop(self) -> anyhow::Result<CpuPhase> {
        Ok(CpuPhase {
            cpu: procfs::cpu_time(self.pid)?.saturating_sub(self.cpu),
            wall: self.wall.elapsed(),
        })
    }
}

/// Probes received so far, by probe index.
struct Tally {
    arrived: Vec<Option<Instant>>,
    received: u64,
    wrong_nonce: u64,
}

impl Tally {
    fn store(&mut self, a: Arrival, expected: &[u64]) {
        let i = a.index as usize;
        if i >= self.arrived.len() {
            return; // the warm-up session
        }
        if expected[i] != a.nonce || self.arrived[i].is_some() {
            self.wrong_nonce += 1;
        } else {
            self.arrived[i] = Some(a.at);
            self.received += 1;
        }
    }
}

/// Outcome of the fire schedule.
struct FireResult {
    fired: u64,
    errors: stats::Summary,
    lost: u64,
    wrong_nonce: u64,
    span: Duration,
    cpu: CpuPhase,
}

async fn run(args: Args) -> anyhow::Result<()> {
    check_args(&args)?;
    let per_session = args.probes_per_session;
    let (sessions, fd_limited) = fit_sessions_to_fd_limit(&args)?;
    let probes = u64::from(sessions) * u64::from(per_session);
    ensure!(
        probes < u64::from(u32::MAX - WARMUP_PROBES),
        "too many probes"
    );
    let connections = probes + u64::from(sessions);
    let sources: Vec<IpAddr> = (1..=args.source_ips)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 1, i as u8)))
        .collect();

    let mut server = spawn_server(&args, sessions, connections)?;
    let pid = server.pid();
    let addr = server.addr;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!(
        "idle-scale: {} (pid {pid}) on {addr}; {cpus} CPUs; {sessions} sessions x {per_session} probes from {} source addresses",
        args.server.describe(),
        sources.len()
    );
    let firing = args.server == ServerKind::Pathdoc;

    let (arrival_tx, mut arrival_rx) = mpsc::unbounded_channel::<Arrival>();
    let sinks = Sinks {
        arrivals: arrival_tx,
        closed: Arc::new(AtomicU64::new(0)),
        control: Arc::new(ControlStats::default()),
        connect_slots: Arc::new(Semaphore::new(args.connect_concurrency.max(1))),
    };

    let warm = warm_up(addr, firing, &sinks, &mut arrival_rx).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = snapshot(&mut server, "during warm-up")?;

    let open_clock = CpuClock::start(pid)?;
    let loads = open_load(&sources, addr, sessions, per_session, firing, &sinks).await?;
    let open_cpu = open_clock.stop()?;
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
    let held = snapshot(&mut server, "after opening")?;

    let idle_clock = CpuClock::start(pid)?;
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let idle_cpu = idle_clock.stop()?;
    ensure_alive(&mut server, "while idle")?;
    let closed_while_idle = sinks.closed.load(Ordering::Relaxed);

    let fire = if firing {
        Some(fire_schedule(&args, &loads, pid, &mut arrival_rx).await?)
    } else {
        None
    };
    let after_fire = match fire {
        Some(_) => Some(snapshot(&mut server, "after firing")?),
        None => None,
    };

    print_report(&Report {
        args: &args,
        cpus,
        connections,
        probes,
        sessions,
        fd_limited,
        baseline,
        held,
        after_fire,
        open_cpu,
        idle_cpu,
        fire,
        closed_while_idle,
        closed: sinks.closed.load(Ordering::Relaxed),
        control: &sinks.control,
    });
    drop(loads);
    drop(warm);
    drop(server);
    Ok(())
}

/// The bounds the options must keep.
fn check_args(args: &Args) -> anyhow::Result<()> {
    ensure!(
        (1..=254).contains(&args.source_ips),
        "--source-ips must be 1..=254"
    );
    ensure!(args.sessions >= 1, "--sessions must be at least 1");
    ensure!(
        (1..=pathdoc_idle::server::MAX_PROBES_PER_SESSION as u32)
            .contains(&args.probes_per_session),
        "--probes-per-session must be 1..={}",
        pathdoc_idle::server::MAX_PROBES_PER_SESSION
    );
    ensure!(
        args.fire_batch >= 1 && args.fire_interval_ms >= 1,
        "empty fire schedule"
    );
    Ok(())
}

/// How many of the requested sessions fit under the open-file limit, and the limit when it cut
/// them. Server and generator each hold one descriptor per connection; both live under this
/// process's RLIMIT_NOFILE (the child inherits it). Without CAP_SYS_RESOURCE the hard limit
/// cannot be raised: fit the load under it rather than fail, and say so in the report.
fn fit_sessions_to_fd_limit(args: &Args) -> anyhow::Result<(u32, Option<FdLimited>)> {
    let per_session = args.probes_per_session;
    let fd_limit = fd_limit();
    let fd_budget = fd_limit.saturating_sub(FD_MARGIN + u64::from(WARMUP_PROBES) + 1);
    let fitting = (fd_budget / (u64::from(per_session) + 1)) as u32;
    ensure!(
        fitting >= 1,
        "RLIMIT_NOFILE {fd_limit} leaves no room for one session of {per_session} probes"
    );
    let sessions = args.sessions.min(fitting);
    let fd_limited = (sessions < args.sessions).then_some(FdLimited {
        limit: fd_limit,
        requested: u64::from(args.sessions) * u64::from(per_session),
    });
    if let Some(l) = &fd_limited {
        eprintln!(
            "idle-scale: WARNING: RLIMIT_NOFILE is {} and cannot be raised (no CAP_SYS_RESOURCE?): \
             running {sessions} sessions instead of {} ({} probe connections instead of {})",
            l.limit,
            args.sessions,
            u64::from(sessions) * u64::from(per_session),
            l.requested
        );
    }
    Ok((sessions, fd_limited))
}

/// Warm-up: one small session from 127.0.0.1 exercises every code path (and, on the pathdoc
/// server, one round of probes); it stays open and is part of the baseline.
async fn warm_up(
    addr: SocketAddr,
    firing: bool,
    sinks: &Sinks,
    arrival_rx: &mut mpsc::UnboundedReceiver<Arrival>,
) -> anyhow::Result<SessionLoad> {
    let warm_index = u32::MAX - WARMUP_PROBES;
    let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let warm = open_session(localhost, addr, WARMUP_PROBES, warm_index, firing, sinks)
        .await
        .context("warm-up session")?;
    if let Some(commands) = &warm.commands {
        let _ = commands.send(CtlCommand::Fire {
            tags: (0..WARMUP_PROBES).collect(),
            nonce: 1,
        });
        let deadline = tokio::time::Instant::now() + load::STEP_DEADLINE;
        let mut got = 0;
        while got < WARMUP_PROBES {
            match tokio::time::timeout_at(deadline, arrival_rx.recv()).await {
                Ok(Some(_)) => got += 1,
                _ => bail!("warm-up: only {got} of {WARMUP_PROBES} probes arrived"),
            }
        }
    }
    Ok(warm)
}

/// Open the load: `sessions` sessions of `per_session` probes, round-robin over `sources`.
async fn open_load(
    sources: &[IpAddr],
    addr: SocketAddr,
    sessions: u32,
    per_session: u32,
    firing: bool,
    sinks: &Sinks,
) -> anyhow::Result<Vec<SessionLoad>> {
    let probes = u64::from(sessions) * u64::from(per_session);
    let mut loads = Vec::with_capacity(sessions as usize);
    for s in 0..sessions {
        let source = sources[s as usize % sources.len()];
        let load = open_session(source, addr, per_session, s * per_session, firing, sinks)
            .await
            .with_context(|| {
                format!(
                    "opening session {s} from {source} ({} probe connections open before it)",
                    u64::from(s) * u64::from(per_session)
                )
            })?;
        loads.push(load);
        if (s + 1) % 10 == 0 || s + 1 == sessions {
            eprintln!(
                "idle-scale: {} of {probes} probe connections open",
                u64::from(s + 1) * u64::from(per_session)
            );
        }
    }
    Ok(loads)
}

fn spawn_server(args: &Args, sessions: u32, connections: u64) -> anyhow::Result<ServerProcess> {
    let sources = u64::from(args.source_ips);
    let cmd = match args.server {
        ServerKind::Pathdoc => {
            let exe = match &args.pathdoc {
                Some(p) => p.clone(),
                None => std::env::current_exe()
                    .context("locating this program")?
                    .with_file_name("pathdoc"),
            };
            ensure!(
                exe.exists(),
                "{} not found (cargo build --release -p pathdoc-cli, or pass --pathdoc)",
                exe.display()
            );
            let mut cmd = Command::new(exe);
            cmd.arg("server")
                .args(["--listen", "127.0.0.1:0"])
                .arg("--max-connections-per-ip")
                .arg((connections.div_ceil(sources) + 64).to_string())
                .arg("--max-connections")
                .arg((connections + 10_000).to_string())
                .arg("--max-sessions-per-ip")
                .arg((u64::from(sessions).div_ceil(sources) + 1).to_string())
                .arg("--max-sessions")
                .arg((u64::from(sessions) + 64).to_string())
                .arg("--max-idle-probes-per-ip")
                .arg((connections.div_ceil(sources) + 64).to_string())
                .arg("--max-idle-probes")
                .arg((connections + 10_000).to_string())
                .args(["--max-session", "2h"]);
            cmd
        }
        ServerKind::Reference | ServerKind::Bare => {
            let mut cmd = Command::new(std::env::current_exe().context("locating this program")?);
            let flag = match args.server {
                ServerKind::Bare => "--serve-bare",
                _ => "--serve-reference",
            };
            cmd.args([flag, "127.0.0.1:0"]);
            cmd
        }
    };
    ServerProcess::spawn(cmd, Duration::from_secs(15))
}

/// Fire every probe connection once: every period a batch spread over all sessions (position p
/// of the schedule is session p mod M, tag p div M). The intended fire time of batch t is
/// start + t × period, so any lateness of the client's own timer counts against the server.
async fn fire_schedule(
    args: &Args,
    loads: &[SessionLoad],
    pid: u32,
    arrivals: &mut mpsc::UnboundedReceiver<Arrival>,
) -> anyhow::Result<FireResult> {
    let sessions = loads.len() as u64;
    let per_session = u64::from(args.probes_per_session);
    let total = sessions * per_session;
    let batch = u64::from(args.fire_batch);
    let period = Duration::from_millis(args.fire_interval_ms);
    let ticks = total.div_ceil(batch);
    let mut expected_nonce = vec![0u64; total as usize];
    let mut intended = Vec::with_capacity(ticks as usize);
    let mut tally = Tally {
        arrived: vec![None; total as usize],
        received: 0,
        wrong_nonce: 0,
    };
    eprintln!("idle-scale: firing {total} probes, {batch} every {period:?} ({ticks} batches)");
    let clock = CpuClock::start(pid)?;
    let start = Instant::now() + Duration::from_millis(200);
    for t in 0..ticks {
        let at = start + period * t as u32;
        let nonce = t + 1;
        // Keep receiving while waiting for the next batch time.
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(at.into()) => break,
                a = arrivals.recv() => match a {
                    Some(a) => tally.store(a, &expected_nonce),
                    None => bail!("arrival channel closed"),
                },
            }
        }
        intended.push(at);
        let mut per: Vec<Vec<u32>> = vec![Vec::new(); loads.len()];
        for p in t * batch..((t + 1) * batch).min(total) {
            let s = p % sessions;
            let tag = p / sessions;
            per[s as usize].push(tag as u32);
            expected_nonce[(s * per_session + tag) as usize] = nonce;
        }
        for (load, tags) in loads.iter().zip(per) {
            if tags.is_empty() {
                continue;
            }
            if let Some(commands) = &load.commands {
                // The server takes a bounded number of tags per request (its reply must fit
                // a frame); the real client splits the same way.
                for part in tags.chunks(pathdoc_idle::server::MAX_TAGS_PER_REQUEST) {
                    let _ = commands.send(CtlCommand::Fire {
                        tags: part.to_vec(),
                        nonce,
                    });
                }
            }
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tally.received < total {
        match tokio::time::timeout_at(deadline, arrivals.recv()).await {
            Ok(Some(a)) => tally.store(a, &expected_nonce),
            _ => break,
        }
    }
    let cpu = clock.stop()?;
    let errors = tally
        .arrived
        .iter()
        .zip(&expected_nonce)
        .filter_map(|(at, &nonce)| {
            let at = (*at)?;
            Some(at.saturating_duration_since(intended[(nonce - 1) as usize]))
        })
        .collect();
    Ok(FireResult {
        fired: total,
        errors: stats::summarize(errors),
        lost: total - tally.received,
        wrong_nonce: tally.wrong_nonce,
        span: period * ticks as u32,
        cpu,
    })
}

struct Report<'a> {
    args: &'a Args,
    cpus: usize,
    connections: u64,
    probes: u64,
    sessions: u32,
    fd_limited: Option<FdLimited>,
    baseline: Snapshot,
    held: Snapshot,
    after_fire: Option<Snapshot>,
    open_cpu: CpuPhase,
    idle_cpu: CpuPhase,
    fire: Option<FireResult>,
    closed_while_idle: u64,
    closed: u64,
    control: &'a ControlStats,
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

fn print_report(r: &Report<'_>) {
    let n = r.connections as f64;
    let per_conn = |s: &Snapshot| {
        (
            (s.memory.rss as f64 - r.baseline.memory.rss as f64) / n,
            (s.memory.anonymous as f64 - r.baseline.memory.anonymous as f64) / n,
        )
    };
    let kind = r.args.server.describe();
    println!();
    println!("Idle server scale: {kind}, loopback, {} CPUs", r.cpus);
    println!(
        "  connections held        {} ({} probe + {} control) from {} source addresses, all open: {}",
        r.connections,
        r.probes,
        r.sessions,
        r.args.source_ips,
        if r.closed_while_idle == 0 { "yes" } else { "NO" }
    );
    if let Some(l) = &r.fd_limited {
        println!(
            "  LIMITED                 RLIMIT_NOFILE hard limit {} (not raisable here) caps both processes: {} of the {} requested probe connections",
            l.limit, r.probes, l.requested
        );
    }
    println!(
        "  server memory baseline  RSS {} (anonymous {})",
        mib(r.baseline.memory.rss as f64),
        mib(r.baseline.memory.anonymous as f64)
    );
    let mut rows = vec![("held idle", r.held)];
    if let Some(s) = r.after_fire {
        rows.push(("after firing", s));
    }
    for (name, s) in &rows {
        let (rss, anon) = per_conn(s);
        println!(
            "  {name:<22}  RSS {} (+{}) = {rss:.0} B per connection; anonymous {anon:.0} B per connection",
            mib(s.memory.rss as f64),
            mib(s.memory.rss as f64 - r.baseline.memory.rss as f64),
        );
    }
    let k = &r.held.kernel;
    let kb = &r.baseline.kernel;
    let sockets = k.tcp_inuse.saturating_sub(kb.tcp_inuse);
    println!(
        "  kernel (not pathdoc's)  +{sockets} TCP sockets (both ends), slab +{} (~{:.0} B per socket), socket buffers +{}",
        mib(k.slab_bytes as f64 - kb.slab_bytes as f64),
        (k.slab_bytes as f64 - kb.slab_bytes as f64) / sockets.max(1) as f64,
        mib(k.tcp_buffer_bytes as f64 - kb.tcp_buffer_bytes as f64),
    );
    let cpu = |p: &CpuPhase| {
        format!(
            "{:.2} s CPU in {:.1} s ({:.0}% of one core)",
            p.cpu.as_secs_f64(),
            p.wall.as_secs_f64(),
            p.percent()
        )
    };
    println!("  server CPU, opening     {}", cpu(&r.open_cpu));
    println!("  server CPU, idle hold   {}", cpu(&r.idle_cpu));
    if let Some(f) = &r.fire {
        println!("  server CPU, firing      {}", cpu(&f.cpu));
        println!(
            "  probes fired            {} over {:.1} s ({} every {} ms, across all sessions)",
            f.fired,
            f.span.as_secs_f64(),
            r.args.fire_batch,
            r.args.fire_interval_ms
        );
        println!(
            "  probe-time error        p50 {}  p90 {}  p99 {}  max {}  (arrival at client - intended fire time)",
            ms(f.errors.p50),
            ms(f.errors.p90),
            ms(f.errors.p99),
            ms(f.errors.max)
        );
        println!(
            "  lost probes             {} (server said not sent: {}; duplicate/wrong nonce: {}; connections closed: {}; control failures: {})",
            f.lost,
            r.control.not_sent.load(Ordering::Relaxed),
            f.wrong_nonce,
            r.closed,
            r.control.failed.load(Ordering::Relaxed)
        );
        if let Some(e) = r
            .control
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            println!("  first control error     {e}");
        }
    }
    println!();
    println!("  target                                      measured       result");
    println!(
        "  >= {TARGET_CONNECTIONS} concurrent probe connections      {:<14} {}",
        r.probes,
        verdict(r.probes >= TARGET_CONNECTIONS && r.closed_while_idle == 0)
    );
    let worst = rows
        .iter()
        .map(|(_, s)| per_conn(s).0)
        .fold(f64::MIN, f64::max);
    println!(
        "  <= 2048 B own memory per connection         {:<14} {}",
        format!("{worst:.0} B"),
        verdict(worst <= TARGET_BYTES_PER_CONNECTION)
    );
    if let Some(f) = &r.fire {
        println!(
            "  probe-time error p99 <= 100 ms              {:<14} {}",
            ms(f.errors.p99),
            verdict(f.errors.p99 <= TARGET_P99 && f.errors.count > 0)
        );
        println!(
            "  lost probes = 0 (loopback)                  {:<14} {}",
            f.lost,
            verdict(f.lost == 0)
        );
    }
}

/// This process's RLIMIT_NOFILE soft limit (after [`raise_fd_limit`]).
fn fd_limit() -> u64 {
    pathdoc_sys::fd_limit::soft_limit().unwrap_or(1024)
}

/// Each connection is a descriptor: lift RLIMIT_NOFILE (as root up to 1 Mi).
pub(crate) fn raise_fd_limit() {
    let _ = pathdoc_sys::fd_limit::raise(pathdoc_sys::fd_limit::RaisePolicy::AtLeast(1 << 20));
}
