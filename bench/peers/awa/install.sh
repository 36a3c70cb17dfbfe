#!/usr/bin/env bash
# Build the awa peer runner (bench/peers/awa) for scripts/bench.sh.
# Idempotent: cargo only rebuilds when sources or Cargo.lock change.
# Versions are pinned by Cargo.lock (awa 0.6.9); crates come from crates.io.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="$here/target"
cargo build --release --locked \
    --manifest-path "$here/Cargo.toml" \
    --target-dir "$target"
test -x "$target/release/awa-bench"
