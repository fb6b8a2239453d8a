//! Any bytes as a capture file (plain or gzip), then every packet through the analyzer and the
//! diagnosis; and the same bytes as one frame of each link type through the decoder. Nothing
//! may panic, hang or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::source::{from_reader, InputKind};
use pathdoc_capture::{decode, CaptureReader, LinkType};

fuzz_target!(|data: &[u8]| {
    for link in [0u32, 1, 101, 113, 229, 276] {
        let _ = decode(LinkType(link), data, data.len() as u32);
    }
    let input = from_reader(
        "fuzz",
        InputKind::File,
        None,
        Box::new(std::io::Cursor::new(data.to_vec())),
    );
    let Ok(mut reader) = CaptureReader::with_buffer(input, 4096) else { return };
    let mut analyzer = Analyzer::new(Options {
        list_all: true,
        ..Options::default()
    });
    while let Ok(Some(p)) = reader.next_packet() {
        let _ = analyzer.process(&p);
    }
    let result = analyzer.finish();
    for l in &result.listed {
        let _ = pathdoc_analyze::diagnose::connection(&l.summary);
    }
});
