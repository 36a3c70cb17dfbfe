//! Operating queues (from 0.6.0): an operator's calls, made without a
//! token: retry a dead letter, move a pending item, pause and resume a
//! queue, read an item.
//!
//! None of them can make an old token act again: a retried item goes back
//! to `pending` with its old epoch on the row, and every token-guarded
//! statement matches only `claimed` items, so the next claim's fresh epoch
//! is the only one that will ever be honoured (docs/contract.md, promise 1).
//! Each changes one row (or one queue setting) in one statement; the row
//! lock it takes orders it against a concurrent claim, finish or cancel,
//! and in READ COMMITTED it re-checks the row's state after waiting.

use pgrx::datum::Interval;
use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::wait;
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::QueueKey;
use crate::store::sql::QueueParams;
use crate::verbs::workflow;

// Put a failed or cancelled item back in its queue, in state `$state`,
// due at `$3` (NULL: now), with at least one attempt left. The epoch,
// owner, attempts and errors stay as they were (the history is kept; the
// old tokens stay dead). The row is locked in a subquery first, which
// reads the state it was in (as CANCEL does): the second column, for the
// state counts; `$more` adds columns after it.
macro_rules! retry_sql {
    ($state:literal, $more:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET state = "#,
            $state,
            r#",
       run_at = COALESCE($3, pg_catalog.clock_timestamp()),
       max_attempts = GREATEST(i.max_attempts, i.attempts OPERATOR(pg_catalog.+) 1),
       lease_until = NULL,
       finished_at = NULL
  FROM (SELECT o.id, o.state
          FROM workfence.items AS o
         WHERE o.queue OPERATOR(pg_catalog.=) $1
           AND o.key OPERATOR(pg_catalog.=) $2
           AND o.state OPERATOR(pg_catalog.=) ANY ('{failed,cancelled}'::workfence.item_state[])
           FOR UPDATE) AS was
 WHERE i.id OPERATOR(pg_catalog.=) was.id
RETURNING i.id, was.state::pg_catalog.text"#,
            $more,
            "\n"
        )
    };
}

// Back to pending: a schema before 0.12.0.
static RETRY: Statement<QueueKeyAt> =
    Statement::new(retry_sql!("'pending'::workfence.item_state", ""));

// RETRY from 0.12.0 (workflows, [`crate::verbs::workflow`]): an item with
// parents not yet settled (`waiting_on` > 0) goes back to waiting, not
// pending. Columns: id, the state before, the state after, whether it has
// children, whether it has parents.
static RETRY_LIFE: Statement<QueueKeyAt> = Statement::new(retry_sql!(
    "CASE WHEN i.waiting_on OPERATOR(pg_catalog.>) 0 THEN 'waiting'::workfence.item_state
                    ELSE 'pending'::workfence.item_state END",
    ", i.state::pg_catalog.text, i.has_children,
          i.on_parent_failure IS NOT NULL"
));

// Move a pending item's run_at to `$3`.
static RESCHEDULE: Statement<QueueKeyAt> = Statement::new(
    r#"
UPDATE workfence.items AS i
   SET run_at = $3
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
   AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
RETURNING i.id
"#,
);

params! {
    /// `$1` queue, `$2` key, `$3` run_at.
    struct QueueKeyAt<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        run_at: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
    }
}

// Pause queue `$1`; a row only if it was not paused before.
static PAUSE: Statement<QueueParams> = Statement::new(
    r#"
INSERT INTO workfence.queues AS q (queue, paused, paused_at)
VALUES ($1, true, pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT queues_pkey
    DO UPDATE SET paused = true, paused_at = EXCLUDED.paused_at
 WHERE NOT q.paused
RETURNING q.queue
"#,
);

// Resume queue `$1`; a row only if it was paused. Only the pause is
// lifted: the queue's other settings (groups, limits, the rate window) are
// columns of the same row and stay as they were (docs/contract.md, *An
// operator verb changes only what it names*).
static RESUME: Statement<QueueParams> = Statement::new(
    r#"
UPDATE workfence.queues AS q
   SET paused = false, paused_at = NULL
 WHERE q.queue OPERATOR(pg_catalog.=) $1
   AND q.paused
RETURNING q.queue
"#,
);

/// PRUNE's text for a schema whose `workfence.queues` has the settings of
/// 0.10.0 (groups and limits) and `$more` besides.
macro_rules! prune_flow_sql {
    ($more:literal) => {
        concat!(
            r#"
DELETE FROM workfence.queues AS q
 WHERE q.queue OPERATOR(pg_catalog.=) $1
   AND NOT q.paused
   AND NOT q.grouped
   AND q.concurrency IS NULL
   AND q.rate IS NULL"#,
            $more,
            "\n"
        )
    };
}

// Drop queue `$1`'s row when it holds no setting any more (not paused, no
// groups, no limits), so that a queue paused and resumed before its first
// item leaves `work_queue_stats` as it came. A setting added to
// `workfence.queues` must be named here, or a resume would drop it (the
// composition test, `harness/tests/client/composition.rs`, catches that). The
// `legacy` form is for a schema before 0.10.0, where the pause is the only
// setting (chosen by [`crate::pg::plans::for_schema`]).
static PRUNE: plans::Versioned<QueueParams> = plans::Versioned {
    current: Statement::new(prune_flow_sql!("")),
    legacy: Statement::new(
        r#"
DELETE FROM workfence.queues AS q
 WHERE q.queue OPERATOR(pg_catalog.=) $1
   AND NOT q.paused
"#,
    ),
};

// PRUNE for a schema with `per_group` (0.12.0 on), which is a setting too.
static PRUNE_PER_GROUP: Statement<QueueParams> =
    Statement::new(prune_flow_sql!("\n   AND q.per_group IS NULL"));

/// The columns of `work_item`, in its result's order; `$group` is
/// `i.group_key`, or `NULL::pg_catalog.text` for a schema before 0.10.0
/// (a library newer than the schema serves the old `work_item` until the
/// update, CONTRIBUTING.md, *A new library serves the old schema*).
macro_rules! item_columns {
    ($group:literal) => {
        concat!(
            r#"
SELECT i.id, i.queue, i.key, i.state::pg_catalog.text, i.priority, i.run_at, i.attempts,
       i.max_attempts, i.owner, i.epoch, i.claimed_at, i.lease_until,
       COALESCE(i.errors, '[]'::pg_catalog.jsonb), i.result, i.created_at, i.finished_at,
       i.payload, i.max_run, "#,
            $group,
            r#"
  FROM workfence.items AS i"#
        )
    };
}

/// The `WHERE` of the item `$2` of queue `$1`.
macro_rules! by_key {
    () => {
        r#"
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
"#
    };
}

/// The `WHERE` of the item with id `$1`.
macro_rules! by_id {
    () => {
        r#"
 WHERE i.id OPERATOR(pg_catalog.=) $1
"#
    };
}

// The item `$2` of queue `$1`: `current` reads `group_key` (0.10.0 and
// later), `legacy` a NULL in its place (0.6.0 to 0.9.0), chosen by
// [`crate::pg::plans::for_schema`].
static ITEM_BY_KEY: plans::Versioned<QueueKey> = plans::Versioned {
    current: Statement::new(concat!(item_columns!("i.group_key"), by_key!())),
    legacy: Statement::new(concat!(item_columns!("NULL::pg_catalog.text"), by_key!())),
};

// The item with id `$1`, in the same two forms.
static ITEM_BY_ID: plans::Versioned<ItemId> = plans::Versioned {
    current: Statement::new(concat!(item_columns!("i.group_key"), by_id!())),
    legacy: Statement::new(concat!(item_columns!("NULL::pg_catalog.text"), by_id!())),
};

// ITEM_BY_KEY and ITEM_BY_ID from 0.12.0 (the schema has `progress`,
// [`crate::verbs::life::schema_has_life`]): the checkpoint too.
static ITEM_BY_KEY_LIFE: Statement<QueueKey> =
    Statement::new(concat!(item_columns!("i.group_key, i.progress"), by_key!()));
static ITEM_BY_ID_LIFE: Statement<ItemId> =
    Statement::new(concat!(item_columns!("i.group_key, i.progress"), by_id!()));

params! {
    /// `$1` item id.
    struct ItemId {
        id: i64 = INT8OID,
    }
}

/// Put a dead letter (a `failed` item) or a `cancelled` item back in its
/// queue.
///
/// SQL: `workfence.work_retry(queue text, key text, run_at timestamptz
/// DEFAULT NULL) RETURNS boolean`. True when the item was `failed` or
/// `cancelled` and is now `pending`, due at `run_at` (NULL: now, by the
/// server's clock), allowed at least one more attempt: `max_attempts` is
/// raised to `attempts + 1` when the attempts are used up, and left as it
/// is otherwise. Its `errors` history, `last_error`, `attempts` and epoch
/// stay; the tokens handed out before stay dead (the next claim hands out a
/// new epoch). Claimers long-polling the queue are woken at commit. False,
/// changing nothing, for a missing item or one that is `pending`, `claimed`
/// or `done`. (Bulk: `SELECT work_retry(queue, key) FROM ...` over the keys
/// `work_item` or a query of the operator's own finds.) From 0.12.0
/// (workflows): an item whose parents have not all settled goes back to
/// `waiting`, not pending, and the children a retried item's failure
/// cancelled wait again ([`workflow::reopened`]), so a retried parent keeps
/// its workflow.
///
/// Errors: 22004 for a NULL queue or key; 22023 for a bad queue or key (see
/// `work_enqueue`), or `run_at` = 'infinity'; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no operate grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_retry(
    queue: Option<String>,
    key: Option<String>,
    run_at: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> bool {
    (|| {
        let queue = validate::queue(queue)?;
        let key = validate::key(validate::required("key", key)?)?;
        let run_at = validate::finite_run_at(run_at)?;
        grants::check(Capability::Operate, &queue)?;
        if crate::verbs::life::schema_has_life() {
            return retry(&queue, &key, run_at);
        }
        move_item(&RETRY, &queue, &key, run_at)
    })()
    .or_report()
}

/// Move a pending item's `run_at` (to run it now: `now()`).
///
/// SQL: `workfence.work_reschedule(queue text, key text, run_at
/// timestamptz) RETURNS boolean`. True when the item is `pending` and its
/// `run_at` is now `run_at` (earlier or later); claimers long-polling the
/// queue are woken at commit, so an item moved to now is claimed at once.
/// False, changing nothing, for a missing item or one that is not
/// `pending` (claimed, done, failed, cancelled: a claimed item is
/// the holder's; retry a failed one with `work_retry`). From 0.12.0, for an
/// item in a group it takes the group's lock and makes the group's next
/// item its head, as `work_cancel` does ([`crate::verbs::flow::regroup`]).
///
/// Errors: 22004 for a NULL queue, key or run_at; 22023 for a bad queue or
/// key (see `work_enqueue`), or `run_at` = 'infinity'; 25000 (from 0.12.0)
/// for an item in a group under REPEATABLE READ or SERIALIZABLE; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no operate grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_reschedule(
    queue: Option<String>,
    key: Option<String>,
    run_at: Option<TimestampWithTimeZone>,
) -> bool {
    (|| {
        let queue = validate::queue(queue)?;
        let key = validate::key(validate::required("key", key)?)?;
        let run_at = validate::finite_run_at(Some(validate::required("run_at", run_at)?))?;
        grants::check(Capability::Operate, &queue)?;
        move_item(&RESCHEDULE, &queue, &key, run_at)
    })()
    .or_report()
}

/// `work_retry` on a schema of 0.12.0 or later ([`RETRY_LIFE`]): as
/// [`move_item`] does with RETRY, and for workflows: a retried child waits
/// again for its parents not settled now, a parent retried since it
/// settled included ([`workflow::rewait`]), and its parents' failures no
/// longer cancel it ([`workflow::forgiven`]); a retried parent's children
/// that its failure cancelled wait again ([`workflow::reopened`]).
fn retry(queue: &str, key: &str, run_at: Option<TimestampWithTimeZone>) -> Result<bool> {
    Spi::connect_mut(|client| {
        let moved = plans::run(
            client,
            &RETRY_LIFE,
            QueueKeyAt { queue, key, run_at },
            |rows| {
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                let state = |n: usize| -> Result<Option<ItemState>> {
                    Ok(row.get::<String>(n)?.as_deref().and_then(ItemState::parse))
                };
                Ok(row.get::<i64>(1)?.map(|id| (id, state(2), state(3))).map(
                    |(id, was, now)| -> Result<_> {
                        Ok((
                            id,
                            was?,
                            now?,
                            row.get::<bool>(4)?.unwrap_or(false),
                            row.get::<bool>(5)?.unwrap_or(false),
                        ))
                    },
                ))
            },
        )?;
        let Some(moved) = moved else {
            return Ok(false);
        };
        let (id, was, mut now, has_children, has_parents) = moved?;
        if has_parents {
            workflow::forgiven(client, id)?;
            if let Some(state) = workflow::rewait(client, id)? {
                now = Some(state);
            }
        }
        counters::count(queue, Event::Retried, 1);
        counters::moved(queue, was, now, 1);
        if has_children {
            workflow::reopened(client, id)?;
        }
        if now == Some(ItemState::Pending) {
            wait::wake_after_commit(queue, 1);
        }
        Ok(true)
    })
}

/// Run RETRY or RESCHEDULE; when it changed the item, wake a claimer
/// long-polling its queue after commit. A rescheduled item of a group may
/// change which of the group's items comes first: the group's head is made
/// again ([`crate::verbs::flow::regroup`]). (A retried item comes back a head of
/// its group, which claims pass over if it is not first.)
fn move_item(
    stmt: &'static Statement<QueueKeyAt<'static>>,
    queue: &str,
    key: &str,
    run_at: Option<TimestampWithTimeZone>,
) -> Result<bool> {
    let moved = Spi::connect_mut(|client| {
        plans::run(client, stmt, QueueKeyAt { queue, key, run_at }, |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let columns = rows.columns()?;
            let row = rows.first();
            let was = if columns >= 2 {
                row.get::<String>(2)?
            } else {
                None
            };
            Ok(row.get::<i64>(1)?.map(|id| (id, was)))
        })
    })?;
    let Some((id, was)) = moved else {
        return Ok(false);
    };
    if std::ptr::eq(stmt, &RESCHEDULE) {
        crate::verbs::flow::regroup(queue, id, false)?;
    } else {
        counters::count(queue, Event::Retried, 1);
        counters::moved(
            queue,
            was.as_deref().and_then(ItemState::parse),
            Some(ItemState::Pending),
            1,
        );
    }
    wait::wake_after_commit(queue, 1);
    Ok(true)
}

/// Pause a queue: its claims hand out nothing until `work_resume`.
///
/// SQL: `workfence.work_pause(queue text) RETURNS boolean`. True when the
/// queue was not paused and is now (false: it was paused already). From the
/// pause's commit on, `work_claim` and `work_claim_key` of the queue return
/// no rows and change nothing (they neither claim nor dead-letter), and
/// long polls of it go on waiting until the resume wakes them. Everything
/// else works as usual: enqueue, and the token calls of items already
/// claimed (renew, finish, release, fail, assert), so workers finish what
/// they hold. A claim that began before the pause committed may still
/// return items. The background maintenance still dead-letters the queue's
/// lapsed final attempts (nobody holds them; see docs/reference.md). A queue with
/// no items can be paused (before a deploy); the setting survives a dump
/// and restore.
///
/// Errors: 22004 for a NULL queue; 22023 for a bad queue (see `work_enqueue`);
/// 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no operate grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_pause(queue: Option<String>) -> bool {
    (|| {
        let queue = validate::queue(queue)?;
        grants::check(Capability::Operate, &queue)?;
        crate::backend::paused::changing(&queue);
        let paused = Spi::connect_mut(|client| {
            plans::run(client, &PAUSE, QueueParams { queue: &queue }, |rows| {
                Ok(!rows.is_empty())
            })
        })?;
        if paused {
            crate::backend::paused::changed();
        }
        Ok(paused)
    })()
    .or_report()
}

/// Resume a paused queue.
///
/// SQL: `workfence.work_resume(queue text) RETURNS boolean`. True when the
/// queue was paused and is not any more (false: it was not paused). It
/// lifts the pause and nothing else: the queue's serial groups, limits and
/// the rate limit's window are as they were before the pause (until 0.11.0
/// a resume dropped them). Every claimer long-polling the queue is woken at commit, so waiting workers
/// take its due items at once.
///
/// Errors: 22004 for a NULL queue; 22023 for a bad queue (see `work_enqueue`);
/// 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no operate grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_resume(queue: Option<String>) -> bool {
    (|| {
        let queue = validate::queue(queue)?;
        grants::check(Capability::Operate, &queue)?;
        crate::backend::paused::changing(&queue);
        let resumed = Spi::connect_mut(|client| {
            let resumed = plans::run(client, &RESUME, QueueParams { queue: &queue }, |rows| {
                Ok(!rows.is_empty())
            })?;
            if resumed {
                let prune = if crate::pg::plans::schema_has_heads() {
                    &PRUNE_PER_GROUP
                } else {
                    crate::pg::plans::for_schema(&PRUNE)
                };
                plans::run(client, prune, QueueParams { queue: &queue }, |_| Ok(()))?;
            }
            Ok::<bool, WorkfenceError>(resumed)
        })?;
        if resumed {
            crate::backend::paused::changed();
            wait::wake_after_commit(&queue, u32::MAX);
        }
        Ok(resumed)
    })()
    .or_report()
}

/// One row of `work_item`, in column order.
type ItemRow = (
    i64,
    String,
    String,
    String,
    i32,
    TimestampWithTimeZone,
    i32,
    i32,
    Option<String>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    RawJsonb,
    Option<RawJsonb>,
    TimestampWithTimeZone,
    Option<TimestampWithTimeZone>,
    RawJsonb,
    Option<Interval>,
    Option<String>,
    Option<RawJsonb>,
);

/// A row of 0.11.0's `work_item`: [`ItemRow`] without `group_key` (and
/// `progress`).
type ItemRowBefore0_12 = (
    i64,
    String,
    String,
    String,
    i32,
    TimestampWithTimeZone,
    i32,
    i32,
    Option<String>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    RawJsonb,
    Option<RawJsonb>,
    TimestampWithTimeZone,
    Option<TimestampWithTimeZone>,
    RawJsonb,
    Option<Interval>,
);

/// [`ItemRow`] as 0.11.0's `work_item` returned it (no `group_key`).
fn before_0_12(row: ItemRow) -> ItemRowBefore0_12 {
    let (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, _group_key, _progress) = row;
    (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r)
}

/// The rows of ITEM_BY_KEY or ITEM_BY_ID (zero or one).
fn read_item(rows: pgrx::spi::SpiTupleTable<'_>) -> Result<Vec<ItemRow>> {
    let missing = |column| WorkfenceError::UnexpectedNull { column };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push((
            row.get::<i64>(1)?.ok_or_else(|| missing("id"))?,
            row.get::<String>(2)?.ok_or_else(|| missing("queue"))?,
            row.get::<String>(3)?.ok_or_else(|| missing("key"))?,
            row.get::<String>(4)?.ok_or_else(|| missing("state"))?,
            row.get::<i32>(5)?.ok_or_else(|| missing("priority"))?,
            row.get::<TimestampWithTimeZone>(6)?
                .ok_or_else(|| missing("run_at"))?,
            row.get::<i32>(7)?.ok_or_else(|| missing("attempts"))?,
            row.get::<i32>(8)?.ok_or_else(|| missing("max_attempts"))?,
            row.get::<String>(9)?,
            row.get::<i64>(10)?,
            row.get::<TimestampWithTimeZone>(11)?,
            row.get::<TimestampWithTimeZone>(12)?,
            row.get::<RawJsonb>(13)?.ok_or_else(|| missing("errors"))?,
            row.get::<RawJsonb>(14)?,
            row.get::<TimestampWithTimeZone>(15)?
                .ok_or_else(|| missing("created_at"))?,
            row.get::<TimestampWithTimeZone>(16)?,
            row.get::<RawJsonb>(17)?.ok_or_else(|| missing("payload"))?,
            row.get::<Interval>(18)?,
            row.get::<String>(19)?,
            // Only the LIFE forms read it (the 0.12.0 schema).
            if row.columns() >= 20 {
                row.get::<RawJsonb>(20)?
            } else {
                None
            },
        ));
    }
    Ok(out)
}

/// The item `key` of `queue`, read under the role's read grant.
fn item_by_key(queue: Option<String>, key: Option<String>) -> Result<Vec<ItemRow>> {
    let queue = validate::queue(queue)?;
    let key = validate::key(validate::required("key", key)?)?;
    grants::check(Capability::Read, &queue)?;
    Spi::connect_mut(|client| {
        plans::run(
            client,
            if crate::verbs::life::schema_has_life() {
                &ITEM_BY_KEY_LIFE
            } else {
                crate::pg::plans::for_schema(&ITEM_BY_KEY)
            },
            QueueKey {
                queue: &queue,
                key: &key,
            },
            read_item,
        )
    })
}

/// The item with id `id`, none if the role may not read its queue.
fn item_by_id(id: Option<i64>) -> Result<Vec<ItemRow>> {
    let id = validate::id(id)?;
    let mut rows = Spi::connect_mut(|client| {
        plans::run(
            client,
            if crate::verbs::life::schema_has_life() {
                &ITEM_BY_ID_LIFE
            } else {
                crate::pg::plans::for_schema(&ITEM_BY_ID)
            },
            ItemId { id },
            read_item,
        )
    })?;
    // An item of a queue the role may not read is not there for it: the
    // answer does not tell whether such an item exists.
    let scope = grants::scope(Capability::Read)?;
    rows.retain(|row| scope.allows(&row.1));
    Ok(rows)
}

/// An item as an operator sees it, by queue and key.
///
/// SQL: `workfence.work_item(queue text, key text) RETURNS TABLE (id bigint,
/// queue text, key text, state text, priority integer, run_at timestamptz,
/// attempts integer, max_attempts integer, owner text, epoch bigint,
/// claimed_at timestamptz, lease_until timestamptz, errors jsonb, result
/// jsonb, created_at timestamptz, finished_at timestamptz, payload jsonb,
/// max_run interval, group_key text)`: zero rows when there is no such item,
/// else one. `state` is `pending`, `claimed`, `done`, `failed` or
/// `cancelled`; `owner`, `epoch` and `claimed_at` are the latest claim's
/// (kept after it ended); `lease_until` is set only while claimed (a
/// `lease_until` in the past is a lapsed lease nobody has claimed anew);
/// `errors` is the history of failed attempts and lapsed leases, oldest
/// first (`[]` if none; the newest 20 are kept); `group_key` is the serial
/// group it was enqueued in (NULL: none; from 0.12.0). It reads, changes
/// nothing and locks nothing: grant it to a role that may only look
/// (docs/operations.md's monitoring role). A hung job: `claimed_at` long ago
/// and `lease_until` kept in the future by renews; `max_run` at enqueue
/// bounds it.
///
/// Errors: 22004 for a NULL queue or key; 22023 for a bad queue or key (see
/// `work_enqueue`); 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no read grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(
    name = "work_item",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
// The result type is spelled out in both forms: pgrx reads it from the
// signature to write the SQL, and cannot see through a type alias.
#[allow(clippy::type_complexity)]
pub fn work_item_of_key(
    queue: Option<String>,
    key: Option<String>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(queue, String),
        name!(key, String),
        name!(state, String),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(owner, Option<String>),
        name!(epoch, Option<i64>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(errors, RawJsonb),
        name!(result, Option<RawJsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(payload, RawJsonb),
        name!(max_run, Option<Interval>),
        name!(group_key, Option<String>),
        name!(progress, Option<RawJsonb>),
    ),
> {
    item_by_key(queue, key).map(TableIterator::new).or_report()
}

/// An item as an operator sees it, by id.
///
/// SQL: `workfence.work_item(id bigint) RETURNS TABLE (...)`, the columns of
/// `work_item(queue, key)`: zero rows when no item has this id, else one.
/// Where queue grants are enforced, an item of a queue the role may not
/// read is answered with zero rows too, as if it did not exist.
///
/// Errors: 22004 for a NULL id.
#[pg_extern(
    name = "work_item",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::type_complexity)] // as work_item_of_key's
pub fn work_item_of_id(
    id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(queue, String),
        name!(key, String),
        name!(state, String),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(owner, Option<String>),
        name!(epoch, Option<i64>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(errors, RawJsonb),
        name!(result, Option<RawJsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(payload, RawJsonb),
        name!(max_run, Option<Interval>),
        name!(group_key, Option<String>),
        name!(progress, Option<RawJsonb>),
    ),
> {
    item_by_id(id).map(TableIterator::new).or_report()
}

/// 0.11.0's `work_item(queue, key)` (no `group_key`), kept as the C symbol
/// `work_item_by_key_wrapper` that the install scripts up to 0.11.0 bind,
/// so that a database not yet updated keeps working with this library, and
/// a call that resolved the old function before `ALTER EXTENSION
/// pg_workfence UPDATE` renamed it (`work_item_retired_0_11_0`) still runs.
/// Not part of this version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
#[allow(clippy::type_complexity)] // as work_item_of_key's
pub fn work_item_by_key(
    queue: Option<String>,
    key: Option<String>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(queue, String),
        name!(key, String),
        name!(state, String),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(owner, Option<String>),
        name!(epoch, Option<i64>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(errors, RawJsonb),
        name!(result, Option<RawJsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(payload, RawJsonb),
        name!(max_run, Option<Interval>),
    ),
> {
    item_by_key(queue, key)
        .map(|rows| TableIterator::new(rows.into_iter().map(before_0_12)))
        .or_report()
}

/// 0.11.0's `work_item(id)` (no `group_key`), kept as the C symbol
/// `work_item_by_id_wrapper` for the same reason as [`work_item_by_key`].
/// Not part of this version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
#[allow(clippy::type_complexity)] // as work_item_of_key's
pub fn work_item_by_id(
    id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(queue, String),
        name!(key, String),
        name!(state, String),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(owner, Option<String>),
        name!(epoch, Option<i64>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(errors, RawJsonb),
        name!(result, Option<RawJsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(payload, RawJsonb),
        name!(max_run, Option<Interval>),
    ),
> {
    item_by_id(id)
        .map(|rows| TableIterator::new(rows.into_iter().map(before_0_12)))
        .or_report()
}
