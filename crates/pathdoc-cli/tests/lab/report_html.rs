//! `--report FILE.html` and `pathdoc report` end to end: a real lab run (strict NAT with a
//! scaled-down timeout, real `pathdoc server`) writes an HTML report; headless Chromium opens it
//! over the DevTools protocol with no console error and no network request; every plot has drawn
//! content with each of its series' colours really on screen; the page's verdicts match the
//! JSON; and `pathdoc report` turns the saved JSON back into exactly the text the run printed.

use crate::browser;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use browser::{parse_hex, Chromium, Image};
use pathdoc_lab::Topology;
use serde_json::{json, Value};
use support::{run, ServerLab, PATHDOC};

const STEM: &str = "pdr";

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pathdoc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pathdoc(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(PATHDOC);
    cmd.args(args);
    run(cmd, Duration::from_secs(30))
}

/// The JSON report a page embeds.
fn embedded(html: &str) -> Value {
    let open = "<script type=\"application/json\" id=\"pathdoc-report\">";
    let start = html.find(open).expect("embedded report") + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end]).expect("embedded JSON")
}

#[test]
fn lab_run_html_opens_offline_draws_every_plot_and_round_trips_to_text() {
    let _shared = crate::support::shared();
    let scratch = Scratch::new("html-lab");
    let topo = Topology::from_toml(
        "[[hop]]\nkind = \"nat\"\nstrict = true\nconntrack = { tcp_established = 3, udp = 2 }\n",
    )
    .unwrap();
    let l = ServerLab::up(STEM, "html", &topo);
    let html_path = scratch.path("run.html");
    let server = l.server.addr();
    let mut cmd = l.lab.command("client", PATHDOC);
    cmd.args([
        "check",
        &server,
        "--mtu",
        "--throughput",
        "--throughput-time",
        "2s",
        "--idle",
        "--idle-max",
        "10s",
        "--idle-resolution",
        "1s",
        "--report",
    ])
    .arg(&html_path);
    let (code, text, stderr) = run(cmd, Duration::from_secs(180));
    assert_eq!(
        code, 1,
        "the strict NAT's 3 s timeout is a fault\n{text}\n{stderr}"
    );
    assert!(
        stderr.contains("HTML report written to"),
        "the user is told where the report is: {stderr}"
    );
    let html = std::fs::read_to_string(&html_path).expect("the HTML report");
    let report = embedded(&html);

    // Round trip: the saved JSON renders to exactly the text the run printed.
    let json_path = scratch.path("run.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let (rcode, retext, rerr) = pathdoc(&["report", json_path.to_str().unwrap()]);
    assert_eq!(rcode, code, "{rerr}");
    assert_eq!(
        retext, text,
        "pathdoc report must print what the run printed"
    );
    // …and the HTML file itself reads back the same.
    let (_, from_html, _) = pathdoc(&["report", html_path.to_str().unwrap()]);
    assert_eq!(from_html, text);
    l.down().unwrap();

    check_page_in_chromium(&html_path, &report);
}

/// Open the page in headless Chromium and check errors, requests, verdicts and plots.
fn check_page_in_chromium(html_path: &Path, report: &Value) {
    let url = format!("file://{}", html_path.canonicalize().unwrap().display());
    let mut chrome = Chromium::launch();
    let tab = chrome.open(&url);
    // Let late work (fonts, layout) surface errors before counting them.
    std::thread::sleep(Duration::from_millis(300));
    chrome.eval(&tab, "document.readyState");
    assert_eq!(chrome.errors(), Vec::<String>::new(), "console errors");
    let requests = chrome.requests();
    assert_eq!(
        requests,
        vec![url.clone()],
        "the page must load nothing but itself"
    );

    check_verdicts(&mut chrome, &tab, report);
    check_plots(&mut chrome, &tab, report);
    assert_eq!(chrome.errors(), Vec::<String>::new(), "console errors");
    assert_eq!(chrome.requests(), vec![url], "no request while reading");
}

fn check_verdicts(chrome: &mut Chromium, tab: &browser::Tab, report: &Value) {
    let page = chrome.eval(
        tab,
        r#"(() => ({
            overall: document.getElementById('overall').dataset.status,
            findings: [...document.querySelectorAll('article.finding')].map(a => ({
                id: a.dataset.id, check: a.dataset.check, status: a.dataset.status,
                title: a.querySelector('.title').textContent,
                evidence: [...a.querySelectorAll('table.evidence tbody tr')].map(r => r.cells[0].textContent),
                hosts: [...a.querySelectorAll('.fixes .host')].map(h => h.textContent),
                commands: [...a.querySelectorAll('.fixes pre')].map(p => p.textContent),
            })),
        }))()"#,
    );
    let findings = report["findings"].as_array().unwrap();
    let shown = page["findings"].as_array().unwrap();
    assert_eq!(shown.len(), findings.len(), "{page:#}");
    let worst = findings
        .iter()
        .map(|f| match f["status"].as_str().unwrap() {
            "pass" => 0,
            "info" => 1,
            "inconclusive" => 2,
            "warn" => 3,
            _ => 4,
        })
        .max()
        .unwrap_or(0);
    let expected = if report["interrupted"] == true {
        "interrupted"
    } else {
        ["pass", "info", "inconclusive", "warn", "fail"][worst]
    };
    assert_eq!(page["overall"], expected, "{page:#}");
    for (f, s) in findings.iter().zip(shown) {
        assert_eq!(s["id"], f["id"]);
        assert_eq!(s["check"], f["check"]);
        assert_eq!(s["status"], f["status"]);
        assert_eq!(s["title"], f["title"]);
        let names: Vec<&Value> = f["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["name"])
            .collect();
        let shown_names: Vec<&Value> = s["evidence"].as_array().unwrap().iter().collect();
        assert_eq!(shown_names, names, "evidence of {}", f["id"]);
        let remedies = f["remedies"].as_array().unwrap();
        let with_host = remedies.iter().filter(|r| r.get("host").is_some()).count();
        assert_eq!(
            s["hosts"].as_array().unwrap().len(),
            with_host,
            "hosts of {}",
            f["id"]
        );
        let commands: Vec<Value> = remedies
            .iter()
            .filter_map(|r| r.get("command").cloned())
            .collect();
        assert_eq!(
            s["commands"].as_array().unwrap(),
            &commands,
            "fixes of {}",
            f["id"]
        );
    }
}

/// Series each plot must show, in page order, worked out from the JSON independently of the
/// renderer.
fn expected_plots(report: &Value) -> Vec<(String, Option<usize>)> {
    let data = &report["data"];
    let mut plots = Vec::new();
    let idle = &data["idle"];
    if idle.is_object() {
        let outcomes: Vec<&str> = idle["tests"]
            .as_array()
            .unwrap()
            .iter()
            .chain(idle["udp"]["tests"].as_array().into_iter().flatten())
            .map(|t| t["outcome"].as_str().unwrap())
            .collect();
        let bracket = |o: &Value| o["lower_s"].is_number() && o["upper_s"].is_number();
        let any_bracket = idle["ladders"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| bracket(&l["outcome"]))
            || ["outcome", "single_exchange", "stream"].iter().any(|k| {
                let o = &idle["udp"][k];
                bracket(if *k == "outcome" { o } else { &o["outcome"] })
            });
        let n = usize::from(outcomes.contains(&"alive"))
            + usize::from(outcomes.contains(&"dead"))
            + usize::from(outcomes.iter().any(|o| *o != "alive" && *o != "dead"))
            + usize::from(any_bracket)
            + 1;
        plots.push(("idle-ladder".into(), Some(n)));
    }
    for dir in ["up", "down"] {
        let d = &data["mtu"][dir];
        if !d.is_object() {
            continue;
        }
        let probes: Vec<&Value> = d["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["sent"].as_u64() > Some(0))
            .collect();
        let arrived = probes.iter().any(|p| p["received"].as_u64() > Some(0));
        let lost = probes.iter().any(|p| p["received"].as_u64() == Some(0));
        let mut n =
            usize::from(arrived) + usize::from(lost) + usize::from(d["outcome"]["mtu"].is_number());
        let replies: Vec<&Value> = d["ttl_scan"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| [&r["small"], &r["big"]])
            .collect();
        let mut kinds: Vec<&str> = replies
            .iter()
            .map(|r| r["kind"].as_str().unwrap_or("none"))
            .collect();
        kinds.sort();
        kinds.dedup();
        n += kinds.len();
        if !replies.is_empty() && d["location"]["hop"].is_number() {
            n += 1;
        }
        plots.push((format!("mtu-{}", d["direction"].as_str().unwrap()), Some(n)));
    }
    for run in data["throughput"]["runs"].as_array().into_iter().flatten() {
        for d in run["directions"].as_array().unwrap() {
            let intervals = d["intervals"].as_array().unwrap();
            let retrans: f64 = intervals
                .iter()
                .filter_map(|i| i["retransmits"].as_f64())
                .sum();
            // The total, each stream when there are per-stream samples of several, the
            // retransmissions when there were any, the steady-state band when there is one.
            let mut streams: Vec<u64> = intervals
                .iter()
                .flat_map(|i| i["streams"].as_array().into_iter().flatten())
                .enumerate()
                .map(|(k, s)| s["stream"].as_u64().unwrap_or(k as u64))
                .collect();
            streams.sort();
            streams.dedup();
            let per_stream = if streams.len() > 1 { streams.len() } else { 0 };
            let steady = d["phases"]["steady"]["start_s"].is_number()
                && d["phases"]["steady"]["end_s"].is_number();
            plots.push((
                format!("throughput-{}", d["direction"].as_str().unwrap()),
                Some(1 + per_stream + usize::from(retrans > 0.0) + usize::from(steady)),
            ));
        }
    }
    plots.extend(expected_stevens(&data["analyze"]));
    plots
}

/// Time-sequence graphs: one per connection and data direction, the series its segments and
/// ACKs imply; plus a zoom around the first retransmission of long series (at least 2 series).
fn expected_stevens(analyze: &Value) -> Vec<(String, Option<usize>)> {
    let mut plots = Vec::new();
    for (c, capture) in analyze["captures"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for conn in capture["connections"].as_array().into_iter().flatten() {
            for ts in conn["time_sequence"].as_array().into_iter().flatten() {
                let id = format!(
                    "stevens-{}-{}-{}",
                    c + 1,
                    conn["id"],
                    ts["direction"].as_str().unwrap()
                );
                let flagged = |list: &Value, names: &[&str]| -> Vec<bool> {
                    list.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| {
                            x["flags"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|f| names.contains(&f.as_str().unwrap()))
                        })
                        .collect()
                };
                let retx = flagged(
                    &ts["segments"],
                    &[
                        "retransmission",
                        "fast_retransmission",
                        "spurious_retransmission",
                    ],
                );
                let ooo = flagged(&ts["segments"], &["out_of_order"]);
                let acks = ts["acks"].as_array().unwrap();
                let n = usize::from(retx.iter().any(|r| !r))
                    + usize::from(retx.iter().any(|r| *r))
                    + usize::from(retx.iter().zip(&ooo).any(|(r, o)| !r && *o))
                    + usize::from(!acks.is_empty())
                    + usize::from(acks.iter().any(|a| a["win"].is_number()))
                    + usize::from(flagged(&ts["acks"], &["duplicate_ack"]).contains(&true))
                    + usize::from(
                        flagged(&ts["acks"], &["zero_window"]).contains(&true)
                            || acks.iter().any(|a| a["win"] == 0),
                    );
                plots.push((id.clone(), Some(n)));
                if retx.contains(&true) && retx.len() > 240 {
                    plots.push((format!("{id}-zoom"), None));
                }
            }
        }
    }
    plots
}

fn check_plots(chrome: &mut Chromium, tab: &browser::Tab, report: &Value) {
    let figures = chrome.eval(
        tab,
        r#"[...document.querySelectorAll('figure.plot')].map(f => {
            const svg = f.querySelector('svg.chart');
            const r = svg ? svg.getBoundingClientRect() : null;
            const colours = new Set();
            if (svg) for (const e of svg.querySelectorAll('*')) for (const a of ['stroke', 'fill']) {
                const v = e.getAttribute(a); if (v && v.startsWith('#')) colours.add(v.toLowerCase());
            }
            return { id: f.dataset.plot, series: Number(f.dataset.series), missing: f.classList.contains('missing'),
                     legend: [...f.querySelectorAll('ul.legend li')].map(li => li.dataset.color),
                     colours: [...colours],
                     rect: r && { x: r.x + window.scrollX, y: r.y + window.scrollY, w: r.width, h: r.height } };
        })"#,
    );
    let figures = figures.as_array().unwrap();
    let expected = expected_plots(report);
    let ids: Vec<&str> = figures.iter().map(|f| f["id"].as_str().unwrap()).collect();
    let want: Vec<&str> = expected.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, want, "one figure per direction and check");
    for ((id, series), fig) in expected.iter().zip(figures) {
        assert_eq!(fig["missing"], false, "{id} has no plot: {fig}");
        match series {
            Some(n) => assert_eq!(fig["series"], json!(n), "{id}: series {fig}"),
            None => assert!(fig["series"].as_u64() >= Some(2), "{id}: series {fig}"),
        }
        let legend: Vec<&str> = fig["legend"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(
            Some(legend.len() as u64),
            fig["series"].as_u64(),
            "{id}: legend {fig}"
        );
        let colours: Vec<&str> = fig["colours"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let r = &fig["rect"];
        let (w, h) = (r["w"].as_f64().unwrap(), r["h"].as_f64().unwrap());
        assert!(w > 300.0 && h > 150.0, "{id} is drawn too small: {r}");
        let png = chrome.screenshot(
            tab,
            r["x"].as_f64().unwrap(),
            r["y"].as_f64().unwrap(),
            w,
            h,
        );
        let image = Image::decode(&png);
        let ink = image.count_ink() as f64 / (image.width * image.height) as f64;
        assert!(ink > 0.02, "{id}: blank plot ({:.2} % ink)", ink * 100.0);
        for colour in legend {
            assert!(
                colours.contains(&colour),
                "{id}: legend colour {colour} is not drawn in the SVG ({colours:?})"
            );
            let seen = image.count_color(parse_hex(colour), 12);
            assert!(
                seen >= 3,
                "{id}: series colour {colour} not on screen ({seen} pixels)"
            );
        }
    }
}

#[test]
fn report_refuses_what_it_cannot_read_with_exit_2() {
    let _shared = crate::support::shared();
    let scratch = Scratch::new("report-refuse");
    let cases = [
        (
            "future.json",
            r#"{"schema": "pathdoc.report/9", "findings": []}"#,
            "\"pathdoc.report/9\" is not one this pathdoc",
        ),
        (
            "lab.json",
            r#"{"schema": "pathdoc.lab/1", "command": "up"}"#,
            "pathdoc.lab/1",
        ),
        (
            "error.json",
            r#"{"schema": "pathdoc.report/1", "error": "cannot reach the server"}"#,
            "could not run: cannot reach the server",
        ),
        ("garbage.json", "\u{1}\u{2} not json", "not JSON"),
        (
            "noschema.json",
            r#"{"findings": []}"#,
            "no \"schema\" field",
        ),
        (
            "page.html",
            "<html><body>hi</body></html>",
            "without an embedded pathdoc report",
        ),
    ];
    for (name, content, says) in cases {
        let p = scratch.path(name);
        std::fs::write(&p, content).unwrap();
        let (code, out, err) = pathdoc(&["report", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(out.is_empty(), "{name}: nothing on stdout: {out}");
    }
    let (code, _, err) = pathdoc(&["report", scratch.path("missing.json").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.json"), "{err}");
    // -o to a directory that does not exist: refused before anything is written.
    let good = scratch.path("good.json");
    std::fs::write(
        &good,
        r#"{"schema": "pathdoc.report/1", "pathdoc_version": "0.1.0", "command": "check", "target": "x", "findings": []}"#,
    )
    .unwrap();
    let (code, _, err) = pathdoc(&[
        "report",
        good.to_str().unwrap(),
        "-o",
        "/nonexistent/dir/r.html",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/dir"), "{err}");
    let out = scratch.path("good.html");
    let (code, _, err) = pathdoc(&[
        "report",
        good.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(
        html.contains("no problem found") && html.contains("No findings"),
        "{html}"
    );
    let left: Vec<_> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn capture_html_draws_time_sequence_graphs_in_chromium() {
    let _shared = crate::support::shared();
    let scratch = Scratch::new("html-capture");
    // Seed 001's path: loss bursts towards the server, so the upload has retransmissions and
    // duplicate ACKs to mark.
    let l = ServerLab::up(
        STEM,
        "cap",
        &Topology::scenario("slow-lossy-duplex").unwrap(),
    );
    let pcap = scratch.path("client.pcap");
    let capture = pathdoc_lab::capture::start(
        &l.lab,
        "client",
        None,
        &pcap,
        &pathdoc_lab::capture::CaptureOptions {
            snaplen: 128,
            filter: None,
        },
    )
    .expect("start tcpdump");
    let mut speed = l.lab.command("client", PATHDOC);
    speed.args(["speed", &l.server.addr(), "-t", "2", "-C", "cubic", "-q"]);
    let (code, out, err) = run(speed, Duration::from_secs(60));
    assert!(code == 0 || code == 1, "speed: {out}{err}");
    capture.stop().expect("stop tcpdump");
    l.down().unwrap();

    let html_path = scratch.path("capture.html");
    // --all: graphs are drawn for the connections the report lists, and whether the upload's
    // loss crosses a finding's threshold varies run to run (CI once saw 19 retransmissions and
    // no finding, so no graph); listing every connection makes the graph independent of that.
    let (code, out, err) = pathdoc(&[
        "analyze",
        pcap.to_str().unwrap(),
        "--all",
        "--report",
        html_path.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "analyze: {out}{err}");
    let report = embedded(&std::fs::read_to_string(&html_path).unwrap());
    let stevens = expected_stevens(&report["data"]["analyze"]);
    assert!(
        stevens
            .iter()
            .any(|(id, _)| id.ends_with("client-to-server")),
        "no time-sequence graph of the upload: {stevens:?}\n{out}\n{err}"
    );
    check_page_in_chromium(&html_path, &report);
}
