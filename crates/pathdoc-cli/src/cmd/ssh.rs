//! `pathdoc ssh [user@]host`: what caps bulk transfers over SSH to that host — cipher/CPU, the
//! SSH channel window, TCP buffers or the network — measured with the system's OpenSSH and a
//! temporary pathdoc server started over SSH. The work is in crates/pathdoc-ssh; this module
//! parses options and prints the report. [`SshClientArgs`] is shared with `check --ssh` and
//! `speed --ssh`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use pathdoc_core::Report;
use pathdoc_ssh::{next_step, SshCheckOptions, SshDest};
use tokio_util::sync::CancellationToken;

use crate::progress::TerminalProgress;
use crate::{output, Global};

/// How to reach the far end over SSH (passed to the system `ssh`).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "SSH")]
pub struct SshClientArgs {
    /// An ssh option for every ssh pathdoc runs, as `ssh -o` takes it (repeatable),
    /// e.g. -o ProxyJump=bastion.
    #[arg(short = 'o', long = "ssh-option", value_name = "KEY=VALUE")]
    pub options: Vec<String>,
    /// Identity (private key) file, as `ssh -i`.
    #[arg(short = 'i', long = "ssh-identity", value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// ssh_config file to use instead of ~/.ssh/config, as `ssh -F`.
    #[arg(short = 'F', long = "ssh-config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TCP and UDP port for the temporary pathdoc server on the far end (default: any free
    /// port; pick one the far end's firewall lets through).
    #[arg(long = "ssh-server-port", default_value_t = 0, value_name = "PORT")]
    pub server_port: u16,
    /// Remove the pathdoc binary cached on the far end by earlier runs, then exit.
    #[arg(long = "ssh-clean")]
    pub clean: bool,
}

impl SshClientArgs {
    /// The destination with these options.
    pub fn dest(&self, spec: &str) -> anyhow::Result<SshDest> {
        let mut d = SshDest::parse(spec)?;
        d.options = self.options.clone();
        d.identity = self.identity.clone();
        d.config = self.config.clone();
        Ok(d)
    }
}

#[derive(Args, Debug)]
pub struct SshArgs {
    /// The far end: [user@]host[:port] (host may be an ssh_config alias).
    pub destination: String,
    /// Length of each transfer and each raw TCP test.
    #[arg(long, short = 't', value_name = "DURATION", default_value = "4s",
          value_parser = crate::args::seconds_or_duration(crate::args::secs(1), crate::args::secs(60)))]
    pub time: Duration,
    /// Ciphers to compare (comma-separated; CIPHER or CIPHER+MAC) instead of aes128-gcm,
    /// aes256-gcm, chacha20-poly1305 and aes128-ctr+umac-64-etm.
    #[arg(long, value_delimiter = ',')]
    pub ciphers: Option<Vec<String>>,
    #[command(flatten)]
    pub html: super::report_html::HtmlReportArgs,
    #[command(flatten)]
    pub ssh: SshClientArgs,
}

/// What `--ssh` did for `check`/`speed`.
pub enum SshStart {
    /// No `--ssh`: the target is the HOST given.
    Direct,
    /// A temporary server runs; keep this guard alive until the report is printed.
    Started {
        _guard: Box<pathdoc_ssh::RemoteServer>,
        /// The far end as the user wrote it (`backup@nas`, port and ssh options).
        dest: Box<SshDest>,
    },
    /// `--ssh-clean` ran; exit with this code.
    Cleaned(i32),
}

impl SshStart {
    /// The report's target: the name the user gave, not only the temporary server's address.
    pub fn label(&self, target: String) -> String {
        match self {
            SshStart::Started { dest, .. } => {
                format!("{} over SSH ({target})", pathdoc_ssh::next_step::spec(dest))
            }
            _ => target,
        }
    }

    /// The next steps a run through `--ssh` leads to, as INFO findings: `pathdoc ssh` for SSH
    /// transfers to this host, and after an idle FAIL the keepalive for this host's ssh config.
    pub fn add_next_steps(&self, report: &mut pathdoc_core::Report) {
        let SshStart::Started { dest, .. } = self else {
            return;
        };
        if report.interrupted || report.could_not_run() {
            return;
        }
        if let Some(f) = pathdoc_ssh::next_step::keepalive_finding(dest, report) {
            report.findings.push(f);
        }
        report
            .findings
            .push(pathdoc_ssh::next_step::pathdoc_ssh_finding(dest));
    }
}

/// `--ssh [USER@]HOST`: start a temporary server over SSH and point `target` at it (its address
/// and token), so the rest of `check`/`speed` runs unchanged. Runs on the main thread (the ssh
/// child is tied to it).
pub fn prepare_target(
    target: &mut super::client::ServerTarget,
    ssh: Option<&str>,
    opts: &SshClientArgs,
    progress: &TerminalProgress,
    global: Global,
) -> anyhow::Result<SshStart> {
    let Some(spec) = ssh else {
        if opts.clean {
            anyhow::bail!(crate::error::CliError::usage(
                "--ssh-clean needs --ssh [USER@]HOST"
            ));
        }
        return Ok(SshStart::Direct);
    };
    let dest = opts.dest(spec)?;
    if opts.clean {
        return Ok(SshStart::Cleaned(clean(&dest, global)?));
    }
    let boot = pathdoc_ssh::BootstrapOptions {
        server_port: opts.server_port,
        ..Default::default()
    };
    let remote = pathdoc_ssh::bootstrap(&dest, &boot, progress)?;
    pathdoc_core::Progress::note(
        progress,
        &format!(
            "ssh: temporary pathdoc server on {} at {} ({})",
            pathdoc_ssh::next_step::spec(&dest),
            remote.addr,
            match remote.source {
                pathdoc_ssh::bootstrap::BinarySource::Installed => "its installed pathdoc",
                pathdoc_ssh::bootstrap::BinarySource::Cached => "cached copy",
                pathdoc_ssh::bootstrap::BinarySource::Copied => "copied there now",
            }
        ),
    );
    target.host = Some(remote.addr.to_string());
    target.port = None;
    target.auth_token = Some(remote.token.clone());
    Ok(SshStart::Started {
        _guard: Box::new(remote),
        dest: Box::new(dest),
    })
}

/// The schema of `--ssh-clean --json`: not a report (no findings), so not `pathdoc.report/1`,
/// which `pathdoc report` would try to read back (docs/output.md).
pub const SSH_CLEAN_SCHEMA: &str = "pathdoc.ssh-clean/1";

/// The `--ssh-clean --json` document, fields in this order (schema first, as every document).
#[derive(serde::Serialize)]
struct CleanDocument<'a> {
    schema: &'static str,
    pathdoc_version: &'static str,
    command: &'static str,
    target: &'a str,
    cache_dir: &'a str,
    removed: u64,
}

fn clean_document(destination: &str, done: &pathdoc_ssh::bootstrap::CleanReport) -> String {
    let doc = CleanDocument {
        schema: SSH_CLEAN_SCHEMA,
        pathdoc_version: env!("CARGO_PKG_VERSION"),
        command: "ssh-clean",
        target: destination,
        cache_dir: &done.cache_dir,
        removed: done.removed,
    };
    // Pretty, like every other document pathdoc prints.
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".into())
}

/// `--ssh-clean`: remove the cached binary on the far end.
pub fn clean(dest: &SshDest, global: Global) -> anyhow::Result<i32> {
    let done = pathdoc_ssh::clean(dest, Duration::from_secs(60))?;
    if global.json {
        crate::outln!("{}", clean_document(&next_step::spec(dest), &done));
    } else {
        crate::outln!(
            "removed {} cached pathdoc file(s) from {}:{}",
            done.removed,
            next_step::spec(dest),
            done.cache_dir
        );
    }
    Ok(0)
}

pub fn run(args: SshArgs, global: Global) -> anyhow::Result<i32> {
    let dest = args.ssh.dest(&args.destination)?;
    if args.ssh.clean {
        return clean(&dest, global);
    }
    // Before the minute of transfers: a report that cannot be written is known now.
    let html = args.html.prepare()?;
    let ciphers = args.ciphers.map(|list| {
        list.into_iter()
            .map(|c| match c.split_once('+') {
                Some((c, m)) => (c.to_string(), Some(m.to_string())),
                None => (c, None),
            })
            .collect()
    });
    let mut opts = SshCheckOptions {
        duration: args.time,
        ciphers,
        ..Default::default()
    };
    opts.bootstrap.server_port = args.ssh.server_port;
    let progress = TerminalProgress::new(global);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    // Ctrl-C/SIGTERM: the transfer running stops, the far end is stopped, and the report keeps
    // what was measured (exit 130).
    let cancel: CancellationToken = runtime
        .block_on(async { crate::interrupt::install(global.quiet) })
        .context("installing the Ctrl-C handler")?;
    let result = pathdoc_ssh::run(&dest, &opts, &runtime, &progress, &cancel);
    progress.finish();
    let measured = result?;
    let mut report = Report::new(
        pathdoc_core::Command::Ssh,
        pathdoc_ssh::next_step::spec(&dest),
    );
    report.interrupted = measured.interrupted;
    report.findings = measured.findings(dest.host());
    report.data.insert(
        "ssh".into(),
        serde_json::to_value(&measured).context("encoding the SSH measurements")?,
    );
    crate::provenance::stamp(&mut report);
    let code = output::print_report(&report, global);
    if let Some(html) = html {
        html.write(&report)?;
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `--ssh-clean` document has its own schema: it used to claim `pathdoc.report/1`
    /// without being a report.
    #[test]
    fn ssh_clean_json_has_its_own_schema() {
        let done = pathdoc_ssh::bootstrap::CleanReport {
            cache_dir: "/home/u/.cache/pathdoc".into(),
            removed: 1,
        };
        let text = clean_document("u@nas", &done);
        // Schema first and pretty, like every other document (was compact, keys sorted).
        assert!(
            text.starts_with("{\n  \"schema\": \"pathdoc.ssh-clean/1\",\n  \"pathdoc_version\""),
            "{text}"
        );
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["schema"], "pathdoc.ssh-clean/1");
        assert_ne!(doc["schema"], pathdoc_core::report::SCHEMA_VERSION);
        assert_eq!(doc["command"], "ssh-clean");
        assert_eq!(doc["target"], "u@nas");
        assert_eq!(doc["removed"], 1);
        assert_eq!(doc["cache_dir"], "/home/u/.cache/pathdoc");
    }
}
