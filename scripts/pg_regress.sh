#!/usr/bin/env bash
# Run the pg_regress golden files (tests/pg_regress/{sql,expected}) against a
# throwaway cluster. Needs the extension installed (`cargo pgrx install`).
# Usage: scripts/pg_regress.sh [test ...]   (default: every tests/pg_regress/sql/*.sql)
# The PostgreSQL is the one of $WORKFENCE_PG_CONFIG (default Debian's 15):
#   WORKFENCE_PG_CONFIG=$(scripts/pg-config.sh 18) scripts/pg_regress.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=cluster.sh
. "$ROOT/scripts/cluster.sh"

tests=("$@")
if [ "${#tests[@]}" -eq 0 ]; then
    for f in "$ROOT"/tests/pg_regress/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
fi

major="$("$CLUSTER_PG_CONFIG" --version | sed 's/^PostgreSQL \([0-9]*\).*/\1/')"
work="$(scratch_base "$ROOT")/pg_regress-$major"
rm -rf "$work"
mkdir -p "$work"
chmod 755 "$work"
port="$(free_port)"
trap 'cluster_stop "$work/data"' EXIT
cluster_start "$work/data" "$port"
"$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres pg_workfence_regress

PG_REGRESS="$("$CLUSTER_PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
status=0
"$PG_REGRESS" --use-existing --host=127.0.0.1 --port="$port" --user=postgres \
    --bindir="$PG_BIN" --inputdir="$ROOT/tests/pg_regress" --outputdir="$work" \
    --dbname=pg_workfence_regress "${tests[@]}" || status=$?
if [ "$status" -ne 0 ] && [ -f "$work/regression.diffs" ]; then
    cat "$work/regression.diffs"
fi
exit "$status"
