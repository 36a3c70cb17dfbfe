#!/usr/bin/env bash
# pg_workfence's demo, live: two worker processes on the Python library with
# the same owner name; one is stopped (SIGSTOP) past its lease, the other
# takes its items over, and the stopped one, resumed, is fenced off: first for
# a business table written in the job's fenced transaction, then for a message
# sent to an outside system with the epoch (demo/demo.py, demo/worker.py).
#
#   scripts/demo.sh          set up the machine (scripts/setup.sh --demo: only
#                            what the demo needs), install the extension, build
#                            the dashboard and run the demo; the demo cluster
#                            stays up afterwards, with the dashboard
#                            (workfence-ui) watching it (the cluster preloads
#                            the library: the dashboard shows the refusals and
#                            the lapses the demo caused)
#   scripts/demo.sh stop     stop the dashboard and the demo cluster
#   scripts/demo.sh clean    stop them and remove the cluster's directory
#
# The cluster lives in .demo/cluster (override: WORKFENCE_DEMO_DIR; when the
# postgres OS user cannot reach the checkout, a clone under /root say, in
# /tmp/pg_workfence-demo-<checksum of the checkout's path>/cluster) and
# listens on 127.0.0.1 on a free port, which the demo prints with the psql
# command line. The dashboard listens on 127.0.0.1 on another free port and
# prints its URL; its log is .demo/ui.log, its process id .demo/ui.pid. A
# second run replaces the cluster and the dashboard of the first. Exit
# status: 0 the demo held, 1 it did not, 2 it could not run.
set -euo pipefail
# This script installs into and runs Debian's PostgreSQL 15; a
# WORKFENCE_PG_CONFIG exported for the PG 18 tier must not point the
# clusters (scripts/cluster.sh, the harness) at another major.
unset WORKFENCE_PG_CONFIG

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_CONFIG="/usr/lib/postgresql/15/bin/pg_config"
export PATH="$HOME/.cargo/bin:$PATH"
# The demo's Python (psycopg and the workfence library): examples/python/
# install.sh makes this venv (scripts/setup.sh --demo runs it).
DEMO_PYTHON="$ROOT/examples/python/.venv/bin/python"

# log: a step, with the seconds since the script started.
log() { printf '[demo +%ss] %s\n' "$SECONDS" "$*"; }

usage() {
    sed -n '2,25s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

# demo_dir: set DEMO_DIR to the cluster's directory, which the server's OS
# user must be able to reach (asked once the postgres user exists, after the
# set-up).
demo_dir() {
    if [ -n "${WORKFENCE_DEMO_DIR:-}" ]; then
        DEMO_DIR="$WORKFENCE_DEMO_DIR"
    elif [ "$(id -u)" -ne 0 ] || runuser -u postgres -- test -x "$ROOT" 2>/dev/null; then
        DEMO_DIR="$ROOT/.demo/cluster"
    else
        DEMO_DIR="/tmp/pg_workfence-demo-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)/cluster"
    fi
}

UI_LOG="$ROOT/.demo/ui.log"
UI_PID="$ROOT/.demo/ui.pid"
UI_BUILD_LOG="$ROOT/.demo/ui-build.log"
UI_EXE="$ROOT/target/demo/workfence-ui"

# stop_ui: stop the dashboard the last run started, if it still runs (the
# process id is checked to be a workfence-ui before it is signalled).
stop_ui() {
    [ -f "$UI_PID" ] || return 0
    local pid
    pid="$(cat "$UI_PID")"
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "workfence-ui" ]; then
        kill "$pid"
        # SIGTERM ends it gracefully; wait (at most 10 s) for it to be gone.
        local tries=0
        while kill -0 "$pid" 2>/dev/null; do
            tries=$((tries + 1))
            if [ "$tries" -gt 100 ]; then
                kill -KILL "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.1
        done
        log "the dashboard (workfence-ui, pid $pid) is stopped"
    fi
    rm -f -- "$UI_PID"
}

# start_ui: start the dashboard against the demo cluster (its port is line 4
# of postmaster.pid) on a free loopback port, in the background, and print
# its URL once it listens.
start_ui() {
    local db_port url pid tries=0
    if [ ! -f "$DEMO_DIR/postmaster.pid" ]; then
        log "the demo cluster is not running: no dashboard"
        return 0
    fi
    db_port="$(sed -n 4p "$DEMO_DIR/postmaster.pid")"
    mkdir -p "$(dirname "$UI_LOG")"
    : >"$UI_LOG"
    nohup "$UI_EXE" --dsn "host=127.0.0.1 port=$db_port user=postgres dbname=workfence_demo" \
        --listen 127.0.0.1:0 >>"$UI_LOG" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$UI_PID"
    # The dashboard prints its address once it listens: look for that line
    # (at most 30 s, and not after the process ended).
    url=""
    while [ -z "$url" ] && [ "$tries" -lt 300 ] && kill -0 "$pid" 2>/dev/null; do
        url="$(grep -m1 -o 'http://[^ ]*' "$UI_LOG" || true)"
        [ -n "$url" ] || sleep 0.1
        tries=$((tries + 1))
    done
    if [ -z "$url" ]; then
        log "the dashboard did not start; see $UI_LOG"
        stop_ui
        return 1
    fi
    echo
    echo "The dashboard (workfence-ui, read-write as postgres) watches the demo database:"
    echo "  $url"
    echo "  (log: $UI_LOG; scripts/demo.sh stop stops it with the cluster)"
}

stop_cluster() {
    if [ ! -f "$DEMO_DIR/PG_VERSION" ]; then
        log "no demo cluster in $DEMO_DIR"
        return 0
    fi
    # cluster_stop (stops a cluster as the postgres OS user; PostgreSQL
    # refuses to run as root). Sourced here, not at the top: it asks
    # pg_config, which a fresh machine has only after the set-up. Run from
    # /: the postgres OS user may not enter the checkout (under /root, say).
    # shellcheck source=cluster.sh
    . "$ROOT/scripts/cluster.sh"
    (cd / && cluster_stop "$DEMO_DIR")
    log "the demo cluster in $DEMO_DIR is stopped"
}

case "${1:-run}" in
    run) ;;
    stop)
        demo_dir
        stop_ui
        stop_cluster
        exit 0
        ;;
    clean)
        demo_dir
        stop_ui
        stop_cluster
        log "removing $DEMO_DIR"
        rm -rf -- "$DEMO_DIR" "$UI_LOG" "$UI_BUILD_LOG"
        exit 0
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "scripts/demo.sh: unknown command '$1'" >&2
        usage >&2
        exit 2
        ;;
esac

cd "$ROOT"
# The dashboard needs nothing the set-up installs (Rust and a C compiler):
# it builds in the background, beside apt and cargo-pgrx's build, and the
# extension's build below waits for cargo's lock on target/ if it is not done.
# Its profile, `demo` (Cargo.toml), is unoptimised: a quicker build.
mkdir -p "$ROOT/.demo"
log "building the dashboard (workfence-ui) in the background (log: $UI_BUILD_LOG)"
cargo build --profile demo -p workfence-ui >"$UI_BUILD_LOG" 2>&1 &
ui_build_pid=$!
# A set-up or install that fails ends the script: the build with it.
trap 'kill "$ui_build_pid" 2>/dev/null || true' EXIT

if [ "$(id -u)" -eq 0 ]; then
    # Only what the demo needs (scripts/test.sh installs the whole development set-up).
    "$ROOT/scripts/setup.sh" --demo
else
    log "not root: skipping scripts/setup.sh (run it once as root)"
fi

log "cargo pgrx install --release --pg-config $PG_CONFIG"
# The demo cluster of a previous run (and any other cluster) preloads the
# library: writing into a library a running server has mapped crashes it.
# Unlinked first, running servers keep the old file (as install-build.sh does).
rm -f "$("$PG_CONFIG" --pkglibdir)/pg_workfence.so"
cargo pgrx install --release --pg-config "$PG_CONFIG"

ui_build_status=0
wait "$ui_build_pid" || ui_build_status=$?
trap - EXIT
if [ "$ui_build_status" != 0 ]; then
    log "building the dashboard failed; the end of its log ($UI_BUILD_LOG):"
    tail -n 30 "$UI_BUILD_LOG" >&2
    exit 2
fi
log "the dashboard (workfence-ui) is built"

# A dashboard of a previous run watches the cluster this run replaces.
stop_ui

# The server's OS user must be able to reach the cluster directory.
demo_dir
mkdir -p "$(dirname "$DEMO_DIR")"
if [ -z "${WORKFENCE_DEMO_DIR:-}" ]; then
    chmod 755 "$(dirname "$DEMO_DIR")"
fi

if [ ! -x "$DEMO_PYTHON" ]; then
    log "no $DEMO_PYTHON: run scripts/setup.sh --demo (as root) or examples/python/install.sh"
    exit 2
fi
log "running the demo (demo/demo.py)"
echo
status=0
"$DEMO_PYTHON" "$ROOT/demo/demo.py" --dir "$DEMO_DIR" || status=$?
echo
log "the demo ended (exit $status)"
# 0: the scenario held, 1: it did not; either way the cluster is left up to
# look around in. 2: the demo could not run.
if [ "$status" -le 1 ]; then
    start_ui || true
fi
exit "$status"
