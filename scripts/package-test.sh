#!/usr/bin/env bash
# The package tier of scripts/test.sh: the artefacts of scripts/package.sh
# installed the way a user installs them, on this machine, as root.
#
# PostgreSQL 15, the .deb:
#   0. every pg_workfence file a development install left in either major's
#      directories is removed first, so that only the packages' files count;
#   1. the previous release's .deb (built from its commit in a git worktree)
#      installed with dpkg -i; CREATE EXTENSION in a fresh cluster; an item
#      claimed (fencing token epoch 1); a session kept open;
#   2. this release's .deb installed over it with dpkg -i while that server
#      runs: the open session (the old library mapped) still claims; a new
#      session (the new library, the old schema) enqueues and claims; ALTER
#      EXTENSION pg_workfence UPDATE; the token claimed under the previous
#      release still finishes, a function new in this release answers;
#   3. the pg_regress golden files against the packaged files;
#   4. DROP EXTENSION, dpkg -r: no pg_workfence file is left in the server's
#      directories, and the extension is no longer available.
# PostgreSQL 18, the tarball (no earlier release was built for 18):
#   1. install.sh refuses 15's pg_config; install.sh --pg-config into the
#      PG 18 tree; the golden files;
#   2. a database created at the previous release's version from its frozen
#      install script (copied in as an older installation would have left it)
#      updated with ALTER EXTENSION UPDATE, its claimed token finished;
#   3. install.sh again while a session that loaded the library stays open:
#      that session and a new one both still claim;
#   4. install.sh --uninstall: no pg_workfence file is left.
#
# usage: scripts/package-test.sh [--packages DIR]   (default target/packages;
#        the artefacts are built there by scripts/package.sh first)
#        scripts/package-test.sh --prepare   only build the previous release's
#        .deb, installing nothing (scripts/test.sh does it beside the client
#        tests). It is kept in target/previous-release/, named by its commit
#        and by a hash of this checkout's packaging files, and reused.
# It leaves PostgreSQL 15 and 18 without pg_workfence installed:
# scripts/install-build.sh 15|18 puts a development build back.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=majors.sh
. scripts/majors.sh
# shellcheck source=../packaging/previous-release.sh
. packaging/previous-release.sh

packages="$ROOT/target/packages"
prepare=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --packages) packages="$2"; shift 2 ;;
        --prepare) prepare=1; shift ;;
        -h|--help) sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "scripts/package-test.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/package-test.sh installs packages: run it as root" >&2
    exit 1
fi

version="$(crate_version "$ROOT")"
deb="$packages/postgresql-15-pg-workfence_${version}_amd64.deb"
tarball="$packages/pg_workfence-$version-pg18-linux-amd64.tar.gz"

say() { printf '[package-test %s] %s\n' "$(date +%T)" "$*"; }
fail() { printf '[package-test %s] FAILED: %s\n' "$(date +%T)" "$*" >&2; exit 1; }
work="$(mktemp -d)"
chmod 755 "$work"

# The previous release's .deb: its commit's source (which never changes)
# packaged with this checkout's packaging files, so a build named by both is
# reused.
packaging_hash="$(find packaging scripts/package.sh -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16)"
previous_dir="$ROOT/target/previous-release/${PREVIOUS_COMMIT:0:12}-$packaging_hash"
previous_deb="$previous_dir/postgresql-15-pg-workfence_${PREVIOUS_VERSION}_amd64.deb"
build_previous_deb() {
    if [ -f "$previous_deb" ]; then
        say "PostgreSQL 15: the previous release's .deb ($PREVIOUS_VERSION) was built before: $previous_deb"
        return
    fi
    say "PostgreSQL 15: building the previous release's .deb ($PREVIOUS_VERSION at ${PREVIOUS_COMMIT:0:12})"
    git rev-parse --git-dir >/dev/null 2>&1 \
        || fail "$ROOT is not a git checkout: the previous release is built from its history"
    git cat-file -e "$PREVIOUS_COMMIT^{commit}" 2>/dev/null \
        || fail "commit $PREVIOUS_COMMIT of release $PREVIOUS_VERSION is not in this clone (a shallow clone?)"
    git worktree add --detach --force "$work/previous" "$PREVIOUS_COMMIT" >/dev/null
    rm -rf "$previous_dir.partial"
    bash scripts/package.sh --major 15 --source "$work/previous" --out "$previous_dir.partial" >/dev/null
    git worktree remove --force "$work/previous"
    [ -f "$previous_dir.partial/${previous_deb##*/}" ] || fail "no ${previous_deb##*/} was built"
    # Renamed into place whole: an interrupted build leaves no .deb to reuse.
    rm -rf "$previous_dir"
    mv "$previous_dir.partial" "$previous_dir"
}
if [ "$prepare" = 1 ]; then
    trap 'git worktree remove --force "$work/previous" 2>/dev/null || true; rm -rf "$work"' EXIT
    build_previous_deb
    exit 0
fi
clusters=()
# Whatever happens, the machine is left with neither package nor tarball
# installed (scripts/install-build.sh puts a development build back).
cleanup() {
    local d
    for d in "${clusters[@]}"; do cluster_stop "$d" || true; done
    if dpkg-query -W -f='${Status}' postgresql-15-pg-workfence 2>/dev/null | grep -q 'install ok installed'; then
        dpkg -r postgresql-15-pg-workfence >/dev/null || true
    fi
    remove_all_files 18
    if git worktree list | grep -q "$work/previous"; then
        git worktree remove --force "$work/previous" || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# files_of MAJOR: every pg_workfence file in MAJOR's library and extension
# directories.
files_of() {
    local pg_config
    pg_config="$(pg_config_of "$1")"
    find "$("$pg_config" --pkglibdir)" "$("$pg_config" --sharedir)/extension" -maxdepth 1 \
        -name 'pg_workfence*' -print 2>/dev/null | sort
}
remove_all_files() {
    local f
    for f in $(files_of "$1"); do rm -f "$f"; done
}

# start MAJOR NAME: a fresh cluster of MAJOR; sets $port and $data.
start() {
    WORKFENCE_PG_CONFIG="$(pg_config_of "$1")"
    export WORKFENCE_PG_CONFIG
    # shellcheck source=cluster.sh
    . scripts/cluster.sh
    data="$(scratch_base "$ROOT")/package-test-$1-$2"
    cluster_stop "$data" >/dev/null 2>&1 || true
    rm -rf "$data"
    port="$(free_port)"
    clusters+=("$data")
    cluster_start "$data" "$port"
}
# sql DB QUERY: one value, unaligned, from a new session.
sql() { "$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$1" -Atc "$2"; }

# open_session DB: one psql session kept open (a coprocess) across the
# reinstalls, so that what a running backend sees is tested; held QUERY sends
# a query returning one value to it and prints the answer (or psql's error).
open_session() {
    coproc HELD { "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$1" 2>&1; }
}
held() {
    local answer
    printf '%s;\n' "$1" >&"${HELD[1]}" || fail "the held session is gone (before: $1)"
    IFS= read -r -t 30 answer <&"${HELD[0]}" || fail "the held session did not answer: $1"
    printf '%s\n' "$answer"
}
close_session() {
    printf '\\q\n' >&"${HELD[1]}" || true
    wait "$HELD_PID" 2>/dev/null || true
}

# claim_one DB: enqueue and claim item 'package-test'; prints "id epoch".
claim_one() {
    sql "$1" "SELECT id FROM workfence.work_enqueue('q', key => 'package-test')" >/dev/null
    sql "$1" "SELECT id || ' ' || epoch FROM workfence.work_claim('q', 'owner', '10 minutes')"
}

# finish_and_check DB ID EPOCH: the token finishes (true) after the update.
finish_and_check() {
    local done_
    done_="$(sql "$1" "SELECT workfence.work_finish($2, 'owner', $3)")"
    [ "$done_" = t ] || fail "the token ($2, epoch $3) claimed before the update did not finish: $done_"
}

# --- PostgreSQL 15: the .deb ------------------------------------------------
build_previous_deb
# This release's artefacts are built after the previous one's, always: the
# two builds share target/ and its uplifted target/release/libpg_workfence.so
# (a cdylib's name carries no hash), so the last build must be this one's.
say "building this release's artefacts (scripts/package.sh)"
bash scripts/package.sh --out "$packages" >/dev/null

if dpkg-query -W -f='${Status}' postgresql-15-pg-workfence 2>/dev/null | grep -q 'install ok installed'; then
    dpkg -r postgresql-15-pg-workfence >/dev/null
fi
for major in "${MAJORS[@]}"; do remove_all_files "$major"; done
dpkg -i "$previous_deb" >/dev/null
[ "$(dpkg-query -W -f='${Version}' postgresql-15-pg-workfence)" = "$PREVIOUS_VERSION" ] \
    || fail "dpkg does not report $PREVIOUS_VERSION installed"
start 15 upgrade
"$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres app
sql app "CREATE EXTENSION pg_workfence" >/dev/null
[ "$(sql app "SELECT extversion FROM pg_extension WHERE extname = 'pg_workfence'")" = "$PREVIOUS_VERSION" ] \
    || fail "the previous package did not create version $PREVIOUS_VERSION"
read -r id epoch <<<"$(claim_one app)"
open_session app
[ "$(held "SELECT count(*) FROM workfence.work_claim('held', 'owner', '1 minute')")" = 0 ] \
    || fail "the held session could not call the previous release"
say "PostgreSQL 15: $PREVIOUS_VERSION installed from its .deb, item $id claimed at epoch $epoch"

dpkg -i "$deb" >/dev/null
[ "$(dpkg-query -W -f='${Version}' postgresql-15-pg-workfence)" = "$version" ] \
    || fail "dpkg does not report $version installed after the upgrade"
# The session opened before the upgrade keeps the library it loaded.
[ "$(held "SELECT count(*) FROM workfence.work_claim('held', 'owner', '1 minute')")" = 0 ] \
    || fail "the session opened before dpkg -i failed after it"
# A new session loads the new library, which serves the not yet updated schema.
sql app "SELECT id FROM workfence.work_enqueue('q', key => 'before-update')" >/dev/null
[ "$(sql app "SELECT count(*) FROM workfence.work_claim('q', 'other', '1 minute')")" = 1 ] \
    || fail "the new library did not claim under the previous release's schema"
sql app "ALTER EXTENSION pg_workfence UPDATE" >/dev/null
[ "$(sql app "SELECT extversion FROM pg_extension WHERE extname = 'pg_workfence'")" = "$version" ] \
    || fail "ALTER EXTENSION UPDATE did not reach $version"
finish_and_check app "$id" "$epoch"
cmp -s router/install.sql "$("$PG15_CONFIG" --sharedir)/contrib/pg_workfence_router.sql" \
    || fail "the .deb does not carry router/install.sql as contrib/pg_workfence_router.sql"
notices=/usr/share/doc/postgresql-15-pg-workfence/THIRD-PARTY-NOTICES.gz
zgrep -q '^pgrx [0-9.]*: MIT$' "$notices" \
    || fail "$notices does not list pgrx, which the library links"
[ "$(sql app "SELECT state FROM workfence.work_item('q', 'package-test')")" = done ] \
    || fail "work_item (new in 0.6.0) does not report the finished item as done"
say "PostgreSQL 15: dpkg -i $version over it, ALTER EXTENSION UPDATE, the old token finished"

say "PostgreSQL 15: golden files against the packaged files"
WORKFENCE_PG_CONFIG="$PG15_CONFIG" bash scripts/pg_regress.sh

close_session
sql app "DROP EXTENSION pg_workfence" >/dev/null
owned="$(dpkg -L postgresql-15-pg-workfence | while read -r f; do if [ -f "$f" ]; then echo "$f"; fi; done)"
dpkg -r postgresql-15-pg-workfence >/dev/null
left="$(files_of 15)"
[ -z "$left" ] || fail "dpkg -r left files behind: $left"
available="$(sql app "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_workfence'")"
[ "$available" = 0 ] || fail "pg_workfence is still available after dpkg -r"
say "PostgreSQL 15: dpkg -r removed all $(wc -w <<<"$owned") files; the extension is no longer available"
cluster_stop "$data"

# --- PostgreSQL 18: the tarball ---------------------------------------------
tar -C "$work" -xzf "$tarball"
unpacked="$work/pg_workfence-$version-pg18-linux-amd64"
if "$unpacked/install.sh" --pg-config "$PG15_CONFIG" >/dev/null 2>&1; then
    fail "install.sh accepted PostgreSQL 15's pg_config for a PostgreSQL 18 build"
fi
cmp -s router/install.sql "$unpacked/router/install.sql" \
    || fail "the tarball does not carry router/install.sql"
grep -q '^pgrx [0-9.]*: MIT$' "$unpacked/THIRD-PARTY-NOTICES.txt" \
    || fail "the tarball's THIRD-PARTY-NOTICES.txt does not list pgrx"
"$unpacked/install.sh" --pg-config "$PG18_CONFIG"
say "PostgreSQL 18: golden files against the tarball's files"
WORKFENCE_PG_CONFIG="$PG18_CONFIG" bash scripts/pg_regress.sh

start 18 upgrade
"$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres app
extension_dir="$("$PG18_CONFIG" --sharedir)/extension"
install -m 0644 "tests/fixtures/released/pg_workfence--$PREVIOUS_VERSION.sql" "$extension_dir/"
sql app "CREATE EXTENSION pg_workfence VERSION '$PREVIOUS_VERSION'" >/dev/null
read -r id epoch <<<"$(claim_one app)"
sql app "ALTER EXTENSION pg_workfence UPDATE" >/dev/null
[ "$(sql app "SELECT extversion FROM pg_extension WHERE extname = 'pg_workfence'")" = "$version" ] \
    || fail "ALTER EXTENSION UPDATE did not reach $version on PostgreSQL 18"
finish_and_check app "$id" "$epoch"
rm -f "$extension_dir/pg_workfence--$PREVIOUS_VERSION.sql"
say "PostgreSQL 18: $PREVIOUS_VERSION's schema updated to $version, the old token finished"

# Installing again while a session that loaded the library stays open: that
# backend keeps the file it mapped (install.sh renames a new file over it),
# and a new session loads the new one.
open_session app
[ "$(held "SELECT count(*) FROM workfence.work_claim('held', 'owner', '1 minute')")" = 0 ] \
    || fail "the held session could not claim on PostgreSQL 18"
"$unpacked/install.sh" --pg-config "$PG18_CONFIG" >/dev/null
[ "$(held "SELECT count(*) FROM workfence.work_claim('held', 'owner', '1 minute')")" = 0 ] \
    || fail "the session opened before the reinstall failed after it"
[ "$(sql app "SELECT count(*) FROM workfence.work_claim('q', 'owner', '1 minute')")" = 0 ] \
    || fail "a new session failed after the reinstall"
close_session
sql app "DROP EXTENSION pg_workfence" >/dev/null
cluster_stop "$data"
"$unpacked/install.sh" --pg-config "$PG18_CONFIG" --uninstall
left="$(files_of 18)"
[ -z "$left" ] || fail "install.sh --uninstall left files behind: $left"
say "PostgreSQL 18: install.sh --uninstall removed every file it installed"
say "passed: $(basename "$deb") $(du -k "$deb" | cut -f1) KiB, $(basename "$tarball") $(du -k "$tarball" | cut -f1) KiB"
