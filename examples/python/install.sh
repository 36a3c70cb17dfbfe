#!/usr/bin/env bash
# Installs what the Python example worker (examples/python/worker.py) needs, on a fresh
# Debian 12 machine as root: Debian's python3 with its venv module, then a virtual
# environment at examples/python/.venv holding the pinned, hash-checked requirements.txt.
# Idempotent: a second run changes nothing. Run the worker with
#   examples/python/.venv/bin/python examples/python/worker.py
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
# shellcheck source=../../scripts/install-lib.sh
. "$here/../../scripts/install-lib.sh"

python_venv "$venv"
pip_install_locked "$venv" "$here/requirements.txt"
"$venv/bin/python" -c 'import psycopg; print("examples/python: psycopg", psycopg.__version__, "libpq", psycopg.pq.version())'
