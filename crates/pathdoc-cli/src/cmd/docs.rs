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
    let cmd = crate::cli_command();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        clap_mangen::generate_to(cmd, &dir)
            .with_context(|| format!("writing man pages to {}", dir.display()))?;
        return Ok(0);
    }
    // Built as clap_mangen::generate_to builds it, so subcommands carry their display names
    // (`pathdoc-check`), which become the page titles `man pathdoc-check` finds.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let page = match &args.command {
        None => cmd,
        Some(name) => {
            let known: Vec<&str> = cmd
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(|c| c.get_name())
                .collect();
            match cmd.find_subcommand(name) {
                Some(sub) => sub.clone(),
                None => {
                    return Err(CliError::usage(format!(
                        "no command {name:?}; commands: {}",
                        known.join(", ")
                    ))
                    .into())
                }
            }
        }
    };
    let mut buf = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut buf)
        .context("rendering the man page")?;
    std::io::stdout().lock().write_all(&buf).ok();
    Ok(0)
}
