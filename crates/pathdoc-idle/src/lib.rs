//! The idle-timeout check: when does each stateful box on the path (home NAT, modem, CGN,
//! firewall) forget an idle TCP connection or UDP binding, is that within RFC 5382 REQ-5 /
//! RFC 4787 REQ-5, how does the connection die, and what keepalive fixes it.
//!
//! Modules: [`schedule`] (which idle times to test with how many connections; pure),
//! [`verdict`] (findings from outcomes; pure), [`culprit`] (which hop forgets first; pure),
//! [`owner`] (whose box that is and what the user can do about it; pure),
//! [`hops`] (TTL hop discovery), [`proto`] (messages), [`server`] (the `pathdoc server` side),
//! `parking` (the server's one epoll thread for idle probe sockets),
//! [`client`] (the `pathdoc check --idle` side), [`udp_client`] (its UDP bindings),
//! [`duration`] (parsing).

pub mod client;
pub mod culprit;
pub mod defaults;
pub mod duration;
pub mod hops;
pub mod owner;
mod parking;
pub mod proto;
pub mod schedule;
pub mod server;
pub mod udp_client;
pub mod verdict;

pub use client::{run, IdleConfig, IdleError, IdleOptions, IdleResult};
pub use duration::parse_duration;
pub use server::IdleService;
pub use verdict::FINDING_IDS;
