//! The client side of the mtu check: drives the server over the control connection, sends
//! client→server probes from its own DF socket, receives server→client probes, and hands the
//! tallies to [`crate::analysis`] and [`crate::verdict`].

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use pathdoc_core::{Finding, Progress};
use pathdoc_proto::{Channel, CheckKind, FramedConn, ProtoError, SessionId, UdpHeader};
use pathdoc_sys::pmtu;
use tokio::io::AsyncReadExt;

use crate::analysis::{self, BulkRun, Direction, HopReply, MssObservation, TtlRow};
use crate::search::{Search, SizeCap};
use crate::server::{icmp_list, local_mtu, probe_datagram, send_probe};
use crate::verdict::{self, DirectionData, MtuData, ProbeRow, Step};
use crate::wire::*;

/// Settings of one run; the CLI's `--mtu-…` flags fill these.
#[derive(Debug, Clone)]
pub struct MtuOptions {
    /// Smallest and largest IP datagram size to probe (the sender's interface MTU caps the
    /// largest).
    pub min_size: u16,
    pub max_size: u16,
    /// Attempts per size (ICMP rate limits and loss).
    pub attempts: u8,
    /// How long to wait for probes and ICMP after each round.
    pub wait: Duration,
    /// Most search rounds per direction.
    pub rounds: usize,
    /// Highest TTL of the hop-location scan (0 = skip locating).
    pub max_ttl: u8,
    /// Length of each bulk download (zero = skip).
    pub bulk: Duration,
    /// Skip the MSS handshake comparison.
    pub skip_mss: bool,
    pub connect_timeout: Duration,
}

impl MtuOptions {
    /// The limits the server enforces, checked before any network work.
    pub fn validate(&self) -> Result<(), MtuError> {
        if self.min_size < MIN_PROBE_SIZE
            || self.max_size > MAX_PROBE_SIZE
            || self.min_size > self.max_size
        {
            return Err(MtuError::Options(format!(
                "probe sizes must satisfy {MIN_PROBE_SIZE} ≤ min ≤ max ≤ {MAX_PROBE_SIZE}"
            )));
        }
        if self.attempts == 0
            || self.attempts > MAX_ATTEMPTS
            || self.wait.as_millis() > u128::from(MAX_WAIT_MS)
        {
            return Err(MtuError::Options(format!(
                "attempts must be 1..={MAX_ATTEMPTS} and the wait at most {MAX_WAIT_MS} ms"
            )));
        }
        Ok(())
    }
}

/// Every IPv6 link carries 1280-byte packets (RFC 8200 §5).
pub const IPV6_MIN_MTU: u16 = 1280;

impl Default for MtuOptions {
    fn default() -> Self {
        MtuOptions {
            min_size: 576,
            // Up to the sender's interface MTU (its stack names it when it refuses a size),
            // jumbo frames included; beyond 9000 B the result says "at least".
            max_size: MAX_PROBE_SIZE,
            attempts: 3,
            wait: Duration::from_millis(300),
            rounds: 6,
            max_ttl: 12,
            bulk: Duration::from_millis(1000),
            skip_mss: false,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Errors that stop the check.
#[derive(Debug, thiserror::Error)]
pub enum MtuError {
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("server: {0}")]
    Server(String),
    #[error("unexpected reply from the server: {0}")]
    Unexpected(String),
    #[error("invalid option: {0}")]
    Options(String),
}

/// Findings plus the probe table for `report.data["mtu"]`.
#[derive(Debug, Clone)]
pub struct MtuResult {
    pub findings: Vec<Finding>,
    pub data: MtuData,
    /// The cancellation token fired: what is here is what was measured until then; the steps
    /// that did not run are findings saying so, and `data.interrupted` is true.
    pub interrupted: bool,
}

const REPLY_DEADLINE: Duration = Duration::from_secs(5);

async fn ask(conn: &mut FramedConn, req: &Request) -> Result<Reply, MtuError> {
    conn.send(req).await?;
    match conn
        .recv_timeout::<Reply>(REPLY_DEADLINE, "the server's mtu reply")
        .await?
    {
        Reply::Error { message } => Err(MtuError::Server(message)),
        r => Ok(r),
    }
}

fn unspecified_like(addr: &SocketAddr) -> SocketAddr {
    pathdoc_sys::source::udp_bind_addr(addr)
}

/// Ids of server→client probes that arrived on the client's receive socket.
type Arrivals = Arc<Mutex<HashSet<u32>>>;

fn spawn_receiver(
    sock: tokio::net::UdpSocket,
    session: SessionId,
    arrivals: Arrivals,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = sock.recv_from(&mut buf).await {
            if let Ok((h, payload)) = UdpHeader::decode(&buf[..n]) {
                if h.session == session && h.kind == KIND_DOWN_PROBE {
                    if let Some(f) = ProbeFields::decode(payload) {
                        let mut a = arrivals.lock().unwrap_or_else(|p| p.into_inner());
                        if a.len() < 65536 {
                            a.insert(f.id);
                        }
                    }
                }
            }
        }
    })
}

/// One direction's searched sizes and ICMP, classified (the location is filled in later).
fn direction_data(direction: Direction, search: &Search, icmp: Vec<IcmpSeen>) -> DirectionData {
    DirectionData {
        direction,
        max_probed: search.max(),
        local_limit: search.local_limit(),
        probes: rows_of(search.tallies()),
        outcome: analysis::classify(search, &icmp),
        icmp,
        ttl_scan: Vec::new(),
        location: None,
        cached_pmtu: None,
    }
}

/// Too-big messages name the next-hop MTU: probe exactly there next.
fn hint_from_icmp(search: &mut Search, seen: &[IcmpSeen]) {
    for m in seen.iter().filter_map(|e| e.mtu) {
        search.hint(m);
    }
}

fn rows_of(tally: &std::collections::BTreeMap<u16, crate::search::Tally>) -> Vec<ProbeRow> {
    tally
        .iter()
        .rev()
        .map(|(s, t)| ProbeRow {
            size: *s,
            sent: t.sent,
            received: t.received,
        })
        .collect()
}

/// Run the whole mtu check against `server`.
/// `cancel` is the user's Ctrl-C/SIGTERM: once it fires the check stops probing, releases its
/// server session, and returns what it measured so far (marked interrupted) rather than an error.
pub async fn run_check(
    server: SocketAddr,
    token: Option<String>,
    opts: &MtuOptions,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<MtuResult, MtuError> {
    opts.validate()?;
    // Phase 1: the control connection (small MSS) and the server's sysctl.
    let connected = tokio::select! {
        r = MtuRun::connect(server, token, opts, progress) => match r {
            // The server had no room for the session: a server-busy WARN, not a failure.
            Err(MtuError::Proto(ProtoError::Refused(r))) if r.is_load() => {
                let data = MtuData {
                    server: server.to_string(),
                    ipv6: server.is_ipv6(),
                    refused: Some(busy_of(r)),
                    ..Default::default()
                };
                return Ok(MtuResult {
                    findings: verdict::findings(&data),
                    data,
                    interrupted: false,
                });
            }
            r => Some(r?),
        },
        _ = cancel.cancelled() => None,
    };
    let Some(mut run) = connected else {
        let mut data = MtuData {
            server: server.to_string(),
            interrupted: true,
            ..Default::default()
        };
        for step in [Step::DownSearch, Step::UpSearch] {
            data.not_run(step, "interrupted before the check had connected");
        }
        return Ok(MtuResult {
            findings: verdict::findings(&data),
            data,
            interrupted: true,
        });
    };
    // Each phase below records itself as not run, with why, when it fails or is interrupted;
    // the phases after an interruption are not started.
    macro_rules! phase {
        ($step:expr, $call:expr) => {{
            let step = $step;
            if cancel.is_cancelled() {
                run.data.not_run(step, INTERRUPTED);
            } else {
                let outcome = tokio::select! {
                    r = $call => Some(r),
                    _ = cancel.cancelled() => None,
                };
                match outcome {
                    Some(Ok(())) => {}
                    Some(Err(MtuError::Proto(ProtoError::Refused(r)))) if r.is_load() => {
                        run.data.refused_busy(step, busy_of(r))
                    }
                    Some(Err(e)) => run.data.not_run(step, e.to_string()),
                    None => run.data.not_run(step, INTERRUPTED),
                }
            }
        }};
    }
    // Phase 2: TCP as it is before any probe: the MSS each way and a download with the MSS the
    // client normally advertises. Done first because an ICMP too-big the probes trigger teaches
    // the client's kernel a smaller path MTU, which lowers its MSS and would hide a clamp.
    if !opts.skip_mss {
        phase!(Step::Mss, run.compare_mss());
    }
    if !opts.bulk.is_zero() {
        phase!(Step::Download, run.time_download(None));
    }
    // Phase 3: the size search in each direction.
    phase!(Step::DownSearch, run.search_down());
    phase!(Step::UpSearch, run.search_up());
    // Phase 4: where the MTU drops, in each direction that has a drop.
    let has_drop = |d: &Option<DirectionData>| d.as_ref().is_some_and(|d| d.outcome.has_drop());
    if opts.max_ttl > 0 && has_drop(&run.data.up) {
        phase!(Step::LocateUp, run.locate_up());
    }
    if opts.max_ttl > 0 && has_drop(&run.data.down) {
        phase!(Step::LocateDown, run.locate_down());
    }
    // Phase 5: the same download with the client's MSS set to fit a smaller server→client MTU.
    if let Some(mss) = run.reduced_mss() {
        phase!(Step::ReducedDownload, run.time_download(Some(mss)));
    }
    // Phase 6: release the session and judge.
    let interrupted = cancel.is_cancelled();
    let mut data = run.finish().await;
    data.interrupted = interrupted;
    let findings = verdict::findings(&data);
    Ok(MtuResult {
        findings,
        data,
        interrupted,
    })
}

/// Why a step did not run when the user interrupted the check.
const INTERRUPTED: &str = "the check was interrupted";

/// One run's connection to the server and everything measured so far.
struct MtuRun<'a> {
    server: SocketAddr,
    token: Option<String>,
    opts: &'a MtuOptions,
    progress: &'a dyn Progress,
    conn: FramedConn,
    session: SessionId,
    welcome: pathdoc_proto::Welcome,
    data: MtuData,
    /// Server→client rounds so far (the server numbers its probes by round).
    down_round: u32,
    /// The client's probe socket and its round/id counters (client→server).
    up: Option<UpSender>,
    receiver: Option<tokio::task::JoinHandle<()>>,
}

/// The client's DF probe socket towards the server.
struct UpSender {
    sock: UdpSocket,
    overhead: usize,
    round: u32,
    next_id: u32,
}

/// Which way a size search probes, with what that side needs.
enum Prober<'p> {
    /// The server sends; our receiver task counts `arrivals`.
    ServerToClient { arrivals: &'p Arrivals },
    /// We send from `up`'s socket; the server counts what arrived.
    ClientToServer { up: &'p mut UpSender },
}

impl Prober<'_> {
    fn direction(&self) -> Direction {
        match self {
            Prober::ServerToClient { .. } => Direction::ServerToClient,
            Prober::ClientToServer { .. } => Direction::ClientToServer,
        }
    }
}

impl<'a> MtuRun<'a> {
    /// The smallest probe: the option, but never below IPv6's 1280 B minimum link MTU (RFC 8200
    /// §5) on an IPv6 path, where a smaller size says nothing about the path.
    fn min_size(&self) -> u16 {
        if self.data.ipv6 {
            self.opts.min_size.max(IPV6_MIN_MTU)
        } else {
            self.opts.min_size
        }
    }

    async fn connect(
        server: SocketAddr,
        token: Option<String>,
        opts: &'a MtuOptions,
        progress: &'a dyn Progress,
    ) -> Result<MtuRun<'a>, MtuError> {
        progress.status("mtu: connecting");
        // The control connection must cross the very black hole it diagnoses: a small MSS in our
        // SYN keeps the server's replies in small segments (RFC 879's 536 fits any IPv4 or IPv6
        // path).
        let stream = connect_with_mss(server, Some(CONTROL_MSS), opts.connect_timeout).await?;
        let (mut conn, welcome) = pathdoc_proto::handshake(
            stream,
            token.clone(),
            Channel::Control {
                check: CheckKind::Mtu,
                resume: None,
            },
            opts.connect_timeout,
        )
        .await?;
        let mut data = MtuData {
            server: server.to_string(),
            ipv6: server.is_ipv6(),
            ..Default::default()
        };
        if let Reply::Started { tcp_mtu_probing } = ask(&mut conn, &Request::Start).await? {
            data.server_tcp_mtu_probing = tcp_mtu_probing;
        }
        Ok(MtuRun {
            server,
            token,
            opts,
            progress,
            conn,
            session: welcome.session,
            welcome,
            data,
            down_round: 0,
            up: None,
            receiver: None,
        })
    }

    fn wait_ms(&self) -> u32 {
        self.opts.wait.as_millis() as u32
    }

    /// Open the server→client path (our UDP datagram opens any NAT mapping and tells the server
    /// where to send), then search sizes with server-sent probes.
    async fn search_down(&mut self) -> Result<(), MtuError> {
        self.progress
            .status("mtu: opening the server→client probe path");
        let rx = UdpSocket::bind(unspecified_like(&self.server))?;
        rx.set_nonblocking(true)?;
        let rx = tokio::net::UdpSocket::from_std(rx)?;
        let mut open = Vec::new();
        UdpHeader {
            session: self.session,
            kind: KIND_OPEN,
        }
        .encode(&mut open);
        open.extend_from_slice(&[0u8; 8]);
        let mut down_target = None;
        let open_deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < open_deadline {
            let _ = rx.send_to(&open, self.server).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Reply::DownTarget {
                client_udp: Some(addr),
                route_mtu,
            } = ask(&mut self.conn, &Request::DownTarget).await?
            {
                down_target = Some((addr, route_mtu));
                break;
            }
        }
        let arrivals: Arrivals = Arc::default();
        self.receiver = Some(spawn_receiver(rx, self.session, arrivals.clone()));
        let Some((addr, route_mtu)) = down_target else {
            self.data.not_run(
                Step::DownSearch,
                "the server never saw the client's UDP datagram within 3 s (UDP to the server's port blocked?)",
            );
            return Ok(());
        };
        self.data.client_observed = Some(pathdoc_core::addr::unmapped(addr).to_string());
        // Not capped at the server's route MTU: that may be a PMTU the kernel cached from an
        // earlier too-big, and the point is to measure the path afresh. Probe sockets ignore the
        // cache; sizes above the interface MTU come back as EMSGSIZE and cap the search.
        let prober = Prober::ServerToClient {
            arrivals: &arrivals,
        };
        let d = self.search_sizes(prober, route_mtu).await?;
        self.data.down = Some(d);
        Ok(())
    }

    /// Search sizes client→server from our own DF socket; the server reports which ids arrived.
    async fn search_up(&mut self) -> Result<(), MtuError> {
        let tx = UdpSocket::bind(unspecified_like(&self.server))?;
        tx.connect(self.server)?;
        pmtu::make_probe_socket(&tx)?;
        let overhead = pmtu::udp_overhead(&self.server);
        let route_mtu = pmtu::route_mtu(&tx).ok();
        let mut up = UpSender {
            sock: tx,
            overhead,
            round: 0,
            next_id: 0,
        };
        let d = self
            .search_sizes(Prober::ClientToServer { up: &mut up }, route_mtu)
            .await?;
        self.data.up = Some(d);
        self.up = Some(up);
        Ok(())
    }

    /// One direction's size search: rounds of up to 8 sizes until it settles or the rounds run
    /// out, each round's ICMP too-big hints narrowing it. `route_mtu` is the kernel's cached
    /// path MTU at the sender, reported beside what the search found.
    async fn search_sizes(
        &mut self,
        mut prober: Prober<'_>,
        route_mtu: Option<u32>,
    ) -> Result<DirectionData, MtuError> {
        let direction = prober.direction();
        let mut search = Search::new(self.min_size(), self.opts.max_size);
        let mut icmp = Vec::new();
        for _ in 0..self.opts.rounds {
            let sizes = search.next_sizes(8);
            if sizes.is_empty() {
                break;
            }
            let seen = match &mut prober {
                Prober::ServerToClient { arrivals } => {
                    self.down_round += 1;
                    self.announce_round(direction, self.down_round, sizes.len());
                    self.probe_down_round(&sizes, &mut search, arrivals).await?
                }
                Prober::ClientToServer { up } => {
                    up.round += 1;
                    self.announce_round(direction, up.round, sizes.len());
                    self.probe_up_round(up, &sizes, &mut search).await?
                }
            };
            hint_from_icmp(&mut search, &seen);
            icmp.extend(seen);
        }
        let mut d = direction_data(direction, &search, icmp);
        d.cached_pmtu = cached_pmtu(route_mtu, &search);
        note_cached_pmtu(&mut self.data, &d);
        Ok(d)
    }

    fn announce_round(&self, direction: Direction, round: u32, sizes: usize) {
        let way = match direction {
            Direction::ServerToClient => "server→client",
            Direction::ClientToServer => "client→server",
        };
        self.progress
            .status(&format!("mtu: {way} round {round}: {sizes} sizes"));
    }

    /// Round `self.down_round` server→client: the server sends each size `attempts` times and
    /// says what it sent and which too-bigs it saw; we count what arrived. Its ICMP too-bigs.
    async fn probe_down_round(
        &mut self,
        sizes: &[u16],
        search: &mut Search,
        arrivals: &Arrivals,
    ) -> Result<Vec<IcmpSeen>, MtuError> {
        let probes = sizes
            .iter()
            .map(|&size| ProbeSpec { size, ttl: None })
            .collect();
        let wait_ms = self.wait_ms();
        let reply = ask(
            &mut self.conn,
            &Request::ProbeDown {
                round: self.down_round,
                probes,
                attempts: self.opts.attempts,
                wait_ms,
            },
        )
        .await?;
        let Reply::DownSent {
            probes: sent,
            icmp: seen,
            local_mtu,
            ..
        } = reply
        else {
            return Err(MtuError::Unexpected(format!("{reply:?}")));
        };
        if let Some(m) = local_mtu {
            search.record_local_mtu(m);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        tally_down(search, &sent, arrivals);
        Ok(seen)
    }

    /// Round `up.round` client→server: send each size `attempts` times from our DF socket (a
    /// size the kernel refuses as too big caps the search), then ask the server which arrived.
    /// The ICMP too-bigs our socket got.
    async fn probe_up_round(
        &mut self,
        up: &mut UpSender,
        sizes: &[u16],
        search: &mut Search,
    ) -> Result<Vec<IcmpSeen>, MtuError> {
        let _ = pmtu::drain_error_queue(&up.sock);
        let mut sent: Vec<(u32, u16, bool)> = Vec::new();
        for &size in sizes {
            for _ in 0..self.opts.attempts {
                up.next_id += 1;
                let d = probe_datagram(
                    self.session,
                    KIND_UP_PROBE,
                    ProbeFields {
                        round: up.round,
                        id: up.next_id,
                        size,
                        ttl: 64,
                    },
                    up.overhead,
                );
                let local = match send_probe(&up.sock, &d) {
                    Ok(()) => false,
                    Err(too_big) => {
                        if too_big {
                            search.record_local_limit(size);
                        }
                        true
                    }
                };
                sent.push((up.next_id, size, local));
            }
        }
        tokio::time::sleep(self.opts.wait).await;
        let queue = pmtu::drain_error_queue(&up.sock)?;
        if let Some(m) = local_mtu(&queue) {
            search.record_local_mtu(m);
        }
        let seen = icmp_list(&queue);
        let Reply::UpReceived { ids, .. } =
            ask(&mut self.conn, &Request::UpReceived { round: up.round }).await?
        else {
            return Err(MtuError::Unexpected("expected up-received".into()));
        };
        let ids: HashSet<u32> = ids.into_iter().collect();
        let mut per: HashMap<u16, (u32, u32)> = HashMap::new();
        for (id, size, local) in sent {
            if local {
                continue;
            }
            let e = per.entry(size).or_default();
            e.0 += 1;
            e.1 += u32::from(ids.contains(&id));
        }
        for (size, (s, r)) in per {
            search.record(size, s, r);
        }
        Ok(seen)
    }

    /// TTL-limited probes one byte above the client→server MTU (and small ones for comparison).
    async fn locate_up(&mut self) -> Result<(), MtuError> {
        let floor = self.min_size();
        let (Some(d), Some(up)) = (
            self.data.up.as_mut().filter(|d| d.outcome.has_drop()),
            self.up.as_mut(),
        ) else {
            return Ok(());
        };
        self.progress
            .status("mtu: locating the client→server MTU drop");
        let max_ttl = self.opts.max_ttl;
        let mtu = d.outcome.mtu().unwrap_or(floor);
        let (big, small) = (mtu.saturating_add(1), mtu.min(floor.max(576)));
        let mut sent: Vec<(u32, u8, bool)> = Vec::new();
        let _ = pmtu::drain_error_queue(&up.sock);
        up.round += 1;
        for ttl in 1..=max_ttl {
            pmtu::set_ttl(&up.sock, ttl)?;
            for (size, is_big) in [(big, true), (small, false)] {
                for _ in 0..2 {
                    up.next_id += 1;
                    let dg = probe_datagram(
                        self.session,
                        KIND_UP_PROBE,
                        ProbeFields {
                            round: up.round,
                            id: up.next_id,
                            size,
                            ttl,
                        },
                        up.overhead,
                    );
                    if send_probe(&up.sock, &dg).is_ok() {
                        sent.push((up.next_id, ttl, is_big));
                    }
                }
            }
        }
        pmtu::set_ttl(&up.sock, 64)?;
        tokio::time::sleep(self.opts.wait.max(Duration::from_millis(300))).await;
        let seen = icmp_list(&pmtu::drain_error_queue(&up.sock)?);
        let rows = ttl_rows(max_ttl, &sent, &seen);
        d.location = analysis::locate(&rows, ptb_source(&d.outcome));
        d.ttl_scan = rows;
        Ok(())
    }

    /// The same from the server's side: it sends the TTL-limited probes and reads its error queue.
    async fn locate_down(&mut self) -> Result<(), MtuError> {
        let floor = self.min_size();
        let Some(d) = self.data.down.as_mut().filter(|d| d.outcome.has_drop()) else {
            return Ok(());
        };
        self.progress
            .status("mtu: locating the server→client MTU drop");
        let max_ttl = self.opts.max_ttl;
        let mtu = d.outcome.mtu().unwrap_or(floor);
        let (big, small) = (mtu.saturating_add(1), mtu.min(floor.max(576)));
        let probes: Vec<ProbeSpec> = (1..=max_ttl)
            .flat_map(|ttl| {
                [
                    ProbeSpec {
                        size: big,
                        ttl: Some(ttl),
                    },
                    ProbeSpec {
                        size: small,
                        ttl: Some(ttl),
                    },
                ]
            })
            .collect();
        self.down_round += 1;
        let wait = (self.opts.wait.as_millis() as u32).max(300);
        if let Reply::DownSent {
            probes: sent,
            icmp: seen,
            ..
        } = ask(
            &mut self.conn,
            &Request::ProbeDown {
                round: self.down_round,
                probes,
                attempts: 2,
                wait_ms: wait,
            },
        )
        .await?
        {
            let sent: Vec<(u32, u8, bool)> = sent
                .iter()
                .filter(|p| !p.local_error)
                .map(|p| (p.id, p.ttl.unwrap_or(64), p.size == big))
                .collect();
            let rows = ttl_rows(max_ttl, &sent, &seen);
            d.location = analysis::locate(&rows, ptb_source(&d.outcome));
            d.ttl_scan = rows;
        }
        Ok(())
    }

    /// MSS both ways: the server saves our SYN; we read TCP_INFO for its SYN-ACK.
    async fn compare_mss(&mut self) -> Result<(), MtuError> {
        self.progress
            .status("mtu: comparing the handshake MSS both ways");
        let obs = mss_check(&mut self.conn, self.server, self.data.ipv6).await?;
        self.data.mss_comparison = analysis::compare_mss(&obs);
        self.data.mss = Some(obs);
        Ok(())
    }

    /// The symptom users feel: a timed download with the MSS the client normally advertises
    /// (`mss` None) or with `TCP_MAXSEG` set before connecting.
    async fn time_download(&mut self, mss: Option<u32>) -> Result<(), MtuError> {
        self.progress.status(&match mss {
            None => "mtu: timing a bulk download".to_string(),
            Some(m) => format!("mtu: timing the same download with MSS {m}"),
        });
        let (run, nics) = bulk_download(
            &mut self.conn,
            self.server,
            self.token.clone(),
            self.session,
            mss,
            self.opts,
        )
        .await?;
        self.data.server_nic = self.data.server_nic.take().or(nics.server);
        self.data.client_nic = self.data.client_nic.take().or(nics.client);
        match mss {
            None => self.data.bulk_full = Some(run),
            Some(_) => self.data.bulk_reduced = Some(run),
        }
        Ok(())
    }

    /// The MSS that fits a smaller server→client path MTU, when there is one (and a download
    /// with the normal MSS ran to compare with).
    fn reduced_mss(&self) -> Option<u32> {
        self.data.bulk_full.as_ref()?;
        let header = if self.data.ipv6 { 60 } else { 40 };
        self.data
            .down
            .as_ref()
            .filter(|d| d.outcome.has_drop())
            .and_then(|d| d.outcome.mtu())
            .map(|m| u32::from(m).saturating_sub(header))
    }

    /// Tell the server we are done (it frees the session) and hand over the measurements.
    async fn finish(mut self) -> MtuData {
        let _ = self.conn.send(&Request::Done).await;
        let _ = pathdoc_proto::end_session(self.server, self.token.clone(), &self.welcome).await;
        if let Some(r) = self.receiver.take() {
            r.abort();
        }
        self.data
    }
}

fn ptb_source(o: &analysis::Outcome) -> Option<IpAddr> {
    match o {
        analysis::Outcome::Signalled { ptb_from, .. }
        | analysis::Outcome::BadSuggestion { ptb_from, .. } => *ptb_from,
        _ => None,
    }
}

fn tally_down(search: &mut Search, sent: &[SentProbe], arrivals: &Arrivals) {
    let got = arrivals.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut per: HashMap<u16, (u32, u32)> = HashMap::new();
    for p in sent {
        if p.local_error {
            search.record_local_limit(p.size);
            continue;
        }
        let e = per.entry(p.size).or_default();
        e.0 += 1;
        e.1 += u32::from(got.contains(&p.id));
    }
    for (size, (s, r)) in per {
        search.record(size, s, r);
    }
}

/// Group ICMP answers of a TTL scan by TTL and probe size. `sent` is (id, ttl, is_big).
fn ttl_rows(max_ttl: u8, sent: &[(u32, u8, bool)], seen: &[IcmpSeen]) -> Vec<TtlRow> {
    let by_id: HashMap<u32, (u8, bool)> = sent
        .iter()
        .map(|&(id, ttl, big)| (id, (ttl, big)))
        .collect();
    let mut rows: Vec<TtlRow> = (1..=max_ttl)
        .map(|ttl| TtlRow {
            ttl,
            big: None,
            small: None,
        })
        .collect();
    for e in seen {
        let Some(&(ttl, big)) = e.id.and_then(|id| by_id.get(&id)) else {
            continue;
        };
        let Some(row) = rows.get_mut(usize::from(ttl) - 1) else {
            continue;
        };
        let slot = if big { &mut row.big } else { &mut row.small };
        let reply = HopReply {
            kind: e.kind,
            from: e.from,
            mtu: e.mtu,
        };
        // Too-big is the more specific answer; keep it over time-exceeded.
        if slot.is_none() || e.kind == IcmpKind::TooBig {
            *slot = Some(reply);
        }
    }
    // Stop the table after the destination: rows past two silent TTLs add nothing.
    let last = rows
        .iter()
        .rposition(|r| r.big.is_some() || r.small.is_some())
        .map_or(0, |i| i + 2);
    rows.truncate(last.min(rows.len()));
    rows
}

async fn mss_check(
    conn: &mut FramedConn,
    server: SocketAddr,
    ipv6: bool,
) -> Result<MssObservation, MtuError> {
    let Reply::MssListening { port } = ask(conn, &Request::MssListen).await? else {
        return Err(MtuError::Unexpected("expected mss-listening".into()));
    };
    let addr = SocketAddr::new(server.ip(), port);
    let stream = tokio::time::timeout(Duration::from_secs(3), pathdoc_proto::tcp_connect(addr))
        .await
        .map_err(|_| MtuError::Server(format!("connect to the MSS listener {addr} timed out")))??;
    let info = pathdoc_sys::tcp_info::tcp_info(&stream)?;
    let Reply::MssSeen {
        syn_mss,
        server_advmss,
    } = ask(conn, &Request::MssResult).await?
    else {
        return Err(MtuError::Unexpected("expected mss-seen".into()));
    };
    drop(stream);
    // TCP_INFO advmss drops by the 12 timestamp option bytes once timestamps are negotiated;
    // the SYN carried the full value.
    let ts = if info.timestamps() { 12 } else { 0 };
    Ok(MssObservation {
        client_sent: Some(info.advmss() + ts),
        server_saw: syn_mss,
        server_sent: server_advmss.map(|m| m + ts),
        client_snd_wnd: info
            .has(pathdoc_sys::tcp_info::field::SND_WND)
            .then_some(info.snd_wnd),
        client_snd_mss: Some(info.snd_mss()),
        timestamps: info.timestamps(),
        client_pmtu: Some(info.pmtu()),
        header_bytes: if ipv6 { 60 } else { 40 },
    })
}

/// MSS of the control connection (see [`run_check`]).
const CONTROL_MSS: u32 = 536;

/// TCP connect with `TCP_MAXSEG` set before the SYN, so the SYN advertises that MSS.
async fn connect_with_mss(
    server: SocketAddr,
    mss: Option<u32>,
    timeout: Duration,
) -> Result<tokio::net::TcpStream, MtuError> {
    let stream = tokio::task::spawn_blocking(move || -> std::io::Result<std::net::TcpStream> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(server),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        if let Some(m) = mss {
            s.set_mss(m)?;
        }
        pathdoc_sys::source::bind_tcp(&s, &server)?;
        s.connect_timeout(&server.into(), timeout)?;
        s.set_nonblocking(true)?;
        Ok(s.into())
    })
    .await
    .map_err(|e| MtuError::Server(format!("connect task failed: {e}")))??;
    Ok(tokio::net::TcpStream::from_std(stream)?)
}

/// The interfaces a bulk download crossed at each end (see `pathdoc_sys::nic`).
struct BulkNics {
    server: Option<pathdoc_sys::nic::NicFacts>,
    client: Option<pathdoc_sys::nic::NicFacts>,
}

async fn bulk_download(
    conn: &mut FramedConn,
    server: SocketAddr,
    token: Option<String>,
    session: SessionId,
    mss: Option<u32>,
    opts: &MtuOptions,
) -> Result<(BulkRun, BulkNics), MtuError> {
    let connect_timeout = opts.connect_timeout;
    let stream = connect_with_mss(server, mss, connect_timeout).await?;
    let (mut data_conn, _) = pathdoc_proto::handshake(
        stream,
        token,
        Channel::Data {
            session,
            tag: TAG_BULK,
        },
        connect_timeout,
    )
    .await?;
    let duration_ms = opts.bulk.as_millis().min(u128::from(MAX_BULK_MS)) as u32;
    data_conn.send(&BulkRequest { duration_ms }).await?;
    let start = Instant::now();
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(u64::from(duration_ms))
        + Duration::from_millis(500);
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    let stream = data_conn.stream_mut();
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => bytes += n as u64,
        }
    }
    let seconds = start
        .elapsed()
        .as_secs_f64()
        .min(f64::from(duration_ms) / 1000.0)
        .max(0.001);
    let rcv_mss = pathdoc_sys::tcp_info::tcp_info(data_conn.stream())
        .ok()
        .map(|i| i.rcv_mss());
    let client_nic = data_conn
        .stream()
        .local_addr()
        .ok()
        .and_then(|a| pathdoc_sys::nic::facts_for_local_addr(a.ip()));
    drop(data_conn);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (server_stats, server_nic) = match ask(conn, &Request::BulkStats).await {
        Ok(Reply::BulkStats { stats, nic }) => (stats, nic),
        _ => (None, None),
    };
    let run = BulkRun {
        client_mss: mss,
        seconds,
        bytes,
        rcv_mss,
        server: server_stats,
    };
    Ok((
        run,
        BulkNics {
            server: server_nic,
            client: client_nic,
        },
    ))
}

/// A path MTU the sender's kernel had cached below its interface MTU (from an earlier ICMP
/// too-big): the probes ignore it and measure afresh, but it lowers what TCP advertises.
fn cached_pmtu(route_mtu: Option<u32>, search: &Search) -> Option<u32> {
    let interface = (search.cap() == SizeCap::SenderInterface).then(|| u32::from(search.max()));
    route_mtu.filter(|&m| m > 0 && interface.is_some_and(|i| m < i))
}

/// Say so in the notes too (the JSON's remarks).
fn note_cached_pmtu(data: &mut MtuData, d: &DirectionData) {
    if let Some(m) = d.cached_pmtu {
        data.notes.push(format!(
            "{}: the sender's kernel had a cached path MTU of {m} B (from an earlier ICMP too-big); probes ignore it and measure afresh",
            d.direction.label()
        ));
    }
}

/// A refusal for want of room, as the report's `server-busy` finding takes it.
fn busy_of(r: pathdoc_proto::Refusal) -> pathdoc_core::busy::ServerBusy {
    let (reason, limit) = r.load.map(|l| (l.reason, l.limit)).unzip();
    pathdoc_core::busy::ServerBusy::new(r.message, reason, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rows_group_by_id_and_prefer_too_big() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let seen = vec![
            IcmpSeen {
                id: Some(1),
                round: Some(1),
                kind: IcmpKind::TimeExceeded,
                mtu: None,
                from: Some(a),
                icmp_type: 11,
                icmp_code: 0,
            },
            IcmpSeen {
                id: Some(3),
                round: Some(1),
                kind: IcmpKind::TooBig,
                mtu: Some(1280),
                from: Some(a),
                icmp_type: 3,
                icmp_code: 4,
            },
            IcmpSeen {
                id: None,
                round: None,
                kind: IcmpKind::TimeExceeded,
                mtu: None,
                from: Some(a),
                icmp_type: 11,
                icmp_code: 0,
            },
        ];
        let sent = vec![(1, 1, true), (2, 1, false), (3, 2, true), (4, 2, false)];
        let rows = ttl_rows(8, &sent, &seen);
        assert_eq!(rows.len(), 3, "two answered TTLs plus one silent");
        assert_eq!(rows[0].big.as_ref().unwrap().kind, IcmpKind::TimeExceeded);
        assert!(rows[0].small.is_none());
        assert_eq!(rows[1].big.as_ref().unwrap().mtu, Some(1280));
    }
}
