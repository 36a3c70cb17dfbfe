#!/usr/bin/env bash
# Installs what the Node.js worker library (clients/node) needs to be tested, idempotently, on
# Debian 12 as root: Node.js and npm from Debian's packages when either is missing (any Node.js
# >= 18 already installed is kept), then exactly the tree package-lock.json pins (pg; for the
# type check, typescript and @types/node; for the tracing tests, @opentelemetry/api (the library's
# optional peer), @opentelemetry/sdk-trace-base and @opentelemetry/context-async-hooks) with
# `npm ci` into clients/node/node_modules.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=../../scripts/install-lib.sh
. ../../scripts/install-lib.sh

need_node 18 clients/node

# npm ci removes node_modules and installs the lock file's tree again: the same result each run.
npm ci --no-audit --no-fund
