//! Closing sockets without leaving megabytes behind: a peer that stops reading keeps the
//! server's send queue full, and a plain close turns the socket into an orphan that holds the
//! queue in FIN-WAIT-1 until the peer reads or the kernel gives up minutes later.

use std::os::fd::AsFd;
use std::time::Duration;

use pathdoc_sys::sendq;

/// How often [`release_send_queues`] looks at the queues.
const POLL: Duration = Duration::from_millis(50);

/// Give the peers `grace` to take what is still queued on `sockets`, then make every socket
/// that still holds bytes reset on close (its peer is not reading), so dropping it frees its
/// queue at once. Returns how many were set to reset. Call just before dropping the sockets.
pub async fn release_send_queues<S: AsFd>(sockets: &[S], grace: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let pending = sockets
            .iter()
            .filter(|s| sendq::unacked(&s.as_fd()).unwrap_or(0) > 0)
            .count();
        if pending == 0 {
            return 0;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    sockets
        .iter()
        .filter(|s| sendq::unacked(&s.as_fd()).unwrap_or(0) > 0)
        .filter(|s| sendq::reset_on_close(&s.as_fd()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[tokio::test]
    async fn a_reader_gets_everything_and_a_non_reader_is_reset() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut to_reader, _) = listener.accept().unwrap();
        let _sleeper = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut to_sleeper, _) = listener.accept().unwrap();
        to_reader.write_all(&[1u8; 100_000]).unwrap();
        to_sleeper.set_nonblocking(true).unwrap();
        while to_sleeper.write(&[0u8; 1 << 16]).is_ok() {}
        let read = std::thread::spawn(move || {
            let mut buf = vec![0u8; 100_000];
            std::io::Read::read_exact(&mut reader, &mut buf).unwrap();
        });
        let reset =
            release_send_queues(&[&to_reader, &to_sleeper], Duration::from_millis(500)).await;
        assert_eq!(reset, 1);
        read.join().unwrap();
    }
}
