//! A job's life (from 0.12.0, issue 35): what happens around a run besides
//! its claim and its settle.
//!
//! - **Run once more** (`work_enqueue(..., on_conflict)`): a key enqueued
//!   again with `replace` (debounce) or `preserve_run_at` (throttle) updates
//!   its item instead of leaving it ([`conflict`]). A pending item takes the
//!   new payload (and with `replace` the new `run_at`); a finished one runs
//!   again; a claimed one takes the new payload at once, its holder keeping
//!   its token and the payload it read, and `rerun_after` records the
//!   holder's epoch: when that run ends with a finish, a final failure or
//!   a lapsed final attempt's dead letter
//!   ([`ended`]), the item goes back to pending once more. The names and
//!   modes are graphile-worker's `job_key_mode` (`replace`,
//!   `preserve_run_at`); pg-boss and Oban call the same ideas debounce and
//!   throttle.
//! - **Checkpoints** (`work_progress`, in [`crate::verbs::lease`] with the
//!   other token calls): stored under the fence, handed to the next claim of
//!   the item ([`with_progress`]).
//! - **Waiting for a result** (`work_await`): a sleep in the server on the
//!   backend's latch, which the commit of the item's settle sets
//!   ([`crate::backend::wait::wake_awaiters`]): the long poll's machinery,
//!   with one lock per awaited item instead of one per queue.
//!
//! All of it needs the 0.12.0 schema ([`schema_has_life`]); the functions
//! that are new in 0.12.0 only exist with it, and the settles of a library
//! newer than the schema (before `ALTER EXTENSION ... UPDATE`) run as the
//! schema's release did.

use std::time::{Duration, Instant};

use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::{notify, wait, xact};
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::base::types::LostToken;
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::QueueKey;
use crate::store::take::ClaimedRow;

/// Whether this database's schema has what a job's life needs (the
/// columns `progress`, `rerun_after` and `rerun_at`): 0.12.0 or later,
/// whose update adds them with group heads, so the heads' index is the
/// sign ([`plans::schema_has_heads`], two catalog-cache look-ups).
pub(crate) fn schema_has_life() -> bool {
    plans::schema_has_heads()
}

/// What `work_enqueue` does with a key that exists (`on_conflict`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum OnConflict {
    /// Leave the item as it is (the default, and the only behaviour before
    /// 0.12.0).
    #[default]
    Keep,
    /// New payload and `run_at` (debounce).
    Replace,
    /// New payload, the pending item's `run_at` kept (throttle).
    PreserveRunAt,
}

impl OnConflict {
    /// Parse `on_conflict`. Errors: 22004 NULL, 22023 another value.
    pub(crate) fn parse(value: Option<String>) -> Result<OnConflict> {
        match validate::required("on_conflict", value)?.as_str() {
            "keep" => Ok(OnConflict::Keep),
            "replace" => Ok(OnConflict::Replace),
            "preserve_run_at" => Ok(OnConflict::PreserveRunAt),
            other => Err(WorkfenceError::invalid(
                "on_conflict",
                "must be keep, replace or preserve_run_at",
                format!("on_conflict is {other:?}."),
                "keep leaves an existing item as it is; replace (debounce) gives it the new payload \
                 and run_at; preserve_run_at (throttle) the new payload only.",
            )),
        }
    }
}

// How the item of (queue `$1`, key `$2`) stands in this statement's
// snapshot, without a lock: its state and group.
static PEEK_EXISTING: Statement<QueueKey> = Statement::new(
    r#"
SELECT i.state::pg_catalog.text, i.group_key
  FROM workfence.items AS i
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
"#,
);

// Lock the item of (queue `$1`, key `$2`) and read how it stands: its id,
// state and whether it is in a group.
static LOCK_EXISTING: Statement<QueueKey> = Statement::new(
    r#"
SELECT i.id, i.state::pg_catalog.text, i.group_key IS NOT NULL
  FROM workfence.items AS i
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
   FOR NO KEY UPDATE
"#,
);

// The item `$1` (locked by LOCK_EXISTING, so its state is the one read
// there) takes payload `$2`:
// - pending (or, from 0.12.0, waiting): `run_at` `$3` (NULL: now), unless
//   `$4` (preserve_run_at);
//   its checkpoint, from an earlier attempt at the old payload, is dropped;
// - done, failed or cancelled: pending again, due at `$3` (NULL: now),
//   attempts counted afresh, result, last error and checkpoint cleared
//   (its `errors` history stays);
// - claimed: its checkpoint cleared (it is the old payload's);
//   `rerun_after` = the holder's epoch and `rerun_at` = `$3` (NULL, and
//   always with preserve_run_at: at once), so the end of this run sends it
//   round once more ([`ended`]). Checkpoints the holder writes from now on
//   are stored and shown, but not handed to the next claim (PROGRESS_OF).
// In every state it takes trace `$5` (NULL: none) with the payload: the
// next run serves the request that sent this payload.
// From 0.12.0's workflows, an item with parents not yet settled
// (`waiting_on` > 0) is waiting, not pending: a waiting item takes the
// payload and `run_at` as a pending one does and keeps waiting, and a
// finished one comes back waiting (and then waits again for a parent
// retried since, [`crate::verbs::workflow::rewait`]).
// Columns: whether it is pending and due now, its state, whether it has
// parents.
static REPLACE: Statement<ReplaceParams> = Statement::new(
    r#"
UPDATE workfence.items AS i
   SET payload = $2,
       trace = $5,
       run_at = CASE
                  WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state THEN i.run_at
                  WHEN i.state OPERATOR(pg_catalog.=) ANY ('{pending,waiting}'::workfence.item_state[]) AND $4
                  THEN i.run_at
                  ELSE COALESCE($3, pg_catalog.clock_timestamp()) END,
       attempts = CASE WHEN i.state OPERATOR(pg_catalog.=) ANY ('{done,failed,cancelled}'::workfence.item_state[])
                       THEN 0 ELSE i.attempts END,
       result = CASE WHEN i.state OPERATOR(pg_catalog.=) ANY ('{done,failed,cancelled}'::workfence.item_state[])
                     THEN NULL ELSE i.result END,
       last_error = CASE WHEN i.state OPERATOR(pg_catalog.=) ANY ('{done,failed,cancelled}'::workfence.item_state[])
                         THEN NULL ELSE i.last_error END,
       finished_at = CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                          THEN i.finished_at ELSE NULL END,
       lease_until = CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                          THEN i.lease_until ELSE NULL END,
       progress = NULL,
       rerun_after = CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                          THEN i.epoch ELSE NULL END,
       rerun_at = CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state AND NOT $4
                       THEN $3 ELSE NULL END,
       state = CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state THEN i.state
                    WHEN i.waiting_on OPERATOR(pg_catalog.>) 0 THEN 'waiting'::workfence.item_state
                    ELSE 'pending'::workfence.item_state END
 WHERE i.id OPERATOR(pg_catalog.=) $1
RETURNING i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
      AND i.run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp(),
          i.state::pg_catalog.text, i.on_parent_failure IS NOT NULL
"#,
);

params! {
    /// `$1` id, `$2` payload, `$3` run_at (NULL: now), `$4` preserve the
    /// pending item's run_at, `$5` the trace (NULL: none).
    struct ReplaceParams<'a> {
        id: i64 = INT8OID,
        payload: RawJsonb = JSONBOID,
        run_at: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
        preserve_run_at: bool = BOOLOID,
        trace: Option<&'a str> = TEXTOID,
    }
}

/// `work_enqueue`'s answer to an existing key under `on_conflict` `mode`
/// (not [`OnConflict::Keep`], which changes nothing): lock the item and
/// update it as [`REPLACE`] says; the item's id, or `None` if it was
/// deleted meanwhile (a purge: the caller inserts again). A pending item
/// of a group whose `run_at` moved has its group's head made again, as
/// `work_reschedule` does; an item made pending wakes a long poll of the
/// queue at commit, and notifies `work_enqueued` if it is due.
pub(crate) fn conflict(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    key: &str,
    mode: OnConflict,
    payload: RawJsonb,
    run_at: Option<TimestampWithTimeZone>,
    trace: Option<&str>,
) -> Result<Option<i64>> {
    // A pending item of a group: its group's lock first, then its row (see
    // `flow::lock_group_before_change`). Another state needs no lock: a
    // claimed item's change moves no head, and a finished one comes back
    // as `work_retry` brings it, a head that claims pass over unless first.
    let peek = plans::run(client, &PEEK_EXISTING, QueueKey { queue, key }, |rows| {
        if rows.is_empty() {
            return Ok(None);
        }
        let row = rows.first();
        Ok(row
            .get::<String>(1)?
            .map(|state| (state, row.get::<String>(2).ok().flatten())))
    })?;
    if let Some((state, Some(group))) = &peek {
        if state == "pending" {
            crate::verbs::flow::lock_group_before_change(queue, group, "work_enqueue")?;
        }
    }
    let existing = plans::run(client, &LOCK_EXISTING, QueueKey { queue, key }, |rows| {
        if rows.is_empty() {
            return Ok(None);
        }
        let row = rows.first();
        Ok(row
            .get::<i64>(1)?
            .zip(row.get::<String>(2)?)
            .map(|(id, state)| {
                (
                    id,
                    state,
                    row.get::<bool>(3).ok().flatten().unwrap_or(false),
                )
            }))
    })?;
    let Some((id, state, grouped)) = existing else {
        return Ok(None);
    };
    if state == "cancelled" {
        // An operator's cancel is undone only by an operator's right: an
        // enqueuer may debounce work not yet done and ask again for work
        // done or failed, not bring back what an operator stopped.
        grants::check(Capability::Operate, queue)?;
    }
    let (mut due, mut now, has_parents) = plans::run(
        client,
        &REPLACE,
        ReplaceParams {
            id,
            payload,
            run_at,
            preserve_run_at: mode == OnConflict::PreserveRunAt,
            trace,
        },
        |rows| {
            if rows.is_empty() {
                return Ok((false, None, false));
            }
            let row = rows.first();
            Ok((
                row.get::<bool>(1)?.unwrap_or(false),
                row.get::<String>(2)?.as_deref().and_then(ItemState::parse),
                row.get::<bool>(3)?.unwrap_or(false),
            ))
        },
    )?;
    let finished = matches!(state.as_str(), "done" | "failed" | "cancelled");
    if finished && has_parents {
        if let Some(state) = crate::verbs::workflow::rewait(client, id)? {
            now = Some(state);
            due = false;
        }
    }
    let unfinished = state == "pending" || state == "waiting";
    if !unfinished {
        // A finished item runs again (now), a claimed one once more (after
        // its run): either is one more run asked for, counted as an
        // enqueue; a pending or waiting item's new payload is not.
        counters::count(queue, Event::Enqueued, 1);
    }
    if !unfinished && state != "claimed" {
        counters::moved(queue, ItemState::parse(&state), now, 1);
    }
    if state != "claimed" && now == Some(ItemState::Pending) {
        if state == "pending" && grouped {
            // Under the group's lock, taken above (or now, if the item
            // became pending since the look: a rare release or failure in
            // between, where this wait can deadlock with a claim of the
            // group, 40P01, and the caller retries).
            crate::verbs::flow::regroup(queue, id, false)?;
        }
        if due {
            notify::enqueued(client, queue)?;
        }
        wait::wake_after_commit(queue, 1);
    }
    Ok(Some(id))
}

// Send item `$1`, whose run under its current token just ended (finished,
// or failed for good) while `rerun_after` named that token, round once
// more: pending, due at `rerun_at` (NULL: now), attempts counted afresh,
// result, last error and checkpoint cleared (as when a finished item is
// replaced; the `errors` history stays). `rerun_after` becomes minus the epoch when a finish
// ended the run (`$2`), so that the finish repeated with the same token
// after a lost reply is still answered true (`AFTER_REFUSAL_LIFE` in
// [`crate::verbs::lease`]), NULL after a failure. The owner and epoch stay,
// as a release leaves them: no token call matches a pending item.
/// What sending an item round once more sets (RERUN, RERUN_DEAD), with
/// `rerun_after` set to `$rerun_after`.
macro_rules! once_more_sets {
    ($rerun_after:literal) => {
        concat!(
            r#"
   SET state = 'pending'::workfence.item_state,
       run_at = COALESCE(i.rerun_at, pg_catalog.clock_timestamp()),
       attempts = 0,
       lease_until = NULL,
       finished_at = NULL,
       result = NULL,
       last_error = NULL,
       progress = NULL,
       rerun_after = "#,
            $rerun_after,
            r#",
       rerun_at = NULL"#
        )
    };
}

static RERUN: Statement<RerunParams> = Statement::new(concat!(
    "\nUPDATE workfence.items AS i",
    once_more_sets!("CASE WHEN $2 THEN OPERATOR(pg_catalog.-) i.epoch ELSE NULL END"),
    "\n WHERE i.id OPERATOR(pg_catalog.=) $1\n"
));

params! {
    /// `$1` id, `$2` a finish ended the run.
    struct RerunParams {
        id: i64 = INT8OID,
        finished: bool = BOOLOID,
    }
}

/// After a finish or a failure under item `id`'s current token matched
/// (on a 0.12.0 schema): send it round once more if `rerun` (its
/// `rerun_after` named the token: see [`RERUN`]; `finished`: a finish
/// ended the run), and wake the item's `work_await` callers when the
/// transaction commits.
pub(crate) fn ended(id: i64, queue: &str, rerun: bool, finished: bool) -> Result<()> {
    if rerun {
        // No `work_enqueued` NOTIFY: this runs inside a worker's settle,
        // which may be prepared (PREPARE TRANSACTION refuses a transaction
        // that notified); long polls are woken by their latches.
        Spi::connect_mut(|client| {
            plans::run(client, &RERUN, RerunParams { id, finished }, |_| Ok(()))
        })?;
        let ended_as = if finished {
            ItemState::Done
        } else {
            ItemState::Failed
        };
        counters::moved(queue, Some(ended_as), Some(ItemState::Pending), 1);
        wait::wake_after_commit(queue, 1);
    }
    xact::awaited_at_commit(id);
    Ok(())
}

// The lapsed final attempts of `$1` (ids) under the epochs `$2`, just
// dead-lettered by this transaction, whose run `rerun_after` named: sent
// round once more as RERUN does after a failure. Columns: id, queue. The
// items are found by `id = ANY ($1)` on `items_pkey`: joined with the
// pairs alone, a generic plan on a table with few dead letters walked
// `items_finished_idx` over every failed item of every queue (EXPLAIN on
// 100,000 items); the pairs are then matched by an EXISTS with qualified
// operators (a row comparison `(id, rerun_after) IN (...)` resolved its
// `=` by the search_path, which a hostile one could shadow).
static RERUN_DEAD: Statement<DeadParams> = Statement::new(concat!(
    "\nUPDATE workfence.items AS i",
    once_more_sets!("NULL"),
    r#"
 WHERE i.id OPERATOR(pg_catalog.=) ANY ($1)
   AND i.state OPERATOR(pg_catalog.=) 'failed'::workfence.item_state
   AND EXISTS (
           SELECT FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS d(id, epoch)
            WHERE d.id OPERATOR(pg_catalog.=) i.id
              AND d.epoch OPERATOR(pg_catalog.=) i.rerun_after)
RETURNING i.id, i.queue
"#
));

params! {
    /// `$1` ids, `$2` their dead-lettered runs' epochs.
    struct DeadParams {
        ids: Vec<i64> = INT8ARRAYOID,
        epochs: Vec<i64> = INT8ARRAYOID,
    }
}

/// After a claim or the maintenance worker dead-lettered the lapsed final
/// attempts of `lost` (on a 0.12.0 schema): those whose run a replace
/// named run once more ([`RERUN_DEAD`]), and every dead-lettered item's
/// `work_await` callers are woken at commit.
pub(crate) fn dead_lettered(
    client: &mut pgrx::spi::SpiClient<'_>,
    lost: &[LostToken],
) -> Result<()> {
    let dead: Vec<&LostToken> = lost.iter().filter(|t| t.dead_lettered).collect();
    if dead.is_empty() {
        return Ok(());
    }
    for token in &dead {
        xact::awaited_at_commit(token.id);
    }
    let again = plans::run(
        client,
        &RERUN_DEAD,
        DeadParams {
            ids: dead.iter().map(|t| t.id).collect(),
            epochs: dead.iter().map(|t| t.epoch).collect(),
        },
        |rows| {
            let mut again = Vec::with_capacity(rows.len());
            for row in rows {
                if let (Some(id), Some(queue)) = (row.get::<i64>(1)?, row.get::<String>(2)?) {
                    again.push((id, queue));
                }
            }
            Ok(again)
        },
    )?;
    // No NOTIFY, as in `ended` (a claim's dead letter may be prepared too).
    for (_, queue) in &again {
        counters::moved(queue, Some(ItemState::Failed), Some(ItemState::Pending), 1);
        wait::wake_after_commit(queue, 1);
    }
    // The dead letters that stay failed have failed for good: their
    // waiting children learn it in this transaction (workflows).
    let failed: Vec<i64> = dead
        .iter()
        .map(|t| t.id)
        .filter(|id| !again.iter().any(|(again, _)| again == id))
        .collect();
    crate::verbs::workflow::settled(client, failed, crate::verbs::workflow::Outcome::Failed)
}

// The checkpoints of the items `$1` (just claimed by this transaction)
// that the claim hands out: not one written by a run that an `on_conflict`
// replace named (`rerun_after` > 0 at a claim: that run ended otherwise
// than by a finish, and its checkpoint is the old payload's).
static PROGRESS_OF: Statement<Ids> = Statement::new(
    r#"
SELECT i.id, i.progress
  FROM workfence.items AS i
 WHERE i.id OPERATOR(pg_catalog.=) ANY ($1)
   AND i.progress IS NOT NULL
   AND COALESCE(i.rerun_after OPERATOR(pg_catalog.<) 0, true)
"#,
);

params! {
    /// `$1` item ids.
    struct Ids {
        ids: Vec<i64> = INT8ARRAYOID,
    }
}

/// The checkpoints of the items `ids` that have one, read in one
/// statement by primary key (nothing is read for no ids).
pub(crate) fn progress_of(ids: Vec<i64>) -> Result<Vec<(i64, RawJsonb)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Spi::connect_mut(|client| {
        plans::run(client, &PROGRESS_OF, Ids { ids }, |rows| {
            let mut found = Vec::with_capacity(rows.len());
            for row in rows {
                if let (Some(id), Some(progress)) = (row.get::<i64>(1)?, row.get::<RawJsonb>(2)?) {
                    found.push((id, progress));
                }
            }
            Ok(found)
        })
    })
}

/// A claimed row with its checkpoint: the `progress` column of the claim
/// functions of 0.12.0.
pub(crate) type ClaimedWithProgress = (ClaimedRow, Option<RawJsonb>);

/// The claimed `rows` with each item's checkpoint. Only an item claimed
/// before can have one, and such an item's claim is never its first
/// attempt: a failure, a lapse and a retry keep the attempts counted, an
/// `on_conflict` run once more clears the checkpoint with the attempts, and
/// from 0.12.0 a release of a run that stored a checkpoint keeps its
/// attempt and raises `max_attempts` instead (`RELEASE_LIFE` in
/// [`crate::verbs::lease`]; an adversarial review found the checkpoint of a
/// first attempt released lost). So a batch of first attempts, a worker's
/// usual claim, reads nothing more (reading every claimed row's cost a
/// claim -> finish 5% more instructions), and the others are read in one
/// statement by primary key ([`PROGRESS_OF`]). Called only by the claim
/// functions of 0.12.0, which exist only with its schema.
pub(crate) fn with_progress(rows: Vec<ClaimedRow>) -> Result<Vec<ClaimedWithProgress>> {
    let again: Vec<i64> = rows
        .iter()
        .filter(|row| row.4 > 1)
        .map(|row| row.0)
        .collect();
    let mut found = progress_of(again)?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let progress = found
                .iter()
                .position(|(id, _)| *id == row.0)
                .map(|at| found.swap_remove(at).1);
            (row, progress)
        })
        .collect())
}

// How item (queue `$1`, key `$2`) stands, with a fresh snapshot: its id,
// state, result and newest error.
static AWAITED: Statement<QueueKey> = Statement::new(
    r#"
SELECT i.id, i.state::pg_catalog.text, i.result, i.last_error
  FROM workfence.items AS i
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
"#,
);

/// One look at an awaited item: (id, state, result, last_error).
type Look = (i64, String, Option<RawJsonb>, Option<String>);

fn look(queue: &str, key: &str) -> Result<Option<Look>> {
    Spi::connect_mut(|client| {
        plans::run(client, &AWAITED, QueueKey { queue, key }, |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok(row
                .get::<i64>(1)?
                .zip(row.get::<String>(2)?)
                .map(|(id, state)| {
                    (
                        id,
                        state,
                        row.get::<RawJsonb>(3).ok().flatten(),
                        row.get::<String>(4).ok().flatten(),
                    )
                }))
        })
    })
}

/// Whether a state is final for `work_await`.
fn finished(state: &str) -> bool {
    matches!(state, "done" | "failed" | "cancelled")
}

/// Wait for an item's outcome.
///
/// SQL: `workfence.work_await(queue text, key text, wait interval DEFAULT
/// '0') RETURNS TABLE (state text, result jsonb, last_error text)` (from
/// 0.12.0). Zero rows when the queue has no item of that key. One row at
/// once when the item is `done`, `failed` or `cancelled`: its state, its
/// result (a finish's) and its newest error. Otherwise the call sleeps in
/// the server until a transaction that settles the item (a finish, a
/// failure, a cancel, a lapsed final attempt dead-lettered, a run sent
/// round once more) commits, which sets the
/// caller's latch, and looks again; it returns the item's state when it is
/// finished or when `wait` has passed (then `pending` or `claimed`, result
/// NULL): call again to wait longer. One call sleeps at most
/// `workfence.long_poll_max` (default 3 s), for the reason a long poll does:
/// a sleeping statement holds its snapshot, and vacuum's horizon with it.
/// A settle committed by `COMMIT PREPARED` wakes nobody (PostgreSQL runs
/// no extension code there): the call sees it when its wait ends. A client that goes away ends the
/// session at once, as a long poll's does. The idea is Oban Relay's and
/// DBOS's `get_result`, with the long poll's wake-up at commit.
///
/// Errors: 22004 for a NULL argument; 22023 for a bad queue or key, or a
/// `wait` not in [0, 1 hour]; 25000 for `wait` > 0 under REPEATABLE READ or
/// SERIALIZABLE (every look would see the transaction's first snapshot);
/// 42501 when queue grants are enforced and the session's role has no
/// `read` grant covering the queue; 57014 when cancelled while waiting.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_await(
    queue: Option<String>,
    key: Option<String>,
    wait: default!(Option<Interval>, "'0'"),
) -> TableIterator<
    'static,
    (
        name!(state, String),
        name!(result, Option<RawJsonb>),
        name!(last_error, Option<String>),
    ),
> {
    (|| {
        let queue = validate::queue(queue)?;
        let key = validate::key(validate::required("key", key)?)?;
        let wait = validate::wait(wait.map(Into::into))?;
        grants::check(Capability::Read, &queue)?;
        // SAFETY: reads the transaction's isolation level.
        if !wait.is_zero() && unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32
        {
            return Err(WorkfenceError::AwaitNeedsFreshSnapshots);
        }
        let wait = wait.min(Duration::from_secs(wait::LONG_POLL_MAX.get().max(1) as u64));
        await_outcome(&queue, &key, wait)
    })()
    .map(|row| TableIterator::new(row.map(|(_, state, result, error)| (state, result, error))))
    .or_report()
}

/// `work_await`'s loop: look, and while the item is not finished and the
/// deadline not passed, sleep until its settle's commit sets the latch.
fn await_outcome(queue: &str, key: &str, wait: Duration) -> Result<Option<Look>> {
    let deadline = Instant::now() + wait;
    let first = look(queue, key)?;
    let Some((id, ..)) = &first else {
        return Ok(None);
    };
    let id = *id;
    if wait.is_zero() || first.as_ref().is_some_and(|s| finished(&s.1)) {
        return Ok(first);
    }
    let registered = wait::register_awaiter(id);
    let outcome = (|| loop {
        // Reset before the look: a settle that commits after it sets the
        // latch again, and the sleep returns at once.
        wait::reset_latch();
        let seen = look(queue, key)?;
        match &seen {
            None => return Ok(None),
            Some(s) if finished(&s.1) || s.0 != id => return Ok(seen),
            _ => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(seen);
        }
        let until = if registered {
            deadline
        } else {
            deadline.min(now + wait::POLL_WITHOUT_LOCK)
        };
        if wait::sleep_awaiting(until)? {
            // Someone queued for a lock this statement's holds conflict
            // with (DDL): give way with the state as it is.
            return Ok(seen);
        }
    })();
    if registered {
        wait::unregister_awaiter(id);
    }
    outcome
}
