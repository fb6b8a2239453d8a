#!/usr/bin/env bash
# Installs the system packages pathdoc's lab, tests and benchmarks use (Debian/Ubuntu, as root).
# Safe to run repeatedly: it only calls apt-get when something is missing.
set -euo pipefail

packages=(
  iproute2        # ip, tc (namespaces, veth, tbf)
  nftables        # nft: NAT, filters, loss
  conntrack       # inspecting NAT state in the lab
  iperf3          # the throughput anchor
  iputils-ping    # lab RTT and loss checks
  iputils-tracepath
  tcpdump
  tshark          # the reference `pathdoc analyze` is tested and benchmarked against
  time            # GNU time: peak RSS in scripts/bench-analyze.sh
  ethtool         # offload settings on lab links
  procps          # sysctl
  kmod            # modprobe for nf_conntrack, tun, sch_tbf
  openssh-client  # ssh, ssh-keygen: `pathdoc ssh`, `--ssh` bootstrap, lab sshd keys
  openssh-server  # sshd in lab hosts with `sshd = true` (ssh-* scenarios, SSH tests)
  chromium        # HTML report tests: headless browser (DevTools protocol), screenshots
  chromium-driver # WebDriver for the same browser (for manual checks of the HTML report)
  fonts-dejavu-core # a font for headless Chromium's screenshots
  prometheus      # exporter test: a real Prometheus scrapes `pathdoc exporter` (promtool checks the alert rules)
  curl            # exporter test: queries Prometheus's HTTP API inside the lab namespace
  binutils        # objdump: scripts/package.sh and its test measure the glibc the binary needs
  dpkg            # dpkg-deb: scripts/package.sh builds the .deb, the test unpacks it (dpkg -x)
  systemd         # the packaged units are tested under a live systemd (booted in a container)
  systemd-container # systemd-nspawn: boots that systemd with a private network and a throwaway root
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "pathdoc needs these packages: ${missing[*]} (run as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # tshark's package asks whether non-root users may capture; answer it up front.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Kernel modules the lab uses; built-in kernels have them already, so failures are not fatal.
for m in nf_conntrack nf_nat nf_tables sch_tbf tun veth tcp_bbr; do modprobe -q "$m" 2>/dev/null || true; done
