#!/usr/bin/env bash
# Installs what the Node.js example worker (examples/node/worker.js) needs, idempotently, on
# Debian 12 as root: Node.js and npm from Debian's packages when either is missing (any Node.js
# >= 18 already installed is kept), then the `workfence` library from ../../clients/node (a packed
# copy: .npmrc sets install-links) and node-postgres exactly as package-lock.json pins it, with
# `npm ci` into examples/node/node_modules (git-ignored). Run it again after changing the library.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=../../scripts/install-lib.sh
. ../../scripts/install-lib.sh

need_node 18 examples/node

# npm ci removes node_modules and installs the lock file's tree again: the same result each run.
npm ci --no-audit --no-fund
