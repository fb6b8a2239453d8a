#!/usr/bin/env bash
# The README's first command: install what the lab needs, build pathdoc, run the lab demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --quiet
exec target/release/pathdoc lab demo "$@"
