#!/usr/bin/env bash
# Build the awa peer runner (bench/peers/awa) for scripts/bench.sh.
# Idempotent: cargo only rebuilds when sources or Cargo.lock change.
# Versions are pinned by Cargo.lock (awa 0.6.9); crates come from crates.io.
#
#   bench/peers/awa/install.sh           the measured runner: an optimised
#                                        build, target/release/awa-bench
#   bench/peers/awa/install.sh --smoke   the smoke run's (scripts/bench.sh
#                                        --quick, whose figures are not
#                                        measurements): unoptimised, into
#                                        target-smoke/ so that a measured run
#                                        never uses it (57 s to build on 2
#                                        cores against 146 s)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
    "") target="$here/target" ;;
    --smoke)
        target="$here/target-smoke"
        export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0
        ;;
    *)
        echo "usage: bench/peers/awa/install.sh [--smoke]" >&2
        exit 2
        ;;
esac
cargo build --release --locked \
    --manifest-path "$here/Cargo.toml" \
    --target-dir "$target"
test -x "$target/release/awa-bench"
