#!/usr/bin/env bash
# Build the release artefacts of pg_workfence, one per PostgreSQL major:
#   target/packages/postgresql-15-pg-workfence_<version>_amd64.deb
#       Debian's layout (/usr/lib/postgresql/15/lib, /usr/share/postgresql/15/
#       extension; the router's script as contrib/pg_workfence_router.sql),
#       Depends: postgresql-15, a copyright file, md5sums; install
#       with dpkg -i, remove with dpkg -r postgresql-15-pg-workfence.
#   target/packages/pg_workfence-<version>-pg18-linux-amd64.tar.gz
#       the `cargo pgrx package` files for PostgreSQL 18 (lib/, extension/,
#       and router/install.sql)
#       with an install.sh that copies them into any PostgreSQL 18's
#       pg_config directories (--pg-config PATH; --uninstall removes them).
#   and, unless --major is given, the worker libraries, each at the version of
#   Cargo.toml (a library whose manifest says another version is refused):
#   target/packages/workfence-<version>-py3-none-any.whl, workfence-<version>.tar.gz
#       the Python library's wheel and sdist (hatchling, from clients/python/.venv)
#   target/packages/workfence-<version>.tgz     the Node.js library (npm pack)
#   target/packages/workfence-<version>.crate   the Rust library (cargo package)
#   scripts/release-test.sh installs each into a clean place and runs a worker.
#
# usage: scripts/package.sh [--out DIR] [--major 15|18]... [--source DIR]
#   --out DIR      where the artefacts go (default target/packages)
#   --major N      build only this major's artefact (repeatable; default 15 18)
#   --source DIR   build the checkout at DIR instead of this one (the package
#                  test builds the previous release from a git worktree; its
#                  version is DIR's Cargo.toml's, the packaging templates are
#                  this checkout's)
# Needs scripts/setup.sh first (cargo-pgrx, both majors' pg_config).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=majors.sh
. "$ROOT/scripts/majors.sh"

usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
out="$ROOT/target/packages"
source_dir="$ROOT"
majors=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --major) majors+=("$2"); shift 2 ;;
        --source) source_dir="$(cd "$2" && pwd)"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "scripts/package.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
libraries=0
if [ "${#majors[@]}" -eq 0 ]; then
    majors=(15 18)
    libraries=1
fi
# The control file and the artefacts' names say amd64 (x86-64): build nothing
# that would carry a wrong label.
if [ "$(dpkg --print-architecture)" != amd64 ]; then
    echo "scripts/package.sh builds x86-64 (amd64) artefacts only; this is $(dpkg --print-architecture)" >&2
    exit 1
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"

version="$(crate_version "$source_dir")"
[ -n "$version" ] || { echo "no version in $source_dir/Cargo.toml" >&2; exit 1; }
stage_root="$(mktemp -d)"
trap 'rm -rf "$stage_root"' EXIT

# build_tree MAJOR DIR: `cargo pgrx package` of the source for MAJOR into DIR
# (the files under their absolute install paths), the library stripped of
# debugging symbols as Debian's packages are (its dynamic symbols stay).
build_tree() {
    local major="$1" dir="$2" pg_config
    pg_config="$(pg_config_of "$major")"
    # Cargo's build directory is this checkout's, also for another source:
    # the dependencies are built once, and each source's library keeps its
    # own fingerprint (its path is part of it).
    # The `dist` profile (fat LTO in one codegen unit). A source from before
    # it (the previous release) has those settings in its release profile:
    # it gets the same `dist` profile from the environment, so that the
    # dependencies this checkout built for `dist` serve it too (only its own
    # crate is compiled) and its library is built as it was released.
    local profile_env=()
    if ! grep -q '^\[profile\.dist\]' "$source_dir/Cargo.toml"; then
        profile_env=(CARGO_PROFILE_DIST_INHERITS=release CARGO_PROFILE_DIST_LTO=fat
            CARGO_PROFILE_DIST_CODEGEN_UNITS=1)
    fi
    (cd "$source_dir" && env "${profile_env[@]}" CARGO_TARGET_DIR="$ROOT/target" \
        cargo pgrx package --profile dist --pg-config "$pg_config" --out-dir "$dir") >&2
    strip --strip-unneeded "$dir$("$pg_config" --pkglibdir)/pg_workfence.so"
}

# fill TEMPLATE MAJOR [NAME=VALUE...]: the template with @VERSION@, @MAJOR@
# and each @NAME@ replaced.
fill() {
    local template="$1" major="$2" text
    shift 2
    text="$(sed -e "s/@VERSION@/$version/g" -e "s/@MAJOR@/$major/g" "$template")"
    local pair
    for pair in "$@"; do
        text="${text//@${pair%%=*}@/${pair#*=}}"
    done
    printf '%s\n' "$text"
}

build_deb() {
    local major="$1" stage="$stage_root/deb-$1" name pkg lib glibc
    name="postgresql-$major-pg-workfence"
    pkg="$stage/pkg"
    build_tree "$major" "$pkg"
    lib="$pkg$("$(pg_config_of "$major")" --pkglibdir)/pg_workfence.so"
    # The newest glibc symbol version the library needs is its libc6 floor.
    glibc="$(objdump -T "$lib" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)"
    install -D -m 0644 "$ROOT/packaging/copyright" "$pkg/usr/share/doc/$name/copyright"
    # The PL/Proxy router's install script (docs/scaling.md, from 0.8.0),
    # where Debian's PostgreSQL keeps SQL scripts that are not extensions.
    if [ -f "$source_dir/router/install.sql" ]; then
        install -D -m 0644 "$source_dir/router/install.sql" \
            "$pkg$("$(pg_config_of "$major")" --sharedir)/contrib/pg_workfence_router.sql"
    fi
    # The statically linked crates' licences and notices (gzipped, as Debian
    # ships documentation).
    python3 "$ROOT/packaging/third_party.py" "$source_dir" \
        "$pkg/usr/share/doc/$name/THIRD-PARTY-NOTICES" >&2
    gzip -9n "$pkg/usr/share/doc/$name/THIRD-PARTY-NOTICES"
    find "$pkg" -type d -exec chmod 0755 {} +
    find "$pkg" -type f -exec chmod 0644 {} +
    mkdir -p "$pkg/DEBIAN"
    fill "$ROOT/packaging/deb/control.in" "$major" \
        "INSTALLED_SIZE=$(du -sk "$pkg/usr" | cut -f1)" "GLIBC_MIN=$glibc" \
        > "$pkg/DEBIAN/control"
    (cd "$pkg" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$pkg/DEBIAN/md5sums"
    chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/md5sums"
    dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out/${name}_${version}_amd64.deb" >/dev/null
    echo "$out/${name}_${version}_amd64.deb"
}

build_tarball() {
    local major="$1" stage="$stage_root/tar-$1" name pg_config tree dir
    name="pg_workfence-$version-pg$major-linux-amd64"
    pg_config="$(pg_config_of "$major")"
    tree="$stage/tree"
    build_tree "$major" "$tree"
    dir="$stage/$name"
    mkdir -p "$dir/lib" "$dir/extension"
    install -m 0755 "$tree$("$pg_config" --pkglibdir)/pg_workfence.so" "$dir/lib/"
    install -m 0644 "$tree$("$pg_config" --sharedir)"/extension/* "$dir/extension/"
    fill "$ROOT/packaging/tarball/install.sh" "$major" > "$dir/install.sh"
    chmod 0755 "$dir/install.sh"
    install -m 0644 "$ROOT/LICENSE" "$ROOT/packaging/copyright" "$dir/"
    if [ -f "$source_dir/router/install.sql" ]; then
        install -D -m 0644 "$source_dir/router/install.sql" "$dir/router/install.sql"
    fi
    python3 "$ROOT/packaging/third_party.py" "$source_dir" "$dir/THIRD-PARTY-NOTICES.txt" >&2
    tar -C "$stage" --owner=0 --group=0 -czf "$out/$name.tar.gz" "$name"
    echo "$out/$name.tar.gz"
}

# build_libraries: the three worker libraries' artefacts into $out, each
# checked to carry the version of Cargo.toml.
build_libraries() {
    local python_version node_version rust_version
    python_version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/clients/python/pyproject.toml")"
    node_version="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
        "$ROOT/clients/node/package.json")"
    rust_version="$(crate_version "$ROOT/clients/rust")"
    local lang found
    for pair in "python=$python_version" "node=$node_version" "rust=$rust_version"; do
        lang="${pair%%=*}" found="${pair#*=}"
        if [ "$found" != "$version" ]; then
            echo "scripts/package.sh: clients/$lang is at version $found, Cargo.toml at $version:" \
                "the libraries take the extension's version" >&2
            exit 1
        fi
    done
    [ -x "$ROOT/clients/python/.venv/bin/hatchling" ] || bash "$ROOT/clients/python/install.sh" >&2
    rm -f "$out/workfence-$version"-py3-none-any.whl "$out/workfence-$version.tar.gz"
    (cd "$ROOT/clients/python" && .venv/bin/hatchling build -d "$out") >&2
    (cd "$out" && npm pack --silent "$ROOT/clients/node") >/dev/null
    (cd "$ROOT" && cargo package -p workfence --no-verify --allow-dirty --quiet) >&2
    cp "$ROOT/target/package/workfence-$version.crate" "$out/"
    local artefact
    for artefact in "workfence-$version-py3-none-any.whl" "workfence-$version.tar.gz" \
        "workfence-$version.tgz" "workfence-$version.crate"; do
        [ -s "$out/$artefact" ] || { echo "scripts/package.sh: $artefact was not built" >&2; exit 1; }
        echo "built $artefact: $(du -k "$out/$artefact" | cut -f1) KiB"
    done
}

for major in "${majors[@]}"; do
    case "$major" in
        15) artefact="$(build_deb 15)" ;;
        18) artefact="$(build_tarball 18)" ;;
        *) echo "scripts/package.sh: no artefact for PostgreSQL $major (15: .deb, 18: tarball)" >&2; exit 2 ;;
    esac
    echo "built $(basename "$artefact"): $(du -k "$artefact" | cut -f1) KiB"
done
[ "$libraries" = 0 ] || build_libraries
