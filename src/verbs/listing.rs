//! Listing a queue's items a page at a time (from 0.11.0): `work_items`,
//! what a dashboard or an operator's `psql` pages through.
//!
//! Each state is listed in the order of an index the extension already
//! keeps, so a page reads about as many index entries as it returns,
//! however many items the queue holds (keyset pagination, as Markus Winand
//! describes it in *Use The Index, Luke*: "paging through results", rather
//! than `OFFSET`, which reads and skips every row before the page):
//!
//! | state | order | index |
//! |---|---|---|
//! | NULL (all) | by key, descending (generated keys are UUIDv7: newest first) | the unique `(queue, key)` index |
//! | `pending` | claim order: `priority, run_at, id` | `items_due_idx` |
//! | `claimed` | soonest lease end first: `lease_until, id` (lapsed leases on top) | `items_lease_idx` |
//! | `done`, `failed`, `cancelled` | newest finish first: `finished_at, id` descending | `items_finished_idx` |
//! | `waiting` (from 0.12.0) | oldest first: `id` | `item_edges_child_idx`, the edges of every queue's workflows |
//!
//! No index is added for it: every claim and finish would pay for its upkeep
//! (not measured for this listing; docs/benchmarks.md counts what 0.10.0's
//! partial `items_group_idx` costs a claim → finish: +2.9% instructions). The
//! price is in one case: `items_finished_idx` holds the finished items of
//! every queue by `finished_at` alone, so a page of `done`, `failed` or
//! `cancelled` passes over the finished items, of this queue's other
//! states and of other queues, that finished after the ones it returns. A
//! state rare among many finished items reads many index entries and rows
//! for its page (docs/dashboard-render.md measures it); a queue with none
//! of that state reads them all.
//!
//! The page after one starts after the item `after` at that item's place
//! in the order as it is now (its row's sort key, read in the same
//! statement, before the scan: the scan starts there), also when it has
//! left the listed state since (a claimed pending item keeps its priority
//! and run_at). Only a sort key that is gone ends the listing with an empty
//! page: a purged item (no row), a claimed item finished or handed back
//! (no `lease_until`), a finished one retried (no `finished_at`), or an id
//! of another queue; a reader then starts again from the first page. Pages of items
//! that change while they are read may repeat or skip an item, as any
//! listing of live rows does; each page is one statement's snapshot.

use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};

/// The columns of a listed item, in `work_items`' result order; `$more`
/// adds the columns of a later schema (`, i.progress` from 0.12.0).
macro_rules! listed_columns {
    ($more:literal) => {
        concat!(
            r#"
SELECT i.id, i.key, i.state::pg_catalog.text, i.priority, i.run_at, i.attempts, i.max_attempts,
       i.owner, i.epoch, i.claimed_at, i.lease_until, i.created_at, i.finished_at, i.group_key,
       (i.errors OPERATOR(pg_catalog.->) -1) OPERATOR(pg_catalog.->>) 'error'"#,
            $more,
            r#"
  FROM workfence.items AS i"#
        )
    };
}

/// The column `$col` of the cursor: item `$2`'s, if it is in queue `$1`;
/// `$first` (the start of the order) when `$2` is NULL; NULL when item `$2`
/// is not in the queue, which makes the page empty. A scalar subquery is an
/// init plan, run once before the scan, so the comparison with it is an
/// index condition: the scan starts at the cursor instead of filtering up
/// to it.
macro_rules! cursor {
    ($col:literal, $first:literal) => {
        concat!(
            "COALESCE((SELECT c.",
            $col,
            " FROM workfence.items AS c\n",
            "                    WHERE c.id OPERATOR(pg_catalog.=) $2 AND c.queue OPERATOR(pg_catalog.=) $1),\n",
            "                  CASE WHEN $2 IS NULL THEN ",
            $first,
            " END)"
        )
    };
}

/// The listing statements, for the columns `$more` adds (see
/// [`listed_columns!`]).
macro_rules! list_statements {
    ($more:literal) => {
        ListStatements {
            // Every item of queue `$1` by key, descending, after item `$2`: a range of
            // the unique (queue, key) index, so a queue with few items (or none) is
            // answered from its own part of the index, whatever the other queues hold.
            // Text has no greatest value to stand for "from the start", so the first
            // page is a statement of its own (`all_first`).
            all: Statement::new(concat!(
                listed_columns!($more),
                r#"
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.<) "#,
                cursor!("key", "NULL::pg_catalog.text"),
                r#"
 ORDER BY i.key DESC
 LIMIT $3
"#
            )),

            // The first page of `all` (`$2` is NULL and not read).
            all_first: Statement::new(concat!(
                listed_columns!($more),
                r#"
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND $2::pg_catalog.int8 IS NULL
 ORDER BY i.key DESC
 LIMIT $3
"#
            )),

            // Pending items of queue `$1` in claim order, after item `$2`.
            pending: Statement::new(concat!(
                listed_columns!($more),
                r#"
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
   AND (i.priority, i.run_at, i.id) OPERATOR(pg_catalog.>) (
           "#,
                cursor!("priority", "(-2147483648)::pg_catalog.int4"),
                ",\n           ",
                cursor!("run_at", "'-infinity'::pg_catalog.timestamptz"),
                ",\n           ",
                cursor!("id", "(-9223372036854775807)::pg_catalog.int8"),
                r#")
 ORDER BY i.priority, i.run_at, i.id
 LIMIT $3
"#
            )),

            // Claimed items of queue `$1`, soonest lease end first (lapsed leases on
            // top), after item `$2`.
            claimed: Statement::new(concat!(
                listed_columns!($more),
                r#"
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
   AND (i.lease_until, i.id) OPERATOR(pg_catalog.>) (
           "#,
                cursor!("lease_until", "'-infinity'::pg_catalog.timestamptz"),
                ",\n           ",
                cursor!("id", "(-9223372036854775807)::pg_catalog.int8"),
                r#")
 ORDER BY i.lease_until, i.id
 LIMIT $3
"#
            )),

            // Finished items of queue `$1` in state `$4` (done, failed or cancelled),
            // newest finish first, after item `$2`. The IN list repeats the partial
            // index's predicate, so that the planner may use the index for any `$4`.
            finished: Statement::new(concat!(
                listed_columns!($more),
                r#"
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.state OPERATOR(pg_catalog.=) ANY ('{done,failed,cancelled}'::workfence.item_state[])
   AND i.state OPERATOR(pg_catalog.=) $4::workfence.item_state
   AND (i.finished_at, i.id) OPERATOR(pg_catalog.<) (
           "#,
                cursor!("finished_at", "'infinity'::pg_catalog.timestamptz"),
                ",\n           ",
                cursor!("id", "9223372036854775807::pg_catalog.int8"),
                r#")
 ORDER BY i.finished_at DESC, i.id DESC
 LIMIT $3
"#
            )),

            // Waiting items of queue `$1` (workflows, from 0.12.0), oldest
            // first, after item `$2`. A waiting item has an unresolved edge
            // from a parent: the children of unresolved edges are walked
            // in id order (item_edges_child_idx), each probed in the items
            // by id, so the items' own UPDATEs keep no index for this
            // listing (a partial index of waiting items cost every claim
            // -> finish 1.5% more instructions, its predicate prepared
            // by each UPDATE: docs/benchmarks.md). The walk passes over
            // the workflows of other queues and states, as a finished
            // listing does over other finishes. A schema before 0.12.0
            // has no edges, and this form is only run on one that has.
            waiting: Statement::new(concat!(
                listed_columns!($more),
                r#"
  JOIN (SELECT DISTINCT e.child
          FROM workfence.item_edges AS e
         WHERE NOT e.resolved
           AND e.child OPERATOR(pg_catalog.>) "#,
                cursor!("id", "(-9223372036854775807)::pg_catalog.int8"),
                r#"
         ORDER BY e.child) AS w ON i.id OPERATOR(pg_catalog.=) w.child
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.state OPERATOR(pg_catalog.=) 'waiting'::workfence.item_state
 ORDER BY i.id
 LIMIT $3
"#
            )),
        }
    };
}

/// One form of each listing statement.
struct ListStatements {
    all: Statement<ListParams<'static>>,
    all_first: Statement<ListParams<'static>>,
    pending: Statement<ListParams<'static>>,
    claimed: Statement<ListParams<'static>>,
    finished: Statement<ListFinishedParams<'static>>,
    waiting: Statement<ListParams<'static>>,
}

/// The statements of 0.11.0's `work_items`.
static LIST: ListStatements = list_statements!("");

/// The statements of 0.12.0's `work_items`: the checkpoint too.
static LIST_LIFE: ListStatements = list_statements!(",\n       i.progress");

params! {
    /// `$1` queue, `$2` the item the page starts after (NULL: first page),
    /// `$3` rows at most.
    struct ListParams<'a> {
        queue: &'a str = TEXTOID,
        after: Option<i64> = INT8OID,
        max: i32 = INT4OID,
    }
}

params! {
    /// [`ListParams`]' `$1..$3`, and `$4` the finished state listed.
    struct ListFinishedParams<'a> {
        queue: &'a str = TEXTOID,
        after: Option<i64> = INT8OID,
        max: i32 = INT4OID,
        state: &'a str = TEXTOID,
    }
}

/// Rows of a page at most, by default ([`MAX_ROWS_CAP`] at most).
pub const DEFAULT_ROWS: i32 = 50;
/// The most rows one page may ask for.
pub const MAX_ROWS_CAP: i32 = 1000;

/// Which listing a `state` argument asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    All,
    Pending,
    Claimed,
    Finished(&'static str),
    Waiting,
}

/// `state` of `work_items`: NULL (every item) or an item state.
fn listing(value: Option<String>) -> Result<Listing> {
    Ok(match value.as_deref() {
        None => Listing::All,
        Some("pending") => Listing::Pending,
        Some("claimed") => Listing::Claimed,
        Some("done") => Listing::Finished("done"),
        Some("failed") => Listing::Finished("failed"),
        Some("cancelled") => Listing::Finished("cancelled"),
        Some("waiting") => Listing::Waiting,
        Some(other) => {
            return Err(WorkfenceError::invalid(
                "state",
                "must be NULL or one of pending, claimed, done, failed, cancelled, waiting",
                format!("The state is {other:?}."),
                "work_queue_stats' scheduled items are pending ones with run_at in the future, \
                 its expired ones claimed ones with lease_until in the past: list pending or \
                 claimed and compare run_at or lease_until with now().",
            ))
        }
    })
}

/// `max` of `work_items`: 1 to [`MAX_ROWS_CAP`].
fn max_rows(value: Option<i32>) -> Result<i32> {
    let value = validate::required("max", value)?;
    if !(1..=MAX_ROWS_CAP).contains(&value) {
        return Err(WorkfenceError::invalid(
            "max",
            format!("must be between 1 and {MAX_ROWS_CAP}"),
            format!("max is {value}."),
            "Page with after (the id of the last row of the previous page), at most 1000 rows a page.",
        ));
    }
    Ok(value)
}

/// One row of `work_items`, in its column order.
type ListedRow = (
    i64,
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
    TimestampWithTimeZone,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<String>,
    Option<RawJsonb>,
);

fn read_listed(rows: pgrx::spi::SpiTupleTable<'_>) -> Result<Vec<ListedRow>> {
    let missing = |column| WorkfenceError::UnexpectedNull { column };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push((
            row.get::<i64>(1)?.ok_or_else(|| missing("id"))?,
            row.get::<String>(2)?.ok_or_else(|| missing("key"))?,
            row.get::<String>(3)?.ok_or_else(|| missing("state"))?,
            row.get::<i32>(4)?.ok_or_else(|| missing("priority"))?,
            row.get::<TimestampWithTimeZone>(5)?
                .ok_or_else(|| missing("run_at"))?,
            row.get::<i32>(6)?.ok_or_else(|| missing("attempts"))?,
            row.get::<i32>(7)?.ok_or_else(|| missing("max_attempts"))?,
            row.get::<String>(8)?,
            row.get::<i64>(9)?,
            row.get::<TimestampWithTimeZone>(10)?,
            row.get::<TimestampWithTimeZone>(11)?,
            row.get::<TimestampWithTimeZone>(12)?
                .ok_or_else(|| missing("created_at"))?,
            row.get::<TimestampWithTimeZone>(13)?,
            row.get::<String>(14)?,
            row.get::<String>(15)?,
            // Only LIST_LIFE's statements read it.
            if row.columns() >= 16 {
                row.get::<RawJsonb>(16)?
            } else {
                None
            },
        ));
    }
    Ok(out)
}

/// A page of a queue's items, for a dashboard or an operator.
///
/// SQL: `workfence.work_items(queue text, state text DEFAULT NULL, after
/// bigint DEFAULT NULL, max integer DEFAULT 50) RETURNS TABLE (id bigint,
/// key text, state text, priority integer, run_at timestamptz, attempts
/// integer, max_attempts integer, owner text, epoch bigint, claimed_at
/// timestamptz, lease_until timestamptz, created_at timestamptz,
/// finished_at timestamptz, group_key text, last_error text, progress
/// jsonb)`: at most
/// `max` rows (1 to 1000).
///
/// `state` NULL lists every item of the queue by key, descending (a
/// generated key is a UUIDv7, so those come newest first); `pending` in
/// claim order (`priority, run_at, id`; one with `run_at` in the future,
/// a scheduled one, is passed over by claims until it is due); `claimed`
/// soonest lease end first (`lease_until, id`: lapsed leases on top; a
/// hung job is one whose `claimed_at` is long ago); `done`, `failed` (the
/// dead letters) and `cancelled` newest finish first
/// (`finished_at, id` descending); from 0.12.0 `waiting` (workflows)
/// oldest first (`id`). `after` is the id of the last row of the
/// previous page (NULL: the first page); the page continues after that
/// item's place in the order as it is now (its sort key, even after it
/// left the listed state); the page is empty when that sort key is gone (a
/// purged item, a claimed one no longer claimed, a finished one retried):
/// start from the first page again. `last_error` is the `error` of the newest
/// entry of the item's history (`errors` of `work_item`), NULL without
/// one. The payload and result are not listed: `work_item(id)` reads them.
///
/// It reads with the statement's snapshot, changes and locks nothing, and
/// runs on a hot standby. Every page walks an index the claims already
/// keep (the module's documentation gives which), so its cost follows the
/// page size, not the queue's; keyset pagination, not `OFFSET`.
///
/// Errors: 22004 for a NULL queue or max; 22023 for a bad queue (see
/// `work_enqueue`), a state that is not one of the six item states, or a
/// max outside 1 to 1000; 42501 (insufficient_privilege) when queue grants
/// are enforced and the session's role has no read grant covering the
/// queue (see `crate::access::grants`).
///
/// From 0.12.0 each row ends with `progress`, the item's checkpoint (see
/// `work_progress`).
#[pg_extern(
    name = "work_items",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::type_complexity)] // pgrx reads the columns from the signature
pub fn work_items_progress(
    queue: Option<String>,
    state: default!(Option<String>, "NULL"),
    after: default!(Option<i64>, "NULL"),
    max: default!(Option<i32>, 50),
) -> TableIterator<
    'static,
    (
        name!(id, i64),
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
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(group_key, Option<String>),
        name!(last_error, Option<String>),
        name!(progress, Option<RawJsonb>),
    ),
> {
    listed(&LIST_LIFE, queue, state, after, max)
        .map(TableIterator::new)
        .or_report()
}

/// `work_items` of 0.11.0 (rows without `progress`), kept as the C symbol
/// `work_items_wrapper` that its install script binds; renamed
/// `work_items_retired_0_11_0` by the update. Not part of this version's
/// SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
#[allow(clippy::type_complexity)] // pgrx reads the columns from the signature
pub fn work_items(
    queue: Option<String>,
    state: Option<String>,
    after: Option<i64>,
    max: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
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
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(group_key, Option<String>),
        name!(last_error, Option<String>),
    ),
> {
    listed(&LIST, queue, state, after, max)
        .map(|rows| {
            TableIterator::new(rows.into_iter().map(
                |(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, _progress)| {
                    (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o)
                },
            ))
        })
        .or_report()
}

/// The page `work_items` lists (see [`work_items_progress`]).
fn listed(
    statements: &'static ListStatements,
    queue: Option<String>,
    state: Option<String>,
    after: Option<i64>,
    max: Option<i32>,
) -> Result<Vec<ListedRow>> {
    let queue = validate::queue(queue)?;
    let listing = listing(state)?;
    let max = max_rows(max)?;
    grants::check(Capability::Read, &queue)?;
    let params = ListParams {
        queue: &queue,
        after,
        max,
    };
    if listing == Listing::Waiting && !crate::verbs::life::schema_has_life() {
        // A schema before 0.12.0 has no workflows, so nothing waits.
        return Ok(Vec::new());
    }
    Spi::connect_mut(|client| match listing {
        Listing::All if after.is_none() => {
            plans::run(client, &statements.all_first, params, read_listed)
        }
        Listing::All => plans::run(client, &statements.all, params, read_listed),
        Listing::Pending => plans::run(client, &statements.pending, params, read_listed),
        Listing::Claimed => plans::run(client, &statements.claimed, params, read_listed),
        Listing::Waiting => plans::run(client, &statements.waiting, params, read_listed),
        Listing::Finished(state) => plans::run(
            client,
            &statements.finished,
            ListFinishedParams {
                queue: &queue,
                after,
                max,
                state,
            },
            read_listed,
        ),
    })
}
