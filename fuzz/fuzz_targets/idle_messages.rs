//! The idle check's server-side decoders: control requests, and the parking thread's splitter of
//! probe-connection frames (fed in two pieces, as reads may cut a frame anywhere).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathdoc_idle::proto::{ControlRequest, ProbeRequest};
use pathdoc_idle::server::{split_frames, PROBE_FRAME_MAX};

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<ControlRequest>(data);
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let (a, b) = data.split_at(cut);
    let mut partial = Vec::new();
    for chunk in [a, b] {
        let r = split_frames(&mut partial, chunk, PROBE_FRAME_MAX, |frame| {
            assert!(frame.len() <= PROBE_FRAME_MAX);
            let _ = serde_json::from_slice::<ProbeRequest>(frame);
            Ok(())
        });
        if r.is_err() {
            break;
        }
        assert!(partial.len() <= PROBE_FRAME_MAX + 4 + data.len());
    }
});
