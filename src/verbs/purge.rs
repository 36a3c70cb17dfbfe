//! `work_purge`: delete finished items past a retention period.

use pgrx::datum::Interval;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::base::error::{OrReport, Result};
use crate::pg::plans::{self, params, Statement};

// One statement. The CTE locks the rows it will delete with FOR UPDATE SKIP
// LOCKED: a row another transaction has locked (a concurrent purge, an
// operator's SELECT ... FOR UPDATE) is skipped and left for the next purge,
// so a purge never waits on anyone. Claims and token calls never meet it:
// they touch only pending and claimed rows, and a row's committed state is
// what the CTE filters on (a worker's uncommitted finish is still 'claimed'
// to it). A `work_enqueue` of a key being purged waits for the purge to
// commit, then inserts a new item. Item ids and epochs come from sequences,
// so deleting a row never lets either be handed out again. The cut-off is an
// InitPlan (read once), so the scan walks items_finished_idx from its start
// to the cut-off, and the DELETE finds the doomed ids through the primary
// key (`= ANY (ARRAY(...))`; a join would let a generic plan hash-join a
// scan of the whole table): a purge reads what it deletes, not the table.
static PURGE: Statement<PurgeParams> = Statement::new(
    r#"
WITH doomed AS (
    SELECT i.id
      FROM workfence.items AS i
     WHERE i.state OPERATOR(pg_catalog.=) ANY ('{done,failed,cancelled}'::workfence.item_state[])
       AND i.finished_at OPERATOR(pg_catalog.<)
           (SELECT pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $1)
       AND ($2 IS NULL OR i.queue OPERATOR(pg_catalog.=) $2)
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM workfence.items AS i
     WHERE i.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.id FROM doomed AS d))
    RETURNING i.id
)
SELECT pg_catalog.count(*) FROM gone
"#,
);

params! {
    /// `$1` older_than, `$2` queue (NULL: every queue).
    struct PurgeParams<'a> {
        older_than: Option<Interval> = INTERVALOID,
        queue: Option<&'a str> = TEXTOID,
    }
}

/// Delete the items that finished more than `older_than` ago.
///
/// SQL: `workfence.work_purge(older_than interval DEFAULT '7 days', queue
/// text DEFAULT NULL) RETURNS bigint`: how many items were deleted. An item
/// qualifies when it is `done`, `failed` or `cancelled` and its
/// `finished_at` is before `clock_timestamp() - older_than` (server time);
/// `queue` NULL purges every queue. Pending and claimed items are never
/// touched. Rows another transaction holds locked are skipped (left for the
/// next purge), so a purge never waits.
///
/// A purged key is free again: `work_enqueue` of it inserts a new item, with
/// a new id, whose claims take epochs above every epoch handed out before.
///
/// Errors: 22004 for a NULL `older_than`; 22023 for a negative `older_than`,
/// one with a negative field or over 3650 days, or an empty, oversized or
/// control-character `queue`; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no purge grant covering the queue
/// (see `crate::access::grants`) (with `queue` NULL: no purge grant of `*`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_purge(
    older_than: default!(Option<Interval>, "'7 days'"),
    queue: default!(Option<String>, "NULL"),
) -> i64 {
    purge(older_than, queue).or_report()
}

fn purge(older_than: Option<Interval>, queue: Option<String>) -> Result<i64> {
    validate::older_than(older_than.map(Into::into))?;
    let queue = queue.map(|q| validate::queue(Some(q))).transpose()?;
    match &queue {
        Some(queue) => grants::check(Capability::Purge, queue)?,
        None => grants::check_every_queue(Capability::Purge)?,
    }
    Spi::connect_mut(|client| purge_finished(client, older_than, queue.as_deref()))
}

/// Delete the finished items older than `older_than` (in `queue`, or every
/// queue for `None`) on `client`, and return how many: the statement of
/// `work_purge`, for arguments already validated. The maintenance worker
/// ([`crate::maintenance`]) calls it too.
pub(crate) fn purge_finished(
    client: &mut SpiClient<'_>,
    older_than: Option<Interval>,
    queue: Option<&str>,
) -> Result<i64> {
    plans::run(
        client,
        &PURGE,
        PurgeParams { older_than, queue },
        // count(*) is never NULL.
        |rows| Ok(rows.first().get_one::<i64>()?.unwrap_or_default()),
    )
}
