//! pathdoc-analyze's integration tests as one binary, each file a module: one link instead of one
//! per file, as ripgrep and trippy keep one integration binary per tier (ARCHITECTURE.md, "Tests").

mod common;
mod crafted_vs_tshark;
mod diagnose_crafted;
mod diagnose_real_traffic;
mod extreme_times;
mod lab_captures;
