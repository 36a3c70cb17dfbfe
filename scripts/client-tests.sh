#!/usr/bin/env bash
# usage: scripts/client-tests.sh [LANG...]
#
# Runs the worker libraries' own test suites (clients/python, clients/node,
# clients/rust) and the Go example's (examples/go), each with its language's
# runner, against one throwaway PostgreSQL cluster this script starts on a
# free port and stops at exit. LANG is any of python, node, rust, go (default:
# all four). Each suite gets the cluster as WORKFENCE_TEST_DSN (a database
# `workfence_clients` with the extension created; its superuser `postgres`)
# and must fail, not skip, without it.
#
# Needs the extension installed for the cluster's major (scripts/install-build.sh)
# and each language's dependencies (clients/<lang>/install.sh, run by
# scripts/setup.sh). WORKFENCE_PG_CONFIG picks the major (default 15).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

case "${1:-}" in
    -h | --help)
        sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
        exit 0
        ;;
esac

langs=("$@")
[ "${#langs[@]}" -gt 0 ] || langs=(python node rust go)
for lang in "${langs[@]}"; do
    case "$lang" in
        python | node | rust | go) ;;
        *)
            echo "scripts/client-tests.sh: unknown language '$lang' (python, node, rust or go)" >&2
            exit 2
            ;;
    esac
done

# shellcheck source=cluster.sh
. scripts/cluster.sh
dir="$(scratch_base "$ROOT")/client-libs/cluster-$$"
cleanup() {
    cluster_stop "$dir" || true
    rm -rf "$dir"
}
trap cleanup EXIT
cluster_with_extension "$dir" workfence_clients
export WORKFENCE_TEST_DSN="$CLUSTER_DSN"

status=0
for lang in "${langs[@]}"; do
    if [ "$lang" = go ]; then suite=examples/go/test.sh; else suite="clients/$lang/test.sh"; fi
    printf '\n--- %s: %s\n' "$lang" "$suite"
    if ! bash "$suite"; then
        echo "scripts/client-tests.sh: the $lang suite failed" >&2
        status=1
    fi
done
exit "$status"
