//! Addresses as a user should read them.

use std::net::SocketAddr;

/// `addr` with an IPv4-mapped IPv6 address (`[::ffff:192.0.2.1]:4000`) turned back into the IPv4
/// one (`192.0.2.1:4000`). A dual-stack server (`--listen [::]`, as the systemd unit runs it)
/// sees its IPv4 clients that way; shown to a user or put into a remedy (`ip route … mtu lock`)
/// it must be the address their hosts really have.
pub fn unmapped(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ipv4_becomes_ipv4_and_others_stay() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(unmapped(a("[::ffff:192.0.2.1]:4000")), a("192.0.2.1:4000"));
        assert_eq!(unmapped(a("[2001:db8::1]:4000")), a("[2001:db8::1]:4000"));
        assert_eq!(unmapped(a("198.51.100.7:22")), a("198.51.100.7:22"));
    }
}
