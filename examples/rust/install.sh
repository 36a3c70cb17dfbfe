#!/usr/bin/env bash
# Builds the Rust example worker of pg_workfence (examples/rust, on the
# workfence crate of clients/rust, taken by path) on Debian 12,
# as root: `cargo build --release --locked -p workfence-example` in the root
# workspace, so the workspace Cargo.lock pins every crate (tokio-postgres is
# pure Rust: no libpq, no apt package). Idempotent: a second run finds the
# binary up to date and does no work. Needs the Rust toolchain the project
# builds with (cargo in PATH or in ~/.cargo/bin).
# The binary: target/release/workfence-example-worker (under $CARGO_TARGET_DIR if set).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v cargo >/dev/null 2>&1; then
    echo "examples/rust/install.sh: cargo not found; install the Rust toolchain first" >&2
    exit 1
fi

cd "$ROOT"
# With workspace-hack (the workspace's crate of unified dependency features,
# .config/hakari.toml) in the same build, the dependencies are compiled with
# the features every other crate of the workspace builds them with, once.
cargo build --release --locked -p workfence-example -p workspace-hack
echo "[examples/rust] built ${CARGO_TARGET_DIR:-$ROOT/target}/release/workfence-example-worker"
