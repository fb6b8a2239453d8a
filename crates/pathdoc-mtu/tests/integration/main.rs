//! pathdoc-mtu's integration tests as one binary, each file a module (ARCHITECTURE.md, "Tests"):
//! a real in-process `pathdoc server` with the MTU service, spoken to over loopback.

mod mss_listener;
mod send_deadline;
mod support;
mod up_probe_ids;
