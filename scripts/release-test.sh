#!/usr/bin/env bash
# The release test: each worker library's artefact, as scripts/package.sh built it, installed
# into a clean place outside this repository, and a worker run with it against a throwaway
# cluster of the installed extension (PostgreSQL 15):
#   python  a fresh virtual environment with the wheel (psycopg from PyPI), another with the
#           sdist (built by pip, hatchling from PyPI): scripts/release/worker.py in each
#   node    a fresh npm project in a temporary directory: npm install the .tgz and pg, then
#           scripts/release/worker.mjs
#   rust    a fresh cargo project whose one path dependency is the unpacked .crate file, its
#           versions those of the workspace's Cargo.lock: scripts/release/main.rs
# Each worker enqueues three items with its library, works them with the library's Worker and
# exits 0 only when the server has all three done with their results.
#
# usage: scripts/release-test.sh [--packages DIR]   (default target/packages)
# Needs the extension installed into PostgreSQL 15 (scripts/install-build.sh 15) and the
# artefacts (scripts/package.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
packages="$ROOT/target/packages"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --packages) packages="$(cd "$2" && pwd)"; shift 2 ;;
        -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: scripts/release-test.sh [--packages DIR]" >&2; exit 2 ;;
    esac
done
unset WORKFENCE_PG_CONFIG
# shellcheck source=majors.sh
. "$ROOT/scripts/majors.sh"
# shellcheck source=cluster.sh
. "$ROOT/scripts/cluster.sh"
version="$(crate_version "$ROOT")"
say() { printf '[release-test] %s\n' "$*"; }
for artefact in "workfence-$version-py3-none-any.whl" "workfence-$version.tar.gz" \
    "workfence-$version.tgz" "workfence-$version.crate"; do
    [ -s "$packages/$artefact" ] || { echo "no $packages/$artefact: run scripts/package.sh" >&2; exit 1; }
done

work="$(mktemp -d /tmp/workfence-release.XXXXXX)"
data="$(scratch_base "$ROOT")/release-test"
rm -rf "$data"
cleanup() {
    cluster_stop "$data" || true
    rm -rf "$work" "$data"
}
trap cleanup EXIT
port="$(free_port)"
cluster_start "$data" "$port"
as_postgres "$PG_BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres \
    -c 'CREATE EXTENSION pg_workfence'
# A URI: node-postgres's connectionString takes no key=value string.
dsn="postgresql://postgres@127.0.0.1:$port/postgres"

say "python: the wheel, then the sdist, each in a fresh virtual environment"
for artefact in "workfence-$version-py3-none-any.whl" "workfence-$version.tar.gz"; do
    venv="$work/venv-${artefact##*.}"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$packages/$artefact"
    (cd "$work" && "$venv/bin/python" "$ROOT/scripts/release/worker.py" "$dsn")
    # The second run finds the first one's items done: work a fresh queue each time.
    as_postgres "$PG_BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -c "DELETE FROM workfence.items WHERE queue = 'release-python'"
done

say "node: a fresh npm project with the packed library and pg"
mkdir -p "$work/node"
cp "$ROOT/scripts/release/worker.mjs" "$work/node/"
(
    cd "$work/node"
    npm init -y >/dev/null
    npm pkg set type=module >/dev/null
    npm install --silent --no-audit --no-fund "$packages/workfence-$version.tgz" pg
    node worker.mjs "$dsn"
)

say "rust: a fresh cargo project on the unpacked crate"
mkdir -p "$work/crate" "$work/rust/src"
tar -xzf "$packages/workfence-$version.crate" -C "$work/crate"
cp "$ROOT/scripts/release/main.rs" "$work/rust/src/main.rs"
cat >"$work/rust/Cargo.toml" <<TOML
[package]
name = "release-worker"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
workfence = { path = "$work/crate/workfence-$version" }
tokio = { version = "1", features = ["macros", "rt-multi-thread", "sync", "time"] }
tokio-postgres = "0.7"
serde_json = "1"

[workspace]
TOML
# The versions the workspace was tested with (cargo drops what the project does not use).
cp "$ROOT/Cargo.lock" "$work/rust/Cargo.lock"
(
    cd "$work/rust"
    CARGO_TARGET_DIR="$ROOT/target/release-test" cargo build --release --quiet
    "$ROOT/target/release-test/release/release-worker" "$dsn"
)
say "every artefact installed and ran a worker"
