//! Crafted edge cases (written with pathdoc-capture's writer, one file per case) analysed by
//! pathdoc and by the real tshark: the tcp.analysis flags and stream numbers must agree packet for
//! packet. Cases: handshake-less start, dup ACKs + fast retransmission, spurious retransmission,
//! out-of-order, lost and ACKed-unseen segments, zero window + probes + window update,
//! keep-alives, window full with scaling, SYN retransmitted and ports reused, IPv6 with an
//! extension header, QinQ VLAN, Linux SLL2, snap-length-truncated frames.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use etherparse::{PacketBuilder, TcpOptionElement};
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::write::{pcap, Frame};
use pathdoc_capture::CaptureReader;

const C: [u8; 4] = [192, 168, 1, 100];
const S: [u8; 4] = [203, 0, 113, 10];

/// One segment of a crafted conversation: time (ms), from the client?, seq, ack, flags, window,
/// payload length, options.
struct Seg {
    ms: f64,
    from_client: bool,
    seq: u32,
    ack: u32,
    flags: &'static str,
    win: u16,
    len: usize,
    opts: Vec<TcpOptionElement>,
}

fn seg(
    ms: f64,
    from_client: bool,
    seq: u32,
    ack: u32,
    flags: &'static str,
    win: u16,
    len: usize,
) -> Seg {
    Seg {
        ms,
        from_client,
        seq,
        ack,
        flags,
        win,
        len,
        opts: Vec::new(),
    }
}

fn build(s: &Seg, cport: u16) -> Vec<u8> {
    let (src, dst, sp, dp) = if s.from_client {
        (C, S, cport, 22)
    } else {
        (S, C, 22, cport)
    };
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, if s.from_client { 64 } else { 57 })
        .tcp(sp, dp, s.seq, s.win);
    for c in s.flags.chars() {
        b = match c {
            'S' => b.syn(),
            'A' => b.ack(s.ack),
            'F' => b.fin(),
            'R' => b.rst(),
            'P' => b.psh(),
            _ => b,
        };
    }
    if !s.opts.is_empty() {
        b = b.options(&s.opts).unwrap();
    }
    let mut out = Vec::new();
    b.write(&mut out, &vec![0x61; s.len]).unwrap();
    out
}

fn frames(segs: &[Seg], cport: u16) -> Vec<Frame> {
    segs.iter()
        .map(|s| {
            Frame::new(
                1_700_000_000_000_000_000 + (s.ms * 1e6) as i64,
                build(s, cport),
            )
        })
        .collect()
}

type PerFrame = BTreeMap<u64, (u64, String)>;

fn ours(path: &Path) -> PerFrame {
    let mut r = CaptureReader::open(path.to_str().unwrap()).unwrap();
    let mut a = Analyzer::new(Options::default());
    let mut m = PerFrame::new();
    while let Some(p) = r.next_packet().unwrap() {
        if let Some(rec) = a.process(&p) {
            let mut f: Vec<String> = rec
                .flags
                .to_string()
                .split(',')
                .filter(|x| *x != "-")
                .map(String::from)
                .collect();
            f.sort();
            m.insert(rec.number, (rec.stream, f.join(",")));
        }
    }
    m
}

fn theirs(path: &Path) -> PerFrame {
    let names = [
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
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(path).args([
        "-Y",
        "tcp && !icmp",
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-e",
        "frame.number",
        "-e",
        "tcp.stream",
    ]);
    for n in names {
        cmd.args(["-e", &format!("tcp.analysis.{n}")]);
    }
    let out = cmd
        .output()
        .expect("tshark must be installed (scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = PerFrame::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let mut f: Vec<String> = names
            .iter()
            .zip(&cols[2..])
            .filter(|(_, v)| !v.is_empty())
            .map(|(n, _)| n.to_string())
            .collect();
        f.sort();
        m.insert(
            cols[0].parse().unwrap(),
            (cols[1].parse().unwrap(), f.join(",")),
        );
    }
    m
}

fn check(name: &str, bytes: Vec<u8>) -> PerFrame {
    let dir = std::env::temp_dir().join(format!("pathdoc-crafted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.pcap"));
    std::fs::write(&path, bytes).unwrap();
    let (a, b) = (theirs(&path), ours(&path));
    let _ = std::fs::remove_file(&path);
    assert_eq!(a, b, "{name}: tshark (left) and pathdoc (right) differ");
    b
}

fn has(m: &PerFrame, frame: u64, flag: &str) -> bool {
    m.get(&frame)
        .is_some_and(|(_, f)| f.split(',').any(|x| x == flag))
}

#[test]
fn loss_recovery_classes() {
    let mut v = vec![
        seg(0.0, true, 1000, 0, "S", 64240, 0),
        seg(10.0, false, 5000, 1001, "SA", 65160, 0),
        seg(20.0, true, 1001, 5001, "A", 502, 0),
    ];
    // five data segments, the second lost
    for i in 0..5u32 {
        if i != 1 {
            v.push(seg(
                21.0 + i as f64 * 0.1,
                true,
                1001 + i * 100,
                5001,
                "A",
                502,
                100,
            ));
        }
    }
    v.push(seg(31.0, false, 5001, 1101, "A", 500, 0)); // ack of #1
    v.push(seg(31.2, false, 5001, 1101, "A", 500, 0)); // dup 1
    v.push(seg(31.4, false, 5001, 1101, "A", 500, 0)); // dup 2
    v.push(seg(31.6, false, 5001, 1101, "A", 500, 0)); // dup 3
    v.push(seg(32.0, true, 1101, 5001, "A", 502, 100)); // fast retransmission
    v.push(seg(42.0, false, 5001, 1501, "A", 500, 0));
    v.push(seg(300.0, true, 1101, 5001, "A", 502, 100)); // spurious: already acked
    v.push(seg(301.0, true, 1501, 5001, "A", 502, 100));
    v.push(seg(301.5, true, 1701, 5001, "A", 502, 100)); // 1601 skipped: lost segment
    v.push(seg(302.0, true, 1601, 5001, "A", 502, 100)); // out of order (within iRTT)
    v.push(seg(320.0, false, 5001, 2001, "A", 500, 0)); // acks 1801..2000 nobody sent: ack unseen
    v.push(seg(900.0, true, 1601, 5001, "A", 502, 100)); // plain retransmission much later
    let m = check("loss", pcap(1, &frames(&v, 40001), false, true));
    assert!(has(&m, 12, "fast_retransmission"), "{m:?}");
    assert!(has(&m, 14, "spurious_retransmission"), "{m:?}");
    assert!(has(&m, 16, "lost_segment"), "{m:?}");
    assert!(has(&m, 17, "out_of_order"), "{m:?}");
}

#[test]
fn windows_and_keepalives() {
    let mut syn = seg(0.0, true, 1, 0, "S", 64240, 0);
    syn.opts = vec![
        TcpOptionElement::MaximumSegmentSize(1460),
        TcpOptionElement::Noop,
        TcpOptionElement::WindowScale(7),
    ];
    let mut synack = seg(5.0, false, 100, 2, "SA", 65160, 0);
    synack.opts = vec![
        TcpOptionElement::MaximumSegmentSize(1460),
        TcpOptionElement::Noop,
        TcpOptionElement::WindowScale(2),
    ];
    let v = vec![
        syn,
        synack,
        seg(10.0, true, 2, 101, "A", 502, 0),
        // server window 250 << 2 = 1000 bytes: the client fills it exactly
        seg(11.0, false, 101, 2, "A", 250, 0),
        seg(12.0, true, 2, 101, "A", 502, 1000),
        // server closes its window, the client probes, the server re-announces zero, then opens
        seg(20.0, false, 101, 1002, "A", 0, 0),
        seg(220.0, true, 1002, 101, "A", 502, 1),
        seg(221.0, false, 101, 1002, "A", 0, 0),
        seg(600.0, false, 101, 1002, "A", 300, 0),
        // idle, then keep-alive and its ACK
        seg(60_000.0, true, 1001, 101, "A", 502, 0),
        seg(60_010.0, false, 101, 1002, "A", 300, 0),
        seg(60_020.0, true, 1002, 101, "FA", 502, 0),
        seg(60_030.0, false, 101, 1003, "FA", 300, 0),
        seg(60_040.0, true, 1003, 102, "A", 502, 0),
    ];
    let m = check("windows", pcap(1, &frames(&v, 40002), true, false));
    assert!(has(&m, 5, "window_full"));
    assert!(has(&m, 6, "zero_window"));
    assert!(has(&m, 7, "zero_window_probe"));
    assert!(has(&m, 10, "keep_alive"));
}

#[test]
fn syn_retransmission_and_port_reuse() {
    let v = vec![
        seg(0.0, true, 1000, 0, "S", 64240, 0),
        seg(1000.0, true, 1000, 0, "S", 64240, 0), // SYN sent again
        seg(1010.0, false, 7000, 1001, "SA", 65160, 0),
        seg(1020.0, true, 1001, 7001, "A", 502, 0),
        seg(1030.0, true, 1001, 7001, "RA", 0, 0),
        // the same ports again with a new ISN: a new stream
        seg(5000.0, true, 900_000, 0, "S", 64240, 0),
        seg(5010.0, false, 3000, 900_001, "SA", 65160, 0),
        seg(5020.0, true, 900_001, 3001, "A", 502, 0),
    ];
    let m = check("reuse", pcap(1, &frames(&v, 40003), false, false));
    assert!(has(&m, 2, "retransmission"), "{m:?}");
    assert_eq!(
        m[&6],
        (1, "reused_ports".to_string()),
        "new ISN, new stream"
    );
}

#[test]
fn no_handshake_ipv6_ext_vlan_sll2_and_snaplen() {
    // Mid-stream start on IPv6 with a hop-by-hop header, in QinQ Ethernet; then the same on SLL2.
    let mut frames_v6 = Vec::new();
    let mut frames_sll2 = Vec::new();
    for (i, (from_client, seq, ack, len)) in [
        (true, 5000u32, 9000u32, 500usize),
        (false, 9000, 5500, 0),
        (true, 5500, 9000, 500),
        (true, 6500, 9000, 500),
        (false, 9000, 7000, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let (src, dst, sp, dp) = if from_client {
            (
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                40004,
                443,
            )
        } else {
            (
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                443,
                40004,
            )
        };
        let mut tcp = Vec::new();
        PacketBuilder::ipv6(src, dst, 64)
            .tcp(sp, dp, seq, 1000)
            .ack(ack)
            .write(&mut tcp, &vec![0u8; len])
            .unwrap();
        // Insert a hop-by-hop options header (8 bytes of padding) after the IPv6 header.
        let mut ip = tcp[..40].to_vec();
        ip[6] = 0; // next header: hop-by-hop
        let plen = u16::from_be_bytes([ip[4], ip[5]]) + 8;
        ip[4..6].copy_from_slice(&plen.to_be_bytes());
        ip.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        ip.extend_from_slice(&tcp[40..]);
        let ts = 1_700_000_000_000_000_000 + i as i64 * 1_000_000;
        let mut eth = vec![
            2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xa8, 0, 10, 0x81, 0x00, 0, 20, 0x86, 0xdd,
        ];
        eth.extend_from_slice(&ip);
        frames_v6.push(Frame::new(ts, eth).snap(100));
        let mut sll2 = vec![
            0x86, 0xdd, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        frames_sll2.push(Frame::new(ts, sll2).snap(90));
    }
    check("v6-qinq", pcap(1, &frames_v6, false, false));
    let m = check("sll2", pcap(276, &frames_sll2, false, false));
    assert!(has(&m, 4, "lost_segment") || has(&m, 3, "lost_segment") || m.len() == 5);
}

#[test]
fn acks_of_data_never_captured() {
    // The capture missed the client's data after its first segment (a tap dropping packets):
    // the first ACK beyond what was seen is flagged; the following ones, with nothing new
    // from the client in between, are not.
    let v = vec![
        seg(0.0, true, 1000, 0, "S", 64240, 0),
        seg(10.0, false, 5000, 1001, "SA", 65160, 0),
        seg(20.0, true, 1001, 5001, "A", 502, 0),
        seg(21.0, true, 1001, 5001, "A", 502, 100),
        seg(31.0, false, 5001, 2001, "A", 500, 0),
        seg(32.0, false, 5001, 3001, "A", 500, 0),
        seg(33.0, false, 5001, 3001, "A", 500, 0),
    ];
    let m = check("unseen", pcap(1, &frames(&v, 40005), false, false));
    let flagged = m
        .values()
        .filter(|(_, f)| f.contains("ack_lost_segment"))
        .count();
    assert_eq!(flagged, 1, "{m:?}");
}

/// `inner` (an Ethernet frame) carried by tunnel `kind`, in an outer Ethernet frame.
fn tunnelled(kind: usize, inner: &[u8]) -> Vec<u8> {
    let ip = &inner[14..];
    let outer_ip = |proto: u8, payload: &[u8]| {
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([198, 51, 100, 1], [198, 51, 100, 2], 64)
            .write(&mut out, etherparse::IpNumber(proto), payload)
            .unwrap();
        out
    };
    let outer_udp = |port: u16, payload: &[u8]| {
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([198, 51, 100, 1], [198, 51, 100, 2], 64)
            .udp(50000, port)
            .write(&mut out, payload)
            .unwrap();
        out
    };
    match kind {
        0 => outer_udp(4789, &[&[0x08, 0, 0, 0, 0, 0, 7, 0][..], inner].concat()),
        1 => outer_ip(47, &[&[0, 0, 0x08, 0x00][..], ip].concat()),
        2 => outer_ip(
            47,
            &[
                &[0x10, 0, 0x88, 0xbe, 0, 0, 0, 1][..],
                &[0x10, 0, 0, 1, 0, 0, 0, 0],
                inner,
            ]
            .concat(),
        ),
        3 => outer_udp(6081, &[&[0, 0, 0x65, 0x58, 0, 0, 7, 0][..], inner].concat()),
        4 => [&[2u8; 12][..], &[0x88, 0x47, 0, 0x01, 0x01, 64], ip].concat(),
        _ => {
            let len = (ip.len() as u16 + 2).to_be_bytes();
            [
                &[2u8; 12][..],
                &[0x88, 0x64, 0x11, 0, 0, 1, len[0], len[1], 0, 0x21],
                ip,
            ]
            .concat()
        }
    }
}

#[test]
fn tunnelled_flows_match_tshark() {
    // The same lossy exchange inside VXLAN, GRE, ERSPAN II, Geneve, MPLS and PPPoE, interleaved
    // in one file: flags and tcp.stream numbers must match tshark's, which decapsulates them all.
    let v = vec![
        seg(0.0, true, 1000, 0, "S", 64240, 0),
        seg(10.0, false, 5000, 1001, "SA", 65160, 0),
        seg(20.0, true, 1001, 5001, "A", 502, 0),
        seg(21.0, true, 1001, 5001, "A", 502, 100),
        seg(21.2, true, 1201, 5001, "A", 502, 100), // 1101 lost: previous segment not captured
        seg(31.0, false, 5001, 1101, "A", 500, 0),
        seg(31.2, false, 5001, 1101, "A", 500, 0), // dup ACK
        seg(31.4, false, 5001, 1101, "A", 500, 0), // dup ACK
        seg(32.0, true, 1101, 5001, "A", 502, 100), // fast retransmission
        seg(42.0, false, 5001, 1301, "A", 500, 0),
    ];
    let mut all = Vec::new();
    for kind in 0..6usize {
        for (i, f) in frames(&v, 41000 + kind as u16).into_iter().enumerate() {
            let mut t = Frame::new(
                f.ts_ns + kind as i64 * 1000 + i as i64,
                tunnelled(kind, &f.data),
            );
            t.orig_len = t.data.len() as u32;
            all.push(t);
        }
    }
    all.sort_by_key(|f| f.ts_ns);
    let m = check("tunnels", pcap(1, &all, false, true));
    let streams: std::collections::BTreeSet<u64> = m.values().map(|v| v.0).collect();
    assert_eq!(streams.len(), 6, "{m:?}");
    let fast = m
        .values()
        .filter(|v| v.1.contains("fast_retransmission"))
        .count();
    assert_eq!(fast, 6, "{m:?}");
}

/// The IPv4 fragments of an Ethernet frame `eth`: its IP payload split at `at` (a multiple of
/// 8), each piece with its own IP header (length, MF, offset, checksum).
fn fragments(eth: &[u8], at: usize) -> [Vec<u8>; 2] {
    let (head, ip) = eth.split_at(14);
    let (hdr, payload) = ip.split_at(20);
    let piece = |range: std::ops::Range<usize>, more: bool| {
        let mut h = hdr.to_vec();
        let len = (20 + range.len()) as u16;
        h[2..4].copy_from_slice(&len.to_be_bytes());
        let fo = (u16::from(more) << 13) | (range.start / 8) as u16;
        h[6..8].copy_from_slice(&fo.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let sum: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let sum = (sum & 0xffff) + (sum >> 16);
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        [head, &h, &payload[range]].concat()
    };
    [piece(0..at, true), piece(at..payload.len(), false)]
}

#[test]
fn fragmented_segments_keep_tshark_stream_numbers() {
    // Issue 17: tshark reassembles IPv4 fragments and numbers the conversation at the frame that
    // completes the datagram (or at a first fragment the snap length cut short); skipping them
    // shifted every later stream. Each fragmented conversation starts with the fragmented
    // segment (a capture begun mid-connection), each is followed by a new connection.
    let mut all = Vec::new();
    let mut t = 0.0;
    for kind in 0..4u16 {
        let cport = 42000 + kind;
        let data = build(&seg(0.0, true, 5000, 9000, "A", 500, 100), cport);
        let [first, rest] = fragments(&data, 40);
        let mut push = |bytes: Vec<u8>, snap: Option<usize>| {
            t += 1.0;
            let f = Frame::new(1_700_000_000_000_000_000 + (t * 1e6) as i64, bytes);
            all.push(match snap {
                Some(n) => f.snap(n),
                None => f,
            });
        };
        match kind {
            0 => (push(first, None), push(rest, None)),
            1 => (push(rest, None), push(first, None)), // out of order: completes at the first
            2 => (push(first, Some(14 + 20 + 24)), push(rest, None)), // cut short: TCP by itself
            _ => (push(first, None), ()),               // never completed: no stream
        };
        for s in [
            seg(0.0, false, 9000, 5100, "A", 500, 0),
            seg(0.0, true, 5100, 9000, "A", 500, 100),
        ] {
            push(build(&s, cport), None);
        }
        push(
            build(&seg(0.0, true, 1000, 0, "S", 64240, 0), 43000 + kind),
            None,
        );
    }
    let dir = std::env::temp_dir().join(format!("pathdoc-crafted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fragments.pcap");
    std::fs::write(&path, pcap(1, &all, false, false)).unwrap();
    let (mut a, b) = (theirs(&path), ours(&path));
    let _ = std::fs::remove_file(&path);
    // The cut-short first fragment (frame 11): tshark numbers it (stream 4) but gives it no
    // length and no analysis; `--flags` lists analysed segments only. Its number still counts.
    assert_eq!(a.remove(&11), Some((4, String::new())), "{a:?}");
    assert_eq!(a, b, "tshark (left) and pathdoc (right) differ");
    let streams: std::collections::BTreeSet<u64> = b.values().map(|v| v.0).collect();
    assert_eq!(streams.len(), 8, "{b:?}");
}
