//! The throughput part of `pathdoc check`: a short upload, then a short download, each judged
//! on its own (window, buffer, loss, CPU) and against each other (asymmetry).
//! The measuring lives in crates/pathdoc-speed; the run/report glue is shared with `pathdoc speed`.

use std::time::Duration;

use clap::Args;
use pathdoc_core::Report;
use pathdoc_speed::{Mode, SpeedOptions};

use super::check::CheckContext;
use super::speed::{measure, parse_duration};

#[derive(Args, Debug, Clone)]
pub struct ThroughputArgs {
    /// Length of each direction's throughput test.
    #[arg(long = "throughput-time", default_value = "5s", value_parser = parse_duration)]
    pub time: Duration,
    /// Parallel streams per direction in the throughput test.
    #[arg(long = "throughput-streams", default_value_t = 1)]
    pub streams: u32,
    /// Congestion control for the throughput test's senders (default: each host's own).
    #[arg(long = "throughput-cc")]
    pub cc: Option<String>,
    /// Also compare CUBIC with BBR (doubles the throughput test's length).
    #[arg(long = "throughput-compare-cc", conflicts_with = "cc")]
    pub compare_cc: bool,
}

pub async fn run(
    ctx: &CheckContext<'_>,
    args: &ThroughputArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    if args.streams == 0 || args.streams > pathdoc_speed::spec::MAX_STREAMS {
        anyhow::bail!(
            "--throughput-streams must be between 1 and {}",
            pathdoc_speed::spec::MAX_STREAMS
        );
    }
    let base = SpeedOptions {
        mode: Mode::Upload,
        streams: args.streams,
        duration: args.time,
        bytes: None,
        cc: args.cc.clone(),
        window: None,
        interval: Duration::from_secs(1)
            .min(args.time / 2)
            .max(Duration::from_millis(100)),
    };
    let tests = [
        base.clone(),
        SpeedOptions {
            mode: Mode::Download,
            ..base
        },
    ];
    measure(
        ctx.server,
        ctx.auth_token.clone(),
        &tests,
        args.compare_cc,
        ctx.progress,
        report,
    )
    .await
}

/// `pathdoc lab demo` step: run the throughput check over the scenario and show its verdicts.
pub fn demo_check(
    lab: &pathdoc_lab::Lab,
    say: pathdoc_lab::demo::Say,
) -> Result<(), pathdoc_lab::LabError> {
    use pathdoc_lab::LabError;
    let exe = std::env::current_exe()
        .map_err(|e| LabError::Measurement(format!("cannot find the pathdoc binary: {e}")))?;
    let port = pathdoc_proto::DEFAULT_PORT;
    let mut server = lab.command("server", &exe);
    server
        .args(["server", "--listen", &format!("0.0.0.0:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _server = lab.spawn("server", server)?;
    let addr = std::net::SocketAddr::new(lab.addr("server"), port);
    let ns = lab.netns("client").to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pathdoc_sys::netns::run_in_netns(&ns, || {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300))
    })
    .map_err(|e| LabError::Measurement(e.to_string()))?
    .is_err()
    {
        if std::time::Instant::now() > deadline {
            return Err(LabError::Measurement(format!(
                "pathdoc server did not come up at {addr}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut check = lab.command("client", &exe);
    check.args([
        "check",
        &addr.to_string(),
        "--throughput",
        "--throughput-time",
        "4s",
        "--json",
    ]);
    let done = pathdoc_lab::exec::run_unchecked(&mut check, None, Duration::from_secs(60))?;
    let report: Report = serde_json::from_str(&done.stdout).map_err(|e| {
        LabError::Measurement(format!(
            "pathdoc check --throughput printed no report ({e}): {}",
            done.stderr.trim()
        ))
    })?;
    say(format!("pathdoc check {addr} --throughput:"));
    for f in &report.findings {
        say(format!("  [{}] {}", f.status, f.title));
        if f.status >= pathdoc_core::Status::Warn {
            if let Some(r) = f.remedies.first() {
                say(format!(
                    "      fix: {}",
                    r.command.as_deref().unwrap_or(&r.description)
                ));
            }
        }
    }
    Ok(())
}
