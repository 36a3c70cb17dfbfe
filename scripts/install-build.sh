#!/usr/bin/env bash
# Build this checkout's extension with the `dist` profile (fat LTO, as the
# packages are built) and install it into one PostgreSQL major's directories
# (what the client tiers of scripts/test.sh test):
#   scripts/install-build.sh 15|18
# `cargo pgrx install` copies the library, the control file, this version's
# install script and every upgrade script pg_workfence--A--B.sql; the frozen
# install scripts of released versions (tests/fixtures/released/, which no
# package carries) are copied beside them so that
# harness/tests/client/upgrade.rs can CREATE EXTENSION ... VERSION '<released>' and
# update it. Running servers keep the library they mapped: it is unlinked
# before the copy, never written in place.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=majors.sh
. scripts/majors.sh
if [ "$#" -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    echo "usage: scripts/install-build.sh MAJOR   (one of ${MAJORS[*]})"
    [ "$#" -eq 1 ] && exit 0
    exit 2
fi
pg_config="$(pg_config_of "$1")"
rm -f "$("$pg_config" --pkglibdir)/pg_workfence.so"
cargo pgrx install --profile dist --pg-config "$pg_config"
for released in tests/fixtures/released/pg_workfence--[0-9]*.[0-9]*.[0-9]*.sql; do
    case "$released" in *--*--*) continue ;; esac
    install -m 0644 "$released" "$("$pg_config" --sharedir)/extension/"
done
