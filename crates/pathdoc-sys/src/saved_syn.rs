//! The SYN as the server received it (`TCP_SAVE_SYN` / `TCP_SAVED_SYN`, Linux ≥ 4.2), and its
//! MSS option. A middlebox that clamps or rewrites the MSS shows up as a difference between the
//! MSS the client put in its SYN and the MSS in the saved SYN.

use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

/// Ask the kernel to keep the SYN (IP + TCP headers) of connections accepted on `listener`.
/// Must be set before the SYN arrives, i.e. on the listening socket.
pub fn enable_save_syn(listener: &impl AsRawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_SAVE_SYN,
            &one as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The saved SYN headers of an accepted connection (readable once; later calls return empty).
pub fn saved_syn(stream: &impl AsRawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 512];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is valid for len bytes; the kernel writes at most len and updates it.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_SAVED_SYN,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

/// The MSS option of a SYN given as IP + TCP headers (IPv4 or IPv6 without extension headers).
/// `None` when the headers are malformed or carry no MSS option.
pub fn syn_mss(headers: &[u8]) -> Option<u16> {
    let version = headers.first()? >> 4;
    let tcp = match version {
        4 => {
            let ihl = ((headers[0] & 0x0f) as usize) * 4;
            if ihl < 20 || headers.get(9) != Some(&6) {
                return None;
            }
            headers.get(ihl..)?
        }
        6 => {
            if headers.get(6) != Some(&6) {
                return None;
            }
            headers.get(40..)?
        }
        _ => return None,
    };
    let data_offset = ((tcp.get(12)? >> 4) as usize) * 4;
    if data_offset < 20 || tcp.len() < data_offset {
        return None;
    }
    let mut opts = &tcp[20..data_offset];
    while let Some(&kind) = opts.first() {
        match kind {
            0 => return None,
            1 => opts = &opts[1..],
            _ => {
                let len = *opts.get(1)? as usize;
                if len < 2 || opts.len() < len {
                    return None;
                }
                if kind == 2 && len == 4 {
                    return Some(u16::from_be_bytes([opts[2], opts[3]]));
                }
                opts = &opts[len..];
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn ipv4_syn(options: &[u8]) -> Vec<u8> {
        let mut h = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let doff = (20 + options.len()) / 4;
        let mut tcp = vec![0u8; 20];
        tcp[12] = (doff as u8) << 4;
        tcp[13] = 0x02;
        tcp.extend_from_slice(options);
        h.extend_from_slice(&tcp);
        h
    }

    #[test]
    fn parses_mss_among_other_options() {
        // MSS 1460, SACK permitted, timestamps, NOP, window scale.
        let opts = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        assert_eq!(syn_mss(&ipv4_syn(&opts)), Some(1460));
        let opts = [1, 1, 4, 2, 2, 4, 0x05, 0x78];
        assert_eq!(syn_mss(&ipv4_syn(&opts)), Some(1400));
        assert_eq!(syn_mss(&ipv4_syn(&[4, 2, 1, 1])), None);
        assert_eq!(
            syn_mss(&ipv4_syn(&[2, 0, 0, 0])),
            None,
            "zero-length option is malformed"
        );
        assert_eq!(syn_mss(&[]), None);
        assert_eq!(syn_mss(&[0x45, 0, 0]), None);
    }

    #[test]
    fn loopback_saved_syn_has_the_clients_mss() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        enable_save_syn(&listener).unwrap();
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        client.set_mss(1200).unwrap();
        client
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let _client: TcpStream = client.into();
        let (server, _) = listener.accept().unwrap();
        let syn = saved_syn(&server).unwrap();
        assert_eq!(syn_mss(&syn), Some(1200));
    }
}
