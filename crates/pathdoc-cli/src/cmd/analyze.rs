//! `pathdoc analyze CAPTURE [FAR_CAPTURE]`: read tcpdump/Wireshark captures and diagnose the TCP
//! connections in them. The work is done by `pathdoc-capture` (reading) and `pathdoc-analyze`
//! (analysis, findings, two-capture comparison); this module parses flags, shows progress,
//! handles Ctrl-C, and renders.

use std::io::{IsTerminal, Write};
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use pathdoc_analyze::analyzer::{CaptureAnalysis, Filter, Options, PacketRecord};
use pathdoc_analyze::compare;
use pathdoc_analyze::{Analyzer, Flags};
use pathdoc_capture::{CaptureError, CaptureReader};
use pathdoc_core::units::{format_bytes, format_duration};
use pathdoc_core::{Evidence, Finding, Progress, Quantity, Report, Status};
use serde_json::json;

use crate::error::{CliError, ErrorKind};
use crate::output;
use crate::progress::TerminalProgress;
use crate::Global;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Capture file(s): pcap or pcapng, optionally gzip-compressed; `-` reads standard input.
    /// Two files of the same path (e.g. client side and server side) are compared packet by packet.
    #[arg(required = true, num_args = 1..=2, value_name = "CAPTURE")]
    captures: Vec<String>,
    /// Only connections with this stream index (as Wireshark's tcp.stream; repeatable).
    #[arg(long = "conn", value_name = "STREAM")]
    conn: Vec<u64>,
    /// Only connections with this host at either end: an IP address, or a name resolved by the
    /// system resolver (/etc/hosts, DNS; any of its addresses matches).
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Only connections with this port at either end.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// List every connection, healthy ones too.
    #[arg(long)]
    all: bool,
    /// Print Wireshark's tcp.analysis flags of every TCP packet as a tab-separated table instead
    /// of the report (columns: frame, time, stream, src, dst, seq, ack, len, tcp flags,
    /// analysis flags, dup-ACK number).
    #[arg(long, conflicts_with_all = ["json", "report"])]
    flags: bool,
    #[command(flatten)]
    html: super::report_html::HtmlReportArgs,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn run(args: AnalyzeArgs, global: Global) -> anyhow::Result<i32> {
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
    // A bad --report path fails now, not after minutes of reading.
    args.html.prepare()?;
    if args.captures.len() == 2 {
        return run_pair(&args, global);
    }
    let hosts = host_filter(args.host.as_deref(), global)?;
    let name = &args.captures[0];
    let progress = TerminalProgress::new(global);
    let filter = Filter {
        ids: args.conn.clone(),
        hosts: hosts.clone(),
        port: args.port,
    };
    let opts = Options {
        filter,
        list_all: args.all,
        ..Options::default()
    };
    let mut flags_out = args.flags.then(FlagsTable::new);
    let pass = analyze_file(name, opts, &progress, flags_out.as_mut())?;
    progress.finish();
    warn_damage(&pass);
    if let Some(mut t) = flags_out {
        t.flush();
        let report = build_report(&[pass], None, filter_json(&args, &hosts));
        return Ok(exit_code(&report));
    }
    let passes = [pass];
    let report = build_report(&passes, None, filter_json(&args, &hosts));
    render(&report, global);
    if args.all && !global.json {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{}", connection_table(&passes[0].analysis.listed));
    }
    super::report_capture::write_html(&args.html, &args.captures, &report)?;
    Ok(exit_code(&report))
}

/// `--all` in text: one line per listed connection, healthy ones too (the findings above only
/// name the connections with something to say; JSON has them all in `data.analyze`).
fn connection_table(listed: &[pathdoc_analyze::Listed]) -> String {
    use pathdoc_analyze::summary::EndState;
    let mut s = format!(
        "\nConnections ({}):\n  {:<52} {:>8} {:>11} {:>11} {:>9}  {:<20} {}\n",
        listed.len(),
        "# client → server",
        "packets",
        "c→s bytes",
        "s→c bytes",
        "duration",
        "end",
        "findings"
    );
    for l in listed {
        let c = &l.summary;
        let end = match &c.end {
            EndState::Closed => "closed (FIN both)".to_string(),
            EndState::HalfClosed { by } => format!("FIN by {by} only"),
            EndState::Reset { by, .. } => format!("reset by {by}"),
            EndState::Open => "open at the end".to_string(),
        };
        let ids: Vec<&str> = l
            .findings
            .iter()
            .filter(|f| f.status > Status::Info)
            .map(|f| f.id.as_str())
            .collect();
        s.push_str(&format!(
            "  {:<52} {:>8} {:>11} {:>11} {:>9}  {:<20} {}\n",
            pathdoc_analyze::diagnose::label(c),
            c.packets,
            format_bytes(c.client_to_server.unique_bytes),
            format_bytes(c.server_to_client.unique_bytes),
            format_duration(std::time::Duration::from_secs_f64(c.duration_s.max(0.0))),
            end,
            if ids.is_empty() {
                "healthy".to_string()
            } else {
                ids.join(", ")
            }
        ));
    }
    s
}

/// The addresses `--host` stands for: an IP literal (IPv6 with or without brackets) as it is,
/// a name through the system resolver (getaddrinfo: /etc/hosts, DNS), every address it has.
/// A name that does not resolve is an error (exit 2), not an empty result.
fn host_filter(host: Option<&str>, global: Global) -> anyhow::Result<Vec<IpAddr>> {
    let Some(text) = host.map(str::trim) else {
        return Ok(Vec::new());
    };
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let hint = "give an IP address, or a name the system resolver knows (/etc/hosts, DNS); the \
                names in a capture are those of its time and place, so an address is surer";
    if bare.is_empty() || bare.contains(|c: char| c.is_whitespace() || c == '/' || c == ':') {
        return Err(CliError::usage(format!(
            "--host {text:?} is neither an IP address nor a host name"
        ))
        .hint(hint)
        .into());
    }
    let resolved = (bare, 0u16).to_socket_addrs().map_err(|e| {
        CliError::new(
            ErrorKind::Resolve,
            format!(
                "--host {bare:?} does not resolve: {}",
                crate::error::without_os_error(&e.to_string())
            ),
        )
        .hint(hint)
    })?;
    let mut addrs: Vec<IpAddr> = Vec::new();
    for a in resolved {
        if !addrs.contains(&a.ip()) {
            addrs.push(a.ip());
        }
    }
    if addrs.is_empty() {
        return Err(CliError::new(
            ErrorKind::Resolve,
            format!("--host {bare:?} has no address"),
        )
        .hint(hint)
        .into());
    }
    if !global.json && !global.quiet {
        let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        eprintln!("pathdoc: --host {bare} = {}", list.join(", "));
    }
    Ok(addrs)
}

/// `data.analyze.filter`: the selection as given, and the addresses a `--host` name stood for.
fn filter_json(args: &AnalyzeArgs, hosts: &[IpAddr]) -> serde_json::Value {
    json!({
        "conn": args.conn,
        "host": args.host,
        "host_addresses": hosts,
        "port": args.port,
    })
}

/// A damaged capture is also said on stderr, whatever the report shows.
fn warn_damage(pass: &Pass) {
    if let Some(e) = &pass.error {
        eprintln!("pathdoc: warning: {e}");
    }
}

fn exit_code(report: &Report) -> i32 {
    if INTERRUPTED.load(Ordering::SeqCst) {
        130
    } else {
        report.exit_code()
    }
}

/// The outcome of reading one capture.
pub struct Pass {
    pub name: String,
    pub format: String,
    pub analysis: CaptureAnalysis,
    pub error: Option<CaptureError>,
    pub interrupted: bool,
    pub elapsed_s: f64,
    pub bytes_read: u64,
    /// A `--conn`/`--host`/`--port` selection was given.
    pub filtered: bool,
}

/// Read and analyse one capture, streaming `--flags` rows when asked.
pub fn analyze_file(
    name: &str,
    opts: Options,
    progress: &dyn Progress,
    mut flags: Option<&mut FlagsTable>,
) -> anyhow::Result<Pass> {
    let mut reader = CaptureReader::open(name).map_err(anyhow::Error::new)?;
    let format = match reader.format() {
        pathdoc_capture::CaptureFormat::Pcap {
            nanosecond,
            big_endian,
        } => format!(
            "pcap ({}, {})",
            if nanosecond { "ns" } else { "µs" },
            if big_endian {
                "big-endian"
            } else {
                "little-endian"
            }
        ),
        pathdoc_capture::CaptureFormat::PcapNg => "pcapng".into(),
    };
    let filtered = !opts.filter.is_empty();
    let mut analyzer = Analyzer::new(opts);
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut error = None;
    let mut interrupted = false;
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        let record = analyzer.process(&packet);
        let number = packet.number;
        if let (Some(table), Some(r)) = (flags.as_deref_mut(), record) {
            if !table.row(&r) {
                break; // stdout closed (e.g. `| head`): nothing more to print
            }
        }
        if number & 8191 == 0 {
            if INTERRUPTED.load(Ordering::Relaxed) {
                interrupted = true;
                break;
            }
            if last_progress.elapsed().as_millis() >= 250 {
                last_progress = Instant::now();
                let (done, size) = reader.progress();
                let rate = number as f64 / started.elapsed().as_secs_f64().max(1e-3);
                let share = size
                    .filter(|s| *s > 0)
                    .map(|s| format!(" ({:.0} %)", done as f64 * 100.0 / s as f64))
                    .unwrap_or_default();
                progress.status(&format!(
                    "{name}: {} read{share}, {} packets ({:.0} k/s), {} connections open",
                    format_bytes(done),
                    number,
                    rate / 1e3,
                    analyzer.active()
                ));
            }
        }
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        interrupted = true;
    }
    let bytes_read = reader.progress().0;
    Ok(Pass {
        name: name.to_string(),
        format,
        analysis: analyzer.finish(),
        error,
        interrupted,
        elapsed_s: started.elapsed().as_secs_f64(),
        bytes_read,
        filtered,
    })
}

/// Findings of one or two passes plus the capture-level ones, and the `data.analyze` document.
fn build_report(
    passes: &[Pass],
    comparison: Option<compare::Comparison>,
    filter: serde_json::Value,
) -> Report {
    let target = passes
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(" + ");
    let mut report = Report::new(pathdoc_core::Command::Analyze, target);
    let mut captures = Vec::new();
    for (i, p) in passes.iter().enumerate() {
        let side = if passes.len() == 2 {
            if i == 0 {
                " (near)"
            } else {
                " (far)"
            }
        } else {
            ""
        };
        let t = &p.analysis.totals;
        if let Some(e) = &p.error {
            report.findings.push(damage_finding(p, e, side));
        }
        if p.interrupted {
            report.findings.push(
                Finding::new(
                    "analyze",
                    "analysis-interrupted",
                    Status::Inconclusive,
                    format!(
                        "analysis of {}{side} interrupted after {} packets",
                        p.name, t.packets
                    ),
                )
                .summary("Interrupted (Ctrl-C): the results cover the packets read until then."),
            );
        }
        if t.tcp_packets == 0 && p.error.is_none() {
            report.findings.push(
                Finding::new(
                    "analyze",
                    "no-tcp",
                    Status::Inconclusive,
                    format!("{}{side}: no TCP packets among its {} packets", p.name, t.packets),
                )
                .summary("Nothing to analyse: the capture holds no TCP (check the capture filter and interface; link types other than Ethernet, Linux cooked, raw IP and loopback are not decoded).")
                .evidence(Evidence::new("packets", Quantity::Count(t.packets)))
                .evidence(Evidence::new("not IP or unsupported link type", Quantity::Count(t.non_ip_packets + t.unsupported_link_packets))),
            );
        }
        if comparison.is_none() || i == 0 {
            for l in &p.analysis.listed {
                report.findings.extend(l.findings.iter().cloned());
            }
            report
                .findings
                .extend(p.analysis.host_findings.iter().cloned());
        }
        if t.connections > 0 {
            report.findings.push(overview_finding(p, side));
        }
        captures.push(json!({
            "file": p.name,
            "format": p.format,
            "totals": t,
            "bytes_read": p.bytes_read,
            "elapsed_s": p.elapsed_s,
            "error": p.error.as_ref().map(|e| e.to_string()),
            "error_offset": p.error.as_ref().and_then(|e| e.offset()),
            "damage": p.error.as_ref().map(damage_kind),
            "interrupted": p.interrupted,
            "connections": p.analysis.listed.iter().map(|l| &l.summary).collect::<Vec<_>>(),
            "icmp": p.analysis.icmp,
            "unlisted_findings": p.analysis.unlisted_finding_ids.iter().map(|(id, n)| json!({"id": id, "connections": n})).collect::<Vec<_>>(),
        }));
    }
    if let Some(c) = &comparison {
        report.findings.extend(compare::findings(c));
    }
    // Moved in, not through `json!`, which would copy every connection's summary once more
    // (`analyze --all` on 2 000 connections: 0.5 s).
    let mut analyze = serde_json::Map::new();
    analyze.insert("filter".into(), filter);
    analyze.insert("captures".into(), serde_json::Value::Array(captures));
    analyze.insert(
        "comparison".into(),
        serde_json::to_value(&comparison).unwrap_or_default(),
    );
    report
        .data
        .insert("analyze".into(), serde_json::Value::Object(analyze));
    // Problems first, then the rest, in a stable order.
    report
        .findings
        .sort_by_key(|f| std::cmp::Reverse(status_rank(f.status)));
    crate::provenance::stamp(&mut report);
    report
}

fn status_rank(s: Status) -> u8 {
    match s {
        Status::Fail => 5,
        Status::Warn => 4,
        Status::Inconclusive => 3,
        Status::Info => 2,
        Status::Pass => 1,
    }
}

/// A capture that could not be read to its end. Its status is INCONCLUSIVE whatever the
/// damage: the packets before it are analysed as usual, but "no problem" needs the whole file,
/// so a damaged capture never exits 0 (1 when what was read shows a problem, else 3).
fn damage_finding(p: &Pass, e: &CaptureError, side: &str) -> Finding {
    let truncated = matches!(e, CaptureError::Truncated { .. });
    let id = if truncated {
        "capture-truncated"
    } else {
        "capture-damaged"
    };
    let offset = e.offset().unwrap_or(0);
    let what = if truncated {
        "is truncated: it ends in the middle of a packet"
    } else {
        "is damaged"
    };
    Finding::new(
        "analyze",
        id,
        Status::Inconclusive,
        format!(
            "{}{side} {what} at byte {offset}; the results cover only the {} packets before it",
            p.name, p.analysis.totals.packets
        ),
    )
    .requirement("a verdict of \"no problem\" needs the whole capture: what went wrong may be in the part that could not be read")
    .summary(format!(
        "{e}. Findings from those packets stand; the rest of the capture is unknown.{}",
        if truncated {
            " A capture is cut like this when tcpdump is killed (kill -9, a full disk) or the file is copied while still being written; stop tcpdump with Ctrl-C or SIGTERM so it writes its last packet."
        } else {
            ""
        }
    ))
    .evidence(Evidence::new(
        "byte offset of the damage",
        Quantity::Count(offset),
    ))
    .evidence(Evidence::new(
        "packets analysed",
        Quantity::Count(p.analysis.totals.packets),
    ))
}

/// `data.analyze.captures[].damage`: how the capture is damaged, for scripts.
fn damage_kind(e: &CaptureError) -> &'static str {
    match e {
        CaptureError::Truncated { .. } => "truncated",
        CaptureError::Corrupt { .. } => "corrupt",
        _ => "read-error",
    }
}

fn overview_finding(p: &Pass, side: &str) -> Finding {
    let t = &p.analysis.totals;
    let dur = match (t.first_epoch_s, t.last_epoch_s) {
        (Some(a), Some(b)) if b >= a => b - a,
        _ => 0.0,
    };
    // PASS only when nothing at all was found: not a connection, not the capture itself
    // (its clock running backwards) nor a pair of hosts.
    let capture_level = p
        .analysis
        .host_findings
        .iter()
        .any(|f| f.status > Status::Info);
    let status = if t.connections_with_findings > 0 || capture_level {
        Status::Info
    } else {
        Status::Pass
    };
    Finding::new(
        "analyze",
        "capture-overview",
        status,
        format!(
            "{}{side}: {} TCP connections, {} with findings, {} healthy{}",
            p.name,
            t.connections,
            t.connections_with_findings,
            t.healthy_connections,
            if p.filtered {
                format!("; {} selected by the filter", t.matched_filter)
            } else {
                String::new()
            }
        ),
    )
    .summary(format!(
        "{} packets ({} TCP, {} ICMP too-big) over {}; Wireshark's flags over all connections: {} retransmissions ({} fast, {} spurious), {} out-of-order, {} duplicate ACKs, {} previous segments not captured, {} zero windows, {} keep-alives.",
        t.packets,
        t.tcp_packets,
        t.icmp_too_big,
        format_duration(std::time::Duration::from_secs_f64(dur)),
        t.flags.retransmission + t.flags.fast_retransmission + t.flags.spurious_retransmission,
        t.flags.fast_retransmission,
        t.flags.spurious_retransmission,
        t.flags.out_of_order,
        t.flags.duplicate_ack,
        t.flags.lost_segment,
        t.flags.zero_window,
        t.flags.keep_alive
    ))
    .evidence(Evidence::new("packets", Quantity::Count(t.packets)))
    .evidence(Evidence::new("TCP connections", Quantity::Count(t.connections)))
    .evidence(Evidence::new("capture duration", Quantity::Seconds(dur)))
}

fn render(report: &Report, global: Global) {
    if global.json {
        output::print_report(report, global);
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", output::render_text(report));
}

/// `--flags` output: one tab-separated row per TCP packet, formatted by hand into one buffer
/// written in 64 KiB pieces. `writeln!` with its formatting machinery, `Display` of addresses
/// and two small `String`s per row cost more than the analysis of the packet (`perf` on a
/// 1 M-packet capture: a third of all samples in `core::fmt`), which kept `--flags` at a
/// quarter of the default mode's speed.
pub struct FlagsTable {
    out: std::io::Stdout,
    buf: Vec<u8>,
    broken: bool,
}

/// Bytes gathered before one write to stdout.
const FLAGS_CHUNK: usize = 1 << 16;

impl FlagsTable {
    fn new() -> Self {
        let mut t = FlagsTable {
            out: std::io::stdout(),
            buf: Vec::with_capacity(FLAGS_CHUNK + 512),
            broken: false,
        };
        t.buf.extend_from_slice(
            b"frame\ttime\tstream\tsrc\tdst\tseq\tack\tlen\ttcp_flags\tanalysis\tdupack\n",
        );
        t
    }

    /// Write a row; false once stdout is closed.
    fn row(&mut self, r: &PacketRecord) -> bool {
        if self.broken {
            return false;
        }
        let mut w = Row::new(&mut self.buf);
        w.num(r.number);
        w.byte(b'\t');
        let secs = r.ts_ns.div_euclid(1_000_000_000);
        if secs < 0 {
            w.byte(b'-');
        }
        w.num(secs.unsigned_abs());
        w.byte(b'.');
        w.padded(r.ts_ns.rem_euclid(1_000_000_000) as u64, 9);
        w.byte(b'\t');
        w.num(r.stream);
        w.byte(b'\t');
        w.endpoint(&r.src);
        w.byte(b'\t');
        w.endpoint(&r.dst);
        for v in [r.rel_seq, r.rel_ack, r.seg_len] {
            w.byte(b'\t');
            w.num(u64::from(v));
        }
        w.byte(b'\t');
        w.text(&tcp_flags(r.tcp_flags));
        w.byte(b'\t');
        if r.flags.is_empty() {
            w.byte(b'-');
        } else {
            w.text(r.flags.to_string().as_bytes());
        }
        w.byte(b'\t');
        if r.flags.has(Flags::DUPLICATE_ACK) {
            w.num(u64::from(r.dupack_num));
        } else {
            w.byte(b'-');
        }
        w.byte(b'\n');
        w.finish();
        if self.buf.len() >= FLAGS_CHUNK {
            self.write_out();
        }
        !self.broken
    }

    fn write_out(&mut self) {
        if !self.broken && self.out.lock().write_all(&self.buf).is_err() {
            self.broken = true;
        }
        self.buf.clear();
    }

    fn flush(&mut self) {
        self.write_out();
        let _ = self.out.lock().flush();
    }
}

/// One `--flags` row built byte by byte on the stack and appended to the output in one copy:
/// appending each small field to the `Vec` cost a `memmove` call apiece (a fifth of a run).
struct Row<'a> {
    out: &'a mut Vec<u8>,
    b: [u8; 128],
    n: usize,
}

impl<'a> Row<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        Row {
            out,
            b: [0; 128],
            n: 0,
        }
    }

    fn byte(&mut self, c: u8) {
        if self.n == self.b.len() {
            self.finish();
        }
        self.b[self.n] = c;
        self.n += 1;
    }

    fn text(&mut self, s: &[u8]) {
        for &c in s {
            self.byte(c);
        }
    }

    /// `v` in decimal, two digits at a time straight into the row (the digit loop was a
    /// quarter of a `--flags` run).
    fn num(&mut self, mut v: u64) {
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";
        if self.b.len() - self.n < 20 {
            self.finish();
        }
        let end = self.n + v.checked_ilog10().unwrap_or(0) as usize + 1;
        let mut i = end;
        while v >= 100 {
            let d = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            self.b[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
        }
        if v >= 10 {
            let d = v as usize * 2;
            self.b[i - 2..i].copy_from_slice(&PAIRS[d..d + 2]);
        } else {
            self.b[i - 1] = b'0' + v as u8;
        }
        self.n = end;
    }

    /// `v` in decimal, zero-padded to `width` digits (`v` < 10^width).
    fn padded(&mut self, v: u64, width: u32) {
        let mut div = 10u64.pow(width.saturating_sub(1));
        while div > 0 {
            self.byte(b'0' + ((v / div) % 10) as u8);
            div /= 10;
        }
    }

    /// `a.b.c.d:port`, or `[v6]:port` as `Endpoint`'s `Display` writes it.
    fn endpoint(&mut self, e: &pathdoc_analyze::conn::Endpoint) {
        match e.addr {
            std::net::IpAddr::V4(a) => {
                for (i, o) in a.octets().into_iter().enumerate() {
                    if i > 0 {
                        self.byte(b'.');
                    }
                    self.num(u64::from(o));
                }
                self.byte(b':');
                self.num(u64::from(e.port));
            }
            std::net::IpAddr::V6(_) => self.text(e.to_string().as_bytes()),
        }
    }

    /// Append what is built to the output.
    fn finish(&mut self) {
        self.out.extend_from_slice(&self.b[..self.n]);
        self.n = 0;
    }
}

fn tcp_flags(f: u16) -> [u8; 8] {
    const NAMES: [(u16, u8); 8] = [
        (0x080, b'C'),
        (0x040, b'E'),
        (0x020, b'U'),
        (0x010, b'A'),
        (0x008, b'P'),
        (0x004, b'R'),
        (0x002, b'S'),
        (0x001, b'F'),
    ];
    NAMES.map(|(bit, c)| if f & bit != 0 { c } else { b'.' })
}

/// Two captures of one path: analyse both, then match connections and compare packets.
fn run_pair(args: &AnalyzeArgs, global: Global) -> anyhow::Result<i32> {
    if args.flags {
        anyhow::bail!("--flags reads one capture at a time");
    }
    if args.captures.iter().any(|c| c == "-") {
        anyhow::bail!("comparing two captures needs two files (each is read twice); standard input cannot be one of them");
    }
    let hosts = host_filter(args.host.as_deref(), global)?;
    let progress = TerminalProgress::new(global);
    let mut passes = Vec::new();
    for name in &args.captures {
        let opts = Options {
            filter: Filter {
                ids: Vec::new(),
                hosts: hosts.clone(),
                port: args.port,
            },
            list_all: true,
            ..Options::default()
        };
        passes.push(analyze_file(name, opts, &progress, None)?);
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    let _ = &interrupted;
    progress.status("matching connections and packets across the two captures");
    let comparison = compare::compare_files(
        &args.captures[0],
        &args.captures[1],
        &passes[0].analysis,
        &passes[1].analysis,
        &args.conn,
        &|| INTERRUPTED.load(Ordering::Relaxed),
    )
    .context("comparing the two captures")?;
    progress.finish();
    passes.iter().for_each(warn_damage);
    let report = build_report(&passes, Some(comparison), filter_json(args, &hosts));
    render(&report, global);
    super::report_capture::write_html(&args.html, &args.captures, &report)?;
    let _ = std::io::stderr().is_terminal();
    Ok(exit_code(&report))
}
