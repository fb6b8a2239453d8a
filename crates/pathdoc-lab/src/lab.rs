//! A running lab: builds the namespaces, links, addresses, routes, nftables rules, qdiscs,
//! sysctls and delay lines of a [`Topology`], and removes all of it on [`Lab::down`] or drop.

use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::error::LabError;
use crate::exec;
use crate::nft;
use crate::plan::{self, HostPlan, IfacePlan, LinkPlan, Plan, ELEMENT_IFACE_A, ELEMENT_IFACE_B};
use crate::preflight;
use crate::state::{self, HostState, LabState, ProcessState, Teardown, SCHEMA};
use crate::topology::{Family, HopKind, Topology};

/// Default namespace prefix; override with `PATHDOC_LAB_PREFIX` or [`LabOptions::prefix`].
pub const DEFAULT_PREFIX: &str = "pd-";

/// Parent of every CPU-capping cgroup the lab makes (`<cpu hierarchy>/pathdoc-lab/<lab>-<host>`).
pub const CGROUP_PARENT: &str = "pathdoc-lab";

/// How to name and run a lab.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Lab name (default: a random 4-character id).
    pub name: Option<String>,
    /// Namespace prefix; tests use a unique one each (e.g. `pdt-loss-`).
    pub prefix: String,
    /// The `pathdoc` binary that runs delay lines (default: the current executable).
    pub helper_exe: Option<PathBuf>,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            name: None,
            prefix: default_prefix(),
            helper_exe: None,
        }
    }
}

impl LabOptions {
    /// Options with a given prefix and defaults otherwise.
    pub fn with_prefix(prefix: &str) -> Self {
        LabOptions {
            prefix: prefix.to_string(),
            ..Default::default()
        }
    }
}

/// `PATHDOC_LAB_PREFIX` or `pd-`.
pub fn default_prefix() -> String {
    std::env::var("PATHDOC_LAB_PREFIX")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_PREFIX.to_string())
}

fn validate_ident(value: &str, what: &str, max: usize) -> Result<(), LabError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(LabError::InvalidName {
            value: value.into(),
            why: format!("{what} must be 1..{max} characters of a-z, 0-9 and '-', starting with a letter or digit"),
        })
    }
}

/// A host's primary address in a lab of `family`: IPv4 unless the lab is IPv6-only.
fn primary_of(h: &HostPlan, family: Family) -> IpAddr {
    match (family.has_v4(), h.primary_addr6()) {
        (false, Some(a6)) => IpAddr::V6(a6),
        _ => IpAddr::V4(h.primary_addr()),
    }
}

/// `wan0 203.0.113.1/24 2001:db8:113::1/64 mtu 1500, route mtu 1420, IPv6 mtu 1480 (to server)`.
fn describe_iface(i: &IfacePlan, family: Family) -> String {
    let mut addrs = Vec::new();
    if family.has_v4() {
        addrs.push(format!("{}/{}", i.addr, i.prefix_len));
    }
    if let Some(a6) = i.addr6 {
        addrs.push(format!("{a6}/64"));
    }
    let route = i
        .route_mtu
        .map(|m| format!(", route mtu {m}"))
        .unwrap_or_default();
    let mtu6 = i
        .mtu6
        .map(|m| format!(", IPv6 mtu {m}"))
        .unwrap_or_default();
    format!(
        "{} {} mtu {}{route}{mtu6} (to {})",
        i.name,
        addrs.join(" "),
        i.mtu,
        i.peer
    )
}

fn random_name() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..4)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// A process started inside a lab host. Killed (and reaped) when dropped.
#[derive(Debug)]
pub struct LabProcess {
    child: Child,
    command: String,
}

impl LabProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// The command line it runs.
    pub fn command_line(&self) -> &str {
        &self.command
    }
    /// Access to the child, e.g. to take its stdout.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }
    /// Wait for exit up to `timeout`; `Ok(None)` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>, LabError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Ok(Some(s)),
                Ok(None) if Instant::now() >= deadline => return Ok(None),
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(LabError::io(format!("waiting for `{}`", self.command), e)),
            }
        }
    }
    /// SIGTERM, then SIGKILL after a grace period; reaps the child.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if !matches!(self.wait_timeout(Duration::from_millis(500)), Ok(Some(_))) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for LabProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A lab that exists in the kernel. Dropping it tears everything down (unless [`Lab::persist`]ed).
#[derive(Debug)]
pub struct Lab {
    state: Mutex<LabState>,
    plan: Plan,
    topology: Topology,
    state_path: PathBuf,
    delay_lines: Vec<Child>,
    /// sshd daemons, like delay lines plain children so `persist` can leave them running.
    daemons: Vec<Child>,
    /// `procs` file of each CPU-capped host's cgroup: processes started there join it.
    cgroup_procs: std::collections::HashMap<String, PathBuf>,
    active: bool,
    spawned: Arc<Mutex<Vec<u32>>>,
}

impl Lab {
    /// Build the lab. On any error, whatever was built is removed before returning.
    pub fn up(topology: &Topology, opts: &LabOptions) -> Result<Lab, LabError> {
        topology.validate()?;
        preflight::check_for_up(topology.needs_tc(), false)?;
        preflight::require_tools(&["ping"])?;
        // Namespace names have no tight limit (interfaces are created inside them with fixed
        // names); 32 leaves room for a `PATHDOC_TEST_NS_TAG` before a test's own prefix.
        validate_ident(&opts.prefix, "prefix", 32)?;
        let name = opts.name.clone().unwrap_or_else(random_name);
        validate_ident(&name, "lab name", 16)?;
        let lab_id = format!("{}{}", opts.prefix, name);
        let plan = plan::plan(topology, &lab_id);

        let dir = state::state_dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
        let state_path = state::state_path(&opts.prefix, &name);
        if plan
            .namespaces()
            .iter()
            .any(|n| pathdoc_sys::netns::exists(n))
        {
            return Err(LabError::NameTaken(name));
        }
        // Claim the name atomically.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&state_path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(LabError::NameTaken(name))
            }
            Err(e) => {
                return Err(LabError::io(
                    format!("creating {}", state_path.display()),
                    e,
                ))
            }
        }
        let state = LabState {
            schema: SCHEMA.to_string(),
            name: name.clone(),
            prefix: opts.prefix.clone(),
            scenario: topology.name.clone(),
            description: topology.description.clone(),
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            hosts: plan
                .hosts
                .iter()
                .map(|h| HostState {
                    name: h.name.clone(),
                    netns: h.netns.clone(),
                    addr: primary_of(h, topology.family),
                    addr6: h.primary_addr6().filter(|_| topology.family.has_v4()),
                    ifaces: h
                        .ifaces
                        .iter()
                        .map(|i| describe_iface(i, topology.family))
                        .collect(),
                })
                .collect(),
            namespaces: Vec::new(),
            processes: Vec::new(),
            faults: topology.describe_faults(),
            topology: topology.clone(),
            cgroups: Vec::new(),
            dirs: Vec::new(),
            ssh_config: None,
        };
        let mut lab = Lab {
            state: Mutex::new(state),
            plan,
            topology: topology.clone(),
            state_path,
            delay_lines: Vec::new(),
            daemons: Vec::new(),
            cgroup_procs: Default::default(),
            active: true,
            spawned: Arc::new(Mutex::new(Vec::new())),
        };
        lab.save()?;
        let helper = match &opts.helper_exe {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map_err(|e| LabError::io("locating the pathdoc binary for delay lines", e))?,
        };
        // On error `lab` is dropped here, which tears down what exists.
        lab.build(&helper)?;
        Ok(lab)
    }

    /// Per-namespace sysctls before anything else: rp_filter off, IPv6 off in a v4 lab and in
    /// element namespaces (they bridge frames and need no addresses); in an IPv6 lab no DAD (the
    /// addresses are planned) and no router advertisements.
    fn base_sysctls(&self, ns: &str) -> Result<(), LabError> {
        let host = self.plan.hosts.iter().any(|h| h.netns == ns);
        let v6 = host && self.plan.family.has_v6();
        let off = if v6 { "0" } else { "1" };
        let mut settings = vec![
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
            ("net.ipv6.conf.all.disable_ipv6", off),
            ("net.ipv6.conf.default.disable_ipv6", off),
        ];
        if v6 {
            for k in [
                "net.ipv6.conf.all.accept_dad",
                "net.ipv6.conf.default.accept_dad",
                "net.ipv6.conf.all.accept_ra",
                "net.ipv6.conf.default.accept_ra",
            ] {
                settings.push((k, "0"));
            }
        }
        for (k, v) in settings {
            pathdoc_sys::netns::write_sysctl(ns, k, v)?;
        }
        Ok(())
    }

    /// Every host namespace resolves the lab's host names (`server`, …) to their addresses in
    /// each family the lab carries (`hosts`).
    fn write_hosts_files(&self) -> Result<(), LabError> {
        let family = self.plan.family;
        let mut entries = Vec::new();
        for h in &self.plan.hosts {
            if family.has_v4() {
                entries.push((h.name.clone(), IpAddr::V4(h.primary_addr())));
            }
            if let Some(a6) = h.primary_addr6().filter(|_| family.has_v6()) {
                entries.push((h.name.clone(), IpAddr::V6(a6)));
            }
        }
        let system = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let text = crate::hosts::hosts_file(&system, &self.id(), &entries);
        for h in &self.plan.hosts {
            crate::hosts::write(&h.netns, &text)?;
        }
        Ok(())
    }

    /// `ip -batch` lines giving a host's interfaces their MTU and addresses, and bringing them up.
    fn address_batch(&self, h: &HostPlan) -> String {
        let family = self.plan.family;
        let mut batch = String::new();
        for i in &h.ifaces {
            batch.push_str(&format!("link set dev {} mtu {}\n", i.name, i.mtu));
            if family.has_v4() {
                batch.push_str(&format!(
                    "addr add {}/{} dev {}\n",
                    i.addr, i.prefix_len, i.name
                ));
            }
            if let Some(a6) = i.addr6 {
                batch.push_str(&format!("addr add {a6}/64 dev {} nodad\n", i.name));
            }
            batch.push_str(&format!("link set dev {} up\n", i.name));
        }
        batch
    }

    fn save(&self) -> Result<(), LabError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state::save(&self.state_path, &state)
    }

    /// Build the planned lab, phase by phase; on error the caller drops `self`, which tears
    /// down what exists.
    fn build(&mut self, helper: &std::path::Path) -> Result<(), LabError> {
        let t0 = Instant::now();
        self.create_namespaces()?;
        self.enable_forwarding()?;
        // Host names for `ip netns exec` (/etc/netns/<ns>/hosts), so `check server` resolves.
        self.write_hosts_files()?;
        self.create_links()?;
        self.configure_interfaces()?;
        self.add_routes()?;
        self.load_rulesets()?;
        self.add_rate_limits()?;
        self.write_sysctls()?;
        self.start_delay_lines(helper)?;
        // The client reaches the server before anything else starts.
        self.check_path()?;
        self.start_cross_traffic()?;
        // CPU caps, then sshd (which must start inside its host's cgroup).
        self.make_cgroups()?;
        for host in self.topology.sshd_hosts() {
            self.start_sshd(&host)?;
        }
        tracing::info!(lab = %self.id(), elapsed_ms = t0.elapsed().as_millis() as u64, "lab up");
        Ok(())
    }

    /// Cross traffic: its hosts wired to their hops, iperf3 running between them.
    fn start_cross_traffic(&mut self) -> Result<(), LabError> {
        for c in self.plan.cross.clone() {
            crate::cross::wire(&self.plan, &c)?;
            self.start_cross(&c)?;
        }
        Ok(())
    }

    /// Namespaces with their base sysctls and loopback up, each recorded in the state file as it
    /// is made so a failure still cleans up.
    fn create_namespaces(&self) -> Result<(), LabError> {
        for ns in self.plan.namespaces() {
            exec::ip(None, &["netns", "add", &ns])?;
            self.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .namespaces
                .push(ns.clone());
            self.save()?;
            self.base_sysctls(&ns)?;
            // Linux's default congestion control, whatever the host machine uses (often BBR), so
            // loss-based scenarios behave the same everywhere; a host's `sysctl` table overrides it.
            if let Err(e) =
                pathdoc_sys::netns::write_sysctl(&ns, "net.ipv4.tcp_congestion_control", "cubic")
            {
                tracing::debug!("keeping the inherited congestion control in {ns}: {e}");
            }
            exec::ip(Some(&ns), &["link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Hops forward (IPv4, and IPv6 in a lab that has it); the client and server do not.
    fn enable_forwarding(&self) -> Result<(), LabError> {
        for h in &self.plan.hosts {
            if h.name != "client" && h.name != "server" {
                pathdoc_sys::netns::write_sysctl(&h.netns, "net.ipv4.ip_forward", "1")?;
                if self.plan.family.has_v6() {
                    pathdoc_sys::netns::write_sysctl(
                        &h.netns,
                        "net.ipv6.conf.all.forwarding",
                        "1",
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Links: a veth pair, or two pairs through a delay-line element.
    fn create_links(&self) -> Result<(), LabError> {
        for link in &self.plan.links {
            let left = &self.plan.hosts[link.index].netns;
            let right = &self.plan.hosts[link.index + 1].netns;
            let mtu = link.up.mtu.max(link.down.mtu).to_string();
            match &link.element_netns {
                None => {
                    exec::ip(
                        Some(left),
                        &[
                            "link", "add", "name", "wan0", "type", "veth", "peer", "name", "lan0",
                            "netns", right,
                        ],
                    )?;
                }
                Some(elem) => {
                    exec::ip(
                        Some(left),
                        &[
                            "link",
                            "add",
                            "name",
                            "wan0",
                            "type",
                            "veth",
                            "peer",
                            "name",
                            ELEMENT_IFACE_A,
                            "netns",
                            elem,
                        ],
                    )?;
                    exec::ip(
                        Some(elem),
                        &[
                            "link",
                            "add",
                            "name",
                            ELEMENT_IFACE_B,
                            "type",
                            "veth",
                            "peer",
                            "name",
                            "lan0",
                            "netns",
                            right,
                        ],
                    )?;
                    for ifc in [ELEMENT_IFACE_A, ELEMENT_IFACE_B] {
                        exec::ip(Some(elem), &["link", "set", "dev", ifc, "mtu", &mtu, "up"])?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Addresses, MTU, offloads, link up.
    fn configure_interfaces(&self) -> Result<(), LabError> {
        for h in &self.plan.hosts {
            let batch = self.address_batch(h);
            exec::run(
                Command::new("ip").args(["-n", &h.netns, "-batch", "-"]),
                Some(&batch),
                exec::QUICK,
            )?;
            for i in &h.ifaces {
                // A host with a NIC fault keeps its offloads: its super-frames are what the
                // element cuts at the NIC's fixed size.
                if self.keeps_offloads(h, &i.name) {
                    continue;
                }
                // Per-packet loss and tbf need real MTU-sized packets, not 64 KiB GSO super-frames.
                exec::in_netns(
                    &h.netns,
                    "ethtool",
                    &["-K", &i.name, "tso", "off", "gso", "off", "gro", "off"],
                    None,
                )?;
            }
        }
        Ok(())
    }

    /// Routes (after every link is up, so gateways resolve).
    fn add_routes(&self) -> Result<(), LabError> {
        for h in &self.plan.hosts {
            // A smaller IPv6 MTU out of an interface (asymmetric link or `mtu6`): IPv6
            // forwarding ignores unlocked route MTUs but honours this. Only now: the kernel
            // resets it to the device MTU whenever the link comes up (carrier included).
            for i in &h.ifaces {
                if let Some(m) = i.mtu6 {
                    let key = format!("net.ipv6.conf.{}.mtu", i.name);
                    pathdoc_sys::netns::write_sysctl(&h.netns, &key, &m.to_string())?;
                }
            }
            let mut batch = String::new();
            for i in &h.ifaces {
                if let Some(m) = i.route_mtu {
                    let net = &self.plan.links[i.link].subnet;
                    batch.push_str(&format!(
                        "route replace {net} dev {} proto kernel scope link src {} mtu {m}\n",
                        i.name, i.addr
                    ));
                }
            }
            for r in &h.routes {
                let mtu = r.mtu.map(|m| format!(" mtu {m}")).unwrap_or_default();
                batch.push_str(&format!(
                    "route replace {} via {} dev {}{mtu}\n",
                    r.dest, r.via, r.dev
                ));
            }
            if !batch.is_empty() {
                exec::run(
                    Command::new("ip").args(["-n", &h.netns, "-batch", "-"]),
                    Some(&batch),
                    exec::QUICK,
                )?;
            }
        }
        Ok(())
    }

    /// nftables rulesets (loss, filters, NAT) of the hosts that have any.
    fn load_rulesets(&self) -> Result<(), LabError> {
        for h in &self.plan.hosts {
            if let Some(rules) = nft::ruleset(&self.topology, &self.plan, h) {
                exec::in_netns(&h.netns, "nft", &["-f", "-"], Some(&rules))?;
            }
        }
        Ok(())
    }

    /// Rate limits (tbf on the sending interface).
    fn add_rate_limits(&self) -> Result<(), LabError> {
        for h in &self.plan.hosts {
            for i in &h.ifaces {
                let link = &self.plan.links[i.link];
                let dir = if i.name == "wan0" {
                    &link.up
                } else {
                    &link.down
                };
                if let Some(rate) = dir.rate {
                    let bps = rate.bits_per_second;
                    // Bucket: ~4 ms of traffic (one 250 Hz tick), at least a few frames; queue:
                    // `queue_ms` at the rate (50 ms unless the topology says otherwise).
                    let burst = (bps / 8 / 250).max(4 * i.mtu as u64);
                    let limit = ((bps as f64 / 8.0 * dir.queue_ms / 1e3) as u64).max(2 * burst);
                    exec::run(
                        Command::new("tc")
                            .args([
                                "-n", &h.netns, "qdisc", "replace", "dev", &i.name, "root", "tbf",
                            ])
                            .args([
                                "rate",
                                &format!("{bps}bit"),
                                "burst",
                                &burst.to_string(),
                                "limit",
                                &limit.to_string(),
                            ]),
                        None,
                        exec::QUICK,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Sysctls: conntrack behaviour of NAT hops, then the user's.
    fn write_sysctls(&self) -> Result<(), LabError> {
        for h in &self.plan.hosts {
            if h.position >= 1 && h.position <= self.topology.hops.len() {
                let hop = &self.topology.hops[h.position - 1];
                if hop.kind == HopKind::Nat {
                    if hop.strict {
                        pathdoc_sys::netns::write_sysctl(
                            &h.netns,
                            "net.netfilter.nf_conntrack_tcp_loose",
                            "0",
                        )?;
                    }
                    for (k, v) in hop.conntrack.sysctls() {
                        pathdoc_sys::netns::write_sysctl(&h.netns, &k, &v.to_string())?;
                    }
                }
            }
            if let Some(spec) = self.topology.host_spec(&h.name) {
                for (k, v) in &spec.sysctl {
                    pathdoc_sys::netns::write_sysctl(&h.netns, k, &v.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Delay lines, one element per link with delay or jitter.
    fn start_delay_lines(&mut self, helper: &std::path::Path) -> Result<(), LabError> {
        for link in self.plan.links.clone() {
            if let Some(elem) = &link.element_netns {
                self.start_delay_line(helper, &link, elem)?;
            }
        }
        Ok(())
    }

    /// Whether `iface` of `host` is the NIC of a host with `nic_segments_at` (TSO/GSO stay on).
    fn keeps_offloads(&self, host: &HostPlan, iface: &str) -> bool {
        let spec = self.topology.host_spec(&host.name).unwrap_or_default();
        let own_nic = match host.name.as_str() {
            "client" => "wan0",
            "server" => "lan0",
            _ => return false,
        };
        spec.nic_segments_at.is_some() && iface == own_nic
    }

    fn start_delay_line(
        &mut self,
        helper: &std::path::Path,
        link: &LinkPlan,
        elem: &str,
    ) -> Result<(), LabError> {
        let (index, up, down) = (link.index, &link.up, &link.down);
        let log = state::log_path(&self.id(), &format!("dl{index}"));
        let log_file = std::fs::File::create(&log)
            .map_err(|e| LabError::io(format!("creating {}", log.display()), e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| LabError::io("duplicating log handle", e))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", elem])
            .arg(helper)
            .args([
                "lab",
                "delay-line",
                "--prepare",
                "--iface-a",
                ELEMENT_IFACE_A,
                "--iface-b",
                ELEMENT_IFACE_B,
            ])
            .args([
                "--delay-a-to-b",
                &up.delay_ms.to_string(),
                "--jitter-a-to-b",
                &up.jitter_ms.to_string(),
            ])
            .args([
                "--delay-b-to-a",
                &down.delay_ms.to_string(),
                "--jitter-b-to-a",
                &down.jitter_ms.to_string(),
            ]);
        // A host's NIC fault rides on the element right after it (a = client side).
        for (flag, bytes) in [
            ("--nic-segments-a-to-b", link.nic_segments_up),
            ("--nic-segments-b-to-a", link.nic_segments_down),
        ] {
            if let Some(bytes) = bytes {
                cmd.args([flag, &bytes.to_string()]);
            }
        }
        cmd.stdin(Stdio::null()).stdout(log_file).stderr(log_err);
        // Own process group: a Ctrl-C aimed at the terminal must not kill it behind our back.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let line = exec::display(&cmd);
        let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
            command: line.clone(),
            source,
        })?;
        let pid = child.id();
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .processes
            .push(ProcessState {
                pid,
                netns: elem.to_string(),
                what: format!("delay line link {index}"),
            });
        self.save()?;
        std::thread::sleep(Duration::from_millis(150));
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(LabError::DelayLine {
                link: format!("{index}"),
                message: format!("`{line}` exited ({status}): {}", text.trim()),
            });
        }
        self.delay_lines.push(child);
        Ok(())
    }

    fn make_cgroups(&mut self) -> Result<(), LabError> {
        for h in self.plan.hosts.clone() {
            let Some(percent) = self
                .topology
                .host_spec(&h.name)
                .and_then(|s| s.cpu_max_percent)
            else {
                continue;
            };
            let name = format!("{}-{}", self.id(), h.name);
            let group = pathdoc_sys::cgroup::CpuLimitGroup::create(
                CGROUP_PARENT,
                &name,
                f64::from(percent) / 100.0,
            )
            .map_err(|e| LabError::Measurement(format!("capping the CPU of {}: {e}", h.name)))?;
            self.cgroup_procs.insert(h.name.clone(), group.procs_file());
            self.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .cgroups
                .push(state::HostCgroup {
                    host: h.name.clone(),
                    group,
                });
            self.save()?;
        }
        Ok(())
    }

    /// Start link `c`'s cross flows: the iperf3 server on its far end, then (once it listens) the
    /// client on its near end; both are the lab's daemons, stopped with it.
    fn start_cross(&mut self, c: &crate::plan::CrossPlan) -> Result<(), LabError> {
        preflight::require_tools(&["iperf3"])?;
        let server = crate::cross::server_args(c);
        self.spawn_daemon(
            &c.far.netns,
            "iperf3",
            &server,
            &format!("{}-iperf3", c.far.name),
        )?;
        crate::cross::wait_listening(c)?;
        let client = crate::cross::client_args(c);
        let log = self.spawn_daemon(
            &c.near.netns,
            "iperf3",
            &client,
            &format!("{}-iperf3", c.near.name),
        )?;
        // The client exits at once when it cannot connect or set the congestion control.
        std::thread::sleep(Duration::from_millis(300));
        if let Some(child) = self.daemons.last_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(LabError::Topology(format!(
                    "cross traffic on link {}: iperf3 client exited ({status}): {}",
                    c.link,
                    text.trim()
                )));
            }
        }
        Ok(())
    }

    /// Start `program` in namespace `ns` as a daemon of the lab (its own process group, output in
    /// the lab's log `log_name`, recorded for `lab down`); returns the log's path.
    fn spawn_daemon(
        &mut self,
        ns: &str,
        program: &str,
        args: &[String],
        log_name: &str,
    ) -> Result<PathBuf, LabError> {
        let log = state::log_path(&self.id(), log_name);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, program]).args(args);
        let what = exec::display(&cmd);
        self.spawn_recorded(cmd, ns, what, &log)?;
        Ok(log)
    }

    /// Spawn `cmd` in its own process group with stdout and stderr in `log`, and record it (as
    /// `what`, in namespace `ns`) in the state file so `lab down` stops it even after a crash.
    fn spawn_recorded(
        &mut self,
        mut cmd: Command,
        ns: &str,
        what: String,
        log: &std::path::Path,
    ) -> Result<(), LabError> {
        let log_file = std::fs::File::create(log)
            .map_err(|e| LabError::io(format!("creating {}", log.display()), e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| LabError::io("duplicating log handle", e))?;
        cmd.stdin(Stdio::null()).stdout(log_file).stderr(log_err);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            command: exec::display(&cmd),
            source,
        })?;
        let pid = child.id();
        self.daemons.push(child);
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .processes
            .push(ProcessState {
                pid,
                netns: ns.to_string(),
                what,
            });
        self.save()
    }

    fn start_sshd(&mut self, host: &str) -> Result<(), LabError> {
        let sshd = crate::sshd::sshd_binary()?;
        crate::sshd::ensure_privsep_dir()?;
        let dir = state::state_dir().join(format!("{}.ssh", self.id()));
        {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !st.dirs.contains(&dir) {
                st.dirs.push(dir.clone());
            }
        }
        self.save()?;
        let addr = self.host(host)?.primary_addr();
        let addr6 = self.host(host)?.primary_addr6();
        let files = crate::sshd::prepare(&dir, host, addr, addr6)?;
        crate::sshd::test_config(&sshd, &files)?;
        let log = state::log_path(&self.id(), &format!("sshd-{host}"));
        // Not `ip netns exec`: that also gives the process a private /sys without the cgroup
        // mounts, and the far end's pathdoc must see its cgroup (CPU cap) like on a real host.
        let mut cmd = self.command_netns_only(host, &sshd)?;
        cmd.args(crate::sshd::sshd_args(&files));
        let ns = self
            .plan
            .host(host)
            .map(|h| h.netns.clone())
            .unwrap_or_default();
        self.spawn_recorded(cmd, &ns, format!("sshd on {host}"), &log)?;
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ssh_config = Some(files.client_config.clone());
        self.save()?;
        self.wait_for_sshd(host, addr, &log)
    }

    fn wait_for_sshd(
        &mut self,
        host: &str,
        addr: std::net::Ipv4Addr,
        log: &std::path::Path,
    ) -> Result<(), LabError> {
        let ns = self.netns(host).to_string();
        let target = std::net::SocketAddr::from((addr, 22));
        let deadline = Instant::now() + crate::sshd::START_PATIENCE;
        loop {
            let up = pathdoc_sys::netns::run_in_netns(&ns, || {
                std::net::TcpStream::connect_timeout(&target, Duration::from_millis(300)).is_ok()
            })?;
            if up {
                return Ok(());
            }
            let exited = self
                .daemons
                .last_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || Instant::now() > deadline {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                return Err(LabError::Measurement(format!(
                    "sshd on {host} did not start listening on {target}: {}",
                    text.trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ssh -F <this> <host>` logs in to the lab's sshd hosts from the client (None without sshd).
    pub fn ssh_config(&self) -> Option<PathBuf> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ssh_config
            .clone()
    }

    /// A command that runs `program` in `host`'s network namespace only (setns before exec),
    /// keeping the machine's mount namespace — /sys/fs/cgroup stays visible — and joining the
    /// host's CPU cgroup if it has one.
    pub fn command_netns_only(
        &self,
        host: &str,
        program: impl AsRef<OsStr>,
    ) -> Result<Command, LabError> {
        let path = pathdoc_sys::netns::netns_path(self.netns(host));
        let ns = std::fs::File::open(&path)
            .map_err(|e| LabError::io(format!("opening {}", path.display()), e))?;
        let mut cmd = Command::new(program);
        // SAFETY: setns is async-signal-safe; `ns` was opened before the fork and outlives it.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                use std::os::fd::AsRawFd;
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.join_cgroup(host, &mut cmd);
        Ok(cmd)
    }

    /// Make a command started in `host` join the host's CPU cgroup (if it has one) before it
    /// runs, so it and all its children are capped.
    fn join_cgroup(&self, host: &str, cmd: &mut Command) {
        let Some(procs) = self.cgroup_procs.get(host) else {
            return;
        };
        let Ok(path) = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: the closure runs between fork and exec and only calls open/write/close, which
        // are async-signal-safe; `path` was allocated before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, move || {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" moves the writing process itself.
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if n != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    fn check_path(&self) -> Result<(), LabError> {
        let mut servers = vec![self.addr("server")];
        servers.extend(self.addr6("server").map(IpAddr::V6));
        servers.dedup();
        for server in servers {
            self.check_reaches(&server.to_string())?;
        }
        Ok(())
    }

    fn check_reaches(&self, server: &str) -> Result<(), LabError> {
        for _ in 0..5 {
            let mut cmd = self.command("client", "ping");
            cmd.args(["-n", "-q", "-c", "1", "-W", "1", server]);
            if exec::run_unchecked(&mut cmd, None, Duration::from_secs(3))?.success {
                return Ok(());
            }
        }
        Err(LabError::Measurement(format!(
            "lab built, but client cannot ping the server at {server} (5 tries); see `pathdoc lab status {} --prefix {}`",
            self.name(),
            self.state().prefix
        )))
    }

    /// The lab's name (without prefix).
    pub fn name(&self) -> String {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .name
            .clone()
    }

    /// `<prefix><name>`, the stem of every namespace of this lab.
    pub fn id(&self) -> String {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).id()
    }

    /// A snapshot of the recorded state (what `status --json` prints).
    pub fn state(&self) -> LabState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The address/namespace plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The topology it was built from.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Host names in chain order.
    pub fn hosts(&self) -> Vec<String> {
        self.plan.hosts.iter().map(|h| h.name.clone()).collect()
    }

    /// Look up a host, with an error naming the known ones.
    pub fn host(&self, host: &str) -> Result<&HostPlan, LabError> {
        self.plan.host(host).ok_or_else(|| LabError::UnknownHost {
            lab: self.name(),
            host: host.into(),
            known: self.hosts().join(", "),
        })
    }

    /// Network namespace of `host` (`client`, `hop1`..`hopN`, `server`). Panics on an unknown host
    /// (a programming error in the caller); use [`Lab::host`] to check.
    pub fn netns(&self, host: &str) -> &str {
        match self.host(host) {
            Ok(h) => &h.netns,
            Err(e) => panic!("{e}"),
        }
    }

    /// Primary address of `host` (its server-facing one): IPv4, or IPv6 in an IPv6-only lab.
    /// Panics on an unknown host.
    pub fn addr(&self, host: &str) -> IpAddr {
        match self.host(host) {
            Ok(h) => primary_of(h, self.plan.family),
            Err(e) => panic!("{e}"),
        }
    }

    /// Primary IPv6 address of `host`, when the lab carries IPv6. Panics on an unknown host.
    pub fn addr6(&self, host: &str) -> Option<Ipv6Addr> {
        match self.host(host) {
            Ok(h) => h.primary_addr6(),
            Err(e) => panic!("{e}"),
        }
    }

    /// `host`'s primary address in one family (`v6`: IPv6), or `None` when the lab does not
    /// carry that family. Panics on an unknown host.
    pub fn addr_in(&self, host: &str, v6: bool) -> Option<IpAddr> {
        if v6 {
            self.addr6(host).map(IpAddr::V6)
        } else {
            self.plan.family.has_v4().then(|| {
                IpAddr::V4(
                    self.host(host)
                        .map(|h| h.primary_addr())
                        .unwrap_or(Ipv4Addr::UNSPECIFIED),
                )
            })
        }
    }

    /// A command that runs `program` inside `host`'s namespace (`ip netns exec NS program`).
    /// On a CPU-capped host the command joins the host's cgroup.
    pub fn command(&self, host: &str, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.netns(host)]).arg(program);
        self.join_cgroup(host, &mut cmd);
        cmd
    }

    /// Start `cmd` inside `host` as a guarded process (killed on drop and on teardown). A command
    /// from [`Lab::command`] is used as is; any other command is wrapped in `ip netns exec`.
    pub fn spawn(&self, host: &str, cmd: Command) -> Result<LabProcess, LabError> {
        let ns = self.host(host)?.netns.clone();
        let args: Vec<&OsStr> = cmd.get_args().collect();
        let already = cmd.get_program() == "ip"
            && args.len() >= 3
            && args[0] == "netns"
            && args[1] == "exec"
            && args[2] == ns.as_str();
        let mut cmd = if already {
            cmd
        } else {
            let mut wrapped = Command::new("ip");
            wrapped
                .args(["netns", "exec", &ns])
                .arg(cmd.get_program())
                .args(cmd.get_args());
            for (k, v) in cmd.get_envs() {
                match v {
                    Some(v) => wrapped.env(k, v),
                    None => wrapped.env_remove(k),
                };
            }
            if let Some(d) = cmd.get_current_dir() {
                wrapped.current_dir(d);
            }
            self.join_cgroup(host, &mut wrapped);
            wrapped
        };
        let line = exec::display(&cmd);
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            command: line.clone(),
            source,
        })?;
        self.spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child.id());
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .processes
            .push(ProcessState {
                pid: child.id(),
                netns: ns,
                what: line.clone(),
            });
        self.save()?;
        Ok(LabProcess {
            child,
            command: line,
        })
    }

    /// Run a short command in `host` and return its stdout; fails with stderr on non-zero exit.
    pub fn run(
        &self,
        host: &str,
        program: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Result<String, LabError> {
        let mut cmd = self.command(host, program);
        cmd.args(args);
        exec::run(&mut cmd, None, timeout)
    }

    /// Tear everything down: processes, namespaces (and with them every link), state file.
    pub fn down(mut self) -> Result<Teardown, LabError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<Teardown, LabError> {
        if !self.active {
            return Ok(Teardown::default());
        }
        self.active = false;
        for child in &mut self.delay_lines {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let state = self.state();
        let result = state::destroy(&state);
        for child in self.delay_lines.iter_mut().chain(self.daemons.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        result
    }

    /// Keep the lab after this value is gone (for `pathdoc lab up`); returns its state. Delay
    /// lines keep running; remove it later with `pathdoc lab down NAME`.
    pub fn persist(mut self) -> LabState {
        self.active = false;
        self.delay_lines.clear(); // dropping a Child neither kills nor waits
        self.daemons.clear();
        self.state()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!("lab teardown failed: {e}");
            eprintln!("pathdoc lab: teardown of {} failed: {e}", self.id());
        }
    }
}
