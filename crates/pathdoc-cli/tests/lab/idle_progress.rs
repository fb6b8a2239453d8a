//! The idle check's progress through the lab: the library run inside the client namespace with
//! a recording `Progress`, against a real `pathdoc server` behind two conntrack NATs. Every
//! status line is complete in itself (a non-terminal front end can print it as is), and every
//! "done within T" it gives holds: the run ends by then.

use crate::support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use pathdoc_lab::Topology;
use support::{serial, ServerLab, SERVER_PORT};
use tokio_util::sync::CancellationToken;

const STEM: &str = "pdip";

/// Status lines with the time they were given.
#[derive(Default)]
struct Recorder {
    lines: Mutex<Vec<(Instant, String)>>,
}

impl pathdoc_core::Progress for Recorder {
    fn status(&self, message: &str) {
        self.lines
            .lock()
            .unwrap()
            .push((Instant::now(), message.to_string()));
    }
    fn note(&self, _message: &str) {}
}

/// "… done within 1 min 17 s" → 77 s.
fn promised(line: &str) -> Option<Duration> {
    let tail = line.split("done within ").nth(1)?;
    pathdoc_core::units::parse_duration(&tail.replace(' ', "")).ok()
}

#[test]
fn every_eta_is_an_upper_bound_and_status_lines_cover_the_run() {
    let _serial = serial();
    let mut topo = Topology::scenario("cgnat-chain").unwrap();
    topo.hops[1].conntrack.tcp_established = Some(4);
    topo.hops[1].conntrack.udp = Some(3);
    let l = ServerLab::up(STEM, "eta", &topo);
    let server = format!("{}:{SERVER_PORT}", l.lab.addr("server"))
        .parse()
        .unwrap();
    let recorder = Recorder::default();
    let ns = l.lab.netns("client").to_string();
    let (result, end) = std::thread::scope(|scope| {
        let recorder = &recorder;
        scope
            .spawn(move || {
                pathdoc_sys::netns::run_in_netns(&ns, move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let mut cfg = pathdoc_idle::IdleConfig::new(server);
                    cfg.horizon = Duration::from_secs(14);
                    cfg.resolution = Duration::from_secs(1);
                    cfg.client_initiated = false;
                    let r =
                        rt.block_on(pathdoc_idle::run(&cfg, recorder, &CancellationToken::new()));
                    (r.map(|r| r.findings.len()), Instant::now())
                })
                .expect("enter the client namespace")
            })
            .join()
            .unwrap()
    });
    assert!(result.expect("the run") > 0);
    let lines = recorder.lines.lock().unwrap();
    let etas: Vec<(Instant, Duration, &str)> = lines
        .iter()
        .filter_map(|(at, line)| promised(line).map(|eta| (*at, eta, line.as_str())))
        .collect();
    assert!(
        etas.len() >= 10,
        "too few status lines with an ETA: {:?}",
        *lines
    );
    for (at, eta, line) in &etas {
        assert!(
            *at + *eta >= end,
            "`{line}` promised the end by {eta:?}, it came {:?} after the line",
            end - *at
        );
        assert!(line.starts_with("idle: "), "{line}");
    }
    // Status keeps coming through the whole run (a front end prints one every ~30 s from it).
    let first = lines.first().unwrap().0;
    let gaps = lines.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap();
    assert!(
        gaps < Duration::from_secs(3),
        "a {gaps:?} silence in the status"
    );
    assert!(end - lines.last().unwrap().0 < Duration::from_secs(3));
    assert!(first.elapsed() > Duration::from_secs(10));
    l.down().unwrap();
}
