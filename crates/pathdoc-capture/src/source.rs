//! Where capture bytes come from: a file or standard input, gzip-compressed or not (detected from
//! the first two bytes, not the file name), with a counter of the bytes read so far for progress.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flate2::read::MultiGzDecoder;

/// Where the input came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    File,
    Stdin,
}

/// An opened capture source.
pub struct Input {
    /// What the user named (`-` for standard input).
    pub name: String,
    pub kind: InputKind,
    /// True if the bytes are gzip-compressed (offsets in errors are then in the decompressed stream).
    pub gzip: bool,
    /// Size of the file on disk (compressed size for gzip), when known.
    pub size: Option<u64>,
    /// Bytes read from the file or pipe so far (compressed bytes for gzip).
    pub consumed: Arc<AtomicU64>,
    /// The last I/O error the reader hit, kept because the pcap parser only reports "read error".
    pub last_error: Arc<Mutex<Option<io::Error>>>,
    pub reader: Box<dyn Read + Send>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("gzip", &self.gzip)
            .field("size", &self.size)
            .finish()
    }
}

/// Open `name` (`-` is standard input). The file is not read beyond its first two bytes here.
pub fn open_input(name: &str) -> io::Result<Input> {
    let (raw, kind, size): (Box<dyn Read + Send>, InputKind, Option<u64>) = if name == "-" {
        (Box::new(io::stdin()), InputKind::Stdin, None)
    } else {
        let file = File::open(Path::new(name))?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a directory, not a capture file",
            ));
        }
        let size = meta.is_file().then_some(meta.len());
        (Box::new(file), InputKind::File, size)
    };
    Ok(from_reader(name, kind, size, raw))
}

/// Wrap any reader (tests, in-memory data) the same way as [`open_input`].
pub fn from_reader(
    name: &str,
    kind: InputKind,
    size: Option<u64>,
    raw: Box<dyn Read + Send>,
) -> Input {
    let consumed = Arc::new(AtomicU64::new(0));
    let last_error = Arc::new(Mutex::new(None));
    let counting = Counting {
        inner: raw,
        consumed: consumed.clone(),
    };
    let peek = Peeked::new(counting);
    let gzip = peek.starts_with(&[0x1f, 0x8b]);
    let decoded: Box<dyn Read + Send> = if gzip {
        Box::new(MultiGzDecoder::new(io::BufReader::with_capacity(
            256 * 1024,
            peek,
        )))
    } else {
        Box::new(peek)
    };
    // Reading (and decompressing) runs on its own thread, ahead of the parser: on two cores the
    // kernel's copy into user space and gunzip overlap with the analysis.
    let decoded: Box<dyn Read + Send> =
        Box::new(ReadAhead::spawn(decoded, kind == InputKind::File));
    Input {
        name: name.to_string(),
        kind,
        gzip,
        size,
        consumed,
        last_error: last_error.clone(),
        reader: Box::new(Stashing {
            inner: decoded,
            last_error,
            probed: false,
        }),
    }
}

/// Chunks read ahead by a background thread (bounded: [`READ_AHEAD_CHUNKS`] of
/// [`READ_AHEAD_CHUNK`] bytes), their buffers recycled so nothing is allocated per chunk.
struct ReadAhead {
    chunks: Option<std::sync::mpsc::Receiver<io::Result<Vec<u8>>>>,
    recycle: std::sync::mpsc::Sender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    done: bool,
    /// Joined on drop for files (their reads always return); a pipe's thread may sit in a
    /// read forever, so it is left to end with the process.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the channel makes the reader thread's next send fail, so it stops.
        self.chunks.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const READ_AHEAD_CHUNK: usize = 1 << 20;
const READ_AHEAD_CHUNKS: usize = 4;

impl ReadAhead {
    fn spawn(mut inner: Box<dyn Read + Send>, join_on_drop: bool) -> Self {
        let (tx, chunks) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(READ_AHEAD_CHUNKS);
        let (recycle, recycled) = std::sync::mpsc::channel::<Vec<u8>>();
        let handle = std::thread::Builder::new()
            .name("pathdoc-read".into())
            .spawn(move || loop {
                let mut buf = recycled
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(READ_AHEAD_CHUNK));
                buf.resize(READ_AHEAD_CHUNK, 0);
                let mut filled = 0;
                let result = loop {
                    match inner.read(&mut buf[filled..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            filled += n;
                            // Hand over what a pipe delivered rather than wait for a full chunk.
                            if filled == buf.len() || filled >= 64 * 1024 {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => break Err(e),
                    }
                };
                buf.truncate(filled);
                let end = filled == 0;
                match result {
                    Ok(()) => {
                        if tx.send(Ok(buf)).is_err() || end {
                            return;
                        }
                    }
                    Err(e) => {
                        if filled > 0 && tx.send(Ok(buf)).is_err() {
                            return;
                        }
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            })
            .expect("spawning the capture reader thread");
        ReadAhead {
            chunks: Some(chunks),
            recycle,
            current: Vec::new(),
            pos: 0,
            done: false,
            thread: join_on_drop.then_some(handle),
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.current.len() {
            if self.done {
                return Ok(0);
            }
            let Some(chunks) = &self.chunks else {
                return Ok(0);
            };
            match chunks.recv() {
                Ok(Ok(chunk)) => {
                    let old = std::mem::replace(&mut self.current, chunk);
                    let _ = self.recycle.send(old);
                    self.pos = 0;
                    if self.current.is_empty() {
                        self.done = true;
                    }
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = (self.current.len() - self.pos).min(buf.len());
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Counts the bytes read from the underlying file or pipe.
struct Counting {
    inner: Box<dyn Read + Send>,
    consumed: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads a few bytes ahead (to detect gzip) and hands them out again first.
struct Peeked<R> {
    head: [u8; 2],
    head_len: usize,
    head_pos: usize,
    inner: R,
    error: Option<io::Error>,
}

impl<R: Read> Peeked<R> {
    fn new(mut inner: R) -> Self {
        let mut head = [0u8; 2];
        let mut head_len = 0;
        let mut error = None;
        while head_len < head.len() {
            match inner.read(&mut head[head_len..]) {
                Ok(0) => break,
                Ok(n) => head_len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        Peeked {
            head,
            head_len,
            head_pos: 0,
            inner,
            error,
        }
    }

    fn starts_with(&self, prefix: &[u8]) -> bool {
        self.head[..self.head_len].starts_with(prefix) && self.head_len >= prefix.len()
    }
}

impl<R: Read> Read for Peeked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.head_pos < self.head_len {
            let n = (self.head_len - self.head_pos).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.head_pos..self.head_pos + n]);
            self.head_pos += n;
            // Fill the rest of the caller's buffer too: parsers probe the first read only.
            if n < buf.len() && self.error.is_none() {
                loop {
                    match self.inner.read(&mut buf[n..]) {
                        Ok(m) => return Ok(n + m),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            self.error = Some(e);
                            return Ok(n);
                        }
                    }
                }
            }
            return Ok(n);
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.inner.read(buf)
    }
}

/// Retries interrupted reads and remembers the last real error for the caller's message.
struct Stashing {
    inner: Box<dyn Read + Send>,
    last_error: Arc<Mutex<Option<io::Error>>>,
    /// The first read is filled (up to 4 KiB): the format is detected from it alone.
    probed: bool,
}

impl Read for Stashing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.probed {
            self.probed = true;
            let want = buf.len().min(4096);
            let mut got = 0;
            while got < want {
                match self.read_once(&mut buf[got..want])? {
                    0 => break,
                    n => got += n,
                }
            }
            return Ok(got);
        }
        self.read_once(buf)
    }
}

impl Stashing {
    fn read_once(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let copy = io::Error::new(e.kind(), e.to_string());
                    *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(copy);
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn detects_gzip_and_passes_plain_bytes_through() {
        let plain = b"\xd4\xc3\xb2\xa1rest of file".to_vec();
        let mut input = from_reader(
            "t",
            InputKind::File,
            None,
            Box::new(io::Cursor::new(plain.clone())),
        );
        assert!(!input.gzip);
        let mut out = Vec::new();
        input.reader.read_to_end(&mut out).unwrap();
        assert_eq!(out, plain);

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let compressed = gz.finish().unwrap();
        let mut input = from_reader(
            "t.gz",
            InputKind::File,
            None,
            Box::new(io::Cursor::new(compressed)),
        );
        assert!(input.gzip);
        let mut out = Vec::new();
        input.reader.read_to_end(&mut out).unwrap();
        assert_eq!(out, plain);
    }

    #[test]
    fn one_byte_and_empty_inputs_are_not_gzip() {
        for data in [vec![], vec![0x1f]] {
            let mut input = from_reader(
                "t",
                InputKind::File,
                None,
                Box::new(io::Cursor::new(data.clone())),
            );
            assert!(!input.gzip);
            let mut out = Vec::new();
            input.reader.read_to_end(&mut out).unwrap();
            assert_eq!(out, data);
        }
    }
}
