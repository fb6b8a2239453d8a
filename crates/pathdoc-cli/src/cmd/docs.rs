//! `pathdoc completions SHELL` and `pathdoc man`: generated from the clap definition, so they
//! never drift from the real flags.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

use crate::error::CliError;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The page of one command (check, speed, server, lab, …) instead of the main page.
    pub command: Option<String>,
    /// Write every page (pathdoc.1, pathdoc-check.1, …) into this directory instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

pub fn completions(args: CompletionsArgs) -> anyhow::Result<i32> {
    let mut cmd = crate::cli_command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "pathdoc", &mut out);
    out.flush().ok();
    Ok(0)
}

pub fn man(args: ManArgs) -> anyhow::Result<i32> {
    // Built as clap_mangen::generate_to builds it, so subcommands carry their display names
    // (`pathdoc-check`), which become the page titles `man pathdoc-check` finds.
    let mut cmd = crate::cli_command().disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for page in pages(&cmd) {
            page.generate_to(&dir)
                .with_context(|| format!("writing man pages to {}", dir.display()))?;
        }
        return Ok(0);
    }
    let page = match &args.command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => sub.clone(),
            None => {
                let known: Vec<&str> = visible(&cmd).map(|c| c.get_name()).collect();
                return Err(CliError::usage(format!(
                    "no command {name:?}; commands: {}",
                    known.join(", ")
                ))
                .into());
            }
        },
    };
    let mut buf = Vec::new();
    page_of(page)
        .render(&mut buf)
        .context("rendering the man page")?;
    std::io::stdout().lock().write_all(&buf).ok();
    Ok(0)
}

fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set())
}

/// The page of `cmd` and of each visible subcommand, recursively (`pathdoc-lab-up`, …).
fn pages(cmd: &clap::Command) -> Vec<clap_mangen::Man> {
    let mut all = vec![page_of(cmd.clone())];
    for sub in visible(cmd) {
        all.extend(pages(sub));
    }
    all
}

fn page_of(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd)
        .source(format!("pathdoc {}", env!("CARGO_PKG_VERSION")))
        .manual("pathdoc manual")
}
