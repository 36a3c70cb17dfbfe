#!/usr/bin/env bash
# examples/bash/install.sh: installs what examples/bash/worker.sh needs on
# Debian 12, idempotently, as root: bash >= 5.1 (Debian 12 has 5.2) and psql.
# psql normally comes with the PostgreSQL server that scripts/setup.sh uses
# (postgresql-15 depends on postgresql-client-15), so this usually only checks
# and prints what it found; postgresql-client is installed only when psql is
# missing.
set -euo pipefail

if (( BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1) )); then
    echo "examples/bash: bash >= 5.1 is needed (wait -n -p), found $BASH_VERSION" >&2
    exit 1
fi

if ! command -v psql >/dev/null; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "examples/bash: psql not found; install postgresql-client (as root: apt-get install postgresql-client)" >&2
        exit 1
    fi
    echo "examples/bash: psql not found, installing postgresql-client"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-client
fi

psql_path=$(command -v psql)
echo "examples/bash: bash $BASH_VERSION at $BASH"
echo "examples/bash: psql at $psql_path ($(readlink -f "$psql_path")): $(psql --version)"
if [[ $(readlink -f "$psql_path") == */pg_wrapper ]]; then
    # The worker calls the newest versioned binary directly, as pg_wrapper
    # (a Perl script) costs tens of milliseconds per call.
    newest=$(printf '%s\n' /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1)
    echo "examples/bash: the worker calls $newest directly"
fi
