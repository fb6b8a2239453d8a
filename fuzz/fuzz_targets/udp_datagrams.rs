//! Every datagram the server's UDP port receives: the pathdoc header, then the payload as the
//! idle check (JSON bindings) and the mtu check (probe fields) decode it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathdoc_idle::proto::UdpPayload;
use pathdoc_mtu::wire::ProbeFields;
use pathdoc_proto::UdpHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok((header, payload)) = UdpHeader::decode(data) {
        assert_eq!(payload.len() + UdpHeader::LEN, data.len());
        let mut back = Vec::new();
        header.encode(&mut back);
        assert_eq!(&back[..], &data[..UdpHeader::LEN]);
        let _ = UdpPayload::decode(payload);
        let _ = ProbeFields::decode(payload);
    }
});
