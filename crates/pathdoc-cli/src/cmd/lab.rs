//! `pathdoc lab …`: see crates/pathdoc-lab.

use clap::Args;

use crate::Global;

#[derive(Args, Debug)]
pub struct LabArgs {}

pub fn run(_args: LabArgs, _global: Global) -> anyhow::Result<i32> {
    anyhow::bail!("pathdoc lab is being built")
}
