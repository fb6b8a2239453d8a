//! The lab tier: end-to-end tests that build network namespaces (root, nftables, tc, iperf3,
//! sshd, Chromium) and run the real `pathdoc` binary inside them. One test binary for the whole
//! tier, built only with the `lab-tests` feature:
//!
//! ```sh
//! cargo test --release -p pathdoc-cli --features lab-tests --test lab
//! ```
//!
//! Tests that measure time or throughput take `support::serial()`, one lock for the whole tier,
//! so they never share the two cores with each other; the others (mostly waiting for scaled
//! timeouts) run beside them.

#[path = "../browser/mod.rs"]
mod browser;
#[path = "../support/mod.rs"]
mod support;

mod analyze_lab;
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
mod speed_lab;
mod ssh_lab;
mod targets;
mod v6_lab;
