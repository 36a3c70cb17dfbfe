-- pg_workfence: tables, sequence, indexes and privileges.
--
-- Runs first in the install script (pgrx `bootstrap`). CREATE EXTENSION has
-- created schema workfence (from the control file) and put it first on the
-- search_path; every name below is still schema-qualified so nothing depends on it.

-- The fencing token. One sequence for the whole extension, CACHE 1 (the
-- default) so that values are handed out in the order the claims ask for them
-- even across backends; NO CYCLE so a token is never reissued.
CREATE SEQUENCE workfence.epoch_seq AS bigint
    MINVALUE 1 START WITH 1 CACHE 1 NO CYCLE;
COMMENT ON SEQUENCE workfence.epoch_seq IS
    'The fencing-token source: every successful claim takes nextval() as its epoch. Never reset: '
    'a token must never be handed out twice, not after finish, delete, re-enqueue nor dump and restore.';

CREATE TYPE workfence.item_state AS ENUM ('pending', 'claimed', 'done', 'failed', 'cancelled', 'waiting');
COMMENT ON TYPE workfence.item_state IS
    'Life cycle of an item: pending -> claimed -> done | failed; pending or claimed -> cancelled; '
    'claimed -> pending on release or on a retryable failure. An expired lease is claimed anew '
    'directly (claimed -> claimed, with a new epoch and attempts + 1), or, on the final attempt, '
    'made failed. failed or cancelled -> pending only by an operator''s work_retry (from 0.6.0); done is final. '
    'From 0.12.0, waiting: enqueued with parents (after) not all done; waiting -> pending in the transaction of the '
    'last parent''s finish, waiting -> cancelled when a parent ends failed or cancelled (on_parent_failure cancel).';

-- The shapes of two JSON objects the functions build: an entry of an item's
-- `errors` history, and the payload of NOTIFY work_lease_lost (to_jsonb /
-- to_json of a row of these, so every key and value is typed and escaped).
CREATE TYPE workfence.error_entry AS (
    attempt  integer,
    epoch    bigint,
    owner    text,
    at       timestamptz,
    error    text
);
COMMENT ON TYPE workfence.error_entry IS
    'One entry of workfence.items.errors, as jsonb: the attempt, the epoch and owner of its token, when it '
    'failed or its lease lapsed (at), and the error text.';
CREATE TYPE workfence.lost_token AS (
    id     bigint,
    queue  text,
    key    text,
    owner  text,
    epoch  bigint
);
COMMENT ON TYPE workfence.lost_token IS
    'The payload of NOTIFY work_lease_lost, as json: the token a claim superseded.';

-- Item ids. A plain sequence rather than an identity column: an extension
-- member, so pg_extension_config_dump can keep its position across pg_dump.
CREATE SEQUENCE workfence.items_id_seq AS bigint;

CREATE TABLE workfence.items (
    id            bigint NOT NULL DEFAULT pg_catalog.nextval('workfence.items_id_seq'::pg_catalog.regclass) PRIMARY KEY,
    queue         text NOT NULL,
    key           text NOT NULL,
    payload       jsonb NOT NULL,
    priority      integer NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL,
    state         workfence.item_state NOT NULL DEFAULT 'pending',
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL,
    owner         text,
    epoch         bigint,
    lease_until   timestamptz,
    last_error    text,
    result        jsonb,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    finished_at   timestamptz,
    claimed_at    timestamptz,
    max_run       interval,
    errors        jsonb,
    group_key     text,
    slot          integer,
    behind        boolean NOT NULL DEFAULT false,
    turn          timestamptz,
    progress      jsonb,
    rerun_after   bigint,
    rerun_at      timestamptz,
    trace         text,
    has_children  boolean NOT NULL DEFAULT false,
    waiting_on    integer NOT NULL DEFAULT 0,
    on_parent_failure text,
    CONSTRAINT items_queue_key_unique UNIQUE (queue, key)
);
-- No CHECK constraints (0.2.0 had two: attempts in range, a claimed item has
-- owner, epoch and lease). Only the extension's functions write this table,
-- and they keep those invariants; PostgreSQL 15 re-prepares a table's CHECK
-- expressions on every UPDATE statement, which cost claims and finishes up to
-- 10% of their throughput at 16 connections (docs/benchmarks.md).

COMMENT ON TABLE workfence.items IS
    'Work items of every queue. Write only through the workfence.work_* functions: they check the '
    'lease (owner AND epoch) atomically. Not writable by PUBLIC.';
COMMENT ON COLUMN workfence.items.id IS 'Item id, unique in the database.';
COMMENT ON COLUMN workfence.items.queue IS 'Queue name: non-empty, at most 128 bytes, no control characters.';
COMMENT ON COLUMN workfence.items.key IS 'Key, unique within the queue; a UUIDv7 when the submitter gave none.';
COMMENT ON COLUMN workfence.items.payload IS 'What the worker needs to do the work, stored byte for byte as given.';
COMMENT ON COLUMN workfence.items.priority IS 'Lower runs first.';
COMMENT ON COLUMN workfence.items.run_at IS 'Not claimable before this server time (also the retry time after a failure).';
COMMENT ON COLUMN workfence.items.state IS 'pending, claimed, done, failed, cancelled or (from 0.12.0) waiting.';
COMMENT ON COLUMN workfence.items.attempts IS 'Claims that counted as attempts (a release gives its attempt back).';
COMMENT ON COLUMN workfence.items.max_attempts IS
    'How many attempts the item may have: every claim counts as one (a lapsed lease too), a release '
    'gives its attempt back. A failure, or a lapsed lease, on the final attempt makes the item failed '
    '(dead letter).';
COMMENT ON COLUMN workfence.items.owner IS 'Owner named by the latest claim. Checked, but NOT an identity: the epoch is.';
COMMENT ON COLUMN workfence.items.epoch IS 'Fencing token of the latest claim (from workfence.epoch_seq).';
COMMENT ON COLUMN workfence.items.lease_until IS 'Server time at which the current lease lapses; NULL unless claimed.';
COMMENT ON COLUMN workfence.items.last_error IS 'Error text of the latest work_fail.';
COMMENT ON COLUMN workfence.items.result IS 'Result given to work_finish.';
COMMENT ON COLUMN workfence.items.created_at IS 'Server time of the enqueue.';
COMMENT ON COLUMN workfence.items.finished_at IS 'Server time the item became done, failed or cancelled.';
COMMENT ON COLUMN workfence.items.claimed_at IS 'Server time the current epoch was claimed (from 0.6.0; NULL for claims made before).';
COMMENT ON COLUMN workfence.items.max_run IS
    'Run-time limit given at enqueue: no claim or renew sets lease_until past claimed_at + max_run. NULL: no limit.';
COMMENT ON COLUMN workfence.items.errors IS
    'History of failed attempts, oldest first: one object {attempt, epoch, owner, at, error} per work_fail and per '
    'lapsed lease (claimed anew or dead-lettered); the newest 20 are kept, each error text at most 2048 bytes. '
    'NULL until the first entry.';
COMMENT ON COLUMN workfence.items.group_key IS
    'Serial group within the queue (from 0.10.0): at most one item of a (queue, group_key) is claimed at a time, '
    'and a group''s items are claimed in claim order (priority, run_at, id). NULL: in no group.';
COMMENT ON COLUMN workfence.items.slot IS
    'From 0.12.0: the concurrency slot of its queue''s limit (work_limit) the item holds while claimed by a claim of a '
    'limited queue (src/verbs/flow.rs); meaningless in other states.';
COMMENT ON COLUMN workfence.items.behind IS
    'From 0.12.0: a pending item of a group known to have a pending item of its group before it in claim order, '
    'which claims therefore skip without reading (src/verbs/flow.rs, group heads); false for every other item.';
COMMENT ON COLUMN workfence.items.turn IS
    'From 0.12.0: for a group''s first pending item, when a claim of its group made it so (at the earliest its run_at): '
    'claims serve group heads in (priority, turn or else run_at) order, so a group just served waits its turn '
    'behind the others (round-robin). NULL otherwise.';
COMMENT ON COLUMN workfence.items.progress IS
    'From 0.12.0: the newest checkpoint written by work_progress under a current lease (at most 64 KiB), handed to '
    'the next claim of the item so that a retried run resumes from it; cleared when on_conflict makes the item run again.';
COMMENT ON COLUMN workfence.items.rerun_after IS
    'From 0.12.0: the epoch of a run after whose finish (or final failure) the item runs once more, set by a '
    'work_enqueue with on_conflict replace or preserve_run_at while the item was claimed; NULL otherwise.';
COMMENT ON COLUMN workfence.items.rerun_at IS
    'From 0.12.0: when that run once more is due (NULL: at once), with rerun_after.';
COMMENT ON COLUMN workfence.items.trace IS
    'From 0.12.0: the W3C traceparent work_enqueue was given (trace), handed to every claim of the item so that the '
    'worker''s span can link to the request that enqueued it; NULL: none.';

COMMENT ON COLUMN workfence.items.has_children IS
    'From 0.12.0: some item was enqueued with this one in its after (workflows, src/verbs/workflow.rs), so the '
    'item''s finish, failure or cancel settles the edges to its children; false for every other item, whose settle '
    'reads no edge.';
COMMENT ON COLUMN workfence.items.waiting_on IS
    'From 0.12.0: how many of the item''s edges from its parents (workfence.item_edges) are not resolved yet, kept '
    'under the item''s row lock; a waiting item becomes pending when it reaches 0. 0 for an item without parents.';
COMMENT ON COLUMN workfence.items.on_parent_failure IS
    'From 0.12.0: cancel or run, what a parent ending failed or cancelled does to the item while it waits (work_enqueue''s '
    'on_parent_failure); NULL for an item without parents.';

-- The two claim paths, each with an index it can walk in order (a single OR
-- over both cannot use either partial index).
CREATE INDEX items_due_idx ON workfence.items (queue, priority, run_at, id)
    WHERE state = 'pending';
COMMENT ON INDEX workfence.items_due_idx IS 'Claim path 1: pending items in claim order (priority, run_at, id).';
CREATE INDEX items_lease_idx ON workfence.items (queue, lease_until)
    WHERE state = 'claimed';
COMMENT ON INDEX workfence.items_lease_idx IS 'Claim path 2: claimed items by lease expiry, to find lapsed leases.';
-- From 0.12.0: whether anything is due, and when the next item is. In
-- claim order (items_due_idx) a queue's future items of one priority sit
-- between its due items of that priority and the next one's, so without
-- a skip scan (PostgreSQL 18 has one, 15 not) "anything due?" and "the
-- earliest run_at" read every future item (issue 33).
CREATE INDEX items_ready_idx ON workfence.items (queue, run_at)
    WHERE state = 'pending';
COMMENT ON INDEX workfence.items_ready_idx IS
    'Pending items by run_at: whether a queue has a due item, and when its next one is due, in one probe.';
-- From 0.12.0: which concurrency slots of a limited queue its claimed
-- items hold (src/verbs/flow.rs).
CREATE INDEX items_slot_idx ON workfence.items (queue, slot)
    WHERE state = 'claimed' AND slot IS NOT NULL;
COMMENT ON INDEX workfence.items_slot_idx IS
    'Claimed items by concurrency slot: whether a slot of a limited queue is busy, in one probe.';
-- From 0.10.0: a grouped item's claim asks whether its group has an item
-- claimed, or a pending one before it in claim order (src/verbs/flow.rs). Items
-- in no group are not in it.
CREATE INDEX items_group_idx ON workfence.items (queue, group_key, state, priority, run_at, id)
    WHERE group_key IS NOT NULL AND state IN ('pending', 'claimed');
COMMENT ON INDEX workfence.items_group_idx IS
    'Serial groups: a group''s claimed item, and its pending items in claim order.';
-- From 0.12.0: what a claim of a queue with groups walks (src/verbs/flow.rs,
-- group heads): pending items in no group, and each group's head (items
-- not behind), in the order claims serve them. A group's backlog is not in
-- it, so a claim never walks a busy group's items.
CREATE INDEX items_head_idx ON workfence.items (queue, priority, (COALESCE(turn, run_at)), id)
    WHERE state = 'pending' AND NOT behind;
COMMENT ON INDEX workfence.items_head_idx IS
    'Claims of a queue with groups: pending items in no group and each group''s head, in serving order.';
-- From 0.12.0: a group's heads, so that a claim that served the group
-- finds the ones that are no longer first without walking the group.
CREATE INDEX items_group_head_idx ON workfence.items (queue, group_key)
    WHERE state = 'pending' AND group_key IS NOT NULL AND NOT behind;
COMMENT ON INDEX workfence.items_group_head_idx IS
    'A group''s pending items that are not behind: its head, and items that came before it since (src/verbs/flow.rs).';


-- Nobody writes the tables directly: the functions run as the extension's
-- owner (SECURITY DEFINER, set at the end of finalize.sql), so a role that
-- uses the queue is granted EXECUTE on functions, never rights on the tables
-- (docs/operations.md, "Least privilege"). PUBLIC gets nothing.
CREATE INDEX items_finished_idx ON workfence.items (finished_at)
    WHERE state IN ('done', 'failed', 'cancelled');
COMMENT ON INDEX workfence.items_finished_idx IS
    'Purge path: finished items by finished_at, so a purge reads what it deletes, not the table.';

-- The sequences' floor. Rows that come in with ids or epochs of their own
-- (a data-only restore of workfence.items without its sequences, a COPY)
-- lift the sequences above them, so that no later enqueue reuses an id and
-- no later claim hands out an epoch at or below one already in the table.
-- A row with an epoch also lifts epoch_seq to the generation floor (from
-- 0.8.0): it comes from a copy of the database, whose history may have
-- handed out epochs after the copy was made (src/verbs/generation.rs). The floor
-- is taken at the transaction's start (one restore transaction moves the
-- sequence once), as generation::floor_at computes it: milliseconds since
-- 2000-01-01 times 1024. An enqueue's row (created_at = clock_timestamp(),
-- no epoch) never fires it.
CREATE FUNCTION workfence.items_sequence_floor() RETURNS trigger
LANGUAGE plpgsql AS $floor$
DECLARE
    epoch_floor pg_catalog.int8;
BEGIN
    -- Only past the sequence's position: a value nextval already handed out
    -- (an enqueue's own id) never moves it, so no concurrent nextval is undone.
    IF EXISTS (SELECT FROM workfence.items_id_seq AS s
                WHERE NEW.id OPERATOR(pg_catalog.>) s.last_value
                   OR (NEW.id OPERATOR(pg_catalog.=) s.last_value AND NOT s.is_called)) THEN
        PERFORM pg_catalog.setval('workfence.items_id_seq'::pg_catalog.regclass, NEW.id);
    END IF;
    IF NEW.epoch IS NULL THEN
        RETURN NULL;
    END IF;
    epoch_floor := GREATEST(NEW.epoch,
        pg_catalog.floor(pg_catalog.date_part('epoch',
            pg_catalog.transaction_timestamp()
              OPERATOR(pg_catalog.-) '2000-01-01 00:00:00+00'::pg_catalog.timestamptz)
          OPERATOR(pg_catalog.*) 1000::pg_catalog.float8)::pg_catalog.int8
          OPERATOR(pg_catalog.*) 1024);
    IF EXISTS (SELECT FROM workfence.epoch_seq AS s
                WHERE epoch_floor OPERATOR(pg_catalog.>) s.last_value
                   OR (epoch_floor OPERATOR(pg_catalog.=) s.last_value AND NOT s.is_called)) THEN
        PERFORM pg_catalog.setval('workfence.epoch_seq'::pg_catalog.regclass, epoch_floor);
    END IF;
    RETURN NULL;
END
$floor$;
COMMENT ON FUNCTION workfence.items_sequence_floor() IS
    'Trigger of workfence.items: a row inserted with an id or epoch at or above its sequence''s '
    'position (a restore, a COPY) moves the sequence past it; a row with an epoch moves workfence.epoch_seq to '
    'the generation floor too. Not callable by users.';
CREATE TRIGGER items_sequence_floor AFTER INSERT ON workfence.items
    FOR EACH ROW
    WHEN (NEW.epoch IS NOT NULL
          OR NEW.created_at OPERATOR(pg_catalog.<) pg_catalog.transaction_timestamp())
    EXECUTE FUNCTION workfence.items_sequence_floor();

-- Workflows (from 0.12.0, issue 37; src/verbs/workflow.rs): an edge per
-- (parent, child) of an item enqueued with `after`. Edges are made only
-- when the child is inserted, from items that exist already, so they never
-- form a cycle. `resolved`: the parent has settled (done, failed or
-- cancelled) and the child's waiting_on counted it, once. `cancelled`: the
-- parent ended failed or cancelled and the child's on_parent_failure is
-- cancel, so a work_retry of the parent knows which children to bring back.
CREATE TABLE workfence.item_edges (
    parent     bigint NOT NULL,
    child      bigint NOT NULL,
    resolved   boolean NOT NULL DEFAULT false,
    cancelled  boolean NOT NULL DEFAULT false,
    CONSTRAINT item_edges_pkey PRIMARY KEY (parent, child)
);
COMMENT ON TABLE workfence.item_edges IS
    'Workflow edges: the child waits for the parent (work_enqueue''s after). Written only by the extension''s functions; '
    'a purge deletes the edges of the items it deletes. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.item_edges.parent IS 'The item waited for (workfence.items.id).';
COMMENT ON COLUMN workfence.item_edges.child IS 'The waiting item (workfence.items.id).';
COMMENT ON COLUMN workfence.item_edges.resolved IS
    'The parent settled (done, failed or cancelled) and the child''s waiting_on counted it; resolved once, so a parent '
    'finished again after an on_conflict re-run releases nothing.';
COMMENT ON COLUMN workfence.item_edges.cancelled IS
    'The parent ended failed or cancelled and the child''s on_parent_failure is cancel: work_retry of the parent brings '
    'the child back to waiting.';
COMMENT ON INDEX workfence.item_edges_pkey IS 'A parent''s children: what its finish, failure or cancel settles.';
CREATE INDEX item_edges_child_idx ON workfence.item_edges (child, parent);
COMMENT ON INDEX workfence.item_edges_child_idx IS
    'An item''s parents: work_parent_results, work_workflow and a purge.';

-- Settings of a queue, one row per queue that has any (a queue exists by
-- its items; this table holds only what an operator set). `paused`: claims
-- of the queue hand out nothing (work_pause / work_resume).
CREATE TABLE workfence.queues (
    queue      text NOT NULL PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    paused_at  timestamptz,
    concurrency integer,
    rate       integer,
    per        interval,
    grouped    boolean NOT NULL DEFAULT false,
    per_group  integer
);
COMMENT ON TABLE workfence.queues IS
    'Settings of queues, set by an operator through the workfence.work_* functions (work_pause, work_resume, work_limit; '
    'grouped by the first work_enqueue with a group_key), '
    'which tell every session to read it again; a row written any other way is seen by new sessions only. '
    'A queue without a row has the defaults (not paused). Not writable by PUBLIC.';
COMMENT ON COLUMN workfence.queues.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.queues.paused IS 'Whether claims of the queue hand out nothing (work_pause; work_resume ends it).';
COMMENT ON COLUMN workfence.queues.paused_at IS 'Server time of the work_pause that paused it; NULL when not paused.';
COMMENT ON COLUMN workfence.queues.concurrency IS
    'From 0.10.0 (work_limit): at most this many items of the queue under unexpired leases at once; NULL: no limit.';
COMMENT ON COLUMN workfence.queues.rate IS
    'From 0.10.0 (work_limit): at most this many items handed out by claims in any window of length per; NULL: no limit.';
COMMENT ON COLUMN workfence.queues.per IS 'From 0.10.0 (work_limit): the window of the rate limit; NULL without one.';
COMMENT ON COLUMN workfence.queues.grouped IS
    'From 0.10.0: whether an item with a group_key was ever enqueued in the queue (its claims then keep groups serial).';
COMMENT ON COLUMN workfence.queues.per_group IS
    'From 0.12.0 (work_limit): at most this many items of one group_key claimed at once; NULL: one (serial groups).';
COMMENT ON INDEX workfence.queues_pkey IS 'A queue''s settings by name: the claim''s pause check is one probe here.';

-- The slots of a limited queue (from 0.12.0, src/verbs/flow.rs): a claim takes a
-- free slot FOR UPDATE SKIP LOCKED for each item it hands out, so that
-- claims of one queue never wait on each other and the limits stay exact.
-- kind 'c': concurrency slots 1..concurrency, each free unless a claimed
-- item of the queue holds it (items.slot; an item that holds a number above
-- the limit holds a slot retired by a lowered limit). kind 'r': rate slots
-- 1..rate, each free once its last claim left the window (used_at older
-- than per).
CREATE TABLE workfence.queue_slots (
    queue    text NOT NULL,
    kind     "char" NOT NULL CHECK (kind IN ('c', 'r')),
    slot     integer NOT NULL CHECK (slot > 0),
    used_at  timestamptz,
    CONSTRAINT queue_slots_pkey PRIMARY KEY (queue, kind, slot)
);
COMMENT ON TABLE workfence.queue_slots IS
    'Slots of the limited queues, written by work_limit and by claims (src/verbs/flow.rs): a claim takes a free slot per item '
    'it hands out, FOR UPDATE SKIP LOCKED. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.queue_slots.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.queue_slots.kind IS
    'c: a concurrency slot (free unless a claimed item of the queue holds it, items.slot); r: a rate slot (free once used_at is older than per).';
COMMENT ON COLUMN workfence.queue_slots.slot IS
    'Slot number, from 1 to the limit.';
COMMENT ON COLUMN workfence.queue_slots.used_at IS 'r: server time of the claim that last used the slot; NULL if never.';
COMMENT ON INDEX workfence.queue_slots_pkey IS 'A queue''s slots of one kind in slot order.';
CREATE INDEX queue_slots_used_idx ON workfence.queue_slots (queue, used_at NULLS FIRST) WHERE kind = 'r';
COMMENT ON INDEX workfence.queue_slots_used_idx IS 'Rate slots, least recently used first: a claim finds a free one at the front.';

-- Schedules (from 0.12.0, issue 34; src/verbs/schedule.rs): cron in the
-- server. A fire enqueues the item of a slot (key '<name>@<slot>') and moves
-- next_slot past it in one transaction, holding the row FOR UPDATE (firers
-- skip a row another holds): a slot's item and its record commit together
-- or not at all, and next_slot only moves forward past last_slot (the CHECK
-- keeps it so), so no slot is fired twice.
CREATE TABLE workfence.schedules (
    name          text NOT NULL PRIMARY KEY,
    cron          text NOT NULL,
    timezone      text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    catch_up      text NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    priority      integer NOT NULL,
    max_attempts  integer NOT NULL,
    group_key     text,
    paused        boolean NOT NULL DEFAULT false,
    next_slot     timestamptz NOT NULL,
    last_slot     timestamptz,
    last_item_id  bigint,
    last_fired_at timestamptz,
    CONSTRAINT schedules_slots_forward CHECK (last_slot IS NULL OR next_slot > last_slot)
);
COMMENT ON TABLE workfence.schedules IS
    'Schedules (from 0.12.0): written by work_schedule, work_unschedule, work_pause_schedule, work_resume_schedule '
    'and by the fires (work_fire_schedules, the maintenance worker, claims of the queue). Read it through '
    'workfence.work_schedules. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.schedules.name IS 'The schedule''s name; its items'' keys are <name>@<slot>.';
COMMENT ON COLUMN workfence.schedules.cron IS 'Cron expression: 5 fields, 6 with seconds first, or @hourly, @daily, ...';
COMMENT ON COLUMN workfence.schedules.timezone IS 'IANA time zone the expression is read in.';
COMMENT ON COLUMN workfence.schedules.queue IS 'Queue its items are enqueued in.';
COMMENT ON COLUMN workfence.schedules.payload IS 'Payload of every item it enqueues.';
COMMENT ON COLUMN workfence.schedules.catch_up IS 'latest, all or none: what a fire does with slots that passed unfired.';
COMMENT ON COLUMN workfence.schedules.priority IS 'Priority of its items.';
COMMENT ON COLUMN workfence.schedules.max_attempts IS 'max_attempts of its items.';
COMMENT ON COLUMN workfence.schedules.group_key IS 'group_key of its items (NULL: none).';
COMMENT ON COLUMN workfence.schedules.paused IS 'work_pause_schedule: fires nothing until work_resume_schedule.';
COMMENT ON COLUMN workfence.schedules.next_slot IS 'The first slot not yet fired or skipped; due when it is at or before now; infinity when the expression names no more.';
COMMENT ON COLUMN workfence.schedules.last_slot IS 'The last slot fired; NULL before the first fire.';
COMMENT ON COLUMN workfence.schedules.last_item_id IS 'The id of the item the last slot fired (it may since be purged).';
COMMENT ON COLUMN workfence.schedules.last_fired_at IS 'Server time of the last fire.';
COMMENT ON INDEX workfence.schedules_pkey IS 'A schedule by name.';
CREATE INDEX schedules_due_idx ON workfence.schedules (next_slot) WHERE NOT paused;
COMMENT ON INDEX workfence.schedules_due_idx IS 'The schedules that are not paused, by next slot: a fire finds the due ones at the front.';
CREATE INDEX schedules_queue_idx ON workfence.schedules (queue, next_slot) WHERE NOT paused;
COMMENT ON INDEX workfence.schedules_queue_idx IS 'A queue''s schedules that are not paused, by next slot: a claim''s fire of its queue.';

-- Queue grants (from 0.7.0): which role may use which capability on which
-- queues, and whether they are enforced. Written only by work_grant,
-- work_revoke and work_enforce_grants, which tell every session to read
-- them again (src/access/grants.rs).
CREATE TABLE workfence.queue_grants (
    role        regrole NOT NULL,
    capability  text NOT NULL
                CHECK (capability IN ('enqueue', 'claim', 'operate', 'read', 'purge')),
    queues      text NOT NULL CHECK (queues <> ''),
    granted_at  timestamptz NOT NULL,
    CONSTRAINT queue_grants_pkey PRIMARY KEY (role, capability, queues)
);
COMMENT ON TABLE workfence.queue_grants IS
    'Queue grants: role may use capability on queues (a queue name, or a prefix followed by *), as '
    'work_grant made them; checked only while workfence.queue_grant_mode has its row (work_enforce_grants). '
    'Members of role are covered too. Not readable by PUBLIC; workfence.work_queue_grants lists them.';
COMMENT ON COLUMN workfence.queue_grants.role IS 'The role granted (its members are covered too).';
COMMENT ON COLUMN workfence.queue_grants.capability IS
    'enqueue, claim (claims and the token calls), operate (cancel, retry, reschedule, pause, resume), '
    'read (work_queue_stats, work_item, queue_counters) or purge.';
COMMENT ON COLUMN workfence.queue_grants.queues IS
    'A queue name, or a prefix followed by * (every queue whose name starts with it; * alone: every queue).';
COMMENT ON COLUMN workfence.queue_grants.granted_at IS 'Server time of the work_grant that made it.';
COMMENT ON INDEX workfence.queue_grants_pkey IS 'One grant per (role, capability, queues).';

-- Zero rows: grants are not enforced (as before 0.7.0); one row: enforced
-- since enforced_since. No row is made here, so that a restored dump's
-- row (if any) never meets one the install made.
CREATE TABLE workfence.queue_grant_mode (
    enforced        boolean NOT NULL DEFAULT true CHECK (enforced),
    enforced_since  timestamptz NOT NULL,
    CONSTRAINT queue_grant_mode_pkey PRIMARY KEY (enforced)
);
COMMENT ON TABLE workfence.queue_grant_mode IS
    'Whether queue grants are enforced in this database: one row (enforced, since when) if they are, none if '
    'not. Written by work_enforce_grants. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.queue_grant_mode.enforced IS 'Always true: the row''s presence is the setting.';
COMMENT ON COLUMN workfence.queue_grant_mode.enforced_since IS 'Server time of the work_enforce_grants(true) that turned it on.';
COMMENT ON INDEX workfence.queue_grant_mode_pkey IS 'At most one row.';

-- The history this database's epochs come from (from 0.8.0): the system
-- identifier, timeline and database an epoch_seq position belongs to. A
-- claim that finds another history (a promoted standby, a point-in-time
-- recovery, a restored or copied database: another timeline, system or
-- database, or a dump's row beside this one) first moves epoch_seq to the
-- generation floor, above every epoch the old history handed out, and
-- rewrites the row (src/verbs/generation.rs, docs/failover.md). The install
-- records the history it runs on: its first claims need no bump, and a
-- standby that replayed the install has the row to compare with.
CREATE TABLE workfence.generation (
    system_identifier  bigint NOT NULL,
    timeline           integer NOT NULL,
    database           oid NOT NULL,
    floor              bigint NOT NULL,
    since              timestamptz NOT NULL
);
COMMENT ON TABLE workfence.generation IS
    'The history this database''s epochs come from: one row, written at install and by the first claim of a new '
    'history (another system identifier, timeline or database, or more than one row after a restore), which first '
    'moves workfence.epoch_seq to the generation floor (milliseconds since 2000-01-01 x 1024). Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.generation.system_identifier IS 'pg_control_system().system_identifier of the cluster.';
COMMENT ON COLUMN workfence.generation.timeline IS 'The timeline the cluster wrote WAL on.';
COMMENT ON COLUMN workfence.generation.database IS 'The OID of the database.';
COMMENT ON COLUMN workfence.generation.floor IS 'The first epoch of this history (1 for a fresh install).';
COMMENT ON COLUMN workfence.generation.since IS 'Server time the history was recorded.';
INSERT INTO workfence.generation (system_identifier, timeline, database, floor, since)
SELECT s.system_identifier, c.timeline_id, d.oid, 1, pg_catalog.clock_timestamp()
  FROM pg_catalog.pg_control_system() AS s,
       pg_catalog.pg_control_checkpoint() AS c,
       pg_catalog.pg_database AS d
 WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database();

REVOKE ALL ON TABLE workfence.items FROM PUBLIC;
REVOKE ALL ON TABLE workfence.queues FROM PUBLIC;
REVOKE ALL ON TABLE workfence.queue_slots FROM PUBLIC;
REVOKE ALL ON TABLE workfence.schedules FROM PUBLIC;
REVOKE ALL ON TABLE workfence.queue_grants FROM PUBLIC;
REVOKE ALL ON TABLE workfence.queue_grant_mode FROM PUBLIC;
REVOKE ALL ON TABLE workfence.generation FROM PUBLIC;
REVOKE ALL ON TABLE workfence.item_edges FROM PUBLIC;
REVOKE ALL ON SEQUENCE workfence.epoch_seq FROM PUBLIC;
REVOKE ALL ON SEQUENCE workfence.items_id_seq FROM PUBLIC;

-- pg_dump keeps the rows and the sequence position of an extension's
-- configuration tables, so a restore never hands out an epoch twice.
SELECT pg_catalog.pg_extension_config_dump('workfence.items', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.epoch_seq', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.items_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.queues', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.queue_slots', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.schedules', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.queue_grants', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.queue_grant_mode', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.generation', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.item_edges', '');

COMMENT ON INDEX workfence.items_pkey IS 'Items by id: every token call finds its row here.';
COMMENT ON INDEX workfence.items_queue_key_unique IS 'One item per (queue, key): idempotent enqueue and work_claim_key.';
COMMENT ON SEQUENCE workfence.items_id_seq IS 'Source of workfence.items.id (dumped with its position by pg_dump).';
