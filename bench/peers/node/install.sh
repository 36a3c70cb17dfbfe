#!/usr/bin/env bash
# Installs what the Node.js peer runners of scripts/bench.sh (pgboss.mjs, graphile.mjs) need,
# idempotently, on Debian 12 as root: Node.js and npm from Debian's packages when either is missing
# (a Node.js >= 20 already installed is kept), then pg-boss, graphile-worker and node-postgres
# exactly as package-lock.json pins them, with `npm ci` into bench/peers/node/node_modules
# (git-ignored). Skips npm when node_modules was installed from the same package-lock.json.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=../../../scripts/install-lib.sh
. ../../../scripts/install-lib.sh

need_node 20 bench/peers/node

stamp=node_modules/.bench-install-stamp
want="$(sha256sum package-lock.json | cut -d' ' -f1) $(node --version)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

# pg-boss 12 declares engines node >= 22.12; it runs on the Node.js 20 here (tested), so npm's
# EBADENGINE warning is expected and not an error (engine-strict stays off).
npm ci --no-audit --no-fund --engine-strict=false
echo "$want" > "$stamp"
