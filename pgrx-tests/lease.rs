//! In-server tests of what a token can do: renew, finish (one and many),
//! release, fail; the seed scenario; superseded and lapsed tokens.
//!
//! Each test is one transaction (rolled back by the harness); the passage of
//! time is simulated by moving `lease_until` into the past (see `mod.rs`).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{
        claim, enqueue, error_of, item_three, item_two, lapse, one, run, snapshot, token_call,
    };

    /// Item `a` of queue `q`, enqueued and claimed by `w` for a minute:
    /// (id, epoch).
    fn claimed() -> (i64, i64) {
        let id = enqueue("q", "a");
        let (_, epoch) = claim("q", "w", "1 minute").unwrap();
        (id, epoch)
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
        let (state, epoch) = item_two::<String, i64>("state::text, epoch", id);
        assert_eq!(
            (state.as_deref(), epoch),
            (Some("done"), Some(b_epoch)),
            "finished once, by B"
        );
    }

    #[pg_test]
    fn an_expired_lease_nobody_reclaimed_is_still_current() {
        let (id, epoch) = claimed();
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
        let (id, epoch) = claimed();
        assert!(!token_call("finish", id, "other", epoch), "wrong owner");
        assert!(!token_call("finish", id, "w", epoch + 1), "wrong epoch");
        let first = one::<bool>(
            "SELECT workfence.work_finish($1, 'w', $2, '{\"r\": 1}')",
            &[id, epoch],
        );
        assert_eq!(first, Some(true));
        let before = snapshot();
        let again = one::<bool>(
            "SELECT workfence.work_finish($1, 'w', $2, '{\"r\": 2}')",
            &[id, epoch],
        );
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
        let (id, old) = claimed();
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
        let (id, epoch) = claimed();
        assert!(token_call("release", id, "w", epoch));
        let (state, attempts) = item_two::<String, i32>("state::text, attempts", id);
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
        assert!(one::<bool>(
            "SELECT workfence.work_release($1, 'w', $2, '1 hour')",
            &[id, epoch2]
        )
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
        assert!(one::<bool>(
            "SELECT workfence.work_fail($1, 'w', $2, 'first error', '0')",
            &[id, e1]
        )
        .unwrap());
        let row = item_three::<String, i32, String>("state::text, attempts, last_error", id);
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
        let row =
            item_three::<String, i32, bool>("state::text, attempts, finished_at IS NOT NULL", id);
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
}
