//! Diagnoses that the lab scenarios do not produce, from crafted captures: a RST forged by a
//! middlebox (TTL mismatch), a zero-window stall, ICMP too-big ignored by a sender that shrinks
//! its retransmissions step by step (seed 003), and a handshake-less connection still analysed.

use etherparse::PacketBuilder;
use pathdoc_capture::write::Frame;
use pathdoc_core::{Direction, Finding, Status};

use crate::common;

const C: [u8; 4] = [192, 168, 1, 100];
const S: [u8; 4] = [203, 0, 113, 10];
const T0: i64 = 1_700_000_000_000_000_000;

/// An Ethernet/IPv4/TCP packet of this test's one connection, from either end.
fn tcp_builder(
    from_client: bool,
    seq: u32,
    win: u16,
    ttl: u8,
) -> etherparse::PacketBuilderStep<etherparse::TcpHeader> {
    let (src, dst, sp, dp) = if from_client {
        (C, S, 40000, 443)
    } else {
        (S, C, 443, 40000)
    };
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(src, dst, ttl)
        .tcp(sp, dp, seq, win)
}

#[allow(clippy::too_many_arguments)]
fn tcp(
    ms: i64,
    from_client: bool,
    seq: u32,
    ack: u32,
    flags: &str,
    win: u16,
    len: usize,
    ttl: u8,
) -> Frame {
    let mut b = tcp_builder(from_client, seq, win, ttl);
    for c in flags.chars() {
        b = match c {
            'S' => b.syn(),
            'A' => b.ack(ack),
            'R' => b.rst(),
            'F' => b.fin(),
            _ => b,
        };
    }
    let mut out = Vec::new();
    b.write(&mut out, &vec![0u8; len]).unwrap();
    Frame::new(T0 + ms * 1_000_000, out)
}

fn findings(frames: &[Frame]) -> Vec<Finding> {
    let res = common::analyse_listing_all(frames);
    res.listed.into_iter().flat_map(|l| l.findings).collect()
}

fn handshake() -> Vec<Frame> {
    vec![
        tcp(0, true, 1000, 0, "S", 64240, 0, 64),
        tcp(10, false, 5000, 1001, "SA", 65160, 0, 52),
        tcp(20, true, 1001, 5001, "A", 502, 0, 64),
    ]
}

#[test]
fn forged_rst_is_named_by_its_ttl() {
    let mut f = handshake();
    for i in 0..5u32 {
        f.push(tcp(
            30 + i as i64,
            true,
            1001 + i * 100,
            5001,
            "A",
            502,
            100,
            64,
        ));
        f.push(tcp(
            40 + i as i64,
            false,
            5001,
            1101 + i * 100,
            "A",
            500,
            0,
            52,
        ));
    }
    // "From the server", but 3 hops closer than the server's packets.
    f.push(tcp(100, false, 5001, 1501, "RA", 0, 0, 61));
    let all = findings(&f);
    let rst = all
        .iter()
        .find(|x| x.id == "rst-injected")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(rst.status, Status::Fail);
    assert_eq!(rst.direction, Some(Direction::ServerToClient));
    assert!(
        rst.title.contains("TTL 61") && rst.title.contains("TTL 52"),
        "{}",
        rst.title
    );
    // The same RST with the server's own TTL is an ordinary reset.
    let n = f.len();
    f[n - 1] = tcp(100, false, 5001, 1501, "RA", 0, 0, 52);
    assert!(findings(&f).iter().all(|x| x.id != "rst-injected"));
}

#[test]
fn zero_window_stall_blames_the_receiving_application() {
    let mut f = handshake();
    f.push(tcp(30, true, 1001, 5001, "A", 502, 1000, 64));
    f.push(tcp(31, false, 5001, 2001, "A", 0, 0, 52));
    // probes every second for three seconds, the window stays shut
    for i in 0..3u32 {
        f.push(tcp(
            1031 + i as i64 * 1000,
            true,
            2001,
            5001,
            "A",
            502,
            1,
            64,
        ));
        f.push(tcp(
            1032 + i as i64 * 1000,
            false,
            5001,
            2001,
            "A",
            0,
            0,
            52,
        ));
    }
    f.push(tcp(4500, false, 5001, 2001, "A", 500, 0, 52));
    let all = findings(&f);
    let z = all
        .iter()
        .find(|x| x.id == "zero-window-stall")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(z.direction, Some(Direction::ClientToServer));
    assert!(
        z.title.contains("the server stopped reading"),
        "{}",
        z.title
    );
}

#[test]
fn too_big_ignored_and_shrinking_retransmissions() {
    let mut f = handshake();
    // The server sends 1448-byte segments; a router answers each with "fragmentation needed,
    // MTU 1420"; the server keeps resending, 40 bytes smaller each time (seed 003).
    let icmp_for = |ms: i64, quoted: &Frame| {
        let mut body = vec![3u8, 4, 0, 0, 0, 0, 0x05, 0x8c];
        body.extend_from_slice(&quoted.data[14..14 + 28]);
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([100, 64, 1, 1], S, 63)
            .write(&mut out, etherparse::IpNumber::ICMP, &body)
            .unwrap();
        Frame::new(T0 + ms * 1_000_000, out)
    };
    let first = tcp(30, false, 5001, 1001, "A", 500, 1448, 64);
    let icmp = icmp_for(31, &first);
    f.push(first);
    f.push(icmp);
    let mut size = 1448;
    for i in 1..7i64 {
        size -= 40;
        let seg = tcp(30 + i * 300, false, 5001, 1001, "A", 500, size, 64);
        let icmp = icmp_for(31 + i * 300, &seg);
        f.push(seg);
        if size + 40 > 1380 {
            f.push(icmp);
        }
        f.push(tcp(35 + i * 300, true, 1001, 5001, "A", 502, 0, 64));
    }
    let all = findings(&f);
    let t = all
        .iter()
        .find(|x| x.id == "pmtud-too-big-ignored")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(t.direction, Some(Direction::ServerToClient));
    assert!(t.title.contains("MTU 1420"), "{}", t.title);
    assert!(
        t.summary.contains("shrinking them step by step"),
        "{}",
        t.summary
    );
}

#[test]
fn connection_without_handshake_is_analysed() {
    // Mid-stream: 200 data segments client→server with every 20th sent twice.
    let mut f = Vec::new();
    let mut seq = 7_000_000u32;
    for i in 0..200i64 {
        f.push(tcp(i, true, seq, 9000, "A", 502, 1000, 64));
        if i % 20 == 5 {
            f.push(tcp(i, true, seq, 9000, "A", 502, 1000, 64));
        }
        seq += 1000;
        f.push(tcp(i, false, 9000, seq, "A", 500, 0, 52));
    }
    let all = findings(&f);
    let loss = all
        .iter()
        .find(|x| x.id == "tcp-loss-one-direction")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(loss.direction, Some(Direction::ClientToServer));
}

/// A SYN or SYN-ACK announcing `mss`.
fn syn_with_mss(ms: i64, from_client: bool, seq: u32, ack: u32, mss: u16) -> Frame {
    let mut b = tcp_builder(from_client, seq, 64240, 64).syn();
    if !from_client {
        b = b.ack(ack);
    }
    let b = b
        .options(&[etherparse::TcpOptionElement::MaximumSegmentSize(mss)])
        .unwrap();
    let mut out = Vec::new();
    b.write(&mut out, &[]).unwrap();
    Frame::new(T0 + ms * 1_000_000, out)
}

/// A download captured on the client through a PMTUD black hole: the server's full-size data
/// never arrives, but its ACK of the client's FIN carries a sequence number 3 segments further
/// on. Before, this capture was judged healthy.
fn black_holed_download(fill_at: Option<i64>, client_acks_all: bool) -> Vec<Frame> {
    let mut f = vec![
        syn_with_mss(0, true, 1000, 0, 1460),
        syn_with_mss(10, false, 5000, 1001, 1460),
        tcp(20, true, 1001, 5001, "A", 502, 0, 64),
        // The request, and the server's ACK of it (small packets pass).
        tcp(30, true, 1001, 5001, "A", 502, 100, 64),
        tcp(40, false, 5001, 1101, "A", 500, 0, 52),
    ];
    // Three 1448-byte segments (seq 5001..9345) vanish on the way. The client gives up.
    f.push(tcp(2000, true, 1101, 5001, "FA", 502, 0, 64));
    f.push(tcp(2010, false, 9345, 1102, "A", 500, 0, 52));
    let client_ack = if client_acks_all {
        // Captured in the middle: the client did get the bytes and acknowledges them.
        f.push(tcp(2020, true, 1102, 9345, "A", 502, 0, 64));
        9345
    } else {
        5001
    };
    if let Some(t) = fill_at {
        f.push(tcp(t, false, 5001, 1102, "A", 500, 1448, 52));
    }
    f.push(tcp(3500, false, 9345, 1102, "A", 500, 0, 52));
    f.push(tcp(4000, true, 1102, client_ack, "R", 0, 0, 64));
    f
}

#[test]
fn a_black_hole_seen_from_the_receiver_is_named() {
    let all = findings(&black_holed_download(None, false));
    let f = all
        .iter()
        .find(|x| x.id == "pmtud-black-hole")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(f.status, Status::Fail);
    assert_eq!(f.direction, Some(Direction::ServerToClient));
    assert!(f.title.contains("4344 B"), "{}", f.title);
    assert!(f
        .remedies
        .iter()
        .any(|r| r.host == Some(pathdoc_core::Host::Server)));
    // A retransmission that fills the gap, or a client that acknowledged the bytes (a capture in
    // the middle that missed them): no black hole.
    let filled = findings(&black_holed_download(Some(2500), false));
    assert!(
        filled.iter().all(|x| x.id != "pmtud-black-hole"),
        "{filled:#?}"
    );
    let acked = findings(&black_holed_download(None, true));
    assert!(
        acked.iter().all(|x| x.id != "pmtud-black-hole"),
        "{acked:#?}"
    );
}

#[test]
fn a_black_hole_from_the_sender_is_bounded_by_what_got_through() {
    // Captured on the server: the client's 1 200-byte request crossed the path (the other
    // way), the server's 89-byte reply header was acknowledged, its first full-size packet
    // (1 500 B) is sent five times and never acknowledged while the client's small ACKs pass.
    // Before, the bound was the largest packet acknowledged: "between 89 B and 1499 B".
    let mut f = vec![
        syn_with_mss(0, true, 1000, 0, 1460),
        syn_with_mss(10, false, 5000, 1001, 1460),
        tcp(20, true, 1001, 5001, "A", 502, 0, 64),
        tcp(30, true, 1001, 5001, "A", 502, 1160, 64),
        tcp(40, false, 5001, 2161, "A", 500, 49, 64),
        tcp(60, true, 2161, 5050, "A", 502, 0, 52),
    ];
    for (i, ms) in [70, 300, 700, 1500, 3100].into_iter().enumerate() {
        f.push(tcp(ms, false, 5050, 2161, "A", 500, 1460, 64));
        if i > 0 {
            f.push(tcp(ms + 30, true, 2161, 5050, "A", 502, 0, 52));
        }
    }
    let all = findings(&f);
    let b = all
        .iter()
        .find(|x| x.id == "pmtud-black-hole")
        .unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(b.status, Status::Fail, "{b:#?}");
    assert!(
        b.title
            .contains("between 1200 B (largest packet from the client")
            && b.title.contains("1499 B"),
        "{}",
        b.title
    );
    assert!(
        b.evidence
            .iter()
            .any(|e| e.name == "full-size packet for the SYNs' MSS"),
        "{b:#?}"
    );
}
