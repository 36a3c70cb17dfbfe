#!/usr/bin/env bash
# The scenario from the bug report, live: two worker processes with the same
# owner name, one lapsed lease, and the stale worker fenced off.
#
#   scripts/demo.sh          set up the machine, install the extension, build and
#                            run the demo; the demo cluster stays up afterwards
#   scripts/demo.sh stop     stop the demo cluster
#   scripts/demo.sh clean    stop it and remove .demo/
#
# The cluster lives in .demo/cluster (override: WORKFENCE_DEMO_DIR) and listens
# on 127.0.0.1 on a free port, which the demo prints with the psql command line.
# A second run replaces the cluster of the first.
set -euo pipefail
# This script installs into and runs Debian's PostgreSQL 15; a
# WORKFENCE_PG_CONFIG exported for the PG 18 tier must not point the
# clusters (scripts/cluster.sh, the harness) at another major.
unset WORKFENCE_PG_CONFIG

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_CONFIG="/usr/lib/postgresql/15/bin/pg_config"
DEMO_DIR="${WORKFENCE_DEMO_DIR:-$ROOT/.demo/cluster}"
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '[demo] %s\n' "$*"; }

usage() {
    sed -n '2,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

# cluster_stop (stops a cluster as the postgres OS user; PostgreSQL refuses
# to run as root).
# shellcheck source=cluster.sh
. "$ROOT/scripts/cluster.sh"

stop_cluster() {
    if [ ! -f "$DEMO_DIR/PG_VERSION" ]; then
        log "no demo cluster in $DEMO_DIR"
        return 0
    fi
    cluster_stop "$DEMO_DIR"
    log "the demo cluster in $DEMO_DIR is stopped"
}

case "${1:-run}" in
    run) ;;
    stop)
        stop_cluster
        exit 0
        ;;
    clean)
        stop_cluster
        log "removing $DEMO_DIR"
        rm -rf -- "$DEMO_DIR"
        exit 0
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        usage >&2
        exit 2
        ;;
esac

cd "$ROOT"
if [ "$(id -u)" -eq 0 ]; then
    "$ROOT/scripts/setup.sh"
else
    log "not root: skipping scripts/setup.sh (run it once as root)"
fi

log "cargo pgrx install --release --pg-config $PG_CONFIG"
cargo pgrx install --release --pg-config "$PG_CONFIG"

# The demo starts the worker binary that sits next to it: build both.
log "building the demo and the worker"
cargo build --release -p workfence-harness -p workfence-demo --bins

# The server's OS user must be able to reach the cluster directory.
mkdir -p "$(dirname "$DEMO_DIR")"
if [ "$(dirname "$DEMO_DIR")" = "$ROOT/.demo" ]; then
    chmod 755 "$ROOT/.demo"
fi

log "running the demo"
echo
exec cargo run --quiet --release -p workfence-demo --bin workfence-demo -- --dir "$DEMO_DIR"
