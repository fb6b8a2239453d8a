//! docs/exporter.md shows the shipped Prometheus files verbatim, and the shipped example config
//! is valid: what users copy from the docs is what the tests run.

use pathdoc_exporter::module::{IDLE, MTU, THROUGHPUT};

fn repo(path: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The file without its leading comment lines.
fn body(text: &str) -> String {
    text.lines()
        .skip_while(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn docs_show_the_shipped_scrape_config_and_alert_rules() {
    let docs = repo("docs/exporter.md");
    for file in [
        "dist/prometheus/prometheus.yml",
        "dist/prometheus/pathdoc-alerts.yml",
    ] {
        let b = body(&repo(file));
        assert!(
            docs.contains(&b),
            "docs/exporter.md does not show {file} verbatim"
        );
    }
}

#[test]
fn the_example_config_is_valid() {
    let c = pathdoc_exporter::Config::parse(
        &repo("dist/pathdoc-exporter.toml"),
        &[&MTU, &THROUGHPUT, &IDLE],
    )
    .unwrap();
    assert_eq!(c.modules.len(), 3);
    assert!(c.allowed("server.example.net", "idle").is_some());
}

/// The shipped prometheus.yml is complete as it stands: `promtool check config` passes with only
/// the token file's path changed (promtool opens it), and it loads the shipped alert rules.
#[test]
fn the_shipped_prometheus_config_passes_promtool() {
    let dir = std::env::temp_dir().join(format!("pathdoc-promcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "a-token-for-promtool").unwrap();
    let config = repo("dist/prometheus/prometheus.yml");
    let path = "/etc/prometheus/pathdoc-exporter.token";
    assert!(config.contains(path));
    std::fs::write(
        dir.join("prometheus.yml"),
        config.replace(path, &token.display().to_string()),
    )
    .unwrap();
    std::fs::write(
        dir.join("pathdoc-alerts.yml"),
        repo("dist/prometheus/pathdoc-alerts.yml"),
    )
    .unwrap();
    let out = std::process::Command::new("promtool")
        .args(["check", "config"])
        .arg(dir.join("prometheus.yml"))
        .output()
        .expect("promtool (scripts/install-deps.sh installs prometheus)");
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("5 rules found"), "{said}");
}
