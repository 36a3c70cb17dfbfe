//! The database side: a small connection pool and every query the dashboard
//! runs, each a constant text with its values as parameters (no SQL is ever
//! built from a request), calling the extension's functions and view only.
//!
//! Times are formatted by the server, in UTC, so that `infinity` and
//! `-infinity` (an item due since forever) show as such.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::error::AppError;

/// How long one of the dashboard's statements may run (`statement_timeout`).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many connections the pool keeps at most.
pub const POOL_SIZE: usize = 4;

/// How long a request waits for a connection, and a new connection for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most rows one items page shows.
pub const PAGE_SIZE: i32 = 50;

/// `work_limit`'s default `per` (the rate limit's window), which the limits
/// form sends when its field is left empty.
pub const DEFAULT_PER: &str = "1 second";

/// Every state an item can be in, in the order of its life: `waiting` (from 0.12.0: for its
/// parents, workflows), `pending`, `claimed`, then one of the three ends; the states
/// `work_items` lists by (`waiting` from 0.12.0).
pub const ITEM_STATES: [&str; 6] = [
    "waiting",
    "pending",
    "claimed",
    "done",
    "failed",
    "cancelled",
];

/// The most items an item's page draws of its workflow: the nearest to the item
/// (`work_workflow` returns at most [`WORKFLOW_MAX_ROWS`]).
pub const WORKFLOW_MAX_DRAWN: usize = 200;

/// The most rows `work_workflow` returns (pg_workfence 0.12.0).
pub const WORKFLOW_MAX_ROWS: usize = 1000;

/// A timestamptz column formatted by the server: `YYYY-MM-DD HH:MM:SS.mmm UTC`,
/// or `infinity` / `-infinity`, NULL as NULL.
macro_rules! ts {
    ($col:literal) => {
        concat!(
            "CASE WHEN pg_catalog.isfinite(",
            $col,
            ") THEN pg_catalog.to_char(pg_catalog.timezone('UTC', ",
            $col,
            "), 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC' ELSE ",
            $col,
            "::text END"
        )
    };
}

/// The connection pool of one database.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    /// Who the dashboard connects as, in words (`role "alice" to database "app"`).
    who: String,
}

impl Db {
    /// A pool for the connection string `dsn` (key=value or URL); connects
    /// lazily, so a database that is down now is only a 503 page later. Each
    /// connection runs with [`STATEMENT_TIMEOUT`] and, unless the DSN names
    /// one, `application_name` `workfence-ui`.
    pub fn new(dsn: &str) -> Result<Db, String> {
        let mut config: tokio_postgres::Config = dsn
            .parse()
            .map_err(|e| format!("--dsn is not a valid connection string: {e}"))?;
        let who = who(config.get_user(), config.get_dbname());
        let options = format!(
            "{} -c statement_timeout={}",
            config.get_options().unwrap_or(""),
            STATEMENT_TIMEOUT.as_millis()
        );
        config.options(options.trim_start());
        if config.get_application_name().is_none() {
            config.application_name("workfence-ui");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| format!("cannot make the connection pool: {e}"))?;
        Ok(Db { pool, who })
    }

    /// A connection from the pool (503 when none can be had; a refused login
    /// or a missing database says as whom, error.rs).
    pub async fn conn(&self) -> Result<Conn, AppError> {
        match self.pool.get().await {
            Ok(object) => Ok(Conn(object)),
            Err(e) => Err(AppError::from(e).connecting(&self.who)),
        }
    }
}

/// Who a connection string connects as, in words: the role and the database
/// (the defaults, as tokio-postgres takes them, when the string names none).
fn who(user: Option<&str>, dbname: Option<&str>) -> String {
    let role = match user {
        Some(user) => format!("role {user:?}"),
        None => "the operating system's user name".to_owned(),
    };
    let database = match (dbname, user) {
        (Some(db), _) | (None, Some(db)) => format!("database {db:?}"),
        (None, None) => "the database of that name".to_owned(),
    };
    format!("{role} to {database}")
}

/// One pooled connection; the queries are its methods.
pub struct Conn(Object);

/// What the connected role may do, and whether the server takes writes.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The role the dashboard runs as (`current_user`).
    pub role: String,
    /// The server is a hot standby (`pg_is_in_recovery()`): nothing can change.
    pub in_recovery: bool,
    /// EXECUTE on `work_pause`.
    pub pause: bool,
    /// EXECUTE on `work_resume`.
    pub resume: bool,
    /// EXECUTE on `work_retry`.
    pub retry: bool,
    /// EXECUTE on `work_reschedule`.
    pub reschedule: bool,
    /// EXECUTE on `work_cancel`.
    pub cancel: bool,
    /// EXECUTE on `work_lease_status`.
    pub lease_status: bool,
    /// EXECUTE on `work_limit` (whichever of its forms the database has).
    pub limit: bool,
    /// EXECUTE on `work_pause_schedule` (from 0.12.0; false on an older database).
    pub pause_schedule: bool,
    /// EXECUTE on `work_resume_schedule` (from 0.12.0; false on an older database).
    pub resume_schedule: bool,
    /// The database has the view `work_schedules` (pg_workfence 0.12.0 or later).
    pub schedules_exist: bool,
    /// The role may read `work_schedules` (it exists, and SELECT on it).
    pub schedules_readable: bool,
    /// The database has the view `work_queue_history` (pg_workfence 0.12.0 or later).
    pub history_exists: bool,
    /// The role may read each queue's last hour: SELECT on `work_queue_history` and EXECUTE
    /// on `queue_history_rows(text)`, which the view calls and a queue's page calls itself
    /// (`workfence_monitor` has both, granted together).
    pub history_readable: bool,
    /// The database has `work_workflow(bigint)` (pg_workfence 0.12.0 or later).
    pub workflow_exists: bool,
    /// EXECUTE on `work_workflow(bigint)` (`workfence_monitor` has it).
    pub workflow_callable: bool,
}

impl Session {
    /// Whether any action could be offered at all (not a standby, and EXECUTE on
    /// at least one of the operating functions).
    pub fn may_act(&self) -> bool {
        !self.in_recovery
            && (self.pause
                || self.resume
                || self.retry
                || self.reschedule
                || self.cancel
                || self.limit
                || self.pause_schedule
                || self.resume_schedule)
    }
}

/// One row of `work_queue_stats`, plus whether the role may operate the queue.
#[derive(Debug, Clone)]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Due pending items.
    pub pending: i64,
    /// Pending items not yet due.
    pub scheduled: i64,
    /// Items under a live lease.
    pub claimed: i64,
    /// Claimed items whose lease ran out.
    pub expired: i64,
    /// Done items (until purged).
    pub done: i64,
    /// Failed items (until purged).
    pub failed: i64,
    /// Cancelled items (until purged).
    pub cancelled: i64,
    /// Items waiting for their parents (workflows, from 0.12.0; 0 on an older database, which
    /// has no such state).
    pub waiting: i64,
    /// Seconds the oldest due item has waited, if any is due.
    pub oldest_due_age: Option<f64>,
    /// Whether the queue is paused.
    pub paused: bool,
    /// Stale-token calls refused since the server started (preloaded only).
    pub refused: Option<i64>,
    /// Lapsed leases claimed anew since the server started (preloaded only).
    pub lapsed: Option<i64>,
    /// The queue's concurrency limit, if any.
    pub concurrency: Option<i64>,
    /// The queue's rate limit: claims per `per`, if any.
    pub rate: Option<i64>,
    /// The rate limit's period, as the server writes an interval.
    pub per: Option<String>,
    /// At most this many items of one group claimed at once (from 0.12.0); `None`: not set
    /// (1, serial groups), or an extension older than 0.12.0.
    pub per_group: Option<i64>,
    /// The database's `work_queue_stats` has a `per_group` column, and so its `work_limit` a
    /// `per_group` argument (0.12.0 or later): the limits form offers the field.
    pub per_group_settable: bool,
    /// `work_may('operate', queue)`.
    pub may_operate: bool,
}

/// One row of `work_items`.
#[derive(Debug, Clone)]
pub struct ItemRow {
    /// The item's id.
    pub id: i64,
    /// Its key.
    pub key: String,
    /// Its state.
    pub state: String,
    /// Its priority.
    pub priority: i64,
    /// When it is (was) due.
    pub run_at: Option<String>,
    /// Attempts made.
    pub attempts: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// The last claim's owner.
    pub owner: Option<String>,
    /// The last claim's epoch (fencing token).
    pub epoch: Option<i64>,
    /// When the lease runs (ran) out.
    pub lease_until: Option<String>,
    /// Its serial group, if any.
    pub group_key: Option<String>,
    /// The newest error of its history.
    pub last_error: Option<String>,
    /// Whether its lease is still running (by the server's clock).
    pub lease_live: bool,
}

/// One item as `work_item` shows it.
#[derive(Debug, Clone)]
pub struct Item {
    /// The item's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub key: String,
    /// Its state.
    pub state: String,
    /// Its priority.
    pub priority: i64,
    /// When it is (was) due.
    pub run_at: Option<String>,
    /// Attempts made.
    pub attempts: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// The last claim's owner.
    pub owner: Option<String>,
    /// The last claim's epoch.
    pub epoch: Option<i64>,
    /// When the last claim was made.
    pub claimed_at: Option<String>,
    /// When the lease runs (ran) out.
    pub lease_until: Option<String>,
    /// Failed attempts and lapsed leases, oldest first.
    pub errors: Vec<ErrorEntry>,
    /// The result a finish stored.
    pub result: Option<Value>,
    /// When it was enqueued.
    pub created_at: Option<String>,
    /// When it finished (done, failed, cancelled).
    pub finished_at: Option<String>,
    /// Its payload.
    pub payload: Option<Value>,
    /// The longest one claim may run, renewals included.
    pub max_run: Option<String>,
    /// Whether its lease is still running (by the server's clock).
    pub lease_live: bool,
    /// `work_may('operate', queue)`.
    pub may_operate: bool,
    /// Its checkpoint, the last `work_progress` stored under a current lease (from 0.12.0);
    /// `None`: none stored, or a database older than 0.12.0.
    pub progress: Option<Value>,
}

/// One entry of an item's error history.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorEntry {
    /// The attempt it ended.
    pub attempt: String,
    /// The epoch of that claim.
    pub epoch: String,
    /// The owner of that claim.
    pub owner: String,
    /// When.
    pub at: String,
    /// The error text (or why the lease lapsed).
    pub error: String,
}

impl ErrorEntry {
    /// The entries of a `work_item` `errors` array (anything else: none).
    pub fn from_json(errors: &Value) -> Vec<ErrorEntry> {
        let field = |entry: &Value, name: &str| match entry.get(name) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        errors
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| ErrorEntry {
                        attempt: field(e, "attempt"),
                        epoch: field(e, "epoch"),
                        owner: field(e, "owner"),
                        at: field(e, "at"),
                        error: field(e, "error"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One row of `work_schedules` (from 0.12.0), plus whether the role may operate its queue.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    /// The schedule's name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue its items are enqueued in.
    pub queue: String,
    /// What a fire does with slots that passed unfired: `latest`, `all` or `none`.
    pub catch_up: String,
    /// Whether it is paused (`work_pause_schedule`).
    pub paused: bool,
    /// The first slot not yet fired or skipped (`infinity`: the expression names no more).
    pub next_slot: Option<String>,
    /// The last slot fired, if any.
    pub last_slot: Option<String>,
    /// The item the last slot fired (it may since be purged).
    pub last_item_id: Option<i64>,
    /// When the last slot was fired, by the server's clock.
    pub last_fired_at: Option<String>,
    /// `next_slot` in unix seconds; `None` when it is `infinity`.
    pub next_slot_epoch: Option<f64>,
    /// `last_fired_at` in unix seconds; `None` before the first fire.
    pub last_fired_epoch: Option<f64>,
    /// `work_may('operate', queue)`.
    pub may_operate: bool,
}

/// One row of `work_queue_counters` (from 0.12.0; rows only with pg_workfence in
/// `shared_preload_libraries`): what a queue's items went through since the server started,
/// kept in shared memory and reset by a restart, as `pg_stat_*` are.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueCounters {
    /// The queue's name.
    pub queue: String,
    /// Items enqueued (and items `on_conflict` sent to run again).
    pub enqueued: i64,
    /// Items handed out by claims (lapsed leases claimed anew included).
    pub claimed: i64,
    /// Runs finished.
    pub done: i64,
    /// Items that became failed (dead letters).
    pub failed: i64,
    /// Failed attempts sent back for another (`work_fail` with attempts left, `work_retry`).
    pub retried: i64,
    /// Claims handed back with `work_release`.
    pub released: i64,
    /// Items withdrawn with `work_cancel`.
    pub cancelled: i64,
    /// Calls refused for a stale token (the counter `work_queue_stats.refused` shows).
    pub refused: i64,
    /// Lapsed leases claimed anew (the counter `work_queue_stats.lapsed` shows).
    pub lapsed: i64,
    /// Time in queue: from an item's `run_at` to its claim.
    pub time_in_queue: Histogram,
    /// Run time: from a claim to the run's end (finish, fail, release).
    pub run_time: Histogram,
}

/// A histogram as Prometheus keeps one: cumulative counts per upper bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// The upper bounds in seconds, ascending, the last one infinite (`le`).
    pub le: Vec<f64>,
    /// Per bound, how many observations were at most that (cumulative: the last is the count).
    pub buckets: Vec<i64>,
    /// The sum of the observations, in seconds.
    pub sum: f64,
}

impl Histogram {
    /// A histogram of the view's arrays, which must be of one length and end with an infinite
    /// bound (the view's promise; anything else is refused rather than shown wrong).
    pub fn new(le: Vec<f64>, buckets: Vec<i64>, sum: f64) -> Result<Histogram, String> {
        if le.len() != buckets.len() || le.last().is_none_or(|b| *b != f64::INFINITY) {
            return Err(format!(
                "{} bounds ending in {:?} for {} buckets: bucket_le must end with Infinity, \
                 one bound per bucket",
                le.len(),
                le.last(),
                buckets.len()
            ));
        }
        Ok(Histogram { le, buckets, sum })
    }

    /// How many observations: the last (infinite) bucket's count.
    pub fn count(&self) -> i64 {
        self.buckets.last().copied().unwrap_or(0)
    }

    /// The `q`-quantile (0 < q < 1) estimated as Prometheus' `histogram_quantile` does: find
    /// the bucket the `q * count`-th observation falls in, and interpolate linearly between
    /// that bucket's lower bound (the bound before it; 0 for the first) and its upper bound,
    /// as if its observations were spread evenly across it. When that bucket is the infinite
    /// one, the answer is the largest finite bound (the estimate can say no more:
    /// [`Histogram::beyond_bounds`]). `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let (b, rank) = self.bucket_of(q)?;
        let last = self.buckets.len() - 1;
        if b == last {
            return Some(self.le[last - 1]);
        }
        let (start, below) = match b {
            0 => (0.0_f64.min(self.le[0]), 0),
            _ => (self.le[b - 1], self.buckets[b - 1]),
        };
        let end = self.le[b];
        let in_bucket = (self.buckets[b] - below) as f64;
        if in_bucket <= 0.0 {
            return Some(end);
        }
        Some(start + (end - start) * ((rank - below as f64) / in_bucket))
    }

    /// Whether the `q`-quantile falls in the infinite bucket, beyond the largest finite bound
    /// (which [`Histogram::quantile`] then answers).
    pub fn beyond_bounds(&self, q: f64) -> bool {
        self.bucket_of(q)
            .is_some_and(|(b, _)| b == self.buckets.len() - 1)
    }

    /// The bucket the `q * count`-th observation falls in (the first whose cumulative count
    /// reaches it), and that rank; `None` without observations or finite bounds.
    fn bucket_of(&self, q: f64) -> Option<(usize, f64)> {
        let count = self.count();
        if count <= 0 || self.le.len() < 2 {
            return None;
        }
        let rank = q * count as f64;
        let last = self.buckets.len() - 1;
        let b = self.buckets[..last]
            .iter()
            .position(|&n| n as f64 >= rank)
            .unwrap_or(last);
        Some((b, rank))
    }
}

/// One minute of a queue's last hour: a row of `queue_history_rows` (from 0.12.0, with the
/// library in `shared_preload_libraries`), kept by the server in shared memory beside the
/// counters of [`QueueCounters`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMinute {
    /// The minute's start, in unix seconds (a whole minute).
    pub minute: i64,
    /// Items enqueued in the minute (as `work_queue_counters.enqueued` counts them).
    pub enqueued: i64,
    /// Items handed out by claims in the minute.
    pub claimed: i64,
    /// Runs finished in the minute.
    pub done: i64,
    /// Items that became failed (dead letters) in the minute.
    pub failed: i64,
    /// The median time in queue (due to claimed) of the minute's claims, in seconds,
    /// estimated from the counters' buckets; `None`: the minute had no claim of a pending item
    /// (a lapsed lease claimed anew is not timed).
    pub time_in_queue_p50: Option<f64>,
    /// The 99th percentile of the same, in seconds (3600 when beyond the last bucket);
    /// `None`: as for the p50.
    pub time_in_queue_p99: Option<f64>,
    /// The queue's pending items (due or not) at the minute's end; `None`: not known (before
    /// the queue's first counted commit of the hour, or while the state counts were not kept).
    pub backlog: Option<i64>,
}

#[cfg(test)]
impl HistoryMinute {
    /// A minute (Unix seconds of its start) in which nothing happened and nothing is known.
    pub fn quiet(minute: i64) -> HistoryMinute {
        HistoryMinute {
            minute,
            enqueued: 0,
            claimed: 0,
            done: 0,
            failed: 0,
            time_in_queue_p50: None,
            time_in_queue_p99: None,
            backlog: None,
        }
    }
}

/// What a queue's page can chart of the queue's last hour ([`Conn::queue_history`]).
#[derive(Debug, Clone, PartialEq)]
pub enum History {
    /// The database has no `work_queue_history` (pg_workfence older than 0.12.0).
    Absent,
    /// The role may not read it: no SELECT on `work_queue_history` or no EXECUTE on
    /// `queue_history_rows`, or (queue grants) no read grant covering the queue.
    NotReadable,
    /// The minutes of the last hour, oldest first, the current one (so far) last: 60 of
    /// them, or none when the server keeps nothing for the queue (the library not preloaded,
    /// nothing charted for the queue since the server started, or 1024 other queues charted
    /// within the hour).
    Minutes(Vec<HistoryMinute>),
}

/// One row of `work_workflow(id)` (from 0.12.0): an item of the workflow around an item.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRow {
    /// The item's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub key: String,
    /// Its state (`waiting` included).
    pub state: String,
    /// Its nearest distance from the item asked about: 0 that item, -1 its parents, -2
    /// theirs, ..., 1 its children, 2 theirs, ...
    pub depth: i32,
    /// The ids of its parents, every edge into it (some may be items not returned: not
    /// ancestors of the item asked about, or in queues the role may not read).
    pub parents: Vec<i64>,
}

/// What an item's page can draw of the item's workflow ([`Conn::workflow`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Workflow {
    /// The database has no `work_workflow` (pg_workfence older than 0.12.0), where no item
    /// has parents: nothing to draw, and nothing said.
    Absent,
    /// The role may not call `work_workflow` (no EXECUTE; `workfence_monitor` has it).
    NotCallable,
    /// Its rows, nearest first, then by id: the item itself, its ancestors and its
    /// descendants (only the item, or none, when it has neither or the role may read none).
    Rows(Vec<WorkflowRow>),
}

/// The limits a `work_limit` call sets, every one of them (`None` lifts that limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// At most this many items claimed at once.
    pub concurrency: Option<i32>,
    /// At most this many items handed out per `per`.
    pub rate: Option<i32>,
    /// The rate limit's window, interval text the server parses (`'1 minute'`, `00:01:00`).
    pub per: String,
    /// At most this many items of one group claimed at once (0.12.0; `None`: 1, serial
    /// groups). Sent, by name, only when set.
    pub per_group: Option<i32>,
}

/// When a reschedule moves an item to.
#[derive(Debug, Clone, PartialEq)]
pub enum RunAt {
    /// Now (`run now`).
    Now,
    /// A time of day in UTC as a `datetime-local` input gives it, parsed by the server.
    Utc(String),
    /// This many seconds from now.
    In(i64),
}

/// What [`Conn::queue_lookup`] found of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// It has items, or settings, that the role may read.
    Known,
    /// Neither items nor settings that the role may read.
    Unknown {
        /// Whether the settings were looked at: false when the role may not read
        /// `workfence.queues`, so a queue that has only settings (a pause, limits) is not found.
        settings_read: bool,
    },
}

// work_limit's arguments differ by version (0.12.0 added per_group): its privilege is read
// from whichever form the database has, by name.
const SESSION: &str = "SELECT pg_catalog.pg_is_in_recovery(), CURRENT_USER::text, \
    pg_catalog.has_function_privilege('workfence.work_pause(text)', 'EXECUTE'), \
    pg_catalog.has_function_privilege('workfence.work_resume(text)', 'EXECUTE'), \
    pg_catalog.has_function_privilege('workfence.work_retry(text, text, timestamptz)', 'EXECUTE'), \
    pg_catalog.has_function_privilege('workfence.work_reschedule(text, text, timestamptz)', 'EXECUTE'), \
    pg_catalog.has_function_privilege('workfence.work_cancel(text, text)', 'EXECUTE'), \
    pg_catalog.has_function_privilege('workfence.work_lease_status(bigint, text, bigint)', 'EXECUTE'), \
    COALESCE((SELECT pg_catalog.bool_or(pg_catalog.has_function_privilege(p.oid, 'EXECUTE')) \
        FROM pg_catalog.pg_proc AS p \
        WHERE p.pronamespace OPERATOR(pg_catalog.=) 'workfence'::regnamespace \
        AND p.proname OPERATOR(pg_catalog.=) 'work_limit'), false), \
    COALESCE((SELECT pg_catalog.bool_or(pg_catalog.has_function_privilege(p.oid, 'EXECUTE')) \
        FROM pg_catalog.pg_proc AS p \
        WHERE p.pronamespace OPERATOR(pg_catalog.=) 'workfence'::regnamespace \
        AND p.proname OPERATOR(pg_catalog.=) 'work_pause_schedule'), false), \
    COALESCE((SELECT pg_catalog.bool_or(pg_catalog.has_function_privilege(p.oid, 'EXECUTE')) \
        FROM pg_catalog.pg_proc AS p \
        WHERE p.pronamespace OPERATOR(pg_catalog.=) 'workfence'::regnamespace \
        AND p.proname OPERATOR(pg_catalog.=) 'work_resume_schedule'), false), \
    pg_catalog.to_regclass('workfence.work_schedules') IS NOT NULL, \
    COALESCE(pg_catalog.has_table_privilege( \
        pg_catalog.to_regclass('workfence.work_schedules')::oid, 'SELECT'), false), \
    pg_catalog.to_regclass('workfence.work_queue_history') IS NOT NULL, \
    COALESCE(pg_catalog.has_table_privilege( \
        pg_catalog.to_regclass('workfence.work_queue_history')::oid, 'SELECT') \
        AND pg_catalog.has_function_privilege( \
        pg_catalog.to_regprocedure('workfence.queue_history_rows(text)')::oid, 'EXECUTE'), false), \
    pg_catalog.to_regprocedure('workfence.work_workflow(bigint)') IS NOT NULL, \
    COALESCE(pg_catalog.has_function_privilege( \
        pg_catalog.to_regprocedure('workfence.work_workflow(bigint)')::oid, 'EXECUTE'), false)";

// Whether the role may read work_schedules (0.12.0): /metrics, which reads no session, asks
// before reading the view, so that a 0.11.0 database or a role without SELECT on it still
// gets the queues' metrics.
const SCHEDULES_READABLE: &str = "SELECT COALESCE(pg_catalog.has_table_privilege( \
    pg_catalog.to_regclass('workfence.work_schedules')::oid, 'SELECT'), false)";

// The schedules (0.12.0), every one the role may read (the view shows, under queue grants,
// those of the queues the role may read), or those of one queue ($1). The view names the
// schedules table only: cheap however many items there are.
macro_rules! schedules {
    ($where:literal) => {
        concat!(
            "SELECT s.name::text, s.cron::text, s.timezone::text, s.queue::text, s.catch_up::text, s.paused, ",
            ts!("s.next_slot"),
            ", ",
            ts!("s.last_slot"),
            ", s.last_item_id::int8, ",
            ts!("s.last_fired_at"),
            ", CASE WHEN pg_catalog.isfinite(s.next_slot) ",
            "THEN pg_catalog.date_part('epoch', s.next_slot)::float8 END, ",
            "pg_catalog.date_part('epoch', s.last_fired_at)::float8, ",
            "workfence.work_may('operate', s.queue) ",
            "FROM workfence.work_schedules AS s ",
            $where,
            "ORDER BY s.name"
        )
    };
}

const SCHEDULES: &str = schedules!("");

const QUEUE_SCHEDULES: &str = schedules!("WHERE s.queue OPERATOR(pg_catalog.=) $1::text ");

// The schedule calls are not in the `workfence` client library (yet).
const PAUSE_SCHEDULE: &str = "SELECT workfence.work_pause_schedule($1::text)";
const RESUME_SCHEDULE: &str = "SELECT workfence.work_resume_schedule($1::text)";

/// What to do when a schedule call meets a database whose extension has none (42883).
pub const SCHEDULES_ADVICE: &str = "schedules need pg_workfence 0.12.0 or later in this \
    database: update the extension (ALTER EXTENSION pg_workfence UPDATE)";

// per_group and waiting (0.12.0) are read from the row as jsonb, so that a database still on
// 0.11.0, whose view has no such columns, shows its queues too (per_group NULL, waiting 0: that
// database has no waiting state); whether the row has the key per_group at all says whether
// work_limit takes per_group (the view and the function are of one version).
const QUEUE_STATS: &str = "SELECT s.queue::text, s.pending::int8, s.scheduled::int8, \
    s.claimed::int8, s.expired::int8, s.done::int8, s.failed::int8, s.cancelled::int8, \
    pg_catalog.date_part('epoch', s.oldest_due_age)::float8, s.paused, s.refused::int8, \
    s.lapsed::int8, s.concurrency::int8, s.rate::int8, s.per::text, \
    workfence.work_may('operate', s.queue), \
    (pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'per_group')::int8, \
    pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.?) 'per_group', \
    COALESCE((pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'waiting')::int8, 0) \
    FROM workfence.work_queue_stats AS s ORDER BY s.queue";

// Whether the role may read work_queue_counters (0.12.0): the view exists and SELECT on it.
// A database older than that, or a role without it, has no counters to show: /metrics and the
// queue page leave them out.
const COUNTERS_READABLE: &str = "SELECT COALESCE(pg_catalog.has_table_privilege( \
    pg_catalog.to_regclass('workfence.work_queue_counters')::oid, 'SELECT'), false)";

// The counters of every queue the role may read, or of one ($1): shared memory only, no item
// read (the view's promise), so cheap at any number of items, and for a queue that does not
// exist.
macro_rules! counters {
    ($where:literal) => {
        concat!(
            "SELECT c.queue::text, c.enqueued::int8, c.claimed::int8, c.done::int8, ",
            "c.failed::int8, c.retried::int8, c.released::int8, c.cancelled::int8, ",
            "c.refused::int8, c.lapsed::int8, c.bucket_le::float8[], ",
            "c.time_in_queue_buckets::int8[], c.time_in_queue_sum::float8, ",
            "c.run_time_buckets::int8[], c.run_time_sum::float8 ",
            "FROM workfence.work_queue_counters AS c ",
            $where,
            "ORDER BY c.queue"
        )
    };
}

const COUNTERS: &str = counters!("");

const QUEUE_COUNTERS: &str = counters!("WHERE c.queue OPERATOR(pg_catalog.=) $1::text ");

// A queue's last hour (0.12.0), one row per minute, oldest first: the function with the
// queue, which copies that queue's ring of minutes out of shared memory and no other (the
// view, which calls it without one, copies every queue's), and reads no item. Where queue
// grants are enforced and the role may not read the queue: the server's 42501.
const QUEUE_HISTORY: &str = "SELECT pg_catalog.date_part('epoch', h.minute)::int8, \
    h.enqueued::int8, h.claimed::int8, h.done::int8, h.failed::int8, \
    h.time_in_queue_p50::float8, h.time_in_queue_p99::float8, h.backlog::int8 \
    FROM workfence.queue_history_rows($1::text) AS h ORDER BY h.minute";

const ITEMS: &str = concat!(
    "SELECT w.id::int8, w.key::text, w.state::text, w.priority::int8, ",
    ts!("w.run_at"),
    ", w.attempts::int8, w.max_attempts::int8, w.owner::text, w.epoch::int8, ",
    ts!("w.lease_until"),
    ", w.group_key::text, w.last_error::text, ",
    "COALESCE(w.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp(), false) ",
    "FROM workfence.work_items($1::text, $2::text, $3::int8, $4::int4) AS w"
);

// One row of the queue's items by key: a range of the unique (queue, key)
// index, as cheap for a queue of a million items as for an empty one, and for one
// that does not exist.
const QUEUE_HAS_ITEMS: &str =
    "SELECT EXISTS (SELECT 1 FROM workfence.work_items($1::text, NULL, NULL, 1))";

// Whether the role may read the settings table (its owner, a superuser, or a role granted
// SELECT on it; workfence_monitor's grants do not include it).
const SETTINGS_READABLE: &str = "SELECT COALESCE(pg_catalog.has_table_privilege( \
    pg_catalog.to_regclass('workfence.queues')::oid, 'SELECT'), false)";

// For a queue with no items: whether it has settings (a pause, limits, a group seen), one
// probe of the settings table's primary key, kept to the queues the role may read as
// work_queue_stats keeps them (work_may('read', queue)). Never work_queue_stats itself, which
// counts every item of every queue: a 404 for a queue that does not exist cost a scan of
// workfence.items (0.6 s at 3 million items), which anyone who can reach the port could repeat.
const QUEUE_HAS_SETTINGS: &str = "SELECT EXISTS (SELECT 1 FROM workfence.queues AS q \
    WHERE q.queue OPERATOR(pg_catalog.=) $1::text) \
    AND workfence.work_may('read', $1::text)";

// progress (0.12.0) is read from the row by name, so that a database still on 0.11.0, whose
// work_item has no such column, shows its items too (no checkpoint). The row as jsonb holds a
// NULL column as JSON null, as it does a JSON null stored as the checkpoint: both show as none.
const ITEM: &str = concat!(
    "SELECT i.id::int8, i.queue::text, i.key::text, i.state::text, i.priority::int8, ",
    ts!("i.run_at"),
    ", i.attempts::int8, i.max_attempts::int8, i.owner::text, i.epoch::int8, ",
    ts!("i.claimed_at"),
    ", ",
    ts!("i.lease_until"),
    ", i.errors::jsonb, i.result::jsonb, ",
    ts!("i.created_at"),
    ", ",
    ts!("i.finished_at"),
    ", i.payload::jsonb, i.max_run::text, ",
    "COALESCE(i.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp(), false), ",
    "workfence.work_may('operate', i.queue), ",
    "pg_catalog.to_jsonb(i) OPERATOR(pg_catalog.->) 'progress' ",
    "FROM workfence.work_item($1::int8) AS i"
);

// The workflow around an item (0.12.0): the item, its ancestors and its descendants, at most
// 1000 rows, walked through the edges' two indexes (no scan, whatever the number of items),
// in the function's order: nearest first, then by id.
const WORKFLOW: &str = "SELECT w.id::int8, w.queue::text, w.key::text, w.state::text, \
    w.depth::int4, w.parents::int8[] \
    FROM workfence.work_workflow($1::int8) AS w";

const MAY_OPERATE: &str = "SELECT workfence.work_may('operate', $1::text)";

const ITEM_BY_KEY: &str = "SELECT i.id::int8 FROM workfence.work_item($1::text, $2::text) AS i";

const LEASE_STATUS: &str = "SELECT workfence.work_lease_status($1::int8, $2::text, $3::int8)";

// The operator's calls go through the `workfence` client library, but for the two whose
// arguments are a user's text that the server parses (a time of day, an interval): a reschedule
// to a time the form gave, and work_limit's `per`.
const RESCHEDULE_AT: &str = "SELECT workfence.work_reschedule($1::text, $2::text, \
    pg_catalog.timezone('UTC', ($3::text)::timestamp))";

/// What to do when a `per_group` is sent to a database whose `work_limit` has none.
pub const PER_GROUP_ADVICE: &str = "per_group needs pg_workfence 0.12.0 or later in this \
    database: update the extension (ALTER EXTENSION pg_workfence UPDATE), or leave per_group empty";

// per_group by name, and only when it is set: a 0.11.0 database's work_limit has no such
// argument, and leaving it out is NULL (serial groups) on 0.12.0.
const LIMIT: &str =
    "SELECT workfence.work_limit($1::text, $2::int4, $3::int4, ($4::text)::interval)";
const LIMIT_PER_GROUP: &str = "SELECT workfence.work_limit($1::text, $2::int4, $3::int4, \
    ($4::text)::interval, per_group => $5::int4)";

impl Conn {
    async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, AppError> {
        let statement = self.0.prepare_cached(sql).await?;
        Ok(self.0.query(&statement, params).await?)
    }

    async fn one(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, AppError> {
        let statement = self.0.prepare_cached(sql).await?;
        Ok(self.0.query_one(&statement, params).await?)
    }

    /// The role, its function privileges and whether the server is a standby.
    pub async fn session(&self) -> Result<Session, AppError> {
        let r = self.one(SESSION, &[]).await?;
        Ok(Session {
            in_recovery: r.try_get(0)?,
            role: r.try_get(1)?,
            pause: r.try_get(2)?,
            resume: r.try_get(3)?,
            retry: r.try_get(4)?,
            reschedule: r.try_get(5)?,
            cancel: r.try_get(6)?,
            lease_status: r.try_get(7)?,
            limit: r.try_get(8)?,
            pause_schedule: r.try_get(9)?,
            resume_schedule: r.try_get(10)?,
            schedules_exist: r.try_get(11)?,
            schedules_readable: r.try_get(12)?,
            history_exists: r.try_get(13)?,
            history_readable: r.try_get(14)?,
            workflow_exists: r.try_get(15)?,
            workflow_callable: r.try_get(16)?,
        })
    }

    /// Whether the role may read `work_schedules` (the database has it, 0.12.0, and the role
    /// SELECT on it).
    pub async fn schedules_readable(&self) -> Result<bool, AppError> {
        self.flag(SCHEDULES_READABLE, &[]).await
    }

    /// Every schedule the role may read, by name (`work_schedules`, 0.12.0: ask
    /// [`Session::schedules_readable`] or [`Conn::schedules_readable`] first).
    pub async fn schedules(&self) -> Result<Vec<ScheduleRow>, AppError> {
        let rows = self.rows(SCHEDULES, &[]).await?;
        rows.iter().map(schedule_row).collect()
    }

    /// The schedules that enqueue in `queue`, by name.
    pub async fn queue_schedules(&self, queue: &str) -> Result<Vec<ScheduleRow>, AppError> {
        let rows = self.rows(QUEUE_SCHEDULES, &[&queue]).await?;
        rows.iter().map(schedule_row).collect()
    }

    /// `work_pause_schedule(name)`: true if it was not paused. An unknown name is the
    /// server's 42704; a database older than 0.12.0 a 42883 that says schedules need it.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool, AppError> {
        self.flag(PAUSE_SCHEDULE, &[&name])
            .await
            .map_err(schedule_call_error)
    }

    /// `work_resume_schedule(name)`: true if it was paused (errors as [`Conn::pause_schedule`]).
    pub async fn resume_schedule(&self, name: &str) -> Result<bool, AppError> {
        self.flag(RESUME_SCHEDULE, &[&name])
            .await
            .map_err(schedule_call_error)
    }

    /// Every queue the role may read, by name.
    pub async fn queue_stats(&self) -> Result<Vec<QueueStats>, AppError> {
        let rows = self.rows(QUEUE_STATS, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(QueueStats {
                    queue: r.try_get(0)?,
                    pending: r.try_get(1)?,
                    scheduled: r.try_get(2)?,
                    claimed: r.try_get(3)?,
                    expired: r.try_get(4)?,
                    done: r.try_get(5)?,
                    failed: r.try_get(6)?,
                    cancelled: r.try_get(7)?,
                    oldest_due_age: r.try_get(8)?,
                    paused: r.try_get(9)?,
                    refused: r.try_get(10)?,
                    lapsed: r.try_get(11)?,
                    concurrency: r.try_get(12)?,
                    rate: r.try_get(13)?,
                    per: r.try_get(14)?,
                    may_operate: r.try_get(15)?,
                    per_group: r.try_get(16)?,
                    per_group_settable: r.try_get(17)?,
                    waiting: r.try_get(18)?,
                })
            })
            .collect()
    }

    /// The counters of every queue the role may read, by name (`work_queue_counters`, from
    /// 0.12.0): none on an older database, for a role that may not read the view (no SELECT
    /// on it, or the server's 42501 for a function it calls), and without the library in
    /// `shared_preload_libraries` (the view is empty).
    pub async fn counters(&self) -> Result<Vec<QueueCounters>, AppError> {
        self.read_counters(COUNTERS, &[]).await
    }

    /// The counters of `queue`, if there are any to show (as [`Conn::counters`]).
    pub async fn queue_counters(&self, queue: &str) -> Result<Option<QueueCounters>, AppError> {
        Ok(self
            .read_counters(QUEUE_COUNTERS, &[&queue])
            .await?
            .into_iter()
            .next())
    }

    async fn read_counters(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<QueueCounters>, AppError> {
        if !self.flag(COUNTERS_READABLE, &[]).await? {
            return Ok(Vec::new());
        }
        let rows = match self.rows(sql, params).await {
            Ok(rows) => rows,
            // SELECT on the view without EXECUTE on what it calls: not this role's to read,
            // as a view it may not select from.
            Err(e) if e.sqlstate() == Some("42501") => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        rows.iter().map(counters_row).collect()
    }

    /// `queue`'s last hour, minute by minute (`queue_history_rows`, from 0.12.0: one query,
    /// shared memory only, no item read): [`History::Absent`] on an older database,
    /// [`History::NotReadable`] when `session` says the role may not read it or the server
    /// refuses the queue (42501, queue grants). Other errors are the server's.
    pub async fn queue_history(&self, session: &Session, queue: &str) -> Result<History, AppError> {
        if !session.history_exists {
            return Ok(History::Absent);
        }
        if !session.history_readable {
            return Ok(History::NotReadable);
        }
        let rows = match self.rows(QUEUE_HISTORY, &[&queue]).await {
            Ok(rows) => rows,
            Err(e) if e.sqlstate() == Some("42501") => return Ok(History::NotReadable),
            Err(e) => return Err(e),
        };
        let minutes = rows
            .iter()
            .map(|r| {
                Ok(HistoryMinute {
                    minute: r.try_get(0)?,
                    enqueued: r.try_get(1)?,
                    claimed: r.try_get(2)?,
                    done: r.try_get(3)?,
                    failed: r.try_get(4)?,
                    time_in_queue_p50: r.try_get(5)?,
                    time_in_queue_p99: r.try_get(6)?,
                    backlog: r.try_get(7)?,
                })
            })
            .collect::<Result<Vec<_>, AppError>>()?;
        Ok(History::Minutes(minutes))
    }

    /// A page of `queue`'s items: at most `max` rows after item `after`, in
    /// the order of `work_items` for `state` (every state: by key,
    /// descending; pages::listing_order).
    pub async fn items(
        &self,
        queue: &str,
        state: Option<&str>,
        after: Option<i64>,
        max: i32,
    ) -> Result<Vec<ItemRow>, AppError> {
        let rows = self.rows(ITEMS, &[&queue, &state, &after, &max]).await?;
        rows.iter()
            .map(|r| {
                Ok(ItemRow {
                    id: r.try_get(0)?,
                    key: r.try_get(1)?,
                    state: r.try_get(2)?,
                    priority: r.try_get(3)?,
                    run_at: r.try_get(4)?,
                    attempts: r.try_get(5)?,
                    max_attempts: r.try_get(6)?,
                    owner: r.try_get(7)?,
                    epoch: r.try_get(8)?,
                    lease_until: r.try_get(9)?,
                    group_key: r.try_get(10)?,
                    last_error: r.try_get(11)?,
                    lease_live: r.try_get(12)?,
                })
            })
            .collect()
    }

    /// Whether `queue` has items or settings the role may read, by index probes only (never
    /// a scan of `workfence.items`, whatever the queue): its first item in the queue's own
    /// part of the (queue, key) index (`work_items`), then, for a queue with no items and a
    /// role that may read the settings table, its row there by primary key. A role that may
    /// not read `workfence.queues` cannot tell a queue that has only settings from one that
    /// does not exist: [`Lookup::Unknown`] says so.
    pub async fn queue_lookup(&self, queue: &str) -> Result<Lookup, AppError> {
        if self.flag(QUEUE_HAS_ITEMS, &[&queue]).await? {
            return Ok(Lookup::Known);
        }
        let settings_read = self.flag(SETTINGS_READABLE, &[]).await?;
        if settings_read && self.flag(QUEUE_HAS_SETTINGS, &[&queue]).await? {
            return Ok(Lookup::Known);
        }
        Ok(Lookup::Unknown { settings_read })
    }

    /// `work_may('operate', queue)`: whether queue grants let the role operate the queue.
    pub async fn may_operate(&self, queue: &str) -> Result<bool, AppError> {
        self.flag(MAY_OPERATE, &[&queue]).await
    }

    /// The item with this id, if the role may read it.
    pub async fn item(&self, id: i64) -> Result<Option<Item>, AppError> {
        let rows = self.rows(ITEM, &[&id]).await?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let errors: Option<Value> = r.try_get(12)?;
        Ok(Some(Item {
            id: r.try_get(0)?,
            queue: r.try_get(1)?,
            key: r.try_get(2)?,
            state: r.try_get(3)?,
            priority: r.try_get(4)?,
            run_at: r.try_get(5)?,
            attempts: r.try_get(6)?,
            max_attempts: r.try_get(7)?,
            owner: r.try_get(8)?,
            epoch: r.try_get(9)?,
            claimed_at: r.try_get(10)?,
            lease_until: r.try_get(11)?,
            errors: errors
                .map(|e| ErrorEntry::from_json(&e))
                .unwrap_or_default(),
            result: r.try_get(13)?,
            created_at: r.try_get(14)?,
            finished_at: r.try_get(15)?,
            payload: r.try_get(16)?,
            max_run: r.try_get(17)?,
            lease_live: r.try_get(18)?,
            may_operate: r.try_get(19)?,
            progress: r.try_get::<_, Option<Value>>(20)?.filter(|p| !p.is_null()),
        }))
    }

    /// The workflow around item `id` (`work_workflow`, from 0.12.0: index probes of the
    /// edges, at most [`WORKFLOW_MAX_ROWS`] rows): [`Workflow::Absent`] on an older database,
    /// [`Workflow::NotCallable`] when `session` says the role may not call it or the server
    /// refuses it (42501). Other errors are the server's.
    pub async fn workflow(&self, session: &Session, id: i64) -> Result<Workflow, AppError> {
        if !session.workflow_exists {
            return Ok(Workflow::Absent);
        }
        if !session.workflow_callable {
            return Ok(Workflow::NotCallable);
        }
        let rows = match self.rows(WORKFLOW, &[&id]).await {
            Ok(rows) => rows,
            Err(e) if e.sqlstate() == Some("42501") => return Ok(Workflow::NotCallable),
            Err(e) => return Err(e),
        };
        let rows = rows
            .iter()
            .map(|r| {
                Ok(WorkflowRow {
                    id: r.try_get(0)?,
                    queue: r.try_get(1)?,
                    key: r.try_get(2)?,
                    state: r.try_get(3)?,
                    depth: r.try_get(4)?,
                    parents: r.try_get::<_, Option<Vec<i64>>>(5)?.unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, AppError>>()?;
        Ok(Workflow::Rows(rows))
    }

    /// The id of the item with `key` in `queue`, if any.
    pub async fn item_id_by_key(&self, queue: &str, key: &str) -> Result<Option<i64>, AppError> {
        let rows = self.rows(ITEM_BY_KEY, &[&queue, &key]).await?;
        Ok(match rows.first() {
            Some(r) => Some(r.try_get(0)?),
            None => None,
        })
    }

    /// `work_lease_status(id, owner, epoch)`.
    pub async fn lease_status(&self, id: i64, owner: &str, epoch: i64) -> Result<String, AppError> {
        Ok(self
            .one(LEASE_STATUS, &[&id, &owner, &epoch])
            .await?
            .try_get(0)?)
    }

    async fn flag(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<bool, AppError> {
        Ok(self.one(sql, params).await?.try_get(0)?)
    }

    /// `work_retry(queue, key)` ([`workfence::retry`]).
    pub async fn retry(&self, queue: &str, key: &str) -> Result<bool, AppError> {
        Ok(workfence::retry(self.client(), queue, key, None).await?)
    }

    /// `work_reschedule(queue, key, run_at)`: now or a delay by the server's clock
    /// ([`workfence::reschedule_in`]), or a UTC time of day the server parses.
    pub async fn reschedule(&self, queue: &str, key: &str, at: &RunAt) -> Result<bool, AppError> {
        let delay = match at {
            RunAt::Utc(text) => return self.flag(RESCHEDULE_AT, &[&queue, &key, text]).await,
            RunAt::Now => Duration::ZERO,
            RunAt::In(seconds) => Duration::from_secs(u64::try_from(*seconds).unwrap_or(0)),
        };
        Ok(workfence::reschedule_in(self.client(), queue, key, delay).await?)
    }

    /// `work_cancel(queue, key)` ([`workfence::cancel`]).
    pub async fn cancel(&self, queue: &str, key: &str) -> Result<bool, AppError> {
        Ok(workfence::cancel(self.client(), queue, key).await?)
    }

    /// `work_pause(queue)` ([`workfence::pause`]).
    pub async fn pause(&self, queue: &str) -> Result<bool, AppError> {
        Ok(workfence::pause(self.client(), queue).await?)
    }

    /// `work_resume(queue)` ([`workfence::resume`]).
    pub async fn resume(&self, queue: &str) -> Result<bool, AppError> {
        Ok(workfence::resume(self.client(), queue).await?)
    }

    /// The pooled connection's client, for the `workfence` library's calls.
    fn client(&self) -> &tokio_postgres::Client {
        &self.0
    }

    /// `work_limit(queue, concurrency, rate, per[, per_group => ...])`: sets every limit of
    /// `queue`. `per_group` is named only when set, so that a 0.11.0 database (whose
    /// `work_limit` has no such argument) takes the other three; one that is set there is a
    /// 42883 whose advice says that `per_group` needs 0.12.0.
    pub async fn limit(&self, queue: &str, limits: &Limits) -> Result<(), AppError> {
        let (c, r, per) = (&limits.concurrency, &limits.rate, &limits.per);
        match &limits.per_group {
            None => self.rows(LIMIT, &[&queue, c, r, per]).await.map(drop),
            Some(g) => self
                .rows(LIMIT_PER_GROUP, &[&queue, c, r, per, g])
                .await
                .map(drop)
                .map_err(|e| match e.sqlstate() {
                    Some("42883") => e.with_advice(PER_GROUP_ADVICE),
                    _ => e,
                }),
        }
    }
}

/// A row of [`COUNTERS`] or [`QUEUE_COUNTERS`].
fn counters_row(r: &Row) -> Result<QueueCounters, AppError> {
    let queue: String = r.try_get(0)?;
    let le: Vec<f64> = r.try_get(10)?;
    let histogram = |buckets: usize, sum: usize| -> Result<Histogram, AppError> {
        Histogram::new(le.clone(), r.try_get(buckets)?, r.try_get(sum)?).map_err(|why| {
            AppError::internal(format!(
                "workfence.work_queue_counters, queue {queue:?}: {why}"
            ))
        })
    };
    Ok(QueueCounters {
        time_in_queue: histogram(11, 12)?,
        run_time: histogram(13, 14)?,
        enqueued: r.try_get(1)?,
        claimed: r.try_get(2)?,
        done: r.try_get(3)?,
        failed: r.try_get(4)?,
        retried: r.try_get(5)?,
        released: r.try_get(6)?,
        cancelled: r.try_get(7)?,
        refused: r.try_get(8)?,
        lapsed: r.try_get(9)?,
        queue,
    })
}

/// A row of [`SCHEDULES`] or [`QUEUE_SCHEDULES`].
fn schedule_row(r: &Row) -> Result<ScheduleRow, AppError> {
    Ok(ScheduleRow {
        name: r.try_get(0)?,
        cron: r.try_get(1)?,
        timezone: r.try_get(2)?,
        queue: r.try_get(3)?,
        catch_up: r.try_get(4)?,
        paused: r.try_get(5)?,
        next_slot: r.try_get(6)?,
        last_slot: r.try_get(7)?,
        last_item_id: r.try_get(8)?,
        last_fired_at: r.try_get(9)?,
        next_slot_epoch: r.try_get(10)?,
        last_fired_epoch: r.try_get(11)?,
        may_operate: r.try_get(12)?,
    })
}

/// An error of a schedule call: no schedule of that name (42704) is a 404, not the 500 an
/// undefined object is elsewhere; a function that does not exist (42883) says schedules need
/// 0.12.0.
fn schedule_call_error(e: AppError) -> AppError {
    match e.sqlstate() {
        Some("42704") => e.with_status(axum::http::StatusCode::NOT_FOUND),
        Some("42883") => e.with_advice(SCHEDULES_ADVICE),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_history_entries() {
        let v: Value = serde_json::json!([
            {"attempt": 1, "epoch": 7, "owner": "w", "at": "2026-01-01", "error": "<b>boom</b>"},
            {"attempt": 2},
            "junk"
        ]);
        let e = ErrorEntry::from_json(&v);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].attempt, "1");
        assert_eq!(e[0].error, "<b>boom</b>");
        assert_eq!(e[1].owner, "");
        assert!(ErrorEntry::from_json(&Value::Null).is_empty());
    }

    #[test]
    fn who_a_connection_string_connects_as() {
        assert_eq!(
            who(Some("alice"), Some("app")),
            "role \"alice\" to database \"app\""
        );
        assert_eq!(
            who(Some("alice"), None),
            "role \"alice\" to database \"alice\""
        );
        assert!(who(None, Some("app")).ends_with("to database \"app\""));
    }

    #[test]
    fn timestamps_are_formatted_by_the_server() {
        assert!(ITEM.contains("pg_catalog.isfinite(i.lease_until)"));
        assert!(!ITEMS.contains("{"));
        assert!(SCHEDULES.contains("pg_catalog.isfinite(s.next_slot)"));
        assert!(SCHEDULES.ends_with("FROM workfence.work_schedules AS s ORDER BY s.name"));
        assert!(
            QUEUE_SCHEDULES.contains("AS s WHERE s.queue OPERATOR(pg_catalog.=) $1::text ORDER BY")
        );
    }
}
