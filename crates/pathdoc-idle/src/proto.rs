//! The idle check's messages, carried in pathdoc frames on its control and probe connections.
//!
//! Control connection (client → server [`ControlRequest`], server → client [`ControlReply`]):
//! heartbeats, "fire these server-initiated probes now", and result retrieval after a resume.
//! Probe connections carry at most one exchange per test: the server's [`ProbeMessage::Probe`]
//! (server-initiated test) or the client's [`ProbeRequest::Ping`] answered by
//! [`ProbeMessage::Pong`] (client-initiated test).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// UDP datagram kinds ([`pathdoc_proto::UdpHeader::kind`]) of the idle check.
pub mod udp_kind {
    /// Client opens a binding: payload is the probe tag; the server answers with the same size.
    pub const OPEN: u16 = 1;
    /// Server-initiated binding test (server → client) or client-initiated test (both ways).
    pub const PROBE: u16 = 2;
    /// Inbound-only refresh traffic (server → client), to see whether it keeps a binding alive.
    pub const REFRESH: u16 = 3;
    /// Hop discovery: the client sends these with growing TTLs; the server echoes the payload
    /// (same size, nothing registered) so the client learns at which TTL the server is reached.
    pub const TRACE: u16 = 4;
}

/// Client → server on the control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ControlRequest {
    Heartbeat {
        seq: u64,
    },
    /// Write a [`ProbeMessage::Probe`] with `nonce` on each of these probe connections now.
    Fire {
        tags: Vec<u32>,
        nonce: u64,
    },
    /// Send a UDP probe datagram with `nonce` to each of these UDP bindings now.
    FireUdp {
        tags: Vec<u32>,
        nonce: u64,
    },
    /// Send inbound-only refresh datagrams to these bindings every `interval_ms` until told
    /// otherwise (RFC 4787 REQ-6: does inbound traffic refresh a binding?).
    UdpRefresh {
        tags: Vec<u32>,
        interval_ms: u64,
    },
    /// Keep these probe connections warm from the server's side: TCP keepalives every
    /// `interval_ms` sent with IP TTL `ttl`, so only the `ttl` hops nearest the server see them
    /// (culprit-hop search). The next [`ControlRequest::Fire`] on a connection stops this first.
    KeepWarm {
        tags: Vec<u32>,
        ttl: u8,
        interval_ms: u64,
    },
    /// The server's view of every probe with a tag above `after`, a page at a time.
    Results {
        after: Option<u32>,
    },
    /// The run is over; the server may close the probe connections.
    Finish,
}

/// Server → client on the control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ControlReply {
    HeartbeatAck {
        seq: u64,
        server_elapsed_ms: u64,
    },
    Fired {
        fired: Vec<Fired>,
    },
    Results {
        records: Vec<ServerProbeRecord>,
        more: bool,
        /// UDP bindings the server did not open for want of room (a UDP `OPEN` gets no answer
        /// then, so only this tells the client why). Absent when none was refused and from
        /// older servers; older clients ignore it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        udp_refused: Option<RefusedBindings>,
    },
    Ok,
    Error {
        message: String,
    },
}

/// UDP bindings a session's client asked for that the server's probe-record budget refused:
/// how many distinct bindings, and the last refusal's words, bound and limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedBindings {
    pub count: u32,
    pub message: String,
    pub reason: String,
    pub limit: u32,
}

/// The server's account of one fire request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fired {
    pub tag: u32,
    /// Idle time of the connection as the server measured it (since its last traffic).
    pub idle_ms: Option<u64>,
    /// False when the server no longer has that connection (it ended, or never opened).
    pub sent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Client → server on a probe connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ProbeRequest {
    Ping { nonce: u64 },
}

/// Server → client on a probe connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ProbeMessage {
    /// Server-initiated test: written after the connection was idle `idle_ms`.
    Probe {
        nonce: u64,
        observed: SocketAddr,
        idle_ms: u64,
    },
    /// Answer to a client-initiated [`ProbeRequest::Ping`].
    Pong {
        nonce: u64,
        observed: SocketAddr,
        idle_ms: u64,
    },
}

/// How a probe connection ended, as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerSawEnd {
    /// The client side closed (FIN).
    ClosedByPeer,
    /// A RST arrived (from the client or a middlebox).
    ResetByPeer,
    /// Data the server wrote was never acknowledged (TCP user timeout): it went nowhere.
    Unacknowledged,
    /// The server closed it (session ended, shutdown).
    ServerClosed,
    Error(String),
}

/// The server's record of one probe connection or UDP binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerProbeRecord {
    pub tag: u32,
    pub udp: bool,
    /// The client's public address and port as the server saw them when the probe opened.
    pub observed: SocketAddr,
    /// Times in ms since the session started.
    pub opened_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinged_ms: Option<u64>,
    /// For UDP: the source of the latest client datagram, if it differs from `observed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_from: Option<SocketAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<ServerSawEnd>,
}

/// UDP payload of an [`udp_kind::OPEN`] or [`udp_kind::PROBE`] datagram: JSON, padded by the
/// client so the server's answer (which may carry the observed address) is never larger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpPayload {
    pub tag: u32,
    pub nonce: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<SocketAddr>,
}

/// Size every client datagram is padded to (bytes of payload after the header).
pub const UDP_PAD: usize = 160;

impl UdpPayload {
    /// JSON followed by spaces up to `pad` bytes (serde_json ignores trailing whitespace).
    pub fn encode(&self, pad: usize) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        if v.len() < pad {
            v.resize(pad, b' ');
        }
        v
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_payload_pads_and_round_trips() {
        let p = UdpPayload {
            tag: 7,
            nonce: 42,
            observed: Some("[2001:db8::1]:65535".parse().unwrap()),
        };
        let bytes = p.encode(UDP_PAD);
        assert_eq!(bytes.len(), UDP_PAD);
        assert_eq!(UdpPayload::decode(&bytes).unwrap(), p);
        assert!(UdpPayload::decode(b"garbage").is_none());
    }

    #[test]
    fn control_messages_are_tagged_json() {
        let j = serde_json::to_value(ControlRequest::Fire {
            tags: vec![1, 2],
            nonce: 9,
        })
        .unwrap();
        assert_eq!(j["type"], "fire");
    }
}
