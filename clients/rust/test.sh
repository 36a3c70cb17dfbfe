#!/usr/bin/env bash
# Runs the tests of the workfence crate (clients/rust): the unit tests in the
# crate and the integration tests of clients/rust/tests/, which need a database
# with the pg_workfence extension in WORKFENCE_TEST_DSN and FAIL without it.
# scripts/client-tests.sh starts a throwaway cluster and calls this script.
# Release profile, as the workspace's other test tiers build (one build for all).
# Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
if [ -z "${WORKFENCE_TEST_DSN:-}" ]; then
    echo "clients/rust/test.sh: WORKFENCE_TEST_DSN is not set (run: bash scripts/client-tests.sh rust)" >&2
    exit 1
fi
cd "$ROOT"
# With workspace-hack (the workspace's crate of unified dependency features,
# .config/hakari.toml) in the same build, the dependencies are compiled with
# the features every other crate of the workspace builds them with, once.
cargo test -p workfence -p workspace-hack --release --locked "$@"
