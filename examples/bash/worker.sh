#!/usr/bin/env bash
# examples/bash/worker.sh: a pg_workfence worker in bash, talking to the server
# only through psql. It claims items with a long poll, runs each job in the
# background while a heartbeat renews the lease every lease/3 (stopping the job
# when a renew is refused), writes the job's effects and finishes the item in
# ONE transaction fenced by work_assert, records failures with work_fail, and
# on SIGTERM (or SIGINT) releases everything it holds and exits 0. One psql
# session stays open for the worker's life and LISTENs on work_lease_lost: a
# notification naming a token of the batch (id and epoch) stops that job at
# once, as a refused renew does (see "listener" below).
#
# Every SQL value goes to psql as a variable (-v name=value) and is referenced
# as :'name', which psql quotes as a literal: no value is ever spliced into SQL
# text. The SQL itself is in quoted here-documents, so bash expands nothing in
# it. Needs bash >= 5.1 and psql; see README.md beside this file.
set -euo pipefail

log() { printf '[bash pid=%d] %s\n' "$$" "$*"; }
die() { log "error: $*" >&2; exit 2; }

# ------------------------------------------------------------------- state --
# The batch being worked on, one array entry per claimed item
# (states: held, settled or lost), and the children in flight.
# renews: t, or f when the payload says "heartbeat": false (see heartbeat).
ids=() epochs=() attempts=() ns=() sleeps=() fails=() renews=() states=()
stopping=0
claim_pid='' job_pid='' cancel_pid='' timer_pid=''
next_heartbeat=0
# The listener (see "listener" below): its psql, the fds of its fifos, the
# reader in the background while a job runs, and the reader's number.
listen_pid='' listen_in='' listen_out='' reader_pid='' reader_seq=0
notified_index=-1

# stop_children: SIGTERM to the job and the helpers in the background. (The
# long poll is cancelled through the server instead: see claim.)
stop_children() {
    local p
    for p in "$job_pid" "$cancel_pid" "$timer_pid" "$reader_pid"; do
        if [[ -n $p ]]; then kill -TERM "$p" 2>/dev/null || :; fi
    done
}

# On SIGTERM or SIGINT: set the flag that every loop tests, and stop the job.
# The main loop then releases what is held and ends.
on_signal() {
    stopping=1
    stop_children
}
# Set first thing, so that a SIGTERM during start-up also ends with exit 0.
trap on_signal TERM INT

# ---------------------------------------------------------------- settings --
(( BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1) )) ||
    die "bash >= 5.1 is needed (wait -n -p, SRANDOM), this is $BASH_VERSION"
psql_bin=$(command -v psql) || die "psql not found (apt-get install postgresql-client)"
# Debian's /usr/bin/psql is pg_wrapper, a Perl script that picks a client
# version at every call; it made an item cost about 95 ms of overhead instead
# of 20. Call the newest installed psql binary directly instead (psql talks
# to servers older than itself).
if [[ $(readlink -f "$psql_bin") == */pg_wrapper ]]; then
    mapfile -t found < <(printf '%s\n' /usr/lib/postgresql/*/bin/psql | sort -V)
    if [[ -x ${found[-1]} ]]; then psql_bin=${found[-1]}; fi
fi

dsn=${WORKFENCE_DSN:-}
[[ -n $dsn ]] || die "WORKFENCE_DSN must be set to a libpq connection string"
queue=${WORKFENCE_QUEUE:-examples}
owner=${WORKFENCE_OWNER:-$HOSTNAME}
batch=${WORKFENCE_BATCH:-5}
lease=${WORKFENCE_LEASE_SECONDS:-6}
wait_secs=${WORKFENCE_WAIT_SECONDS:-5}

# to_ms SECONDS: "6" or "1.5" -> milliseconds on stdout; fails on anything else.
to_ms() {
    [[ $1 =~ ^([0-9]{1,7})(\.([0-9]*))?$ ]] || return 1
    local frac="${BASH_REMATCH[3]}000"
    printf '%d\n' $(( 10#${BASH_REMATCH[1]} * 1000 + 10#${frac:0:3} ))
}
# secs VAR MS: set VAR to MS milliseconds as "S.mmm", for sleep(1) (no subshell).
secs() { printf -v "$1" '%d.%03d' $(( $2 / 1000 )) $(( $2 % 1000 )); }
# now_ms VAR: set VAR to the wall-clock time in milliseconds. It only paces
# the heartbeat: leases are timed by the server's clock.
now_ms() { local t=${EPOCHREALTIME/[.,]/}; printf -v "$1" '%d' $(( 10#$t / 1000 )); }

if ! [[ $batch =~ ^[0-9]{1,4}$ ]] || (( 10#$batch < 1 )); then
    die "WORKFENCE_BATCH must be a positive integer, got '$batch'"
fi
if ! lease_ms=$(to_ms "$lease") || (( lease_ms == 0 )); then
    die "WORKFENCE_LEASE_SECONDS must be a positive number, got '$lease'"
fi
to_ms "$wait_secs" >/dev/null || die "WORKFENCE_WAIT_SECONDS must be a number >= 0, got '$wait_secs'"
[[ -n ${owner//[[:space:]]/} ]] || die "WORKFENCE_OWNER (or the hostname) is empty"
heartbeat_ms=$(( lease_ms / 3 > 0 ? lease_ms / 3 : 1 ))
heartbeat_s=''
secs heartbeat_s "$heartbeat_ms"

# psql with the settings every call shares; SQL comes on stdin.
# -X no psqlrc, -q -A -t bare rows, -w never prompt, ON_ERROR_STOP so the first
# error ends the script (rolling back an open transaction) with exit status 3,
# VERBOSITY=verbose so errors carry their SQLSTATE ("ERROR:  55000: lease lost").
psql_cmd=("$psql_bin" -X -q -A -t -w -F '|' -v ON_ERROR_STOP=1 -v VERBOSITY=verbose
          -v owner="$owner" -v lease="$lease" -d "$dsn")
pg() { "${psql_cmd[@]}" "$@"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/workfence-bash.XXXXXX")
# The long poll's connection names itself with this, so it can be cancelled.
claim_app="workfence-bash-$$-$SRANDOM"

# ----------------------------------------------------------------- helpers --
# first_line FILE: the first non-empty line of FILE (for one-line logs).
first_line() { grep -m1 -v '^[[:space:]]*$' "$1" || printf '(no message)'; }

# held_tokens [renewed]: sets held (indexes of the batch still held; with
# "renewed", only those the heartbeat renews), and id_list and epoch_list,
# the same items as PostgreSQL array literals ("{1,2}").
held_tokens() {
    local i
    held=() id_list='' epoch_list=''
    for i in "${!ids[@]}"; do
        [[ ${states[i]} == held ]] || continue
        [[ ${1:-} != renewed || ${renews[i]} == t ]] || continue
        held+=("$i")
        id_list+="${id_list:+,}${ids[i]}"
        epoch_list+="${epoch_list:+,}${epochs[i]}"
    done
    id_list="{$id_list}" epoch_list="{$epoch_list}"
}

# Waiting for children. Bash 5.2 has a race: when a trapped signal
# interrupts `wait PID` just as PID exits, the exit can be lost, and a later
# `wait PID` blocks until some other child exits. So, once SIGTERM has come
# (the only time a wait is interrupted), this script never waits on a pid
# again: it checks with `kill -0` whether the process is gone.

# nap SECONDS: sleep without a child process (a read that times out).
exec {nap_fd}<> <(:)
nap() { read -r -t "$1" -u "$nap_fd" || :; }

# wait_gone PID: return once process PID has ended (and bash has reaped it).
wait_gone() { while kill -0 "$1" 2>/dev/null; do nap 0.005; done; }

# reap VAR: SIGTERM the child whose pid is in the variable VAR, return once
# it has ended, clear VAR. Nothing to do when VAR is empty.
reap() {
    local -n pid_of=$1
    if [[ -n $pid_of ]]; then
        kill -TERM "$pid_of" 2>/dev/null || :
        wait_gone "$pid_of"
        pid_of=''
    fi
}

# release_held: hand back every held item (work_release), in one psql call.
release_held() {
    local -a held
    local id_list epoch_list i out id epoch ok
    held_tokens
    (( ${#held[@]} > 0 )) || return 0
    for i in "${held[@]}"; do states[i]=settled; done
    if ! out=$(pg -v ids="$id_list" -v epochs="$epoch_list" 2>"$tmp/release.err" <<'SQL'
SELECT t.id, t.epoch, workfence.work_release(t.id, :'owner', t.epoch)
  FROM unnest(:'ids'::bigint[], :'epochs'::bigint[]) AS t(id, epoch);
SQL
    ); then
        log "error release ids=$id_list: $(first_line "$tmp/release.err")"
        return 0
    fi
    while IFS='|' read -r id epoch ok; do
        if [[ $ok == t ]]; then log "release id=$id epoch=$epoch"; else log "refused id=$id (lease lost)"; fi
    done <<<"$out"
}

cleanup() {
    local status=$?
    trap - TERM INT
    stop_children
    # Only after an unexpected error: the server notices the lost client
    # within client_connection_check_interval (set for that connection).
    if [[ -n $claim_pid ]]; then kill -TERM "$claim_pid" 2>/dev/null || :; fi
    release_held   # does something only after an unexpected error
    listen_stop
    rm -rf -- "$tmp"
    exit "$status"
}
trap cleanup EXIT

# --------------------------------------------------------------- listener --
# LISTEN work_lease_lost needs a session that stays open (a psql per call,
# as everywhere else here, would miss what comes between calls), and psql
# prints a notification only after it has run a command:
#   Asynchronous notification "work_lease_lost" with payload "{...}" received
#   from server process with PID 4711.
# (one line; LC_ALL=C keeps it in English). So one psql runs for the
# worker's life, reading commands from the fifo listen.in and writing to the
# fifo listen.out. While a job runs, a reader (a background subshell, see
# listen_reader) sends it an empty query (";": one round trip on the open
# connection, no output) every 0.2 s, reads its output, and exits when a
# notification names a token of the batch: like the job and the timer, it
# ends the `wait -n` of process_item. Outside jobs nobody reads; what comes
# meanwhile waits in psql's connection and is read by the next job's reader
# (mostly other workers' tokens, skipped). The notification is a hint that
# comes when the re-claim commits: the refused renew and work_assert remain
# the ground truth, and without a listener (psql could not connect, or
# exited) the worker goes on stopping jobs on refused renews only, and
# starts a new listener before its next claim.
listen_mark="workfence-listen-$$-$SRANDOM"
listen_partial=''
re_notification='^Asynchronous notification "work_lease_lost" with payload "(.*)" received from server process with PID [0-9]+\.$'
# Inside JSON strings every quote is escaped, so the first '"id":' and the
# first '"epoch":' are the keys themselves, whatever the key or owner say.
re_lost_id='"id"[[:space:]]*:[[:space:]]*([0-9]+)'
re_lost_epoch='"epoch"[[:space:]]*:[[:space:]]*([0-9]+)'

# listen_read VAR SECONDS: one whole line of the listener's output into VAR,
# waiting up to SECONDS. Returns 0 with a line, 1 at end of file (psql has
# exited), 2 when the time passed first. A line partly read when the time is
# up is kept in listen_partial and completed by the next call: no line is
# ever split. (read(1) takes a pipe byte by byte, so it never reads past the
# line it returns, and the next reader starts on a line boundary.)
listen_read() {
    local -n line_of=$1
    local part status=0
    IFS= read -r -t "$2" -u "$listen_out" part || status=$?
    if (( status == 0 )); then
        line_of=$listen_partial$part listen_partial=''
        return 0
    elif (( status > 128 )); then
        listen_partial+=$part
        return 2
    fi
    listen_partial=''   # an unterminated last line is no notification
    return 1
}

# listen_start: start the listener's psql, LISTEN, and return once psql has
# confirmed it (or 1, logged, if it could not). The fifos are opened
# read-write first, which never blocks. Main keeps listen.in so: writing to
# it never raises SIGPIPE, even once psql has died. listen.out is reopened
# read-only, so that its only writer is psql, and psql's exit is an end of
# file for the reader. psql gets neither read-write fd, so its stdin ends
# once the worker and its children are gone, even after a SIGKILL.
listen_start() {
    local rw line status tries=0
    rm -f -- "$tmp/listen.in" "$tmp/listen.out"
    if ! mkfifo -- "$tmp/listen.in" "$tmp/listen.out"; then
        log "error listen: mkfifo failed in $tmp"
        return 1
    fi
    exec {listen_in}<>"$tmp/listen.in" {rw}<>"$tmp/listen.out"
    LC_ALL=C "${psql_cmd[@]}" <"$tmp/listen.in" >"$tmp/listen.out" 2>"$tmp/listen.err" \
        {listen_in}<&- {rw}<&- &
    listen_pid=$!
    exec {listen_out}<"$tmp/listen.out" {rw}<&-
    listen_partial=''
    printf 'LISTEN work_lease_lost;\n\\echo %s ready\n' "$listen_mark" >&"$listen_in"
    while (( ! stopping && tries < 10 )); do
        status=0
        listen_read line 1 || status=$?
        if (( status == 0 )) && [[ $line == "$listen_mark ready" ]]; then
            return 0
        elif (( status == 1 )); then
            break
        elif (( status == 2 )); then
            tries=$(( tries + 1 ))
        fi   # else a line before the confirmation (psql prints none): skip
    done
    if (( ! stopping )); then
        log "error listen: no LISTEN session, stopping jobs on refused renews only: $(first_line "$tmp/listen.err")"
    fi
    listen_stop
    return 1
}

# listen_stop: end the listener (\q, then its fifos are closed: a psql that
# could not take the \q gets an end of file or a broken pipe and exits too).
listen_stop() {
    [[ -n $listen_pid ]] || return 0
    printf '\\q\n' >&"$listen_in" || :
    exec {listen_in}>&- {listen_out}<&-
    listen_pid='' listen_in='' listen_out='' listen_partial=''
}

# listen_reader N: reader number N, in the background while a job runs (see
# above). Exits 0 when a notification names a token of the batch that was
# still held when the reader started (written to $tmp/notified as "id
# epoch"; tokens only leave the batch while a job runs, so none is missed),
# 3 at its own end mark "<mark> N" (which reader_stop has psql echo, so that
# it stops between two lines), 4 when psql has exited.
listen_reader() {
    local n=$1 line payload id epoch i status
    while :; do
        status=0
        listen_read line 0.2 || status=$?
        if (( status == 1 )); then
            exit 4
        elif (( status == 2 )); then
            # Quiet for 0.2 s: an empty query, after which psql prints what
            # has come (listen_in is open read-write: never a SIGPIPE). A
            # reader whose worker is gone (SIGKILL) exits, so that psql's
            # stdin ends and it exits too.
            kill -0 "$$" 2>/dev/null || exit 4
            printf ';\n' >&"$listen_in" || exit 4
            continue
        fi
        [[ $line != "$listen_mark $n" ]] || exit 3
        [[ $line =~ $re_notification ]] || continue   # an old end mark
        payload=${BASH_REMATCH[1]}
        [[ $payload =~ $re_lost_id ]] || continue
        id=${BASH_REMATCH[1]}
        [[ $payload =~ $re_lost_epoch ]] || continue
        epoch=${BASH_REMATCH[1]}
        for i in "${!ids[@]}"; do
            if [[ ${states[i]} == held && ${ids[i]} == "$id" && ${epochs[i]} == "$epoch" ]]; then
                printf '%s %s\n' "$id" "$epoch" >"$tmp/notified"
                exit 0
            fi
        done
    done
}

# reader_start: start the next reader, if there is a listener.
reader_start() {
    [[ -n $listen_pid ]] || return 0
    reader_seq=$(( reader_seq + 1 ))
    rm -f -- "$tmp/notified"
    listen_reader "$reader_seq" &
    reader_pid=$!
}

# reader_ended STATUS: act on how the reader ended (it is reaped already).
# Sets notified_index to the index of the item whose lease a notification
# took (marked lost and logged), or -1.
reader_ended() {
    local id='' epoch='' i
    notified_index=-1
    case $1 in
        0)
            read -r id epoch <"$tmp/notified" || :
            for i in "${!ids[@]}"; do
                [[ ${states[i]} == held && ${ids[i]} == "$id" && ${epochs[i]} == "$epoch" ]] || continue
                log "lease lost (notified) id=$id epoch=$epoch"
                log "refused id=$id (lease lost)"
                states[i]=lost
                notified_index=$i
            done ;;
        3) ;;
        4)
            log "error listen: psql exited, stopping jobs on refused renews only: $(first_line "$tmp/listen.err")"
            listen_stop ;;
        *) log "error listen: reader exit status $1" ;;
    esac
}

# reader_stop: stop the reader between two lines: psql echoes the reader's
# end mark after everything it printed before, and the reader exits there
# (or at a notification that came first, which is acted on). After SIGTERM
# it is just killed (no more waits on a pid then, see wait_gone).
reader_stop() {
    local status=0
    [[ -n $reader_pid ]] || return 0
    if (( ! stopping )) && printf '\\echo %s %d\n' "$listen_mark" "$reader_seq" >&"$listen_in"; then
        wait "$reader_pid" 2>/dev/null || status=$?
        if (( ! stopping )); then
            reader_pid=''
            reader_ended "$status"
            return 0
        fi
    fi
    reap reader_pid   # after SIGTERM (or if the end mark could not be sent)
}

# -------------------------------------------------------------------- job --
# run_job N SLEEP_MS FAIL: the simulated work, run in a background subshell.
# Prints n*n, or fails with a message on stderr. SIGTERM stops it at once.
run_job() {
    local s sleeper=''
    trap 'if [[ -n $sleeper ]]; then kill "$sleeper" 2>/dev/null || :; fi; exit 143' TERM
    # The listener's fifos are not the job's (holding listen.in open would
    # keep the listener's psql alive after a SIGKILL of the worker).
    if [[ -n $listen_in ]]; then exec {listen_in}<&- {listen_out}<&-; fi
    secs s "$2"
    sleep "$s" &
    sleeper=$!
    wait "$sleeper"
    if [[ $3 == t ]]; then
        printf 'job %s failed on purpose\n' "$1" >&2
        exit 1
    fi
    printf '%d\n' $(( $1 * $1 ))
}

# ------------------------------------------------------------- heartbeat --
# heartbeat CURRENT: renew every held item of the batch, in one psql call,
# except those whose payload says "heartbeat": false (they stand in for a
# worker that stalls, a GC pause or a network partition: their lease lapses
# while the job runs). A refused renew marks the item lost. Returns 1 when
# the item at index CURRENT (the one whose job runs) was lost.
heartbeat() {
    local current=$1 i id_list epoch_list out id ok lost_current=0
    local -a held
    held_tokens renewed
    (( ${#held[@]} > 0 )) || return 0
    if ! out=$(pg -v ids="$id_list" -v epochs="$epoch_list" 2>"$tmp/renew.err" <<'SQL'
SELECT t.id, workfence.work_renew(t.id, :'owner', t.epoch, make_interval(secs => :'lease'))
  FROM unnest(:'ids'::bigint[], :'epochs'::bigint[]) AS t(id, epoch);
SQL
    ); then
        # The lease may still be good: the next beat tries again, and
        # work_assert fences the effects whatever happened meanwhile.
        log "error renew ids=$id_list: $(first_line "$tmp/renew.err")"
        return 0
    fi
    while IFS='|' read -r id ok; do
        for i in "${held[@]}"; do
            [[ ${ids[i]} == "$id" ]] || continue
            if [[ $ok == t ]]; then
                log "renew id=$id ok"
            else
                log "renew id=$id refused"
                log "refused id=$id (lease lost)"
                states[i]=lost
                if (( i == current )); then lost_current=1; fi
            fi
        done
    done <<<"$out"
    return "$lost_current"
}

# --------------------------------------------------------------- settling --
# finish_item I OUTPUT: in ONE transaction, assert the lease, write the
# business row, finish the item. A stale token makes work_assert raise 55000,
# psql stops (ON_ERROR_STOP) and the server rolls everything back.
finish_item() {
    local i=$1 output=$2 out status=0
    out=$(pg -v id="${ids[i]}" -v epoch="${epochs[i]}" -v output="$output" -v pid="$$" \
        2>"$tmp/finish.err" <<'SQL'
BEGIN;
SELECT workfence.work_assert(:'id', :'owner', :'epoch') \gset
INSERT INTO examples.results (item_id, epoch, worker_pid, output)
     VALUES (:'id', :'epoch', :'pid', :'output');
SELECT workfence.work_finish(:'id', :'owner', :'epoch',
                             jsonb_build_object('output', :'output'::bigint)) AS finished \gset
\if :finished
COMMIT;
\else
ROLLBACK;
\endif
\echo :finished
SQL
    ) || status=$?
    states[i]=settled
    if (( status == 0 )); then
        # Only a COMMIT that psql saw succeed gets here, with "t".
        if [[ $out == t ]]; then
            log "finish id=${ids[i]} epoch=${epochs[i]} ok"
        else
            log "finish id=${ids[i]} epoch=${epochs[i]} false"
        fi
    elif grep -qE 'ERROR: +55000:' "$tmp/finish.err"; then
        log "refused id=${ids[i]} (lease lost): $(grep -m1 '^DETAIL' "$tmp/finish.err" || first_line "$tmp/finish.err")"
    else
        # Not a refusal (connection lost, server error...): the outcome of
        # the transaction is unknown. Leave the item to its lease: if the
        # commit did happen, it is done; if not, it is claimed again later.
        log "finish id=${ids[i]} epoch=${epochs[i]} error: $(first_line "$tmp/finish.err")"
    fi
}

# fail_item I ERROR: record the job's error (work_fail), retry in 0.2 s.
fail_item() {
    local i=$1 error=$2 out
    states[i]=settled
    if ! out=$(pg -v id="${ids[i]}" -v epoch="${epochs[i]}" -v error="$error" 2>"$tmp/fail.err" <<'SQL'
SELECT workfence.work_fail(:'id', :'owner', :'epoch', :'error', retry_in => make_interval(secs => 0.2));
SQL
    ); then
        log "error fail id=${ids[i]}: $(first_line "$tmp/fail.err")"
    elif [[ $out == t ]]; then
        log "fail id=${ids[i]} error=$error"
    else
        log "refused id=${ids[i]} (lease lost)"
    fi
}

# process_item I: run the job of item I in the background, beating the
# heartbeat (in this shell, so that a frozen worker stops renewing) at the
# batch's schedule until the job ends, with a reader of the listener
# running beside it; then settle the item. A refused renew or a
# notification that takes the lease of item I kills its job and settles
# nothing (one that takes another item of the batch marks it lost).
process_item() {
    local i=$1 status=0 fin now pause
    local -a waited
    if ! [[ ${ns[i]} =~ ^-?[0-9]{1,9}$ && ${sleeps[i]} =~ ^[0-9]{1,9}$ ]]; then
        fail_item "$i" "bad payload: n and sleep_ms must be integers"
        return 0
    fi
    run_job "${ns[i]}" "${sleeps[i]}" "${fails[i]}" >"$tmp/job.out" 2>"$tmp/job.err" &
    job_pid=$!
    reader_start
    while (( ! stopping )); do
        if [[ -z $timer_pid ]]; then
            now_ms now
            secs pause $(( next_heartbeat > now ? next_heartbeat - now : 0 ))
            sleep "$pause" &
            timer_pid=$!
        fi
        waited=("$job_pid" "$timer_pid")
        if [[ -n $reader_pid ]]; then waited+=("$reader_pid"); fi
        unset fin
        status=0
        wait -n -p fin "${waited[@]}" 2>/dev/null || status=$?
        if [[ ${fin:-} == "$job_pid" ]]; then
            job_pid=''
            break
        elif [[ ${fin:-} == "$timer_pid" ]]; then
            timer_pid=''
            now_ms now   # next beat on schedule, or a full period away if late
            next_heartbeat=$(( next_heartbeat + heartbeat_ms > now ? next_heartbeat + heartbeat_ms : now + heartbeat_ms ))
            if ! heartbeat "$i"; then
                reap job_pid   # our lease is gone: stop the job, settle nothing
                reader_stop
                return 0
            fi
        elif [[ -n $reader_pid && ${fin:-} == "$reader_pid" ]]; then
            reader_pid=''
            reader_ended "$status"
            (( notified_index != i )) || break   # a notification took our lease
            reader_start
        fi   # else a signal interrupted the wait: the loop tests the flag
    done
    # The heartbeat stopped with the loop (a renew would wait on
    # work_assert's row lock); its timer is of no more use.
    if [[ -n $timer_pid ]]; then kill -TERM "$timer_pid" 2>/dev/null || :; fi
    timer_pid=''
    reader_stop
    if (( stopping )); then
        # SIGTERM: abandon the job; the main loop releases the item.
        reap job_pid
        return 0
    fi
    if [[ ${states[i]} != held ]]; then
        reap job_pid   # a notification took our lease: stop the job, settle nothing
        return 0
    elif (( status == 0 )); then
        finish_item "$i" "$(<"$tmp/job.out")"
    else
        fail_item "$i" "$(first_line "$tmp/job.err")"
    fi
}

# ------------------------------------------------------------------ claim --
# cancel_claim: ask the server to cancel the long poll (pg_cancel_backend,
# allowed on the sessions of one's own role). Not SIGINT to psql: psql would
# send the same cancel, but once it has seen a SIGINT it prints no more rows,
# so items claimed just before the cancel arrived would be lost to us (until
# their lease lapses). Nor killing psql: the server would go on waiting, and
# could still claim items for a client that is gone.
cancel_claim() {
    if ! pg -v app="$claim_app" >/dev/null 2>"$tmp/cancel.err" <<'SQL'
SELECT pg_cancel_backend(pid) FROM pg_stat_activity
 WHERE application_name = :'app' AND pid <> pg_backend_pid();
SQL
    then
        log "error cancel: $(first_line "$tmp/cancel.err")"
    fi
}

# cancel_until_done: cancel the long poll every 0.2 s while its psql runs (a
# cancel that arrives before the statement has started is lost). Run in the
# background.
cancel_until_done() {
    while kill -0 "$claim_pid" 2>/dev/null; do
        cancel_claim
        nap 0.2
    done
}

# claim: one long poll (work_claim with wait), in the background so that
# SIGTERM can cancel it. Fills the batch arrays; payload fields come out of
# SQL as separate columns (NULL, printed empty, when not a JSON number).
claim() {
    local status=0 f now
    ids=() epochs=() attempts=() ns=() sleeps=() fails=() renews=() states=()
    # client_connection_check_interval: should psql die without cancelling,
    # the server notices within a second instead of claiming for nobody.
    PGOPTIONS="${PGOPTIONS:-} -c client_connection_check_interval=1000" \
    "${psql_cmd[@]}" -v app="$claim_app" -v queue="$queue" -v batch="$batch" \
        -v wait="$wait_secs" >"$tmp/claim.out" 2>"$tmp/claim.err" <<'SQL' &
SET application_name = :'app';
SELECT c.id, c.epoch, c.attempt,
       CASE WHEN jsonb_typeof(c.payload -> 'n') = 'number' THEN c.payload ->> 'n' END,
       CASE WHEN jsonb_typeof(c.payload -> 'sleep_ms') = 'number' THEN c.payload ->> 'sleep_ms' END,
       coalesce(c.payload -> 'fail' = 'true'::jsonb, false),
       coalesce(c.payload -> 'heartbeat' <> 'false'::jsonb, true)
  FROM workfence.work_claim(:'queue', :'owner', make_interval(secs => :'lease'), :'batch',
                            make_interval(secs => :'wait')) AS c;
SQL
    claim_pid=$!
    if (( ! stopping )); then wait "$claim_pid" 2>/dev/null || status=$?; fi
    if (( stopping )); then
        # SIGTERM (before or during the wait): cancel the statement and
        # collect psql, with whatever it claimed before the cancel.
        cancel_until_done &
        cancel_pid=$!
        wait_gone "$claim_pid"
        reap cancel_pid
    fi
    claim_pid=''
    # Rows printed are claims the server committed (a cancel that came too
    # late changes nothing): keep them, to work on them or release them.
    now_ms now
    next_heartbeat=$(( now + heartbeat_ms ))
    while IFS='|' read -r -a f; do
        (( ${#f[@]} == 7 )) || { log "error claim: unexpected row '${f[*]}'"; continue; }
        ids+=("${f[0]}") epochs+=("${f[1]}") attempts+=("${f[2]}")
        ns+=("${f[3]}") sleeps+=("${f[4]}") fails+=("${f[5]}") renews+=("${f[6]}") states+=(held)
        log "claim id=${f[0]} epoch=${f[1]} attempt=${f[2]}"
    done <"$tmp/claim.out"
    if (( status != 0 && ${#ids[@]} == 0 && ! stopping )); then
        log "error claim: psql exit status $status: $(first_line "$tmp/claim.err")"
        return 1
    fi
}

# ------------------------------------------------------------------- main --
log "start queue=$queue owner=$owner batch=$batch lease=${lease}s wait=${wait_secs}s heartbeat=${heartbeat_s}s psql=$psql_bin"
while (( ! stopping )); do
    # A listener before each claim (a new one if the last could not connect
    # or exited); without one, jobs stop on refused renews only.
    if [[ -z $listen_pid ]]; then listen_start || :; fi
    (( ! stopping )) || break
    if ! claim; then
        # The server is unreachable or refused the call: back off for a
        # second (SIGTERM cuts it short) and try again.
        sleep 1 &
        timer_pid=$!
        (( stopping )) || wait "$timer_pid" || :
        kill -TERM "$timer_pid" 2>/dev/null || :
        timer_pid=''
        continue
    fi
    for i in "${!ids[@]}"; do
        (( ! stopping )) || break
        [[ ${states[i]} == held ]] || continue   # lost at a heartbeat meanwhile
        process_item "$i"
    done
    release_held   # what is still held here was interrupted by SIGTERM
done
log "exit"
