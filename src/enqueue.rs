//! `work_enqueue`: add an item to a queue (idempotent on the queue and key).

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;

use crate::cancel::QueueKey;
use crate::error::{OrReport, Result, WorkfenceError};
use crate::jsonb::RawJsonb;
use crate::plans::{self, params, Statement};
use crate::validate;
use crate::wait;

// Insert the item unless (queue, key) exists; the id, and whether it is due.
static INSERT: Statement<InsertParams> = Statement::new(
    r#"
INSERT INTO workfence.items (queue, key, payload, priority, run_at, max_attempts)
VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.clock_timestamp()), $6)
    ON CONFLICT ON CONSTRAINT items_queue_key_unique DO NOTHING
RETURNING id, run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
"#,
);

params! {
    /// `$1` queue, `$2` key, `$3` payload, `$4` priority, `$5` run_at (NULL:
    /// now), `$6` max_attempts.
    struct InsertParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        payload: RawJsonb = JSONBOID,
        priority: i32 = INT4OID,
        run_at: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
        max_attempts: i32 = INT4OID,
    }
}

params! {
    /// `$1` queue.
    pub(crate) struct QueueParams<'a> {
        queue: &'a str = TEXTOID,
    }
}

/// `workfence.notify_enqueued` (boolean, default on, superuser-set): whether
/// an enqueue of a due item runs `NOTIFY work_enqueued, '<queue>'`. Any role
/// that can connect may `LISTEN` on any channel, so the notifications tell
/// every such role the names of the queues that receive work; an operator
/// who must keep queue names private turns this off (`ALTER SYSTEM`, `ALTER
/// DATABASE ... SET`, or a superuser's `SET`): long polls
/// (`work_claim(..., wait)`) do not need it.
pub static NOTIFY_ENQUEUED: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Define `workfence.notify_enqueued`; called from `_PG_init`.
pub fn init() {
    GucRegistry::define_bool_guc(
        c"workfence.notify_enqueued",
        c"pg_workfence: an enqueue of a due item sends NOTIFY work_enqueued with the queue name.",
        c"Any role that can connect may LISTEN and so learn queue names; turn this off to keep \
          them private (long polls do not need it).",
        &NOTIFY_ENQUEUED,
        GucContext::Suset,
        GucFlags::empty(),
    );
}

// Tells listeners that an item of queue `$1` is claimable now. PostgreSQL
// delivers it when (and only if) the transaction commits, and folds identical
// notifications of one transaction into one.
static NOTIFY: Statement<QueueParams> = Statement::new(
    r#"
SELECT pg_catalog.pg_notify('work_enqueued', $1)
"#,
);

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
/// max_attempts int DEFAULT 25) RETURNS TABLE (id bigint, key text, inserted bool)`.
///
/// - `key` NULL: a UUIDv7 is generated (time-ordered, so the key index stays
///   compact). An existing (queue, key) is left exactly as it is and returned
///   with `inserted = false`: a submit retried after a lost reply is a no-op.
/// - `run_at` NULL: claimable at once (server time, `clock_timestamp()`).
/// - `priority`: lower is claimed first.
/// - `max_attempts`: claims that may fail (1 to 1000) before the item is failed.
/// - An inserted item that is due (`run_at` NULL or not after
///   `clock_timestamp()`) runs `pg_notify('work_enqueued', queue)`: listeners
///   hear of it when the transaction commits (one notification per queue per
///   transaction, as PostgreSQL folds identical ones). A re-submit
///   (`inserted = false`) or a future `run_at` notifies nobody.
///
/// Errors: 22004 for a NULL `queue`, `payload`, `priority` or `max_attempts`;
/// 22023 for an empty, oversized (> 128 bytes) or control-character queue, an
/// empty or oversized (> 512 bytes) key, `run_at` = 'infinity',
/// `max_attempts` outside 1..1000; 40001 (serialization_failure) when the
/// existing item of the key was deleted while this enqueue ran (a purge or a
/// restore racing it): retrying the transaction is safe.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_enqueue(
    queue: Option<String>,
    payload: default!(Option<RawJsonb>, "'{}'"),
    key: default!(Option<String>, "NULL"),
    run_at: default!(Option<TimestampWithTimeZone>, "NULL"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, 25),
) -> TableIterator<'static, (name!(id, i64), name!(key, String), name!(inserted, bool))> {
    enqueue(queue, payload, key, run_at, priority, max_attempts)
        .map(TableIterator::once)
        .or_report()
}

/// The id in the first row, if the statement returned any.
fn first_id(rows: pgrx::spi::SpiTupleTable<'_>) -> Result<Option<i64>> {
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(rows.first().get_one::<i64>()?)
}

fn enqueue(
    queue: Option<String>,
    payload: Option<RawJsonb>,
    key: Option<String>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
) -> Result<(i64, String, bool)> {
    let queue = validate::queue(queue)?;
    let payload = validate::required("payload", payload)?;
    let key = match key {
        Some(key) => validate::key(key)?,
        None => uuid::Uuid::now_v7().to_string(),
    };
    if let Some(at) = run_at {
        if at.is_infinity() {
            return Err(WorkfenceError::invalid(
                "run_at",
                "must not be 'infinity'",
                "An item due at 'infinity' could never be claimed.",
                "Pass a finite time, or cancel the item instead.",
            ));
        }
    }
    let priority = validate::required("priority", priority)?;
    let max_attempts = validate::max_attempts(max_attempts)?;

    Spi::connect_mut(|client| {
        // The existing row can vanish between the two statements (purged in
        // between); then the INSERT is simply tried again.
        for _ in 0..3 {
            let inserted = plans::run(
                client,
                &INSERT,
                InsertParams {
                    queue: &queue,
                    key: &key,
                    payload: payload.clone(),
                    priority,
                    run_at,
                    max_attempts,
                },
                |rows| {
                    if rows.is_empty() {
                        return Ok(None);
                    }
                    let row = rows.first();
                    Ok(row.get::<i64>(1)?.zip(row.get::<bool>(2)?))
                },
            )?;
            if let Some((id, due)) = inserted {
                if due && NOTIFY_ENQUEUED.get() {
                    plans::run(client, &NOTIFY, QueueParams { queue: &queue }, |_| Ok(()))?;
                }
                // Claimers long-polling the queue re-check after commit
                // (a future run_at too: it may be sooner than they sleep).
                wait::wake_after_commit(&queue, 1);
                return Ok((id, key, true));
            }
            let existing = plans::run(
                client,
                &EXISTING,
                QueueKey {
                    queue: &queue,
                    key: &key,
                },
                first_id,
            )?;
            if let Some(id) = existing {
                return Ok((id, key, false));
            }
        }
        Err(WorkfenceError::KeyChurn { queue, key })
    })
}
