#!/usr/bin/env bash
# Idempotent machine setup for pg_workfence on Debian 12, run as root.
#
# Installs exactly what building and testing needs and nothing else:
#   - PostgreSQL 15 server headers, pinned to the installed server's version
#     (unpinned, apt pulls a newer build from the security suite and with it a
#     server, libpq and openssl upgrade);
#   - clang/libclang for pgrx's bindgen, sudo for `cargo pgrx test --runas`;
#   - pgbouncer, for tests/pgbouncer.rs (the functions through a transaction-
#     pooling PgBouncer). The test runs its own pgbouncer on a free port with
#     a config it writes; the package's system service (localhost:6432, no
#     databases) is neither used nor touched;
#   - cargo-pgrx at exactly the version Cargo.toml pins pgrx to;
#   - `cargo pgrx init` against the system pg_config, only when ~/.pgrx/config.toml
#     lacks the pg15 line (rewriting it makes pgrx-pg-sys re-run bindgen);
#   - the example workers' dependencies (examples/<lang>/install.sh).
# Safe to run any number of times; a second run does no work.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_MAJOR=15
PG_CONFIG="/usr/lib/postgresql/${PG_MAJOR}/bin/pg_config"

log() { printf '[setup] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/setup.sh must run as root (it installs apt packages)" >&2
    exit 1
fi

# --- apt ------------------------------------------------------------------
need_apt=()
dpkg-query -W -f='${Status}' postgresql-${PG_MAJOR} 2>/dev/null | grep -q 'install ok installed' \
    || need_apt+=("postgresql-${PG_MAJOR}")
# pgbouncer needs no pin: it depends on neither the server nor libpq (only
# postgresql-common), and bookworm's build installs without upgrading
# anything already present.
for pkg in postgresql-server-dev-${PG_MAJOR} libclang-dev clang sudo pkg-config pgbouncer; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
    log "apt: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if dpkg-query -W -f='${Status}' postgresql-${PG_MAJOR} 2>/dev/null | grep -q 'install ok installed'; then
        pg_ver="$(dpkg-query -W -f='${Version}' postgresql-${PG_MAJOR})"
        pinned=()
        for p in "${need_apt[@]}"; do
            if [ "$p" = "postgresql-server-dev-${PG_MAJOR}" ]; then
                pinned+=("${p}=${pg_ver}")
            else
                pinned+=("$p")
            fi
        done
        apt-get install -y -qq --no-install-recommends "${pinned[@]}"
    else
        apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
    fi
else
    log "apt: all packages present"
fi

# --- cargo-pgrx at the version Cargo.toml pins -----------------------------
export PATH="$HOME/.cargo/bin:$PATH"
PGRX_VERSION="$(sed -n 's/^pgrx *= *{[^}]*version *= *"=\([0-9.]*\)".*/\1/p; s/^pgrx *= *"=\([0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -n1)"
if [ -z "$PGRX_VERSION" ]; then
    echo "could not read the pinned pgrx version from Cargo.toml" >&2
    exit 1
fi
if cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
    log "cargo-pgrx ${PGRX_VERSION} present"
else
    log "installing cargo-pgrx ${PGRX_VERSION} (about 5 minutes)"
    cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
fi

# --- cargo pgrx init, only when the pg15 line is missing -------------------
if grep -qs "^pg${PG_MAJOR} *= *\"${PG_CONFIG}\"" "$HOME/.pgrx/config.toml"; then
    log "pgrx already initialised for pg${PG_MAJOR}"
else
    log "cargo pgrx init --pg${PG_MAJOR} ${PG_CONFIG}"
    cargo pgrx init --pg${PG_MAJOR} "${PG_CONFIG}"
fi

# --- the example workers' dependencies (examples/<lang>/install.sh) ---------
# Each is idempotent: Python's venv with the hash-pinned psycopg, node-postgres
# by `npm ci` from its lock file, the Rust example built --locked, and a check
# that psql is there for the bash one.
for lang in python node rust bash; do
    log "examples/$lang"
    bash "$ROOT/examples/$lang/install.sh"
done

log "done"
