//! One typed Rust call per SQL function of the extension: its arguments, its
//! result rows, and its errors (a [`postgres::Error`] that carries the
//! server's SQLSTATE; [`SqlState::sqlstate`] reads it).
//!
//! Every client test and the benchmark driver call the extension
//! through these. Each is a thin wrapper in the harness's types ([`Token`],
//! [`Enqueue`], [`Claim`], [`Item`], ...) over its function's binding in
//! [`generated`], which `cargo run -p workfence-surface` renders from
//! `sql/functions.toml`: the bindings are the only place a function's call is
//! written as SQL, so a change of a signature is an edit of the table (and
//! of a wrapper here when its Rust arguments change). Tests that are about
//! the SQL itself (a claim inside `LATERAL`, a cursor, a literal `NULL`
//! argument, a batch built with `generate_series`) still write that SQL out;
//! so do the reads of the views here ([`queue_stats`], [`queue_limits`],
//! [`queue_grants`]), which are not functions, and [`prepared`]'s fixed
//! statements.
//!
//! Each call is one round trip with its parameter types given
//! (`query_typed`: no named prepared statement), so the calls also work
//! through PgBouncer in transaction pooling mode. Intervals are PostgreSQL
//! interval text (`'30 seconds'`, `'00:01:00'`), cast by the server; optional
//! arguments left `None` are omitted from the call (named notation), so the
//! server's own defaults apply, as `docs/reference.md` states them.
//!
//! A row column the catalog does not promise non-NULL is an `Option` in the
//! bindings' rows; the wrappers read the columns the functions always set as
//! plain values, and panic (naming the function and column) if one is NULL,
//! as reading it with `Row::get` did.

use postgres::types::{FromSqlOwned, ToSql, Type};
use postgres::{GenericClient, Row};
use serde_json::Value;

pub use crate::protocol::Claim;

pub mod generated;

/// The result of every call: the server's error, SQLSTATE included, on failure.
pub type CallResult<T> = Result<T, postgres::Error>;

/// The SQLSTATE of an error, if the server raised it.
pub trait SqlState {
    /// The five-character SQLSTATE (e.g. `22023`), or `None` when the error
    /// did not come from the server (a broken connection).
    fn sqlstate(&self) -> Option<&str>;
}

impl SqlState for postgres::Error {
    fn sqlstate(&self) -> Option<&str> {
        self.code().map(|code| code.code())
    }
}

/// A fencing token: the item, the owner name it was claimed under, and the
/// epoch of that claim. Every token call names all three.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token {
    /// Item id.
    pub id: i64,
    /// The owner name of the claim.
    pub owner: String,
    /// The claim's epoch (the fencing token proper).
    pub epoch: i64,
}

impl Token {
    /// The token (id, owner, epoch).
    pub fn new(id: i64, owner: impl Into<String>, epoch: i64) -> Token {
        Token {
            id,
            owner: owner.into(),
            epoch,
        }
    }
}

impl Claim {
    /// The token of this claim, made under `owner`.
    pub fn token(&self, owner: &str) -> Token {
        Token::new(self.id, owner, self.epoch)
    }
}

/// A SQL call being put together by a binding of [`generated`]: its text
/// and its typed parameters.
struct Call<'a> {
    sql: String,
    params: Vec<(&'a (dyn ToSql + Sync), Type)>,
}

impl<'a> Call<'a> {
    /// `SELECT <columns> FROM workfence.<function>(` ...
    fn new(select: &str) -> Call<'a> {
        Call {
            sql: select.to_owned(),
            params: Vec::new(),
        }
    }

    /// The parameter `$n` of type `ty`, written `before$nafter` (a cast
    /// after it), as the argument `name => ...` when `name` is given.
    fn push(
        &mut self,
        name: Option<&str>,
        value: &'a (dyn ToSql + Sync),
        ty: Type,
        before: &str,
        after: &str,
    ) {
        self.params.push((value, ty));
        if !self.sql.ends_with('(') {
            self.sql.push_str(", ");
        }
        if let Some(name) = name {
            self.sql.push_str(&format!("{name} => "));
        }
        self.sql
            .push_str(&format!("{before}${}{after}", self.params.len()));
    }

    /// A positional argument `$n` of type `ty`, cast to `cast` when given.
    fn arg(&mut self, value: &'a (dyn ToSql + Sync), ty: Type, cast: &str) {
        self.push(None, value, ty, "", cast);
    }

    /// A named argument `name => $n`, omitted when `None` (the default applies).
    fn named<T: ToSql + Sync>(&mut self, name: &str, value: &'a Option<T>, ty: Type, cast: &str) {
        if let Some(value) = value {
            self.push(Some(name), value, ty, "", cast);
        }
    }

    /// A positional `timestamptz` argument, from a [`RunAt`].
    fn at(&mut self, run_at: &'a RunAt) {
        self.push_run_at(None, run_at);
    }

    /// A named `timestamptz` argument `name => ...`, from a [`RunAt`];
    /// omitted when `None` (the default applies).
    fn named_at(&mut self, name: &str, run_at: Option<&'a RunAt>) {
        if let Some(run_at) = run_at {
            self.push_run_at(Some(name), run_at);
        }
    }

    /// A [`RunAt`] bound as text: `$n::timestamptz` for a time, and for an
    /// interval from the server's clock
    /// `($n::interval OPERATOR(pg_catalog.+) pg_catalog.clock_timestamp())`.
    fn push_run_at(&mut self, name: Option<&str>, run_at: &'a RunAt) {
        match run_at {
            RunAt::At(at) => self.push(name, at, Type::TEXT, "", "::timestamptz"),
            RunAt::In(after) => self.push(
                name,
                after,
                Type::TEXT,
                "(",
                "::interval OPERATOR(pg_catalog.+) pg_catalog.clock_timestamp())",
            ),
        }
    }

    /// The text with `close` (the `)` that ends the arguments, and what
    /// follows it) appended, and the parameters.
    fn finish(mut self, close: &str) -> (String, Vec<(&'a (dyn ToSql + Sync), Type)>) {
        self.sql.push_str(close);
        (self.sql, self.params)
    }

    /// The rows of a set-returning call, each read with `read`.
    fn rows<T>(
        self,
        c: &mut impl GenericClient,
        close: &str,
        read: fn(&Row) -> CallResult<T>,
    ) -> CallResult<Vec<T>> {
        let (sql, params) = self.finish(close);
        c.query_typed(&sql, &params)?.iter().map(read).collect()
    }

    /// The value of a call that returns one (a NULL is an error, not a panic).
    fn value<T: FromSqlOwned>(self, c: &mut impl GenericClient, close: &str) -> CallResult<T> {
        let (sql, params) = self.finish(close);
        c.query_typed_one(&sql, &params)?.try_get(0)
    }

    /// A call of a function that returns `void`.
    fn void(self, c: &mut impl GenericClient, close: &str) -> CallResult<()> {
        let (sql, params) = self.finish(close);
        c.query_typed_one(&sql, &params).map(drop)
    }
}

/// A column its function always sets, from the binding's row (where every
/// column is an `Option`): panics, naming the function and the column, when
/// the server sent NULL, as reading it with `Row::get` did.
fn present<T>(value: Option<T>, function: &str, column: &str) -> T {
    value.unwrap_or_else(|| panic!("workfence.{function} returned a NULL {column}"))
}

/// The one row of a function that returns exactly one: panics, naming the
/// function, when it returned none.
fn one<T>(rows: Vec<T>, function: &str) -> T {
    rows.into_iter()
        .next()
        .unwrap_or_else(|| panic!("workfence.{function} returned no row"))
}

/// The [`Claim`] of a row of a claiming call's binding (`work_claim`,
/// `work_claim_key`, and the fused calls' rows that claimed an item).
macro_rules! claim_of {
    ($function:literal, $row:expr) => {{
        let row = $row;
        Claim {
            id: present(row.id, $function, "id"),
            key: present(row.key, $function, "key"),
            payload: present(row.payload, $function, "payload"),
            epoch: present(row.epoch, $function, "epoch"),
            attempt: present(row.attempt, $function, "attempt"),
            lease_until: present(row.lease_until, $function, "lease_until"),
        }
    }};
}

/// When an enqueued item becomes due, by the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAt {
    /// A `timestamptz` literal, e.g. `'2026-12-01 09:00:00+00'` or `'-infinity'`.
    At(String),
    /// `clock_timestamp() + interval` on the server (negative: in the past).
    In(String),
}

/// The arguments of `work_enqueue`. Only `queue` is required; each `None`
/// leaves the server's default (payload `'{}'`, a UUIDv7 key, due now,
/// priority 0, 25 attempts).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Enqueue {
    /// Queue name.
    pub queue: String,
    /// The payload.
    pub payload: Option<Value>,
    /// The key (idempotent submit); `None` for a generated UUIDv7.
    pub key: Option<String>,
    /// When it becomes due.
    pub run_at: Option<RunAt>,
    /// Lower runs first.
    pub priority: Option<i32>,
    /// Attempts before the item is failed (dead letter).
    pub max_attempts: Option<i32>,
    /// Run-time limit, interval text (from 0.6.0); `None` for no limit.
    pub max_run: Option<String>,
    /// Serial group within the queue (from 0.10.0): at most one item of a
    /// (queue, group_key) is claimed at a time, in claim order; `None` for
    /// an item in no group.
    pub group_key: Option<String>,
    /// What an enqueue of an existing key does (from 0.12.0): `keep`,
    /// `replace` or `preserve_run_at`; `None` sends nothing (keep).
    pub on_conflict: Option<String>,
    /// The W3C `traceparent` stored with the item (from 0.12.0); `None`
    /// sends nothing (no trace).
    pub trace: Option<String>,
    /// The ids of the parents the item waits for (workflows, from
    /// 0.12.0); `None` sends nothing (no parents).
    pub after: Option<Vec<i64>>,
    /// What a parent's failure does to it (from 0.12.0): `cancel` or
    /// `run`; `None` sends nothing (cancel).
    pub on_parent_failure: Option<String>,
}

impl Enqueue {
    /// An item for `queue` with every other argument at its default.
    pub fn new(queue: impl Into<String>) -> Enqueue {
        Enqueue {
            queue: queue.into(),
            ..Enqueue::default()
        }
    }

    /// With key `key`.
    pub fn key(mut self, key: impl Into<String>) -> Enqueue {
        self.key = Some(key.into());
        self
    }

    /// With payload `payload`.
    pub fn payload(mut self, payload: Value) -> Enqueue {
        self.payload = Some(payload);
        self
    }

    /// Due at `run_at`.
    pub fn run_at(mut self, run_at: RunAt) -> Enqueue {
        self.run_at = Some(run_at);
        self
    }

    /// With priority `priority`.
    pub fn priority(mut self, priority: i32) -> Enqueue {
        self.priority = Some(priority);
        self
    }

    /// With `max_attempts` attempts.
    pub fn max_attempts(mut self, max_attempts: i32) -> Enqueue {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// With the run-time limit `max_run` (interval text).
    pub fn max_run(mut self, max_run: impl Into<String>) -> Enqueue {
        self.max_run = Some(max_run.into());
        self
    }

    /// In the serial group `group_key` of its queue.
    pub fn group_key(mut self, group_key: impl Into<String>) -> Enqueue {
        self.group_key = Some(group_key.into());
        self
    }

    /// With `on_conflict` (0.12.0): `keep`, `replace`, `preserve_run_at`.
    pub fn on_conflict(mut self, mode: impl Into<String>) -> Enqueue {
        self.on_conflict = Some(mode.into());
        self
    }

    /// With a trace (0.12.0): a W3C `traceparent`.
    pub fn trace(mut self, traceparent: impl Into<String>) -> Enqueue {
        self.trace = Some(traceparent.into());
        self
    }

    /// Waiting for the items `parents` (0.12.0, workflows).
    pub fn after(mut self, parents: &[i64]) -> Enqueue {
        self.after = Some(parents.to_vec());
        self
    }

    /// With `on_parent_failure` (0.12.0): `cancel` or `run`.
    pub fn on_parent_failure(mut self, mode: impl Into<String>) -> Enqueue {
        self.on_parent_failure = Some(mode.into());
        self
    }
}

/// What `work_enqueue` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// Item id.
    pub id: i64,
    /// Item key (the generated one when none was given).
    pub key: String,
    /// False when the (queue, key) existed and was left as it was.
    pub inserted: bool,
}

/// `work_enqueue(queue, payload, key, run_at, priority, max_attempts,
/// max_run, group_key)`; `max_run` and `group_key` only when given (so the
/// call works against versions before 0.6.0 and 0.10.0 too).
pub fn enqueue(c: &mut impl GenericClient, item: &Enqueue) -> CallResult<Enqueued> {
    let rows = generated::work_enqueue(
        c,
        &item.queue,
        item.payload.as_ref(),
        item.key.as_deref(),
        item.run_at.as_ref(),
        item.priority,
        item.max_attempts,
        item.max_run.as_deref(),
        item.group_key.as_deref(),
        item.on_conflict.as_deref(),
        item.trace.as_deref(),
        item.after.as_deref(),
        item.on_parent_failure.as_deref(),
    )?;
    let row = one(rows, "work_enqueue");
    Ok(Enqueued {
        id: present(row.id, "work_enqueue", "id"),
        key: present(row.key, "work_enqueue", "key"),
        inserted: present(row.inserted, "work_enqueue", "inserted"),
    })
}

/// `work_claim(queue, owner, lease, max_items, wait)`: the claimed rows.
/// `max_items` `None` takes the default (1); `wait` `None` does not wait.
pub fn claim(
    c: &mut impl GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
    max_items: Option<i32>,
    wait: Option<&str>,
) -> CallResult<Vec<Claim>> {
    let rows = generated::work_claim(c, queue, owner, lease, max_items, wait)?;
    Ok(rows
        .into_iter()
        .map(|row| claim_of!("work_claim", row))
        .collect())
}

/// `work_claim_key(queue, key, owner, lease)`: the claim, if the item was claimable.
pub fn claim_key(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    owner: &str,
    lease: &str,
) -> CallResult<Option<Claim>> {
    let rows = generated::work_claim_key(c, queue, key, owner, lease)?;
    Ok(rows
        .into_iter()
        .next()
        .map(|row| claim_of!("work_claim_key", row)))
}

/// `work_renew(id, owner, epoch, lease)`: true when the token was current.
pub fn renew(c: &mut impl GenericClient, token: &Token, lease: &str) -> CallResult<bool> {
    generated::work_renew(c, token.id, &token.owner, token.epoch, lease)
}

/// `work_finish(id, owner, epoch, result)`: true when the token was current
/// (or already finished the item).
pub fn finish(
    c: &mut impl GenericClient,
    token: &Token,
    result: Option<&Value>,
) -> CallResult<bool> {
    generated::work_finish(c, token.id, &token.owner, token.epoch, result)
}

/// `work_finish_many(owner, ids, epochs, results)`: `(id, finished)` per item.
pub fn finish_many(
    c: &mut impl GenericClient,
    owner: &str,
    ids: &[i64],
    epochs: &[i64],
    results: Option<&[Value]>,
) -> CallResult<Vec<(i64, bool)>> {
    let rows = generated::work_finish_many(c, owner, ids, epochs, results)?;
    Ok(rows
        .into_iter()
        .map(|row| {
            (
                present(row.id, "work_finish_many", "id"),
                present(row.finished, "work_finish_many", "finished"),
            )
        })
        .collect())
}

/// What a fused call (`work_finish_and_claim`, `work_fail_and_claim`)
/// returned: whether the previous item was settled under its token, and
/// the items claimed (none when its one row had NULL item columns).
#[derive(Debug, Clone, PartialEq)]
pub struct Cycle {
    /// What `work_finish` (`work_fail`) would have returned for the previous token.
    pub settled: bool,
    /// The items claimed, in claim order.
    pub claimed: Vec<Claim>,
}

/// The [`Cycle`] of a fused call's rows: `settled` from the first (every
/// row carries the same), claims from the rows whose `id` is not NULL.
macro_rules! cycle_of {
    ($function:literal, $rows:expr) => {{
        let rows = $rows;
        Cycle {
            settled: rows
                .first()
                .is_some_and(|row| present(row.settled, $function, "settled")),
            claimed: rows
                .into_iter()
                .filter(|row| row.id.is_some())
                .map(|row| claim_of!($function, row))
                .collect(),
        }
    }};
}

/// `work_finish_and_claim(queue, owner, lease, last_id, last_epoch, result,
/// max_items)`: finish `last` (its owner is the claimer's) and claim the
/// next, in one statement.
pub fn finish_and_claim(
    c: &mut impl GenericClient,
    queue: &str,
    last: &Token,
    lease: &str,
    result: Option<&Value>,
    max_items: Option<i32>,
) -> CallResult<Cycle> {
    let rows = generated::work_finish_and_claim(
        c,
        queue,
        &last.owner,
        lease,
        last.id,
        last.epoch,
        result,
        max_items,
    )?;
    Ok(cycle_of!("work_finish_and_claim", rows))
}

/// `work_fail_and_claim(queue, owner, lease, last_id, last_epoch, error,
/// retry_in, max_items)`: record `last`'s failure and claim the next, in one
/// statement.
#[allow(clippy::too_many_arguments)]
pub fn fail_and_claim(
    c: &mut impl GenericClient,
    queue: &str,
    last: &Token,
    lease: &str,
    error: &str,
    retry_in: Option<&str>,
    max_items: Option<i32>,
) -> CallResult<Cycle> {
    let rows = generated::work_fail_and_claim(
        c,
        queue,
        &last.owner,
        lease,
        last.id,
        last.epoch,
        error,
        retry_in,
        max_items,
    )?;
    Ok(cycle_of!("work_fail_and_claim", rows))
}

/// `work_release(id, owner, epoch, delay)`: true when the token was current.
pub fn release(c: &mut impl GenericClient, token: &Token, delay: Option<&str>) -> CallResult<bool> {
    generated::work_release(c, token.id, &token.owner, token.epoch, delay)
}

/// `work_fail(id, owner, epoch, error, retry_in)`: true when the token was
/// current. `retry_in` `None` backs off exponentially.
pub fn fail(
    c: &mut impl GenericClient,
    token: &Token,
    error: &str,
    retry_in: Option<&str>,
) -> CallResult<bool> {
    generated::work_fail(c, token.id, &token.owner, token.epoch, error, retry_in)
}

/// `work_assert(id, owner, epoch)`: `Ok` when the token is current (the row
/// lock is then held to the end of the transaction); 55000 when it is not.
pub fn assert(c: &mut impl GenericClient, token: &Token) -> CallResult<()> {
    generated::work_assert(c, token.id, &token.owner, token.epoch)
}

/// `work_cancel(queue, key)`: true when the item was cancelled by this call.
pub fn cancel(c: &mut impl GenericClient, queue: &str, key: &str) -> CallResult<bool> {
    generated::work_cancel(c, queue, key)
}

/// `work_purge(older_than, queue)`: how many finished items were deleted.
/// `None` takes the defaults (7 days; every queue).
pub fn purge(
    c: &mut impl GenericClient,
    older_than: Option<&str>,
    queue: Option<&str>,
) -> CallResult<i64> {
    generated::work_purge(c, older_than, queue)
}

/// `work_lease_status(id, owner, epoch)`: `current`, `superseded`,
/// `finished`, `cancelled`, `wrong_owner`, `missing`, ... as the server names it.
pub fn lease_status(c: &mut impl GenericClient, token: &Token) -> CallResult<String> {
    generated::work_lease_status(c, token.id, &token.owner, token.epoch)
}

/// `work_retry(queue, key, run_at)`: true when a failed or cancelled item
/// went back to pending (due at `run_at`; `None`: now).
pub fn retry(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    run_at: Option<&RunAt>,
) -> CallResult<bool> {
    generated::work_retry(c, queue, key, run_at)
}

/// `work_reschedule(queue, key, run_at)`: true when the pending item moved.
pub fn reschedule(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    run_at: &RunAt,
) -> CallResult<bool> {
    generated::work_reschedule(c, queue, key, run_at)
}

/// `work_pause(queue)`: true when the queue was not paused before.
pub fn pause(c: &mut impl GenericClient, queue: &str) -> CallResult<bool> {
    generated::work_pause(c, queue)
}

/// `work_resume(queue)`: true when the queue was paused.
pub fn resume(c: &mut impl GenericClient, queue: &str) -> CallResult<bool> {
    generated::work_resume(c, queue)
}

/// `work_limit(queue, concurrency, rate, per)` (from 0.10.0): sets both
/// limits of `queue` (`None`: no such limit; both `None` lifts them).
/// `per` is the rate limit's window, interval text (`'1 second'`). Like
/// every call of `work_limit`, it sets all the queue's limits: from 0.12.0
/// it resets `per_group` to NULL (see [`work_limit_per_group`]). It names
/// no `per_group`, so it also calls a server older than 0.12.0.
pub fn work_limit(
    c: &mut impl GenericClient,
    queue: &str,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: &str,
) -> CallResult<()> {
    work_limit_per_group(c, queue, concurrency, rate, per, None)
}

/// `work_limit(queue, concurrency, rate, per, per_group)` (from 0.12.0):
/// as [`work_limit`], and at most `per_group` items of one `group_key`
/// claimed at once (`None`: 1, serial groups). Each optional argument is
/// passed by name, and only when it is `Some` (`None` leaves the default,
/// NULL: no such limit), so `per_group` `None` also calls a server older
/// than 0.12.0.
pub fn work_limit_per_group(
    c: &mut impl GenericClient,
    queue: &str,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: &str,
    per_group: Option<i32>,
) -> CallResult<()> {
    generated::work_limit(c, queue, concurrency, rate, Some(per), per_group)
}

/// `work_schedule(name, cron, queue, payload, timezone, catch_up)` (from
/// 0.12.0): creates or replaces a schedule; true if it is new or changed.
/// The item settings keep their defaults (priority 0, max_attempts 25, no
/// group).
pub fn schedule(
    c: &mut impl GenericClient,
    name: &str,
    cron: &str,
    queue: &str,
    timezone: &str,
    catch_up: &str,
) -> CallResult<bool> {
    generated::work_schedule(
        c,
        name,
        cron,
        queue,
        None,
        Some(timezone),
        Some(catch_up),
        None,
        None,
        None,
    )
}

/// `work_unschedule(name)` (from 0.12.0): true if the schedule existed.
pub fn unschedule(c: &mut impl GenericClient, name: &str) -> CallResult<bool> {
    generated::work_unschedule(c, name)
}

/// `work_pause_schedule(name)` (from 0.12.0): true if it was not paused.
pub fn pause_schedule(c: &mut impl GenericClient, name: &str) -> CallResult<bool> {
    generated::work_pause_schedule(c, name)
}

/// `work_resume_schedule(name)` (from 0.12.0): true if it was paused.
pub fn resume_schedule(c: &mut impl GenericClient, name: &str) -> CallResult<bool> {
    generated::work_resume_schedule(c, name)
}

/// `work_fire_schedules()` (from 0.12.0): the items it enqueued.
pub fn fire_schedules(c: &mut impl GenericClient) -> CallResult<i32> {
    generated::work_fire_schedules(c)
}

/// One row of `work_item`: an item as an operator sees it. Times and
/// intervals as the server renders them.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Item id.
    pub id: i64,
    /// Queue.
    pub queue: String,
    /// Key.
    pub key: String,
    /// `pending`, `claimed`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// Priority.
    pub priority: i32,
    /// When it is (or was) due.
    pub run_at: String,
    /// Attempts so far.
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// The latest claim's owner.
    pub owner: Option<String>,
    /// The latest claim's epoch.
    pub epoch: Option<i64>,
    /// When the latest claim was made.
    pub claimed_at: Option<String>,
    /// When the lease lapses, while claimed.
    pub lease_until: Option<String>,
    /// Failed attempts and lapsed leases, oldest first (a JSON array).
    pub errors: Value,
    /// What `work_finish` stored.
    pub result: Option<Value>,
    /// When it was enqueued.
    pub created_at: String,
    /// When it became done, failed or cancelled.
    pub finished_at: Option<String>,
    /// The payload.
    pub payload: Value,
    /// The run-time limit.
    pub max_run: Option<String>,
    /// The serial group it was enqueued in (from 0.12.0).
    pub group_key: Option<String>,
}

/// The [`Item`] of a row of a `work_item` binding (either overload: they
/// share [`generated::WorkItemRow`]).
fn item_of(row: generated::WorkItemRow) -> Item {
    let function = "work_item";
    Item {
        id: present(row.id, function, "id"),
        queue: present(row.queue, function, "queue"),
        key: present(row.key, function, "key"),
        state: present(row.state, function, "state"),
        priority: present(row.priority, function, "priority"),
        run_at: present(row.run_at, function, "run_at"),
        attempts: present(row.attempts, function, "attempts"),
        max_attempts: present(row.max_attempts, function, "max_attempts"),
        owner: row.owner,
        epoch: row.epoch,
        claimed_at: row.claimed_at,
        lease_until: row.lease_until,
        errors: present(row.errors, function, "errors"),
        result: row.result,
        created_at: present(row.created_at, function, "created_at"),
        finished_at: row.finished_at,
        payload: present(row.payload, function, "payload"),
        max_run: row.max_run,
        group_key: row.group_key,
    }
}

/// `work_item(queue, key)`: the item, if there is one.
pub fn item(c: &mut impl GenericClient, queue: &str, key: &str) -> CallResult<Option<Item>> {
    let rows = generated::work_item(c, queue, key)?;
    Ok(rows.into_iter().next().map(item_of))
}

/// `work_item(id)`: the item, if there is one.
pub fn item_by_id(c: &mut impl GenericClient, id: i64) -> CallResult<Option<Item>> {
    let rows = generated::work_item_by_id(c, id)?;
    Ok(rows.into_iter().next().map(item_of))
}

/// One row of `work_items`: an item as a listing shows it (no payload or
/// result: `work_item` reads those). Times as the server renders them.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedItem {
    /// Item id (the `after` of the next page when it is the last row).
    pub id: i64,
    /// Key.
    pub key: String,
    /// `pending`, `claimed`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// Priority.
    pub priority: i32,
    /// When it is (or was) due.
    pub run_at: String,
    /// Attempts so far.
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// The latest claim's owner.
    pub owner: Option<String>,
    /// The latest claim's epoch.
    pub epoch: Option<i64>,
    /// When the latest claim was made.
    pub claimed_at: Option<String>,
    /// When the lease lapses, while claimed.
    pub lease_until: Option<String>,
    /// When it was enqueued.
    pub created_at: String,
    /// When it became done, failed or cancelled.
    pub finished_at: Option<String>,
    /// Its serial group.
    pub group_key: Option<String>,
    /// The newest error of its history.
    pub last_error: Option<String>,
}

/// A page request of `work_items`: `None` leaves the server's default
/// (every state, the first page, 50 rows).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// `pending`, `claimed`, `done`, `failed` or `cancelled`.
    pub state: Option<String>,
    /// The id of the last row of the previous page.
    pub after: Option<i64>,
    /// Rows at most (1 to 1000).
    pub max: Option<i32>,
}

/// `work_items(queue, state, after, max)`: a page of the queue's items, in
/// the order of the state listed (docs/contract.md).
pub fn items(c: &mut impl GenericClient, queue: &str, page: &Page) -> CallResult<Vec<ListedItem>> {
    let rows = generated::work_items(c, queue, page.state.as_deref(), page.after, page.max)?;
    Ok(rows
        .into_iter()
        .map(|row| ListedItem {
            id: present(row.id, "work_items", "id"),
            key: present(row.key, "work_items", "key"),
            state: present(row.state, "work_items", "state"),
            priority: present(row.priority, "work_items", "priority"),
            run_at: present(row.run_at, "work_items", "run_at"),
            attempts: present(row.attempts, "work_items", "attempts"),
            max_attempts: present(row.max_attempts, "work_items", "max_attempts"),
            owner: row.owner,
            epoch: row.epoch,
            claimed_at: row.claimed_at,
            lease_until: row.lease_until,
            created_at: present(row.created_at, "work_items", "created_at"),
            finished_at: row.finished_at,
            group_key: row.group_key,
            last_error: row.last_error,
        })
        .collect())
}

/// `queue_counters(queue)`: (refused, lapsed) since the server started;
/// `None` when nothing is counted (the library is not preloaded).
pub fn queue_counters(c: &mut impl GenericClient, queue: &str) -> CallResult<Option<(i64, i64)>> {
    let rows = generated::queue_counters(c, queue)?;
    Ok(rows.into_iter().next().map(|row| {
        (
            present(row.refused, "queue_counters", "refused"),
            present(row.lapsed, "queue_counters", "lapsed"),
        )
    }))
}

/// One row of the view `work_queue_stats`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    /// Queue name.
    pub queue: String,
    /// Pending and due.
    pub pending: i64,
    /// Pending, not yet due.
    pub scheduled: i64,
    /// Claimed under a live lease.
    pub claimed: i64,
    /// Claimed, lease lapsed.
    pub expired: i64,
    /// Done.
    pub done: i64,
    /// Failed (dead letters).
    pub failed: i64,
    /// Cancelled.
    pub cancelled: i64,
    /// How long the oldest due item has waited, as interval text; `None`
    /// when nothing is due.
    pub oldest_due_age: Option<String>,
    /// Whether the queue is paused.
    pub paused: bool,
    /// Stale-token calls refused since the server started; `None` without
    /// `shared_preload_libraries`.
    pub refused: Option<i64>,
    /// Lapsed leases claimed anew since the server started; `None` without
    /// `shared_preload_libraries`.
    pub lapsed: Option<i64>,
}

/// The view `work_queue_stats`, one row per queue, in queue order.
pub fn queue_stats(c: &mut impl GenericClient) -> CallResult<Vec<QueueStats>> {
    let rows = c.query_typed(
        "SELECT s.queue, s.pending, s.scheduled, s.claimed, s.expired, s.done, s.failed,
                s.cancelled, s.oldest_due_age::text, s.paused, s.refused, s.lapsed
           FROM workfence.work_queue_stats AS s
          ORDER BY s.queue",
        &[],
    )?;
    Ok(rows
        .iter()
        .map(|r| QueueStats {
            queue: r.get(0),
            pending: r.get(1),
            scheduled: r.get(2),
            claimed: r.get(3),
            expired: r.get(4),
            done: r.get(5),
            failed: r.get(6),
            cancelled: r.get(7),
            oldest_due_age: r.get(8),
            paused: r.get(9),
            refused: r.get(10),
            lapsed: r.get(11),
        })
        .collect())
}

/// A queue's limits, as the view `work_queue_stats` shows them (from
/// 0.10.0; [`queue_stats`] leaves them out, so that it reads older
/// installs and routers too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLimits {
    /// Queue name.
    pub queue: String,
    /// At most this many items under unexpired leases; `None`: no limit.
    pub concurrency: Option<i32>,
    /// At most this many items handed out per `per`; `None`: no limit.
    pub rate: Option<i32>,
    /// The rate limit's window, as interval text; `None` without one.
    pub per: Option<String>,
    /// At most this many items of one group claimed at once (from
    /// 0.12.0); `None`: not set (1, serial groups).
    pub per_group: Option<i32>,
}

/// The limits columns of the view `work_queue_stats` (from 0.12.0, with
/// `per_group`), one row per queue, in queue order.
pub fn queue_limits(c: &mut impl GenericClient) -> CallResult<Vec<QueueLimits>> {
    let rows = c.query_typed(
        "SELECT s.queue, s.concurrency, s.rate, s.per::text, s.per_group
           FROM workfence.work_queue_stats AS s
          ORDER BY s.queue",
        &[],
    )?;
    Ok(rows
        .iter()
        .map(|r| QueueLimits {
            queue: r.get(0),
            concurrency: r.get(1),
            rate: r.get(2),
            per: r.get(3),
            per_group: r.get(4),
        })
        .collect())
}

/// `work_grant(capability, queues, role)`: true when the grant is new.
/// `queues` is a queue name or a prefix followed by `*`.
pub fn grant(
    c: &mut impl GenericClient,
    capability: &str,
    queues: &str,
    role: &str,
) -> CallResult<bool> {
    generated::work_grant(c, capability, queues, role)
}

/// `work_revoke(capability, queues, role)`: true when the grant existed.
pub fn revoke(
    c: &mut impl GenericClient,
    capability: &str,
    queues: &str,
    role: &str,
) -> CallResult<bool> {
    generated::work_revoke(c, capability, queues, role)
}

/// `work_enforce_grants(enforced)`: true when the setting changed.
pub fn enforce_grants(c: &mut impl GenericClient, enforced: bool) -> CallResult<bool> {
    generated::work_enforce_grants(c, enforced)
}

/// `work_may(capability, queue)`: whether the session's role may.
pub fn may(c: &mut impl GenericClient, capability: &str, queue: &str) -> CallResult<bool> {
    generated::work_may(c, capability, queue)
}

/// One row of the view `work_queue_grants`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueGrant {
    /// The role granted.
    pub role: String,
    /// `enqueue`, `claim`, `operate`, `read` or `purge`.
    pub capability: String,
    /// A queue name, or a prefix followed by `*`.
    pub queues: String,
}

/// The view `work_queue_grants`, ordered by role, capability, queues.
pub fn queue_grants(c: &mut impl GenericClient) -> CallResult<Vec<QueueGrant>> {
    let rows = c.query_typed(
        "SELECT g.role::text, g.capability, g.queues
           FROM workfence.work_queue_grants AS g
          ORDER BY 1, 2, 3",
        &[],
    )?;
    Ok(rows
        .iter()
        .map(|r| QueueGrant {
            role: r.get(0),
            capability: r.get(1),
            queues: r.get(2),
        })
        .collect())
}

/// The hot calls as fixed statements, for a client that prepares them once
/// per connection (the benchmark driver, which measures them side by side
/// with hand-written SQL prepared the same way). Parameters: as the SQL
/// function's, positional; intervals as text.
pub mod prepared {
    /// `work_claim(queue $1, owner $2, lease $3, max_items $4)` → `(id, epoch)` rows.
    pub const CLAIM_TOKENS: &str = "SELECT c.id, c.epoch
  FROM workfence.work_claim($1, $2, ($3::text)::interval, $4) AS c";

    /// `work_finish(id $1, owner $2, epoch $3)` → bool.
    pub const FINISH: &str = "SELECT workfence.work_finish($1, $2, $3)";

    /// `work_finish_many(owner $1, ids $2, epochs $3)` → how many were finished.
    pub const FINISH_MANY_COUNT: &str = "SELECT pg_catalog.count(*) FILTER (WHERE f.finished)
  FROM workfence.work_finish_many($1, $2, $3) AS f";

    /// `work_renew(id $1, owner $2, epoch $3, lease $4)` → bool.
    pub const RENEW: &str = "SELECT workfence.work_renew($1, $2, $3, ($4::text)::interval)";

    /// `work_release(id $1, owner $2, epoch $3)` → bool.
    pub const RELEASE: &str = "SELECT workfence.work_release($1, $2, $3)";

    /// `work_finish_and_claim(queue $1, owner $2, lease $3, last_id $4,
    /// last_epoch $5, max_items => $6)` → `(id, epoch, settled)` rows: the
    /// claimed items' tokens (NULL in the one row of a call that claimed
    /// nothing) and whether the previous item was finished.
    pub const FINISH_AND_CLAIM_TOKENS: &str = "SELECT c.id, c.epoch, c.settled
  FROM workfence.work_finish_and_claim($1, $2, ($3::text)::interval, $4, $5,
                                       max_items => $6) AS c";
}
