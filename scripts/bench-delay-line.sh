#!/usr/bin/env bash
# Benchmark of pathdoc's userspace delay line against a direct veth link, with real iperf3.
#
#   sudo scripts/bench-delay-line.sh [SECONDS]
#
# Builds (in private namespaces, removed on exit) a direct pair  pdb<id>-x <-veth-> pdb<id>-y  and a
# delayed path  pdb<id>-a <-veth-> pdb<id>-d (delay line) <-veth-> pdb<id>-b, all on 192.0.2.0/24,
# then runs iperf3 TCP (one stream, tcp_rmem/tcp_wmem max 128 MiB) through: (1) the direct link, (2) the line at 0 ms,
# (3) the line at 50 ms one-way (100 ms RTT). Prints the rates side by side and line/direct ratios.
# PATHDOC (default target/release/pathdoc) must provide the hidden `lab delay-line` subcommand.
set -euo pipefail

SECONDS_PER_RUN="${1:-10}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PATHDOC="${PATHDOC:-$ROOT/target/release/pathdoc}"
ID="$(printf '%x' $$)"
NS_X="pdb${ID}-x" NS_Y="pdb${ID}-y" NS_A="pdb${ID}-a" NS_D="pdb${ID}-d" NS_B="pdb${ID}-b"
LINE_PID=""

[[ $EUID -eq 0 ]] || { echo "bench-delay-line: needs root (network namespaces)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "bench-delay-line: iperf3 not installed" >&2; exit 2; }
[[ -x "$PATHDOC" ]] || { echo "bench-delay-line: $PATHDOC not found (cargo build --release -p pathdoc-cli)" >&2; exit 2; }

cleanup() {
    [[ -n "$LINE_PID" ]] && kill "$LINE_PID" 2>/dev/null && wait "$LINE_PID" 2>/dev/null || true
    for ns in "$NS_X" "$NS_Y" "$NS_A" "$NS_D" "$NS_B"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}
trap cleanup EXIT

for ns in "$NS_X" "$NS_Y" "$NS_A" "$NS_D" "$NS_B"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
ip link add eth0 netns "$NS_X" type veth peer name eth0 netns "$NS_Y"
ip link add eth0 netns "$NS_A" type veth peer name port-a netns "$NS_D"
ip link add eth0 netns "$NS_B" type veth peer name port-b netns "$NS_D"
for pair in "$NS_X 192.0.2.1" "$NS_Y 192.0.2.2" "$NS_A 192.0.2.1" "$NS_B 192.0.2.2"; do
    set -- $pair
    ip -n "$1" addr add "$2/24" dev eth0
    ip -n "$1" link set eth0 up
    # Autotuning room for a 100 ms RTT × multi-Gbit/s window (bytes). An explicit iperf3 -w would be
    # capped by the host-wide net.core.rmem_max, which is not per namespace.
    ip netns exec "$1" sysctl -qw net.ipv4.tcp_rmem="4096 131072 134217728" net.ipv4.tcp_wmem="4096 65536 134217728"
done

# iperf3 from $1 to 192.0.2.2 in $2; prints receiver goodput in Mbit/s.
iperf() {
    local client="$1" server="$2"
    ip netns exec "$server" iperf3 -s -1 -p 5399 >/dev/null 2>&1 &
    local server_pid=$!
    sleep 0.3
    local json
    json="$(ip netns exec "$client" iperf3 -c 192.0.2.2 -p 5399 -t "$SECONDS_PER_RUN" -O 2 -J)"
    wait "$server_pid" || true
    python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' <<<"$json"
}

rtt() {
    ip netns exec "$NS_A" ping -n -c 1 -W 3 192.0.2.2 >/dev/null || true
    ip netns exec "$NS_A" ping -n -q -c 10 -i 0.05 192.0.2.2 | awk -F/ '/^rtt/ {print $5}'
}

# Starts the delay line in the element namespace with $1 ms one-way delay each way.
start_line() {
    ip netns exec "$NS_D" "$PATHDOC" lab delay-line --prepare --iface-a port-a --iface-b port-b \
        --delay-a-to-b "$1" --delay-b-to-a "$1" 2>"/tmp/pdb${ID}-line-$1.log" &
    LINE_PID=$!
    sleep 0.5
}

stop_line() {
    kill -TERM "$LINE_PID"
    wait "$LINE_PID"
    LINE_PID=""
    sed -n 's/^pathdoc delay-line: //p' "/tmp/pdb${ID}-line-$1.log" | tail -n 2 | sed 's/^/    /'
    rm -f "/tmp/pdb${ID}-line-$1.log"
}

echo "iperf3 TCP, 1 stream, tcp_[rw]mem max 128 MiB, ${SECONDS_PER_RUN} s (+2 s omitted), $(nproc) CPUs, kernel $(uname -r)"
direct="$(iperf "$NS_X" "$NS_Y")"
printf '%-32s %8s Mbit/s\n' "direct veth" "$direct"

start_line 0
line0_rtt="$(rtt)"
line0="$(iperf "$NS_A" "$NS_B")"
printf '%-32s %8s Mbit/s  ratio %.2f  (ping RTT %s ms)\n' "delay line 0 ms" "$line0" \
    "$(echo "$line0 / $direct" | bc -l)" "$line0_rtt"
stop_line 0

start_line 50
line50_rtt="$(rtt)"
# Pings from b to a while iperf3 fills a→b: the RTT shows the line's timing under full load.
ip netns exec "$NS_B" ping -n -q -c 30 -i 0.2 192.0.2.1 >"/tmp/pdb${ID}-ping" 2>&1 &
ping_pid=$!
line50="$(iperf "$NS_A" "$NS_B")"
wait "$ping_pid" || true
loaded_rtt="$(awk '/^rtt/ {split($4, v, "/"); print v[1] "/" v[2] "/" v[3]}' "/tmp/pdb${ID}-ping")"
rm -f "/tmp/pdb${ID}-ping"
printf '%-32s %8s Mbit/s  ratio %.2f  (ping RTT %s ms idle, min/avg/max %s ms under load)\n' \
    "delay line 50 ms one-way" "$line50" "$(echo "$line50 / $direct" | bc -l)" "$line50_rtt" "$loaded_rtt"
stop_line 50
