//! TCP inside tunnels decodes to the inner connection (as Wireshark shows it), IP lengths are
//! capped at the frame, and a pcap link type with FCS bits is still Ethernet.

use std::net::IpAddr;

use etherparse::PacketBuilder;
use pathdoc_capture::source::{from_reader, InputKind};
use pathdoc_capture::write::{pcap, Frame};
use pathdoc_capture::{decode, CaptureReader, LinkType, L4};

const INNER_SRC: [u8; 4] = [10, 1, 0, 1];
const INNER_DST: [u8; 4] = [10, 2, 0, 2];

/// The inner IPv4/TCP packet (no link layer), 100 bytes of payload.
fn inner_ip() -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4(INNER_SRC, INNER_DST, 64)
        .tcp(40000, 22, 1000, 65535)
        .ack(5)
        .write(&mut out, &[0u8; 100])
        .unwrap();
    out
}

fn inner_ethernet() -> Vec<u8> {
    let mut out = vec![0xaa; 12];
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    out.extend(inner_ip());
    out
}

/// An outer Ethernet/IPv4 frame carrying `payload` as IP protocol `proto`.
fn outer_ip(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
        .write(&mut out, etherparse::IpNumber(proto), payload)
        .unwrap();
    out
}

fn outer_udp(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
        .udp(50000, port)
        .write(&mut out, payload)
        .unwrap();
    out
}

fn assert_inner_tcp(frame: &[u8], what: &str) {
    let d = decode(LinkType::ETHERNET, frame, frame.len() as u32)
        .unwrap_or_else(|| panic!("{what}: not decoded"));
    assert_eq!(d.ip.src, IpAddr::from(INNER_SRC), "{what}");
    assert_eq!(d.ip.dst, IpAddr::from(INNER_DST), "{what}");
    match d.l4 {
        L4::Tcp(t) => {
            assert_eq!((t.src_port, t.dst_port, t.seq), (40000, 22, 1000), "{what}");
            assert_eq!(t.seg_len, Some(100), "{what}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn tcp_inside_tunnels_is_the_inner_connection() {
    let ip = inner_ip();
    let eth = inner_ethernet();
    // GRE carrying IPv4, without and with checksum, key and sequence number.
    assert_inner_tcp(&outer_ip(47, &cat(&[&[0, 0, 0x08, 0x00], &ip])), "GRE");
    assert_inner_tcp(
        &outer_ip(47, &cat(&[&[0xb0, 0, 0x08, 0x00], &[0; 12], &ip])),
        "GRE with checksum, key, sequence",
    );
    // Transparent Ethernet bridging over GRE (gretap).
    assert_inner_tcp(&outer_ip(47, &cat(&[&[0, 0, 0x65, 0x58], &eth])), "gretap");
    // ERSPAN type II (GRE with a sequence number, 8-byte ERSPAN header).
    assert_inner_tcp(
        &outer_ip(
            47,
            &cat(&[
                &[0x10, 0, 0x88, 0xbe],
                &[0; 4],
                &[0x10, 0, 0, 1, 0, 0, 0, 0],
                &eth,
            ]),
        ),
        "ERSPAN II",
    );
    // ERSPAN type III with the platform subheader (O bit).
    let mut e3 = vec![0x20, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x01];
    e3.extend_from_slice(&[0; 8]);
    assert_inner_tcp(
        &outer_ip(47, &cat(&[&[0x10, 0, 0x22, 0xeb], &[0; 4], &e3, &eth])),
        "ERSPAN III",
    );
    // VXLAN (I flag, VNI 42), Geneve (one 8-byte option, Ethernet), GTP-U (G-PDU, no extensions).
    assert_inner_tcp(
        &outer_udp(4789, &cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &eth])),
        "VXLAN",
    );
    assert_inner_tcp(
        &outer_udp(
            6081,
            &cat(&[&[0x02, 0, 0x65, 0x58, 0, 0, 42, 0], &[0; 8], &eth]),
        ),
        "Geneve",
    );
    let len = (ip.len() as u16).to_be_bytes();
    assert_inner_tcp(
        &outer_udp(
            2152,
            &cat(&[&[0x30, 0xff, len[0], len[1], 0, 0, 0, 1], &ip]),
        ),
        "GTP-U",
    );
    // GTP-U with a sequence number and one PDU-session extension header.
    assert_inner_tcp(
        &outer_udp(
            2152,
            &cat(&[
                &[0x34, 0xff, 0, 0, 0, 0, 0, 1],
                &[0, 0, 0, 0x85],
                &[1, 0x10, 1, 0],
                &ip,
            ]),
        ),
        "GTP-U with extension header",
    );
    // IPv4 in IPv4, and IPv6 in IPv4 (6in4) of an IPv6 TCP packet.
    assert_inner_tcp(&outer_ip(4, &ip), "IP in IP");
    let mut v6 = Vec::new();
    PacketBuilder::ipv6([0x20; 16], [0x21; 16], 64)
        .tcp(40000, 22, 1000, 65535)
        .write(&mut v6, &[0u8; 10])
        .unwrap();
    let d = decode(LinkType::ETHERNET, &outer_ip(41, &v6), 200).unwrap();
    assert_eq!(d.ip.version, 6);
    assert!(matches!(d.l4, L4::Tcp(_)), "6in4: {:?}", d.l4);
}

#[test]
fn tcp_behind_mpls_and_pppoe() {
    let ip = inner_ip();
    // Two MPLS labels, the second with bottom-of-stack.
    let mpls = cat(&[
        &[2; 12],
        &[0x88, 0x47],
        &[0, 0x01, 0x00, 64],
        &[0, 0x02, 0x01, 64],
        &ip,
    ]);
    assert_inner_tcp(&mpls, "MPLS");
    // PPPoE session (code 0), PPP protocol IPv4.
    let plen = (ip.len() as u16 + 2).to_be_bytes();
    let pppoe = cat(&[
        &[2; 12],
        &[0x88, 0x64],
        &[0x11, 0, 0, 1, plen[0], plen[1]],
        &[0, 0x21],
        &ip,
    ]);
    assert_inner_tcp(&pppoe, "PPPoE");
}

#[test]
fn ip_length_is_capped_at_the_frame() {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(INNER_SRC, INNER_DST, 64)
        .tcp(40000, 22, 1000, 65535)
        .write(&mut frame, &[0u8; 100])
        .unwrap();
    // Claim 1500 bytes of IP in a 154-byte frame (zeek's reassembly.pcap, fuzzed files).
    frame[16..18].copy_from_slice(&1500u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &frame, frame.len() as u32).unwrap();
    assert_eq!(d.ip.total_len, 140);
    match d.l4 {
        L4::Tcp(t) => assert_eq!(t.seg_len, Some(100)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fcs_bits_in_the_pcap_link_type_still_mean_ethernet() {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(INNER_SRC, INNER_DST, 64)
        .tcp(40000, 22, 1000, 65535)
        .write(&mut frame, &[])
        .unwrap();
    frame.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // the FCS
                                                        // F bit set, FCS length 2 × 16 bits, link type 1.
    let bytes = pcap(0x2400_0001, &[Frame::new(0, frame)], false, false);
    let input = from_reader(
        "mem",
        InputKind::File,
        None,
        Box::new(std::io::Cursor::new(bytes)),
    );
    let mut r = CaptureReader::new(input).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!(p.link, LinkType::ETHERNET);
    assert!(decode(p.link, p.data, p.orig_len).is_some());
}

#[test]
fn tcp_over_ppp_and_mpls_over_ppp() {
    let ip = inner_ip();
    let ppp = LinkType(9);
    assert!(ppp.supported());
    let d = decode(
        ppp,
        &cat(&[&[0xff, 0x03, 0x00, 0x21], &ip]),
        4 + ip.len() as u32,
    )
    .unwrap();
    assert!(matches!(d.l4, L4::Tcp(_)));
    let mpls = cat(&[&[0xff, 0x03, 0x02, 0x81], &[0, 0x01, 0x01, 64], &ip]);
    let d = decode(ppp, &mpls, mpls.len() as u32).unwrap();
    assert_eq!(d.ip.src, IpAddr::from(INNER_SRC));
}
