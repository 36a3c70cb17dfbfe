//! `work_cancel`: withdraw an item that is not finished, from outside its lease.

use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::base::error::{OrReport, Result};
use crate::pg::plans::{self, Statement};
use crate::store::sql::QueueKey;

// One statement: the row lock the UPDATE takes orders it against a concurrent
// finish, fail or claim. If one of those commits first, the UPDATE re-checks
// the new row version (READ COMMITTED) and cancels only what is still
// unfinished; a claim that comes after skips the locked row (SKIP LOCKED) and
// then no longer sees a claimable item. Owner and epoch stay, so the holder's
// `work_assert` can say why its token is dead. The row is locked in a
// subquery first, which reads the state the item was in (the newest
// version, rechecked after a concurrent change as the UPDATE itself would
// be): the second column, for the state counts
// (`crate::backend::counters`). From 0.12.0 a waiting item (workflows) is
// cancelled too; the state is compared as text, which a schema before
// 0.12.0, whose enum has no `waiting`, reads as well.
static CANCEL: Statement<QueueKey> = Statement::new(
    r#"
UPDATE workfence.items AS i
   SET state = 'cancelled'::workfence.item_state,
       lease_until = NULL,
       finished_at = pg_catalog.clock_timestamp()
  FROM (SELECT o.id, o.state
          FROM workfence.items AS o
         WHERE o.queue OPERATOR(pg_catalog.=) $1
           AND o.key OPERATOR(pg_catalog.=) $2
           AND o.state::pg_catalog.text OPERATOR(pg_catalog.=) ANY ('{pending,claimed,waiting}'::pg_catalog.text[])
           FOR UPDATE) AS was
 WHERE i.id OPERATOR(pg_catalog.=) was.id
RETURNING i.id, was.state::pg_catalog.text
"#,
);

/// Cancel the item `key` of `queue` unless it is already finished.
///
/// SQL: `workfence.work_cancel(queue text, key text) RETURNS boolean`. True
/// when the item was pending, claimed or (from 0.12.0) waiting and is now `cancelled` (with
/// `finished_at` = `clock_timestamp()`): it is not claimed again (unless an
/// operator puts it back with `work_retry`, from 0.6.0, under a new epoch), and the
/// token of a worker holding it is dead from then on (renew, finish, release
/// and fail return false; `work_assert` raises 55000 with DETAIL "The item
/// was cancelled."). False when no such item exists or it is already done,
/// failed or cancelled; nothing changes then. A cancelled item keeps its key:
/// `work_enqueue` of the same (queue, key) returns it with `inserted = false`.
///
/// A worker in the middle of the job is not interrupted; it learns of the
/// cancel at its next renew or assert (so a job that writes its effects under
/// `work_assert` never commits them after a cancel).
///
/// From 0.12.0, the item's waiting children (workflows) are cancelled with
/// it, or, with `on_parent_failure => 'run'`, count it as settled
/// ([`crate::verbs::workflow::settled`]).
///
/// From 0.12.0, for an item in a group it takes the group's lock (waiting
/// for a claim of the group in flight) and makes the group's next item its
/// head ([`crate::verbs::flow::regroup`]).
///
/// Errors: 22004 for a NULL queue or key; 22023 for an empty, oversized or
/// control-character queue or key; 25000 (from 0.12.0) for an item in a
/// group under REPEATABLE READ or SERIALIZABLE; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no operate grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_cancel(queue: Option<String>, key: Option<String>) -> bool {
    cancel(queue, key).or_report()
}

fn cancel(queue: Option<String>, key: Option<String>) -> Result<bool> {
    let queue = validate::queue(queue)?;
    let key = validate::key(validate::required("key", key)?)?;
    grants::check(Capability::Operate, &queue)?;
    let cancelled = Spi::connect_mut(|client| {
        plans::run(
            client,
            &CANCEL,
            QueueKey {
                queue: &queue,
                key: &key,
            },
            |rows| {
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(row
                    .get::<i64>(1)?
                    .map(|id| (id, row.get::<String>(2).ok().flatten())))
            },
        )
    })?;
    if let Some((id, was)) = &cancelled {
        let id = *id;
        counters::count(&queue, Event::Cancelled, 1);
        counters::moved(
            &queue,
            was.as_deref().and_then(ItemState::parse),
            Some(ItemState::Cancelled),
            1,
        );
        // A cancelled pending item may have been its group's head.
        crate::verbs::flow::regroup(&queue, id, true)?;
        // A cancelled claimed item frees its group or its slot.
        crate::verbs::flow::freed(&queue)?;
        // Its `work_await` callers learn of it at commit.
        crate::backend::xact::awaited_at_commit(id);
        // Its waiting children learn of it now (workflows).
        if crate::verbs::life::schema_has_life() {
            Spi::connect_mut(|client| {
                crate::verbs::workflow::settled(
                    client,
                    vec![id],
                    crate::verbs::workflow::Outcome::Cancelled,
                )
            })?;
        }
    }
    Ok(cancelled.is_some())
}
