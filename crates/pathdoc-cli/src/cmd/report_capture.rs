//! `pathdoc analyze … --report FILE.html`: the page's time-sequence (Stevens) graphs need every
//! segment and ACK of the connections the report lists, which the streaming analysis does not
//! keep. Only when an HTML report is asked for, each capture file is read a second time and, for
//! those connections, segments and ACKs are collected (bounded) into
//! `data.analyze.captures[].connections[].time_sequence` — the layout docs/report.md describes.

use std::collections::HashMap;

use pathdoc_analyze::{Analyzer, Flags, Options, PacketRecord};
use pathdoc_capture::CaptureReader;
use pathdoc_core::Report;
use serde_json::{json, Value};

use super::report_html::HtmlReportArgs;

/// Connections per capture that get a graph, and points kept per series.
const MAX_CONNECTIONS: usize = 8;
const MAX_POINTS: usize = 10_000;
/// TCP header flag bit of ACK (`tcp_flags` as `PacketRecord` carries them).
const TCP_ACK: u16 = 0x010;

/// Write the HTML report (if asked) with time-sequence series added for the listed connections.
/// Captures read from standard input cannot be read again; their connections get no graph.
pub fn write_html(args: &HtmlReportArgs, files: &[String], report: &Report) -> anyhow::Result<()> {
    let Some(pending) = args.prepare()? else {
        return Ok(());
    };
    let mut report = report.clone();
    for (k, file) in files.iter().enumerate() {
        if file == "-" {
            eprintln!("pathdoc: no time-sequence graph for standard input (it cannot be read twice); save the capture to a file for one");
            continue;
        }
        if let Err(e) = add_time_sequences(&mut report, k, file) {
            eprintln!("pathdoc: no time-sequence graph for {file}: {e:#}");
        }
    }
    pending.write(&report)?;
    Ok(())
}

/// One connection's series under construction: per data direction, segments and the peer's ACKs.
#[derive(Default)]
struct Series {
    first_ns: Option<i64>,
    client: String,
    /// Index 0: client→server data (with server ACKs), 1: server→client data (client ACKs).
    segments: [Sampled; 2],
    acks: [Sampled; 2],
}

/// A series kept to at most `MAX_POINTS` points that still spans the whole connection: every
/// `stride`-th point is kept, and when the list fills, every other point is dropped and the
/// stride doubles. Data and ACKs are sampled alike, so neither seems to stop halfway (a plain
/// cap kept the first 10 000 of each, which end at different times). Points with analysis flags
/// (retransmissions, dup ACKs) are always kept, up to the same bound.
#[derive(Default)]
struct Sampled {
    points: Vec<Value>,
    flagged: Vec<Value>,
    stride: usize,
    seen: usize,
    /// Fewer points than packets were kept.
    thinned: bool,
}

impl Sampled {
    fn push(&mut self, v: Value, flagged: bool) {
        if flagged {
            if self.flagged.len() < MAX_POINTS / 2 {
                self.flagged.push(v);
            } else {
                self.thinned = true;
            }
            return;
        }
        let stride = self.stride.max(1);
        if self.seen.checked_rem(stride) == Some(0) {
            self.points.push(v);
        } else {
            self.thinned = true;
        }
        self.seen += 1;
        if self.points.len() >= MAX_POINTS / 2 {
            // Keep indices 0, 2, 4, …: the points seen at multiples of the doubled stride.
            let kept: Vec<Value> = std::mem::take(&mut self.points)
                .into_iter()
                .step_by(2)
                .collect();
            self.points = kept;
            self.stride = stride * 2;
            self.thinned = true;
        }
    }

    fn is_empty(&self) -> bool {
        self.points.is_empty() && self.flagged.is_empty()
    }

    /// Every kept point in time order.
    fn into_points(self) -> Vec<Value> {
        let mut all = self.points;
        all.extend(self.flagged);
        all.sort_by(|a, b| {
            let t = |v: &Value| v.get("t").and_then(Value::as_f64).unwrap_or(0.0);
            t(a).total_cmp(&t(b))
        });
        all
    }
}

fn flag_names(flags: Flags) -> Vec<&'static str> {
    Flags::NAMES
        .iter()
        .filter(|(bit, _)| flags.has(*bit))
        .map(|(_, name)| *name)
        .collect()
}

fn add_time_sequences(report: &mut Report, capture: usize, file: &str) -> anyhow::Result<()> {
    let Some(conns) = report
        .data
        .get_mut("analyze")
        .and_then(|a| a.get_mut("captures"))
        .and_then(|c| c.get_mut(capture))
        .and_then(|c| c.get_mut("connections"))
        .and_then(|c| c.as_array_mut())
    else {
        return Ok(());
    };
    let mut wanted: HashMap<u64, Series> = conns
        .iter()
        .take(MAX_CONNECTIONS)
        .filter_map(|c| {
            let id = c.get("id")?.as_u64()?;
            let client = c.get("client")?.as_str()?.to_string();
            Some((
                id,
                Series {
                    client,
                    ..Series::default()
                },
            ))
        })
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut reader = CaptureReader::open(file)?;
    // The same analysis as the report's, so connections get the same stream numbers.
    let mut analyzer = Analyzer::new(Options::default());
    while let Some(packet) = reader.next_packet()? {
        let Some(r) = analyzer.process(&packet) else {
            continue;
        };
        if let Some(s) = wanted.get_mut(&r.stream) {
            record(s, &r);
        }
    }
    for c in conns.iter_mut().take(MAX_CONNECTIONS) {
        let Some(s) = c
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| wanted.remove(&id))
        else {
            continue;
        };
        let Series { segments, acks, .. } = s;
        let series: Vec<Value> = segments
            .into_iter()
            .zip(acks)
            .enumerate()
            .filter(|(_, (segs, _))| !segs.is_empty())
            .map(|(d, (segs, acks))| {
                let truncated = segs.thinned || acks.thinned;
                json!({
                    "direction": if d == 0 { "client-to-server" } else { "server-to-client" },
                    "segments": segs.into_points(),
                    "acks": acks.into_points(),
                    "truncated": truncated,
                })
            })
            .collect();
        c["time_sequence"] = Value::Array(series);
    }
    Ok(())
}

fn record(s: &mut Series, r: &PacketRecord) {
    let first = *s.first_ns.get_or_insert(r.ts_ns);
    let t = (r.ts_ns - first) as f64 / 1e9;
    let from_client = r.src.to_string() == s.client;
    let (data_dir, ack_dir) = if from_client { (0, 1) } else { (1, 0) };
    let flags = flag_names(r.flags);
    let flagged = !flags.is_empty();
    if r.seg_len > 0 {
        s.segments[data_dir].push(
            json!({ "t": t, "seq": r.rel_seq, "len": r.seg_len, "flags": flags }),
            flagged,
        );
    }
    // An ACK from this side acknowledges the other side's data.
    if r.tcp_flags & TCP_ACK != 0 {
        // With the advertised window the graph draws the window edge (ACK + window).
        s.acks[ack_dir].push(
            json!({ "t": t, "ack": r.rel_ack, "win": r.window, "flags": flags }),
            flagged,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection with 4× more data segments than ACKs: both series still reach its end.
    #[test]
    fn data_and_acks_are_sampled_over_the_same_span() {
        let (mut data, mut acks) = (Sampled::default(), Sampled::default());
        let n = 40_000;
        for i in 0..n {
            let t = f64::from(i) / 1000.0;
            data.push(json!({ "t": t, "seq": i }), false);
            if i % 4 == 0 {
                acks.push(json!({ "t": t, "ack": i }), false);
            }
        }
        data.push(
            json!({ "t": 0.5, "seq": 1, "flags": ["retransmission"] }),
            true,
        );
        assert!(data.thinned);
        let last = |p: &[Value]| p.last().unwrap()["t"].as_f64().unwrap();
        let (d, a) = (data.into_points(), acks.into_points());
        assert!(
            d.len() <= MAX_POINTS && a.len() <= MAX_POINTS,
            "{} {}",
            d.len(),
            a.len()
        );
        let end = f64::from(n - 1) / 1000.0;
        assert!(end - last(&d) < 0.05 * end, "data stops at {}", last(&d));
        assert!(end - last(&a) < 0.05 * end, "acks stop at {}", last(&a));
        assert!(d.iter().any(|p| p["flags"][0] == "retransmission"));
    }
}
