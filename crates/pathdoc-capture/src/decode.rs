//! Decoding one captured frame into the few fields the analysis needs, without allocating.
//!
//! The link layer is stripped here (it is a handful of fixed layouts); IPv4/IPv6 with extension
//! headers go through `etherparse`'s lax slicer, which accepts frames cut short by the snap
//! length; TCP, UDP and ICMP are read from their fixed headers. Every length comes from the
//! headers, not from the captured bytes, so a truncated frame still counts in full.

use std::net::IpAddr;

use etherparse::{IpNumber, LaxIpSlice};

use crate::reader::LinkType;
use crate::tunnel::{self, Inner};

/// IP-layer facts of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    pub version: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// TTL (IPv4) or hop limit (IPv6).
    pub ttl: u8,
    /// IPv4 identification (0 for IPv6).
    pub id: u16,
    pub dont_fragment: bool,
    /// Length of the IP packet on the wire (header included), from the IP header; for TSO/GRO
    /// packets whose length field is 0 (BIG TCP), from the frame length.
    pub total_len: u32,
    /// A fragment (not the whole datagram): its transport header may be absent.
    pub fragment: bool,
}

/// TCP options the analysis uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    /// (TSval, TSecr)
    pub timestamp: Option<(u32, u32)>,
    /// SACK blocks (left, right), up to four.
    pub sack: [(u32, u32); 4],
    pub sack_blocks: u8,
}

/// TCP header facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    /// The 12 flag bits (FIN 0x001 … NS 0x100).
    pub flags: u16,
    /// Raw (unscaled) window.
    pub window: u16,
    /// Header length in bytes (data offset × 4).
    pub header_len: u8,
    /// Payload length from the IP length fields (`None` if the IP length is shorter than the
    /// TCP header: a malformed or "short" segment).
    pub seg_len: Option<u32>,
    pub options: TcpOptions,
}

pub const TH_FIN: u16 = 0x001;
pub const TH_SYN: u16 = 0x002;
pub const TH_RST: u16 = 0x004;
pub const TH_PUSH: u16 = 0x008;
pub const TH_ACK: u16 = 0x010;
pub const TH_URG: u16 = 0x020;
pub const TH_ECE: u16 = 0x040;
pub const TH_CWR: u16 = 0x080;

/// What an ICMP message says about the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpKind {
    /// ICMPv4 type 3 code 4 (fragmentation needed and DF set) or ICMPv6 packet too big.
    TooBig,
    /// Other destination unreachable codes.
    Unreachable,
    TimeExceeded,
    /// Echo and everything else.
    Other,
}

/// The packet quoted inside an ICMP error (the one that triggered it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// TCP sequence number, when the quote reaches it.
    pub tcp_seq: Option<u32>,
    /// Total length of the quoted IP packet, from its header.
    pub total_len: u32,
    pub id: u16,
}

/// ICMP / ICMPv6 facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpInfo {
    pub v6: bool,
    pub icmp_type: u8,
    pub code: u8,
    pub kind: IcmpKind,
    /// Next-hop MTU of a too-big message (0 in old routers' messages is reported as `Some(0)`).
    pub mtu: Option<u32>,
    pub quoted: Option<Quoted>,
}

/// The transport layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp(TcpInfo),
    Udp {
        src_port: u16,
        dst_port: u16,
        len: u16,
    },
    Icmp(IcmpInfo),
    /// One IPv4 fragment of a TCP segment: Wireshark reassembles these (or dissects a first
    /// fragment cut short by the capture), so its `tcp.stream` counts them.
    TcpFragment(TcpFragment),
    Other {
        protocol: u8,
    },
}

/// An IPv4 fragment carrying part of a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFragment {
    /// IPv4 identification: with the addresses, which datagram it belongs to.
    pub id: u16,
    /// Offset of its payload in the datagram's, bytes.
    pub offset: u32,
    /// Length of its payload from the IP header, bytes.
    pub len: u32,
    /// More fragments follow (MF).
    pub more: bool,
    /// Every payload byte the IP header claims is in the capture. Wireshark reassembles only
    /// such fragments; a first fragment cut short it dissects as TCP on its own.
    pub captured: bool,
    /// The TCP header, in the fragment at offset 0 (its `seg_len` is this fragment's share).
    pub tcp: Option<TcpInfo>,
}

/// A decoded frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub ip: IpInfo,
    pub l4: L4,
}

/// Decode a frame of link type `link`. `None` for anything that is not IPv4/IPv6 (ARP, LLDP…)
/// or too short to hold an IP header. Tunnels are looked through (see [`crate::tunnel`]): the
/// result is the innermost IP packet, as Wireshark's `tcp` fields show it.
pub fn decode(link: LinkType, data: &[u8], orig_len: u32) -> Option<Decoded> {
    let (ip_offset, ethertype) = link_header(link.0, data)?;
    let ip = data.get(ip_offset..)?;
    let orig_ip_len = orig_len.saturating_sub(ip_offset as u32);
    decode_net(ethertype, ip, orig_ip_len, 0)
}

/// Tunnels inside tunnels, at most this deep.
const MAX_DEPTH: u8 = 4;

/// A network-layer payload of `ethertype` (`None`: IP, the version nibble decides).
fn decode_net(ethertype: Option<u16>, data: &[u8], orig_len: u32, depth: u8) -> Option<Decoded> {
    let skip = |off: usize, et: Option<u16>| {
        decode_net(
            et,
            data.get(off..)?,
            orig_len.saturating_sub(off as u32),
            depth + 1,
        )
    };
    match ethertype {
        Some(0x0800) | Some(0x86dd) | None => decode_ip(data, orig_len, depth),
        _ if depth >= MAX_DEPTH => None,
        Some(0x8847) | Some(0x8848) => skip(tunnel::mpls(data)?, None),
        Some(0x8864) => skip(tunnel::pppoe_session(data)?, None),
        _ => None,
    }
}

/// The packet a tunnel carries, if `protocol`'s payload is one (`None` otherwise, or when the
/// inner packet does not decode: the outer one stands).
fn decode_tunnelled(protocol: u8, l4: &[u8], l4_len: u32, depth: u8) -> Option<Decoded> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let (inner, off) = tunnel::in_ip_payload(protocol, l4)?;
    let data = l4.get(off..)?;
    let len = l4_len.saturating_sub(off as u32);
    match inner {
        Inner::Ip => decode_net(None, data, len, depth + 1),
        Inner::Ethertype(et) => decode_net(Some(et), data, len, depth + 1),
        Inner::Ethernet => {
            let (eth, et) = link_header(1, data)?;
            decode_net(
                et,
                data.get(eth..)?,
                len.saturating_sub(eth as u32),
                depth + 1,
            )
        }
    }
}

/// Offset of the IP header and the ethertype when the link layer names one.
fn link_header(link: u32, data: &[u8]) -> Option<(usize, Option<u16>)> {
    match link {
        // Ethernet, skipping any number of 802.1Q / 802.1ad tags (QinQ).
        1 => {
            let mut offset = 12;
            let mut ethertype = be16(data, offset)?;
            while matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) {
                offset += 4;
                ethertype = be16(data, offset)?;
            }
            Some((offset + 2, Some(ethertype)))
        }
        // Linux cooked v1: 16-byte header, protocol at 14.
        113 => Some((16, Some(be16(data, 14)?))),
        // Linux cooked v2: 20-byte header, protocol first.
        276 => Some((20, Some(be16(data, 0)?))),
        // BSD loopback: a 4-byte address family, host (NULL) or network (LOOP) order; the IP
        // version nibble decides.
        0 | 108 => {
            data.get(..4)?;
            Some((4, None))
        }
        12 | 14 | 101 | 228 | 229 => Some((0, None)),
        // PPP (9) and PPP in HDLC framing (50): address/control FF 03 when present, then the
        // PPP protocol.
        9 | 50 => {
            let off = if data.get(..2)? == [0xff, 0x03] { 2 } else { 0 };
            let ethertype = match be16(data, off)? {
                0x0021 => 0x0800,
                0x0057 => 0x86dd,
                0x0281 | 0x0283 => 0x8847,
                _ => return None,
            };
            Some((off + 2, Some(ethertype)))
        }
        _ => None,
    }
}

fn decode_ip(ip: &[u8], orig_ip_len: u32, depth: u8) -> Option<Decoded> {
    let (slice, _ext_error) = LaxIpSlice::from_slice(ip).ok()?;
    let payload = slice.payload();
    let l4_offset = (payload.payload.as_ptr() as usize).wrapping_sub(ip.as_ptr() as usize) as u32;
    let info = match &slice {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            let declared = u32::from(h.total_len());
            let total_len = capped(declared, orig_ip_len);
            IpInfo {
                version: 4,
                src: IpAddr::V4(h.source_addr()),
                dst: IpAddr::V4(h.destination_addr()),
                ttl: h.ttl(),
                id: h.identification(),
                dont_fragment: h.dont_fragment(),
                total_len,
                fragment: h.more_fragments() || h.fragments_offset().value() != 0,
            }
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            let declared = u32::from(h.payload_length());
            let total_len = if declared == 0 {
                orig_ip_len
            } else {
                capped(declared + 40, orig_ip_len)
            };
            IpInfo {
                version: 6,
                src: IpAddr::V6(h.source_addr()),
                dst: IpAddr::V6(h.destination_addr()),
                ttl: h.hop_limit(),
                id: 0,
                dont_fragment: true,
                total_len,
                fragment: payload.fragmented,
            }
        }
    };
    let l4_len = info.total_len.saturating_sub(l4_offset);
    if !info.fragment {
        if let Some(inner) = decode_tunnelled(payload.ip_number.0, payload.payload, l4_len, depth) {
            return Some(inner);
        }
    }
    let l4 = if info.fragment {
        tcp_fragment(&slice, payload.payload, l4_len).unwrap_or(L4::Other {
            protocol: payload.ip_number.0,
        })
    } else {
        decode_l4(payload.ip_number, payload.payload, l4_len)
    };
    Some(Decoded { ip: info, l4 })
}

/// An IPv4 fragment of TCP, for Wireshark's stream numbering (IPv6 fragments stay `Other`).
fn tcp_fragment(slice: &LaxIpSlice<'_>, payload: &[u8], l4_len: u32) -> Option<L4> {
    let LaxIpSlice::Ipv4(v4) = slice else {
        return None;
    };
    let h = v4.header();
    if h.protocol() != IpNumber::TCP {
        return None;
    }
    // Wireshark's test is against the header's total length, not the one capped at the frame.
    let declared = u32::from(h.total_len()).saturating_sub(u32::from(h.ihl()) * 4);
    let offset = u32::from(h.fragments_offset().value()) * 8;
    Some(L4::TcpFragment(TcpFragment {
        id: h.identification(),
        offset,
        len: declared,
        more: h.more_fragments(),
        captured: payload.len() as u32 >= declared,
        tcp: if offset == 0 {
            decode_tcp(payload, l4_len)
        } else {
            None
        },
    }))
}

/// The IP length to trust: the header's, but never more than the frame holds on the wire (as
/// Wireshark caps it); 0 is what TSO/BIG TCP packets carry on the sender: the frame's.
fn capped(declared: u32, frame: u32) -> u32 {
    if declared == 0 {
        frame
    } else {
        declared.min(frame)
    }
}

fn decode_l4(protocol: IpNumber, data: &[u8], declared_len: u32) -> L4 {
    match protocol {
        IpNumber::TCP => match decode_tcp(data, declared_len) {
            Some(t) => L4::Tcp(t),
            None => L4::Other { protocol: 6 },
        },
        IpNumber::UDP => match (be16(data, 0), be16(data, 2), be16(data, 4)) {
            (Some(src_port), Some(dst_port), Some(len)) => L4::Udp {
                src_port,
                dst_port,
                len,
            },
            _ => L4::Other { protocol: 17 },
        },
        IpNumber::ICMP => match decode_icmp(data, false) {
            Some(i) => L4::Icmp(i),
            None => L4::Other { protocol: 1 },
        },
        IpNumber::IPV6_ICMP => match decode_icmp(data, true) {
            Some(i) => L4::Icmp(i),
            None => L4::Other { protocol: 58 },
        },
        other => L4::Other { protocol: other.0 },
    }
}

fn decode_tcp(data: &[u8], declared_len: u32) -> Option<TcpInfo> {
    let header_len = (data.get(12)? >> 4) * 4;
    let flags = be16(data, 12)? & 0x0fff;
    let options_end = (header_len as usize).min(data.len());
    let options = if header_len > 20 && options_end > 20 {
        parse_tcp_options(&data[20..options_end])
    } else {
        TcpOptions::default()
    };
    Some(TcpInfo {
        src_port: be16(data, 0)?,
        dst_port: be16(data, 2)?,
        seq: be32(data, 4)?,
        ack: be32(data, 8)?,
        flags,
        window: be16(data, 14)?,
        header_len,
        seg_len: declared_len.checked_sub(u32::from(header_len)),
        options,
    })
}

/// Walk the TCP options (stopping quietly at a malformed or truncated one).
fn parse_tcp_options(mut opts: &[u8]) -> TcpOptions {
    let mut out = TcpOptions::default();
    while let Some(&kind) = opts.first() {
        match kind {
            0 => break,
            1 => {
                opts = &opts[1..];
                continue;
            }
            _ => {}
        }
        let Some(&len) = opts.get(1) else { break };
        let len = len as usize;
        if len < 2 || len > opts.len() {
            break;
        }
        let body = &opts[2..len];
        match (kind, body.len()) {
            (2, 2) => out.mss = Some(u16::from_be_bytes([body[0], body[1]])),
            (3, 1) => out.wscale = Some(body[0]),
            (4, 0) => out.sack_permitted = true,
            (5, n) if n >= 8 => {
                for block in body.chunks_exact(8).take(4) {
                    let left = u32::from_be_bytes([block[0], block[1], block[2], block[3]]);
                    let right = u32::from_be_bytes([block[4], block[5], block[6], block[7]]);
                    out.sack[out.sack_blocks as usize] = (left, right);
                    out.sack_blocks += 1;
                }
            }
            (8, 8) => {
                out.timestamp = Some((
                    u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                    u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                ))
            }
            _ => {}
        }
        opts = &opts[len..];
    }
    out
}

fn decode_icmp(data: &[u8], v6: bool) -> Option<IcmpInfo> {
    let icmp_type = *data.first()?;
    let code = *data.get(1)?;
    let (kind, mtu) = if v6 {
        match icmp_type {
            1 => (IcmpKind::Unreachable, None),
            2 => (IcmpKind::TooBig, be32(data, 4)),
            3 => (IcmpKind::TimeExceeded, None),
            _ => (IcmpKind::Other, None),
        }
    } else {
        match (icmp_type, code) {
            (3, 4) => (IcmpKind::TooBig, be16(data, 6).map(u32::from)),
            (3, _) => (IcmpKind::Unreachable, None),
            (11, _) => (IcmpKind::TimeExceeded, None),
            _ => (IcmpKind::Other, None),
        }
    };
    let quoted = if kind == IcmpKind::Other {
        None
    } else {
        data.get(8..).and_then(decode_quoted)
    };
    Some(IcmpInfo {
        v6,
        icmp_type,
        code,
        kind,
        mtu,
        quoted,
    })
}

/// The IP header and first transport bytes quoted by an ICMP error (RFC 792: at least 8 bytes).
fn decode_quoted(data: &[u8]) -> Option<Quoted> {
    let (slice, _) = LaxIpSlice::from_slice(data).ok()?;
    let (src, dst, total_len, id) = match &slice {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                u32::from(h.total_len()),
                h.identification(),
            )
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                u32::from(h.payload_length()) + 40,
                0,
            )
        }
    };
    let payload = slice.payload();
    let t = payload.payload;
    Some(Quoted {
        src,
        dst,
        protocol: payload.ip_number.0,
        src_port: be16(t, 0).unwrap_or(0),
        dst_port: be16(t, 2).unwrap_or(0),
        tcp_seq: if payload.ip_number == IpNumber::TCP {
            be32(t, 4)
        } else {
            None
        },
        total_len,
        id,
    })
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    let b = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp_frame(payload: &[u8]) -> Vec<u8> {
        let builder = PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1])
            .ipv4([192, 168, 1, 100], [203, 0, 113, 10], 64)
            .tcp(40000, 22, 1000, 65535)
            .syn()
            .options(&[
                etherparse::TcpOptionElement::MaximumSegmentSize(1460),
                etherparse::TcpOptionElement::SelectiveAcknowledgementPermitted,
                etherparse::TcpOptionElement::Timestamp(7, 0),
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::WindowScale(7),
            ])
            .unwrap();
        let mut out = Vec::new();
        builder.write(&mut out, payload).unwrap();
        out
    }

    #[test]
    fn ethernet_ipv4_tcp_with_options() {
        let frame = tcp_frame(b"hello");
        let d = decode(LinkType::ETHERNET, &frame, frame.len() as u32).unwrap();
        assert_eq!(d.ip.ttl, 64);
        let L4::Tcp(t) = d.l4 else { panic!() };
        assert_eq!((t.src_port, t.dst_port, t.seq), (40000, 22, 1000));
        assert_eq!(t.flags & TH_SYN, TH_SYN);
        assert_eq!(t.seg_len, Some(5));
        assert_eq!(t.options.mss, Some(1460));
        assert_eq!(t.options.wscale, Some(7));
        assert!(t.options.sack_permitted);
        assert_eq!(t.options.timestamp, Some((7, 0)));
    }

    #[test]
    fn snap_length_truncated_frame_keeps_its_lengths() {
        let frame = tcp_frame(&[0u8; 1000]);
        let cut = &frame[..54];
        let d = decode(LinkType::ETHERNET, cut, frame.len() as u32).unwrap();
        let L4::Tcp(t) = d.l4 else { panic!() };
        assert_eq!(t.seg_len, Some(1000));
        assert_eq!(d.ip.total_len as usize, frame.len() - 14);
    }

    #[test]
    fn vlan_qinq_sll_sll2_null_and_raw() {
        let frame = tcp_frame(b"x");
        let ip = &frame[14..];
        let mut qinq = frame[..12].to_vec();
        qinq.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00]);
        qinq.extend_from_slice(ip);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(ip);
        let mut null = 2u32.to_ne_bytes().to_vec();
        null.extend_from_slice(ip);
        for (link, bytes) in [
            (LinkType::ETHERNET, &qinq),
            (LinkType::LINUX_SLL, &sll),
            (LinkType::LINUX_SLL2, &sll2),
            (LinkType::NULL, &null),
            (LinkType::RAW, &ip.to_vec()),
        ] {
            let d = decode(link, bytes, bytes.len() as u32).unwrap_or_else(|| panic!("{link:?}"));
            assert!(
                matches!(d.l4, L4::Tcp(t) if t.seg_len == Some(1)),
                "{link:?}"
            );
        }
    }

    #[test]
    fn icmp_frag_needed_quotes_the_tcp_packet() {
        let inner = tcp_frame(&[0u8; 1448]);
        let quoted = &inner[14..14 + 28];
        let mut icmp = vec![3u8, 4, 0, 0, 0, 0, 0x05, 0x8c];
        icmp.extend_from_slice(quoted);
        let builder = PacketBuilder::ipv4([100, 64, 1, 1], [203, 0, 113, 10], 63).write(
            &mut Vec::new(),
            etherparse::IpNumber::ICMP,
            &icmp,
        );
        assert!(builder.is_ok());
        let mut out = Vec::new();
        PacketBuilder::ipv4([100, 64, 1, 1], [203, 0, 113, 10], 63)
            .write(&mut out, etherparse::IpNumber::ICMP, &icmp)
            .unwrap();
        let d = decode(LinkType::RAW, &out, out.len() as u32).unwrap();
        let L4::Icmp(i) = d.l4 else { panic!() };
        assert_eq!(i.kind, IcmpKind::TooBig);
        assert_eq!(i.mtu, Some(1420));
        let q = i.quoted.unwrap();
        assert_eq!((q.src_port, q.dst_port, q.tcp_seq), (40000, 22, Some(1000)));
        assert_eq!(q.total_len, 20 + 40 + 1448);
    }

    #[test]
    fn garbage_is_none_not_a_panic() {
        for len in 0..64 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            for link in [0u32, 1, 101, 113, 276, 999] {
                let _ = decode(LinkType(link), &data, len as u32);
            }
        }
    }
}
