//! The analyzer on well-formed but adversarial TCP conversations. Random bytes rarely get past
//! the capture and IP parsers (the `capture` target's job); here every 12 input bytes become one
//! valid IPv4 (or IPv6) TCP segment or ICMP too-big between a few fixed endpoints, with
//! sequence/ack numbers relative to what each side sent, so retransmissions, reordering, dup
//! ACKs, zero windows, keep-alives, idle gaps, RSTs, port reuse, sequence wrap and clock steps
//! are reached all the time. Every packet goes through the decoder, the analyzer and the `--flags` record;
//! then every connection through the diagnosis and its JSON summary. Nothing may panic (debug
//! assertions on: no arithmetic overflow either).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::{LinkType, Packet};

/// Per connection and side: the next sequence number it would send.
#[derive(Clone, Copy, Default)]
struct Side {
    next: u32,
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, ttl: u8, ip_id: u16, payload: &[u8], wire_payload: usize) -> Vec<u8> {
    let total = (20 + wire_payload).min(65535) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&ip_id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0, ttl, proto, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, hop: u8, payload: &[u8], wire_payload: usize) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(wire_payload.min(65535) as u16).to_be_bytes());
    p.extend_from_slice(&[proto, hop]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let v6 = mode & 1 != 0;
    let mut analyzer = Analyzer::new(Options {
        list_all: mode & 2 != 0,
        ..Options::default()
    });
    // Four connections (client port 40000 + i) between two hosts; both ISNs from the mode byte
    // so the wrap at 2^32 is near.
    let isn = u32::from(mode).wrapping_mul(0x0101_0101).wrapping_sub(3000);
    let mut sides = [[Side { next: isn }, Side { next: !isn }]; 4];
    let mut ts_ns: i64 = 1_700_000_000_000_000_000;
    let mut last: Option<(usize, usize, Vec<u8>)> = None;
    for (n, c) in rest.chunks_exact(12).enumerate() {
        let conn = usize::from(c[0] & 3);
        let from_server = usize::from((c[0] >> 2) & 1);
        let to = 1 - from_server;
        let seq_delta = i16::from_be_bytes([c[2], c[3]]) as i32;
        let ack_delta = i16::from_be_bytes([c[4], c[5]]) as i32;
        let len = usize::from(u16::from_be_bytes([c[6], c[7]]) % 1600) * usize::from(c[0] & 0x08 != 0);
        let window = u16::from(c[8]) << 8 | u16::from(c[8] & 0x0f);
        // Mostly milliseconds, sometimes minutes or hours (idle deaths); rarely the clock
        // steps back or jumps to the ends of its range (damaged or crafted files).
        ts_ns = match (c[9] >> 6, c[9] & 0x3f) {
            (0, _) => ts_ns.saturating_add(i64::from(c[9]) * 1_000),
            (1, x) => ts_ns.saturating_add(i64::from(x) * 1_000_000),
            (2, x) => ts_ns.saturating_add(i64::from(x) * 1_000_000_000),
            (_, 60) => 0,
            (_, 61) => i64::MAX,
            (_, 62) => i64::MIN,
            (_, 63) => ts_ns.saturating_sub(1_000_000_000),
            (_, x) => ts_ns.saturating_add(i64::from(x) * 300_000_000_000),
        };
        let ports = [40000 + conn as u16, 22];
        let (sp, dp) = (ports[from_server], ports[to]);
        let seq = sides[conn][from_server].next.wrapping_add(seq_delta as u32);
        let ack = sides[conn][to].next.wrapping_add(ack_delta as u32);
        let mut flags = u16::from(c[1]);
        if c[0] & 0x10 != 0 {
            flags |= 0x10; // usually ACK
        }
        // TCP header with options chosen by c[10].
        let mut opts = Vec::new();
        if c[10] & 1 != 0 {
            opts.extend_from_slice(&[2, 4]);
            opts.extend_from_slice(&(u16::from(c[11]) * 8 + 500).to_be_bytes());
        }
        if c[10] & 2 != 0 {
            opts.extend_from_slice(&[1, 3, 3, c[11] & 0x0f]);
        }
        if c[10] & 4 != 0 {
            opts.extend_from_slice(&[1, 1, 4, 2]);
        }
        if c[10] & 8 != 0 {
            opts.extend_from_slice(&[1, 1, 8, 10]);
            opts.extend_from_slice(&(n as u32).to_be_bytes());
            opts.extend_from_slice(&(n as u32 / 2).to_be_bytes());
        }
        if c[10] & 0x10 != 0 {
            let l = ack.wrapping_add(u32::from(c[11]) * 100);
            opts.extend_from_slice(&[1, 1, 5, 10]);
            opts.extend_from_slice(&l.to_be_bytes());
            opts.extend_from_slice(&l.wrapping_add(1448).to_be_bytes());
        }
        if c[10] & 0x20 != 0 {
            opts.push(c[11]); // a stray option kind (malformed lists)
        }
        while opts.len() % 4 != 0 {
            opts.push(0);
        }
        let mut tcp = Vec::with_capacity(20 + opts.len());
        tcp.extend_from_slice(&sp.to_be_bytes());
        tcp.extend_from_slice(&dp.to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.push(((5 + opts.len() / 4) as u8) << 4 | (flags >> 8) as u8 & 1);
        tcp.push(flags as u8);
        tcp.extend_from_slice(&window.to_be_bytes());
        tcp.extend_from_slice(&[0, 0, 0, 0]);
        tcp.extend_from_slice(&opts);
        let wire_payload = tcp.len() + len;
        // Snap length: payload never captured (as `tcpdump -s 128`), the rest counted by length.
        let ttl = if c[10] & 0x40 != 0 { 40 + (c[11] & 7) } else { 64 };
        let hosts4 = [[192, 168, 1, 100], [203, 0, 113, 10]];
        let mut hosts6 = [[0u8; 16]; 2];
        hosts6[0][..2].copy_from_slice(&[0x20, 0x01]);
        hosts6[1][..2].copy_from_slice(&[0x20, 0x01]);
        hosts6[0][15] = 1;
        hosts6[1][15] = 2;
        let frame = if c[10] & 0x80 != 0 && last.is_some() {
            // An ICMP too-big from a router about the previous packet, sent to its sender.
            let (_, sender, quoted) = last.clone().unwrap();
            let mtu = 576 + u16::from(c[11]) * 4;
            let quote = &quoted[..quoted.len().min(if v6 { 1232 } else { 28 })];
            if v6 {
                let mut icmp = vec![2, 0, 0, 0];
                icmp.extend_from_slice(&u32::from(mtu).to_be_bytes());
                icmp.extend_from_slice(quote);
                let mut router = hosts6[1 - sender];
                router[14] = 0xee;
                ipv6(router, hosts6[sender], 58, 60, &icmp, icmp.len())
            } else {
                let mut icmp = vec![3, 4, 0, 0, 0, 0];
                icmp.extend_from_slice(&mtu.to_be_bytes());
                icmp.extend_from_slice(quote);
                ipv4([10, 0, 0, 1], hosts4[sender], 1, 60, 0, &icmp, icmp.len())
            }
        } else {
            // Only a sender's own segment moves its sequence space; RST/SYN as any other.
            let advance = len as u32 + u32::from(flags & 0x03 != 0);
            let end = seq.wrapping_add(advance);
            if (end.wrapping_sub(sides[conn][from_server].next) as i32) > 0 {
                sides[conn][from_server].next = end;
            }
            if v6 {
                ipv6(hosts6[from_server], hosts6[to], 6, ttl, &tcp, wire_payload)
            } else {
                ipv4(hosts4[from_server], hosts4[to], 6, ttl, n as u16, &tcp, wire_payload)
            }
        };
        let orig_len = (frame.len() + len) as u32;
        if c[10] & 0x80 == 0 {
            last = Some((conn, from_server, frame.clone()));
        }
        let pkt = Packet {
            number: n as u64 + 1,
            ts_ns,
            link: if v6 { LinkType::IPV6 } else { LinkType::RAW },
            data: &frame,
            orig_len,
            offset: 24,
        };
        if let Some(r) = analyzer.process(&pkt) {
            let _ = r.flags.to_string();
        }
    }
    let result = analyzer.finish();
    for l in &result.listed {
        let _ = pathdoc_analyze::diagnose::connection(&l.summary);
        let _ = serde_json::to_string(&l.summary).unwrap();
    }
});
