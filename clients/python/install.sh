#!/usr/bin/env bash
# Installs what the Python worker library's tests and benchmark need, on a fresh Debian 12
# machine as root: Debian's python3 with its venv module, then a virtual environment at
# clients/python/.venv holding the pinned, hash-checked requirements-dev.txt (psycopg, pytest,
# pytest-asyncio, opentelemetry-api and -sdk for the tracing tests, and the build backend
# hatchling) and the library itself, editable, built
# offline with that backend (no build isolation, so nothing unpinned is fetched).
# Idempotent: a second run changes nothing. Run the tests with clients/python/test.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
# shellcheck source=../../scripts/install-lib.sh
. "$here/../../scripts/install-lib.sh"

python_venv "$venv"
pip_install_locked "$venv" "$here/requirements-dev.txt"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    --no-index --editable "$here"
"$venv/bin/python" -c 'import workfence, psycopg; print("clients/python: workfence", workfence.__version__, "psycopg", psycopg.__version__)'
