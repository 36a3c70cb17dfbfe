#!/usr/bin/env bash
# Runs the Node.js library's tests with node's own runner: unit tests, the type check of
# index.d.ts, and the integration tests against WORKFENCE_TEST_DSN (which they need: without it
# they FAIL). scripts/client-tests.sh starts a throwaway cluster and calls this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [ ! -d node_modules/pg ]; then
    echo "clients/node/test.sh: node_modules is missing: run clients/node/install.sh" >&2
    exit 1
fi
exec node --test --test-reporter=spec --test-timeout=120000 test/*.test.js
