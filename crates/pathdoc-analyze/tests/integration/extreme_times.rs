//! Capture timestamps are untrusted input: a damaged or crafted file can jump between 1970 and
//! 2106 (a pcap's whole 32-bit range) or, through a pcapng offset, to the ends of i64. Durations
//! built from them must neither overflow (a panic with overflow checks, garbage without) nor go
//! negative. Regression test for a fuzz find: three zero-window intervals of ~136 years each
//! overflowed the closed-window total.

use etherparse::PacketBuilder;
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::{LinkType, Packet};

const C: [u8; 4] = [192, 168, 1, 100];
const S: [u8; 4] = [203, 0, 113, 10];

fn segment(from_client: bool, seq: u32, ack: u32, syn: bool, win: u16, len: usize) -> Vec<u8> {
    let (src, dst, sp, dp) = if from_client {
        (C, S, 40000, 443)
    } else {
        (S, C, 443, 40000)
    };
    let mut b = PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(src, dst, 64)
        .tcp(sp, dp, seq, win);
    if syn {
        b = b.syn();
    }
    if !(syn && from_client) {
        b = b.ack(ack);
    }
    let mut out = Vec::new();
    b.write(&mut out, &vec![0u8; len]).unwrap();
    out
}

fn run(times: &[i64]) -> pathdoc_analyze::CaptureAnalysis {
    // Handshake, then the server's window closes and reopens again and again while the client
    // sends; each packet gets the next of `times` (cycled).
    let mut frames = vec![
        segment(true, 1000, 0, true, 64240, 0),
        segment(false, 5000, 1001, true, 65160, 0),
        segment(true, 1001, 5001, false, 502, 0),
    ];
    let mut seq = 1001;
    for i in 0..12 {
        frames.push(segment(true, seq, 5001, false, 502, 100));
        seq += 100;
        let win = if i % 2 == 0 { 0 } else { 4000 };
        frames.push(segment(false, 5001, seq, false, win, 0));
    }
    let mut a = Analyzer::new(Options {
        list_all: true,
        ..Options::default()
    });
    for (n, f) in frames.iter().enumerate() {
        a.process(&Packet {
            number: n as u64 + 1,
            ts_ns: times[n % times.len()],
            link: LinkType::ETHERNET,
            data: f,
            orig_len: f.len() as u32,
            offset: 24,
        });
    }
    a.finish()
}

#[test]
fn timestamps_at_the_ends_of_their_range_neither_overflow_nor_go_negative() {
    let pcap_max = i64::from(u32::MAX) * 1_000_000_000 + 999_999_999;
    for times in [
        vec![0, pcap_max],
        vec![pcap_max, 0],
        vec![i64::MIN, i64::MAX],
        vec![i64::MAX, i64::MIN, 0],
        vec![1_700_000_000_000_000_000, 0, pcap_max, i64::MAX],
    ] {
        let result = run(&times);
        assert_eq!(result.listed.len(), 1, "{times:?}");
        for l in &result.listed {
            let s = &l.summary;
            for d in [&s.client_to_server, &s.server_to_client] {
                assert!(d.zero_window_s >= 0.0, "{times:?}: {}", d.zero_window_s);
                assert!(d.longest_zero_window_s >= 0.0, "{times:?}");
            }
            let _ = pathdoc_analyze::diagnose::connection(s);
            serde_json::to_string(s).unwrap();
        }
    }
}

/// The fuzzer's input (a mutated gzip-compressed loopback pcap): its timestamps jump across the
/// whole 32-bit range.
const FUZZ_FIND: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x08, 0x17, 0xe4, 0x81, 0x04, 0x6b, 0x00, 0x03, 0x6c, 0x6f, 0x2e, 0x70, 0x63,
    0x61, 0x70, 0x00, 0xed, 0xdc, 0x31, 0x6b, 0x13, 0x61, 0x18, 0xc0, 0xf1, 0xe7, 0xd2, 0x6b, 0x09,
    0xc9, 0x12, 0x1d, 0x6a, 0x97, 0xb3, 0x6b, 0x15, 0xa4, 0x52, 0x02, 0x22, 0x1c, 0x72, 0x4d, 0x8c,
    0xd1, 0x43, 0xfc, 0x00, 0x05, 0x97, 0xa0, 0x41, 0x68, 0x9b, 0xe0, 0x60, 0x9b, 0x36, 0x68, 0xaf,
    0xe0, 0x27, 0x70, 0xe9, 0xd8, 0x3a, 0x26, 0xa3, 0xa3, 0x9b, 0x15, 0x07, 0x71, 0x8c, 0xd2, 0x41,
    0x70, 0xe9, 0x66, 0xb6, 0xd0, 0x45, 0x53, 0x12, 0xdf, 0xe7, 0xea, 0x69, 0x72, 0xc6, 0x9b, 0x04,
    0x97, 0xff, 0x0f, 0xde, 0x23, 0xbc, 0x1c, 0x7f, 0x9e, 0xdc, 0x07, 0x78, 0x3e, 0xbe, 0x7d, 0xf5,
    0x32, 0x25, 0xb6, 0xfc, 0x66, 0x8b, 0x65, 0x9e, 0xb3, 0xbb, 0xf6, 0xea, 0xc5, 0xa5, 0x69, 0xf1,
    0xcd, 0x6f, 0x5f, 0xc6, 0xa5, 0xa5, 0x24, 0xe2, 0xf6, 0x8a, 0x9e, 0x78, 0x33, 0xfe, 0xe8, 0xc6,
    0x8e, 0x88, 0xa5, 0xa7, 0xdb, 0xad, 0x64, 0x9d, 0x4e, 0xad, 0xaf, 0x6f, 0x1c, 0xb4, 0x86, 0x47,
    0x83, 0xab, 0x22, 0x29, 0x7b, 0x78, 0x64, 0xa7, 0xd2, 0x19, 0xd7, 0x6d, 0xad, 0xeb, 0xbd, 0x35,
    0x35, 0x95, 0xd1, 0xf2, 0xe5, 0xc4, 0xb2, 0x88, 0x96, 0xdd, 0xd7, 0x51, 0xb9, 0x92, 0x7e, 0xcc,
    0xcc, 0x09, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0x01,
    0x00, 0x00, 0x07, 0x9c, 0x1f, 0x7e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e,
    0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x3f, 0x3b, 0x7a, 0xd2, 0x03, 0xc7, 0x00, 0x00,
];

#[test]
fn the_fuzz_find_reads_and_analyses_without_panic() {
    let input = pathdoc_capture::source::from_reader(
        "fuzz",
        pathdoc_capture::InputKind::File,
        None,
        Box::new(std::io::Cursor::new(FUZZ_FIND.to_vec())),
    );
    let mut reader = pathdoc_capture::CaptureReader::new(input).unwrap();
    let mut a = Analyzer::new(Options {
        list_all: true,
        ..Options::default()
    });
    let mut packets = 0;
    while let Ok(Some(p)) = reader.next_packet() {
        a.process(&p);
        packets += 1;
    }
    assert!(packets > 0);
    for l in &a.finish().listed {
        let _ = pathdoc_analyze::diagnose::connection(&l.summary);
    }
}
