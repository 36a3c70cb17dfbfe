//! In-server tests of operating queues (0.6.0): `work_retry`,
//! `work_reschedule`, `work_pause` / `work_resume`, `work_item`, `max_run`,
//! `claimed_at`, the `errors` history and `work_queue_stats`' new columns.
//!
//! As in `mod.rs`, each test is one transaction (rolled back by the
//! harness), and time is simulated by moving `lease_until` or `claimed_at`
//! into the past. What needs several connections (a retry racing a claim, a
//! pause racing a long poll, `work_lease_lost` racing the holder's finish,
//! the refusal counters, which need `shared_preload_libraries`) is in
//! `harness/tests/client/operating.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::access::validate;
    use crate::pgrx_tests::helpers::{claim, count, enqueue, lapse, one, run, token_call};

    fn retry(queue: &str, key: &str) -> bool {
        Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_retry($1, $2)",
            &[queue.into(), key.into()],
        )
        .unwrap()
        .expect("work_retry never returns NULL")
    }

    fn queue_call(function: &str, queue: &str) -> bool {
        Spi::get_one_with_args::<bool>(&format!("SELECT workfence.{function}($1)"), &[queue.into()])
            .unwrap()
            .expect("never NULL")
    }

    fn fail(id: i64, owner: &str, epoch: i64, error: &str) -> bool {
        Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_fail($1, $2, $3, $4, retry_in => '0')",
            &[id.into(), owner.into(), epoch.into(), error.into()],
        )
        .unwrap()
        .unwrap()
    }

    /// Item `id`'s `errors` history, as `work_item` shows it.
    struct Errors(i64);

    /// Item `id`'s `errors` history.
    fn errors(id: i64) -> Errors {
        Errors(id)
    }

    impl Errors {
        /// How many entries.
        fn len(&self) -> usize {
            one::<i32>(
                "SELECT jsonb_array_length(w.errors) FROM workfence.items AS i,
                        workfence.work_item(i.queue, i.key) AS w WHERE i.id = $1",
                &[self.0],
            )
            .expect("work_item has the item") as usize
        }

        /// Entry `i`'s `field`, as text.
        fn field(&self, i: usize, field: &str) -> String {
            Spi::get_one_with_args::<String>(
                "SELECT w.errors -> $2 ->> $3 FROM workfence.items AS i,
                        workfence.work_item(i.queue, i.key) AS w WHERE i.id = $1",
                &[self.0.into(), (i as i32).into(), field.into()],
            )
            .unwrap()
            .unwrap_or_default()
        }
    }

    fn digest() -> String {
        Spi::get_one::<String>(
            "SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM workfence.items t",
        )
        .unwrap()
        .unwrap()
    }

    #[pg_test]
    fn a_retried_dead_letter_gets_one_more_attempt_and_its_old_tokens_stay_dead() {
        let id = Spi::get_one::<i64>(
            "SELECT id FROM workfence.work_enqueue('ops', key => 'dl', max_attempts => 1)",
        )
        .unwrap()
        .unwrap();
        let (_, epoch) = claim("ops", "w", "1 minute").expect("claimable");
        assert!(fail(id, "w", epoch, "boom"));
        assert_eq!(
            one::<String>(
                "SELECT state::text FROM workfence.items WHERE id = $1",
                &[id]
            ),
            Some("failed".into())
        );

        assert!(retry("ops", "dl"), "a dead letter is retried");
        let row = Spi::get_three_with_args::<String, i32, i32>(
            "SELECT state::text, attempts, max_attempts FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(
            row,
            (Some("pending".into()), Some(1), Some(2)),
            "one more attempt"
        );
        assert_eq!(errors(id).len(), 1, "the history is kept");
        assert!(!retry("ops", "dl"), "a pending item is not retried again");
        for call in ["renew", "finish", "release", "fail"] {
            assert!(
                !token_call(call, id, "w", epoch),
                "the old token may not {call} a retried item"
            );
        }

        let (again, new_epoch) = claim("ops", "w", "1 minute").expect("due at once");
        assert_eq!(again, id);
        assert!(new_epoch > epoch);
        assert!(token_call("finish", id, "w", new_epoch));
        assert!(!token_call("finish", id, "w", epoch));
    }

    #[pg_test]
    fn a_cancelled_item_is_retried_at_the_given_time() {
        let id = enqueue("ops", "c");
        let (_, epoch) = claim("ops", "w", "1 minute").expect("claimable");
        assert!(
            Spi::get_one::<bool>("SELECT workfence.work_cancel('ops', 'c')")
                .unwrap()
                .unwrap()
        );
        assert!(Spi::get_one::<bool>(
            "SELECT workfence.work_retry('ops', 'c', clock_timestamp() + interval '1 hour')"
        )
        .unwrap()
        .unwrap());
        assert_eq!(claim("ops", "w", "1 minute"), None, "not before its run_at");
        assert!(
            !token_call("renew", id, "w", epoch),
            "the holder's token is dead"
        );
        assert_eq!(
            count("SELECT count(*) FROM workfence.items WHERE key = 'c' AND state = 'pending' AND finished_at IS NULL AND lease_until IS NULL"),
            1
        );
    }

    #[pg_test]
    fn retry_and_reschedule_change_nothing_in_other_states() {
        enqueue("ops", "pending");
        enqueue("ops", "claimed");
        let id = enqueue("ops", "done");
        let pending_run_at = "(SELECT run_at FROM workfence.items WHERE key = 'pending')";
        run(
            "UPDATE workfence.items SET run_at = clock_timestamp() + interval '1 day' WHERE key = 'pending'",
            &[],
        );
        let (claimed, _) = Spi::get_two::<i64, i64>(
            "SELECT id, epoch FROM workfence.work_claim_key('ops', 'claimed', 'w', '1 minute')",
        )
        .unwrap();
        let (_, done_epoch) = Spi::get_two::<i64, i64>(
            "SELECT id, epoch FROM workfence.work_claim_key('ops', 'done', 'w', '1 minute')",
        )
        .unwrap();
        assert!(token_call("finish", id, "w", done_epoch.unwrap()));
        assert!(claimed.is_some());
        let before = digest();
        for key in ["pending", "claimed", "done", "missing"] {
            assert!(!retry("ops", key), "work_retry of {key}");
        }
        for key in ["claimed", "done", "missing"] {
            assert!(
                !Spi::get_one_with_args::<bool>(
                    "SELECT workfence.work_reschedule('ops', $1, clock_timestamp())",
                    &[key.into()],
                )
                .unwrap()
                .unwrap(),
                "work_reschedule of {key}"
            );
        }
        assert_eq!(digest(), before, "nothing changed");
        assert!(
            Spi::get_one::<bool>("SELECT workfence.work_reschedule('ops', 'pending', now())")
                .unwrap()
                .unwrap()
        );
        assert_eq!(
            count(&format!(
                "SELECT count(*) WHERE {pending_run_at} <= clock_timestamp()"
            )),
            1,
            "run now"
        );
        assert!(claim("ops", "w", "1 minute").is_some(), "claimable at once");
    }

    #[pg_test]
    fn a_paused_queue_hands_out_nothing_and_its_holders_carry_on() {
        let held = enqueue("paused", "held");
        let (_, held_epoch) = claim("paused", "w", "1 minute").expect("claimable");
        let final_try = Spi::get_one::<i64>(
            "SELECT id FROM workfence.work_enqueue('paused', key => 'final', max_attempts => 1)",
        )
        .unwrap()
        .unwrap();
        let (_, final_epoch) = claim("paused", "w", "1 minute").expect("claimable");
        lapse(final_try);
        enqueue("paused", "waiting");

        assert!(queue_call("work_pause", "paused"));
        assert!(!queue_call("work_pause", "paused"), "already paused");
        let before = digest();
        assert_eq!(claim("paused", "w", "1 minute"), None);
        assert_eq!(
            count("SELECT count(*) FROM workfence.work_claim_key('paused', 'waiting', 'w', '1 minute')"),
            0
        );
        assert_eq!(
            digest(),
            before,
            "a paused claim neither claims nor dead-letters"
        );
        // Everything else works.
        enqueue("paused", "new");
        assert!(token_call("renew", held, "w", held_epoch));
        assert!(token_call("finish", held, "w", held_epoch));
        assert!(
            token_call("renew", final_try, "w", final_epoch),
            "the lapsed lease nobody claimed is still current"
        );
        assert!(queue_call("work_resume", "paused"));
        assert!(!queue_call("work_resume", "paused"), "not paused any more");
        let (_, epoch) = claim("paused", "w", "1 minute").expect("claimable after the resume");
        assert!(epoch > final_epoch);
        // The other queues never noticed.
        enqueue("other", "x");
        assert!(queue_call("work_pause", "paused"));
        assert!(claim("other", "w", "1 minute").is_some());
    }

    #[pg_test]
    fn a_paused_queue_without_items_is_in_the_stats() {
        assert!(queue_call("work_pause", "empty"));
        let row = Spi::get_three::<bool, i64, i64>(
            "SELECT paused, pending, refused FROM workfence.work_queue_stats WHERE queue = 'empty'",
        )
        .unwrap();
        assert_eq!(
            row,
            (Some(true), Some(0), None),
            "paused, no items, no counters without shared_preload_libraries"
        );
        assert!(queue_call("work_resume", "empty"));
        assert_eq!(
            count("SELECT count(*) FROM workfence.work_queue_stats WHERE queue = 'empty'"),
            0,
            "a resumed queue without items leaves the stats"
        );
    }

    #[pg_test]
    fn a_resume_lifts_the_pause_and_keeps_the_limits() {
        Spi::run("SELECT workfence.work_limit('limited', 3, 7, '1 hour')").unwrap();
        assert!(queue_call("work_pause", "limited"));
        assert!(queue_call("work_resume", "limited"));
        let row = Spi::get_three::<bool, i32, i32>(
            "SELECT paused, concurrency, rate FROM workfence.work_queue_stats WHERE queue = 'limited'",
        )
        .unwrap();
        assert_eq!(
            row,
            (Some(false), Some(3), Some(7)),
            "0.11.0's resume deleted the settings row, limits and all"
        );
    }

    #[pg_test]
    fn max_run_caps_every_lease_and_then_refuses_the_renew() {
        let id = Spi::get_one::<i64>(
            "SELECT id FROM workfence.work_enqueue('hung', key => 'h', max_run => '10 minutes')",
        )
        .unwrap()
        .unwrap();
        let (_, epoch) = claim("hung", "w", "1 hour").expect("claimable");
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.items WHERE key = 'h'
                     AND claimed_at IS NOT NULL
                     AND lease_until = claimed_at + interval '10 minutes'"
            ),
            1,
            "the first lease is capped at claimed_at + max_run"
        );
        assert!(Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_renew($1, 'w', $2, '1 hour')",
            &[id.into(), epoch.into()],
        )
        .unwrap()
        .unwrap());
        assert_eq!(
            count(
                "SELECT count(*) FROM workfence.items WHERE key = 'h'
                     AND lease_until = claimed_at + interval '10 minutes'"
            ),
            1,
            "a renew of an hour never goes past it"
        );
        // Eleven minutes later, by the clock.
        run(
            "UPDATE workfence.items
                SET claimed_at = claimed_at - interval '11 minutes',
                    lease_until = lease_until - interval '11 minutes'
              WHERE id = $1",
            &[id],
        );
        let before = digest();
        assert!(!token_call("renew", id, "w", epoch), "max_run is used up");
        assert_eq!(digest(), before, "the refused renew changed nothing");
        assert_eq!(
            Spi::get_one_with_args::<String>(
                "SELECT workfence.work_lease_status($1, 'w', $2)",
                &[id.into(), epoch.into()],
            )
            .unwrap()
            .as_deref(),
            Some("current"),
            "nobody claimed it anew: the epoch is still the authority"
        );
        let (again, new_epoch) = claim("hung", "w2", "1 hour").expect("the lapsed lease");
        assert_eq!(again, id);
        assert!(!token_call("finish", id, "w", epoch));
        assert!(
            token_call("renew", id, "w2", new_epoch),
            "a new claim has its own max_run"
        );
    }

    #[pg_test]
    fn errors_keep_failures_and_lapses_oldest_first() {
        let id = Spi::get_one::<i64>(
            "SELECT id FROM workfence.work_enqueue('hist', key => 'e', max_attempts => 3)",
        )
        .unwrap()
        .unwrap();
        let (_, e1) = claim("hist", "w1", "1 minute").unwrap();
        assert!(fail(id, "w1", e1, "first"));
        let (_, e2) = claim("hist", "w2", "1 minute").unwrap();
        lapse(id);
        let (_, e3) = claim("hist", "w3", "1 minute").unwrap();
        lapse(id);
        assert_eq!(
            claim("hist", "w4", "1 minute"),
            None,
            "dead-lettered, not claimed"
        );
        let history = errors(id);
        assert_eq!(history.len(), 3);
        assert_eq!(history.field(0, "error"), "first");
        assert_eq!(history.field(0, "owner"), "w1");
        assert_eq!(history.field(0, "epoch"), e1.to_string());
        assert_eq!(history.field(0, "attempt"), "1");
        assert_eq!(history.field(1, "error"), "lease expired");
        assert_eq!(history.field(1, "epoch"), e2.to_string());
        assert_eq!(history.field(1, "attempt"), "2");
        assert_eq!(
            history.field(2, "error"),
            "lease expired on the final attempt"
        );
        assert_eq!(history.field(2, "epoch"), e3.to_string());
        assert!(!history.field(2, "at").is_empty());
        assert_eq!(
            one::<String>(
                "SELECT state::text FROM workfence.items WHERE id = $1",
                &[id]
            ),
            Some("failed".into())
        );
    }

    #[pg_test]
    fn errors_are_bounded_in_entries_and_in_size() {
        let id = Spi::get_one::<i64>(
            "SELECT id FROM workfence.work_enqueue('hist', key => 'many', max_attempts => 100)",
        )
        .unwrap()
        .unwrap();
        let kept = validate::ERRORS_KEPT;
        for n in 1..=kept + 5 {
            let (_, epoch) = claim("hist", "w", "1 minute").unwrap();
            assert!(fail(id, "w", epoch, &format!("failure {n}")));
        }
        let history = errors(id);
        assert_eq!(history.len(), kept, "the newest {kept} are kept");
        assert_eq!(history.field(0, "error"), "failure 6", "the oldest dropped");
        assert_eq!(
            history.field(kept - 1, "error"),
            format!("failure {}", kept + 5)
        );

        let (_, epoch) = claim("hist", "w", "1 minute").unwrap();
        let huge = "x".repeat(10 * 1024 * 1024);
        assert!(fail(id, "w", epoch, &huge), "a huge error is recorded");
        let (stored, entry) = Spi::get_two_with_args::<i32, i32>(
            "SELECT octet_length(last_error), octet_length(errors -> -1 ->> 'error')
               FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        let max = validate::ERROR_TEXT_MAX_BYTES as i32;
        assert!(
            stored.unwrap() <= max && entry.unwrap() <= max,
            "{stored:?} {entry:?}"
        );
        assert!(one::<bool>(
            "SELECT last_error LIKE '%[truncated: 10485760 bytes in all]' FROM workfence.items WHERE id = $1",
            &[id],
        )
        .unwrap());
    }

    #[pg_test]
    fn work_item_shows_an_item_by_key_and_by_id() {
        let id = Spi::get_one::<i64>(
            "SELECT id FROM workfence.work_enqueue('look', '{\"n\": 1}', 'k', max_run => '5 minutes')",
        )
        .unwrap()
        .unwrap();
        let (_, epoch) = claim("look", "w", "1 minute").unwrap();
        let by_key = Spi::get_one::<String>(
            "SELECT format('%s|%s|%s|%s|%s|%s|%s|%s', w.state, w.owner, w.epoch, w.attempts,
                           w.errors, w.payload, w.max_run, w.claimed_at IS NOT NULL AND w.lease_until > w.claimed_at)
               FROM workfence.work_item('look', 'k') AS w",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            by_key,
            format!("claimed|w|{epoch}|1|[]|{{\"n\": 1}}|00:05:00|t")
        );
        let by_id = one::<String>("SELECT w.key FROM workfence.work_item($1) AS w", &[id]);
        assert_eq!(by_id.as_deref(), Some("k"));
        assert_eq!(
            count("SELECT count(*) FROM workfence.work_item('look', 'nope')"),
            0
        );
        assert_eq!(count("SELECT count(*) FROM workfence.work_item(-1)"), 0);
    }
}
