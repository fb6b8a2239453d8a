//! `pathdoc lab delay-line` (hidden): runs the userspace delay line in the current network namespace
//! until SIGTERM/SIGINT. The lab starts one per delayed link inside the link's element namespace.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use pathdoc_lab::delay_line::{
    prepare_interface, run_delay_line, stop_on_termination_signals, DelayLineConfig,
    DirectionConfig, DirectionStats,
};

#[derive(Args, Debug, Clone)]
pub struct DelayLineArgs {
    /// First port (its frames go out of --iface-b).
    #[arg(long, value_name = "IF")]
    pub iface_a: String,
    /// Second port (its frames go out of --iface-a).
    #[arg(long, value_name = "IF")]
    pub iface_b: String,
    /// One-way delay a→b in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0.0, value_parser = parse_millis)]
    pub delay_a_to_b: f64,
    /// Jitter a→b in milliseconds: each frame's delay is uniform in delay ± jitter, never reordered.
    #[arg(long, value_name = "MS", default_value_t = 0.0, value_parser = parse_millis)]
    pub jitter_a_to_b: f64,
    /// Random loss a→b in percent of frames.
    #[arg(long, value_name = "PCT", default_value_t = 0.0, value_parser = parse_percent)]
    pub loss_a_to_b: f64,
    /// One-way delay b→a in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0.0, value_parser = parse_millis)]
    pub delay_b_to_a: f64,
    /// Jitter b→a in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0.0, value_parser = parse_millis)]
    pub jitter_b_to_a: f64,
    /// Random loss b→a in percent of frames.
    #[arg(long, value_name = "PCT", default_value_t = 0.0, value_parser = parse_percent)]
    pub loss_b_to_a: f64,
    /// Act as a NIC whose TCP segmentation offload cuts a→b super-frames into IP packets of this
    /// size whatever the sender's MSS (QEMU's rtl8139 uses 1500).
    #[arg(long, value_name = "BYTES")]
    pub nic_segments_a_to_b: Option<u16>,
    /// The same for b→a.
    #[arg(long, value_name = "BYTES")]
    pub nic_segments_b_to_a: Option<u16>,
    /// Bring both interfaces up and silence IPv6 on them before starting.
    #[arg(long)]
    pub prepare: bool,
}

fn parse_millis(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of milliseconds"))?;
    if !value.is_finite() || !(0.0..=10_000.0).contains(&value) {
        return Err(format!("{value} ms is outside 0..=10000 ms"));
    }
    Ok(value)
}

fn parse_percent(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a percentage"))?;
    if !(0.0..=100.0).contains(&value) {
        return Err(format!("{value} % is outside 0..=100 %"));
    }
    Ok(value)
}

fn millis(ms: f64) -> Duration {
    Duration::from_secs_f64(ms / 1000.0)
}

impl DelayLineArgs {
    /// The library configuration these arguments describe.
    pub fn config(&self) -> DelayLineConfig {
        DelayLineConfig {
            iface_a: self.iface_a.clone(),
            iface_b: self.iface_b.clone(),
            a_to_b: DirectionConfig {
                delay: millis(self.delay_a_to_b),
                jitter: millis(self.jitter_a_to_b),
                loss_percent: self.loss_a_to_b,
                nic_segments_at: self.nic_segments_a_to_b,
            },
            b_to_a: DirectionConfig {
                delay: millis(self.delay_b_to_a),
                jitter: millis(self.jitter_b_to_a),
                loss_percent: self.loss_b_to_a,
                nic_segments_at: self.nic_segments_b_to_a,
            },
        }
    }
}

pub fn run(args: DelayLineArgs) -> anyhow::Result<i32> {
    let cfg = args.config();
    cfg.validate()?;
    if args.prepare {
        for iface in [&cfg.iface_a, &cfg.iface_b] {
            prepare_interface(iface).with_context(|| format!("preparing {iface}"))?;
        }
    }
    let stop = stop_on_termination_signals()?;
    crate::errln!(
        "pathdoc delay-line: {} <-> {} (a→b {} ms ±{} ms {} % loss, b→a {} ms ±{} ms {} % loss); stop with SIGTERM",
        cfg.iface_a,
        cfg.iface_b,
        args.delay_a_to_b,
        args.jitter_a_to_b,
        args.loss_a_to_b,
        args.delay_b_to_a,
        args.jitter_b_to_a,
        args.loss_b_to_a
    );
    for (direction, bytes) in [
        ("a→b", args.nic_segments_a_to_b),
        ("b→a", args.nic_segments_b_to_a),
    ] {
        if let Some(bytes) = bytes {
            crate::errln!(
                "pathdoc delay-line: {direction} acts as a NIC that cuts TCP super-frames into {bytes}-byte IP packets whatever the MSS"
            );
        }
    }
    let stats = run_delay_line(&cfg, stop)?;
    crate::errln!("pathdoc delay-line: a→b {}", describe(&stats.a_to_b));
    crate::errln!("pathdoc delay-line: b→a {}", describe(&stats.b_to_a));
    Ok(0)
}

fn describe(s: &DirectionStats) -> String {
    format!(
        "received {} frames ({} bytes), forwarded {} ({} bytes); dropped: {} loss, {} queue full, {} truncated, {} kernel, {} send errors; peak queue {} bytes; late by mean {} µs, max {} µs",
        s.frames_received,
        s.bytes_received,
        s.frames_forwarded,
        s.bytes_forwarded,
        s.dropped_loss,
        s.dropped_queue_full,
        s.dropped_truncated,
        s.dropped_by_kernel,
        s.send_errors,
        s.peak_queue_bytes,
        s.mean_late_us,
        s.max_late_us
    )
}
