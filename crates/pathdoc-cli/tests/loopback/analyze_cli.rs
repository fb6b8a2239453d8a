//! `pathdoc analyze` as a user runs it, on small crafted captures: exit codes, messages naming
//! the byte offset of damage, standard input, gzip, `--flags`, `--json`, filters, and two
//! captures refusing standard input. No lab needed.

use crate::support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use pathdoc_capture::write::{pcap, Frame};
use support::PATHDOC;

fn tcp(seq: u32, ack: u32, flags: &str, len: usize, from_client: bool, ms: i64) -> Frame {
    let (src, dst, sp, dp) = if from_client {
        ([192, 168, 1, 100], [203, 0, 113, 10], 40000, 22)
    } else {
        ([203, 0, 113, 10], [192, 168, 1, 100], 22, 40000)
    };
    let mut b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(src, dst, 64)
        .tcp(sp, dp, seq, 500);
    for c in flags.chars() {
        b = match c {
            'S' => b.syn(),
            'A' => b.ack(ack),
            'F' => b.fin(),
            _ => b,
        };
    }
    let mut out = Vec::new();
    b.write(&mut out, &vec![0u8; len]).unwrap();
    Frame::new(1_700_000_000_000_000_000 + ms * 1_000_000, out)
}

fn healthy() -> Vec<u8> {
    let frames = vec![
        tcp(1000, 0, "S", 0, true, 0),
        tcp(5000, 1001, "SA", 0, false, 1),
        tcp(1001, 5001, "A", 0, true, 2),
        tcp(1001, 5001, "A", 100, true, 3),
        tcp(5001, 1101, "A", 0, false, 4),
        tcp(1101, 5001, "FA", 0, true, 5),
        tcp(5001, 1102, "FA", 0, false, 6),
        tcp(1102, 5002, "A", 0, true, 7),
    ];
    pcap(1, &frames, false, false)
}

fn scratch(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pathdoc-analyze-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(PATHDOC);
    cmd.args(args);
    support::run(cmd, Duration::from_secs(60))
}

#[test]
fn healthy_capture_exits_0_and_counts_the_connection() {
    let f = scratch("ok.pcap", &healthy());
    let (code, out, _) = run(&["analyze", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("1 TCP connections, 0 with findings, 1 healthy"),
        "{out}"
    );
    let (code, out, err) = run(&["analyze", "--json", f.to_str().unwrap()]);
    let r = support::parse_report(code, &out, &err);
    assert_eq!(r["command"], "analyze");
    assert_eq!(
        r["data"]["analyze"]["captures"][0]["totals"]["connections"],
        1
    );
    // --all lists the healthy connection in text too (it used to print nothing more).
    let (code, out, _) = run(&["analyze", "--all", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("192.168.1.100:40000 → 203.0.113.10:22"))
        .unwrap_or_else(|| panic!("no connection row in:\n{out}"));
    assert!(
        row.contains("closed (FIN both)") && row.ends_with("healthy"),
        "{row}"
    );
    assert!(out.contains("Connections (1):"), "{out}");
}

#[test]
fn unreadable_inputs_exit_2_with_a_clear_message() {
    let empty = scratch("empty.pcap", b"");
    let header_cut = scratch("header-cut.pcap", &healthy()[..10]);
    let text = scratch("notes.txt", b"hello, this is not a capture\n");
    for (path, want) in [
        ("/nonexistent/x.pcap", "cannot open /nonexistent/x.pcap"),
        (empty.to_str().unwrap(), "is empty"),
        (
            header_cut.to_str().unwrap(),
            "ends inside its capture header (cut off before the first packet): nothing to analyse",
        ),
        (
            text.to_str().unwrap(),
            "not a pcap or pcapng capture (first bytes: 68 65 6c 6c",
        ),
    ] {
        let (code, out, err) = run(&["analyze", path]);
        assert_eq!(code, 2, "{path}: {out}{err}");
        assert!(err.contains(want), "{path}: {err}");
        assert!(
            err.matches("No such file").count() <= 1,
            "the cause is said once: {err}"
        );
    }
}

#[test]
fn truncated_capture_keeps_its_packets_and_names_the_offset() {
    let full = healthy();
    let cut = &full[..full.len() - 20];
    let f = scratch("cut.pcap", cut);
    let (code, out, err) = run(&["analyze", "--json", f.to_str().unwrap()]);
    let r = support::parse_report(code, &out, &err);
    let cap = &r["data"]["analyze"]["captures"][0];
    assert_eq!(cap["totals"]["packets"], 7, "{r:#}");
    let offset = cap["error_offset"].as_u64().unwrap();
    assert!(offset > 24 && offset < full.len() as u64, "{offset}");
    assert!(err.contains(&format!("byte {offset}")), "{err}");
    assert_eq!(cap["damage"], "truncated");
    let finding = support::find(&r, "capture-truncated").expect("capture-truncated");
    assert_eq!(finding["status"], "inconclusive", "{finding:#}");
    // Healthy as far as it goes, but cut: never 0.
    assert_eq!(code, 3, "{r:#}");
    let (code, out, err) = run(&["analyze", f.to_str().unwrap()]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "is truncated: it ends in the middle of a packet at byte {offset}; the results cover only the 7 packets before it"
        )),
        "{out}"
    );
    assert!(out.contains("Overall: INCONCLUSIVE"), "{out}");
    assert!(err.starts_with("pathdoc: warning: "), "{err}");
}

#[test]
fn stdin_gzip_flags_and_filters() {
    let bytes = healthy();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes).unwrap();
    let gz = gz.finish().unwrap();
    let mut child = Command::new(PATHDOC)
        .args(["analyze", "--flags", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&gz).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("frame\ttime\tstream"), "{text}");
    assert_eq!(lines.len(), 9, "{text}");
    assert!(
        lines[1].contains("192.168.1.100:40000\t203.0.113.10:22\t0\t0\t0\t......S."),
        "{text}"
    );

    let f = scratch("f.pcap", &bytes);
    let (_, out, err) = run(&[
        "analyze",
        "--json",
        "--all",
        "--port",
        "22",
        f.to_str().unwrap(),
    ]);
    let r = support::parse_report(0, &out, &err);
    assert_eq!(
        r["data"]["analyze"]["captures"][0]["connections"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (_, out, err) = run(&["analyze", "--json", "--port", "80", f.to_str().unwrap()]);
    let r = support::parse_report(0, &out, &err);
    assert!(r["data"]["analyze"]["captures"][0]["connections"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn two_captures_need_files() {
    let f = scratch("a.pcap", &healthy());
    let (code, _, err) = run(&["analyze", f.to_str().unwrap(), "-"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("standard input cannot be one of them"),
        "{err}"
    );
    // The same capture twice matches its one connection and loses nothing.
    let (code, out, err) = run(&[
        "analyze",
        "--json",
        f.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    let r = support::parse_report(code, &out, &err);
    let pairs = r["data"]["analyze"]["comparison"]["pairs"]
        .as_array()
        .unwrap();
    assert_eq!(pairs.len(), 1, "{r:#}");
    assert_eq!(pairs[0]["directions"][0]["lost"], 0);
    assert_eq!(pairs[0]["nat"], false);
}

/// A short healthy connection between two given IPv4 endpoints, starting at `t0` ms.
fn connection(client: [u8; 4], server: [u8; 4], ports: (u16, u16), t0: i64) -> Vec<Frame> {
    let seg = |from_client: bool, seq: u32, ack: u32, syn: bool, fin: bool, len: usize, ms: i64| {
        let (src, dst, sp, dp) = if from_client {
            (client, server, ports.0, ports.1)
        } else {
            (server, client, ports.1, ports.0)
        };
        let mut b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4(src, dst, 64)
            .tcp(sp, dp, seq, 500);
        if syn {
            b = b.syn();
        }
        if fin {
            b = b.fin();
        }
        if !(syn && from_client) {
            b = b.ack(ack);
        }
        let mut out = Vec::new();
        b.write(&mut out, &vec![0u8; len]).unwrap();
        Frame::new(1_700_000_000_000_000_000 + (t0 + ms) * 1_000_000, out)
    };
    vec![
        seg(true, 1000, 0, true, false, 0, 0),
        seg(false, 5000, 1001, true, false, 0, 1),
        seg(true, 1001, 5001, false, false, 100, 2),
        seg(false, 5001, 1101, false, false, 0, 3),
        seg(true, 1101, 5001, false, true, 0, 4),
        seg(false, 5001, 1102, false, true, 0, 5),
        seg(true, 1102, 5002, false, false, 0, 6),
    ]
}

#[test]
fn host_filter_takes_names_and_says_when_one_does_not_resolve() {
    let mut frames = connection([192, 168, 1, 100], [203, 0, 113, 10], (40000, 22), 0);
    frames.extend(connection(
        [127, 0, 0, 1],
        [127, 0, 0, 1],
        (40001, 8080),
        100,
    ));
    let f = scratch("two-hosts.pcap", &pcap(1, &frames, false, false));
    let f = f.to_str().unwrap();
    let selected = |host: &str| {
        let (code, out, err) = run(&["analyze", "--json", "--all", "--host", host, f]);
        let r = support::parse_report(code, &out, &err);
        let conns = r["data"]["analyze"]["captures"][0]["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["server"].as_str().unwrap().to_string())
            .collect::<Vec<_>>();
        (conns, r["data"]["analyze"]["filter"].clone())
    };
    // A name through the system resolver (/etc/hosts): localhost is 127.0.0.1 (and maybe ::1).
    let (conns, filter) = selected("localhost");
    assert_eq!(conns, vec!["127.0.0.1:8080"], "{filter}");
    assert_eq!(filter["host"], "localhost");
    assert!(
        filter["host_addresses"]
            .as_array()
            .unwrap()
            .contains(&"127.0.0.1".into()),
        "{filter}"
    );
    // Literals as before, IPv6 also in brackets.
    assert_eq!(selected("203.0.113.10").0, vec!["203.0.113.10:22"]);
    assert!(selected("[2001:db8::1]").0.is_empty());
    // The text report says what the name stood for, on stderr.
    let (code, out, err) = run(&["analyze", "--host", "localhost", f]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--host localhost = 127.0.0.1"), "{err}");
    assert!(out.contains("2 healthy; 1 selected by the filter"), "{out}");

    // A name that does not resolve (RFC 6761: .invalid never does) is an error, not "no match".
    let (code, out, err) = run(&["analyze", "--host", "no-such-host.invalid", f]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("--host \"no-such-host.invalid\" does not resolve"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    let (code, out, _) = run(&["analyze", "--json", "--host", "no-such-host.invalid", f]);
    assert_eq!(code, 2);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["error"]["kind"], "resolve", "{doc:#}");
    let (code, _, err) = run(&["analyze", "--host", "not a host", f]);
    assert_eq!(code, 2);
    assert!(
        err.contains("neither an IP address nor a host name"),
        "{err}"
    );
}
