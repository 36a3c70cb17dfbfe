#!/usr/bin/env bash
# Installs what the Node.js example worker (examples/node/worker.js) needs, idempotently, on
# Debian 12 as root: Node.js and npm from Debian's packages when either is missing (any Node.js
# >= 18 already installed is kept), then node-postgres exactly as package-lock.json pins it,
# with `npm ci` into examples/node/node_modules (git-ignored).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
fi

major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
    echo "examples/node needs Node.js 18 or newer, found $(node --version)" >&2
    exit 1
fi

# npm ci removes node_modules and installs the lock file's tree again: the same result each run.
npm ci --no-audit --no-fund
