//! The lab tier: end-to-end tests that build network namespaces (root, nftables, tc, iperf3,
//! sshd, Chromium) and run the real `pathdoc` binary inside them. One test binary for the whole
//! tier, built only with the `lab-tests` feature:
//!
//! ```sh
//! cargo test --release -p pathdoc-cli --features lab-tests --test lab
//! ```
//!
//! Tests that measure time or throughput take `support::serial()` and run alone; every other
//! test takes `support::shared()` first and runs beside other such tests (mostly waiting for
//! scaled timeouts), so `--test-threads 3` is safe. `loopback::test_tiers` checks that every
//! test here takes one of the two.

#[path = "../browser/mod.rs"]
mod browser;
#[path = "../support/mod.rs"]
mod support;

mod analyze_lab;
mod analyze_load_lab;
mod delay_line_e2e;
mod exporter_prometheus;
mod idle_culprit;
mod idle_lab;
mod idle_progress;
mod idle_udp;
mod interrupt;
mod lab_faults;
mod lab_lifecycle;
mod lab_nat;
mod lab_pmtu;
mod mtu_lab;
mod nic_lab;
mod police_lab;
mod report_html;
mod server_fairness_v6;
mod shared_lab;
mod speed_lab;
mod ssh_lab;
mod systemd_units;
mod targets;
mod v6_lab;
