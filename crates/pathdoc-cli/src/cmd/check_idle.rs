//! The idle part of `pathdoc check` (owned by the idle check; see crates/pathdoc-idle).

use clap::Args;
use pathdoc_core::Report;

use super::check::CheckContext;

#[derive(Args, Debug, Clone)]
pub struct IdleArgs {}

pub async fn run(_ctx: &CheckContext<'_>, _args: &IdleArgs, _report: &mut Report) -> anyhow::Result<()> {
    anyhow::bail!("the idle check is not implemented in this build")
}
