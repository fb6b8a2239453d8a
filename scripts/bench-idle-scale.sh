#!/usr/bin/env bash
# Idle server scale benchmark (issue #3 §9): one `pathdoc server` on 127.0.0.1 holding
# >= 100 000 idle probe connections opened from 127.0.1.x source addresses; prints memory per
# connection, server CPU and probe-time error against the targets.
#
#   sudo scripts/bench-idle-scale.sh [GENERATOR ARGS...]     e.g. --sessions 60 --fire-batch 2000
#   sudo scripts/bench-idle-scale.sh --server reference      framework-only memory breakdown
#
# Builds pathdoc and the generator (release, honouring CARGO_TARGET_DIR), raises the sysctls the
# load needs (listen backlog, ephemeral port range, file limits) and restores them on exit.
# Only loopback addresses are used.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ $EUID -eq 0 ]] || { echo "bench-idle-scale: needs root (sysctls, 1 Mi descriptors)" >&2; exit 2; }

(cd "$ROOT" && cargo build --release -p pathdoc-cli -p pathdoc-bench-scale)

declare -A SAVED=()
set_at_least() { # name value: raise a single-valued sysctl if it is lower
    local name="$1" want="$2" have
    have="$(sysctl -n "$name")"
    if (( have < want )); then
        SAVED[$name]="$have"
        sysctl -qw "$name=$want"
    fi
}
restore() {
    for name in "${!SAVED[@]}"; do
        sysctl -qw "$name=${SAVED[$name]}" || echo "bench-idle-scale: could not restore $name" >&2
    done
}
trap restore EXIT

set_at_least net.core.somaxconn 4096
set_at_least net.ipv4.tcp_max_syn_backlog 4096
set_at_least fs.nr_open 1048576
set_at_least fs.file-max 1048576
# Each source address needs ~10 000 ports towards the one server port; keep at least 20 000.
read -r LOW HIGH < <(sysctl -n net.ipv4.ip_local_port_range)
if (( HIGH - LOW < 20000 )); then
    SAVED[net.ipv4.ip_local_port_range]="$LOW $HIGH"
    sysctl -qw net.ipv4.ip_local_port_range="32768 60999"
fi

"$TARGET_DIR/release/pathdoc-bench-scale" --pathdoc "$TARGET_DIR/release/pathdoc" "$@"
