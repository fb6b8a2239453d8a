#!/usr/bin/env bash
# Installs what `scripts/package.sh --portable` needs: zig (PyPI's `ziglang` wheel) and
# cargo-zigbuild, which links the release binary against glibc 2.17's symbol versions so the
# binary `--ssh` copies runs on old far ends (RHEL/CentOS 7 and newer). Idempotent: it installs
# only what is missing. CI runs it before the portable build and its test.
set -euo pipefail

if ! python3 -c 'import ziglang' 2>/dev/null; then
  python3 -m pip --version >/dev/null 2>&1 || {
    [ "$(id -u)" -eq 0 ] || { echo "install-portable-toolchain: needs pip (apt-get install python3-pip)" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip
  }
  # Debian's system Python refuses pip installs into it (PEP 668) unless told this is intended.
  python3 -m pip install --quiet ziglang 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages ziglang
fi
cargo zigbuild --help >/dev/null 2>&1 || cargo install --locked --quiet cargo-zigbuild
