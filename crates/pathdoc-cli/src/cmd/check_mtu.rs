//! The mtu part of `pathdoc check` (owned by the mtu check; see crates/pathdoc-mtu).

use clap::Args;
use pathdoc_core::Report;

use super::check::CheckContext;

#[derive(Args, Debug, Clone)]
pub struct MtuArgs {}

pub async fn run(_ctx: &CheckContext<'_>, _args: &MtuArgs, _report: &mut Report) -> anyhow::Result<()> {
    anyhow::bail!("the mtu check is not implemented in this build")
}
