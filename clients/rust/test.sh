#!/usr/bin/env bash
# Runs the tests of the workfence crate (clients/rust): the unit tests in the
# crate and the integration tests of clients/rust/tests/, which need a database
# with the pg_workfence extension in WORKFENCE_TEST_DSN and FAIL without it.
# scripts/client-tests.sh starts a throwaway cluster and calls this script.
# Release profile, as the workspace's other test tiers build (one build for all).
# Extra arguments go to both `cargo test`s (e.g. a test name filter).
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
# The `otel` feature (off by default): the crate's unit tests with it, and the tests that need
# it (tests/trace.rs, tests/trace_old.rs: an OpenTelemetry SDK with an in-memory exporter).
# The command above is the one scripts/test.sh builds ahead; this one rebuilds only the crate
# (and adds opentelemetry).
cargo test -p workfence -p workspace-hack --release --locked --features workfence/otel \
    --lib --test trace --test trace_old "$@"
