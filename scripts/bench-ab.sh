#!/usr/bin/env bash
# Two builds of the extension side by side: the claim -> finish cycle of this
# checkout against an earlier revision's (a release), and what the refusal
# counters cost. Not a test (no figure is asserted); it prints and writes
# figures, measured in one run on one machine, with the builds alternating
# round by round so that drift on a shared machine hits both.
#
#   scripts/bench-ab.sh --base REV [--rounds N] [--parts LIST] [--quick] [--out FILE]
#
#   --base REV   the revision to compare with (e.g. the previous release's
#                commit); built in a worktree under target/ab/ (first run:
#                a full release build, several minutes on 2 cores)
#   --rounds N   rounds per build (default 3); each round installs the build
#                and runs workload 1 of workfence-bench once (1, 4, 16 and 64
#                connections, synchronous_commit on and off, the hand-written
#                baseline in the same run)
#   --parts LIST which parts, comma-separated (default all): speed (items/s,
#                as above), counters (part two), instructions (part three)
#                and grants (part four)
#   --quick      tiny sizes, one round: a smoke run of this script
#   --out FILE   where the report goes (default target/ab/report.md); it is
#                also printed
#
# Part two, the counters: pgbench calls work_renew with a stale token (a
# refusal, counted) and with the current token (the holder's hot path), for
# 10 s each, on a cluster with the library in shared_preload_libraries and
# on one without, alternating, same build.
#
# Part three, instructions: the machine's timings move by tens of percent
# between runs, so each build's CPU cost is also counted in instructions,
# which do not: `postgres --single` (one backend, no client) runs N claim ->
# finish cycles under valgrind's callgrind on a fresh cluster of 3,000
# items, for N = 100 and N = 600; (600's total - 100's) / 500 is one cycle,
# with the backend's start and exit taken out. The same for a refused and a
# current renew, with and without the counters (shared_preload_libraries);
# and the head build's claim -> finish as a role that is not a superuser,
# with queue grants off and on (the role granted `claim` on its queue); and
# (from 0.12.0) the head build's claim -> finish beside a schedule that is not
# due, on the queue and on another queue (the cost of the lazy fire's check).
#
# Part four, queue grants: pgbench runs claim -> finish (two statements,
# one transaction each) as a role granted `claim` on its queue, with
# queue grants enforced and not, for 10 s each, alternating, same build.
#
# The system-wide install is this checkout's build again when it ends.
set -euo pipefail
# This script installs into and runs Debian's PostgreSQL 15; a
# WORKFENCE_PG_CONFIG exported for the PG 18 tier must not point the
# clusters (scripts/cluster.sh, the harness) at another major.
unset WORKFENCE_PG_CONFIG
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=majors.sh
. "$ROOT/scripts/majors.sh"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG="$PG15_CONFIG"
PG_BIN="$("$PG_CONFIG" --bindir)"

base=""
rounds=3
quick=0
parts="speed,counters,instructions,grants"
out="$ROOT/target/ab/report.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --base) base="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --parts) parts="$2"; shift 2 ;;
        --quick) quick=1; rounds=1; shift ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$base" ]; then
    echo "usage: scripts/bench-ab.sh --base REV [--rounds N] [--parts LIST] [--quick] [--out FILE]" >&2
    exit 2
fi

stage() { printf '\n==> [%s] %s\n' "$(date +%T)" "$*"; }
part() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
ab="$ROOT/target/ab"
mkdir -p "$ab"

# --- build both into packages (a staging tree each) ------------------------
package() { # name dir
    local name="$1" dir="$2"
    stage "build $name ($(git -C "$dir" rev-parse --short HEAD)) as a package"
    # As the packages are built: the `dist` profile where the revision has
    # one (fat LTO), its release profile before it (fat LTO then too).
    local profile=()
    if grep -q '^\[profile\.dist\]' "$dir/Cargo.toml"; then
        profile=(--profile dist)
    fi
    (cd "$dir" && cargo pgrx package "${profile[@]}" --pg-config "$PG_CONFIG" --out-dir "$ab/$name/pkg" >/dev/null)
}
base_dir="$ab/base-src"
if [ ! -d "$base_dir" ] || [ "$(git -C "$base_dir" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$base^{commit}")" ]; then
    git worktree remove --force "$base_dir" 2>/dev/null || rm -rf "$base_dir"
    git worktree add --detach "$base_dir" "$base" >/dev/null
fi
rm -rf "$ab/base/pkg" "$ab/head/pkg"
package base "$base_dir"
package head "$ROOT"
base_version="$(crate_version "$base_dir")"
head_version="$(crate_version "$ROOT")"

install_build() { # name: copy its library, control file and scripts over the system's
    # The libraries are unlinked first: copied over in place, a library a
    # running server has mapped (another run's cluster that preloads it)
    # changes under it, and that server crashes (scripts/install-build.sh
    # does the same).
    local lib
    while IFS= read -r -d '' lib; do
        rm -f "/${lib#"$ab/$1/pkg/"}"
    done < <(find "$ab/$1/pkg" -name '*.so' -print0)
    cp -a "$ab/$1/pkg/." /
}

stage "build the driver"
cargo build --release --locked -p workfence-bench
# shellcheck source=cluster.sh
. scripts/cluster.sh
scratch="$(scratch_base "$ROOT")/bench-ab"
mkdir -p "$scratch"

# --- part one: claim -> finish, builds alternating -------------------------
size_args=()
[ "$quick" = 1 ] && size_args+=(--quick)
rm -rf "$ab/runs"
part speed && for round in $(seq 1 "$rounds"); do
    order="base head"
    [ $((round % 2)) = 0 ] && order="head base"
    for name in $order; do
        stage "round $round: $name"
        install_build "$name"
        WORKFENCE_SCRATCH="$scratch" target/release/workfence-bench --no-peers --workloads 1 \
            --reps 1 "${size_args[@]}" --out "$ab/runs/$name-$round" >/dev/null
    done
done

# --- part two: what counting a refusal costs -------------------------------
install_build head
counters_csv="$ab/counters.csv"
echo "round,preload,call,tps" > "$counters_csv"
seconds=10
[ "$quick" = 1 ] && seconds=2
part counters && for round in $(seq 1 "$rounds"); do
    for preload in on off; do
        dir="$scratch/counters-$preload"
        rm -rf "$dir"
        port="$(free_port)"
        cluster_start "$dir" "$port"
        if [ "$preload" = on ]; then
            echo "shared_preload_libraries = 'pg_workfence'" >> "$dir/postgresql.conf"
            cluster_stop "$dir"
            cluster_start "$dir" "$port"
        fi
        psql_c=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres)
        "${psql_c[@]}" -c "CREATE EXTENSION pg_workfence" \
            -c "SELECT workfence.work_enqueue('bench', key => 'k')" >/dev/null
        epoch="$("${psql_c[@]}" -At -c "SELECT epoch FROM workfence.work_claim('bench', 'w', '1 hour')")"
        id="$("${psql_c[@]}" -At -c "SELECT id FROM workfence.items WHERE key = 'k'")"
        for call in refused current; do
            e="$epoch"
            [ "$call" = refused ] && e=$((epoch - 1))
            printf "SELECT workfence.work_renew(%s, 'w', %s, '1 hour');\n" "$id" "$e" > "$dir/renew.sql"
            tps="$("$PG_BIN/pgbench" -n -M prepared -c 4 -j 2 -T "$seconds" \
                -h "$dir" -p "$port" -U postgres -f "$dir/renew.sql" postgres \
                | sed -n 's/^tps = \([0-9.]*\).*/\1/p')"
            echo "$round,$preload,$call,$tps" >> "$counters_csv"
        done
        if [ "$preload" = on ]; then
            refused="$("${psql_c[@]}" -At -c "SELECT refused FROM workfence.work_queue_stats WHERE queue = 'bench'")"
            echo "round $round: the counter says $refused refusals"
        fi
        cluster_stop "$dir"
    done
done

# --- part three: instructions per call (callgrind, deterministic) -----------
instructions_csv="$ab/instructions.csv"
echo "build,what,instructions_per_call" > "$instructions_csv"
# collected DIR SCRIPT [postgres options...]: the instructions callgrind
# counted for a single-user backend running SCRIPT on the cluster in DIR.
collected() {
    local dir="$1" script="$2"
    shift 2
    runuser -u postgres -- valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PG_BIN/postgres" --single -D "$dir" -c fsync=off "$@" postgres \
        < "$script" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# fresh_cluster DIR SQL: a new cluster in DIR with the extension and SQL run, stopped.
fresh_cluster() {
    local dir="$1" sql="$2" port
    rm -rf "$dir"
    port="$(free_port)"
    cluster_start "$dir" "$port"
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres \
        -c "CREATE EXTENSION pg_workfence" -c "$sql" >/dev/null
    cluster_stop "$dir"
}
# grants_sql: a login role bench_worker with EXECUTE on every function and a
# claim grant on queue q (decisive only once grants are enforced).
grants_sql() {
    echo "CREATE ROLE bench_worker LOGIN; GRANT USAGE ON SCHEMA workfence TO bench_worker;
          GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO bench_worker;
          SELECT workfence.work_grant('claim', 'q', 'bench_worker');"
}
# repeat N LINE FILE: LINE, N times, into FILE.
repeat() {
    local i
    for i in $(seq "$1"); do printf '%s\n' "$2"; done > "$3"
    chmod 644 "$3"
}
if part instructions; then
    command -v valgrind >/dev/null || { echo "part instructions needs valgrind" >&2; exit 1; }
    small=100 large=600
    [ "$quick" = 1 ] && small=20 large=60
    cg="$scratch/callgrind"
    mkdir -p "$cg"
    chown postgres "$cg"
    for name in base head; do
        stage "instructions: $name"
        install_build "$name"
        for n in "$small" "$large"; do
            repeat "$n" "SELECT workfence.work_finish(c.id, 'w', c.epoch) FROM workfence.work_claim('q', 'w', '1 minute') AS c;" "$cg/cycles-$n.sql"
            fresh_cluster "$cg/data" "SELECT count(*) FROM (SELECT workfence.work_enqueue('q') FROM pg_catalog.generate_series(1, 3000)) AS s"
            eval "cycle_$n=$(collected "$cg/data" "$cg/cycles-$n.sql")"
            # The same with the library preloaded: the counters count
            # (from 0.12.0 every claim and finish, at commit).
            fresh_cluster "$cg/data" "SELECT count(*) FROM (SELECT workfence.work_enqueue('q') FROM pg_catalog.generate_series(1, 3000)) AS s"
            eval "counted_$n=$(collected "$cg/data" "$cg/cycles-$n.sql" -c shared_preload_libraries=pg_workfence)"
        done
        echo "$name,claim -> finish,$(( (cycle_$large - cycle_$small) / (large - small) ))" >> "$instructions_csv"
        echo "$name,claim -> finish (preloaded: counters on),$(( (counted_$large - counted_$small) / (large - small) ))" >> "$instructions_csv"
        [ "$name" = head ] || continue
        # The schedules' lazy fire (from 0.12.0): the same cycle with a
        # schedule on the queue whose next slot is a year away (each claim
        # looks its queue up in the backend's map of next slots and finds
        # it not due), and with one on another queue.
        for on in q other; do
            for n in "$small" "$large"; do
                fresh_cluster "$cg/data" "SELECT workfence.work_schedule('yearly', '0 0 1 1 *', '$on'); SELECT count(*) FROM (SELECT workfence.work_enqueue('q') FROM pg_catalog.generate_series(1, 3000)) AS s"
                eval "sched_$n=$(collected "$cg/data" "$cg/cycles-$n.sql")"
            done
            echo "head,claim -> finish (a schedule on queue $on not due),$(( (sched_$large - sched_$small) / (large - small) ))" >> "$instructions_csv"
        done
        # The renews: item 1 claimed (epoch 1); a stale epoch 0 is refused.
        for preload in on off; do
            opts=()
            [ "$preload" = on ] && opts+=(-c "shared_preload_libraries=pg_workfence")
            for call in refused current; do
                e=1
                [ "$call" = refused ] && e=0
                for n in "$small" "$large"; do
                    repeat "$n" "SELECT workfence.work_renew(1, 'w', $e, '1 hour');" "$cg/renew-$n.sql"
                    fresh_cluster "$cg/data" "SELECT workfence.work_enqueue('q', key => 'k'); SELECT * FROM workfence.work_claim('q', 'w', '1 hour')"
                    eval "renew_$n=$(collected "$cg/data" "$cg/renew-$n.sql" "${opts[@]}")"
                done
                echo "head,$call renew (counters $preload),$(( (renew_$large - renew_$small) / (large - small) ))" >> "$instructions_csv"
            done
        done
        # claim -> finish as a role that is not a superuser (superusers
        # skip the grants), queue grants off and on.
        for grants in off on; do
            enforce=""
            [ "$grants" = on ] && enforce="SELECT workfence.work_enforce_grants(true);"
            for n in "$small" "$large"; do
                repeat "$n" "SELECT workfence.work_finish(c.id, 'w', c.epoch) FROM workfence.work_claim('q', 'w', '1 minute') AS c;" "$cg/role-$n.body"
                { echo "SET ROLE bench_worker;"; cat "$cg/role-$n.body"; } > "$cg/role-$n.sql"
                chmod 644 "$cg/role-$n.sql"
                fresh_cluster "$cg/data" "$(grants_sql) $enforce SELECT count(*) FROM (SELECT workfence.work_enqueue('q') FROM pg_catalog.generate_series(1, 3000)) AS s"
                eval "role_$n=$(collected "$cg/data" "$cg/role-$n.sql")"
            done
            echo "head,claim -> finish as a role (grants $grants),$(( (role_$large - role_$small) / (large - small) ))" >> "$instructions_csv"
        done
    done
    install_build head
fi

# --- part four: queue grants, timed ------------------------------------------
grants_csv="$ab/grants.csv"
echo "round,grants,tps" > "$grants_csv"
part grants && for round in $(seq 1 "$rounds"); do
    order="off on"
    [ $((round % 2)) = 0 ] && order="on off"
    for grants in $order; do
        dir="$scratch/grants-$grants"
        rm -rf "$dir"
        port="$(free_port)"
        cluster_start "$dir" "$port"
        enforce=""
        [ "$grants" = on ] && enforce="SELECT workfence.work_enforce_grants(true);"
        "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres \
            -c "CREATE EXTENSION pg_workfence" -c "$(grants_sql) $enforce" \
            -c "SELECT count(*) FROM (SELECT workfence.work_enqueue('q') FROM pg_catalog.generate_series(1, 200000)) AS s" \
            -c "VACUUM ANALYZE workfence.items" >/dev/null
        printf '%s\n' "SELECT c.id, c.epoch FROM workfence.work_claim('q', 'w', '1 minute') AS c \\gset" \
            "SELECT workfence.work_finish(:id, 'w', :epoch);" > "$dir/cycle.sql"
        # A short run first, not recorded: the first seconds on a new
        # cluster (cold caches, plans being made) are slower for either.
        "$PG_BIN/pgbench" -n -M prepared -c 4 -j 2 -T 2 \
            -h "$dir" -p "$port" -U bench_worker -f "$dir/cycle.sql" postgres >/dev/null
        tps="$("$PG_BIN/pgbench" -n -M prepared -c 4 -j 2 -T "$seconds" \
            -h "$dir" -p "$port" -U bench_worker -f "$dir/cycle.sql" postgres \
            | sed -n 's/^tps = \([0-9.]*\).*/\1/p')"
        echo "$round,$grants,$tps" >> "$grants_csv"
        cluster_stop "$dir"
    done
done

# --- the report --------------------------------------------------------------
python3 - "$ab" "$rounds" "$base" "$base_version" "$head_version" "$counters_csv" "$instructions_csv" "$grants_csv" > "$out" <<'PY'
import csv, glob, os, statistics, sys
ab, rounds, base, base_version, head_version, counters_csv, instructions_csv, grants_csv = sys.argv[1:]
cells = {}  # (build, conns, sync) -> list of (pg_workfence items/s, baseline items/s)
for path in glob.glob(os.path.join(ab, "runs", "*", "benchmarks.csv")):
    build = os.path.basename(os.path.dirname(path)).split("-")[0]
    rows = list(csv.DictReader(open(path)))
    runs = {}
    for r in rows:
        if r["workload"] != "1":
            continue
        key = (int(r["conns"]), r["sync_commit"])
        runs.setdefault(key, {})[r["contender"]] = float(r["items_per_s"])
    for key, got in runs.items():
        if "pg_workfence" in got and "baseline SQL" in got:
            cells.setdefault((build,) + key, []).append((got["pg_workfence"], got["baseline SQL"]))
print(f"# Release A/B: {head_version} (this checkout) against {base_version} ({base})\n")
print(f"Workload 1 of `workfence-bench` (one claim -> finish per cycle), {rounds} round(s) per build,")
print("builds installed in turn and alternating; medians. `x baseline` is each build's items/s over the")
print("hand-written baseline of the same run; the last column is the head build's median over the base's.\n")
print(f"| conns | sync | {base_version} items/s | x baseline | {head_version} items/s | x baseline | {head_version} / {base_version} |")
print("|---:|---|---:|---:|---:|---:|---:|")
keys = sorted({(c, s) for (_, c, s) in cells}, key=lambda k: (k[1] != "on", k[0]))
for conns, sync in keys:
    b = cells.get(("base", conns, sync), [])
    h = cells.get(("head", conns, sync), [])
    if not b or not h:
        continue
    bm = statistics.median(x for x, _ in b)
    hm = statistics.median(x for x, _ in h)
    br = statistics.median(x / y for x, y in b)
    hr = statistics.median(x / y for x, y in h)
    print(f"| {conns} | {sync} | {bm:,.0f} | {br:.2f} | {hm:,.0f} | {hr:.2f} | {hm / bm:.3f} |")
def median_or_none(xs):
    return statistics.median(xs) if xs else None
rows = list(csv.DictReader(open(counters_csv)))
print("\n## What counting a refusal costs\n")
print("`pgbench -M prepared -c 4`: `work_renew` with a stale token (refused: the counters, when on, look")
print("up the item's queue and add one) and with the current token (the holder's path, which counting")
print("never touches), on a cluster with `shared_preload_libraries = 'pg_workfence'` (counters on) and")
print("one without (off); median calls/s over the rounds.\n")
print("| call | counters on | counters off | on / off |")
print("|---|---:|---:|---:|")
for call in ("refused", "current"):
    on = [float(r["tps"]) for r in rows if r["call"] == call and r["preload"] == "on" and r["tps"]]
    off = [float(r["tps"]) for r in rows if r["call"] == call and r["preload"] == "off" and r["tps"]]
    if on and off:
        a, b = statistics.median(on), statistics.median(off)
        print(f"| {call} renew | {a:,.0f} | {b:,.0f} | {a / b:.3f} |")
ins = list(csv.DictReader(open(instructions_csv)))
if ins:
    print("\n## Instructions per call (callgrind, `postgres --single`)\n")
    print("Counted, not timed: the same for every run of the same build on the same inputs.\n")
    print("| build | call | instructions |")
    print("|---|---|---:|")
    names = {"base": base_version, "head": head_version}
    for r in ins:
        print(f"| {names[r['build']]} | {r['what']} | {int(r['instructions_per_call']):,} |")
    cycle = {r["build"]: int(r["instructions_per_call"]) for r in ins if r["what"] == "claim -> finish"}
    if "base" in cycle and "head" in cycle:
        print(f"\n{head_version} / {base_version}, claim -> finish: {cycle['head'] / cycle['base']:.3f}")
    role = {r["what"]: int(r["instructions_per_call"]) for r in ins if r["what"].startswith("claim -> finish as a role")}
    off, on = role.get("claim -> finish as a role (grants off)"), role.get("claim -> finish as a role (grants on)")
    if off and on:
        print(f"\nqueue grants on / off, claim -> finish as a role: {on / off:.3f}")
grants = list(csv.DictReader(open(grants_csv)))
on = [float(r["tps"]) for r in grants if r["grants"] == "on" and r["tps"]]
off = [float(r["tps"]) for r in grants if r["grants"] == "off" and r["tps"]]
if on and off:
    print("\n## What enforcing queue grants costs\n")
    print("`pgbench -M prepared -c 4`: claim -> finish (two statements) as a role granted `claim` on its")
    print("queue, with queue grants enforced (on) and not (off), alternating; median cycles/s over the")
    print("rounds, each round's pair side by side.\n")
    print("| round | grants off | grants on | on / off |")
    print("|---:|---:|---:|---:|")
    for rnd in sorted({r["round"] for r in grants}, key=int):
        a = [float(r["tps"]) for r in grants if r["round"] == rnd and r["grants"] == "off" and r["tps"]]
        b = [float(r["tps"]) for r in grants if r["round"] == rnd and r["grants"] == "on" and r["tps"]]
        if a and b:
            print(f"| {rnd} | {a[0]:,.0f} | {b[0]:,.0f} | {b[0] / a[0]:.3f} |")
    a, b = statistics.median(off), statistics.median(on)
    print(f"| median | {a:,.0f} | {b:,.0f} | {b / a:.3f} |")
PY
cat "$out"
stage "wrote $out; the system's install is this checkout's build again"
