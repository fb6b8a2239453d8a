//! The mtu check's server-side decoders: control requests, the bulk request, probe fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathdoc_mtu::wire::{BulkRequest, ProbeFields, Request};

fuzz_target!(|data: &[u8]| {
    if let Ok(Request::ProbeDown { probes, .. }) = serde_json::from_slice::<Request>(data) {
        let _ = probes.len();
    }
    let _ = serde_json::from_slice::<BulkRequest>(data);
    if let Some(f) = ProbeFields::decode(data) {
        let mut back = Vec::new();
        f.encode(&mut back);
        assert_eq!(ProbeFields::decode(&back), Some(f));
    }
});
