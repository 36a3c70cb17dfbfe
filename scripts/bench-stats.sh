#!/usr/bin/env bash
# What reading a queue's statistics costs at scale (issue 36): the view
# work_queue_stats (the server's state counts, from 0.12.0), the view
# work_queue_stats_exact (every item counted, as work_queue_stats was until
# 0.11.0), work_queue_counters, and the dashboard's queues page, /metrics and
# a 404 for an unknown queue, at each size given (items in the table),
# side by side in one run; then work_purge of a long history: per call (at
# most 10,000 items, its own transaction) and the longest claim -> finish
# while it runs.
#
#   scripts/bench-stats.sh [--sizes 1000000,10000000] [--out FILE]
#
# The items are written straight into workfence.items by INSERT ... SELECT
# (as a restore would: 10 queues, 96% done, 2% failed, 1% cancelled, 0.5%
# pending of which half scheduled, 0.5% claimed), then the state counts are
# rebuilt once (queue_state_counts(rebuild => true), timed: what the first
# read after a restart costs). Every timing is the median of 5 reads (3 for
# the exact view); the machine is shared, so compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cluster.sh

sizes="1000000,10000000"
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: $0 [--sizes N,M] [--out FILE]" >&2; exit 2 ;;
    esac
done

stage() { echo "==> [$(date +%H:%M:%S)] $*" >&2; }

scratch="$(scratch_base "$PWD")/bench-stats"
dir="$scratch/data"
rm -rf "$scratch"
mkdir -p "$scratch"
chown postgres "$scratch"
port="$(free_port)"
cluster_start "$dir" "$port"
echo "shared_preload_libraries = 'pg_workfence'" >> "$dir/postgresql.conf"
echo "shared_buffers = '512MB'" >> "$dir/postgresql.conf"
cluster_stop "$dir"
cluster_start "$dir" "$port"
trap 'cluster_stop "$dir"; [ -n "${ui_pid:-}" ] && kill "$ui_pid" 2>/dev/null; rm -rf "$scratch"' EXIT

psql_q() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"; }
psql_q -c "CREATE EXTENSION pg_workfence"

# ms SQL [N]: the median wall time of N runs of SQL, in milliseconds.
ms() {
    local sql="$1" n="${2:-5}"
    python3 - "$port" "$sql" "$n" "$PG_BIN/psql" <<'PY'
import subprocess, sys, time, statistics
port, sql, n, psql = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# One session: \timing reports the server round trip of each statement.
script = "\\timing on\n" + "\n".join([sql + ";"] * n) + "\n"
out = subprocess.run([psql, "-X", "-q", "-h", "127.0.0.1", "-p", port, "-U", "postgres",
                      "-d", "postgres", "-o", "/dev/null"], input=script, text=True,
                     capture_output=True, check=True).stdout
times = [float(l.split()[1]) for l in out.splitlines() if l.startswith("Time:")]
print(f"{statistics.median(times):.1f}")
PY
}

# The dashboard, on a port of its own.
cargo build -q --release -p workfence-ui
ui_port="$(free_port)"
target/release/workfence-ui --dsn "host=127.0.0.1 port=$port dbname=postgres user=postgres" \
    --listen "127.0.0.1:$ui_port" > "$scratch/ui.log" 2>&1 &
ui_pid=$!
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$ui_port/" && break
    sleep 0.1
done
# http PATH: the median time of 5 GETs of PATH, in milliseconds.
http() {
    local path="$1" t=()
    for _ in 1 2 3 4 5; do
        t+=("$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$ui_port$path")")
    done
    printf '%s\n' "${t[@]}" | sort -n | sed -n 3p | awk '{printf "%.1f", $1 * 1000}'
}

rows=()
loaded=0
IFS=, read -ra wanted <<< "$sizes"
for size in "${wanted[@]}"; do
    stage "loading items up to $size"
    psql_q <<SQL
INSERT INTO workfence.items (queue, key, payload, run_at, state, attempts, max_attempts, owner, epoch,
                             lease_until, finished_at, claimed_at, created_at)
SELECT 'q' || (g % 10), 'k' || g, '{"n": 1}', now() - interval '1 day' + CASE WHEN g % 400 = 1 THEN interval '2 days' ELSE interval '0' END,
       s.state, 1, 25, CASE WHEN s.state <> 'pending' THEN 'w' END, CASE WHEN s.state <> 'pending' THEN g END,
       CASE WHEN s.state = 'claimed' THEN now() + interval '1 hour' END,
       CASE WHEN s.state IN ('done', 'failed', 'cancelled') THEN now() - interval '1 day' + g * interval '1 microsecond' END,
       CASE WHEN s.state <> 'pending' THEN now() - interval '1 day' END,
       now() - interval '1 day'
  FROM pg_catalog.generate_series($((loaded + 1)), $size) AS g
 CROSS JOIN LATERAL (SELECT (CASE WHEN g % 200 = 0 OR g % 400 = 1 THEN 'pending'
                                  WHEN g % 200 = 2 THEN 'claimed'
                                  WHEN g % 50 = 3 THEN 'failed'
                                  WHEN g % 100 = 5 THEN 'cancelled'
                                  ELSE 'done' END)::workfence.item_state AS state) AS s;
VACUUM ANALYZE workfence.items;
SQL
    loaded="$size"
    stage "$size items: rebuild, then the reads"
    rebuild="$(ms "SELECT count(*) FROM workfence.queue_state_counts(rebuild => true)" 1)"
    stats="$(ms "SELECT count(*) FROM workfence.work_queue_stats")"
    exact="$(ms "SELECT count(*) FROM workfence.work_queue_stats_exact" 3)"
    counters="$(ms "SELECT count(*) FROM workfence.work_queue_counters")"
    page="$(http /)"
    queue_page="$(http /queues/q1)"
    metrics="$(http /metrics)"
    missing="$(http /queues/no-such-queue)"
    rows+=("| $size | $stats | $exact | $counters | $rebuild | $page | $queue_page | $metrics | $missing |")
done

stage "purge: every done item, in calls of at most 10,000"
wal_before="$(psql_q -c "SELECT pg_current_wal_lsn()")"
purge="$(python3 - "$port" "$PG_BIN/psql" <<'PY'
import subprocess, sys, time, statistics
port, psql = sys.argv[1], sys.argv[2]
script = "\\timing on\n" + "SELECT workfence.work_purge('0');\n" * 40
out = subprocess.run([psql, "-X", "-q", "-At", "-h", "127.0.0.1", "-p", port, "-U", "postgres",
                      "-d", "postgres"], input=script, text=True, capture_output=True, check=True).stdout
lines = out.splitlines()
counts = [int(l) for l in lines if l.isdigit()]
times = [float(l.split()[1]) for l in lines if l.startswith("Time:")]
print(f"{sum(counts)} {statistics.median(times):.0f} {max(times):.0f}")
PY
)"
wal_after="$(psql_q -c "SELECT pg_current_wal_lsn()")"
wal="$(psql_q -c "SELECT pg_size_pretty(pg_wal_lsn_diff('$wal_after', '$wal_before') / 40)")"

{
    echo "# Statistics at scale ($(date -u +%Y-%m-%d), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), preloaded)"
    echo
    echo "Median milliseconds per read, side by side in one run; \`work_queue_stats_exact\` is what"
    echo "\`work_queue_stats\` was until 0.11.0. The rebuild is the first read after a restart."
    echo
    echo "| items | work_queue_stats | work_queue_stats_exact | work_queue_counters | rebuild | / (queues) | /queues/q1 | /metrics | 404 |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    read -r purged med longest <<< "$purge"
    echo "work_purge of the history, 40 calls: $purged items, median $med ms per call (longest $longest ms), WAL $wal per call."
} | tee ${out:+"$out"}

# --- the cycle beside scraping and beside a purge ---------------------------
# 8 connections offer claim -> finish at a fixed 1,000 cycles/s (pgbench -R,
# prepared) on a queue of fresh items, 15 s a phase: alone, beside one
# connection reading work_queue_stats back to back (a scraper with no
# pause), beside one reading work_queue_stats_exact (what every read cost
# until 0.11.0), and beside one calling work_purge of the history back to
# back; per phase the cycle's completed rate, p50, p99 and longest (pgbench's
# per-transaction log, schedule lag included), and the reader's calls/s.
stage "the cycle beside scraping and a purge"
psql_q -c "SELECT count(*) FROM (SELECT workfence.work_enqueue('cycle') FROM pg_catalog.generate_series(1, 100000)) AS s" >/dev/null
echo "SELECT workfence.work_finish(c.id, 'w', c.epoch) FROM workfence.work_claim('cycle', 'w', '1 minute') AS c;" > "$scratch/cycle.sql"
chmod 644 "$scratch/cycle.sql"
# phase NAME SQL: the cycle for 15 s while SQL (if any) runs back to back.
phase() {
    local name="$1" sql="$2" side="" reads="-"
    rm -f "$scratch"/pgbench_log.* "$scratch/side.out"
    if [ -n "$sql" ]; then
        echo "$sql;" > "$scratch/side.sql"
        chmod 644 "$scratch/side.sql"
        "$PG_BIN/pgbench" -n -M prepared -c 1 -T 15 -f "$scratch/side.sql" \
            -h 127.0.0.1 -p "$port" -U postgres postgres > "$scratch/side.out" 2>&1 &
        side=$!
    fi
    ( cd "$scratch" && "$PG_BIN/pgbench" -n -M prepared -c 8 -j 2 -R 1000 -T 15 -l -f "$scratch/cycle.sql" \
        -h 127.0.0.1 -p "$port" -U postgres postgres >/dev/null 2>&1 )
    if [ -n "$side" ]; then
        wait "$side" || true
        reads="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$scratch/side.out" | head -1 | xargs printf '%.1f')"
    fi
    cat "$scratch"/pgbench_log.* | python3 -c '
import sys
lat = sorted(int(l.split()[2]) / 1000 for l in sys.stdin if l.strip())
n = len(lat)
print(f"| {sys.argv[1]} | {sys.argv[2]} | {n / 15:.0f} | {lat[n // 2]:.2f} | {lat[int(n * 0.99)]:.2f} | {lat[-1]:.1f} |")
' "$name" "$reads"
}
cycle_rows=()
cycle_rows+=("$(phase "nothing" "")")
cycle_rows+=("$(phase "work_queue_stats" "SELECT count(*) FROM workfence.work_queue_stats")")
cycle_rows+=("$(phase "work_queue_stats_exact (0.11.0's work_queue_stats)" "SELECT count(*) FROM workfence.work_queue_stats_exact")")
cycle_rows+=("$(phase "work_purge('0')" "SELECT workfence.work_purge('0')")")
{
    echo
    echo "Claim -> finish offered at 1,000/s by 8 connections (pgbench -R, prepared), 15 s a phase,"
    echo "beside one connection running a call back to back:"
    echo
    echo "| beside | its calls/s | cycles/s done | p50 ms | p99 ms | longest ms |"
    echo "|---|---:|---:|---:|---:|---:|"
    printf '%s\n' "${cycle_rows[@]}"
} | tee -a ${out:+"$out"}
