#!/usr/bin/env bash
# Where a claim -> finish spends what the hand-written baseline does not
# (issue 15): counted, not timed, so the figures do not move with the
# machine's load. Not a test; it prints and writes docs/profile.md.
#
#   scripts/profile.sh [--out FILE] [--no-install]
#
# 1. Instructions per item (valgrind's callgrind, `postgres --single`: one
#    backend, no client, no network): the same 3,000 pending items in two
#    databases of one fresh cluster, pg_workfence's and the baseline's
#    (bench/sql/baseline.sql); N items processed by prepared statements
#    (the baseline's with generic plans, as the extension's own are), for
#    N = 100 and N = 600; (600's total - 100's) / 500 is one item, with the
#    backend's start and exit taken out. Three cycles: the baseline's claim
#    and finish (two statements, two transactions), pg_workfence's
#    work_claim and work_finish (the same), and work_finish_and_claim (one
#    statement and one transaction per item). The top executor and
#    extension functions of each, inclusive, from callgrind_annotate.
# 2. WAL per item by record type (pg_walinspect, PostgreSQL 15): 200
#    items of each cycle from psql on a running cluster with
#    full_page_writes off (records only, as the benchmark's cells, which no
#    checkpoint falls in, measure).
#
# It installs this checkout's release build unless --no-install.
set -euo pipefail
unset WORKFENCE_PG_CONFIG
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=majors.sh
. "$ROOT/scripts/majors.sh"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
PG_BIN="$("$PG15_CONFIG" --bindir)"

out="$ROOT/docs/profile.md"
install=1
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --no-install) install=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: scripts/profile.sh [--out FILE] [--no-install]" >&2; exit 2 ;;
    esac
done
# valgrind (callgrind, callgrind_annotate): Debian's package, installed here
# when missing (the test command does not need it).
if ! command -v callgrind_annotate >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null
fi
[ "$install" = 1 ] && bash scripts/install-build.sh 15 >/dev/null

# shellcheck source=cluster.sh
. scripts/cluster.sh
work="$(scratch_base "$ROOT")/profile"
rm -rf "$work"
mkdir -p "$work"
chown postgres "$work"
python3 scripts/profile_sql.py "$work"
chmod 644 "$work"/*.sql

# The fixture, kept stopped as a pristine copy: each callgrind run starts
# from it (ids and epochs 1, 2, 3, ... in claim order in both databases).
port="$(free_port)"
cluster_start "$work/pristine" "$port"
psql_() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/pristine" -p "$port" -U postgres "$@"; }
psql_ -d postgres -c "CREATE DATABASE wf" -c "CREATE DATABASE base" >/dev/null
psql_ -d wf -f "$work/fixture-wf.sql" >/dev/null
psql_ -d base -f bench/sql/baseline.sql -f "$work/fixture-base.sql" >/dev/null
cluster_stop "$work/pristine"

# counted NAME DB N: the instructions of a single-user backend running
# NAME-N.sql on a fresh copy of the fixture.
counted() {
    rm -rf "$work/data"
    cp -a "$work/pristine" "$work/data"
    runuser -u postgres -- valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$3" \
        "$PG_BIN/postgres" --single -D "$work/data" -c fsync=off -c synchronous_commit=off "$2" \
        < "$work/$1-$3.sql" > "$work/out.$1.$3" 2> "$work/err.$1.$3"
    if grep -q ERROR "$work/out.$1.$3"; then
        echo "profile: $1-$3.sql failed:" >&2
        grep -m3 ERROR "$work/out.$1.$3" >&2
        exit 1
    fi
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/err.$1.$3"
}
echo "cycle,instructions_per_item" > "$work/instructions.csv"
for cycle in base wf fused; do
    db=wf
    [ "$cycle" = base ] && db=base
    small="$(counted "$cycle" "$db" 100)"
    large="$(counted "$cycle" "$db" 600)"
    echo "$cycle,$(( (large - small) / 500 ))" >> "$work/instructions.csv"
    callgrind_annotate --inclusive=yes --threshold=100 "$work/cg.$cycle.600" 2>/dev/null > "$work/annotate.$cycle.txt"
done

# WAL per record type, on a running copy of the fixture.
rm -rf "$work/data"
cp -a "$work/pristine" "$work/data"
cluster_start "$work/data" "$port"
psql_() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/data" -p "$port" -U postgres "$@"; }
psql_ -d postgres -c "ALTER SYSTEM SET full_page_writes = off" -c "SELECT pg_catalog.pg_reload_conf()" >/dev/null
for cycle in base wf fused; do
    db=wf
    [ "$cycle" = base ] && db=base
    psql_ -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA public" >/dev/null
    psql_ -d "$db" -A -t -F, -f "$work/wal-$cycle.sql" | grep -E '^[A-Za-z0-9/+_]+,' > "$work/wal.$cycle.csv"
done
cluster_stop "$work/data"

python3 scripts/profile_sql.py --report "$work" > "$out"
cat "$out"
echo "wrote $out"
