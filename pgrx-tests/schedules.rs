//! In-server tests of schedules (0.12.0, issue 34): `work_schedule` and its
//! verbs, what one fire does with each `catch_up`, the key guard, and bad
//! input with its SQLSTATE, each in one transaction. Time is simulated by
//! moving a schedule's `next_slot` into the past (what the clock would do).
//!
//! Racing firers, claims that fire, the maintenance worker, restarts and
//! failover are in `harness/tests/client/schedules.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{count, error_of, one, run};

    fn schedule(name: &str, cron: &str, queue: &str, catch_up: &str) -> bool {
        Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_schedule($1, $2, $3, '{\"n\":1}', catch_up => $4)",
            &[name.into(), cron.into(), queue.into(), catch_up.into()],
        )
        .unwrap()
        .unwrap()
    }

    fn fire() -> i32 {
        one::<i32>("SELECT workfence.work_fire_schedules()", &[]).unwrap()
    }

    /// The keys of `queue`'s items, sorted.
    fn keys(queue: &str) -> Vec<String> {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT key FROM workfence.items WHERE queue = $1 ORDER BY key",
                    None,
                    &[queue.into()],
                )
                .unwrap()
                .map(|row| row.get::<String>(1).unwrap().unwrap())
                .collect()
        })
    }

    /// `sql` evaluated to text.
    fn text(sql: &str) -> String {
        one::<String>(sql, &[]).unwrap()
    }

    #[pg_test]
    fn a_new_schedule_starts_after_now_and_a_replace_says_whether_it_changed() {
        assert!(schedule("hourly", "0 * * * *", "reports", "latest"));
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.work_schedules WHERE name = 'hourly' \
                 AND next_slot = date_trunc('hour', clock_timestamp()) + interval '1 hour' \
                 AND last_slot IS NULL AND NOT paused"
            ),
            1
        );
        assert!(!schedule("hourly", "0 * * * *", "reports", "latest"));
        assert!(schedule("hourly", "0 * * * *", "reports", "all"));
        // A changed expression starts at its own first slot after now.
        assert!(schedule("hourly", "30 * * * *", "reports", "all"));
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.work_schedules WHERE name = 'hourly' \
                 AND extract(minute FROM next_slot AT TIME ZONE 'UTC') = 30 \
                 AND next_slot > clock_timestamp()"
            ),
            1
        );
        assert_eq!(fire(), 0, "nothing is due");
    }

    #[pg_test]
    fn latest_fires_the_most_recent_missed_slot_once() {
        schedule("h", "0 * * * *", "q", "latest");
        run(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) - interval '3 hours'",
            &[],
        );
        assert_eq!(fire(), 1);
        let latest = text(
            "SELECT 'h@' || to_char(date_trunc('hour', clock_timestamp()) AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
        );
        assert_eq!(keys("q"), [latest]);
        assert_eq!(fire(), 0, "a second fire fires nothing twice");
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.work_schedules s JOIN workfence.items i \
                 ON i.id = s.last_item_id WHERE s.last_slot = i.run_at \
                 AND s.next_slot = date_trunc('hour', clock_timestamp()) + interval '1 hour'"
            ),
            1
        );
    }

    #[pg_test]
    fn all_fires_each_missed_slot_and_none_fires_no_late_one() {
        schedule("every", "0 * * * *", "all-q", "all");
        schedule("never-late", "0 0 1 1 *", "none-q", "none");
        run(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) - interval '3 hours' \
             WHERE name = 'every'",
            &[],
        );
        run(
            "UPDATE workfence.schedules SET next_slot = date_trunc('year', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' \
             WHERE name = 'never-late'",
            &[],
        );
        assert_eq!(fire(), 4);
        assert_eq!(keys("all-q").len(), 4);
        assert!(keys("none-q").is_empty());
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.work_schedules WHERE name = 'never-late' \
                 AND last_slot IS NULL AND next_slot > clock_timestamp()"
            ),
            1,
            "the late slot is skipped, not kept due"
        );
    }

    #[pg_test]
    fn a_slot_whose_key_exists_enqueues_nothing_and_records_that_item() {
        schedule("k", "0 * * * *", "kq", "latest");
        run(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp())",
            &[],
        );
        let key = text(
            "SELECT 'k@' || to_char(date_trunc('hour', clock_timestamp()) AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
        );
        let id = Spi::get_one_with_args::<i64>(
            "SELECT id FROM workfence.work_enqueue('kq', '{}', $1)",
            &[key.as_str().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(fire(), 0);
        assert_eq!(
            one::<i64>(
                "SELECT last_item_id FROM workfence.work_schedules WHERE name = 'k'",
                &[]
            ),
            Some(id)
        );
    }

    #[pg_test]
    fn a_paused_schedule_fires_nothing_until_resumed() {
        schedule("p", "0 * * * *", "pq", "latest");
        run(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp())",
            &[],
        );
        assert!(one::<bool>("SELECT workfence.work_pause_schedule('p')", &[]).unwrap());
        assert!(!one::<bool>("SELECT workfence.work_pause_schedule('p')", &[]).unwrap());
        assert_eq!(fire(), 0);
        assert!(one::<bool>("SELECT workfence.work_resume_schedule('p')", &[]).unwrap());
        assert_eq!(fire(), 1);
        assert!(one::<bool>("SELECT workfence.work_unschedule('p')", &[]).unwrap());
        assert!(!one::<bool>("SELECT workfence.work_unschedule('p')", &[]).unwrap());
        assert_eq!(keys("pq").len(), 1, "the items it fired stay");
    }

    #[pg_test]
    fn bad_input_names_its_argument_and_sqlstate() {
        let cases = [
            (
                "SELECT workfence.work_schedule('s', '61 * * * *', 'q')",
                "22023",
                "cron",
            ),
            (
                "SELECT workfence.work_schedule('s', '0 0 30 2 *', 'q')",
                "22023",
                "cron",
            ),
            (
                "SELECT workfence.work_schedule('s', '* * * * *', 'q', timezone => 'CET+1')",
                "22023",
                "timezone",
            ),
            (
                "SELECT workfence.work_schedule('s', '* * * * *', 'q', catch_up => 'some')",
                "22023",
                "catch_up",
            ),
            (
                "SELECT workfence.work_schedule('', '* * * * *', 'q')",
                "22023",
                "name",
            ),
            (
                "SELECT workfence.work_schedule(NULL, '* * * * *', 'q')",
                "22004",
                "name",
            ),
            (
                "SELECT workfence.work_schedule('s', NULL, 'q')",
                "22004",
                "cron",
            ),
            (
                "SELECT workfence.work_schedule('s', '* * * * *', 'q', max_attempts => 0)",
                "22023",
                "max_attempts",
            ),
            (
                "SELECT workfence.work_pause_schedule('nope')",
                "42704",
                "nope",
            ),
            (
                "SELECT workfence.work_resume_schedule('nope')",
                "42704",
                "nope",
            ),
        ];
        for (sql, state, word) in cases {
            let got = error_of(sql, 0, 0);
            assert!(got.starts_with(state) && got.contains(word), "{sql}: {got}");
        }
        // The table keeps a schedule's slots moving forward.
        schedule("f", "* * * * *", "q", "latest");
        run(
            "UPDATE workfence.schedules SET last_slot = next_slot - interval '1 minute'",
            &[],
        );
        let got = error_of(
            "UPDATE workfence.schedules SET next_slot = last_slot WHERE name = 'f'",
            0,
            0,
        );
        assert!(got.starts_with("23514"), "{got}");
    }

    /// The first slots fired by a schedule started at `start`, as UTC text.
    fn fired_from(name: &str, cron: &str, zone: &str, start: &str, n: i64) -> Vec<String> {
        Spi::run_with_args(
            "SELECT workfence.work_schedule($1, $2, $1, timezone => $3, catch_up => 'all')",
            &[name.into(), cron.into(), zone.into()],
        )
        .unwrap();
        Spi::run_with_args(
            "UPDATE workfence.schedules SET next_slot = $2::timestamptz WHERE name = $1",
            &[name.into(), start.into()],
        )
        .unwrap();
        fire();
        Spi::connect(|client| {
            client
                .select(
                    "SELECT to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') FROM workfence.items \
                      WHERE queue = $1 ORDER BY run_at LIMIT $2",
                    None,
                    &[name.into(), n.into()],
                )
                .unwrap()
                .map(|row| row.get::<String>(1).unwrap().unwrap())
                .collect()
        })
    }

    #[pg_test]
    fn daylight_saving_month_ends_and_the_leap_day_on_the_server() {
        // Europe/Berlin: 2026-03-29 02:00 CET jumps to 03:00 CEST; 2026-10-25
        // 03:00 CEST falls back to 02:00 CET.
        assert_eq!(
            fired_from(
                "berlin-spring",
                "30 2 * * *",
                "Europe/Berlin",
                "2026-03-28 01:30+00",
                3
            ),
            ["2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"],
            "02:30 skipped: fired once at 03:00 CEST"
        );
        assert_eq!(
            fired_from(
                "berlin-fall",
                "30 2 * * *",
                "Europe/Berlin",
                "2026-10-24 00:30+00",
                3
            ),
            ["2026-10-24 00:30", "2026-10-25 00:30", "2026-10-26 01:30"],
            "02:30 repeated: fired once, at its first occurrence"
        );
        assert_eq!(
            fired_from(
                "berlin-hourly",
                "0 * * * *",
                "Europe/Berlin",
                "2026-10-24 23:00+00",
                4
            ),
            [
                "2026-10-24 23:00",
                "2026-10-25 00:00",
                "2026-10-25 01:00",
                "2026-10-25 02:00"
            ],
            "hourly keeps real time: both 02:00s fire"
        );
        // America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01
        // 02:00 EDT -> 01:00 EST.
        assert_eq!(
            fired_from(
                "ny-spring",
                "30 2 * * *",
                "America/New_York",
                "2026-03-07 07:30+00",
                2
            ),
            ["2026-03-07 07:30", "2026-03-08 07:00"]
        );
        assert_eq!(
            fired_from(
                "ny-fall",
                "30 1 * * *",
                "America/New_York",
                "2026-10-31 05:30+00",
                3
            ),
            ["2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30"]
        );
        // Month ends and the leap day.
        assert_eq!(
            fired_from("month-end", "0 12 L * *", "UTC", "2026-01-31 12:00+00", 3),
            ["2026-01-31 12:00", "2026-02-28 12:00", "2026-03-31 12:00"]
        );
        assert_eq!(
            fired_from("the-31st", "0 0 31 * *", "UTC", "2026-01-31 00:00+00", 3),
            ["2026-01-31 00:00", "2026-03-31 00:00", "2026-05-31 00:00"]
        );
        assert_eq!(
            fired_from("leap", "0 0 29 2 *", "UTC", "2024-02-29 00:00+00", 5),
            ["2024-02-29 00:00"],
            "the next 29 February after 2024 is in 2028, after now"
        );
    }

    #[pg_test]
    fn a_schedule_replaced_while_due_fires_its_due_slot_with_the_new_settings() {
        schedule("due", "0 * * * *", "due-q", "latest");
        run(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp())",
            &[],
        );
        // The same expression: the due slot is kept, and fires with the new payload.
        assert!(Spi::get_one::<bool>(
            "SELECT workfence.work_schedule('due', '0 * * * *', 'due-q', '{\"v\":2}')"
        )
        .unwrap()
        .unwrap());
        assert_eq!(fire(), 1);
        assert_eq!(
            count("SELECT count(*) FROM workfence.items WHERE queue = 'due-q' AND payload = '{\"v\":2}'"),
            1
        );
        // A changed expression starts after now and after the last slot fired:
        // nothing due, and no slot fired twice.
        schedule("due", "30 * * * *", "due-q", "latest");
        assert_eq!(fire(), 0);
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.schedules WHERE name = 'due' \
                 AND next_slot > clock_timestamp() AND next_slot > last_slot"
            ),
            1
        );
    }
}
