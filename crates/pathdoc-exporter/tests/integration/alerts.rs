//! The shipped alert rules (dist/prometheus/pathdoc-alerts.yml) against what the idle module
//! really exports, through `promtool test rules`: an idle monitor still measuring its first
//! result (hours) does not fire the probe-failure alert; a failed run does; no result three
//! hours on fires the no-result alert. The series are the exporter's own encoding of each state.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime};

use pathdoc_exporter::idle::{samples, MonitorState};

const INSTANCE: &str = "server.example.net:7224";

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// promtool `input_series` for a monitor that stays in `state`: every sample of the idle
/// module's answer, with the labels Prometheus adds, constant for `minutes`.
fn input_series(state: &MonitorState, minutes: u32) -> String {
    let text = samples(state).encode();
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let target = format!("job=\"pathdoc_idle\",instance=\"{INSTANCE}\"");
        let series = match series.split_once('{') {
            Some((name, labels)) => format!("{name}{{{target},{labels}"),
            None => format!("{series}{{{target}}}"),
        };
        out.push_str(&format!(
            "      - series: '{series}'\n        values: '{value}x{minutes}'\n"
        ));
    }
    out
}

fn alert_test(series: &str, eval: &str, alert: &str, expected: &str) -> String {
    format!(
        "  - interval: 1m\n    input_series:\n{series}    alert_rule_test:\n      - eval_time: {eval}\n        alertname: {alert}\n        exp_alerts:{expected}\n"
    )
}

#[test]
fn an_idle_first_run_is_not_a_failed_probe_but_a_failed_run_is() {
    let measuring = MonitorState {
        running_since: Some(SystemTime::now()),
        ..MonitorState::default()
    };
    let failed = MonitorState {
        runs: 1,
        failures: 1,
        last_error: Some((
            SystemTime::now() - Duration::from_secs(60),
            "refused".into(),
        )),
        ..MonitorState::default()
    };
    let fires = |name: &str| {
        format!(
            "\n          - exp_labels: {{ severity: warning, job: pathdoc_idle, instance: \"{INSTANCE}\" }}\n            exp_annotations:\n{}",
            annotations(name)
        )
    };
    let tests = [
        // The first run measures for up to 2 h 10 min: neither alert.
        alert_test(
            &input_series(&measuring, 140),
            "2h10m",
            "PathdocProbeFailed",
            " []",
        ),
        alert_test(
            &input_series(&measuring, 140),
            "2h10m",
            "PathdocIdleNoResult",
            " []",
        ),
        // Still nothing after four hours: every run failed.
        alert_test(
            &input_series(&measuring, 300),
            "4h",
            "PathdocIdleNoResult",
            &fires("PathdocIdleNoResult"),
        ),
        // A failed run is a failed probe.
        alert_test(
            &input_series(&failed, 60),
            "30m",
            "PathdocProbeFailed",
            &fires("PathdocProbeFailed"),
        ),
    ];
    promtool_test(&tests.concat(), "idle");
}

#[test]
fn a_probe_the_server_was_too_busy_for_is_not_a_failed_probe() {
    // What a busy server's mtu probe answers (tests/integration/busy.rs), for an hour.
    let target = format!("job=\"pathdoc_mtu\",instance=\"{INSTANCE}\"");
    let series = [("probe_success", 0), ("pathdoc_server_busy", 1)]
        .map(|(name, v)| {
            format!("      - series: '{name}{{{target}}}'\n        values: '{v}x60'\n")
        })
        .concat();
    let labels = format!("{{ severity: info, job: pathdoc_mtu, instance: \"{INSTANCE}\" }}");
    let summary = format!("The pathdoc server {INSTANCE} is too busy for the pathdoc_mtu probe");
    let description = format!(
        "For 30 minutes the pathdoc server at {INSTANCE} refused the exporter's pathdoc_mtu probe \
         for want of room (pathdoc_server_busy_limit names the bound). Its log's refused and \
         counters lines show who holds it; raise the limit the refusal names there if the host \
         has room (docs/server.md, resource model)."
    );
    let busy = format!(
        "\n          - exp_labels: {labels}\n            exp_annotations:\n              summary: \"{summary}\"\n              description: \"{description}\"\n"
    );
    let tests = [
        alert_test(&series, "45m", "PathdocProbeFailed", " []"),
        alert_test(&series, "45m", "PathdocServerBusy", &busy),
    ];
    promtool_test(&tests.concat(), "busy");
}

/// Run `promtool test rules` on the shipped rules with these tests.
fn promtool_test(tests: &str, name: &str) {
    let dir =
        std::env::temp_dir().join(format!("pathdoc-alerts-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("test.yml");
    std::fs::write(
        &file,
        format!(
            "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n{}",
            repo("dist/prometheus/pathdoc-alerts.yml").display(),
            tests
        ),
    )
    .unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (scripts/install-deps.sh installs prometheus)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rule's annotations with the test's labels filled in, as promtool compares them.
fn annotations(alert: &str) -> String {
    match alert {
        "PathdocProbeFailed" => format!(
            "              summary: \"The pathdoc pathdoc_idle probe of {INSTANCE} fails\"\n              description: \"pathdoc exporter could not measure {INSTANCE} (pathdoc_idle) for 15 minutes. Is `pathdoc server` running there and reachable from the exporter's host? The reason is in the exporter's log (journalctl -u pathdoc-exporter).\"\n"
        ),
        _ => format!(
            "              summary: \"No idle result for {INSTANCE} after 3 hours\"\n              description: \"The exporter's idle monitor for {INSTANCE} has produced no result in 3 hours, longer than a run takes. The exporter's log says why each run failed.\"\n"
        ),
    }
}
