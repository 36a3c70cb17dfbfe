//! What both claim paths share, below them: whether a queue has anything
//! to take (the ready probe, `LAPSED`) and the outcome a claim statement
//! returns, read into claimed rows and superseded tokens. `crate::verbs::claim`
//! (a queue without flow control, and every claim's entry) and
//! `crate::verbs::flow` (groups and limits) both build on it, and neither needs the
//! other for it.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::spi::SpiTupleTable;

use crate::base::error::{Result, WorkfenceError};
use crate::base::types::LostToken;
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::{due_probe, lapsed_probe};

/// One claimed item: (id, key, payload, epoch, attempt, lease_until,
/// trace). The trace (a W3C `traceparent` given to `work_enqueue`, from
/// 0.12.0) is `None` when the item has none, or when the claim statement
/// was one for a schema before 0.12.0 (see `plans::Claiming`).
pub(crate) type ClaimedRow = (
    i64,
    String,
    RawJsonb,
    i64,
    i32,
    TimestampWithTimeZone,
    Option<String>,
);

// Whether queue `$1` has a claimed item whose lease has lapsed by the
// server's clock `$2`, and whether it has a pending item due by then: one
// probe each of `items_lease_idx` and `items_ready_idx` (from 0.12.0), for
// the first entry in lease_until or run_at order (ORDER BY ... LIMIT 1,
// which a generic plan reads from the index; as `EXISTS (... run_at <=
// $2)`, a generic plan that estimated many due items chose a sequential
// scan, 22 ms beside 200k future items). The probe reads the item's row
// (its id): an index-only scan, as `min(run_at)` runs, never marks the
// entries of items claimed or finished since as dead, and a busy queue's
// index front filled with them (80 pages per probe after 60k claims, 0.6
// ms). When it has no lapsed lease, a claim runs
// CLAIM_DUE, which is CLAIM without its branches for lapsed leases; when it
// has neither, the claim ends here. Without the second probe, the claim
// statement read every future item of the queue in claim order to find
// none due (items_due_idx puts a priority's future items before the next
// priority's; 34-38x the cost beside 200k future items on PostgreSQL 15,
// issue 33). A lease that lapses, or an item that commits or falls due,
// between the probe and the claim is taken by a later claim, as it would
// be had it come a moment later: no claim promises to see a lease the
// instant it lapses (`$2` is the claim's own clock, and a lease is never
// shorter than the time between two statements of one call, in effect: a
// lapse is seen by the next claim, and a long poll wakes at `lease_until`
// or `run_at`).
static LAPSED: plans::Versioned<LapsedParams> = plans::Versioned {
    current: Statement::new(LAPSED_SQL),
    legacy: Statement::new(LAPSED_SQL),
};

const LAPSED_SQL: &str = concat!("SELECT ", lapsed_probe!(), ",\n       ", due_probe!());

/// Whether `queue` has (a lapsed lease, a due item) by the server's clock
/// `now` ([`LAPSED`]): a claim that finds neither has nothing to take.
pub(crate) fn ready(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    now: TimestampWithTimeZone,
) -> Result<(bool, bool)> {
    plans::run(client, LAPSED.get(), LapsedParams { queue, now }, |rows| {
        let row = rows.first();
        Ok((
            row.get::<bool>(1)?.unwrap_or(false),
            row.get::<bool>(2)?.unwrap_or(false),
        ))
    })
}

params! {
    /// `$1` queue, `$2` the server's clock.
    struct LapsedParams<'a> {
        queue: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// What one claim statement did: the rows it claimed, and the tokens it
/// superseded (lapsed leases claimed anew, and lapsed final attempts it
/// dead-lettered).
#[derive(Default)]
pub(crate) struct ClaimOutcome {
    /// The claimed rows, in claim order.
    pub(crate) claimed: Vec<ClaimedRow>,
    /// The superseded tokens.
    pub(crate) lost: Vec<LostToken>,
    /// Per claimed row, in the same order: how long it waited to be
    /// claimed since it fell due (microseconds from its `run_at` to the
    /// reading of the result), for the time-in-queue histogram; `None` for
    /// a lapsed lease claimed anew (not a wait) or an item due at
    /// `-infinity`.
    pub(crate) waited: Vec<Option<i64>>,
}

/// The result of CLAIM or CLAIM_KEY (see CLAIM for its columns); the
/// claimed rows in claim order (priority, run_at, id).
pub(crate) fn read_claim_result(queue: &str, rows: SpiTupleTable<'_>) -> Result<ClaimOutcome> {
    let mut claimed = Vec::with_capacity(rows.len());
    let mut lost = Vec::new();
    // SAFETY: reads the clock.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    // Every column of a claimed row is NOT NULL; a NULL here is a bug.
    let missing = |column| WorkfenceError::UnexpectedNull { column };
    // The forms of 0.12.0's schema end with the item's trace (found by
    // name: the statements' other columns differ), the others have none.
    let trace_at = rows.column_ordinal("trace").ok();
    for row in rows {
        let id = row.get::<i64>(1)?.ok_or_else(|| missing("id"))?;
        let key = row.get::<String>(2)?.ok_or_else(|| missing("key"))?;
        let attempts = row.get::<i32>(5)?.ok_or_else(|| missing("attempts"))?;
        let dead = row.get::<bool>(10)?.unwrap_or(false);
        let superseded = row.get::<i64>(8)?;
        if let Some(epoch) = superseded {
            lost.push(LostToken {
                id,
                queue: queue.to_owned(),
                key: key.clone(),
                owner: row.get::<String>(7)?.unwrap_or_default(),
                epoch,
                // A claim counts one more attempt; a dead letter none.
                attempt: if dead { attempts } else { attempts - 1 },
                lapsed_at: row
                    .get::<TimestampWithTimeZone>(9)?
                    .ok_or_else(|| missing("lease_until"))?,
                dead_lettered: dead,
            });
        }
        if dead {
            continue;
        }
        let run_at = pg_sys::TimestampTz::from(
            row.get::<TimestampWithTimeZone>(12)?
                .ok_or_else(|| missing("run_at"))?,
        );
        let order = (
            row.get::<i32>(11)?.ok_or_else(|| missing("priority"))?,
            run_at,
            id,
        );
        let waited =
            (superseded.is_none() && run_at != i64::MIN).then(|| now.saturating_sub(run_at));
        claimed.push((
            order,
            waited,
            (
                id,
                key,
                row.get::<RawJsonb>(3)?.ok_or_else(|| missing("payload"))?,
                row.get::<i64>(4)?.ok_or_else(|| missing("epoch"))?,
                attempts,
                row.get::<TimestampWithTimeZone>(6)?
                    .ok_or_else(|| missing("lease_until"))?,
                match trace_at {
                    Some(at) => row.get::<String>(at)?,
                    None => None,
                },
            ),
        ));
    }
    claimed.sort_unstable_by_key(|(order, _, _)| *order);
    let waited = claimed.iter().map(|(_, waited, _)| *waited).collect();
    Ok(ClaimOutcome {
        claimed: claimed.into_iter().map(|(_, _, row)| row).collect(),
        lost,
        waited,
    })
}
