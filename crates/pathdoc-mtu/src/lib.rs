//! Path-MTU check: MTU both ways, PMTUD black holes, MSS clamping.
//!
//! The client ([`client::run_check`]) and the server ([`server::MtuService`]) probe each
//! direction with DF datagrams of chosen sizes; the sender of each direction reads its own
//! socket error queue for ICMP too-big, so a size that vanishes without one is a black hole.
//! TTL-limited probes locate the hop, a saved SYN shows MSS clamping, and a timed bulk download
//! with and without a reduced MSS shows the symptom users feel; [`offload`] names a server NIC
//! whose segmentation offload ignores the path MTU (seed 003's second fault). Pure logic ([`search`],
//! [`analysis`], [`verdict`]) is separate from socket code and unit-tested with tables.

pub mod analysis;
pub mod client;
pub mod offload;
pub mod search;
pub mod server;
pub mod verdict;
pub mod wire;

pub use client::{run_check, MtuError, MtuOptions, MtuResult};
pub use server::MtuService;
pub use verdict::FINDING_IDS;
