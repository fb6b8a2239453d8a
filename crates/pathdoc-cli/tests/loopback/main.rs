//! The loopback tier: tests of the `pathdoc` binary that need no root and no lab — CLI errors
//! and help, docs and finding-id registries, captures, and client/server runs on 127.0.0.0/8.
//! `cargo test` runs this tier (and every crate's unit tests) as a normal user.

#[path = "../support/mod.rs"]
mod support;

mod analyze_cli;
mod cli_errors;
mod docs;
mod exporter_cli;
mod finding_ids;
mod flags_extreme;
mod idle_mtu_cancel;
mod mtu_loopback;
mod packaging;
mod server_busy;
mod server_cli;
mod server_fairness;
mod server_load;
mod speed_loopback;
mod speed_text;
mod terminal_safety;
mod test_tiers;
