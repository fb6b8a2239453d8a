//! Shared vocabulary of pathdoc: the report every check produces and the units it speaks in.
//!
//! Nothing here touches the network or the terminal. Checks build [`report::Finding`]s with
//! [`report::Evidence`]; the CLI renders them as text or JSON.

pub mod addr;
pub mod bufferbloat;
pub mod busy;
pub mod check;
pub mod nic;
pub mod policer;
pub mod progress;
pub mod report;
pub mod text;
pub mod units;

pub use check::{CheckName, CheckOutcome, Command};
pub use progress::{NoProgress, Progress};
pub use report::{
    AddressFamily, Direction, Evidence, FamilyRun, Finding, FindingId, Host, Provenance, Quantity,
    Remedy, Report, Status, GENERIC_FINDING_IDS,
};
