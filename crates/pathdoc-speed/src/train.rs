//! Packet-train capacity probe: the server sends a train of back-to-back datagrams and the
//! client measures how far apart they arrive. A bottleneck can forward them no faster than its
//! rate, so the train leaves it spread to (packets − 1) × size / capacity — whatever other
//! traffic shares it: in a FIFO queue the train arrives (from a faster link) in a clump and is
//! served in one piece; traffic arriving later waits behind it (Jacobson's packet pair; Keshav
//! 1991; Dovrolis, Ramanathan & Moore, "Packet-dispersion techniques and a capacity-estimation
//! methodology", IEEE/ACM ToN 2004 — pathrate). This measures the bottleneck's **capacity**, not
//! the bandwidth left over (what pathload measures with trains sent *at* a rate), which is what
//! a transfer sharing the link gets.
//!
//! Protocol (the speed check's UDP, [`pathdoc_proto::UdpHeader`] kinds [`REQUEST`] and
//! [`REPLY`]): the client sends a train's requests, each [`DATAGRAM`] bytes; on the last one the
//! server sends as many replies of the same size as requests arrived, back to back. The server
//! never sends more than it received (no amplification). A server without this service ignores
//! the requests: the client hears nothing and the capacity stays unmeasured (inconclusive).
//! Download direction only: the client timestamps arrivals in the kernel (`SO_TIMESTAMPNS`).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use pathdoc_proto::{SessionId, UdpHeader};

/// UDP kind of a train request (client → server).
pub const REQUEST: u16 = 0x7401;
/// UDP kind of a train reply (server → client).
pub const REPLY: u16 = 0x7402;
/// Bytes of each datagram's UDP payload, pathdoc header included: small enough for any path
/// with an MTU of 1280 (IPv6's minimum).
pub const DATAGRAM: usize = 1200;
/// Packets per train: long enough that the train's spread (≥ 1.6 ms at 400 Mbit/s, 16 ms at
/// 40) dwarfs timestamp noise, short enough to fit a queue that others keep nearly full.
pub const PACKETS: u16 = 64;
/// Trains per probe; the estimate is their median.
pub const TRAINS: u32 = 7;
/// A train counts when at least this many of its packets arrived (others were dropped at a
/// full queue, which takes no service time, so the survivors still leave at the capacity).
pub const MIN_ARRIVED: usize = 16;
/// Trains that must count for an estimate.
pub const MIN_TRAINS: usize = 3;
/// How long the client waits for one train's replies.
pub const TRAIN_WAIT: Duration = Duration::from_millis(800);
/// Gap between trains, so one train's queue does not hold the next.
pub const TRAIN_GAP: Duration = Duration::from_millis(30);
/// Longest a whole probe may take.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(6);

/// A train request's or reply's payload (after the pathdoc header): train id, sequence number,
/// count (requests: the train's length; replies: how many the server sends), the server's send
/// time of a reply in ns since the train's first (0 in requests), then padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainMsg {
    pub train: u32,
    pub seq: u16,
    pub count: u16,
    pub sent_ns: u64,
}

impl TrainMsg {
    pub const LEN: usize = 16;
    /// The payload, padded so the whole datagram is [`DATAGRAM`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DATAGRAM - UdpHeader::LEN);
        out.extend_from_slice(&self.train.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.sent_ns.to_be_bytes());
        out.resize(DATAGRAM - UdpHeader::LEN, 0);
        out
    }
    pub fn decode(payload: &[u8]) -> Option<TrainMsg> {
        if payload.len() < Self::LEN {
            return None;
        }
        let u16_at = |i: usize| u16::from_be_bytes([payload[i], payload[i + 1]]);
        Some(TrainMsg {
            train: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
            seq: u16_at(4),
            count: u16_at(6),
            sent_ns: u64::from_be_bytes(payload[8..16].try_into().ok()?),
        })
    }
}

/// One train as the client saw it: how many the server sent, and for each packet that arrived
/// its kernel arrival time (ns, any epoch) and the server's send time (ns since the train's
/// first packet left).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainArrivals {
    pub sent: u16,
    pub arrivals_ns: Vec<u64>,
    pub sent_ns: Vec<u64>,
}

/// The capacity estimate of one direction's bottleneck, at the IP layer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityProbe {
    /// Median of the counted trains' dispersion rates, IP bit/s; `None` when too few counted.
    pub capacity_ip_bps: Option<f64>,
    /// Each counted train's rate, IP bit/s.
    pub train_rates_bps: Vec<f64>,
    pub trains_sent: u32,
    /// Trains of which at least one reply arrived (0: the server did not answer, e.g. older).
    pub trains_answered: u32,
    /// IP bytes of one datagram.
    pub datagram_ip_bytes: u32,
    pub packets_per_train: u16,
}

/// IP bytes of one probe datagram (UDP and IP headers included).
pub fn datagram_ip_bytes(ipv6: bool) -> u32 {
    (DATAGRAM + 8 + if ipv6 { 40 } else { 20 }) as u32
}

/// The path, not the sender, spaced two consecutive packets when they arrived at least this many
/// times further apart than they were sent. The server sends a train 2–10 µs apart; a
/// bottleneck of ≤ 100 Mbit/s spaces these datagrams ≥ 98 µs apart, while a delay element or
/// interrupt batch that releases a backlog spaces them by its own per-packet cost, a few µs —
/// measured on the lab's 100 Mbit/s path, a factor of 1.25 let such gaps in (trains read 190–220
/// Mbit/s); 4 keeps them out and still measures up to ≈ 500 Mbit/s from a fast server.
pub const PATH_SPREAD: f64 = 4.0;
/// Gaps of a train the path must have spread for the train to count.
pub const MIN_GAPS: usize = 15;

/// The dispersion rate of one train: one datagram over the median of the gaps between
/// consecutive arrivals that the path spread ([`PATH_SPREAD`]). Gaps the path did not spread
/// are the sender's own pace — the first packets riding a token-bucket shaper's burst allowance
/// through an idle link (the lab's tbf holds 4 ms of traffic: 20 of these datagrams at 50
/// Mbit/s, 40 at 100), or a link faster than the server sends — and say nothing of the
/// sustained capacity. The median keeps the rare long gap (the server descheduled mid-train,
/// another flow's packet slipping in) and the rare short one (a late delay element catching up)
/// from moving the estimate. `None` with fewer than [`MIN_ARRIVED`] packets or [`MIN_GAPS`]
/// spread gaps.
pub fn train_rate(t: &TrainArrivals, ip_bytes: u32) -> Option<f64> {
    if t.arrivals_ns.len() < MIN_ARRIVED || t.sent_ns.len() != t.arrivals_ns.len() {
        return None;
    }
    let mut order: Vec<(u64, u64)> = t
        .arrivals_ns
        .iter()
        .copied()
        .zip(t.sent_ns.iter().copied())
        .collect();
    order.sort_unstable();
    let mut gaps: Vec<u64> = order
        .windows(2)
        .filter_map(|w| {
            let arrived = w[1].0 - w[0].0;
            let sent = w[1].1.abs_diff(w[0].1);
            (arrived > 0 && arrived as f64 >= PATH_SPREAD * sent as f64).then_some(arrived)
        })
        .collect();
    if gaps.len() < MIN_GAPS {
        return None;
    }
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2] as f64 / 1e9;
    Some(f64::from(ip_bytes) * 8.0 / median)
}

/// The estimate from a probe's trains: the median counted train.
pub fn estimate(trains: &[TrainArrivals], sent: u32, ipv6: bool) -> CapacityProbe {
    let ip_bytes = datagram_ip_bytes(ipv6);
    let mut rates: Vec<f64> = trains
        .iter()
        .filter_map(|t| train_rate(t, ip_bytes))
        .collect();
    rates.sort_by(f64::total_cmp);
    let capacity = (rates.len() >= MIN_TRAINS).then(|| rates[rates.len() / 2]);
    CapacityProbe {
        capacity_ip_bps: capacity,
        train_rates_bps: rates,
        trains_sent: sent,
        trains_answered: trains.iter().filter(|t| !t.arrivals_ns.is_empty()).count() as u32,
        datagram_ip_bytes: ip_bytes,
        packets_per_train: PACKETS,
    }
}

/// Run the probe against `server` for `session` (blocking; call from a blocking thread).
/// Stops at [`PROBE_DEADLINE`]; socket errors end it early with what was measured.
pub fn probe_download(server: SocketAddr, session: SessionId) -> CapacityProbe {
    let mut trains = Vec::new();
    let mut sent = 0;
    if let Err(e) = run_trains(server, session, &mut trains, &mut sent) {
        tracing::debug!(error = %e, "capacity probe ended early");
    }
    estimate(&trains, sent, server.is_ipv6())
}

fn run_trains(
    server: SocketAddr,
    session: SessionId,
    trains: &mut Vec<TrainArrivals>,
    sent: &mut u32,
) -> std::io::Result<()> {
    let socket = UdpSocket::bind(pathdoc_sys::source::udp_bind_addr(&server))?;
    socket.connect(server)?;
    pathdoc_sys::rx_time::enable(socket.as_fd())?;
    let deadline = Instant::now() + PROBE_DEADLINE;
    for train in 0..TRAINS {
        if Instant::now() + TRAIN_WAIT > deadline {
            break;
        }
        send_requests(&socket, session, train)?;
        *sent += 1;
        let t = receive_train(&socket, session, train)?;
        let silent = t.arrivals_ns.is_empty();
        trains.push(t);
        // A server that answered nothing twice does not have this service.
        if silent && train >= 1 && trains.iter().all(|t| t.arrivals_ns.is_empty()) {
            break;
        }
        std::thread::sleep(TRAIN_GAP);
    }
    Ok(())
}

fn send_requests(socket: &UdpSocket, session: SessionId, train: u32) -> std::io::Result<()> {
    for seq in 0..PACKETS {
        let mut datagram = Vec::with_capacity(DATAGRAM);
        UdpHeader {
            session,
            kind: REQUEST,
        }
        .encode(&mut datagram);
        let msg = TrainMsg {
            train,
            seq,
            count: PACKETS,
            sent_ns: 0,
        };
        datagram.extend_from_slice(&msg.encode());
        socket.send(&datagram)?;
    }
    Ok(())
}

/// Collect train `train`'s replies until all arrived or [`TRAIN_WAIT`] passed.
fn receive_train(
    socket: &UdpSocket,
    session: SessionId,
    train: u32,
) -> std::io::Result<TrainArrivals> {
    let mut t = TrainArrivals::default();
    let mut buf = vec![0u8; 2048];
    let until = Instant::now() + TRAIN_WAIT;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || (t.sent > 0 && t.arrivals_ns.len() >= usize::from(t.sent)) {
            return Ok(t);
        }
        socket.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        let (n, stamp) = match pathdoc_sys::rx_time::recv(socket.as_fd(), &mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(t)
            }
            Err(e) => return Err(e),
        };
        let Ok((header, payload)) = UdpHeader::decode(&buf[..n]) else {
            continue;
        };
        let Some(msg) = TrainMsg::decode(payload) else {
            continue;
        };
        if header.session != session || header.kind != REPLY || msg.train != train {
            continue;
        }
        t.sent = msg.count;
        if let Some(s) = stamp {
            t.arrivals_ns.push(s.as_nanos() as u64);
            t.sent_ns.push(msg.sent_ns);
        }
    }
}

/// The server's side: counts each train's requests per session, bounded.
#[derive(Debug, Default)]
pub struct TrainCounter {
    /// (requests, the shortest request's payload length) per (session, train).
    counts: std::sync::Mutex<std::collections::HashMap<(u64, u32), (u16, usize)>>,
}

/// Trains a server keeps count of at once (all sessions); beyond, the oldest counts are dropped.
pub const MAX_TRACKED: usize = 4096;

impl TrainCounter {
    /// Note one request of `len` payload bytes; on a train's last request, the replies to send
    /// (as many as requests arrived) and their payload length (the shortest request's: never
    /// more bytes out than in), and the train's count is forgotten.
    pub fn note(&self, session: SessionId, msg: TrainMsg, len: usize) -> Option<(u16, usize)> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.len() >= MAX_TRACKED {
            counts.clear();
        }
        let key = (session.0, msg.train);
        let entry = counts.entry(key).or_insert((0, len));
        entry.0 = entry.0.saturating_add(1);
        entry.1 = entry.1.min(len);
        if msg.seq.saturating_add(1) >= msg.count {
            counts.remove(&key)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_at_the_datagram_size() {
        let m = TrainMsg {
            train: 7,
            seq: 63,
            count: 64,
            sent_ns: 123_456,
        };
        let p = m.encode();
        assert_eq!(p.len() + UdpHeader::LEN, DATAGRAM);
        assert_eq!(TrainMsg::decode(&p), Some(m));
        assert_eq!(TrainMsg::decode(&p[..3]), None);
    }

    #[test]
    fn a_50_mbit_train_gives_50_mbit_and_short_trains_do_not_count() {
        let ip = datagram_ip_bytes(false);
        let gap_ns = (f64::from(ip) * 8.0 / 50e6 * 1e9) as u64;
        // Sent 6.5 µs apart (≈ 1.5 Gbit/s), spread by a 50 Mbit/s bottleneck.
        let train = |n: u64| TrainArrivals {
            sent: 64,
            arrivals_ns: (0..n).map(|i| 1_000 + i * gap_ns).collect(),
            sent_ns: (0..n).map(|i| i * 6_500).collect(),
        };
        let r = train_rate(&train(64), ip).unwrap();
        assert!((r / 50e6 - 1.0).abs() < 0.01, "{r}");
        assert_eq!(train_rate(&train(10), ip), None);
        let p = estimate(&[train(64), train(40), train(5), train(64)], 4, false);
        assert!((p.capacity_ip_bps.unwrap() / 50e6 - 1.0).abs() < 0.01);
        assert_eq!((p.train_rates_bps.len(), p.trains_answered), (3, 4));
        let p = estimate(&[train(64), train(5)], 2, false);
        assert_eq!(p.capacity_ip_bps, None, "one counted train is no estimate");
        // An idle tbf lets its first 20 through at once: the spread gaps still read 50 Mbit/s,
        // and one long pause of the sender does not move it.
        let mut burst = train(64);
        for (i, a) in burst.arrivals_ns.iter_mut().enumerate() {
            *a = 1_000 + (i as u64).saturating_sub(20) * gap_ns + i as u64 * 100;
        }
        for a in &mut burst.arrivals_ns[40..] {
            *a += 5_000_000;
        }
        let r = train_rate(&burst, ip).unwrap();
        assert!((r / 50e6 - 1.0).abs() < 0.05, "{r}");
        assert_eq!(
            train_rate(
                &TrainArrivals {
                    sent_ns: vec![0; 3],
                    ..burst.clone()
                },
                ip
            ),
            None
        );
        // Arriving as fast as sent: the sender's rate, not the path's.
        let mut unshaped = train(64);
        unshaped.arrivals_ns = unshaped
            .sent_ns
            .iter()
            .map(|s| 5_000 + s * 11 / 10)
            .collect();
        assert_eq!(train_rate(&unshaped, ip), None);
    }

    #[test]
    fn the_counter_answers_on_the_last_request_with_what_arrived() {
        let c = TrainCounter::default();
        let s = SessionId(1);
        let msg = |seq| TrainMsg {
            train: 0,
            seq,
            count: 4,
            sent_ns: 0,
        };
        assert_eq!(c.note(s, msg(0), 1184), None);
        assert_eq!(c.note(s, msg(2), 8), None);
        assert_eq!(
            c.note(s, msg(3), 1184),
            Some((3, 8)),
            "replies as short as the shortest request"
        );
        assert_eq!(
            c.note(s, msg(3), 100),
            Some((1, 100)),
            "a new count after the train ended"
        );
    }
}
