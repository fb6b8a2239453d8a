//! `pathdoc speed`'s iperf3-like table: one row per sampling interval and direction (goodput,
//! retransmitted segments, congestion window, smoothed RTT), then a summary row.
//!
//! Rendered from the intervals saved in the report (`data.throughput.runs[].directions[]`), never
//! from live state, so a saved JSON report renders to the same text the run printed. The live
//! figures during the run are progress (stderr), not part of the result.

use std::time::Duration;

use pathdoc_core::units::{format_bytes, format_duration, format_rate};
use pathdoc_core::Report;
use pathdoc_speed::{DirectionResult, SpeedRun};

/// The tables of every run in the report, or nothing when it holds no throughput data.
pub fn render(report: &Report) -> String {
    let Some(runs) = report
        .data
        .get(pathdoc_speed::CHECK)
        .and_then(|d| d.get("runs"))
        .and_then(|r| serde_json::from_value::<Vec<SpeedRun>>(r.clone()).ok())
    else {
        return String::new();
    };
    let mut s = String::new();
    for run in &runs {
        for d in &run.directions {
            direction_table(&mut s, d);
            s.push('\n');
        }
    }
    s
}

const HEADER: &str = "  interval           transfer      goodput   retr        cwnd       rtt";

fn direction_table(s: &mut String, d: &DirectionResult) {
    let streams = match d.streams {
        1 => "1 stream".to_string(),
        n => format!("{n} streams"),
    };
    let cc = match d.sender.congestion_control.as_str() {
        "" => String::new(),
        cc => format!(", {cc}"),
    };
    s.push_str(&format!("{}, {streams}{cc}:\n", d.direction.label()));
    s.push_str(HEADER);
    s.push('\n');
    for i in &d.intervals {
        let seconds = (i.end_s - i.start_s).max(0.0);
        s.push_str(&row(
            i.start_s,
            i.end_s,
            (i.goodput_bps * seconds / 8.0).round() as u64,
            i.goodput_bps,
            &i.retransmits.to_string(),
            &format_bytes(i.cwnd_bytes),
            i.rtt_us,
        ));
        s.push('\n');
    }
    s.push_str(&row(
        0.0,
        d.duration_s,
        d.payload_bytes,
        d.goodput_bps,
        &d.sender.retransmits.to_string(),
        "",
        d.sender.mean_rtt_us,
    ));
    s.push_str("  summary");
    if d.sender.min_rtt_us > 0 {
        s.push_str(&format!(", min RTT {}", micros(d.sender.min_rtt_us)));
    }
    s.push('\n');
}

fn row(
    start: f64,
    end: f64,
    bytes: u64,
    goodput: f64,
    retr: &str,
    cwnd: &str,
    rtt_us: u32,
) -> String {
    let interval = format!("{start:.2}-{end:.2} s");
    let rtt = if rtt_us > 0 {
        micros(rtt_us)
    } else {
        "-".to_string()
    };
    format!(
        "  {interval:<16} {:>10} {:>12} {retr:>6} {cwnd:>11} {rtt:>9}",
        format_bytes(bytes),
        format_rate(goodput),
    )
}

fn micros(us: u32) -> String {
    format_duration(Duration::from_micros(u64::from(us)))
}
