#!/bin/sh
# Install pg_workfence @VERSION@ for PostgreSQL @MAJOR@ into the PostgreSQL
# whose pg_config is given, or remove it.
#
#   ./install.sh --pg-config PATH                 copy the files in
#   ./install.sh --pg-config PATH --uninstall     remove exactly those files
#
# The pg_config must be the server's (the one in its bin directory): a
# client-only pg_config (libpq-dev's /usr/bin/pg_config on Debian) reports
# directories the server does not read, so none is taken from PATH. The
# library needs x86-64 Linux with glibc 2.34 or later.
#
# The library goes to `pg_config --pkglibdir`, the control file and the SQL
# scripts to `pg_config --sharedir`/extension. Run it as the user that owns
# those directories (root for a packaged PostgreSQL). It refuses a pg_config
# of another major: the library is built against PostgreSQL @MAJOR@'s ABI.
# Then, in each database: CREATE EXTENSION pg_workfence; (or, after an
# upgrade of these files, ALTER EXTENSION pg_workfence UPDATE;).
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
pg_config=""
action=install
while [ "$#" -gt 0 ]; do
    case "$1" in
        --pg-config) pg_config="$2"; shift 2 ;;
        --uninstall) action=uninstall; shift ;;
        -h|--help)
            sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$pg_config" ] || [ ! -x "$pg_config" ]; then
    echo "install.sh: pass --pg-config with the server's pg_config (e.g. /usr/lib/postgresql/@MAJOR@/bin/pg_config)" >&2
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
    # Each file is copied beside its destination and renamed over it: a
    # running server keeps the library it mapped, a new session finds either
    # the old file or the new one, never none or half of one.
    place() {
        cp "$1" "$2.tmp-install-$$"
        chmod "$3" "$2.tmp-install-$$"
        mv -f "$2.tmp-install-$$" "$2"
    }
    for f in "$here"/extension/*; do
        place "$f" "$extdir/$(basename "$f")" 0644
    done
    place "$here/lib/pg_workfence.so" "$libdir/pg_workfence.so" 0755
    echo "pg_workfence @VERSION@ installed into $libdir and $extdir"
else
    rm -f "$libdir/pg_workfence.so"
    for f in "$here"/extension/*; do
        rm -f "$extdir/$(basename "$f")"
    done
    echo "pg_workfence @VERSION@ removed from $libdir and $extdir"
fi
