//! A headless Chromium driven over the DevTools protocol (CDP, JSON over a WebSocket), for the
//! HTML report tests: open a page, record every console message, exception and network request,
//! evaluate JavaScript, and take screenshots of page regions.
//!
//! The browser is a child process with its own fresh profile directory; both are removed when
//! [`Chromium`] is dropped, also when a test panics. Every wait has a deadline.

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

const STEP: Duration = Duration::from_secs(30);

pub struct Chromium {
    ws: WebSocket<TcpStream>,
    child: Child,
    profile: PathBuf,
    next_id: u64,
    /// Every event received so far (method + params + sessionId).
    pub events: Vec<Value>,
}

/// An open tab, attached with its own CDP session.
pub struct Tab {
    pub session: String,
}

fn chromium_binary() -> &'static str {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {candidate}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if found {
            return candidate;
        }
    }
    panic!("no chromium on PATH: apt-get install chromium (scripts/install-deps.sh does)");
}

impl Chromium {
    /// Start headless Chromium with no network-touching background services and a fresh
    /// profile, and connect to its DevTools endpoint.
    pub fn launch() -> Chromium {
        let profile = std::env::temp_dir().join(format!(
            "pathdoc-chromium-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(chromium_binary())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-default-apps",
                "--disable-extensions",
                "--hide-scrollbars",
                "--window-size=1100,900",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        // From here on a panic still kills the browser: build the guard before connecting.
        let mut guard = Partial {
            child: Some(child),
            profile: profile.clone(),
        };
        let (port, path) = devtools_port(&profile);
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to DevTools");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) =
            tungstenite::client(url.as_str(), stream).expect("DevTools WebSocket handshake");
        Chromium {
            ws,
            child: guard.child.take().unwrap(),
            profile,
            next_id: 1,
            events: Vec::new(),
        }
    }

    /// Send one command and wait for its answer; events that arrive meanwhile are kept.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .unwrap_or_else(|e| panic!("send {method}: {e}"));
        let deadline = Instant::now() + STEP;
        loop {
            let v = self.receive(deadline, method);
            if v["id"] == id {
                if let Some(err) = v.get("error") {
                    panic!("{method} failed: {err}");
                }
                return v["result"].clone();
            }
        }
    }

    fn receive(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        loop {
            assert!(
                Instant::now() < deadline,
                "no answer to {waiting_for} from chromium within {STEP:?}"
            );
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(&t).expect("CDP JSON");
                    if v.get("method").is_some() {
                        self.events.push(v.clone());
                    }
                    return v;
                }
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => panic!("DevTools connection failed while waiting for {waiting_for}: {e}"),
            }
        }
    }

    /// Wait until an event `method` arrives for `session` (or was already received).
    pub fn wait_event(&mut self, session: &str, method: &str) -> Value {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(e) = self
                .events
                .iter()
                .find(|e| e["method"] == method && e["sessionId"] == session)
            {
                return e.clone();
            }
            self.receive(deadline, method);
        }
    }

    /// Open `url` in a new tab with console, log, network and page events recorded from before
    /// the navigation; returns once the load event fired.
    pub fn open(&mut self, url: &str) -> Tab {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        for domain in [
            "Runtime.enable",
            "Log.enable",
            "Network.enable",
            "Page.enable",
        ] {
            self.call(Some(&session), domain, json!({}));
        }
        self.call(
            Some(&session),
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
        );
        self.events.clear();
        let nav = self.call(Some(&session), "Page.navigate", json!({ "url": url }));
        assert!(nav.get("errorText").is_none(), "navigating to {url}: {nav}");
        self.wait_event(&session, "Page.loadEventFired");
        Tab { session }
    }

    /// Evaluate a JavaScript expression in the tab and return its value (JSON-serializable).
    pub fn eval(&mut self, tab: &Tab, expression: &str) -> Value {
        let r = self.call(
            Some(&tab.session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("evaluating {expression}: {ex}");
        }
        r["result"]["value"].clone()
    }

    /// A PNG screenshot of a page region in CSS pixels (the whole region, even below the fold).
    pub fn screenshot(&mut self, tab: &Tab, x: f64, y: f64, width: f64, height: f64) -> Vec<u8> {
        let r = self.call(
            Some(&tab.session),
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true,
                    "clip": { "x": x, "y": y, "width": width, "height": height, "scale": 1 } }),
        );
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("base64 screenshot")
    }

    /// Console errors, uncaught exceptions and error log entries (CSP violations land here).
    pub fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => {
                        Some(format!("exception: {}", p["exceptionDetails"]))
                    }
                    "Runtime.consoleAPICalled"
                        if p["type"] == "error" || p["type"] == "warning" =>
                    {
                        Some(format!("console.{}: {}", p["type"], p["args"]))
                    }
                    "Log.entryAdded"
                        if p["entry"]["level"] == "error" || p["entry"]["level"] == "warning" =>
                    {
                        Some(format!(
                            "log {}: {}",
                            p["entry"]["level"], p["entry"]["text"]
                        ))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// URLs of every network request the page made.
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.ws.close(None);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The browser before the WebSocket is up: killed and cleaned if connecting panics.
struct Partial {
    child: Option<Child>,
    profile: PathBuf,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = std::fs::remove_dir_all(&self.profile);
        }
    }
}

/// Chromium writes its DevTools port and browser WebSocket path into the profile directory.
fn devtools_port(profile: &Path) -> (u16, String) {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + STEP;
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                if let Ok(port) = port.trim().parse() {
                    return (port, path.trim().to_string());
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not open its DevTools port within {STEP:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Decoded RGBA screenshot.
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub rgba: Vec<u8>,
}

impl Image {
    pub fn decode(png_bytes: &[u8]) -> Image {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = decoder.read_info().expect("PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
        let info = reader.next_frame(&mut buf).expect("PNG frame");
        let channels = info.color_type.samples();
        let rgba = buf[..info.buffer_size()]
            .chunks(channels)
            .flat_map(|p| match channels {
                4 => [p[0], p[1], p[2], p[3]],
                3 => [p[0], p[1], p[2], 255],
                2 => [p[0], p[0], p[0], p[1]],
                _ => [p[0], p[0], p[0], 255],
            })
            .collect();
        Image {
            width: info.width,
            height: info.height,
            rgba,
        }
    }

    /// Pixels within `tolerance` of `rgb` in every channel.
    pub fn count_color(&self, rgb: [u8; 3], tolerance: u8) -> usize {
        self.rgba
            .chunks(4)
            .filter(|p| (0..3).all(|i| p[i].abs_diff(rgb[i]) <= tolerance))
            .count()
    }

    /// Pixels that are not (near) white.
    pub fn count_ink(&self) -> usize {
        self.rgba
            .chunks(4)
            .filter(|p| p[0] < 235 || p[1] < 235 || p[2] < 235)
            .count()
    }
}

/// `#rrggbb` → [r, g, b].
pub fn parse_hex(color: &str) -> [u8; 3] {
    let c = color.trim_start_matches('#');
    let byte = |i: usize| u8::from_str_radix(&c[i..i + 2], 16).expect("hex colour");
    [byte(0), byte(2), byte(4)]
}
