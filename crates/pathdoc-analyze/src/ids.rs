//! Every finding id `pathdoc analyze` can emit — from the diagnosis ([`crate::diagnose`]), the
//! comparison of two captures ([`crate::compare`]) and the command itself (capture-level
//! findings in pathdoc-cli) — with its meaning. docs/output.md lists exactly these, and
//! pathdoc-cli's `finding_ids` test checks both against every `Finding::new` of the sources.

use pathdoc_core::FindingId;

pub const FINDING_IDS: &[FindingId] = &[
    // Per connection and direction (diagnose).
    FindingId {
        id: "tcp-loss-one-direction",
        meaning: "≥ 50 data segments and ≥ 1 % of them lost in a direction (on a path of ≥ 1 ms RTT also when ≥ 10 were lost and the loss rate's 95 % Wilson interval reaches 1 % while lying above 0.25 %) — retransmissions of segments the capture saw (lost after it) plus holes in the sequence space filled later (lost before it), forwarding copies excepted — or ≥ 0.25 % and ≥ 10 segments on a path of ≥ 1 ms RTT when that loss may hold the goodput at Mathis' bound (goodput ≤ 1.5 × the bound at the low end of the loss rate's 95 % Wilson interval); says where the capture point sits relative to the loss: WARN; FAIL when the loss explains the goodput",
    },
    FindingId {
        id: "receive-window-limited",
        meaning: "the receiver's window scale is known, little loss, and the goodput at window/RTT or the window ≥ 90 % full most of the time; never a ceiling below the measured goodput or below the bytes in flight; says the BDP needed: WARN",
    },
    FindingId {
        id: "window-scale-unknown",
        meaning: "a transfer (≥ 200 data segments) whose receiver's window scale is not in the capture (mid-connection, or one SYN only): no window verdict; the scale bounded from the bytes in flight: INFO",
    },
    FindingId {
        id: "sender-application-limited",
        meaning: "a long transfer (≥ 500 data segments, ≥ 10 RTTs) with no loss, the receiver's window never more than half used and the flight size flat (spread ≤ 30 %) at ≥ 256 KiB, and no queue built at the bottleneck (path RTT under load within max(1 ms, 20 %) of idle): the sending application or its send buffer holds it back; at ≈ 2 MiB names SSH's channel window and `pathdoc ssh`: WARN",
    },
    FindingId {
        id: "policer-limited",
        meaning: "a direction losing ≥ 1 % (≥ 20) of its data segments, ≥ 50 % of the lost bytes in dense episodes (≥ 3 segments losing ≥ 25 % of the sequence range they span), ≥ 75 % of the repairs while the path RTT (both loops through the capture point, Karn and TCP timestamp echoes) stayed within max(5 ms, 20 %) of the idle RTT, and ≥ 60 % of the timeline's bins from the first loss within 67–150 % of the policed rate (their median goodput; Flach et al., SIGCOMM 2016, use the goodput between the first and last loss), the policed rate > 3× Mathis' bound at the measured segment loss and idle RTT (the loss did not set the rate; CUBIC on a link losing 4-packet bursts ran at 1.5×, policed transfers at ~10×), and the sender offering ≥ 1.2× that rate (new data, repairs and skipped bytes per bin) in some bin up to the last loss (a sender paced at the rate that loses anyway was not policed): a token-bucket policer (or a bottleneck with almost no buffer); replaces that direction's `tcp-loss-one-direction`; WARN with the policed rate at the IP layer, a burst lower bound, pacing (fq maxrate, BBR) on the sender and the enforced-vs-paid rate for the ISP",
    },
    FindingId {
        id: "latency-under-load",
        meaning: "a transfer's path RTT while it delivered ≥ 50 % of its busiest bin and ≥ 8 full segments per idle RTT (median of ≥ 4 bins over ≥ 10 idle RTTs) against the idle RTT (the handshake's), graded like DSLReports' bufferbloat grade (A+ < 5 ms … F ≥ 400 ms increase): INFO from a 30 ms increase (grade B), WARN from 60 ms (C or worse) with SQM (cake/fq_codel shaped below the rate) on the router at the bottleneck",
    },
    FindingId {
        id: "zero-window-stall",
        meaning: "the receiver closed its window for ≥ 0.5 s at a stretch or ≥ 25 % of the connection: its application stopped reading: WARN",
    },
    FindingId {
        id: "idle-death",
        meaning: "after an idle time, one side sent ≥ 2 keepalives/retransmissions/data segments that got no answer, then a RST or the end of the capture (a lone RST is not one; RFC 5382 REQ-5): FAIL; INCONCLUSIVE when both sides probed",
    },
    FindingId {
        id: "rst-injected",
        meaning: "the RST that ended the connection has a TTL none of the other packets of the side it claims to come from had (its whole TTL set: `-i any` copies, load balancers, ECMP): a middlebox sent it: FAIL",
    },
    FindingId {
        id: "pmtud-black-hole",
        meaning: "a full-size packet retransmitted without ACK while small packets pass; MTU from the ICMP too-big or bounded by the largest packet that got through (acknowledged, or from the peer across the same path the other way; IPv6 at least 1280 B) and the lost size: FAIL; INCONCLUSIVE when offload hides wire sizes. Seen from the receiver: at least one MSS the sender provably sent never arrived while its small packets did and none of full size ever did: FAIL",
    },
    FindingId {
        id: "pmtud-too-big-ignored",
        meaning: "ICMP too-big reached the sender's capture, yet it kept sending larger packets (or shrank them step by step): FAIL; INCONCLUSIVE when only offload-sized packets show it",
    },
    FindingId {
        id: "capture-offload",
        meaning: "segments larger than the peer's MSS: captured on a host with TSO/GSO/GRO, sizes are not wire sizes: INFO",
    },
    // Per host pair (diagnose).
    FindingId {
        id: "loss-concentrated-one-direction",
        meaning: "between two hosts, over all their connections, one direction loses ≥ 1 % and ≥ 20 segments, and its 95 % lower bound is ≥ 4 × the other direction's upper bound (Wilson intervals; seed 001); directions a connection found policer-limited are left out: FAIL",
    },
    // The capture's clock (clock).
    FindingId {
        id: "capture-clock-backwards",
        meaning: "packets carry an earlier time than the packet before them: findings resting on durations, rates or RTTs of the connections concerned become INCONCLUSIVE: INCONCLUSIVE",
    },
    // Two captures of one path (compare).
    FindingId {
        id: "lost-between-captures",
        meaning: "packets that left one end's capture and never appeared in the other's, per direction and kind, and whether after an idle time: FAIL; WARN for a small share",
    },
    FindingId {
        id: "mss-clamped",
        meaning: "the MSS option of a SYN differs between the two captures: a router between them clamps it: INFO",
    },
    FindingId {
        id: "after-other-capture",
        meaning: "packets sent after the other capture's last packet: whether they arrived cannot be told: INCONCLUSIVE",
    },
    FindingId {
        id: "captures-not-matched",
        meaning: "no connection appears in both captures: INCONCLUSIVE",
    },
    // The capture itself (pathdoc-cli's analyze command).
    FindingId {
        id: "capture-overview",
        meaning: "connections and Wireshark's flag totals of a capture: PASS when nothing was found (no connection, host pair or capture-level finding), else INFO",
    },
    FindingId {
        id: "capture-truncated",
        meaning: "the file ends mid-record (e.g. tcpdump killed); the packets before it were analysed: INCONCLUSIVE, so a damaged capture never exits 0",
    },
    FindingId {
        id: "capture-damaged",
        meaning: "a corrupt record or a read error at the named byte offset; the packets before it were analysed: INCONCLUSIVE",
    },
    FindingId {
        id: "no-tcp",
        meaning: "the capture holds no TCP packet: INCONCLUSIVE",
    },
    FindingId {
        id: "analysis-interrupted",
        meaning: "Ctrl-C/SIGTERM stopped the reading; the results cover the packets read until then: INCONCLUSIVE",
    },
];
