#!/usr/bin/env bash
# Runs the Python worker library's tests (unit and integration) with pytest, verbosely.
# The integration tests need WORKFENCE_TEST_DSN (scripts/client-tests.sh python sets it) and
# fail without it. Extra arguments go to pytest (e.g. -k lease).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
exec "$here/.venv/bin/python" -m pytest -v "$@"
