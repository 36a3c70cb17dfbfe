//! `work_enqueue`: add an item to a queue (idempotent on the queue and key).

use pgrx::datum::Interval;
use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::notify;
use crate::backend::wait;
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::QueueKey;
use crate::verbs::life::OnConflict;
use crate::verbs::workflow::{self, Entry, OnParentFailure, Parents};

// Insert the item unless (queue, key) exists; the id, and whether it is due.
// (A schema before 0.6.0 has no `max_run`; `$7` is then NULL and unused.)
macro_rules! insert_sql {
    ($mode:ident) => {
        insert_sql!(
            $mode,
            "\n    ON CONFLICT ON CONSTRAINT items_queue_key_unique DO NOTHING"
        )
    };
    ($mode:ident, $on_conflict:literal) => {
        concat!(
            r#"
INSERT INTO workfence.items (queue, key, payload, priority, run_at, max_attempts"#,
            plans::by_schema!($mode, ", max_run", ""),
            plans::life_only!($mode, ", trace"),
            r#")
VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.clock_timestamp()), $6"#,
            plans::by_schema!($mode, ", $7", ""),
            plans::life_only!($mode, ", $9"),
            ")",
            $on_conflict,
            r#"
RETURNING id, run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
"#
        )
    };
}

static INSERT: plans::Versioned<InsertParams> = plans::Versioned {
    current: Statement::new(insert_sql!(current)),
    legacy: Statement::new(insert_sql!(legacy)),
};

// INSERT of an item whose key this call generated (a UUIDv7: a millisecond
// timestamp, a per-process counter and random bits, which no item has), without the speculative
// insertion of ON CONFLICT: its index probe before the insert and its
// confirmation record after cost 43,700 of a plain insert's 237,000
// instructions (callgrind, `postgres --single`; issue 38). A schema from
// 0.6.0 on (the `current` form).
static INSERT_FRESH: Statement<InsertParams> = Statement::new(insert_sql!(current, ""));

// INSERT with the item's trace (`$9`, from 0.12.0: only 0.12.0's
// work_enqueue passes one, and only its schema has the column).
static INSERT_TRACED: Statement<InsertParams> = Statement::new(insert_sql!(life));

// INSERT with a group_key (`$8`, from 0.10.0: only called once the schema
// has the column, as only 0.10.0's work_enqueue passes one).
static INSERT_GROUPED: Statement<InsertParams> = Statement::new(
    r#"
INSERT INTO workfence.items (queue, key, payload, priority, run_at, max_attempts, max_run, group_key)
VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.clock_timestamp()), $6, $7, $8)
    ON CONFLICT ON CONSTRAINT items_queue_key_unique DO NOTHING
RETURNING id, run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
"#,
);

// INSERT_GROUPED from 0.12.0 (group heads, see [`crate::verbs::flow`]): the item
// is `behind` when, in this statement's snapshot, a pending item of its
// group comes before it in claim order or ties with it (claims then skip
// it without reading it): its group's first pending item, the first entry
// of `items_group_idx` (see `group_first!` in [`crate::verbs::flow`] for why not
// EXISTS), comes before it or ties. The snapshot may be stale by the commit (a claim
// of the group may have taken that item meanwhile), so the transaction
// checks again at its commit ([`crate::backend::xact`], [`VERIFY_BEHIND`]).
// Columns: id, whether it is due, whether it is behind.
// `$9`, the item's trace, is the last column (from 0.12.0, as the
// statement's schema always is).
static INSERT_GROUPED_BEHIND: Statement<InsertParams> = Statement::new(concat!(
    r#"
INSERT INTO workfence.items AS n
       (queue, key, payload, priority, run_at, max_attempts, max_run, group_key, trace, behind)
SELECT $1, $2, $3, $4, r.at, $6, $7, $8, $9,
       COALESCE((SELECT (o.priority, o.run_at) OPERATOR(pg_catalog.<=) ($4, r.at)
                   FROM workfence.items AS o
                  WHERE o.queue OPERATOR(pg_catalog.=) $1
                    AND o.group_key OPERATOR(pg_catalog.=) $8
                    AND "#,
    crate::store::sql::group_pending!("o"),
    "\n                  ",
    crate::store::sql::group_order!("o"),
    r#"
                  LIMIT 1), false)
  FROM (SELECT COALESCE($5, pg_catalog.clock_timestamp()) AS at) AS r
    ON CONFLICT ON CONSTRAINT items_queue_key_unique DO NOTHING
RETURNING n.id, n.run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp(), n.behind
"#
));

// INSERT of a child (from 0.12.0, [`crate::verbs::workflow`]): an item
// enqueued with `after`, whose parents `work_enqueue` has locked and read.
// Its state `$10` is waiting (`$11` parents not settled), pending, or
// cancelled (a parent ended failed or cancelled and `$12`, its
// on_parent_failure, is cancel; `$13` says which). A grouped child is not
// `behind`: it is not pending, or came pending after its parents, and a
// head that is not its group's first is passed over by claims (safety
// never rests on `behind`, [`crate::verbs::flow`]).
static INSERT_CHILD: Statement<ChildParams> = Statement::new(
    r#"
INSERT INTO workfence.items AS n
       (queue, key, payload, priority, run_at, max_attempts, max_run, group_key, trace,
        state, waiting_on, on_parent_failure, last_error, finished_at)
VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.clock_timestamp()), $6, $7, $8, $9,
        $10::pg_catalog.text::workfence.item_state, $11, $12, $13,
        CASE WHEN $10 OPERATOR(pg_catalog.=) 'cancelled' THEN pg_catalog.clock_timestamp() END)
    ON CONFLICT ON CONSTRAINT items_queue_key_unique DO NOTHING
RETURNING n.id, n.run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
"#,
);

params! {
    /// `$1`..`$9` as [`InsertParams`], `$10` the state, `$11` the parents
    /// not settled, `$12` on_parent_failure, `$13` the last error (a
    /// cancelled child's).
    struct ChildParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        payload: RawJsonb = JSONBOID,
        priority: i32 = INT4OID,
        run_at: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
        max_attempts: i32 = INT4OID,
        max_run: Option<Interval> = INTERVALOID,
        group_key: Option<&'a str> = TEXTOID,
        trace: Option<&'a str> = TEXTOID,
        state: &'a str = TEXTOID,
        waiting_on: i32 = INT4OID,
        on_parent_failure: &'a str = TEXTOID,
        last_error: Option<&'a str> = TEXTOID,
    }
}

/// At the commit of a transaction that enqueued items `behind` ([`crate::backend::xact`]):
/// each item of `$1` (whose group lock the commit holds, taken after this
/// statement's snapshot was) that is its group's first pending item now
/// (nothing pending comes before it), and each item of `$2` (whose group lock another transaction
/// held, a claim of the group that may not see them), stops being behind.
/// Runs as the extension's owner. Each id is looked up by a `LATERAL`
/// probe of its own (`items_pkey`, whatever the table's statistics say),
/// not matched by `id = ANY (...)` against every pending item: a commit of
/// 25,000 groups' items made that a sequential scan with a linear search of
/// the array per row (25 s; 0.47 s by id). The items are this
/// transaction's own inserts, which no other transaction can have changed.
static VERIFY_BEHIND: Statement<VerifyBehindParams> = Statement::new(concat!(
    r#"
UPDATE workfence.items AS i
   SET behind = false
 WHERE i.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
           SELECT x.ctid
             FROM (SELECT c.id, true AS checked FROM pg_catalog.unnest($1) AS c(id)
                   UNION ALL
                   SELECT c.id, false FROM pg_catalog.unnest($2) AS c(id)) AS v
             CROSS JOIN LATERAL (
                   SELECT t.ctid
                     FROM workfence.items AS t
                    WHERE t.id OPERATOR(pg_catalog.=) v.id
                      AND t.behind
                      AND t.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                      AND (NOT v.checked
                           OR (SELECT o.id
                                 FROM workfence.items AS o
                                WHERE o.queue OPERATOR(pg_catalog.=) t.queue
                                  AND o.group_key OPERATOR(pg_catalog.=) t.group_key
                                  AND "#,
    crate::store::sql::group_pending!("o"),
    "\n                                ",
    crate::store::sql::group_order!("o"),
    r#"
                                LIMIT 1) OPERATOR(pg_catalog.=) t.id)
                    LIMIT 1) AS x))
"#
));

/// Run [`VERIFY_BEHIND`]: `check` the items of groups whose lock the
/// commit holds, `clear` the others.
pub(crate) fn verify_behind(check: Vec<i64>, clear: Vec<i64>) -> Result<()> {
    Spi::connect_mut(|client| {
        plans::run(
            client,
            &VERIFY_BEHIND,
            VerifyBehindParams { check, clear },
            |_| Ok(()),
        )
    })
}

params! {
    /// `$1` items to check, `$2` items to make heads.
    pub(crate) struct VerifyBehindParams {
        check: Vec<i64> = INT8ARRAYOID,
        clear: Vec<i64> = INT8ARRAYOID,
    }
}

params! {
    /// `$1` queue, `$2` key, `$3` payload, `$4` priority, `$5` run_at (NULL:
    /// now), `$6` max_attempts, `$7` max_run (NULL: no limit), `$8`
    /// group_key (only INSERT_GROUPED and _BEHIND read it), `$9` trace (only
    /// INSERT_TRACED and INSERT_GROUPED_BEHIND read it).
    struct InsertParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        payload: RawJsonb = JSONBOID,
        priority: i32 = INT4OID,
        run_at: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
        max_attempts: i32 = INT4OID,
        max_run: Option<Interval> = INTERVALOID,
        group_key: Option<&'a str> = TEXTOID,
        trace: Option<&'a str> = TEXTOID,
    }
}

// Runs as its own statement after the INSERT did nothing, so (in READ
// COMMITTED) it sees the conflicting row that ON CONFLICT waited for.
static EXISTING: Statement<QueueKey> = Statement::new(
    r#"
SELECT i.id
  FROM workfence.items AS i
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
"#,
);

/// Add an item to `queue`, or return the existing item with the same key.
///
/// SQL: `workfence.work_enqueue(queue text, payload jsonb DEFAULT '{}', key
/// text DEFAULT NULL, run_at timestamptz DEFAULT NULL, priority int DEFAULT 0,
/// max_attempts int DEFAULT 25, max_run interval DEFAULT NULL, group_key
/// text DEFAULT NULL, on_conflict text DEFAULT 'keep') RETURNS TABLE (id
/// bigint, key text, inserted bool)`.
///
/// - `key` NULL: a UUIDv7 is generated (time-ordered, so the key index stays
///   compact). An existing (queue, key) is left exactly as it is and returned
///   with `inserted = false`: a submit retried after a lost reply is a no-op.
/// - `run_at` NULL: claimable at once (server time, `clock_timestamp()`).
/// - `priority`: lower is claimed first.
/// - `max_attempts`: claims that may fail (1 to 1000) before the item is failed.
/// - `max_run` (from 0.6.0): a run-time limit, up to 365 days; no claim or
///   renew sets the lease past `claimed_at + max_run`, so a hung job that
///   keeps renewing loses its lease then (its renew returns false) and the
///   item is claimed anew (or dead-lettered on its final attempt). NULL: no
///   limit.
/// - `group_key` (from 0.10.0): the item's serial group in the queue; at
///   most one item of a (queue, group_key) is claimed at a time, and a
///   group's items are claimed in claim order (see [`crate::verbs::flow`]). NULL:
///   in no group. An existing (queue, key) keeps its group.
/// - `on_conflict` (from 0.12.0, see [`crate::verbs::life`]): `keep`
///   leaves an existing (queue, key) as it is; `replace` (debounce) gives a
///   pending item the new payload and `run_at`, `preserve_run_at`
///   (throttle) the new payload only; with either, a `done`, `failed` or
///   `cancelled` item runs again (pending, due at `run_at`, attempts
///   counted afresh, its result, last error and checkpoint cleared, its
///   `errors` history kept), and a claimed one takes the new payload at
///   once and runs once more after the current run ends with a finish, a
///   final failure or a lapsed final attempt's dead letter (its holder's
///   token keeps working). Its priority,
///   max_attempts, max_run and group stay the first enqueue's. `inserted`
///   is true only for a new row.
/// - `after` (from 0.12.0, workflows, [`crate::verbs::workflow`]): the ids
///   of up to 1000 parents (1000 items at most, duplicates ignored); the new
///   item waits (state `waiting`) until every parent is `done`, and becomes
///   pending in the transaction of the last parent's accepted finish.
///   `on_parent_failure`: `cancel` (a parent ending failed or cancelled
///   cancels it, transitively) or `run` (the parent counts as ended). An
///   existing key's `after` is ignored.
/// - With `workfence.notify_enqueued` on (off by default from 0.12.0, see
///   [`crate::backend::notify`]), an inserted item that is due (`run_at` NULL or not after
///   `clock_timestamp()`) runs `pg_notify('work_enqueued', queue)`: listeners
///   hear of it when the transaction commits (one notification per queue per
///   transaction, as PostgreSQL folds identical ones). A re-submit
///   (`inserted = false`) or a future `run_at` notifies nobody.
///
/// Errors: 22004 for a NULL `queue`, `payload`, `priority`, `max_attempts`
/// or `on_parent_failure`, or a NULL element of `after`; 23503
/// (foreign_key_violation) for an `after` id of no item, or of an item in
/// a queue the role may not read; 22023 also for `after` naming over 1000
/// items or an `on_parent_failure` other than cancel or run;
/// 22023 for an empty, oversized (> 128 bytes) or control-character queue, an
/// empty or oversized (> 512 bytes) key, `run_at` = 'infinity',
/// `max_attempts` outside 1..1000, `max_run` not in (0, 365 days], a
/// `group_key` empty, over 128 bytes or with control characters, an
/// `on_conflict` other than keep, replace, preserve_run_at; 25000 for an
/// `on_conflict` change of a pending item of a group under REPEATABLE READ
/// or SERIALIZABLE; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no enqueue grant covering the queue
/// (see `crate::access::grants`), or (with `on_conflict`) no operate grant
/// for running a cancelled item again; 40001
/// (serialization_failure) when the existing item of the key was deleted
/// while this enqueue ran (a purge or a restore racing it): retrying the
/// transaction is safe.
#[pg_extern(
    name = "work_enqueue",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::too_many_arguments)]
pub fn work_enqueue_on_conflict(
    queue: Option<String>,
    payload: default!(Option<RawJsonb>, "'{}'"),
    key: default!(Option<String>, "NULL"),
    run_at: default!(Option<TimestampWithTimeZone>, "NULL"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, 25),
    max_run: default!(Option<Interval>, "NULL"),
    group_key: default!(Option<String>, "NULL"),
    on_conflict: default!(Option<String>, "'keep'"),
    trace: default!(Option<String>, "NULL"),
    after: default!(Option<Vec<Option<i64>>>, "NULL"),
    on_parent_failure: default!(Option<String>, "'cancel'"),
) -> TableIterator<'static, (name!(id, i64), name!(key, String), name!(inserted, bool))> {
    (|| {
        let group_key = validate::group_key(group_key)?;
        let on_conflict = OnConflict::parse(on_conflict)?;
        let trace = validate::trace(trace)?;
        let on_parent_failure = OnParentFailure::parse(on_parent_failure)?;
        let after = workflow::parent_ids(after)?.map(|ids| (ids, on_parent_failure));
        enqueue(
            queue,
            payload,
            key,
            run_at,
            priority,
            max_attempts,
            max_run,
            group_key,
            Extras {
                on_conflict,
                trace,
                after,
            },
        )
    })()
    .map(TableIterator::once)
    .or_report()
}

/// The 8-argument `work_enqueue` of versions 0.10.0 and 0.11.0 (no
/// `on_conflict`), kept as the C symbol `work_enqueue_with_group_wrapper`
/// that their install scripts bind, so that a database not yet updated
/// keeps working with this library, and a call that resolved the old
/// function before `ALTER EXTENSION pg_workfence UPDATE` renamed it
/// (`work_enqueue_retired_0_11_0`) still runs. Not part of this version's
/// SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
#[allow(clippy::too_many_arguments)]
pub fn work_enqueue_with_group(
    queue: Option<String>,
    payload: default!(Option<RawJsonb>, "'{}'"),
    key: default!(Option<String>, "NULL"),
    run_at: default!(Option<TimestampWithTimeZone>, "NULL"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, 25),
    max_run: default!(Option<Interval>, "NULL"),
    group_key: default!(Option<String>, "NULL"),
) -> TableIterator<'static, (name!(id, i64), name!(key, String), name!(inserted, bool))> {
    (|| {
        let group_key = validate::group_key(group_key)?;
        enqueue(
            queue,
            payload,
            key,
            run_at,
            priority,
            max_attempts,
            max_run,
            group_key,
            Extras::default(),
        )
    })()
    .map(TableIterator::once)
    .or_report()
}

/// The 7-argument `work_enqueue` of versions 0.6.0 to 0.9.0 (no
/// `group_key`), kept as the C symbol `work_enqueue_with_max_run_wrapper`
/// that their install scripts bind, so that a database not yet updated
/// keeps working with this library, and a call that resolved the old
/// function before `ALTER EXTENSION pg_workfence UPDATE` renamed it
/// (`work_enqueue_retired_0_9_0`) still runs. Not part of this version's
/// SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
pub fn work_enqueue_with_max_run(
    queue: Option<String>,
    payload: Option<RawJsonb>,
    key: Option<String>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    max_run: Option<Interval>,
) -> TableIterator<'static, (name!(id, i64), name!(key, String), name!(inserted, bool))> {
    enqueue(
        queue,
        payload,
        key,
        run_at,
        priority,
        max_attempts,
        max_run,
        None,
        Extras::default(),
    )
    .map(TableIterator::once)
    .or_report()
}

/// The 6-argument `work_enqueue` of versions up to 0.5.0 (no `max_run`),
/// kept as the C symbol `work_enqueue_wrapper` that their install scripts
/// bind, so that a database not yet updated keeps working with this
/// library, and a call that resolved the old function before `ALTER
/// EXTENSION pg_workfence UPDATE` renamed it (`work_enqueue_retired_0_5_0`)
/// still runs. Not part of this version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
pub fn work_enqueue(
    queue: Option<String>,
    payload: Option<RawJsonb>,
    key: Option<String>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
) -> TableIterator<'static, (name!(id, i64), name!(key, String), name!(inserted, bool))> {
    enqueue(
        queue,
        payload,
        key,
        run_at,
        priority,
        max_attempts,
        None,
        None,
        Extras::default(),
    )
    .map(TableIterator::once)
    .or_report()
}

/// `work_enqueue`'s arguments after `group_key`, checked: `on_conflict`,
/// `trace` (from 0.12.0), and `after` with `on_parent_failure` (from
/// 0.12.0's workflows: the distinct parent ids, `None` without parents).
#[derive(Default)]
struct Extras {
    on_conflict: OnConflict,
    trace: Option<String>,
    after: Option<(Vec<i64>, OnParentFailure)>,
}

/// The id in the first row, if the statement returned any.
fn first_id(rows: pgrx::spi::SpiTupleTable<'_>) -> Result<Option<i64>> {
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(rows.first().get_one::<i64>()?)
}

#[allow(clippy::too_many_arguments)]
fn enqueue(
    queue: Option<String>,
    payload: Option<RawJsonb>,
    key: Option<String>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    max_run: Option<Interval>,
    group_key: Option<String>,
    extras: Extras,
) -> Result<(i64, String, bool)> {
    let queue = validate::queue(queue)?;
    let payload = validate::required("payload", payload)?;
    let generated_key = key.is_none();
    let key = match key {
        Some(key) => validate::key(key)?,
        None => uuid::Uuid::now_v7().to_string(),
    };
    validate::finite_run_at(run_at)?;
    let priority = validate::required("priority", priority)?;
    let max_attempts = validate::max_attempts(max_attempts)?;
    validate::max_run(max_run.map(Into::into))?;
    grants::check(Capability::Enqueue, &queue)?;
    let (id, inserted) = insert(
        &queue,
        &key,
        payload,
        run_at,
        priority,
        max_attempts,
        max_run,
        group_key.as_deref(),
        How {
            on_conflict: extras.on_conflict,
            trace: extras.trace.as_deref(),
            generated_key,
        },
        extras.after,
    )?;
    Ok((id, key, inserted))
}

/// How [`insert`] treats an existing (queue, key): `on_conflict` and the
/// `trace` it stores with a replaced payload, as `work_enqueue` was called;
/// `generated_key` when the key is a UUIDv7 the caller generated (no item
/// can have it, so there is nothing to look up or arbitrate, see
/// [`INSERT_FRESH`]).
#[derive(Clone, Copy)]
pub(crate) struct How<'a> {
    pub on_conflict: OnConflict,
    pub trace: Option<&'a str>,
    pub generated_key: bool,
}

/// Add the item (queue, key) unless it exists, with arguments already
/// validated and the caller's right to enqueue settled (`work_enqueue`
/// checks the queue grant; a schedule's fire was authorised when the
/// schedule was made, [`crate::verbs::schedule`]): its id, and whether this
/// call inserted it (false: the existing item of the key, left as it is).
/// Wakes long polls of the queue at commit, and notifies if it is due.
///
/// Errors: 40001 (serialization_failure) when the existing item of the key
/// was deleted three times while this ran (a purge racing it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert(
    queue: &str,
    key: &str,
    payload: RawJsonb,
    run_at: Option<TimestampWithTimeZone>,
    priority: i32,
    max_attempts: i32,
    max_run: Option<Interval>,
    group_key: Option<&str>,
    how: How<'_>,
    after: Option<(Vec<i64>, OnParentFailure)>,
) -> Result<(i64, bool)> {
    let How {
        on_conflict,
        trace,
        generated_key,
    } = how;
    if group_key.is_some() {
        crate::verbs::flow::enqueue_grouped(queue)?;
    }

    let heads = group_key.is_some() && crate::pg::plans::schema_has_heads();
    Spi::connect_mut(|client| {
        let mut after = after;
        let mut parents: Option<Parents> = None;
        // The existing row can vanish between the two statements (purged in
        // between); then the INSERT is simply tried again.
        for _ in 0..3 {
            // With on_conflict, an existing key is updated without an
            // INSERT first (which would draw an id for nothing, and before
            // a refusal by the grants: a refused call changes nothing).
            if on_conflict != OnConflict::Keep && !generated_key {
                if let Some(id) = crate::verbs::life::conflict(
                    client,
                    queue,
                    key,
                    on_conflict,
                    payload.clone(),
                    run_at,
                    trace,
                )? {
                    return Ok((id, false));
                }
            }
            if let Some((ids, on_failure)) = after.take() {
                // A child's parents are locked before its insert, once:
                // their states decide how it enters (and a finish of one
                // waits for this transaction). Not for a key that exists:
                // its edges stay as they are, whatever this `after` says
                // (a resubmit after a parent was purged is no error).
                if on_conflict == OnConflict::Keep {
                    let existing =
                        plans::run(client, &EXISTING, QueueKey { queue, key }, first_id)?;
                    if let Some(id) = existing {
                        return Ok((id, false));
                    }
                }
                parents = Some(workflow::lock_parents(client, ids, on_failure)?);
            }
            if let Some(parents) = &parents {
                if let Some(id) = insert_child(
                    client,
                    parents,
                    InsertParams {
                        queue,
                        key,
                        payload: payload.clone(),
                        priority,
                        run_at,
                        max_attempts,
                        max_run,
                        group_key,
                        trace,
                    },
                )? {
                    return Ok((id, true));
                }
            } else if let Some(inserted) = plans::run(
                client,
                match (&group_key, heads) {
                    (Some(_), true) => &INSERT_GROUPED_BEHIND,
                    (Some(_), false) => &INSERT_GROUPED,
                    (None, _) if trace.is_some() => &INSERT_TRACED,
                    (None, _) if generated_key && plans::schema() == plans::Schema::Current => {
                        &INSERT_FRESH
                    }
                    (None, _) => INSERT.get(),
                },
                InsertParams {
                    queue,
                    key,
                    payload: payload.clone(),
                    priority,
                    run_at,
                    max_attempts,
                    max_run,
                    group_key,
                    trace,
                },
                |rows| {
                    if rows.is_empty() {
                        return Ok(None);
                    }
                    let row = rows.first();
                    let behind = heads && row.get::<bool>(3)?.unwrap_or(false);
                    Ok(row
                        .get::<i64>(1)?
                        .zip(row.get::<bool>(2)?)
                        .map(|(id, due)| (id, due, behind)))
                },
            )? {
                let (id, due, behind) = inserted;
                counters::count(queue, Event::Enqueued, 1);
                counters::moved(queue, None, Some(ItemState::Pending), 1);
                if let (true, Some(group)) = (behind, group_key) {
                    crate::backend::xact::behind_at_commit(queue, group, id);
                }
                if due {
                    notify::enqueued(client, queue)?;
                }
                // Claimers long-polling the queue re-check after commit
                // (a future run_at too: it may be sooner than they sleep).
                wait::wake_after_commit(queue, 1);
                return Ok((id, true));
            }
            if on_conflict == OnConflict::Keep {
                let existing = plans::run(client, &EXISTING, QueueKey { queue, key }, first_id)?;
                if let Some(id) = existing {
                    return Ok((id, false));
                }
            }
            // (With on_conflict, a key inserted by another transaction
            // meanwhile is updated at the loop's next turn.)
        }
        Err(WorkfenceError::KeyChurn {
            queue: queue.to_string(),
            key: key.to_string(),
        })
    })
}

/// Insert a child of the locked `parents` ([`INSERT_CHILD`]) with its
/// edges ([`workflow::link`]): its id, or `None` if its (queue, key)
/// exists. A pending child is an enqueue like any other (notified if due,
/// long polls woken); a waiting one is woken by its last parent's finish.
fn insert_child(
    client: &mut pgrx::spi::SpiClient<'_>,
    parents: &Parents,
    item: InsertParams<'_>,
) -> Result<Option<i64>> {
    let entry = parents.entry();
    let (state, waiting_on, last_error) = match &entry {
        Entry::Pending => (ItemState::Pending, 0, None),
        Entry::Waiting(n) => (ItemState::Waiting, *n, None),
        Entry::Cancelled(why, n) => (ItemState::Cancelled, *n, Some(why.as_str())),
    };
    let queue = item.queue;
    let inserted = plans::run(
        client,
        &INSERT_CHILD,
        ChildParams {
            queue: item.queue,
            key: item.key,
            payload: item.payload,
            priority: item.priority,
            run_at: item.run_at,
            max_attempts: item.max_attempts,
            max_run: item.max_run,
            group_key: item.group_key,
            trace: item.trace,
            state: match state {
                ItemState::Waiting => "waiting",
                ItemState::Cancelled => "cancelled",
                _ => "pending",
            },
            waiting_on,
            on_parent_failure: parents.on_failure.as_str(),
            last_error,
        },
        |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok(row.get::<i64>(1)?.zip(row.get::<bool>(2)?))
        },
    )?;
    let Some((id, due)) = inserted else {
        return Ok(None);
    };
    workflow::link(client, id, parents)?;
    counters::count(queue, Event::Enqueued, 1);
    counters::moved(queue, None, Some(state), 1);
    match state {
        ItemState::Pending => {
            if due {
                notify::enqueued(client, queue)?;
            }
            wait::wake_after_commit(queue, 1);
        }
        ItemState::Cancelled => counters::count(queue, Event::Cancelled, 1),
        _ => {}
    }
    Ok(Some(id))
}
