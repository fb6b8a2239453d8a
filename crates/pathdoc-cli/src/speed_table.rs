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
        .get(pathdoc_speed::CHECK.data_key())
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

fn direction_table(s: &mut String, d: &DirectionResult) {
    let streams = match d.streams {
        1 => "1 stream".to_string(),
        n => format!("{n} streams"),
    };
    let cc = match d.sender.congestion_control.as_str() {
        "" => String::new(),
        cc => format!(", {cc}"),
    };
    // With several streams each row says whose it is, iperf3-style: [  0], [  1], …, [SUM].
    let multi = d.streams > 1;
    let tag = |label: &str| {
        if multi {
            format!("[{label:>3}] ")
        } else {
            String::new()
        }
    };
    s.push_str(&format!("{}, {streams}{cc}:\n", d.direction.label()));
    s.push_str(&format!(
        "  {}{:<16} {:>10} {:>12} {:>6} {:>11} {:>9}\n",
        if multi { "      " } else { "" },
        "interval",
        "transfer",
        "goodput",
        "retr",
        "cwnd",
        "rtt"
    ));
    for i in &d.intervals {
        let seconds = (i.end_s - i.start_s).max(0.0);
        for st in &i.streams {
            s.push_str(&row(
                &tag(&st.stream.to_string()),
                (i.start_s, i.end_s),
                (st.goodput_bps * seconds / 8.0).round() as u64,
                st.goodput_bps,
                st.retransmits,
                &format_bytes(st.cwnd_bytes),
                st.rtt_us,
            ));
        }
        s.push_str(&row(
            &tag("SUM"),
            (i.start_s, i.end_s),
            (i.goodput_bps * seconds / 8.0).round() as u64,
            i.goodput_bps,
            i.retransmits,
            &format_bytes(i.cwnd_bytes),
            i.rtt_us,
        ));
    }
    let mut summary = row(
        &tag("SUM"),
        (0.0, d.duration_s),
        d.payload_bytes,
        d.goodput_bps,
        d.sender.retransmits,
        "",
        d.sender.mean_rtt_us,
    );
    summary.pop();
    summary.push_str("  summary");
    if d.sender.min_rtt_us > 0 {
        summary.push_str(&format!(", min RTT {}", micros(d.sender.min_rtt_us)));
    }
    s.push_str(&summary);
    s.push('\n');
}

fn row(
    tag: &str,
    (start, end): (f64, f64),
    bytes: u64,
    goodput: f64,
    retr: u64,
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
        "  {tag}{interval:<16} {:>10} {:>12} {retr:>6} {cwnd:>11} {rtt:>9}\n",
        format_bytes(bytes),
        format_rate(goodput),
    )
}

fn micros(us: u32) -> String {
    format_duration(Duration::from_micros(u64::from(us)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report saved by `pathdoc speed -t 2 -P 2 --json` on loopback.
    const SAVED: &str = include_str!("../tests/fixtures/speed-2-streams.json");

    #[test]
    fn the_table_is_rendered_from_the_saved_intervals() {
        let report: Report = serde_json::from_str(SAVED).unwrap();
        let table = render(&report);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0], "upload (client→server), 2 streams, bbr:",
            "{table}"
        );
        // Two intervals × (two streams + their sum), then the summary row.
        let rows: Vec<&&str> = lines.iter().filter(|l| l.contains(" s ")).collect();
        assert_eq!(rows.len(), 7, "{table}");
        assert!(rows[0].starts_with("  [  0] 0.00-1.00 s"), "{table}");
        assert!(rows[2].starts_with("  [SUM] 0.00-1.00 s"), "{table}");
        assert!(rows[2].contains("167 Gbit/s"), "{table}");
        assert!(rows[5].contains("189 Gbit/s"), "{table}");
        assert!(
            rows[6].contains("41.4 GiB") && rows[6].contains("178 Gbit/s"),
            "{table}"
        );
        assert!(rows[6].ends_with(", min RTT 1 µs"), "{table}");
        // Same report, same text: nothing but the report goes into it.
        assert_eq!(render(&report), table);
        assert!(crate::output::render_text(&report).starts_with(&table));
    }

    #[test]
    fn reports_without_throughput_data_have_no_table() {
        assert_eq!(render(&Report::new(pathdoc_core::Command::Speed, "x")), "");
    }
}
