#!/usr/bin/env bash
# Hostile load against `pathdoc server` (issue #13), the same load against two builds so the
# figures compare: what refusal floods, left-behind mtu sessions, never-read bulk downloads,
# udp-refresh abuse, concurrent throughput tests, session floods and idle bindings make each
# server hold (descriptors, threads, RSS, send queues of its TCP sockets). docs/server.md has
# the figures measured with it.
#
#   scripts/bench-server-attack.sh [BASE_REF] [-- GENERATOR ARGS...]
#       BASE_REF: the git ref to compare with (default: main); builds it in a temporary worktree
#   e.g. scripts/bench-server-attack.sh main -- --phases flood,bulk
#
# Loopback only (127.20–127.80.x.y source addresses). Needs ~20 000 descriptors for the
# generator (it never holds more). Run it alone: flock /tmp/pathdoc-timing.lock on shared hosts.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BASE="main"
if [[ $# -gt 0 && "$1" != "--" ]]; then BASE="$1"; shift; fi
[[ "${1:-}" == "--" ]] && shift
GEN_ARGS=("$@")

(cd "$ROOT" && cargo build --release -p pathdoc-cli -p pathdoc-bench-scale)
WORK="$(mktemp -d)"
cleanup() {
    git -C "$ROOT" worktree remove --force "$WORK/base" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
git -C "$ROOT" worktree add --detach "$WORK/base" "$BASE" >/dev/null
(cd "$WORK/base" && CARGO_TARGET_DIR="$WORK/target" cargo build --release -p pathdoc-cli)

# The same explicit limit on both: the issue's per-address connection cap.
for exe in "$WORK/target/release/pathdoc" "$TARGET_DIR/release/pathdoc"; do
    label="this tree"
    [[ "$exe" == "$WORK"* ]] && label="$BASE ($(git -C "$WORK/base" rev-parse --short HEAD))"
    echo "=================== $label"
    "$TARGET_DIR/release/pathdoc-bench-attack" --pathdoc "$exe" "${GEN_ARGS[@]}" -- --max-connections-per-ip 1024
done
