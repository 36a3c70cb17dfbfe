#!/usr/bin/env bash
# Installs what the Python example worker (examples/python/worker.py) needs, on a fresh
# Debian 12 machine as root: Debian's python3 with its venv module, then a virtual
# environment at examples/python/.venv holding the pinned, hash-checked requirements.txt.
# Idempotent: a second run changes nothing. Run the worker with
#   examples/python/.venv/bin/python examples/python/worker.py
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
# Debian's interpreter, not whatever python3 comes first on PATH (pyenv, say): the venv
# must keep working for every user and shell that runs the worker.
python=/usr/bin/python3

if ! dpkg-query -W -f='${Status}\n' python3-venv 2>/dev/null | grep -qx 'install ok installed'; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv
fi

# (Re)create the venv when it is missing or its interpreter no longer runs.
if ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    "$python" -m venv --clear "$venv"
fi

# Every file is checked against the lock's hashes; pip skips what is already installed.
"$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --only-binary=:all: \
    -r "$here/requirements.txt"
"$venv/bin/python" -c 'import psycopg; print("examples/python: psycopg", psycopg.__version__, "libpq", psycopg.pq.version())'
