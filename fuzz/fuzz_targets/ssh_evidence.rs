//! The SSH evidence service (`pathdoc server --ssh-evidence`, started by the SSH bootstrap): the
//! request decoder on any bytes, and what the far end does with a request that decodes — /proc
//! and sock_diag reads for any pid and any pair of addresses must end in a sample with notes,
//! never a panic. Few random inputs are valid JSON requests, so a second request is built from
//! the bytes directly and every input reaches the reads. The asking client is the request's own
//! client address, so the address check lets the reads happen.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use pathdoc_ssh::evidence::{remote_sample, SampleRequest};

/// 17+ bytes: pid (4), a flags byte, two addresses' low bytes (4 + 4), two ports (2 + 2).
fn structured(d: &[u8]) -> Option<SampleRequest> {
    let b = d.get(..17)?;
    let raw_pid = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let flags = b[4];
    // Half the inputs name a pid that likely exists (the low pids of this host).
    let command_pid = if flags & 2 == 0 {
        raw_pid % 4096
    } else {
        raw_pid
    };
    let ip = |o: usize| -> IpAddr {
        if flags & 1 == 0 {
            IpAddr::V4(Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3]))
        } else {
            let mut v6 = [0u8; 16];
            v6[12..].copy_from_slice(&b[o..o + 4]);
            IpAddr::V6(Ipv6Addr::from(v6))
        }
    };
    let port = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
    Some(SampleRequest {
        ssh_client: SocketAddr::new(ip(5), port(13)),
        ssh_server: SocketAddr::new(ip(9), port(15)),
        command_pid,
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = serde_json::from_slice::<SampleRequest>(data) {
        let _ = remote_sample(&req, req.ssh_client.ip());
    }
    if let Some(req) = structured(data) {
        let _ = remote_sample(&req, req.ssh_client.ip());
    }
});
