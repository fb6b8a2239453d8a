//! `pathdoc`: the thin binary. Parses arguments, runs one command from the library crates,
//! renders its report, and maps the outcome to an exit code scripts can use:
//! 0 healthy, 1 a fault was found, 2 could not run (usage, unreachable, privilege),
//! 3 inconclusive, 130 interrupted (docs/output.md).

mod args;
mod checks;
mod cmd;
mod error;
mod families;
mod interrupt;
mod json_log;
mod output;
mod progress;
mod provenance;
mod report_footer;
mod speed_table;
mod usage_hints;

use clap::{CommandFactory, Parser, Subcommand};

use error::CliError;

/// `pathdoc --version`: the release and the commit it was built from (build.rs).
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PATHDOC_GIT_COMMIT"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "pathdoc",
    version = LONG_VERSION,
    about = "Diagnose long-lived and bulk TCP transfers across a real path",
    long_about = "Diagnose long-lived and bulk TCP transfers that die or crawl across a real path: idle-state timeouts of NATs and firewalls, path MTU and PMTUD black holes, and what limits throughput — each verdict with the measurements behind it and the fix.",
    after_help = "Examples:\n  pathdoc server                               # on the far end (TCP and UDP 7224)\n  pathdoc check server.example.net             # MTU, throughput, idle timeouts (up to 2 h 10 min)\n  pathdoc speed server.example.net -t 10s -R   # download throughput, iperf3-style\n  sudo pathdoc lab demo                        # see every failure reproduced in a lab\n\nExit codes: 0 no problem, 1 problem found, 2 could not run, 3 inconclusive, 130 interrupted."
)]
struct Cli {
    /// Print a versioned JSON document on stdout instead of human text (errors too).
    #[arg(long, global = true)]
    json: bool,
    /// No progress on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// More log output on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Diagnose the path to a pathdoc server: MTU, throughput, idle timeouts.
    #[command(after_help = cmd::check::EXAMPLES)]
    Check(cmd::check::CheckArgs),
    /// Measure TCP throughput to a pathdoc server and name what limits it.
    #[command(after_help = cmd::speed::EXAMPLES)]
    Speed(cmd::speed::SpeedArgs),
    /// What caps bulk transfers over SSH to a host: cipher/CPU, channel window, TCP buffers or
    /// the network (uses your ssh; nothing to install on the far end).
    #[command(
        after_help = "Examples:\n  pathdoc ssh backup@nas.example.net          # both directions, 4 ciphers, ~1 min\n  pathdoc ssh nas -o ProxyJump=bastion -t 8s  # ssh options pass through\n  pathdoc ssh nas --report nas.html           # also an HTML report with the cipher chart\n  pathdoc ssh nas --ssh-clean                 # remove the pathdoc copied to nas\n\nExit codes: 0 no problem, 1 problem found, 2 could not run, 3 inconclusive, 130 interrupted."
    )]
    Ssh(cmd::ssh::SshArgs),
    /// Re-read a saved `--json` report: print it as text, or write it as HTML with `-o`.
    #[command(
        after_help = "Examples:\n  pathdoc check HOST --json > run.json\n  pathdoc report run.json                  # the text the run printed\n  pathdoc report run.json -o run.html      # a self-contained HTML report with plots\n  pathdoc report run.html                  # an HTML report holds its JSON: reads back too\n\nExit codes: those of the saved run (0, 1, 3, 130); 2 when the file is not a report this version reads."
    )]
    Report(cmd::report::ReportArgs),
    /// Serve Prometheus: /probe?target=HOST&module=mtu|throughput runs a check per scrape,
    /// module=idle returns the latest result of a background monitor (docs/exporter.md).
    #[command(after_help = cmd::exporter::EXAMPLES)]
    Exporter(cmd::exporter::ExporterArgs),
    /// Diagnose the TCP connections in a tcpdump/Wireshark capture (or compare two captures of one path).
    #[command(
        after_help = "Examples:\n  pathdoc analyze capture.pcap                 # findings per connection worth attention\n  tcpdump -i eth0 -w - | pathdoc analyze -     # live, from standard input\n  pathdoc analyze client.pcap server.pcap      # where packets vanish between two capture points\n  pathdoc analyze capture.pcapng.gz --flags    # Wireshark's tcp.analysis flags per packet (TSV)\n  pathdoc analyze capture.pcap --report c.html # also an HTML report (time-sequence graphs)\n\nExit codes: 0 no problem, 1 problem found, 2 could not run, 3 inconclusive, 130 interrupted."
    )]
    Analyze(cmd::analyze::AnalyzeArgs),
    /// Run the far end of the checks (TCP and UDP on one port).
    #[command(
        after_help = "Examples:\n  pathdoc server                                  # all addresses, TCP and UDP 7224\n  pathdoc server --listen 192.0.2.10:7224         # one address\n  pathdoc server --listen [::]:7224               # dual-stack\n  pathdoc server --listen 9000                    # a bare port\n  pathdoc server --once                           # serve one client's checks, then exit (iperf3 -1)\n  pathdoc server --log-format json 2>>server.log  # one JSON object per log line\n  PATHDOC_AUTH_TOKEN=s3cret pathdoc server        # clients must pass the same token\n\nOpen TCP and UDP on the port in the server's firewall. Limits and the resource model: docs/server.md."
    )]
    Server(cmd::server::ServerArgs),
    /// Build network paths with real kernel faults out of network namespaces (needs root).
    #[command(after_help = cmd::lab::EXAMPLES)]
    Lab(cmd::lab::LabArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  pathdoc completions bash > /etc/bash_completion.d/pathdoc\n  pathdoc completions zsh > \"${fpath[1]}/_pathdoc\"\n  pathdoc completions fish > ~/.config/fish/completions/pathdoc.fish"
    )]
    Completions(cmd::docs::CompletionsArgs),
    /// Print the manual page (roff), or write one page per command into a directory.
    #[command(
        after_help = "Examples:\n  pathdoc man | man -l -                      # read it now\n  pathdoc man check | man -l -                # the page of one command\n  pathdoc man --dir /usr/local/share/man/man1 # install pathdoc.1, pathdoc-check.1, …"
    )]
    Man(cmd::docs::ManArgs),
    /// Print the check registry as JSON (for the tests that keep docs and ids in step with it).
    #[command(hide = true)]
    Registry,
}

/// Options every command shares, handed down to the command modules.
#[derive(Debug, Clone, Copy)]
pub struct Global {
    pub json: bool,
    pub quiet: bool,
    pub verbose: u8,
}

/// The whole command-line interface, for completions and man pages.
pub fn cli_command() -> clap::Command {
    Cli::command()
}

fn main() {
    provenance::mark_start();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    let server_logs = match &cli.command {
        Command::Server(a) => Some(a.log_format(cli.json)),
        _ => None,
    };
    init_logging(cli.verbose, server_logs);
    let global = Global {
        json: cli.json,
        quiet: cli.quiet,
        verbose: cli.verbose,
    };
    let name = command_name(&cli.command);
    let result = match cli.command {
        Command::Lab(args) => cmd::lab::run(args, global),
        Command::Server(args) => cmd::server::run(args, global),
        Command::Check(args) => cmd::check::run(args, global),
        Command::Speed(args) => cmd::speed::run(args, global),
        Command::Ssh(args) => cmd::ssh::run(args, global),
        Command::Report(args) => cmd::report::run(args, global),
        Command::Exporter(args) => cmd::exporter::run(args, global),
        Command::Analyze(args) => cmd::analyze::run(args, global),
        Command::Completions(args) => cmd::docs::completions(args),
        Command::Man(args) => cmd::docs::man(args),
        Command::Registry => checks::print(),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            let err = CliError::from_anyhow(&err);
            output::print_error(&err, &name, global);
            std::process::exit(pathdoc_core::report::exit::COULD_NOT_RUN);
        }
    }
}

fn command_name(c: &Command) -> String {
    match c {
        Command::Check(_) => "check".into(),
        Command::Speed(_) => "speed".into(),
        Command::Analyze(_) => "analyze".into(),
        Command::Server(_) => "server".into(),
        Command::Lab(a) => format!("lab {}", a.subcommand_name()),
        Command::Completions(_) => "completions".into(),
        Command::Man(_) => "man".into(),
        Command::Ssh(_) => "ssh".into(),
        Command::Report(_) => "report".into(),
        Command::Exporter(_) => "exporter".into(),
        Command::Registry => "registry".into(),
    }
}

/// Help and `--version` print and exit 0 as usual. Anything else clap rejects is a usage error:
/// one line (or the error document under `--json`), exit 2.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind as K;
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let before_dashdash = || raw.iter().take_while(|a| *a != "--");
    let json = before_dashdash().any(|a| a == "--json");
    match e.kind() {
        K::DisplayHelp | K::DisplayVersion => e.exit(),
        K::DisplayHelpOnMissingArgumentOrSubcommand if !json => e.exit(),
        _ => {}
    }
    let names: Vec<String> = cli_command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let command = before_dashdash()
        .find(|a| names.contains(a))
        .cloned()
        .unwrap_or_default();
    let global = Global {
        json,
        quiet: true,
        verbose: 0,
    };
    let err = CliError::usage(one_line(&e, &command, &raw));
    output::print_error(&err, &command, global);
    std::process::exit(pathdoc_core::report::exit::COULD_NOT_RUN);
}

/// Clap's message without the usage block and tips, on one line, pointing at `--help`; clap's
/// "did you mean" tip is kept in the line, and a negative value gets its own message.
fn one_line(e: &clap::Error, command: &str, argv: &[String]) -> String {
    let help = if command.is_empty() {
        "pathdoc --help".to_string()
    } else {
        format!("pathdoc {command} --help")
    };
    let root = cli_command();
    let scope = root.find_subcommand(command).unwrap_or(&root);
    if let Some(text) = usage_hints::negative_value(e, argv, scope) {
        return format!("{text} (see `{help}`)");
    }
    let rendered = e.render().to_string();
    let first_paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let text = first_paragraph.join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = if text.is_empty() {
        "a command is required"
    } else {
        text
    };
    let did_you_mean = usage_hints::suggestion(e).unwrap_or_default();
    format!("{text}{did_you_mean} (see `{help}`)")
}

/// Logs go to stderr. A server logs one line per connection, session and refusal by default
/// (`info`), as text or, with `--log-format json`, one JSON object per line and nothing else
/// (`"schema": "pathdoc.log/1"` first);
/// other commands log only warnings unless `-v`. `PATHDOC_LOG` overrides the filter
/// (`tracing` env-filter syntax). Colours only on a terminal and when `NO_COLOR` is unset.
fn init_logging(verbose: u8, server: Option<cmd::server::LogFormat>) {
    let default = match (verbose, server.is_some()) {
        (0, true) => "info",
        (0, false) => "warn",
        (1, false) => "info",
        (1, true) | (2, false) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PATHDOC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr());
    match server {
        Some(cmd::server::LogFormat::Json) => builder
            .json()
            .event_format(json_log::WithSchema(
                tracing_subscriber::fmt::format().json().flatten_event(true),
            ))
            .init(),
        Some(cmd::server::LogFormat::Text) => builder.with_target(false).init(),
        None => builder.init(),
    }
}

/// <https://no-color.org>: colour only when stderr is a terminal and `NO_COLOR` is unset or empty.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        cli_command().debug_assert();
    }

    /// A flattened group's help heading carries over to the options after it: `speed --help`
    /// once listed -R, -t and -P under "SSH". SSH options sit last, under their own heading; the
    /// command's own options under none (or their check's).
    #[test]
    fn ssh_options_are_under_ssh_and_nothing_else_is() {
        let cli = cli_command();
        for sub in ["check", "speed", "ssh"] {
            let cmd = cli.find_subcommand(sub).unwrap();
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                let is_ssh_option = matches!(
                    id,
                    "options" | "identity" | "config" | "server_port" | "clean"
                );
                let heading = arg.get_help_heading();
                assert_eq!(
                    heading == Some("SSH"),
                    is_ssh_option,
                    "{sub} --{}: heading {heading:?}",
                    arg.get_long().unwrap_or(id)
                );
                if id == "report" {
                    assert_eq!(heading, Some("Report"), "{sub}");
                }
            }
        }
    }
}
