"""The SQL statements of the library, one per call, every value a parameter, every object
schema-qualified (docs/writing-workers.md: bound parameters; intervals passed as `interval`,
which psycopg sends for a `datetime.timedelta`). Internal: not part of the public API."""

from __future__ import annotations

from datetime import timedelta

from .errors import InvalidArgument

# Every column of the claim row, read by name (`Job`): from 0.12.0 the row ends with `progress`
# and then `trace`, which an older server does not have.
CLAIM = """
SELECT * FROM workfence.work_claim(%s::text, %s::text, %s::interval, %s::integer, %s::interval)
"""
RENEW = "SELECT workfence.work_renew(%s::bigint, %s::text, %s::bigint, %s::interval)"
ASSERT = "SELECT workfence.work_assert(%s::bigint, %s::text, %s::bigint)"
FINISH = "SELECT workfence.work_finish(%s::bigint, %s::text, %s::bigint, %s::jsonb)"
FAIL = """
SELECT workfence.work_fail(%s::bigint, %s::text, %s::bigint, %s::text, retry_in => %s::interval)
"""
RELEASE = "SELECT workfence.work_release(%s::bigint, %s::text, %s::bigint)"
# From 0.12.0: a checkpoint, fenced like a renew.
PROGRESS = "SELECT workfence.work_progress(%s::bigint, %s::text, %s::bigint, %s::jsonb)"
# From 0.12.0 (workflows): the results of the item's parents, fenced like a renew (NULL for a
# token that is not current).
PARENT_RESULTS = "SELECT workfence.work_parent_results(%s::bigint, %s::text, %s::bigint)"
# Why a token is (not) honoured: read after a settle whose reply was lost.
LEASE_STATUS = "SELECT workfence.work_lease_status(%s::bigint, %s::text, %s::bigint)"
LISTEN = "LISTEN work_lease_lost"

ENQUEUE = """
SELECT id, key, inserted
  FROM workfence.work_enqueue(%s::text, %s::jsonb, %s::text, %s::timestamptz, %s::integer,
                              %s::integer, %s::interval)
"""
# The optional arguments added later, each passed by name and only when set, so that ENQUEUE
# without them still calls an older database's work_enqueue: `group_key` (from 0.10.0; 0.9.0 has
# the seven arguments above), `on_conflict` and `trace` (from 0.12.0), and a workflow's `after`
# and `on_parent_failure` (from 0.12.0, issue 37).
ENQUEUE_GROUP_KEY = "group_key => %s::text"
ENQUEUE_ON_CONFLICT = "on_conflict => %s::text"
ENQUEUE_TRACE = "trace => %s::text"
ENQUEUE_AFTER = "after => %s::bigint[]"
ENQUEUE_ON_PARENT_FAILURE = "on_parent_failure => %s::text"
# Whether the database's work_enqueue takes `trace`: asked once per connection, and only before
# a trace the caller did not give (the current span's) is sent, so that an enqueue inside a span
# still works against a server without it.
ENQUEUE_TAKES_TRACE = """
SELECT EXISTS (
  SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname = 'workfence' AND p.proname = 'work_enqueue'
     AND 'trace' = ANY (p.proargnames))
"""
ENQUEUE_NAMED = """
SELECT id, key, inserted
  FROM workfence.work_enqueue(%s::text, %s::jsonb, %s::text, %s::timestamptz, %s::integer,
                              %s::integer, %s::interval, {named})
"""
# From 0.12.0 (issue 38): many items of one queue in one statement, a row per item in their
# order. `keys`, `run_at` and `group_keys` are NULL when no item sets one (the server's defaults);
# `on_conflict` is passed by name only when set (ENQUEUE_MANY_ON_CONFLICT), as in ENQUEUE.
ENQUEUE_MANY = """
SELECT id, key, inserted
  FROM workfence.work_enqueue_many(%s::text, %s::jsonb[], keys => %s::text[],
                                   run_at => %s::timestamptz[], priority => %s::integer,
                                   max_attempts => %s::integer, group_keys => %s::text[])
"""
ENQUEUE_MANY_ON_CONFLICT = """
SELECT id, key, inserted
  FROM workfence.work_enqueue_many(%s::text, %s::jsonb[], keys => %s::text[],
                                   run_at => %s::timestamptz[], priority => %s::integer,
                                   max_attempts => %s::integer, group_keys => %s::text[],
                                   on_conflict => %s::text)
"""
# From 0.12.0: the item's outcome, waiting in the server at most `wait` (capped by the server's
# workfence.long_poll_max).
AWAIT = """
SELECT state, result, last_error FROM workfence.work_await(%s::text, %s::text, %s::interval)
"""
RETRY = "SELECT workfence.work_retry(%s::text, %s::text, %s::timestamptz)"
RESCHEDULE = "SELECT workfence.work_reschedule(%s::text, %s::text, %s::timestamptz)"
CANCEL = "SELECT workfence.work_cancel(%s::text, %s::text)"
PAUSE = "SELECT workfence.work_pause(%s::text)"
RESUME = "SELECT workfence.work_resume(%s::text)"
LIMIT = "SELECT workfence.work_limit(%s::text, %s::integer, %s::integer, %s::interval)"
# With per_group (from 0.12.0): by name, so that LIMIT, without it, still calls a 0.11.0
# database's four-argument work_limit.
LIMIT_PER_GROUP = """
SELECT workfence.work_limit(%s::text, %s::integer, %s::integer, %s::interval,
                            per_group => %s::integer)
"""
# Schedules (from 0.12.0): every argument positional, each one a parameter.
SCHEDULE = """
SELECT workfence.work_schedule(%s::text, %s::text, %s::text, %s::jsonb, %s::text, %s::text,
                               %s::integer, %s::integer, %s::text)
"""
UNSCHEDULE = "SELECT workfence.work_unschedule(%s::text)"
PAUSE_SCHEDULE = "SELECT workfence.work_pause_schedule(%s::text)"
RESUME_SCHEDULE = "SELECT workfence.work_resume_schedule(%s::text)"
FIRE_SCHEDULES = "SELECT workfence.work_fire_schedules()"
# The view's columns; next_slot NULL for `infinity` (no slot left), which no datetime holds.
SCHEDULES = """
SELECT name, cron, timezone, queue, catch_up, paused,
       CASE WHEN pg_catalog.isfinite(next_slot) THEN next_slot END AS next_slot,
       last_slot, last_item_id, last_fired_at, payload, priority, max_attempts, group_key
  FROM workfence.work_schedules
 ORDER BY name
"""
# Every column, read by name (`ItemInfo`): from 0.12.0 the row ends with `progress`, which an
# older server does not have.
ITEM_BY_KEY = "SELECT * FROM workfence.work_item(%s::text, %s::text)"
ITEM_BY_ID = "SELECT * FROM workfence.work_item(%s::bigint)"
# From 0.12.0: the workflow around an item, nearest first (the server's order).
WORKFLOW = """
SELECT id, queue, key, state, depth, parents FROM workfence.work_workflow(%s::bigint)
"""


def interval(value: float | timedelta | None, what: str) -> timedelta | None:
    """`value` (seconds as a number, or a timedelta) as a timedelta; None stays None.

    Raises `InvalidArgument` (22023) for a bool or another type: a number alone would reach the
    server as an integer, which no interval argument takes (docs/writing-workers.md).
    """
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be seconds or a datetime.timedelta, not {value!r}")
    return timedelta(seconds=value)


def whole(value: int | None, what: str) -> int | None:
    """`value` checked to be an int or None (not a bool, nor a float the server would round).

    Raises `InvalidArgument` (22023) otherwise.
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InvalidArgument(f"{what} must be an int or None, not {value!r}")
