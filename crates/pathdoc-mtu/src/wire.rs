//! Messages of the mtu check: control frames (JSON, always small so they cross any MTU) and
//! the layout of probe datagrams.
//!
//! Probe datagram payload after the [`UdpHeader`](pathdoc_proto::UdpHeader): `round` (u32),
//! `id` (u32), `size` (u16, the whole IP datagram) and `ttl` (u8), then zero padding up to
//! `size`. ICMP errors quote the start of the payload, so every error names its probe.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// UDP `kind`: client → server, opens the client's NAT mapping for server → client probes.
pub const KIND_OPEN: u16 = 1;
/// UDP `kind`: a client → server probe.
pub const KIND_UP_PROBE: u16 = 2;
/// UDP `kind`: a server → client probe.
pub const KIND_DOWN_PROBE: u16 = 3;

/// Data-connection tags of the bulk download (full-size segments / reduced MSS).
pub const TAG_BULK: u32 = 1;

/// Bytes of probe fields after the UDP header.
pub const PROBE_FIELDS: usize = 11;

/// Limits the server enforces on client requests.
pub const MAX_PROBES_PER_REQUEST: usize = 256;
pub const MAX_ATTEMPTS: u8 = 5;
pub const MAX_WAIT_MS: u32 = 2000;
pub const MAX_PROBE_SIZE: u16 = 9000;
pub const MIN_PROBE_SIZE: u16 = 68;
pub const MAX_BULK_MS: u32 = 5000;

/// The fields a probe carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeFields {
    pub round: u32,
    pub id: u32,
    pub size: u16,
    pub ttl: u8,
}

impl ProbeFields {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.round.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.push(self.ttl);
    }

    /// Decode from the start of a probe payload (after the pathdoc UDP header).
    pub fn decode(payload: &[u8]) -> Option<ProbeFields> {
        if payload.len() < PROBE_FIELDS {
            return None;
        }
        Some(ProbeFields {
            round: u32::from_be_bytes(payload[0..4].try_into().ok()?),
            id: u32::from_be_bytes(payload[4..8].try_into().ok()?),
            size: u16::from_be_bytes(payload[8..10].try_into().ok()?),
            ttl: payload[10],
        })
    }
}

/// One probe the client asks the server to send: IP datagram size and optional TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSpec {
    pub size: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
}

/// Client → server control messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum Request {
    /// First message: the server answers with its settings ([`Reply::Started`]).
    Start,
    /// Whether the server has seen the client's [`KIND_OPEN`] datagram; it then opens its probe
    /// socket towards that address.
    DownTarget,
    /// Send these probes, `attempts` times each, to the client, wait `wait_ms` for ICMP, report.
    ProbeDown {
        round: u32,
        probes: Vec<ProbeSpec>,
        attempts: u8,
        wait_ms: u32,
    },
    /// Which client → server probes of `round` arrived.
    UpReceived {
        round: u32,
    },
    /// Open a one-shot listener that saves the client's SYN.
    MssListen,
    /// What the saved SYN said.
    MssResult,
    /// TCP_INFO of the server's side of the last bulk download.
    BulkStats,
    Done,
}

/// An ICMP error the sender's kernel queued for one of its probes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcmpSeen {
    /// The probe it quotes, when the quote was long enough to carry the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    pub kind: IcmpKind,
    /// Next-hop MTU of a too-big message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The router (or host) that sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<IpAddr>,
    pub icmp_type: u8,
    pub icmp_code: u8,
}

/// What an [`IcmpSeen`] means for a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IcmpKind {
    /// ICMP "fragmentation needed" / ICMPv6 "packet too big".
    TooBig,
    TimeExceeded,
    /// The destination answered (port unreachable).
    Unreachable,
    Other,
}

/// One probe the server sent (or could not send).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentProbe {
    pub id: u32,
    pub size: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// The sender's own stack refused it (larger than its interface MTU).
    pub local_error: bool,
}

/// Server → client control messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum Reply {
    Started {
        /// The server's `net.ipv4.tcp_mtu_probing` (its own network namespace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tcp_mtu_probing: Option<String>,
    },
    DownTarget {
        /// The client's UDP address as the server sees it, once known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_udp: Option<SocketAddr>,
        /// The server's route MTU towards it (`IP_MTU`), the largest probe it can send.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route_mtu: Option<u32>,
    },
    DownSent {
        round: u32,
        probes: Vec<SentProbe>,
        icmp: Vec<IcmpSeen>,
        /// The server's interface MTU, when its own stack refused a probe as too big (the
        /// local EMSGSIZE names it): the search stops there instead of stepping down.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        local_mtu: Option<u32>,
    },
    UpReceived {
        round: u32,
        ids: Vec<u32>,
    },
    MssListening {
        port: u16,
    },
    MssSeen {
        /// MSS option of the client's SYN as it arrived.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        syn_mss: Option<u16>,
        /// MSS the server advertised in its SYN-ACK (TCP_INFO advmss).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_advmss: Option<u32>,
    },
    BulkStats {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stats: Option<BulkServerStats>,
        /// The server's interface that carried the download (driver, offloads, VM).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nic: Option<pathdoc_sys::nic::NicFacts>,
    },
    Error {
        message: String,
    },
}

/// First frame on a bulk data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRequest {
    pub duration_ms: u32,
}

/// The server's TCP view of a bulk download.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkServerStats {
    pub bytes_acked: u64,
    pub snd_mss: u32,
    pub pmtu: u32,
    pub total_retrans: u32,
    /// Data segments the server's TCP sent, retransmissions included (TCP_INFO data_segs_out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_segs_out: Option<u32>,
    /// ICMP destination-unreachable / packet-too-big messages the server's host received while
    /// the download ran (/proc/net/snmp difference; counted after its firewall).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_too_big_in: Option<u64>,
}

impl BulkServerStats {
    /// Retransmitted share of the data segments sent, when known.
    pub fn retrans_fraction(&self) -> Option<f64> {
        let sent = self.data_segs_out?;
        (sent > 0).then(|| f64::from(self.total_retrans) / f64::from(sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_fields_round_trip_and_reject_short() {
        let p = ProbeFields {
            round: 7,
            id: 0x0102_0304,
            size: 1420,
            ttl: 3,
        };
        let mut buf = Vec::new();
        p.encode(&mut buf);
        assert_eq!(buf.len(), PROBE_FIELDS);
        assert_eq!(ProbeFields::decode(&buf), Some(p));
        assert_eq!(ProbeFields::decode(&buf[..5]), None);
    }

    #[test]
    fn requests_are_tagged_json() {
        let r = Request::ProbeDown {
            round: 1,
            probes: vec![ProbeSpec {
                size: 1500,
                ttl: None,
            }],
            attempts: 3,
            wait_ms: 300,
        };
        let j = serde_json::to_string(&r).unwrap();
        assert!(j.contains("\"type\":\"probe-down\""), "{j}");
        assert_eq!(serde_json::from_str::<Request>(&j).unwrap(), r);
    }
}
