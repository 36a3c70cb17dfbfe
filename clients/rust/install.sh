#!/usr/bin/env bash
# Builds the workfence crate (clients/rust) on Debian 12, as root: a member of
# the root workspace, so the workspace Cargo.lock pins every dependency
# (tokio-postgres is pure Rust: no libpq, no apt package). Idempotent: a second
# run finds everything up to date. Needs the Rust toolchain the project builds
# with (cargo in PATH or in ~/.cargo/bin). Also builds the overhead benchmark,
# target/release/workfence-client-bench (under $CARGO_TARGET_DIR if set).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
    echo "clients/rust/install.sh: cargo not found; install the Rust toolchain first" >&2
    exit 1
fi
cd "$ROOT"
# With workspace-hack (the workspace's crate of unified dependency features,
# .config/hakari.toml) in the same build, the dependencies are compiled with
# the features every other crate of the workspace builds them with, once.
cargo build --release --locked -p workfence -p workspace-hack
echo "[clients/rust] built the workfence crate and ${CARGO_TARGET_DIR:-$ROOT/target}/release/workfence-client-bench"
