-- pg_workfence 0.7.0 -> 0.8.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.8.0 is released: never edit it, write the next step as
-- pg_workfence--0.8.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh 0.8.0
-- install.
--
-- What 0.8.0 adds (issue 14, beyond one server): the table
-- workfence.generation, which records the history this database's epochs
-- come from (system identifier, timeline, database), so that the first claim
-- of a new history (a promoted standby, a point-in-time recovery, a restored
-- or copied database) moves epoch_seq above every epoch the old history
-- handed out (src/generation.rs, docs/failover.md); the trigger
-- items_sequence_floor lifts epoch_seq to the same floor for rows restored
-- with epochs; claims refuse to run on a hot standby (25006).
--
-- The update records the history it runs on, as a fresh install does: no
-- epoch moves until the history changes. Nothing a caller may be calling is
-- dropped or re-created (CONTRIBUTING.md, "An update keeps every function
-- callable").

-- ---- the history of the epochs ----
-- The history this database's epochs come from (from 0.8.0): the system
-- identifier, timeline and database an epoch_seq position belongs to. A
-- claim that finds another history (a promoted standby, a point-in-time
-- recovery, a restored or copied database: another timeline, system or
-- database, or a dump's row beside this one) first moves epoch_seq to the
-- generation floor, above every epoch the old history handed out, and
-- rewrites the row (src/generation.rs, docs/failover.md). The install
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
REVOKE ALL ON TABLE workfence.generation FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('workfence.generation', '');

-- ---- rows restored with epochs lift epoch_seq to the generation floor ----
CREATE OR REPLACE FUNCTION workfence.items_sequence_floor() RETURNS trigger
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
-- CREATE OR REPLACE resets what finalize.sql's privilege block set.
ALTER FUNCTION workfence.items_sequence_floor()
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION workfence.items_sequence_floor() IS
    'Trigger of workfence.items: a row inserted with an id or epoch at or above its sequence''s '
    'position (a restore, a COPY) moves the sequence past it; a row with an epoch moves workfence.epoch_seq to '
    'the generation floor too. Not callable by users.';

-- ---- documentation, as sql/finalize.sql writes it ----
COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE; 25006 on a hot standby (claim on the primary); 42501 when queue grants are enforced and the role has no claim grant covering the queue (also when revoked while waiting); 57014 when cancelled while waiting. The first claim of a new history (a promoted standby, a point-in-time recovery, a restored or copied database) moves the epoch sequence to the generation floor (milliseconds since 2000-01-01 x 1024), above every epoch the old history handed out.';

COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
'work_claim_key(queue, key, owner, lease interval) -> zero or one (id, key, payload, epoch, attempt, lease_until). Claims the named item if it is claimable and its queue is not paused, under the rules of work_claim. Errors: 22004 NULL argument, 22023 bad queue/key/owner/lease, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

-- ---- signatures retired by earlier updates ----
-- Dropped now, unless this very transaction renamed them (an update from
-- 0.5.0 or earlier straight to 0.8.0 keeps 0.5.0's work_enqueue, from 0.1.0
-- 0.1.0's work_claim, until the next update): calls in flight that
-- resolved them before that update must still find them.
DO $retire$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer);
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_claim_retired_0_1_0(text, text, interval, integer)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_claim_retired_0_1_0(text, text, interval, integer);
    END IF;
END
$retire$;
