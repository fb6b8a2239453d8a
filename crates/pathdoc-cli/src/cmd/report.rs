//! `pathdoc report FILE.json [-o FILE.html]`: re-read a saved `--json` report (or the HTML page
//! that embeds one) and print it as text, as JSON, or write it as HTML. The text is the same
//! function of the report the original run printed, so a shared run reads exactly the same.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use pathdoc_core::report::{SCHEMA_VERSION, SCHEMA_VERSIONS_READ};
use pathdoc_core::Report;

use super::report_html::HtmlReportArgs;
use crate::{output, Global};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A report saved with `--json` (or an HTML report written by pathdoc); `-` reads stdin.
    pub input: PathBuf,
    /// Write a self-contained HTML report to this file instead of printing text.
    #[arg(short = 'o', long = "output", value_name = "FILE.html")]
    pub output: Option<PathBuf>,
}

pub fn run(args: ReportArgs, global: Global) -> anyhow::Result<i32> {
    let report = load(&args.input)?;
    if let Some(out) = args.output {
        let pending = HtmlReportArgs { report: Some(out) }
            .prepare()?
            .context("no output file")?;
        pending.write(&report)?;
        return Ok(report.exit_code());
    }
    Ok(output::print_report(&report, global))
}

/// Read and check a saved report. Refuses anything but a `pathdoc.report/1` document, naming
/// what it found instead.
pub fn load(input: &PathBuf) -> anyhow::Result<Report> {
    let name = input.display().to_string();
    let mut text = String::new();
    if name == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the report from standard input")?;
    } else {
        let bytes = std::fs::read(input).with_context(|| format!("reading {name}"))?;
        text = String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("{name}: not a pathdoc report (not UTF-8 text)"))?;
    }
    parse(&name, &text)
}

pub fn parse(name: &str, text: &str) -> anyhow::Result<Report> {
    let json = match pathdoc_html::embedded_json(text) {
        Some(j) => j,
        None if text.trim_start().starts_with('<') => {
            bail!("{name}: an HTML file without an embedded pathdoc report")
        }
        None => text,
    };
    let value: serde_json::Value = serde_json::from_str(json)
        .with_context(|| format!("{name}: not a pathdoc report (not JSON)"))?;
    let Some(schema) = value.get("schema").and_then(|s| s.as_str()) else {
        bail!("{name}: not a pathdoc report (no \"schema\" field); save one with `pathdoc check … --json > FILE.json`");
    };
    // The error document of a run that could not run (`pathdoc.error/1`, or the error field of
    // older versions) has no findings to show: say what it says.
    if let Some(err) = value
        .get("error")
        .filter(|_| schema.starts_with("pathdoc."))
    {
        let msg = err
            .get("message")
            .and_then(|m| m.as_str())
            .or_else(|| err.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| err.to_string());
        bail!("{name}: this is the error document of a run that could not run: {msg}");
    }
    if !SCHEMA_VERSIONS_READ.contains(&schema) {
        bail!(
            "{name}: schema {schema:?} is not one this pathdoc {} reads (it reads {}){}",
            env!("CARGO_PKG_VERSION"),
            SCHEMA_VERSIONS_READ.join(", "),
            if schema.starts_with("pathdoc.report/") {
                "; use the pathdoc version that wrote it"
            } else {
                ""
            }
        );
    }
    serde_json::from_value(value).with_context(|| {
        format!("{name}: a {SCHEMA_VERSION} document with missing or malformed fields")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unknown_schemas_and_error_documents_by_name() {
        let e = parse(
            "r.json",
            r#"{"schema": "pathdoc.report/3", "findings": []}"#,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("\"pathdoc.report/3\" is not one"),
            "{e:#}"
        );
        let e = parse("r.json", r#"{"schema": "pathdoc.lab/1"}"#).unwrap_err();
        assert!(format!("{e:#}").contains("pathdoc.lab/1"), "{e:#}");
        let e = parse(
            "r.json",
            r#"{"schema": "pathdoc.report/1", "error": "unreachable"}"#,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("could not run: unreachable"),
            "{e:#}"
        );
        assert!(parse("r.json", "not json").is_err());
        assert!(parse("r.json", "{}").is_err());
        assert!(parse("r.html", "<html></html>").is_err());
    }

    #[test]
    fn reads_its_own_html_back() {
        let mut r = Report::new(pathdoc_core::Command::Check, "192.0.2.1:7224");
        r.findings.push(pathdoc_core::Finding::new(
            "mtu",
            "x",
            pathdoc_core::Status::Pass,
            "a </script> title",
        ));
        let html = pathdoc_html::render(&r, &crate::checks::figures(&r));
        assert_eq!(parse("r.html", &html).unwrap(), r);
    }
}
