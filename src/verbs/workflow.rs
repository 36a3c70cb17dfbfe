//! Workflows (from 0.12.0, issue 37): items that wait for other items.
//!
//! `work_enqueue(..., after => ARRAY[parent ids], on_parent_failure)` makes
//! the new item a *child* of each parent: an edge `(parent, child)` in
//! `workfence.item_edges`. Edges are made only when the child is inserted,
//! from items that exist already, so they never form a cycle. A child
//! whose parents are not all `done` waits in state `waiting`, counting its
//! unresolved edges in `waiting_on`.
//!
//! **Only a current lease advances a workflow** (docs/contract.md, promise
//! 12). A child leaves `waiting` in the transaction of the statement that
//! settled its last parent, and only there: the parent's finish, final
//! failure or dead letter is the token-guarded `UPDATE` of
//! [`crate::verbs::lease`] (or the claim's dead letter), so a stale token
//! changes no row and [`settled`] is never called for it. Each edge is
//! resolved once (`resolved`), so a parent that runs again (an
//! `on_conflict` re-run) and finishes again releases nothing; the child's
//! count is decremented under its row lock, so two parents finishing at
//! once count twice, never once (PostgreSQL's EvalPlanQual re-reads the
//! newest row version for the second).
//!
//! A parent's enqueue-side lock: `work_enqueue` with `after` updates each
//! parent's row (`has_children = true`) before it inserts the child, and
//! reads the parent's state from that newest version. A finish of the
//! parent either committed before (the child counts the parent as done)
//! or waits for the enqueue's commit and then sees `has_children` and the
//! committed edges. `has_children` also spares every other item's finish
//! the edges' look-up: a finish that returns false runs no statement here.
//!
//! The idea of a job that waits for others is River Pro's workflows, Oban
//! Pro's Workflow, pg-boss's `flow()` and pgflow's DAG; the fence on the
//! advance is this extension's.

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::{wait, xact};
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::base::types::Token;
use crate::pg::plans::{self, params, Statement};

/// The most parents one `work_enqueue` names (`after`): a fan-in wider
/// than this is made of intermediate joins.
pub const MAX_PARENTS: usize = 1000;

/// The most rows `work_workflow` returns, and the most levels it walks
/// each way.
pub const WORKFLOW_MAX_ROWS: i32 = 1000;

/// What a parent ending `failed` or `cancelled` does to a waiting child
/// (`work_enqueue`'s `on_parent_failure`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnParentFailure {
    /// The child is cancelled, and so are its waiting descendants whose
    /// own policy is `cancel` (the default).
    Cancel,
    /// The parent counts as settled: the child runs once every parent has
    /// settled, and reads the failure in `work_parent_results`.
    Run,
}

impl OnParentFailure {
    /// Parse `on_parent_failure`. Errors: 22004 NULL, 22023 another value.
    pub fn parse(value: Option<String>) -> Result<OnParentFailure> {
        match validate::required("on_parent_failure", value)?.as_str() {
            "cancel" => Ok(OnParentFailure::Cancel),
            "run" => Ok(OnParentFailure::Run),
            other => Err(WorkfenceError::invalid(
                "on_parent_failure",
                "must be cancel or run",
                format!("on_parent_failure is {other:?}."),
                "cancel (the default) cancels the waiting item when a parent ends failed or \
                 cancelled; run lets it run once every parent has ended, whatever the outcome.",
            )),
        }
    }

    /// The SQL label (`items.on_parent_failure`).
    pub fn as_str(self) -> &'static str {
        match self {
            OnParentFailure::Cancel => "cancel",
            OnParentFailure::Run => "run",
        }
    }
}

/// `work_enqueue`'s `after`, checked: the distinct parent ids in the order
/// given, or `None` for NULL or an empty array (no parents).
///
/// Errors: 22004 for a NULL element; 22023 for more than [`MAX_PARENTS`]
/// distinct ids.
pub fn parent_ids(after: Option<Vec<Option<i64>>>) -> Result<Option<Vec<i64>>> {
    let Some(after) = after else {
        return Ok(None);
    };
    let mut ids: Vec<i64> = Vec::with_capacity(after.len());
    for (i, id) in after.into_iter().enumerate() {
        let id = id.ok_or(WorkfenceError::NullElement {
            arg: "after",
            element: i + 1,
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
        if ids.len() > MAX_PARENTS {
            return Err(WorkfenceError::invalid(
                "after",
                "must name at most 1000 parents",
                format!("after names more than {MAX_PARENTS} distinct items."),
                "Join wider fan-ins in steps: items that each wait for up to 1000 parents, and \
                 one that waits for them.",
            ));
        }
    }
    Ok((!ids.is_empty()).then_some(ids))
}

// Lock each parent `$1` the role may read (`$2`: the `LIKE` patterns of
// its read scope, NULL: every queue) and mark it as having children: its
// newest version's state. The write is the lock: a finish of the parent
// that commits first is read here (EvalPlanQual), one that comes after
// waits for this transaction and then sees the edges.
static LOCK_PARENTS: Statement<LockParentsParams> = Statement::new(
    r#"
UPDATE workfence.items AS p
   SET has_children = true
 WHERE p.id OPERATOR(pg_catalog.=) ANY ($1)
   AND ($2 IS NULL OR p.queue OPERATOR(pg_catalog.~~) ANY ($2))
RETURNING p.id, p.state::pg_catalog.text
"#,
);

params! {
    /// `$1` parent ids, `$2` the read scope's patterns (NULL: every queue).
    struct LockParentsParams {
        ids: Vec<i64> = INT8ARRAYOID,
        scope: Option<Vec<String>> = TEXTARRAYOID,
    }
}

/// The parents of a child about to be inserted, locked by [`lock_parents`].
pub struct Parents {
    /// Their ids, distinct, in the order `after` gave them.
    pub ids: Vec<i64>,
    /// Per id: whether the parent has settled (done, failed or cancelled).
    settled: Vec<bool>,
    /// Per id: whether the parent ended failed or cancelled.
    ended_badly: Vec<bool>,
    /// The first parent (in `ids`' order) that ended failed or cancelled,
    /// with that state.
    failed: Option<(i64, String)>,
    /// What a parent's failure does to the child.
    pub on_failure: OnParentFailure,
}

/// How a child enters its queue, decided from its locked parents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Every parent is done (or, with `run`, settled): a pending item.
    Pending,
    /// Waiting for this many parents.
    Waiting(i32),
    /// A parent ended failed or cancelled and the policy is `cancel`: the
    /// child is inserted cancelled, with this `last_error`, still counting
    /// its parents that have not settled (its edges from them stay
    /// unresolved, so that a retry finds it waiting for them).
    Cancelled(String, i32),
}

impl Parents {
    /// How the child enters its queue.
    pub fn entry(&self) -> Entry {
        // At most MAX_PARENTS.
        let open = i32::try_from(self.settled.iter().filter(|settled| !**settled).count())
            .unwrap_or(i32::MAX);
        if let (Some((id, state)), OnParentFailure::Cancel) = (&self.failed, self.on_failure) {
            return Entry::Cancelled(format!("parent {id} ended {state}"), open);
        }
        if open == 0 {
            Entry::Pending
        } else {
            Entry::Waiting(open)
        }
    }
}

/// Lock the parents `ids` (see [`LOCK_PARENTS`]) and read how they stand.
///
/// Errors: 23503 for an id of no item, or of an item in a queue the role
/// may not read (the first such id in `ids`' order).
pub fn lock_parents(
    client: &mut SpiClient<'_>,
    ids: Vec<i64>,
    on_failure: OnParentFailure,
) -> Result<Parents> {
    let scope = grants::scope(Capability::Read)?;
    let found = plans::run(
        client,
        &LOCK_PARENTS,
        LockParentsParams {
            ids: ids.clone(),
            scope: scope.like(),
        },
        |rows| {
            let mut found = Vec::with_capacity(rows.len());
            for row in rows {
                if let (Some(id), Some(state)) = (row.get::<i64>(1)?, row.get::<String>(2)?) {
                    found.push((id, state));
                }
            }
            Ok(found)
        },
    )?;
    let mut settled = Vec::with_capacity(ids.len());
    let mut ended_bad = Vec::with_capacity(ids.len());
    let mut failed = None;
    for id in &ids {
        let Some((_, state)) = found.iter().find(|(found, _)| found == id) else {
            return Err(WorkfenceError::UnknownParent { id: *id });
        };
        let ended_badly = state == "failed" || state == "cancelled";
        if ended_badly && failed.is_none() {
            failed = Some((*id, state.clone()));
        }
        settled.push(ended_badly || state == "done");
        ended_bad.push(ended_badly);
    }
    Ok(Parents {
        ids,
        settled,
        ended_badly: ended_bad,
        failed,
        on_failure,
    })
}

// The edges of child `$1` from the parents `$2`: resolved when the parent
// had settled (`$3`), cancelled when its failure cancelled the child (`$4`).
static LINK: Statement<LinkParams> = Statement::new(
    r#"
INSERT INTO workfence.item_edges (parent, child, resolved, cancelled)
SELECT e.parent, $1, e.resolved, e.cancelled
  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4))
       AS e(parent, resolved, cancelled)
"#,
);

params! {
    /// `$1` child, `$2` parents, `$3` each settled, `$4` each cancelling.
    struct LinkParams {
        child: i64 = INT8OID,
        parents: Vec<i64> = INT8ARRAYOID,
        resolved: Vec<bool> = BOOLARRAYOID,
        cancelled: Vec<bool> = BOOLARRAYOID,
    }
}

/// Write the edges from `parents` to the child `child` just inserted.
pub fn link(client: &mut SpiClient<'_>, child: i64, parents: &Parents) -> Result<()> {
    // Every parent that ended failed or cancelled forbids a `cancel`
    // child, as SETTLE marks the edges of parents that fail after it was
    // cancelled: a retry of one of them alone does not bring it back.
    let cancelling =
        |n: usize| parents.on_failure == OnParentFailure::Cancel && parents.ended_badly[n];
    plans::run(
        client,
        &LINK,
        LinkParams {
            child,
            parents: parents.ids.clone(),
            resolved: parents.settled.clone(),
            cancelled: (0..parents.ids.len()).map(cancelling).collect(),
        },
        |_| Ok(()),
    )
}

// One level of settling: the parents `$1` have settled, as done (`$2`
// false) or failed or cancelled (`$2` true, `$3` the word for the last
// error: failed or cancelled). Each of their unresolved edges is resolved,
// once; each child's `waiting_on` drops by the edges resolved, under its
// row lock (taken in the LATERAL probe, which reads the newest version:
// its state before this statement, `was`). A waiting child whose count
// reaches 0 becomes pending; with `$2`, a waiting child whose policy is
// cancel is cancelled instead. An edge is marked `cancelled` when its
// parent's failure forbids the child: the child's policy is cancel and it
// is waiting, or was cancelled by another parent's failure (so that a
// retry of one of two failed parents does not bring it back). Columns: id,
// queue, state before, state after, has_children, due.
static SETTLE: Statement<SettleParams> = Statement::new(
    r#"
WITH e AS (
    UPDATE workfence.item_edges AS e
       SET resolved = true,
           cancelled = $2 AND EXISTS (
               SELECT FROM workfence.items AS c
                WHERE c.id OPERATOR(pg_catalog.=) e.child
                  AND c.on_parent_failure OPERATOR(pg_catalog.=) 'cancel'
                  AND (c.state OPERATOR(pg_catalog.=) 'waiting'::workfence.item_state
                       OR EXISTS (SELECT FROM workfence.item_edges AS x
                                   WHERE x.child OPERATOR(pg_catalog.=) e.child AND x.cancelled)))
     WHERE e.parent OPERATOR(pg_catalog.=) ANY ($1)
       AND NOT e.resolved
    RETURNING e.parent, e.child, e.cancelled
), n AS (
    SELECT e.child, pg_catalog.count(*)::pg_catalog.int4 AS n,
           pg_catalog.min(e.parent) FILTER (WHERE e.cancelled) AS cancelled_by
      FROM e
     GROUP BY e.child
)
UPDATE workfence.items AS c
   SET waiting_on = c.waiting_on OPERATOR(pg_catalog.-) n.n,
       state = CASE WHEN c.state OPERATOR(pg_catalog.<>) 'waiting'::workfence.item_state THEN c.state
                    WHEN n.cancelled_by IS NOT NULL THEN 'cancelled'::workfence.item_state
                    WHEN c.waiting_on OPERATOR(pg_catalog.-) n.n OPERATOR(pg_catalog.<=) 0
                    THEN 'pending'::workfence.item_state
                    ELSE c.state END,
       finished_at = CASE WHEN c.state OPERATOR(pg_catalog.=) 'waiting'::workfence.item_state
                               AND n.cancelled_by IS NOT NULL
                          THEN pg_catalog.clock_timestamp() ELSE c.finished_at END,
       last_error = CASE WHEN c.state OPERATOR(pg_catalog.=) 'waiting'::workfence.item_state
                              AND n.cancelled_by IS NOT NULL
                         THEN 'parent ' OPERATOR(pg_catalog.||) n.cancelled_by::pg_catalog.text
                              OPERATOR(pg_catalog.||) ' ended ' OPERATOR(pg_catalog.||) $3
                         ELSE c.last_error END
  FROM n
 CROSS JOIN LATERAL (
       SELECT o.id, o.state AS was
         FROM workfence.items AS o
        WHERE o.id OPERATOR(pg_catalog.=) n.child
          FOR NO KEY UPDATE) AS w
 WHERE c.id OPERATOR(pg_catalog.=) w.id
RETURNING c.id, c.queue, w.was::pg_catalog.text, c.state::pg_catalog.text, c.has_children,
          c.run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
"#,
);

params! {
    /// `$1` parents, `$2` they ended failed or cancelled, `$3` how (for
    /// the cancelled children's last error).
    struct SettleParams<'a> {
        parents: Vec<i64> = INT8ARRAYOID,
        failed: bool = BOOLOID,
        how: &'a str = TEXTOID,
    }
}

// SETTLE for the commonest call: one parent `$1`, done (an accepted
// `work_finish`). Each of its edges is unique (the primary key), so each
// child is updated once, by one, with no aggregate and no separate lock:
// half SETTLE's time (0.06 ms against 0.12 ms, EXPLAIN ANALYZE with
// generic plans). A child whose count reaches 0 while waiting becomes
// pending; it was waiting (a child with an unresolved edge and state
// pending cannot be: its count would be above 0, and a retry or a replace
// makes such an item waiting). Columns: id, queue, state after.
static SETTLE_DONE: Statement<SettleDoneParams> = Statement::new(
    r#"
WITH e AS (
    UPDATE workfence.item_edges AS e
       SET resolved = true
     WHERE e.parent OPERATOR(pg_catalog.=) $1
       AND NOT e.resolved
    RETURNING e.child
)
UPDATE workfence.items AS c
   SET waiting_on = c.waiting_on OPERATOR(pg_catalog.-) 1,
       state = CASE WHEN c.state OPERATOR(pg_catalog.=) 'waiting'::workfence.item_state
                         AND c.waiting_on OPERATOR(pg_catalog.<=) 1
                    THEN 'pending'::workfence.item_state ELSE c.state END
  FROM e
 WHERE c.id OPERATOR(pg_catalog.=) e.child
RETURNING c.id, c.queue, c.state::pg_catalog.text
"#,
);

params! {
    /// `$1` the parent, done.
    struct SettleDoneParams {
        parent: i64 = INT8OID,
    }
}

/// How parents settled, for [`settled`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done, under an accepted finish.
    Done,
    /// Failed for good (a final failure or a dead letter).
    Failed,
    /// Cancelled (`work_cancel`, or by a parent's failure).
    Cancelled,
}

/// One row of [`SETTLE`] or [`REOPEN`]: a child whose row the statement
/// changed.
struct Changed {
    id: i64,
    queue: String,
    was: Option<ItemState>,
    now: Option<ItemState>,
    has_children: bool,
}

fn changed_rows(rows: pgrx::spi::SpiTupleTable<'_>) -> Result<Vec<Changed>> {
    let mut changed = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(id), Some(queue)) = (row.get::<i64>(1)?, row.get::<String>(2)?) else {
            continue;
        };
        let state = |n: usize| -> Result<Option<ItemState>> {
            Ok(row.get::<String>(n)?.as_deref().and_then(ItemState::parse))
        };
        changed.push(Changed {
            id,
            queue,
            was: state(3)?,
            now: state(4)?,
            has_children: row.get::<bool>(5)?.unwrap_or(false),
        });
    }
    Ok(changed)
}

/// The parents `parents` have settled as `outcome`, in this transaction,
/// by a statement that changed their rows (an accepted finish, a final
/// failure, a dead letter, a cancel): resolve their edges, release the
/// children whose last parent this was (pending, long polls of their
/// queues woken at commit), and cancel the waiting children a failure
/// cancels, level by level down the graph (edges never form a cycle). A
/// call for parents without unresolved edges changes nothing.
pub fn settled(client: &mut SpiClient<'_>, parents: Vec<i64>, outcome: Outcome) -> Result<()> {
    if let (Outcome::Done, [parent]) = (outcome, parents.as_slice()) {
        let released = plans::run(
            client,
            &SETTLE_DONE,
            SettleDoneParams { parent: *parent },
            |rows| {
                let mut released = Vec::new();
                for row in rows {
                    if let (Some(queue), Some("pending")) =
                        (row.get::<String>(2)?, row.get::<String>(3)?.as_deref())
                    {
                        released.push(queue);
                    }
                }
                Ok(released)
            },
        )?;
        for queue in released {
            counters::moved(
                &queue,
                Some(ItemState::Waiting),
                Some(ItemState::Pending),
                1,
            );
            wait::wake_after_commit(&queue, 1);
        }
        return Ok(());
    }
    let mut level = parents;
    let mut outcome = outcome;
    while !level.is_empty() {
        let how = match outcome {
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        };
        let changed = plans::run(
            client,
            &SETTLE,
            SettleParams {
                parents: std::mem::take(&mut level),
                failed: outcome != Outcome::Done,
                how,
            },
            changed_rows,
        )?;
        for child in changed {
            if child.was != Some(ItemState::Waiting) || child.now == child.was {
                continue;
            }
            counters::moved(&child.queue, child.was, child.now, 1);
            match child.now {
                Some(ItemState::Pending) => wait::wake_after_commit(&child.queue, 1),
                Some(ItemState::Cancelled) => {
                    counters::count(&child.queue, Event::Cancelled, 1);
                    xact::awaited_at_commit(child.id);
                    if child.has_children {
                        level.push(child.id);
                    }
                }
                _ => {}
            }
        }
        outcome = Outcome::Cancelled;
    }
    Ok(())
}

// One level of re-opening: the items `$1` were sent back to pending by
// `work_retry` (or, below the first level, back to waiting by this). The
// edges their failure marked `cancelled` are unresolved again, each child's
// `waiting_on` rises by those edges, and a cancelled child none of whose
// other edges is still marked `cancelled` waits again. Columns as SETTLE's.
static REOPEN: Statement<ReopenParams> = Statement::new(
    r#"
WITH e AS (
    UPDATE workfence.item_edges AS e
       SET resolved = false,
           cancelled = false
     WHERE e.parent OPERATOR(pg_catalog.=) ANY ($1)
       AND e.cancelled
    RETURNING e.child
), n AS (
    SELECT e.child, pg_catalog.count(*)::pg_catalog.int4 AS n
      FROM e
     GROUP BY e.child
)
UPDATE workfence.items AS c
   SET waiting_on = c.waiting_on OPERATOR(pg_catalog.+) n.n,
       state = CASE WHEN w.reopen THEN 'waiting'::workfence.item_state ELSE c.state END,
       finished_at = CASE WHEN w.reopen THEN NULL ELSE c.finished_at END,
       last_error = CASE WHEN w.reopen THEN NULL ELSE c.last_error END
  FROM n
 CROSS JOIN LATERAL (
       SELECT o.id, o.state
         FROM workfence.items AS o
        WHERE o.id OPERATOR(pg_catalog.=) n.child
          FOR NO KEY UPDATE) AS w0
 CROSS JOIN LATERAL (
       SELECT w0.id, w0.state AS was, n.n,
              w0.state OPERATOR(pg_catalog.=) 'cancelled'::workfence.item_state
              AND NOT EXISTS (SELECT FROM workfence.item_edges AS x
                               WHERE x.child OPERATOR(pg_catalog.=) w0.id
                                 AND x.cancelled
                                 AND x.parent OPERATOR(pg_catalog.<>) ALL ($1)) AS reopen) AS w
 WHERE c.id OPERATOR(pg_catalog.=) w.id
RETURNING c.id, c.queue, w.was::pg_catalog.text, c.state::pg_catalog.text, c.has_children
"#,
);

params! {
    /// `$1` the items retried (or re-opened).
    struct ReopenParams {
        parents: Vec<i64> = INT8ARRAYOID,
    }
}

/// `work_retry` sent `id` back to pending: the children its failure
/// cancelled wait again, level by level (see [`REOPEN`]), so a retried
/// parent keeps its workflow: its children run after it is done.
pub fn reopened(client: &mut SpiClient<'_>, id: i64) -> Result<()> {
    let mut level = vec![id];
    while !level.is_empty() {
        let changed = plans::run(
            client,
            &REOPEN,
            ReopenParams {
                parents: std::mem::take(&mut level),
            },
            changed_rows,
        )?;
        for child in changed {
            if child.was == Some(ItemState::Cancelled) && child.now == Some(ItemState::Waiting) {
                counters::moved(&child.queue, child.was, child.now, 1);
                if child.has_children {
                    level.push(child.id);
                }
            }
        }
    }
    Ok(())
}

// A child `$1` retried by an operator: its parents' failures no longer
// forbid it (the retry is the operator's decision), so a retry of such a
// parent later does not treat it as cancelled by it.
static FORGIVE: Statement<ReopenParams> = Statement::new(
    r#"
UPDATE workfence.item_edges AS e
   SET cancelled = false
 WHERE e.child OPERATOR(pg_catalog.=) ANY ($1)
   AND e.cancelled
"#,
);

// A child `$1` sent back by `work_retry` or an `on_conflict` re-run: it
// waits again for each parent that has not settled now (pending, claimed
// or waiting: one retried since it settled too), whose edge was resolved
// before. Those parents' rows are locked (FOR SHARE, rechecked on their
// newest version), so none of them finishes between this statement's look
// and its commit: a finish waits, then finds the edge unresolved and
// counts it. Its count rises by those edges, and a pending child becomes
// waiting. Found by the model (docs/model.md, `Sql::RetryByCount`): a
// child whose count had reached 0 while a parent was cancelled and then
// retried ran before that parent. Columns: the state after, or no row
// when nothing was re-opened.
static REWAIT: Statement<ReopenParams> = Statement::new(
    r#"
WITH parents AS (
    SELECT p.id
      FROM workfence.item_edges AS e
      JOIN workfence.items AS p ON p.id OPERATOR(pg_catalog.=) e.parent
     WHERE e.child OPERATOR(pg_catalog.=) ANY ($1)
       AND e.resolved
       AND p.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,waiting}'::workfence.item_state[])
       FOR SHARE OF p
), e AS (
    UPDATE workfence.item_edges AS e
       SET resolved = false
     WHERE e.child OPERATOR(pg_catalog.=) ANY ($1)
       AND e.parent OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT parents.id FROM parents))
       AND e.resolved
    RETURNING e.parent
), n AS (
    SELECT pg_catalog.count(*)::pg_catalog.int4 AS n FROM e
)
UPDATE workfence.items AS c
   SET waiting_on = c.waiting_on OPERATOR(pg_catalog.+) n.n,
       state = CASE WHEN c.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                    THEN 'waiting'::workfence.item_state ELSE c.state END
  FROM n
 WHERE c.id OPERATOR(pg_catalog.=) ANY ($1)
   AND n.n OPERATOR(pg_catalog.>) 0
RETURNING c.state::pg_catalog.text
"#,
);

/// The child `id` came back (a `work_retry`, or an `on_conflict` re-run of
/// a finished item): see [`REWAIT`]. Its state now, if the statement
/// changed it (waiting).
pub fn rewait(client: &mut SpiClient<'_>, id: i64) -> Result<Option<ItemState>> {
    plans::run(
        client,
        &REWAIT,
        ReopenParams { parents: vec![id] },
        |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(rows
                .first()
                .get::<String>(1)?
                .as_deref()
                .and_then(ItemState::parse))
        },
    )
}

/// `work_retry` sent the child `id` back (to waiting or pending): see
/// [`FORGIVE`].
pub fn forgiven(client: &mut SpiClient<'_>, id: i64) -> Result<()> {
    plans::run(client, &FORGIVE, ReopenParams { parents: vec![id] }, |_| {
        Ok(())
    })
}

// The results of the parents of item `$1`, under the token (`$1`, `$2`,
// `$3`) of its current lease (the item claimed under exactly this owner and
// epoch, in a queue of the claim scope `$4`; no row otherwise). A parent
// that ended done maps to its result, any other to its state and last
// error. Read by the child's id (item_edges_child_idx).
static PARENT_RESULTS: Statement<ParentResultsParams> = Statement::new(
    r#"
SELECT (SELECT COALESCE(pg_catalog.jsonb_object_agg(
                   p.id::pg_catalog.text,
                   CASE WHEN p.state OPERATOR(pg_catalog.=) 'done'::workfence.item_state
                        THEN COALESCE(p.result, 'null'::pg_catalog.jsonb)
                        ELSE pg_catalog.jsonb_build_object('state', p.state::pg_catalog.text,
                                                           'error', p.last_error) END
                   ORDER BY p.id), '{}'::pg_catalog.jsonb)
          FROM workfence.item_edges AS e
          JOIN workfence.items AS p ON p.id OPERATOR(pg_catalog.=) e.parent
         WHERE e.child OPERATOR(pg_catalog.=) i.id)
  FROM workfence.items AS i
 WHERE i.id OPERATOR(pg_catalog.=) $1
   AND i.owner OPERATOR(pg_catalog.=) $2
   AND i.epoch OPERATOR(pg_catalog.=) $3
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
   AND ($4 IS NULL OR i.queue OPERATOR(pg_catalog.~~) ANY ($4))
"#,
);

params! {
    /// `$1` id, `$2` owner, `$3` epoch, `$4` the claim scope's patterns
    /// (NULL: every queue).
    struct ParentResultsParams<'a> {
        id: i64 = INT8OID,
        owner: &'a str = TEXTOID,
        epoch: i64 = INT8OID,
        scope: Option<Vec<String>> = TEXTARRAYOID,
    }
}

/// The results of a claimed item's parents, under its current lease.
///
/// SQL: `workfence.work_parent_results(id bigint, owner text, epoch
/// bigint) RETURNS jsonb` (from 0.12.0). While the item is claimed under
/// exactly this owner AND epoch (an expired lease nobody re-claimed still
/// counts, as for `work_renew`): an object with a key per parent (its id
/// as text), whose value is the parent's `result` when it ended `done`
/// (JSON null if it finished without one), and `{"state": ..., "error":
/// last_error}` otherwise (a child with `on_parent_failure => 'run'` sees
/// its failed or cancelled parents so). `{}` for an item without parents;
/// a purged parent is left out. NULL for any other token (superseded,
/// finished, unknown id, or an item in a queue the role may not claim),
/// as `work_renew` answers false. Reads only; takes no lock.
///
/// Errors: 22004 for a NULL argument; 22023 for a blank, oversized or
/// control-character owner.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_parent_results(
    id: Option<i64>,
    owner: Option<String>,
    epoch: Option<i64>,
) -> Option<pgrx::JsonB> {
    (|| {
        let token = Token {
            id: validate::id(id)?,
            owner: validate::owner(owner)?,
            epoch: validate::epoch(epoch)?,
        };
        let scope = grants::scope(Capability::Claim)?;
        Spi::connect_mut(|client| {
            plans::run(
                client,
                &PARENT_RESULTS,
                ParentResultsParams {
                    id: token.id,
                    owner: &token.owner,
                    epoch: token.epoch,
                    scope: scope.like(),
                },
                |rows| {
                    if rows.is_empty() {
                        return Ok(None);
                    }
                    Ok(rows.first().get::<pgrx::JsonB>(1)?)
                },
            )
        })
    })()
    .or_report()
}

// The graph around item `$1`: its ancestors (depth -1, -2, ...) and its
// descendants (1, 2, ...), each at its nearest depth, walked through the
// edges' two indexes, at most `$3` levels each way; each row with its
// parents. Rows only of queues in the read scope `$2` (NULL: every queue),
// and none at all unless the item's own queue is. Nearest first, then by
// id; at most `$3` rows.
static WORKFLOW: Statement<WorkflowParams> = Statement::new(
    r#"
WITH RECURSIVE up (id, depth) AS (
    SELECT $1, 0
    UNION
    SELECT e.parent, u.depth OPERATOR(pg_catalog.-) 1
      FROM up AS u
      JOIN workfence.item_edges AS e ON e.child OPERATOR(pg_catalog.=) u.id
     WHERE u.depth OPERATOR(pg_catalog.>) OPERATOR(pg_catalog.-) $3
), down (id, depth) AS (
    SELECT $1, 0
    UNION
    SELECT e.child, d.depth OPERATOR(pg_catalog.+) 1
      FROM down AS d
      JOIN workfence.item_edges AS e ON e.parent OPERATOR(pg_catalog.=) d.id
     WHERE d.depth OPERATOR(pg_catalog.<) $3
), nodes AS (
    SELECT a.id, pg_catalog.max(a.depth) AS depth FROM up AS a GROUP BY a.id
    UNION ALL
    SELECT b.id, pg_catalog.min(b.depth) FROM down AS b
     WHERE b.depth OPERATOR(pg_catalog.>) 0
     GROUP BY b.id
)
SELECT i.id, i.queue, i.key, i.state::pg_catalog.text, n.depth::pg_catalog.int4,
       ARRAY(SELECT e.parent FROM workfence.item_edges AS e
              WHERE e.child OPERATOR(pg_catalog.=) i.id ORDER BY e.parent)
  FROM nodes AS n
  JOIN workfence.items AS i ON i.id OPERATOR(pg_catalog.=) n.id
 WHERE ($2 IS NULL OR i.queue OPERATOR(pg_catalog.~~) ANY ($2))
   AND EXISTS (SELECT FROM workfence.items AS s
                WHERE s.id OPERATOR(pg_catalog.=) $1
                  AND ($2 IS NULL OR s.queue OPERATOR(pg_catalog.~~) ANY ($2)))
 ORDER BY pg_catalog.abs(n.depth), n.depth, i.id
 LIMIT $3
"#,
);

params! {
    /// `$1` the item, `$2` the read scope's patterns (NULL: every queue),
    /// `$3` the most levels each way and rows.
    struct WorkflowParams {
        id: i64 = INT8OID,
        scope: Option<Vec<String>> = TEXTARRAYOID,
        most: i32 = INT4OID,
    }
}

/// One row of `work_workflow`.
type WorkflowRow = (i64, String, String, String, i32, Vec<i64>);

/// The workflow graph around an item, for operators and the dashboard.
///
/// SQL: `workfence.work_workflow(id bigint) RETURNS TABLE (id bigint, queue
/// text, key text, state text, depth integer, parents bigint[])` (from
/// 0.12.0). The item itself (depth 0), its ancestors (depth -1 for its
/// parents, -2 for theirs, ...) and its descendants (1, 2, ...), each once
/// at its nearest depth, nearest first, then by id; `parents` lists each
/// row's parents' ids (every edge into it, so the rows draw the graph).
/// At most 1000 rows ([`WORKFLOW_MAX_ROWS`]), and 1000 levels each way.
/// Zero rows for an unknown id. Where queue grants are enforced: zero rows
/// unless the role may read the item's queue, and only rows of queues it
/// may read (the `parents` arrays still name every parent's id).
///
/// Errors: 22004 for a NULL id.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_workflow(
    id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(queue, String),
        name!(key, String),
        name!(state, String),
        name!(depth, i32),
        name!(parents, Vec<i64>),
    ),
> {
    (|| -> Result<Vec<WorkflowRow>> {
        let id = validate::id(id)?;
        let scope = grants::scope(Capability::Read)?;
        Spi::connect_mut(|client| {
            plans::run(
                client,
                &WORKFLOW,
                WorkflowParams {
                    id,
                    scope: scope.like(),
                    most: WORKFLOW_MAX_ROWS,
                },
                |rows| {
                    let mut out = Vec::with_capacity(rows.len());
                    for row in rows {
                        let (Some(id), Some(queue), Some(key), Some(state), Some(depth)) = (
                            row.get::<i64>(1)?,
                            row.get::<String>(2)?,
                            row.get::<String>(3)?,
                            row.get::<String>(4)?,
                            row.get::<i32>(5)?,
                        ) else {
                            continue;
                        };
                        let parents = row.get::<Vec<i64>>(6)?.unwrap_or_default();
                        out.push((id, queue, key, state, depth, parents));
                    }
                    Ok(out)
                },
            )
        })
    })()
    .map(TableIterator::new)
    .or_report()
}
