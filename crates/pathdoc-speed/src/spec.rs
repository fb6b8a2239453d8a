//! The speed check's control messages and test parameters (JSON frames on the control connection).
//!
//! Flow: client `Start` → server `Accepted` (or `Refused`) → client opens the data connections
//! (Channel::Data, tag = [`stream_tag`]) → server `Started` once all are attached → both sides
//! move bulk data; the server sends `Samples` every interval → client `Stop` → server `Finished`
//! with its last samples. Data connections carry raw bytes only, after the pathdoc handshake.

use serde::{Deserialize, Serialize};

use pathdoc_sys::tcp_info::TcpInfo;

/// Most data streams per direction a client may ask for (bounds server threads and memory).
pub const MAX_STREAMS: u32 = 8;
/// Longest test a client asks for from the command line (`pathdoc speed -t`,
/// `--throughput-time`); a server caps it further with `--max-test`.
pub const MAX_TEST_TIME: std::time::Duration = std::time::Duration::from_secs(3600);
/// Tag bit of data connections on which the server sends (download direction).
pub const DOWNLOAD_TAG: u32 = 0x1000;

/// Which way the bulk data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Client → server.
    Upload,
    /// Server → client (`--reverse`).
    Download,
    /// Both at once (`--bidir`).
    Both,
}

impl Mode {
    pub fn uploads(self) -> bool {
        matches!(self, Mode::Upload | Mode::Both)
    }
    pub fn downloads(self) -> bool {
        matches!(self, Mode::Download | Mode::Both)
    }
}

/// One measured direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Upload,
    Download,
}

impl Direction {
    pub fn label(self) -> &'static str {
        match self {
            Direction::Upload => "upload (client→server)",
            Direction::Download => "download (server→client)",
        }
    }
    pub fn short(self) -> &'static str {
        match self {
            Direction::Upload => "upload",
            Direction::Download => "download",
        }
    }
    /// The report's direction: upload is client→server.
    pub fn core(self) -> pathdoc_core::Direction {
        match self {
            Direction::Upload => pathdoc_core::Direction::ClientToServer,
            Direction::Download => pathdoc_core::Direction::ServerToClient,
        }
    }
}

/// Tag of data stream `index` in `direction`.
pub fn stream_tag(direction: Direction, index: u32) -> u32 {
    match direction {
        Direction::Upload => index,
        Direction::Download => DOWNLOAD_TAG | index,
    }
}

/// Direction and index of a data-stream tag.
pub fn parse_tag(tag: u32) -> (Direction, u32) {
    if tag & DOWNLOAD_TAG != 0 {
        (Direction::Download, tag & !DOWNLOAD_TAG)
    } else {
        (Direction::Upload, tag)
    }
}

/// What the client asks the server to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestSpec {
    pub mode: Mode,
    /// Streams per direction (1..=[`MAX_STREAMS`]).
    pub streams: u32,
    /// Test length; the server caps it at its `max_test_duration`.
    pub duration_ms: u64,
    /// Stop each direction after this many payload bytes instead (still bounded by the duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Congestion control for the server's sending sockets (download).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cc: Option<String>,
    /// SO_SNDBUF/SO_RCVBUF for the server's data sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// Sampling interval for the server's `Samples`.
    pub interval_ms: u64,
}

impl TestSpec {
    /// Payload bytes the sending end of data stream `tag` sends in a test limited by `bytes`:
    /// an equal share, stream 0 also taking the remainder, so the shares add up to `bytes`.
    /// Client and server both stop their senders by it.
    pub fn stream_byte_budget(&self, tag: u32) -> Option<u64> {
        let total = self.bytes?;
        let streams = u64::from(self.streams.max(1));
        let share = total / streams;
        Some(if parse_tag(tag).1 == 0 {
            share + total % streams
        } else {
            share
        })
    }
}

/// The server's TCP memory settings, for remedies that name the server side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTcpSettings {
    /// `net.ipv4.tcp_rmem` (min, default, max).
    pub tcp_rmem: Option<[u64; 3]>,
    /// `net.ipv4.tcp_wmem` (min, default, max).
    pub tcp_wmem: Option<[u64; 3]>,
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    /// `net.ipv4.tcp_congestion_control`.
    pub default_cc: Option<String>,
    pub cpus: u32,
    /// A hash of the kernel's boot id: equal on both ends when client and server share one host
    /// (network namespaces, containers). Absent from servers before this field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ClientMsg {
    Start(TestSpec),
    Stop,
}

/// One data stream's state at a sampling instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSample {
    pub tag: u32,
    /// Payload bytes the application wrote (sender) or read (receiver) so far.
    pub app_bytes: u64,
    pub info: TcpInfo,
}

/// One side's state at a sampling instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideSample {
    /// Seconds since the data started on this side.
    pub t: f64,
    /// Process CPU seconds (user + system) since the data started.
    pub cpu_seconds: f64,
    pub streams: Vec<StreamSample>,
    /// The whole host's cumulative CPU times (`/proc/stat`). Absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu: Option<pathdoc_sys::cpu_usage::HostCpuTimes>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ServerMsg {
    Accepted {
        duration_ms: u64,
        host: HostTcpSettings,
    },
    Refused {
        reason: String,
        /// A refusal for want of room (the stream budget): its bound and limit. Absent in
        /// other refusals and from older servers (older clients ignore it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        load: Option<pathdoc_proto::LoadLimit>,
    },
    Started,
    Samples {
        sample: SideSample,
    },
    Finished {
        sample: SideSample,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for d in [Direction::Upload, Direction::Download] {
            for i in 0..MAX_STREAMS {
                assert_eq!(parse_tag(stream_tag(d, i)), (d, i));
            }
        }
    }

    #[test]
    fn stream_byte_budgets_add_up_to_the_test_bytes() {
        let spec = |bytes, streams| TestSpec {
            mode: Mode::Upload,
            streams,
            duration_ms: 1000,
            bytes,
            server_cc: None,
            window: None,
            interval_ms: 100,
        };
        let four = spec(Some(1003), 4);
        let shares: Vec<_> = (0..4)
            .map(|i| four.stream_byte_budget(stream_tag(Direction::Download, i)))
            .collect();
        assert_eq!(shares, [Some(253), Some(250), Some(250), Some(250)]);
        assert_eq!(spec(None, 4).stream_byte_budget(0), None);
        assert_eq!(spec(Some(7), 0).stream_byte_budget(0), Some(7));
    }

    #[test]
    fn messages_serialize_compactly() {
        let s = SideSample {
            t: 1.0,
            cpu_seconds: 0.5,
            host_cpu: Some(Default::default()),
            streams: (0..MAX_STREAMS * 2)
                .map(|tag| StreamSample {
                    tag,
                    app_bytes: u64::MAX,
                    info: TcpInfo::default(),
                })
                .collect(),
        };
        let json = serde_json::to_vec(&ServerMsg::Finished { sample: s }).unwrap();
        assert!(
            json.len() < pathdoc_proto::MAX_FRAME,
            "{} bytes",
            json.len()
        );
    }

    #[test]
    fn older_peers_without_host_fields_still_parse() {
        // A sample and host settings as servers sent them before host CPU and host id existed.
        let old = r#"{"type":"samples","sample":{"t":1.0,"cpu_seconds":0.1,"streams":[]}}"#;
        let ServerMsg::Samples { sample } = serde_json::from_str(old).unwrap() else {
            panic!("not samples");
        };
        assert_eq!(sample.host_cpu, None);
        let old = r#"{"type":"accepted","duration_ms":5000,"host":{"tcp_rmem":null,"tcp_wmem":null,"rmem_max":null,"wmem_max":null,"default_cc":"bbr","cpus":2}}"#;
        let ServerMsg::Accepted { host, .. } = serde_json::from_str(old).unwrap() else {
            panic!("not accepted");
        };
        assert_eq!(host.host_id, None);
    }
}
