//! `pathdoc lab capture LAB HOST[:IFACE] -w FILE`: record what crosses one interface of a lab
//! host (tcpdump inside its namespace) until Ctrl-C or `--duration`, for `pathdoc analyze`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use pathdoc_lab::capture::{self, CaptureOptions};
use pathdoc_lab::state;
use serde_json::json;

use crate::Global;

pub const EXAMPLES: &str = "Examples:\n  pathdoc lab capture demo client -w client.pcap               # until Ctrl-C\n  pathdoc lab capture demo hop1:wan0 -w hop.pcap --duration 30s --snaplen 128\n  pathdoc lab capture demo server -w server.pcap --filter 'tcp or icmp'\nthen: pathdoc analyze client.pcap server.pcap";

#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// Lab name (see `pathdoc lab status`).
    lab: String,
    /// Host and optional interface: `client`, `server:lan0`, `hop1:wan0` (default: the
    /// interface towards the server; the server's towards the client).
    host: String,
    /// Output file (pcap).
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: PathBuf,
    /// Stop after this long (e.g. `30s`, `2m`); default: until Ctrl-C.
    #[arg(long, value_parser = pathdoc_core::units::parse_duration)]
    duration: Option<Duration>,
    /// Bytes kept of each packet (0 = all; 128 keeps every header).
    #[arg(long, default_value_t = 0)]
    snaplen: u32,
    /// pcap filter expression, e.g. `tcp or icmp`.
    #[arg(long)]
    filter: Option<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(a: CaptureArgs, prefix: &str, global: Global) -> anyhow::Result<i32> {
    pathdoc_lab::preflight::require_root()?;
    let st = state::load(prefix, &a.lab)?;
    let (host, iface) = match a.host.split_once(':') {
        Some((h, i)) => (h.to_string(), Some(i.to_string())),
        None => (a.host.clone(), None),
    };
    let netns = st
        .hosts
        .iter()
        .find(|h| h.name == host)
        .map(|h| h.netns.clone())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no host `{host}` in lab {}; hosts: {}",
                a.lab,
                st.hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    let path = std::path::absolute(&a.write).unwrap_or(a.write.clone());
    let opts = CaptureOptions {
        snaplen: a.snaplen,
        filter: a.filter.clone(),
    };
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::SeqCst));
    let running = capture::start_in_netns(&netns, &host, iface.as_deref(), &path, &opts)?;
    let iface = running.iface.clone();
    if !global.json {
        eprintln!(
            "capturing on {host}:{iface} of lab {} to {}{}",
            a.lab,
            path.display(),
            if a.duration.is_some() {
                ""
            } else {
                " (Ctrl-C stops)"
            }
        );
    }
    let started = Instant::now();
    while !STOP.load(Ordering::SeqCst) && a.duration.is_none_or(|d| started.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = running.stop()?;
    if global.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "schema": pathdoc_lab::SCHEMA, "command": "capture", "lab": a.lab,
                "host": host, "iface": iface, "file": path, "packets": stats.captured,
                "dropped_by_kernel": stats.dropped_by_kernel,
                "seconds": started.elapsed().as_secs_f64(),
            }))?
        );
    } else {
        println!(
            "{} packets captured on {host}:{iface} in {:.1} s ({} dropped by the kernel) → {}\nanalyse it: pathdoc analyze {}",
            stats.captured,
            started.elapsed().as_secs_f64(),
            stats.dropped_by_kernel,
            path.display(),
            path.display()
        );
    }
    Ok(0)
}
