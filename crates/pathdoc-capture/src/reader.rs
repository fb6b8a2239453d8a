//! Streaming pcap/pcapng reader on top of `pcap-parser`: one growing buffer (1 MiB to start),
//! packets handed out as borrowed slices, no allocation per packet.

use std::io;

use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{PcapBlockOwned, PcapError};

use crate::source::{Input, InputKind};

/// Link-layer header type (the pcap `LINKTYPE_*` number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    pub const NULL: LinkType = LinkType(0);
    pub const ETHERNET: LinkType = LinkType(1);
    pub const RAW_12: LinkType = LinkType(12);
    pub const RAW_14: LinkType = LinkType(14);
    pub const RAW: LinkType = LinkType(101);
    pub const LOOP: LinkType = LinkType(108);
    pub const LINUX_SLL: LinkType = LinkType(113);
    pub const IPV4: LinkType = LinkType(228);
    pub const IPV6: LinkType = LinkType(229);
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// Whether [`crate::decode`] understands this link type.
    pub fn supported(self) -> bool {
        matches!(
            self.0,
            0 | 1 | 9 | 12 | 14 | 50 | 101 | 108 | 113 | 228 | 229 | 276
        )
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "BSD loopback",
            1 => "Ethernet",
            9 | 50 => "PPP",
            12 | 14 | 101 => "raw IP",
            108 => "OpenBSD loopback",
            113 => "Linux cooked (SLL)",
            228 => "raw IPv4",
            229 => "raw IPv6",
            276 => "Linux cooked v2 (SLL2)",
            _ => "unsupported link type",
        }
    }
}

/// The container format of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    Pcap { nanosecond: bool, big_endian: bool },
    PcapNg,
}

/// Why a capture could not be read (further).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot open {name}: {cause}")]
    Open { name: String, cause: io::Error },
    #[error("{name} is empty (no capture header)")]
    Empty { name: String },
    #[error("{name} is not a pcap or pcapng capture (first bytes: {head})")]
    NotACapture { name: String, head: String },
    #[error("{name} ends inside its capture header (cut off before the first packet): nothing to analyse")]
    HeaderTruncated { name: String },
    #[error("{name} ends at byte {offset}{gz} in the middle of a packet record after {packets} packets (the capture was cut off, e.g. the writer was killed); the packets before it were analysed")]
    Truncated {
        name: String,
        offset: u64,
        packets: u64,
        gz: &'static str,
    },
    #[error("{name} is damaged at byte {offset}{gz} after {packets} packets: {detail}; the packets before it were analysed")]
    Corrupt {
        name: String,
        offset: u64,
        packets: u64,
        detail: String,
        gz: &'static str,
    },
    #[error("reading {name} failed at byte {offset}{gz} after {packets} packets: {detail}; the packets before it were analysed")]
    Read {
        name: String,
        offset: u64,
        packets: u64,
        detail: String,
        gz: &'static str,
    },
}

impl CaptureError {
    /// True when packets before the error were read (the analysis is partial, not absent).
    pub fn is_partial(&self) -> bool {
        matches!(
            self,
            CaptureError::Truncated { .. }
                | CaptureError::Corrupt { .. }
                | CaptureError::Read { .. }
        )
    }

    /// The byte offset of the damage, when there is one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            CaptureError::Truncated { offset, .. }
            | CaptureError::Corrupt { offset, .. }
            | CaptureError::Read { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}

/// One captured packet, borrowed from the reader's buffer until the next call.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub number: u64,
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    pub link: LinkType,
    /// Captured bytes (possibly fewer than `orig_len`: snap length).
    pub data: &'a [u8],
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// Byte offset of its record in the (decompressed) capture.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    /// Units per second of the timestamps.
    resolution: u64,
    offset_s: i64,
}

/// Largest buffer the reader grows to for one record; anything bigger is a corrupt length.
const MAX_BUFFER: usize = 16 << 20;
const INITIAL_BUFFER: usize = 1 << 20;

/// Streaming reader over an [`Input`].
pub struct CaptureReader {
    name: String,
    gz: &'static str,
    format: CaptureFormat,
    inner: Box<dyn PcapReaderIterator + Send>,
    /// Bytes of the last returned block still to consume.
    pending: usize,
    /// Current buffer size.
    capacity: usize,
    legacy: Option<Interface>,
    interfaces: Vec<Interface>,
    packets: u64,
    last_ts: i64,
    ng_big_endian: bool,
    last_error: std::sync::Arc<std::sync::Mutex<Option<io::Error>>>,
    size: Option<u64>,
    consumed_raw: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stdin: bool,
}

impl std::fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("packets", &self.packets)
            .finish()
    }
}

enum Step {
    Packet {
        /// Address of the packet bytes inside the reader's buffer.
        addr: usize,
        len: usize,
        ts_ns: i64,
        orig_len: u32,
        link: LinkType,
    },
    Skip,
}

impl CaptureReader {
    /// Open a file by name (`-` is standard input) and read its header.
    pub fn open(name: &str) -> Result<CaptureReader, CaptureError> {
        let input = crate::source::open_input(name).map_err(|cause| CaptureError::Open {
            name: name.to_string(),
            cause,
        })?;
        CaptureReader::new(input)
    }

    /// Read the header of an opened input.
    pub fn new(input: Input) -> Result<CaptureReader, CaptureError> {
        CaptureReader::with_buffer(input, INITIAL_BUFFER)
    }

    /// The same with a given initial buffer size (it still grows for larger records, up to
    /// 16 MiB); small buffers make fuzzing fast.
    pub fn with_buffer(input: Input, initial: usize) -> Result<CaptureReader, CaptureError> {
        let initial = initial.clamp(4096, MAX_BUFFER);
        let Input {
            name,
            kind,
            gzip,
            size,
            consumed,
            last_error,
            reader,
        } = input;
        let gz = if gzip {
            " of the decompressed stream"
        } else {
            ""
        };
        let head = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorder = HeadRecorder {
            inner: reader,
            head: head.clone(),
        };
        let inner = match pcap_parser::create_reader(initial, recorder) {
            Ok(r) => r,
            Err(PcapError::Eof) => return Err(CaptureError::Empty { name }),
            Err(PcapError::ReadError) => {
                return Err(match read_error(name, 0, 0, gz, &last_error) {
                    CaptureError::Truncated { name, .. } => CaptureError::HeaderTruncated { name },
                    other => other,
                });
            }
            Err(PcapError::Incomplete(_)) | Err(PcapError::UnexpectedEof) => {
                return Err(CaptureError::HeaderTruncated { name })
            }
            Err(_) => {
                let bytes = head.lock().unwrap_or_else(|p| p.into_inner()).clone();
                // All of a short input is kept: it ended there.
                if bytes.len() < HEAD_KEPT && cut_in_header(&bytes) {
                    return Err(CaptureError::HeaderTruncated { name });
                }
                return Err(CaptureError::NotACapture {
                    name,
                    head: hex_head(&bytes),
                });
            }
        };
        let mut reader = CaptureReader {
            name,
            gz,
            format: CaptureFormat::PcapNg,
            inner,
            pending: 0,
            capacity: initial,
            legacy: None,
            interfaces: Vec::new(),
            packets: 0,
            last_ts: 0,
            ng_big_endian: false,
            last_error,
            size,
            consumed_raw: consumed,
            stdin: kind == InputKind::Stdin,
        };
        reader.read_first_block()?;
        Ok(reader)
    }

    /// The pcap header comes as a first block; pcapng starts with its section header.
    fn read_first_block(&mut self) -> Result<(), CaptureError> {
        let (len, legacy) = match self.inner.next() {
            Ok((len, PcapBlockOwned::LegacyHeader(h))) => {
                let iface = Interface {
                    // The upper bits carry the FCS length (pcap's LinkType field); the link
                    // type is the low 26 bits, as Wireshark's LT_LINKTYPE().
                    link: LinkType(h.network.0 as u32 & 0x03ff_ffff),
                    resolution: if h.is_nanosecond_precision() {
                        1_000_000_000
                    } else {
                        1_000_000
                    },
                    offset_s: 0,
                };
                self.format = CaptureFormat::Pcap {
                    nanosecond: h.is_nanosecond_precision(),
                    big_endian: h.is_bigendian(),
                };
                (len, Some(iface))
            }
            Ok((_, _)) => (0, None),
            Err(_) => return Err(self.corrupt("unreadable capture header".into())),
        };
        self.legacy = legacy;
        if len > 0 {
            self.inner.consume(len);
        }
        Ok(())
    }

    /// The name the input was opened with.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// Packets returned so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Bytes read from the file or pipe so far (compressed bytes for gzip) and the file size when
    /// known: for progress.
    pub fn progress(&self) -> (u64, Option<u64>) {
        (
            self.consumed_raw.load(std::sync::atomic::Ordering::Relaxed),
            self.size,
        )
    }

    /// True when reading standard input.
    pub fn is_stdin(&self) -> bool {
        self.stdin
    }

    /// The next packet, `Ok(None)` at the end of the capture. After an error the reader is done.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        if self.pending > 0 {
            self.inner.consume(self.pending);
            self.pending = 0;
        }
        loop {
            let offset = self.inner.consumed() as u64;
            let head = self.block_head();
            // Every pcapng block is at least type + two lengths; pcap-parser 0.17 subtracts 12
            // from a shorter length of some block types unchecked (a fuzz find).
            if let Some(len) = self.ng_block_len(head).filter(|l| *l < 12) {
                return Err(
                    self.corrupt(format!("block length {len} is below the 12-byte minimum"))
                );
            }
            let classified = match self.inner.next() {
                Ok((len, block)) => {
                    let step =
                        classify(block, self.legacy, &mut self.interfaces, &mut self.last_ts);
                    (len, step)
                }
                Err(PcapError::Eof) => return Ok(None),
                Err(PcapError::Incomplete(_)) => {
                    self.refill()?;
                    continue;
                }
                Err(PcapError::BufferTooSmall) => {
                    self.grow()?;
                    continue;
                }
                Err(PcapError::UnexpectedEof) => {
                    return Err(CaptureError::Truncated {
                        name: self.name.clone(),
                        offset,
                        packets: self.packets,
                        gz: self.gz,
                    })
                }
                Err(PcapError::ReadError) => {
                    return Err(read_error(
                        self.name.clone(),
                        offset,
                        self.packets,
                        self.gz,
                        &self.last_error,
                    ))
                }
                Err(PcapError::HeaderNotRecognized) => {
                    return Err(self.corrupt("unrecognised block".into()))
                }
                Err(PcapError::NomError(_, kind)) | Err(PcapError::OwnedNomError(_, kind)) => {
                    return Err(self.corrupt(format!("invalid record ({kind:?})")))
                }
            };
            let (block_len, step) = classified;
            if let Some(detail) = self.check_block_lengths(head, block_len) {
                return Err(self.corrupt(detail));
            }
            let (addr, len, ts_ns, orig_len, link) = match step {
                Ok(Step::Skip) => {
                    self.inner.consume(block_len);
                    continue;
                }
                Ok(Step::Packet {
                    addr,
                    len,
                    ts_ns,
                    orig_len,
                    link,
                }) => (addr, len, ts_ns, orig_len, link),
                Err(detail) => return Err(self.corrupt(detail)),
            };
            self.pending = block_len;
            self.packets += 1;
            let buffer = self.inner.data();
            let start = addr.wrapping_sub(buffer.as_ptr() as usize);
            let data = buffer.get(start..start.saturating_add(len)).unwrap_or(&[]);
            return Ok(Some(Packet {
                number: self.packets,
                ts_ns,
                link,
                data,
                orig_len,
                offset,
            }));
        }
    }

    /// The first 12 bytes of the next block (pcapng only), to check its length fields.
    fn block_head(&mut self) -> Option<[u8; 12]> {
        if self.format != CaptureFormat::PcapNg {
            return None;
        }
        let data = self.inner.data();
        let head: [u8; 12] = data.get(..12)?.try_into().ok()?;
        if head[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            // A section header sets the byte order of what follows.
            self.ng_big_endian = head[8..12] == [0x1a, 0x2b, 0x3c, 0x4d];
        }
        Some(head)
    }

    /// The leading length field of the pcapng block at the head of the buffer.
    fn ng_block_len(&self, head: Option<[u8; 12]>) -> Option<u32> {
        let b = head?;
        let len = [b[4], b[5], b[6], b[7]];
        Some(if self.ng_big_endian {
            u32::from_be_bytes(len)
        } else {
            u32::from_le_bytes(len)
        })
    }

    /// A pcapng block's leading and trailing lengths must both equal what was parsed.
    fn check_block_lengths(&self, head: Option<[u8; 12]>, parsed: usize) -> Option<String> {
        let head = head?;
        let read = |b: [u8; 4]| {
            if self.ng_big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let len1 = read([head[4], head[5], head[6], head[7]]) as usize;
        let data = self.inner.data();
        let len2 = data
            .get(parsed.checked_sub(4)?..parsed)
            .map(|b| read([b[0], b[1], b[2], b[3]]) as usize)?;
        if len1 != parsed || len2 != parsed {
            Some(format!(
                "block length fields say {len1} and {len2} bytes, the block has {parsed}"
            ))
        } else {
            None
        }
    }

    fn refill(&mut self) -> Result<(), CaptureError> {
        let offset = self.inner.consumed() as u64;
        self.inner.refill().map_err(|_| {
            read_error(
                self.name.clone(),
                offset,
                self.packets,
                self.gz,
                &self.last_error,
            )
        })
    }

    /// Length of the record at the head of the buffer, from its header.
    fn record_len(&self) -> Option<usize> {
        let data = self.inner.data();
        let field = |at: usize, be: bool| -> Option<usize> {
            let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
            Some(if be {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            } as usize)
        };
        match self.format {
            CaptureFormat::Pcap { big_endian, .. } => field(8, big_endian).map(|c| c + 16),
            CaptureFormat::PcapNg => field(4, self.ng_big_endian),
        }
    }

    fn grow(&mut self) -> Result<(), CaptureError> {
        let current = self.capacity;
        // A length beyond the limit is corrupt at once; otherwise grow step by step, so a bogus
        // length near the end of a short file costs little before the end of input shows it.
        let needed = self.record_len().unwrap_or(0);
        let wanted = (current * 2).min(MAX_BUFFER);
        if needed > MAX_BUFFER || current >= MAX_BUFFER || !self.inner.grow(wanted) {
            return Err(self.corrupt(format!(
                "a record claims to be larger than {} MiB",
                MAX_BUFFER >> 20
            )));
        }
        self.capacity = wanted;
        self.refill()
    }

    fn corrupt(&self, detail: String) -> CaptureError {
        CaptureError::Corrupt {
            name: self.name.clone(),
            offset: self.inner.consumed() as u64,
            packets: self.packets,
            detail,
            gz: self.gz,
        }
    }
}

/// Turn a parsed block into a packet (its address in the buffer) or a skip, recording
/// interfaces on the way. An error is the detail of a corrupt block.
fn classify(
    block: PcapBlockOwned<'_>,
    legacy: Option<Interface>,
    interfaces: &mut Vec<Interface>,
    last_ts: &mut i64,
) -> Result<Step, String> {
    let (data, ts, orig_len, link): (&[u8], i64, u32, LinkType) = match block {
        PcapBlockOwned::LegacyHeader(_) => return Ok(Step::Skip),
        PcapBlockOwned::Legacy(b) => {
            let Some(iface) = legacy else {
                return Ok(Step::Skip);
            };
            let ts = ts_ns(b.ts_sec as u64, b.ts_usec as u64, iface.resolution, 0);
            (b.data, ts, b.origlen, iface.link)
        }
        PcapBlockOwned::NG(Block::SectionHeader(_)) => {
            // A new section: its interfaces are numbered from 0 again.
            interfaces.clear();
            return Ok(Step::Skip);
        }
        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
            let resolution = pcap_parser::pcapng::build_ts_resolution(idb.if_tsresol)
                .filter(|r| *r > 0)
                .unwrap_or(1_000_000);
            if interfaces.len() < 65536 {
                interfaces.push(Interface {
                    link: LinkType(idb.linktype.0 as u32),
                    resolution,
                    offset_s: idb.if_tsoffset,
                });
            }
            return Ok(Step::Skip);
        }
        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
            let Some(iface) = interfaces.get(epb.if_id as usize).copied() else {
                return Err(format!(
                    "packet on interface {} which no interface description declared",
                    epb.if_id
                ));
            };
            let raw = ((epb.ts_high as u64) << 32) | epb.ts_low as u64;
            let ts = ts_ns(
                raw / iface.resolution,
                raw % iface.resolution,
                iface.resolution,
                iface.offset_s,
            );
            let data = epb.data;
            let captured = &data[..(epb.caplen as usize).min(data.len())];
            (captured, ts, epb.origlen, iface.link)
        }
        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
            let Some(iface) = interfaces.first().copied() else {
                return Err("simple packet block before any interface description".into());
            };
            let data = spb.data;
            let captured = &data[..(spb.origlen as usize).min(data.len())];
            // No timestamp in a simple packet block: keep the previous packet's time.
            (captured, *last_ts, spb.origlen, iface.link)
        }
        PcapBlockOwned::NG(_) => return Ok(Step::Skip),
    };
    *last_ts = ts;
    Ok(Step::Packet {
        addr: data.as_ptr() as usize,
        len: data.len(),
        ts_ns: ts,
        orig_len,
        link,
    })
}

/// Nanoseconds since the epoch from whole seconds, a fraction in `resolution` units and an
/// offset; saturating, so a garbage timestamp never overflows.
fn ts_ns(secs: u64, frac: u64, resolution: u64, offset_s: i64) -> i64 {
    let secs = (secs.min(i64::MAX as u64 / 2_000_000_000) as i64).saturating_add(offset_s);
    let frac_ns = if resolution == 1_000_000_000 {
        frac
    } else if resolution == 1_000_000 {
        frac.saturating_mul(1000)
    } else {
        ((frac as u128 * 1_000_000_000u128) / resolution.max(1) as u128) as u64
    };
    secs.saturating_mul(1_000_000_000)
        .saturating_add(frac_ns.min(999_999_999) as i64)
}

/// The error the input stashed when a read failed. A gzip stream that stops before its end
/// ("incomplete deflate stream", `UnexpectedEof`) is a capture cut off like any other: it is
/// [`CaptureError::Truncated`], not a read failure.
fn read_error(
    name: String,
    offset: u64,
    packets: u64,
    gz: &'static str,
    slot: &std::sync::Mutex<Option<io::Error>>,
) -> CaptureError {
    let stashed = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    match stashed {
        Some(e) if e.kind() == io::ErrorKind::UnexpectedEof => CaptureError::Truncated {
            name,
            offset,
            packets,
            gz,
        },
        other => CaptureError::Read {
            name,
            offset,
            packets,
            detail: other
                .map(|e| e.to_string())
                .unwrap_or_else(|| "read error".into()),
            gz,
        },
    }
}

fn hex_head(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "none".into();
    }
    let hex: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let text: String = bytes
        .iter()
        .take(8)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
        .collect();
    format!("{} \"{text}\"", hex.join(" "))
}

/// Keeps the first bytes read, to show them when the input is not a capture.
/// The first bytes of the input, kept to name what it is when it is not a capture (and to tell
/// a header cut short from a foreign file).
const HEAD_KEPT: usize = 4096;

/// The bytes start like a pcap or pcapng header but end before it does.
fn cut_in_header(bytes: &[u8]) -> bool {
    let Some(magic) = bytes.get(..4) else {
        return false;
    };
    let pcap_magics: [[u8; 4]; 4] = [
        [0xd4, 0xc3, 0xb2, 0xa1],
        [0xa1, 0xb2, 0xc3, 0xd4],
        [0x4d, 0x3c, 0xb2, 0xa1],
        [0xa1, 0xb2, 0x3c, 0x4d],
    ];
    if pcap_magics.iter().any(|m| m == magic) {
        return bytes.len() < 24;
    }
    if magic != [0x0a, 0x0d, 0x0d, 0x0a] {
        return false;
    }
    // pcapng section header block: its length in the byte order its byte-order magic gives.
    let (Some(len), Some(order)) = (bytes.get(4..8), bytes.get(8..12)) else {
        return true;
    };
    let len = [len[0], len[1], len[2], len[3]];
    let block_len = match order {
        [0x4d, 0x3c, 0x2b, 0x1a] => u32::from_le_bytes(len),
        [0x1a, 0x2b, 0x3c, 0x4d] => u32::from_be_bytes(len),
        _ => return false,
    };
    (bytes.len() as u64) < u64::from(block_len)
}

struct HeadRecorder {
    inner: Box<dyn io::Read + Send>,
    head: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl io::Read for HeadRecorder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut head = self.head.lock().unwrap_or_else(|p| p.into_inner());
        if head.len() < HEAD_KEPT {
            let take = (HEAD_KEPT - head.len()).min(n);
            head.extend_from_slice(&buf[..take]);
        }
        Ok(n)
    }
}
