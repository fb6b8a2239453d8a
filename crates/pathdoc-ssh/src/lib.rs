//! SSH for pathdoc.
//!
//! - [`bootstrap`]: `--ssh [user@]host` — start a temporary `pathdoc server` on the far end over
//!   the system's OpenSSH client and get back its address, token and a guard that stops it.
//! - [`run`] (`pathdoc ssh host`): what caps bulk transfers over SSH. Raw TCP both ways through
//!   the temporary server (the network's ceiling), then SSH transfers both ways for the
//!   negotiated cipher and each of [`CANDIDATES`] both ends offer, each with evidence from both
//!   ends ([`evidence`]), and one verdict per direction ([`analysis`]).
//!
//! Modules: [`dest`] (destination, `ssh -G`), [`process`] (spawning ssh: deadlines, death with
//! the parent, error classification), [`sshlog`] (`ssh -vv` facts), [`transfer`] (one measured
//! transfer), [`steady`] (its steady-state summary), [`evidence`] (both ends' TCP_INFO and CPU;
//! the far end's service), [`analysis`] (verdicts), [`next_step`] (the INFO findings that lead
//! from `check --ssh` to `pathdoc ssh` and to a keepalive for this host), [`error`].
//!
//! The functions that start `ssh` children must run on a thread that outlives them (pathdoc's
//! main thread): each child is tied to its parent thread with `PR_SET_PDEATHSIG`.

pub mod analysis;
pub mod bootstrap;
pub mod dest;
pub mod error;
pub mod evidence;
pub mod next_step;
pub mod process;
pub mod sshlog;
pub mod steady;
pub mod transfer;

use std::time::Duration;

use pathdoc_core::units::{format_byte_rate, format_rate};
use pathdoc_core::{Finding, Progress};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

pub use analysis::FINDING_IDS;
pub use bootstrap::{bootstrap, clean, BootstrapOptions, RemoteServer};
pub use dest::SshDest;
pub use error::SshError;
pub use evidence::EvidenceService;
pub use steady::Way;
pub use transfer::Transfer;

/// The ciphers compared besides the negotiated one (with the MAC for the non-AEAD one).
pub const CANDIDATES: &[(&str, Option<&str>)] = &[
    ("aes128-gcm@openssh.com", None),
    ("aes256-gcm@openssh.com", None),
    ("chacha20-poly1305@openssh.com", None),
    ("aes128-ctr", Some("umac-64-etm@openssh.com")),
];

/// What `pathdoc ssh` measures.
#[derive(Debug, Clone)]
pub struct SshCheckOptions {
    /// Length of each transfer (and of each raw TCP test).
    pub duration: Duration,
    /// Compare these ciphers instead of [`CANDIDATES`] (`cipher` or `cipher+mac`).
    pub ciphers: Option<Vec<(String, Option<String>)>>,
    pub bootstrap: BootstrapOptions,
}

impl Default for SshCheckOptions {
    fn default() -> Self {
        SshCheckOptions {
            duration: Duration::from_secs(4),
            ciphers: None,
            bootstrap: BootstrapOptions {
                ssh_evidence: true,
                ..Default::default()
            },
        }
    }
}

/// Raw TCP through the temporary server.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RawTcp {
    /// Goodput in the steady state when the test had one (else over the whole test): the same
    /// figure `check --throughput` judges.
    pub upload_bps: Option<f64>,
    pub download_bps: Option<f64>,
    /// Goodput over the whole test, slow start included.
    pub upload_whole_test_bps: Option<f64>,
    pub download_whole_test_bps: Option<f64>,
    /// What `*_bps` covers: "steady state (1.0–4.0 s)" or "whole test".
    pub upload_basis: Option<String>,
    pub download_basis: Option<String>,
    /// pathdoc-speed's own verdict on each raw stream (e.g. `receive-window-limited`).
    pub upload_limit: Option<String>,
    pub download_limit: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Everything `pathdoc ssh` measured (the JSON `data.ssh` of the report).
#[derive(Debug, Clone, Serialize)]
pub struct SshReport {
    pub destination: String,
    pub remote: bootstrap::RemoteFacts,
    pub server_binary: Option<bootstrap::BinarySource>,
    pub raw_tcp: RawTcp,
    /// Ciphers this ssh supports (`ssh -Q cipher`) and the server offers (its KEXINIT).
    pub client_ciphers: Vec<String>,
    pub server_ciphers: Vec<String>,
    pub transfers: Vec<Transfer>,
    /// Ciphers not measured, and why.
    pub skipped: Vec<(String, String)>,
    pub interrupted: bool,
}

impl SshReport {
    fn versions(&self) -> (Option<&str>, Option<&str>) {
        let log = self.transfers.first().map(|t| &t.log);
        (
            log.and_then(|l| l.local_version.as_deref()),
            log.and_then(|l| l.remote_version.as_deref()),
        )
    }

    /// One verdict per direction, after the versions.
    pub fn findings(&self, host: &str) -> Vec<Finding> {
        let (client_version, server_version) = self.versions();
        let mut out = vec![analysis::versions_finding(client_version, server_version)];
        for way in [Way::Upload, Way::Download] {
            if !self.transfers.iter().any(|t| t.way == way) {
                if self.interrupted {
                    out.push(analysis::not_started_finding(way));
                }
                continue;
            }
            out.push(analysis::diagnose_direction(&analysis::DirectionInput {
                way,
                raw_bps: match way {
                    Way::Upload => self.raw_tcp.upload_bps,
                    Way::Download => self.raw_tcp.download_bps,
                },
                raw_limit: match way {
                    Way::Upload => self.raw_tcp.upload_limit.as_deref(),
                    Way::Download => self.raw_tcp.download_limit.as_deref(),
                },
                raw_whole_test_bps: match way {
                    Way::Upload => self.raw_tcp.upload_whole_test_bps,
                    Way::Download => self.raw_tcp.download_whole_test_bps,
                },
                raw_basis: match way {
                    Way::Upload => self.raw_tcp.upload_basis.as_deref(),
                    Way::Download => self.raw_tcp.download_basis.as_deref(),
                },
                transfers: &self.transfers,
                host,
                client_version,
                server_version,
            }));
        }
        out
    }
}

/// `ssh -Q cipher` / `ssh -Q mac`: what this client supports.
fn supported(dest: &SshDest, what: &str) -> Vec<String> {
    process::run(
        dest,
        &["-Q".into(), what.into()],
        None,
        Duration::from_secs(10),
    )
    .map(|r| {
        r.stdout
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// Run the whole SSH diagnosis against `dest`. Call from the main thread, not inside
/// `runtime`'s `block_on`.
pub fn run(
    dest: &SshDest,
    opts: &SshCheckOptions,
    runtime: &tokio::runtime::Runtime,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<SshReport, SshError> {
    let mut boot = opts.bootstrap.clone();
    boot.ssh_evidence = true;
    let server = bootstrap::bootstrap(dest, &boot, progress)?;
    let mut report = SshReport {
        destination: dest.destination.clone(),
        remote: server.facts.clone(),
        server_binary: Some(server.source),
        raw_tcp: RawTcp::default(),
        client_ciphers: supported(dest, "cipher"),
        server_ciphers: Vec::new(),
        transfers: Vec::new(),
        skipped: Vec::new(),
        interrupted: false,
    };
    let client_macs = supported(dest, "mac");
    raw_tcp(&server, opts, runtime, progress, cancel, &mut report);
    let mut transfers = Transfers {
        dest,
        opts,
        runtime,
        progress,
        cancel,
        evidence: connect_evidence(&server, runtime, progress),
    };
    // The default transfer first: its log says what the server offers. It failing is fatal
    // (nothing can be said); later ones are skipped. Until its log says what both ends offer,
    // only a bound on the number of transfers is known.
    let candidates = opts.ciphers.as_ref().map_or(CANDIDATES.len(), Vec::len);
    transfers.measure(
        &mut report,
        Way::Upload,
        &None,
        &None,
        step_label(1, 2 * (1 + candidates), false),
    )?;
    let plan = cipher_plan(opts, &mut report, &client_macs);
    transfers.run_plan(&mut report, &plan);
    report.interrupted |= cancel.is_cancelled();
    progress.status("ssh: stopping the temporary server");
    drop(transfers);
    let _ = server.stop();
    Ok(report)
}

/// The far end's evidence service, or `None` (said on the progress line): the client side is
/// then measured alone.
fn connect_evidence(
    server: &RemoteServer,
    runtime: &tokio::runtime::Runtime,
    progress: &dyn Progress,
) -> Option<evidence::EvidenceClient> {
    runtime
        .block_on(evidence::EvidenceClient::connect(
            server.addr,
            Some(server.token.clone()),
        ))
        .map_err(|e| {
            progress.note(&format!(
                "ssh: no far-end evidence ({e}); measuring the client side only"
            ));
            e
        })
        .ok()
}

/// The ciphers (and MACs) to measure, the default first: the requested or candidate ciphers
/// both ends offer. The others go to `report.skipped` with the reason; the server's offer is
/// read from the default transfer's log into `report.server_ciphers`.
fn cipher_plan(
    opts: &SshCheckOptions,
    report: &mut SshReport,
    client_macs: &[String],
) -> Vec<(Option<String>, Option<String>)> {
    if let Some(first) = report.transfers.first() {
        report.server_ciphers = first.log.server_ciphers.clone();
    }
    let negotiated = report
        .transfers
        .first()
        .and_then(|t| t.cipher().map(str::to_string));
    let server_macs = report
        .transfers
        .first()
        .map(|t| t.log.server_macs.clone())
        .unwrap_or_default();
    let candidates: Vec<(String, Option<String>)> = opts.ciphers.clone().unwrap_or_else(|| {
        CANDIDATES
            .iter()
            .map(|(c, m)| (c.to_string(), m.map(str::to_string)))
            .collect()
    });
    let mut plan: Vec<(Option<String>, Option<String>)> = vec![(None, None)];
    for (cipher, mac) in candidates {
        let offered = |list: &[String], x: &str| list.is_empty() || list.iter().any(|c| c == x);
        if Some(&cipher) == negotiated.as_ref() && mac.is_none() {
            continue; // measured as the default
        }
        if !offered(&report.client_ciphers, &cipher) {
            report.skipped.push((
                cipher,
                "this ssh does not support it (ssh -Q cipher)".into(),
            ));
        } else if !offered(&report.server_ciphers, &cipher) {
            report
                .skipped
                .push((cipher, "the server does not offer it".into()));
        } else if mac
            .as_ref()
            .is_some_and(|m| !offered(client_macs, m) || !offered(&server_macs, m))
        {
            report
                .skipped
                .push((cipher, "its MAC is not offered by both ends".into()));
        } else {
            plan.push((Some(cipher), mac));
        }
    }
    plan
}

/// What every SSH transfer of a run shares: where to, how long, and the far end's evidence.
struct Transfers<'a> {
    dest: &'a SshDest,
    opts: &'a SshCheckOptions,
    runtime: &'a tokio::runtime::Runtime,
    progress: &'a dyn Progress,
    cancel: &'a CancellationToken,
    evidence: Option<evidence::EvidenceClient>,
}

impl Transfers<'_> {
    /// Both directions of every planned cipher (the default's upload was measured first);
    /// a failed transfer is noted and skipped, an interruption stops the plan.
    fn run_plan(&mut self, report: &mut SshReport, plan: &[(Option<String>, Option<String>)]) {
        let total = plan.len() * 2;
        let mut step = 1;
        for (i, (cipher, mac)) in plan.iter().enumerate() {
            for way in [Way::Upload, Way::Download] {
                if i == 0 && way == Way::Upload {
                    continue; // done above
                }
                step += 1;
                if self.cancel.is_cancelled() {
                    report.interrupted = true;
                    break;
                }
                let numbered = step_label(step, total, true);
                if let Err(e) = self.measure(report, way, cipher, mac, numbered) {
                    let name = cipher.clone().unwrap_or_else(|| "default".into());
                    let failed = format!("ssh: {} with {name} failed: {e}", way.label());
                    self.progress.note(&failed);
                    report
                        .skipped
                        .push((name, format!("{} failed: {e}", way.label())));
                }
            }
        }
    }

    /// One transfer, added to `report` and its rate said on the progress line.
    fn measure(
        &mut self,
        report: &mut SshReport,
        way: Way,
        cipher: &Option<String>,
        mac: &Option<String>,
        step: String,
    ) -> Result<(), SshError> {
        let label = cipher
            .clone()
            .unwrap_or_else(|| "the default cipher".into());
        self.progress
            .status(&format!("ssh: {} with {label} {step}", way.label()));
        let estimate = download_estimate(report, cipher);
        let spec = transfer::TransferSpec {
            way,
            cipher: cipher.clone(),
            mac: mac.clone(),
            duration: self.opts.duration,
            download_bytes: ((estimate / 8.0 * self.opts.duration.as_secs_f64()) as u64)
                .clamp(8 << 20, 64 << 30),
        };
        let handle = self.runtime.handle();
        let t = transfer::run(
            self.dest,
            &spec,
            self.evidence.as_mut(),
            handle,
            self.cancel,
        )?;
        let rate = t
            .steady
            .as_ref()
            .map(|s| s.rate_bps)
            .unwrap_or(t.goodput_bps);
        self.progress.note(&format!(
            "ssh: {} {}: {} ({}){}",
            way.label(),
            t.cipher().unwrap_or(&label),
            format_rate(rate),
            format_byte_rate(rate / 8.0),
            t.incomplete
                .as_ref()
                .map(|i| format!(" — {i}"))
                .unwrap_or_default()
        ));
        report.transfers.push(t);
        Ok(())
    }
}

/// The rate a download is sized from (bit/s): the last download measured, else this cipher's
/// upload, else raw TCP's download. A guess too big is cut at 3× the duration.
fn download_estimate(report: &SshReport, cipher: &Option<String>) -> f64 {
    let rate_of = |t: &Transfer| t.steady.as_ref().map(|s| s.rate_bps);
    report
        .transfers
        .iter()
        .rev()
        .find(|t| t.way == Way::Download && t.steady.is_some())
        .and_then(rate_of)
        .or_else(|| {
            report
                .transfers
                .iter()
                .rev()
                .find(|t| t.requested_cipher == *cipher && t.steady.is_some())
                .and_then(rate_of)
        })
        .or(report.raw_tcp.download_bps)
        .unwrap_or(200e6)
}

fn raw_tcp(
    server: &RemoteServer,
    opts: &SshCheckOptions,
    runtime: &tokio::runtime::Runtime,
    progress: &dyn Progress,
    cancel: &CancellationToken,
    report: &mut SshReport,
) {
    for mode in [pathdoc_speed::Mode::Upload, pathdoc_speed::Mode::Download] {
        if cancel.is_cancelled() {
            return;
        }
        let label = if mode == pathdoc_speed::Mode::Upload {
            "upload"
        } else {
            "download"
        };
        progress.status(&format!("ssh: raw TCP {label} (the network's ceiling)"));
        let o = pathdoc_speed::SpeedOptions {
            mode,
            duration: opts.duration,
            interval: Duration::from_millis(500).min(opts.duration / 2),
            ..Default::default()
        };
        let result = runtime.block_on(pathdoc_speed::run_test(
            server.addr,
            Some(server.token.clone()),
            &o,
            progress,
            cancel,
        ));
        match result {
            Ok(run) => {
                // The steady state, as `check --throughput` judges it: the whole test would
                // count slow start and understate the headroom over SSH on a long path.
                let basis = run
                    .directions
                    .first()
                    .map(pathdoc_speed::analysis::Basis::of);
                let bps = basis.as_ref().map(|b| b.rate_bps);
                let whole = run.directions.first().map(|d| d.goodput_bps);
                let label_of_basis = basis.map(|b| b.label);
                // The second finding of a direction is pathdoc-speed's "limited by" verdict; a
                // shared bottleneck (the path set the rate, a fraction of the probed capacity)
                // says more about that path than "link-limited".
                let limit = run.directions.first().and_then(|d| {
                    let findings = pathdoc_speed::diagnose_direction(d);
                    if findings.iter().any(|f| f.id == "shared-bottleneck") {
                        return Some("shared-bottleneck".to_string());
                    }
                    findings.get(1).map(|f| f.id.clone())
                });
                if let Some(b) = bps {
                    progress.note(&format!(
                        "ssh: raw TCP {label}: {} goodput ({})",
                        format_rate(b),
                        label_of_basis.as_deref().unwrap_or("whole test")
                    ));
                }
                match mode {
                    pathdoc_speed::Mode::Upload => {
                        report.raw_tcp.upload_bps = bps;
                        report.raw_tcp.upload_whole_test_bps = whole;
                        report.raw_tcp.upload_basis = label_of_basis;
                        report.raw_tcp.upload_limit = limit;
                    }
                    _ => {
                        report.raw_tcp.download_bps = bps;
                        report.raw_tcp.download_whole_test_bps = whole;
                        report.raw_tcp.download_basis = label_of_basis;
                        report.raw_tcp.download_limit = limit;
                    }
                }
            }
            Err(e) => report.raw_tcp.errors.push(format!("{label}: {e}")),
        }
    }
}

/// The step counter of the SSH transfers' progress line. Every line carries a total: before the
/// first transfer shows what both ends offer, the bound of every candidate cipher both ways
/// (`(1 of up to 10)` with the default candidates), then the plan's exact count (`(2 of 8)`), never a bare `(1)`.
fn step_label(step: usize, total: usize, exact: bool) -> String {
    if exact {
        format!("({step} of {total})")
    } else {
        format!("({step} of up to {total})")
    }
}

#[cfg(test)]
mod step_label_tests {
    use super::step_label;

    #[test]
    fn every_step_names_a_total() {
        // The first transfer, before the plan is known: a bound, not "(1)".
        assert_eq!(step_label(1, 12, false), "(1 of up to 12)");
        assert_eq!(step_label(2, 8, true), "(2 of 8)");
        for (step, total, exact) in [(1, 2, false), (1, 12, false), (8, 8, true)] {
            assert!(step_label(step, total, exact).contains(" of "));
        }
    }
}
