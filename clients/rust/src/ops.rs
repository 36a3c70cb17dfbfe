//! Enqueue helpers and the operator's calls: one function per SQL function, on a connection the
//! caller passes (a `Client` or a `Transaction`, so that an enqueue can be part of the caller's
//! own transaction). clients/README.md, *Enqueue helpers*; docs/contract.md for each function.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio_postgres::types::Json;
use tokio_postgres::{GenericClient, Row};

use crate::error::Result;

/// `work_enqueue` up to `max_run`: the durations go as seconds through `make_interval`
/// (docs/writing-workers.md, *Passing intervals*); NULL `max_run` is no limit, NULL `run_at` now,
/// NULL `key` a UUIDv7. Alone, the call a 0.9.0 database takes; [`enqueue_sql`] adds the
/// optional named arguments that are set.
const ENQUEUE_HEAD: &str = "SELECT id, key, inserted
  FROM workfence.work_enqueue($1, $2, key => $3, run_at => $4, priority => $5,
                              max_attempts => $6, max_run => make_interval(secs => $7)";

/// The optional named arguments of `work_enqueue` the crate sends, each only when set, so that
/// an enqueue without them works against the server that predates them: `group_key` (from
/// 0.10.0), `on_conflict` (from 0.12.0), `trace` (from 0.12.0), and a workflow's `after` and
/// `on_parent_failure` (from 0.12.0, issue 37).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    GroupKey,
    OnConflict,
    Trace,
    After,
    OnParentFailure,
}

impl Named {
    /// The argument's name.
    fn name(self) -> &'static str {
        match self {
            Named::GroupKey => "group_key",
            Named::OnConflict => "on_conflict",
            Named::Trace => "trace",
            Named::After => "after",
            Named::OnParentFailure => "on_parent_failure",
        }
    }
}

/// [`ENQUEUE_HEAD`] with `named` (in this order) as `$8`, `$9`, ...
fn enqueue_sql(named: &[Named]) -> String {
    let mut sql = String::from(ENQUEUE_HEAD);
    for (i, arg) in named.iter().enumerate() {
        // Writing to a String cannot fail.
        let _ = write!(
            sql,
            ",\n                              {} => ${}",
            arg.name(),
            i + 8
        );
    }
    sql.push_str(")\n");
    sql
}

/// `work_limit` (from 0.10.0); `per` as seconds through `make_interval`.
const LIMIT_SQL: &str = "SELECT workfence.work_limit($1, concurrency => $2, rate => $3, \
     per => make_interval(secs => $4))";

/// [`LIMIT_SQL`] with `per_group` (from 0.12.0), used only when the limits set one, so that a
/// limit without it also works against a 0.11.0 database (whose `work_limit` has no such
/// argument).
const LIMIT_PER_GROUP_SQL: &str = "SELECT workfence.work_limit($1, concurrency => $2, \
     rate => $3, per => make_interval(secs => $4), per_group => $5)";

/// `work_enqueue_many` (from 0.12.0): one array per column of the items, one element per item;
/// `keys`, `run_at` and `group_keys` NULL when no item sets one (the server's defaults).
/// [`ENQUEUE_MANY_ON_CONFLICT_SQL`] adds `on_conflict`, sent only when set (as [`enqueue`]
/// does).
const ENQUEUE_MANY_SQL: &str = "SELECT id, key, inserted
  FROM workfence.work_enqueue_many($1::text, $2::jsonb[], keys => $3::text[],
                                   run_at => $4::timestamptz[], priority => $5::integer,
                                   max_attempts => $6::integer, group_keys => $7::text[])";

/// [`ENQUEUE_MANY_SQL`] with `on_conflict => $8`.
const ENQUEUE_MANY_ON_CONFLICT_SQL: &str = "SELECT id, key, inserted
  FROM workfence.work_enqueue_many($1::text, $2::jsonb[], keys => $3::text[],
                                   run_at => $4::timestamptz[], priority => $5::integer,
                                   max_attempts => $6::integer, group_keys => $7::text[],
                                   on_conflict => $8::text)";

/// The columns of `work_item`'s row `i`: all of them (read by name, so that a column a
/// version added, such as 0.12.0's `progress`, is read where there is one), and `max_run` as
/// seconds (tokio-postgres has no interval type).
const ITEM_COLUMNS: &str = "i.*, extract(epoch FROM i.max_run)::float8 AS max_run_seconds";

/// The optional arguments of [`enqueue`]; `EnqueueOptions::default()` gives the server's
/// defaults (docs/contract.md, `work_enqueue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// The item's key, unique within its queue (at most 512 bytes). `None`: the server generates
    /// a UUIDv7. An enqueue with a key the queue already has returns that item unchanged
    /// (`inserted = false`), so a submit can be repeated safely; unless
    /// [`EnqueueOptions::on_conflict`] says otherwise.
    pub key: Option<String>,
    /// Not claimable before this time. `None`: now, by the server's clock.
    pub run_at: Option<SystemTime>,
    /// Lower is claimed first (default 0).
    pub priority: i32,
    /// How many claims the item may have, 1..1000 (default 25, the server's default).
    pub max_attempts: i32,
    /// A limit on run time: no claim or renew sets the lease beyond `claimed_at + max_run`
    /// (from 0.6.0), in (0, 365 days]. `None`: no limit.
    pub max_run: Option<Duration>,
    /// The item's serial group (from 0.10.0): at most one item of a (queue, group_key) is
    /// claimed at a time, in claim order (priority, run_at, id); other groups run in parallel.
    /// Non-empty, at most 128 bytes, no control characters. `None`: no group (and then the
    /// enqueue also works against a 0.9.0 database: the argument is sent only when set).
    pub group_key: Option<String>,
    /// What an enqueue of a key the queue already has does (from 0.12.0; [`OnConflict`]).
    /// `None`: the server's default, [`OnConflict::Keep`] (and then the enqueue also works
    /// against a 0.11.0 database: the argument is sent only when set).
    pub on_conflict: Option<OnConflict>,
    /// The item's trace context (from 0.12.0): a W3C `traceparent` header value,
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, stored with the item and handed to
    /// every claim of it ([`crate::Job::trace`]), so that the job's run can be linked to the
    /// enqueue. Sent unchanged; the server refuses a malformed one
    /// ([`crate::Error::InvalidArgument`], 22023). `None`: with the `otel` feature, the current
    /// OpenTelemetry span's traceparent when there is a valid one (README.md, *Tracing*);
    /// otherwise none (and then the enqueue also works against a 0.11.0 database: the argument
    /// is sent only when there is a trace). With [`OnConflict::Replace`] or
    /// [`OnConflict::PreserveRunAt`] an existing item takes the new call's trace along with its
    /// payload; [`OnConflict::Keep`] leaves it.
    pub trace: Option<String>,
    /// The ids of the items this one waits for (from 0.12.0, workflows: its *parents*, in any
    /// queue of the database, at most 1000 distinct ids), as [`Enqueued::id`] gave them. The
    /// item is `waiting` until every parent is done, then pending (due at its `run_at`), and its
    /// handler reads their results with [`crate::Job::parent_results`]. Edges are made only at
    /// the insert: an existing key's `after` is ignored. Empty (the default): no parents (and
    /// then the enqueue also works against a database before workflows: the argument is sent
    /// only when it names an id).
    pub after: Vec<i64>,
    /// What a parent that ends failed (for good) or cancelled does to the waiting item (from
    /// 0.12.0; [`OnParentFailure`]). `None`: the server's default, [`OnParentFailure::Cancel`]
    /// (and the argument is not sent).
    pub on_parent_failure: Option<OnParentFailure>,
}

/// What a parent that ends `failed` (for good) or `cancelled` does to an item enqueued with
/// [`EnqueueOptions::after`] while it waits (`work_enqueue`'s `on_parent_failure`, from 0.12.0;
/// docs/reference.md, `work_enqueue`). A failure with attempts left is a retry: the item keeps
/// waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnParentFailure {
    /// `cancel`, the server's default: the waiting item is cancelled (its `last_error` names the
    /// parent, `parent <id> ended failed`), and so are its own waiting descendants that say
    /// `cancel`, in the same transaction. A `retry` of the parent brings them back to waiting.
    Cancel,
    /// `run`: the parent counts as ended, so the item runs once all its parents have ended,
    /// whatever their outcome; [`crate::Job::parent_results`] shows the failed one as
    /// `{"state": "failed" | "cancelled", "error": <its last error>}`.
    Run,
}

impl OnParentFailure {
    /// The server's name: `cancel` or `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnParentFailure::Cancel => "cancel",
            OnParentFailure::Run => "run",
        }
    }
}

/// What [`enqueue`] does when the queue already has an item with the key (`work_enqueue`'s
/// `on_conflict`, from 0.12.0; docs/reference.md, `work_enqueue`). [`Enqueued::inserted`] is
/// true only when a new item was inserted: false whenever the key existed, kept or updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnConflict {
    /// `keep`, the server's default: the existing item is returned unchanged.
    Keep,
    /// `replace` (debounce): a pending item takes the new payload and `run_at` (none: now).
    /// A finished item (done, failed, cancelled) is pending again with them, its attempts
    /// counted afresh (its errors kept, its result cleared); a claimed item takes the new
    /// payload at once and runs exactly once more after its current run ends (the holder's
    /// token keeps working, with the old payload in hand).
    Replace,
    /// `preserve_run_at` (throttle): as [`OnConflict::Replace`], but a pending item keeps its
    /// `run_at`.
    PreserveRunAt,
}

impl OnConflict {
    /// The server's name: `keep`, `replace` or `preserve_run_at`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnConflict::Keep => "keep",
            OnConflict::Replace => "replace",
            OnConflict::PreserveRunAt => "preserve_run_at",
        }
    }
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        EnqueueOptions {
            key: None,
            run_at: None,
            priority: 0,
            max_attempts: 25,
            max_run: None,
            group_key: None,
            on_conflict: None,
            trace: None,
            after: Vec::new(),
            on_parent_failure: None,
        }
    }
}

impl EnqueueOptions {
    /// The options with `key` set.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The options with `run_at` set.
    pub fn run_at(mut self, run_at: SystemTime) -> Self {
        self.run_at = Some(run_at);
        self
    }

    /// The options with `priority` set.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The options with `max_attempts` set.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The options with `max_run` set.
    pub fn max_run(mut self, max_run: Duration) -> Self {
        self.max_run = Some(max_run);
        self
    }

    /// The options with `group_key` set.
    pub fn group_key(mut self, group_key: impl Into<String>) -> Self {
        self.group_key = Some(group_key.into());
        self
    }

    /// The options with `on_conflict` set (from 0.12.0; sent only when set).
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = Some(on_conflict);
        self
    }

    /// The options with `trace` set: a W3C `traceparent` value, sent unchanged (from 0.12.0).
    pub fn trace(mut self, traceparent: impl Into<String>) -> Self {
        self.trace = Some(traceparent.into());
        self
    }

    /// The options with `after` set: the ids of the items this one waits for (from 0.12.0;
    /// sent only when it names an id).
    pub fn after(mut self, parents: impl IntoIterator<Item = i64>) -> Self {
        self.after = parents.into_iter().collect();
        self
    }

    /// The options with `on_parent_failure` set (from 0.12.0; sent only when set).
    pub fn on_parent_failure(mut self, on_parent_failure: OnParentFailure) -> Self {
        self.on_parent_failure = Some(on_parent_failure);
        self
    }
}

/// What [`enqueue`] returns: the item's id and key, and whether this call inserted it (false:
/// the queue already had an item with that key, returned unchanged or, with
/// [`EnqueueOptions::on_conflict`] `Replace` or `PreserveRunAt`, updated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The item's id (unique across shards).
    pub id: i64,
    /// The item's key (the generated one when none was given).
    pub key: String,
    /// True only if this call inserted a new item.
    pub inserted: bool,
}

/// Adds a `pending` item to `queue` with `payload` (`work_enqueue`); with
/// [`EnqueueOptions::after`] (from 0.12.0) a `waiting` one, a step of a workflow.
///
/// `client` is any tokio-postgres client or transaction: the enqueue commits with the caller's
/// transaction. Errors: [`crate::Error::NullArgument`] (22004),
/// [`crate::Error::InvalidArgument`] (22023: bad queue, key or run_at, `max_attempts` out of
/// 1..1000, `max_run` out of range, bad `group_key`, a malformed `trace`, over 1000 parents),
/// [`crate::Error::UnknownParent`] (23503: an `after` id of no item, or of one in a queue the
/// role may not read), [`crate::Error::NotPermitted`] (42501: no `enqueue` grant),
/// [`crate::Error::SerializationFailure`] (40001: raced a purge three times; retry). A
/// `group_key` against a 0.9.0 database, or an `on_conflict`, a `trace`, an `after` or an
/// `on_parent_failure` against one older than 0.12.0, is [`crate::Error::Database`] 42883 (no
/// such function).
///
/// With the `otel` feature and no [`EnqueueOptions::trace`], the current OpenTelemetry span's
/// traceparent is sent when there is a valid one and the database's `work_enqueue` takes a
/// trace (asked once per process with a read of `pg_proc`, and again a minute after an answer
/// of no), so that an older database is served without it.
pub async fn enqueue(
    client: &impl GenericClient,
    queue: &str,
    payload: &Value,
    options: &EnqueueOptions,
) -> Result<Enqueued> {
    let trace = match &options.trace {
        Some(trace) => Some(trace.clone()),
        None => current_trace(client).await?,
    };
    let max_run = options.max_run.map(|d| d.as_secs_f64());
    let payload = Json(payload);
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &queue,
        &payload,
        &options.key,
        &options.run_at,
        &options.priority,
        &options.max_attempts,
        &max_run,
    ];
    let mut named = Vec::new();
    if let Some(group_key) = &options.group_key {
        params.push(group_key);
        named.push(Named::GroupKey);
    }
    let on_conflict = options.on_conflict.map(OnConflict::as_str);
    if let Some(on_conflict) = &on_conflict {
        params.push(on_conflict);
        named.push(Named::OnConflict);
    }
    if let Some(trace) = &trace {
        params.push(trace);
        named.push(Named::Trace);
    }
    if !options.after.is_empty() {
        params.push(&options.after);
        named.push(Named::After);
    }
    let on_parent_failure = options.on_parent_failure.map(OnParentFailure::as_str);
    if let Some(on_parent_failure) = &on_parent_failure {
        params.push(on_parent_failure);
        named.push(Named::OnParentFailure);
    }
    let row = client.query_one(&enqueue_sql(&named), &params).await?;
    Ok(Enqueued {
        id: row.try_get("id")?,
        key: row.try_get("key")?,
        inserted: row.try_get("inserted")?,
    })
}

/// One item of [`enqueue_many`] (from 0.12.0): what differs from item to item of one call.
/// `EnqueueItem::new(payload)` gives the server's defaults for the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueItem {
    /// The item's payload, any JSON value.
    pub payload: Value,
    /// The item's key, unique within its queue (at most 512 bytes). `None`: the server generates
    /// a UUIDv7. A key the queue already has, or one an earlier item of the same call has,
    /// returns that item (`inserted = false`), kept or changed as
    /// [`EnqueueManyOptions::on_conflict`] says.
    pub key: Option<String>,
    /// Not claimable before this time. `None`: now, by the server's clock.
    pub run_at: Option<SystemTime>,
    /// The item's serial group, as [`EnqueueOptions::group_key`] (non-empty, at most 128 bytes,
    /// no control characters). `None`: no group.
    pub group_key: Option<String>,
}

impl EnqueueItem {
    /// An item with `payload`, no key (a generated UUIDv7), due now, in no group.
    pub fn new(payload: Value) -> Self {
        EnqueueItem {
            payload,
            key: None,
            run_at: None,
            group_key: None,
        }
    }

    /// The item with `key` set.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The item with `run_at` set.
    pub fn run_at(mut self, run_at: SystemTime) -> Self {
        self.run_at = Some(run_at);
        self
    }

    /// The item with `group_key` set.
    pub fn group_key(mut self, group_key: impl Into<String>) -> Self {
        self.group_key = Some(group_key.into());
        self
    }
}

/// The options every item of one [`enqueue_many`] call shares;
/// `EnqueueManyOptions::default()` gives the server's defaults (docs/contract.md,
/// `work_enqueue_many`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnqueueManyOptions {
    /// Lower is claimed first (default 0).
    pub priority: i32,
    /// How many claims each item may have, 1..1000 (default 25, the server's default).
    pub max_attempts: i32,
    /// What an item whose key the queue already has (or an earlier item of the call has) does,
    /// as [`EnqueueOptions::on_conflict`]. `None`: the server's default, [`OnConflict::Keep`]
    /// (and the argument is not sent).
    pub on_conflict: Option<OnConflict>,
}

impl Default for EnqueueManyOptions {
    fn default() -> Self {
        EnqueueManyOptions {
            priority: 0,
            max_attempts: 25,
            on_conflict: None,
        }
    }
}

impl EnqueueManyOptions {
    /// The options with `priority` set.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The options with `max_attempts` set.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The options with `on_conflict` set (sent only when set).
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = Some(on_conflict);
        self
    }
}

/// Adds many `pending` items to `queue` in one statement (`work_enqueue_many`, from 0.12.0) and
/// returns one [`Enqueued`] per item, **in the items' order** (`key` the generated one for an
/// item without a key).
///
/// Each item is judged as [`enqueue`] with its `payload`, `key`, `run_at` and `group_key` and
/// the shared `options` would judge it, one after the other: a key the queue already has, or one
/// an earlier item of the same call has, returns that item with `inserted = false` (unchanged
/// under [`OnConflict::Keep`], the default, or changed as [`EnqueueManyOptions::on_conflict`]
/// says). `client` is any tokio-postgres client or transaction: the items commit (or roll back)
/// together, with the caller's transaction. At most 10,000 items per call: enqueue more in
/// several calls (in one transaction if they must commit together). No `max_run`, `after` or
/// `trace` (`work_enqueue_many` has none): the items carry no trace context, even with the
/// `otel` feature; enqueue those with [`enqueue`]. No items: nothing enqueued, an empty `Vec`.
///
/// Errors: [`crate::Error::InvalidArgument`] (22023: over 10,000 items, a bad queue, key,
/// run_at or group_key, `max_attempts` out of 1..1000), [`crate::Error::NullArgument`] (22004),
/// [`crate::Error::NotPermitted`] (42501: no `enqueue` grant covering the queue, or, for an
/// `on_conflict` running a cancelled item again, no `operate` grant),
/// [`crate::Error::SerializationFailure`] (40001: raced a purge three times; retry);
/// [`crate::Error::Database`] 25000 (an `on_conflict` changing a pending item of a group under
/// REPEATABLE READ or SERIALIZABLE) and 42883 (a database older than 0.12.0).
pub async fn enqueue_many(
    client: &impl GenericClient,
    queue: &str,
    items: &[EnqueueItem],
    options: &EnqueueManyOptions,
) -> Result<Vec<Enqueued>> {
    // One element per item in every array, so that they are always as long as each other; a
    // column no item sets is NULL (the server's default for every item).
    fn column<'a, T>(
        items: &'a [EnqueueItem],
        pick: impl Fn(&'a EnqueueItem) -> Option<T>,
    ) -> Option<Vec<Option<T>>> {
        let values: Vec<Option<T>> = items.iter().map(pick).collect();
        values.iter().any(Option::is_some).then_some(values)
    }
    let payloads: Vec<Json<&Value>> = items.iter().map(|i| Json(&i.payload)).collect();
    let keys = column(items, |i| i.key.as_deref());
    let run_at = column(items, |i| i.run_at);
    let group_keys = column(items, |i| i.group_key.as_deref());
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &queue,
        &payloads,
        &keys,
        &run_at,
        &options.priority,
        &options.max_attempts,
        &group_keys,
    ];
    let on_conflict = options.on_conflict.map(OnConflict::as_str);
    let sql = match &on_conflict {
        Some(on_conflict) => {
            params.push(on_conflict);
            ENQUEUE_MANY_ON_CONFLICT_SQL
        }
        None => ENQUEUE_MANY_SQL,
    };
    client
        .query(sql, &params)
        .await?
        .iter()
        .map(|row| {
            Ok(Enqueued {
                id: row.try_get("id")?,
                key: row.try_get("key")?,
                inserted: row.try_get("inserted")?,
            })
        })
        .collect()
}

/// Without the `otel` feature an enqueue without a trace sends none.
#[cfg(not(feature = "otel"))]
async fn current_trace(_client: &impl GenericClient) -> Result<Option<String>> {
    Ok(None)
}

/// The current OpenTelemetry span's traceparent, when there is a valid span and the database's
/// `work_enqueue` takes a `trace` ([`takes_trace`]).
#[cfg(feature = "otel")]
async fn current_trace(client: &impl GenericClient) -> Result<Option<String>> {
    let Some(trace) = crate::otel::current_traceparent() else {
        return Ok(None);
    };
    Ok(takes_trace(client).await?.then_some(trace))
}

/// Whether `work_enqueue` has a `trace` argument (from 0.12.0).
#[cfg(feature = "otel")]
const TAKES_TRACE_SQL: &str = "SELECT EXISTS (
  SELECT FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
   WHERE n.nspname = 'workfence' AND p.proname = 'work_enqueue' AND 'trace' = ANY (p.proargnames))";

/// How long an answer of no from [`takes_trace`] is kept before the database is asked again
/// (an `ALTER EXTENSION pg_workfence UPDATE` is then noticed).
#[cfg(feature = "otel")]
const TAKES_TRACE_NO_FOR: Duration = Duration::from_secs(60);

/// What [`takes_trace`] last learned: `Some(None)` yes (kept), `Some(Some(at))` no, asked at
/// `at`; `None` not asked yet.
#[cfg(feature = "otel")]
static TAKES_TRACE: std::sync::Mutex<Option<Option<std::time::Instant>>> =
    std::sync::Mutex::new(None);

/// Whether the database's `work_enqueue` takes a `trace` (0.12.0 and later): asked with
/// [`TAKES_TRACE_SQL`] on `client` the first time, the answer kept for the process (a no for
/// [`TAKES_TRACE_NO_FOR`]), so that only the first traced enqueue pays a round trip. One answer
/// for every database the process enqueues into: a process enqueueing into databases of mixed
/// versions passes [`EnqueueOptions::trace`] itself.
#[cfg(feature = "otel")]
async fn takes_trace(client: &impl GenericClient) -> Result<bool> {
    let known = *TAKES_TRACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match known {
        Some(None) => return Ok(true),
        Some(Some(at)) if at.elapsed() < TAKES_TRACE_NO_FOR => return Ok(false),
        _ => {}
    }
    let takes: bool = client.query_one(TAKES_TRACE_SQL, &[]).await?.try_get(0)?;
    *TAKES_TRACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        Some((!takes).then(std::time::Instant::now));
    Ok(takes)
}

/// Runs `sql`, a call of one boolean SQL function, with `params`.
pub(crate) async fn call_bool(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<bool> {
    Ok(client.query_one(sql, params).await?.try_get(0)?)
}

/// Puts a `failed` or `cancelled` item back to `pending`, due at `run_at` (`None`: now), with at
/// least one more attempt (`work_retry`, from 0.6.0). True if it changed the item; false in any
/// other state or for a missing item. Errors: 22004, 22023 (bad queue, key or run_at), 42501
/// (no `operate` grant).
pub async fn retry(
    client: &impl GenericClient,
    queue: &str,
    key: &str,
    run_at: Option<SystemTime>,
) -> Result<bool> {
    call_bool(
        client,
        "SELECT workfence.work_retry($1, $2, $3)",
        &[&queue, &key, &run_at],
    )
    .await
}

/// Moves a `pending` item's `run_at` (`work_reschedule`, from 0.6.0). True if it changed the
/// item. Errors: 22004, 22023, 42501 (no `operate` grant).
pub async fn reschedule(
    client: &impl GenericClient,
    queue: &str,
    key: &str,
    run_at: SystemTime,
) -> Result<bool> {
    call_bool(
        client,
        "SELECT workfence.work_reschedule($1, $2, $3)",
        &[&queue, &key, &run_at],
    )
    .await
}

/// Moves a `pending` item's `run_at` to `delay` after now by the server's clock
/// (`now() + delay`, `now()` being the start of the caller's transaction): "run it now"
/// (`Duration::ZERO`) or "in ten minutes" without trusting this machine's clock, as
/// [`reschedule`] with a `SystemTime` would (`work_reschedule`, from 0.6.0). True if it changed
/// the item. Errors: 22004, 22023 (bad queue or key), 22008 in [`crate::Error::Database`]
/// (`now() + delay` past the timestamp range, some 290,000 years), 42501 (no `operate` grant).
pub async fn reschedule_in(
    client: &impl GenericClient,
    queue: &str,
    key: &str,
    delay: Duration,
) -> Result<bool> {
    call_bool(
        client,
        "SELECT workfence.work_reschedule($1, $2, pg_catalog.now() OPERATOR(pg_catalog.+) \
         pg_catalog.make_interval(secs => $3))",
        &[&queue, &key, &delay.as_secs_f64()],
    )
    .await
}

/// Cancels a `pending` or `claimed` item (`work_cancel`): its tokens are dead from then on, so a
/// worker running it has its next renew refused. From 0.12.0 also a `waiting` one; the cancel
/// reaches its waiting children (cancelled with it, transitively, but for those enqueued with
/// [`OnParentFailure::Run`], which count it as ended). True if it changed the item. Errors: 22004,
/// 22023, 42501 (no `operate` grant).
pub async fn cancel(client: &impl GenericClient, queue: &str, key: &str) -> Result<bool> {
    call_bool(
        client,
        "SELECT workfence.work_cancel($1, $2)",
        &[&queue, &key],
    )
    .await
}

/// Pauses `queue` (`work_pause`, from 0.6.0): claims hand nothing out until [`resume`]. True if
/// the queue was not paused. Errors: 22004, 22023, 42501 (no `operate` grant).
pub async fn pause(client: &impl GenericClient, queue: &str) -> Result<bool> {
    call_bool(client, "SELECT workfence.work_pause($1)", &[&queue]).await
}

/// Ends a pause and wakes the queue's long polls (`work_resume`, from 0.6.0). True if the queue
/// was paused. Errors: 22004, 22023, 42501 (no `operate` grant).
pub async fn resume(client: &impl GenericClient, queue: &str) -> Result<bool> {
    call_bool(client, "SELECT workfence.work_resume($1)", &[&queue]).await
}

/// A queue's limits, for [`limit`] (`work_limit`, from 0.10.0). `Limits::default()` (every
/// limit `None`) lifts every limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many items of the queue claimed at once, across all workers (a lapsed lease
    /// keeps its slot until the item is claimed anew or dead-lettered), 1..10000. `None`: no
    /// limit.
    pub concurrency: Option<i32>,
    /// At most this many items handed out by claims in any window of length [`Limits::per`],
    /// 1..10000. `None`: no limit.
    pub rate: Option<i32>,
    /// The rate's sliding window, in (0, 1 day] (default 1 s, the server's default).
    pub per: Duration,
    /// At most this many items of one `group_key` claimed at once (from 0.12.0), 1..10000.
    /// `None`: 1, serial groups (and then the call also works against a 0.11.0 database: the
    /// argument is sent only when set).
    pub per_group: Option<i32>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            concurrency: None,
            rate: None,
            per: Duration::from_secs(1),
            per_group: None,
        }
    }
}

impl Limits {
    /// The limits with `concurrency` set.
    pub fn concurrency(mut self, concurrency: i32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// The limits with `rate` items per `per` set.
    pub fn rate(mut self, rate: i32, per: Duration) -> Self {
        self.rate = Some(rate);
        self.per = per;
        self
    }

    /// The limits with `per_group` set (from 0.12.0).
    pub fn per_group(mut self, per_group: i32) -> Self {
        self.per_group = Some(per_group);
        self
    }
}

/// Sets `queue`'s limits (`work_limit`, from 0.10.0), replacing them all: a `None` in `limits`
/// lifts that limit (`per_group`: back to 1, serial groups), `Limits::default()` lifts them all.
/// Claims that would exceed a limit hand out fewer items, or none; they never block. Takes
/// effect when the caller's transaction commits. `per_group` is sent only when set, so a call
/// without it also works against a 0.11.0 database. Errors: [`crate::Error::NullArgument`]
/// (22004), [`crate::Error::InvalidArgument`] (22023: bad queue, `concurrency`, `rate` or
/// `per_group` out of 1..10000, `per` out of (0, 1 day]), [`crate::Error::NotPermitted`] (42501:
/// no `operate` grant).
pub async fn limit(client: &impl GenericClient, queue: &str, limits: &Limits) -> Result<()> {
    let per = limits.per.as_secs_f64();
    match &limits.per_group {
        None => {
            client
                .execute(
                    LIMIT_SQL,
                    &[&queue, &limits.concurrency, &limits.rate, &per],
                )
                .await?
        }
        Some(per_group) => {
            client
                .execute(
                    LIMIT_PER_GROUP_SQL,
                    &[&queue, &limits.concurrency, &limits.rate, &per, per_group],
                )
                .await?
        }
    };
    Ok(())
}

/// One item as an operator sees it (`work_item`): the contract's columns, its payload and
/// `max_run`. Times are the server's.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The item's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub key: String,
    /// `pending`, `claimed`, `done`, `failed` or `cancelled`; from 0.12.0 also `waiting`
    /// (enqueued with [`EnqueueOptions::after`], its parents not all ended).
    pub state: String,
    /// Lower is claimed first.
    pub priority: i32,
    /// Not claimable before this time.
    pub run_at: SystemTime,
    /// Claims it has had.
    pub attempts: i32,
    /// Claims it may have.
    pub max_attempts: i32,
    /// The owner of the newest claim, if any.
    pub owner: Option<String>,
    /// The newest epoch (fencing token), if ever claimed.
    pub epoch: Option<i64>,
    /// When the newest claim was made.
    pub claimed_at: Option<SystemTime>,
    /// When the newest lease lapses (or lapsed).
    pub lease_until: Option<SystemTime>,
    /// The error history, a JSON array oldest first (`{"attempt", "epoch", "owner", "at",
    /// "error"}`), the newest 20 kept.
    pub errors: Option<Value>,
    /// The result `work_finish` stored.
    pub result: Option<Value>,
    /// When it was enqueued.
    pub created_at: SystemTime,
    /// When it reached a final state.
    pub finished_at: Option<SystemTime>,
    /// The payload, as enqueued.
    pub payload: Value,
    /// The run-time limit, if any.
    pub max_run: Option<Duration>,
    /// The last checkpoint stored with `work_progress` under a current lease (from 0.12.0;
    /// `None` when none was, or from an older server).
    pub progress: Option<Value>,
}

impl Item {
    /// Reads one row of [`ITEM_COLUMNS`].
    fn from_row(row: &Row) -> Result<Self> {
        let errors: Option<Json<Value>> = row.try_get("errors")?;
        let result: Option<Json<Value>> = row.try_get("result")?;
        let Json(payload): Json<Value> = row.try_get("payload")?;
        let max_run: Option<f64> = row.try_get("max_run_seconds")?;
        let progress: Option<Json<Value>> = if row.columns().iter().any(|c| c.name() == "progress")
        {
            row.try_get("progress")?
        } else {
            None
        };
        Ok(Item {
            id: row.try_get("id")?,
            queue: row.try_get("queue")?,
            key: row.try_get("key")?,
            state: row.try_get("state")?,
            priority: row.try_get("priority")?,
            run_at: row.try_get("run_at")?,
            attempts: row.try_get("attempts")?,
            max_attempts: row.try_get("max_attempts")?,
            owner: row.try_get("owner")?,
            epoch: row.try_get("epoch")?,
            claimed_at: row.try_get("claimed_at")?,
            lease_until: row.try_get("lease_until")?,
            errors: errors.map(|Json(v)| v),
            result: result.map(|Json(v)| v),
            created_at: row.try_get("created_at")?,
            finished_at: row.try_get("finished_at")?,
            payload,
            max_run: max_run
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64),
            progress: progress.map(|Json(v)| v),
        })
    }
}

/// The item of `queue` with `key` (`work_item(queue, key)`), or `None` if there is none. Only
/// reads. Errors: 22004, 22023 (bad queue or key), 42501 (no `read` grant).
pub async fn item(client: &impl GenericClient, queue: &str, key: &str) -> Result<Option<Item>> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM workfence.work_item($1, $2) AS i");
    match client.query_opt(&sql, &[&queue, &key]).await? {
        Some(row) => Ok(Some(Item::from_row(&row)?)),
        None => Ok(None),
    }
}

/// The item with id `id` (`work_item(id)`), or `None` if there is none (or, with queue grants
/// enforced, if the role may not read its queue). Errors: 22004.
pub async fn item_by_id(client: &impl GenericClient, id: i64) -> Result<Option<Item>> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM workfence.work_item($1::bigint) AS i");
    match client.query_opt(&sql, &[&id]).await? {
        Some(row) => Ok(Some(Item::from_row(&row)?)),
        None => Ok(None),
    }
}

/// `work_workflow` (from 0.12.0): the rows in the server's order (nearest first).
const WORKFLOW_SQL: &str = r#"
SELECT id, queue, key, state, depth, parents FROM workfence.work_workflow($1::bigint)
"#;

/// One row of [`workflow`] (`work_workflow`, from 0.12.0): an item of the workflow around the
/// one asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowItem {
    /// The item's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub key: String,
    /// Its state (`waiting` included).
    pub state: String,
    /// 0 for the item asked for, -1 for its parents, -2 for theirs, ..., 1 for its children, 2
    /// for theirs: each item once, at its nearest depth.
    pub depth: i32,
    /// The ids of this item's own parents (every edge into it), so that the rows draw the graph.
    pub parents: Vec<i64>,
}

/// The workflow around item `id` (`work_workflow`, from 0.12.0), for operators and dashboards:
/// the item itself (depth 0), its ancestors and its descendants, transitively, nearest first,
/// at most 1000 rows. Empty for an unknown id (or, with queue grants enforced, an item in a
/// queue the role may not read; rows of other such queues are left out). Only reads. Errors:
/// [`crate::Error::NullArgument`] (22004), [`crate::Error::NotPermitted`] (42501), 42883 in
/// [`crate::Error::Database`] against a database older than 0.12.0.
pub async fn workflow(client: &impl GenericClient, id: i64) -> Result<Vec<WorkflowItem>> {
    client
        .query(WORKFLOW_SQL, &[&id])
        .await?
        .iter()
        .map(|row| {
            Ok(WorkflowItem {
                id: row.try_get("id")?,
                queue: row.try_get("queue")?,
                key: row.try_get("key")?,
                state: row.try_get("state")?,
                depth: row.try_get("depth")?,
                parents: row.try_get("parents")?,
            })
        })
        .collect()
}

/// `work_await` (from 0.12.0): one wait of up to `$3` seconds (the server caps it at
/// `workfence.long_poll_max`, 3 s by default).
const AWAIT_SQL: &str = r#"
SELECT state, result, last_error
  FROM workfence.work_await($1, $2, make_interval(secs => $3))
"#;

/// The longest `wait` one `work_await` call takes (the server refuses more: 22023).
const MAX_AWAIT_WAIT: Duration = Duration::from_secs(3600);

/// An item's state as [`await_result`] last saw it (`work_await`'s row).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `done`, `failed` or `cancelled` when the item finished; `pending`, `claimed` or
    /// `waiting` when the timeout ran out first.
    pub state: String,
    /// The result `work_finish` stored (`None` unless `done`, and for a NULL result).
    pub result: Option<Value>,
    /// The item's last error (`work_fail`'s text), if any; for an item a parent's end
    /// cancelled ([`OnParentFailure::Cancel`]), `parent <id> ended failed` (or `cancelled`).
    pub last_error: Option<String>,
}

impl Outcome {
    /// Whether the item finished: `done`, `failed` or `cancelled`.
    pub fn is_finished(&self) -> bool {
        matches!(self.state.as_str(), "done" | "failed" | "cancelled")
    }

    /// Reads `work_await`'s row.
    fn from_row(row: &Row) -> Result<Self> {
        let result: Option<Json<Value>> = row.try_get("result")?;
        Ok(Outcome {
            state: row.try_get("state")?,
            result: result.map(|Json(v)| v),
            last_error: row.try_get("last_error")?,
        })
    }
}

/// Waits up to `timeout` for the item of `queue` with `key` to finish (`work_await`, from
/// 0.12.0), and returns its [`Outcome`]: at once for an item that is done, failed or cancelled;
/// else as soon as its finish commits (the server wakes the call at that commit, the long poll's
/// machinery); **after `timeout`, the item's last state** (`pending` or `claimed`, no result:
/// check [`Outcome::is_finished`]). `None` when the queue has no item with that key (never
/// enqueued, or purged). `Duration::ZERO` asks once, without waiting.
///
/// The server caps one call's wait at `workfence.long_poll_max` (3 s by default): this loops over
/// calls until the item finishes or `timeout` passes, so a long timeout costs one short statement
/// every 3 s. Each call holds `client` busy for its wait; a dropped future does not stop the call
/// in flight (the server ends it at its wait, or when the connection closes). Call it on a
/// connection in autocommit (or READ COMMITTED): a wait under REPEATABLE READ or SERIALIZABLE is
/// refused (25000), as the long poll is.
///
/// Errors: [`crate::Error::NullArgument`] (22004), [`crate::Error::InvalidArgument`] (22023: bad
/// queue or key), [`crate::Error::NotPermitted`] (42501: no `read` grant on the queue), 25000 in
/// [`crate::Error::Database`] (a wait outside READ COMMITTED), 42883 against a database older than
/// 0.12.0.
pub async fn await_result(
    client: &impl GenericClient,
    queue: &str,
    key: &str,
    timeout: Duration,
) -> Result<Option<Outcome>> {
    // No deadline for a timeout past the clock's range: wait until the item finishes.
    let deadline = std::time::Instant::now().checked_add(timeout);
    loop {
        let left = deadline.map_or(MAX_AWAIT_WAIT, |deadline| {
            deadline.saturating_duration_since(std::time::Instant::now())
        });
        let wait = left.min(MAX_AWAIT_WAIT).as_secs_f64();
        let Some(row) = client.query_opt(AWAIT_SQL, &[&queue, &key, &wait]).await? else {
            return Ok(None);
        };
        let outcome = Outcome::from_row(&row)?;
        let expired = deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline);
        if outcome.is_finished() || expired {
            return Ok(Some(outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_are_the_servers_defaults() {
        let o = EnqueueOptions::default();
        assert_eq!((o.priority, o.max_attempts), (0, 25));
        assert!(o.key.is_none() && o.run_at.is_none() && o.max_run.is_none());
        let o = EnqueueOptions::default()
            .key("k")
            .priority(-1)
            .max_attempts(3)
            .max_run(Duration::from_secs(60));
        assert_eq!(o.key.as_deref(), Some("k"));
        assert_eq!((o.priority, o.max_attempts), (-1, 3));
        assert_eq!(o.max_run, Some(Duration::from_secs(60)));
        assert!(o.group_key.is_none());
        let o = EnqueueOptions::default().group_key("customer-42");
        assert_eq!(o.group_key.as_deref(), Some("customer-42"));
    }

    #[test]
    fn group_key_on_conflict_and_trace_are_sent_only_when_set() {
        // Without them the call is the one a 0.9.0 database takes.
        let plain = enqueue_sql(&[]);
        for name in ["group_key", "on_conflict", "trace"] {
            assert!(!plain.contains(name), "{name}");
        }
        assert!(plain.ends_with("max_run => make_interval(secs => $7))\n"));
        let grouped = enqueue_sql(&[Named::GroupKey]);
        assert!(grouped.contains("group_key => $8)"));
        assert!(!grouped.contains("on_conflict") && !grouped.contains("trace"));
        assert!(enqueue_sql(&[Named::OnConflict]).contains("on_conflict => $8)"));
        let traced = enqueue_sql(&[Named::Trace]);
        assert!(traced.contains("trace => $8)"));
        assert!(!traced.contains("group_key") && !traced.contains("on_conflict"));
        let all = enqueue_sql(&[Named::GroupKey, Named::OnConflict, Named::Trace]);
        assert!(all.contains("group_key => $8,"));
        assert!(all.contains("on_conflict => $9,"));
        assert!(all.contains("trace => $10)"));
        assert_eq!(
            [
                OnConflict::Keep,
                OnConflict::Replace,
                OnConflict::PreserveRunAt
            ]
            .map(OnConflict::as_str),
            ["keep", "replace", "preserve_run_at"]
        );
        let o = EnqueueOptions::default();
        assert_eq!((o.on_conflict, o.trace.as_deref()), (None, None));
        let o = o.on_conflict(OnConflict::Replace);
        assert_eq!(o.on_conflict, Some(OnConflict::Replace));
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(o.trace(tp).trace.as_deref(), Some(tp));
    }

    #[test]
    fn after_and_on_parent_failure_are_sent_only_when_set() {
        // Without them (or with an empty after) the call is the one a database before
        // workflows takes; enqueue names After only for a non-empty list.
        let o = EnqueueOptions::default();
        assert!(o.after.is_empty() && o.on_parent_failure.is_none());
        let both = enqueue_sql(&[Named::After, Named::OnParentFailure]);
        assert!(both.contains("after => $8,"));
        assert!(both.contains("on_parent_failure => $9)"));
        let all = enqueue_sql(&[
            Named::GroupKey,
            Named::OnConflict,
            Named::Trace,
            Named::After,
            Named::OnParentFailure,
        ]);
        assert!(all.contains("trace => $10,") && all.contains("after => $11,"));
        assert!(all.contains("on_parent_failure => $12)"));
        let o = o.after([3, 4]).on_parent_failure(OnParentFailure::Run);
        assert_eq!(o.after, [3, 4]);
        assert_eq!(o.on_parent_failure, Some(OnParentFailure::Run));
        assert_eq!(
            [OnParentFailure::Cancel, OnParentFailure::Run].map(OnParentFailure::as_str),
            ["cancel", "run"]
        );
    }

    #[test]
    fn enqueue_many_defaults_are_the_servers_and_on_conflict_is_sent_only_when_set() {
        let o = EnqueueManyOptions::default();
        assert_eq!((o.priority, o.max_attempts, o.on_conflict), (0, 25, None));
        let o = o
            .priority(-2)
            .max_attempts(3)
            .on_conflict(OnConflict::PreserveRunAt);
        assert_eq!(
            (o.priority, o.max_attempts, o.on_conflict),
            (-2, 3, Some(OnConflict::PreserveRunAt))
        );
        let item = EnqueueItem::new(serde_json::json!({"n": 1}));
        assert!(item.key.is_none() && item.run_at.is_none() && item.group_key.is_none());
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(60);
        let item = item.key("k").run_at(at).group_key("g");
        assert_eq!(item.key.as_deref(), Some("k"));
        assert_eq!(
            (item.run_at, item.group_key.as_deref()),
            (Some(at), Some("g"))
        );
        assert!(!ENQUEUE_MANY_SQL.contains("on_conflict"));
        assert!(ENQUEUE_MANY_ON_CONFLICT_SQL.ends_with("on_conflict => $8::text)"));
        assert!(ENQUEUE_MANY_SQL.ends_with("group_keys => $7::text[])"));
    }

    #[test]
    fn default_limits_lift_both_and_per_is_the_servers_default() {
        assert_eq!(
            Limits::default(),
            Limits {
                concurrency: None,
                rate: None,
                per: Duration::from_secs(1),
                per_group: None,
            }
        );
        let l = Limits::default()
            .concurrency(5)
            .rate(100, Duration::from_secs(60))
            .per_group(4);
        assert_eq!(
            (l.concurrency, l.rate, l.per, l.per_group),
            (Some(5), Some(100), Duration::from_secs(60), Some(4))
        );
    }

    #[test]
    fn per_group_is_sent_only_when_set() {
        // Without per_group the call is the one a 0.11.0 database takes.
        assert!(!LIMIT_SQL.contains("per_group"));
        assert!(LIMIT_PER_GROUP_SQL.contains("per_group => $5"));
    }
}
