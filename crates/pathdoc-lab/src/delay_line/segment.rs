//! Splits a TCP or UDP GSO super-frame into wire-sized frames, so random loss hits single packets.
//!
//! A 64 KiB super-frame stands for up to ~45 packets; dropping it whole would turn a 1 % packet loss
//! into rare 45-packet bursts, which TCP survives far better than real per-packet loss. Lossy
//! directions therefore cut super-frames the way the kernel's GSO would (IPv4 ID and TCP sequence
//! advanced, FIN/PSH only on the last segment, CWR only on the first) and hand each segment on with
//! checksum offload requested (`VIRTIO_NET_HDR_F_NEEDS_CSUM` + pseudo-header sum), so no payload
//! checksum is computed in userspace.

use super::packet_socket::VNET_HDR_LEN;

const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Where the headers of a super-frame are, relative to the Ethernet header.
struct Layout {
    l3: usize,
    l4: usize,
    headers_end: usize,
    ipv4: bool,
    tcp: bool,
    gso_size: usize,
}

/// Cuts `frame` (virtio_net_hdr + Ethernet frame) into segments and calls `emit` with each one
/// (again virtio_net_hdr + Ethernet frame). Returns false, emitting nothing, when `frame` is not a
/// TCP or UDP GSO super-frame this function understands; the caller then handles it whole.
pub fn segment_gso_frame(frame: &[u8], scratch: &mut Vec<u8>, emit: impl FnMut(&[u8])) -> bool {
    let Some(layout) = parse(frame) else {
        return false;
    };
    let piece = layout.gso_size;
    cut(frame, &layout, piece, scratch, emit);
    true
}

/// Cuts a TCP GSO super-frame into IP packets of `packet_bytes` (the last one shorter), ignoring
/// the MSS the kernel asked for in `gso_size`: what an emulated NIC with a fixed segmentation size
/// does (QEMU's rtl8139 cuts at 1500 whatever the path MTU). The pieces keep the super-frame's DF
/// bit. Returns false, emitting nothing, when `frame` is not a TCP GSO super-frame this function
/// understands or `packet_bytes` leaves no room for payload after the headers.
pub fn segment_tcp_at_packet_size(
    frame: &[u8],
    packet_bytes: usize,
    scratch: &mut Vec<u8>,
    emit: impl FnMut(&[u8]),
) -> bool {
    let Some(layout) = parse(frame) else {
        return false;
    };
    let headers = layout.headers_end - layout.l3;
    if !layout.tcp || packet_bytes <= headers {
        return false;
    }
    cut(frame, &layout, packet_bytes - headers, scratch, emit);
    true
}

/// Emits the payload of `frame` in pieces of `piece` bytes, each with its own headers.
fn cut(
    frame: &[u8],
    layout: &Layout,
    piece: usize,
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) {
    let eth = &frame[VNET_HDR_LEN..];
    let payload = &eth[layout.headers_end..];
    let l4_header_len = layout.headers_end - layout.l4;
    let segments = payload.len().div_ceil(piece);
    let csum_offset: u16 = if layout.tcp { 16 } else { 6 };
    for (index, chunk) in payload.chunks(piece).enumerate() {
        scratch.clear();
        scratch.push(VIRTIO_NET_HDR_F_NEEDS_CSUM);
        scratch.push(0); // gso_type NONE
        scratch.extend_from_slice(&0u16.to_le_bytes()); // hdr_len
        scratch.extend_from_slice(&0u16.to_le_bytes()); // gso_size
        scratch.extend_from_slice(&(layout.l4 as u16).to_le_bytes()); // csum_start
        scratch.extend_from_slice(&csum_offset.to_le_bytes());
        scratch.extend_from_slice(&eth[..layout.headers_end]);
        scratch.extend_from_slice(chunk);
        let packet = &mut scratch[VNET_HDR_LEN..];
        let l4_len = l4_header_len + chunk.len();
        let (l3, l4) = (layout.l3, layout.l4);
        if layout.ipv4 {
            put_u16(packet, l3 + 2, (l4 - l3 + l4_len) as u16);
            let id = get_u16(packet, l3 + 4).wrapping_add(index as u16);
            put_u16(packet, l3 + 4, id);
            put_u16(packet, l3 + 10, 0);
            let header_checksum = !fold(sum_words(&packet[l3..l4]));
            put_u16(packet, l3 + 10, header_checksum);
        } else {
            put_u16(packet, l3 + 4, (l4 - l3 - 40 + l4_len) as u16);
        }
        if layout.tcp {
            let seq = get_u32(packet, l4 + 4).wrapping_add((index * piece) as u32);
            packet[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            if index > 0 {
                packet[l4 + 13] &= !TCP_CWR;
            }
            if index + 1 < segments {
                packet[l4 + 13] &= !(TCP_FIN | TCP_PSH);
            }
        } else {
            put_u16(packet, l4 + 4, l4_len as u16);
        }
        let addresses = if layout.ipv4 {
            &packet[l3 + 12..l3 + 20]
        } else {
            &packet[l3 + 8..l3 + 40]
        };
        let protocol = if layout.tcp { IPPROTO_TCP } else { IPPROTO_UDP };
        let pseudo = sum_words(addresses) + u32::from(protocol) + l4_len as u32;
        // With NEEDS_CSUM the field holds the folded, uncomplemented pseudo-header sum; the device
        // (or the receiving stack) completes it over the segment.
        put_u16(packet, l4 + csum_offset as usize, fold(pseudo));
        emit(scratch);
    }
}

fn parse(frame: &[u8]) -> Option<Layout> {
    if frame.len() < VNET_HDR_LEN + 14 {
        return None;
    }
    let gso_type = frame[1] & !VIRTIO_NET_HDR_GSO_ECN;
    let gso_size = usize::from(u16::from_le_bytes([frame[4], frame[5]]));
    let tcp = match gso_type {
        VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_TCPV6 => true,
        VIRTIO_NET_HDR_GSO_UDP_L4 => false,
        _ => return None,
    };
    if gso_size == 0 {
        return None;
    }
    let eth = &frame[VNET_HDR_LEN..];
    let mut l3 = 14;
    let mut ethertype = get_u16(eth, 12);
    while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        if eth.len() < l3 + 4 {
            return None;
        }
        ethertype = get_u16(eth, l3 + 2);
        l3 += 4;
    }
    let (ipv4, protocol, l4) = match ethertype {
        ETHERTYPE_IPV4 if eth.len() >= l3 + 20 => {
            let ihl = usize::from(eth[l3] & 0x0f) * 4;
            (true, eth[l3 + 9], l3 + ihl.max(20))
        }
        // Extension headers are not followed: such frames are handled whole.
        ETHERTYPE_IPV6 if eth.len() >= l3 + 40 => (false, eth[l3 + 6], l3 + 40),
        _ => return None,
    };
    let expected = if tcp { IPPROTO_TCP } else { IPPROTO_UDP };
    if protocol != expected {
        return None;
    }
    let l4_header_len = if tcp {
        if eth.len() < l4 + 20 {
            return None;
        }
        usize::from(eth[l4 + 12] >> 4) * 4
    } else {
        8
    };
    let headers_end = l4 + l4_header_len;
    if l4_header_len < 8 || eth.len() <= headers_end {
        return None;
    }
    Some(Layout {
        l3,
        l4,
        headers_end,
        ipv4,
        tcp,
        gso_size,
    })
}

fn get_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn put_u16(bytes: &mut [u8], at: usize, value: u16) {
    bytes[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// One's-complement sum of big-endian 16-bit words (an odd trailing byte is padded with zero).
fn sum_words(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCPv4 super-frame as the kernel hands it over: 3 × 1000-byte MSS + 500 bytes, PSH|FIN|CWR.
    fn tcp4_super_frame() -> Vec<u8> {
        let mut frame = vec![VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_TCPV4];
        frame.extend_from_slice(&66u16.to_le_bytes()); // hdr_len
        frame.extend_from_slice(&1000u16.to_le_bytes()); // gso_size
        frame.extend_from_slice(&34u16.to_le_bytes()); // csum_start
        frame.extend_from_slice(&16u16.to_le_bytes()); // csum_offset
        frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00]);
        let payload_len = 3500u16;
        let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, IPPROTO_TCP, 0, 0];
        ip.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
        put_u16(&mut ip, 2, 20 + 32 + payload_len);
        frame.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 32];
        put_u16(&mut tcp, 0, 5201);
        put_u16(&mut tcp, 2, 40000);
        tcp[4..8].copy_from_slice(&1_000_000u32.to_be_bytes());
        tcp[12] = 8 << 4;
        tcp[13] = TCP_CWR | TCP_PSH | TCP_FIN | 0x10;
        frame.extend_from_slice(&tcp);
        frame.extend((0..payload_len).map(|i| i as u8));
        frame
    }

    #[test]
    fn splits_a_tcp_super_frame_like_kernel_gso() {
        let frame = tcp4_super_frame();
        let mut segments = Vec::new();
        let mut scratch = Vec::new();
        assert!(segment_gso_frame(&frame, &mut scratch, |s| segments.push(s.to_vec())));
        assert_eq!(segments.len(), 4);
        let mut expected_payload = 0u8;
        for (index, segment) in segments.iter().enumerate() {
            let packet = &segment[VNET_HDR_LEN..];
            let payload_len = if index == 3 { 500 } else { 1000 };
            assert_eq!(segment[0], VIRTIO_NET_HDR_F_NEEDS_CSUM);
            assert_eq!(segment[1], 0, "no longer GSO");
            assert_eq!(u16::from_le_bytes([segment[6], segment[7]]), 34);
            assert_eq!(packet.len(), 14 + 20 + 32 + payload_len);
            assert_eq!(usize::from(get_u16(packet, 16)), 20 + 32 + payload_len);
            assert_eq!(get_u16(packet, 18), 0x1234 + index as u16);
            assert_eq!(
                fold(sum_words(&packet[14..34])),
                0xffff,
                "valid IPv4 header checksum"
            );
            assert_eq!(get_u32(packet, 38), 1_000_000 + 1000 * index as u32);
            let flags = packet[47];
            assert_eq!(flags & TCP_CWR != 0, index == 0);
            assert_eq!(flags & (TCP_FIN | TCP_PSH) != 0, index == 3);
            assert_ne!(flags & 0x10, 0, "ACK kept");
            // Completing the offloaded checksum over the segment must verify.
            let tcp_len = 32 + payload_len as u32;
            // The field already holds the pseudo-header sum, as offload expects.
            let full = sum_words(&packet[34..]);
            let mut completed = packet.to_vec();
            put_u16(&mut completed, 50, !fold(full));
            let check = sum_words(&completed[34..]) + sum_words(&completed[26..34]) + 6 + tcp_len;
            assert_eq!(fold(check), 0xffff);
            for byte in &packet[66..] {
                assert_eq!(*byte, expected_payload);
                expected_payload = expected_payload.wrapping_add(1);
            }
        }
    }

    #[test]
    fn a_fixed_size_nic_cuts_at_its_own_size_whatever_the_mss() {
        // The kernel asked for 1000-byte segments; a NIC fixed at 1000-byte IP packets carries
        // 1000 − 20 − 32 = 948 bytes of payload per frame: 3 full frames and a 656-byte tail.
        let frame = tcp4_super_frame();
        let mut packets = Vec::new();
        assert!(segment_tcp_at_packet_size(
            &frame,
            1000,
            &mut Vec::new(),
            |s| packets.push(s.to_vec())
        ));
        let sizes: Vec<usize> = packets
            .iter()
            .map(|p| usize::from(get_u16(&p[VNET_HDR_LEN..], 16)))
            .collect();
        assert_eq!(sizes, [1000, 1000, 1000, 52 + 3500 - 3 * 948]);
        for (index, packet) in packets.iter().enumerate() {
            let packet = &packet[VNET_HDR_LEN..];
            assert_eq!(packet.len(), 14 + sizes[index]);
            assert_ne!(packet[20] & 0x40, 0, "DF kept");
            assert_eq!(get_u32(packet, 38), 1_000_000 + 948 * index as u32);
            assert_eq!(packet[47] & (TCP_FIN | TCP_PSH) != 0, index == 3);
            assert_eq!(fold(sum_words(&packet[14..34])), 0xffff);
        }
        // No room for payload, or not TCP GSO: handled whole by the caller.
        assert!(!segment_tcp_at_packet_size(
            &frame,
            52,
            &mut Vec::new(),
            |_| panic!("emitted")
        ));
        let mut plain = tcp4_super_frame();
        plain[1] = 0;
        assert!(!segment_tcp_at_packet_size(
            &plain,
            1500,
            &mut Vec::new(),
            |_| panic!("emitted")
        ));
    }

    #[test]
    fn leaves_ordinary_frames_alone() {
        let mut frame = tcp4_super_frame();
        frame[1] = 0; // not GSO
        assert!(!segment_gso_frame(&frame, &mut Vec::new(), |_| panic!(
            "emitted"
        )));
        let mut truncated = tcp4_super_frame();
        truncated.truncate(VNET_HDR_LEN + 30);
        assert!(!segment_gso_frame(&truncated, &mut Vec::new(), |_| panic!(
            "emitted"
        )));
        assert!(!segment_gso_frame(&[0u8; 4], &mut Vec::new(), |_| panic!(
            "emitted"
        )));
    }

    /// The same super-frame over IPv6: 40-byte header, no extension headers.
    fn tcp6_super_frame() -> Vec<u8> {
        let v4 = tcp4_super_frame();
        let mut frame = v4[..VNET_HDR_LEN].to_vec();
        frame[1] = VIRTIO_NET_HDR_GSO_TCPV6;
        frame[6..8].copy_from_slice(&54u16.to_le_bytes()); // csum_start
        frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd]);
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, IPPROTO_TCP, 64];
        ip.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        ip.extend_from_slice(&[
            0x20, 0x01, 0x0d, 0xb8, 1, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ]);
        put_u16(&mut ip, 4, 32 + 3500);
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&v4[VNET_HDR_LEN + 34..]);
        frame
    }

    #[test]
    fn cuts_ipv6_super_frames_by_mss_and_at_a_fixed_nic_size() {
        let frame = tcp6_super_frame();
        let mut segments = Vec::new();
        assert!(segment_gso_frame(&frame, &mut Vec::new(), |s| segments.push(s.to_vec())));
        assert_eq!(segments.len(), 4);
        for (index, segment) in segments.iter().enumerate() {
            let packet = &segment[VNET_HDR_LEN..];
            let payload_len = if index == 3 { 500 } else { 1000 };
            assert_eq!(usize::from(get_u16(packet, 18)), 32 + payload_len);
            assert_eq!(packet.len(), 14 + 40 + 32 + payload_len);
            assert_eq!(get_u32(packet, 58), 1_000_000 + 1000 * index as u32);
        }
        // A NIC fixed at 1280-byte IPv6 packets: 1280 − 40 − 32 = 1208 bytes of payload each.
        let mut packets = Vec::new();
        assert!(segment_tcp_at_packet_size(
            &frame,
            1280,
            &mut Vec::new(),
            |s| packets.push(s.to_vec())
        ));
        let sizes: Vec<usize> = packets
            .iter()
            .map(|p| 40 + usize::from(get_u16(&p[VNET_HDR_LEN..], 18)))
            .collect();
        assert_eq!(sizes, [1280, 1280, 72 + 3500 - 2 * 1208]);
    }
}
