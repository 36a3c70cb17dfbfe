#!/usr/bin/env bash
# Installs and builds the Go example worker of pg_workfence (examples/go) on
# Debian 12, as root: Debian's golang-go (1.19) and golang-github-jackc-pgx-v4-dev
# (pgx 4.15 and its dependencies, as Go sources under /usr/share/gocode) when
# either is missing, then `go build` in GOPATH mode against those sources (the
# Go module proxy is not needed, so none is contacted: the Debian packages pin
# every dependency). Idempotent: a second run installs nothing and Go's build
# cache makes the rebuild a no-op.
# The binary: examples/go/workfence-go-worker (git-ignored).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
packages=(golang-go golang-github-jackc-pgx-v4-dev)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null | grep -qx 'install ok installed'; then
        missing+=("$package")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# shellcheck source=env.sh
. "$here/env.sh"
cd "$here"
go build -o workfence-go-worker .
echo "[examples/go] built $here/workfence-go-worker with $(go version | cut -d' ' -f3), pgx $(dpkg-query -W -f='${Version}' golang-github-jackc-pgx-v4-dev)"
