#!/usr/bin/env bash
# The README's test command: every test of pg_workfence, from a fresh Debian 12
# machine (as root). CI (.ci/run) calls exactly this.
#
#   1. setup        apt packages, cargo-pgrx, `cargo pgrx init` (idempotent)
#   2. lint         cargo fmt --check; cargo clippy --all-targets -D warnings
#   3. docs         the README's quickstart is the pg_regress file, verbatim
#   4. unit + pg    cargo pgrx test: Rust unit tests and the in-server #[pg_test] suites
#   5. install      cargo pgrx install --release (for the client-side tiers)
#   6. pg_regress   golden files in tests/pg_regress against a throwaway cluster
#   7. client       harness/tests/*.rs (found by cargo) from real client connections:
#                   seed scenario, races, soak, PgBouncer, bad input, the stateright
#                   model, dump/restore, upgrade, ... and the checklist of every
#                   SQL function (typed call, privileges, bad input, docs agree)
#   8. bench smoke  scripts/bench.sh --quick: every contender and workload of the
#                   benchmark once, tiny sizes, into target/bench-quick (no timing
#                   is asserted: the run must complete and every finish be current)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

stage() { printf '\n==> [%s] %s\n' "$(date +%T)" "$*"; }
t_start=$SECONDS

stage "setup"
bash scripts/setup.sh

stage "lint: cargo fmt --check, clippy -D warnings"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --all-targets --features pg_test -- -D warnings

stage "docs: README quickstart == tests/pg_regress/sql/quickstart.sql"
readme_sql="$(awk '/<!-- quickstart:begin -->/{f=1;next} /<!-- quickstart:end -->/{f=0} f' README.md | sed '1d;$d')"
if ! diff -u tests/pg_regress/sql/quickstart.sql <(printf '%s\n' "$readme_sql"); then
    echo "README.md's quickstart differs from tests/pg_regress/sql/quickstart.sql" >&2
    exit 1
fi

stage "unit and in-server tests: cargo pgrx test"
# shellcheck source=cluster.sh
. scripts/cluster.sh
pgdata="$(scratch_base "$ROOT")/pgrx-test-data"
mkdir -p "$pgdata"
chown postgres:postgres "$pgdata"
# cargo pgrx test installs its build with `cp` over the installed library;
# writing into a library a running server has mapped (a cluster of another
# run that preloads it) crashes that server. Unlinked first, the running
# servers keep the old file and the copy is a new one.
rm -f "$("$PG_CONFIG" --pkglibdir)/pg_workfence.so"
cargo pgrx test pg15 --runas postgres --pgdata "$pgdata/pg15"

stage "install: cargo pgrx install --release"
cargo pgrx install --release --pg-config "$PG_CONFIG"
# The frozen install scripts of released versions, so that tests/upgrade.rs can
# CREATE EXTENSION ... VERSION '<previous>' and update it (cargo pgrx install
# copies the upgrade scripts pg_workfence--A--B.sql itself).
for released in sql/pg_workfence--[0-9]*.[0-9]*.[0-9]*.sql; do
    case "$released" in *--*--*) continue ;; esac
    install -m 0644 "$released" "$("$PG_CONFIG" --sharedir)/extension/"
done

# The tiers below test the library installed system-wide. Another checkout
# installing at the same time would swap it under them; record what this run
# installed and check it is still there at the end.
installed_lib="$("$PG_CONFIG" --pkglibdir)/pg_workfence.so"
installed_sum="$(md5sum < "$installed_lib")"

stage "pg_regress golden files"
bash scripts/pg_regress.sh

stage "client tests from real connections"
# --show-output: the soak's figures, the model's state count and the bad-input
# case count are printed even when their tests pass.
WORKFENCE_SCRATCH="$(scratch_base "$ROOT")/client-tests" \
    cargo test -p workfence-harness --release -- --show-output

stage "benchmark: the driver's unit tests, then a smoke run (scripts/bench.sh --quick)"
cargo test -p workfence-bench --release
bash scripts/bench.sh --quick --no-install
if ! grep -q "| long poll 3 s |" target/bench-quick/long-poll.md; then
    echo "the long-poll smoke run wrote no herd figures" >&2
    exit 1
fi
for contender in pg_workfence "baseline SQL" awa graphile-worker pg-boss procrastinate; do
    if ! grep -q ",$contender," target/bench-quick/benchmarks.csv; then
        echo "the benchmark smoke run has no figures for $contender" >&2
        exit 1
    fi
done

stage "every binary answers --help"
cargo build --release --bins -p workfence-harness -p workfence-demo -p workfence-bench -p workfence-example
for binary in workfence-worker workfence-soak-worker workfence-demo workfence-bench \
    workfence-long-poll workfence-example-worker; do
    # Read all of the output before matching: `grep -q` closing the pipe at
    # the first match must not turn into the binary's EPIPE.
    usage_text=$("target/release/$binary" --help)
    if ! grep -q '^usage: ' <<<"$usage_text"; then
        echo "$binary --help printed no usage" >&2
        exit 1
    fi
done

usage_text=$(bash scripts/bench-ab.sh --help)
if ! grep -q 'scripts/bench-ab.sh --base REV' <<<"$usage_text"; then
    echo "scripts/bench-ab.sh --help printed no usage" >&2
    exit 1
fi

if [ "$(md5sum < "$installed_lib")" != "$installed_sum" ]; then
    echo "$installed_lib was replaced while the tests ran (another checkout installing?);" \
        "the results above are not this checkout's" >&2
    exit 1
fi

stage "all tests passed in $((SECONDS - t_start)) s"
