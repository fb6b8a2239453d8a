//! docs/exporter.md shows the shipped Prometheus files verbatim, and the shipped example config
//! is valid: what users copy from the docs is what the tests run.

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
        "dist/prometheus/pathdoc-scrape.yml",
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
    let c = pathdoc_exporter::Config::parse(&repo("dist/pathdoc-exporter.toml")).unwrap();
    assert_eq!(c.modules.len(), 3);
    assert!(c.allowed("server.example.net", "idle").is_some());
}
