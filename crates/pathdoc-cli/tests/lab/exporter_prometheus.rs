//! `pathdoc exporter` under a real Prometheus: a lab path (the `modem-idle` strict NAT scaled to a
//! 3 s timeout, plus a 50 Mbit/s server link, and a 1400-byte MTU from the NAT towards the client
//! whose ICMP frag-needed the server's firewall eats), a real `pathdoc server`, the exporter and Prometheus in the
//! client's namespace. Prometheus runs the shipped dist/prometheus/prometheus.yml (scaled to seconds)
//! and evaluates dist/prometheus/pathdoc-alerts.yml; the test reads everything back through
//! Prometheus's HTTP API. A target the config does not list is refused.

use crate::support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use pathdoc_lab::{Lab, Topology};
use serde_json::Value;
use support::{run, wait_listening, Cleanup, PATHDOC, SERVER_PORT};

const STEM: &str = "pdx";
const EXPORTER: &str = "127.0.0.1:9724";
const PROMETHEUS: &str = "127.0.0.1:9090";
const TOKEN: &str = "exporter-test-token";
/// tbf rate of the server link, both ways.
const RATE_BPS: f64 = 50e6;

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn topology() -> Topology {
    // modem-idle through the same fields users set, scaled from 60 s to 3 s…
    let mut t = Topology::scenario("modem-idle").unwrap();
    t.hops[0].conntrack.tcp_established = Some(3);
    t.hops[0].conntrack.udp = Some(2);
    // …with a measurable rate on the server's link and a 1400-byte MTU from the NAT towards the
    // client, whose ICMP frag-needed the server's firewall eats: a black hole.
    let extra = Topology::from_toml(
        "[[hop]]\n[server]\nfilters = [\"drop-icmp-frag-needed\"]\n[[link]]\n[link.down]\nmtu = 1400\n[[link]]\nrate = \"50 Mbit/s\"\n",
    )
    .unwrap();
    t.server = extra.server;
    t.links = extra.links;
    t
}

/// Query Prometheus (inside the lab's client namespace) and return `data.result`.
fn query(lab: &Lab, promql: &str) -> Vec<Value> {
    let mut cmd = lab.command("client", "curl");
    cmd.args(["-sS", "--max-time", "5", "-G"])
        .arg(format!("http://{PROMETHEUS}/api/v1/query"))
        .arg("--data-urlencode")
        .arg(format!("query={promql}"));
    let (code, out, err) = run(cmd, Duration::from_secs(10));
    assert_eq!(code, 0, "curl: {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["status"], "success", "{promql}: {v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// Poll until `promql` returns at least one sample (at most until `deadline`).
fn wait_for(lab: &Lab, promql: &str, deadline: Instant) -> Vec<Value> {
    loop {
        let r = query(lab, promql);
        if !r.is_empty() {
            return r;
        }
        assert!(Instant::now() < deadline, "Prometheus never had {promql}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The shipped dist/prometheus/prometheus.yml as users copy it, scaled from minutes to seconds,
/// pointed at the lab's server and a token file, plus a job for a target the exporter's config
/// does not list. The rules file sits next to it, as the shipped config expects.
fn prometheus_config(dir: &std::path::Path, server: &str) -> String {
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    std::fs::copy(
        repo_file("dist/prometheus/pathdoc-alerts.yml"),
        dir.join("pathdoc-alerts.yml"),
    )
    .unwrap();
    let mut config = std::fs::read_to_string(repo_file("dist/prometheus/prometheus.yml")).unwrap();
    let token = token_file.display().to_string();
    for (from, to) in [
        (
            "evaluation_interval: 1m",
            "evaluation_interval: 1s\n  scrape_interval: 2s",
        ),
        (
            "scrape_interval: 5m\n    scrape_timeout: 30s",
            "scrape_interval: 10s\n    scrape_timeout: 9s",
        ),
        (
            "scrape_interval: 15m\n    scrape_timeout: 50s",
            "scrape_interval: 20s\n    scrape_timeout: 15s",
        ),
        (
            "scrape_interval: 1m\n    scrape_timeout: 10s",
            "scrape_interval: 2s\n    scrape_timeout: 1s",
        ),
        ("/etc/prometheus/pathdoc-exporter.token", token.as_str()),
        ("server.example.net:7224", server),
    ] {
        assert!(config.contains(from), "the shipped config has no {from:?}");
        config = config.replace(from, to);
    }
    assert!(config.contains(&format!("replacement: {EXPORTER}")));
    // Not in the exporter's config: must be refused, never probed.
    config.push_str(&format!(
        "  - job_name: pathdoc_not_allowed\n    metrics_path: /probe\n    params: {{ module: [mtu] }}\n    scrape_interval: 2s\n    scrape_timeout: 1s\n    authorization: {{ credentials_file: {token} }}\n    static_configs:\n      - targets: [\"198.51.100.7:7224\"]\n    relabel_configs: *pathdoc_relabel\n"
    ));
    config
}

#[test]
fn prometheus_scrapes_mtu_goodput_and_idle_results_and_alerts_fire() {
    let _serial = support::serial();
    let dir = std::env::temp_dir().join(format!("pathdoc-exporter-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tsdb")).unwrap();
    let scratch = Scratch(dir.clone());

    // The shipped rules must be valid for this Prometheus.
    let mut check = std::process::Command::new("promtool");
    check
        .args(["check", "rules"])
        .arg(repo_file("dist/prometheus/pathdoc-alerts.yml"));
    let (code, out, err) = run(check, Duration::from_secs(30));
    assert_eq!(code, 0, "promtool: {out}{err}");

    let cleanup = Cleanup::new(STEM, "prom");
    let lab_guard = Lab::up(&topology(), &support::opts(STEM, "prom")).expect("lab up");
    let lab = &lab_guard;
    // The exporter checks again and again from one address: each probe is a session (two per
    // throughput probe), so the server must allow that address more than the default 8.
    let mut server_cmd = lab.command("server", PATHDOC);
    server_cmd
        .args(["server", "--max-sessions-per-ip", "256", "--listen"])
        .arg(format!("0.0.0.0:{SERVER_PORT}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _server = lab
        .spawn("server", server_cmd)
        .expect("start pathdoc server");
    let server = format!("{}:{SERVER_PORT}", lab.addr("server"));
    wait_listening(lab, "client", server.parse().unwrap());
    let config = dir.join("exporter.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{EXPORTER}\"\nauth_tokens = [\"{TOKEN}\"]\n\
             [modules.mtu]\ncheck = \"mtu\"\n\
             [modules.throughput]\ncheck = \"throughput\"\ntime = \"3s\"\n\
             [modules.idle]\ncheck = \"idle\"\nidle_max = \"10s\"\nresolution = \"1s\"\ninterval = \"2s\"\n\
             [[targets]]\naddress = \"{server}\"\nmodules = [\"mtu\", \"throughput\", \"idle\"]\n"
        ),
    )
    .unwrap();
    let mut exporter = lab.command("client", PATHDOC);
    exporter
        .args(["exporter", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _exporter = lab.spawn("client", exporter).expect("start the exporter");
    wait_listening(lab, "client", EXPORTER.parse().unwrap());

    let prom_config = dir.join("prometheus.yml");
    std::fs::write(&prom_config, prometheus_config(&dir, &server)).unwrap();
    let mut prometheus = lab.command("client", "prometheus");
    prometheus
        .arg(format!("--config.file={}", prom_config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _prometheus = lab.spawn("client", prometheus).expect("start prometheus");
    wait_listening(lab, "client", PROMETHEUS.parse().unwrap());

    let deadline = Instant::now() + Duration::from_secs(150);

    // MTU: 1500 towards the server, 1400 towards the client, where ICMP is eaten: a black hole.
    let up = wait_for(
        lab,
        "pathdoc_path_mtu_bytes{job=\"pathdoc_mtu\",direction=\"client-to-server\"}",
        deadline,
    );
    assert_eq!(value(&up[0]), 1500.0, "{up:?}");
    assert_eq!(
        up[0]["metric"]["instance"],
        server.as_str(),
        "instance is the probed server"
    );
    let down = wait_for(
        lab,
        "pathdoc_path_mtu_bytes{direction=\"server-to-client\"}",
        deadline,
    );
    assert_eq!(value(&down[0]), 1400.0, "{down:?}");
    let hole = wait_for(
        lab,
        "pathdoc_pmtud_black_hole{direction=\"server-to-client\"}",
        deadline,
    );
    assert_eq!(value(&hole[0]), 1.0);
    let no_hole = wait_for(
        lab,
        "pathdoc_pmtud_black_hole{direction=\"client-to-server\"}",
        deadline,
    );
    assert_eq!(value(&no_hole[0]), 0.0);

    // Goodput both ways: tbf meters Ethernet frames, so TCP payload is ≈ 95.6 % of the rate.
    // (The download crosses the 1400-byte link with full-size segments: it is the black hole's
    // victim, so only the upload is checked against the rate.)
    let up = wait_for(
        lab,
        "pathdoc_goodput_bits_per_second{direction=\"client-to-server\"}",
        deadline,
    );
    let g = value(&up[0]);
    assert!(
        (0.80 * RATE_BPS..=RATE_BPS).contains(&g),
        "upload goodput {g} bit/s for a {RATE_BPS} bit/s link"
    );
    wait_for(
        lab,
        "pathdoc_goodput_bits_per_second{direction=\"server-to-client\"}",
        deadline,
    );
    let limit = wait_for(
        lab,
        "pathdoc_throughput_limit{direction=\"client-to-server\"} == 1",
        deadline,
    );
    assert!(limit[0]["metric"]["factor"].is_string(), "{limit:?}");

    // The idle monitor's latest result: the scaled modem forgets after 3 s.
    let upper = wait_for(
        lab,
        "pathdoc_idle_timeout_seconds{protocol=\"tcp\",mode=\"server-initiated\",bound=\"upper\"}",
        deadline,
    );
    let lower = query(
        lab,
        "pathdoc_idle_timeout_seconds{protocol=\"tcp\",mode=\"server-initiated\",bound=\"lower\"}",
    );
    let (lo, hi) = (value(&lower[0]), value(&upper[0]));
    assert!(
        lo < 3.0 + 0.6 && (3.0..=5.0).contains(&hi),
        "bracket ({lo}, {hi}] for a 3 s timeout"
    );
    let available = query(lab, "pathdoc_idle_result_available");
    assert_eq!(value(&available[0]), 1.0);
    // While the first run measured, the idle job had no probe_success: the probe-failure alert
    // was never even pending for it.
    assert!(
        query(
            lab,
            "max_over_time(ALERTS{alertname=\"PathdocProbeFailed\",job=\"pathdoc_idle\"}[10m])"
        )
        .is_empty(),
        "the idle job's first run counted as a failed probe"
    );
    let below = query(lab, "pathdoc_idle_timeout_below_rfc{protocol=\"tcp\"}");
    assert_eq!(value(&below[0]), 1.0);
    let stamp = value(&query(lab, "pathdoc_idle_result_timestamp_seconds")[0]);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 300.0..=now + 1.0).contains(&stamp),
        "result timestamp {stamp}, now {now}"
    );

    // The shipped alert rules fire on these series (the black hole one is pending for 10 min).
    wait_for(
        lab,
        "ALERTS{alertname=\"PathdocIdleTimeoutBelowRFC5382\",alertstate=\"firing\"}",
        deadline,
    );
    wait_for(
        lab,
        "ALERTS{alertname=\"PathdocPMTUDBlackHole\",direction=\"server-to-client\"}",
        deadline,
    );

    // A target outside the config is refused: the scrape fails (up 0, HTTP 403), nothing probed.
    let refused = wait_for(lab, "up{job=\"pathdoc_not_allowed\"} == 0", deadline);
    assert_eq!(refused.len(), 1);
    assert!(query(lab, "probe_success{job=\"pathdoc_not_allowed\"}").is_empty());
    let count = wait_for(
        lab,
        "pathdoc_exporter_refused_requests_total{reason=\"target-not-allowed\"} > 0",
        deadline,
    );
    assert!(value(&count[0]) >= 1.0);
    let mut targets = lab.command("client", "curl");
    targets
        .args(["-sS", "--max-time", "5"])
        .arg(format!("http://{PROMETHEUS}/api/v1/targets"));
    let (_, out, _) = run(targets, Duration::from_secs(10));
    let targets: Value = serde_json::from_str(&out).unwrap();
    let bad = targets["data"]["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["labels"]["job"] == "pathdoc_not_allowed")
        .expect("the refused job");
    assert!(bad["lastError"].as_str().unwrap().contains("403"), "{bad}");
    let ok = query(lab, "probe_success{job=\"pathdoc_mtu\"}");
    assert_eq!(value(&ok[0]), 1.0);

    drop((_prometheus, _exporter, _server));
    lab_guard.down().unwrap();
    drop((cleanup, scratch));
}
