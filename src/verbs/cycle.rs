//! `work_finish_and_claim` and `work_fail_and_claim`: a worker's cycle in
//! one call.
//!
//! A worker that claims one item at a time sends two statements per item,
//! the finish of the last one and the claim of the next, each its own
//! transaction and commit. These functions do both in one statement and one
//! transaction: the finish (or the failure) of the previous item exactly as
//! `work_finish` (`work_fail`) judges it, then the claim exactly as
//! `work_claim` makes it. One round trip, one function call and one commit
//! (one WAL flush under `synchronous_commit = on`) per item instead of two.
//! The idea is the one SQS leaves to its clients and Oban and River run
//! inside their producers (ack and fetch together); here it is one SQL call,
//! so every language gets it.
//!
//! Both halves are one transaction: the finish commits only with the claim,
//! and an error in either (a bad argument, a revoked grant, a cancelled
//! statement) rolls back both, so the previous item is still held under its
//! token and the call can be repeated. A refused token is not an error: the
//! claim still runs and the result says the previous item was not settled.
//! No long poll (`wait`): a finish must not sit uncommitted while the call
//! waits; when the call claims nothing, the worker long-polls with
//! `work_claim(..., wait)`.

use pgrx::datum::Interval;
use pgrx::prelude::*;

use crate::access::validate;
use crate::base::error::{OrReport, Result};
use crate::pg::jsonb::RawJsonb;
use crate::verbs::claim;
use crate::verbs::generation;
use crate::verbs::lease;

/// One row of a fused call: the claimed item's columns, as `work_claim`
/// returns them (all NULL in the one row of a call that claimed nothing),
/// then `settled`: whether the previous item was finished (failed) under its
/// token, the value `work_finish` (`work_fail`) would have returned.
type CycleRow = (
    Option<i64>,
    Option<String>,
    Option<RawJsonb>,
    Option<i64>,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    bool,
);

/// The claim half's arguments: queue, owner, lease, max_items.
type ClaimArgs = (
    Option<String>,
    Option<String>,
    Option<Interval>,
    Option<i32>,
);

/// A row of a fused call of 0.12.0: a [`CycleRow`], then the claimed
/// item's checkpoint (`progress`, see [`crate::verbs::life::with_progress`])
/// and its trace (the `traceparent` it was enqueued with).
type CycleRowWithProgress = (
    Option<i64>,
    Option<String>,
    Option<RawJsonb>,
    Option<i64>,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    bool,
    Option<RawJsonb>,
    Option<String>,
);

/// A fused call: on a primary only, `settle` the previous item's token
/// (`last_id`, `last_epoch`, checked under the fused call's own argument
/// names: a function returning `id` and `epoch` columns cannot take
/// arguments of those names), then claim without a wait, in the call's one
/// transaction; the rows of [`rows`], with each claimed item's checkpoint
/// when `progress` (the functions of 0.12.0, whose schema has it). Errors
/// are reported with their SQLSTATE (see the functions).
fn cycle(
    function: &'static str,
    (queue, owner, lease, max_items): ClaimArgs,
    (last_id, last_epoch): (Option<i64>, Option<i64>),
    settle: impl FnOnce(Option<i64>, Option<String>, Option<i64>) -> Result<bool>,
    progress: bool,
) -> Result<Vec<CycleRowWithProgress>> {
    generation::refuse_on_standby(function)?;
    let id = validate::required("last_id", last_id)?;
    let epoch = validate::required("last_epoch", last_epoch)?;
    let settled = settle(Some(id), owner.clone(), Some(epoch))?;
    let claimed = claim::claim(queue, owner, lease, max_items, std::time::Duration::ZERO)?;
    let claimed = if progress {
        crate::verbs::life::with_progress(claimed)?
    } else {
        claimed.into_iter().map(|row| (row, None)).collect()
    };
    Ok(rows(settled, claimed))
}

/// The rows of a fused call: one per claimed item, each carrying `settled`
/// and its checkpoint; one row of NULLs and `settled` when nothing was
/// claimed, so that the caller always learns how its previous item stands.
fn rows(
    settled: bool,
    claimed: Vec<crate::verbs::life::ClaimedWithProgress>,
) -> Vec<CycleRowWithProgress> {
    if claimed.is_empty() {
        return vec![(None, None, None, None, None, None, settled, None, None)];
    }
    claimed
        .into_iter()
        .map(
            |((id, key, payload, epoch, attempt, lease_until, trace), progress)| {
                (
                    Some(id),
                    Some(key),
                    Some(payload),
                    Some(epoch),
                    Some(attempt),
                    Some(lease_until),
                    settled,
                    progress,
                    trace,
                )
            },
        )
        .collect()
}

/// The rows of a fused call of 0.2.0 to 0.11.0: without `progress`.
fn without_progress(rows: Vec<CycleRowWithProgress>) -> Vec<CycleRow> {
    rows.into_iter()
        .map(
            |(id, key, payload, epoch, attempt, lease_until, settled, _, _)| {
                (id, key, payload, epoch, attempt, lease_until, settled)
            },
        )
        .collect()
}

/// Finish the previous item and claim the next, in one statement and one
/// transaction.
///
/// SQL: `workfence.work_finish_and_claim(queue text, owner text, lease
/// interval, last_id bigint, last_epoch bigint, result jsonb DEFAULT NULL, max_items
/// int DEFAULT 1) RETURNS TABLE (id bigint, key text, payload jsonb, epoch
/// bigint, attempt int, lease_until timestamptz, settled boolean)`.
///
/// First `work_finish(last_id, owner, last_epoch, result)`, then `work_claim(queue,
/// owner, lease, max_items)` without a wait, both judged exactly as those
/// functions judge them (fencing, the dead letter, the pause, queue grants:
/// the finish under the claim grant of the item's queue, the claim under the
/// claim grant of `queue`). One row per claimed item, in claim order, each
/// with `settled` = what `work_finish` would have returned (true: finished
/// under this token, now or by an earlier call; false: refused, and nothing
/// changed for that item); when nothing was claimed, exactly one row whose
/// item columns are NULL. The item finished and the items claimed commit
/// together: if the call raises, neither happened.
///
/// Errors: 22004 for a NULL queue, owner, lease, last_id or last_epoch; 22023 for a
/// bad queue or owner, a lease not in (0, 7 days], `max_items` outside
/// 1..1000; 25006 on a hot standby; 42501 when queue grants are enforced and
/// the session's role has no claim grant covering `queue`.
///
/// From 0.12.0 each row ends with `progress`, the claimed item's
/// checkpoint, as in `work_claim` (NULL in the row of a call that claimed
/// nothing).
#[pg_extern(
    name = "work_finish_and_claim",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn work_finish_and_claim_progress(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    last_id: Option<i64>,
    last_epoch: Option<i64>,
    result: default!(Option<RawJsonb>, "NULL"),
    max_items: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(id, Option<i64>),
        name!(key, Option<String>),
        name!(payload, Option<RawJsonb>),
        name!(epoch, Option<i64>),
        name!(attempt, Option<i32>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(settled, bool),
        name!(progress, Option<RawJsonb>),
        name!(trace, Option<String>),
    ),
> {
    cycle(
        "work_finish_and_claim",
        (queue, owner, lease, max_items),
        (last_id, last_epoch),
        |id, owner, epoch| lease::finish(id, owner, epoch, result),
        true,
    )
    .map(TableIterator::new)
    .or_report()
}

/// `work_finish_and_claim` of versions 0.9.0 to 0.11.0 (rows without
/// `progress`), kept as the C symbol `work_finish_and_claim_wrapper` that
/// their install scripts bind; renamed `work_finish_and_claim_retired_0_11_0`
/// by the update. Not part of this version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn work_finish_and_claim(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    last_id: Option<i64>,
    last_epoch: Option<i64>,
    result: default!(Option<RawJsonb>, "NULL"),
    max_items: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(id, Option<i64>),
        name!(key, Option<String>),
        name!(payload, Option<RawJsonb>),
        name!(epoch, Option<i64>),
        name!(attempt, Option<i32>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(settled, bool),
    ),
> {
    cycle(
        "work_finish_and_claim",
        (queue, owner, lease, max_items),
        (last_id, last_epoch),
        |id, owner, epoch| lease::finish(id, owner, epoch, result),
        false,
    )
    .map(without_progress)
    .map(TableIterator::new)
    .or_report()
}

/// Record the previous item's failure and claim the next, in one statement
/// and one transaction.
///
/// SQL: `workfence.work_fail_and_claim(queue text, owner text, lease
/// interval, last_id bigint, last_epoch bigint, error text, retry_in interval DEFAULT
/// NULL, max_items int DEFAULT 1) RETURNS TABLE (id bigint, key text,
/// payload jsonb, epoch bigint, attempt int, lease_until timestamptz,
/// settled boolean)`.
///
/// First `work_fail(last_id, owner, last_epoch, error, retry_in)` (the error kept in
/// `last_error` and `errors`, cut at 2048 bytes; the item pending again
/// after `retry_in` or the backoff, or `failed` once its attempts are used
/// up), then `work_claim(queue, owner, lease, max_items)` without a wait,
/// as [`work_finish_and_claim`] does; `settled` is what `work_fail` would
/// have returned. The failed item is not claimed again by the same call
/// unless it is due at once (`retry_in` of 0) and first in claim order.
///
/// Errors: 22004 for a NULL queue, owner, lease, last_id, last_epoch or error; 22023
/// for a bad queue or owner, a lease not in (0, 7 days], a negative
/// `retry_in` or one over 365 days, `max_items` outside 1..1000; 25006 on a
/// hot standby; 42501 when queue grants are enforced and the session's role
/// has no claim grant covering `queue`.
///
/// From 0.12.0 each row ends with `progress`, as `work_finish_and_claim`'s.
#[pg_extern(
    name = "work_fail_and_claim",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn work_fail_and_claim_progress(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    last_id: Option<i64>,
    last_epoch: Option<i64>,
    error: Option<String>,
    retry_in: default!(Option<Interval>, "NULL"),
    max_items: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(id, Option<i64>),
        name!(key, Option<String>),
        name!(payload, Option<RawJsonb>),
        name!(epoch, Option<i64>),
        name!(attempt, Option<i32>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(settled, bool),
        name!(progress, Option<RawJsonb>),
        name!(trace, Option<String>),
    ),
> {
    cycle(
        "work_fail_and_claim",
        (queue, owner, lease, max_items),
        (last_id, last_epoch),
        |id, owner, epoch| lease::fail(id, owner, epoch, error, retry_in),
        true,
    )
    .map(TableIterator::new)
    .or_report()
}

/// `work_fail_and_claim` of versions 0.9.0 to 0.11.0 (rows without
/// `progress`), kept as the C symbol `work_fail_and_claim_wrapper`; renamed
/// `work_fail_and_claim_retired_0_11_0` by the update. Not part of this
/// version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn work_fail_and_claim(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    last_id: Option<i64>,
    last_epoch: Option<i64>,
    error: Option<String>,
    retry_in: default!(Option<Interval>, "NULL"),
    max_items: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(id, Option<i64>),
        name!(key, Option<String>),
        name!(payload, Option<RawJsonb>),
        name!(epoch, Option<i64>),
        name!(attempt, Option<i32>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(settled, bool),
    ),
> {
    cycle(
        "work_fail_and_claim",
        (queue, owner, lease, max_items),
        (last_id, last_epoch),
        |id, owner, epoch| lease::fail(id, owner, epoch, error, retry_in),
        false,
    )
    .map(without_progress)
    .map(TableIterator::new)
    .or_report()
}
