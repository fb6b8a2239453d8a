//! IPv4 fragments of TCP segments, tracked just far enough to number streams as Wireshark does.
//!
//! tshark reassembles IPv4 datagrams by default and dissects the TCP segment at the frame that
//! completes one, so that conversation takes a `tcp.stream` number there; a first fragment cut
//! short by the capture is not reassembled but dissected as TCP by itself. Skipping fragments
//! shifted every later stream number by one per fragmented connection (issue 17), so `--conn N`
//! no longer named tshark's stream N. No payload is buffered: a datagram is complete when its
//! pieces cover it, and the TCP header comes from the piece at offset 0.

use std::collections::HashMap;
use std::net::IpAddr;

use pathdoc_capture::decode::{TcpFragment, TcpInfo};

/// Datagrams awaiting fragments. Wireshark keeps them for the whole file; past this many (a
/// capture of fragment floods) the table starts over, so memory stays bounded.
const MAX_PENDING: usize = 4096;
/// Pieces kept per datagram (a 64 KiB datagram in 8-byte pieces would be 8192: a crafted one).
const MAX_PIECES: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DatagramKey {
    src: IpAddr,
    dst: IpAddr,
    id: u16,
}

#[derive(Debug, Default)]
struct Pending {
    /// The TCP header of the piece at offset 0, once seen.
    tcp: Option<TcpInfo>,
    /// (offset, len) of each piece.
    pieces: Vec<(u32, u32)>,
    /// The datagram's payload length, known from the last piece (MF clear).
    total: Option<u32>,
}

impl Pending {
    /// Every byte of `0..total` is in some piece.
    fn complete(&self) -> bool {
        let Some(total) = self.total else {
            return false;
        };
        let mut pieces = self.pieces.clone();
        pieces.sort_unstable();
        let mut covered = 0u32;
        for (off, len) in pieces {
            if off > covered {
                return false;
            }
            covered = covered.max(off.saturating_add(len));
        }
        covered >= total
    }
}

/// The fragments seen so far, per datagram.
#[derive(Debug, Default)]
pub(crate) struct Fragments {
    pending: HashMap<DatagramKey, Pending>,
}

impl Fragments {
    /// Take one fragment; returns the TCP segment Wireshark dissects at this frame, if any:
    /// the whole segment of a datagram this fragment completes (its `seg_len` the datagram's
    /// payload less the TCP header), or a first fragment cut short by the capture — which
    /// Wireshark numbers but does not analyse (no length, no flags): `seg_len` is `None`.
    pub(crate) fn add(&mut self, src: IpAddr, dst: IpAddr, f: &TcpFragment) -> Option<TcpInfo> {
        if !f.captured {
            let mut tcp = f.tcp.filter(|_| f.offset == 0)?;
            tcp.seg_len = None;
            return Some(tcp);
        }
        let key = DatagramKey { src, dst, id: f.id };
        if !self.pending.contains_key(&key) && self.pending.len() >= MAX_PENDING {
            self.pending.clear();
        }
        let p = self.pending.entry(key).or_default();
        if p.pieces.len() < MAX_PIECES {
            p.pieces.push((f.offset, f.len));
        }
        if f.offset == 0 {
            p.tcp = f.tcp;
        }
        if !f.more {
            p.total = Some(f.offset.saturating_add(f.len));
        }
        if !p.complete() {
            return None;
        }
        let p = self.pending.remove(&key)?;
        let mut tcp = p.tcp?;
        tcp.seg_len = p
            .total
            .and_then(|t| t.checked_sub(u32::from(tcp.header_len)));
        Some(tcp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp() -> TcpInfo {
        TcpInfo {
            src_port: 2000,
            dst_port: 80,
            seq: 1,
            ack: 0,
            flags: 0x18,
            window: 100,
            header_len: 20,
            seg_len: Some(20),
            options: Default::default(),
        }
    }

    fn frag(offset: u32, len: u32, more: bool, captured: bool) -> TcpFragment {
        TcpFragment {
            id: 7,
            offset,
            len,
            more,
            captured,
            tcp: (offset == 0).then(tcp),
        }
    }

    #[test]
    fn a_datagram_yields_its_segment_when_complete_in_any_order() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut f = Fragments::default();
        assert_eq!(f.add(a, b, &frag(40, 44, false, true)), None);
        let seg = f.add(a, b, &frag(0, 40, true, true)).unwrap();
        assert_eq!(seg.seg_len, Some(64));
        assert!(f.pending.is_empty());
        // A hole: never complete.
        assert_eq!(f.add(a, b, &frag(0, 40, true, true)), None);
        assert_eq!(f.add(a, b, &frag(48, 8, false, true)), None);
    }

    #[test]
    fn a_first_fragment_cut_short_is_a_segment_by_itself() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mut f = Fragments::default();
        assert_eq!(
            f.add(a, a, &frag(0, 40, true, false)).unwrap().seg_len,
            None
        );
        assert_eq!(f.add(a, a, &frag(40, 8, false, false)), None);
        assert!(f.pending.is_empty());
    }
}
