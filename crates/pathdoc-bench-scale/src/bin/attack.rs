//! `pathdoc-bench-attack`: the hostile load of issue #13 against a `pathdoc server` binary, and
//! what it makes the server hold (descriptors, threads, memory, kernel send queues), phase by
//! phase. Run it against two binaries (before/after a change) with the same flags to compare;
//! docs/server.md has the figures. Loopback only; needs a descriptor limit of ~20 000.
//!
//! ```sh
//! cargo build --release -p pathdoc-cli -p pathdoc-bench-scale
//! target/release/pathdoc-bench-attack --pathdoc target/release/pathdoc -- --max-connections-per-ip 1024
//! ```
//! Exit code 0 when every phase ran, 2 when it could not run.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use pathdoc_bench_scale::attack::{self, mib, percentile, Readings, Target};
use pathdoc_bench_scale::child::{self, ServerProcess};
use pathdoc_bench_scale::net::source;

#[derive(Parser, Debug)]
#[command(
    name = "pathdoc-bench-attack",
    about = "Hostile load against a pathdoc server on loopback (issue #13), with what it makes the server hold"
)]
struct Args {
    /// The pathdoc binary whose server is attacked (a fresh server per phase).
    #[arg(long, required_unless_present = "server")]
    pathdoc: Option<PathBuf>,
    /// Attack this running server instead (with --server-pid): watch its log as an operator.
    #[arg(long, requires = "server_pid")]
    server: Option<std::net::SocketAddr>,
    #[arg(long)]
    server_pid: Option<u32>,
    /// Phases to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "flood,probe-sockets,bulk,refresh,streams,sessions"
    )]
    phases: Vec<Phase>,
    /// Refusal flood: silent connections that fill the per-address cap first (match the server's
    /// --max-connections-per-ip).
    #[arg(long, default_value_t = 1024)]
    flood_hold: u32,
    /// Refusal flood: connections over the cap.
    #[arg(long, default_value_t = 6000)]
    flood: u32,
    /// Probe sockets: source addresses and mtu sessions per address.
    #[arg(long, default_value_t = 1500)]
    probe_addresses: u32,
    #[arg(long, default_value_t = 4)]
    probe_sessions: u32,
    /// Bulk: never-read bulk-download connections on one mtu session.
    #[arg(long, default_value_t = 40)]
    bulk: u32,
    /// Session flood: source addresses and sessions per address.
    #[arg(long, default_value_t = 2000)]
    session_addresses: u32,
    #[arg(long, default_value_t = 8)]
    session_per_address: u32,
    /// Refresh: copies of one tag in one udp-refresh request.
    #[arg(long, default_value_t = 15_000)]
    refresh_copies: u32,
    /// Records: idle sessions, each registering this many UDP bindings, left lingering.
    #[arg(long, default_value_t = 50)]
    record_sessions: u32,
    #[arg(long, default_value_t = 2048)]
    record_bindings: u32,
    /// Streams: concurrent throughput tests (one address each) and upload streams per test.
    #[arg(long, default_value_t = 32)]
    tests: u32,
    #[arg(long, default_value_t = 8)]
    streams: u32,
    /// Arguments passed to `pathdoc server` after `--listen 127.0.0.1:0`.
    #[arg(last = true)]
    server_args: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Flood,
    ProbeSockets,
    Bulk,
    Refresh,
    Streams,
    Sessions,
    Records,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = child::install_signal_handler() {
        eprintln!("pathdoc-bench-attack: could not run: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pathdoc-bench-attack: could not start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(run(args));
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pathdoc-bench-attack: could not run: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A fresh server per phase, so each phase starts from the same state (or the running server).
fn spawn(args: &Args) -> anyhow::Result<(Option<ServerProcess>, Target)> {
    if let (Some(addr), Some(pid)) = (args.server, args.server_pid) {
        return Ok((None, Target { addr, pid }));
    }
    let exe = args.pathdoc.as_ref().context("--pathdoc or --server")?;
    let mut cmd = Command::new(exe);
    cmd.args(["server", "--listen", "127.0.0.1:0"])
        .args(&args.server_args);
    let server =
        ServerProcess::spawn(cmd, Duration::from_secs(15)).context("starting the server")?;
    let target = Target {
        addr: server.addr,
        pid: server.pid(),
    };
    Ok((Some(server), target))
}

fn show(label: &str, r: Readings) -> String {
    format!(
        "{label}: {} fds, {} threads, RSS {:.1} MiB, {} TCP sockets on its port with {:.1} MiB queued",
        r.fds,
        r.threads,
        mib(r.rss),
        r.sockets,
        mib(r.queued)
    )
}

async fn run(args: Args) -> anyhow::Result<()> {
    match &args.pathdoc {
        Some(p) => println!("server: {} {}", p.display(), args.server_args.join(" ")),
        None => println!("server: the one running at {:?}", args.server),
    }
    for phase in &args.phases {
        let (mut server, target) = spawn(&args)?;
        match phase {
            Phase::Flood => refusal_flood(&args, target).await?,
            Phase::ProbeSockets => probe_sockets(&args, target).await?,
            Phase::Bulk => bulk_queues(&args, target).await?,
            Phase::Refresh => {
                // Its second half needs a fresh server; this phase's is gone by then.
                udp_refresh(&args, target, server).await?;
                continue;
            }
            Phase::Streams => stream_threads(&args, target).await?,
            Phase::Records => idle_records(&args, target).await?,
            Phase::Sessions => session_flood(&args, target).await?,
        }
        if server.as_mut().is_some_and(|s| !s.alive()) {
            println!("  the server DIED during this phase");
        }
    }
    Ok(())
}

/// The refusal flood (item 4): connections over the per-client cap, refused from the accept loop.
async fn refusal_flood(args: &Args, target: Target) -> anyhow::Result<()> {
    println!(
        "\n# refusal flood (item 4): {} silent connections from 127.20.0.1, then {} more",
        args.flood_hold, args.flood
    );
    let r = attack::refusal_flood(
        target,
        source(20, 0),
        args.flood_hold,
        args.flood,
        3000,
        Duration::from_millis(1500),
    )
    .await?;
    println!(
        "  over the cap: {} in {:.1} s",
        r.outcomes.summary(),
        r.took.as_secs_f64()
    );
    println!("  {}", show("before", r.baseline));
    println!("  {}", show("peak", r.peak));
    println!(
        "  descriptors above the held connections at peak: {}",
        r.peak
            .fds
            .saturating_sub(r.baseline.fds + u64::from(args.flood_hold))
    );
    Ok(())
}

/// MTU probe sockets (item 1): many addresses open probe sockets with down-target, then leave.
async fn probe_sockets(args: &Args, target: Target) -> anyhow::Result<()> {
    println!(
        "\n# mtu probe sockets (item 1): {} addresses x {} mtu sessions with down-target, then leave",
        args.probe_addresses, args.probe_sessions
    );
    let after = [
        Duration::from_millis(500),
        Duration::from_secs(3),
        Duration::from_secs(10),
    ];
    let r = attack::mtu_probe_sockets(
        target,
        30,
        args.probe_addresses,
        args.probe_sessions,
        128,
        &after,
    )
    .await?;
    println!(
        "  sessions: {}; probe sockets opened: {}",
        r.outcomes.summary(),
        r.probe_sockets
    );
    if let Some(m) = r
        .outcomes
        .first_refusal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        println!("  first refusal: {m}");
    }
    println!("  {}", show("before", r.baseline));
    println!("  {}", show("peak", r.peak));
    for (t, reading) in &r.after {
        println!(
            "  {}",
            show(&format!("{:.1} s after leaving", t.as_secs_f64()), *reading)
        );
    }
    Ok(())
}

/// Bulk downloads never read (item 3) on one mtu session.
async fn bulk_queues(args: &Args, target: Target) -> anyhow::Result<()> {
    println!(
        "\n# bulk downloads never read (item 3): {} on one mtu session",
        args.bulk
    );
    let r = attack::bulk_queues(target, source(40, 0), args.bulk, Duration::from_secs(9)).await?;
    println!("  bulk connections: {}", r.outcomes.summary());
    println!("  {}", show("before", r.baseline));
    println!("  {}", show("peak", r.peak));
    println!(
        "  {}",
        show(
            "2 s after the server's 5 s deadline, attacker still connected",
            r.after_deadline
        )
    );
    println!("  {}", show("1 s after the attacker left", r.after_leave));
    Ok(())
}

/// udp-refresh with copies of one tag (items 5, 6), then one tag on a fresh server.
async fn udp_refresh(
    args: &Args,
    target: Target,
    server: Option<ServerProcess>,
) -> anyhow::Result<()> {
    println!(
        "\n# udp-refresh with {} copies of one tag (items 5, 6)",
        args.refresh_copies
    );
    let r = attack::udp_refresh(
        target,
        source(50, 0),
        args.refresh_copies,
        Duration::from_millis(1500),
        Duration::from_secs(3),
    )
    .await?;
    println!("  server's answer: {}", r.reply);
    println!(
        "  received in 1.5 s: {} datagrams, {:.2} MiB",
        r.datagrams_in_window,
        mib(r.bytes_in_window),
    );
    let (_server, target) = {
        drop(server);
        spawn(args)?
    };
    let one = attack::udp_refresh(
        target,
        source(50, 1),
        1,
        Duration::from_millis(1500),
        Duration::from_secs(3),
    )
    .await?;
    println!(
        "  one tag, every 200 ms: {} datagrams in 1.5 s; in 3 s after the client left: {} datagrams",
        one.datagrams_in_window, one.datagrams_after_leaving
    );
    Ok(())
}

/// Concurrent throughput tests that never send (item 6): stream threads.
async fn stream_threads(args: &Args, target: Target) -> anyhow::Result<()> {
    println!(
        "\n# concurrent throughput tests (item 6): {} tests x {} upload streams, one address each, never sending",
        args.tests, args.streams
    );
    let r = attack::stream_threads(target, 60, args.tests, args.streams, Duration::from_secs(5))
        .await?;
    println!(
        "  tests started: {}, refused with a reason: {}; connections: {}",
        r.started,
        r.refused_tests,
        r.outcomes.summary()
    );
    if let Some(m) = &r.first_test_refusal {
        println!("  first refusal: {m}");
    }
    println!("  {}", show("before", r.baseline));
    println!("  {}", show("peak", r.peak));
    Ok(())
}

/// Idle session state (memory): sessions with UDP bindings, left lingering.
async fn idle_records(args: &Args, target: Target) -> anyhow::Result<()> {
    println!(
        "\n# idle session state (memory): {} sessions x {} UDP bindings, left lingering",
        args.record_sessions, args.record_bindings
    );
    let r = attack::idle_records(target, 80, args.record_sessions, args.record_bindings).await?;
    println!(
        "  sessions: {}; bindings registered: {}",
        r.outcomes.summary(),
        r.registered
    );
    println!("  {}", show("before", r.baseline));
    println!("  {}", show("after", r.after));
    let sessions = u64::from(
        r.outcomes
            .accepted
            .load(std::sync::atomic::Ordering::Relaxed),
    )
    .max(1);
    println!(
        "  RSS growth per session: {:.0} KiB",
        r.after.rss.saturating_sub(r.baseline.rss) as f64 / 1024.0 / sessions as f64
    );
    Ok(())
}

/// The session flood (item 5), while another client times its handshakes.
async fn session_flood(args: &Args, target: Target) -> anyhow::Result<()> {
    println!(
        "\n# session flood (item 5): {} addresses x {} idle sessions left lingering; another client times its handshakes",
        args.session_addresses, args.session_per_address
    );
    let r = attack::session_flood(
        target,
        70,
        args.session_addresses,
        args.session_per_address,
        256,
        71,
    )
    .await?;
    println!(
        "  sessions: {} in {:.1} s",
        r.outcomes.summary(),
        r.took.as_secs_f64()
    );
    if let Some(m) = r
        .outcomes
        .first_refusal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        println!("  first refusal: {m}");
    }
    println!("  {}", show("before", r.baseline));
    println!("  {}", show("peak", r.peak));
    println!(
        "  another client's handshakes ({}): median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        r.observer.summary(),
        percentile(&r.handshakes, 50.0).as_secs_f64() * 1e3,
        percentile(&r.handshakes, 99.0).as_secs_f64() * 1e3,
        r.handshakes
            .last()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );
    Ok(())
}
