#!/usr/bin/env bash
# Path-MTU benchmark: `pathdoc check --mtu` vs `tracepath` (iputils) on the same lab paths, side by
# side in one run. For each scenario it builds a lab, runs tracepath client→server (and
# server→client where the server can address anything on the client side), then
# `pathdoc check SERVER --mtu --json` from the client (defaults, and once more MTU-only:
# `--mtu-bulk-ms 0 --mtu-skip-mss`), and prints what each found and how long it took.
#
#   scripts/bench-mtu.sh [ROUNDS=3]        (PATHDOC=BIN to use a built binary)
#
# Root. Needs tracepath (iputils-tracepath), python3, ip, nft. Builds pathdoc in release mode
# (honours CARGO_TARGET_DIR). Labs use the prefix pdb-mtu- and are torn down on exit.
# Wall times are medians over ROUNDS, measured around `pathdoc lab exec` (same overhead for both).
set -euo pipefail
ROUNDS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export PATHDOC_LAB_PREFIX=pdb-mtu-
# tracepath's default is 30 hops; every unanswered hop costs it ~3 s. The lab paths have at most
# 4 hops, so 10 is generous and keeps a black-holed trace to ~30 s instead of ~90 s.
TP_MAX_HOPS=10
TP_LIMIT=120   # seconds, hard deadline for any single tool run
PORT=7224
SERVER=203.0.113.10

[ "$(id -u)" = 0 ] || { echo "bench-mtu: needs root (network namespaces)" >&2; exit 2; }
for t in tracepath python3 ip nft stdbuf timeout; do
  command -v "$t" >/dev/null || { echo "bench-mtu: missing $t (scripts/install-deps.sh)" >&2; exit 2; }
done
# PATHDOC=/path/to/pathdoc skips the build (e.g. while the tree does not compile).
if [ -z "${PATHDOC:-}" ]; then
  cargo build --release -q -p pathdoc-cli --manifest-path "$ROOT/Cargo.toml"
  PATHDOC=$CARGO_TARGET_DIR/release/pathdoc
fi

WORK=$(mktemp -d /tmp/bench-mtu.XXXXXX)
LAB=""          # the lab currently up (one at a time)
pidfile=""      # holds the pid of its pathdoc server
cleanup() {
  if [ -n "$pidfile" ] && [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  if [ -n "$LAB" ]; then
    "$PATHDOC" lab down "$LAB" >/dev/null 2>&1 || echo "bench-mtu: could not remove lab $LAB" >&2
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- topologies that are not built-in scenarios (format: docs/lab.md) ---
cat >"$WORK/mirror.toml" <<'EOF'
description = "1420-byte link towards the server; the client's firewall drops ICMP frag-needed"
[[hop]]
[client]
filters = ["drop-icmp-frag-needed"]
[[link]]
[[link]]
[link.up]
mtu = 1420
EOF
cat >"$WORK/hop2-1280.toml" <<'EOF'
description = "three routers, 1280-byte link between hop2 and hop3"
[[hop]]
[[hop]]
[[hop]]
[[link]]
[[link]]
[[link]]
mtu = 1280
EOF
cat >"$WORK/mss-clamp.toml" <<'EOF'
description = "two routers, hop1 clamps the TCP MSS to 1380"
[[hop]]
mss_clamp = 1380
[[hop]]
EOF

SCENARIOS=(
  "clean|--scenario clean"
  "pmtu-blackhole|--scenario pmtu-blackhole"
  "mirror-blackhole|--topology $WORK/mirror.toml"
  "1280-at-hop2-of-3|--topology $WORK/hop2-1280.toml"
  "mss-clamp-1380|--topology $WORK/mss-clamp.toml"
)

now() { date +%s.%N; }

# Forget every PMTU the kernel cached in the lab, so each tool starts cold: a cached route MTU
# caps the largest probe pathdoc sends (and hides where the MTU drops), and tracepath's earlier
# run would otherwise prime it.
flush_pmtu() {
  local h
  for h in $HOSTS; do "$PATHDOC" lab exec "$LAB" "$h" -- ip route flush cache; done
}

# run_timed OUT HOST CMD... : runs CMD in HOST of the current lab; prints "seconds exit_code".
run_timed() {
  local out=$1 host=$2; shift 2
  local t0 rc=0
  t0=$(now)
  "$PATHDOC" lab exec "$LAB" "$host" -- timeout "$TP_LIMIT" "$@" >"$out" 2>&1 || rc=$?
  python3 -c "print(f'{$(now) - $t0:.3f} $rc')"
}

# Reverse target: the client if the server can route to it, else the outermost NAT's public
# address (what the server sees as the client); prints "ADDR NOTE".
reverse_target() {
  python3 - "$1" <<'EOF'
import json, sys
lab = json.load(open(sys.argv[1]))["lab"]
hosts = {h["name"]: h for h in lab["hosts"]}
hops = lab["topology"]["hop"]
nat = [i for i, h in enumerate(hops) if h.get("kind") == "nat"]
if not nat:
    print(hosts["client"]["addr"], "client")
else:
    name = f"hop{nat[-1] + 1}"
    print(hosts[name]["addr"], f"{name}(NAT)")
EOF
}

RESULTS=$WORK/results.jsonl
: >"$RESULTS"
echo "kernel $(uname -r), $(nproc) CPUs, $(tracepath -V 2>&1 | head -1), pathdoc $("$PATHDOC" --version 2>/dev/null | awk '{print $2}'), rounds $ROUNDS"

i=0
for entry in "${SCENARIOS[@]}"; do
  scen=${entry%%|*}; args=${entry#*|}
  i=$((i + 1))
  LAB="b$i$((RANDOM % 1000))"
  # shellcheck disable=SC2086
  "$PATHDOC" lab up $args --name "$LAB" --json >"$WORK/$scen.lab.json"
  read -r REV_ADDR REV_NOTE < <(reverse_target "$WORK/$scen.lab.json")
  HOSTS=$(python3 -c 'import json,sys; print(" ".join(h["name"] for h in json.load(open(sys.argv[1]))["lab"]["hosts"]))' "$WORK/$scen.lab.json")

  pidfile=$WORK/$scen.server.pid
  "$PATHDOC" lab exec "$LAB" server -- bash -c "echo \$\$ > '$pidfile'; exec '$PATHDOC' server --listen 0.0.0.0:$PORT" \
    >"$WORK/$scen.server.log" 2>&1 &
  up=0
  for _ in $(seq 100); do
    if "$PATHDOC" lab exec "$LAB" client -- timeout 1 bash -c "exec 3<>/dev/tcp/$SERVER/$PORT" 2>/dev/null; then
      up=1; break
    fi
    sleep 0.1
  done
  [ $up = 1 ] || { echo "bench-mtu: pathdoc server did not come up in $scen" >&2; exit 2; }

  for round in $(seq "$ROUNDS"); do
    p=$WORK/$scen.$round
    flush_pmtu
    read -r t_tf rc_tf < <(run_timed "$p.tp-fwd" client stdbuf -oL tracepath -n -m $TP_MAX_HOPS $SERVER)
    flush_pmtu
    read -r t_tr rc_tr < <(run_timed "$p.tp-rev" server stdbuf -oL tracepath -n -m $TP_MAX_HOPS "$REV_ADDR")
    flush_pmtu
    read -r t_pd rc_pd < <(run_timed "$p.pd" client "$PATHDOC" check $SERVER --mtu --json)
    flush_pmtu
    read -r t_pm rc_pm < <(run_timed "$p.pdm" client "$PATHDOC" check $SERVER --mtu --json --mtu-bulk-ms 0 --mtu-skip-mss)
    printf '%-18s round %s: tracepath fwd %6.2f s, rev %6.2f s; pathdoc %5.2f s (exit %s), mtu-only %5.2f s (exit %s)\n' \
      "$scen" "$round" "$t_tf" "$t_tr" "$t_pd" "$rc_pd" "$t_pm" "$rc_pm"
    python3 - "$scen" "$round" "$REV_ADDR" "$REV_NOTE" "$p" "$t_tf" "$t_tr" "$t_pd" "$rc_pd" "$t_pm" "$rc_pm" \
      >>"$RESULTS" <<'EOF'
import json, re, sys
scen, rnd, rev_addr, rev_note, p = sys.argv[1:6]
t_tf, t_tr, t_pd, rc_pd, t_pm, rc_pm = sys.argv[6:12]

lab = json.load(open(p.rsplit(".", 1)[0] + ".lab.json"))["lab"]
owner = {}
for h in lab["hosts"]:
    for i in h["ifaces"]:
        owner[i.split()[1].split("/")[0]] = h["name"]

def named(addr):
    return f"{addr}={owner[addr]}" if addr in owner else addr

def tracepath(path):
    """What a user reads off tracepath: final pmtu, reached or not, where the pmtu dropped."""
    text = open(path).read()
    m = re.search(r"Resume: pmtu (\d+)", text) or re.search(r"pmtu (\d+)\s*$", text, re.M)
    reached = "reached" in text
    drop_hop, first = None, None
    for line in text.splitlines():
        mm = re.match(r"\s*(\d+)\??:\s+(\S+).*?pmtu (\d+)", line)
        if mm:
            v = int(mm.group(3))
            if first is None:
                first = v
            elif v < first and drop_hop is None:
                drop_hop = f"line {mm.group(1)}: {named(mm.group(2))}"
    noreply = len(re.findall(r"no reply", text))
    failed = "send failed" in text or "Network is unreachable" in text
    return {"pmtu": int(m.group(1)) if m else None, "reached": reached, "drop_hop": drop_hop,
            "no_reply": noreply, "send_failed": failed, "raw": text}

def pathdoc(path):
    try:
        r = json.load(open(path))
    except Exception as e:
        return {"error": str(e)}
    m = r["data"].get("mtu", {})
    out = {}
    for d in ("up", "down"):
        o = m.get(d, {}) or {}
        oc, loc = o.get("outcome") or {}, o.get("location") or {}
        out[d] = {"kind": oc.get("kind"), "mtu": oc.get("mtu"),
                  "hop": loc.get("hop"), "addr": named(loc["addr"]) if loc.get("addr") else None}
    # Ids carry no direction; it is the finding's `direction` field.
    short = {"client-to-server": "up", "server-to-client": "down"}
    f = {x["id"] + ("-" + short[x["direction"]] if x.get("direction") in short else ""): x
         for x in r["findings"]}
    out["black_hole"] = [short[x["direction"]] for x in r["findings"]
                         if x["id"] == "pmtud-black-hole"]
    out["clamp"] = [("c→s " if x["direction"] == "client-to-server" else "s→c ")
                    + x["title"].split(":")[-1].strip()
                    for x in r["findings"] if x["id"] == "mss-clamped"]
    out["stall"] = "bulk-download-stall-down" in f and f["bulk-download-stall-down"]["status"] == "fail"
    fixes = []
    for x in r["findings"]:
        if x["status"] in ("fail", "warn"):
            fixes += [c["command"] for c in x.get("remedies", []) if c.get("command")]
    out["fixes"] = fixes
    out["statuses"] = {k: x["status"] for k, x in f.items()}
    return out

print(json.dumps({"scenario": scen, "round": int(rnd), "rev_addr": rev_addr, "rev_note": rev_note,
                  "t": {"tp_fwd": float(t_tf), "tp_rev": float(t_tr), "pd": float(t_pd),
                        "pd_mtu_only": float(t_pm)},
                  "exit": {"pd": int(rc_pd), "pd_mtu_only": int(rc_pm)},
                  "tp_fwd": tracepath(p + ".tp-fwd"), "tp_rev": tracepath(p + ".tp-rev"),
                  "pd": pathdoc(p + ".pd"), "pd_mtu_only": pathdoc(p + ".pdm")}))
EOF
  done
  kill "$(cat "$pidfile")" 2>/dev/null || true
  pidfile=""
  "$PATHDOC" lab down "$LAB" >/dev/null
  LAB=""
done

echo
echo "raw tracepath output (round 1):"
python3 - "$RESULTS" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["round"] != 1:
        continue
    print(f"--- {r['scenario']}: client$ tracepath -n {'203.0.113.10'}")
    print(r["tp_fwd"]["raw"].rstrip())
    print(f"--- {r['scenario']}: server$ tracepath -n {r['rev_addr']}   ({r['rev_note']})")
    print(r["tp_rev"]["raw"].rstrip())
EOF

echo
python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
from collections import OrderedDict
runs = OrderedDict()
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["scenario"], []).append(r)

def med(rs, k):
    return statistics.median(r["t"][k] for r in rs)

def tp_cell(t):
    if t["send_failed"]:
        return "no route (send failed)"
    s = f"{t['pmtu']}" if t["pmtu"] else "?"
    if not t["reached"]:
        s += f", not reached ({t['no_reply']}x no reply)"
    return s

def pd_dir(d):
    if d["mtu"] is None:
        return d["kind"] or "?"
    return f"{d['mtu']} {d['kind']}"

def pd_hop(x):
    hs = []
    for d, name in (("up", "c→s"), ("down", "s→c")):
        if x[d]["hop"] is not None and x[d]["kind"] in ("black-hole", "signalled", "bad-suggestion"):
            hs.append(f"{name} hop {x[d]['hop']} ({x[d]['addr']})")
    return "; ".join(hs) or "-"

rows = []
hdr = ["scenario", "tool", "wall s", "fwd PMTU (c→s)", "rev PMTU (s→c)", "black hole",
       "MTU drop located", "MSS clamp", "fix given"]
for scen, rs in runs.items():
    r = rs[0]
    consistent = all(json.dumps(x["pd"]["black_hole"]) == json.dumps(r["pd"]["black_hole"])
                     and x["pd"]["up"]["mtu"] == r["pd"]["up"]["mtu"]
                     and x["pd"]["down"]["mtu"] == r["pd"]["down"]["mtu"] for x in rs)
    tf, tr = r["tp_fwd"], r["tp_rev"]
    rows.append([scen, "tracepath c→s", f"{med(rs, 'tp_fwd'):.2f}", tp_cell(tf), "-",
                 "not reported", tf["drop_hop"] if tf["drop_hop"] else "-", "not seen", "-"])
    rows.append(["", f"tracepath s→{r['rev_note']}", f"{med(rs, 'tp_rev'):.2f}", "-",
                 tp_cell(tr) + ("" if r["rev_note"] == "client" else f" [to {r['rev_addr']}]"),
                 "not reported", tr["drop_hop"] if tr["drop_hop"] else "-", "not seen", "-"])
    for key, label in (("pd", "pathdoc --mtu"), ("pd_mtu_only", "pathdoc mtu-only")):
        x = r[key]
        if "error" in x:
            rows.append(["", label, f"{med(rs, key):.2f}", "error: " + x["error"][:40], "", "", "", "", ""])
            continue
        bh = ", ".join({"up": "c→s", "down": "s→c"}[d] for d in x["black_hole"]) or "no"
        if x["stall"]:
            bh += " + stall"
        clamp = "; ".join(x["clamp"]) or \
            ("skipped" if key == "pd_mtu_only" else "no")
        fix = x["fixes"][0] if x["fixes"] else "-"
        if len(x["fixes"]) > 1:
            fix += f" (+{len(x['fixes']) - 1})"
        rows.append(["", label + ("" if consistent else " *"), f"{med(rs, key):.2f}",
                     pd_dir(x["up"]), pd_dir(x["down"]), bh, pd_hop(x), clamp, fix])

w = [max(len(str(row[i])) for row in rows + [hdr]) for i in range(len(hdr))]
def show(row):
    print("| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(row)) + " |")
show(hdr)
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for row in rows:
    show(row)

print()
print("wall-time ratios (medians): pathdoc / tracepath")
print(f"| {'scenario':<18} | {'pd / tp c→s':>11} | {'pd / (tp c→s + s→c)':>19} | {'mtu-only / tp c→s':>17} | {'mtu-only / (both)':>17} |")
print(f"|{'-'*20}|{'-'*13}|{'-'*21}|{'-'*19}|{'-'*19}|")
for scen, rs in runs.items():
    f, b = med(rs, "tp_fwd"), med(rs, "tp_fwd") + med(rs, "tp_rev")
    p, m = med(rs, "pd"), med(rs, "pd_mtu_only")
    print(f"| {scen:<18} | {p / f:11.3g} | {p / b:19.3g} | {m / f:17.3g} | {m / b:17.3g} |")
print("(* = pathdoc's verdict differed between rounds; see the per-round lines)")
EOF
