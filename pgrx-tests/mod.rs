//! In-server tests (`#[pg_test]`): the SQL surface exercised the way a user
//! calls it, one transaction per test (rolled back by the harness).
//!
//! The passage of time is simulated by moving `lease_until` into the past
//! with a direct UPDATE (what the clock would do); the real-time lapse and
//! real concurrency are tested from client connections in `tests/`.

mod first_use;
mod helpers;
mod ops;
mod plans;
mod privileges;

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{enqueue, error_of, lapse, one, run};

    /// The number of rows `sql` returns (a `SELECT count(*) ...`).
    fn count(sql: &str) -> i64 {
        one::<i64>(sql, &[]).expect("count(*) is never NULL")
    }

    /// (id, epoch) of the item `work_claim` returns, or None for zero rows.
    /// Any other outcome (an error, a NULL column) fails the test.
    fn claim(queue: &str, owner: &str, lease: &str) -> Option<(i64, i64)> {
        match Spi::get_two_with_args::<i64, i64>(
            "SELECT id, epoch FROM workfence.work_claim($1, $2, $3::interval)",
            &[queue.into(), owner.into(), lease.into()],
        ) {
            Ok((Some(id), Some(epoch))) => Some((id, epoch)),
            Err(pgrx::spi::SpiError::InvalidPosition) => None,
            other => panic!("work_claim returned {other:?}"),
        }
    }

    fn token_call(func: &str, id: i64, owner: &str, epoch: i64) -> bool {
        let sql = match func {
            "renew" => "SELECT workfence.work_renew($1, $2, $3, '30 seconds')",
            "finish" => "SELECT workfence.work_finish($1, $2, $3)",
            "release" => "SELECT workfence.work_release($1, $2, $3)",
            "fail" => "SELECT workfence.work_fail($1, $2, $3, 'boom')",
            other => panic!("no such call {other}"),
        };
        Spi::get_one_with_args::<bool>(sql, &[id.into(), owner.into(), epoch.into()])
            .unwrap()
            .unwrap()
    }

    /// Everything a call could change: every row, and the last epoch this
    /// session drew from the sequence (`currval`). Not the sequence's global
    /// position: the suites run in parallel in one database, and other
    /// tests' claims move it.
    fn snapshot() -> String {
        Spi::run(
            "CREATE OR REPLACE FUNCTION pg_temp.session_epoch() RETURNS text
             LANGUAGE plpgsql AS $$
             BEGIN
                 RETURN pg_catalog.currval('workfence.epoch_seq')::text;
             EXCEPTION WHEN object_not_in_prerequisite_state THEN
                 RETURN 'none drawn';
             END $$",
        )
        .unwrap();
        Spi::get_one::<String>(
            "SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') || ' ' ||
                    pg_temp.session_epoch()
               FROM workfence.items t",
        )
        .unwrap()
        .unwrap()
    }

    #[pg_test]
    fn enqueue_is_idempotent_on_queue_and_key() {
        let (id1, inserted1) = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('mail', '{\"to\": \"a\"}', 'k1')",
        )
        .unwrap();
        let (id2, inserted2) = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('mail', '{\"to\": \"b\"}', 'k1')",
        )
        .unwrap();
        assert_eq!(id1, id2);
        assert_eq!((inserted1, inserted2), (Some(true), Some(false)));
        // The existing item is left exactly as it was.
        let to: String = one(
            "SELECT payload->>'to' FROM workfence.items WHERE id = $1",
            &[id1.unwrap()],
        )
        .unwrap();
        assert_eq!(to, "a");
        // The same key in another queue is another item.
        let id3: i64 = one(
            "SELECT id FROM workfence.work_enqueue('sms', '{}', 'k1')",
            &[],
        )
        .unwrap();
        assert_ne!(id1.unwrap(), id3);
    }

    #[pg_test]
    fn generated_keys_are_distinct_uuidv7() {
        let keys: Vec<String> = (0..3)
            .map(|_| one::<String>("SELECT key FROM workfence.work_enqueue('q')", &[]).unwrap())
            .collect();
        for key in &keys {
            let version: String =
                Spi::get_one_with_args("SELECT substr($1, 15, 1)", &[key.as_str().into()])
                    .unwrap()
                    .unwrap();
            assert_eq!(version, "7", "{key} is not a UUIDv7");
            assert!(Spi::get_one_with_args::<bool>(
                "SELECT $1::uuid IS NOT NULL",
                &[key.as_str().into()]
            )
            .unwrap()
            .unwrap());
        }
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[1], keys[2]);
    }

    #[pg_test]
    fn payload_is_returned_byte_for_byte() {
        // A number beyond f64 and a deep structure survive the round trip.
        let payload = r#"{"n": 12345678901234567890123.000000000000000001, "a": [1, {"b": null}], "s": "é\u0001"}"#;
        Spi::run_with_args(
            "SELECT workfence.work_enqueue('q', $1::jsonb)",
            &[payload.into()],
        )
        .unwrap();
        let same = Spi::get_one_with_args::<bool>(
            "SELECT payload = $1::jsonb AND payload::text = $1::jsonb::text FROM workfence.work_claim('q', 'w', '1 minute')",
            &[payload.into()],
        )
        .unwrap()
        .unwrap();
        assert!(same);
    }

    #[pg_test]
    fn claim_hands_out_a_fresh_lease_with_server_time() {
        enqueue("q", "a");
        let now =
            || one::<f64>("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap();
        let t0 = now();
        let (attempt, epoch, lease_until) = Spi::get_three::<i32, i64, f64>(
            "SELECT attempt, epoch, extract(epoch FROM lease_until)::float8 FROM workfence.work_claim('q', 'w1', '30 seconds')",
        )
        .unwrap();
        let t1 = now();
        assert_eq!(attempt, Some(1));
        assert!(epoch.unwrap() > 0);
        let lease_until = lease_until.unwrap();
        assert!(
            lease_until >= t0 + 30.0 && lease_until <= t1 + 30.0,
            "lease_until is clock_timestamp() + lease: {t0} <= {lease_until} - 30 <= {t1}"
        );
        let row = Spi::get_three::<String, String, bool>(
            "SELECT state::text, owner, lease_until > clock_timestamp() FROM workfence.items WHERE key = 'a'",
        )
        .unwrap();
        assert_eq!(row, (Some("claimed".into()), Some("w1".into()), Some(true)));
        // A live lease is not claimable, whatever the owner.
        assert_eq!(claim("q", "w1", "30 seconds"), None);
        assert_eq!(claim("q", "w2", "30 seconds"), None);
    }

    #[pg_test]
    fn claim_order_is_priority_then_run_at_then_id() {
        Spi::run(
            "SELECT workfence.work_enqueue('q', '{}', 'late',  clock_timestamp() - interval '1 minute', 0);
             SELECT workfence.work_enqueue('q', '{}', 'early', clock_timestamp() - interval '2 minutes', 0);
             SELECT workfence.work_enqueue('q', '{}', 'urgent', clock_timestamp() - interval '1 second', -5);
             SELECT workfence.work_enqueue('q', '{}', 'future', clock_timestamp() + interval '1 hour', -10);
             SELECT workfence.work_enqueue('other', '{}', 'x');",
        )
        .unwrap();
        let keys = Spi::get_one::<Vec<String>>(
            "SELECT array_agg(key ORDER BY ord) FROM workfence.work_claim('q', 'w', '1 minute', 10) WITH ORDINALITY AS c(id, key, payload, epoch, attempt, lease_until, ord)",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            keys,
            vec!["urgent", "early", "late"],
            "not due and other queues are not claimed"
        );
    }

    #[pg_test]
    fn max_items_bounds_the_batch() {
        for k in 0..5 {
            enqueue("q", &format!("k{k}"));
        }
        let n = count("SELECT count(*) FROM workfence.work_claim('q', 'w', '1 minute', 3)");
        assert_eq!(n, 3);
        let n = count("SELECT count(*) FROM workfence.work_claim('q', 'w', '1 minute', 3)");
        assert_eq!(n, 2);
        let n = count("SELECT count(*) FROM workfence.work_claim('q', 'w', '1 minute', 3)");
        assert_eq!(n, 0);
    }

    #[pg_test]
    fn epochs_strictly_increase_across_items_and_reenqueued_keys() {
        let mut last = 0;
        for k in 0..5 {
            enqueue("q", &format!("k{k}"));
            let (_, epoch) = claim("q", "w", "1 minute").unwrap();
            assert!(epoch > last, "epoch {epoch} after {last}");
            last = epoch;
        }
        // Finish an item, delete it, enqueue the same key again: a new item
        // whose claim gets a larger epoch than any before.
        let (id, epoch) =
            Spi::get_two::<i64, i64>("SELECT id, epoch FROM workfence.items WHERE key = 'k0'")
                .unwrap();
        assert!(token_call("finish", id.unwrap(), "w", epoch.unwrap()));
        run("DELETE FROM workfence.items WHERE id = $1", &[id.unwrap()]);
        let id2 = enqueue("q", "k0");
        assert_ne!(id2, id.unwrap());
        let (claimed, epoch2) = claim("q", "w", "1 minute").unwrap();
        assert_eq!(claimed, id2);
        assert!(epoch2 > last);
        // Re-claims of the same item after a lapse also take fresh epochs.
        lapse(id2);
        let (_, epoch3) = claim("q", "w", "1 minute").unwrap();
        assert!(epoch3 > epoch2);
    }

    #[pg_test]
    fn the_seed_scenario_same_owner_lapsed_lease() {
        let id = enqueue("routines", "daily@09:00");
        let (a_id, a_epoch) = claim("routines", "routines/laptop", "5 seconds").unwrap();
        assert_eq!(a_id, id);
        lapse(id);
        let (b_id, b_epoch) =
            claim("routines", "routines/laptop", "5 minutes").expect("B's claim succeeds");
        assert_eq!(b_id, id);
        assert!(b_epoch > a_epoch);
        assert!(
            !token_call("renew", id, "routines/laptop", a_epoch),
            "A's renew is refused"
        );
        assert!(
            !token_call("finish", id, "routines/laptop", a_epoch),
            "A's finish is refused"
        );
        assert!(
            token_call("finish", id, "routines/laptop", b_epoch),
            "B's finish holds"
        );
        let (state, epoch) = Spi::get_two_with_args::<String, i64>(
            "SELECT state::text, epoch FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(
            (state.as_deref(), epoch),
            (Some("done"), Some(b_epoch)),
            "finished once, by B"
        );
    }

    #[pg_test]
    fn an_expired_lease_nobody_reclaimed_is_still_current() {
        let id = enqueue("q", "a");
        let (_, epoch) = claim("q", "w", "1 minute").unwrap();
        lapse(id);
        assert!(token_call("renew", id, "w", epoch));
        let live: bool = one(
            "SELECT lease_until > clock_timestamp() FROM workfence.items WHERE id = $1",
            &[id],
        )
        .unwrap();
        assert!(live, "renew pushed the lease out again");
        lapse(id);
        assert!(token_call("finish", id, "w", epoch));
    }

    #[pg_test]
    fn finish_is_idempotent_for_the_same_token_only() {
        let id = enqueue("q", "a");
        let (_, epoch) = claim("q", "w", "1 minute").unwrap();
        assert!(!token_call("finish", id, "other", epoch), "wrong owner");
        assert!(!token_call("finish", id, "w", epoch + 1), "wrong epoch");
        let first = Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_finish($1, 'w', $2, '{\"r\": 1}')",
            &[id.into(), epoch.into()],
        )
        .unwrap();
        assert_eq!(first, Some(true));
        let before = snapshot();
        let again = Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_finish($1, 'w', $2, '{\"r\": 2}')",
            &[id.into(), epoch.into()],
        )
        .unwrap();
        assert_eq!(
            again,
            Some(true),
            "a retry after a lost reply is told it finished"
        );
        assert_eq!(snapshot(), before, "and it changes nothing");
        assert!(!token_call("finish", id, "other", epoch));
        assert!(
            !token_call("renew", id, "w", epoch),
            "a done item's lease cannot be renewed"
        );
    }

    #[pg_test]
    fn a_superseded_token_is_refused_everything() {
        let id = enqueue("q", "a");
        let (_, old) = claim("q", "w", "1 minute").unwrap();
        lapse(id);
        let (_, new) = claim("q", "w", "1 minute").unwrap();
        let before = snapshot();
        for call in ["renew", "finish", "release", "fail"] {
            assert!(
                !token_call(call, id, "w", old),
                "{call} with a superseded token"
            );
        }
        assert_eq!(snapshot(), before, "refused calls change nothing");
        let err = error_of("SELECT workfence.work_assert($1, 'w', $2)", id, old);
        assert!(err.starts_with("55000: lease lost"), "{err}");
        assert!(err.contains("superseded"), "{err}");
        // The current token still holds.
        assert_eq!(
            error_of("SELECT workfence.work_assert($1, 'w', $2)", id, new),
            "00000"
        );
        assert!(token_call("finish", id, "w", new));
    }

    #[pg_test]
    fn release_hands_the_item_back_and_kills_the_token() {
        let id = enqueue("q", "a");
        let (_, epoch) = claim("q", "w", "1 minute").unwrap();
        assert!(token_call("release", id, "w", epoch));
        let (state, attempts) = Spi::get_two_with_args::<String, i32>(
            "SELECT state::text, attempts FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(
            (state.as_deref(), attempts),
            (Some("pending"), Some(0)),
            "the attempt is given back"
        );
        for call in ["renew", "finish", "release", "fail"] {
            assert!(!token_call(call, id, "w", epoch), "{call} after release");
        }
        let err = error_of("SELECT workfence.work_assert($1, 'w', $2)", id, epoch);
        assert!(err.starts_with("55000:"), "{err}");
        let (again, epoch2) = claim("q", "w", "1 minute").unwrap();
        assert_eq!(again, id);
        assert!(epoch2 > epoch);
        // A release with a delay parks the item.
        assert!(Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_release($1, 'w', $2, '1 hour')",
            &[id.into(), epoch2.into()]
        )
        .unwrap()
        .unwrap());
        assert_eq!(
            claim("q", "w", "1 minute"),
            None,
            "not claimable during the delay"
        );
    }

    #[pg_test]
    fn fail_retries_then_dead_letters() {
        Spi::run("SELECT workfence.work_enqueue('q', '{}', 'a', max_attempts => 2)").unwrap();
        let id: i64 = one("SELECT id FROM workfence.items WHERE key = 'a'", &[]).unwrap();
        let (_, e1) = claim("q", "w", "1 minute").unwrap();
        assert!(Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_fail($1, 'w', $2, 'first error', '0')",
            &[id.into(), e1.into()]
        )
        .unwrap()
        .unwrap());
        let row = Spi::get_three_with_args::<String, i32, String>(
            "SELECT state::text, attempts, last_error FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(
            row,
            (Some("pending".into()), Some(1), Some("first error".into()))
        );
        let (_, e2) = claim("q", "w", "1 minute").unwrap();
        assert!(e2 > e1);
        assert!(
            !token_call("fail", id, "w", e1),
            "the old token cannot fail it again"
        );
        assert!(token_call("fail", id, "w", e2));
        let row = Spi::get_three_with_args::<String, i32, bool>(
            "SELECT state::text, attempts, finished_at IS NOT NULL FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(
            row,
            (Some("failed".into()), Some(2), Some(true)),
            "attempts used up"
        );
        assert_eq!(claim("q", "w", "1 minute"), None);
    }

    #[pg_test]
    fn fail_without_retry_in_backs_off_exponentially_with_jitter() {
        Spi::run("SELECT workfence.work_enqueue('q', '{}', 'a')").unwrap();
        let id: i64 = one("SELECT id FROM workfence.items WHERE key = 'a'", &[]).unwrap();
        for attempt in 1..=4_i64 {
            run("UPDATE workfence.items SET run_at = clock_timestamp() - interval '1 second' WHERE id = $1", &[id]);
            let (_, epoch) = claim("q", "w", "1 minute").unwrap();
            let t0: f64 = one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap();
            assert!(token_call("fail", id, "w", epoch));
            let t1: f64 = one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap();
            let run_at: f64 = one(
                "SELECT extract(epoch FROM run_at)::float8 FROM workfence.items WHERE id = $1",
                &[id],
            )
            .unwrap();
            let attempts: i32 =
                one("SELECT attempts FROM workfence.items WHERE id = $1", &[id]).unwrap();
            assert_eq!(attempts as i64, attempt);
            let d = 2f64.powi(attempt as i32);
            assert!(
                run_at >= t0 + d / 2.0 - 1e-3 && run_at <= t1 + d + 1e-3,
                "attempt {attempt}: retry after {} s, expected between {} and {}",
                run_at - t0,
                d / 2.0,
                d
            );
        }
    }

    #[pg_test]
    fn an_expired_final_attempt_is_dead_lettered_without_taking_a_slot() {
        Spi::run(
            "SELECT workfence.work_enqueue('q', '{}', 'dead', max_attempts => 1);
             SELECT workfence.work_enqueue('q', '{}', 'live', priority => 5);",
        )
        .unwrap();
        let id: i64 = one("SELECT id FROM workfence.items WHERE key = 'dead'", &[]).unwrap();
        let (claimed, epoch) = claim("q", "w", "1 minute").unwrap();
        assert_eq!(claimed, id, "priority 0 first");
        lapse(id);
        // The next claim dead-letters 'dead' and still hands out 'live'.
        let key: String = one(
            "SELECT key FROM workfence.work_claim('q', 'w2', '1 minute')",
            &[],
        )
        .unwrap();
        assert_eq!(key, "live");
        let row = Spi::get_three_with_args::<String, i64, String>(
            "SELECT state::text, epoch, last_error FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(
            row,
            (
                Some("failed".into()),
                Some(epoch),
                Some("lease expired on the final attempt".into())
            )
        );
        assert!(!token_call("finish", id, "w", epoch));
        // work_claim_key dead-letters the same way and returns nothing.
        Spi::run("SELECT workfence.work_enqueue('q', '{}', 'k', max_attempts => 1)").unwrap();
        let k = Spi::get_two::<i64, i64>(
            "SELECT id, epoch FROM workfence.work_claim_key('q', 'k', 'w', '1 minute')",
        )
        .unwrap();
        lapse(k.0.unwrap());
        let n = count("SELECT count(*) FROM workfence.work_claim_key('q', 'k', 'w', '1 minute')");
        assert_eq!(n, 0);
        let state: String = one(
            "SELECT state::text FROM workfence.items WHERE id = $1",
            &[k.0.unwrap()],
        )
        .unwrap();
        assert_eq!(state, "failed");
    }

    #[pg_test]
    fn claim_key_takes_only_the_named_claimable_item() {
        let a = enqueue("cron", "a");
        enqueue("cron", "b");
        let got = Spi::get_two::<i64, String>(
            "SELECT id, key FROM workfence.work_claim_key('cron', 'a', 'sched', '1 minute')",
        )
        .unwrap();
        assert_eq!(got, (Some(a), Some("a".into())));
        let n = count(
            "SELECT count(*) FROM workfence.work_claim_key('cron', 'a', 'sched', '1 minute')",
        );
        assert_eq!(n, 0, "held under a live lease");
        let n = count(
            "SELECT count(*) FROM workfence.work_claim_key('cron', 'zzz', 'sched', '1 minute')",
        );
        assert_eq!(n, 0, "no such key");
        lapse(a);
        let n = count(
            "SELECT count(*) FROM workfence.work_claim_key('cron', 'a', 'sched', '1 minute')",
        );
        assert_eq!(n, 1, "claimable again once the lease lapsed");
        Spi::run("SELECT workfence.work_enqueue('cron', '{}', 'later', clock_timestamp() + interval '1 hour')").unwrap();
        let n = count(
            "SELECT count(*) FROM workfence.work_claim_key('cron', 'later', 'sched', '1 minute')",
        );
        assert_eq!(n, 0, "not yet due");
    }

    #[pg_test]
    fn finish_many_judges_each_pair_like_finish() {
        for k in 0..4 {
            enqueue("q", &format!("k{k}"));
        }
        let ids_epochs = Spi::get_two::<Vec<i64>, Vec<i64>>(
            "SELECT array_agg(id ORDER BY id), array_agg(epoch ORDER BY id) FROM workfence.work_claim('q', 'w', '1 minute', 4)",
        )
        .unwrap();
        let (ids, epochs) = (ids_epochs.0.unwrap(), ids_epochs.1.unwrap());
        // ids[0] is finished already with its token; ids[1] gets a stale epoch.
        assert!(token_call("finish", ids[0], "w", epochs[0]));
        let out = Spi::get_one_with_args::<Vec<bool>>(
            "SELECT array_agg(finished ORDER BY ord) FROM workfence.work_finish_many('w', $1, $2, ARRAY['1', '2', '3', '4']::jsonb[]) WITH ORDINALITY AS f(id, finished, ord)",
            &[ids.clone().into(), vec![epochs[0], epochs[1] - 1, epochs[2], epochs[3]].into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(out, vec![true, false, true, true]);
        let states = Spi::get_one::<Vec<String>>(
            "SELECT array_agg(state::text ORDER BY id) FROM workfence.items",
        )
        .unwrap()
        .unwrap();
        assert_eq!(states, vec!["done", "claimed", "done", "done"]);
        let result: i64 = one(
            "SELECT (result)::text::bigint FROM workfence.items WHERE id = $1",
            &[ids[2]],
        )
        .unwrap();
        assert_eq!(result, 3);
        let before = snapshot();
        assert_eq!(
            error_of(
                "SELECT workfence.work_finish_many('w', ARRAY[$1], ARRAY[$2, $2])",
                ids[1],
                epochs[1]
            )
            .get(..6),
            Some("22023:")
        );
        assert_eq!(
            error_of(
                "SELECT workfence.work_finish_many('w', ARRAY[$1, NULL], ARRAY[$2, $2])",
                ids[1],
                epochs[1]
            )
            .get(..6),
            Some("22004:")
        );
        assert_eq!(snapshot(), before);
    }

    #[pg_test]
    fn cancel_withdraws_an_unfinished_item_and_kills_its_token() {
        let cancel = |key: &str| {
            Spi::get_one_with_args::<bool>("SELECT workfence.work_cancel('q', $1)", &[key.into()])
                .unwrap()
                .unwrap()
        };
        // Claimed: cancelled, the holder's token refused everything.
        let id = enqueue("q", "claimed");
        let (_, epoch) = claim("q", "w", "1 minute").unwrap();
        assert!(cancel("claimed"));
        let row = Spi::get_two_with_args::<String, bool>(
            "SELECT state::text, finished_at IS NOT NULL AND lease_until IS NULL
               FROM workfence.items WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        assert_eq!(row, (Some("cancelled".into()), Some(true)));
        let before = snapshot();
        for call in ["renew", "finish", "release", "fail"] {
            assert!(!token_call(call, id, "w", epoch), "{call} after cancel");
        }
        assert_eq!(snapshot(), before, "refused calls change nothing");
        let err = error_of("SELECT workfence.work_assert($1, 'w', $2)", id, epoch);
        assert!(err.starts_with("55000: lease lost"), "{err}");
        assert!(err.contains("cancelled"), "{err}");
        // Never claimed again, not even when its old lease would have lapsed.
        lapse(id);
        assert_eq!(claim("q", "w", "1 minute"), None);
        assert_eq!(
            count("SELECT count(*) FROM workfence.work_claim_key('q', 'claimed', 'w', '1 minute')"),
            0
        );
        // A re-submit of the key returns the cancelled item, not a new one.
        let again = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('q', '{}', 'claimed')",
        )
        .unwrap();
        assert_eq!(again, (Some(id), Some(false)));

        // Pending: cancelled before anyone claims it.
        enqueue("q", "pending");
        assert!(cancel("pending"));
        assert_eq!(claim("q", "w", "1 minute"), None);

        // Finished, cancelled or unknown: false, nothing changes.
        let done = enqueue("q", "done");
        let (_, done_epoch) = claim("q", "w", "1 minute").unwrap();
        assert!(token_call("finish", done, "w", done_epoch));
        let before = snapshot();
        for key in ["done", "claimed", "pending", "no such key"] {
            assert!(!cancel(key), "cancel of {key}");
        }
        assert_eq!(snapshot(), before);
        assert!(
            token_call("finish", done, "w", done_epoch),
            "done stays done"
        );
    }

    // Every function x every bad argument (the documented SQLSTATE, a
    // message naming the argument, nothing changed) is one generated table,
    // run from a client connection: tests/bad_input.rs.

    #[pg_test]
    fn tables_are_not_writable_by_public_and_everything_is_documented() {
        Spi::run("CREATE ROLE workfence_nobody").unwrap();
        for privilege in ["INSERT", "UPDATE", "DELETE", "SELECT", "TRUNCATE"] {
            let allowed = Spi::get_one_with_args::<bool>(
                "SELECT has_table_privilege('workfence_nobody', 'workfence.items', $1)",
                &[privilege.into()],
            )
            .unwrap();
            assert_eq!(allowed, Some(false), "{privilege} on items");
        }
        let usage = Spi::get_one::<bool>(
            "SELECT has_sequence_privilege('workfence_nobody', 'workfence.epoch_seq', 'USAGE')",
        )
        .unwrap();
        assert_eq!(usage, Some(false));
        let undocumented = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'workfence' AND obj_description(p.oid, 'pg_proc') IS NULL",
        )
        .unwrap();
        assert_eq!(undocumented, Some(0), "every function has a COMMENT");
        let undocumented = Spi::get_one::<String>(
            "SELECT coalesce(string_agg(c.relname, ', '), '') FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'workfence' AND c.relkind IN ('r', 'v', 'S', 'i')
                AND obj_description(c.oid, 'pg_class') IS NULL",
        )
        .unwrap();
        assert_eq!(
            undocumented.as_deref(),
            Some(""),
            "every table, view, index and sequence has a COMMENT"
        );
        let dumped = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_extension e, unnest(e.extconfig) AS c WHERE e.extname = 'pg_workfence'",
        )
        .unwrap();
        assert_eq!(
            dumped,
            Some(3),
            "items, items_id_seq and epoch_seq are dumped by pg_dump"
        );
    }

    #[pg_test]
    fn a_null_argument_never_returns_a_silent_null() {
        // pgrx makes functions with only non-Option arguments STRICT; these must not be.
        let strict = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'workfence' AND p.proisstrict",
        )
        .unwrap();
        assert_eq!(strict, Some(0));
    }

    /// The extension runs its kept statements as generic plans by setting
    /// `plan_cache_mode` around each one (src/plans.rs). A statement that
    /// raises must leave the session's own setting as it was.
    #[pg_test]
    fn plan_cache_mode_is_restored_after_a_statement_raises() {
        run("SET LOCAL plan_cache_mode = force_custom_plan", &[]);
        run(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 RAISE EXCEPTION 'refused under %', current_setting('plan_cache_mode');
             END $$",
            &[],
        );
        run(
            "CREATE TRIGGER refuse BEFORE UPDATE ON workfence.items
             FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()",
            &[],
        );
        enqueue("q", "k");
        let err = error_of(
            "SELECT count(*) FROM workfence.work_claim('q', 'w', '1 minute')",
            0,
            0,
        );
        assert!(
            err.starts_with("P0001: refused under force_generic_plan"),
            "{err}"
        );
        assert_eq!(
            one::<String>("SELECT current_setting('plan_cache_mode')", &[]).as_deref(),
            Some("force_custom_plan")
        );
    }
}
