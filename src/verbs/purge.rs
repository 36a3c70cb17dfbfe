//! `work_purge`: delete finished items past a retention period.

use pgrx::datum::Interval;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, ItemState};
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
// At most `$3` rows (from 0.12.0, [`BATCH`]), the oldest first in
// items_finished_idx order: one statement's WAL and row locks stay bounded,
// and a bigger purge is that many transactions. The rows are what was
// deleted per queue and state (for the state counts,
// `crate::backend::counters`).
macro_rules! purge_sql {
    ($gone:literal, $unlink:literal) => {
        concat!(
            r#"
WITH doomed AS (
    SELECT i.id
      FROM workfence.items AS i
     WHERE i.state OPERATOR(pg_catalog.=) ANY ('{done,failed,cancelled}'::workfence.item_state[])
       AND i.finished_at OPERATOR(pg_catalog.<)
           (SELECT pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $1)
       AND ($2 IS NULL OR i.queue OPERATOR(pg_catalog.=) $2)
     ORDER BY i.finished_at
     LIMIT $3
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM workfence.items AS i
     WHERE i.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.id FROM doomed AS d))
    RETURNING i.queue, i.state"#,
            $gone,
            r#"
)"#,
            $unlink,
            r#"
SELECT g.queue, g.state::pg_catalog.text, pg_catalog.count(*)
  FROM gone AS g
 GROUP BY g.queue, g.state
"#
        )
    };
}

static PURGE: Statement<PurgeParams> = Statement::new(purge_sql!("", ""));

// PURGE from 0.12.0 (workflows, [`crate::verbs::workflow`]): the edges of
// the items deleted go with them, into them and out of them, each found by
// one of the edges' indexes (only for items that had any). An edge to a
// purged parent is resolved already (the parent was finished), so no
// waiting child loses a count.
static PURGE_LIFE: Statement<PurgeParams> = Statement::new(purge_sql!(
    ", i.id, i.has_children OR i.on_parent_failure IS NOT NULL AS linked",
    r#", unlinked AS (
    DELETE FROM workfence.item_edges AS e
     WHERE e.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
           SELECT x.ctid
             FROM gone AS g
            CROSS JOIN LATERAL (
                  SELECT c.ctid FROM workfence.item_edges AS c
                   WHERE c.child OPERATOR(pg_catalog.=) g.id
                  UNION ALL
                  SELECT p.ctid FROM workfence.item_edges AS p
                   WHERE p.parent OPERATOR(pg_catalog.=) g.id) AS x
            WHERE g.linked))
)"#
));

/// The most items one `work_purge` call (one statement, one transaction of
/// the maintenance worker) deletes: about 10 MB of WAL and 10,000 row locks
/// at most (measured: docs/benchmarks.md).
pub const BATCH: i32 = 10_000;

params! {
    /// `$1` older_than, `$2` queue (NULL: every queue), `$3` the most rows.
    struct PurgeParams<'a> {
        older_than: Option<Interval> = INTERVALOID,
        queue: Option<&'a str> = TEXTOID,
        most: i32 = INT4OID,
    }
}

/// Delete the items that finished more than `older_than` ago.
///
/// SQL: `workfence.work_purge(older_than interval DEFAULT '7 days', queue
/// text DEFAULT NULL) RETURNS bigint`: how many items were deleted, at most
/// [`BATCH`] (10,000) per call from 0.12.0, the oldest first: call it again
/// (each call its own transaction) until it returns fewer, so that no one
/// transaction writes the WAL of millions of deletes. An item
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
    let purged = Spi::connect_mut(|client| purge_finished(client, older_than, queue.as_deref()))?;
    if purged >= i64::from(BATCH) {
        // A caller that purged once a day until 0.11.0 and expects nothing
        // left sees this in its log: more may be due.
        notice!(
            "work_purge deleted {purged} items, its most per call: more may be due; call it again (each call in its own transaction) until it returns fewer"
        );
    }
    Ok(purged)
}

/// Delete at most [`BATCH`] of the finished items older than `older_than`
/// (in `queue`, or every queue for `None`), the oldest first, on `client`,
/// and return how many: the statement of `work_purge`, for arguments
/// already validated. The maintenance worker ([`crate::maintenance`])
/// calls it in a transaction of its own until it deletes fewer.
pub(crate) fn purge_finished(
    client: &mut SpiClient<'_>,
    older_than: Option<Interval>,
    queue: Option<&str>,
) -> Result<i64> {
    plans::run(
        client,
        if crate::verbs::life::schema_has_life() {
            &PURGE_LIFE
        } else {
            &PURGE
        },
        PurgeParams {
            older_than,
            queue,
            most: BATCH,
        },
        |rows| {
            let mut purged = 0;
            for row in rows {
                let (Some(queue), Some(state), Some(n)) = (
                    row.get::<String>(1)?,
                    row.get::<String>(2)?,
                    row.get::<i64>(3)?,
                ) else {
                    continue;
                };
                counters::moved(&queue, ItemState::parse(&state), None, n);
                purged += n;
            }
            Ok(purged)
        },
    )
}
