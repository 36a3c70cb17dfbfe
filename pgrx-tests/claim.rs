//! In-server tests of `work_claim` and `work_claim_key`: leases, order, batch
//! size, epochs, dead letters of lapsed final attempts.
//!
//! Each test is one transaction (rolled back by the harness); the passage of
//! time is simulated by moving `lease_until` into the past (see `mod.rs`).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{
        claim, count, enqueue, item_three, lapse, one, run, token_call,
    };

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
        let row = item_three::<String, i64, String>("state::text, epoch, last_error", id);
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
}
