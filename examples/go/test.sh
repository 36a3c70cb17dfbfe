#!/usr/bin/env bash
# Runs the Go example worker's checks and tests (scripts/client-tests.sh go runs
# this with WORKFENCE_TEST_DSN set): gofmt, go vet, then go test -v in GOPATH
# mode against Debian's pgx (examples/go/env.sh). The integration tests need
# WORKFENCE_TEST_DSN (a database where CREATE DATABASE and CREATE EXTENSION
# pg_workfence work) and fail without it. Needs examples/go/install.sh first.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=env.sh
. "$here/env.sh"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
    echo "examples/go/test.sh: go not found: run examples/go/install.sh" >&2
    exit 1
fi
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
    echo "examples/go/test.sh: not gofmt-formatted: $unformatted" >&2
    exit 1
fi
go vet .
go test -v -count=1 -timeout 10m .
