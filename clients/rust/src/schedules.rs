//! Schedules (from 0.12.0): cron in the server. One function per SQL function (`work_schedule`,
//! `work_unschedule`, `work_pause_schedule`, `work_resume_schedule`, `work_fire_schedules`) and
//! [`schedules`] for the view `workfence.work_schedules`, on a connection the caller passes, as
//! the operator's calls of `ops.rs`. clients/README.md, *Schedules*; docs/reference.md,
//! *Schedules (from 0.12.0)*, for the semantics.

use std::fmt;
use std::time::SystemTime;

use serde_json::Value;
use tokio_postgres::types::{FromSql, Json, Type};
use tokio_postgres::{GenericClient, Row};

use crate::error::Result;
use crate::ops::call_bool;

/// `work_schedule` with every argument by name, so that the call reads as the reference does.
const SCHEDULE_SQL: &str = "SELECT workfence.work_schedule(name => $1, cron => $2, queue => $3, \
     payload => $4, timezone => $5, catch_up => $6, priority => $7, max_attempts => $8, \
     group_key => $9)";

/// The columns of `workfence.work_schedules`; `next_slot` NULL for `infinity` (the expression
/// names no more slots), which no `SystemTime` conversion should be asked to hold.
const SCHEDULE_COLUMNS: &str = "name, cron, timezone, queue, catch_up, paused, \
     CASE WHEN pg_catalog.isfinite(next_slot) THEN next_slot END AS next_slot, last_slot, \
     last_item_id, last_fired_at, payload, priority, max_attempts, group_key";

/// What a fire does with the slots of a schedule that passed unfired (the database was down,
/// the schedule paused, nothing fired): the `catch_up` argument of `work_schedule`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CatchUp {
    /// `latest` (the default): fire only the most recent missed slot.
    #[default]
    Latest,
    /// `all`: fire each missed slot, oldest first (at most 100 per schedule per round, the rest
    /// in the rounds after).
    All,
    /// `none`: fire a missed slot only if it is at most 60 seconds old.
    None,
}

impl CatchUp {
    /// The SQL spelling: `latest`, `all` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::None => "none",
        }
    }
}

impl fmt::Display for CatchUp {
    /// The SQL spelling ([`CatchUp::as_str`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'a> FromSql<'a> for CatchUp {
    /// Reads the text the server keeps (`latest`, `all` or `none`); any other text is a
    /// conversion error.
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        match <&str as FromSql>::from_sql(ty, raw)? {
            "latest" => Ok(CatchUp::Latest),
            "all" => Ok(CatchUp::All),
            "none" => Ok(CatchUp::None),
            other => Err(format!("unknown catch_up {other:?}").into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

/// The optional arguments of [`schedule`]; `ScheduleOptions::default()` gives the server's
/// defaults (docs/reference.md, `work_schedule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// The IANA time zone the cron expression is read in (`"Europe/Berlin"`); default `"UTC"`.
    /// An unknown zone is [`crate::Error::InvalidArgument`] (22023).
    pub timezone: String,
    /// What a fire does with slots that passed unfired (default [`CatchUp::Latest`]).
    pub catch_up: CatchUp,
    /// The items' priority, lower claimed first (default 0).
    pub priority: i32,
    /// The items' `max_attempts`, 1..1000 (default 25).
    pub max_attempts: i32,
    /// The items' serial group, as [`crate::EnqueueOptions::group_key`]. `None`: no group.
    pub group_key: Option<String>,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions {
            timezone: "UTC".to_owned(),
            catch_up: CatchUp::Latest,
            priority: 0,
            max_attempts: 25,
            group_key: None,
        }
    }
}

impl ScheduleOptions {
    /// The options with `timezone` set.
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = timezone.into();
        self
    }

    /// The options with `catch_up` set.
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
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

    /// The options with `group_key` set.
    pub fn group_key(mut self, group_key: impl Into<String>) -> Self {
        self.group_key = Some(group_key.into());
        self
    }
}

/// Creates or replaces the schedule `name` (`work_schedule`, from 0.12.0). True if the schedule
/// is new or one of its settings changed.
///
/// Each *slot* of `cron` read in [`ScheduleOptions::timezone`] enqueues one item in `queue`
/// with key `<name>@<slot as UTC ISO 8601>` (`nightly@2026-12-07T01:00:00Z`), `run_at` the slot,
/// `payload`, and the options' priority, `max_attempts` and group key. `cron` has five fields
/// (minute, hour, day of month, month, day of week), or six with seconds first, or is one of
/// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`. A new schedule starts at its first slot
/// after now; a replace with the same `cron` and time zone keeps its next slot, and keeps a paused
/// schedule paused. The items are claimed like any other: a [`crate::Worker`] of the queue needs
/// nothing more (its long poll fires the queue's due slots itself). Runs in the caller's
/// transaction. Limits: `name` 1..128 bytes, `cron` at most 256 bytes.
///
/// Errors: [`crate::Error::NullArgument`] (22004), [`crate::Error::InvalidArgument`] (22023: a
/// bad name or queue, a cron expression that does not parse or names no time, an unknown time
/// zone, `max_attempts` out of 1..1000, a bad group key), [`crate::Error::ReadOnly`] (25006),
/// [`crate::Error::NotPermitted`] (42501: no `operate` grant covering the queue, or, when
/// replacing, the schedule's current queue).
pub async fn schedule(
    client: &impl GenericClient,
    name: &str,
    cron: &str,
    queue: &str,
    payload: &Value,
    options: &ScheduleOptions,
) -> Result<bool> {
    call_bool(
        client,
        SCHEDULE_SQL,
        &[
            &name,
            &cron,
            &queue,
            &Json(payload),
            &options.timezone,
            &options.catch_up.as_str(),
            &options.priority,
            &options.max_attempts,
            &options.group_key,
        ],
    )
    .await
}

/// Removes the schedule `name` (`work_unschedule`, from 0.12.0); the items it fired stay. True
/// if it existed (false changes nothing). Errors: 22004, 22023 (a bad name), 25006, 42501 (no
/// `operate` grant covering the schedule's queue).
pub async fn unschedule(client: &impl GenericClient, name: &str) -> Result<bool> {
    call_bool(client, "SELECT workfence.work_unschedule($1)", &[&name]).await
}

/// Pauses the schedule `name` (`work_pause_schedule`, from 0.12.0): it fires nothing from the
/// commit on, until [`resume_schedule`]. Its queue and items are untouched ([`crate::pause`]
/// stops the queue). True if it was not paused. Errors: 22004, 22023 (a bad name),
/// [`crate::Error::UndefinedObject`] (42704: no schedule of that name), 25006, 42501.
pub async fn pause_schedule(client: &impl GenericClient, name: &str) -> Result<bool> {
    call_bool(client, "SELECT workfence.work_pause_schedule($1)", &[&name]).await
}

/// Resumes the schedule `name` (`work_resume_schedule`, from 0.12.0): it fires again from the
/// commit on, and the slots missed while it was paused fire as its [`CatchUp`] says. True if it
/// was paused. Errors: 22004, 22023 (a bad name), [`crate::Error::UndefinedObject`] (42704: no
/// schedule of that name), 25006, 42501.
pub async fn resume_schedule(client: &impl GenericClient, name: &str) -> Result<bool> {
    call_bool(
        client,
        "SELECT workfence.work_resume_schedule($1)",
        &[&name],
    )
    .await
}

/// Fires every due slot of every schedule that is not paused, now, in the caller's transaction
/// (`work_fire_schedules`, from 0.12.0), and returns how many items it enqueued (a slot whose
/// key already exists enqueues none). Any number of sessions may call it at once, as often as
/// they like: a schedule another transaction is firing is passed over, and no slot is fired
/// twice. Not needed where workers long-poll the schedules' queues or the maintenance worker
/// runs: both fire due slots themselves. Errors: [`crate::Error::ReadOnly`] (25006: a hot
/// standby, or a read-only transaction).
pub async fn fire_schedules(client: &impl GenericClient) -> Result<i32> {
    Ok(client
        .query_one("SELECT workfence.work_fire_schedules()", &[])
        .await?
        .try_get(0)?)
}

/// One schedule as the view `workfence.work_schedules` shows it (from 0.12.0): its definition
/// and what it last fired. Times are the server's.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The schedule's name; its items' keys are `<name>@<slot as UTC ISO 8601>`.
    pub name: String,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue its items are enqueued in.
    pub queue: String,
    /// What a fire does with slots that passed unfired.
    pub catch_up: CatchUp,
    /// Whether it is paused ([`pause_schedule`]): it fires nothing.
    pub paused: bool,
    /// The first slot not yet fired or skipped; `None` when the expression names no more.
    pub next_slot: Option<SystemTime>,
    /// The last slot fired; `None` before the first.
    pub last_slot: Option<SystemTime>,
    /// The id of the last slot's item (it may since be purged); `None` before the first fire.
    pub last_item_id: Option<i64>,
    /// When the last slot was fired (server time); `None` before the first fire.
    pub last_fired_at: Option<SystemTime>,
    /// The payload of its items.
    pub payload: Value,
    /// The priority of its items.
    pub priority: i32,
    /// The `max_attempts` of its items.
    pub max_attempts: i32,
    /// The serial group of its items; `None`: none.
    pub group_key: Option<String>,
}

impl Schedule {
    /// Reads one row of [`SCHEDULE_COLUMNS`].
    fn from_row(row: &Row) -> Result<Self> {
        let Json(payload): Json<Value> = row.try_get("payload")?;
        Ok(Schedule {
            name: row.try_get("name")?,
            cron: row.try_get("cron")?,
            timezone: row.try_get("timezone")?,
            queue: row.try_get("queue")?,
            catch_up: row.try_get("catch_up")?,
            paused: row.try_get("paused")?,
            next_slot: row.try_get("next_slot")?,
            last_slot: row.try_get("last_slot")?,
            last_item_id: row.try_get("last_item_id")?,
            last_fired_at: row.try_get("last_fired_at")?,
            payload,
            priority: row.try_get("priority")?,
            max_attempts: row.try_get("max_attempts")?,
            group_key: row.try_get("group_key")?,
        })
    }
}

/// Every schedule, by name (the view `workfence.work_schedules`, from 0.12.0); where queue
/// grants are enforced, only those of queues the role may `read`. Only reads. Errors:
/// [`crate::Error::NotPermitted`] (42501: no privilege on the view, which PUBLIC lacks).
pub async fn schedules(client: &impl GenericClient) -> Result<Vec<Schedule>> {
    let sql = format!("SELECT {SCHEDULE_COLUMNS} FROM workfence.work_schedules ORDER BY name");
    client
        .query(&sql, &[])
        .await?
        .iter()
        .map(Schedule::from_row)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_are_the_servers_defaults() {
        let o = ScheduleOptions::default();
        assert_eq!(o.timezone, "UTC");
        assert_eq!(o.catch_up, CatchUp::Latest);
        assert_eq!((o.priority, o.max_attempts, o.group_key), (0, 25, None));
        let o = ScheduleOptions::default()
            .timezone("Europe/Berlin")
            .catch_up(CatchUp::All)
            .priority(-1)
            .max_attempts(3)
            .group_key("g");
        assert_eq!(
            (
                o.timezone.as_str(),
                o.catch_up,
                o.priority,
                o.max_attempts,
                o.group_key.as_deref()
            ),
            ("Europe/Berlin", CatchUp::All, -1, 3, Some("g"))
        );
    }

    #[test]
    fn catch_up_reads_and_writes_the_sql_spelling() {
        for (mode, text) in [
            (CatchUp::Latest, "latest"),
            (CatchUp::All, "all"),
            (CatchUp::None, "none"),
        ] {
            assert_eq!(mode.as_str(), text);
            assert_eq!(mode.to_string(), text);
            assert_eq!(
                CatchUp::from_sql(&Type::TEXT, text.as_bytes()).expect("known"),
                mode
            );
        }
        assert!(CatchUp::from_sql(&Type::TEXT, b"sometimes").is_err());
        assert!(<CatchUp as FromSql>::accepts(&Type::TEXT));
        assert!(!<CatchUp as FromSql>::accepts(&Type::INT4));
    }
}
