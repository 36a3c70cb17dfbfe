#!/usr/bin/env bash
# Purging a long history before and after issue 36 (its "Done when": purging
# 2M rows, time, WAL and the longest claim meanwhile, before/after), side by
# side in one run on a throwaway PostgreSQL cluster (the installed
# pg_workfence, preloaded):
#
#   scripts/bench-purge.sh [--rows N] [--pending N] [--out FILE]
#
#   --rows N      finished items to purge, in each of the two purges (default 2000000)
#   --pending N   pending items of the queue the cycle loop drains (default 10000)
#   --out FILE    the report, markdown (default target/bench-purge.md)
#
# N done items of queue `history` (finished two days ago, a microsecond
# apart) are written straight into workfence.items by INSERT ... SELECT, as
# scripts/bench-stats.sh does; the pending items of queue `cycle` by
# work_enqueue; then VACUUM ANALYZE and the state counts rebuilt. Meanwhile,
# in every phase, one connection runs claim -> finish of `cycle` back to back
# (`SELECT ... FROM workfence.work_claim('cycle', 'w', '1 minute')`, then
# `SELECT workfence.work_finish(id, 'w', epoch)`, each its own transaction,
# as a worker does; each cycle then enqueues one item, untimed, so the
# backlog stays at --pending), and every cycle's latency is kept.
#
# - before: 0.11.0's purge, the statement of work_purge at 97f27d9 (the last
#   commit of 0.11.0, read from git at run time and printed in the report):
#   every finished item older than the cut-off deleted by ONE statement, in
#   one transaction.
# - after: the table rewritten (VACUUM FULL, so the second load lays the
#   items and indexes out as the first did), the same items loaded again,
#   then `SELECT workfence.work_purge('1 hour')` called until it returns 0
#   (each call its own transaction, at most 10,000 items).
# - nothing beside: the cycle loop alone for as long as the shorter of the two.
#
# Per phase: wall time, calls (median and longest), WAL (the difference of
# pg_current_wal_lsn() over the purge, so the cycles' WAL is in it; the
# report gives their share at the rate of the "nothing beside" phase), and
# the cycles that overlapped the purge: count, rate, p50, p99, longest.
# The cut-off is '1 hour' in both purges, not '0', so that the items the
# cycles finish are never purged: each purge deletes exactly the N loaded,
# and the loop of calls reaches 0 while the cycles go on.
#
# The cluster: shared_buffers 512MB (as bench-stats), autovacuum off (the
# VACUUMs are the script's, between phases, so no vacuum's WAL or CPU lands
# in one phase and not the other), max_wal_size 8GB and a CHECKPOINT before
# each phase (no checkpoint inside one; each starts with the same full-page
# writes), workfence.retention = -1 (the maintenance worker purges nothing).
# The machine is shared: compare within a run. Needs the venv of
# examples/python (psycopg; scripts/setup.sh --demo makes it, else
# examples/python/install.sh is run).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=cluster.sh
. scripts/cluster.sh

rows=2000000
pending=10000
out="target/bench-purge.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --rows) rows="$2"; shift 2 ;;
        --pending) pending="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: $0 [--rows N] [--pending N] [--out FILE]" >&2; exit 2 ;;
    esac
done
case "$rows$pending" in
    *[!0-9]*) echo "--rows and --pending take a number" >&2; exit 2 ;;
esac

# 0.11.0: packaging/previous-release.sh's commit while 0.12.0 was made.
OLD_COMMIT=97f27d971a7f214dff3508d745272f42db5ff4a7
OLDER_THAN="1 hour"

stage() { echo "==> [$(date +%H:%M:%S)] $*" >&2; }

py="$PWD/examples/python/.venv/bin/python"
if ! "$py" -c 'import psycopg' 2>/dev/null; then
    bash examples/python/install.sh >&2
fi

scratch="$(scratch_base "$PWD")/bench-purge"
dir="$scratch/data"
rm -rf "$scratch"
mkdir -p "$scratch"
chown postgres "$scratch"
git show "$OLD_COMMIT:src/purge.rs" > "$scratch/purge-0.11.0.rs"
port="$(free_port)"
trap 'cluster_stop "$dir"; rm -rf "$scratch"' EXIT
cluster_start "$dir" "$port"
cat >> "$dir/postgresql.conf" <<'CONF'
shared_preload_libraries = 'pg_workfence'
shared_buffers = '512MB'
autovacuum = off
max_wal_size = '8GB'
checkpoint_timeout = '1h'
workfence.retention = -1
CONF
cluster_stop "$dir"
cluster_start "$dir" "$port"

psql_q() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"; }
psql_q -c "CREATE EXTENSION pg_workfence"
dsn="host=127.0.0.1 port=$port user=postgres dbname=postgres"

# load_history: N done items of queue history, then VACUUM ANALYZE, the
# state counts rebuilt (a hand DELETE or INSERT puts them off), and a
# CHECKPOINT; prints the items table's size with its indexes.
load_history() {
    psql_q <<SQL
INSERT INTO workfence.items (queue, key, payload, run_at, state, attempts, max_attempts, owner, epoch,
                             result, finished_at, claimed_at, created_at)
SELECT 'history', 'h' || g, '{"n": 1}', now() - interval '2 days', 'done', 1, 25, 'w', g,
       '{"ok": true}', now() - interval '2 days' + g * interval '1 microsecond',
       now() - interval '2 days', now() - interval '2 days'
  FROM pg_catalog.generate_series(1, $rows) AS g;
VACUUM ANALYZE workfence.items;
SELECT count(*) FROM workfence.queue_state_counts(rebuild => true) \g /dev/null
CHECKPOINT;
SQL
    psql_q -c "SELECT pg_total_relation_size('workfence.items')"
}

stage "loading $pending pending items (work_enqueue) and $rows finished ones"
psql_q -c "SELECT count(*) FROM (SELECT workfence.work_enqueue('cycle') FROM pg_catalog.generate_series(1, $pending)) AS s" >/dev/null
size_before="$(load_history)"

# The phases, and the report. driver before|after|nothing ARGS... writes the
# phase's figures (JSON) to stdout; driver report FILES... prints markdown.
driver() {
    "$py" - "$@" <<'PY'
import json, multiprocessing as mp, re, statistics, sys, time
import psycopg
from psycopg.types.numeric import Int8

def cycle_loop(dsn, ready, stop, path):
    """claim -> finish back to back until stop; (start, seconds) per cycle."""
    got = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        while not stop.is_set():
            t0 = time.monotonic()
            cur.execute("SELECT id, epoch FROM workfence.work_claim('cycle', 'w', '1 minute')")
            row = cur.fetchone()
            if row is not None:
                cur.execute("SELECT workfence.work_finish(%s, 'w', %s)", (Int8(row[0]), Int8(row[1])))
            t1 = time.monotonic()
            got.append((t0, t1 - t0, row is not None))
            # untimed: the backlog stays
            cur.execute("SELECT workfence.work_enqueue('cycle') IS NOT NULL")
            if len(got) == 200:
                ready.set()
    with open(path, "w") as f:
        json.dump(got, f)

def lsn(cur):
    return cur.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]

def run_phase(dsn, scratch, action):
    """The cycle loop around action(cur) -> (calls, deleted); the figures."""
    ready, stop = mp.Event(), mp.Event()
    path = f"{scratch}/cycles.json"
    loop = mp.Process(target=cycle_loop, args=(dsn, ready, stop, path))
    loop.start()
    if not ready.wait(60):
        sys.exit("the cycle loop did not start")
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        l0 = lsn(cur)
        t0 = time.monotonic()
        calls, deleted = action(cur)
        t1 = time.monotonic()
        l1 = lsn(cur)
        wal = int(cur.execute("SELECT pg_wal_lsn_diff(%s, %s)", (l1, l0)).fetchone()[0])
    stop.set()
    loop.join()
    with open(path) as f:
        cycles = json.load(f)
    # the cycles that overlapped the purge
    during = sorted(d for s, d, claimed in cycles if s < t1 and s + d > t0)
    empty = sum(1 for s, d, claimed in cycles if s < t1 and s + d > t0 and not claimed)
    n = len(during)
    return {
        "seconds": t1 - t0, "calls": calls, "deleted": deleted, "wal": wal,
        "cycles": n, "empty_claims": empty,
        "p50": statistics.median(during) * 1000 if n else None,
        "p99": during[min(n - 1, int(n * 0.99))] * 1000 if n else None,
        "longest": during[-1] * 1000 if n else None,
    }

def old_statement(source, older_than):
    """0.11.0's PURGE statement, its parameters as literals (as a custom plan has them)."""
    sql = re.search(r'static PURGE: Statement<PurgeParams> = Statement::new\(\s*r#"(.*?)"#', source, re.S).group(1)
    sql = sql.replace("$1", "'" + older_than + "'::pg_catalog.interval").replace("$2", "NULL::pg_catalog.text")
    return sql.strip()

mode = sys.argv[1]
if mode == "before":
    dsn, scratch, older_than, source = sys.argv[2:6]
    sql = old_statement(open(source).read(), older_than)
    def action(cur):
        t = time.monotonic()
        n = cur.execute(sql).fetchone()[0]
        return [time.monotonic() - t], n
    fig = run_phase(dsn, scratch, action)
    fig["statement"] = sql
    print(json.dumps(fig))
elif mode == "after":
    dsn, scratch, older_than = sys.argv[2:5]
    def action(cur):
        calls, deleted = [], 0
        while True:
            t = time.monotonic()
            n = cur.execute("SELECT workfence.work_purge(%s::interval)", (older_than,)).fetchone()[0]
            calls.append(time.monotonic() - t)
            deleted += n
            if n == 0:
                return calls, deleted
    print(json.dumps(run_phase(dsn, scratch, action)))
elif mode == "nothing":
    dsn, scratch, seconds = sys.argv[2], sys.argv[3], float(sys.argv[4])
    print(json.dumps(run_phase(dsn, scratch, lambda cur: (time.sleep(seconds), ([], 0))[1])))
elif mode == "report":
    before, after, nothing = (json.load(open(p)) for p in sys.argv[2:5])
    rows, pending, size1, size2, version, date, older_than, commit = sys.argv[5:13]
    mib = lambda b: f"{b / 1048576:,.1f} MiB"
    ms = lambda x: f"{x:,.1f}" if x is not None else "-"
    per_cycle = nothing["wal"] / nothing["cycles"]
    def col(p):
        deleting = sum(1 for c in p["calls"]) - (1 if p is after else 0)
        calls = sorted(p["calls"])
        return {
            "deleted": f"{p['deleted']:,}",
            "wall": f"{p['seconds']:,.2f}",
            "txns": f"{len(calls):,}" + (f" ({deleting:,} deleting, the last returned 0)" if p is after else ""),
            "median": ms(statistics.median(calls) * 1000),
            "longest_call": ms(calls[-1] * 1000),
            "wal": mib(p["wal"]),
            "wal_per": mib(p["wal"] / max(deleting, 1)),
            "cycles_wal": mib(p["cycles"] * per_cycle),
            "purge_wal": mib(p["wal"] - p["cycles"] * per_cycle),
        }
    b, a = col(before), col(after)
    cyc = lambda p, k: f"{p[k]:,.2f}" if p[k] is not None else "-"
    table = [
        ("items deleted", b["deleted"], a["deleted"], "-"),
        ("wall time, s", b["wall"], a["wall"], f"{nothing['seconds']:,.2f}"),
        ("transactions (calls)", b["txns"], a["txns"], "-"),
        ("median call, ms", b["median"], a["median"], "-"),
        ("longest call, ms", b["longest_call"], a["longest_call"], "-"),
        ("WAL, pg_current_wal_lsn() difference (the cycles' included)", b["wal"], a["wal"], mib(nothing["wal"])),
        ("WAL per deleting transaction", b["wal_per"], a["wal_per"], "-"),
        ("of the WAL, the cycles' (at the nothing-beside rate)", b["cycles_wal"], a["cycles_wal"], mib(nothing["wal"])),
        ("WAL less the cycles'", b["purge_wal"], a["purge_wal"], "-"),
        ("cycles done meanwhile", f"{before['cycles']:,}", f"{after['cycles']:,}", f"{nothing['cycles']:,}"),
        ("cycles/s", *(f"{p['cycles'] / p['seconds']:,.0f}" for p in (before, after, nothing))),
        ("cycle p50, ms", cyc(before, "p50"), cyc(after, "p50"), cyc(nothing, "p50")),
        ("cycle p99, ms", cyc(before, "p99"), cyc(after, "p99"), cyc(nothing, "p99")),
        ("longest cycle, ms", ms(before["longest"]), ms(after["longest"]), ms(nothing["longest"])),
    ]
    empty = before["empty_claims"] + after["empty_claims"] + nothing["empty_claims"]
    print(f"# Purging {int(rows):,} finished items, before and after issue 36 ({date}, PostgreSQL {version}, preloaded)")
    print()
    print(f"{int(rows):,} done items of queue `history` beside {int(pending):,} pending of queue `cycle`; one connection")
    print("runs claim -> finish of `cycle` back to back (two statements, two transactions; then one untimed")
    print("enqueue, so the backlog stays), its cycles counted while they overlap the purge. Before: 0.11.0's")
    print(f"purge statement (`src/purge.rs` at {commit[:7]}, below), one statement and one transaction. After: the")
    print(f"table rewritten (VACUUM FULL) and the same items loaded again, `SELECT workfence.work_purge('{older_than}')`")
    print("called until it returns 0 (each call its own transaction, at most 10,000 items). Nothing beside: the")
    print("cycle loop alone for the shorter phase's time. Autovacuum off, a CHECKPOINT before each phase, fsync off.")
    print(f"Items table with its indexes before each purge: {mib(int(size1))}, {mib(int(size2))}.")
    print()
    print(f"| | before: 0.11.0's purge, one statement | after: `work_purge('{older_than}')` until 0 | nothing beside |")
    print("|---|---:|---:|---:|")
    for r in table:
        print("| " + " | ".join(r) + " |")
    if empty:
        print()
        print(f"{empty} claims came back empty (counted as cycles).")
    print()
    print("The statement run before (0.11.0's, parameters as literals: `$1` older_than, `$2` queue NULL):")
    print()
    print("```sql")
    print(before["statement"])
    print("```")
PY
}

stage "before: 0.11.0's purge statement, one transaction, beside the cycle loop"
driver before "$dsn" "$scratch" "$OLDER_THAN" "$scratch/purge-0.11.0.rs" > "$scratch/before.json"

stage "reloading $rows finished items"
# Rewritten first, so the second load meets the table (and its indexes) as
# compact as the first did: loaded into a table whose 2M rows a VACUUM
# had just removed, the table with its indexes came out 44% larger (534.4
# -> 770.0 MiB at 2M items).
psql_q -c "VACUUM FULL workfence.items"
size_after="$(load_history)"

stage "after: work_purge('$OLDER_THAN') until it returns 0, beside the cycle loop"
driver after "$dsn" "$scratch" "$OLDER_THAN" > "$scratch/after.json"

seconds="$("$py" -c 'import json, sys; print(round(min(json.load(open(p))["seconds"] for p in sys.argv[1:]), 2))' \
    "$scratch/before.json" "$scratch/after.json")"
stage "nothing beside: the cycle loop alone for $seconds s"
psql_q -c "VACUUM workfence.items" -c "CHECKPOINT"
driver nothing "$dsn" "$scratch" "$seconds" > "$scratch/nothing.json"

mkdir -p "$(dirname "$out")"
driver report "$scratch/before.json" "$scratch/after.json" "$scratch/nothing.json" \
    "$rows" "$pending" "$size_before" "$size_after" \
    "$("$PG_BIN/postgres" --version | awk '{print $3}')" "$(date -u +%Y-%m-%d)" "$OLDER_THAN" "$OLD_COMMIT" \
    | tee "$out"
