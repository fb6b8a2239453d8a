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
    segments: [Vec<Value>; 2],
    acks: [Vec<Value>; 2],
    truncated: [bool; 2],
}

fn flag_names(flags: Flags) -> Vec<&'static str> {
    Flags::NAMES
        .iter()
        .filter(|(bit, _)| flags.has(*bit))
        .map(|(_, name)| *name)
        .collect()
}

fn push(list: &mut Vec<Value>, truncated: &mut bool, v: Value) {
    if list.len() < MAX_POINTS {
        list.push(v);
    } else {
        *truncated = true;
    }
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
        let series: Vec<Value> = (0..2)
            .filter(|&d| !s.segments[d].is_empty())
            .map(|d| {
                json!({
                    "direction": if d == 0 { "client-to-server" } else { "server-to-client" },
                    "segments": s.segments[d],
                    "acks": s.acks[d],
                    "truncated": s.truncated[d],
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
    if r.seg_len > 0 {
        let (list, truncated) = (&mut s.segments[data_dir], &mut s.truncated[data_dir]);
        push(
            list,
            truncated,
            json!({ "t": t, "seq": r.rel_seq, "len": r.seg_len, "flags": flags }),
        );
    }
    // An ACK from this side acknowledges the other side's data.
    if r.tcp_flags & TCP_ACK != 0 {
        let (list, truncated) = (&mut s.acks[ack_dir], &mut s.truncated[ack_dir]);
        push(
            list,
            truncated,
            json!({ "t": t, "ack": r.rel_ack, "flags": flags }),
        );
    }
}
