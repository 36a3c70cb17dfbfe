#!/bin/sh
# Install pg_workfence @VERSION@ for PostgreSQL @MAJOR@ into the PostgreSQL
# whose pg_config is given (or the first pg_config on PATH), or remove it.
#
#   ./install.sh [--pg-config PATH]               copy the files in
#   ./install.sh [--pg-config PATH] --uninstall   remove exactly those files
#
# The library goes to `pg_config --pkglibdir`, the control file and the SQL
# scripts to `pg_config --sharedir`/extension. Run it as the user that owns
# those directories (root for a packaged PostgreSQL). It refuses a pg_config
# of another major: the library is built against PostgreSQL @MAJOR@'s ABI.
# Then, in each database: CREATE EXTENSION pg_workfence; (or, after an
# upgrade of these files, ALTER EXTENSION pg_workfence UPDATE;).
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
pg_config="$(command -v pg_config || true)"
action=install
while [ "$#" -gt 0 ]; do
    case "$1" in
        --pg-config) pg_config="$2"; shift 2 ;;
        --uninstall) action=uninstall; shift ;;
        -h|--help)
            sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$pg_config" ] || [ ! -x "$pg_config" ]; then
    echo "install.sh: no pg_config found; pass --pg-config /path/to/pg_config" >&2
    exit 2
fi
major="$("$pg_config" --version | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')"
if [ "$major" != "@MAJOR@" ]; then
    echo "install.sh: $pg_config is PostgreSQL ${major:-?}; this build is for PostgreSQL @MAJOR@" >&2
    exit 1
fi
libdir="$("$pg_config" --pkglibdir)"
extdir="$("$pg_config" --sharedir)/extension"

if [ "$action" = install ]; then
    mkdir -p "$libdir" "$extdir"
    # A running server keeps the library it mapped: replace, never rewrite.
    rm -f "$libdir/pg_workfence.so"
    cp "$here/lib/pg_workfence.so" "$libdir/pg_workfence.so"
    chmod 0755 "$libdir/pg_workfence.so"
    for f in "$here"/extension/*; do
        cp "$f" "$extdir/"
        chmod 0644 "$extdir/$(basename "$f")"
    done
    echo "pg_workfence @VERSION@ installed into $libdir and $extdir"
else
    rm -f "$libdir/pg_workfence.so"
    for f in "$here"/extension/*; do
        rm -f "$extdir/$(basename "$f")"
    done
    echo "pg_workfence @VERSION@ removed from $libdir and $extdir"
fi
