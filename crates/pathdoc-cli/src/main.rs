//! `pathdoc`: the thin binary. Parses arguments, runs one command from the library crates,
//! renders its report, and maps the outcome to an exit code scripts can use:
//! 0 healthy, 1 a fault was found, 2 could not run (usage, unreachable, privilege), 3 inconclusive.

mod cmd;
mod output;
mod progress;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "pathdoc", version, about = "Diagnose long-lived and bulk TCP transfers across a real path", long_about = None)]
struct Cli {
    /// Print a versioned JSON document instead of human text.
    #[arg(long, global = true)]
    json: bool,
    /// More log output on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build network paths with real kernel faults out of network namespaces (needs root).
    Lab(cmd::lab::LabArgs),
    /// Run the far end of the checks (TCP and UDP on one port).
    Server(cmd::server::ServerArgs),
    /// Diagnose the path to a pathdoc server: MTU, throughput, idle timeouts.
    #[command(
        after_help = "Examples:\n  pathdoc check server.example.net           # all checks; the idle check takes up to 2 h 10 min\n  pathdoc check server.example.net --mtu     # one check (also --throughput, --idle)\n  pathdoc check 203.0.113.10:7224 --json     # versioned JSON for scripts (docs/output.md)\n\nExit codes: 0 no problem, 1 problem found, 2 could not run, 3 inconclusive."
    )]
    Check(cmd::check::CheckArgs),
    /// Measure TCP throughput to a pathdoc server and name what limits it.
    Speed(cmd::speed::SpeedArgs),
    /// Re-read a saved `--json` report: print it as text, or write it as HTML with `-o`.
    #[command(
        after_help = "Examples:\n  pathdoc check HOST --json > run.json\n  pathdoc report run.json                  # the text the run printed\n  pathdoc report run.json -o run.html      # a self-contained HTML report with plots\n\nExit codes: those of the saved run (0, 1, 3); 2 when the file is not a report this version reads."
    )]
    Report(cmd::report::ReportArgs),
    /// Serve Prometheus: /probe?target=HOST&module=mtu|throughput runs a check per scrape,
    /// module=idle returns the latest result of a background monitor (docs/exporter.md).
    Exporter(cmd::exporter::ExporterArgs),
}

/// Options every command shares, handed down to the command modules.
#[derive(Debug, Clone, Copy)]
pub struct Global {
    pub json: bool,
    pub verbose: u8,
}

fn main() {
    let cli = Cli::parse();
    let json_logs = matches!(&cli.command, Command::Server(a) if a.log_format() == cmd::server::LogFormat::Json);
    init_logging(cli.verbose, json_logs);
    let global = Global {
        json: cli.json,
        verbose: cli.verbose,
    };
    let result = match cli.command {
        Command::Lab(args) => cmd::lab::run(args, global),
        Command::Server(args) => cmd::server::run(args, global),
        Command::Check(args) => cmd::check::run(args, global),
        Command::Speed(args) => cmd::speed::run(args, global),
        Command::Report(args) => cmd::report::run(args, global),
        Command::Exporter(args) => cmd::exporter::run(args, global),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            output::print_error(&err, global);
            std::process::exit(2);
        }
    }
}

fn init_logging(verbose: u8, json: bool) {
    let default = match verbose {
        0 if json => "info",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PATHDOC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
