//! Argument checks shared by every function.
//!
//! Each check takes the SQL argument as the function received it (`None` is
//! SQL NULL) and returns the value to use, or the [`WorkfenceError`] to raise
//! (22004 for NULL, 22023 for a bad value), naming the argument. The checks
//! run before any statement, so a rejected call changes nothing.

use crate::base::error::{Detail, Piece, Result, WorkfenceError};
pub use crate::base::types::IntervalParts;
use crate::base::types::{Capability, Pattern, USECS_PER_DAY};

/// Longest queue name, in bytes.
pub const QUEUE_MAX_BYTES: usize = 128;
/// Longest owner, in bytes (after trimming).
pub const OWNER_MAX_BYTES: usize = 256;
/// Longest item key, in bytes (it is indexed with the queue name).
pub const KEY_MAX_BYTES: usize = 512;
/// Largest `max_items` one `work_claim` may ask for.
pub const MAX_ITEMS_CAP: i32 = 1000;
/// Largest `max_attempts` an item may have.
pub const MAX_ATTEMPTS_CAP: i32 = 1000;

/// Longest lease one claim or renew may take: 7 days. A job that runs longer
/// renews its lease from a heartbeat.
pub const LEASE_MAX_USECS: i128 = 7 * USECS_PER_DAY;
/// Longest delay of `work_release` and `retry_in` of `work_fail`: 365 days.
pub const DELAY_MAX_USECS: i128 = 365 * USECS_PER_DAY;

/// Longest long poll of `work_claim(..., wait)`: 1 hour. The waiting
/// statement keeps its snapshot (and so holds back vacuum's horizon) while
/// it waits; workers should wait seconds to a minute and call again.
pub const WAIT_MAX_USECS: i128 = 3_600 * 1_000_000;

/// Longest `max_run` of `work_enqueue`: 365 days (a month counted as 30
/// days). The run-time limit of a job that renews its lease from a heartbeat.
pub const MAX_RUN_MAX_USECS: i128 = 365 * USECS_PER_DAY;

/// The largest `concurrency` and `rate` of `work_limit` (from 0.10.0).
pub const LIMIT_CAP: i32 = 10_000;
/// The longest window of a rate limit (`per` of `work_limit`): one day.
pub const PER_MAX_USECS: i128 = USECS_PER_DAY;

/// Longest error text kept per failure (`last_error` and each `errors`
/// entry), in bytes: a longer one is cut at a character boundary and
/// marked, so that a stack trace of megabytes does not bloat the row.
pub const ERROR_TEXT_MAX_BYTES: usize = 2048;

/// How many entries `errors` keeps: the newest ones (the oldest is dropped
/// when a new one would make more).
pub const ERRORS_KEPT: usize = 20;

/// Longest `older_than` of `work_purge`: 3650 days (ten years). Beyond it a
/// value is a mistake (and `clock_timestamp() - older_than` would overflow
/// long before the interval type does).
pub const RETENTION_MAX_USECS: i128 = 3650 * USECS_PER_DAY;

/// Days from 1970-01-01 to the proleptic Gregorian date (y, m, d), m in 1..=12
/// (Howard Hinnant, "chrono-Compatible Low-Level Date Algorithms").
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    days_from_civil(y + i64::from(m == 12), m % 12 + 1, 1) - days_from_civil(y, m, 1)
}

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

impl IntervalParts {
    /// How long the interval really is when added to `now` (microseconds
    /// since 2000-01-01 00:00 UTC, a `TimestampTz`): months as the calendar
    /// months that follow `now` (a day past the target month's end becomes
    /// its last day, as PostgreSQL's `timestamp + interval` does), days as
    /// 24 hours. So `'12 mon 5 days'` from 2026-12-01 is 370 days, where
    /// [`IntervalParts::total_micros`] counts 365. Call only with intervals
    /// whose `total_micros` is within a few years (the caps are).
    pub fn micros_from(self, now: i64) -> i128 {
        let usecs_day = USECS_PER_DAY as i64;
        let day = now.div_euclid(usecs_day) + PG_EPOCH_DAYS;
        let (y, m, d) = civil_from_days(day);
        let months = y * 12 + (m - 1) + i64::from(self.months);
        let (ny, nm) = (months.div_euclid(12), months.rem_euclid(12) + 1);
        let nd = d.min(days_in_month(ny, nm));
        let month_days = days_from_civil(ny, nm, nd) - day;
        (month_days as i128 + self.days as i128) * USECS_PER_DAY + self.micros as i128
    }
}

/// The DETAIL "`{subject}'<interval>'.`", the interval printed as the server
/// prints intervals (see [`Detail`]), e.g. `The lease is '8 days'.`
fn interval_is(subject: &str, value: IntervalParts) -> Detail {
    Detail::of([Piece::from(subject), value.into(), ".".into()])
}

/// A required argument: NULL raises 22004 naming it.
pub fn required<T>(arg: &'static str, value: Option<T>) -> Result<T> {
    value.ok_or(WorkfenceError::NullArgument { arg })
}

fn check_name(arg: &'static str, value: &str, max_bytes: usize) -> Result<()> {
    if value.len() > max_bytes {
        return Err(WorkfenceError::invalid(
            arg,
            format!("must be at most {max_bytes} bytes"),
            format!("The value is {} bytes long.", value.len()),
            "Use a shorter name.",
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(WorkfenceError::invalid(
            arg,
            "must not contain control characters",
            format!("Found character U+{:04X}.", c as u32),
            "Remove tabs, newlines and other control characters from the name.",
        ));
    }
    Ok(())
}

/// A queue name: non-empty, at most [`QUEUE_MAX_BYTES`], no control characters.
pub fn queue(value: Option<String>) -> Result<String> {
    let value = required("queue", value)?;
    if value.is_empty() {
        return Err(WorkfenceError::invalid(
            "queue",
            "must not be empty",
            "The queue name is ''.",
            "Name the queue, e.g. 'email'.",
        ));
    }
    check_name("queue", &value, QUEUE_MAX_BYTES)?;
    Ok(value)
}

/// A schedule's name (from 0.12.0, `work_schedule` and the calls that name
/// one): non-empty, at most [`QUEUE_MAX_BYTES`], no control characters, as
/// a queue name (its items' keys are `<name>@<slot>`, within
/// [`KEY_MAX_BYTES`]).
pub fn schedule_name(value: Option<String>) -> Result<String> {
    let value = required("name", value)?;
    if value.is_empty() {
        return Err(WorkfenceError::invalid(
            "name",
            "must not be empty",
            "The schedule name is ''.",
            "Name the schedule, e.g. 'nightly-report'.",
        ));
    }
    check_name("name", &value, QUEUE_MAX_BYTES)?;
    Ok(value)
}

/// A `group_key` of `work_enqueue` (from 0.10.0): NULL (no group), or
/// non-empty, at most [`QUEUE_MAX_BYTES`], no control characters, as a
/// queue name.
pub fn group_key(value: Option<String>) -> Result<Option<String>> {
    let Some(value) = value else {
        return Ok(None);
    };
    if value.is_empty() {
        return Err(WorkfenceError::invalid(
            "group_key",
            "must not be empty",
            "The group key is ''.",
            "Pass NULL for an item in no group, or name the group, e.g. the customer's id.",
        ));
    }
    check_name("group_key", &value, QUEUE_MAX_BYTES)?;
    Ok(Some(value))
}

/// The longest `trace` `work_enqueue` keeps, in bytes: a version-00
/// `traceparent` is 55; later versions may append fields.
pub const TRACE_MAX_BYTES: usize = 256;

/// A `trace` of `work_enqueue` (from 0.12.0): NULL (none), or a W3C Trace
/// Context `traceparent` header value (<https://www.w3.org/TR/trace-context/#traceparent-header>):
/// `version-trace_id-parent_id-flags`, lowercase hex of 2, 32, 16 and 2
/// digits, the version not `ff`, neither id all zeros; exactly that for
/// version `00`, and for a later version at most [`TRACE_MAX_BYTES`] with
/// more fields after a further `-` (as the recommendation asks a parser to
/// accept a future version), lowercase hex and `-` only, so that a worker
/// may pass it on as an HTTP header as it is. Errors: 22023 otherwise.
pub fn trace(value: Option<String>) -> Result<Option<String>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let hex = |part: &str, digits: usize| {
        part.len() == digits && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let nonzero = |part: &str| part.bytes().any(|b| b != b'0');
    let well_formed = value.len() <= TRACE_MAX_BYTES && {
        let mut parts = value.splitn(5, '-');
        match (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) {
            // A version after 00 may append fields after the flags.
            (Some(version), Some(trace_id), Some(parent_id), Some(flags), rest) => {
                hex(version, 2)
                    && version != "ff"
                    && (version != "00" || rest.is_none())
                    // Nothing a header could not carry as it is (no control
                    // character, no space): hex fields, as the known ones.
                    && rest.is_none_or(|rest| {
                        rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-'))
                    })
                    && hex(trace_id, 32)
                    && nonzero(trace_id)
                    && hex(parent_id, 16)
                    && nonzero(parent_id)
                    && hex(flags, 2)
            }
            _ => false,
        }
    };
    if !well_formed {
        return Err(WorkfenceError::invalid(
            "trace",
            "must be a W3C traceparent",
            format!(
                "The trace is {:?}.",
                value.chars().take(80).collect::<String>()
            ),
            "Pass the traceparent header of the request that enqueues the item \
             (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lowercase), or NULL.",
        ));
    }
    Ok(Some(value))
}

/// A limit of `work_limit` (`concurrency` or `rate`, from 0.10.0): NULL (no
/// limit) or 1 to [`LIMIT_CAP`].
pub fn limit(arg: &'static str, value: Option<i32>) -> Result<Option<i32>> {
    match value {
        Some(v) if !(1..=LIMIT_CAP).contains(&v) => Err(WorkfenceError::invalid(
            arg,
            format!("must be between 1 and {LIMIT_CAP}, or NULL"),
            format!("{arg} is {v}."),
            "Pass NULL to lift the limit; pause the queue (work_pause) to hand out nothing.",
        )),
        other => Ok(other),
    }
}

/// `per_group` of `work_limit` (from 0.12.0): 1 to [`LIMIT_CAP`], or NULL
/// (serial groups, as 1).
pub fn per_group(value: Option<i32>) -> Result<Option<i32>> {
    match value {
        Some(v) if !(1..=LIMIT_CAP).contains(&v) => Err(WorkfenceError::invalid(
            "per_group",
            format!("must be between 1 and {LIMIT_CAP}, or NULL"),
            format!("per_group is {v}."),
            "Pass NULL (or 1) for serial groups: one item of a group_key claimed at a time.",
        )),
        other => Ok(other),
    }
}

/// `per` of `work_limit` (from 0.10.0): the rate limit's window, more than
/// zero and at most [`PER_MAX_USECS`] (one day), with no negative field.
pub fn per(value: Option<IntervalParts>) -> Result<IntervalParts> {
    let value = required("per", value)?;
    let total = value.total_micros();
    if total <= 0 || total > PER_MAX_USECS {
        return Err(WorkfenceError::invalid(
            "per",
            "must be more than 0 and at most 1 day",
            interval_is("The interval is ", value),
            "Give the window of the rate limit, e.g. '1 second' or '1 minute'.",
        ));
    }
    no_negative_fields("per", value)?;
    Ok(value)
}

/// An owner: non-empty after trimming white space, at most
/// [`OWNER_MAX_BYTES`], no control characters.
///
/// The owner is stored as given (not trimmed): it is compared byte for byte.
pub fn owner(value: Option<String>) -> Result<String> {
    let value = required("owner", value)?;
    if value.trim().is_empty() {
        return Err(WorkfenceError::invalid(
            "owner",
            "must not be empty or blank",
            format!("The owner is {value:?}."),
            "Name the worker, e.g. hostname/pid. It need not be unique: the epoch fences, the owner is a check.",
        ));
    }
    // A control character is almost always a bug in how the name was made
    // (a hostname read with its trailing newline): reject it rather than let
    // it pass as a name that matches nothing the next process computes.
    check_name("owner", &value, OWNER_MAX_BYTES)?;
    Ok(value)
}

/// An item key: non-empty, at most [`KEY_MAX_BYTES`], no control characters.
pub fn key(value: String) -> Result<String> {
    if value.is_empty() {
        return Err(WorkfenceError::invalid(
            "key",
            "must not be empty",
            "The key is ''.",
            "Pass NULL to have a UUIDv7 key generated, or a non-empty key.",
        ));
    }
    check_name("key", &value, KEY_MAX_BYTES)?;
    Ok(value)
}

/// Reject an interval with a negative field: PostgreSQL adds months and days
/// as calendar units, so `'1 mon -29 days'` (30 days - 29 days by the
/// 30-day-month rule) can move a timestamp backwards in February.
fn no_negative_fields(arg: &'static str, value: IntervalParts) -> Result<()> {
    if value.months < 0 || value.days < 0 || value.micros < 0 {
        return Err(WorkfenceError::invalid(
            arg,
            "must not have a negative field",
            interval_is("The interval is ", value),
            "Write the interval with positive parts only, e.g. '23 hours' rather than '1 day -1 hour'.",
        ));
    }
    Ok(())
}

/// A lease: longer than zero and at most [`LEASE_MAX_USECS`], with no
/// negative field.
pub fn lease(value: Option<IntervalParts>) -> Result<IntervalParts> {
    let value = required("lease", value)?;
    let total = value.total_micros();
    if total <= 0 {
        return Err(WorkfenceError::invalid(
            "lease",
            "must be a positive interval",
            interval_is("The lease is ", value),
            "Pass the time the job needs before its next renew, e.g. '30 seconds'.",
        ));
    }
    if total > LEASE_MAX_USECS {
        return Err(WorkfenceError::invalid(
            "lease",
            "must be at most 7 days",
            interval_is("The lease is ", value),
            "Take a shorter lease and renew it from a heartbeat while the job runs.",
        ));
    }
    no_negative_fields("lease", value)?;
    Ok(value)
}

/// A delay (`work_release`'s `delay`, `work_fail`'s `retry_in`): zero or
/// longer, at most [`DELAY_MAX_USECS`], with no negative field. The cap is
/// judged by the delay's real length from `now` (the server's clock, a
/// `TimestampTz`; see [`IntervalParts::micros_from`]), so months count as
/// the calendar months that follow, not 30 days each.
pub fn delay(arg: &'static str, value: IntervalParts, now: i64) -> Result<IntervalParts> {
    let mut total = value.total_micros();
    let mut detail = interval_is("The interval is ", value);
    if (0..=DELAY_MAX_USECS).contains(&total) && value.months > 0 {
        total = value.micros_from(now);
        let real = IntervalParts {
            months: 0,
            days: (total / USECS_PER_DAY) as i32,
            micros: (total % USECS_PER_DAY) as i64,
        };
        detail = Detail::of([
            "The interval is ".into(),
            value.into(),
            ", ".into(),
            real.into(),
            " from now.".into(),
        ]);
    }
    if total < 0 {
        return Err(WorkfenceError::invalid(
            arg,
            "must not be negative",
            detail,
            "Pass '0' to make the item claimable at once.",
        ));
    }
    if total > DELAY_MAX_USECS {
        return Err(WorkfenceError::invalid(
            arg,
            "must be at most 365 days",
            detail,
            "Cancel the item instead of parking it for longer than a year.",
        ));
    }
    no_negative_fields(arg, value)?;
    Ok(value)
}

/// `wait` of `work_claim`: zero (do not wait) to [`WAIT_MAX_USECS`], with no
/// negative field; returned as a duration.
pub fn wait(value: Option<IntervalParts>) -> Result<std::time::Duration> {
    let value = required("wait", value)?;
    let total = value.total_micros();
    if !(0..=WAIT_MAX_USECS).contains(&total) {
        return Err(WorkfenceError::invalid(
            "wait",
            "must be between 0 and 1 hour",
            interval_is("The interval is ", value),
            "Long-poll for seconds to a minute, then call work_claim again.",
        ));
    }
    no_negative_fields("wait", value)?;
    // In range 0..=1 h, so the cast is exact.
    Ok(std::time::Duration::from_micros(total as u64))
}

/// `older_than` of `work_purge`: zero (everything finished so far) or longer,
/// at most [`RETENTION_MAX_USECS`], with no negative field.
pub fn older_than(value: Option<IntervalParts>) -> Result<IntervalParts> {
    let value = required("older_than", value)?;
    let total = value.total_micros();
    if total < 0 {
        return Err(WorkfenceError::invalid(
            "older_than",
            "must not be negative",
            interval_is("The interval is ", value),
            "Pass '0' to purge every item finished so far.",
        ));
    }
    if total > RETENTION_MAX_USECS {
        return Err(WorkfenceError::invalid(
            "older_than",
            "must be at most 3650 days",
            interval_is("The interval is ", value),
            "Keep finished items for at most ten years; archive older history elsewhere.",
        ));
    }
    no_negative_fields("older_than", value)?;
    Ok(value)
}

/// `max_run` of `work_enqueue`: NULL (no limit), or longer than zero and
/// at most [`MAX_RUN_MAX_USECS`], with no negative field.
pub fn max_run(value: Option<IntervalParts>) -> Result<Option<IntervalParts>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let total = value.total_micros();
    if total <= 0 {
        return Err(WorkfenceError::invalid(
            "max_run",
            "must be a positive interval",
            interval_is("The interval is ", value),
            "Pass the longest the job may run, e.g. '15 minutes', or NULL for no limit.",
        ));
    }
    if total > MAX_RUN_MAX_USECS {
        return Err(WorkfenceError::invalid(
            "max_run",
            "must be at most 365 days",
            interval_is("The interval is ", value),
            "Pass NULL for a job without a run-time limit.",
        ));
    }
    no_negative_fields("max_run", value)?;
    Ok(Some(value))
}

/// An error text as it is stored: at most [`ERROR_TEXT_MAX_BYTES`] bytes,
/// a longer one cut at a character boundary and ended with a note of its
/// full length. Not an error: a failure is recorded whatever its text.
pub fn error_text(value: String) -> String {
    if value.len() <= ERROR_TEXT_MAX_BYTES {
        return value;
    }
    let note = format!(" [truncated: {} bytes in all]", value.len());
    let mut cut = ERROR_TEXT_MAX_BYTES - note.len();
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut kept = value;
    kept.truncate(cut);
    kept.push_str(&note);
    kept
}

/// A `run_at` (`work_enqueue`, `work_retry`, `work_reschedule`): anything
/// but `'infinity'`, at which the item could never be claimed (NULL is
/// "now" where the function allows it).
pub fn finite_run_at(
    value: Option<pgrx::prelude::TimestampWithTimeZone>,
) -> Result<Option<pgrx::prelude::TimestampWithTimeZone>> {
    if value.is_some_and(|at| at.is_infinity()) {
        return Err(WorkfenceError::invalid(
            "run_at",
            "must not be 'infinity'",
            "An item due at 'infinity' could never be claimed.",
            "Pass a finite time, or cancel the item instead.",
        ));
    }
    Ok(value)
}

/// `max_items` of `work_claim`: 1 to [`MAX_ITEMS_CAP`].
pub fn max_items(value: Option<i32>) -> Result<i32> {
    let value = required("max_items", value)?;
    if !(1..=MAX_ITEMS_CAP).contains(&value) {
        return Err(WorkfenceError::invalid(
            "max_items",
            format!("must be between 1 and {MAX_ITEMS_CAP}"),
            format!("max_items is {value}."),
            "Claim in batches of at most 1000 items.",
        ));
    }
    Ok(value)
}

/// `max_attempts` of `work_enqueue`: 1 to [`MAX_ATTEMPTS_CAP`].
pub fn max_attempts(value: Option<i32>) -> Result<i32> {
    let value = required("max_attempts", value)?;
    if !(1..=MAX_ATTEMPTS_CAP).contains(&value) {
        return Err(WorkfenceError::invalid(
            "max_attempts",
            format!("must be between 1 and {MAX_ATTEMPTS_CAP}"),
            format!("max_attempts is {value}."),
            "Pass 1 for an item that must never be retried.",
        ));
    }
    Ok(value)
}

/// An item id: not NULL. (An unknown id is not an error: the call is refused.)
pub fn id(value: Option<i64>) -> Result<i64> {
    required("id", value)
}

/// An epoch: not NULL. (A stale or foreign epoch is not an error: the call is refused.)
pub fn epoch(value: Option<i64>) -> Result<i64> {
    required("epoch", value)
}

/// Longest role name, in bytes: PostgreSQL's identifier limit
/// (`NAMEDATALEN - 1`); a longer name names no role.
pub const ROLE_MAX_BYTES: usize = 63;

/// A capability of a queue grant (`work_grant`, `work_revoke`,
/// `work_may`): one of [`Capability::ALL`]'s names.
pub fn capability(value: Option<String>) -> Result<Capability> {
    let value = required("capability", value)?;
    Capability::parse(&value).ok_or_else(|| {
        WorkfenceError::invalid(
            "capability",
            "must be one of enqueue, claim, operate, read, purge",
            format!("The capability is {value:?}."),
            "enqueue: work_enqueue; claim: work_claim and the token calls; operate: work_cancel, \
             work_retry, work_reschedule, work_pause, work_resume; read: work_queue_stats, \
             work_item, queue_counters; purge: work_purge.",
        )
    })
}

/// The queues of a grant: a queue name, or a prefix followed by `*` (every
/// queue whose name starts with it; `*` alone: every queue). The name or
/// prefix follows the rules of a queue name (at most [`QUEUE_MAX_BYTES`], no
/// control characters), but a prefix may be empty.
pub fn queues(value: Option<String>) -> Result<Pattern> {
    let value = required("queues", value)?;
    if value.is_empty() {
        return Err(WorkfenceError::invalid(
            "queues",
            "must not be empty",
            "The queues are ''.",
            "Name a queue ('billing'), a prefix followed by * ('billing.*'), or * for every queue.",
        ));
    }
    let pattern = Pattern::parse(&value);
    check_name("queues", pattern.name(), QUEUE_MAX_BYTES)?;
    Ok(pattern)
}

/// A role name: non-empty, at most [`ROLE_MAX_BYTES`], no control
/// characters. Whether the role exists is the caller's look-up.
pub fn role(value: Option<String>) -> Result<String> {
    let value = required("role", value)?;
    if value.is_empty() {
        return Err(WorkfenceError::invalid(
            "role",
            "must not be empty",
            "The role is ''.",
            "Name a role, e.g. a group role your workers log in as members of.",
        ));
    }
    check_name("role", &value, ROLE_MAX_BYTES)?;
    Ok(value)
}

#[cfg(test)]
mod trace_tests {
    use super::trace;

    #[test]
    fn a_traceparent_is_kept_and_anything_else_refused() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace(Some(good.into())).unwrap().as_deref(), Some(good));
        assert_eq!(trace(None).unwrap(), None);
        // A later version may carry more fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-beef-0a";
        assert!(trace(Some(later.into())).is_ok());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\r\nX-Injected: 1",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what next",
        ] {
            assert!(trace(Some(bad.into())).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(months: i32, days: i32, micros: i64) -> Option<IntervalParts> {
        Some(IntervalParts {
            months,
            days,
            micros,
        })
    }

    #[test]
    fn lease_bounds() {
        assert!(lease(iv(0, 0, 1)).is_ok());
        assert!(lease(iv(0, 7, 0)).is_ok());
        assert!(lease(iv(0, 0, 0)).is_err());
        assert!(
            lease(iv(0, 1, -86_400_000_000)).is_err(),
            "1 day - 24 h is zero"
        );
        assert!(lease(iv(0, 7, 1)).is_err());
        assert!(lease(iv(1, 0, 0)).is_err(), "a month is 30 days");
        assert!(matches!(
            lease(None),
            Err(WorkfenceError::NullArgument { arg: "lease" })
        ));
    }

    #[test]
    fn max_run_bounds() {
        assert_eq!(max_run(None).unwrap(), None);
        assert!(max_run(iv(0, 0, 1)).unwrap().is_some());
        assert!(max_run(iv(0, 365, 0)).is_ok());
        assert!(max_run(iv(12, 5, 0)).is_ok(), "365 days by the 30-day rule");
        assert!(max_run(iv(0, 365, 1)).is_err());
        assert!(max_run(iv(0, 0, 0)).is_err());
        assert!(max_run(iv(0, 0, -1)).is_err());
        assert!(max_run(iv(0, 2, -1)).is_err(), "a negative field");
    }

    #[test]
    fn error_texts_are_bounded_at_a_character_boundary() {
        assert_eq!(error_text("boom".into()), "boom");
        let exact = "x".repeat(ERROR_TEXT_MAX_BYTES);
        assert_eq!(error_text(exact.clone()), exact);
        let huge = "é".repeat(5_000_000);
        let kept = error_text(huge);
        assert!(kept.len() <= ERROR_TEXT_MAX_BYTES, "{} bytes", kept.len());
        assert!(
            kept.ends_with(" [truncated: 10000000 bytes in all]"),
            "{kept:.40}"
        );
        assert!(kept.starts_with("éé"));
    }

    #[test]
    fn retention_bounds() {
        assert!(
            older_than(iv(0, 0, 0)).is_ok(),
            "0 purges all finished items"
        );
        assert!(older_than(iv(0, 3650, 0)).is_ok());
        assert!(older_than(iv(120, 0, 0)).is_ok(), "'10 years' is 3600 days");
        assert!(older_than(iv(0, 3650, 1)).is_err());
        assert!(older_than(iv(0, 0, -1)).is_err());
        assert!(older_than(iv(1, -29, 0)).is_err(), "a negative field");
        assert!(matches!(
            older_than(None),
            Err(WorkfenceError::NullArgument { arg: "older_than" })
        ));
    }

    #[test]
    fn names() {
        assert!(queue(Some("q".into())).is_ok());
        assert!(queue(Some("".into())).is_err());
        assert!(queue(Some("a\tb".into())).is_err());
        assert!(queue(Some("x".repeat(128))).is_ok());
        assert!(queue(Some("x".repeat(129))).is_err());
        assert!(owner(Some("  ".into())).is_err());
        assert_eq!(owner(Some(" a ".into())).unwrap(), " a ");
        assert!(owner(Some("é".repeat(129))).is_err(), "258 bytes");
        assert!(
            owner(Some("laptop\n".into())).is_err(),
            "hostname with its newline"
        );
        assert!(key("".into()).is_err());
    }

    /// 2026-12-01 00:00 UTC as a `TimestampTz` (microseconds since 2000-01-01).
    const DEC_1_2026: i64 = 9_831 * 86_400_000_000;

    #[test]
    fn delays_are_judged_by_their_calendar_length_from_now() {
        let day = 86_400_000_000_i128;
        // 12 months from 2026-12-01 end on 2027-12-01: 365 days; 5 more make 370.
        assert_eq!(iv(12, 5, 0).unwrap().micros_from(DEC_1_2026), 370 * day);
        assert!(
            delay("delay", iv(12, 5, 0).unwrap(), DEC_1_2026).is_err(),
            "'12 mon 5 days' is 365 days by the 30-day rule but delays 370"
        );
        assert!(delay("delay", iv(12, 0, 0).unwrap(), DEC_1_2026).is_ok());
        // From 2027-03-01, 12 months span 2028-02-29: 366 days.
        let mar_1_2027 = DEC_1_2026 + 90 * 86_400_000_000;
        assert_eq!(iv(12, 0, 0).unwrap().micros_from(mar_1_2027), 366 * day);
        assert!(delay("delay", iv(12, 0, 0).unwrap(), mar_1_2027).is_err());
        // A month from Jan 31 ends on the last day of February.
        let jan_31_2027 = DEC_1_2026 + 61 * 86_400_000_000;
        assert_eq!(iv(1, 0, 0).unwrap().micros_from(jan_31_2027), 28 * day);
        // Before 2000 (negative TimestampTz) too: 1999-12-01 plus a month.
        assert_eq!(
            iv(1, 0, 0).unwrap().micros_from(-31 * 86_400_000_000),
            31 * day
        );
    }

    /// A DETAIL keeps the interval itself, for the server to print as it
    /// prints intervals (`'8 days'`), not a count of microseconds.
    #[test]
    fn interval_details_carry_the_interval() {
        let detail_of = |result: Result<IntervalParts>| match result {
            Err(WorkfenceError::InvalidArgument { detail, .. }) => detail,
            other => panic!("expected a 22023, got {other:?}"),
        };
        let eight_days = iv(0, 8, 0).unwrap();
        assert_eq!(
            detail_of(lease(Some(eight_days))),
            Detail::of(["The lease is ".into(), eight_days.into(), ".".into()])
        );
        let mixed = iv(1, -29, 0).unwrap();
        assert_eq!(
            detail_of(delay("delay", mixed, DEC_1_2026)),
            Detail::of(["The interval is ".into(), mixed.into(), ".".into()])
        );
        // Months: the real length from now beside the interval given.
        let year_and_5 = iv(12, 5, 0).unwrap();
        assert_eq!(
            detail_of(delay("delay", year_and_5, DEC_1_2026)),
            Detail::of([
                "The interval is ".into(),
                year_and_5.into(),
                ", ".into(),
                iv(0, 370, 0).unwrap().into(),
                " from now.".into(),
            ])
        );
    }

    #[test]
    fn counts() {
        assert!(max_items(Some(0)).is_err());
        assert!(max_items(Some(1000)).is_ok());
        assert!(max_items(Some(1001)).is_err());
        assert!(max_attempts(Some(0)).is_err());
        assert!(delay("delay", iv(0, 0, -1).unwrap(), DEC_1_2026).is_err());
        assert!(delay("delay", iv(0, 0, 0).unwrap(), DEC_1_2026).is_ok());
        assert!(delay("delay", iv(0, 366, 0).unwrap(), DEC_1_2026).is_err());
        assert_eq!(wait(iv(0, 0, 0)).unwrap(), std::time::Duration::ZERO);
        assert_eq!(wait(iv(0, 0, 3_600_000_000)).unwrap().as_secs(), 3_600);
        assert!(wait(iv(0, 0, 3_600_000_001)).is_err());
        assert!(wait(iv(0, 0, -1)).is_err());
        assert!(
            wait(iv(0, 1, -86_399_000_000)).is_err(),
            "1 day -23:59:59 has a negative field"
        );
        assert!(wait(None).is_err());
    }
}
