//! One typed Rust call per SQL function of the extension: its arguments, its
//! result rows, and its errors (a [`postgres::Error`] that carries the
//! server's SQLSTATE; [`SqlState::sqlstate`] reads it).
//!
//! Every client test, the benchmark driver and the demo call the extension
//! through these, so a change of a function's signature is one edit here.
//! Tests that are about the SQL itself (a claim inside `LATERAL`, a cursor,
//! a literal `NULL` argument, a batch built with `generate_series`) still
//! write that SQL out.
//!
//! Each call is one round trip with its parameter types given
//! (`query_typed`: no named prepared statement), so the calls also work
//! through PgBouncer in transaction pooling mode. Intervals are PostgreSQL
//! interval text (`'30 seconds'`, `'00:01:00'`), cast by the server; optional
//! arguments left `None` are omitted from the call (named notation), so the
//! server's own defaults apply, as `docs/reference.md` states them.
//!
//! `harness/tests/client/checklist.rs` fails when a function of the extension has
//! no call here.

use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Row};
use serde_json::Value;

pub use crate::protocol::Claim;

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

/// A SQL call being put together: its text and its typed parameters.
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

    /// A positional argument `$n` of type `ty`, cast to `cast` when given.
    fn arg(mut self, value: &'a (dyn ToSql + Sync), ty: Type, cast: &str) -> Call<'a> {
        self.params.push((value, ty));
        if !self.sql.ends_with('(') {
            self.sql.push_str(", ");
        }
        self.sql.push_str(&format!("${}{cast}", self.params.len()));
        self
    }

    /// A named argument `name => $n`, omitted when `None` (the default applies).
    fn named<T: ToSql + Sync>(
        mut self,
        name: &str,
        value: &'a Option<T>,
        ty: Type,
        cast: &str,
    ) -> Call<'a> {
        if let Some(value) = value {
            self.params.push((value, ty));
            if !self.sql.ends_with('(') {
                self.sql.push_str(", ");
            }
            self.sql
                .push_str(&format!("{name} => ${}{cast}", self.params.len()));
        }
        self
    }

    fn finish(mut self) -> (String, Vec<(&'a (dyn ToSql + Sync), Type)>) {
        self.sql.push(')');
        (self.sql, self.params)
    }

    fn one(self, c: &mut impl GenericClient) -> CallResult<Row> {
        let (sql, params) = self.finish();
        c.query_typed_one(&sql, &params)
    }
}

/// The columns of a claim row, `lease_until` as the server renders it.
const CLAIM_COLUMNS: &str =
    "SELECT c.id, c.key, c.payload, c.epoch, c.attempt, c.lease_until::text";

fn to_claim(row: &Row) -> Claim {
    Claim {
        id: row.get(0),
        key: row.get(1),
        payload: row.get(2),
        epoch: row.get(3),
        attempt: row.get(4),
        lease_until: row.get(5),
    }
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

/// A `run_at` as the two optional arguments a [`Call`] binds it from: a
/// literal time, or an interval from the server's clock.
fn run_at_parts(run_at: Option<&RunAt>) -> (Option<&str>, Option<&str>) {
    match run_at {
        None => (None, None),
        Some(RunAt::At(at)) => (Some(at.as_str()), None),
        Some(RunAt::In(after)) => (None, Some(after.as_str())),
    }
}

impl<'a> Call<'a> {
    /// The named argument `run_at`, from the parts [`run_at_parts`] made
    /// (omitted when both are `None`).
    fn run_at(self, parts: &'a (Option<&'a str>, Option<&'a str>)) -> Call<'a> {
        self.named("run_at", &parts.0, Type::TEXT, "::timestamptz")
            .named(
                "run_at",
                &parts.1,
                Type::TEXT,
                "::interval OPERATOR(pg_catalog.+) pg_catalog.clock_timestamp()",
            )
    }
}

/// `work_enqueue(queue, payload, key, run_at, priority, max_attempts,
/// max_run, group_key)`; `max_run` and `group_key` only when given (so the
/// call works against versions before 0.6.0 and 0.10.0 too).
pub fn enqueue(c: &mut impl GenericClient, item: &Enqueue) -> CallResult<Enqueued> {
    let run_at = run_at_parts(item.run_at.as_ref());
    let call = Call::new("SELECT e.id, e.key, e.inserted FROM workfence.work_enqueue(")
        .arg(&item.queue, Type::TEXT, "")
        .named("payload", &item.payload, Type::JSONB, "")
        .named("key", &item.key, Type::TEXT, "")
        .run_at(&run_at)
        .named("priority", &item.priority, Type::INT4, "")
        .named("max_attempts", &item.max_attempts, Type::INT4, "")
        .named("max_run", &item.max_run, Type::TEXT, "::interval")
        .named("group_key", &item.group_key, Type::TEXT, "");
    let (mut sql, params) = call.finish();
    sql.push_str(" AS e");
    let row = c.query_typed_one(&sql, &params)?;
    Ok(Enqueued {
        id: row.get(0),
        key: row.get(1),
        inserted: row.get(2),
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
    let rows = Call::new(&format!("{CLAIM_COLUMNS} FROM workfence.work_claim("))
        .arg(&queue, Type::TEXT, "")
        .arg(&owner, Type::TEXT, "")
        .arg(&lease, Type::TEXT, "::interval")
        .named("max_items", &max_items, Type::INT4, "")
        .named("wait", &wait, Type::TEXT, "::interval")
        .rows_as(c, " AS c")?;
    Ok(rows.iter().map(to_claim).collect())
}

/// `work_claim_key(queue, key, owner, lease)`: the claim, if the item was claimable.
pub fn claim_key(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    owner: &str,
    lease: &str,
) -> CallResult<Option<Claim>> {
    let rows = Call::new(&format!("{CLAIM_COLUMNS} FROM workfence.work_claim_key("))
        .arg(&queue, Type::TEXT, "")
        .arg(&key, Type::TEXT, "")
        .arg(&owner, Type::TEXT, "")
        .arg(&lease, Type::TEXT, "::interval")
        .rows_as(c, " AS c")?;
    Ok(rows.first().map(to_claim))
}

impl<'a> Call<'a> {
    /// The rows of a set-returning call, its result aliased (`AS c`).
    fn rows_as(self, c: &mut impl GenericClient, alias: &str) -> CallResult<Vec<Row>> {
        let (mut sql, params) = self.finish();
        sql.push_str(alias);
        c.query_typed(&sql, &params)
    }

    /// The three arguments of a token.
    fn token(self, token: &'a Token) -> Call<'a> {
        self.arg(&token.id, Type::INT8, "")
            .arg(&token.owner, Type::TEXT, "")
            .arg(&token.epoch, Type::INT8, "")
    }
}

/// `work_renew(id, owner, epoch, lease)`: true when the token was current.
pub fn renew(c: &mut impl GenericClient, token: &Token, lease: &str) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_renew(")
        .token(token)
        .arg(&lease, Type::TEXT, "::interval")
        .one(c)?
        .get(0))
}

/// `work_finish(id, owner, epoch, result)`: true when the token was current
/// (or already finished the item).
pub fn finish(
    c: &mut impl GenericClient,
    token: &Token,
    result: Option<&Value>,
) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_finish(")
        .token(token)
        .named("result", &result, Type::JSONB, "")
        .one(c)?
        .get(0))
}

/// `work_finish_many(owner, ids, epochs, results)`: `(id, finished)` per item.
pub fn finish_many(
    c: &mut impl GenericClient,
    owner: &str,
    ids: &[i64],
    epochs: &[i64],
    results: Option<&[Value]>,
) -> CallResult<Vec<(i64, bool)>> {
    let rows = Call::new("SELECT f.id, f.finished FROM workfence.work_finish_many(")
        .arg(&owner, Type::TEXT, "")
        .arg(&ids, Type::INT8_ARRAY, "")
        .arg(&epochs, Type::INT8_ARRAY, "")
        .named("results", &results, Type::JSONB_ARRAY, "")
        .rows_as(c, " AS f")?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
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

/// The rows of a fused call: `settled` from the first (every row carries
/// the same), claims from the rows whose `id` is not NULL.
fn to_cycle(rows: &[Row]) -> Cycle {
    Cycle {
        settled: rows.first().is_some_and(|r| r.get::<_, bool>(6)),
        claimed: rows
            .iter()
            .filter(|r| r.get::<_, Option<i64>>(0).is_some())
            .map(to_claim)
            .collect(),
    }
}

/// The columns a fused call is read with: the claim's, then `settled`.
const CYCLE_COLUMNS: &str =
    "SELECT c.id, c.key, c.payload, c.epoch, c.attempt, c.lease_until::text, c.settled";

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
    let rows = Call::new(&format!(
        "{CYCLE_COLUMNS} FROM workfence.work_finish_and_claim("
    ))
    .arg(&queue, Type::TEXT, "")
    .arg(&last.owner, Type::TEXT, "")
    .arg(&lease, Type::TEXT, "::interval")
    .arg(&last.id, Type::INT8, "")
    .arg(&last.epoch, Type::INT8, "")
    .named("result", &result, Type::JSONB, "")
    .named("max_items", &max_items, Type::INT4, "")
    .rows_as(c, " AS c")?;
    Ok(to_cycle(&rows))
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
    let rows = Call::new(&format!(
        "{CYCLE_COLUMNS} FROM workfence.work_fail_and_claim("
    ))
    .arg(&queue, Type::TEXT, "")
    .arg(&last.owner, Type::TEXT, "")
    .arg(&lease, Type::TEXT, "::interval")
    .arg(&last.id, Type::INT8, "")
    .arg(&last.epoch, Type::INT8, "")
    .arg(&error, Type::TEXT, "")
    .named("retry_in", &retry_in, Type::TEXT, "::interval")
    .named("max_items", &max_items, Type::INT4, "")
    .rows_as(c, " AS c")?;
    Ok(to_cycle(&rows))
}

/// `work_release(id, owner, epoch, delay)`: true when the token was current.
pub fn release(c: &mut impl GenericClient, token: &Token, delay: Option<&str>) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_release(")
        .token(token)
        .named("delay", &delay, Type::TEXT, "::interval")
        .one(c)?
        .get(0))
}

/// `work_fail(id, owner, epoch, error, retry_in)`: true when the token was
/// current. `retry_in` `None` backs off exponentially.
pub fn fail(
    c: &mut impl GenericClient,
    token: &Token,
    error: &str,
    retry_in: Option<&str>,
) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_fail(")
        .token(token)
        .arg(&error, Type::TEXT, "")
        .named("retry_in", &retry_in, Type::TEXT, "::interval")
        .one(c)?
        .get(0))
}

/// `work_assert(id, owner, epoch)`: `Ok` when the token is current (the row
/// lock is then held to the end of the transaction); 55000 when it is not.
pub fn assert(c: &mut impl GenericClient, token: &Token) -> CallResult<()> {
    Call::new("SELECT workfence.work_assert(")
        .token(token)
        .one(c)
        .map(drop)
}

/// `work_cancel(queue, key)`: true when the item was cancelled by this call.
pub fn cancel(c: &mut impl GenericClient, queue: &str, key: &str) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_cancel(")
        .arg(&queue, Type::TEXT, "")
        .arg(&key, Type::TEXT, "")
        .one(c)?
        .get(0))
}

/// `work_purge(older_than, queue)`: how many finished items were deleted.
/// `None` takes the defaults (7 days; every queue).
pub fn purge(
    c: &mut impl GenericClient,
    older_than: Option<&str>,
    queue: Option<&str>,
) -> CallResult<i64> {
    Ok(Call::new("SELECT workfence.work_purge(")
        .named("older_than", &older_than, Type::TEXT, "::interval")
        .named("queue", &queue, Type::TEXT, "")
        .one(c)?
        .get(0))
}

/// `work_lease_status(id, owner, epoch)`: `current`, `superseded`,
/// `finished`, `cancelled`, `wrong_owner`, `missing`, ... as the server names it.
pub fn lease_status(c: &mut impl GenericClient, token: &Token) -> CallResult<String> {
    Ok(Call::new("SELECT workfence.work_lease_status(")
        .token(token)
        .one(c)?
        .get(0))
}

/// `work_retry(queue, key, run_at)`: true when a failed or cancelled item
/// went back to pending (due at `run_at`; `None`: now).
pub fn retry(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    run_at: Option<&RunAt>,
) -> CallResult<bool> {
    let run_at = run_at_parts(run_at);
    Ok(Call::new("SELECT workfence.work_retry(")
        .arg(&queue, Type::TEXT, "")
        .arg(&key, Type::TEXT, "")
        .run_at(&run_at)
        .one(c)?
        .get(0))
}

/// `work_reschedule(queue, key, run_at)`: true when the pending item moved.
pub fn reschedule(
    c: &mut impl GenericClient,
    queue: &str,
    key: &str,
    run_at: &RunAt,
) -> CallResult<bool> {
    let run_at = run_at_parts(Some(run_at));
    Ok(Call::new("SELECT workfence.work_reschedule(")
        .arg(&queue, Type::TEXT, "")
        .arg(&key, Type::TEXT, "")
        .run_at(&run_at)
        .one(c)?
        .get(0))
}

/// `work_pause(queue)`: true when the queue was not paused before.
pub fn pause(c: &mut impl GenericClient, queue: &str) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_pause(")
        .arg(&queue, Type::TEXT, "")
        .one(c)?
        .get(0))
}

/// `work_resume(queue)`: true when the queue was paused.
pub fn resume(c: &mut impl GenericClient, queue: &str) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_resume(")
        .arg(&queue, Type::TEXT, "")
        .one(c)?
        .get(0))
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
/// claimed at once (`None`: 1, serial groups). `per_group` is passed by
/// name, and only when it is `Some`.
pub fn work_limit_per_group(
    c: &mut impl GenericClient,
    queue: &str,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: &str,
    per_group: Option<i32>,
) -> CallResult<()> {
    Call::new("SELECT workfence.work_limit(")
        .arg(&queue, Type::TEXT, "")
        .arg(&concurrency, Type::INT4, "")
        .arg(&rate, Type::INT4, "")
        .arg(&per, Type::TEXT, "::interval")
        .named("per_group", &per_group, Type::INT4, "")
        .one(c)
        .map(drop)
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

/// The columns of a `work_item` row, times and intervals as text.
const ITEM_COLUMNS: &str = "SELECT w.id, w.queue, w.key, w.state, w.priority, w.run_at::text,
       w.attempts, w.max_attempts, w.owner, w.epoch, w.claimed_at::text, w.lease_until::text,
       w.errors, w.result, w.created_at::text, w.finished_at::text, w.payload, w.max_run::text,
       w.group_key";

fn to_item(row: &Row) -> Item {
    Item {
        id: row.get(0),
        queue: row.get(1),
        key: row.get(2),
        state: row.get(3),
        priority: row.get(4),
        run_at: row.get(5),
        attempts: row.get(6),
        max_attempts: row.get(7),
        owner: row.get(8),
        epoch: row.get(9),
        claimed_at: row.get(10),
        lease_until: row.get(11),
        errors: row.get(12),
        result: row.get(13),
        created_at: row.get(14),
        finished_at: row.get(15),
        payload: row.get(16),
        max_run: row.get(17),
        group_key: row.get(18),
    }
}

/// `work_item(queue, key)`: the item, if there is one.
pub fn item(c: &mut impl GenericClient, queue: &str, key: &str) -> CallResult<Option<Item>> {
    let rows = Call::new(&format!("{ITEM_COLUMNS} FROM workfence.work_item("))
        .arg(&queue, Type::TEXT, "")
        .arg(&key, Type::TEXT, "")
        .rows_as(c, " AS w")?;
    Ok(rows.first().map(to_item))
}

/// `work_item(id)`: the item, if there is one.
pub fn item_by_id(c: &mut impl GenericClient, id: i64) -> CallResult<Option<Item>> {
    let rows = Call::new(&format!("{ITEM_COLUMNS} FROM workfence.work_item("))
        .arg(&id, Type::INT8, "")
        .rows_as(c, " AS w")?;
    Ok(rows.first().map(to_item))
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
    let rows = Call::new(
        "SELECT w.id, w.key, w.state, w.priority, w.run_at::text, w.attempts, w.max_attempts,
       w.owner, w.epoch, w.claimed_at::text, w.lease_until::text, w.created_at::text,
       w.finished_at::text, w.group_key, w.last_error FROM workfence.work_items(",
    )
    .arg(&queue, Type::TEXT, "")
    .named("state", &page.state, Type::TEXT, "")
    .named("after", &page.after, Type::INT8, "")
    .named("max", &page.max, Type::INT4, "")
    .rows_as(c, " AS w")?;
    Ok(rows
        .iter()
        .map(|row| ListedItem {
            id: row.get(0),
            key: row.get(1),
            state: row.get(2),
            priority: row.get(3),
            run_at: row.get(4),
            attempts: row.get(5),
            max_attempts: row.get(6),
            owner: row.get(7),
            epoch: row.get(8),
            claimed_at: row.get(9),
            lease_until: row.get(10),
            created_at: row.get(11),
            finished_at: row.get(12),
            group_key: row.get(13),
            last_error: row.get(14),
        })
        .collect())
}

/// `queue_counters(queue)`: (refused, lapsed) since the server started;
/// `None` when nothing is counted (the library is not preloaded).
pub fn queue_counters(c: &mut impl GenericClient, queue: &str) -> CallResult<Option<(i64, i64)>> {
    let rows = Call::new("SELECT q.refused, q.lapsed FROM workfence.queue_counters(")
        .arg(&queue, Type::TEXT, "")
        .rows_as(c, " AS q")?;
    Ok(rows.first().map(|r| (r.get(0), r.get(1))))
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
    Ok(Call::new("SELECT workfence.work_grant(")
        .arg(&capability, Type::TEXT, "")
        .arg(&queues, Type::TEXT, "")
        .arg(&role, Type::TEXT, "")
        .one(c)?
        .get(0))
}

/// `work_revoke(capability, queues, role)`: true when the grant existed.
pub fn revoke(
    c: &mut impl GenericClient,
    capability: &str,
    queues: &str,
    role: &str,
) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_revoke(")
        .arg(&capability, Type::TEXT, "")
        .arg(&queues, Type::TEXT, "")
        .arg(&role, Type::TEXT, "")
        .one(c)?
        .get(0))
}

/// `work_enforce_grants(enforced)`: true when the setting changed.
pub fn enforce_grants(c: &mut impl GenericClient, enforced: bool) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_enforce_grants(")
        .arg(&enforced, Type::BOOL, "")
        .one(c)?
        .get(0))
}

/// `work_may(capability, queue)`: whether the session's role may.
pub fn may(c: &mut impl GenericClient, capability: &str, queue: &str) -> CallResult<bool> {
    Ok(Call::new("SELECT workfence.work_may(")
        .arg(&capability, Type::TEXT, "")
        .arg(&queue, Type::TEXT, "")
        .one(c)?
        .get(0))
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
