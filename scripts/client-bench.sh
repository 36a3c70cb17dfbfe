#!/usr/bin/env bash
# usage: scripts/client-bench.sh [--quick] [--out FILE]
#
# The worker libraries' overhead (issue 16): items/s through each library's
# worker runner (clients/python, clients/node, clients/rust) against the same
# loop written as raw SQL calls in the same language (work_claim of a batch,
# work_finish per item, one connection, concurrency 1), side by side in one
# run on one throwaway PostgreSQL 15 cluster this script starts and stops.
# Each language's program (clients/<lang>/bench.*) alternates which mode goes
# first per round; the table gives the medians and their ratio.
#
#   --quick     200 items, 3 rounds (a smoke run; scripts/test.sh runs it)
#   --out FILE  where the Markdown table goes (default docs/clients-bench.md,
#               target/bench-quick/clients-bench.md with --quick)
#
# Needs the extension installed and clients/<lang>/install.sh run
# (scripts/setup.sh runs them). The figures are printed, not asserted.
set -euo pipefail
unset WORKFENCE_PG_CONFIG
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

items=3000
rounds=7
batch=10
out="$ROOT/docs/clients-bench.md"
out_given=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --quick)
            items=200
            rounds=3
            [ "$out_given" = 1 ] || out="$ROOT/target/bench-quick/clients-bench.md"
            ;;
        --out)
            out="$2"
            out_given=1
            shift
            ;;
        -h | --help)
            sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
            exit 0
            ;;
        *)
            echo "scripts/client-bench.sh: unknown argument '$1'" >&2
            exit 2
            ;;
    esac
    shift
done

cargo build --release --locked -p workfence --bin workfence-client-bench

# shellcheck source=cluster.sh
. scripts/cluster.sh
dir="$(scratch_base "$ROOT")/client-bench/cluster-$$"
cleanup() {
    cluster_stop "$dir" || true
    rm -rf "$dir"
}
trap cleanup EXIT
cluster_with_extension "$dir" workfence_bench
dsn="$CLUSTER_DSN"

lines="$(mktemp)"
trap 'cleanup; rm -f "$lines"' EXIT
bench_args=(--dsn "$dsn" --items "$items" --rounds "$rounds" --batch "$batch")
echo "[client-bench] python" >&2
clients/python/.venv/bin/python clients/python/bench.py "${bench_args[@]}" | tee -a "$lines"
echo "[client-bench] node" >&2
node clients/node/bench.js "${bench_args[@]}" | tee -a "$lines"
echo "[client-bench] rust" >&2
target/release/workfence-client-bench "${bench_args[@]}" | tee -a "$lines"

mkdir -p "$(dirname "$out")"
python3 - "$lines" "$items" "$rounds" "$batch" >"$out" <<'PY'
import re, statistics, sys
path, items, rounds, batch = sys.argv[1], *sys.argv[2:]
pattern = re.compile(r"^bench lang=(\w+) mode=(raw|library) round=(\d+) items=(\d+) "
                     r"seconds=([0-9.]+) items_per_s=([0-9.]+)$")
runs = {}
for line in open(path):
    match = pattern.match(line.strip())
    if not match:
        sys.exit(f"client-bench: unreadable line {line!r}")
    lang, mode = match[1], match[2]
    runs.setdefault(lang, {}).setdefault(mode, []).append(float(match[6]))
print(f"Items/s through each worker library against the same loop in raw SQL calls "
      f"({items} items, batch {batch}, concurrency 1, {rounds} rounds, medians; "
      f"`scripts/client-bench.sh`).\n")
print("| library | raw SQL items/s (range) | library items/s (range) | library / raw |")
print("|---|---:|---:|---:|")
for lang in ("python", "node", "rust"):
    modes = runs.get(lang, {})
    if len(modes.get("raw", [])) != int(rounds) or len(modes.get("library", [])) != int(rounds):
        sys.exit(f"client-bench: {lang} printed {modes} rather than {rounds} rounds of each mode")
    raw, lib = statistics.median(modes["raw"]), statistics.median(modes["library"])
    print(f"| {lang} | {raw:.0f} ({min(modes['raw']):.0f}–{max(modes['raw']):.0f}) "
          f"| {lib:.0f} ({min(modes['library']):.0f}–{max(modes['library']):.0f}) | {lib / raw:.2f} |")
print()
print("Both modes make the same two calls per item on the same server (a claim of a batch, a "
      "`work_finish` per item). The raw loop does nothing else; the library also runs the handler "
      "as a task of its own with its cancellation wired to the heartbeat (which renews and "
      "LISTENs on a second connection), logs a claim and a finish line per item, and keeps the "
      "buffer and the held set. A real job's own time dwarfs either.")
PY
cat "$out"
