//! `work_enqueue_many`: many items of one queue in one call (from 0.12.0, issue 38).
//!
//! A producer with a thousand items to add paid a function call, a plan
//! execution and an index probe per item (`SELECT work_enqueue(...) FROM
//! generate_series(...)`: 0.12-0.15x a plain `INSERT ... SELECT`). Here the
//! common case, items without groups kept as they are when their key
//! exists (`on_conflict => 'keep'`), is one `INSERT ... SELECT FROM
//! unnest(...) ON CONFLICT DO NOTHING` and, for the keys that existed, one
//! look-up by `(queue, key)`: the work of the plain `INSERT` plus the
//! arrays' copy. A call in which any element has a group, or with
//! `on_conflict` `replace` or `preserve_run_at`, enqueues every element as
//! `work_enqueue` enqueues one (a group's order, its heads and a replaced
//! item's locks are judged item by item), in the same call: splitting the
//! call would break ids in array order and the rule that a repeated key
//! finds its first element's item. Oban's `insert_all` and River's `InsertMany`
//! are the same idea.

use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::notify;
use crate::backend::wait;
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::verbs::life::OnConflict;

/// The most items one `work_enqueue_many` call takes (22023 above): the
/// arrays are held in memory a few times over (the argument, its Rust copy,
/// the statement's parameter, the rows returned), each up to PostgreSQL's
/// 1 GB limit on one value. Larger loads are several calls, in one
/// transaction if they must commit together.
pub const MAX_ITEMS: usize = 10_000;

// Insert every (key, payload, run_at) of the arrays unless its (queue, key)
// exists (or an earlier element of this statement has the same key): the
// inserted rows' id, key, and whether each is due. `$5` NULL: every item
// due now (`clock_timestamp()`, as `work_enqueue`; ROWS FROM pads the
// shorter functions' columns with NULLs, and an unnest of NULL has no rows).
macro_rules! insert_many_sql {
    ($on_conflict:literal) => {
        concat!(
            r#"
INSERT INTO workfence.items (queue, key, payload, priority, run_at, max_attempts)
SELECT $1, u.key, u.payload, $4, COALESCE(u.run_at, pg_catalog.clock_timestamp()), $6
  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($5))
       AS u(key, payload, run_at)"#,
            $on_conflict,
            r#"
RETURNING id, key, run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
"#
        )
    };
}

static INSERT_MANY: Statement<ManyParams> = Statement::new(insert_many_sql!(
    "\n    ON CONFLICT ON CONSTRAINT items_queue_key_unique DO NOTHING"
));

// INSERT_MANY when every key is one this call generated (`keys` NULL or all
// its elements NULL): fresh UUIDv7s (a millisecond timestamp, a per-process
// counter and random bits) exist nowhere, so there is nothing to arbitrate, and the
// speculative insertion ON CONFLICT makes per row (a probe of the unique
// index before the insert and a confirmation record after it; 18% of a
// 10,000-row INSERT ... SELECT here) is left out.
static INSERT_FRESH: Statement<ManyParams> = Statement::new(insert_many_sql!(""));

params! {
    /// `$1` queue, `$2` keys, `$3` payloads, `$4` priority, `$5` run_at
    /// (NULL: all due now), `$6` max_attempts.
    struct ManyParams<'a> {
        queue: &'a str = TEXTOID,
        keys: Vec<String> = TEXTARRAYOID,
        payloads: Vec<RawJsonb> = JSONBARRAYOID,
        priority: i32 = INT4OID,
        run_at: Option<Vec<Option<TimestampWithTimeZone>>> = TIMESTAMPTZARRAYOID,
        max_attempts: i32 = INT4OID,
    }
}

// The ids of the keys that were not inserted: a statement of its own after
// the INSERT, so (in READ COMMITTED) it sees the rows ON CONFLICT waited for.
//
// Each key is its own probe of `items_queue_key_unique` (a `LATERAL`
// subquery whose `LIMIT 1`, harmless on a unique key, keeps the planner from
// flattening it into a hash join), not `key = ANY ($2)`: the generic plan
// kept for the backend, made while the table was small, took only `queue`
// as the index condition and walked the whole queue (2 keys among 10,000
// items: 20,142 buffers; by probe: 6), and a flattened join did the same.
static EXISTING_MANY: Statement<ExistingParams> = Statement::new(
    r#"
SELECT k.key, i.id
  FROM pg_catalog.unnest($2) AS k(key)
 CROSS JOIN LATERAL (
       SELECT i.id
         FROM workfence.items AS i
        WHERE i.queue OPERATOR(pg_catalog.=) $1
          AND i.key OPERATOR(pg_catalog.=) k.key
        LIMIT 1) AS i
"#,
);

// Whether one of the keys is a cancelled item's: `on_conflict` would run it
// again, which takes an operate grant (see `crate::verbs::life::conflict`).
// Each key is probed as in EXISTING_MANY, and the state is judged in the
// select list: a state condition in the WHERE let a generic plan made while
// nothing had finished scan `items_finished_idx`, every finished item of
// every queue (10,000 rows removed by its filter for 2 keys).
static ANY_CANCELLED: Statement<ExistingParams> = Statement::new(
    r#"
SELECT COALESCE(pg_catalog.bool_or(i.state OPERATOR(pg_catalog.=)
                                   'cancelled'::workfence.item_state), false)
  FROM pg_catalog.unnest($2) AS k(key)
 CROSS JOIN LATERAL (
       SELECT i.state
         FROM workfence.items AS i
        WHERE i.queue OPERATOR(pg_catalog.=) $1
          AND i.key OPERATOR(pg_catalog.=) k.key
        LIMIT 1) AS i
"#,
);

params! {
    /// `$1` queue, `$2` keys.
    struct ExistingParams<'a> {
        queue: &'a str = TEXTOID,
        keys: Vec<String> = TEXTARRAYOID,
    }
}

/// Add many items to `queue` in one call: a row per element of `payloads`,
/// in their order.
///
/// SQL: `workfence.work_enqueue_many(queue text, payloads jsonb[], keys
/// text[] DEFAULT NULL, run_at timestamptz[] DEFAULT NULL, priority int
/// DEFAULT 0, max_attempts int DEFAULT 25, group_keys text[] DEFAULT NULL,
/// on_conflict text DEFAULT 'keep') RETURNS TABLE (id bigint, key text,
/// inserted bool)`.
///
/// Each element is judged as `work_enqueue(queue, payloads[i], keys[i],
/// run_at[i], priority, max_attempts, NULL, group_keys[i], on_conflict)`
/// would judge it, in array order: a NULL key (or `keys` NULL) is a new
/// UUIDv7, a NULL `run_at` element is now, a NULL group key no group; an
/// existing key (or one repeated in the arrays) returns its item with
/// `inserted = false`, left as it is (`keep`) or changed as `on_conflict`
/// says. `keys`, `run_at` and `group_keys`, when given, have one element
/// per payload. Up to [`MAX_ITEMS`] elements; none: no rows. Wakes long
/// polls of the queue at commit and sends one `work_enqueued` (if any
/// inserted item is due and `workfence.notify_enqueued` is on).
///
/// Errors: 22004 for a NULL `queue`, `payloads`, `priority`,
/// `max_attempts` or `on_conflict`, or a NULL element of `payloads`; 22023
/// for `keys`, `run_at` or `group_keys` not as long as `payloads`, over
/// 10,000 payloads, and every argument `work_enqueue` refuses (a bad queue,
/// key, run_at, group key, max_attempts or on_conflict); 42501 without an
/// enqueue grant covering the queue (where grants are enforced), or, for
/// `on_conflict` running a cancelled item again, an operate grant; 25000 and
/// 40001 as `work_enqueue`; 40P01 (deadlock_detected) when two calls insert
/// overlapping keys in different orders, as two transactions of
/// `work_enqueue` calls can (sort the keys, or retry).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
#[allow(clippy::too_many_arguments)]
pub fn work_enqueue_many(
    queue: Option<String>,
    payloads: Option<Vec<Option<RawJsonb>>>,
    keys: default!(Option<Vec<Option<String>>>, "NULL"),
    run_at: default!(Option<Vec<Option<TimestampWithTimeZone>>>, "NULL"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, 25),
    group_keys: default!(Option<Vec<Option<String>>>, "NULL"),
    on_conflict: default!(Option<String>, "'keep'"),
) -> TableIterator<'static, (name!(id, i64), name!(key, String), name!(inserted, bool))> {
    (|| {
        let items = Items::checked(queue, payloads, keys, run_at, group_keys)?;
        let priority = validate::required("priority", priority)?;
        let max_attempts = validate::max_attempts(max_attempts)?;
        let on_conflict = OnConflict::parse(on_conflict)?;
        grants::check(Capability::Enqueue, &items.queue)?;
        if items.payloads.is_empty() {
            return Ok(Vec::new());
        }
        if on_conflict != OnConflict::Keep || items.group_keys.iter().any(Option::is_some) {
            one_by_one(items, priority, max_attempts, on_conflict)
        } else {
            at_once(items, priority, max_attempts)
        }
    })()
    .map(TableIterator::new)
    .or_report()
}

/// `work_enqueue_many`'s arrays, checked: one element each per payload.
struct Items {
    queue: String,
    payloads: Vec<RawJsonb>,
    keys: Vec<String>,
    /// Per element, whether its key is one this call generated (none was
    /// given for it).
    generated: Vec<bool>,
    /// `None`: every item due now.
    run_at: Option<Vec<Option<TimestampWithTimeZone>>>,
    group_keys: Vec<Option<String>>,
}

impl Items {
    /// Checks the arrays as `work_enqueue` checks one item's arguments, and
    /// their lengths against `payloads`'.
    fn checked(
        queue: Option<String>,
        payloads: Option<Vec<Option<RawJsonb>>>,
        keys: Option<Vec<Option<String>>>,
        run_at: Option<Vec<Option<TimestampWithTimeZone>>>,
        group_keys: Option<Vec<Option<String>>>,
    ) -> Result<Self> {
        let queue = validate::queue(queue)?;
        let payloads = validate::required("payloads", payloads)?
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                p.ok_or(WorkfenceError::NullElement {
                    arg: "payloads",
                    element: i + 1,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let n = payloads.len();
        if n > MAX_ITEMS {
            return Err(WorkfenceError::invalid(
                "payloads",
                format!("must have at most {MAX_ITEMS} elements"),
                format!("payloads has {n} elements."),
                "Enqueue in several calls (in one transaction if they must commit together).",
            ));
        }
        let generated: Vec<bool> = match &keys {
            None => vec![true; n],
            Some(keys) => keys.iter().map(Option::is_none).collect(),
        };
        let keys = match keys {
            None => (0..n).map(|_| uuid::Uuid::now_v7().to_string()).collect(),
            Some(keys) => same_length("keys", n, keys)?
                .into_iter()
                .enumerate()
                .map(|(i, k)| match k {
                    Some(k) => element("keys", i, validate::key(k)),
                    None => Ok(uuid::Uuid::now_v7().to_string()),
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let run_at = match run_at {
            None => None,
            Some(run_at) => {
                let run_at = same_length("run_at", n, run_at)?;
                for (i, at) in run_at.iter().enumerate() {
                    element("run_at", i, validate::finite_run_at(*at))?;
                }
                Some(run_at)
            }
        };
        let group_keys = match group_keys {
            None => vec![None; n],
            Some(groups) => same_length("group_keys", n, groups)?
                .into_iter()
                .enumerate()
                .map(|(i, g)| element("group_keys", i, validate::group_key(g)))
                .collect::<Result<Vec<_>>>()?,
        };
        Ok(Items {
            queue,
            payloads,
            keys,
            generated,
            run_at,
            group_keys,
        })
    }
}

/// A check of element `i` (from 0) of array `arg`, as `work_enqueue` checks
/// one item's argument: its refusal names the array (`argument "keys" ...`,
/// where `work_enqueue`'s says `"key"`), and its DETAIL which element,
/// counted from 1 in array order (`element 2 of keys: The key is ''.`;
/// not a subscript, which an array with another lower bound would not
/// match), since a call has up to 10,000.
fn element<T>(arg: &'static str, i: usize, checked: Result<T>) -> Result<T> {
    checked.map_err(|e| match e {
        WorkfenceError::InvalidArgument {
            problem,
            detail,
            hint,
            ..
        } => WorkfenceError::InvalidArgument {
            arg,
            problem,
            detail: format!("element {} of {arg}: {}", i + 1, detail.render()).into(),
            hint,
        },
        other => other,
    })
}

/// `values`, if it has `n` elements (as many as `payloads`); 22023 if not.
fn same_length<T>(arg: &'static str, n: usize, values: Vec<T>) -> Result<Vec<T>> {
    if values.len() != n {
        return Err(WorkfenceError::invalid(
            arg,
            "must have as many elements as \"payloads\"",
            format!("payloads has {n} elements, {arg} {}.", values.len()),
            "Pass one element per payload (NULL for the default), or leave the argument out.",
        ));
    }
    Ok(values)
}

/// Items with a group, or `on_conflict` other than keep: each element as
/// `work_enqueue` enqueues it ([`crate::verbs::enqueue::insert`]).
fn one_by_one(
    items: Items,
    priority: i32,
    max_attempts: i32,
    on_conflict: OnConflict,
) -> Result<Vec<(i64, String, bool)>> {
    let Items {
        queue,
        payloads,
        keys,
        run_at,
        group_keys,
        generated,
        ..
    } = items;
    // A call that would run a cancelled item again without the operate
    // grant is refused before its first element, as `work_enqueue` refuses
    // it before drawing an id: a refused call changes nothing, the id
    // sequence included. (An item cancelled while the call runs is still
    // refused, at its element.)
    if on_conflict != OnConflict::Keep && !grants::allows(Capability::Operate, &queue)? {
        let given: Vec<String> = keys
            .iter()
            .zip(&generated)
            .filter(|(_, &g)| !g)
            .map(|(k, _)| k.clone())
            .collect();
        let cancelled = !given.is_empty()
            && Spi::connect_mut(|client| {
                plans::run(
                    client,
                    &ANY_CANCELLED,
                    ExistingParams {
                        queue: &queue,
                        keys: given,
                    },
                    |rows| Ok(rows.first().get_one::<bool>()?.unwrap_or(false)),
                )
            })?;
        if cancelled {
            grants::check(Capability::Operate, &queue)?;
        }
    }
    let mut rows = Vec::with_capacity(payloads.len());
    for (i, ((payload, key), group_key)) in
        payloads.into_iter().zip(keys).zip(group_keys).enumerate()
    {
        let at = run_at.as_ref().and_then(|r| r[i]);
        let (id, inserted) = crate::verbs::enqueue::insert(
            &queue,
            &key,
            payload,
            at,
            priority,
            max_attempts,
            None,
            group_key.as_deref(),
            crate::verbs::enqueue::How {
                on_conflict,
                trace: None,
                generated_key: generated[i],
            },
            None,
        )?;
        rows.push((id, key, inserted));
    }
    Ok(rows)
}

/// Items without a group, existing keys kept: one `INSERT ... SELECT FROM
/// unnest` ([`INSERT_MANY`], or [`INSERT_FRESH`] when every key is
/// generated), one look-up of the keys that were not inserted
/// ([`EXISTING_MANY`]); a key whose existing row vanished between the two (a
/// racing purge) is inserted again, up to three times (then 40001, as
/// `work_enqueue`).
fn at_once(items: Items, priority: i32, max_attempts: i32) -> Result<Vec<(i64, String, bool)>> {
    use std::collections::HashMap;

    let Items {
        queue,
        payloads,
        keys,
        generated,
        run_at,
        ..
    } = items;
    let n = keys.len();
    let insert = if generated.iter().all(|&g| g) {
        &INSERT_FRESH
    } else {
        &INSERT_MANY
    };
    // Per element: its id and whether this call inserted it, once known.
    let mut outcome: Vec<Option<(i64, bool)>> = vec![None; n];
    let mut todo: Vec<usize> = (0..n).collect();
    let (mut inserted, mut due) = (0u32, false);
    Spi::connect_mut(|client| {
        for _ in 0..3 {
            let params = ManyParams {
                queue: &queue,
                keys: todo.iter().map(|&i| keys[i].clone()).collect(),
                payloads: todo.iter().map(|&i| payloads[i].clone()).collect(),
                priority,
                run_at: run_at
                    .as_ref()
                    .map(|r| todo.iter().map(|&i| r[i]).collect()),
                max_attempts,
            };
            let mut new: HashMap<String, i64> = plans::run(client, insert, params, |rows| {
                let mut new = HashMap::with_capacity(rows.len());
                for row in rows {
                    let id = row
                        .get::<i64>(1)?
                        .ok_or(WorkfenceError::UnexpectedNull { column: "id" })?;
                    let key = row
                        .get::<String>(2)?
                        .ok_or(WorkfenceError::UnexpectedNull { column: "key" })?;
                    due |= row.get::<bool>(3)?.unwrap_or(false);
                    new.insert(key, id);
                }
                Ok(new)
            })?;
            inserted += new.len() as u32;
            // The first element of each inserted key is the insert (taken
            // out of `new`); a later one with the same key finds it.
            let mut rest = Vec::new();
            for &i in &todo {
                match new.remove(&keys[i]) {
                    Some(id) => outcome[i] = Some((id, true)),
                    None => rest.push(i),
                }
            }
            todo = rest;
            if todo.is_empty() {
                break;
            }
            let wanted: Vec<String> = todo.iter().map(|&i| keys[i].clone()).collect();
            let found: HashMap<String, i64> = plans::run(
                client,
                &EXISTING_MANY,
                ExistingParams {
                    queue: &queue,
                    keys: wanted,
                },
                |rows| {
                    let mut found = HashMap::with_capacity(rows.len());
                    for row in rows {
                        let key = row
                            .get::<String>(1)?
                            .ok_or(WorkfenceError::UnexpectedNull { column: "key" })?;
                        let id = row
                            .get::<i64>(2)?
                            .ok_or(WorkfenceError::UnexpectedNull { column: "id" })?;
                        found.insert(key, id);
                    }
                    Ok(found)
                },
            )?;
            todo.retain(|&i| match found.get(&keys[i]) {
                Some(&id) => {
                    outcome[i] = Some((id, false));
                    false
                }
                None => true,
            });
            if todo.is_empty() {
                break;
            }
        }
        if let Some(&i) = todo.first() {
            return Err(WorkfenceError::KeyChurn {
                queue: queue.clone(),
                key: keys[i].clone(),
            });
        }
        counters::count(&queue, Event::Enqueued, u64::from(inserted));
        counters::moved(&queue, None, Some(ItemState::Pending), i64::from(inserted));
        if due {
            notify::enqueued(client, &queue)?;
        }
        if inserted > 0 {
            wait::wake_after_commit(&queue, inserted);
        }
        Ok(())
    })?;
    // (Every element has its outcome: the loop ends only when none is left.)
    Ok(keys
        .into_iter()
        .zip(outcome)
        .filter_map(|(key, o)| o.map(|(id, inserted)| (id, key, inserted)))
        .collect())
}
