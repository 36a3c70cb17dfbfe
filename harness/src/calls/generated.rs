// Generated from sql/functions.toml by `cargo run -p workfence-surface`: do not edit.
// `cargo run -p workfence-surface -- --check` (and the checklist test) fails while it is stale.

//! The typed bindings of the extension's SQL functions, generated: one per
//! `[[function]]` of `sql/functions.toml` (one per overload), the only place
//! that function's call is written as SQL. The hand calls of [`super`] wrap
//! them in the harness's types; call those.
//!
//! - Every argument is a parameter bound with its type (`query_typed`: no
//!   named prepared statement, so a call also works through PgBouncer in
//!   transaction pooling mode): `text` is `&str`, `bigint` `i64`, `integer`
//!   `i32`, `boolean` `bool`, `jsonb` `&Value`, `bigint[]` `&[i64]`,
//!   `jsonb[]` `&[Value]`; an `interval` is interval text (`'30 seconds'`),
//!   cast by the server; a `timestamp with time zone` is a [`super::RunAt`].
//! - An argument with a `DEFAULT` is an `Option`: `Some` passes it by name
//!   (`name => $n`), `None` leaves it out, so the server's default applies
//!   (and the call works against a version that lacks the argument).
//! - A scalar result is its Rust type (`void`: `()`). A `TABLE(...)` result
//!   is a `Vec` of a row struct, one per distinct result (named after the
//!   first function with it: `work_claim_key` reads `WorkClaimRow`), every
//!   column an `Option` (the
//!   catalog does not say which columns are never NULL), times and intervals
//!   as the server renders them (`::text`).
//! - A binding has its function's name; an overload after the first of its
//!   name in the table is named after its arguments (`NAME_by_ARG_ARG`).
//! - Errors are the server's, its SQLSTATE in the [`postgres::Error`]
//!   ([`super::SqlState`]).

use postgres::types::Type;
use postgres::{GenericClient, Row};
use serde_json::Value;

use super::{Call, CallResult, RunAt};

/// A row of the result of [`work_enqueue`] and [`work_enqueue_many`] (its `RETURNS TABLE`), every
/// column an `Option`: the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkEnqueueRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `key text`.
    pub key: Option<String>,
    /// `inserted boolean`.
    pub inserted: Option<bool>,
}

impl WorkEnqueueRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkEnqueueRow> {
        Ok(WorkEnqueueRow {
            id: row.try_get(0)?,
            key: row.try_get(1)?,
            inserted: row.try_get(2)?,
        })
    }
}

/// `workfence.work_enqueue`: adds an item (idempotent by key, or debounced and re-run with
/// `on_conflict`), due at `run_at`, optionally in a serial group.
///
/// ```sql
/// workfence.work_enqueue(queue text, payload jsonb DEFAULT '{}', key text DEFAULT NULL,
///     run_at timestamp with time zone DEFAULT NULL, priority integer DEFAULT 0,
///     max_attempts integer DEFAULT 25, max_run interval DEFAULT NULL, group_key text DEFAULT NULL,
///     on_conflict text DEFAULT 'keep', trace text DEFAULT NULL, after bigint[] DEFAULT NULL,
///     on_parent_failure text DEFAULT 'cancel')
/// RETURNS TABLE(id bigint, key text, inserted boolean)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
#[allow(clippy::too_many_arguments)]
pub fn work_enqueue(
    c: &mut impl GenericClient,
    queue: &str,
    payload: Option<&Value>,
    key: Option<&str>,
    run_at: Option<&RunAt>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    max_run: Option<&str>,
    group_key: Option<&str>,
    on_conflict: Option<&str>,
    trace: Option<&str>,
    after: Option<&[i64]>,
    on_parent_failure: Option<&str>,
) -> CallResult<Vec<WorkEnqueueRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.inserted \
         FROM workfence.work_enqueue(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.named("payload", &payload, Type::JSONB, "");
    call.named("key", &key, Type::TEXT, "");
    call.named_at("run_at", run_at);
    call.named("priority", &priority, Type::INT4, "");
    call.named("max_attempts", &max_attempts, Type::INT4, "");
    call.named("max_run", &max_run, Type::TEXT, "::interval");
    call.named("group_key", &group_key, Type::TEXT, "");
    call.named("on_conflict", &on_conflict, Type::TEXT, "");
    call.named("trace", &trace, Type::TEXT, "");
    call.named("after", &after, Type::INT8_ARRAY, "");
    call.named("on_parent_failure", &on_parent_failure, Type::TEXT, "");
    call.rows(c, ") AS r", WorkEnqueueRow::read)
}

/// `workfence.work_enqueue_many`: adds many items of one queue in one statement (bulk enqueue),
/// each judged as `work_enqueue` judges one.
///
/// ```sql
/// workfence.work_enqueue_many(queue text, payloads jsonb[], keys text[] DEFAULT NULL,
///     run_at timestamp with time zone[] DEFAULT NULL, priority integer DEFAULT 0,
///     max_attempts integer DEFAULT 25, group_keys text[] DEFAULT NULL,
///     on_conflict text DEFAULT 'keep')
/// RETURNS TABLE(id bigint, key text, inserted boolean)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
#[allow(clippy::too_many_arguments)]
pub fn work_enqueue_many(
    c: &mut impl GenericClient,
    queue: &str,
    payloads: &[Value],
    keys: Option<&[Option<&str>]>,
    run_at: Option<&[Option<&str>]>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    group_keys: Option<&[Option<&str>]>,
    on_conflict: Option<&str>,
) -> CallResult<Vec<WorkEnqueueRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.inserted \
         FROM workfence.work_enqueue_many(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&payloads, Type::JSONB_ARRAY, "");
    call.named("keys", &keys, Type::TEXT_ARRAY, "");
    call.named("run_at", &run_at, Type::TEXT_ARRAY, "::timestamptz[]");
    call.named("priority", &priority, Type::INT4, "");
    call.named("max_attempts", &max_attempts, Type::INT4, "");
    call.named("group_keys", &group_keys, Type::TEXT_ARRAY, "");
    call.named("on_conflict", &on_conflict, Type::TEXT, "");
    call.rows(c, ") AS r", WorkEnqueueRow::read)
}

/// A row of the result of [`work_claim`] and [`work_claim_key`] (its `RETURNS TABLE`), every column
/// an `Option`: the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkClaimRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `key text`.
    pub key: Option<String>,
    /// `payload jsonb`.
    pub payload: Option<Value>,
    /// `epoch bigint`.
    pub epoch: Option<i64>,
    /// `attempt integer`.
    pub attempt: Option<i32>,
    /// `lease_until timestamp with time zone`, as the server renders it (`::text`).
    pub lease_until: Option<String>,
    /// `progress jsonb`.
    pub progress: Option<Value>,
    /// `trace text`.
    pub trace: Option<String>,
}

impl WorkClaimRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkClaimRow> {
        Ok(WorkClaimRow {
            id: row.try_get(0)?,
            key: row.try_get(1)?,
            payload: row.try_get(2)?,
            epoch: row.try_get(3)?,
            attempt: row.try_get(4)?,
            lease_until: row.try_get(5)?,
            progress: row.try_get(6)?,
            trace: row.try_get(7)?,
        })
    }
}

/// `workfence.work_claim`: claims due items or lapsed leases, each under a fresh epoch; can
/// long-poll (`wait`).
///
/// ```sql
/// workfence.work_claim(queue text, owner text, lease interval, max_items integer DEFAULT 1,
///     wait interval DEFAULT '00:00:00')
/// RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
///     lease_until timestamp with time zone, progress jsonb, trace text)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
    max_items: Option<i32>,
    wait: Option<&str>,
) -> CallResult<Vec<WorkClaimRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.payload, r.epoch, r.attempt, r.lease_until::text, \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress', \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'trace' \
         FROM workfence.work_claim(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&lease, Type::TEXT, "::interval");
    call.named("max_items", &max_items, Type::INT4, "");
    call.named("wait", &wait, Type::TEXT, "::interval");
    call.rows(c, ") AS r", WorkClaimRow::read)
}

/// `workfence.work_claim_key`: claims one named item under `work_claim`'s rules.
///
/// ```sql
/// workfence.work_claim_key(queue text, key text, owner text, lease interval)
/// RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
///     lease_until timestamp with time zone, progress jsonb, trace text)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_claim_key(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    owner: &str,
    lease: &str,
) -> CallResult<Vec<WorkClaimRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.payload, r.epoch, r.attempt, r.lease_until::text, \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress', \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'trace' \
         FROM workfence.work_claim_key(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&key, Type::TEXT, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&lease, Type::TEXT, "::interval");
    call.rows(c, ") AS r", WorkClaimRow::read)
}

/// `workfence.work_renew`: extends the lease of a current token; false: stop the job.
///
/// ```sql
/// workfence.work_renew(id bigint, owner text, epoch bigint, lease interval)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_renew(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
    lease: &str,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_renew(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.arg(&lease, Type::TEXT, "::interval");
    call.value(c, ")")
}

/// `workfence.work_finish`: marks the item done under the current token, with an optional result.
///
/// ```sql
/// workfence.work_finish(id bigint, owner text, epoch bigint, result jsonb DEFAULT NULL)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_finish(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
    result: Option<&Value>,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_finish(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.named("result", &result, Type::JSONB, "");
    call.value(c, ")")
}

/// A row of the result of [`work_finish_many`] (its `RETURNS TABLE`), every column an `Option`: the
/// catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkFinishManyRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `finished boolean`.
    pub finished: Option<bool>,
}

impl WorkFinishManyRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkFinishManyRow> {
        Ok(WorkFinishManyRow {
            id: row.try_get(0)?,
            finished: row.try_get(1)?,
        })
    }
}

/// `workfence.work_finish_many`: `work_finish` for many tokens in one statement.
///
/// ```sql
/// workfence.work_finish_many(owner text, ids bigint[], epochs bigint[],
///     results jsonb[] DEFAULT NULL)
/// RETURNS TABLE(id bigint, finished boolean)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_finish_many(
    c: &mut impl GenericClient,
    owner: &str,
    ids: &[i64],
    epochs: &[i64],
    results: Option<&[Value]>,
) -> CallResult<Vec<WorkFinishManyRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.finished \
         FROM workfence.work_finish_many(",
    );
    call.arg(&owner, Type::TEXT, "");
    call.arg(&ids, Type::INT8_ARRAY, "");
    call.arg(&epochs, Type::INT8_ARRAY, "");
    call.named("results", &results, Type::JSONB_ARRAY, "");
    call.rows(c, ") AS r", WorkFinishManyRow::read)
}

/// A row of the result of [`work_finish_and_claim`] and [`work_fail_and_claim`] (its `RETURNS
/// TABLE`), every column an `Option`: the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkFinishAndClaimRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `key text`.
    pub key: Option<String>,
    /// `payload jsonb`.
    pub payload: Option<Value>,
    /// `epoch bigint`.
    pub epoch: Option<i64>,
    /// `attempt integer`.
    pub attempt: Option<i32>,
    /// `lease_until timestamp with time zone`, as the server renders it (`::text`).
    pub lease_until: Option<String>,
    /// `settled boolean`.
    pub settled: Option<bool>,
    /// `progress jsonb`.
    pub progress: Option<Value>,
    /// `trace text`.
    pub trace: Option<String>,
}

impl WorkFinishAndClaimRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkFinishAndClaimRow> {
        Ok(WorkFinishAndClaimRow {
            id: row.try_get(0)?,
            key: row.try_get(1)?,
            payload: row.try_get(2)?,
            epoch: row.try_get(3)?,
            attempt: row.try_get(4)?,
            lease_until: row.try_get(5)?,
            settled: row.try_get(6)?,
            progress: row.try_get(7)?,
            trace: row.try_get(8)?,
        })
    }
}

/// `workfence.work_finish_and_claim`: finishes one item and claims the next in one statement and
/// one commit.
///
/// ```sql
/// workfence.work_finish_and_claim(queue text, owner text, lease interval, last_id bigint,
///     last_epoch bigint, result jsonb DEFAULT NULL, max_items integer DEFAULT 1)
/// RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
///     lease_until timestamp with time zone, settled boolean, progress jsonb, trace text)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
#[allow(clippy::too_many_arguments)]
pub fn work_finish_and_claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
    last_id: i64,
    last_epoch: i64,
    result: Option<&Value>,
    max_items: Option<i32>,
) -> CallResult<Vec<WorkFinishAndClaimRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.payload, r.epoch, r.attempt, r.lease_until::text, r.settled, \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress', \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'trace' \
         FROM workfence.work_finish_and_claim(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&lease, Type::TEXT, "::interval");
    call.arg(&last_id, Type::INT8, "");
    call.arg(&last_epoch, Type::INT8, "");
    call.named("result", &result, Type::JSONB, "");
    call.named("max_items", &max_items, Type::INT4, "");
    call.rows(c, ") AS r", WorkFinishAndClaimRow::read)
}

/// `workfence.work_fail_and_claim`: fails one item and claims the next in one statement and one
/// commit.
///
/// ```sql
/// workfence.work_fail_and_claim(queue text, owner text, lease interval, last_id bigint,
///     last_epoch bigint, error text, retry_in interval DEFAULT NULL, max_items integer DEFAULT 1)
/// RETURNS TABLE(id bigint, key text, payload jsonb, epoch bigint, attempt integer,
///     lease_until timestamp with time zone, settled boolean, progress jsonb, trace text)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
#[allow(clippy::too_many_arguments)]
pub fn work_fail_and_claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
    last_id: i64,
    last_epoch: i64,
    error: &str,
    retry_in: Option<&str>,
    max_items: Option<i32>,
) -> CallResult<Vec<WorkFinishAndClaimRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.payload, r.epoch, r.attempt, r.lease_until::text, r.settled, \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress', \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'trace' \
         FROM workfence.work_fail_and_claim(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&lease, Type::TEXT, "::interval");
    call.arg(&last_id, Type::INT8, "");
    call.arg(&last_epoch, Type::INT8, "");
    call.arg(&error, Type::TEXT, "");
    call.named("retry_in", &retry_in, Type::TEXT, "::interval");
    call.named("max_items", &max_items, Type::INT4, "");
    call.rows(c, ") AS r", WorkFinishAndClaimRow::read)
}

/// `workfence.work_release`: hands a claimed item back unfinished, attempt given back.
///
/// ```sql
/// workfence.work_release(id bigint, owner text, epoch bigint, delay interval DEFAULT '00:00:00')
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_release(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
    delay: Option<&str>,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_release(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.named("delay", &delay, Type::TEXT, "::interval");
    call.value(c, ")")
}

/// `workfence.work_fail`: records an error; retries with backoff, or dead-letters the last attempt.
///
/// ```sql
/// workfence.work_fail(id bigint, owner text, epoch bigint, error text,
///     retry_in interval DEFAULT NULL)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_fail(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
    error: &str,
    retry_in: Option<&str>,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_fail(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.arg(&error, Type::TEXT, "");
    call.named("retry_in", &retry_in, Type::TEXT, "::interval");
    call.value(c, ")")
}

/// `workfence.work_progress`: stores a checkpoint of the current run under its token; the next
/// claim of the item returns it.
///
/// ```sql
/// workfence.work_progress(id bigint, owner text, epoch bigint, progress jsonb)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_progress(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
    progress: &Value,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_progress(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.arg(&progress, Type::JSONB, "");
    call.value(c, ")")
}

/// `workfence.work_parent_results`: under the current lease, the results of the item's parents
/// (workflows): `{"<parent id>": result}`.
///
/// ```sql
/// workfence.work_parent_results(id bigint, owner text, epoch bigint)
/// RETURNS jsonb
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_parent_results(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
) -> CallResult<Value> {
    let mut call = Call::new("SELECT workfence.work_parent_results(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.value(c, ")")
}

/// A row of the result of [`work_workflow`] (its `RETURNS TABLE`), every column an `Option`: the
/// catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkWorkflowRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `queue text`.
    pub queue: Option<String>,
    /// `key text`.
    pub key: Option<String>,
    /// `state text`.
    pub state: Option<String>,
    /// `depth integer`.
    pub depth: Option<i32>,
    /// `parents bigint[]`.
    pub parents: Option<Vec<i64>>,
}

impl WorkWorkflowRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkWorkflowRow> {
        Ok(WorkWorkflowRow {
            id: row.try_get(0)?,
            queue: row.try_get(1)?,
            key: row.try_get(2)?,
            state: row.try_get(3)?,
            depth: row.try_get(4)?,
            parents: row.try_get(5)?,
        })
    }
}

/// `workfence.work_workflow`: the workflow graph around an item: its ancestors and descendants,
/// each with its state and parents.
///
/// ```sql
/// workfence.work_workflow(id bigint)
/// RETURNS TABLE(id bigint, queue text, key text, state text, depth integer, parents bigint[])
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_workflow(c: &mut impl GenericClient, id: i64) -> CallResult<Vec<WorkWorkflowRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.queue, r.key, r.state, r.depth, r.parents \
         FROM workfence.work_workflow(",
    );
    call.arg(&id, Type::INT8, "");
    call.rows(c, ") AS r", WorkWorkflowRow::read)
}

/// `workfence.work_assert`: raises 55000 unless the token is current; fences the transaction's
/// writes.
///
/// ```sql
/// workfence.work_assert(id bigint, owner text, epoch bigint)
/// RETURNS void
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_assert(c: &mut impl GenericClient, id: i64, owner: &str, epoch: i64) -> CallResult<()> {
    let mut call = Call::new("SELECT workfence.work_assert(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.void(c, ")")
}

/// `workfence.work_cancel`: cancels a pending or claimed item; its holder's token is refused.
///
/// ```sql
/// workfence.work_cancel(queue text, key text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_cancel(c: &mut impl GenericClient, queue: &str, key: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_cancel(");
    call.arg(&queue, Type::TEXT, "");
    call.arg(&key, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_purge`: deletes finished items older than an interval, never waiting on locks.
///
/// ```sql
/// workfence.work_purge(older_than interval DEFAULT '7 days', queue text DEFAULT NULL)
/// RETURNS bigint
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_purge(
    c: &mut impl GenericClient,
    older_than: Option<&str>,
    queue: Option<&str>,
) -> CallResult<i64> {
    let mut call = Call::new("SELECT workfence.work_purge(");
    call.named("older_than", &older_than, Type::TEXT, "::interval");
    call.named("queue", &queue, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_lease_status`: says why a token is or is not honoured.
///
/// ```sql
/// workfence.work_lease_status(id bigint, owner text, epoch bigint)
/// RETURNS text
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_lease_status(
    c: &mut impl GenericClient,
    id: i64,
    owner: &str,
    epoch: i64,
) -> CallResult<String> {
    let mut call = Call::new("SELECT workfence.work_lease_status(");
    call.arg(&id, Type::INT8, "");
    call.arg(&owner, Type::TEXT, "");
    call.arg(&epoch, Type::INT8, "");
    call.value(c, ")")
}

/// `workfence.work_retry`: puts a failed or cancelled item back to pending.
///
/// ```sql
/// workfence.work_retry(queue text, key text, run_at timestamp with time zone DEFAULT NULL)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_retry(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    run_at: Option<&RunAt>,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_retry(");
    call.arg(&queue, Type::TEXT, "");
    call.arg(&key, Type::TEXT, "");
    call.named_at("run_at", run_at);
    call.value(c, ")")
}

/// `workfence.work_reschedule`: moves a pending item's `run_at`.
///
/// ```sql
/// workfence.work_reschedule(queue text, key text, run_at timestamp with time zone)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_reschedule(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    run_at: &RunAt,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_reschedule(");
    call.arg(&queue, Type::TEXT, "");
    call.arg(&key, Type::TEXT, "");
    call.at(run_at);
    call.value(c, ")")
}

/// `workfence.work_pause`: stops claims of the queue until `work_resume`.
///
/// ```sql
/// workfence.work_pause(queue text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_pause(c: &mut impl GenericClient, queue: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_pause(");
    call.arg(&queue, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_resume`: ends a pause and wakes the queue's long polls.
///
/// ```sql
/// workfence.work_resume(queue text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_resume(c: &mut impl GenericClient, queue: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_resume(");
    call.arg(&queue, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_limit`: sets the queue's concurrency, rate and per-group limits.
///
/// ```sql
/// workfence.work_limit(queue text, concurrency integer DEFAULT NULL, rate integer DEFAULT NULL,
///     per interval DEFAULT '00:00:01', per_group integer DEFAULT NULL)
/// RETURNS void
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_limit(
    c: &mut impl GenericClient,
    queue: &str,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: Option<&str>,
    per_group: Option<i32>,
) -> CallResult<()> {
    let mut call = Call::new("SELECT workfence.work_limit(");
    call.arg(&queue, Type::TEXT, "");
    call.named("concurrency", &concurrency, Type::INT4, "");
    call.named("rate", &rate, Type::INT4, "");
    call.named("per", &per, Type::TEXT, "::interval");
    call.named("per_group", &per_group, Type::INT4, "");
    call.void(c, ")")
}

/// `workfence.work_schedule`: creates or replaces a cron schedule: one item per slot, each slot
/// fired once.
///
/// ```sql
/// workfence.work_schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
///     timezone text DEFAULT 'UTC', catch_up text DEFAULT 'latest', priority integer DEFAULT 0,
///     max_attempts integer DEFAULT 25, group_key text DEFAULT NULL)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
#[allow(clippy::too_many_arguments)]
pub fn work_schedule(
    c: &mut impl GenericClient,
    name: &str,
    cron: &str,
    queue: &str,
    payload: Option<&Value>,
    timezone: Option<&str>,
    catch_up: Option<&str>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    group_key: Option<&str>,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_schedule(");
    call.arg(&name, Type::TEXT, "");
    call.arg(&cron, Type::TEXT, "");
    call.arg(&queue, Type::TEXT, "");
    call.named("payload", &payload, Type::JSONB, "");
    call.named("timezone", &timezone, Type::TEXT, "");
    call.named("catch_up", &catch_up, Type::TEXT, "");
    call.named("priority", &priority, Type::INT4, "");
    call.named("max_attempts", &max_attempts, Type::INT4, "");
    call.named("group_key", &group_key, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_unschedule`: removes a schedule; the items it fired stay.
///
/// ```sql
/// workfence.work_unschedule(name text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_unschedule(c: &mut impl GenericClient, name: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_unschedule(");
    call.arg(&name, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_pause_schedule`: stops a schedule's fires until `work_resume_schedule`.
///
/// ```sql
/// workfence.work_pause_schedule(name text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_pause_schedule(c: &mut impl GenericClient, name: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_pause_schedule(");
    call.arg(&name, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_resume_schedule`: resumes a paused schedule; `catch_up` decides the slots it
/// missed.
///
/// ```sql
/// workfence.work_resume_schedule(name text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_resume_schedule(c: &mut impl GenericClient, name: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_resume_schedule(");
    call.arg(&name, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_fire_schedules`: fires every due slot of every schedule now (from pg_cron, a
/// client, an operator).
///
/// ```sql
/// workfence.work_fire_schedules()
/// RETURNS integer
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_fire_schedules(c: &mut impl GenericClient) -> CallResult<i32> {
    let call = Call::new("SELECT workfence.work_fire_schedules(");
    call.value(c, ")")
}

/// A row of the result of [`work_item`] and [`work_item_by_id`] (its `RETURNS TABLE`), every column
/// an `Option`: the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkItemRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `queue text`.
    pub queue: Option<String>,
    /// `key text`.
    pub key: Option<String>,
    /// `state text`.
    pub state: Option<String>,
    /// `priority integer`.
    pub priority: Option<i32>,
    /// `run_at timestamp with time zone`, as the server renders it (`::text`).
    pub run_at: Option<String>,
    /// `attempts integer`.
    pub attempts: Option<i32>,
    /// `max_attempts integer`.
    pub max_attempts: Option<i32>,
    /// `owner text`.
    pub owner: Option<String>,
    /// `epoch bigint`.
    pub epoch: Option<i64>,
    /// `claimed_at timestamp with time zone`, as the server renders it (`::text`).
    pub claimed_at: Option<String>,
    /// `lease_until timestamp with time zone`, as the server renders it (`::text`).
    pub lease_until: Option<String>,
    /// `errors jsonb`.
    pub errors: Option<Value>,
    /// `result jsonb`.
    pub result: Option<Value>,
    /// `created_at timestamp with time zone`, as the server renders it (`::text`).
    pub created_at: Option<String>,
    /// `finished_at timestamp with time zone`, as the server renders it (`::text`).
    pub finished_at: Option<String>,
    /// `payload jsonb`.
    pub payload: Option<Value>,
    /// `max_run interval`, as the server renders it (`::text`).
    pub max_run: Option<String>,
    /// `group_key text`.
    pub group_key: Option<String>,
    /// `progress jsonb`.
    pub progress: Option<Value>,
}

impl WorkItemRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkItemRow> {
        Ok(WorkItemRow {
            id: row.try_get(0)?,
            queue: row.try_get(1)?,
            key: row.try_get(2)?,
            state: row.try_get(3)?,
            priority: row.try_get(4)?,
            run_at: row.try_get(5)?,
            attempts: row.try_get(6)?,
            max_attempts: row.try_get(7)?,
            owner: row.try_get(8)?,
            epoch: row.try_get(9)?,
            claimed_at: row.try_get(10)?,
            lease_until: row.try_get(11)?,
            errors: row.try_get(12)?,
            result: row.try_get(13)?,
            created_at: row.try_get(14)?,
            finished_at: row.try_get(15)?,
            payload: row.try_get(16)?,
            max_run: row.try_get(17)?,
            group_key: row.try_get(18)?,
            progress: row.try_get(19)?,
        })
    }
}

/// `workfence.work_item(queue, key)`: one item as an operator sees it, by queue and key.
///
/// ```sql
/// workfence.work_item(queue text, key text)
/// RETURNS TABLE(id bigint, queue text, key text, state text, priority integer,
///     run_at timestamp with time zone, attempts integer, max_attempts integer, owner text,
///     epoch bigint, claimed_at timestamp with time zone, lease_until timestamp with time zone,
///     errors jsonb, result jsonb, created_at timestamp with time zone,
///     finished_at timestamp with time zone, payload jsonb, max_run interval, group_key text,
///     progress jsonb)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_item(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
) -> CallResult<Vec<WorkItemRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.queue, r.key, r.state, r.priority, r.run_at::text, r.attempts, \
         r.max_attempts, r.owner, r.epoch, r.claimed_at::text, r.lease_until::text, r.errors, \
         r.result, r.created_at::text, r.finished_at::text, r.payload, r.max_run::text, \
         r.group_key, pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress' \
         FROM workfence.work_item(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&key, Type::TEXT, "");
    call.rows(c, ") AS r", WorkItemRow::read)
}

/// `workfence.work_item(id)`: one item as an operator sees it, by id.
///
/// ```sql
/// workfence.work_item(id bigint)
/// RETURNS TABLE(id bigint, queue text, key text, state text, priority integer,
///     run_at timestamp with time zone, attempts integer, max_attempts integer, owner text,
///     epoch bigint, claimed_at timestamp with time zone, lease_until timestamp with time zone,
///     errors jsonb, result jsonb, created_at timestamp with time zone,
///     finished_at timestamp with time zone, payload jsonb, max_run interval, group_key text,
///     progress jsonb)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_item_by_id(c: &mut impl GenericClient, id: i64) -> CallResult<Vec<WorkItemRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.queue, r.key, r.state, r.priority, r.run_at::text, r.attempts, \
         r.max_attempts, r.owner, r.epoch, r.claimed_at::text, r.lease_until::text, r.errors, \
         r.result, r.created_at::text, r.finished_at::text, r.payload, r.max_run::text, \
         r.group_key, pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress' \
         FROM workfence.work_item(",
    );
    call.arg(&id, Type::INT8, "");
    call.rows(c, ") AS r", WorkItemRow::read)
}

/// A row of the result of [`work_await`] (its `RETURNS TABLE`), every column an `Option`: the
/// catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkAwaitRow {
    /// `state text`.
    pub state: Option<String>,
    /// `result jsonb`.
    pub result: Option<Value>,
    /// `last_error text`.
    pub last_error: Option<String>,
}

impl WorkAwaitRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkAwaitRow> {
        Ok(WorkAwaitRow {
            state: row.try_get(0)?,
            result: row.try_get(1)?,
            last_error: row.try_get(2)?,
        })
    }
}

/// `workfence.work_await`: waits in the server for an item's outcome: done, failed or cancelled, or
/// `wait` passes.
///
/// ```sql
/// workfence.work_await(queue text, key text, wait interval DEFAULT '00:00:00')
/// RETURNS TABLE(state text, result jsonb, last_error text)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_await(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    wait: Option<&str>,
) -> CallResult<Vec<WorkAwaitRow>> {
    let mut call = Call::new(
        "SELECT r.state, r.result, r.last_error \
         FROM workfence.work_await(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.arg(&key, Type::TEXT, "");
    call.named("wait", &wait, Type::TEXT, "::interval");
    call.rows(c, ") AS r", WorkAwaitRow::read)
}

/// A row of the result of [`work_items`] (its `RETURNS TABLE`), every column an `Option`: the
/// catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkItemsRow {
    /// `id bigint`.
    pub id: Option<i64>,
    /// `key text`.
    pub key: Option<String>,
    /// `state text`.
    pub state: Option<String>,
    /// `priority integer`.
    pub priority: Option<i32>,
    /// `run_at timestamp with time zone`, as the server renders it (`::text`).
    pub run_at: Option<String>,
    /// `attempts integer`.
    pub attempts: Option<i32>,
    /// `max_attempts integer`.
    pub max_attempts: Option<i32>,
    /// `owner text`.
    pub owner: Option<String>,
    /// `epoch bigint`.
    pub epoch: Option<i64>,
    /// `claimed_at timestamp with time zone`, as the server renders it (`::text`).
    pub claimed_at: Option<String>,
    /// `lease_until timestamp with time zone`, as the server renders it (`::text`).
    pub lease_until: Option<String>,
    /// `created_at timestamp with time zone`, as the server renders it (`::text`).
    pub created_at: Option<String>,
    /// `finished_at timestamp with time zone`, as the server renders it (`::text`).
    pub finished_at: Option<String>,
    /// `group_key text`.
    pub group_key: Option<String>,
    /// `last_error text`.
    pub last_error: Option<String>,
    /// `progress jsonb`.
    pub progress: Option<Value>,
}

impl WorkItemsRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<WorkItemsRow> {
        Ok(WorkItemsRow {
            id: row.try_get(0)?,
            key: row.try_get(1)?,
            state: row.try_get(2)?,
            priority: row.try_get(3)?,
            run_at: row.try_get(4)?,
            attempts: row.try_get(5)?,
            max_attempts: row.try_get(6)?,
            owner: row.try_get(7)?,
            epoch: row.try_get(8)?,
            claimed_at: row.try_get(9)?,
            lease_until: row.try_get(10)?,
            created_at: row.try_get(11)?,
            finished_at: row.try_get(12)?,
            group_key: row.try_get(13)?,
            last_error: row.try_get(14)?,
            progress: row.try_get(15)?,
        })
    }
}

/// `workfence.work_items`: a keyset-paged list of a queue's items, by state.
///
/// ```sql
/// workfence.work_items(queue text, state text DEFAULT NULL, after bigint DEFAULT NULL,
///     max integer DEFAULT 50)
/// RETURNS TABLE(id bigint, key text, state text, priority integer,
///     run_at timestamp with time zone, attempts integer, max_attempts integer, owner text,
///     epoch bigint, claimed_at timestamp with time zone, lease_until timestamp with time zone,
///     created_at timestamp with time zone, finished_at timestamp with time zone, group_key text,
///     last_error text, progress jsonb)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_items(
    c: &mut impl GenericClient,
    queue: &str,
    state: Option<&str>,
    after: Option<i64>,
    max: Option<i32>,
) -> CallResult<Vec<WorkItemsRow>> {
    let mut call = Call::new(
        "SELECT r.id, r.key, r.state, r.priority, r.run_at::text, r.attempts, r.max_attempts, \
         r.owner, r.epoch, r.claimed_at::text, r.lease_until::text, r.created_at::text, \
         r.finished_at::text, r.group_key, r.last_error, \
         pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->) 'progress' \
         FROM workfence.work_items(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.named("state", &state, Type::TEXT, "");
    call.named("after", &after, Type::INT8, "");
    call.named("max", &max, Type::INT4, "");
    call.rows(c, ") AS r", WorkItemsRow::read)
}

/// A row of the result of [`queue_counters`] (its `RETURNS TABLE`), every column an `Option`: the
/// catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueCountersRow {
    /// `refused bigint`.
    pub refused: Option<i64>,
    /// `lapsed bigint`.
    pub lapsed: Option<i64>,
}

impl QueueCountersRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<QueueCountersRow> {
        Ok(QueueCountersRow {
            refused: row.try_get(0)?,
            lapsed: row.try_get(1)?,
        })
    }
}

/// `workfence.queue_counters`: refused stale tokens and lapsed leases of a queue since the server
/// started.
///
/// ```sql
/// workfence.queue_counters(queue text)
/// RETURNS TABLE(refused bigint, lapsed bigint)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn queue_counters(
    c: &mut impl GenericClient,
    queue: &str,
) -> CallResult<Vec<QueueCountersRow>> {
    let mut call = Call::new(
        "SELECT r.refused, r.lapsed \
         FROM workfence.queue_counters(",
    );
    call.arg(&queue, Type::TEXT, "");
    call.rows(c, ") AS r", QueueCountersRow::read)
}

/// A row of the result of [`queue_counter_rows`] (its `RETURNS TABLE`), every column an `Option`:
/// the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueCounterRowsRow {
    /// `queue text`.
    pub queue: Option<String>,
    /// `enqueued bigint`.
    pub enqueued: Option<i64>,
    /// `claimed bigint`.
    pub claimed: Option<i64>,
    /// `done bigint`.
    pub done: Option<i64>,
    /// `failed bigint`.
    pub failed: Option<i64>,
    /// `retried bigint`.
    pub retried: Option<i64>,
    /// `released bigint`.
    pub released: Option<i64>,
    /// `cancelled bigint`.
    pub cancelled: Option<i64>,
    /// `refused bigint`.
    pub refused: Option<i64>,
    /// `lapsed bigint`.
    pub lapsed: Option<i64>,
    /// `bucket_le double precision[]`.
    pub bucket_le: Option<Vec<f64>>,
    /// `time_in_queue_buckets bigint[]`.
    pub time_in_queue_buckets: Option<Vec<i64>>,
    /// `time_in_queue_sum double precision`.
    pub time_in_queue_sum: Option<f64>,
    /// `run_time_buckets bigint[]`.
    pub run_time_buckets: Option<Vec<i64>>,
    /// `run_time_sum double precision`.
    pub run_time_sum: Option<f64>,
}

impl QueueCounterRowsRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<QueueCounterRowsRow> {
        Ok(QueueCounterRowsRow {
            queue: row.try_get(0)?,
            enqueued: row.try_get(1)?,
            claimed: row.try_get(2)?,
            done: row.try_get(3)?,
            failed: row.try_get(4)?,
            retried: row.try_get(5)?,
            released: row.try_get(6)?,
            cancelled: row.try_get(7)?,
            refused: row.try_get(8)?,
            lapsed: row.try_get(9)?,
            bucket_le: row.try_get(10)?,
            time_in_queue_buckets: row.try_get(11)?,
            time_in_queue_sum: row.try_get(12)?,
            run_time_buckets: row.try_get(13)?,
            run_time_sum: row.try_get(14)?,
        })
    }
}

/// `workfence.queue_counter_rows`: what each queue's items went through since the server started:
/// the rows of `work_queue_counters`.
///
/// ```sql
/// workfence.queue_counter_rows()
/// RETURNS TABLE(queue text, enqueued bigint, claimed bigint, done bigint, failed bigint,
///     retried bigint, released bigint, cancelled bigint, refused bigint, lapsed bigint,
///     bucket_le double precision[], time_in_queue_buckets bigint[],
///     time_in_queue_sum double precision, run_time_buckets bigint[],
///     run_time_sum double precision)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn queue_counter_rows(c: &mut impl GenericClient) -> CallResult<Vec<QueueCounterRowsRow>> {
    let call = Call::new(
        "SELECT r.queue, r.enqueued, r.claimed, r.done, r.failed, r.retried, r.released, \
         r.cancelled, r.refused, r.lapsed, r.bucket_le, r.time_in_queue_buckets, \
         r.time_in_queue_sum, r.run_time_buckets, r.run_time_sum \
         FROM workfence.queue_counter_rows(",
    );
    call.rows(c, ") AS r", QueueCounterRowsRow::read)
}

/// A row of the result of [`queue_history_rows`] (its `RETURNS TABLE`), every column an `Option`:
/// the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueHistoryRowsRow {
    /// `queue text`.
    pub queue: Option<String>,
    /// `minute timestamp with time zone`, as the server renders it (`::text`).
    pub minute: Option<String>,
    /// `enqueued bigint`.
    pub enqueued: Option<i64>,
    /// `claimed bigint`.
    pub claimed: Option<i64>,
    /// `done bigint`.
    pub done: Option<i64>,
    /// `failed bigint`.
    pub failed: Option<i64>,
    /// `time_in_queue_p50 double precision`.
    pub time_in_queue_p50: Option<f64>,
    /// `time_in_queue_p99 double precision`.
    pub time_in_queue_p99: Option<f64>,
    /// `backlog bigint`.
    pub backlog: Option<i64>,
}

impl QueueHistoryRowsRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<QueueHistoryRowsRow> {
        Ok(QueueHistoryRowsRow {
            queue: row.try_get(0)?,
            minute: row.try_get(1)?,
            enqueued: row.try_get(2)?,
            claimed: row.try_get(3)?,
            done: row.try_get(4)?,
            failed: row.try_get(5)?,
            time_in_queue_p50: row.try_get(6)?,
            time_in_queue_p99: row.try_get(7)?,
            backlog: row.try_get(8)?,
        })
    }
}

/// `workfence.queue_history_rows`: each queue's last hour, minute by minute (throughput, time in
/// queue, backlog): the rows of `work_queue_history`.
///
/// ```sql
/// workfence.queue_history_rows(queue text DEFAULT NULL)
/// RETURNS TABLE(queue text, minute timestamp with time zone, enqueued bigint, claimed bigint,
///     done bigint, failed bigint, time_in_queue_p50 double precision,
///     time_in_queue_p99 double precision, backlog bigint)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn queue_history_rows(
    c: &mut impl GenericClient,
    queue: Option<&str>,
) -> CallResult<Vec<QueueHistoryRowsRow>> {
    let mut call = Call::new(
        "SELECT r.queue, r.minute::text, r.enqueued, r.claimed, r.done, r.failed, \
         r.time_in_queue_p50, r.time_in_queue_p99, r.backlog \
         FROM workfence.queue_history_rows(",
    );
    call.named("queue", &queue, Type::TEXT, "");
    call.rows(c, ") AS r", QueueHistoryRowsRow::read)
}

/// A row of the result of [`queue_state_counts`] (its `RETURNS TABLE`), every column an `Option`:
/// the catalog does not say which are never NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStateCountsRow {
    /// `queue text`.
    pub queue: Option<String>,
    /// `pending bigint`.
    pub pending: Option<i64>,
    /// `claimed bigint`.
    pub claimed: Option<i64>,
    /// `done bigint`.
    pub done: Option<i64>,
    /// `failed bigint`.
    pub failed: Option<i64>,
    /// `cancelled bigint`.
    pub cancelled: Option<i64>,
    /// `waiting bigint`.
    pub waiting: Option<i64>,
}

impl QueueStateCountsRow {
    /// The row's columns, in the order of the select list.
    fn read(row: &Row) -> CallResult<QueueStateCountsRow> {
        Ok(QueueStateCountsRow {
            queue: row.try_get(0)?,
            pending: row.try_get(1)?,
            claimed: row.try_get(2)?,
            done: row.try_get(3)?,
            failed: row.try_get(4)?,
            cancelled: row.try_get(5)?,
            waiting: row.try_get(6)?,
        })
    }
}

/// `workfence.queue_state_counts`: how many of each queue's items are in each state, kept by the
/// server: what `work_queue_stats` reads.
///
/// ```sql
/// workfence.queue_state_counts(rebuild boolean DEFAULT false)
/// RETURNS TABLE(queue text, pending bigint, claimed bigint, done bigint, failed bigint,
///     cancelled bigint, waiting bigint)
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn queue_state_counts(
    c: &mut impl GenericClient,
    rebuild: Option<bool>,
) -> CallResult<Vec<QueueStateCountsRow>> {
    let mut call = Call::new(
        "SELECT r.queue, r.pending, r.claimed, r.done, r.failed, r.cancelled, r.waiting \
         FROM workfence.queue_state_counts(",
    );
    call.named("rebuild", &rebuild, Type::BOOL, "");
    call.rows(c, ") AS r", QueueStateCountsRow::read)
}

/// `workfence.work_grant`: lets a role use a capability on queues.
///
/// ```sql
/// workfence.work_grant(capability text, queues text, role text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_grant(
    c: &mut impl GenericClient,
    capability: &str,
    queues: &str,
    role: &str,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_grant(");
    call.arg(&capability, Type::TEXT, "");
    call.arg(&queues, Type::TEXT, "");
    call.arg(&role, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_revoke`: takes a queue grant back.
///
/// ```sql
/// workfence.work_revoke(capability text, queues text, role text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_revoke(
    c: &mut impl GenericClient,
    capability: &str,
    queues: &str,
    role: &str,
) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_revoke(");
    call.arg(&capability, Type::TEXT, "");
    call.arg(&queues, Type::TEXT, "");
    call.arg(&role, Type::TEXT, "");
    call.value(c, ")")
}

/// `workfence.work_enforce_grants`: turns the checking of queue grants on or off.
///
/// ```sql
/// workfence.work_enforce_grants(enforced boolean)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_enforce_grants(c: &mut impl GenericClient, enforced: bool) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_enforce_grants(");
    call.arg(&enforced, Type::BOOL, "");
    call.value(c, ")")
}

/// `workfence.work_may`: whether the session's role may use a capability on a queue.
///
/// ```sql
/// workfence.work_may(capability text, queue text)
/// RETURNS boolean
/// ```
///
/// Errors: the server's, its SQLSTATE in the [`postgres::Error`] (the function's section of
/// `docs/reference.md` lists them).
pub fn work_may(c: &mut impl GenericClient, capability: &str, queue: &str) -> CallResult<bool> {
    let mut call = Call::new("SELECT workfence.work_may(");
    call.arg(&capability, Type::TEXT, "");
    call.arg(&queue, Type::TEXT, "");
    call.value(c, ")")
}
