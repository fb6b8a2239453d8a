//! Every container variant reads back the same packets; damaged inputs give the packets before
//! the damage and an error naming its byte offset; garbage never panics.

use std::io::Write;

use etherparse::PacketBuilder;
use pathdoc_capture::source::{from_reader, InputKind};
use pathdoc_capture::write::{pcap, pcapng, Frame, Section};
use pathdoc_capture::{decode, CaptureError, CaptureReader, LinkType, L4};

fn tcp_frame(seq: u32, payload: usize) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1])
        .ipv4([192, 168, 1, 100], [203, 0, 113, 10], 64)
        .tcp(40000, 22, seq, 65535)
        .ack(1)
        .write(&mut out, &vec![0u8; payload])
        .unwrap();
    out
}

fn frames() -> Vec<Frame> {
    (0..5)
        .map(|i| {
            Frame::new(
                1_700_000_000_123_456_789 + i * 1_000_000,
                tcp_frame(1000 + i as u32 * 100, 100),
            )
        })
        .collect()
}

fn read_all(bytes: Vec<u8>) -> (Vec<(i64, u32, u32)>, Option<CaptureError>) {
    let input = from_reader(
        "mem",
        InputKind::File,
        None,
        Box::new(std::io::Cursor::new(bytes)),
    );
    let mut r = match CaptureReader::new(input) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut out = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                let seq = match decode(p.link, p.data, p.orig_len).map(|d| d.l4) {
                    Some(L4::Tcp(t)) => t.seq,
                    _ => 0,
                };
                out.push((p.ts_ns, p.link.0, seq));
            }
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[test]
fn pcap_both_byte_orders_and_resolutions() {
    for be in [false, true] {
        for ns in [false, true] {
            let (pkts, err) = read_all(pcap(1, &frames(), be, ns));
            assert!(err.is_none(), "be={be} ns={ns}: {err:?}");
            assert_eq!(pkts.len(), 5);
            let want = if ns {
                1_700_000_000_123_456_789
            } else {
                1_700_000_000_123_456_000
            };
            assert_eq!(pkts[0].0, want, "be={be} ns={ns}");
            assert_eq!(pkts[4].2, 1400);
        }
    }
}

#[test]
fn pcapng_sections_interfaces_and_resolutions() {
    let raw: Vec<u8> = tcp_frame(7, 10)[14..].to_vec();
    let s1 = Section {
        interfaces: vec![(1, 6), (101, 9)],
        packets: vec![
            (0, frames()[0].clone()),
            (1, Frame::new(1_700_000_000_000_000_001, raw.clone())),
        ],
    };
    // The second section renumbers its interfaces from 0.
    let s2 = Section {
        interfaces: vec![(101, 3)],
        packets: vec![(0, Frame::new(1_700_000_001_500_000_000, raw))],
    };
    let (pkts, err) = read_all(pcapng(&[s1, s2]));
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pkts.len(), 3);
    assert_eq!(pkts[0].1, 1);
    assert_eq!(
        (pkts[1].0, pkts[1].1, pkts[1].2),
        (1_700_000_000_000_000_001, 101, 7)
    );
    assert_eq!((pkts[2].0, pkts[2].1), (1_700_000_001_500_000_000, 101));
}

#[test]
fn gzip_is_transparent() {
    let plain = pcap(1, &frames(), false, false);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let (pkts, err) = read_all(gz.finish().unwrap());
    assert!(err.is_none());
    assert_eq!(pkts.len(), 5);
}

#[test]
fn a_cut_gzip_file_is_truncated_not_a_read_failure() {
    // Many packets, so the compressed stream spans several reads; cut it in the middle.
    let many: Vec<Frame> = (0..2000)
        .map(|i| {
            Frame::new(
                1_700_000_000_000_000_000 + i * 1_000_000,
                tcp_frame(i as u32 * 7919, 200 + (i as usize * 31) % 1200),
            )
        })
        .collect();
    let plain = pcap(1, &many, false, false);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    let (pkts, err) = read_all(gz[..gz.len() / 2].to_vec());
    assert!(!pkts.is_empty() && pkts.len() < 2000, "{}", pkts.len());
    match err {
        Some(e @ CaptureError::Truncated { .. }) => {
            let text = e.to_string();
            assert!(text.contains("of the decompressed stream"), "{text}");
            let offset = e.offset().unwrap() as usize;
            assert!(offset > 24 && offset < plain.len(), "{offset}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn snap_length_cut_packets_keep_their_length() {
    let f: Vec<Frame> = frames().into_iter().map(|f| f.snap(54)).collect();
    let bytes = pcap(1, &f, false, false);
    let input = from_reader(
        "mem",
        InputKind::File,
        None,
        Box::new(std::io::Cursor::new(bytes)),
    );
    let mut r = CaptureReader::new(input).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!(p.data.len(), 54);
    let Some(L4::Tcp(t)) = decode(LinkType(1), p.data, p.orig_len).map(|d| d.l4) else {
        panic!()
    };
    assert_eq!(t.seg_len, Some(100));
}

#[test]
fn truncated_file_gives_packets_then_offset() {
    let full = pcap(1, &frames(), false, false);
    let record = 16 + frames()[0].data.len();
    let cut = full.len() - record / 2;
    let (pkts, err) = read_all(full[..cut].to_vec());
    assert_eq!(pkts.len(), 4);
    match err {
        Some(CaptureError::Truncated {
            offset, packets, ..
        }) => {
            assert_eq!(offset as usize, 24 + 4 * record);
            assert_eq!(packets, 4);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_file_cut_inside_its_header_has_nothing_to_analyse() {
    let plain = pcap(1, &frames(), false, false);
    let ng = pcapng(&[Section {
        interfaces: vec![(1, 6)],
        packets: frames().into_iter().map(|f| (0, f)).collect(),
    }]);
    for (what, cut) in [
        ("pcap", plain[..10].to_vec()),
        ("pcapng", ng[..20].to_vec()),
    ] {
        let (pkts, err) = read_all(cut);
        assert!(pkts.is_empty());
        match err {
            Some(e @ CaptureError::HeaderTruncated { .. }) => {
                assert!(!e.is_partial() && e.offset().is_none(), "{what}");
                assert!(e.to_string().contains("inside its capture header"), "{e}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
fn a_pcapng_block_shorter_than_its_header_is_corrupt_not_a_panic() {
    // Fuzz find: a process-information block (type 0x80000001) claiming 4 bytes made
    // pcap-parser subtract 12 from 4.
    let mut bytes = pcapng(&[Section {
        interfaces: vec![(1, 6)],
        packets: frames().into_iter().take(1).map(|f| (0, f)).collect(),
    }]);
    let at = bytes.len();
    bytes.extend_from_slice(&0x8000_0001u32.to_le_bytes());
    bytes.extend_from_slice(&4u32.to_le_bytes());
    bytes.extend_from_slice(&[0u8; 16]);
    let (pkts, err) = read_all(bytes);
    assert_eq!(pkts.len(), 1);
    match err {
        Some(e @ CaptureError::Corrupt { .. }) => {
            assert_eq!(e.offset(), Some(at as u64));
            assert!(
                e.to_string()
                    .contains("block length 4 is below the 12-byte minimum"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_pcapng_block_names_its_offset() {
    let s = Section {
        interfaces: vec![(1, 6)],
        packets: frames().into_iter().map(|f| (0, f)).collect(),
    };
    let mut bytes = pcapng(&[s]);
    // Give the third packet block an impossible length (smaller than a block header).
    let shb = 28;
    let idb = 12 + 20;
    let epb = 12 + 20 + frames()[0].data.len().div_ceil(4) * 4;
    let third = shb + idb + 2 * epb;
    bytes[third + 4..third + 8].copy_from_slice(&8u32.to_le_bytes());
    let (pkts, err) = read_all(bytes);
    assert_eq!(pkts.len(), 2, "{err:?}");
    let e = err.expect("an error");
    assert_eq!(e.offset(), Some((shb + idb + 2 * epb) as u64), "{e}");
    assert!(e.to_string().contains("byte"), "{e}");
}

#[test]
fn empty_and_wrong_magic() {
    assert!(matches!(
        read_all(Vec::new()).1,
        Some(CaptureError::Empty { .. })
    ));
    let (_, e) = read_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec());
    let e = e.unwrap();
    assert!(matches!(e, CaptureError::NotACapture { .. }), "{e}");
    assert!(e.to_string().contains("47 45 54"), "{e}");
}

#[test]
fn garbage_never_panics() {
    let base = pcap(1, &frames(), false, false);
    let mut seed = 0x1234_5678_u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..400 {
        let mut b = base.clone();
        for _ in 0..(rnd() % 8 + 1) {
            let i = (rnd() as usize) % b.len();
            b[i] = rnd() as u8;
        }
        let cut = (rnd() as usize) % (b.len() + 1);
        b.truncate(cut);
        let _ = read_all(b);
    }
}
