//! HTTP connections on loopback (its own test binary: it sets this process's descriptor limit).
//! 1 100 idle connections used to take a descriptor each until the process ran out, after which
//! `/-/healthy` (no token needed) was unreachable; now the connection cap closes the oldest idle
//! connection for each new one, and a connection that sends no complete request head within the
//! idle timeout is closed.

#[path = "integration/common.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn set_soft_fd_limit(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = n.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

fn healthy(addr: SocketAddr) -> Result<String, std::io::Error> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Whether the exporter closed `s` (EOF) within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // an answer before the close
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

#[test]
fn idle_connections_cannot_lock_out_the_health_check() {
    // Room for the test's own 1 100 client sockets and a few hundred more, not for the
    // exporter to hold 1 100 more (what it did before the cap).
    set_soft_fd_limit(1600);
    let (addr, shutdown, thread) = common::serve_on_loopback(
        "auth_tokens = [\"idle-conn-test-token\"]\nmax_connections = 64\nhttp_idle_timeout = \"60s\"\n",
    );
    let mut idle: Vec<TcpStream> = Vec::new();
    for i in 0..1100 {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| {
            panic!("idle connection {i}: {e} (the exporter holds a descriptor per idle connection)")
        });
        idle.push(s);
    }
    let t0 = Instant::now();
    let answer = loop {
        match healthy(addr) {
            Ok(a) if a.starts_with("HTTP/1.1 200") => break a,
            other => assert!(
                t0.elapsed() < Duration::from_secs(10),
                "/-/healthy unreachable: {other:?}"
            ),
        }
    };
    assert!(answer.ends_with("ok\n"), "{answer}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    // The oldest idle connections were closed to make room (the idle timeout is a minute away).
    assert!(closed_within(&mut idle[0], Duration::from_secs(5)));
    drop(idle);
    shutdown.cancel();
    thread.join().unwrap();
}

#[test]
fn a_connection_without_a_complete_request_head_is_closed_at_the_idle_timeout() {
    let (addr, shutdown, thread) = common::serve_on_loopback("http_idle_timeout = \"1s\"\n");
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut partial = TcpStream::connect(addr).unwrap();
    partial.write_all(b"GET /-/healthy HTTP/1.1\r\nHo").unwrap();
    let t0 = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    assert!(closed_within(&mut partial, Duration::from_secs(5)));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // A keep-alive connection is closed after it idles as long past its answer.
    let mut kept = TcpStream::connect(addr).unwrap();
    kept.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut b = [0u8; 512];
    let n = kept.read(&mut b).unwrap();
    assert!(b[..n].starts_with(b"HTTP/1.1 200"));
    assert!(closed_within(&mut kept, Duration::from_secs(5)));
    shutdown.cancel();
    thread.join().unwrap();
}
