//! Header of pathdoc UDP datagrams (idle UDP-binding probes, MTU probes).
//!
//! 16 bytes: MAGIC, version (u16), check-defined kind (u16), session (u64), all big-endian,
//! followed by the check's payload. The server answers only datagrams of live sessions, and
//! never with more bytes than it received, so it cannot be used as a reflector.

use crate::{ProtoError, SessionId, MAGIC, PROTOCOL_VERSION};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub session: SessionId,
    /// Meaning defined by the check that owns the session.
    pub kind: u16,
}

impl UdpHeader {
    pub const LEN: usize = 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        out.extend_from_slice(&self.kind.to_be_bytes());
        out.extend_from_slice(&self.session.0.to_be_bytes());
    }

    /// Parse a datagram into its header and payload.
    pub fn decode(datagram: &[u8]) -> Result<(UdpHeader, &[u8]), ProtoError> {
        if datagram.len() < Self::LEN || datagram[..4] != MAGIC {
            return Err(ProtoError::NotPathdoc(
                datagram[..datagram.len().min(8)].to_vec(),
            ));
        }
        let version = u16::from_be_bytes([datagram[4], datagram[5]]);
        if version != PROTOCOL_VERSION {
            return Err(ProtoError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        let kind = u16::from_be_bytes([datagram[6], datagram[7]]);
        let mut session = [0u8; 8];
        session.copy_from_slice(&datagram[8..16]);
        let header = UdpHeader {
            session: SessionId(u64::from_be_bytes(session)),
            kind,
        };
        Ok((header, &datagram[Self::LEN..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_short_or_foreign() {
        let h = UdpHeader {
            session: SessionId(0xdead_beef),
            kind: 3,
        };
        let mut buf = Vec::new();
        h.encode(&mut buf);
        buf.extend_from_slice(b"payload");
        let (back, payload) = UdpHeader::decode(&buf).unwrap();
        assert_eq!(back, h);
        assert_eq!(payload, b"payload");
        assert!(UdpHeader::decode(b"PDoc").is_err());
        assert!(UdpHeader::decode(&[0u8; 32]).is_err());
    }
}
