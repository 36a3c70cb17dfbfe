//! In-server tests of the operations: `work_purge`, `work_lease_status` and
//! the `work_queue_stats` view, with their bad input.
//!
//! As in `mod.rs`, each test is one transaction (rolled back by the harness),
//! and a lapsed lease or an old finish is simulated by moving `lease_until`
//! or `finished_at` into the past with a direct UPDATE, as the clock would.
//! That a purge skips rows other transactions hold locked, and the NOTIFY of
//! `work_enqueue`, need more than one connection: `harness/tests/client/purge.rs` and
//! `harness/tests/client/notify.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{enqueue, error_of, lapse, one, run};

    /// (id, epoch) of a `work_claim_key` of `key` that must succeed.
    fn claim_key(queue: &str, key: &str, owner: &str) -> (i64, i64) {
        match Spi::get_two_with_args::<i64, i64>(
            "SELECT id, epoch FROM workfence.work_claim_key($1, $2, $3, '1 minute')",
            &[queue.into(), key.into(), owner.into()],
        ) {
            Ok((Some(id), Some(epoch))) => (id, epoch),
            other => panic!("work_claim_key({queue}, {key}) returned {other:?}"),
        }
    }

    /// Make item `id` look finished 8 days ago (past the default 7 days).
    fn finished_long_ago(id: i64) {
        run(
            "UPDATE workfence.items SET finished_at = clock_timestamp() - interval '8 days' WHERE id = $1",
            &[id],
        );
    }

    fn token_call(sql: &str, id: i64, owner: &str, epoch: i64) -> bool {
        Spi::get_one_with_args::<bool>(sql, &[id.into(), owner.into(), epoch.into()])
            .unwrap()
            .unwrap()
    }

    fn finish(id: i64, owner: &str, epoch: i64) -> bool {
        token_call("SELECT workfence.work_finish($1, $2, $3)", id, owner, epoch)
    }

    fn status(id: i64, owner: &str, epoch: i64) -> String {
        Spi::get_one_with_args::<String>(
            "SELECT workfence.work_lease_status($1, $2, $3)",
            &[id.into(), owner.into(), epoch.into()],
        )
        .unwrap()
        .expect("work_lease_status never returns NULL")
    }

    fn purge(sql: &str) -> i64 {
        one::<i64>(sql, &[]).expect("work_purge never returns NULL")
    }

    /// Keys of the items of `queue`, in id order.
    fn keys(queue: &str) -> Vec<String> {
        Spi::get_one_with_args::<Vec<String>>(
            "SELECT coalesce(array_agg(key ORDER BY id), '{}') FROM workfence.items WHERE queue = $1",
            &[queue.into()],
        )
        .unwrap()
        .unwrap()
    }

    /// Every row, as one digest: what a call must not change.
    fn digest() -> String {
        Spi::get_one::<String>(
            "SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM workfence.items t",
        )
        .unwrap()
        .unwrap()
    }

    /// One item of `queue` in each finished state (done, failed, cancelled),
    /// keyed `prefix-done` etc.; their ids.
    fn finished_items(queue: &str, prefix: &str) -> [i64; 3] {
        let done_key = format!("{prefix}-done");
        let failed_key = format!("{prefix}-failed");
        let cancelled_key = format!("{prefix}-cancelled");
        enqueue(queue, &done_key);
        let (done, epoch) = claim_key(queue, &done_key, "w");
        assert!(finish(done, "w", epoch));
        Spi::run_with_args(
            "SELECT workfence.work_enqueue($1, '{}', $2, max_attempts => 1)",
            &[queue.into(), failed_key.as_str().into()],
        )
        .unwrap();
        let (failed, epoch) = claim_key(queue, &failed_key, "w");
        assert!(token_call(
            "SELECT workfence.work_fail($1, $2, $3, 'boom')",
            failed,
            "w",
            epoch
        ));
        let cancelled = enqueue(queue, &cancelled_key);
        assert!(Spi::get_one_with_args::<bool>(
            "SELECT workfence.work_cancel($1, $2)",
            &[queue.into(), cancelled_key.as_str().into()],
        )
        .unwrap()
        .unwrap());
        [done, failed, cancelled]
    }

    #[pg_test]
    fn purge_deletes_only_items_finished_before_the_cutoff() {
        for id in finished_items("pq", "old") {
            finished_long_ago(id);
        }
        finished_items("pq", "new");
        enqueue("pq", "pending");
        let (claimed, _) = {
            enqueue("pq", "claimed");
            claim_key("pq", "claimed", "w")
        };
        lapse(claimed);
        for id in finished_items("other", "old") {
            finished_long_ago(id);
        }

        assert_eq!(
            purge("SELECT workfence.work_purge('7 days', 'pq')"),
            3,
            "the three items of pq finished 8 days ago"
        );
        assert_eq!(
            keys("pq"),
            vec![
                "new-done",
                "new-failed",
                "new-cancelled",
                "pending",
                "claimed"
            ]
        );
        assert_eq!(keys("other").len(), 3, "another queue is left alone");
        assert_eq!(
            purge("SELECT workfence.work_purge()"),
            3,
            "the default: 7 days, every queue"
        );
        assert_eq!(keys("other"), Vec::<String>::new());
        // '0': everything finished so far; never a pending or claimed item,
        // not even one whose lease lapsed.
        assert_eq!(purge("SELECT workfence.work_purge('0')"), 3);
        assert_eq!(keys("pq"), vec!["pending", "claimed"]);
        let before = digest();
        assert_eq!(purge("SELECT workfence.work_purge('0')"), 0);
        assert_eq!(digest(), before);
    }

    #[pg_test]
    fn purge_never_lets_an_id_or_an_epoch_be_reused() {
        let old_id = enqueue("pq", "k");
        let (_, old_epoch) = claim_key("pq", "k", "w");
        assert!(finish(old_id, "w", old_epoch));
        finished_long_ago(old_id);
        assert_eq!(purge("SELECT workfence.work_purge(queue => 'pq')"), 1);
        assert_eq!(status(old_id, "w", old_epoch), "missing");
        // The key is free again: a new item, a new id, a newer epoch.
        let (new_id, inserted) = Spi::get_two::<i64, bool>(
            "SELECT id, inserted FROM workfence.work_enqueue('pq', '{}', 'k')",
        )
        .unwrap();
        assert_eq!(inserted, Some(true));
        let new_id = new_id.unwrap();
        assert!(new_id > old_id, "id {new_id} after {old_id}");
        let (claimed, new_epoch) = claim_key("pq", "k", "w");
        assert_eq!(claimed, new_id);
        assert!(new_epoch > old_epoch, "epoch {new_epoch} after {old_epoch}");
        // The purged item's token does not come back to life on the new item.
        assert!(!finish(old_id, "w", old_epoch));
        assert_eq!(status(new_id, "w", old_epoch), "superseded");
    }

    #[pg_test]
    fn lease_status_names_every_case() {
        let id = enqueue("ls", "a");
        let (_, e1) = claim_key("ls", "a", "w");
        assert_eq!(status(id, "w", e1), "current");
        assert_eq!(status(id, "w2", e1), "wrong_owner");
        assert_eq!(
            status(id, " w", e1),
            "wrong_owner",
            "compared byte for byte"
        );
        assert_eq!(status(id + 1_000_000, "w", e1), "missing");
        // Lapsed, and nobody claimed it anew: still current (promise 2).
        lapse(id);
        assert_eq!(status(id, "w", e1), "current");
        // Claimed anew: the old token is superseded, whatever its owner.
        let (_, e2) = claim_key("ls", "a", "w");
        assert_eq!(status(id, "w", e1), "superseded");
        assert_eq!(status(id, "w2", e1), "superseded");
        assert_eq!(status(id, "w", e2), "current");
        // An epoch the item never had is not current either.
        assert_eq!(status(id, "w", e2 + 1_000_000), "superseded");
        // Finished under e2.
        assert!(finish(id, "w", e2));
        assert_eq!(status(id, "w", e2), "finished");
        assert_eq!(status(id, "w", e1), "superseded");

        // Failed with the attempts used up: finished too.
        Spi::run("SELECT workfence.work_enqueue('ls', '{}', 'f', max_attempts => 1)").unwrap();
        let (f, fe) = claim_key("ls", "f", "w");
        assert!(token_call(
            "SELECT workfence.work_fail($1, $2, $3, 'boom')",
            f,
            "w",
            fe
        ));
        assert_eq!(status(f, "w", fe), "finished");

        // Cancelled while held.
        let c = enqueue("ls", "c");
        let (_, ce) = claim_key("ls", "c", "w");
        assert!(
            Spi::get_one::<bool>("SELECT workfence.work_cancel('ls', 'c')")
                .unwrap()
                .unwrap()
        );
        assert_eq!(status(c, "w", ce), "cancelled");
    }

    #[pg_test]
    fn lease_status_of_a_handed_back_lease_is_superseded() {
        // Released: the item left the lease; the next claim takes a newer epoch.
        let r = enqueue("ls", "r");
        let (_, re) = claim_key("ls", "r", "w");
        assert!(token_call(
            "SELECT workfence.work_release($1, $2, $3)",
            r,
            "w",
            re
        ));
        let before = digest();
        assert_eq!(status(r, "w", re), "superseded");
        assert_eq!(digest(), before, "work_lease_status changes nothing");
        // work_assert's DETAIL keeps the finer reason.
        let err = error_of("SELECT workfence.work_assert($1, 'w', $2)", r, re);
        assert!(err.starts_with("55000: lease lost"), "{err}");
        assert!(err.contains("(released)"), "{err}");
        let (_, re2) = claim_key("ls", "r", "w");
        assert!(re2 > re);
        assert_eq!(status(r, "w", re), "superseded");

        // A retryable failure hands the lease back the same way.
        let f = enqueue("ls", "retry");
        let (_, fe) = claim_key("ls", "retry", "w");
        assert!(token_call(
            "SELECT workfence.work_fail($1, $2, $3, 'boom', retry_in => '1 hour')",
            f,
            "w",
            fe
        ));
        assert_eq!(status(f, "w", fe), "superseded");
    }

    #[pg_test]
    fn queue_stats_counts_every_state_per_queue() {
        // Queue sq: two due, one scheduled, one live lease, one lapsed lease,
        // and one item in each finished state.
        Spi::run(
            "SELECT workfence.work_enqueue('sq', '{}', 'due-old', clock_timestamp() - interval '1 hour');
             SELECT workfence.work_enqueue('sq', '{}', 'due-now');
             SELECT workfence.work_enqueue('sq', '{}', 'later', clock_timestamp() + interval '1 hour');
             SELECT workfence.work_enqueue('sq', '{}', 'live');
             SELECT workfence.work_enqueue('sq', '{}', 'lapsed');",
        )
        .unwrap();
        claim_key("sq", "live", "w");
        let (lapsed, _) = claim_key("sq", "lapsed", "w");
        lapse(lapsed);
        finished_items("sq", "fin");
        // Queue sq2: only a scheduled item.
        Spi::run(
            "SELECT workfence.work_enqueue('sq2', '{}', 'later', clock_timestamp() + interval '1 day')",
        )
        .unwrap();

        let counts = |queue: &str| -> Vec<i64> {
            Spi::get_one_with_args::<Vec<i64>>(
                "SELECT ARRAY[pending, scheduled, claimed, expired, done, failed, cancelled]
                   FROM workfence.work_queue_stats WHERE queue = $1",
                &[queue.into()],
            )
            .unwrap()
            .unwrap_or_else(|| panic!("no row for {queue}"))
        };
        let age_secs = |queue: &str| -> Option<f64> {
            Spi::get_one_with_args::<f64>(
                "SELECT extract(epoch FROM oldest_due_age)::float8
                   FROM workfence.work_queue_stats WHERE queue = $1",
                &[queue.into()],
            )
            .unwrap()
        };
        assert_eq!(counts("sq"), vec![2, 1, 1, 1, 1, 1, 1]);
        let age = age_secs("sq").expect("sq has due items");
        assert!(
            (3600.0..3660.0).contains(&age),
            "the oldest due item has waited an hour: {age} s"
        );
        assert_eq!(counts("sq2"), vec![0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(age_secs("sq2"), None, "no due item in sq2");
        let queues = Spi::get_one::<Vec<String>>(
            "SELECT array_agg(queue ORDER BY queue) FROM workfence.work_queue_stats
              WHERE queue IN ('sq', 'sq2', 'no such queue')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(queues, vec!["sq", "sq2"], "one row per queue with items");

        // A claim takes the lapsed item and the due ones: all live leases now.
        let n = one::<i64>(
            "SELECT count(*) FROM workfence.work_claim('sq', 'w', '1 minute', 10)",
            &[],
        );
        assert_eq!(n, Some(3));
        assert_eq!(counts("sq"), vec![0, 1, 4, 0, 1, 1, 1]);
        assert_eq!(age_secs("sq"), None);

        // '-infinity' is due (since its enqueue) and does not break the age.
        Spi::run("SELECT workfence.work_enqueue('sq3', '{}', 'x', '-infinity')").unwrap();
        assert_eq!(counts("sq3"), vec![1, 0, 0, 0, 0, 0, 0]);
        let age = age_secs("sq3").expect("sq3 has a due item");
        assert!((0.0..60.0).contains(&age), "due since its enqueue: {age} s");
    }

    #[pg_test]
    fn queue_stats_is_documented_and_not_readable_by_public() {
        Spi::run("CREATE ROLE workfence_ops_nobody").unwrap();
        let allowed = Spi::get_one::<bool>(
            "SELECT has_table_privilege('workfence_ops_nobody', 'workfence.work_queue_stats', 'SELECT')",
        )
        .unwrap();
        assert_eq!(allowed, Some(false));
        let undocumented = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_attribute
              WHERE attrelid = 'workfence.work_queue_stats'::regclass AND attnum > 0
                AND col_description(attrelid, attnum) IS NULL",
        )
        .unwrap();
        assert_eq!(undocumented, Some(0), "every column has a COMMENT");
    }

    #[pg_test]
    fn purge_and_lease_status_reject_bad_input_naming_the_argument() {
        let id = finished_items("bad", "x")[0];
        finished_long_ago(id);
        let before = digest();
        let cases = [
            ("SELECT workfence.work_purge(NULL)", "22004", "older_than"),
            (
                "SELECT workfence.work_purge('-1 second')",
                "22023",
                "older_than",
            ),
            (
                "SELECT workfence.work_purge('1 mon -29 days')",
                "22023",
                "older_than",
            ),
            (
                "SELECT workfence.work_purge('3650 days 00:00:01')",
                "22023",
                "older_than",
            ),
            (
                "SELECT workfence.work_purge('100000 years')",
                "22023",
                "older_than",
            ),
            ("SELECT workfence.work_purge('0', '')", "22023", "queue"),
            (
                "SELECT workfence.work_purge('0', repeat('q', 129))",
                "22023",
                "queue",
            ),
            (
                "SELECT workfence.work_purge('0', E'a\\nb')",
                "22023",
                "queue",
            ),
            (
                "SELECT workfence.work_lease_status(NULL, 'w', 1)",
                "22004",
                "id",
            ),
            (
                "SELECT workfence.work_lease_status(1, NULL, 1)",
                "22004",
                "owner",
            ),
            (
                "SELECT workfence.work_lease_status(1, 'w', NULL)",
                "22004",
                "epoch",
            ),
            (
                "SELECT workfence.work_lease_status(1, '  ', 1)",
                "22023",
                "owner",
            ),
            (
                "SELECT workfence.work_lease_status(1, E'w\\n', 1)",
                "22023",
                "owner",
            ),
            (
                "SELECT workfence.work_lease_status(1, repeat('o', 257), 1)",
                "22023",
                "owner",
            ),
        ];
        for (sql, sqlstate, arg) in cases {
            let err = error_of(sql, 0, 0);
            let expected = format!("{sqlstate}: argument \"{arg}\"");
            assert!(err.starts_with(&expected), "{sql}: {err}");
        }
        assert_eq!(digest(), before, "a rejected purge deletes nothing");
        // The valid calls (the item finished 8 days ago is purged).
        assert_eq!(
            error_of("SELECT workfence.work_purge('3650 days')", 0, 0),
            "00000"
        );
        assert_eq!(purge("SELECT workfence.work_purge('0', 'bad')"), 3);
    }
}
