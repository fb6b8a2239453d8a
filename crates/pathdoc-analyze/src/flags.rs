//! Wireshark's `tcp.analysis.*` classes as a bit set (same bit values as Wireshark's
//! `TCP_A_*` constants), with their display-filter names.

use std::fmt;

/// The analysis flags of one packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(pub u32);

impl Flags {
    pub const RETRANSMISSION: u32 = 0x0001;
    pub const LOST_SEGMENT: u32 = 0x0002;
    pub const ACK_LOST_SEGMENT: u32 = 0x0004;
    pub const KEEP_ALIVE: u32 = 0x0008;
    pub const DUPLICATE_ACK: u32 = 0x0010;
    pub const ZERO_WINDOW: u32 = 0x0020;
    pub const ZERO_WINDOW_PROBE: u32 = 0x0040;
    pub const ZERO_WINDOW_PROBE_ACK: u32 = 0x0080;
    pub const KEEP_ALIVE_ACK: u32 = 0x0100;
    pub const OUT_OF_ORDER: u32 = 0x0200;
    pub const FAST_RETRANSMISSION: u32 = 0x0400;
    pub const WINDOW_UPDATE: u32 = 0x0800;
    pub const WINDOW_FULL: u32 = 0x1000;
    pub const REUSED_PORTS: u32 = 0x2000;
    pub const SPURIOUS_RETRANSMISSION: u32 = 0x4000;

    /// Every flag with its Wireshark display-filter name (`tcp.analysis.<name>`), in the order
    /// `--flags` prints them.
    pub const NAMES: [(u32, &'static str); 15] = [
        (Self::RETRANSMISSION, "retransmission"),
        (Self::FAST_RETRANSMISSION, "fast_retransmission"),
        (Self::SPURIOUS_RETRANSMISSION, "spurious_retransmission"),
        (Self::OUT_OF_ORDER, "out_of_order"),
        (Self::LOST_SEGMENT, "lost_segment"),
        (Self::ACK_LOST_SEGMENT, "ack_lost_segment"),
        (Self::DUPLICATE_ACK, "duplicate_ack"),
        (Self::ZERO_WINDOW, "zero_window"),
        (Self::ZERO_WINDOW_PROBE, "zero_window_probe"),
        (Self::ZERO_WINDOW_PROBE_ACK, "zero_window_probe_ack"),
        (Self::WINDOW_FULL, "window_full"),
        (Self::WINDOW_UPDATE, "window_update"),
        (Self::KEEP_ALIVE, "keep_alive"),
        (Self::KEEP_ALIVE_ACK, "keep_alive_ack"),
        (Self::REUSED_PORTS, "reused_ports"),
    ];

    pub fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }

    pub fn set(&mut self, flag: u32) {
        self.0 |= flag;
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Any of Wireshark's retransmission classes. Wireshark's `tcp.analysis.retransmission`
    /// expert item is raised for fast and spurious retransmissions too.
    pub fn any_retransmission(self) -> bool {
        self.has(Self::RETRANSMISSION | Self::FAST_RETRANSMISSION | Self::SPURIOUS_RETRANSMISSION)
    }
}

impl fmt::Display for Flags {
    /// Comma-separated names, `-` when none — the `tcp.analysis.*` fields tshark shows: like
    /// Wireshark's expert items, a fast or spurious retransmission also shows `retransmission`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let shown = if self.has(Self::FAST_RETRANSMISSION | Self::SPURIOUS_RETRANSMISSION) {
            Flags(self.0 | Self::RETRANSMISSION)
        } else {
            *self
        };
        for (bit, name) in Self::NAMES {
            if shown.has(bit) {
                if !first {
                    f.write_str(",")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}
