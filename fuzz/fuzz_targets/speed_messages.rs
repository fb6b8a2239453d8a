//! The throughput check's server-side decoder and the validation every test spec passes
//! before anything starts.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use pathdoc_speed::service::validate;
use pathdoc_speed::spec::{parse_tag, stream_tag, ClientMsg, MAX_STREAMS};

fuzz_target!(|data: &[u8]| {
    if let Ok(ClientMsg::Start(spec)) = serde_json::from_slice::<ClientMsg>(data) {
        if let Ok(ok) = validate(&spec, Duration::from_secs(60)) {
            assert!((1..=MAX_STREAMS).contains(&ok.streams));
            assert!(ok.duration_ms <= 60_000);
        }
    }
    if data.len() >= 4 {
        let tag = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let (direction, index) = parse_tag(tag);
        if index < MAX_STREAMS {
            assert_eq!(parse_tag(stream_tag(direction, index)), (direction, index));
        }
    }
});
