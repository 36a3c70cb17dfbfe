//! In-server tests of flow control (0.10.0, 0.12.0) and of the listing
//! (0.11.0): serial groups, `per_group`, round-robin between groups, the
//! concurrency and rate limits, `work_limit`'s bad input, and `work_items`'
//! pages, each as one connection sees them in one transaction.
//!
//! What needs several connections (claims racing for slots and group heads,
//! a claim inside a long transaction, lowering a limit under load, the
//! benchmarks' figures) is in `harness/tests/client/flow_control.rs`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::pgrx_tests::helpers::{count, error_of, run, token_call};

    /// Enqueue `key` into `queue` in group `group`; its id.
    fn enqueue_in(queue: &str, key: &str, group: &str) -> i64 {
        Spi::get_one_with_args::<i64>(
            "SELECT id FROM workfence.work_enqueue($1, '{}', $2, group_key => $3)",
            &[queue.into(), key.into(), group.into()],
        )
        .unwrap()
        .unwrap()
    }

    /// Claim up to `max` items of `queue` as `owner`: their (key, id, epoch), in claim order.
    fn claim_many(queue: &str, max: i32) -> Vec<(String, i64, i64)> {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT key, id, epoch FROM workfence.work_claim($1, 'w', '30 seconds', $2)",
                    None,
                    &[queue.into(), max.into()],
                )
                .unwrap()
                .map(|row| {
                    (
                        row.get::<String>(1).unwrap().unwrap(),
                        row.get::<i64>(2).unwrap().unwrap(),
                        row.get::<i64>(3).unwrap().unwrap(),
                    )
                })
                .collect()
        })
    }

    fn keys(claimed: &[(String, i64, i64)]) -> Vec<&str> {
        let mut keys: Vec<&str> = claimed.iter().map(|(key, _, _)| key.as_str()).collect();
        keys.sort_unstable();
        keys
    }

    fn finish(claimed: &(String, i64, i64)) {
        assert!(token_call("finish", claimed.1, "w", claimed.2));
    }

    #[pg_test]
    fn a_serial_group_hands_out_one_item_at_a_time_in_order() {
        enqueue_in("groups", "a1", "a");
        enqueue_in("groups", "a2", "a");
        enqueue_in("groups", "b1", "b");
        let first = claim_many("groups", 10);
        assert_eq!(keys(&first), ["a1", "b1"], "one item per group");
        assert!(claim_many("groups", 10).is_empty(), "both groups are busy");
        let a1 = first.iter().find(|(key, _, _)| key == "a1").unwrap();
        finish(a1);
        let next = claim_many("groups", 10);
        assert_eq!(keys(&next), ["a2"], "a's next item once a1 is done");
    }

    #[pg_test]
    fn per_group_lets_that_many_items_of_a_group_run_at_once() {
        run(
            "SELECT workfence.work_limit('per-group', per_group => 2)",
            &[],
        );
        for key in ["g1", "g2", "g3"] {
            enqueue_in("per-group", key, "g");
        }
        // A batch takes at most one item of a group (work_claim's comment); the next claim
        // takes the group's second.
        let first = claim_many("per-group", 10);
        assert_eq!(keys(&first), ["g1"]);
        assert_eq!(keys(&claim_many("per-group", 10)), ["g2"], "two at once");
        assert!(claim_many("per-group", 10).is_empty(), "not three");
        finish(&first[0]);
        assert_eq!(keys(&claim_many("per-group", 10)), ["g3"]);
    }

    #[pg_test]
    fn a_big_group_does_not_keep_the_small_ones_waiting() {
        for n in 0..5 {
            enqueue_in("round-robin", &format!("big{n}"), "big");
        }
        enqueue_in("round-robin", "small1", "s1");
        enqueue_in("round-robin", "small2", "s2");
        // One item at a time, finished before the next claim: a worker with max_items 1.
        let mut order = Vec::new();
        for _ in 0..4 {
            let claimed = claim_many("round-robin", 1);
            assert_eq!(claimed.len(), 1, "claimed so far: {order:?}");
            finish(&claimed[0]);
            order.push(claimed[0].0.clone());
        }
        assert_eq!(
            order.iter().filter(|key| key.starts_with("small")).count(),
            2,
            "both small groups are served within the first four claims: {order:?}"
        );
        assert_eq!(order[0], "big0", "the oldest head is first: {order:?}");
    }

    #[pg_test]
    fn a_concurrency_limit_caps_a_batch_and_a_finish_frees_its_slot() {
        run(
            "SELECT workfence.work_limit('limited', concurrency => 2)",
            &[],
        );
        for n in 0..5 {
            run(
                &format!("SELECT workfence.work_enqueue('limited', '{{}}', 'k{n}')"),
                &[],
            );
        }
        let claimed = claim_many("limited", 5);
        assert_eq!(claimed.len(), 2, "two slots");
        assert!(claim_many("limited", 5).is_empty(), "both slots taken");
        finish(&claimed[0]);
        assert_eq!(claim_many("limited", 5).len(), 1, "one slot freed");
        assert_eq!(
            count("SELECT count(*) FROM workfence.items WHERE queue = 'limited' AND state = 'claimed'"),
            2
        );
    }

    #[pg_test]
    fn a_rate_limit_hands_out_that_many_per_window() {
        run(
            "SELECT workfence.work_limit('rated', rate => 3, per => '1 hour')",
            &[],
        );
        for n in 0..5 {
            run(
                &format!("SELECT workfence.work_enqueue('rated', '{{}}', 'k{n}')"),
                &[],
            );
        }
        let claimed = claim_many("rated", 5);
        assert_eq!(claimed.len(), 3);
        for item in &claimed {
            finish(item);
        }
        assert!(
            claim_many("rated", 5).is_empty(),
            "finishing gives back no rate: the window is an hour"
        );
    }

    #[pg_test]
    fn lifting_every_limit_lets_the_queue_run_free() {
        run(
            "SELECT workfence.work_limit('lifted', concurrency => 1)",
            &[],
        );
        for n in 0..3 {
            run(
                &format!("SELECT workfence.work_enqueue('lifted', '{{}}', 'k{n}')"),
                &[],
            );
        }
        assert_eq!(claim_many("lifted", 3).len(), 1);
        run("SELECT workfence.work_limit('lifted')", &[]);
        assert_eq!(claim_many("lifted", 3).len(), 2, "no limit left");
    }

    #[pg_test]
    fn work_limit_refuses_bad_limits_with_their_sqlstate() {
        for (call, state) in [
            (
                "SELECT workfence.work_limit('q', concurrency => 0)",
                "22023",
            ),
            ("SELECT workfence.work_limit('q', rate => 10001)", "22023"),
            ("SELECT workfence.work_limit('q', per_group => 0)", "22023"),
            (
                "SELECT workfence.work_limit('q', rate => 1, per => '2 days')",
                "22023",
            ),
            (
                "SELECT workfence.work_limit('q', rate => 1, per => '0')",
                "22023",
            ),
            ("SELECT workfence.work_limit(NULL)", "22004"),
            ("SELECT workfence.work_limit('q', per => NULL)", "22004"),
            ("SELECT workfence.work_limit('', concurrency => 1)", "22023"),
        ] {
            let got = error_of(call, 0, 0);
            assert!(got.starts_with(state), "{call}: {got}");
        }
        assert_eq!(
            count("SELECT count(*) FROM workfence.work_queue_stats WHERE queue = 'q'"),
            0,
            "nothing was set"
        );
    }

    #[pg_test]
    fn work_items_pages_the_pending_items_in_claim_order() {
        for (key, priority) in [("p1", 5), ("p2", 0), ("p3", 5), ("p4", 1), ("p5", 0)] {
            run(
                &format!(
                    "SELECT workfence.work_enqueue('listed', '{{}}', '{key}', priority => {priority})"
                ),
                &[],
            );
        }
        let page = |after: Option<i64>| -> Vec<(String, i64)> {
            Spi::connect(|client| {
                client
                    .select(
                        "SELECT key, id FROM workfence.work_items('listed', 'pending', $1, 2)",
                        None,
                        &[after.into()],
                    )
                    .unwrap()
                    .map(|row| {
                        (
                            row.get::<String>(1).unwrap().unwrap(),
                            row.get::<i64>(2).unwrap().unwrap(),
                        )
                    })
                    .collect()
            })
        };
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let rows = page(after);
            if rows.is_empty() {
                break;
            }
            assert!(rows.len() <= 2, "max 2 rows a page");
            after = Some(rows.last().unwrap().1);
            seen.extend(rows.into_iter().map(|(key, _)| key));
        }
        assert_eq!(seen, ["p2", "p5", "p4", "p1", "p3"], "priority, run_at, id");
        let bad = error_of(
            "SELECT count(*) FROM workfence.work_items('listed', 'running')",
            0,
            0,
        );
        assert!(bad.starts_with("22023"), "{bad}");
    }
}
