#!/usr/bin/env bash
# The README's benchmark command: pg_workfence against the hand-written SQL
# baseline and the peer queues (awa, graphile-worker, pg-boss, procrastinate),
# side by side on one throwaway PostgreSQL 15 cluster it starts itself.
#
#   scripts/bench.sh           default size (about 15 min on 2 cores): writes
#                              docs/benchmarks.md (between its figures markers),
#                              docs/benchmarks.csv and docs/benchmarks.png; then
#                              docs/long-poll.md, docs/router.md,
#                              docs/flow-control.md (.csv: serial groups and
#                              concurrency limits), docs/sustained.md (.csv,
#                              .png: 10 minutes of load) and
#                              docs/clients-bench.md (the worker libraries),
#                              docs/dashboard-render.md (the dashboard's pages
#                              on a million items), docs/enqueue.md (bulk and
#                              single-row enqueues against a plain INSERT),
#                              docs/pressure.md (a long transaction and
#                              REPEATABLE READ readers beside a steady load)
#   scripts/bench.sh --quick   a smoke run (under 2 min once built) into
#                              target/bench-quick/; scripts/test.sh runs it
#   --no-clients-bench         leave out the worker libraries' overhead
#                              (scripts/client-bench.sh; scripts/test.sh runs
#                              it in its other lane)
#
# Other flags go to the driver (bench/src/main.rs): --reps N, --no-peers,
# --workloads 1,2,..., --out DIR. It installs what it runs: the extension
# (release build) unless --no-install (scripts/test.sh has just installed
# it), and the peers at the versions their lock files pin
# (bench/peers/*/install.sh; the Node.js runners need Node.js 20 or newer).
set -euo pipefail
# This script installs into and runs Debian's PostgreSQL 15; a
# WORKFENCE_PG_CONFIG exported for the PG 18 tier must not point the
# clusters (scripts/cluster.sh, the harness) at another major.
unset WORKFENCE_PG_CONFIG
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

out="$ROOT/docs"
quick=0
install=1
clients_bench=1
args=()
prev=""
for arg in "$@"; do
    case "$arg" in
        --quick) out="$ROOT/target/bench-quick" quick=1 ;;
    esac
    [ "$prev" = "--out" ] && out="$arg"
    prev="$arg"
    case "$arg" in
        --no-install) install=0 ;;
        --no-clients-bench) clients_bench=0 ;;
        *) args+=("$arg") ;;
    esac
done

stage() { printf '\n==> [%s] %s\n' "$(date +%T)" "$*"; }

if [ "$install" = 1 ]; then
    stage "setup"
    bash scripts/setup.sh
    stage "install the extension (the dist profile, as packaged)"
    cargo pgrx install --profile dist --pg-config "$PG_CONFIG"
fi
stage "install the peers"
bash bench/peers/node/install.sh
bash bench/peers/python/install.sh
# A smoke run's figures are not measurements: awa's runner is built
# unoptimised for it, apart from the measured one (bench/peers/awa/install.sh).
if [ "$quick" = 1 ]; then
    bash bench/peers/awa/install.sh --smoke
else
    bash bench/peers/awa/install.sh
fi
stage "build the driver"
cargo build --release --locked -p workfence-bench -p workfence-ui

# shellcheck source=cluster.sh
. scripts/cluster.sh
scratch="$(scratch_base "$ROOT")/bench"
mkdir -p "$scratch" "$out"
stage "run -> $out"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-bench --out "$out" "${args[@]}"
bench/peers/python/.venv/bin/python bench/plot.py "$out/benchmarks.csv" "$out/benchmarks.png"
# The long poll with many workers (herd) and beside churning workers
# (horizon): docs/long-poll.md, or target/bench-quick/long-poll.md.
lp_args=()
case " $* " in *" --quick "*) lp_args+=(--quick) ;; esac
stage "long poll: herd and horizon -> $out/long-poll.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-long-poll "${lp_args[@]}" --out "$out/long-poll.md"
# The PL/Proxy router (router/install.sql): claim -> finish through a router
# against direct to its shard, and through routers of 1, 2 and 4 shards:
# docs/router.md, or target/bench-quick/router.md.
stage "router: overhead and shards -> $out/router.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-router-bench "${lp_args[@]}" --out "$out/router.md"
# Flow control (0.10.0, issue 17): claim -> finish on a queue whose items are
# spread over 1, 100 and 10,000 serial groups, on one with a concurrency limit
# of 10 and 100 at 4,000, 20,000 and 100,000 pending items, one hot group
# drained by one worker, a burst of one group ahead of 1,000 others, the
# fairness of claims to small groups behind a big one (work_limit per_group),
# claims beside a million future or due items, and idle long pollers' CPU,
# each beside a baseline of the same run (about 10 min):
# docs/flow-control.md (.csv), or target/bench-quick/flow-control.md.
stage "flow control: groups and limits -> $out/flow-control.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-flow "${lp_args[@]}" --out "$out/flow-control.md"
# Sustained load (issue 15): a steady rate for 10 minutes on a cluster with
# autovacuum on at its defaults; items/s, claim p50/p99, backlog, table and
# index sizes, dead tuples and autovacuums per minute: docs/sustained.md
# (.csv, .png), or target/bench-quick/sustained.md (3 "minutes" of 5 s).
stage "sustained load -> $out/sustained.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-sustained "${lp_args[@]}" --out "$out/sustained.md"
bench/peers/python/.venv/bin/python bench/plot_sustained.py "$out/sustained.csv" "$out/sustained.png"
# Pressure (issue 38): at a fixed offered rate, phases clean -> idle in
# transaction (one session holding an xid) -> recovery -> 4 REPEATABLE READ
# readers holding snapshots -> recovery, pg_workfence then the hand-written
# baseline on fresh databases (about 16 min: phases of 90 s); per phase
# completions/s, end-to-end and claim p50/p99, backlog, dead tuples, heap and
# index size, WAL per item: docs/pressure.md, or target/bench-quick/pressure.md
# (phases of 4 s).
stage "pressure: a long transaction and readers -> $out/pressure.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-pressure "${lp_args[@]}" --out "$out/pressure.md"
# The worker libraries' overhead (issue 16): items/s through each library's
# runner against the same loop in raw SQL calls: docs/clients-bench.md, or
# target/bench-quick/clients-bench.md.
if [ "$clients_bench" = 1 ]; then
    stage "worker libraries' overhead -> $out/clients-bench.md"
    bash scripts/client-bench.sh "${lp_args[@]}" --out "$out/clients-bench.md"
fi
# Enqueueing (issue 38): work_enqueue_many and work_enqueue per row against a
# plain INSERT ... SELECT of the same rows, and single-row enqueues from 8
# connections (NOTIFY on and off) against a plain INSERT, rounds alternating:
# docs/enqueue.md, or target/bench-quick/enqueue.md.
stage "enqueue: bulk and single rows -> $out/enqueue.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-enqueue "${lp_args[@]}" --out "$out/enqueue.md"
# The dashboard (issue 18): every page of workfence-ui timed on a queue of a
# million items (20,000 in --quick): docs/dashboard-render.md, or
# target/bench-quick/dashboard-render.md.
stage "dashboard render times -> $out/dashboard-render.md"
WORKFENCE_SCRATCH="$scratch" target/release/workfence-ui-bench "${lp_args[@]}" --out "$out/dashboard-render.md"
written="benchmarks.md, benchmarks.csv, benchmarks.png, long-poll.md, router.md, flow-control.md, flow-control.csv, sustained.md, sustained.csv, sustained.png, pressure.md, enqueue.md"
if [ "$clients_bench" = 1 ]; then
    written+=", clients-bench.md"
fi
stage "wrote into $out: $written, dashboard-render.md"
