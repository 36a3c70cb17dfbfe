#!/usr/bin/env bash
# Installs what the Python example worker (examples/python/worker.py) needs, on a fresh
# Debian 12 machine as root: Debian's python3 with its venv module, then a virtual
# environment at examples/python/.venv holding the pinned, hash-checked requirements.txt
# (psycopg, and the build backend hatchling) and the workfence library from
# ../../clients/python, built offline with that backend (no build isolation, no index: nothing
# unpinned is fetched). Idempotent: a second run reinstalls the library from the working tree
# and changes nothing else. Run the worker with
#   examples/python/.venv/bin/python examples/python/worker.py
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
# shellcheck source=../../scripts/install-lib.sh
. "$here/../../scripts/install-lib.sh"

python_venv "$venv"
pip_install_locked "$venv" "$here/requirements.txt"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    --no-index --force-reinstall "$here/../../clients/python"
"$venv/bin/python" -c 'import workfence, psycopg; print("examples/python: workfence", workfence.__version__, "psycopg", psycopg.__version__, "libpq", psycopg.pq.version())'
