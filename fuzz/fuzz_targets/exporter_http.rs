//! The exporter's HTTP handlers in-process (no network): each input is a request — its first
//! line the path and query, each further line a `Name: value` header — sent through the same
//! router `pathdoc exporter` serves (token middleware, /probe parameter and header parsing,
//! /metrics, /, /-/healthy). The config allows one idle target (answered from its monitor's
//! state, no probe runs) and an mtu module no target may use, so nothing leaves the process.
//! Every answer must be a status the docs list, never a panic or a 500. Seeds and a dictionary:
//! `fuzz/exporter-seeds/` (`requests/`, `dict`).
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use axum::Router;
use libfuzzer_sys::fuzz_target;
use pathdoc_exporter::http::{router, AppState};
use pathdoc_exporter::idle::Monitors;
use pathdoc_exporter::metrics::SelfMetrics;
use pathdoc_exporter::Config;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const CONFIG: &str = r#"
auth_tokens = ["fuzz-token-0123"]
[modules.mtu]
check = "mtu"
[modules.idle]
check = "idle"
[[targets]]
address = "127.0.0.1:9"
modules = ["idle"]
"#;

fn setup() -> &'static (tokio::runtime::Runtime, Router) {
    static SETUP: OnceLock<(tokio::runtime::Runtime, Router)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let config = Arc::new(Config::parse(CONFIG).expect("the fuzz config is valid"));
        let state = AppState::new(
            config,
            Arc::new(SelfMetrics::default()),
            Monitors::default(),
            CancellationToken::new(),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        (rt, router(Arc::new(state)))
    })
}

fn request(text: &str) -> Option<Request<Body>> {
    let mut lines = text.split('\n');
    let target = lines.next()?.trim_end_matches('\r');
    let mut req = Request::builder().method("GET").uri(target);
    for line in lines.take(64) {
        let Some((name, value)) = line.trim_end_matches('\r').split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim_start()),
        ) else {
            continue;
        };
        req = req.header(name, value);
    }
    req.body(Body::empty()).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(req) = request(text) else {
        return;
    };
    let (rt, app) = setup();
    let (status, body) = rt.block_on(async {
        let response = app
            .clone()
            .oneshot(req)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("answers are small");
        (status, body)
    });
    assert!(
        [
            StatusCode::OK,
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::NOT_FOUND,
            StatusCode::METHOD_NOT_ALLOWED,
        ]
        .contains(&status),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    if status == StatusCode::OK && text.starts_with("/probe") {
        assert!(
            body.ends_with(b"# EOF\n"),
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
});
