//! Tunnels the decoder looks through to reach the TCP inside, as Wireshark does by default:
//! GRE (with key/sequence/checksum, carrying IP, Ethernet, ERSPAN type II/III, WCCP redirects,
//! MPLS), VXLAN (UDP 4789), Geneve (UDP 6081), GTP-U (UDP 2152), IP in IP (IPv4/IPv6 in IPv4/IPv6:
//! 6in4, 4in6), and at the Ethernet layer MPLS label stacks and PPPoE sessions. Each step only
//! names where the inner packet starts and what it is; [`crate::decode`] decodes it.

/// What starts at the inner offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inner {
    /// An Ethernet frame (VLAN tags allowed).
    Ethernet,
    /// An IPv4 or IPv6 packet (the version nibble decides).
    Ip,
    /// A payload of this ethertype (MPLS inside GRE).
    Ethertype(u16),
}

const VXLAN_PORT: u16 = 4789;
const GENEVE_PORT: u16 = 6081;
const GTP_U_PORT: u16 = 2152;

/// The packet inside an IP payload of protocol `protocol`, as (what, offset into the payload).
pub(crate) fn in_ip_payload(protocol: u8, l4: &[u8]) -> Option<(Inner, usize)> {
    match protocol {
        4 | 41 => Some((Inner::Ip, 0)),
        47 => gre(l4),
        17 => {
            let (src, dst) = (be16(l4, 0)?, be16(l4, 2)?);
            let port = |p: u16| src == p || dst == p;
            if port(VXLAN_PORT) {
                // 8-byte VXLAN header with the I flag (VNI valid), then Ethernet.
                (l4.get(8)? & 0x08 != 0).then_some((Inner::Ethernet, 16))
            } else if port(GENEVE_PORT) {
                geneve(l4)
            } else if port(GTP_U_PORT) {
                gtp_u(l4)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn gre(g: &[u8]) -> Option<(Inner, usize)> {
    let flags = be16(g, 0)?;
    let proto = be16(g, 2)?;
    if flags & 0x7 != 0 {
        return None; // version 1 (PPTP's enhanced GRE) carries PPP
    }
    let mut off = 4;
    for bit in [0x8000u16, 0x2000, 0x1000] {
        // checksum (+ reserved), key, sequence number
        if flags & bit != 0 {
            off += 4;
        }
    }
    let sequenced = flags & 0x1000 != 0;
    match proto {
        0x0800 | 0x86dd => Some((Inner::Ip, off)),
        0x6558 => Some((Inner::Ethernet, off)),
        // ERSPAN type II has an 8-byte header (type I, without GRE sequence numbers, none).
        0x88be => Some((Inner::Ethernet, if sequenced { off + 8 } else { off })),
        // ERSPAN type III: 12 bytes, plus an 8-byte platform subheader when its O bit is set.
        0x22eb => {
            let o_bit = g.get(off + 11)? & 0x01 != 0;
            Some((Inner::Ethernet, off + 12 + if o_bit { 8 } else { 0 }))
        }
        // WCCP: a 4-byte redirect header unless IPv4 follows at once.
        0x883e => {
            let v = g.get(off)? >> 4;
            Some((Inner::Ip, if v == 4 { off } else { off + 4 }))
        }
        0x8847 | 0x8848 => Some((Inner::Ethertype(proto), off)),
        _ => None,
    }
}

fn geneve(u: &[u8]) -> Option<(Inner, usize)> {
    let h = u.get(8..)?;
    if h.first()? >> 6 != 0 {
        return None; // version 0 only
    }
    let opts = usize::from(h.first()? & 0x3f) * 4;
    let off = 8 + 8 + opts;
    match be16(h, 2)? {
        0x6558 => Some((Inner::Ethernet, off)),
        0x0800 | 0x86dd => Some((Inner::Ip, off)),
        _ => None,
    }
}

fn gtp_u(u: &[u8]) -> Option<(Inner, usize)> {
    let flags = *u.get(8)?;
    // Version 1, protocol type GTP, message type 255 (G-PDU: user data).
    if flags >> 5 != 1 || flags & 0x10 == 0 || *u.get(9)? != 255 {
        return None;
    }
    let mut off = 8 + 8;
    if flags & 0x07 != 0 {
        // sequence number, N-PDU number, next extension header type
        let mut next = *u.get(8 + 11)?;
        off += 4;
        while next != 0 {
            let len = usize::from(*u.get(off)?) * 4;
            if len == 0 {
                return None;
            }
            next = *u.get(off + len - 1)?;
            off += len;
        }
    }
    Some((Inner::Ip, off))
}

/// Past an MPLS label stack: the offset of what follows the bottom label, when it is IP.
pub(crate) fn mpls(data: &[u8]) -> Option<usize> {
    let mut off = 0;
    for _ in 0..16 {
        let bottom = data.get(off + 2)? & 0x01 != 0;
        off += 4;
        if bottom {
            // No payload type in MPLS: IPv4/IPv6 by the version nibble (a pseudowire control
            // word starts with 0 and is not decoded).
            return matches!(data.get(off)? >> 4, 4 | 6).then_some(off);
        }
    }
    None
}

/// Past a PPPoE session header and the PPP protocol: the IP packet's offset.
pub(crate) fn pppoe_session(data: &[u8]) -> Option<usize> {
    match be16(data, 6)? {
        0x0021 | 0x0057 => Some(8),
        _ => None,
    }
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    let b = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}
