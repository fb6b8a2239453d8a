//! Every numeric and duration flag of every command, fed extreme values — zero, huge, negative,
//! non-numeric, overflowing, empty — exits 2 with a one-line error message, never a panic (101),
//! never a hang (`cli_errors.rs` checks that usage errors print nothing else). The flags are read from each command's own `--help`, so a flag added later is covered
//! without touching this test. Loopback only; targets are a port nobody listens on and a listen
//! address this host does not have, so a value that happens to be valid still ends in exit 2.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");

/// Options whose values are names, addresses or text, not numbers: not this test's subject.
const TEXT_OPTIONS: &[&str] = &[
    "auth-token",
    "bind",
    "throughput-cc",
    "cc",
    "listen",
    "log-format",
    "iface-a",
    "iface-b",
    "prefix",
];

const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "-0",
    "99999999999999999999",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "1e400",
    "NaN",
    "inf",
    "0.0000001",
    "9999999h",
    "abc",
    "",
];

/// `--name <VALUE>` options of one command, from its help text.
fn value_options(command: &[&str]) -> Vec<String> {
    let out = Command::new(PATHDOC)
        .args(command)
        .arg("--help")
        .output()
        .expect("run --help");
    assert_eq!(out.status.code(), Some(0), "{command:?} --help");
    let help = String::from_utf8_lossy(&out.stdout);
    let mut options = Vec::new();
    for line in help.lines() {
        let line = line.trim_start();
        let line = match line.split_once(", --") {
            Some((short, rest)) if short.starts_with('-') && short.len() == 2 => rest,
            _ => match line.strip_prefix("--") {
                Some(rest) => rest,
                None => continue,
            },
        };
        let Some((name, rest)) = line.split_once(' ') else {
            continue;
        };
        if rest.starts_with('<') && !TEXT_OPTIONS.contains(&name) {
            options.push(name.to_string());
        }
    }
    options
}

/// Run to completion within 20 s; (exit code, stdout, stderr).
fn run(args: &[String]) -> (i32, String, String) {
    let mut cmd = Command::new(PATHDOC);
    cmd.args(args).stdin(Stdio::null());
    support::run(cmd, Duration::from_secs(20))
}

#[test]
fn extreme_values_of_every_numeric_flag_are_usage_errors_never_panics() {
    let dead = format!("127.0.0.1:{}", support::free_loopback_port());
    // The command prefix that makes each command otherwise valid.
    let commands: Vec<Vec<String>> = [
        vec!["check", dead.as_str(), "--mtu"],
        vec!["speed", dead.as_str()],
        vec!["server", "--listen", "192.0.2.254:7224"],
        vec![
            "lab",
            "delay-line",
            "--iface-a",
            "nope0",
            "--iface-b",
            "nope1",
        ],
    ]
    .into_iter()
    .map(|c| c.into_iter().map(String::from).collect())
    .collect();
    let mut tried = 0;
    let mut failures = Vec::new();
    for base in &commands {
        let sub: Vec<&str> = base
            .iter()
            .map(String::as_str)
            .take_while(|a| !a.contains(':') && !a.starts_with('-'))
            .collect();
        let options = value_options(&sub);
        assert!(!options.is_empty(), "{sub:?} has no numeric options?");
        for option in &options {
            for value in EXTREMES {
                let mut args = base.clone();
                args.push(format!("--{option}={value}"));
                let (code, out, err) = run(&args);
                tried += 1;
                // One error line; a value that happens to be valid may let a command log or
                // report progress before it fails on the dead target, which is fine.
                let errors = err.lines().filter(|l| l.starts_with("pathdoc: error: "));
                let ok =
                    code == 2 && out.is_empty() && !err.contains("panicked") && errors.count() == 1;
                if !ok {
                    failures.push(format!("{args:?}: exit {code}\n{out}{err}"));
                }
            }
        }
    }
    assert!(
        tried > 200,
        "only {tried} combinations: help parsing broke?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

#[test]
fn invalid_values_are_reported_as_usage_errors_in_json() {
    let dead = format!("127.0.0.1:{}", support::free_loopback_port());
    for (option, value) in [
        ("time", "99999999999999999999"),
        ("interval", "99999999999999999999"),
        ("streams", "0"),
        ("window", "1"),
        ("bytes", "-5"),
        ("port", "0"),
    ] {
        let args = vec![
            "speed".to_string(),
            dead.clone(),
            format!("--{option}={value}"),
            "--json".into(),
        ];
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        let doc: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}{err}"));
        assert_eq!(doc["error"]["kind"], "usage", "{args:?}: {doc:#}");
    }
}
