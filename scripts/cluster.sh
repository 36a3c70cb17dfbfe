#!/usr/bin/env bash
# Helpers for a throwaway PostgreSQL cluster, sourced by the other scripts.
# The server runs as the `postgres` OS user (it refuses root), on 127.0.0.1
# and a free port chosen by the kernel, with its socket in the data directory.
# The major is the one whose pg_config is $WORKFENCE_PG_CONFIG (the harness
# reads the same variable), Debian's PostgreSQL 15 when it is unset.

CLUSTER_PG_CONFIG="${WORKFENCE_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
PG_BIN="$("$CLUSTER_PG_CONFIG" --bindir)"

as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# free_port: print a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# cluster_start DIR PORT: initdb (if needed) and start a cluster in DIR.
cluster_start() {
    local dir="$1" port="$2"
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir"; fi
    if [ ! -f "$dir/PG_VERSION" ]; then
        as_postgres "$PG_BIN/initdb" -D "$dir" -A trust -U postgres --no-sync >/dev/null
    fi
    as_postgres "$PG_BIN/pg_ctl" -D "$dir" -w -l "$dir/server.log" \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
}

# cluster_stop DIR: stop the cluster in DIR if it runs (pg_ctl -m fast).
# Returns 0 when it is stopped afterwards, or there is no cluster in DIR.
cluster_stop() {
    local dir="$1" status=0
    [ -f "$dir/PG_VERSION" ] || return 0
    # pg_ctl status: 0 running, 3 not running, anything else an error.
    as_postgres "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null || status=$?
    case "$status" in
        0) as_postgres "$PG_BIN/pg_ctl" -D "$dir" -w -m fast stop >/dev/null ;;
        3) return 0 ;;
        *)
            echo "pg_ctl status failed ($status) for $dir" >&2
            return "$status"
            ;;
    esac
}

# scratch_base ROOT: a directory for cluster data that the postgres user can
# reach: ROOT/target when every parent directory lets it through, otherwise a
# per-checkout directory under /tmp (a clone under /root, say, is not
# traversable by postgres).
scratch_base() {
    local root="$1"
    mkdir -p "$root/target"
    if [ "$(id -u)" -ne 0 ] || runuser -u postgres -- test -x "$root/target"; then
        echo "$root/target"
    else
        local d
        d="/tmp/pg_workfence-$(printf '%s' "$root" | cksum | cut -d' ' -f1)"
        mkdir -p "$d"
        chmod 755 "$d"
        echo "$d"
    fi
}

# cluster_with_extension DIR DB: start a new cluster in DIR (removed first)
# on a free port, create database DB with the extension in it, and set
# CLUSTER_DSN to its libpq connection string (superuser postgres, TCP). The
# caller stops it with cluster_stop DIR (and removes DIR).
cluster_with_extension() {
    local dir="$1" db="$2" port
    rm -rf "$dir"
    port="$(free_port)"
    cluster_start "$dir" "$port"
    as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres \
        -d postgres -c "CREATE DATABASE $db"
    as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres \
        -d "$db" -c 'CREATE EXTENSION pg_workfence'
    CLUSTER_DSN="host=127.0.0.1 port=$port user=postgres dbname=$db"
}
