//! Network-namespace lab: builds paths with conntrack NAT, nftables filters, MTU, rate, loss and
//! delay out of real kernel parts, reproducing the failures pathdoc diagnoses.
//!
//! ```no_run
//! use pathdoc_lab::{Lab, LabOptions, Topology};
//! let topo = Topology::scenario("modem-idle")?;
//! let lab = Lab::up(&topo, &LabOptions::with_prefix("pdt-example-"))?;
//! let out = lab.command("client", "ping").args(["-c1", &lab.addr("server").to_string()]).output();
//! lab.down()?;
//! # Ok::<(), pathdoc_lab::LabError>(())
//! ```
//!
//! Modules: [`topology`] (TOML model), [`scenarios`] (built-ins), [`plan`] (addresses, pure),
//! [`nft`] (rulesets, pure), [`lab`] (building and tearing down), [`state`] (on-disk state),
//! [`preflight`] (root, tools, kernel), [`exec`] (commands with deadlines), [`traffic`]
//! (measurements used by the demo and tests), [`demo`] (the `pathdoc lab demo` steps),
//! [`delay_line`] (the userspace delay/jitter element on delayed links, also a host's fixed-size
//! NIC segmentation), [`cross`] (background flows sharing a link), [`icmp_count`] (ICMP frag-needed arriving at a host), [`sshd`] (OpenSSH with
//! per-lab keys on hosts with `sshd = true`).

pub mod capture;
pub mod cross;
pub mod delay_line;
pub mod demo;
pub mod error;
pub mod exec;
pub mod hosts;
pub mod icmp_count;
pub mod lab;
pub mod nft;
pub mod plan;
pub mod preflight;
pub mod scenarios;
pub mod sshd;
pub mod state;
pub mod topology;
pub mod traffic;

pub use error::LabError;
pub use lab::{Lab, LabOptions, LabProcess};
pub use state::{LabState, Teardown, SCHEMA};
pub use topology::{Direction, Family, Filter, HopKind, HopSpec, LinkSpec, Rate, Topology};
