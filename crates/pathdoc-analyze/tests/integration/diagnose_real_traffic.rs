//! Findings that must hold on the captures people really have (issue 17): started
//! mid-connection, taken on the receiver, on a router with `-i any`, with a handful of
//! retransmissions, with a clock that runs backwards. Each case here was a false (or missing)
//! finding before.

use etherparse::{PacketBuilder, TcpOptionElement};
use pathdoc_analyze::analyzer::CaptureAnalysis;
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::source::{from_reader, InputKind};
use pathdoc_capture::write::{pcap, Frame};
use pathdoc_capture::CaptureReader;
use pathdoc_core::{Direction, Finding, Status};

use crate::common;

const C: [u8; 4] = [192, 168, 1, 100];
const S: [u8; 4] = [203, 0, 113, 10];
const T0: i64 = 1_700_000_000_000_000_000;
const MSS: u32 = 1448;

/// One TCP packet of the test connection (client port 40000, server port 443).
struct Pkt {
    us: i64,
    from_client: bool,
    seq: u32,
    ack: u32,
    flags: &'static str,
    win: u16,
    len: usize,
    ttl: u8,
    ip_id: u16,
    options: Vec<TcpOptionElement>,
}

fn pkt(us: i64, from_client: bool, seq: u32, ack: u32, flags: &'static str, len: usize) -> Pkt {
    Pkt {
        us,
        from_client,
        seq,
        ack,
        flags,
        win: 1000,
        len,
        ttl: if from_client { 64 } else { 52 },
        ip_id: 0,
        options: Vec::new(),
    }
}

impl Pkt {
    fn frame(&self) -> Frame {
        let (src, dst, sp, dp) = if self.from_client {
            (C, S, 40000, 443)
        } else {
            (S, C, 443, 40000)
        };
        let mut ip =
            etherparse::Ipv4Header::new(0, self.ttl, etherparse::IpNumber::TCP, src, dst).unwrap();
        ip.identification = self.ip_id;
        let mut b = PacketBuilder::ethernet2([2; 6], [4; 6])
            .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
            .tcp(sp, dp, self.seq, self.win);
        for c in self.flags.chars() {
            b = match c {
                'S' => b.syn(),
                'A' => b.ack(self.ack),
                'R' => b.rst(),
                'F' => b.fin(),
                _ => b,
            };
        }
        if !self.options.is_empty() {
            b = b.options(&self.options).unwrap();
        }
        let mut out = Vec::new();
        b.write(&mut out, &vec![0u8; self.len]).unwrap();
        Frame::new(T0 + self.us * 1000, out)
    }
}

fn analyse(pkts: &[Pkt]) -> CaptureAnalysis {
    let frames: Vec<Frame> = pkts.iter().map(Pkt::frame).collect();
    common::analyse_listing_all(&frames)
}

/// Every finding: per connection, then the capture's and the host pairs'.
fn findings(pkts: &[Pkt]) -> Vec<Finding> {
    let res = analyse(pkts);
    let mut all: Vec<Finding> = res.listed.into_iter().flat_map(|l| l.findings).collect();
    all.extend(res.host_findings);
    all
}

fn with_id<'a>(all: &'a [Finding], id: &str) -> Vec<&'a Finding> {
    all.iter().filter(|f| f.id == id).collect()
}

/// The handshake, with window scale 7 both ways unless `wscale` is None.
fn handshake(wscale: Option<u8>, syn: bool, synack: bool) -> Vec<Pkt> {
    let opts = |s: Option<u8>| {
        let mut o = vec![TcpOptionElement::MaximumSegmentSize(1460)];
        if let Some(s) = s {
            o.push(TcpOptionElement::Noop);
            o.push(TcpOptionElement::WindowScale(s));
        }
        o
    };
    let mut v = Vec::new();
    if syn {
        let mut p = pkt(0, true, 1000, 0, "S", 0);
        p.options = opts(wscale);
        v.push(p);
    }
    if synack {
        let mut p = pkt(20_000, false, 5000, 1001, "SA", 0);
        p.options = opts(wscale);
        v.push(p);
    }
    v.push(pkt(40_000, true, 1001, 5001, "A", 0));
    v
}

/// A download: `n` full segments from the server every `gap_us`, the client acknowledging each
/// (cumulatively) `rtt_us` later with raw window `client_win`. Segments in `lost` never reach
/// the capture; each is repaired `repair_after` segments later (a hole filled, seen downstream).
fn download(
    start_us: i64,
    n: u32,
    gap_us: i64,
    rtt_us: i64,
    client_win: u16,
    lost: &[u32],
    repair_after: u32,
) -> Vec<Pkt> {
    transfer(
        false,
        start_us,
        n,
        gap_us,
        rtt_us,
        client_win,
        lost,
        repair_after,
    )
}

/// As [`download`], with the data from the client when `client_sends`.
#[allow(clippy::too_many_arguments)]
fn transfer(
    client_sends: bool,
    start_us: i64,
    n: u32,
    gap_us: i64,
    rtt_us: i64,
    receiver_win: u16,
    lost: &[u32],
    repair_after: u32,
) -> Vec<Pkt> {
    let mut v = Vec::new();
    let (seq0, peer_seq) = if client_sends {
        (1001u32, 5001u32)
    } else {
        (5001, 1001)
    };
    let mut delivered_to = seq0; // highest contiguous byte the receiver holds
    let mut holes: Vec<u32> = Vec::new();
    let mut repairs: Vec<(u32, u32)> = Vec::new(); // (at segment index, lost index)
    for i in 0..n {
        let t = start_us + i64::from(i) * gap_us;
        for &(_, li) in repairs.iter().filter(|r| r.0 == i) {
            let seq = seq0 + li * MSS;
            v.push(pkt(
                t - gap_us / 2,
                client_sends,
                seq,
                peer_seq,
                "A",
                MSS as usize,
            ));
            holes.retain(|h| *h != li);
        }
        repairs.retain(|r| r.0 != i);
        let seq = seq0 + i * MSS;
        if lost.contains(&i) {
            holes.push(i);
            repairs.push((i + repair_after, i));
        } else {
            v.push(pkt(t, client_sends, seq, peer_seq, "A", MSS as usize));
        }
        // The receiver's cumulative ACK covers up to the first hole.
        let upto = holes
            .iter()
            .min()
            .map(|h| seq0 + h * MSS)
            .unwrap_or(seq + MSS);
        delivered_to = delivered_to.max(upto);
        let mut ack = pkt(t + rtt_us, !client_sends, peer_seq, delivered_to, "A", 0);
        ack.win = receiver_win;
        v.push(ack);
    }
    v.sort_by_key(|p| p.us);
    v
}

#[test]
fn mid_connection_capture_gives_no_window_verdict() {
    // No handshake: the client's window scale is unknown. Its raw window field (1000) read as
    // bytes would "cap" the transfer at 1000 B / 20 ms = 400 kbit/s while ~11 Mbit/s flowed.
    let pkts = download(50_000, 400, 1_000, 20_000, 1000, &[], 0);
    let all = findings(&pkts);
    assert!(
        with_id(&all, "receive-window-limited").is_empty(),
        "{all:#?}"
    );
    let unknown = with_id(&all, "window-scale-unknown");
    assert_eq!(unknown.len(), 1, "{all:#?}");
    assert_eq!(unknown[0].status, Status::Info);
    assert_eq!(unknown[0].direction, Some(Direction::ServerToClient));
    // ~20 segments in flight (29 KiB) against a raw 1000: the scale is at least 5.
    let bound = unknown[0]
        .evidence
        .iter()
        .find(|e| e.name == "window scale, at least")
        .unwrap_or_else(|| panic!("{:#?}", unknown[0]));
    assert_eq!(bound.value, pathdoc_core::Quantity::Count(5));
}

#[test]
fn synack_without_syn_leaves_the_client_window_unknown() {
    let mut pkts = handshake(Some(7), false, true);
    pkts.extend(download(50_000, 400, 1_000, 20_000, 1000, &[], 0));
    let all = findings(&pkts);
    assert!(
        with_id(&all, "receive-window-limited").is_empty(),
        "{all:#?}"
    );
    assert_eq!(with_id(&all, "window-scale-unknown").len(), 1, "{all:#?}");
}

#[test]
fn a_known_window_still_gives_its_verdict() {
    // Full handshake, scale 0 (none): the client's 32000 B window holds the flow at
    // window/RTT: 32000 B / 40 ms ≈ 6.4 Mbit/s; segments every 2 ms ≈ 5.8 Mbit/s.
    let mut pkts = handshake(None, true, true);
    let mut d = download(50_000, 400, 2_000, 40_000, 32_000, &[], 0);
    pkts.append(&mut d);
    let all = findings(&pkts);
    let w = with_id(&all, "receive-window-limited");
    assert_eq!(w.len(), 1, "{all:#?}");
    assert!(with_id(&all, "window-scale-unknown").is_empty());
}

#[test]
fn a_lone_rst_after_idle_is_not_an_idle_death() {
    let mut pkts = handshake(Some(7), true, true);
    pkts.push(pkt(50_000, true, 1001, 5001, "A", 100));
    pkts.push(pkt(70_000, false, 5001, 1101, "A", 0));
    // 5 s of nothing, then the client resets: it closed a connection it had given up on.
    pkts.push(pkt(5_070_000, true, 1101, 5001, "RA", 0));
    let all = findings(&pkts);
    assert!(with_id(&all, "idle-death").is_empty(), "{all:#?}");
    // Two unanswered keepalives before the RST are what the docs ask for.
    let n = pkts.len();
    pkts.insert(n - 1, pkt(5_000_000, true, 1100, 5001, "A", 0));
    pkts.insert(n, pkt(5_030_000, true, 1100, 5001, "A", 0));
    let all = findings(&pkts);
    assert_eq!(with_id(&all, "idle-death").len(), 1, "{all:#?}");
}

/// Each packet twice, as `tcpdump -i any` on the router in between shows it: as it arrives
/// and as it leaves, one TTL lower.
fn seen_twice(pkts: Vec<Pkt>) -> Vec<Pkt> {
    let mut out = Vec::new();
    for (i, mut p) in pkts.into_iter().enumerate() {
        p.ip_id = i as u16 + 1;
        p.ttl = 64;
        let copy = Pkt {
            us: p.us + 5,
            ttl: 63,
            options: p.options.clone(),
            ..p
        };
        out.push(p);
        out.push(copy);
    }
    out
}

#[test]
fn router_capture_with_every_packet_twice() {
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 100, 1_000, 2_000, 1000, &[], 0));
    let end = pkts.last().unwrap().us;
    pkts.push(pkt(end + 1000, false, 5001 + 100 * MSS, 1001, "RA", 0));
    let pkts = seen_twice(pkts);
    let all = findings(&pkts);
    // The server's packets show TTL 64 and 63 alike, so does its RST: not forged.
    assert!(with_id(&all, "rst-injected").is_empty(), "{all:#?}");
    // Every second copy is a "retransmission" to Wireshark, but nothing was lost.
    assert!(
        with_id(&all, "tcp-loss-one-direction").is_empty(),
        "{all:#?}"
    );
}

#[test]
fn forged_rst_still_named_against_the_ttl_set() {
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 100, 1_000, 2_000, 1000, &[], 0));
    let end = pkts.last().unwrap().us;
    let mut pkts = seen_twice(pkts);
    let mut rst = pkt(end + 1000, false, 5001 + 100 * MSS, 1001, "RA", 0);
    rst.ttl = 58;
    pkts.push(rst);
    let all = findings(&pkts);
    assert_eq!(with_id(&all, "rst-injected").len(), 1, "{all:#?}");
}

/// One connection carrying data both ways (an upload, then a download), the upload losing
/// `upload_lost` of its `n` segments before the capture point.
fn pair_capture(upload_lost: &[u32], n: u32) -> Vec<Pkt> {
    let mut pkts = handshake(Some(0), true, true);
    pkts.extend(transfer(
        true,
        50_000,
        n,
        1_000,
        2_000,
        60_000,
        upload_lost,
        50,
    ));
    let after = 50_000 + i64::from(n + 10) * 1_000;
    let mut down = transfer(false, after, n, 1_000, 2_000, 60_000, &[], 0);
    // The download's ACKs acknowledge the whole upload; its data follows the upload's ACKs.
    for p in &mut down {
        if p.from_client {
            p.seq = 1001 + n * MSS;
        } else {
            p.ack = 1001 + n * MSS;
        }
    }
    pkts.extend(down);
    pkts
}

#[test]
fn few_retransmissions_prove_no_direction() {
    // 8 of 600 segments lost one way, none the other: too few to call a direction.
    let lost: Vec<u32> = (1..=8).map(|i| i * 70).collect();
    let pkts = pair_capture(&lost, 600);
    let all = findings(&pkts);
    assert!(
        with_id(&all, "loss-concentrated-one-direction").is_empty(),
        "{all:#?}"
    );
    // 60 of 1000 against 0 of 1000 does, with a ratio the counts prove.
    let lost: Vec<u32> = (1..=60).map(|i| i * 16).collect();
    let pkts = pair_capture(&lost, 1000);
    let all = findings(&pkts);
    let f = with_id(&all, "loss-concentrated-one-direction");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert!(f[0].summary.contains("at least"), "{}", f[0].summary);
    assert!(!f[0].summary.contains("12658"), "{}", f[0].summary);
}

#[test]
fn loss_seen_from_the_receiver_is_counted() {
    // A download captured on the client: 15 of 1000 segments vanish before the capture point
    // and their repairs arrive within the RTT, so Wireshark calls them out-of-order, not
    // retransmissions. The holes prove the loss anyway.
    let lost: Vec<u32> = (1..=15).map(|i| i * 60).collect();
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 1000, 1_000, 20_000, 1000, &lost, 2));
    let res = analyse(&pkts);
    let flags = res.totals.flags;
    assert_eq!(flags.out_of_order, 15, "{flags:?}");
    assert_eq!(flags.all_retransmissions(), 0, "{flags:?}");
    let all: Vec<Finding> = res.listed.into_iter().flat_map(|l| l.findings).collect();
    let f = with_id(&all, "tcp-loss-one-direction");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert_eq!(f[0].direction, Some(Direction::ServerToClient));
    assert!(
        f[0].title.contains("never reached the capture point"),
        "{}",
        f[0].title
    );
    assert!(
        f[0].summary.contains("downstream of the loss"),
        "{}",
        f[0].summary
    );
    let upstream = f[0]
        .evidence
        .iter()
        .find(|e| e.name == "lost before the capture point")
        .unwrap();
    assert_eq!(upstream.value, pathdoc_core::Quantity::Count(15));
}

#[test]
fn half_a_percent_that_holds_the_flow_at_mathis_is_loss_limited() {
    // 10 of 2000 segments (0.5 %) at 40 ms RTT: Mathis allows 1448 B × 8 / 40 ms × 1.22/√0.005
    // ≈ 5 Mbit/s, and the flow moves 5.8 Mbit/s: the loss is the limit, below the 1 % rule.
    let lost: Vec<u32> = (1..=10).map(|i| i * 190).collect();
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 2000, 2_000, 20_000, 1000, &lost, 2));
    let all = findings(&pkts);
    let f = with_id(&all, "tcp-loss-one-direction");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert_eq!(f[0].status, Status::Fail, "{:#?}", f[0]);
    // The same loss on a flow twice as fast is not what limits it: no finding.
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 2000, 1_000, 20_000, 1000, &lost, 2));
    let all = findings(&pkts);
    assert!(
        with_id(&all, "tcp-loss-one-direction").is_empty(),
        "{all:#?}"
    );
}

#[test]
fn a_one_percent_path_measured_below_one_percent_is_still_found() {
    // Issue 17's flake: a 1 % path gave 24 lost of 2 973 (0.81 %) and a goodput 1.54 × Mathis'
    // bound at 0.81 % — no finding. 24 of 3 000 is 0.54–1.19 % at 95 %; at 0.54 % Mathis allows
    // 1448 B × 8 / 40 ms × 1.22/√0.0054 ≈ 4.8 Mbit/s, and the flow moves ≈ 6.1 Mbit/s (1.27 ×):
    // the loss may hold it back, a WARN (not a FAIL: at the measured share it does not explain it).
    let lost: Vec<u32> = (1..=24).map(|i| i * 120).collect();
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 3000, 1_900, 20_000, 1000, &lost, 2));
    let all = findings(&pkts);
    let f = with_id(&all, "tcp-loss-one-direction");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert_eq!(f[0].status, Status::Warn, "{:#?}", f[0]);
    assert!(f[0].summary.contains("95 %"), "{}", f[0].summary);
    // Three times as fast, the flow is not held at the bound — but 24 of 3 000 cannot be told
    // apart from 1 % (another lab run: 41 of 4 484, goodput 2.6 × the bound): still a WARN.
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 3000, 630, 20_000, 1000, &lost, 2));
    let all = findings(&pkts);
    let f = with_id(&all, "tcp-loss-one-direction");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert_eq!(f[0].status, Status::Warn, "{:#?}", f[0]);
    assert!(
        f[0].summary.contains("cannot tell it from the 1 %"),
        "{}",
        f[0].summary
    );
    // Half that loss (12 of 3 000: 0.23–0.70 %) on the fast flow: clearly below 1 % and not
    // what holds it: no finding.
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 3000, 630, 20_000, 1000, &lost[..12], 2));
    let all = findings(&pkts);
    assert!(
        with_id(&all, "tcp-loss-one-direction").is_empty(),
        "{all:#?}"
    );
}

#[test]
fn a_clock_running_backwards_proves_no_timing() {
    // A healthy exchange with two packets stamped earlier than the one before them.
    let mut pkts = handshake(Some(7), true, true);
    pkts.extend(download(50_000, 100, 1_000, 2_000, 1000, &[], 0));
    pkts[60].us -= 500_000;
    pkts[80].us -= 500_000;
    let res = analyse(&pkts);
    assert_eq!(res.totals.clock_backward_steps, 2);
    let f = res
        .host_findings
        .iter()
        .find(|f| f.id == "capture-clock-backwards")
        .unwrap_or_else(|| panic!("{:#?}", res.host_findings));
    assert_eq!(f.status, Status::Inconclusive);
    assert!(f.title.contains("2 times"), "{}", f.title);

    // An idle death whose idle time crosses a backward step is not proven.
    let mut pkts = handshake(Some(7), true, true);
    pkts.push(pkt(50_000, true, 1001, 5001, "A", 100));
    pkts.push(pkt(70_000, false, 5001, 1101, "A", 0));
    pkts.push(pkt(60_000, false, 5001, 1101, "A", 0));
    pkts.push(pkt(5_000_000, true, 1100, 5001, "A", 0));
    pkts.push(pkt(5_030_000, true, 1100, 5001, "A", 0));
    pkts.push(pkt(5_070_000, true, 1101, 5001, "RA", 0));
    let all = findings(&pkts);
    let d = with_id(&all, "idle-death");
    assert_eq!(d.len(), 1, "{all:#?}");
    assert_eq!(d[0].status, Status::Inconclusive);
}

/// A handshake whose SYN→ACK spans 20 ms (window scale 7 both ways), then a download sending a
/// segment every `gap_us`, each acknowledged 20 ms later, with the client's window at 8 MiB.
fn steady_download(n: u32, gap_us: i64) -> Vec<Pkt> {
    let mut pkts = handshake(Some(7), true, true);
    pkts[2].us = 20_100;
    pkts.extend(download(30_000, n, gap_us, 20_000, 65_535, &[], 0));
    pkts
}

#[test]
fn a_sender_held_back_by_its_application_is_named() {
    // ~290 KiB in flight, flat, the 8 MiB window never a tenth full, nothing lost: before,
    // "healthy".
    let all = findings(&steady_download(6000, 100));
    let f = with_id(&all, "sender-application-limited");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert_eq!(f[0].status, Status::Warn);
    assert_eq!(f[0].direction, Some(Direction::ServerToClient));
    assert!(
        f[0].title.contains("the path allowed more"),
        "{}",
        f[0].title
    );
    assert!(!f[0].summary.contains("channel window"), "{}", f[0].summary);
    assert!(with_id(&all, "receive-window-limited").is_empty());
}

#[test]
fn two_mebibytes_in_flight_points_to_the_ssh_channel_window() {
    // A segment every 14 µs acknowledged 20 ms later: ≈ 1430 segments ≈ 2 MiB in flight.
    let all = findings(&steady_download(30_000, 14));
    let f = with_id(&all, "sender-application-limited");
    assert_eq!(f.len(), 1, "{all:#?}");
    assert!(f[0].summary.contains("channel window"), "{}", f[0].summary);
    assert!(
        f[0].remedies
            .iter()
            .any(|r| r.command.as_deref() == Some("pathdoc ssh HOST")),
        "{:#?}",
        f[0].remedies
    );
}

#[test]
fn a_small_paced_flow_is_not_application_limited() {
    // 30 KiB in flight: a paced test or request/response traffic, no warning.
    let all = findings(&steady_download(3000, 1_000));
    assert!(
        with_id(&all, "sender-application-limited").is_empty(),
        "{all:#?}"
    );
}

/// The advertised window of each packet, as the time-sequence graph's window edge reads it.
fn windows(pkts: &[Pkt]) -> Vec<Option<u64>> {
    let frames: Vec<Frame> = pkts.iter().map(Pkt::frame).collect();
    let input = from_reader(
        "mem",
        InputKind::File,
        None,
        Box::new(std::io::Cursor::new(pcap(1, &frames, false, false))),
    );
    let mut r = CaptureReader::new(input).unwrap();
    let mut a = Analyzer::new(Options::default());
    let mut out = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        out.push(a.process(&p).and_then(|rec| rec.window));
    }
    out
}

/// Issue 18: the HTML time-sequence graph promised a window edge (ACK + advertised window) but
/// the collected ACKs had no window. Scaled as Wireshark's tcp.window_size once the handshake
/// gave the scale; unknown (not the raw field, which would understate it 128×) without one.
#[test]
fn packets_carry_their_scaled_window_once_the_scale_is_known() {
    let mut pkts = handshake(Some(7), true, true);
    pkts.push(pkt(60_000, true, 1001, 5001, "A", 100));
    let w = windows(&pkts);
    assert_eq!(w[0], Some(1000), "a SYN's window is never scaled");
    assert_eq!(w[2], Some(1000 << 7), "{w:?}");
    assert_eq!(w[3], Some(1000 << 7), "{w:?}");

    // Started mid-connection: the scale is unknown, so is the window.
    let mid = [
        pkt(0, true, 1001, 5001, "A", 100),
        pkt(1_000, false, 5001, 1101, "A", 0),
    ];
    assert_eq!(windows(&mid), vec![None, None]);
}

/// Typing over ssh: one 100-byte segment every 300 ms for 12 s, each acknowledged 240 ms later
/// (a 40 ms path and a 200 ms delayed ACK, Windows' default). Karn's samples are 240 ms against a
/// 40 ms handshake, but no queue was there: no latency-under-load (it was a grade D WARN).
#[test]
fn interactive_typing_with_delayed_acks_is_no_latency_under_load() {
    let mut pkts = handshake(Some(7), true, true);
    let mut seq = 1001;
    for k in 0..40i64 {
        let at = 100_000 + k * 300_000;
        pkts.push(pkt(at, true, seq, 5001, "A", 100));
        seq += 100;
        pkts.push(pkt(at + 240_000, false, 5001, seq, "A", 0));
    }
    pkts.sort_by_key(|p| p.us);
    let all = findings(&pkts);
    assert!(with_id(&all, "latency-under-load").is_empty(), "{all:#?}");
}
