//! The connection handshake as the server reads it (preamble, then a `Hello` frame) and as the
//! client reads the server's answer (preamble, then a `HelloReply`), from arbitrary bytes.
#![no_main]

use std::future::Future;
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use pathdoc_proto::{read_frame, read_preamble, Hello, HelloReply};

/// Poll once: reading from a byte slice never waits.
fn ready<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut server_side = data;
    if let Some(Ok(_)) = ready(read_preamble(&mut server_side)) {
        let _ = ready(read_frame::<_, Hello>(&mut server_side));
    }
    // Without the preamble: the frame layer alone (length checked before allocating).
    let mut frames = data;
    while let Some(Ok(_)) = ready(read_frame::<_, serde_json::Value>(&mut frames)) {}
    let mut client_side = data;
    if let Some(Ok(_)) = ready(read_preamble(&mut client_side)) {
        let _ = ready(read_frame::<_, HelloReply>(&mut client_side));
    }
});
