//! Argument checks shared by every function.
//!
//! Each check takes the SQL argument as the function received it (`None` is
//! SQL NULL) and returns the value to use, or the [`WorkfenceError`] to raise
//! (22004 for NULL, 22023 for a bad value), naming the argument. The checks
//! run before any statement, so a rejected call changes nothing.

use crate::error::{Result, WorkfenceError};

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

const USECS_PER_DAY: i128 = 86_400 * 1_000_000;
/// Longest lease one claim or renew may take: 7 days. A job that runs longer
/// renews its lease from a heartbeat.
pub const LEASE_MAX_USECS: i128 = 7 * USECS_PER_DAY;
/// Longest delay of `work_release` and `retry_in` of `work_fail`: 365 days.
pub const DELAY_MAX_USECS: i128 = 365 * USECS_PER_DAY;

/// Longest long poll of `work_claim(..., wait)`: 1 hour. The waiting
/// statement keeps its snapshot (and so holds back vacuum's horizon) while
/// it waits; workers should wait seconds to a minute and call again.
pub const WAIT_MAX_USECS: i128 = 3_600 * 1_000_000;

/// Longest `older_than` of `work_purge`: 3650 days (ten years). Beyond it a
/// value is a mistake (and `clock_timestamp() - older_than` would overflow
/// long before the interval type does).
pub const RETENTION_MAX_USECS: i128 = 3650 * USECS_PER_DAY;

/// The parts of a PostgreSQL `interval`, as [`pgrx::datum::Interval`] holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalParts {
    /// Months (counted as 30 days, as PostgreSQL does when comparing intervals).
    pub months: i32,
    /// Days.
    pub days: i32,
    /// Microseconds.
    pub micros: i64,
}

impl From<pgrx::datum::Interval> for IntervalParts {
    fn from(value: pgrx::datum::Interval) -> Self {
        IntervalParts {
            months: value.months(),
            days: value.days(),
            micros: value.micros(),
        }
    }
}

impl IntervalParts {
    /// Total length in microseconds, with a month as 30 days.
    pub fn total_micros(self) -> i128 {
        self.months as i128 * 30 * USECS_PER_DAY
            + self.days as i128 * USECS_PER_DAY
            + self.micros as i128
    }
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
            format!(
                "The interval has {} months, {} days and {} microseconds.",
                value.months, value.days, value.micros
            ),
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
            format!("The lease is {total} microseconds long."),
            "Pass the time the job needs before its next renew, e.g. '30 seconds'.",
        ));
    }
    if total > LEASE_MAX_USECS {
        return Err(WorkfenceError::invalid(
            "lease",
            "must be at most 7 days",
            format!("The lease is {total} microseconds long."),
            "Take a shorter lease and renew it from a heartbeat while the job runs.",
        ));
    }
    no_negative_fields("lease", value)?;
    Ok(value)
}

/// A delay (`work_release`'s `delay`, `work_fail`'s `retry_in`): zero or
/// longer, at most [`DELAY_MAX_USECS`], with no negative field.
pub fn delay(arg: &'static str, value: IntervalParts) -> Result<IntervalParts> {
    let total = value.total_micros();
    if total < 0 {
        return Err(WorkfenceError::invalid(
            arg,
            "must not be negative",
            format!("The interval is {total} microseconds long."),
            "Pass '0' to make the item claimable at once.",
        ));
    }
    if total > DELAY_MAX_USECS {
        return Err(WorkfenceError::invalid(
            arg,
            "must be at most 365 days",
            format!("The interval is {total} microseconds long."),
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
            format!("The interval is {total} microseconds long."),
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
            format!("The interval is {total} microseconds long."),
            "Pass '0' to purge every item finished so far.",
        ));
    }
    if total > RETENTION_MAX_USECS {
        return Err(WorkfenceError::invalid(
            "older_than",
            "must be at most 3650 days",
            format!("The interval is {total} microseconds long."),
            "Keep finished items for at most ten years; archive older history elsewhere.",
        ));
    }
    no_negative_fields("older_than", value)?;
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

    #[test]
    fn counts() {
        assert!(max_items(Some(0)).is_err());
        assert!(max_items(Some(1000)).is_ok());
        assert!(max_items(Some(1001)).is_err());
        assert!(max_attempts(Some(0)).is_err());
        assert!(delay("delay", iv(0, 0, -1).unwrap()).is_err());
        assert!(delay("delay", iv(0, 0, 0).unwrap()).is_ok());
        assert!(delay("delay", iv(0, 366, 0).unwrap()).is_err());
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
