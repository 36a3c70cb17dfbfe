//! A schedule's slots (from 0.12.0, issue 34): a cron expression read in an
//! IANA time zone, the slots it names, and which of them one fire takes.
//! Pure Rust: no server, so that it is unit-tested and property-tested
//! without one.
//!
//! **Parser and zone data.** Expressions are parsed and walked by the
//! [`croner`] crate (MIT; the Open Cron Pattern Specification, OCPS), zones
//! come from [`chrono_tz`] (the IANA database compiled into the library).
//! Chosen over PostgreSQL's own zone data (`AT TIME ZONE`) because a slot is
//! then computed the same way in every backend, in the maintenance worker
//! and in these tests, without a query per step, and because croner already
//! defines what a cron job does across a daylight-saving change (below),
//! which a walk over `AT TIME ZONE` would have to re-invent. The price: the
//! zone rules are those of the library's build (chrono-tz 0.10.4), not the
//! server's `timezone_abbreviations`/tzdata; a zone whose rules change after
//! the build keeps its old rules until the library is updated. The property
//! test in `harness/tests/client/schedules.rs` compares the slots with an
//! oracle written over PostgreSQL's zone data.
//!
//! **Expressions.** Five fields (minute hour day-of-month month day-of-week),
//! or six with seconds first; names (`MON`, `JAN`), ranges, lists, steps,
//! `L`, `W` and `#` as croner reads them; `@yearly` (`@annually`),
//! `@monthly`, `@weekly`, `@daily` (`@midnight`) and `@hourly`. A day of
//! month and a day of week both restricted match either (Vixie cron's OR).
//! No year field.
//!
//! **Daylight saving** (croner's rules, OCPS 1.4): a *fixed-time* expression
//! (one second, one minute and one hour, e.g. `30 2 * * *`) whose local time
//! a spring-forward skips fires once, at the first instant after the gap
//! (03:00 local in Europe/Berlin); whose local time a fall-back repeats fires
//! once, at the first of the two instants. Any other expression (`0 * * *
//! *`, `*/15 * * * *`) keeps its interval in real time: it fires at every
//! instant whose local time matches, in both halves of a repeated hour,
//! and not at all in a skipped one.

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::base::error::{Result, WorkfenceError};

/// Microseconds since 2000-01-01 00:00:00 UTC: PostgreSQL's `timestamptz`.
pub type Micros = i64;

/// `timestamptz 'infinity'`: the next slot of an expression that names no
/// more (croner searches up to the year 5000).
pub const NEVER: Micros = i64::MAX;

/// Seconds from 1970-01-01 to 2000-01-01 (the PostgreSQL epoch).
const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;

/// The longest cron expression accepted, in bytes.
pub const CRON_MAX_BYTES: usize = 256;

/// The longest time zone name accepted, in bytes.
pub const TIMEZONE_MAX_BYTES: usize = 64;

/// `catch_up => 'all'`: at most this many slots of one schedule fired by one
/// round (one call of `work_fire_schedules`, one maintenance round, one
/// claim); the rest in the rounds after it.
pub const CATCH_UP_CAP: usize = 100;

/// `catch_up => 'none'`: a slot fires only if the round that finds it runs
/// at most this long after it (microseconds: 60 s); later, it counts as
/// missed and is skipped.
pub const ON_TIME_MICROS: Micros = 60_000_000;

/// What a round does with the slots that passed since a schedule last fired
/// (`work_schedule(..., catch_up)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Fire only the most recent due slot (the default).
    Latest,
    /// Fire each due slot once, oldest first, at most [`CATCH_UP_CAP`] per
    /// round.
    All,
    /// Fire the most recent due slot only if it is at most
    /// [`ON_TIME_MICROS`] old.
    None,
}

impl CatchUp {
    /// The SQL spelling: `latest`, `all`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::None => "none",
        }
    }

    /// Read `catch_up`; 22023 naming the argument for any other value.
    pub fn parse(value: &str) -> Result<CatchUp> {
        match value {
            "latest" => Ok(CatchUp::Latest),
            "all" => Ok(CatchUp::All),
            "none" => Ok(CatchUp::None),
            other => Err(WorkfenceError::invalid(
                "catch_up",
                "must be 'latest', 'all' or 'none'",
                format!("catch_up is {other:?}."),
                "'latest' fires only the most recent missed slot, 'all' each missed slot, 'none' \
                 no missed slot.",
            )),
        }
    }
}

/// A cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct Expression {
    cron: Cron,
    zone: Tz,
}

/// Parse `cron` in `timezone`. Errors (22023) name the argument: `cron`
/// empty, longer than [`CRON_MAX_BYTES`], not an expression croner reads
/// (with its reason), with a year field, or naming no time at all
/// (`0 0 30 2 *`); `timezone` not an IANA zone name (`Europe/Berlin`,
/// `UTC`) or longer than [`TIMEZONE_MAX_BYTES`].
pub fn parse(cron: &str, timezone: &str) -> Result<Expression> {
    let zone = zone(timezone)?;
    if cron.len() > CRON_MAX_BYTES {
        return Err(WorkfenceError::invalid(
            "cron",
            format!("must be at most {CRON_MAX_BYTES} bytes"),
            format!("The expression is {} bytes long.", cron.len()),
            "Write the expression with ranges and steps, e.g. '*/5 9-17 * * MON-FRI'.",
        ));
    }
    let bad = |reason: String| {
        WorkfenceError::invalid(
            "cron",
            "is not a cron expression",
            format!("{cron:?}: {reason}"),
            "Five fields (minute hour day-of-month month day-of-week), six with seconds first, \
             or @hourly, @daily, @weekly, @monthly, @yearly.",
        )
    };
    let parsed = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(cron)
        .map_err(|e| bad(e.to_string()))?;
    let expression = Expression { cron: parsed, zone };
    // An expression that never matches (`0 0 30 2 *`) has no slot: croner
    // gives up after its search limit.
    let start = DateTime::<Utc>::from_timestamp(PG_EPOCH_UNIX_SECS, 0)
        .expect("2000-01-01 is a valid time")
        .with_timezone(&zone);
    if expression.cron.find_next_occurrence(&start, false).is_err() {
        return Err(bad("it names no time".to_string()));
    }
    Ok(expression)
}

/// An IANA zone by name; 22023 naming `timezone` otherwise.
pub fn zone(timezone: &str) -> Result<Tz> {
    if timezone.len() > TIMEZONE_MAX_BYTES {
        return Err(WorkfenceError::invalid(
            "timezone",
            format!("must be at most {TIMEZONE_MAX_BYTES} bytes"),
            format!("The name is {} bytes long.", timezone.len()),
            "Name an IANA time zone, e.g. 'Europe/Berlin' or 'UTC'.",
        ));
    }
    timezone.parse::<Tz>().map_err(|_| {
        WorkfenceError::invalid(
            "timezone",
            "is not a known time zone",
            format!("The time zone is {timezone:?}."),
            "Name an IANA time zone as the tz database spells it, case included, e.g. \
             'Europe/Berlin', 'America/New_York' or 'UTC' (not an offset such as '+02:00').",
        )
    })
}

/// `t` as a time in `zone` (None beyond chrono's range).
fn at(t: Micros, zone: &Tz) -> Option<DateTime<Tz>> {
    let secs = t.div_euclid(1_000_000).checked_add(PG_EPOCH_UNIX_SECS)?;
    let nanos = (t.rem_euclid(1_000_000) * 1_000) as u32;
    zone.timestamp_opt(secs, nanos).single()
}

/// `t` in [`Micros`].
fn micros<Z: TimeZone>(t: &DateTime<Z>) -> Micros {
    (t.timestamp() - PG_EPOCH_UNIX_SECS) * 1_000_000 + i64::from(t.timestamp_subsec_micros())
}

impl Expression {
    /// The first slot strictly after `t` ([`NEVER`] if there is none).
    pub fn next_after(&self, t: Micros) -> Micros {
        at(t, &self.zone)
            .and_then(|from| self.cron.find_next_occurrence(&from, false).ok())
            .map_or(NEVER, |next| micros(&next))
    }

    /// The last slot at or before `t`, if any.
    pub fn latest_at_or_before(&self, t: Micros) -> Option<Micros> {
        let from = at(t, &self.zone)?;
        self.cron
            .find_previous_occurrence(&from, true)
            .ok()
            .map(|slot| micros(&slot))
    }
}

/// What one round does with a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// The slots to fire, oldest first (each gets one item).
    pub fire: Vec<Micros>,
    /// The schedule's next slot afterwards: after every slot at or before
    /// `now` that this round fired or skipped; at or before `now` only when
    /// `catch_up => 'all'` reached [`CATCH_UP_CAP`].
    pub next: Micros,
}

/// The round at `now` of a schedule whose next slot is `next`. A schedule
/// is due when `next <= now`; a round of one that is not fires nothing and
/// keeps `next`. Every slot fired is at or after `next`, and the returned
/// next slot is after every slot fired, so a slot is never fired by two
/// rounds.
pub fn round(expression: &Expression, catch_up: CatchUp, next: Micros, now: Micros) -> Round {
    if next > now {
        return Round {
            fire: Vec::new(),
            next,
        };
    }
    match catch_up {
        CatchUp::All => {
            let mut fire = Vec::new();
            let mut slot = next;
            while slot <= now && fire.len() < CATCH_UP_CAP {
                fire.push(slot);
                slot = expression.next_after(slot);
            }
            Round { fire, next: slot }
        }
        CatchUp::Latest | CatchUp::None => {
            // The walk back and the walk forward agree on the slots; should
            // they ever not, `next` (a slot, and due) is the floor.
            let latest = expression
                .latest_at_or_before(now)
                .map_or(next, |slot| slot.max(next));
            let on_time = now - latest <= ON_TIME_MICROS;
            let fire = if catch_up == CatchUp::Latest || on_time {
                vec![latest]
            } else {
                Vec::new()
            };
            Round {
                fire,
                next: expression.next_after(now.max(latest)),
            }
        }
    }
}

/// A slot as its items' key shows it: UTC, ISO 8601 to the second
/// (`2026-12-06T19:00:00Z`), with the fraction only if it has one.
pub fn slot_text(slot: Micros) -> String {
    match at(slot, &Tz::UTC) {
        Some(t) if t.timestamp_subsec_micros() == 0 => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        None => slot.to_string(),
    }
}

/// The key of the item a schedule's slot fires: `<name>@<slot>`.
pub fn slot_key(name: &str, slot: Micros) -> String {
    format!("{name}@{}", slot_text(slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Micros {
        let t: DateTime<Utc> = text.parse().expect("an RFC 3339 time");
        micros(&t)
    }

    fn slots(cron: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        let e = parse(cron, zone).expect("valid");
        let mut t = utc(from);
        (0..n)
            .map(|_| {
                t = e.next_after(t);
                slot_text(t)
            })
            .collect()
    }

    #[test]
    fn five_and_six_fields_and_names() {
        assert_eq!(
            slots("*/15 * * * *", "UTC", "2026-12-06T19:07:00Z", 2),
            ["2026-12-06T19:15:00Z", "2026-12-06T19:30:00Z"]
        );
        assert_eq!(
            slots("*/20 * * * * *", "UTC", "2026-12-06T19:07:00Z", 2),
            ["2026-12-06T19:07:20Z", "2026-12-06T19:07:40Z"]
        );
        assert_eq!(
            slots("@daily", "Europe/Berlin", "2026-12-06T19:07:00Z", 1),
            ["2026-12-06T23:00:00Z"]
        );
    }

    #[test]
    fn a_skipped_local_time_fires_once_at_the_transition() {
        // 2027-03-28 02:00 CET jumps to 03:00 CEST in Europe/Berlin.
        assert_eq!(
            slots("30 2 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z", 2),
            ["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]
        );
        // 2027-03-14 02:00 EST jumps to 03:00 EDT in America/New_York.
        assert_eq!(
            slots("30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z", 2),
            ["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"]
        );
    }

    #[test]
    fn a_repeated_local_time_fires_once_and_an_interval_keeps_real_time() {
        // 2027-10-31 03:00 CEST falls back to 02:00 CET: 02:30 happens twice.
        assert_eq!(
            slots("30 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z", 2),
            ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]
        );
        // Hourly: 02:00 CEST (00:00Z) and 02:00 CET (01:00Z) both fire.
        assert_eq!(
            slots("0 * * * *", "Europe/Berlin", "2027-10-30T23:30:00Z", 3),
            [
                "2027-10-31T00:00:00Z",
                "2027-10-31T01:00:00Z",
                "2027-10-31T02:00:00Z"
            ]
        );
    }

    #[test]
    fn month_ends_and_the_leap_day() {
        assert_eq!(
            slots("0 0 31 * *", "UTC", "2027-01-31T00:00:00Z", 2),
            ["2027-03-31T00:00:00Z", "2027-05-31T00:00:00Z"]
        );
        assert_eq!(
            slots("0 0 29 2 *", "UTC", "2026-12-06T00:00:00Z", 2),
            ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
        );
        assert_eq!(
            slots("0 12 L * *", "UTC", "2028-02-01T00:00:00Z", 1),
            ["2028-02-29T12:00:00Z"]
        );
    }

    #[test]
    fn bad_expressions_and_zones_name_their_argument() {
        for bad in [
            "",
            "61 * * * *",
            "* * * *",
            "0 0 30 2 *",
            "0 0 1 1 * 2027 1",
        ] {
            match parse(bad, "UTC") {
                Err(WorkfenceError::InvalidArgument { arg: "cron", .. }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        for bad in ["CET+1", "Mars/Olympus", "", "+02:00"] {
            match parse("* * * * *", bad) {
                Err(WorkfenceError::InvalidArgument {
                    arg: "timezone", ..
                }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(matches!(
            CatchUp::parse("some"),
            Err(WorkfenceError::InvalidArgument {
                arg: "catch_up",
                ..
            })
        ));
    }

    #[test]
    fn rounds_fire_by_catch_up_and_never_a_slot_twice() {
        let e = parse("0 * * * *", "UTC").expect("valid");
        let next = utc("2026-12-06T10:00:00Z");
        let now = utc("2026-12-06T13:00:30Z");
        let latest = round(&e, CatchUp::Latest, next, now);
        assert_eq!(latest.fire, [utc("2026-12-06T13:00:00Z")]);
        assert_eq!(latest.next, utc("2026-12-06T14:00:00Z"));
        let all = round(&e, CatchUp::All, next, now);
        assert_eq!(all.fire.len(), 4);
        assert_eq!(all.next, utc("2026-12-06T14:00:00Z"));
        let none = round(&e, CatchUp::None, next, now);
        assert_eq!(none.fire, [utc("2026-12-06T13:00:00Z")]);
        let late = round(&e, CatchUp::None, next, utc("2026-12-06T13:01:01Z"));
        assert!(late.fire.is_empty());
        assert_eq!(late.next, utc("2026-12-06T14:00:00Z"));
        // Not due: nothing, and the next slot is kept.
        let early = round(&e, CatchUp::Latest, next, utc("2026-12-06T09:59:59Z"));
        assert_eq!(early, Round { fire: vec![], next });
        // 'all' stops at the cap and resumes at the first slot it left.
        let secondly = parse("* * * * * *", "UTC").expect("valid");
        let capped = round(&secondly, CatchUp::All, next, next + 1_000_000_000);
        assert_eq!(capped.fire.len(), CATCH_UP_CAP);
        assert_eq!(capped.next, next + CATCH_UP_CAP as i64 * 1_000_000);
        let after = round(&secondly, CatchUp::All, capped.next, next + 1_000_000_000);
        assert_eq!(after.fire[0], capped.next);
    }

    #[test]
    fn keys_name_the_slot_in_utc() {
        assert_eq!(
            slot_key("report", utc("2026-12-06T19:00:00Z")),
            "report@2026-12-06T19:00:00Z"
        );
    }
}
