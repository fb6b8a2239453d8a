//! `pathdoc speed HOST`: measure TCP throughput to a pathdoc server and name what limits it.
//!
//! The measuring and judging lives in crates/pathdoc-speed; this module parses the options,
//! runs the tests (one, or one per congestion control with `--compare-cc`) and fills the report.

use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use anyhow::Context;
use clap::Args;
use pathdoc_core::{CheckOutcome, Progress, Report};
use pathdoc_speed::{Mode, SpeedOptions};

use super::client::{self, ServerTarget};
use crate::args::{bytes, ms, seconds_or_duration, secs};
use crate::error::CliError;
use crate::progress::TerminalProgress;
use crate::{interrupt, output, Global};

pub const EXAMPLES: &str = "Examples:
  pathdoc speed server.example.net                # upload for 10 s
  pathdoc speed server.example.net -R -t 30s      # download for 30 s
  pathdoc speed server.example.net --bidir -P 4   # both ways at once, 4 streams each
  pathdoc speed server.example.net -n 1GiB        # until 1 GiB has arrived
  pathdoc speed server.example.net --compare-cc   # CUBIC vs BBR on this path
  pathdoc speed server.example.net --report s.html  # also an HTML report with the plots

Prints one line per interval (goodput, retransmits, congestion window, RTT) and a summary, then
the findings. Ctrl-C stops the test and prints what was measured.";

#[derive(Args, Debug)]
// `-i` is iperf3's --interval here; the SSH identity file keeps its long form --ssh-identity.
#[command(mut_arg("identity", |a| a.short(None)))]
pub struct SpeedArgs {
    #[command(flatten)]
    pub target: ServerTarget,
    /// Start a temporary pathdoc server on [USER@]HOST[:PORT] over SSH and measure to it.
    #[arg(long, value_name = "[USER@]HOST[:PORT]")]
    pub ssh: Option<String>,
    /// Server → client (download) instead of client → server.
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at the same time.
    #[arg(long)]
    pub bidir: bool,
    /// Parallel TCP streams per direction.
    #[arg(long, short = 'P', value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=pathdoc_speed::spec::MAX_STREAMS as i64))]
    pub streams: u32,
    /// Test length, e.g. 10s, 500ms, 1m (a bare number is seconds, as in iperf3).
    #[arg(long, short = 't', value_name = "DURATION", default_value = "10s",
          value_parser = seconds_or_duration(ms(100), pathdoc_speed::spec::MAX_TEST_TIME))]
    pub time: Duration,
    /// Stop after this many payload bytes per direction instead, e.g. 1GiB, 500MB.
    #[arg(long, short = 'n', value_name = "BYTES", value_parser = bytes(1, 1 << 50))]
    pub bytes: Option<u64>,
    /// Congestion control for the senders on both ends (cubic, bbr, reno, ...).
    #[arg(long, short = 'C', value_name = "NAME", value_parser = congestion_control)]
    pub cc: Option<String>,
    /// Run once with CUBIC and once with BBR and say which wins on this path.
    #[arg(long, conflicts_with = "cc")]
    pub compare_cc: bool,
    /// SO_SNDBUF/SO_RCVBUF on both ends, e.g. 256KiB (default: kernel autotuning).
    #[arg(long, short = 'w', value_name = "BYTES", value_parser = bytes(4096, 1 << 30))]
    pub window: Option<u64>,
    /// Sampling interval of the per-interval table (a bare number is seconds).
    #[arg(long, short = 'i', value_name = "DURATION", default_value = "1s",
          value_parser = seconds_or_duration(ms(100), secs(60)))]
    pub interval: Duration,
    #[command(flatten)]
    pub html: super::report_html::HtmlReportArgs,
    #[command(flatten)]
    pub ssh_opts: super::ssh::SshClientArgs,
}

/// A congestion-control name as the kernel spells them (`cubic`, `bbr`, `reno`, `dctcp`…):
/// lower-case letters, digits, `_` and `-`, at most 15 characters (TCP_CA_NAME_MAX).
pub fn congestion_control(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() < 16
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a congestion control name (e.g. cubic, bbr, reno; see /proc/sys/net/ipv4/tcp_available_congestion_control)"
        ))
    }
}

impl SpeedArgs {
    fn options(&self) -> Result<SpeedOptions, CliError> {
        if self.bytes.is_none() && self.interval > self.time {
            return Err(CliError::usage(format!(
                "--interval {} is longer than the test (-t {})",
                pathdoc_core::units::format_duration(self.interval),
                pathdoc_core::units::format_duration(self.time)
            )));
        }
        let mode = if self.bidir {
            Mode::Both
        } else if self.reverse {
            Mode::Download
        } else {
            Mode::Upload
        };
        Ok(SpeedOptions {
            mode,
            streams: self.streams,
            duration: self.time,
            bytes: self.bytes,
            cc: self.cc.clone(),
            // Bounded by the parser to 1 GiB.
            window: self.window.map(|w| w as u32),
            interval: self.interval,
        })
    }
}

pub fn run(mut args: SpeedArgs, global: Global) -> anyhow::Result<i32> {
    let opts = args.options()?;
    let html = args.html.prepare()?;
    let progress = TerminalProgress::new(global);
    let remote = match super::ssh::prepare_target(
        &mut args.target,
        args.ssh.as_deref(),
        &args.ssh_opts,
        &progress,
        global,
    )? {
        super::ssh::SshStart::Cleaned(code) => return Ok(code),
        start => start,
    };
    let target = args.target.plan()?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let mut report = runtime.block_on(async {
        let cancel = interrupt::install(global.quiet).context("installing the Ctrl-C handler")?;
        let reached = client::reach(&args.target, &target, &progress, &cancel).await?;
        let mut report = Report::new(
            pathdoc_core::Command::Speed,
            client::target_label(&target, reached.as_ref()),
        );
        let check = pathdoc_speed::CHECK;
        match reached {
            None => client::not_run(&mut report, check, "the throughput test"),
            Some(reached) => {
                let work = measure(
                    reached.addr,
                    args.target.auth_token.clone(),
                    std::slice::from_ref(&opts),
                    args.compare_cc,
                    &progress,
                    &cancel,
                );
                match client::until_stopped(work, &cancel).await {
                    Some(result) => {
                        let result = result.map(|o| client::add(&mut report, check, o));
                        client::record(&mut report, check, result, cancel.is_cancelled())
                    }
                    None => client::abandoned(&mut report, check),
                }
            }
        }
        report.interrupted = cancel.is_cancelled();
        Ok::<_, anyhow::Error>(report)
    })?;
    report.target = remote.label(report.target);
    remote.add_next_steps(&mut report);
    progress.finish();
    crate::provenance::stamp(&mut report);
    let code = output::print_report(&report, global);
    if let Some(html) = html {
        html.write(&report)?;
    }
    Ok(code)
}

/// Run each of `tests` (with `compare_cc`: once per congestion control) and add findings and
/// raw data to `report`. Shared with `pathdoc check`. The running and judging is
/// `pathdoc_speed::measure`; an error here means the first test could not run at all (later
/// failures and Ctrl-C come back as findings next to what was measured).
/// A sequence of throughput tests: its findings and `data.throughput`.
pub async fn measure(
    server: SocketAddr,
    token: Option<String>,
    tests: &[SpeedOptions],
    compare: bool,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> anyhow::Result<CheckOutcome> {
    let first = tests.first().map_or(Mode::Upload, |t| t.mode);
    let m = pathdoc_speed::measure(server, token, tests, compare, progress, cancel)
        .await
        .with_context(|| {
            format!(
                "throughput test ({})",
                pathdoc_speed::measure::mode_label(first)
            )
        })?;
    Ok(CheckOutcome {
        findings: m.findings.clone(),
        data: m.data(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_control_names_are_checked_by_form() {
        for ok in ["cubic", "bbr", "reno", "dctcp", "bbr2", "h-tcp"] {
            assert!(congestion_control(ok).is_ok(), "{ok}");
        }
        for bad in ["", "CUBIC", "bbr;rm", "a_very_long_name_x", "bbr "] {
            assert!(congestion_control(bad).is_err(), "{bad}");
        }
    }
}
