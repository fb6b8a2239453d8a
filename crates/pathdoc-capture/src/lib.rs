//! Reading packet captures and decoding the headers pathdoc analyses.
//!
//! - [`reader`]: a streaming reader for pcap (both byte orders, µs and ns timestamps) and pcapng
//!   (several sections and interfaces, each with its own link type and timestamp resolution),
//!   plain or gzip-compressed, from a file or standard input. It holds one buffer whatever the
//!   file size, and a damaged file yields its packets up to the damage, then an error naming the
//!   byte offset.
//! - [`decode`]: zero-copy decoding of the link layer (Ethernet with 802.1Q/QinQ, Linux cooked
//!   SLL/SLL2, raw IP, BSD loopback), IPv4/IPv6 (extension headers, via `etherparse`), TCP with its
//!   options, UDP and ICMP/ICMPv6 including the packet quoted by an error message. Lengths come
//!   from the headers (capped at the frame's wire length, as Wireshark does), so snap-length-
//!   truncated packets still count in full.
//! - [`tunnel`]: GRE (ERSPAN II/III, WCCP), VXLAN, Geneve, GTP-U, IP in IP, MPLS and PPPoE
//!   sessions, looked through to the innermost IP packet.
//!
//! Nothing here knows about the terminal; errors are typed ([`CaptureError`]).

pub mod decode;
pub mod reader;
pub mod source;
pub mod tunnel;
pub mod write;

pub use decode::{
    decode, Decoded, IcmpInfo, IcmpKind, IpInfo, Quoted, TcpFragment, TcpInfo, TcpOptions, L4,
};
pub use reader::{CaptureError, CaptureFormat, CaptureReader, LinkType, Packet};
pub use source::{open_input, Input, InputKind};
