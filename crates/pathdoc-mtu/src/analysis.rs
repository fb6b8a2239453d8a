//! Inference from probe results, without sockets: what each direction's path MTU is and
//! whether PMTUD works there, where the MTU drops, whether a middlebox rewrites the MSS, and
//! whether a bulk download with full-size segments stalls.

use std::net::IpAddr;

use serde::Serialize;

use crate::search::{Search, SizeCap};
use crate::wire::{BulkServerStats, IcmpKind, IcmpSeen};

/// Which way probes travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

impl Direction {
    pub fn label(self) -> &'static str {
        match self {
            Direction::ClientToServer => "client→server",
            Direction::ServerToClient => "server→client",
        }
    }
    /// Which end sends in this direction (and must hear the ICMP too-big).
    pub fn sender(self) -> &'static str {
        match self {
            Direction::ClientToServer => "client",
            Direction::ServerToClient => "server",
        }
    }
    pub fn receiver(self) -> &'static str {
        match self {
            Direction::ClientToServer => "server",
            Direction::ServerToClient => "client",
        }
    }
    /// The other direction.
    pub fn reversed(self) -> Direction {
        match self {
            Direction::ClientToServer => Direction::ServerToClient,
            Direction::ServerToClient => Direction::ClientToServer,
        }
    }

    pub fn id(self) -> &'static str {
        match self {
            Direction::ClientToServer => "up",
            Direction::ServerToClient => "down",
        }
    }
}

/// What the probes of one direction show.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Outcome {
    /// Not even the smallest probe arrived: UDP is blocked or the peer is gone.
    NothingArrived,
    /// Every size probed arrived, up to `mtu`; `cap` says whether that is the sender's interface
    /// MTU (the path MTU) or only the probe limit (the path MTU is at least `mtu`).
    Clean { mtu: u16, cap: SizeCap },
    /// Bigger sizes were lost and a router said so: PMTUD works.
    Signalled {
        mtu: u16,
        ptb_mtu: u32,
        ptb_from: Option<IpAddr>,
    },
    /// Bigger sizes vanished and no ICMP too-big reached the sender.
    BlackHole { mtu: u16, smallest_lost: u16 },
    /// A router sent too-big with an MTU that is itself too large to pass.
    BadSuggestion {
        mtu: u16,
        ptb_mtu: u32,
        ptb_from: Option<IpAddr>,
    },
}

impl Outcome {
    /// The measured path MTU, if any probe arrived.
    pub fn mtu(&self) -> Option<u16> {
        match *self {
            Outcome::NothingArrived => None,
            Outcome::Clean { mtu, .. }
            | Outcome::Signalled { mtu, .. }
            | Outcome::BlackHole { mtu, .. }
            | Outcome::BadSuggestion { mtu, .. } => Some(mtu),
        }
    }

    /// Whether some sizes the sender can emit do not pass (a smaller link on the path).
    pub fn has_drop(&self) -> bool {
        !matches!(self, Outcome::Clean { .. } | Outcome::NothingArrived)
    }
}

/// Classify one direction from its search and the ICMP errors its sender saw.
pub fn classify(search: &Search, icmp: &[IcmpSeen]) -> Outcome {
    let Some(mtu) = search.largest_ok() else {
        return Outcome::NothingArrived;
    };
    let Some(smallest_lost) = search.smallest_failed_above(mtu) else {
        return Outcome::Clean {
            mtu,
            cap: search.cap(),
        };
    };
    let ptb = icmp
        .iter()
        .filter(|e| e.kind == IcmpKind::TooBig && e.mtu.is_some())
        .min_by_key(|e| e.mtu);
    match ptb {
        None => Outcome::BlackHole { mtu, smallest_lost },
        Some(e) => {
            let ptb_mtu = e.mtu.unwrap_or(0);
            if u32::from(mtu) >= ptb_mtu {
                Outcome::Signalled {
                    mtu,
                    ptb_mtu,
                    ptb_from: e.from,
                }
            } else {
                Outcome::BadSuggestion {
                    mtu,
                    ptb_mtu,
                    ptb_from: e.from,
                }
            }
        }
    }
}

/// The ICMP answer to one TTL-limited probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HopReply {
    pub kind: IcmpKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
}

/// Answers at one TTL for a size just above the path MTU (`big`) and a size that passes (`small`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TtlRow {
    pub ttl: u8,
    pub big: Option<HopReply>,
    pub small: Option<HopReply>,
}

/// How the hop was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LocateMethod {
    /// The router that sent ICMP too-big, numbered by its time-exceeded answer.
    TooBigSource,
    /// Big probes were answered with time-exceeded up to this hop and vanished beyond it.
    LastHopReached,
}

/// Where the MTU drops: the link leaving `hop` (counted from the sender; 0 = the sender itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub hop: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<IpAddr>,
    pub method: LocateMethod,
}

fn te_at(rows: &[TtlRow], addr: IpAddr) -> Option<u8> {
    rows.iter()
        .find(|r| {
            [&r.small, &r.big].iter().any(|x| {
                x.as_ref()
                    .is_some_and(|h| h.kind == IcmpKind::TimeExceeded && h.from == Some(addr))
            })
        })
        .map(|r| r.ttl)
}

/// Locate the hop whose outgoing link has the smaller MTU. `ptb_from` is the source of a
/// too-big seen during the size search, if any.
pub fn locate(rows: &[TtlRow], ptb_from: Option<IpAddr>) -> Option<Location> {
    let mut rows: Vec<TtlRow> = rows.to_vec();
    rows.sort_by_key(|r| r.ttl);
    // A too-big answer to a TTL-limited probe: the router at ttl-1 refused to forward it.
    for r in &rows {
        if let Some(HopReply {
            kind: IcmpKind::TooBig,
            from,
            ..
        }) = &r.big
        {
            let hop = from
                .and_then(|a| te_at(&rows, a))
                .unwrap_or(r.ttl.saturating_sub(1));
            return Some(Location {
                hop,
                addr: *from,
                method: LocateMethod::TooBigSource,
            });
        }
    }
    if let Some(a) = ptb_from {
        if let Some(hop) = te_at(&rows, a) {
            return Some(Location {
                hop,
                addr: Some(a),
                method: LocateMethod::TooBigSource,
            });
        }
    }
    let any_answer = rows.iter().any(|r| r.big.is_some() || r.small.is_some());
    if !any_answer {
        return None;
    }
    // Silent drop: the first TTL at which the big probe gets no answer while every smaller TTL
    // answered it; the drop is on the link leaving the last hop that answered.
    for (i, r) in rows.iter().enumerate() {
        let answered_big = matches!(&r.big, Some(h) if h.kind == IcmpKind::TimeExceeded);
        if answered_big {
            continue;
        }
        if r.big.is_none() {
            let prev = i.checked_sub(1).map(|j| &rows[j]);
            let hop = prev.map_or(0, |p| p.ttl);
            let addr = prev.and_then(|p| p.big.as_ref().and_then(|h| h.from));
            return Some(Location {
                hop,
                addr,
                method: LocateMethod::LastHopReached,
            });
        }
        return None;
    }
    None
}

/// What each end saw of the MSS option in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MssObservation {
    /// MSS the client advertised in its SYN (client TCP_INFO advmss).
    pub client_sent: Option<u32>,
    /// MSS option of the client's SYN as the server received it (TCP_SAVED_SYN).
    pub server_saw: Option<u16>,
    /// MSS the server advertised in its SYN-ACK (server TCP_INFO advmss).
    pub server_sent: Option<u32>,
    /// The client's sending MSS (TCP_INFO snd_mss) = min(peer MSS, PMTU − headers) − options.
    pub client_snd_mss: Option<u32>,
    /// Whether timestamps were negotiated (12 option bytes per segment).
    pub timestamps: bool,
    /// The client's PMTU for the connection (TCP_INFO pmtu).
    pub client_pmtu: Option<u32>,
    /// IP + TCP header bytes (40 IPv4, 60 IPv6).
    pub header_bytes: u32,
    /// The client's send window (TCP_INFO snd_wnd): Linux also caps the send MSS at half the
    /// largest window seen, which hides the peer's MSS on tiny-window or loopback paths.
    pub client_snd_wnd: Option<u32>,
}

/// MSS comparison in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MssComparison {
    pub direction: Direction,
    pub sent: u32,
    pub arrived: u32,
    /// `None` when the receiving side's own PMTU hides the value (cannot tell).
    pub rewritten: Option<bool>,
}

/// Compare sent and received MSS both ways.
pub fn compare_mss(o: &MssObservation) -> Vec<MssComparison> {
    let mut out = Vec::new();
    if let (Some(sent), Some(saw)) = (o.client_sent, o.server_saw) {
        out.push(MssComparison {
            direction: Direction::ClientToServer,
            sent,
            arrived: u32::from(saw),
            rewritten: Some(sent != u32::from(saw)),
        });
    }
    if let (Some(sent), Some(snd)) = (o.server_sent, o.client_snd_mss) {
        let arrived = snd + if o.timestamps { 12 } else { 0 };
        let own_cap = o.client_pmtu.map(|p| p.saturating_sub(o.header_bytes));
        let window_cap = o.client_snd_wnd.map(|w| w / 2);
        let rewritten = if arrived == sent {
            Some(false)
        } else if arrived < sent
            && own_cap.is_some_and(|c| arrived < c)
            && window_cap.is_none_or(|w| arrived + 64 < w)
        {
            Some(true)
        } else {
            None
        };
        out.push(MssComparison {
            direction: Direction::ServerToClient,
            sent,
            arrived,
            rewritten,
        });
    }
    out
}

/// One timed bulk download.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BulkRun {
    /// TCP_MAXSEG the client set before connecting (None = full-size segments).
    pub client_mss: Option<u32>,
    pub seconds: f64,
    pub bytes: u64,
    /// The client's estimate of the server's segment size (TCP_INFO rcv_mss).
    pub rcv_mss: Option<u32>,
    pub server: Option<BulkServerStats>,
}

impl BulkRun {
    pub fn goodput_bps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds
        } else {
            0.0
        }
    }
}

/// How much faster the reduced-MSS download must be to blame segment size (not noise).
pub const STALL_RATIO: f64 = 4.0;

/// Whether the full-size download stalled or crawled compared with the reduced-MSS one.
pub fn bulk_stalled(full: &BulkRun, reduced: &BulkRun) -> bool {
    reduced.bytes > 0 && reduced.goodput_bps() >= STALL_RATIO * full.goodput_bps()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search_with(results: &[(u16, u32, u32)]) -> Search {
        let mut s = Search::new(576, 1500);
        for &(size, sent, recv) in results {
            s.record(size, sent, recv);
        }
        s
    }

    fn ptb(mtu: u32) -> IcmpSeen {
        IcmpSeen {
            id: Some(1),
            round: Some(1),
            kind: IcmpKind::TooBig,
            mtu: Some(mtu),
            from: Some("10.0.0.1".parse().unwrap()),
            icmp_type: 3,
            icmp_code: 4,
        }
    }

    #[test]
    fn classification_table() {
        let clean = search_with(&[(1500, 3, 3), (1420, 3, 3)]);
        let dropped = search_with(&[(1500, 3, 0), (1480, 3, 0), (1420, 3, 3), (1421, 3, 0)]);
        let none = search_with(&[(1500, 3, 0), (576, 3, 0)]);
        let cases: Vec<(&Search, Vec<IcmpSeen>, Outcome)> = vec![
            (
                &clean,
                vec![],
                Outcome::Clean {
                    mtu: 1500,
                    cap: SizeCap::ProbeLimit,
                },
            ),
            (
                &dropped,
                vec![],
                Outcome::BlackHole {
                    mtu: 1420,
                    smallest_lost: 1421,
                },
            ),
            (
                &dropped,
                vec![ptb(1420)],
                Outcome::Signalled {
                    mtu: 1420,
                    ptb_mtu: 1420,
                    ptb_from: Some("10.0.0.1".parse().unwrap()),
                },
            ),
            (
                &dropped,
                vec![ptb(1480)],
                Outcome::BadSuggestion {
                    mtu: 1420,
                    ptb_mtu: 1480,
                    ptb_from: Some("10.0.0.1".parse().unwrap()),
                },
            ),
            (&none, vec![], Outcome::NothingArrived),
        ];
        for (search, icmp, want) in cases {
            assert_eq!(classify(search, &icmp), want);
        }
        assert!(!Outcome::Clean {
            mtu: 1500,
            cap: SizeCap::SenderInterface
        }
        .has_drop());
        assert!(Outcome::BlackHole {
            mtu: 1420,
            smallest_lost: 1421
        }
        .has_drop());
    }

    fn te(addr: &str) -> Option<HopReply> {
        Some(HopReply {
            kind: IcmpKind::TimeExceeded,
            from: Some(addr.parse().unwrap()),
            mtu: None,
        })
    }

    fn tb(addr: &str, mtu: u32) -> Option<HopReply> {
        Some(HopReply {
            kind: IcmpKind::TooBig,
            from: Some(addr.parse().unwrap()),
            mtu: Some(mtu),
        })
    }

    fn row(ttl: u8, big: Option<HopReply>, small: Option<HopReply>) -> TtlRow {
        TtlRow { ttl, big, small }
    }

    #[test]
    fn locate_table() {
        let a1 = "10.1.0.1";
        let a2 = "10.2.0.1";
        let a3 = "10.3.0.1";
        let loc = |hop, addr: &str, method| {
            Some(Location {
                hop,
                addr: Some(addr.parse().unwrap()),
                method,
            })
        };
        let cases: Vec<(Vec<TtlRow>, Option<IpAddr>, Option<Location>)> = vec![
            // Too-big from hop 2 at TTL 3 (hop 2 answered time-exceeded at TTL 2).
            (
                vec![
                    row(1, te(a1), te(a1)),
                    row(2, te(a2), te(a2)),
                    row(3, tb(a2, 1280), te(a3)),
                    row(4, tb(a2, 1280), None),
                ],
                None,
                loc(2, a2, LocateMethod::TooBigSource),
            ),
            // Black hole after hop 2: big probes silent from TTL 3 on, small ones answered.
            (
                vec![
                    row(1, te(a1), te(a1)),
                    row(2, te(a2), te(a2)),
                    row(3, None, te(a3)),
                    row(4, None, None),
                ],
                None,
                loc(2, a2, LocateMethod::LastHopReached),
            ),
            // Only the search's too-big source is known: numbered by its time-exceeded.
            (
                vec![
                    row(1, te(a1), te(a1)),
                    row(2, te(a2), te(a2)),
                    row(3, None, None),
                ],
                Some(a1.parse().unwrap()),
                loc(1, a1, LocateMethod::TooBigSource),
            ),
            // Silent at TTL 1: the sender's own link.
            (
                vec![row(1, None, te(a1)), row(2, None, None)],
                None,
                Some(Location {
                    hop: 0,
                    addr: None,
                    method: LocateMethod::LastHopReached,
                }),
            ),
            // No ICMP at all: cannot locate.
            (vec![row(1, None, None), row(2, None, None)], None, None),
        ];
        for (rows, ptb_from, want) in cases {
            assert_eq!(locate(&rows, ptb_from), want, "{rows:?}");
        }
    }

    #[test]
    fn mss_comparison_table() {
        let base = MssObservation {
            client_sent: Some(1460),
            server_saw: Some(1460),
            server_sent: Some(1460),
            client_snd_mss: Some(1448),
            timestamps: true,
            client_pmtu: Some(1500),
            header_bytes: 40,
            client_snd_wnd: Some(64240),
        };
        let cmp = compare_mss(&base);
        assert_eq!(cmp.len(), 2);
        assert!(cmp.iter().all(|c| c.rewritten == Some(false)), "{cmp:?}");

        let clamped = MssObservation {
            server_saw: Some(1380),
            client_snd_mss: Some(1368),
            ..base
        };
        let cmp = compare_mss(&clamped);
        assert_eq!(cmp[0].arrived, 1380);
        assert_eq!(cmp[0].rewritten, Some(true));
        assert_eq!(cmp[1].arrived, 1380);
        assert_eq!(cmp[1].rewritten, Some(true));

        // The client's own PMTU (1400) explains a smaller send MSS: cannot tell.
        let own = MssObservation {
            client_snd_mss: Some(1348),
            client_pmtu: Some(1400),
            ..base
        };
        assert_eq!(compare_mss(&own)[1].rewritten, None);
        // Loopback: half the window (32 KiB) caps the send MSS, not a middlebox.
        let lo = MssObservation {
            server_sent: Some(65495),
            client_snd_mss: Some(32768),
            client_pmtu: Some(65535),
            client_snd_wnd: Some(65536),
            ..base
        };
        assert_eq!(compare_mss(&lo)[1].rewritten, None);
        assert!(compare_mss(&MssObservation::default()).is_empty());
    }

    #[test]
    fn bulk_stall_needs_a_clear_ratio() {
        let run = |bytes| BulkRun {
            client_mss: None,
            seconds: 1.0,
            bytes,
            rcv_mss: None,
            server: None,
        };
        assert!(bulk_stalled(&run(2_000), &run(50_000_000)));
        assert!(!bulk_stalled(&run(40_000_000), &run(50_000_000)));
        assert!(!bulk_stalled(&run(0), &run(0)));
    }
}
