//! Every typed call of `workfence_harness::calls` once against a real
//! server, with its defaults: the calls the other tests build on bind their
//! arguments as the functions expect and read their rows.

use crate::common;

use common::{ok, shared_cluster};
use serde_json::json;
use workfence_harness::calls::{self, Enqueue, RunAt, SqlState, Token};

#[test]
fn every_call_round_trips_with_the_servers_defaults() {
    let cluster = shared_cluster();
    ok(cluster.create_database("calls"), "create database");
    let mut c = ok(cluster.connect_to("calls"), "connect");

    let a = ok(
        calls::enqueue(&mut c, &Enqueue::new("q").key("a").payload(json!({"n": 1}))),
        "enqueue a",
    );
    assert!(a.inserted);
    assert_eq!(a.key, "a");
    let again = ok(
        calls::enqueue(&mut c, &Enqueue::new("q").key("a")),
        "enqueue a again",
    );
    assert_eq!((again.id, again.inserted), (a.id, false));
    let generated = ok(
        calls::enqueue(&mut c, &Enqueue::new("q")),
        "enqueue, key generated",
    );
    assert_eq!(generated.key.len(), 36, "a UUID: {}", generated.key);
    ok(
        calls::enqueue(
            &mut c,
            &Enqueue::new("q")
                .key("later")
                .run_at(RunAt::In("1 hour".into()))
                .priority(-1),
        ),
        "enqueue for later",
    );
    ok(
        calls::enqueue(
            &mut c,
            &Enqueue::new("q")
                .key("past")
                .run_at(RunAt::At("-infinity".into()))
                .max_attempts(1),
        ),
        "enqueue in the past",
    );

    // The default max_items is 1; claim order is priority, run_at, id.
    let first = ok(
        calls::claim(&mut c, "q", "w", "1 minute", None, None),
        "claim",
    );
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].key, "past");
    let rest = ok(
        calls::claim(&mut c, "q", "w", "1 minute", Some(10), Some("0")),
        "claim 10",
    );
    assert_eq!(rest.len(), 2, "a and the generated key; 'later' is not due");
    let a_claim = rest.iter().find(|r| r.key == "a").expect("a claimed");
    assert_eq!(a_claim.payload, json!({"n": 1}));
    assert_eq!(a_claim.attempt, 1);

    let token = a_claim.token("w");
    assert!(ok(calls::renew(&mut c, &token, "2 minutes"), "renew"));
    assert_eq!(ok(calls::lease_status(&mut c, &token), "status"), "current");
    let stale = Token::new(token.id, "w", token.epoch - 1);
    assert_eq!(
        ok(calls::lease_status(&mut c, &stale), "status"),
        "superseded"
    );
    let err = calls::assert(&mut c, &stale).expect_err("a stale token is refused");
    assert_eq!(err.sqlstate(), Some("55000"));
    assert!(ok(calls::release(&mut c, &token, None), "release"));
    let a_again = ok(
        calls::claim_key(&mut c, "q", "a", "w", "1 minute"),
        "claim_key",
    )
    .expect("a is claimable again");
    assert!(a_again.epoch > token.epoch);
    assert_eq!(a_again.attempt, 1, "the release gave the attempt back");
    let token = a_again.token("w");
    let mut tx = ok(c.transaction(), "begin");
    ok(calls::assert(&mut tx, &token), "assert");
    ok(tx.commit(), "commit");
    assert!(ok(calls::fail(&mut c, &token, "boom", Some("0")), "fail"));
    let token = ok(
        calls::claim_key(&mut c, "q", "a", "w", "1 minute"),
        "claim_key",
    )
    .expect("a is due again")
    .token("w");
    assert!(ok(
        calls::finish(&mut c, &token, Some(&json!({"ok": true}))),
        "finish"
    ));
    assert!(ok(
        calls::finish(&mut c, &token, None),
        "finish again: same token"
    ));

    let generated_claim = rest
        .iter()
        .find(|r| r.key != "a")
        .expect("generated claimed");
    let batch = ok(
        calls::finish_many(
            &mut c,
            "w",
            &[generated_claim.id],
            &[generated_claim.epoch],
            None,
        ),
        "finish_many",
    );
    assert_eq!(batch, vec![(generated_claim.id, true)]);
    assert!(ok(calls::cancel(&mut c, "q", "later"), "cancel"));
    let stats = ok(calls::queue_stats(&mut c), "stats");
    assert_eq!(stats.len(), 1);
    assert_eq!(
        (stats[0].done, stats[0].cancelled, stats[0].claimed),
        (2, 1, 1)
    );
    assert_eq!(ok(calls::purge(&mut c, Some("0"), Some("q")), "purge"), 3);
    assert_eq!(ok(calls::purge(&mut c, None, None), "purge, defaults"), 0);

    // Operating queues (0.6.0).
    let ops = ok(
        calls::enqueue(
            &mut c,
            &Enqueue::new("ops")
                .key("o")
                .max_attempts(1)
                .max_run("1 hour"),
        ),
        "enqueue with max_run",
    );
    assert!(ok(calls::pause(&mut c, "ops"), "pause"));
    assert!(ok(
        calls::claim(&mut c, "ops", "w", "1 minute", None, None),
        "claim"
    )
    .is_empty());
    assert!(ok(calls::resume(&mut c, "ops"), "resume"));
    let token = common::claimed_one(&mut c, "ops", "w", "1 minute").token("w");
    assert!(ok(calls::fail(&mut c, &token, "boom", None), "fail"));
    assert!(ok(calls::retry(&mut c, "ops", "o", None), "retry"));
    assert!(ok(
        calls::reschedule(&mut c, "ops", "o", &RunAt::In("1 hour".into())),
        "reschedule"
    ));
    let item = ok(calls::item(&mut c, "ops", "o"), "item").expect("the item");
    assert_eq!(
        (item.id, item.state.as_str(), item.max_attempts, item.epoch),
        (ops.id, "pending", 2, Some(token.epoch))
    );
    assert_eq!(item.max_run.as_deref(), Some("01:00:00"));
    assert_eq!(item.errors[0]["error"], "boom");
    assert_eq!(item.group_key, None, "an item enqueued without a group");
    assert_eq!(
        ok(calls::item_by_id(&mut c, ops.id), "item by id"),
        Some(item)
    );
    assert_eq!(ok(calls::item(&mut c, "ops", "none"), "no item"), None);
    // work_item shows the serial group an item was enqueued in (from
    // 0.12.0; 0.11.0's had no group_key column).
    let grouped = ok(
        calls::enqueue(
            &mut c,
            &Enqueue::new("ops").key("g1").group_key("customer-7"),
        ),
        "grouped enqueue",
    );
    for shown in [
        ok(calls::item(&mut c, "ops", "g1"), "grouped item"),
        ok(calls::item_by_id(&mut c, grouped.id), "grouped item by id"),
    ] {
        assert_eq!(
            shown.expect("the grouped item").group_key.as_deref(),
            Some("customer-7")
        );
    }
    assert_eq!(
        ok(calls::queue_counters(&mut c, "ops"), "counters"),
        None,
        "nothing is counted without shared_preload_libraries"
    );
    let stats = ok(calls::queue_stats(&mut c), "stats");
    let ops_stats = stats.iter().find(|q| q.queue == "ops").expect("a row");
    assert_eq!(
        (
            ops_stats.scheduled,
            ops_stats.paused,
            ops_stats.refused,
            ops_stats.lapsed
        ),
        (1, false, None, None)
    );

    // Limits (0.10.0) and per_group (0.12.0): each call sets them all.
    let limits_of = |c: &mut postgres::Client| {
        ok(calls::queue_limits(c), "queue limits")
            .into_iter()
            .find(|l| l.queue == "ops")
            .map(|l| (l.concurrency, l.rate, l.per, l.per_group))
    };
    ok(
        calls::work_limit_per_group(&mut c, "ops", Some(5), Some(10), "1 minute", Some(3)),
        "work_limit with per_group",
    );
    assert_eq!(
        limits_of(&mut c),
        Some((Some(5), Some(10), Some("00:01:00".into()), Some(3)))
    );
    ok(
        calls::work_limit(&mut c, "ops", Some(5), None, "1 second"),
        "work_limit",
    );
    assert_eq!(limits_of(&mut c), Some((Some(5), None, None, None)));
    ok(
        calls::work_limit(&mut c, "ops", None, None, "1 second"),
        "work_limit lifting them",
    );

    // Queue grants (0.7.0): recorded, listed, enforced, asked about, revoked.
    ok(
        c.batch_execute(
            "CREATE ROLE calls_worker;
             GRANT USAGE ON SCHEMA workfence TO calls_worker;
             GRANT EXECUTE ON FUNCTION workfence.work_may TO calls_worker;",
        ),
        "a role",
    );
    assert!(ok(
        calls::grant(&mut c, "claim", "ops*", "calls_worker"),
        "grant"
    ));
    assert!(!ok(
        calls::grant(&mut c, "claim", "ops*", "calls_worker"),
        "grant again"
    ));
    assert_eq!(
        ok(calls::queue_grants(&mut c), "grants"),
        vec![calls::QueueGrant {
            role: "calls_worker".into(),
            capability: "claim".into(),
            queues: "ops*".into(),
        }]
    );
    assert!(ok(calls::enforce_grants(&mut c, true), "enforce"));
    assert!(!ok(calls::enforce_grants(&mut c, true), "enforce again"));
    assert!(ok(calls::may(&mut c, "purge", "q"), "a superuser may"));
    ok(c.batch_execute("SET ROLE calls_worker"), "SET ROLE");
    assert!(ok(calls::may(&mut c, "claim", "ops.x"), "may claim ops.x"));
    assert!(!ok(calls::may(&mut c, "claim", "q"), "may claim q"));
    ok(c.batch_execute("RESET ROLE"), "RESET ROLE");
    assert!(ok(
        calls::revoke(&mut c, "claim", "ops*", "calls_worker"),
        "revoke"
    ));
    assert!(ok(calls::enforce_grants(&mut c, false), "stop enforcing"));
}
