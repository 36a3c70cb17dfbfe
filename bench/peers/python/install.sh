#!/usr/bin/env bash
# Installs what the Python side of the benchmark needs, on a Debian 12 machine as root:
# Debian's python3 with its venv module, then a virtual environment at
# bench/peers/python/.venv (gitignored) holding the pinned, hash-checked requirements.txt:
# procrastinate (the peer queue run by procrastinate_runner.py), psycopg and matplotlib
# (for the benchmark's plotting script).
# Idempotent and fast when already installed: pip is skipped when the venv works and was
# last filled from this very requirements.txt. Works from any cwd. Run the runner with
#   bench/peers/python/.venv/bin/python bench/peers/python/procrastinate_runner.py \
#       --dsn postgresql://postgres@127.0.0.1:PORT/DB --jobs N --concurrency C
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
req="$here/requirements.txt"
stamp="$venv/.requirements.sha256"
# shellcheck source=../../../scripts/install-lib.sh
. "$here/../../../scripts/install-lib.sh"

python_venv "$venv"
if [ "$venv_made" = yes ]; then
    rm -f "$stamp"
fi

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ] \
    && "$venv/bin/python" -c 'import procrastinate, psycopg, matplotlib' >/dev/null 2>&1; then
    echo "bench/peers/python: already installed" >&2
    exit 0
fi

pip_install_locked "$venv" "$req"
"$venv/bin/python" - <<'PY' >&2
import importlib.metadata as md
print("bench/peers/python:", ", ".join(
    f"{p} {md.version(p)}" for p in ("procrastinate", "psycopg", "psycopg-binary", "matplotlib")))
PY
echo "$want" >"$stamp"
