//! Minimal capture writers (pcap in either byte order and resolution, pcapng with several
//! sections and interfaces) for crafting test inputs and fuzz seeds. Not a general-purpose writer.

/// A frame to write: time in nanoseconds, bytes captured, length on the wire.
#[derive(Debug, Clone)]
pub struct Frame {
    pub ts_ns: i64,
    pub data: Vec<u8>,
    pub orig_len: u32,
}

impl Frame {
    pub fn new(ts_ns: i64, data: Vec<u8>) -> Self {
        let orig_len = data.len() as u32;
        Frame {
            ts_ns,
            data,
            orig_len,
        }
    }

    /// Keep only the first `snaplen` bytes (the wire length stays).
    pub fn snap(mut self, snaplen: usize) -> Self {
        self.data.truncate(snaplen);
        self
    }
}

/// A classic pcap file.
pub fn pcap(link: u32, frames: &[Frame], big_endian: bool, nanosecond: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let u32b = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let magic: u32 = if nanosecond { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    out.extend_from_slice(&u32b(magic));
    out.extend_from_slice(&u16b(2));
    out.extend_from_slice(&u16b(4));
    out.extend_from_slice(&u32b(0));
    out.extend_from_slice(&u32b(0));
    out.extend_from_slice(&u32b(262_144));
    out.extend_from_slice(&u32b(link));
    for f in frames {
        let secs = f.ts_ns.div_euclid(1_000_000_000) as u32;
        let frac = f.ts_ns.rem_euclid(1_000_000_000) as u32;
        let frac = if nanosecond { frac } else { frac / 1000 };
        out.extend_from_slice(&u32b(secs));
        out.extend_from_slice(&u32b(frac));
        out.extend_from_slice(&u32b(f.data.len() as u32));
        out.extend_from_slice(&u32b(f.orig_len));
        out.extend_from_slice(&f.data);
    }
    out
}

/// One pcapng section: its interfaces (link type, `if_tsresol` as a power of ten) and its
/// packets (interface index, frame).
#[derive(Debug, Clone, Default)]
pub struct Section {
    pub interfaces: Vec<(u32, u8)>,
    pub packets: Vec<(u32, Frame)>,
}

/// A pcapng file (little-endian) with the given sections.
pub fn pcapng(sections: &[Section]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in sections {
        // Section header block.
        let mut body = Vec::new();
        body.extend_from_slice(&0x1a2b_3c4d_u32.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes());
        block(&mut out, 0x0a0d_0d0a, &body);
        for &(link, tsresol) in &s.interfaces {
            let mut body = Vec::new();
            body.extend_from_slice(&(link as u16).to_le_bytes());
            body.extend_from_slice(&0u16.to_le_bytes());
            body.extend_from_slice(&262_144u32.to_le_bytes());
            // if_tsresol option (code 9, length 1), padded, then end of options.
            body.extend_from_slice(&9u16.to_le_bytes());
            body.extend_from_slice(&1u16.to_le_bytes());
            body.extend_from_slice(&[tsresol, 0, 0, 0]);
            body.extend_from_slice(&[0, 0, 0, 0]);
            block(&mut out, 1, &body);
        }
        for (iface, f) in &s.packets {
            let tsresol = s.interfaces.get(*iface as usize).map(|i| i.1).unwrap_or(6);
            let units = 10u128.pow(u32::from(tsresol));
            let ts = (f.ts_ns.max(0) as u128 * units / 1_000_000_000) as u64;
            let mut body = Vec::new();
            body.extend_from_slice(&iface.to_le_bytes());
            body.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
            body.extend_from_slice(&(ts as u32).to_le_bytes());
            body.extend_from_slice(&(f.data.len() as u32).to_le_bytes());
            body.extend_from_slice(&f.orig_len.to_le_bytes());
            body.extend_from_slice(&f.data);
            while body.len() % 4 != 0 {
                body.push(0);
            }
            block(&mut out, 6, &body);
        }
    }
    out
}

fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (body.len() + 12) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&len.to_le_bytes());
}
