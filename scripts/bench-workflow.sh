#!/usr/bin/env bash
# A workflow's fan-in beside a plain queue (issue 37's "Done when": 1,000
# parents -> 1 join, in items/s beside a plain queue), side by side in one
# run on a throwaway PostgreSQL cluster (the installed pg_workfence,
# preloaded):
#
#   scripts/bench-workflow.sh [--parents N] [--workers W] [--rounds R] [--out FILE]
#
#   --parents N   parents of the join, and items of the plain queue less one (default 1000)
#   --workers W   worker connections (default 4)
#   --rounds R    rounds; each runs both kinds, in alternating order (default 5)
#   --out FILE    the report, markdown (default target/bench-workflow.md)
#
# - plain: N + 1 items in one queue, nothing between them.
# - fan-in: N parents in queue `p`, and a join in queue `j` enqueued with
#   `after` naming all N (waiting until the last parent's finish).
# Each worker is one connection running the procedure bench_work: claim one
# item of each queue in turn (`work_claim`), finish it (`work_finish`) and
# COMMIT, a transaction per item, until the last item (the join, or the
# plain queue's last) is done; when nothing was claimable it long-polls the
# last queue for at most 5 ms (a finish wakes it). Timed: from the workers'
# start to the last one's end. items/s = (N + 1) / time; the table gives
# each kind's median over the rounds and the ratio fan-in / plain. Every
# finish of a parent updates the join's row (its count of parents left),
# so the join's row lock orders the parents' commits: that is the cost
# measured.
#
# The machine is shared: compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=cluster.sh
. scripts/cluster.sh

parents=1000
workers=4
rounds=5
out="target/bench-workflow.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --parents) parents="$2"; shift 2 ;;
        --workers) workers="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: scripts/bench-workflow.sh [--parents N] [--workers W] [--rounds R] [--out FILE]" >&2; exit 2 ;;
    esac
done

dir="$(mktemp -d /tmp/bench-workflow.XXXXXX)"
chmod 755 "$dir"
port="$(free_port)"
cleanup() {
    as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
cluster_start "$dir/data" "$port"
as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
shared_preload_libraries = 'pg_workfence'
shared_buffers = '256MB'
max_connections = 50
EOF
as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -w -l "$dir/data/server.log" restart >/dev/null

sql() { as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"; }

sql <<'EOF'
CREATE EXTENSION pg_workfence;
-- One worker: claim an item of each queue in turn, finish it, commit;
-- until the item `stop` is done.
CREATE PROCEDURE public.bench_work(queues text[], stop bigint)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    q text;
    got boolean;
BEGIN
    LOOP
        got := false;
        FOREACH q IN ARRAY queues LOOP
            SELECT * INTO c FROM workfence.work_claim(q, 'w', '1 minute');
            IF FOUND THEN
                PERFORM workfence.work_finish(c.id, 'w', c.epoch);
                got := true;
            END IF;
            COMMIT;
        END LOOP;
        EXIT WHEN (SELECT i.state FROM workfence.items AS i WHERE i.id = stop) = 'done';
        IF NOT got THEN
            SELECT * INTO c FROM workfence.work_claim(queues[array_length(queues, 1)], 'w',
                                                      '1 minute', wait => '5 milliseconds');
            IF FOUND THEN
                PERFORM workfence.work_finish(c.id, 'w', c.epoch);
            END IF;
            COMMIT;
        END IF;
    END LOOP;
END
$$;
EOF

# run KIND ROUND: set up, run the workers, print "KIND seconds".
run() {
    local kind="$1" round="$2" stop queues
    if [ "$kind" = plain ]; then
        stop="$(sql -At -c "SELECT max(e.id) FROM generate_series(0, $parents) AS n
                              CROSS JOIN LATERAL workfence.work_enqueue('plain$round', pg_catalog.jsonb_build_object('n', n)) AS e")"
        queues="{plain$round}"
    else
        stop="$(sql -At -c "SELECT e.id FROM workfence.work_enqueue('j$round', '{}',
                              after => ARRAY(SELECT p.id FROM generate_series(1, $parents) AS n
                                             CROSS JOIN LATERAL workfence.work_enqueue('p$round', pg_catalog.jsonb_build_object('n', n)) AS p)) AS e")"
        queues="{p$round,j$round}"
    fi
    sql -c "VACUUM ANALYZE workfence.items" >/dev/null
    local start end pids=()
    start="$(date +%s.%N)"
    for _ in $(seq "$workers"); do
        sql -c "CALL public.bench_work('$queues', $stop)" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    end="$(date +%s.%N)"
    local done_count
    done_count="$(sql -At -c "SELECT count(*) FROM workfence.items WHERE state = 'done'
                                AND queue = ANY ('$queues'::text[])")"
    if [ "$done_count" != "$((parents + 1))" ]; then
        echo "bench-workflow: $kind round $round finished $done_count items, not $((parents + 1))" >&2
        exit 1
    fi
    echo "$kind $(echo "$end - $start" | bc -l)"
}

results="$dir/results"
: >"$results"
for round in $(seq "$rounds"); do
    if [ $((round % 2)) = 1 ]; then order="plain fanin"; else order="fanin plain"; fi
    for kind in $order; do
        line="$(run "$kind" "$round")"
        echo "round $round: $line s"
        echo "$line" >>"$results"
    done
done

mkdir -p "$(dirname "$out")"
python3 - "$results" "$parents" "$workers" "$rounds" >"$out" <<'EOF'
import statistics, sys
path, parents, workers, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
times = {"plain": [], "fanin": []}
for line in open(path):
    kind, seconds = line.split()
    times[kind].append(float(seconds))
items = parents + 1
rate = {k: statistics.median(items / t for t in v) for k, v in times.items()}
print(f"# Fan-in beside a plain queue: {parents} parents -> 1 join, {workers} workers, {rounds} rounds\n")
print("| kind | items | median items/s | each round's items/s |")
print("|---|---:|---:|---|")
for kind, label in (("plain", "plain queue"), ("fanin", f"fan-in ({parents} -> 1)")):
    each = ", ".join(f"{items / t:,.0f}" for t in times[kind])
    print(f"| {label} | {items} | {rate[kind]:,.0f} | {each} |")
print(f"\nfan-in / plain: {rate['fanin'] / rate['plain']:.2f}x")
EOF
cat "$out"
