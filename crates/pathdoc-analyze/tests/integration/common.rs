//! What several test files share.

use pathdoc_analyze::analyzer::CaptureAnalysis;
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::source::{from_reader, InputKind};
use pathdoc_capture::write::{pcap, Frame};
use pathdoc_capture::CaptureReader;

/// `frames` written as a pcap in memory and read back through the analyzer, every connection
/// listed (`list_all`), as `pathdoc analyze --all` would.
pub fn analyse_listing_all(frames: &[Frame]) -> CaptureAnalysis {
    let bytes = pcap(1, frames, false, false);
    let input = from_reader(
        "mem",
        InputKind::File,
        None,
        Box::new(std::io::Cursor::new(bytes)),
    );
    let mut r = CaptureReader::new(input).unwrap();
    let mut a = Analyzer::new(Options {
        list_all: true,
        ..Options::default()
    });
    while let Some(p) = r.next_packet().unwrap() {
        a.process(&p);
    }
    a.finish()
}
