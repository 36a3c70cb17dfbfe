-- pg_workfence router (docs/scaling.md; docs/contract.md, promise 9).
--
-- Run once, as a superuser, in the router database: a database without the
-- pg_workfence extension, with PL/Proxy, in front of N shard databases that
-- each have pg_workfence installed and their shard number set (below).
-- It creates schema workfence with the functions of the same names,
-- arguments and results as on the shards, and the view work_queue_stats;
-- each function is a PL/Proxy function that runs the same call on one shard
-- (or on all of them), as the calling role (PL/Proxy connects with
-- user=CURRENT_USER), so the shards' EXECUTE and queue grants judge it:
--
--   calls that name a queue          the queue's shard: hashtext(queue) & (N - 1)
--   work_enqueue with after          the queue's shard, once every parent id
--   (0.12.0, workflows)              is checked to be on it (id >> 48): a
--                                    child and its parents are on one shard,
--                                    an id of another shard is refused
--                                    (22023) on the router (below, "parents
--                                    on the queue's shard")
--   calls that name an item by id    the item's shard: id >> 48
--   work_finish_and_claim,           the token's shard (id >> 48), one
--   work_fail_and_claim              transaction, when it is the queue's
--                                    shard; otherwise the settle there, then
--                                    (if that claimed nothing) work_claim on
--                                    the queue's shard: two commits (below,
--                                    "the fused calls")
--   work_finish_many                 each (id, epoch) pair to its item's shard,
--                                    the rows put back in the arrays' order
--   work_purge without a queue,
--   work_queue_stats, work_grant,
--   work_queue_counters and
--   queue_state_counts (0.12.0),
--   work_fire_schedules,
--   work_schedules (from 0.12.0),
--   work_revoke, work_enforce_grants every shard
--   work_assert                      checks the token on the item's shard, but
--                                    cannot hold the shard's row lock in the
--                                    caller's transaction (docs/scaling.md)
--
-- Every PL/Proxy function here names its cluster with
-- workfence_router.cluster(), which refuses (42501) a call whose current
-- role is not the session's role: the one SET ROLE chose, else the session
-- user. PL/Proxy connects to the shards as CURRENT_USER, so from inside a
-- SECURITY DEFINER function the shards would judge the function's owner,
-- lending the caller its owner's queue grants; on one server the extension
-- judges the session's role there too (src/access/grants.rs), so the router
-- refuses rather than judge another role.
--
-- A queue's groups (work_enqueue's group_key) and its limits (work_limit,
-- per_group included) are kept by the queue's shard, where all its enqueues
-- and claims run: they hold through the router as on one server.
--
-- Before running it:
--
--   CREATE EXTENSION plproxy;
--   CREATE SERVER workfence_shards FOREIGN DATA WRAPPER plproxy
--       OPTIONS (p0 'host=... dbname=...', p1 '...', p2 '...', p3 '...');
--   CREATE USER MAPPING FOR PUBLIC SERVER workfence_shards;
--
-- (N, the number of pN options, a power of two), and on shard number S (the
-- database of option pS), as a superuser, once, before its first enqueue:
--
--   SELECT pg_catalog.setval('workfence.items_id_seq',
--                            GREATEST(1, S::bigint << 48), false);
--
-- so that its item ids are S * 2^48, + 1, ... (shard 0's from 1): unique across shards, and
-- naming their shard. Roles are the clusters' own: create the roles that use
-- the queues on the router and on every shard, grant them as
-- docs/operations.md says on both, and give them USAGE on the foreign server.
--
-- Every value a function passes on is a parameter of the remote call, and
-- every object and operator here is schema-qualified; the functions are
-- SECURITY INVOKER (they run as the caller, whose role the shards judge).

CREATE SCHEMA workfence_router;
COMMENT ON SCHEMA workfence_router IS 'Helpers of the pg_workfence router: where a call goes.';
CREATE SCHEMA workfence;
COMMENT ON SCHEMA workfence IS
    'The pg_workfence router: the functions of pg_workfence, each run on the shard of its queue or item.';

-- The number of bits of an item id below its shard number.
CREATE FUNCTION workfence_router.id_bits() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT 48';

-- The partition hash of a queue: PL/Proxy takes it modulo the number of
-- shards (its low bits). A NULL queue goes to shard 0, whose function
-- raises 22004 as it would without the router.
CREATE FUNCTION workfence_router.queue_shard(queue text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT COALESCE(pg_catalog.hashtext(queue), 0) $$;
COMMENT ON FUNCTION workfence_router.queue_shard(text) IS
    'The partition hash of a queue (hashtext); PL/Proxy picks shard hash & (N - 1).';

-- The shard an item id names (its bits above id_bits()). A NULL id goes to
-- shard 0, whose function raises 22004.
CREATE FUNCTION workfence_router.id_shard(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT COALESCE((id OPERATOR(pg_catalog.>>) workfence_router.id_bits())::integer, 0) $$;
COMMENT ON FUNCTION workfence_router.id_shard(bigint) IS
    'The shard number an item id carries: id >> 48.';

-- N, the number of shards: the partitions of the foreign server
-- workfence_shards, its options p0, p1, ... (PL/Proxy also reads
-- partition_0, ...). pg_foreign_server.srvoptions is readable by every
-- role (the passwords are in the user mappings, which are not).
CREATE FUNCTION workfence_router.shard_count() RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT pg_catalog.count(*)::pg_catalog.int4
     FROM pg_catalog.pg_foreign_server AS s, pg_catalog.unnest(s.srvoptions) AS o(opt)
    WHERE s.srvname OPERATOR(pg_catalog.=) 'workfence_shards'
      AND o.opt OPERATOR(pg_catalog.~) '^(p|partition_)[0-9]+=' $$;
COMMENT ON FUNCTION workfence_router.shard_count() IS
    'N, the number of shards: the partition options (p0, p1, ...) of foreign server workfence_shards.';

-- ---- whose call it is ----

-- The session's role: the one SET ROLE chose, else the session user
-- (SET SESSION AUTHORIZATION resets the role). It is the role the extension
-- judges a call's queue grants by on one server (GetOuterUserId), whatever
-- role the call runs as; SET ROLE cannot run inside a SECURITY DEFINER
-- function, so such a function cannot change it.
CREATE FUNCTION workfence_router.session_role() RETURNS name
LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
               THEN SESSION_USER
               ELSE pg_catalog.current_setting('role')::pg_catalog.name END $$;
COMMENT ON FUNCTION workfence_router.session_role() IS
    'The session''s role, which the extension judges queue grants by: the role SET ROLE chose, else session_user.';

CREATE FUNCTION workfence_router.refuse_other_role(function_name text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $refuse$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = '42501',
        MESSAGE = pg_catalog.format(
            'permission denied for %s through the pg_workfence router: the call runs as role %s, '
            'not as the session''s role %s',
            function_name, pg_catalog.to_json(CURRENT_USER::pg_catalog.text),
            pg_catalog.to_json(workfence_router.session_role()::pg_catalog.text)),
        DETAIL = 'The call comes from a SECURITY DEFINER function (or another context that runs as '
                 'a role other than the session''s). PL/Proxy would call the shards as that role, so '
                 'its EXECUTE and queue grants would decide; on one server the extension judges the '
                 'session''s role (its login role, or the one SET ROLE chose), so the router refuses.',
        HINT = 'Call the router as the role whose grants should apply (log in as it, or SET ROLE to '
               'it), or make the calling function SECURITY INVOKER.';
END
$refuse$;
COMMENT ON FUNCTION workfence_router.refuse_other_role(text) IS
    'Raises 42501: a call through the router runs as a role other than the session''s (workfence_router.cluster).';

-- The cluster of every PL/Proxy function of the router (its CLUSTER
-- statement, which PL/Proxy evaluates in the caller's context at every
-- call, before it connects to a shard): 'workfence_shards' when the call
-- runs as the session's role, else 42501 (refuse_other_role). A SQL
-- function, inlined into PL/Proxy's query, so that the check costs a few
-- microseconds per call (docs/scaling.md).
CREATE FUNCTION workfence_router.cluster(function_name text) RETURNS text LANGUAGE sql AS
$$ SELECT CASE WHEN CURRENT_USER OPERATOR(pg_catalog.=) workfence_router.session_role()
               THEN 'workfence_shards'::pg_catalog.text
               ELSE workfence_router.refuse_other_role(function_name) END $$;
COMMENT ON FUNCTION workfence_router.cluster(text) IS
    'The PL/Proxy cluster of every router function: workfence_shards, or 42501 when the call runs as a role '
    'other than the session''s (a SECURITY DEFINER function calling the router).';

-- ---- parents on the queue's shard (0.12.0, workflows) ----
--
-- work_enqueue's after names the parents its item waits for. The shard
-- that inserts the item locks its parents and links them (item_edges), and
-- the parents' finishes there release it, in their own transactions: so a
-- child and its parents are items of one shard, the queue's. Item ids are
-- the shards' own, unchanged through the router (shard S numbers its items
-- from S << 48), so an after id names its shard, and the ids go to the
-- shard as given. An id of another of the router's shards (0 <= id >> 48 < N,
-- not the queue's) is refused here, on the router, before any shard is
-- called: 22023, its id and both shards in the detail. An id that names
-- no shard of the router (negative, or id >> 48 of N or more), a NULL
-- element, a NULL queue, go on to the queue's shard, which refuses them as
-- the extension does (23503, 22004).

-- The shard-checking half of queue_shard_after: raises 22023 for the first
-- id of `after` on one of the N shards but the queue's; else queue_shard.
CREATE FUNCTION workfence_router.parents_on_queue_shard(queue text, after bigint[])
RETURNS integer
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $parents$
DECLARE
    n pg_catalog.int4 := workfence_router.shard_count();
    home pg_catalog.int4 := workfence_router.queue_shard(queue) OPERATOR(pg_catalog.&)
                            (n OPERATOR(pg_catalog.-) 1);
    parent pg_catalog.int8;
    part pg_catalog.int8;
BEGIN
    -- unnest reads every dimension, flat, as the extension reads after.
    FOR parent IN SELECT a FROM pg_catalog.unnest(after) AS a LOOP
        part := parent OPERATOR(pg_catalog.>>) workfence_router.id_bits();
        IF part OPERATOR(pg_catalog.>=) 0 AND part OPERATOR(pg_catalog.<) n
           AND part OPERATOR(pg_catalog.<>) home THEN
            RAISE EXCEPTION USING
                ERRCODE = '22023',
                MESSAGE = pg_catalog.format(
                    'argument "after" must name items on the shard of queue %s through the '
                    'pg_workfence router: item %s is on shard %s, the queue on shard %s',
                    pg_catalog.to_json(queue), parent, part, home),
                DETAIL = pg_catalog.format(
                    'Item %s is on shard %s (id >> 48); queue %s is on shard %s (hashtext(queue) '
                    '& (N - 1), N = %s). A workflow''s items are on one shard: the child''s shard '
                    'links its parents and their finishes there release it.',
                    parent, part, pg_catalog.to_json(queue), home, n),
                HINT = 'Put a workflow''s queues on one shard: name them so that they hash '
                       'together (workfence_router.queue_shard(name) & (N - 1) the same), or '
                       'enqueue its parents and children in one queue.';
        END IF;
    END LOOP;
    RETURN workfence_router.queue_shard(queue);
END
$parents$;
COMMENT ON FUNCTION workfence_router.parents_on_queue_shard(text, bigint[]) IS
    'queue_shard(queue), or 22023 when an id of after is on another of the router''s shards than the '
    'queue''s (id >> 48).';

-- Where work_enqueue runs (its RUN ON, which PL/Proxy evaluates on the
-- router, after its CLUSTER and before it connects to a shard): the
-- queue's hash, as queue_shard, once its parents are checked. An enqueue
-- without parents (after NULL or empty) calls queue_shard only: no
-- catalog read, no PL/pgSQL.
CREATE FUNCTION workfence_router.queue_shard_after(queue text, after bigint[]) RETURNS integer
LANGUAGE sql STABLE AS
$$ SELECT CASE WHEN queue IS NULL OR after IS NULL
                    OR pg_catalog.cardinality(after) OPERATOR(pg_catalog.=) 0
               THEN workfence_router.queue_shard(queue)
               ELSE workfence_router.parents_on_queue_shard(queue, after) END $$;
COMMENT ON FUNCTION workfence_router.queue_shard_after(text, bigint[]) IS
    'work_enqueue''s partition hash: queue_shard(queue), once every after id is checked to be on the '
    'queue''s shard (22023 for an id of another shard of the router).';

-- ---- calls that name a queue ----

-- surface:queue:begin (generated from sql/functions.toml by `cargo run -p workfence-surface`: edit the table)
CREATE FUNCTION workfence.work_enqueue(queue text, payload jsonb DEFAULT '{}',
    key text DEFAULT NULL, run_at timestamp with time zone DEFAULT NULL, priority integer DEFAULT 0,
    max_attempts integer DEFAULT 25, max_run interval DEFAULT NULL, group_key text DEFAULT NULL,
    on_conflict text DEFAULT 'keep', trace text DEFAULT NULL, after bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel')
RETURNS TABLE(id bigint, key text, inserted boolean) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_enqueue');
    RUN ON workfence_router.queue_shard_after(queue, after);
$$;
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, text, bigint[], text) IS
    'Router: runs work_enqueue on the queue''s shard (hashtext(queue) & (N - 1)); the id it '
    'returns carries the shard number (id >> 48). A queue''s items, and so each of its groups '
    '(group_key), are on its one shard, which keeps the group serial (or within work_limit''s '
    'per_group). From 0.12.0, every after id must be an item of that shard (a workflow lives on '
    'one shard): an id of another of the router''s shards is refused on the router with 22023 '
    '(workfence_router.queue_shard_after), before any shard is called.';

CREATE FUNCTION workfence.work_enqueue_many(queue text, payloads jsonb[], keys text[] DEFAULT NULL,
    run_at timestamp with time zone[] DEFAULT NULL, priority integer DEFAULT 0,
    max_attempts integer DEFAULT 25, group_keys text[] DEFAULT NULL,
    on_conflict text DEFAULT 'keep')
RETURNS TABLE(id bigint, key text, inserted boolean) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_enqueue_many');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_enqueue_many(text, jsonb[], text[], timestamptz[], integer, integer, text[], text) IS
    'Router: runs work_enqueue_many on the queue''s shard (hashtext(queue) & (N - 1)): every item '
    'of the call goes to that one shard, as with work_enqueue; the ids carry the shard number (id '
    '>> 48).';

CREATE FUNCTION workfence.work_claim(queue text, owner text, lease interval,
    max_items integer DEFAULT 1, wait interval DEFAULT '00:00:00')
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, progress jsonb, trace text) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_claim');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
    'Router: runs work_claim on the queue''s shard; a long poll (wait) waits there.';

CREATE FUNCTION workfence.work_claim_key(queue text, key text, owner text, lease interval)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, progress jsonb, trace text) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_claim_key');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
    'Router: runs work_claim_key on the queue''s shard.';

CREATE FUNCTION workfence.work_cancel(queue text, key text)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_cancel');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_cancel(text, text) IS
    'Router: runs work_cancel on the queue''s shard.';

CREATE FUNCTION workfence.work_retry(queue text, key text,
    run_at timestamp with time zone DEFAULT NULL)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_retry');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_retry(text, text, timestamptz) IS
    'Router: runs work_retry on the queue''s shard.';

CREATE FUNCTION workfence.work_reschedule(queue text, key text, run_at timestamp with time zone)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_reschedule');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_reschedule(text, text, timestamptz) IS
    'Router: runs work_reschedule on the queue''s shard.';

CREATE FUNCTION workfence.work_pause(queue text)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_pause');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_pause(text) IS
    'Router: runs work_pause on the queue''s shard.';

CREATE FUNCTION workfence.work_resume(queue text)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_resume');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_resume(text) IS
    'Router: runs work_resume on the queue''s shard.';

CREATE FUNCTION workfence.work_limit(queue text, concurrency integer DEFAULT NULL,
    rate integer DEFAULT NULL, per interval DEFAULT '00:00:01', per_group integer DEFAULT NULL)
RETURNS void LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_limit');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_limit(text, integer, integer, interval, integer) IS
    'Router: runs work_limit on the queue''s shard, where all the queue''s claims run: the limits '
    '(per_group too, from 0.12.0) hold for every worker, through any router or on the shard '
    'directly.';

CREATE FUNCTION workfence.work_item(queue text, key text)
RETURNS TABLE(id bigint, queue text, key text, state text, priority integer,
              run_at timestamp with time zone, attempts integer, max_attempts integer, owner text,
              epoch bigint, claimed_at timestamp with time zone,
              lease_until timestamp with time zone, errors jsonb, result jsonb,
              created_at timestamp with time zone, finished_at timestamp with time zone,
              payload jsonb, max_run interval, group_key text, progress jsonb) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_item');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_item(text, text) IS
    'Router: runs work_item(queue, key) on the queue''s shard.';

CREATE FUNCTION workfence.work_await(queue text, key text, wait interval DEFAULT '00:00:00')
RETURNS TABLE(state text, result jsonb, last_error text) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_await');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_await(text, text, interval) IS
    'Router: runs work_await on the queue''s shard, where it waits.';

CREATE FUNCTION workfence.work_items(queue text, state text DEFAULT NULL, after bigint DEFAULT NULL,
    max integer DEFAULT 50)
RETURNS TABLE(id bigint, key text, state text, priority integer, run_at timestamp with time zone,
              attempts integer, max_attempts integer, owner text, epoch bigint,
              claimed_at timestamp with time zone, lease_until timestamp with time zone,
              created_at timestamp with time zone, finished_at timestamp with time zone,
              group_key text, last_error text, progress jsonb) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_items');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_items(text, text, bigint, integer) IS
    'Router: runs work_items(queue, state, after, max) on the queue''s shard (a queue lives on one '
    'shard, so its pages are that shard''s).';

CREATE FUNCTION workfence.queue_counters(queue text)
RETURNS TABLE(refused bigint, lapsed bigint) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.queue_counters');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.queue_counters(text) IS
    'Router: runs queue_counters on the queue''s shard.';

CREATE FUNCTION workfence.work_may(capability text, queue text)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_may');
    RUN ON workfence_router.queue_shard(queue);
$$;
COMMENT ON FUNCTION workfence.work_may(text, text) IS
    'Router: runs work_may on the queue''s shard, where the calling role''s queue grants are.';
-- surface:queue:end

-- ---- calls that name an item by id ----

-- surface:id:begin (generated from sql/functions.toml by `cargo run -p workfence-surface`: edit the table)
CREATE FUNCTION workfence.work_renew(id bigint, owner text, epoch bigint, lease interval)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_renew');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_renew(bigint, text, bigint, interval) IS
    'Router: runs work_renew on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_finish(id bigint, owner text, epoch bigint,
    result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_finish');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_finish(bigint, text, bigint, jsonb) IS
    'Router: runs work_finish on the item''s shard (id >> 48), as a transaction of its own there.';

CREATE FUNCTION workfence.work_release(id bigint, owner text, epoch bigint,
    delay interval DEFAULT '00:00:00')
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_release');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_release(bigint, text, bigint, interval) IS
    'Router: runs work_release on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_fail(id bigint, owner text, epoch bigint, error text,
    retry_in interval DEFAULT NULL)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_fail');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_fail(bigint, text, bigint, text, interval) IS
    'Router: runs work_fail on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_progress(id bigint, owner text, epoch bigint, progress jsonb)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_progress');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_progress(bigint, text, bigint, jsonb) IS
    'Router: runs work_progress on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_parent_results(id bigint, owner text, epoch bigint)
RETURNS jsonb LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_parent_results');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_parent_results(bigint, text, bigint) IS
    'Router: runs work_parent_results on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_workflow(id bigint)
RETURNS TABLE(id bigint, queue text, key text, state text, depth integer, parents bigint[]) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_workflow');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_workflow(bigint) IS
    'Router: runs work_workflow on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_lease_status(id bigint, owner text, epoch bigint)
RETURNS text LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_lease_status');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
    'Router: runs work_lease_status on the item''s shard (id >> 48).';

CREATE FUNCTION workfence.work_item(id bigint)
RETURNS TABLE(id bigint, queue text, key text, state text, priority integer,
              run_at timestamp with time zone, attempts integer, max_attempts integer, owner text,
              epoch bigint, claimed_at timestamp with time zone,
              lease_until timestamp with time zone, errors jsonb, result jsonb,
              created_at timestamp with time zone, finished_at timestamp with time zone,
              payload jsonb, max_run interval, group_key text, progress jsonb) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.work_item');
    RUN ON workfence_router.id_shard(id);
$$;
COMMENT ON FUNCTION workfence.work_item(bigint) IS
    'Router: runs work_item(id) on the item''s shard (id >> 48).';
-- surface:id:end

-- ---- the fused calls ----
--
-- work_finish_and_claim and work_fail_and_claim settle a token, on its
-- item's shard (id >> 48), and claim from a queue, on the queue's shard.
-- When the two are one shard (a worker going on with the queue its last
-- item came from: the usual case) the extension's fused call runs there, in
-- one transaction, as on one server. When they differ, the extension's
-- fused call runs on the token's shard first: it checks every argument and
-- the queue grant before it changes anything, settles the token and claims
-- what that shard holds of the queue (nothing, but while a queue moved by
-- doubling drains off it), in one transaction. If it claimed nothing,
-- work_claim(queue, owner, lease, max_items) runs on the queue's shard, and
-- its rows come back with the first call's settled (one row of NULL item
-- columns when it claims nothing, as the extension returns). Two
-- transactions, two commits: between them the settle is committed and
-- nothing is claimed. A call that ends there (its router backend killed, a
-- connection lost, an error or a statement_timeout on the queue's shard)
-- leaves the previous item settled and the queue's items pending, nothing
-- lost and nothing held; the same call again settles again (work_finish:
-- true again; work_fail: false, the failure recorded once) and claims.

CREATE FUNCTION workfence_router.work_finish_and_claim(queue text, owner text, lease interval,
    last_id bigint, last_epoch bigint, result jsonb, max_items integer)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, settled boolean, progress jsonb,
              trace text) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.work_finish_and_claim');
    RUN ON workfence_router.id_shard(last_id);
    TARGET workfence.work_finish_and_claim;
$$;
COMMENT ON FUNCTION workfence_router.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer) IS
    'The extension''s work_finish_and_claim, run on the token''s shard (last_id >> 48).';

CREATE FUNCTION workfence_router.work_fail_and_claim(queue text, owner text, lease interval,
    last_id bigint, last_epoch bigint, error text, retry_in interval, max_items integer)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, settled boolean, progress jsonb,
              trace text) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.work_fail_and_claim');
    RUN ON workfence_router.id_shard(last_id);
    TARGET workfence.work_fail_and_claim;
$$;
COMMENT ON FUNCTION workfence_router.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer) IS
    'The extension''s work_fail_and_claim, run on the token''s shard (last_id >> 48).';

CREATE FUNCTION workfence_router.claim_on_queue_shard(queue text, owner text, lease interval,
    max_items integer)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, progress jsonb, trace text) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.claim_on_queue_shard');
    RUN ON workfence_router.queue_shard(queue);
    TARGET workfence.work_claim;
$$;
COMMENT ON FUNCTION workfence_router.claim_on_queue_shard(text, text, interval, integer) IS
    'The second half of a fused call whose token is on another shard: work_claim(queue, owner, lease, '
    'max_items) on the queue''s shard.';

-- The rest of a fused call whose first half, on the token's shard, claimed
-- nothing: when the queue's shard is another one, the claim there, a second
-- transaction (the settle is committed); its rows with the first half's
-- settled, or one row of NULL item columns and settled when nothing is due.
CREATE FUNCTION workfence_router.second_half(queue text, owner text, lease interval,
    last_id bigint, max_items integer, was_settled boolean)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, settled boolean, progress jsonb,
              trace text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $second$
DECLARE
    -- N - 1: the mask PL/Proxy maps a hash to a shard with.
    mask pg_catalog.int4 := workfence_router.shard_count() OPERATOR(pg_catalog.-) 1;
BEGIN
    IF (workfence_router.id_shard(last_id) OPERATOR(pg_catalog.&) mask)
       OPERATOR(pg_catalog.<>) (workfence_router.queue_shard(queue) OPERATOR(pg_catalog.&) mask) THEN
        RETURN QUERY
            SELECT c.id, c.key, c.payload, c.epoch, c.attempt, c.lease_until, was_settled, c.progress,
                   c.trace
              FROM workfence_router.claim_on_queue_shard(queue, owner, lease, max_items) AS c;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- The token's shard is the queue's (nothing is due there), or the
    -- queue's shard had nothing due.
    settled := was_settled;
    RETURN NEXT;
END
$second$;
COMMENT ON FUNCTION workfence_router.second_half(text, text, interval, bigint, integer, boolean) IS
    'The second half of a fused call through the router: work_claim on the queue''s shard when it is not '
    'the token''s, with the first half''s settled.';

CREATE FUNCTION workfence.work_finish_and_claim(queue text, owner text, lease interval,
    last_id bigint, last_epoch bigint, result jsonb DEFAULT NULL, max_items integer DEFAULT 1)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, settled boolean, progress jsonb,
              trace text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fused$
DECLARE
    r record;
    was_settled pg_catalog.bool;
    claimed pg_catalog.bool := false;
BEGIN
    -- The extension's fused call on the token's shard: the finish, and the
    -- claim of what that shard holds of the queue (all of it when it is the
    -- queue's shard), in one transaction.
    FOR r IN SELECT f.id, f.key, f.payload, f.epoch, f.attempt, f.lease_until, f.settled, f.progress,
                    f.trace
               FROM workfence_router.work_finish_and_claim(queue, owner, lease, last_id, last_epoch,
                                                           result, max_items) AS f LOOP
        was_settled := r.settled;
        IF r.id IS NOT NULL THEN
            claimed := true;
            id := r.id; key := r.key; payload := r.payload; epoch := r.epoch;
            attempt := r.attempt; lease_until := r.lease_until; settled := r.settled;
            progress := r.progress; trace := r.trace;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF NOT claimed THEN
        RETURN QUERY SELECT * FROM workfence_router.second_half(queue, owner, lease, last_id,
                                                                 max_items, was_settled);
    END IF;
END
$fused$;

CREATE FUNCTION workfence.work_fail_and_claim(queue text, owner text, lease interval,
    last_id bigint, last_epoch bigint, error text, retry_in interval DEFAULT NULL,
    max_items integer DEFAULT 1)
RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
              lease_until timestamp with time zone, settled boolean, progress jsonb,
              trace text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fused$
DECLARE
    r record;
    was_settled pg_catalog.bool;
    claimed pg_catalog.bool := false;
BEGIN
    -- The extension's fused call on the token's shard: the failure, and the
    -- claim of what that shard holds of the queue (all of it when it is the
    -- queue's shard), in one transaction.
    FOR r IN SELECT f.id, f.key, f.payload, f.epoch, f.attempt, f.lease_until, f.settled, f.progress,
                    f.trace
               FROM workfence_router.work_fail_and_claim(queue, owner, lease, last_id, last_epoch,
                                                         error, retry_in, max_items) AS f LOOP
        was_settled := r.settled;
        IF r.id IS NOT NULL THEN
            claimed := true;
            id := r.id; key := r.key; payload := r.payload; epoch := r.epoch;
            attempt := r.attempt; lease_until := r.lease_until; settled := r.settled;
            progress := r.progress; trace := r.trace;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF NOT claimed THEN
        RETURN QUERY SELECT * FROM workfence_router.second_half(queue, owner, lease, last_id,
                                                                 max_items, was_settled);
    END IF;
END
$fused$;

-- work_assert: a call through the router is a transaction of its own on the
-- shard, so the shard's work_assert would refuse a current token (25P01:
-- its row lock would end with the call). Through the router the token is
-- checked instead, on its item's shard, and 55000 raised as the shard
-- raises it when it is not current; nothing is locked, so writes the
-- caller makes afterwards are not fenced (docs/scaling.md).
CREATE FUNCTION workfence.work_assert(id bigint, owner text, epoch bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $assert$
DECLARE
    status pg_catalog.text := workfence.work_lease_status(id, owner, epoch);
BEGIN
    IF status OPERATOR(pg_catalog.<>) 'current' THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = pg_catalog.format(
                'lease lost: item %s is not claimed under owner %s and epoch %s (%s)',
                id, pg_catalog.to_json(owner), epoch, status),
            DETAIL = 'Checked through a pg_workfence router: work_lease_status on the item''s shard says '
                     OPERATOR(pg_catalog.||) status OPERATOR(pg_catalog.||) '.',
            HINT = 'Roll back the job''s writes and stop the job under this token.';
    END IF;
END
$assert$;

-- work_finish_many: each pair goes to its item's shard (SPLIT), with its
-- position in the arrays, and the rows come back in the arrays' order.
-- Arguments the shard would refuse (a NULL, arrays of unequal length) go
-- unsplit to shard 0, which raises exactly as without the router.
CREATE FUNCTION workfence_router.finish_many_split(owner text, ids bigint[], epochs bigint[],
    results jsonb[], positions bigint[])
RETURNS TABLE(ord bigint, id bigint, finished boolean) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.finish_many_split');
    SPLIT ids, epochs, results, positions;
    RUN ON workfence_router.id_shard(ids);
    SELECT p.p AS ord, f.id AS id, f.finished AS finished
      FROM pg_catalog.unnest(positions) WITH ORDINALITY AS p(p, n)
      JOIN workfence.work_finish_many(owner, ids, epochs, results) WITH ORDINALITY AS f(id, finished, n)
        ON f.n OPERATOR(pg_catalog.=) p.n;
$$;

CREATE FUNCTION workfence_router.finish_many_unsplit(owner text, ids bigint[], epochs bigint[],
    results jsonb[])
RETURNS TABLE(id bigint, finished boolean) LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.finish_many_unsplit');
    RUN ON 0;
    TARGET workfence.work_finish_many;
$$;

CREATE FUNCTION workfence.work_finish_many(owner text, ids bigint[], epochs bigint[],
    results jsonb[] DEFAULT NULL)
RETURNS TABLE(id bigint, finished boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $many$
BEGIN
    -- The extension reads multi-dimensional arrays flat; so does the router
    -- (array_position below takes only one dimension).
    IF pg_catalog.array_ndims(ids) OPERATOR(pg_catalog.>) 1 THEN
        ids := ARRAY(SELECT pg_catalog.unnest(ids));
    END IF;
    IF pg_catalog.array_ndims(epochs) OPERATOR(pg_catalog.>) 1 THEN
        epochs := ARRAY(SELECT pg_catalog.unnest(epochs));
    END IF;
    IF pg_catalog.array_ndims(results) OPERATOR(pg_catalog.>) 1 THEN
        results := ARRAY(SELECT pg_catalog.unnest(results));
    END IF;
    IF owner IS NULL OR ids IS NULL OR epochs IS NULL
       OR pg_catalog.cardinality(ids) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(epochs)
       OR (results IS NOT NULL
           AND pg_catalog.cardinality(results) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(ids))
       OR pg_catalog.array_position(ids, NULL) IS NOT NULL
       OR pg_catalog.array_position(epochs, NULL) IS NOT NULL
       OR pg_catalog.cardinality(ids) OPERATOR(pg_catalog.=) 0 THEN
        RETURN QUERY SELECT u.id, u.finished
                       FROM workfence_router.finish_many_unsplit(owner, ids, epochs, results) AS u;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT s.id, s.finished
          FROM workfence_router.finish_many_split(
                   owner, ids, epochs,
                   COALESCE(results,
                            pg_catalog.array_fill(NULL::jsonb,
                                                  ARRAY[pg_catalog.cardinality(ids)])),
                   ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(ids))::bigint))
               AS s
         ORDER BY s.ord;
END
$many$;

-- ---- calls on every shard ----

CREATE FUNCTION workfence_router.purge_all(older_than interval) RETURNS SETOF bigint
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.purge_all');
    RUN ON ALL;
    SELECT workfence.work_purge(older_than, NULL::text);
$$;

CREATE FUNCTION workfence_router.purge_one(older_than interval, queue text) RETURNS bigint
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.purge_one');
    RUN ON workfence_router.queue_shard(queue);
    SELECT workfence.work_purge(older_than, queue);
$$;

CREATE FUNCTION workfence.work_purge(older_than interval DEFAULT '7 days', queue text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $purge$
BEGIN
    IF queue IS NULL THEN
        RETURN (SELECT COALESCE(pg_catalog.sum(n), 0)::bigint
                  FROM workfence_router.purge_all(older_than) AS n);
    END IF;
    RETURN workfence_router.purge_one(older_than, queue);
END
$purge$;

CREATE FUNCTION workfence_router.grant_all(capability text, queues text, role text)
RETURNS SETOF boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.grant_all');
    RUN ON ALL;
    SELECT workfence.work_grant(capability, queues, role);
$$;

CREATE FUNCTION workfence_router.revoke_all(capability text, queues text, role text)
RETURNS SETOF boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.revoke_all');
    RUN ON ALL;
    SELECT workfence.work_revoke(capability, queues, role);
$$;

CREATE FUNCTION workfence_router.enforce_grants_all(enforced boolean)
RETURNS SETOF boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.enforce_grants_all');
    RUN ON ALL;
    SELECT workfence.work_enforce_grants(enforced);
$$;

-- True when any shard changed (a grant is new, existed, or the setting
-- changed there).
CREATE FUNCTION workfence.work_grant(capability text, queues text, role text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS
$$ SELECT pg_catalog.bool_or(c) FROM workfence_router.grant_all(capability, queues, role) AS c $$;

CREATE FUNCTION workfence.work_revoke(capability text, queues text, role text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS
$$ SELECT pg_catalog.bool_or(c) FROM workfence_router.revoke_all(capability, queues, role) AS c $$;

CREATE FUNCTION workfence.work_enforce_grants(enforced boolean) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS
$$ SELECT pg_catalog.bool_or(c) FROM workfence_router.enforce_grants_all(enforced) AS c $$;

-- Every shard's rows of work_queue_stats: a queue has a row on each shard it has
-- items or settings on, one but while it is drained after adding shards.
CREATE FUNCTION workfence_router.queue_stats()
RETURNS TABLE(queue text, pending bigint, scheduled bigint, claimed bigint, expired bigint,
              done bigint, failed bigint, cancelled bigint, oldest_due_age interval,
              paused boolean, refused bigint, lapsed bigint, concurrency integer, rate integer,
              per interval, per_group integer, waiting bigint)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.queue_stats');
    RUN ON ALL;
    SELECT s.queue, s.pending, s.scheduled, s.claimed, s.expired, s.done, s.failed, s.cancelled,
           s.oldest_due_age, s.paused, s.refused, s.lapsed, s.concurrency, s.rate, s.per,
           s.per_group, s.waiting
      FROM workfence.work_queue_stats AS s;
$$;

CREATE VIEW workfence.work_queue_stats AS
SELECT s.queue, s.pending, s.scheduled, s.claimed, s.expired, s.done, s.failed, s.cancelled,
       s.oldest_due_age, s.paused, s.refused, s.lapsed, s.concurrency, s.rate, s.per, s.per_group,
       s.waiting
  FROM workfence_router.queue_stats() AS s;
COMMENT ON VIEW workfence.work_queue_stats IS
    'Every shard''s work_queue_stats, as the calling role may read them there: a row per queue and '
    'shard it is on (one shard, but while a queue is drained after adding shards). A queue''s limits '
    '(concurrency, rate, per, per_group) are its shard''s.';

-- Every shard's counters (from 0.12.0): each shard counts the items it holds,
-- so a queue has a row per shard it was counted on (one, but while it is
-- drained after adding shards); sum them by queue for the queue's totals.
CREATE FUNCTION workfence.queue_counter_rows()
RETURNS TABLE(queue text, enqueued bigint, claimed bigint, done bigint, failed bigint,
              retried bigint, released bigint, cancelled bigint, refused bigint, lapsed bigint,
              bucket_le double precision[], time_in_queue_buckets bigint[],
              time_in_queue_sum double precision, run_time_buckets bigint[],
              run_time_sum double precision)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.queue_counter_rows');
    RUN ON ALL;
$$;
COMMENT ON FUNCTION workfence.queue_counter_rows() IS
    'Router: runs queue_counter_rows on every shard: a row per queue and shard it was counted on.';

-- Every shard's last hour of its queues (from 0.12.0): 60 rows per queue and
-- shard it was counted on (one, but while it is drained after adding
-- shards). With a queue, each shard answers for it (a bad queue or a missing
-- read grant is refused by every shard alike); only those that counted it
-- return rows.
CREATE FUNCTION workfence.queue_history_rows(queue text DEFAULT NULL)
RETURNS TABLE(queue text, minute timestamp with time zone, enqueued bigint, claimed bigint,
              done bigint, failed bigint, time_in_queue_p50 double precision,
              time_in_queue_p99 double precision, backlog bigint)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.queue_history_rows');
    RUN ON ALL;
$$;
COMMENT ON FUNCTION workfence.queue_history_rows(text) IS
    'Router: runs queue_history_rows on every shard: 60 rows per queue and shard it was counted on.';

-- Every shard's state counts (from 0.12.0), as the shards' work_queue_stats
-- read them (the router's work_queue_stats is the shards' views).
CREATE FUNCTION workfence.queue_state_counts(rebuild boolean DEFAULT false)
RETURNS TABLE(queue text, pending bigint, claimed bigint, done bigint, failed bigint,
              cancelled bigint, waiting bigint)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence.queue_state_counts');
    RUN ON ALL;
$$;
COMMENT ON FUNCTION workfence.queue_state_counts(boolean) IS
    'Router: runs queue_state_counts on every shard: a row per queue and shard it has items on.';

CREATE VIEW workfence.work_queue_counters AS
SELECT c.queue, c.enqueued, c.claimed, c.done, c.failed, c.retried, c.released, c.cancelled,
       c.refused, c.lapsed, c.bucket_le, c.time_in_queue_buckets, c.time_in_queue_sum,
       c.run_time_buckets, c.run_time_sum
  FROM workfence.queue_counter_rows() AS c;
COMMENT ON VIEW workfence.work_queue_counters IS
    'Every shard''s work_queue_counters, as the calling role may read them there: a row per queue and '
    'shard it was counted on (one shard, but while a queue is drained after adding shards).';

CREATE VIEW workfence.work_queue_history AS
SELECT h.queue, h.minute, h.enqueued, h.claimed, h.done, h.failed, h.time_in_queue_p50,
       h.time_in_queue_p99, h.backlog
  FROM workfence.queue_history_rows() AS h;
COMMENT ON VIEW workfence.work_queue_history IS
    'Every shard''s work_queue_history, as the calling role may read them there: 60 rows per queue and '
    'shard it was counted on (one shard, but while a queue is drained after adding shards).';

-- Every shard's work_queue_stats_exact (from 0.12.0: every item counted).
CREATE FUNCTION workfence_router.queue_stats_exact()
RETURNS TABLE(queue text, pending bigint, scheduled bigint, claimed bigint, expired bigint,
              done bigint, failed bigint, cancelled bigint, oldest_due_age interval,
              paused boolean, refused bigint, lapsed bigint, concurrency integer, rate integer,
              per interval, per_group integer, waiting bigint)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.queue_stats_exact');
    RUN ON ALL;
    SELECT s.queue, s.pending, s.scheduled, s.claimed, s.expired, s.done, s.failed, s.cancelled,
           s.oldest_due_age, s.paused, s.refused, s.lapsed, s.concurrency, s.rate, s.per,
           s.per_group, s.waiting
      FROM workfence.work_queue_stats_exact AS s;
$$;

CREATE VIEW workfence.work_queue_stats_exact AS
SELECT s.queue, s.pending, s.scheduled, s.claimed, s.expired, s.done, s.failed, s.cancelled,
       s.oldest_due_age, s.paused, s.refused, s.lapsed, s.concurrency, s.rate, s.per, s.per_group,
       s.waiting
  FROM workfence_router.queue_stats_exact() AS s;
COMMENT ON VIEW workfence.work_queue_stats_exact IS
    'Every shard''s work_queue_stats_exact (every item counted), as the calling role may read them there.';

-- The queue grants of every shard: one row per grant (role, capability,
-- queues), with the latest time any shard recorded it. Grants made through
-- the router are on every shard; one made on a shard directly shows too.
CREATE FUNCTION workfence_router.queue_grants()
RETURNS TABLE(role name, capability text, queues text, granted_at timestamp with time zone)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.queue_grants');
    RUN ON ALL;
    SELECT g.role, g.capability, g.queues, g.granted_at FROM workfence.work_queue_grants AS g;
$$;

CREATE VIEW workfence.work_queue_grants AS
SELECT g.role, g.capability, g.queues, pg_catalog.max(g.granted_at) AS granted_at
  FROM workfence_router.queue_grants() AS g
 GROUP BY g.role, g.capability, g.queues;
COMMENT ON VIEW workfence.work_queue_grants IS
    'Every shard''s queue grants, one row per grant (the latest granted_at of any shard); '
    'not readable by PUBLIC, as on the shards.';

-- ---- schedules (from 0.12.0) ----
-- A schedule lives on its queue's shard, where its fires enqueue its items
-- and where claims of the queue fire it. work_schedule and work_unschedule
-- run work_unschedule on every shard but the queue's (each shard judges the
-- role's operate grant on its own copy, and answers false where it has
-- none), so that a schedule moved to a queue of another shard leaves no copy
-- behind. Pause and resume find the schedule's shard through the shards'
-- work_schedules (so the role needs SELECT on it, and, where queue grants
-- are enforced, read on the queue).

CREATE FUNCTION workfence_router.schedule_on_queue_shard(name text, cron text, queue text,
    payload jsonb, timezone text, catch_up text, priority integer, max_attempts integer,
    group_key text)
RETURNS boolean LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.schedule_on_queue_shard');
    RUN ON workfence_router.queue_shard(queue);
    SELECT workfence.work_schedule(name, cron, queue, payload, timezone, catch_up, priority,
                                   max_attempts, group_key);
$$;

-- The queue of schedule `name` on each shard that has it.
CREATE FUNCTION workfence_router.schedule_queues(name text) RETURNS SETOF text
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.schedule_queues');
    RUN ON ALL;
    SELECT s.queue FROM workfence.work_schedules AS s WHERE s.name OPERATOR(pg_catalog.=) $1;
$$;

-- work_unschedule on shard `part`.
CREATE FUNCTION workfence_router.unschedule_on_part(part integer, name text) RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.unschedule_on_part');
    RUN ON part;
    SELECT workfence.work_unschedule(name);
$$;

-- Pause or resume on the shard of `queue` (the schedule's).
CREATE FUNCTION workfence_router.pause_schedule_on(queue text, name text) RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.pause_schedule_on');
    RUN ON workfence_router.queue_shard(queue);
    SELECT workfence.work_pause_schedule(name);
$$;

CREATE FUNCTION workfence_router.resume_schedule_on(queue text, name text) RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.resume_schedule_on');
    RUN ON workfence_router.queue_shard(queue);
    SELECT workfence.work_resume_schedule(name);
$$;

CREATE FUNCTION workfence_router.fire_schedules_all() RETURNS SETOF integer
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.fire_schedules_all');
    RUN ON ALL;
    SELECT workfence.work_fire_schedules();
$$;

CREATE FUNCTION workfence_router.schedules()
RETURNS TABLE(name text, cron text, timezone text, queue text, catch_up text, paused boolean,
              next_slot timestamp with time zone, last_slot timestamp with time zone,
              last_item_id bigint, last_fired_at timestamp with time zone, payload jsonb,
              priority integer, max_attempts integer, group_key text)
LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.schedules');
    RUN ON ALL;
    SELECT s.name, s.cron, s.timezone, s.queue, s.catch_up, s.paused, s.next_slot, s.last_slot,
           s.last_item_id, s.last_fired_at, s.payload, s.priority, s.max_attempts, s.group_key
      FROM workfence.work_schedules AS s;
$$;

CREATE VIEW workfence.work_schedules AS
SELECT s.name, s.cron, s.timezone, s.queue, s.catch_up, s.paused, s.next_slot, s.last_slot,
       s.last_item_id, s.last_fired_at, s.payload, s.priority, s.max_attempts, s.group_key
  FROM workfence_router.schedules() AS s;
COMMENT ON VIEW workfence.work_schedules IS
    'Every shard''s work_schedules, as the calling role may read them there: a schedule is on its queue''s shard.';

-- A schedule moved to a queue of another shard: made on the new queue's
-- shard first (which checks the arguments and grants, so a refused call
-- changes nothing), then removed from every other shard (separate commits:
-- a call refused there, a role without operate on the old copy's queue,
-- leaves both; the old copy's owner removes it, or the call is repeated by
-- a role that may).
CREATE FUNCTION workfence.work_schedule(name text, cron text, queue text,
    payload jsonb DEFAULT '{}', timezone text DEFAULT 'UTC', catch_up text DEFAULT 'latest',
    priority integer DEFAULT 0, max_attempts integer DEFAULT 25, group_key text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $schedule$
DECLARE
    n pg_catalog.int4 := workfence_router.shard_count();
    part pg_catalog.int4;
    changed pg_catalog.bool;
BEGIN
    -- First on the queue's shard, which checks every argument and grant: a
    -- refused call changes nothing anywhere. Then any copy elsewhere goes.
    changed := workfence_router.schedule_on_queue_shard(name, cron, queue, payload, timezone,
                                                        catch_up, priority, max_attempts,
                                                        group_key);
    FOR part IN 0 .. n OPERATOR(pg_catalog.-) 1 LOOP
        IF part OPERATOR(pg_catalog.<>)
           (workfence_router.queue_shard(queue) OPERATOR(pg_catalog.&) (n OPERATOR(pg_catalog.-) 1)) THEN
            changed := workfence_router.unschedule_on_part(part, name) OR changed;
        END IF;
    END LOOP;
    RETURN changed;
END
$schedule$;

-- unschedule: on every shard (true if any had it); pause and resume: on
-- the shard that has the schedule, 42704 when none has it, as on one server.
CREATE FUNCTION workfence.work_unschedule(name text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $unschedule$
DECLARE
    part pg_catalog.int4;
    found pg_catalog.bool := false;
BEGIN
    FOR part IN 0 .. workfence_router.shard_count() OPERATOR(pg_catalog.-) 1 LOOP
        found := workfence_router.unschedule_on_part(part, name) OR found;
    END LOOP;
    RETURN found;
END
$unschedule$;

-- Pause (`paused`) or resume the schedule `name` on the shard whose
-- work_schedules lists it; the shard's own answer (42704, or 22004/22023 for
-- a bad name) when none does.
CREATE FUNCTION workfence_router.set_schedule_paused(name text, paused boolean) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $paused$
DECLARE
    q pg_catalog.text;
    seen pg_catalog.bool := false;
    changed pg_catalog.bool := false;
BEGIN
    FOR q IN SELECT x FROM workfence_router.schedule_queues(name) AS x LOOP
        seen := true;
        changed := CASE WHEN paused THEN workfence_router.pause_schedule_on(q, name)
                        ELSE workfence_router.resume_schedule_on(q, name) END OR changed;
    END LOOP;
    IF NOT seen THEN
        RETURN CASE WHEN paused THEN workfence_router.pause_schedule_on('', name)
                    ELSE workfence_router.resume_schedule_on('', name) END;
    END IF;
    RETURN changed;
END
$paused$;

CREATE FUNCTION workfence.work_pause_schedule(name text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS
$$ SELECT workfence_router.set_schedule_paused(name, true) $$;

CREATE FUNCTION workfence.work_resume_schedule(name text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS
$$ SELECT workfence_router.set_schedule_paused(name, false) $$;

CREATE FUNCTION workfence.work_fire_schedules() RETURNS integer
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS
$$ SELECT COALESCE(pg_catalog.sum(n), 0)::integer FROM workfence_router.fire_schedules_all() AS n $$;

-- ---- which shard is which ----

-- The shard number shard `part` (the foreign server's option p<part>)
-- stamps on its item ids, from its sequence: it must be `part` itself.
CREATE FUNCTION workfence_router.shard_number(part integer) RETURNS bigint LANGUAGE plproxy AS $$
    CLUSTER workfence_router.cluster('workfence_router.shard_number');
    RUN ON part;
    SELECT (s.last_value OPERATOR(pg_catalog.>>) 48) FROM workfence.items_id_seq AS s;
$$;
COMMENT ON FUNCTION workfence_router.shard_number(integer) IS
    'The shard number shard p<part> stamps on its item ids (its items_id_seq position >> 48); for a '
    'superuser''s check that every shard was set up with its own number.';

-- ---- what each function is ----

-- Each has the extension's arguments, defaults, result and errors (SQLSTATE,
-- message, detail and hint come back from the shard, the message prefixed
-- by PL/Proxy with the function and shard); docs/contract.md describes them.
-- Each also refuses, with 42501, a call that runs as a role other than the
-- session's (workfence_router.cluster): from a SECURITY DEFINER function, the
-- shards would judge its owner.
COMMENT ON FUNCTION workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer) IS
    'Router: runs work_finish_and_claim on the previous item''s shard (last_id >> 48) when that is the queue''s '
    'shard, in one transaction there. Otherwise runs it there first (every argument checked before anything '
    'changes; the finish, and a claim of what that shard holds of the queue, committed together), then, if '
    'that claimed nothing, work_claim(queue, owner, lease, max_items) on the queue''s shard, its rows with the '
    'first call''s settled: two commits, and a call that fails between them leaves the item finished and '
    'nothing claimed; repeat it (settled is true again). Never claims nothing while the queue''s shard has '
    'due items (docs/scaling.md).';
COMMENT ON FUNCTION workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer) IS
    'Router: as work_finish_and_claim, with work_fail as the first half: on the previous item''s shard in one '
    'transaction when it is the queue''s shard, otherwise the failure there, then work_claim on the queue''s '
    'shard (two commits). Repeated after a failure between them, the failure is not recorded twice and '
    'settled is false, as for work_fail of a token already failed (docs/scaling.md).';
COMMENT ON FUNCTION workfence.work_assert(bigint, text, bigint) IS
    'Router: checks the token on the item''s shard (work_lease_status) and raises 55000 (lease lost) unless '
    'it is current. Unlike the extension''s, it locks nothing in the caller''s transaction: a write made '
    'after it is not fenced (docs/scaling.md).';
COMMENT ON FUNCTION workfence.work_finish_many(text, bigint[], bigint[], jsonb[]) IS
    'Router: sends each (id, epoch, result) to its item''s shard and returns the rows in the arrays'' order; '
    'arguments the extension refuses go to shard 0, which raises as the extension does.';
COMMENT ON FUNCTION workfence.work_purge(interval, text) IS
    'Router: runs work_purge on the queue''s shard, or on every shard (the sum) when queue is NULL.';
COMMENT ON FUNCTION workfence.work_schedule(text, text, text, jsonb, text, text, integer, integer, text) IS
    'Router: runs work_schedule on the queue''s shard (a refused call changes nothing), then work_unschedule on '
    'every other shard (a schedule moved to a queue of another shard leaves no copy; each shard judges the '
    'operate grant on its own copy): separate commits.';
COMMENT ON FUNCTION workfence.work_unschedule(text) IS
    'Router: runs work_unschedule on every shard; true if any had the schedule.';
COMMENT ON FUNCTION workfence.work_pause_schedule(text) IS
    'Router: runs work_pause_schedule on the shard whose work_schedules lists the schedule (42704 when none does).';
COMMENT ON FUNCTION workfence.work_resume_schedule(text) IS
    'Router: runs work_resume_schedule on the shard whose work_schedules lists the schedule (42704 when none does).';
COMMENT ON FUNCTION workfence.work_fire_schedules() IS
    'Router: runs work_fire_schedules on every shard; the sum.';
COMMENT ON FUNCTION workfence.work_grant(text, text, text) IS
    'Router: runs work_grant on every shard; true when any shard changed.';
COMMENT ON FUNCTION workfence.work_revoke(text, text, text) IS
    'Router: runs work_revoke on every shard; true when any shard changed.';
COMMENT ON FUNCTION workfence.work_enforce_grants(boolean) IS
    'Router: runs work_enforce_grants on every shard; true when any shard changed.';

-- Nothing is callable by PUBLIC but what the helpers need: grant the
-- functions of schema workfence as docs/operations.md says for the shards.
-- Every helper PUBLIC may call that reaches a shard is a PL/Proxy function,
-- and so refuses a call from a role other than the session's.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA workfence FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA workfence_router FROM PUBLIC;
REVOKE ALL ON TABLE workfence.work_queue_stats, workfence.work_queue_stats_exact,
    workfence.work_queue_counters, workfence.work_queue_grants, workfence.work_schedules FROM PUBLIC;
REVOKE ALL ON SCHEMA workfence FROM PUBLIC;
GRANT USAGE ON SCHEMA workfence_router TO PUBLIC;
GRANT EXECUTE ON FUNCTION workfence_router.id_bits(), workfence_router.queue_shard(text),
    workfence_router.id_shard(bigint), workfence_router.shard_count(),
    workfence_router.queue_shard_after(text, bigint[]),
    workfence_router.parents_on_queue_shard(text, bigint[]),
    workfence_router.session_role(), workfence_router.refuse_other_role(text),
    workfence_router.cluster(text),
    workfence_router.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer),
    workfence_router.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer),
    workfence_router.claim_on_queue_shard(text, text, interval, integer),
    workfence_router.second_half(text, text, interval, bigint, integer, boolean),
    workfence_router.finish_many_split(text, bigint[], bigint[], jsonb[], bigint[]),
    workfence_router.finish_many_unsplit(text, bigint[], bigint[], jsonb[]),
    workfence_router.purge_all(interval), workfence_router.purge_one(interval, text),
    workfence_router.grant_all(text, text, text), workfence_router.revoke_all(text, text, text),
    workfence_router.enforce_grants_all(boolean), workfence_router.queue_stats(),
    workfence_router.queue_stats_exact(),
    workfence_router.queue_grants(),
    workfence_router.schedule_on_queue_shard(text, text, text, jsonb, text, text, integer, integer, text),
    workfence_router.schedule_queues(text), workfence_router.unschedule_on_part(integer, text),
    workfence_router.pause_schedule_on(text, text), workfence_router.resume_schedule_on(text, text),
    workfence_router.set_schedule_paused(text, boolean),
    workfence_router.fire_schedules_all(), workfence_router.schedules()
  TO PUBLIC;
GRANT EXECUTE ON FUNCTION workfence.work_may(text, text) TO PUBLIC;
