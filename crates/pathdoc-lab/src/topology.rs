//! Topology descriptions: a chain `client — hop1 — … — hopN — server`, written in TOML or taken
//! from the built-in scenarios, validated before anything touches the kernel.
//!
//! ```toml
//! description = "home NAT that forgets idle connections after 60 s"
//!
//! [client]
//! sysctl = { "net.ipv4.tcp_rmem" = "4096 131072 262144" }
//!
//! [[hop]]                 # hop1; repeat [[hop]] for hop2, hop3, ...
//! kind = "nat"            # "router" (default) or "nat" (nftables masquerade)
//! strict = true           # drop packets without conntrack state; no state rebuilt mid-stream
//! conntrack = { tcp_established = 60, udp = 30 }   # seconds
//! mss_clamp = 1400        # rewrite the MSS option of forwarded SYNs
//!
//! [server]
//! filters = ["drop-icmp-frag-needed"]
//!
//! [[link]]                # link 0: client—hop1; link i joins host i and host i+1
//! mtu = 1500              # both directions unless up/down override it
//! rate = "100 Mbit/s"
//! delay_ms = 10.0         # one way, each direction
//! [link.down]             # towards the client ("up" is towards the server)
//! loss_percent = 0.3
//! burst_loss = { every_packets = 200, burst_packets = 3 }
//! queue_ms = 500.0        # the rate limit's queue (default 50 ms at the rate)
//! police = { rate = "20 Mbit/s", burst = "64 KiB" }   # drop (not queue) beyond the rate
//! ```
//!
//! A link between two hops may carry background traffic from two extra hosts, one hung off each
//! of its hops (`cross<i>a` on the client side, `cross<i>b` on the server side):
//! `cross_traffic = { flows = 2, cc = "cubic", direction = "down" }` (top level of a `[[link]]`).
//!
//! `[[link]]` tables apply in order to link 0, 1, …; links not listed are clean.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::LabError;

/// Most hops a chain may have (keeps namespace and address plans simple).
pub const MAX_HOPS: usize = 8;

/// A whole path: client, hops, server, and the links between consecutive hosts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Scenario name, when the topology came from [`Topology::scenario`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// One line on what this path reproduces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Address families the lab carries: `v4` (the default, IPv6 switched off as before), `dual`
    /// (every link also gets an IPv6 /64) or `v6` (IPv6 only).
    #[serde(default, skip_serializing_if = "Family::is_v4")]
    pub family: Family,
    #[serde(default)]
    pub client: HostSpec,
    #[serde(default, rename = "hop")]
    pub hops: Vec<HopSpec>,
    #[serde(default)]
    pub server: HostSpec,
    /// Link `i` joins host `i` and host `i+1` (client is host 0). Missing trailing links are clean.
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
}

/// Per-host settings shared by client, hops and server.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Per-namespace sysctls (`net.*`), e.g. `"net.ipv4.tcp_congestion_control" = "bbr"`.
    #[serde(default)]
    pub sysctl: BTreeMap<String, SysctlValue>,
    /// Host filters (nftables).
    #[serde(default)]
    pub filters: Vec<Filter>,
    /// Clamp the MSS option of SYNs this host forwards or sends to this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss_clamp: Option<u16>,
    /// Run OpenSSH's sshd on this host (port 22), with host and user keys generated for the lab;
    /// the client gets an ssh_config (`ssh -F …`) that logs in non-interactively.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sshd: bool,
    /// Cap the CPU of processes started in this host (sshd and its children, and whatever runs
    /// through the lab's `exec`) with a cgroup: percent of one core (`cpu.max`), 1..=800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_max_percent: Option<u32>,
    /// Client or server only: the host's NIC cuts its TCP segmentation-offload super-frames into IP
    /// packets of this many bytes whatever MSS or path MTU its kernel uses, DF set (QEMU's emulated
    /// rtl8139 does this at 1500, seed 003). Emulated by the link's element right after the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_segments_at: Option<u16>,
}

/// The address families of a lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4 only; IPv6 is switched off in every namespace.
    #[default]
    V4,
    /// IPv4 and IPv6 on every link.
    Dual,
    /// IPv6 only (no IPv4 addresses).
    V6,
}

impl Family {
    pub fn has_v4(self) -> bool {
        self != Family::V6
    }
    pub fn has_v6(self) -> bool {
        self != Family::V4
    }
    pub fn is_v4(&self) -> bool {
        *self == Family::V4
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::Dual => "dual",
            Family::V6 => "v6",
        }
    }
}

/// A hop: a router or a NAT, plus the host settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HopSpec {
    #[serde(default)]
    pub kind: HopKind,
    /// NAT only: drop every packet without valid conntrack state (`nf_conntrack_tcp_loose=0` and
    /// `ct state invalid drop`): after a timeout the connection stays dead even if the client speaks.
    #[serde(default)]
    pub strict: bool,
    /// NAT only: conntrack timeouts in seconds (kernel defaults where unset).
    #[serde(default)]
    pub conntrack: ConntrackTimeouts,
    /// NAT only, IPv6 only: timeouts for IPv6 connections through the hop's stateful firewall
    /// where they differ from `conntrack` (nftables `ct timeout` objects; `icmp` not supported).
    /// The RFC 6092 home router whose IPv6 firewall forgets sooner than its NAT44.
    #[serde(default, skip_serializing_if = "ConntrackTimeouts::is_empty")]
    pub conntrack6: ConntrackTimeouts,
    /// NAT only: also masquerade IPv6 (NAT66) out of `wan0`; without it the hop is an RFC 6092
    /// stateful IPv6 firewall (established/related in, new from outside dropped), routes intact.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nat66: bool,
    #[serde(default)]
    pub sysctl: BTreeMap<String, SysctlValue>,
    #[serde(default)]
    pub filters: Vec<Filter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss_clamp: Option<u16>,
}

impl HopSpec {
    /// A plain NAT hop with kernel-default timeouts.
    pub fn nat() -> Self {
        HopSpec {
            kind: HopKind::Nat,
            ..Default::default()
        }
    }
    /// A plain router hop.
    pub fn router() -> Self {
        HopSpec::default()
    }
    /// The host-level part of this hop's settings.
    pub fn host(&self) -> HostSpec {
        HostSpec {
            sysctl: self.sysctl.clone(),
            filters: self.filters.clone(),
            mss_clamp: self.mss_clamp,
            ..Default::default()
        }
    }
}

/// What a hop does with forwarded traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HopKind {
    /// Plain IPv4 forwarding; hosts on both sides see each other's addresses.
    #[default]
    Router,
    /// Source NAT (masquerade) to the hop's upstream address, conntrack-based, with an inbound
    /// firewall that drops unsolicited packets silently, like a home router or a CGN.
    Nat,
}

/// Conntrack timeouts in seconds for a NAT hop (RFC 5382 REQ-5 wants ≥ 7440 s established).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackTimeouts {
    /// `nf_conntrack_tcp_timeout_established`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_established: Option<u32>,
    /// Opening and closing states: syn_sent, syn_recv, fin_wait, close_wait, last_ack, time_wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_transitory: Option<u32>,
    /// `nf_conntrack_tcp_timeout_close` (after RST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_close: Option<u32>,
    /// `nf_conntrack_udp_timeout` (one-way or single-exchange flows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<u32>,
    /// `nf_conntrack_udp_timeout_stream` (flows seen in both directions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_stream: Option<u32>,
    /// `nf_conntrack_icmp_timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp: Option<u32>,
}

impl ConntrackTimeouts {
    /// The per-namespace sysctls these settings write, `(key, seconds)`.
    pub fn sysctls(&self) -> Vec<(String, u32)> {
        let base = "net.netfilter.nf_conntrack_";
        let mut out = Vec::new();
        let mut put = |suffix: &str, v: Option<u32>| {
            if let Some(v) = v {
                out.push((format!("{base}{suffix}"), v));
            }
        };
        put("tcp_timeout_established", self.tcp_established);
        for s in [
            "syn_sent",
            "syn_recv",
            "fin_wait",
            "close_wait",
            "last_ack",
            "time_wait",
        ] {
            put(&format!("tcp_timeout_{s}"), self.tcp_transitory);
        }
        put("tcp_timeout_close", self.tcp_close);
        put("udp_timeout", self.udp);
        put("udp_timeout_stream", self.udp_stream);
        put("icmp_timeout", self.icmp);
        out
    }

    /// The nftables `ct timeout` policies these settings make for IPv6, `(protocol, policy)`:
    /// `("tcp", "established: 3, close: 10")`.
    pub fn nft_policies(&self) -> Vec<(&'static str, String)> {
        let mut tcp = Vec::new();
        if let Some(v) = self.tcp_established {
            tcp.push(format!("established: {v}"));
        }
        if let Some(v) = self.tcp_transitory {
            for s in [
                "syn_sent",
                "syn_recv",
                "fin_wait",
                "close_wait",
                "last_ack",
                "time_wait",
            ] {
                tcp.push(format!("{s}: {v}"));
            }
        }
        if let Some(v) = self.tcp_close {
            tcp.push(format!("close: {v}"));
        }
        let mut udp = Vec::new();
        if let Some(v) = self.udp {
            udp.push(format!("unreplied: {v}"));
        }
        if let Some(v) = self.udp_stream {
            udp.push(format!("replied: {v}"));
        }
        let mut out = Vec::new();
        if !tcp.is_empty() {
            out.push(("tcp", tcp.join(", ")));
        }
        if !udp.is_empty() {
            out.push(("udp", udp.join(", ")));
        }
        out
    }

    /// The settings as text: `tcp established 60 s, udp 30 s`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (what, v) in [
            ("tcp established", self.tcp_established),
            ("tcp transitory", self.tcp_transitory),
            ("tcp close", self.tcp_close),
            ("udp", self.udp),
            ("udp stream", self.udp_stream),
            ("icmp", self.icmp),
        ] {
            if let Some(v) = v {
                parts.push(format!("{what} {v} s"));
            }
        }
        parts.join(", ")
    }

    pub fn is_empty(&self) -> bool {
        self.sysctls().is_empty()
    }
}

/// A sysctl value: TOML integer or string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SysctlValue {
    Int(i64),
    Text(String),
}

impl fmt::Display for SysctlValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SysctlValue::Int(i) => write!(f, "{i}"),
            SysctlValue::Text(s) => write!(f, "{s}"),
        }
    }
}

impl From<&str> for SysctlValue {
    fn from(s: &str) -> Self {
        SysctlValue::Text(s.to_string())
    }
}

/// A host filter, implemented with nftables in the host's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Filter {
    /// Drop ICMP "fragmentation needed" (type 3 code 4) in input, forward and output: the
    /// over-eager firewall that turns a smaller MTU into a PMTU black hole (seed 003).
    DropIcmpFragNeeded,
    /// Drop ICMPv6 "Packet Too Big" (type 2) in input, forward and output: IPv6 routers never
    /// fragment, so this turns any smaller link (a 6in4 tunnel at 1480) into a black hole.
    #[serde(rename = "drop-icmpv6-packet-too-big")]
    DropIcmpv6PacketTooBig,
}

impl Filter {
    pub fn as_str(&self) -> &'static str {
        match self {
            Filter::DropIcmpFragNeeded => "drop-icmp-frag-needed",
            Filter::DropIcmpv6PacketTooBig => "drop-icmpv6-packet-too-big",
        }
    }
}

/// A link between two consecutive hosts. Top-level fields apply to both directions; `up`
/// (towards the server) and `down` (towards the client) override them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// IPv6-only MTU (1280 .. `mtu`): a tunnel that carries IPv6 only (6in4 at 1480) on a link
    /// whose IPv4 MTU is `mtu`. Set as `net.ipv6.conf.IFACE.mtu` on the sending interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu6: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_percent: Option<f64>,
    /// Queue of the rate limit (tbf), in milliseconds at the rate: 50 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    /// A token-bucket policer that drops what exceeds its rate (no queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub police: Option<Police>,
    /// Background bulk flows across this link between two extra hosts (not the client/server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_traffic: Option<CrossTraffic>,
    #[serde(default)]
    pub up: DirectionSpec,
    #[serde(default)]
    pub down: DirectionSpec,
}

/// Per-direction overrides of a link.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu6: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_loss: Option<BurstLoss>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub police: Option<Police>,
}

/// A token-bucket policer (nftables `limit rate over … burst … drop` at the receiving interface):
/// IP bytes beyond `rate` are dropped at once once the bucket ([`Police::bucket_bytes`]: a
/// second at the rate plus `burst`) is spent — nothing is queued, unlike the tbf of `rate`. What
/// ISPs and clouds use to enforce a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Police {
    pub rate: Rate,
    pub burst: Size,
}

impl Police {
    /// The bucket the kernel builds: nftables' byte-mode `limit` holds one second at the rate
    /// plus the burst (`nft_limit_init`: tokens_max = unit × (rate + burst) / rate, unit 1 s).
    pub fn bucket_bytes(&self) -> u64 {
        self.rate.bits_per_second / 8 + self.burst.bytes
    }
}

/// Background bulk TCP flows (iperf3, `flows` parallel streams) between two extra hosts hung off
/// the two hops at the ends of a link, so they share its queues with the diagnosed transfer while
/// pathdoc cannot see them except through their effect: the other people on a busy line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrossTraffic {
    pub flows: u32,
    /// Congestion control of the cross flows' sender.
    #[serde(default = "CrossTraffic::default_cc")]
    pub cc: String,
    /// Which way the cross flows' data goes (`down`: towards the client side).
    #[serde(default = "CrossTraffic::default_direction")]
    pub direction: Direction,
}

impl CrossTraffic {
    /// Most parallel cross flows a link takes.
    pub const MAX_FLOWS: u32 = 16;
    /// Congestion controls the lab's kernel offers the cross flows.
    pub const CCS: &'static [&'static str] = &["cubic", "bbr", "reno"];
    fn default_cc() -> String {
        "cubic".into()
    }
    fn default_direction() -> Direction {
        Direction::Down
    }
}

/// Default queue of a rate limit, milliseconds at the rate.
pub const DEFAULT_QUEUE_MS: f64 = 50.0;

/// Deterministic loss bursts: of every `every_packets` IPv4 packets, `burst_packets` in a row are
/// dropped (nftables `numgen inc mod every < burst`). Loss rate = burst / every.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstLoss {
    pub every_packets: u32,
    pub burst_packets: u32,
}

/// Which way along a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Towards the server.
    Up,
    /// Towards the client.
    Down,
}

impl Direction {
    pub fn as_str(&self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// The effective settings of one direction of one link, defaults filled in.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct DirectionSettings {
    pub mtu: u32,
    /// IPv6 MTU of this direction (the `mtu` unless `mtu6` lowers it).
    pub mtu6: u32,
    pub rate: Option<Rate>,
    pub delay_ms: f64,
    pub jitter_ms: f64,
    pub loss_percent: f64,
    pub burst_loss: Option<BurstLoss>,
    /// Queue of the tbf, milliseconds at the rate.
    pub queue_ms: f64,
    pub police: Option<Police>,
}

impl DirectionSettings {
    /// Whether this direction needs a delay-line element.
    pub fn needs_delay_line(&self) -> bool {
        self.delay_ms > 0.0 || self.jitter_ms > 0.0
    }
}

/// Default interface MTU.
pub const DEFAULT_MTU: u32 = 1500;

impl LinkSpec {
    /// Effective settings for one direction.
    pub fn direction(&self, dir: Direction) -> DirectionSettings {
        let d = match dir {
            Direction::Up => &self.up,
            Direction::Down => &self.down,
        };
        let mtu = d.mtu.or(self.mtu).unwrap_or(DEFAULT_MTU);
        DirectionSettings {
            mtu,
            mtu6: d.mtu6.or(self.mtu6).unwrap_or(mtu),
            rate: d.rate.or(self.rate),
            delay_ms: d.delay_ms.or(self.delay_ms).unwrap_or(0.0),
            jitter_ms: d.jitter_ms.or(self.jitter_ms).unwrap_or(0.0),
            loss_percent: d.loss_percent.or(self.loss_percent).unwrap_or(0.0),
            burst_loss: d.burst_loss,
            queue_ms: d.queue_ms.or(self.queue_ms).unwrap_or(DEFAULT_QUEUE_MS),
            police: d.police.or(self.police),
        }
    }

    /// Whether either direction has delay or jitter (needs a delay-line element).
    pub fn needs_delay_line(&self) -> bool {
        self.direction(Direction::Up).needs_delay_line()
            || self.direction(Direction::Down).needs_delay_line()
    }
}

/// A rate in bit/s. In TOML: an integer (bit/s) or a string such as `"100 Mbit/s"`, `"1Gbit/s"`,
/// `"512 kbit"` (SI prefixes: k = 1e3, M = 1e6, G = 1e9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub bits_per_second: u64,
}

impl Rate {
    pub fn mbit(m: u64) -> Rate {
        Rate {
            bits_per_second: m * 1_000_000,
        }
    }

    /// Parse `"100 Mbit/s"`, `"1gbit"`, `"2500000"`, ...
    pub fn parse(text: &str) -> Result<Rate, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("rate `{text}`: expected a number then a unit like Mbit/s"))?;
        let unit = unit.trim().to_ascii_lowercase();
        let unit = unit.strip_suffix("/s").unwrap_or(&unit);
        let mult = match unit {
            "" | "bit" => 1e0,
            "k" | "kbit" => 1e3,
            "m" | "mbit" => 1e6,
            "g" | "gbit" => 1e9,
            other => {
                return Err(format!(
                    "rate `{text}`: unknown unit `{other}` (use bit/s, kbit/s, Mbit/s, Gbit/s)"
                ))
            }
        };
        let bps = value * mult;
        if !bps.is_finite() || bps < 1.0 {
            return Err(format!("rate `{text}` is not a positive rate"));
        }
        Ok(Rate {
            bits_per_second: bps.round() as u64,
        })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            pathdoc_core::units::format_rate(self.bits_per_second as f64)
        )
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.bits_per_second)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(b) if b > 0 => Ok(Rate { bits_per_second: b }),
            Raw::Int(_) => Err(serde::de::Error::custom("rate must be positive")),
            Raw::Text(t) => Rate::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// A size in bytes. In TOML: an integer (bytes) or a string such as `"64 KiB"`, `"1 MiB"`,
/// `"1500 B"` (IEC prefixes: Ki = 1024, Mi = 1024²).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub bytes: u64,
}

impl Size {
    /// Parse `"64 KiB"`, `"2MiB"`, `"1500"`, ...
    pub fn parse(text: &str) -> Result<Size, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("size `{text}`: expected a number then a unit like KiB"))?;
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            other => {
                return Err(format!(
                    "size `{text}`: unknown unit `{other}` (use B, KiB, MiB)"
                ))
            }
        };
        let bytes = value * mult;
        if !bytes.is_finite() || bytes < 1.0 {
            return Err(format!("size `{text}` is not a positive size"));
        }
        Ok(Size {
            bytes: bytes.round() as u64,
        })
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", pathdoc_core::units::format_bytes(self.bytes))
    }
}

impl Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.bytes)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(b) if b > 0 => Ok(Size { bytes: b }),
            Raw::Int(_) => Err(serde::de::Error::custom("size must be positive")),
            Raw::Text(t) => Size::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

impl Topology {
    /// Parse and validate a TOML topology.
    pub fn from_toml(text: &str) -> Result<Self, LabError> {
        let topo: Topology = toml::from_str(text)
            .map_err(|e| LabError::Topology(e.to_string().trim().to_string()))?;
        topo.validate()?;
        Ok(topo)
    }

    /// Serialize back to TOML (round-trips through [`Topology::from_toml`]).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// A built-in scenario by name (see [`crate::scenarios`]).
    pub fn scenario(name: &str) -> Result<Self, LabError> {
        crate::scenarios::topology(name)
    }

    /// Host names in chain order: `client`, `hop1`..`hopN`, `server`.
    pub fn host_names(&self) -> Vec<String> {
        let mut names = vec!["client".to_string()];
        names.extend((1..=self.hops.len()).map(|i| format!("hop{i}")));
        names.push("server".to_string());
        names
    }

    /// Number of links (hops + 1).
    pub fn link_count(&self) -> usize {
        self.hops.len() + 1
    }

    /// The spec of link `i` (clean default when not listed).
    pub fn link(&self, i: usize) -> LinkSpec {
        self.links.get(i).cloned().unwrap_or_default()
    }

    /// Mutable access to link `i`, creating clean links up to it if needed.
    pub fn link_mut(&mut self, i: usize) -> &mut LinkSpec {
        while self.links.len() <= i {
            self.links.push(LinkSpec::default());
        }
        &mut self.links[i]
    }

    /// Host settings by host name (`client`, `hopN`, `server`).
    pub fn host_spec(&self, host: &str) -> Option<HostSpec> {
        match host {
            "client" => Some(self.client.clone()),
            "server" => Some(self.server.clone()),
            h => {
                let n: usize = h.strip_prefix("hop")?.parse().ok()?;
                self.hops.get(n.checked_sub(1)?).map(|hop| hop.host())
            }
        }
    }

    /// Whether any link needs a delay-line element.
    pub fn needs_delay_line(&self) -> bool {
        (0..self.link_count()).any(|i| self.link_needs_element(i))
    }

    /// The fixed-size NIC segmentation on link `i`, `(up, down)`: the client's NIC sends up link 0,
    /// the server's sends down the last link.
    pub fn nic_segments_on_link(&self, i: usize) -> (Option<u16>, Option<u16>) {
        let up = (i == 0).then_some(self.client.nic_segments_at).flatten();
        let down = (i + 1 == self.link_count())
            .then_some(self.server.nic_segments_at)
            .flatten();
        (up, down)
    }

    /// Whether link `i` needs an element namespace: for delay/jitter or for a host's NIC fault.
    pub fn link_needs_element(&self, i: usize) -> bool {
        let (up, down) = self.nic_segments_on_link(i);
        self.link(i).needs_delay_line() || up.is_some() || down.is_some()
    }

    /// Hosts that run sshd, in chain order.
    pub fn sshd_hosts(&self) -> Vec<String> {
        self.host_names()
            .into_iter()
            .filter(|h| self.host_spec(h).is_some_and(|s| s.sshd))
            .collect()
    }

    /// Whether any link has a rate limit (needs `tc`).
    pub fn needs_tc(&self) -> bool {
        (0..self.link_count()).any(|i| {
            let l = self.link(i);
            l.direction(Direction::Up).rate.is_some() || l.direction(Direction::Down).rate.is_some()
        })
    }

    /// Links that carry cross traffic, with its settings.
    pub fn cross_links(&self) -> Vec<(usize, CrossTraffic)> {
        (0..self.link_count())
            .filter_map(|i| self.link(i).cross_traffic.map(|x| (i, x)))
            .collect()
    }

    /// Check every value; the error names the offending field.
    pub fn validate(&self) -> Result<(), LabError> {
        let bad = |msg: String| Err(LabError::Topology(msg));
        if self.hops.len() > MAX_HOPS {
            return bad(format!(
                "{} hops; at most {MAX_HOPS} are supported",
                self.hops.len()
            ));
        }
        if self.links.len() > self.link_count() {
            return bad(format!(
                "{} [[link]] tables but a chain with {} hop(s) has only {} link(s)",
                self.links.len(),
                self.hops.len(),
                self.link_count()
            ));
        }
        let names = self.host_names();
        for (i, name) in names.iter().enumerate() {
            let spec = self.host_spec(name).unwrap_or_default();
            validate_host(name, &spec)?;
            if i > 0 && i <= self.hops.len() {
                let hop = &self.hops[i - 1];
                if hop.kind == HopKind::Router && hop.strict {
                    return bad(format!("{name}: `strict` only applies to kind = \"nat\""));
                }
                if hop.kind == HopKind::Router && !hop.conntrack.is_empty() {
                    return bad(format!(
                        "{name}: conntrack timeouts only apply to kind = \"nat\""
                    ));
                }
                for (key, secs) in hop.conntrack.sysctls() {
                    if secs == 0 || secs > 10 * 24 * 3600 {
                        return bad(format!(
                            "{name}: {key} = {secs} s is out of range (1 s .. 10 days)"
                        ));
                    }
                }
                self.validate_hop_v6(name, hop)?;
            }
            if spec.sshd && !self.family.has_v4() {
                return bad(format!(
                    "{name}: sshd needs IPv4 (family = \"v4\" or \"dual\")"
                ));
            }
            if spec.filters.contains(&Filter::DropIcmpv6PacketTooBig) && !self.family.has_v6() {
                return bad(format!(
                    "{name}: filter drop-icmpv6-packet-too-big needs family = \"dual\" or \"v6\""
                ));
            }
        }
        self.validate_nic_segments()?;
        for i in 0..self.link_count() {
            let label = format!("link {i} ({}—{})", names[i], names[i + 1]);
            let spec = self.link(i);
            for dir in [Direction::Up, Direction::Down] {
                let d = spec.direction(dir);
                let at = format!("{label} {}", dir.as_str());
                if !(576..=9000).contains(&d.mtu) {
                    return bad(format!("{at}: mtu {} out of range (576..9000)", d.mtu));
                }
                self.validate_mtu6(&at, &d)?;
                if let Some(r) = d.rate {
                    if r.bits_per_second < 8_000 || r.bits_per_second > 100_000_000_000 {
                        return bad(format!(
                            "{at}: rate {r} out of range (8 kbit/s .. 100 Gbit/s)"
                        ));
                    }
                }
                if !(0.0..=10_000.0).contains(&d.delay_ms) {
                    return bad(format!(
                        "{at}: delay_ms {} out of range (0 .. 10000)",
                        d.delay_ms
                    ));
                }
                if !(0.0..=10_000.0).contains(&d.jitter_ms)
                    || (d.jitter_ms > 0.0 && d.delay_ms == 0.0)
                {
                    return bad(format!(
                        "{at}: jitter_ms {} needs 0 <= jitter and a delay_ms",
                        d.jitter_ms
                    ));
                }
                if !(0.0..=100.0).contains(&d.loss_percent) {
                    return bad(format!(
                        "{at}: loss_percent {} out of range (0 .. 100)",
                        d.loss_percent
                    ));
                }
                if !(1.0..=10_000.0).contains(&d.queue_ms) {
                    return bad(format!(
                        "{at}: queue_ms {} out of range (1 .. 10000)",
                        d.queue_ms
                    ));
                }
                if d.queue_ms != DEFAULT_QUEUE_MS && d.rate.is_none() {
                    return bad(format!(
                        "{at}: queue_ms is the queue of a rate limit and needs a rate"
                    ));
                }
                if let Some(p) = d.police {
                    if p.rate.bits_per_second < 8_000 || p.rate.bits_per_second > 100_000_000_000 {
                        return bad(format!(
                            "{at}: police rate {} out of range (8 kbit/s .. 100 Gbit/s)",
                            p.rate
                        ));
                    }
                    if p.burst.bytes < u64::from(d.mtu) || p.burst.bytes > 1 << 30 {
                        return bad(format!(
                            "{at}: police burst {} out of range (one MTU, {} B .. 1 GiB)",
                            p.burst, d.mtu
                        ));
                    }
                }
                if let Some(b) = d.burst_loss {
                    if b.every_packets == 0
                        || b.burst_packets == 0
                        || b.burst_packets >= b.every_packets
                    {
                        return bad(format!(
                            "{at}: burst_loss needs 0 < burst_packets < every_packets"
                        ));
                    }
                }
            }
            if let Some(x) = &spec.cross_traffic {
                self.validate_cross(&label, i, x)?;
            }
        }
        Ok(())
    }

    /// Cross traffic needs a link between two hops (its extra hosts hang off them, so the
    /// diagnosed client and server stay untouched), IPv4, and a kernel congestion control.
    fn validate_cross(&self, label: &str, i: usize, x: &CrossTraffic) -> Result<(), LabError> {
        let bad = |msg: String| Err(LabError::Topology(msg));
        if i == 0 || i + 1 >= self.link_count() {
            return bad(format!(
                "{label}: cross_traffic needs a link between two hops (at least 2 [[hop]]s; not the client's or the server's own link)"
            ));
        }
        if !self.family.has_v4() {
            return bad(format!("{label}: cross_traffic needs IPv4"));
        }
        if x.flows == 0 || x.flows > CrossTraffic::MAX_FLOWS {
            return bad(format!(
                "{label}: cross_traffic flows {} out of range (1 .. {})",
                x.flows,
                CrossTraffic::MAX_FLOWS
            ));
        }
        if !CrossTraffic::CCS.contains(&x.cc.as_str()) {
            return bad(format!(
                "{label}: cross_traffic cc {:?} is not one of {}",
                x.cc,
                CrossTraffic::CCS.join(", ")
            ));
        }
        Ok(())
    }

    /// The IPv6 keys of a hop: NAT only, and only in a lab that carries IPv6.
    fn validate_hop_v6(&self, name: &str, hop: &HopSpec) -> Result<(), LabError> {
        let bad = |msg: String| Err(LabError::Topology(msg));
        let v6_keys = hop.nat66 || !hop.conntrack6.is_empty();
        if v6_keys && hop.kind == HopKind::Router {
            return bad(format!(
                "{name}: `nat66` and `conntrack6` only apply to kind = \"nat\""
            ));
        }
        if v6_keys && !self.family.has_v6() {
            return bad(format!(
                "{name}: `nat66` and `conntrack6` need family = \"dual\" or \"v6\""
            ));
        }
        if hop.conntrack6.icmp.is_some() {
            return bad(format!(
                "{name}: conntrack6.icmp is not supported (ICMPv6 uses `conntrack.icmp`)"
            ));
        }
        for (key, secs) in hop.conntrack6.sysctls() {
            if secs == 0 || secs > 10 * 24 * 3600 {
                let key = key.replace("net.netfilter.nf_conntrack_", "conntrack6.");
                return bad(format!(
                    "{name}: {key} = {secs} s is out of range (1 s .. 10 days)"
                ));
            }
        }
        Ok(())
    }

    /// IPv6 needs 1280 bytes on every link (RFC 8200 §5); `mtu6` only lowers the MTU.
    fn validate_mtu6(&self, at: &str, d: &DirectionSettings) -> Result<(), LabError> {
        if d.mtu6 != d.mtu && !self.family.has_v6() {
            return Err(LabError::Topology(format!(
                "{at}: mtu6 needs family = \"dual\" or \"v6\""
            )));
        }
        if self.family.has_v6() && !(1280..=d.mtu).contains(&d.mtu6) {
            return Err(LabError::Topology(format!(
                "{at}: IPv6 MTU {} out of range (1280 .. the link's MTU {}; RFC 8200 §5 needs 1280)",
                d.mtu6, d.mtu
            )));
        }
        Ok(())
    }

    /// A fixed-size NIC must fit the host's own link (its frames could not leave otherwise).
    fn validate_nic_segments(&self) -> Result<(), LabError> {
        let last = self.link_count() - 1;
        for (name, bytes, link, dir) in [
            ("client", self.client.nic_segments_at, 0, Direction::Up),
            ("server", self.server.nic_segments_at, last, Direction::Down),
        ] {
            let Some(bytes) = bytes else { continue };
            let mtu = self.link(link).direction(dir).mtu;
            if u32::from(bytes) < 576 || u32::from(bytes) > mtu {
                return Err(LabError::Topology(format!(
                    "{name}: nic_segments_at {bytes} out of range (576 .. its link's MTU {mtu})"
                )));
            }
        }
        Ok(())
    }

    /// Human lines describing every fault this topology injects (empty for a clean path).
    pub fn describe_faults(&self) -> Vec<String> {
        let names = self.host_names();
        let mut out = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if i > 0 && i <= self.hops.len() {
                let hop = &self.hops[i - 1];
                if hop.kind == HopKind::Nat {
                    let mut s = format!(
                        "{name}: NAT (masquerade){}",
                        if hop.strict {
                            ", strict (no state rebuilt mid-stream)"
                        } else {
                            ""
                        }
                    );
                    if !hop.conntrack.is_empty() {
                        s.push_str(&format!(
                            "; conntrack timeouts: {}",
                            hop.conntrack.describe()
                        ));
                    }
                    if self.family.has_v6() {
                        s.push_str(if hop.nat66 {
                            "; IPv6: NAT66 (masquerade)"
                        } else {
                            "; IPv6: stateful firewall (RFC 6092), no NAT"
                        });
                        if !hop.conntrack6.is_empty() {
                            s.push_str(&format!(", IPv6 timeouts: {}", hop.conntrack6.describe()));
                        }
                    }
                    out.push(s);
                }
            }
            let spec = self.host_spec(name).unwrap_or_default();
            for f in &spec.filters {
                out.push(format!("{name}: filter {}", f.as_str()));
            }
            if let Some(m) = spec.mss_clamp {
                out.push(format!("{name}: clamps TCP MSS to {m} bytes"));
            }
            if spec.sshd {
                out.push(format!("{name}: runs OpenSSH sshd on port 22"));
            }
            if let Some(p) = spec.cpu_max_percent {
                out.push(format!("{name}: CPU capped at {p} % of one core (cgroup)"));
            }
            if let Some(b) = spec.nic_segments_at {
                out.push(format!(
                    "{name}: NIC segmentation offload sends {b}-byte packets (DF) whatever the MSS or path MTU"
                ));
            }
            for (k, v) in &spec.sysctl {
                out.push(format!("{name}: sysctl {k} = {v}"));
            }
        }
        for i in 0..self.link_count() {
            let spec = self.link(i);
            for dir in [Direction::Up, Direction::Down] {
                let d = spec.direction(dir);
                let (from, to) = match dir {
                    Direction::Up => (&names[i], &names[i + 1]),
                    Direction::Down => (&names[i + 1], &names[i]),
                };
                let mut parts = Vec::new();
                if d.mtu != DEFAULT_MTU {
                    parts.push(format!("MTU {} bytes", d.mtu));
                }
                if d.mtu6 != d.mtu {
                    parts.push(format!("IPv6 MTU {} bytes", d.mtu6));
                }
                if let Some(r) = d.rate {
                    parts.push(format!("rate {r}"));
                    if d.queue_ms != DEFAULT_QUEUE_MS {
                        parts.push(format!("queue {} ms", d.queue_ms));
                    }
                }
                if let Some(p) = d.police {
                    parts.push(format!(
                        "policer {} (bucket {}: one second at the rate + burst {}), excess dropped",
                        p.rate,
                        Size {
                            bytes: p.bucket_bytes()
                        },
                        p.burst
                    ));
                }
                if d.delay_ms > 0.0 {
                    parts.push(format!("delay {} ms", d.delay_ms));
                }
                if d.jitter_ms > 0.0 {
                    parts.push(format!("jitter ±{} ms", d.jitter_ms));
                }
                if d.loss_percent > 0.0 {
                    parts.push(format!("random loss {} %", d.loss_percent));
                }
                if let Some(b) = d.burst_loss {
                    parts.push(format!(
                        "loss bursts of {} packets every {} packets",
                        b.burst_packets, b.every_packets
                    ));
                }
                if !parts.is_empty() {
                    out.push(format!("{from} → {to}: {}", parts.join(", ")));
                }
            }
            if let Some(x) = &spec.cross_traffic {
                let (from, to) = match x.direction {
                    Direction::Up => (format!("cross{i}a"), format!("cross{i}b")),
                    Direction::Down => (format!("cross{i}b"), format!("cross{i}a")),
                };
                out.push(format!(
                    "{}—{}: {} background bulk {} flow(s) {from} → {to} (iperf3) share the link",
                    names[i],
                    names[i + 1],
                    x.flows,
                    x.cc.to_uppercase()
                ));
            }
        }
        out
    }
}

fn validate_host(name: &str, spec: &HostSpec) -> Result<(), LabError> {
    for (key, value) in &spec.sysctl {
        let ok_chars = key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-');
        if !key.starts_with("net.") || !ok_chars || key.contains("..") {
            return Err(LabError::Topology(format!(
                "{name}: sysctl `{key}` is not a per-namespace `net.*` setting"
            )));
        }
        if value.to_string().contains('\n') {
            return Err(LabError::Topology(format!(
                "{name}: sysctl `{key}` value contains a newline"
            )));
        }
    }
    if let Some(p) = spec.cpu_max_percent {
        if !(1..=800).contains(&p) {
            return Err(LabError::Topology(format!(
                "{name}: cpu_max_percent {p} out of range (1 .. 800, percent of one core)"
            )));
        }
    }
    if let Some(m) = spec.mss_clamp {
        if !(88..=9000).contains(&m) {
            return Err(LabError::Topology(format!(
                "{name}: mss_clamp {m} out of range (88 .. 9000)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
description = "test"
[client]
sysctl = { "net.ipv4.tcp_rmem" = "4096 131072 262144", "net.ipv4.tcp_mtu_probing" = 1 }
[[hop]]
kind = "nat"
strict = true
conntrack = { tcp_established = 3, udp = 5, tcp_transitory = 10 }
mss_clamp = 1380
[[hop]]
[server]
filters = ["drop-icmp-frag-needed"]
[[link]]
rate = "100 Mbit/s"
[link.down]
mtu = 1420
loss_percent = 0.5
[[link]]
delay_ms = 20.0
jitter_ms = 2.0
[link.up]
burst_loss = { every_packets = 100, burst_packets = 3 }
"#;

    #[test]
    fn parses_full_example() {
        let t = Topology::from_toml(FULL).unwrap();
        assert_eq!(t.hops.len(), 2);
        assert_eq!(t.hops[0].kind, HopKind::Nat);
        assert!(t.hops[0].strict);
        assert_eq!(t.hops[1].kind, HopKind::Router);
        assert_eq!(t.hops[0].conntrack.tcp_established, Some(3));
        assert_eq!(t.host_names(), ["client", "hop1", "hop2", "server"]);
        let l0 = t.link(0);
        assert_eq!(l0.direction(Direction::Up).mtu, 1500);
        assert_eq!(l0.direction(Direction::Down).mtu, 1420);
        assert_eq!(l0.direction(Direction::Down).rate, Some(Rate::mbit(100)));
        assert_eq!(l0.direction(Direction::Down).loss_percent, 0.5);
        assert_eq!(l0.direction(Direction::Up).loss_percent, 0.0);
        assert!(t.link(1).needs_delay_line());
        assert!(!t.link(2).needs_delay_line());
        assert_eq!(
            t.link(1).direction(Direction::Up).burst_loss,
            Some(BurstLoss {
                every_packets: 100,
                burst_packets: 3
            })
        );
        assert_eq!(t.client.sysctl["net.ipv4.tcp_mtu_probing"].to_string(), "1");
        assert_eq!(t.server.filters, [Filter::DropIcmpFragNeeded]);
        assert!(!t.describe_faults().is_empty());
        // Round trip.
        let again = Topology::from_toml(&t.to_toml()).unwrap();
        assert_eq!(again, t);
    }

    #[test]
    fn sshd_and_cpu_cap_parse_and_round_trip() {
        let t = Topology::from_toml("[server]\nsshd = true\ncpu_max_percent = 20").unwrap();
        assert!(t.server.sshd && !t.client.sshd);
        assert_eq!(t.server.cpu_max_percent, Some(20));
        assert_eq!(t.sshd_hosts(), ["server"]);
        assert!(t.describe_faults().iter().any(|f| f.contains("20 %")));
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        assert!(!Topology::from_toml("").unwrap().to_toml().contains("sshd"));
    }

    #[test]
    fn cross_traffic_needs_a_link_between_hops_and_is_described_and_planned() {
        let two_hops =
            "[[hop]]\nkind = \"nat\"\n[[hop]]\n[[link]]\n[[link]]\nrate = \"50 Mbit/s\"\n";
        let t =
            Topology::from_toml(&format!("{two_hops}cross_traffic = {{ flows = 3 }}\n")).unwrap();
        let x = t.link(1).cross_traffic.clone().unwrap();
        assert_eq!(
            (x.flows, x.cc.as_str(), x.direction),
            (3, "cubic", Direction::Down)
        );
        let faults = t.describe_faults().join("\n");
        assert!(
            faults.contains("3 background bulk CUBIC flow(s) cross1b → cross1a"),
            "{faults}"
        );
        let plan = crate::plan::plan(&t, "pdx-t");
        let c = &plan.cross[0];
        assert_eq!((c.near.hop.as_str(), c.far.hop.as_str()), ("hop1", "hop2"));
        assert!(plan.namespaces().contains(&"pdx-t-cross1a".to_string()));
        assert!(c.far_hop_route.is_none(), "hop1 masquerades the near end");
        let err = |t: &str| Topology::from_toml(t).unwrap_err().to_string();
        assert!(
            err("[[hop]]\n[[link]]\ncross_traffic = { flows = 1 }\n").contains("between two hops")
        );
        assert!(err(&format!("{two_hops}cross_traffic = {{ flows = 0 }}\n")).contains("flows 0"));
        assert!(err(&format!(
            "{two_hops}cross_traffic = {{ flows = 1, cc = \"vegas\" }}\n"
        ))
        .contains("cc"));
    }

    #[test]
    fn policer_and_queue_parse_validate_and_describe() {
        let t = Topology::from_toml(
            "[[link]]\nrate = \"20 Mbit/s\"\nqueue_ms = 500.0\npolice = { rate = \"20 Mbit/s\", burst = \"64 KiB\" }\n[link.down]\nqueue_ms = 20\n",
        )
        .unwrap();
        let up = t.link(0).direction(Direction::Up);
        let down = t.link(0).direction(Direction::Down);
        assert_eq!((up.queue_ms, down.queue_ms), (500.0, 20.0));
        let p = up.police.unwrap();
        assert_eq!((p.rate, p.burst.bytes), (Rate::mbit(20), 65536));
        assert_eq!(down.police, Some(p));
        assert_eq!(
            Topology::from_toml("[[link]]\nrate = 1000000")
                .unwrap()
                .link(0)
                .direction(Direction::Up)
                .queue_ms,
            DEFAULT_QUEUE_MS
        );
        let faults = t.describe_faults().join("\n");
        assert!(
            faults.contains("queue 500 ms")
                && faults.contains("policer 20.0 Mbit/s (bucket 2.45 MiB: one second at the rate + burst 64.0 KiB)"),
            "{faults}"
        );
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        assert_eq!(Size::parse("1500").unwrap().bytes, 1500);
        assert_eq!(Size::parse("1 MiB").unwrap().bytes, 1 << 20);
        assert!(Size::parse("3 parsecs").is_err() && Size::parse("0").is_err());
        assert!(err("[[link]]\nqueue_ms = 100.0").contains("needs a rate"));
        assert!(err("[[link]]\nrate = 1000000\nqueue_ms = 0.0").contains("queue_ms"));
        assert!(err("[[link]]\npolice = { rate = \"20 Mbit/s\", burst = 100 }").contains("burst"));
        assert!(
            err("[[link]]\npolice = { rate = \"1 bit/s\", burst = 65536 }").contains("police rate")
        );
        assert!(err("[[link]]\npolice = { rate = \"1 Mbit/s\" }").contains("burst"));
    }

    #[test]
    fn nic_segments_at_applies_to_the_hosts_own_link() {
        let t = Topology::from_toml("[server]\nnic_segments_at = 1500\n[[hop]]\n").unwrap();
        assert_eq!(t.nic_segments_on_link(1), (None, Some(1500)));
        assert_eq!(t.nic_segments_on_link(0), (None, None));
        assert!(t.link_needs_element(1) && !t.link_needs_element(0));
        assert!(t.describe_faults().iter().any(|f| f.contains("1500-byte")));
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        let c = Topology::from_toml("[client]\nnic_segments_at = 1400\n").unwrap();
        assert_eq!(c.nic_segments_on_link(0), (Some(1400), None));
        assert!(
            err("[server]\nnic_segments_at = 1500\n[[link]]\nmtu = 1400")
                .contains("nic_segments_at")
        );
        assert!(err("[client]\nnic_segments_at = 100").contains("nic_segments_at"));
        assert!(err("[[hop]]\nnic_segments_at = 1500").contains("unknown field"));
    }

    #[test]
    fn empty_is_a_clean_direct_path() {
        let t = Topology::from_toml("").unwrap();
        assert_eq!(t.host_names(), ["client", "server"]);
        assert!(t.describe_faults().is_empty());
    }

    #[test]
    fn rates_parse() {
        assert_eq!(
            Rate::parse("100 Mbit/s").unwrap().bits_per_second,
            100_000_000
        );
        assert_eq!(Rate::parse("1Gbit").unwrap().bits_per_second, 1_000_000_000);
        assert_eq!(
            Rate::parse("2.5 mbit/s").unwrap().bits_per_second,
            2_500_000
        );
        assert_eq!(Rate::parse("512kbit/s").unwrap().bits_per_second, 512_000);
        assert!(Rate::parse("fast").is_err());
        assert!(Rate::parse("10 furlongs").is_err());
    }

    fn err(text: &str) -> String {
        Topology::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_inputs_are_clear_errors() {
        assert!(err("[[hop]]\nkind = \"bridge\"").contains("unknown variant"));
        assert!(err("[[hop]]\nstrict = true").contains("strict"));
        assert!(err("[[hop]]\nconntrack = { tcp_established = 5 }").contains("only apply"));
        assert!(
            err("[[hop]]\nkind=\"nat\"\nconntrack = { tcp_established = 0 }")
                .contains("out of range")
        );
        assert!(err("[[link]]\n[[link]]").contains("only 1 link"));
        assert!(err("[[link]]\nmtu = 100").contains("mtu 100"));
        assert!(err("[[link]]\nloss_percent = 120.0").contains("loss_percent"));
        assert!(err("[[link]]\nrate = \"7 parsecs\"").contains("unknown unit"));
        assert!(err("[[link]]\njitter_ms = 3.0").contains("jitter"));
        assert!(
            err("[[link]]\n[link.up]\nburst_loss = { every_packets = 3, burst_packets = 3 }")
                .contains("burst")
        );
        assert!(err("[client]\nsysctl = { \"kernel.panic\" = 1 }").contains("net.*"));
        assert!(err("[client]\nfilters = [\"drop-everything\"]").contains("unknown variant"));
        assert!(err("[client]\nmss_clamp = 20").contains("mss_clamp"));
        assert!(err("[server]\ncpu_max_percent = 0").contains("cpu_max_percent"));
        assert!(err("[[hop]]\nsshd = true").contains("unknown field"));
        assert!(err("[client]\ncolour = \"blue\"").contains("unknown field"));
        assert!(err("[[hop]\n").contains("TOML") || !err("[[hop]\n").is_empty());
        let many = "[[hop]]\n".repeat(MAX_HOPS + 1);
        assert!(err(&many).contains("at most"));
    }

    #[test]
    fn ipv6_keys_need_an_ipv6_lab_and_sane_values() {
        let err = |t: &str| Topology::from_toml(t).unwrap_err().to_string();
        assert!(err("[[link]]\nmtu6 = 1480\n").contains("mtu6 needs family"));
        assert!(err("family = \"dual\"\n[[link]]\nmtu6 = 1200\n").contains("1280"));
        assert!(err("family = \"dual\"\n[[link]]\nmtu = 1000\n").contains("1280"));
        assert!(err("family = \"dual\"\n[[hop]]\nnat66 = true\n").contains("kind = \"nat\""));
        assert!(err("[[hop]]\nkind = \"nat\"\nnat66 = true\n").contains("need family"));
        assert!(
            err("[server]\nfilters = [\"drop-icmpv6-packet-too-big\"]\n").contains("needs family")
        );
        assert!(err("family = \"v6\"\n[server]\nsshd = true\n").contains("needs IPv4"));
        let t = Topology::from_toml(
            "family = \"dual\"\n[[hop]]\nkind = \"nat\"\nconntrack6 = { tcp_established = 3 }\n[[link]]\nmtu6 = 1480\n",
        )
        .unwrap();
        assert_eq!(t.link(0).direction(Direction::Up).mtu6, 1480);
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        assert_eq!(Topology::default().family, Family::V4);
    }
}
