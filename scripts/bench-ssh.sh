#!/usr/bin/env bash
# SSH bulk-transfer benchmark: `pathdoc ssh` vs the by-hand approach (seeds 002 and 004) on the
# same lab path, side by side in one run. The by-hand approach is what an admin does today: iperf3
# raw TCP both ways for the network, then a shell loop timing a fixed-size transfer per cipher,
#   time (dd if=/dev/zero bs=1M count=N | ssh -c CIPHER host 'cat > /dev/null')     # upload
#   time (ssh -c CIPHER host 'dd if=/dev/zero bs=1M count=N' > /dev/null)           # download
# for the four ciphers pathdoc tries (aes128-gcm, aes256-gcm, chacha20-poly1305, aes128-ctr with
# umac-64-etm), through the lab's real sshd. Then `pathdoc ssh server` with default options.
# Prints each approach's wall time, every rate both measured (goodput, bit/s and MiB/s), the
# ratio pathdoc/by-hand, and what each says about the limit.
#
#   scripts/bench-ssh.sh [SCENARIO...]   (default: clean ssh-window-limited ssh-cpu-limited;
#                                         `clean` gets sshd on the server, as the control)
#   SIZE_MIB=128 scripts/bench-ssh.sh ssh-cpu-limited   # by-hand transfer size (default per scenario)
#   PATHDOC=BIN scripts/bench-ssh.sh                     # use a built binary, skip the build
#
# Root (network namespaces, cgroups). Needs iperf3, openssh-server/-client, python3. Builds pathdoc
# in release mode (honours CARGO_TARGET_DIR). Labs use PATHDOC_LAB_PREFIX (default pdb-ssh-) and are
# removed on exit, also on failure or Ctrl-C. About 2 minutes per scenario. Timing-sensitive: run it
# under the shared lock, flock /tmp/pathdoc-timing.lock scripts/bench-ssh.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export PATHDOC_LAB_PREFIX=${PATHDOC_LAB_PREFIX:-pdb-ssh-}
STATE_DIR=${PATHDOC_LAB_STATE_DIR:-/run/pathdoc/labs}
IPERF_PORT=${IPERF_PORT:-30201}
SECS=4                   # iperf3 -t, the same as pathdoc ssh's default --time 4s
LIMIT=300                # seconds, hard deadline for any single run
SERVER=203.0.113.10
CIPHERS=(chacha20-poly1305@openssh.com aes128-gcm@openssh.com aes256-gcm@openssh.com aes128-ctr+umac-64-etm@openssh.com)
if [ $# -gt 0 ]; then SCENARIOS=("$@"); else SCENARIOS=(clean ssh-window-limited ssh-cpu-limited); fi

[ "$(id -u)" = 0 ] || { echo "bench-ssh: needs root (network namespaces)" >&2; exit 2; }
for t in iperf3 ssh sshd python3 timeout; do
  command -v "$t" >/dev/null || { echo "bench-ssh: missing $t (scripts/install-deps.sh)" >&2; exit 2; }
done
if [ -z "${PATHDOC:-}" ]; then
  cargo build --release -q -p pathdoc-cli --manifest-path "$ROOT/Cargo.toml"
  PATHDOC=$CARGO_TARGET_DIR/release/pathdoc
fi

WORK=$(mktemp -d /tmp/bench-ssh.XXXXXX)
LAB=""          # the lab currently up (one at a time)
cleanup() {
  if [ -s "$WORK/iperf3.pid" ]; then kill "$(cat "$WORK/iperf3.pid")" 2>/dev/null || true; fi
  if [ -n "$LAB" ]; then
    "$PATHDOC" lab down "$LAB" >/dev/null 2>&1 || echo "bench-ssh: could not remove lab $LAB" >&2
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# `clean` with sshd on the server: the control (no SSH limit should be claimed beyond what the
# numbers support).
cat >"$WORK/clean-sshd.toml" <<'EOF'
description = "home NAT, no faults, 5 ms RTT, OpenSSH sshd on the server: the control"
[[hop]]
kind = "nat"
conntrack = { udp = 300, udp_stream = 300 }
[server]
sshd = true
[[link]]
[[link]]
delay_ms = 2.5
EOF

# By-hand transfer size per scenario: a few seconds per transfer at the rates seen there.
default_size() {
  case $1 in
    ssh-window-limited) echo 96 ;;   # ≈ 20 MiB/s: ~5 s
    ssh-cpu-limited) echo 192 ;;     # 35–110 MiB/s: 2–6 s
    *) echo 768 ;;                   # ≈ 200 MiB/s on the 2-core dev machine: ~4 s
  esac
}

now() { date +%s.%N; }

# The by-hand loop, run inside the client namespace: login time (median of 3 `ssh host true`),
# iperf3 both ways, then per cipher a timed upload and download of SIZE MiB. Prints JSON lines.
# shellcheck disable=SC2016 # expanded by the inner bash
BY_HAND='
set -u
cfg=$1 size=$2 port=$3 secs=$4 server=$5; shift 5
t() { echo "$EPOCHREALTIME"; }
for i in 1 2 3; do
  s=$(t); ssh -F "$cfg" -o Compression=no server true; e=$(t)
  echo "{\"what\":\"login\",\"seconds\":$(python3 -c "print($e-$s)")}"
done
for dir in upload download; do
  r=""; [ "$dir" = download ] && r=-R
  bps=$(iperf3 -c "$server" -p "$port" -t "$secs" $r -J |
    python3 -c "import json,sys; print(json.load(sys.stdin)[\"end\"][\"sum_received\"][\"bits_per_second\"])") || bps=null
  echo "{\"what\":\"raw\",\"way\":\"$dir\",\"bps\":$bps}"
done
for cm in "$@"; do
  c=${cm%%+*} m=""; [ "$cm" != "$c" ] && m=${cm#*+}
  opts=(-F "$cfg" -o Compression=no -c "$c"); [ -n "$m" ] && opts+=(-m "$m")
  s=$(t); dd if=/dev/zero bs=1M count="$size" status=none | ssh "${opts[@]}" server "cat > /dev/null"; rc=$?; e=$(t)
  echo "{\"what\":\"ssh\",\"way\":\"upload\",\"cipher\":\"$c\",\"rc\":$rc,\"seconds\":$(python3 -c "print($e-$s)")}"
  s=$(t); ssh "${opts[@]}" server "dd if=/dev/zero bs=1M count=$size status=none" > /dev/null; rc=$?; e=$(t)
  echo "{\"what\":\"ssh\",\"way\":\"download\",\"cipher\":\"$c\",\"rc\":$rc,\"seconds\":$(python3 -c "print($e-$s)")}"
done
'

run_scenario() {
  local scenario=$1 size=${SIZE_MIB:-$(default_size "$1")} how cfg t0 t1 t2 rc=0
  if [ "$scenario" = clean ]; then how=(--topology "$WORK/clean-sshd.toml"); else how=(--scenario "$scenario"); fi
  LAB=bench
  "$PATHDOC" lab down "$LAB" >/dev/null 2>&1 || true
  "$PATHDOC" lab up "${how[@]}" --name "$LAB" >"$WORK/lab-up.txt"
  cfg=$STATE_DIR/${PATHDOC_LAB_PREFIX}${LAB}.ssh/ssh_config
  [ -f "$cfg" ] || { echo "bench-ssh: $scenario runs no sshd ($cfg missing)" >&2; exit 2; }
  # iperf3's server runs in the server host, in its CPU cgroup where the scenario has one (as
  # sshd and pathdoc's temporary server do).
  rm -f "$WORK/iperf3.pid"
  "$PATHDOC" lab exec "$LAB" server -- iperf3 -s -p "$IPERF_PORT" -D -I "$WORK/iperf3.pid" >/dev/null
  sleep 0.5

  t0=$(now)
  "$PATHDOC" lab exec "$LAB" client -- timeout "$LIMIT" bash -c "$BY_HAND" by-hand \
    "$cfg" "$size" "$IPERF_PORT" "$SECS" "$SERVER" "${CIPHERS[@]}" >"$WORK/by-hand.jsonl" || rc=$?
  t1=$(now)
  [ "$rc" = 0 ] || echo "bench-ssh: by-hand loop exited $rc" >&2
  rc=0
  "$PATHDOC" lab exec "$LAB" client -- timeout "$LIMIT" "$PATHDOC" ssh -F "$cfg" server --json -q \
    >"$WORK/pathdoc.json" 2>"$WORK/pathdoc.err" || rc=$?
  t2=$(now)
  # Exit 1 (a limit found) and 3 (inconclusive) are results here; 2 is not.
  case $rc in 0|1|3) ;; *) echo "bench-ssh: pathdoc ssh exited $rc: $(tail -3 "$WORK/pathdoc.err")" >&2 ;; esac

  kill "$(cat "$WORK/iperf3.pid")" 2>/dev/null || true
  rm -f "$WORK/iperf3.pid"
  "$PATHDOC" lab down "$LAB" >/dev/null
  LAB=""
  python3 - "$scenario" "$size" "$(python3 -c "print($t1-$t0)")" "$(python3 -c "print($t2-$t1)")" \
    "$WORK/by-hand.jsonl" "$WORK/pathdoc.json" <<'EOF'
import json, statistics, sys
scenario, size_mib, hand_wall, pd_wall, hand_file, pd_file = sys.argv[1:]
size_mib, hand_wall, pd_wall = int(size_mib), float(hand_wall), float(pd_wall)

def rate(bps):
    if bps is None:
        return f"{'—':>11} {'':>11}"
    for div, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= div:
            return f"{bps / div:6.3g} {unit} {bps / 8 / 1048576:6.1f} MiB/s"
    return f"{bps:6.3g} bit/s {bps / 8 / 1048576:6.1f} MiB/s"

def ratio(p, h):
    return f"{p / h:5.2f}" if p and h else "    —"

hand = [json.loads(line) for line in open(hand_file) if line.startswith("{")]
login = statistics.median([h["seconds"] for h in hand if h["what"] == "login"] or [0.0])
raw_hand = {h["way"]: h["bps"] for h in hand if h["what"] == "raw"}
ssh_hand = {}
for h in hand:
    if h["what"] == "ssh" and h["rc"] == 0:
        b = size_mib * 1048576 * 8
        ssh_hand[(h["way"], h["cipher"])] = (b / h["seconds"], b / max(h["seconds"] - login, 1e-3))
try:
    doc = json.load(open(pd_file))
    ssh = doc["data"]["ssh"]
except (ValueError, KeyError, TypeError):
    doc, ssh = {"findings": []}, {"raw_tcp": {}, "transfers": [], "server_binary": None}
raw_pd = {"upload": ssh["raw_tcp"].get("upload_bps"), "download": ssh["raw_tcp"].get("download_bps")}
ssh_pd = {}
for t in ssh["transfers"]:
    cipher = t["requested_cipher"] or t["log"]["client_to_server"]["cipher"]
    steady = (t.get("steady") or {}).get("rate_bps")
    ssh_pd[(t["way"], cipher)] = (steady or t["goodput_bps"], t["goodput_bps"])

print(f"\n== {scenario}: by-hand transfers of {size_mib} MiB; login (ssh host true) {login:.2f} s; "
      f"pathdoc's server binary {ssh.get('server_binary') or '?'}")
print(f"wall time: by-hand {hand_wall:.1f} s (3 logins, iperf3 2×4 s, 8 transfers), "
      f"pathdoc ssh {pd_wall:.1f} s; pathdoc/by-hand {pd_wall / hand_wall:.2f}")
print(f"{'goodput':<34} {'by-hand (bit/s, MiB/s)':>24} {'pathdoc (bit/s, MiB/s)':>24} {'pd/hand':>7} "
      f"{'pd/(hand-login)':>15}")
for way in ("upload", "download"):
    print(f"{'raw TCP ' + way + ' (iperf3 | pathdoc)':<34} {rate(raw_hand.get(way)):>24} "
          f"{rate(raw_pd[way]):>24} {ratio(raw_pd[way], raw_hand.get(way)):>7}")
for way in ("upload", "download"):
    for cm in ("chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr"):
        h, hc = ssh_hand.get((way, cm), (None, None))
        p = ssh_pd.get((way, cm), (None, None))[0]
        name = cm.replace("@openssh.com", "") + (" +umac-64-etm" if cm == "aes128-ctr" else "")
        print(f"{'ssh ' + way + ' ' + name:<34} {rate(h):>24} {rate(p):>24} {ratio(p, h):>7} {ratio(p, hc):>15}")
verdicts = [f"{f.get('direction') or '-'} {f['id']} ({f['status'].upper()})"
            for f in doc["findings"] if f["id"].startswith("ssh-") and f["id"] != "ssh-versions"]
print("limit: by-hand names none (numbers only);")
print("       pathdoc: " + ("; ".join(verdicts) if verdicts else "no verdict (see its stderr)"))
EOF
}

echo "kernel $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(ssh -V 2>&1), $(iperf3 --version | head -1)"
echo "pathdoc rates: the steady rate it prints and judges; by-hand: size / wall time of the ssh command"
for scenario in "${SCENARIOS[@]}"; do
  run_scenario "$scenario"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
