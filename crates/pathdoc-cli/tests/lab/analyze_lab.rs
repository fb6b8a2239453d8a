//! End-to-end: captures recorded in the lab (tcpdump in the hosts' namespaces, seconds of real
//! traffic), analysed by the real `pathdoc analyze` and checked against the real `tshark`:
//! Wireshark's tcp.analysis flags must agree packet for packet, and each scenario must get its
//! diagnosis (and the clean one none).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pathdoc_lab::capture::{self, CaptureOptions, KeepaliveSide, RunningCapture};
use pathdoc_lab::traffic;
use pathdoc_lab::{Lab, Topology};
use serde_json::Value;
use support::{opts, Cleanup, PATHDOC};

/// Lab prefix stem of this file.
const STEM: &str = "pda";

/// A scratch directory removed on drop.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(test: &str) -> Self {
        let p = std::env::temp_dir().join(format!("pathdoc-analyze-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("PATHDOC_KEEP_CAPTURES").is_some() {
            eprintln!("captures kept in {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn start(lab: &Lab, host: &str, path: &Path) -> RunningCapture {
    capture::start(
        lab,
        host,
        None,
        path,
        &CaptureOptions {
            snaplen: 128,
            filter: Some("tcp or icmp".into()),
        },
    )
    .expect("start tcpdump")
}

const FLAG_NAMES: [&str; 15] = [
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
    "out_of_order",
    "lost_segment",
    "ack_lost_segment",
    "duplicate_ack",
    "zero_window",
    "zero_window_probe",
    "zero_window_probe_ack",
    "window_full",
    "window_update",
    "keep_alive",
    "keep_alive_ack",
    "reused_ports",
];

type PerFrame = BTreeMap<u64, (u64, BTreeSet<String>)>;

fn tshark_flags(file: &Path) -> PerFrame {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(file).args([
        "-Y",
        // ICMP errors quoting a TCP header match `tcp` in tshark (with the quoted stream's
        // number); `--flags` lists TCP segments only.
        "tcp && !icmp && !icmpv6",
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-e",
        "frame.number",
        "-e",
        "tcp.stream",
    ]);
    for n in FLAG_NAMES {
        cmd.args(["-e", &format!("tcp.analysis.{n}")]);
    }
    let out = cmd.output().expect("run tshark (apt-get install tshark)");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = PerFrame::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let frame: u64 = cols[0].parse().unwrap();
        let stream: u64 = cols[1].parse().unwrap_or(u64::MAX);
        let flags = FLAG_NAMES
            .iter()
            .zip(cols.iter().skip(2))
            .filter(|(_, v)| !v.is_empty())
            .map(|(n, _)| n.to_string())
            .collect();
        m.insert(frame, (stream, flags));
    }
    m
}

fn pathdoc_flags(file: &Path) -> PerFrame {
    let out = Command::new(PATHDOC)
        .args(["analyze", "--flags"])
        .arg(file)
        .output()
        .unwrap();
    let mut m = PerFrame::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let flags = if cols[9] == "-" {
            BTreeSet::new()
        } else {
            cols[9].split(',').map(str::to_string).collect()
        };
        m.insert(cols[0].parse().unwrap(), (cols[2].parse().unwrap(), flags));
    }
    m
}

/// Per packet, pathdoc's flags and stream numbers equal tshark's; returns the flag counts.
fn assert_agrees_with_tshark(file: &Path) -> BTreeMap<String, u64> {
    let theirs = tshark_flags(file);
    let ours = pathdoc_flags(file);
    assert!(!theirs.is_empty(), "no TCP in {}", file.display());
    let mut diffs = Vec::new();
    for frame in theirs.keys().chain(ours.keys()).collect::<BTreeSet<_>>() {
        let (a, b) = (theirs.get(frame), ours.get(frame));
        if a != b {
            diffs.push(format!("frame {frame}: tshark {a:?}, pathdoc {b:?}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{}: {} of {} frames differ:\n{}",
        file.display(),
        diffs.len(),
        theirs.len(),
        diffs
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut counts = BTreeMap::new();
    for (_, flags) in theirs.values() {
        for f in flags {
            *counts.entry(f.clone()).or_insert(0) += 1;
        }
    }
    counts
}

pub(crate) fn analyze_json(files: &[&Path]) -> (i32, Value) {
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["analyze", "--json"]).args(files);
    let (code, out, err) = support::run(cmd, Duration::from_secs(120));
    (code, support::parse_report(code, &out, &err))
}

pub(crate) fn with_id<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    support::findings(report)
        .into_iter()
        .filter(|f| f["id"] == id)
        .collect()
}

pub(crate) fn problems(report: &Value) -> Vec<String> {
    support::findings(report)
        .into_iter()
        .filter(|f| matches!(f["status"].as_str(), Some("warn" | "fail")))
        .map(|f| format!("{}: {}", f["id"], f["title"]))
        .collect()
}

/// `head -c BYTES FILE > FILE.cut…`: a real capture cut mid-packet, as a killed writer leaves it.
fn cut_with_head(file: &Path, bytes: u64, suffix: &str) -> PathBuf {
    let out = file.with_extension(format!("cut{suffix}"));
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c {bytes} '{}' > '{}'",
            file.display(),
            out.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// A byte count that ends inside a packet record of a (tcpdump, little-endian) pcap, at or after
/// `at_least`: `head -c` at an arbitrary count can land exactly between two records.
fn mid_record(file: &Path, at_least: u64) -> u64 {
    let bytes = std::fs::read(file).unwrap();
    let mut at = 24usize;
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        if at as u64 >= at_least {
            return at as u64 + 16 + ((incl as u64).min(20) / 2).max(1);
        }
        at += 16 + incl;
    }
    panic!("{}: no record after byte {at_least}", file.display());
}

/// Packets tshark reads from a damaged file before it stops (it exits 2, after printing them).
fn tshark_packets(file: &Path) -> u64 {
    let out = Command::new("tshark")
        .args([
            "-r",
            file.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.number",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count() as u64
}

/// The cut capture is analysed up to the cut and says so; the exit code is never 0.
fn assert_cut_is_reported(cut: &Path, want_code: i32) -> Value {
    let (code, report) = analyze_json(&[cut]);
    let cap = &report["data"]["analyze"]["captures"][0];
    assert_eq!(cap["damage"], "truncated", "{}: {cap:#}", cut.display());
    let t = with_id(&report, "capture-truncated");
    assert_eq!(t.len(), 1, "{report:#}");
    assert_eq!(t[0]["status"], "inconclusive");
    assert_eq!(code, want_code, "{:?}", problems(&report));
    if cut.extension().is_some_and(|e| e != "gz") {
        assert_eq!(
            cap["totals"]["packets"].as_u64().unwrap(),
            tshark_packets(cut),
            "the same packets as tshark before the cut"
        );
    }
    report
}

/// Record the scenario's traffic on the client (and, for two-ended scenarios, the server).
fn record(lab: &Lab, scenario: &str, dir: &Scratch) -> Vec<PathBuf> {
    let client = dir.file("client.pcap");
    let server = dir.file("server.pcap");
    let c = start(lab, "client", &client);
    let s = start(lab, "server", &server);
    match scenario {
        "clean" => {
            traffic::iperf3(
                lab,
                "client",
                "server",
                2,
                true,
                &["-C", "cubic", "-b", "300M"],
            )
            .unwrap();
            traffic::iperf3(
                lab,
                "client",
                "server",
                1,
                false,
                &["-C", "cubic", "-b", "300M"],
            )
            .unwrap();
            let _ = traffic::download(lab, 100_000, Duration::from_secs(3)).unwrap();
        }
        "modem-idle" | "cgnat-chain" => {
            capture::idle_keepalive_connection(
                lab,
                KeepaliveSide::Client,
                Duration::from_secs(5),
                Duration::from_secs(1),
                3,
                Duration::from_secs(15),
            )
            .unwrap();
        }
        "pmtu-blackhole" | "nic-ignores-mtu" => {
            let _ = traffic::download(lab, 1 << 20, Duration::from_secs(4)).unwrap();
            let _ = traffic::download(lab, 1000, Duration::from_secs(2)).unwrap();
        }
        "lossy-long-fat" | "window-limited" => {
            traffic::iperf3(lab, "client", "server", 3, true, &["-C", "cubic"]).unwrap();
        }
        "slow-lossy-duplex" => {
            traffic::iperf3(lab, "client", "server", 2, false, &["-C", "cubic"]).unwrap();
            traffic::iperf3(lab, "client", "server", 2, true, &["-C", "cubic"]).unwrap();
        }
        // The SSH scenarios' paths (1 Gbit/s at 100 ms; a fast short one): a bounded 1-s
        // transfer keeps the captures small.
        "ssh-window-limited" | "ssh-cpu-limited" => {
            traffic::iperf3(lab, "client", "server", 1, false, &["-b", "100M"]).unwrap();
        }
        // A download through the 20 Mbit/s policer (its losses and repairs), an upload into
        // the 500 ms queue.
        "policed-line" => {
            traffic::iperf3(lab, "client", "server", 2, true, &["-C", "cubic"]).unwrap();
        }
        "bloated-uplink" => {
            traffic::iperf3(lab, "client", "server", 2, false, &["-C", "cubic"]).unwrap();
        }
        // A download beside the background flows (theirs are not captured: other hosts).
        "shared-bottleneck" => {
            traffic::iperf3(lab, "client", "server", 2, true, &["-C", "cubic"]).unwrap();
        }
        // IPv6 captures: a download that stalls at the 1480-byte link (its retransmissions) and
        // a small one that passes.
        "v6-ptb-blackhole" => {
            let v6 = lab.addr_in("server", true).expect("dual-stack lab");
            let _ = traffic::download_in(lab, v6, 1 << 20, Duration::from_secs(4)).unwrap();
            let _ = traffic::download_in(lab, v6, 1000, Duration::from_secs(2)).unwrap();
        }
        // A healthy IPv6 download, then an IPv6 connection idle past the firewall's (scaled)
        // timeout whose next segment is retransmitted into the void.
        "v6-firewall-idle" => {
            let v6 = lab.addr_in("server", true).expect("dual-stack lab");
            let _ = traffic::download_in(lab, v6, 4 << 20, Duration::from_secs(4)).unwrap();
            let mut pair = traffic::TcpPair::open_to(lab, v6).unwrap();
            assert!(pair
                .server_to_client(b"hello", Duration::from_secs(2))
                .unwrap());
            std::thread::sleep(Duration::from_secs(5));
            let _ = pair.server_to_client(b"after idle", Duration::from_secs(2));
        }
        other => panic!("no traffic recipe for scenario {other}"),
    }
    c.stop().unwrap();
    s.stop().unwrap();
    vec![client, server]
}

/// The idle scenarios, scaled down through the same topology knob the demo uses.
fn topology(scenario: &str) -> Topology {
    let mut t = Topology::scenario(scenario).unwrap();
    match scenario {
        "modem-idle" => t.hops[0].conntrack.tcp_established = Some(3),
        "cgnat-chain" => t.hops[1].conntrack.tcp_established = Some(3),
        "v6-firewall-idle" => t.hops[0].conntrack6.tcp_established = Some(3),
        _ => {}
    }
    t
}

fn up(test: &str, scenario: &str) -> (Cleanup, Lab) {
    let c = Cleanup::new(STEM, test);
    let lab = Lab::up(&topology(scenario), &opts(STEM, test)).expect("lab up");
    (c, lab)
}

#[test]
fn tshark_agrees_on_every_scenario() {
    // Flags, not timing, are compared: it may share the cores.
    let _shared = support::shared();
    for (i, info) in pathdoc_lab::scenarios::SCENARIOS.iter().enumerate() {
        // Prefixes are short (namespace names are limited): t0, t1, …
        let test = format!("t{i}");
        let (_c, lab) = up(&test, info.name);
        let dir = Scratch::new(&test);
        let files = record(&lab, info.name, &dir);
        lab.down().unwrap();
        for f in &files {
            assert_load_verdicts_only_where_due(info.name, f);
            let counts = assert_agrees_with_tshark(f);
            eprintln!(
                "{} {}: agrees with tshark; flags {counts:?}",
                info.name,
                f.display()
            );
        }
    }
}

/// The policer and latency-under-load verdicts stay off every scenario but their own: random,
/// bursty (duplex) and tail-drop loss are not a policer; no other path has a bloated queue.
fn assert_load_verdicts_only_where_due(scenario: &str, capture: &Path) {
    let (_, report) = analyze_json(&[capture]);
    if scenario != "policed-line" {
        assert_eq!(
            with_id(&report, "policer-limited"),
            Vec::<&Value>::new(),
            "{scenario}: {}",
            capture.display()
        );
    }
    if scenario != "bloated-uplink" {
        let bloat: Vec<_> = with_id(&report, "latency-under-load")
            .into_iter()
            .filter(|f| f["status"] != "info")
            .collect();
        assert_eq!(
            bloat,
            Vec::<&Value>::new(),
            "{scenario}: {}",
            capture.display()
        );
    }
}

#[test]
fn slow_lossy_duplex_loses_client_to_server_only() {
    let _serial = support::serial();
    let (_c, lab) = up("dup", "slow-lossy-duplex");
    let dir = Scratch::new("dup");
    let files = record(&lab, "slow-lossy-duplex", &dir);
    lab.down().unwrap();
    let (code, report) = analyze_json(&[&files[0]]);
    assert_eq!(code, 1, "{report:#}");
    let loss = with_id(&report, "tcp-loss-one-direction");
    assert!(!loss.is_empty(), "no loss finding: {:?}", problems(&report));
    for f in &loss {
        assert_eq!(f["direction"], "client-to-server", "{f:#}");
    }
    let ev = loss[0]["evidence"].to_string();
    assert!(ev.contains("duplicate ACKs from the server"), "{ev}");
    // Upload and download between the same hosts: the loss is concentrated client→server.
    let both = with_id(&report, "loss-concentrated-one-direction");
    assert_eq!(both.len(), 1, "{:?}", problems(&report));
    assert_eq!(both[0]["direction"], "client-to-server", "{:#}", both[0]);
    // Cut near its end, the capture still proves the loss (exit 1) and says it is cut.
    let size = std::fs::metadata(&files[0]).unwrap().len();
    let at = mid_record(&files[0], size * 9 / 10);
    let report = assert_cut_is_reported(&cut_with_head(&files[0], at, ""), 1);
    assert!(
        !with_id(&report, "tcp-loss-one-direction").is_empty(),
        "{:?}",
        problems(&report)
    );
}

#[test]
fn clean_path_raises_no_alarm() {
    let _serial = support::serial();
    let (_c, lab) = up("cln", "clean");
    let dir = Scratch::new("cln");
    let files = record(&lab, "clean", &dir);
    lab.down().unwrap();
    for f in &files {
        let (code, report) = analyze_json(&[f]);
        assert_eq!(problems(&report), Vec::<String>::new(), "{}", f.display());
        assert_eq!(code, 0, "{report:#}");
        let overview = with_id(&report, "capture-overview");
        assert_eq!(overview.len(), 1);
        assert_eq!(overview[0]["status"], "pass");
    }
    // The same healthy capture cut mid-packet, plain and gzip-compressed: the part read is
    // healthy, but "no problem" needs the whole file: 3, never 0.
    let size = std::fs::metadata(&files[0]).unwrap().len();
    let cut = cut_with_head(&files[0], mid_record(&files[0], size * 3 / 5), "");
    let report = assert_cut_is_reported(&cut, 3);
    assert_eq!(problems(&report), Vec::<String>::new());
    let gz = files[0].with_extension("pcap.gz");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "gzip -c '{}' > '{}'",
            files[0].display(),
            gz.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    let gz_size = std::fs::metadata(&gz).unwrap().len();
    assert_cut_is_reported(&cut_with_head(&gz, gz_size / 2, ".gz"), 3);
}

#[test]
fn window_limited_download_is_named() {
    let _serial = support::serial();
    let (_c, lab) = up("win", "window-limited");
    let dir = Scratch::new("win");
    let files = record(&lab, "window-limited", &dir);
    lab.down().unwrap();
    let (_, report) = analyze_json(&[&files[0]]);
    let w = with_id(&report, "receive-window-limited");
    assert!(!w.is_empty(), "{:?}", problems(&report));
    assert_eq!(w[0]["direction"], "server-to-client");
    // The client's 256 KiB tcp_rmem caps its advertised window.
    let window = w[0]["evidence"][0]["value"]["value"].as_f64().unwrap();
    assert!(window <= 262_144.0 && window > 50_000.0, "{window}");
    assert!(
        w[0]["remedies"][0]["host"]["kind"] == "client",
        "{:#}",
        w[0]
    );
}

#[test]
fn pmtu_black_hole_and_its_mtu() {
    let _serial = support::serial();
    let (_c, lab) = up("pmt", "pmtu-blackhole");
    let dir = Scratch::new("pmt");
    let files = record(&lab, "pmtu-blackhole", &dir);
    lab.down().unwrap();
    // On the server: its full-size packets go unacknowledged; the routers' too-big messages
    // reach its interface (and its firewall drops them behind the capture).
    let (code, report) = analyze_json(&[&files[1]]);
    assert_eq!(code, 1, "{report:#}");
    let found: Vec<&Value> = with_id(&report, "pmtud-black-hole")
        .into_iter()
        .chain(with_id(&report, "pmtud-too-big-ignored"))
        .collect();
    assert!(!found.is_empty(), "{:?}", problems(&report));
    let f = found[0];
    assert_eq!(f["direction"], "server-to-client", "{f:#}");
    assert!(f["title"].as_str().unwrap().contains("1420"), "{f:#}");
    // On the client, where the download should arrive, the server's retransmissions are
    // invisible; its later small packets prove it sent bytes that never came (this capture
    // used to be judged healthy).
    let (code, report) = analyze_json(&[&files[0]]);
    assert_eq!(code, 1, "{:?}", problems(&report));
    let seen = with_id(&report, "pmtud-black-hole");
    assert!(!seen.is_empty(), "{:?}", problems(&report));
    assert_eq!(seen[0]["direction"], "server-to-client", "{:#}", seen[0]);
    assert_eq!(seen[0]["status"], "fail", "{:#}", seen[0]);
}

#[test]
fn idle_death_with_both_ends_names_the_lost_direction() {
    let _serial = support::serial();
    for (side, want) in [
        (KeepaliveSide::Client, "client-to-server"),
        (KeepaliveSide::Server, "server-to-client"),
    ] {
        let test = if side == KeepaliveSide::Client {
            "idc"
        } else {
            "ids"
        };
        let (_c, lab) = up(test, "modem-idle");
        let dir = Scratch::new(test);
        let client = dir.file("client.pcap");
        let server = dir.file("server.pcap");
        let c = start(&lab, "client", &client);
        let s = start(&lab, "server", &server);
        capture::idle_keepalive_connection(
            &lab,
            side,
            Duration::from_secs(5),
            Duration::from_secs(1),
            3,
            Duration::from_secs(15),
        )
        .unwrap();
        // A fresh connection afterwards (through new NAT state) shows both captures still ran.
        let mut again = traffic::TcpPair::open(&lab).unwrap();
        assert!(again
            .client_to_server(b"back", Duration::from_secs(2))
            .unwrap());
        drop(again);
        c.stop().unwrap();
        s.stop().unwrap();
        lab.down().unwrap();

        // One capture at the prober: idle death, unanswered keepalives.
        let prober_file = if side == KeepaliveSide::Client {
            &client
        } else {
            &server
        };
        let (code, report) = analyze_json(&[prober_file]);
        let table = Command::new(PATHDOC)
            .args(["analyze", "--flags"])
            .arg(prober_file)
            .output()
            .unwrap();
        assert_eq!(
            code,
            1,
            "{report:#}\n{}",
            String::from_utf8_lossy(&table.stdout)
        );
        let d = with_id(&report, "idle-death");
        assert!(!d.is_empty(), "{:?}", problems(&report));
        assert_eq!(d[0]["direction"], want, "{:#}", d[0]);

        // Both ends: the keepalives left one end and never reached the other.
        let (code, report) = analyze_json(&[&client, &server]);
        assert_eq!(code, 1, "{report:#}");
        let lost = with_id(&report, "lost-between-captures");
        assert!(!lost.is_empty(), "{report:#}");
        let l = lost
            .iter()
            .find(|f| f["direction"] == want)
            .unwrap_or_else(|| panic!("{report:#}"));
        let title = l["title"].as_str().unwrap();
        assert!(
            title.contains("keepalive") && title.contains("none reached"),
            "{title}"
        );
        let cmp = &report["data"]["analyze"]["comparison"]["pairs"][0];
        assert_eq!(cmp["nat"], true, "{cmp:#}");
    }
}

#[test]
fn lab_capture_command_records_what_crosses_a_hop() {
    let _serial = support::serial();
    let (_c, lab) = up("cap", "clean");
    let dir = Scratch::new("cap");
    let file = dir.file("hop1.pcap");
    let prefix = support::prefix(STEM, "cap");
    let child = Command::new(PATHDOC)
        .args(["lab", "capture", &lab.name(), "hop1:wan0", "-w"])
        .arg(&file)
        .args(["--duration", "4s", "--prefix", &prefix, "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let got = traffic::download(&lab, 200_000, Duration::from_secs(3)).unwrap();
    assert!(got.completed, "{got:?}");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["packets"].as_u64().unwrap() > 100, "{doc:#}");
    lab.down().unwrap();
    let (code, report) = analyze_json(&[&file]);
    assert_eq!(code, 0, "{report:#}");
    let conns = &report["data"]["analyze"]["captures"][0]["totals"]["connections"];
    assert!(conns.as_u64().unwrap() >= 1, "{report:#}");
}

/// Issue 17: a download through 1 % random loss (30 ms RTT), captured on the client, i.e.
/// downstream of the loss. The repairs of segments that never reached the client are often
/// "out-of-order" to Wireshark; the holes they fill are the loss all the same, and the finding
/// says the capture point sits downstream of it.
#[test]
fn lossy_download_captured_on_the_client_is_found() {
    let _serial = support::serial();
    let test = "rxl";
    let c = Cleanup::new(STEM, test);
    let mut t = Topology::scenario("lossy-long-fat").unwrap();
    t.links[1].loss_percent = Some(1.0);
    t.links[1].delay_ms = Some(15.0);
    let lab = Lab::up(&t, &opts(STEM, test)).expect("lab up");
    let dir = Scratch::new(test);
    let client = dir.file("client.pcap");
    let cap = start(&lab, "client", &client);
    traffic::iperf3(&lab, "client", "server", 4, true, &["-C", "cubic"]).unwrap();
    cap.stop().unwrap();
    lab.down().unwrap();
    drop(c);
    assert_agrees_with_tshark(&client);
    let (code, report) = analyze_json(&[&client]);
    let down: Vec<&Value> = with_id(&report, "tcp-loss-one-direction")
        .into_iter()
        .filter(|f| f["direction"] == "server-to-client")
        .collect();
    assert!(!down.is_empty(), "{:?}", problems(&report));
    let title = down[0]["title"].as_str().unwrap();
    assert!(title.contains("never reached the capture point"), "{title}");
    assert_eq!(code, 1, "{:?}", problems(&report));
}

/// Issue 17: a window-limited download captured from the middle of the connection (tcpdump
/// started after the handshake, as on a transfer already crawling). The client's window scale is
/// not in the capture, so no window verdict may be given from raw window fields; the report says
/// the scale is unknown instead.
#[test]
fn mid_connection_capture_of_a_window_limited_download() {
    let _serial = support::serial();
    let test = "mid";
    let (_c, lab) = up(test, "window-limited");
    let dir = Scratch::new(test);
    let client = dir.file("client.pcap");
    std::thread::scope(|s| {
        let download =
            s.spawn(|| traffic::iperf3(&lab, "client", "server", 3, true, &["-C", "cubic"]));
        std::thread::sleep(Duration::from_millis(1500));
        let cap = start(&lab, "client", &client);
        download.join().unwrap().unwrap();
        cap.stop().unwrap();
    });
    lab.down().unwrap();
    assert_agrees_with_tshark(&client);
    let (_, report) = analyze_json(&[&client]);
    assert!(
        with_id(&report, "receive-window-limited").is_empty(),
        "{:?}",
        problems(&report)
    );
    // Which end is the client is a guess without the handshake (the higher port), so the
    // direction is not asserted: the note is about the download, with its bytes in flight.
    let unknown = with_id(&report, "window-scale-unknown");
    assert_eq!(unknown.len(), 1, "{report:#}");
    let in_flight = unknown[0]["evidence"][1]["value"]["value"]
        .as_f64()
        .unwrap();
    assert!(in_flight > 64.0 * 1024.0, "{:#}", unknown[0]);
}

/// Run `ip ARGS` inside `host`, asserting success.
fn ip_in(lab: &Lab, host: &str, args: &str) {
    let out = lab
        .command(host, "ip")
        .args(args.split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args} on {host}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 17: TCP inside VXLAN (the kernel's own, `ip link add … type vxlan`) captured on the
/// outer interface: pathdoc sees the inner connection, with tshark's flags and stream numbers.
#[test]
fn vxlan_encapsulated_download_is_analysed() {
    let _serial = support::serial();
    let test = "vxl";
    let c = Cleanup::new(STEM, test);
    // A routed path (no NAT, so both VXLAN endpoints reach each other's address).
    let mut t = Topology::scenario("slow-lossy-duplex").unwrap();
    t.links[1] = Default::default();
    let lab = Lab::up(&t, &opts(STEM, test)).expect("lab up");
    let (ca, sa) = (lab.addr("client"), lab.addr("server"));
    for (host, local, remote, inner) in [
        ("client", ca, sa, "10.42.0.1/24"),
        ("server", sa, ca, "10.42.0.2/24"),
    ] {
        ip_in(
            &lab,
            host,
            &format!("link add vx0 type vxlan id 42 local {local} remote {remote} dstport 4789"),
        );
        ip_in(&lab, host, &format!("addr add {inner} dev vx0"));
        ip_in(&lab, host, "link set vx0 mtu 1400 up");
    }
    let dir = Scratch::new(test);
    let outer = dir.file("outer.pcap");
    let cap = capture::start(
        &lab,
        "client",
        None,
        &outer,
        &CaptureOptions {
            snaplen: 200,
            filter: Some("udp port 4789".into()),
        },
    )
    .unwrap();
    let mut srv = lab.command("server", "iperf3");
    srv.args(["-s", "-1", "-p", "5299", "-B", "10.42.0.2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _srv = lab.spawn("server", srv).unwrap();
    // iperf3 needs a moment to listen; on a loaded machine more than a few hundred ms.
    std::thread::sleep(Duration::from_millis(1000));
    let out = lab
        .command("client", "iperf3")
        .args([
            "-c",
            "10.42.0.2",
            "-p",
            "5299",
            "-t",
            "1",
            "-R",
            // Paced: the test is about decapsulation. Unpaced on an unshaped veth, the download
            // runs as fast as two busy cores allow and loses real packets (CI saw 3.2 % beside
            // other lab tests), which analyze then rightly reports.
            "-b",
            "100M",
            "--connect-timeout",
            "3000",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cap.stop().unwrap();
    lab.down().unwrap();
    drop(c);
    let flags = assert_agrees_with_tshark(&outer);
    let (_, report) = analyze_json(&[&outer]);
    let totals = &report["data"]["analyze"]["captures"][0]["totals"];
    assert!(totals["tcp_packets"].as_u64().unwrap() > 100, "{totals:#}");
    assert_eq!(totals["connections"], 2, "{totals:#}"); // iperf3's control and data connections
                                                        // The kernel's VXLAN path on two busy cores does drop a few percent now and then (seen in
                                                        // 2 of 3 runs, also paced). Then a loss finding is the truth, and tshark must see the same
                                                        // repairs; any other warning, or loss tshark does not see, is a false finding.
    let tshark_saw_loss = ["retransmission", "lost_segment", "duplicate_ack"]
        .iter()
        .any(|f| flags.get(*f).copied().unwrap_or(0) > 0);
    for problem in problems(&report) {
        assert!(
            problem.contains("tcp-loss-one-direction") && tshark_saw_loss,
            "{problem} (tshark's flags: {flags:?})"
        );
    }
}
