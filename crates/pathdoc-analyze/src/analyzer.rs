//! The streaming pass over a capture: decodes each packet, finds its connection (numbered like
//! Wireshark's `tcp.stream`), runs the TCP analysis, records ICMP errors against the connection
//! they quote, and retires connections into summaries so memory stays bounded.

use std::collections::HashMap;
use std::net::IpAddr;

use pathdoc_capture::decode::{self, IcmpKind, L4, TH_ACK, TH_SYN};
use pathdoc_capture::Packet;
use pathdoc_core::{Direction, Finding};
use serde::Serialize;

use crate::conn::{Connection, Endpoint, SegmentIn};
use crate::diagnose;
use crate::flags::Flags;
use crate::frag::Fragments;
use crate::loss::LossCount;
use crate::stats::FlagCounts;
use crate::summary::{summarize, ConnSummary};

/// Connections kept in memory at once before the least recently active are retired.
pub const DEFAULT_MAX_ACTIVE: usize = 50_000;
/// Connection summaries with findings kept for the report.
pub const DEFAULT_MAX_LISTED: usize = 2_000;
/// A closed connection (FIN both ways or RST) silent this long is retired early.
const CLOSED_LINGER_NS: i64 = 120_000_000_000;
const SWEEP_EVERY: u64 = 1 << 16;

/// Which connections the report lists (the analysis itself always covers every packet, so
/// stream numbers stay those of Wireshark).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Stream indexes.
    pub ids: Vec<u64>,
    /// Either end has one of these addresses (a host name's A and AAAA records); empty: any.
    pub hosts: Vec<IpAddr>,
    /// Either end has this port.
    pub port: Option<u16>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.hosts.is_empty() && self.port.is_none()
    }

    fn matches(&self, c: &Connection) -> bool {
        (self.ids.is_empty() || self.ids.contains(&c.id))
            && (self.hosts.is_empty() || c.ends.iter().any(|e| self.hosts.contains(&e.addr)))
            && self.port.is_none_or(|p| c.ends.iter().any(|e| e.port == p))
    }
}

/// Analyzer settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub filter: Filter,
    /// List every connection, healthy ones included.
    pub list_all: bool,
    pub max_active: usize,
    pub max_listed: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            filter: Filter::default(),
            list_all: false,
            max_active: DEFAULT_MAX_ACTIVE,
            max_listed: DEFAULT_MAX_LISTED,
        }
    }
}

/// Canonical (direction-free) connection key: both ends as 128-bit addresses (IPv4 mapped)
/// with their ports, lower end first — cheap to hash and compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ConnKey {
    lo: u128,
    hi: u128,
    ports: u32,
}

fn addr_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) | (0xffff << 32),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl ConnKey {
    fn new(a: Endpoint, b: Endpoint) -> Self {
        let (x, y) = ((addr_bits(a.addr), a.port), (addr_bits(b.addr), b.port));
        let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
        ConnKey {
            lo: lo.0,
            hi: hi.0,
            ports: (u32::from(lo.1) << 16) | u32::from(hi.1),
        }
    }
}

/// One packet's analysis, for `--flags`.
#[derive(Debug, Clone, Copy)]
pub struct PacketRecord {
    pub number: u64,
    pub ts_ns: i64,
    pub stream: u64,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub rel_seq: u32,
    pub rel_ack: u32,
    /// Raw sequence and acknowledgment numbers.
    pub seq: u32,
    pub ack: u32,
    /// IPv4 identification (0 for IPv6).
    pub ip_id: u16,
    pub seg_len: u32,
    pub tcp_flags: u16,
    pub flags: Flags,
    pub dupack_num: u32,
    /// The advertised receive window in bytes, scaled; `None` while the scale is unknown.
    pub window: Option<u64>,
}

/// An ICMP error seen in the capture.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IcmpEvent {
    pub time_epoch_s: f64,
    pub from: String,
    pub kind: String,
    pub mtu: Option<u32>,
    /// The quoted packet's source and destination.
    pub quoted: String,
    /// Stream index of the connection it quotes, if any.
    pub stream: Option<u64>,
}

/// Packet counts of the whole capture.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Totals {
    pub packets: u64,
    pub wire_bytes: u64,
    pub ip_packets: u64,
    pub tcp_packets: u64,
    pub udp_packets: u64,
    pub icmp_packets: u64,
    pub other_ip_packets: u64,
    pub non_ip_packets: u64,
    pub ip_fragments: u64,
    pub unsupported_link_packets: u64,
    pub first_epoch_s: Option<f64>,
    pub last_epoch_s: Option<f64>,
    pub connections: u64,
    /// Connections with no finding (counted, not listed).
    pub healthy_connections: u64,
    pub connections_with_findings: u64,
    /// Connections selected by the filter (`--conn`/`--host`/`--port`); 0 without one.
    pub matched_filter: u64,
    /// Connections with findings beyond the listing limit.
    pub unlisted_with_findings: u64,
    /// Wireshark flag counts over all connections.
    pub flags: FlagCounts,
    /// Connections retired from memory before the end of the capture.
    pub retired_early: u64,
    pub icmp_too_big: u64,
    /// Packets with an earlier capture time than the packet before them, and the largest such
    /// step back in seconds.
    pub clock_backward_steps: u64,
    pub largest_backward_step_s: f64,
}

/// A finished connection with its findings.
#[derive(Debug, Clone)]
pub struct Listed {
    pub summary: ConnSummary,
    pub findings: Vec<Finding>,
}

/// The result of one capture.
#[derive(Debug, Clone, Default)]
pub struct CaptureAnalysis {
    pub totals: Totals,
    pub listed: Vec<Listed>,
    pub icmp: Vec<IcmpEvent>,
    /// Findings of connections beyond the listing limit, counted by id.
    pub unlisted_finding_ids: Vec<(String, u64)>,
    /// Findings about the capture as a whole (its clock running backwards) and about all
    /// connections between two hosts (loss concentrated in one direction).
    pub host_findings: Vec<Finding>,
}

/// Data and retransmitted segments per direction between two hosts, over all their connections.
#[derive(Debug, Clone, Default)]
pub struct HostPairLoss {
    pub connections: u64,
    /// [client→server, server→client]
    pub data: [u64; 2],
    /// Segments lost (retransmissions of segments seen and holes filled later; see [`LossCount`]).
    pub lost: [u64; 2],
    pub duplicate_acks: [u64; 2],
    pub best_goodput: [f64; 2],
}

/// Host pairs tracked for the direction comparison.
const MAX_HOST_PAIRS: usize = 10_000;

/// The streaming analyzer.
pub struct Analyzer {
    opts: Options,
    conns: HashMap<ConnKey, Box<Connection>, foldhash::fast::RandomState>,
    next_id: u64,
    totals: Totals,
    first_ns: Option<i64>,
    last_ns: i64,
    /// Time of the previous packet, to count backward steps.
    prev_ns: i64,
    listed: Vec<Listed>,
    icmp: Vec<IcmpEvent>,
    unlisted: HashMap<String, u64>,
    host_pairs: HashMap<(String, String), HostPairLoss>,
    fragments: Fragments,
    /// Connections in memory holding a timeline (at most [`MAX_TIMELINES`]).
    timelines: usize,
}

/// Connections in memory that may hold a timeline (2.6 KiB each) at once: 26 MiB. A capture with
/// more concurrent bulk transfers gets the load verdicts for the first ones only.
pub const MAX_TIMELINES: usize = 10_000;

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("active", &self.conns.len())
            .field("next_id", &self.next_id)
            .finish()
    }
}

impl Analyzer {
    pub fn new(opts: Options) -> Self {
        Analyzer {
            opts,
            conns: HashMap::default(),
            next_id: 0,
            totals: Totals::default(),
            first_ns: None,
            last_ns: 0,
            prev_ns: 0,
            listed: Vec::new(),
            icmp: Vec::new(),
            unlisted: HashMap::new(),
            host_pairs: HashMap::new(),
            fragments: Fragments::default(),
            timelines: 0,
        }
    }

    /// Connections currently held in memory.
    pub fn active(&self) -> usize {
        self.conns.len()
    }

    /// Analyse one captured packet; returns the TCP analysis of it when it is a TCP segment.
    pub fn process(&mut self, pkt: &Packet<'_>) -> Option<PacketRecord> {
        let t = &mut self.totals;
        t.packets += 1;
        t.wire_bytes += u64::from(pkt.orig_len);
        self.first_ns.get_or_insert(pkt.ts_ns);
        if t.packets > 1 && self.prev_ns.saturating_sub(pkt.ts_ns) > crate::clock::TOLERANCE_NS {
            t.clock_backward_steps += 1;
            let step = self.prev_ns.saturating_sub(pkt.ts_ns) as f64 / 1e9;
            t.largest_backward_step_s = t.largest_backward_step_s.max(step);
        }
        self.prev_ns = pkt.ts_ns;
        self.last_ns = self.last_ns.max(pkt.ts_ns);
        if t.packets & (SWEEP_EVERY - 1) == 0 {
            self.sweep(pkt.ts_ns);
        }
        if !pkt.link.supported() {
            self.totals.unsupported_link_packets += 1;
            return None;
        }
        let Some(d) = decode::decode(pkt.link, pkt.data, pkt.orig_len) else {
            self.totals.non_ip_packets += 1;
            return None;
        };
        self.totals.ip_packets += 1;
        if d.ip.fragment {
            self.totals.ip_fragments += 1;
        }
        match d.l4 {
            L4::Tcp(tcp) => self.on_tcp(pkt, &d.ip, d.ip.total_len, &tcp),
            L4::TcpFragment(f) => {
                let tcp = self.fragments.add(d.ip.src, d.ip.dst, &f)?;
                // A reassembled datagram's length; a first fragment cut short: its own.
                let ip_len = match (f.captured, tcp.seg_len) {
                    (true, Some(len)) => 20 + u32::from(tcp.header_len) + len,
                    _ => d.ip.total_len,
                };
                self.on_tcp(pkt, &d.ip, ip_len, &tcp)
            }
            L4::Udp { .. } => {
                self.totals.udp_packets += 1;
                None
            }
            L4::Icmp(icmp) => {
                self.totals.icmp_packets += 1;
                self.on_icmp(pkt.ts_ns, d.ip.src, &icmp);
                None
            }
            L4::Other { .. } => {
                self.totals.other_ip_packets += 1;
                None
            }
        }
    }

    /// A TCP segment (or the one a fragment completes): its connection and analysis.
    fn on_tcp(
        &mut self,
        pkt: &Packet<'_>,
        ip: &decode::IpInfo,
        ip_len: u32,
        tcp: &decode::TcpInfo,
    ) -> Option<PacketRecord> {
        self.totals.tcp_packets += 1;
        let src = Endpoint {
            addr: ip.src,
            port: tcp.src_port,
        };
        let dst = Endpoint {
            addr: ip.dst,
            port: tcp.dst_port,
        };
        let timeline_allowed = self.timelines < MAX_TIMELINES;
        let (conn, preset) = self.lookup(src, dst, tcp, pkt.ts_ns, pkt.number);
        let had_timeline = conn.timeline.is_some();
        // A segment shorter than its own header is not analysed (Wireshark's "short
        // segment"), but it still belongs to the stream.
        let seg_len = tcp.seg_len?;
        let dir = conn.dir_of(&src);
        let out = conn.on_segment(
            dir,
            &SegmentIn {
                ts: pkt.ts_ns,
                tcp,
                seg_len,
                ttl: ip.ttl,
                ip_len,
                preset,
                frame: pkt.number,
                ip_id: ip.id,
                timeline_allowed,
            },
        );
        let new_timeline = !had_timeline && conn.timeline.is_some();
        let stream = conn.id;
        self.timelines += usize::from(new_timeline);
        Some(PacketRecord {
            number: pkt.number,
            ts_ns: pkt.ts_ns,
            stream,
            src,
            dst,
            rel_seq: out.rel_seq,
            rel_ack: out.rel_ack,
            seq: tcp.seq,
            ack: tcp.ack,
            ip_id: ip.id,
            seg_len,
            tcp_flags: tcp.flags,
            flags: out.analysis.flags,
            dupack_num: out.analysis.dupack_num,
            window: out.window,
        })
    }

    /// Find or create the packet's connection, handling Wireshark's port-reuse rules.
    fn lookup(
        &mut self,
        src: Endpoint,
        dst: Endpoint,
        tcp: &decode::TcpInfo,
        ts: i64,
        frame: u64,
    ) -> (&mut Connection, Flags) {
        let key = ConnKey::new(src, dst);
        let mut preset = Flags::default();
        let syn_only = tcp.flags & (TH_SYN | TH_ACK) == TH_SYN;
        let syn_ack = tcp.flags & (TH_SYN | TH_ACK) == (TH_SYN | TH_ACK);
        let mut replace = false;
        if let Some(conn) = self.conns.get_mut(&key) {
            let d = conn.dir_of(&src);
            if syn_only {
                if conn.state.syn_reuses_ports(d, tcp.seq) {
                    replace = true;
                    preset.set(Flags::REUSED_PORTS);
                }
            } else if syn_ack && conn.state.synack_reuses_ports(d, tcp.seq) {
                preset.set(Flags::REUSED_PORTS);
            }
        } else {
            replace = true;
        }
        if replace {
            // Never hold more than the limit, however many connections arrive between sweeps.
            if self.conns.len() >= self.opts.max_active {
                self.sweep(ts);
            }
            let id = self.next_id;
            self.next_id += 1;
            let fresh = Box::new(Connection::new(id, src, dst, ts, frame));
            if let Some(old) = self.conns.insert(key, fresh) {
                self.retire(*old);
            }
        }
        let conn = self
            .conns
            .get_mut(&key)
            .expect("connection was just looked up or inserted");
        (conn, preset)
    }

    fn on_icmp(&mut self, ts: i64, from: IpAddr, icmp: &decode::IcmpInfo) {
        let Some(q) = icmp.quoted else { return };
        let mut stream = None;
        if q.protocol == 6 {
            let src = Endpoint {
                addr: q.src,
                port: q.src_port,
            };
            let dst = Endpoint {
                addr: q.dst,
                port: q.dst_port,
            };
            let key = ConnKey::new(src, dst);
            // Wireshark dissects the quoted TCP header too, which opens a stream if none exists.
            if !self.conns.contains_key(&key) {
                let id = self.next_id;
                self.next_id += 1;
                self.conns
                    .insert(key, Box::new(Connection::new(id, src, dst, ts, 0)));
            }
            if let Some(conn) = self.conns.get_mut(&key) {
                stream = Some(conn.id);
                if icmp.kind == IcmpKind::TooBig {
                    let d = conn.dir_of(&src);
                    conn.on_too_big(d, ts, icmp.mtu);
                }
            }
        }
        if icmp.kind == IcmpKind::TooBig {
            self.totals.icmp_too_big += 1;
        }
        if self.icmp.len() < 64 {
            self.icmp.push(IcmpEvent {
                time_epoch_s: ts as f64 / 1e9,
                from: from.to_string(),
                kind: match icmp.kind {
                    IcmpKind::TooBig => "too-big",
                    IcmpKind::Unreachable => "unreachable",
                    IcmpKind::TimeExceeded => "time-exceeded",
                    IcmpKind::Other => "other",
                }
                .into(),
                mtu: icmp.mtu,
                quoted: format!(
                    "{} → {}",
                    Endpoint {
                        addr: q.src,
                        port: q.src_port
                    },
                    Endpoint {
                        addr: q.dst,
                        port: q.dst_port
                    }
                ),
                stream,
            });
        }
    }

    /// Retire closed connections that have been quiet a while, and the least recently active
    /// ones when there are too many.
    fn sweep(&mut self, now: i64) {
        let closed: Vec<ConnKey> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                let ended = c.dirs.iter().any(|d| d.rst_count > 0)
                    || c.dirs.iter().all(|d| d.fin_count > 0);
                ended && now.saturating_sub(c.last_ns) > CLOSED_LINGER_NS
            })
            .map(|(k, _)| *k)
            .collect();
        for k in closed {
            if let Some(c) = self.conns.remove(&k) {
                self.totals.retired_early += 1;
                self.retire(*c);
            }
        }
        if self.conns.len() > self.opts.max_active {
            let mut ages: Vec<(u64, ConnKey)> =
                self.conns.iter().map(|(k, c)| (c.last_frame, *k)).collect();
            ages.sort_unstable_by_key(|a| a.0);
            let excess = self.conns.len() - self.opts.max_active / 2;
            for (_, k) in ages.into_iter().take(excess) {
                if let Some(c) = self.conns.remove(&k) {
                    self.totals.retired_early += 1;
                    self.retire(*c);
                }
            }
        }
    }

    /// A connection leaves memory: diagnose it, keep it if it is worth listing, count it.
    fn retire(&mut self, mut c: Connection) {
        self.timelines -= usize::from(c.timeline.is_some());
        if c.icmp_only {
            return;
        }
        c.finish();
        self.totals.connections += 1;
        let start = self.first_ns.unwrap_or(c.first_ns);
        let summary = summarize(&c, start);
        self.totals.flags.merge(&summary.client_to_server.flags);
        self.totals.flags.merge(&summary.server_to_client.flags);
        let findings = diagnose::connection(&summary);
        self.note_host_pair(&c, &summary, &findings);
        let has_findings = findings
            .iter()
            .any(|f| f.status > pathdoc_core::Status::Info);
        if has_findings {
            self.totals.connections_with_findings += 1;
        } else {
            self.totals.healthy_connections += 1;
        }
        let filtered = !self.opts.filter.is_empty();
        let wanted = if filtered {
            let matched = self.opts.filter.matches(&c);
            self.totals.matched_filter += u64::from(matched);
            matched
        } else {
            // A healthy connection with a note (its window scale unknown, offload at the
            // capture point) is listed too: the note says what the capture could not prove.
            has_findings || !findings.is_empty() || self.opts.list_all
        };
        if !wanted {
            return;
        }
        if self.listed.len() < self.opts.max_listed {
            self.listed.push(Listed { summary, findings });
        } else if has_findings {
            self.totals.unlisted_with_findings += 1;
            for f in findings
                .iter()
                .filter(|f| f.status > pathdoc_core::Status::Info)
            {
                *self.unlisted.entry(f.id.clone()).or_insert(0) += 1;
            }
        }
    }

    /// Add the connection's loss per direction to its host pair's — except a direction the
    /// connection found policed: a policer's drops are explained, and the pair's "loss in one
    /// direction: duplex mismatch or a bad link" would contradict that finding.
    fn note_host_pair(&mut self, c: &Connection, s: &ConnSummary, findings: &[Finding]) {
        let (client, _) = c.client_dir();
        let key = (
            c.ends[client].addr.to_string(),
            c.ends[1 - client].addr.to_string(),
        );
        if !self.host_pairs.contains_key(&key) && self.host_pairs.len() >= MAX_HOST_PAIRS {
            return;
        }
        let e = self.host_pairs.entry(key).or_default();
        e.connections += 1;
        let directions = [
            (&s.client_to_server, Direction::ClientToServer),
            (&s.server_to_client, Direction::ServerToClient),
        ];
        for (i, (d, dir)) in directions.into_iter().enumerate() {
            let policed = findings
                .iter()
                .any(|f| f.id == "policer-limited" && f.direction == Some(dir));
            if policed {
                continue;
            }
            let loss = LossCount::of(d);
            e.data[i] += loss.data_segments;
            e.lost[i] += loss.lost();
            e.duplicate_acks[i] += d.flags.duplicate_ack;
            e.best_goodput[i] = e.best_goodput[i].max(d.goodput_bps.unwrap_or(0.0));
        }
    }

    /// End of the capture: retire everything and return the result.
    pub fn finish(mut self) -> CaptureAnalysis {
        let mut rest: Vec<Box<Connection>> = self.conns.drain().map(|(_, c)| c).collect();
        rest.sort_unstable_by_key(|c| c.id);
        for c in rest {
            self.retire(*c);
        }
        self.listed.sort_by_key(|l| l.summary.id);
        self.totals.first_epoch_s = self.first_ns.map(|t| t as f64 / 1e9);
        self.totals.last_epoch_s = self.first_ns.map(|_| self.last_ns as f64 / 1e9);
        let mut unlisted: Vec<(String, u64)> = self.unlisted.into_iter().collect();
        unlisted.sort();
        let mut pairs: Vec<_> = self.host_pairs.into_iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let host_findings = crate::clock::capture_finding(
            self.totals.clock_backward_steps,
            self.totals.largest_backward_step_s,
        )
        .into_iter()
        .chain(
            pairs
                .iter()
                .filter_map(|((c, s), l)| diagnose::host_pair_loss(c, s, l)),
        )
        .collect();
        CaptureAnalysis {
            totals: self.totals,
            listed: self.listed,
            icmp: self.icmp,
            unlisted_finding_ids: unlisted,
            host_findings,
        }
    }
}
