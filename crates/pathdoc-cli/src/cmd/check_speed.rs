//! The speed part of `pathdoc check` (owned by the speed check; see crates/pathdoc-speed).

use clap::Args;
use pathdoc_core::Report;

use super::check::CheckContext;

#[derive(Args, Debug, Clone)]
pub struct ThroughputArgs {}

pub async fn run(_ctx: &CheckContext<'_>, _args: &ThroughputArgs, _report: &mut Report) -> anyhow::Result<()> {
    anyhow::bail!("the speed check is not implemented in this build")
}
