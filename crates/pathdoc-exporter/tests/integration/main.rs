//! pathdoc-exporter's integration tests as one binary, each file a module: one link instead of one
//! per file, as ripgrep and trippy keep one integration binary per tier (ARCHITECTURE.md, "Tests").
//! tests/connections.rs stays a binary of its own: it lowers the process's descriptor limit.

mod alerts;
mod busy;
mod common;
mod docs_match_dist;
mod http;
mod limits;
