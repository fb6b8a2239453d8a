//! Per-connection TCP analysis of packet captures and its diagnosis.
//!
//! - [`tcp`]: Wireshark's `tcp.analysis.*` classes, packet for packet, in O(1) state per direction.
//! - [`conn`], [`stats`]: a connection's directions — counters, handshake options, windows, Karn
//!   RTT, bytes in flight, TTLs, stalls, ICMP too-big, idle phases, how it ended.
//! - [`analyzer`]: the streaming pass over a capture with a bounded connection table.
//! - [`summary`]: the serialisable per-connection result (`data.analyze` of the JSON report).
//! - [`diagnose`]: findings in pathdoc's report model; [`app_limited`]: a sender
//!   its application holds back; [`clock`]: what a capture whose clock
//!   runs backwards still proves; [`loss`]: segments lost before and after the capture point.
//! - [`compare`]: two captures of one path — which packets left one end and never arrived.
//! - [`ids`]: the registry of every finding id `pathdoc analyze` emits ([`FINDING_IDS`]).

pub mod analyzer;
pub mod app_limited;
pub mod clock;
pub mod compare;
pub mod conn;
pub mod diagnose;
pub mod flags;
mod frag;
pub mod ids;
pub mod load;
pub mod loss;
pub mod stats;
pub mod summary;
pub mod tcp;
pub mod timeline;

pub use analyzer::{Analyzer, CaptureAnalysis, Filter, Listed, Options, PacketRecord, Totals};
pub use flags::Flags;
pub use ids::FINDING_IDS;
pub use summary::ConnSummary;
