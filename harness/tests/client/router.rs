//! The PL/Proxy router (`router/install.sql`, docs/scaling.md; docs/contract.md,
//! promise 9), from real client connections: one router database in front
//! of four shard databases on a throwaway cluster, set up as the guide says
//! (`workfence_harness::router`).
//!
//! What it proves, beyond the tests that run the seed scenario, the races and
//! the bad-input table through a router (seed_scenario.rs, races.rs,
//! bad_input.rs) and the example workers pointed at one (examples.rs):
//! - calls go where the guide says: a queue's calls to the shard of its hash,
//!   a token's to the shard its item id names (ids unique across shards),
//!   `work_finish_many` pair by pair to their shards with the rows in the
//!   arrays' order (multi-dimensional arrays read flat), `work_queue_stats`
//!   and `work_purge` to every shard; the router has every function and
//!   view of the extension, with the same signatures;
//! - doubling the shards moves queues only by draining;
//! - `work_finish_many` across shards is atomic per shard, and safe to retry;
//! - a long poll through the router waits on the shard and wakes on an
//!   enqueue made through the router; notifications are sent on the shard
//!   and heard there, never on the router;
//! - `work_assert` through the router checks the token on its shard (55000
//!   when it is not current) but holds no lock in the caller's transaction;
//! - the fused calls (`work_finish_and_claim`, `work_fail_and_claim`) whose
//!   token and queue are on two shards settle on the token's shard and claim
//!   on the queue's, two commits; killed between them, such a call loses and
//!   holds nothing, and the same call again settles again and claims;
//! - the shards judge the calling role: queue grants made through the router
//!   hold for calls made through it; a call from a `SECURITY DEFINER`
//!   function of another role is refused (42501) as the session's role
//!   would be judged on one server, by every PL/Proxy function of the router;
//! - a queue's serial groups and limits (from 0.10.0) hold through the
//!   router: a grouped enqueue lands on the queue's shard, where the group
//!   stays serial for claimers through the router and on the shard, and
//!   `work_limit` through the router limits the queue on its shard;
//! - workflows (0.12.0) run on one shard: a child enqueued through the
//!   router with parents on its queue's shard waits and is released there
//!   by their finishes through the router; `after`, `work_parent_results`'s
//!   keys and `work_workflow`'s ids and parents are the ids the router
//!   hands out (the shards' own, carrying their number); an `after` id of
//!   another shard is refused (22023) on the router, a moved queue's too
//!   after doubling;
//! - a bulk enqueue (0.12.0) lands every item of the call on its queue's
//!   shard, the rows in the arrays' order;
//! - a soak through the router (worker threads under one owner name, stalls
//!   past the lease, terminated router and shard backends, abandoned
//!   workers): every item done, no token handed out twice, at most one
//!   acknowledged finish per item, by the claimer of its final epoch, and
//!   at most one effect per item.
//!
//! Every test here has "router" in its name: PL/Proxy exists for Debian's
//! PostgreSQL 15 only, and the PostgreSQL 18 tier skips them
//! (scripts/test.sh). Needs the extension and PL/Proxy installed
//! (`scripts/setup.sh`, `scripts/test.sh`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use common::{ok, scalar, server_error};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use workfence_harness::calls::{self, generated, Enqueue, Token};
use workfence_harness::router::Router;
use workfence_harness::Cluster;

/// One queue on each of the four shards (`hashtext(queue) & 3` is 2, 1, 0
/// and 3): checked by [`one_queue_per_shard`].
const QUEUES: [&str; 4] = ["mail", "email", "sms", "payments"];

/// Channel of the test's own end-of-batch marker (see notify.rs).
const MARKER: &str = "workfence_test_marker";

/// How long a listener waits for a marker before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// The roles of the queue-grants test: the guide's.
const GUIDE: &str = include_str!("../../../docs/operations.md");

fn guide(marker: &str) -> &'static str {
    common::doc_sql_block(GUIDE, "docs/operations.md", marker)
}

/// One cluster for the tests of this file; the guide's roles (cluster-wide)
/// are created once.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_with(|cluster| {
        let mut admin = ok(cluster.connect(), "connecting as the superuser");
        ok(
            admin.batch_execute(guide("least-privilege-roles")),
            "the guide's group roles",
        );
        ok(
            admin.batch_execute(guide("queue-grants-roles")),
            "the guide's two-team roles",
        );
    })
}

/// Asserts that [`QUEUES`] put one queue on each shard of `router`.
fn one_queue_per_shard(router: &Router, c: &mut Client) -> Vec<usize> {
    let shards: Vec<usize> = QUEUES
        .iter()
        .map(|q| ok(router.shard_of_queue(c, q), "the shard of a queue"))
        .collect();
    let distinct: BTreeSet<usize> = shards.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        QUEUES.len(),
        "one queue per shard: {shards:?}"
    );
    shards
}

#[test]
fn router_sends_each_call_to_its_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_routing");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);

    // Each shard numbers its items with its own number (the setup's setval).
    for part in 0..router.shards.len() {
        let number: i64 = scalar(
            &mut r,
            "SELECT workfence_router.shard_number($1)",
            &[&(part as i32)],
        );
        assert_eq!(number, part as i64, "shard p{part} stamps its own number");
    }

    // Enqueues go to the queue's shard; ids name it and are unique.
    let on_shard = one_queue_per_shard(&router, &mut r);
    let mut ids = BTreeMap::new();
    for (queue, &shard) in QUEUES.iter().zip(&on_shard) {
        for key in ["k1", "k2", "k3"] {
            let e = common::enqueued(&mut r, &Enqueue::new(*queue).key(key));
            assert!(e.inserted);
            assert_eq!(
                Router::shard_of_id(e.id),
                shard,
                "{queue}/{key}: id {}",
                e.id
            );
            for (n, s) in shards.iter_mut().enumerate() {
                let here: i64 = scalar(
                    s,
                    "SELECT count(*) FROM workfence.items WHERE id = $1 AND queue = $2 AND key = $3",
                    &[&e.id, queue, &key],
                );
                assert_eq!(here, i64::from(n == shard), "{queue}/{key} on shard {n}");
            }
            // The same key again: the shard's dedupe, the same id.
            let again = common::enqueued(&mut r, &Enqueue::new(*queue).key(key));
            assert_eq!((again.id, again.inserted), (e.id, false));
            // Looked up by key (the queue's shard) and by id (the id's).
            let by_key = ok(calls::item(&mut r, queue, key), "work_item(queue, key)");
            assert_eq!(by_key.map(|i| i.id), Some(e.id));
            let by_id = ok(calls::item_by_id(&mut r, e.id), "work_item(id)");
            assert_eq!(
                by_id.map(|i| (i.queue, i.key)),
                Some((queue.to_string(), key.into()))
            );
            ids.insert(e.id, *queue);
        }
    }
    assert_eq!(ids.len(), QUEUES.len() * 3, "ids unique across shards");

    // work_queue_stats: every shard's rows.
    let mut direct = Vec::new();
    for s in shards.iter_mut() {
        direct.extend(ok(calls::queue_stats(s), "a shard's stats"));
    }
    direct.sort_by(|a, b| a.queue.cmp(&b.queue));
    let routed = ok(calls::queue_stats(&mut r), "the router's stats");
    // The ages grow between the two reads: compared as present or not.
    let aged = |stats: Vec<calls::QueueStats>| -> Vec<calls::QueueStats> {
        stats
            .into_iter()
            .map(|mut s| {
                s.oldest_due_age = s.oldest_due_age.map(|_| "some".into());
                s
            })
            .collect()
    };
    let routed = aged(routed);
    assert_eq!(
        routed,
        aged(direct),
        "the router's work_queue_stats is the shards'"
    );
    assert_eq!(routed.len(), QUEUES.len());
    assert!(routed.iter().all(|s| s.pending == 3));

    // work_queue_counters (0.12.0): every shard's rows, through the
    // router's PL/Proxy function of the same shape (none on shards that do
    // not preload the library, as here: the call and its columns are what
    // this checks).
    let mut direct = Vec::new();
    for s in shards.iter_mut() {
        direct.extend(ok(generated::queue_counter_rows(s), "a shard's counters"));
    }
    let mut routed = ok(
        generated::queue_counter_rows(&mut r),
        "the router's counters",
    );
    let by_queue = |a: &generated::QueueCounterRowsRow, b: &generated::QueueCounterRowsRow| {
        a.queue.cmp(&b.queue)
    };
    direct.sort_by(by_queue);
    routed.sort_by(by_queue);
    assert_eq!(
        routed, direct,
        "the router's work_queue_counters is the shards'"
    );
    let viewed: i64 = scalar(
        &mut r,
        "SELECT count(*) FROM workfence.work_queue_counters",
        &[],
    );
    assert_eq!(viewed, routed.len() as i64);

    // Pause goes to the queue's shard only.
    assert!(ok(calls::pause(&mut r, "sms"), "work_pause"));
    let paused: Vec<String> = ok(calls::queue_stats(&mut r), "stats")
        .into_iter()
        .filter(|s| s.paused)
        .map(|s| s.queue)
        .collect();
    assert_eq!(paused, ["sms"]);
    let sms_shard = on_shard[2];
    let paused_on: i64 = scalar(
        &mut shards[sms_shard],
        "SELECT count(*) FROM workfence.queues WHERE queue = 'sms' AND paused",
        &[],
    );
    assert_eq!(paused_on, 1);
    assert!(ok(calls::resume(&mut r, "sms"), "work_resume"));

    // Claim everything, then finish it in ONE work_finish_many whose pairs
    // are on four shards, interleaved, with one stale epoch among them: the
    // rows come back in the arrays' order, each judged on its own shard.
    let mut tokens = Vec::new();
    for queue in QUEUES {
        tokens.extend(
            ok(
                calls::claim(&mut r, queue, "w", "1 minute", Some(10), None),
                "claim",
            )
            .into_iter()
            .map(|c| (c.id, c.epoch)),
        );
    }
    assert_eq!(tokens.len(), ids.len());
    // Interleave the shards: sort by (position within its queue, queue).
    tokens.sort_by_key(|&(id, _)| (id & 0xFFFF, id >> 48));
    let stale = tokens[5].0;
    let ids_sent: Vec<i64> = tokens.iter().map(|t| t.0).collect();
    let epochs_sent: Vec<i64> = tokens
        .iter()
        .map(|&(id, epoch)| if id == stale { epoch + 1000 } else { epoch })
        .collect();
    let finished = ok(
        calls::finish_many(&mut r, "w", &ids_sent, &epochs_sent, None),
        "work_finish_many",
    );
    let expected: Vec<(i64, bool)> = ids_sent.iter().map(|&id| (id, id != stale)).collect();
    assert_eq!(
        finished, expected,
        "rows in the arrays' order, the stale one refused"
    );

    // Multi-dimensional arrays are read flat, as the extension reads them.
    let pair: Vec<i64> = ["mail", "sms"]
        .iter()
        .map(|q| common::enqueue_new(&mut r, &Enqueue::new(*q).key("flat")))
        .collect();
    let flat: Vec<(i64, i64)> = ["mail", "sms"]
        .iter()
        .map(|q| {
            let c = ok(
                calls::claim_key(&mut r, q, "flat", "w", "1 minute"),
                "claim",
            )
            .expect("the claim");
            (c.id, c.epoch)
        })
        .collect();
    assert_ne!(Router::shard_of_id(pair[0]), Router::shard_of_id(pair[1]));
    let finished: i64 = scalar(
        &mut r,
        "SELECT count(*) FILTER (WHERE f.finished)
           FROM workfence.work_finish_many('w', ARRAY[[$1::bigint, $2::bigint]],
                                           ARRAY[[$3::bigint, $4::bigint]]) AS f",
        &[&flat[0].0, &flat[1].0, &flat[0].1, &flat[1].1],
    );
    assert_eq!(finished, 2, "a 1x2 array of tokens on two shards");

    // work_purge without a queue: every shard's finished items.
    let purged: i64 = scalar(&mut r, "SELECT workfence.work_purge('0')", &[]);
    assert_eq!(purged, ids.len() as i64 - 1 + 2);
    let left: Vec<i64> = shards
        .iter_mut()
        .map(|s| scalar(s, "SELECT count(*) FROM workfence.items", &[]))
        .collect();
    assert_eq!(
        left.iter().sum::<i64>(),
        1,
        "only the stale one's item is left: {left:?}"
    );
    assert_eq!(left[Router::shard_of_id(stale)], 1);
}

/// The router offers what the extension offers: every function of schema
/// `workfence` with the same name, arguments (with their defaults) and
/// result, and the same views with the same columns, each with a comment.
/// A function added to the extension and not to `router/install.sql` fails
/// here.
#[test]
fn router_offers_every_function_and_view_of_the_extension() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_signatures");
    let functions =
        "SELECT p.proname || '(' || pg_catalog.pg_get_function_arguments(p.oid) || ') -> '
                            || pg_catalog.pg_get_function_result(p.oid),
                            pg_catalog.obj_description(p.oid, 'pg_proc') IS NOT NULL
                       FROM pg_catalog.pg_proc AS p
                      WHERE p.pronamespace = 'workfence'::regnamespace
                        AND p.prorettype <> 'trigger'::regtype
                      ORDER BY 1";
    // The views' columns; `items` is the harness's test view on the router.
    let views = "SELECT c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod),
                        pg_catalog.obj_description(c.oid, 'pg_class') IS NOT NULL
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0
                  WHERE c.relnamespace = 'workfence'::regnamespace AND c.relkind = 'v'
                    AND c.relname <> 'items'
                  ORDER BY c.relname, a.attnum";
    let mut shard = ok(cluster.connect_to(&router.shards[0]), "a shard");
    let mut r = ok(cluster.connect_to(&router.database), "the router");
    for (what, sql) in [("functions", functions), ("view columns", views)] {
        let on_shard: Vec<(String, bool)> = common::pairs(&mut shard, sql);
        let on_router: Vec<(String, bool)> = common::pairs(&mut r, sql);
        let names = |rows: &[(String, bool)]| rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
        assert_eq!(names(&on_router), names(&on_shard), "the router's {what}");
        let undocumented: Vec<&String> = on_router.iter().filter(|r| !r.1).map(|r| &r.0).collect();
        assert!(
            undocumented.is_empty(),
            "router {what} without a comment: {undocumented:?}"
        );
        assert!(on_shard.len() > 10, "{what}: {on_shard:?}");
    }
}

/// Adding shards, as docs/scaling.md says: from two shards to four, the
/// queues whose hash has bit 2 set move to a new shard. In-flight tokens
/// keep working through the router (they route by id); the router sends the
/// moved queue's new items and claims to its new shard; what it left on the
/// old one is drained by a worker connected to that shard; a key still
/// pending there is not deduplicated against the new shard (hence: drain
/// first, or expect it).
#[test]
fn router_doubling_moves_queues_only_by_draining() {
    let cluster = cluster();
    let mut router = ok(
        Router::create(&cluster, "router_doubling", 2),
        "a router of two shards",
    );
    ok(router.create_items_view(&cluster), "the test view");
    let mut r = ok(cluster.connect_to(&router.database), "the router");
    // "mail" is on shard 0 of two and moves to shard 2 of four; "sms" stays
    // on shard 0.
    let hash = |r: &mut Client, q: &str| -> i32 {
        scalar(r, "SELECT workfence_router.queue_shard($1)", &[&q])
    };
    let (mail, sms) = (hash(&mut r, "mail"), hash(&mut r, "sms"));
    assert_eq!((mail & 1, mail & 3, sms & 1, sms & 3), (0, 2, 0, 0));
    for queue in ["mail", "sms"] {
        for key in ["k1", "k2", "k3"] {
            common::enqueue_new(&mut r, &Enqueue::new(queue).key(key));
        }
    }
    let held = ok(
        calls::claim_key(&mut r, "mail", "k1", "w", "1 minute"),
        "claim",
    )
    .expect("the claim")
    .token("w");

    ok(router.double(&cluster), "doubling the shards");
    assert_eq!(router.shards.len(), 4);
    let number: i64 = scalar(&mut r, "SELECT workfence_router.shard_number(3)", &[]);
    assert_eq!(number, 3, "the router sees the new shards");

    // The token from before routes by its id, to the old shard.
    assert!(ok(
        calls::finish(&mut r, &held, None),
        "the held token's finish"
    ));
    // "sms" did not move: claimed through the router as before.
    let sms_claims = ok(
        calls::claim(&mut r, "sms", "w", "1 minute", Some(10), None),
        "sms",
    );
    assert_eq!(sms_claims.len(), 3);
    // "mail" did: the router claims on shard 2, where nothing is yet ...
    let none = ok(
        calls::claim(&mut r, "mail", "w", "1 minute", Some(10), None),
        "mail",
    );
    assert!(
        none.is_empty(),
        "the router looks on the new shard: {none:?}"
    );
    // ... and enqueues there; a key still pending on the old shard is a new
    // item on the new one.
    let moved = common::enqueued(&mut r, &Enqueue::new("mail").key("k2"));
    assert!(moved.inserted, "dedupe is per shard");
    assert_eq!(Router::shard_of_id(moved.id), 2);
    // The drain: a worker on the old shard takes what is left there.
    let mut old = ok(cluster.connect_to(&router.shards[0]), "the old shard");
    let drained = ok(
        calls::claim(&mut old, "mail", "w", "1 minute", Some(10), None),
        "drain",
    );
    assert_eq!(
        drained.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(),
        ["k2", "k3"]
    );
    for c in &drained {
        assert!(ok(
            calls::finish(&mut old, &c.token("w"), None),
            "drain finish"
        ));
    }
    let left: i64 = scalar(
        &mut old,
        "SELECT count(*) FROM workfence.items WHERE queue = 'mail' AND state <> 'done'",
        &[],
    );
    assert_eq!(left, 0, "drained");
    // From now on "mail" lives on shard 2 only.
    let claims = ok(
        calls::claim(&mut r, "mail", "w", "1 minute", Some(10), None),
        "mail",
    );
    assert_eq!(claims.iter().map(|c| c.id).collect::<Vec<_>>(), [moved.id]);
}

/// `work_finish_many` with items on two shards is atomic on each shard, not
/// across them (docs/scaling.md): with one item held up by a row lock on
/// its shard, the call fails (its `statement_timeout`) after the other
/// shard's part committed; called again with the same tokens once the lock
/// is gone, it reports both finished.
#[test]
fn work_finish_many_through_the_router_is_atomic_per_shard_and_safe_to_retry() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_finish_many");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let tokens: Vec<Token> = ["mail", "sms"]
        .iter()
        .map(|q| {
            common::enqueue_new(&mut r, &Enqueue::new(*q).key("k"));
            ok(calls::claim_key(&mut r, q, "k", "w", "1 minute"), "claim")
                .expect("the claim")
                .token("w")
        })
        .collect();
    let held = &tokens[1];
    let mut shard = ok(
        cluster.connect_to(&router.shards[Router::shard_of_id(held.id)]),
        "the second item's shard",
    );
    let mut tx = ok(shard.transaction(), "BEGIN (holder)");
    ok(
        tx.execute(
            "SELECT 1 FROM workfence.items WHERE id = $1 FOR UPDATE",
            &[&held.id],
        ),
        "holding the second item's row",
    );
    ok(
        r.batch_execute("SET statement_timeout = '500ms'"),
        "statement_timeout",
    );
    let ids: Vec<i64> = tokens.iter().map(|t| t.id).collect();
    let epochs: Vec<i64> = tokens.iter().map(|t| t.epoch).collect();
    server_error(
        calls::finish_many(&mut r, "w", &ids, &epochs, None),
        "57014",
        "work_finish_many held up on one shard",
    );
    let first = ok(calls::item_by_id(&mut r, ids[0]), "the first item").expect("the item");
    assert_eq!(first.state, "done", "the other shard's part committed");
    ok(tx.rollback(), "ROLLBACK (holder)");
    ok(
        r.batch_execute("RESET statement_timeout"),
        "statement_timeout",
    );
    let again = ok(
        calls::finish_many(&mut r, "w", &ids, &epochs, None),
        "work_finish_many again",
    );
    assert_eq!(again, vec![(ids[0], true), (ids[1], true)]);
}

/// The fused cycle through the router, the previous item on its queue's
/// shard, runs there: the finish and the next claim in one transaction; a
/// stale token is refused there as it is directly.
#[test]
fn router_runs_the_fused_cycle_on_the_previous_items_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_cycle");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let on_shard = one_queue_per_shard(&router, &mut r);
    let (queue, shard) = (QUEUES[1], on_shard[1]);
    for key in ["a", "b", "c"] {
        common::enqueue_new(&mut r, &Enqueue::new(queue).key(key));
    }
    let a = common::claimed_one(&mut r, queue, "w", "1 minute");
    let cycle = ok(
        calls::finish_and_claim(&mut r, queue, &a.token("w"), "1 minute", None, None),
        "work_finish_and_claim through the router",
    );
    assert!(cycle.settled);
    let b = cycle.claimed.first().expect("b is claimed").clone();
    assert!(b.epoch > a.epoch);
    assert_eq!(
        Router::shard_of_id(b.id),
        shard,
        "the next item comes from the queue's shard"
    );
    let done = ok(calls::item(&mut r, queue, &a.key), "work_item a").expect("a");
    assert_eq!(done.state, "done");

    // The stale token: refused, and the claim still runs on the shard.
    let stale = ok(
        calls::fail_and_claim(&mut r, queue, &a.token("w"), "1 minute", "late", None, None),
        "work_fail_and_claim of a finished item's token",
    );
    assert!(!stale.settled);
    assert_eq!(stale.claimed.len(), 1, "c is claimed");
    let bad = common::server_error(
        calls::finish_and_claim(&mut r, queue, &b.token("w"), "0", None, None),
        "22023",
        "a zero lease through the router",
    );
    assert!(bad.message().contains("lease"), "{}", bad.message());
    let b_now = ok(calls::item(&mut r, queue, &b.key), "work_item b").expect("b");
    assert_eq!(b_now.state, "claimed", "the shard rolled back both halves");
}

/// The keys of `claims`, sorted.
fn keys(claims: &[calls::Claim]) -> Vec<String> {
    let mut keys: Vec<String> = claims.iter().map(|c| c.key.clone()).collect();
    keys.sort();
    keys
}

/// The state of item `id`, read on its shard through `shard`.
fn item_state(shard: &mut Client, id: i64) -> String {
    scalar(
        shard,
        "SELECT state::text FROM workfence.items WHERE id = $1",
        &[&id],
    )
}

/// How many failures item `id` has recorded (its `errors`), read on its
/// shard through `shard`.
fn failures(shard: &mut Client, id: i64) -> i32 {
    scalar(
        shard,
        "SELECT pg_catalog.jsonb_array_length(errors) FROM workfence.items WHERE id = $1",
        &[&id],
    )
}

/// The (id, settled) of every row of a fused call through the router, as
/// SQL: to see the one row of NULL item columns of a call that claimed
/// nothing.
fn fused_rows(r: &mut Client, sql: &str, token: &Token, queue: &str) -> Vec<(Option<i64>, bool)> {
    ok(r.query(sql, &[&queue, &token.id, &token.epoch]), sql)
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// The fused calls through the router when the previous item and the queue
/// are on different shards (issue 30): the settle runs on the item's shard,
/// then the claim on the queue's (two commits, docs/scaling.md), so the
/// queue's due items are claimed, up to `max_items`: never nothing while
/// some are due. The extension's checks come first: a bad argument is
/// refused and changes nothing on any shard. The same `work_finish_and_claim`
/// again settles again (true); the same `work_fail_and_claim` again records
/// the failure once and says false, as `work_fail` does; with nothing due,
/// one row of NULL item columns carries `settled`, as on one server.
#[test]
fn router_fused_calls_settle_on_the_tokens_shard_and_claim_on_the_queues() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_fused_across");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);
    let (from, to) = (QUEUES[0], QUEUES[1]);
    let (from_shard, to_shard) = (on_shard[0], on_shard[1]);
    for key in ["f1", "f2"] {
        common::enqueue_new(&mut r, &Enqueue::new(from).key(key));
    }
    for key in ["t1", "t2", "t3"] {
        common::enqueue_new(&mut r, &Enqueue::new(to).key(key));
    }
    let f1 = common::claimed_one(&mut r, from, "w", "1 minute").token("w");
    assert_eq!(Router::shard_of_id(f1.id), from_shard);

    // Checked before anything changes, on either shard.
    let before = common::shards_snapshot(&mut shards);
    server_error(
        calls::finish_and_claim(&mut r, to, &f1, "0", None, Some(2)),
        "22023",
        "a zero lease, the token and the queue on two shards",
    );
    server_error(
        calls::fail_and_claim(&mut r, to, &f1, "1 minute", "boom", Some("-1 s"), Some(2)),
        "22023",
        "a negative retry_in, the token and the queue on two shards",
    );
    assert_eq!(
        common::shards_snapshot(&mut shards),
        before,
        "a refused fused call changed a shard"
    );

    // work_finish_and_claim: f1 finished on its shard, two of the queue's
    // three claimed on theirs.
    let cycle = ok(
        calls::finish_and_claim(&mut r, to, &f1, "1 minute", None, Some(2)),
        "work_finish_and_claim, the token and the queue on two shards",
    );
    assert!(cycle.settled);
    assert_eq!(keys(&cycle.claimed), ["t1", "t2"], "{cycle:?}");
    assert!(cycle
        .claimed
        .iter()
        .all(|c| Router::shard_of_id(c.id) == to_shard));
    assert_eq!(item_state(&mut shards[from_shard], f1.id), "done");
    // The same call again: settled again, and the third claimed.
    let again = ok(
        calls::finish_and_claim(&mut r, to, &f1, "1 minute", None, Some(2)),
        "the same work_finish_and_claim again",
    );
    assert!(again.settled, "work_finish of a finished token is true");
    assert_eq!(keys(&again.claimed), ["t3"]);

    // work_fail_and_claim the other way: t1's failure on its shard, f2
    // claimed on its own.
    let t1 = cycle
        .claimed
        .iter()
        .find(|c| c.key == "t1")
        .expect("t1")
        .token("w");
    let failed = ok(
        calls::fail_and_claim(
            &mut r,
            from,
            &t1,
            "1 minute",
            "boom",
            Some("1 hour"),
            Some(2),
        ),
        "work_fail_and_claim, the token and the queue on two shards",
    );
    assert!(failed.settled);
    assert_eq!(keys(&failed.claimed), ["f2"]);
    assert_eq!(item_state(&mut shards[to_shard], t1.id), "pending");
    assert_eq!(failures(&mut shards[to_shard], t1.id), 1);
    // The same call again: nothing recorded twice, settled false (the
    // token was handed back), and nothing due in `from`: one row.
    let fail_sql = "SELECT c.id, c.settled
                      FROM workfence.work_fail_and_claim($1, 'w', '1 minute', $2, $3, 'boom',
                                                         '1 hour', 2) AS c";
    assert_eq!(fused_rows(&mut r, fail_sql, &t1, from), [(None, false)]);
    assert_eq!(failures(&mut shards[to_shard], t1.id), 1);
    // work_finish_and_claim with nothing due in the queue on the other
    // shard: one row of NULL item columns, settled.
    let t2 = cycle
        .claimed
        .iter()
        .find(|c| c.key == "t2")
        .expect("t2")
        .token("w");
    let finish_sql = "SELECT c.id, c.settled
                        FROM workfence.work_finish_and_claim($1, 'w', '1 minute', $2, $3,
                                                             max_items => 2) AS c";
    assert_eq!(fused_rows(&mut r, finish_sql, &t2, from), [(None, true)]);
    assert_eq!(item_state(&mut shards[to_shard], t2.id), "done");
}

/// A fused call through the router whose previous item and queue are on
/// two shards commits twice, the settle first (docs/scaling.md). Killed
/// between the two commits it loses nothing and holds nothing. Ordered
/// explicitly: a superuser holds the queue's shard's items table (ACCESS
/// EXCLUSIVE), so the second half waits there once the first has committed;
/// the call's router backend is terminated; its session on the queue's
/// shard, which checks its client (`client_connection_check_interval`, as
/// docs/scaling.md advises), ends with it, before it has done anything; the
/// table is let go. The previous item is settled, the queue's item pending
/// and claimed by nobody, and the same call again settles again
/// (`work_finish_and_claim`: true; `work_fail_and_claim`: false, the
/// failure recorded once) and claims it.
#[test]
fn router_fused_call_killed_between_its_two_commits_loses_and_holds_nothing() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_fused_kill");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);
    let (from, to) = (QUEUES[2], QUEUES[3]);
    let (from_shard, to_shard) = (on_shard[2], on_shard[3]);
    let mut admin = ok(cluster.connect(), "connecting as the superuser");
    ok(
        admin.batch_execute(&format!(
            "ALTER DATABASE {} SET client_connection_check_interval = '10ms'",
            router.shards[to_shard]
        )),
        "the queue's shard checks its clients",
    );
    for fail in [false, true] {
        let key = if fail { "failed" } else { "finished" };
        let last = common::enqueued_and_claimed(&mut r, from, key, "w", "1 minute");
        let next = common::enqueue_new(&mut r, &Enqueue::new(to).key(key));
        let fused = |c: &mut Client| {
            if fail {
                calls::fail_and_claim(c, to, &last, "1 minute", "boom", Some("1 hour"), Some(2))
            } else {
                calls::finish_and_claim(c, to, &last, "1 minute", None, Some(2))
            }
        };
        let mut holder = ok(
            cluster.connect_to(&router.shards[to_shard]),
            "the queue's shard, as superuser",
        );
        let holder_pid = common::backend_pid(&mut holder);
        let mut hold = ok(holder.transaction(), "BEGIN (holder)");
        ok(
            hold.batch_execute("LOCK TABLE workfence.items IN ACCESS EXCLUSIVE MODE"),
            "holding the queue's shard's items table",
        );
        let mut worker = ok(cluster.connect_to(&router.database), "the worker");
        let worker_pid = common::backend_pid(&mut worker);
        let mut observer = ok(
            cluster.connect_to(&router.shards[to_shard]),
            "an observer of the queue's shard",
        );
        let killed = thread::scope(|s| {
            let call = s.spawn(|| fused(&mut worker));
            // The second half waits for the table: the first has committed.
            let waiting = "SELECT a.pid FROM pg_catalog.pg_stat_activity AS a
                            WHERE a.datname = pg_catalog.current_database()
                              AND a.backend_type = 'client backend'
                              AND $1 = ANY (pg_catalog.pg_blocking_pids(a.pid))";
            common::poll_until(
                &mut observer,
                &format!("SELECT EXISTS ({waiting})"),
                &[&holder_pid],
                "the fused call's second half waiting on the queue's shard",
            );
            let waiter: i32 = scalar(&mut observer, waiting, &[&holder_pid]);
            assert_eq!(
                item_state(&mut shards[from_shard], last.id),
                if fail { "pending" } else { "done" },
                "the first commit, on the token's shard"
            );
            // Killed between the two commits.
            let terminated: bool = scalar(
                &mut admin,
                "SELECT pg_catalog.pg_terminate_backend($1)",
                &[&worker_pid],
            );
            assert!(terminated, "the router backend {worker_pid}");
            common::poll_until(
                &mut observer,
                "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1)",
                &[&waiter],
                "the shard session ending with its router backend",
            );
            ok(hold.rollback(), "ROLLBACK (holder)");
            call.join().expect("the worker panicked")
        });
        assert!(killed.is_err(), "the killed call: {killed:?}");
        // Nothing lost, nothing held.
        assert_eq!(item_state(&mut shards[to_shard], next), "pending");
        let claimed: i64 = scalar(
            &mut shards[to_shard],
            "SELECT count(*) FROM workfence.items WHERE state = 'claimed'",
            &[],
        );
        assert_eq!(claimed, 0, "an item claimed by the killed call");
        if fail {
            assert_eq!(failures(&mut shards[from_shard], last.id), 1);
        }
        // The same call again.
        let mut again = ok(cluster.connect_to(&router.database), "a new connection");
        let cycle = ok(fused(&mut again), "the same fused call again");
        assert_eq!(cycle.settled, !fail, "{cycle:?}");
        assert_eq!(
            cycle.claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
            [next]
        );
        if fail {
            assert_eq!(
                failures(&mut shards[from_shard], last.id),
                1,
                "failed twice"
            );
        } else {
            assert_eq!(item_state(&mut shards[from_shard], last.id), "done");
        }
        assert!(ok(
            calls::finish(&mut again, &cycle.claimed[0].token("w"), None),
            "finishing the claimed item"
        ));
    }
}

/// PL/Proxy calls the shards as the router's current role. Inside a
/// `SECURITY DEFINER` function that is the function's owner, whose queue
/// grants the caller would borrow, while on one server the extension judges
/// the session's role there (src/access/grants.rs). The router refuses such a call
/// with 42501 (issue 30), message, detail and hint: a billing role calling
/// a search role's definer functions (a claim of search's queue, its
/// listing, the stats, and a helper of schema `workfence_router` called
/// directly) is refused through the router; the same functions on the
/// queue's shard are refused (42501) or judged as the billing role (the
/// stats leave search's queue out). `SET ROLE` stays allowed and is judged
/// as the role it sets; a definer function of the session's own role runs.
#[test]
fn router_refuses_a_call_from_a_security_definer_function_of_another_role() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_definer");
    let mut admin = ok(cluster.connect(), "connecting as the superuser");
    ok(
        admin.batch_execute(
            "CREATE ROLE router_billing LOGIN IN ROLE workfence_worker, workfence_monitor;
             CREATE ROLE router_search LOGIN IN ROLE workfence_worker, workfence_monitor;",
        ),
        "a billing role and a search role",
    );
    for database in std::iter::once(&router.database).chain(&router.shards) {
        let mut c = ok(cluster.connect_to(database), "connecting as the superuser");
        ok(
            c.batch_execute(guide("least-privilege-grants")),
            "the guide's function grants",
        );
    }
    let mut r = ok(
        cluster.connect_to(&router.database),
        "the router, as superuser",
    );
    for (capability, queues, role) in [
        ("claim", "billing.*", "router_billing"),
        ("read", "billing.*", "router_billing"),
        ("claim", "search.*", "router_search"),
        ("read", "search.*", "router_search"),
    ] {
        ok(
            calls::grant(&mut r, capability, queues, role),
            "work_grant through the router",
        );
    }
    ok(
        calls::enforce_grants(&mut r, true),
        "work_enforce_grants through the router",
    );
    let queue = "search.index";
    let search_item = common::enqueue_new(&mut r, &Enqueue::new(queue).key("s1"));
    common::enqueue_new(&mut r, &Enqueue::new("billing.invoices").key("b1"));
    let shard = ok(router.shard_of_queue(&mut r, queue), "the queue's shard");

    // The search team's definer functions, the same on the router and on
    // the queue's shard; on the router also one calling a helper of schema
    // workfence_router (EXECUTE-able by PUBLIC) directly.
    let definer_sql = "
        CREATE SCHEMA search_api;
        GRANT USAGE ON SCHEMA search_api TO PUBLIC;
        CREATE FUNCTION search_api.claim() RETURNS SETOF bigint LANGUAGE sql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp
            AS $$ SELECT c.id FROM workfence.work_claim('search.index', 'w', '1 minute') AS c $$;
        CREATE FUNCTION search_api.items() RETURNS SETOF bigint LANGUAGE sql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp
            AS $$ SELECT i.id FROM workfence.work_items('search.index') AS i $$;
        CREATE FUNCTION search_api.stats() RETURNS SETOF text LANGUAGE sql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp
            AS $$ SELECT s.queue FROM workfence.work_queue_stats AS s $$;
        ALTER FUNCTION search_api.claim() OWNER TO router_search;
        ALTER FUNCTION search_api.items() OWNER TO router_search;
        ALTER FUNCTION search_api.stats() OWNER TO router_search;";
    let helper_sql = "
        CREATE FUNCTION search_api.claim_by_helper() RETURNS SETOF bigint LANGUAGE plpgsql
            SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            RETURN QUERY SELECT c.id
                           FROM workfence_router.claim_on_queue_shard('search.index', 'w',
                                                                      '1 minute', 1) AS c;
        END $$;
        ALTER FUNCTION search_api.claim_by_helper() OWNER TO router_search;";
    ok(
        r.batch_execute(&format!("{definer_sql}{helper_sql}")),
        "the definer functions on the router",
    );
    let mut on_shard = ok(
        cluster.connect_to(&router.shards[shard]),
        "the queue's shard",
    );
    ok(
        on_shard.batch_execute(definer_sql),
        "the definer functions on the queue's shard",
    );

    // Through the router: refused, whatever the function reaches.
    let mut billing = common::connect_as(&cluster, &router.database, "router_billing", "billing");
    for function in [
        "search_api.claim",
        "search_api.items",
        "search_api.stats",
        "search_api.claim_by_helper",
    ] {
        let what = format!("router_billing calling {function}() through the router");
        let db = server_error(
            billing.query(&format!("SELECT * FROM {function}()"), &[]),
            "42501",
            &what,
        );
        assert!(
            db.message().contains("through the pg_workfence router")
                && db.message().contains("\"router_search\"")
                && db.message().contains("\"router_billing\""),
            "{what}: {}",
            db.message()
        );
        assert!(
            db.detail().is_some_and(|d| d.contains("SECURITY DEFINER"))
                && db.hint().is_some_and(|h| h.contains("SET ROLE")),
            "{what}: {db:?}"
        );
    }
    // On the shard: the extension judges the session's role, router_billing.
    let mut billing_on_shard =
        common::connect_as(&cluster, &router.shards[shard], "router_billing", "billing");
    for function in ["search_api.claim", "search_api.items"] {
        let db = server_error(
            billing_on_shard.query(&format!("SELECT * FROM {function}()"), &[]),
            "42501",
            &format!("router_billing calling {function}() on the shard"),
        );
        assert!(db.message().contains(queue), "{}", db.message());
    }
    let seen: Vec<String> = ok(
        billing_on_shard.query("SELECT * FROM search_api.stats()", &[]),
        "router_billing's stats through search_api.stats() on the shard",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert!(!seen.iter().any(|q| q == queue), "{seen:?}");
    // The same function called by its owner's role lists the queue: an
    // empty answer above is the grants at work, not a function that lists
    // nothing.
    let mut search_on_shard =
        common::connect_as(&cluster, &router.shards[shard], "router_search", "search");
    let owners: Vec<String> = ok(
        search_on_shard.query("SELECT * FROM search_api.stats()", &[]),
        "router_search's stats through search_api.stats() on the shard",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert!(owners.iter().any(|q| q == queue), "{owners:?}");
    assert_eq!(
        item_state(&mut on_shard, search_item),
        "pending",
        "nothing claimed"
    );

    // SET ROLE is allowed, and judged as the role it sets.
    let mut set_role = ok(cluster.connect_to(&router.database), "the superuser");
    ok(
        set_role.batch_execute("SET ROLE router_billing"),
        "SET ROLE router_billing",
    );
    server_error(
        calls::claim(&mut set_role, queue, "w", "1 minute", None, None),
        "42501",
        "router_billing (SET ROLE) claiming search's queue through the router",
    );
    let billed = ok(
        calls::claim(
            &mut set_role,
            "billing.invoices",
            "w",
            "1 minute",
            None,
            None,
        ),
        "router_billing (SET ROLE) claiming billing's queue through the router",
    );
    assert_eq!(billed.len(), 1);
    // A definer function of the session's own role runs.
    let mut search = common::connect_as(&cluster, &router.database, "router_search", "search");
    let claimed: Vec<i64> = ok(
        search.query("SELECT * FROM search_api.claim()", &[]),
        "router_search calling its own definer function through the router",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(claimed, [search_item]);
}

/// Every PL/Proxy function of the router, read from its catalog (so that a
/// function added later without it fails here), names its cluster with
/// `workfence_router.cluster('<schema>.<name>')`, the check of issue 30,
/// and no other: and called from a `SECURITY DEFINER` function of another
/// role (with NULL arguments), each refuses with 42501 before it reaches a
/// shard.
#[test]
fn router_every_plproxy_function_refuses_a_call_as_another_role() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_every_check");
    let mut r = ok(cluster.connect_to(&router.database), "the router");
    let functions: Vec<(String, String, String)> = ok(
        r.query(
            "SELECT p.oid::pg_catalog.regprocedure::text, n.nspname || '.' || p.proname, p.prosrc
               FROM pg_catalog.pg_proc AS p
               JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
               JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
              WHERE l.lanname = 'plproxy'
              ORDER BY 1",
            &[],
        ),
        "the router's PL/Proxy functions",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    assert!(functions.len() >= 30, "{functions:?}");
    for (signature, name, source) in &functions {
        let words = source.split_whitespace().collect::<Vec<_>>().join(" ");
        // The statements, by their first word: PL/Proxy's keywords are
        // case-insensitive.
        let statements: Vec<(String, &str)> = words
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| (s.split(' ').next().unwrap_or("").to_uppercase(), s))
            .collect();
        let clusters: Vec<&str> = statements
            .iter()
            .filter(|(first, _)| first == "CLUSTER")
            .map(|(_, s)| *s)
            .collect();
        let expected = format!("CLUSTER workfence_router.cluster('{name}')");
        assert_eq!(clusters, [expected.as_str()], "{signature}: {words}");
        assert!(
            statements.iter().all(|(first, _)| first != "CONNECT"),
            "{signature}: {words}"
        );
    }

    // Each called, with NULL arguments, from a definer function of a role
    // that may execute every function of the router.
    ok(
        r.batch_execute(
            "CREATE ROLE router_check_owner NOLOGIN;
             GRANT USAGE ON SCHEMA workfence, workfence_router TO router_check_owner;
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence, workfence_router
                TO router_check_owner;
             CREATE FUNCTION public.call_as_owner(f pg_catalog.regprocedure) RETURNS text
             LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
             DECLARE
                 call text;
             BEGIN
                 SELECT format('SELECT count(*) FROM %I.%I(%s) AS x', n.nspname, p.proname,
                               coalesce((SELECT string_agg('NULL::' || format_type(a.t, NULL), ', '
                                                           ORDER BY a.o)
                                           FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY
                                                AS a(t, o)), ''))
                   INTO call
                   FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
                  WHERE p.oid = f;
                 EXECUTE call;
                 RETURN 'no error';
             EXCEPTION WHEN OTHERS THEN
                 RETURN SQLSTATE || ' ' || SQLERRM;
             END $$;
             ALTER FUNCTION public.call_as_owner(pg_catalog.regprocedure) OWNER TO router_check_owner;",
        ),
        "a definer function of another role",
    );
    for (signature, name, _) in &functions {
        let outcome: String = scalar(
            &mut r,
            "SELECT public.call_as_owner($1::text::pg_catalog.regprocedure)",
            &[signature],
        );
        let expected =
            format!("42501 permission denied for {name} through the pg_workfence router");
        assert!(outcome.starts_with(&expected), "{signature}: {outcome}");
    }
}

/// Serial groups through the router (from 0.10.0): a grouped enqueue lands
/// on its queue's shard, with its group, and the group is serial there,
/// which is where every claim of the queue runs: a batch claim through the
/// router takes one item per group, and nobody, through the router or
/// connected to the shard, takes a group's next item while one is claimed;
/// a released item keeps its place, as on one server. The router
/// session's isolation level does not reach the shard (docs/scaling.md): a
/// claim made through the router inside REPEATABLE READ runs in the shard's
/// own transaction, where the shard itself refuses one (25000).
#[test]
fn router_keeps_a_group_serial_on_its_queues_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_groups");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);
    let (queue, shard) = (QUEUES[2], on_shard[2]);
    for (key, group) in [
        ("a1", Some("g1")),
        ("a2", Some("g1")),
        ("a3", Some("g1")),
        ("b1", Some("g2")),
        ("u1", None),
    ] {
        let mut item = Enqueue::new(queue).key(key);
        if let Some(group) = group {
            item = item.group_key(group);
        }
        let id = common::enqueue_new(&mut r, &item);
        assert_eq!(Router::shard_of_id(id), shard, "{key}: id {id}");
        for (n, s) in shards.iter_mut().enumerate() {
            let here: i64 = scalar(
                s,
                "SELECT count(*) FROM workfence.items
                  WHERE id = $1 AND key = $2 AND group_key IS NOT DISTINCT FROM $3",
                &[&id, &key, &group],
            );
            assert_eq!(
                here,
                i64::from(n == shard),
                "{key} in group {group:?} on shard {n}"
            );
        }
    }

    // One item per group, and the item in no group.
    let first = ok(
        calls::claim(&mut r, queue, "w1", "1 minute", Some(10), None),
        "a batch claim through the router",
    );
    assert_eq!(keys(&first), ["a1", "b1", "u1"]);
    // a1 is claimed: g1 waits, for every claimer.
    let none = ok(
        calls::claim(&mut r, queue, "w2", "1 minute", Some(10), None),
        "a second claim through the router",
    );
    assert!(none.is_empty(), "a group's second item: {none:?}");
    let none = ok(
        calls::claim(&mut shards[shard], queue, "w2", "1 minute", Some(10), None),
        "a claim on the queue's shard",
    );
    assert!(
        none.is_empty(),
        "a group's second item on the shard: {none:?}"
    );
    let by_key = ok(
        calls::claim_key(&mut r, queue, "a2", "w2", "1 minute"),
        "work_claim_key of a2 through the router",
    );
    assert!(by_key.is_none(), "a2 claimed by key: {by_key:?}");

    // Finished through the router, a1 frees its group: a2 is next.
    let a1 = first
        .iter()
        .find(|c| c.key == "a1")
        .expect("a1")
        .token("w1");
    assert!(ok(calls::finish(&mut r, &a1, None), "finishing a1"));
    let next = ok(
        calls::claim(&mut r, queue, "w2", "1 minute", Some(10), None),
        "the claim after a1's finish",
    );
    assert_eq!(keys(&next), ["a2"]);
    // Released without a delay, a2 keeps its run_at and so its place before
    // a3 in claim order (priority, run_at, id), as on one server.
    assert!(ok(
        calls::release(&mut r, &next[0].token("w2"), None),
        "releasing a2"
    ));

    // On the shard, REPEATABLE READ is refused for a queue with groups ...
    let mut direct = ok(
        shards[shard]
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .start(),
        "BEGIN REPEATABLE READ on the shard",
    );
    server_error(
        calls::claim(&mut direct, queue, "w3", "1 minute", Some(10), None),
        "25000",
        "a grouped queue's claim under REPEATABLE READ on the shard",
    );
    ok(direct.rollback(), "ROLLBACK");
    // ... and through the router the claim runs in the shard's own
    // READ COMMITTED transaction, whatever the router's.
    let mut routed = ok(
        r.build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .start(),
        "BEGIN REPEATABLE READ on the router",
    );
    let again = ok(
        calls::claim(&mut routed, queue, "w3", "1 minute", Some(10), None),
        "a claim through the router in a REPEATABLE READ transaction",
    );
    ok(routed.commit(), "COMMIT");
    assert_eq!(keys(&again), ["a2"]);
    assert!(again[0].epoch > next[0].epoch);
    let none = ok(
        calls::claim(&mut r, queue, "w4", "1 minute", Some(10), None),
        "a claim while a2 is claimed again",
    );
    assert!(none.is_empty(), "a3 beside a2: {none:?}");
    assert!(ok(
        calls::finish(&mut r, &again[0].token("w3"), None),
        "finishing a2"
    ));
    let last = ok(
        calls::claim(&mut r, queue, "w4", "1 minute", Some(10), None),
        "the claim after a2's finish",
    );
    assert_eq!(keys(&last), ["a3"]);
}

/// The bulk enqueue through the router (0.12.0; `router/install.sql`'s
/// `work_enqueue_many`): a call names one queue, so every item of it lands
/// on that queue's shard, its id carrying the shard's number (`id >> 48`),
/// and on no other shard; the rows come back in the arrays' order, each
/// with its key, a key that exists on the shard (or that an earlier
/// element has) returning its item with `inserted = false`. The shard's
/// dedupe is the queue's: the same keys in another queue are new items on
/// that queue's shard. Grouped items (the item-by-item path) land there
/// too, serial on the shard; the router's claims take every item of the
/// call, with the payload given for it.
#[test]
fn router_sends_a_bulk_enqueue_to_its_queues_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_bulk");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);
    let mut ids = BTreeSet::new();
    for (queue, &shard) in QUEUES.iter().zip(&on_shard) {
        // A key that exists before the call, on the queue's shard.
        let k0 = common::enqueue_new(&mut r, &Enqueue::new(*queue).key("k0"));
        let asked = ["k1", "k0", "k2", "k1"];
        let payloads: Vec<serde_json::Value> = (0..asked.len())
            .map(|n| serde_json::json!({ "queue": queue, "n": n }))
            .collect();
        let rows = ok(
            generated::work_enqueue_many(
                &mut r,
                queue,
                &payloads,
                Some(&asked.map(Some)),
                None,
                None,
                None,
                None,
                None,
            ),
            "work_enqueue_many through the router",
        );
        let got: Vec<(&str, bool)> = rows
            .iter()
            .map(|row| {
                (
                    row.key.as_deref().expect("key"),
                    row.inserted.expect("inserted"),
                )
            })
            .collect();
        assert_eq!(
            got,
            [("k1", true), ("k0", false), ("k2", true), ("k1", false)],
            "{queue}: the rows in the arrays' order"
        );
        let id: Vec<i64> = rows.iter().map(|row| row.id.expect("id")).collect();
        assert_eq!((id[1], id[3]), (k0, id[0]), "{queue}: {id:?}");
        for &id in &id {
            assert_eq!(Router::shard_of_id(id), shard, "{queue}: id {id}");
        }
        // Each inserted item is on the queue's shard alone, with its payload.
        for (n, s) in shards.iter_mut().enumerate() {
            let here: Vec<(i64, serde_json::Value)> = ok(
                s.query(
                    "SELECT id, payload FROM workfence.items
                      WHERE queue = $1 AND key IN ('k1', 'k2') ORDER BY key",
                    &[queue],
                ),
                "the bulk enqueue's items on a shard",
            )
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
            let expected = if n == shard {
                vec![(id[0], payloads[0].clone()), (id[2], payloads[2].clone())]
            } else {
                vec![]
            };
            assert_eq!(here, expected, "{queue}'s new items on shard {n}");
        }
        ids.extend([k0, id[0], id[2]]);

        // Grouped items: each enqueued as work_enqueue enqueues one, on the
        // same shard, in their group.
        let grouped = ok(
            generated::work_enqueue_many(
                &mut r,
                queue,
                &[serde_json::json!({"g": 1}), serde_json::json!({"g": 2})],
                Some(&[Some("g1"), Some("g2")]),
                None,
                None,
                None,
                Some(&[Some("g"), Some("g")]),
                None,
            ),
            "work_enqueue_many with a group through the router",
        );
        for row in &grouped {
            let id = row.id.expect("id");
            assert_eq!(row.inserted, Some(true));
            assert_eq!(Router::shard_of_id(id), shard, "{queue}: grouped id {id}");
            let in_group: i64 = scalar(
                &mut shards[shard],
                "SELECT count(*) FROM workfence.items WHERE id = $1 AND group_key = 'g'",
                &[&id],
            );
            assert_eq!(in_group, 1, "{queue}: item {id} in group g on its shard");
            ids.insert(id);
        }

        // Claimed through the router: k0, k1, k2 and one of the group.
        let claimed = ok(
            calls::claim(&mut r, queue, "w", "1 minute", Some(10), None),
            "claiming through the router",
        );
        assert_eq!(keys(&claimed), ["g1", "k0", "k1", "k2"], "{queue}");
        for claim in &claimed {
            if let Some(n) = asked.iter().position(|k| *k == claim.key && *k != "k0") {
                assert_eq!(claim.payload, payloads[n], "{queue}/{}", claim.key);
            }
        }
    }
    assert_eq!(ids.len(), QUEUES.len() * 5, "ids unique across shards");
}

/// Limits through the router (from 0.10.0): `work_limit` runs on the
/// queue's shard, where all the queue's claims run, so a limit set through
/// the router holds for claimers through the router and on the shard alike,
/// and the router's `work_queue_stats` shows it (docs/scaling.md); from
/// 0.12.0 `per_group` too.
#[test]
fn router_work_limit_limits_the_queue_on_its_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_limits");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);

    // Concurrency: at most two items under lease at once.
    let (queue, shard) = (QUEUES[0], on_shard[0]);
    for n in 0..5 {
        common::enqueue_new(&mut r, &Enqueue::new(queue).key(format!("k{n}")));
    }
    ok(
        calls::work_limit(&mut r, queue, Some(2), None, "1 second"),
        "work_limit through the router",
    );
    for (n, s) in shards.iter_mut().enumerate() {
        let set: i64 = scalar(
            s,
            "SELECT count(*) FROM workfence.queues WHERE queue = $1 AND concurrency = 2",
            &[&queue],
        );
        assert_eq!(set, i64::from(n == shard), "the limit on shard {n}");
    }
    let held = ok(
        calls::claim(&mut r, queue, "w1", "1 minute", Some(10), None),
        "a batch claim through the router",
    );
    assert_eq!(held.len(), 2, "two under lease: {held:?}");
    let none = ok(
        calls::claim(&mut r, queue, "w2", "1 minute", Some(10), None),
        "another claim through the router",
    );
    assert!(none.is_empty(), "a third under lease: {none:?}");
    let none = ok(
        calls::claim(&mut shards[shard], queue, "w2", "1 minute", Some(10), None),
        "a claim on the queue's shard",
    );
    assert!(
        none.is_empty(),
        "a third under lease on the shard: {none:?}"
    );
    assert!(ok(
        calls::finish(&mut r, &held[0].token("w1"), None),
        "finishing one"
    ));
    let one = ok(
        calls::claim(&mut r, queue, "w2", "1 minute", Some(10), None),
        "the claim after a finish",
    );
    assert_eq!(one.len(), 1, "one lease freed: {one:?}");

    // Rate: two items handed out per hour, finished or not.
    let (rated, rated_shard) = (QUEUES[3], on_shard[3]);
    for n in 0..4 {
        common::enqueue_new(&mut r, &Enqueue::new(rated).key(format!("k{n}")));
    }
    ok(
        calls::work_limit(&mut r, rated, None, Some(2), "1 hour"),
        "a rate limit through the router",
    );
    let two = ok(
        calls::claim(&mut r, rated, "w1", "1 minute", Some(10), None),
        "a batch claim of the rated queue",
    );
    assert_eq!(two.len(), 2, "the hour's two: {two:?}");
    for c in &two {
        assert!(ok(calls::finish(&mut r, &c.token("w1"), None), "finish"));
    }
    let none = ok(
        calls::claim(&mut r, rated, "w2", "1 minute", Some(10), None),
        "a claim through the router after the hour's two",
    );
    assert!(none.is_empty(), "over the rate: {none:?}");
    let none = ok(
        calls::claim(
            &mut shards[rated_shard],
            rated,
            "w2",
            "1 minute",
            Some(10),
            None,
        ),
        "a claim on the rated queue's shard",
    );
    assert!(none.is_empty(), "over the rate on the shard: {none:?}");

    // per_group (from 0.12.0): set on the queue's shard alone, and there
    // two items of one group under lease at once, not a third.
    let (grouped, grouped_shard) = (QUEUES[1], on_shard[1]);
    for n in 0..3 {
        common::enqueue_new(
            &mut r,
            &Enqueue::new(grouped).key(format!("g{n}")).group_key("g"),
        );
    }
    ok(
        calls::work_limit_per_group(&mut r, grouped, None, None, "1 second", Some(2)),
        "work_limit with per_group through the router",
    );
    for (n, s) in shards.iter_mut().enumerate() {
        let set: i64 = scalar(
            s,
            "SELECT count(*) FROM workfence.queues WHERE queue = $1 AND per_group = 2",
            &[&grouped],
        );
        assert_eq!(set, i64::from(n == grouped_shard), "per_group on shard {n}");
    }
    for held in 0..2 {
        let one = ok(
            calls::claim(&mut r, grouped, "w1", "1 minute", None, None),
            "a claim of the grouped queue through the router",
        );
        assert_eq!(one.len(), 1, "the group's item {held}: {one:?}");
    }
    let none = ok(
        calls::claim(&mut r, grouped, "w2", "1 minute", None, None),
        "a third claim of the group",
    );
    assert!(none.is_empty(), "per_group 2 with two held: {none:?}");

    // The router's work_queue_stats shows each queue's limits, its shard's.
    let limits: Vec<_> = ok(calls::queue_limits(&mut r), "the router's work_queue_stats")
        .into_iter()
        .map(|l| (l.queue, l.concurrency, l.rate, l.per_group))
        .collect();
    let mut expected = vec![
        (queue.to_string(), Some(2), None, None),
        (rated.to_string(), None, Some(2), None),
        (grouped.to_string(), None, None, Some(2)),
    ];
    expected.sort();
    assert_eq!(limits, expected);
    let per: Vec<Option<String>> = ok(calls::queue_limits(&mut r), "work_queue_stats")
        .into_iter()
        .filter(|l| l.queue == rated)
        .map(|l| l.per)
        .collect();
    assert_eq!(per, [Some("01:00:00".to_string())]);

    // Both limits lifted through the router: the rest is claimed.
    ok(
        calls::work_limit(&mut r, rated, None, None, "1 second"),
        "lifting the limits through the router",
    );
    let rest = ok(
        calls::claim(&mut r, rated, "w2", "1 minute", Some(10), None),
        "the claim after lifting the limits",
    );
    assert_eq!(rest.len(), 2, "no limit: {rest:?}");
}

/// A queue on the shard of `queue`, other than it: the first of
/// `<queue>.step1`, `<queue>.step2`, ... whose hash picks the same shard.
fn queue_beside(router: &Router, r: &mut Client, queue: &str) -> String {
    let shard = ok(router.shard_of_queue(r, queue), "the shard of a queue");
    (1..100)
        .map(|n| format!("{queue}.step{n}"))
        .find(|name| ok(router.shard_of_queue(r, name), "the shard of a queue") == shard)
        .expect("a name of the same shard among 99")
}

/// The error docs/scaling.md shows for an `after` id of another shard: the
/// first code block of its section *Workflows live on one shard*.
fn scaling_guide_after_error() -> String {
    const GUIDE: &str = include_str!("../../../docs/scaling.md");
    let section = GUIDE
        .split_once("## Workflows live on one shard")
        .expect("docs/scaling.md has the section")
        .1;
    let block = section
        .split("```")
        .nth(1)
        .expect("the section's first code block");
    block.trim().to_string()
}

/// `work_parent_results` under `token` through `c`: NULL (`None`) for a
/// token that is not current.
fn parent_results(c: &mut Client, token: &Token) -> Option<serde_json::Value> {
    scalar(
        c,
        "SELECT workfence.work_parent_results($1, $2, $3)",
        &[&token.id, &token.owner, &token.epoch],
    )
}

/// The rows of `work_workflow(id)` through `c` as (id, depth, state,
/// parents).
fn workflow(c: &mut Client, id: i64) -> Vec<(i64, i32, String, Vec<i64>)> {
    ok(generated::work_workflow(c, id), "work_workflow")
        .into_iter()
        .map(|row| {
            (
                row.id.expect("id"),
                row.depth.expect("depth"),
                row.state.expect("state"),
                row.parents.expect("parents"),
            )
        })
        .collect()
}

/// Workflows through the router (0.12.0; docs/scaling.md, *Workflows*): a
/// child and its parents in two queues of one shard, all enqueued, claimed
/// and finished through the router. The ids the router hands out are the
/// shard's own (they carry its number), and they are what `after` takes,
/// what `work_parent_results` keys its object by and what `work_workflow`
/// returns, through the router and on the shard alike. The child waits
/// (the router's `work_queue_stats` counts it) until the last parent's
/// accepted finish (one by `work_finish`, one by `work_finish_many` through
/// the router) releases it; a parent's final failure through the router
/// cancels its waiting child there.
#[test]
fn router_runs_a_workflow_on_its_queues_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_workflow");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);
    let (queue, shard) = (QUEUES[2], on_shard[2]);
    let beside = queue_beside(&router, &mut r, queue);

    let extract = common::enqueue_new(&mut r, &Enqueue::new(queue).key("extract"));
    let fetch = common::enqueue_new(&mut r, &Enqueue::new(&beside).key("fetch"));
    let join = common::enqueued(
        &mut r,
        &Enqueue::new(queue).key("join").after(&[extract, fetch]),
    );
    assert!(join.inserted);
    for id in [extract, fetch, join.id] {
        assert_eq!(
            Router::shard_of_id(id),
            shard,
            "item {id} on the queue's shard"
        );
    }
    let edges: i64 = scalar(
        &mut shards[shard],
        "SELECT count(*) FROM workfence.item_edges WHERE child = $1",
        &[&join.id],
    );
    assert_eq!(edges, 2, "the shard linked the child to both parents");
    let state = |r: &mut Client, id: i64| -> String {
        ok(calls::item_by_id(r, id), "work_item(id)")
            .expect("the item")
            .state
    };
    assert_eq!(state(&mut r, join.id), "waiting");
    let waiting: i64 = scalar(
        &mut r,
        "SELECT waiting FROM workfence.work_queue_stats WHERE queue = $1",
        &[&queue],
    );
    assert_eq!(
        waiting, 1,
        "the router's work_queue_stats counts it waiting"
    );
    // The same key again with the same after: the existing item, as on one
    // server.
    let again = common::enqueued(
        &mut r,
        &Enqueue::new(queue).key("join").after(&[extract, fetch]),
    );
    assert_eq!((again.id, again.inserted), (join.id, false));

    // The graph through the router is the shard's, in router ids.
    let graph = workflow(&mut r, join.id);
    assert_eq!(
        graph,
        [
            (join.id, 0, "waiting".to_string(), vec![extract, fetch]),
            (extract, -1, "pending".to_string(), vec![]),
            (fetch, -1, "pending".to_string(), vec![]),
        ]
    );
    assert_eq!(
        graph,
        workflow(&mut shards[shard], join.id),
        "as on the shard"
    );
    assert_eq!(
        workflow(&mut r, extract),
        [
            (extract, 0, "pending".to_string(), vec![]),
            (join.id, 1, "waiting".to_string(), vec![extract, fetch]),
        ]
    );

    // The parents finish through the router, each with a result.
    let e = ok(
        calls::claim_key(&mut r, queue, "extract", "w", "1 minute"),
        "claiming extract",
    )
    .expect("extract is due")
    .token("w");
    assert!(ok(
        calls::finish(&mut r, &e, Some(&serde_json::json!({"rows": 3}))),
        "work_finish of extract through the router"
    ));
    assert_eq!(state(&mut r, join.id), "waiting", "one parent is left");
    let f = ok(
        calls::claim_key(&mut r, &beside, "fetch", "w", "1 minute"),
        "claiming fetch",
    )
    .expect("fetch is due")
    .token("w");
    let finished = ok(
        calls::finish_many(
            &mut r,
            "w",
            &[f.id],
            &[f.epoch],
            Some(&[serde_json::json!({"pages": 7})]),
        ),
        "work_finish_many of fetch through the router",
    );
    assert_eq!(finished, [(f.id, true)]);
    assert_eq!(
        state(&mut r, join.id),
        "pending",
        "the last finish released it"
    );

    // The child's claim: its parents' results, keyed by the router ids.
    let j = ok(
        calls::claim(&mut r, queue, "w", "1 minute", None, None),
        "claiming the child",
    );
    assert_eq!(j.iter().map(|c| c.id).collect::<Vec<_>>(), [join.id]);
    let j = j[0].token("w");
    let results = parent_results(&mut r, &j).expect("the child's current token");
    assert_eq!(
        results,
        serde_json::json!({
            extract.to_string(): {"rows": 3},
            fetch.to_string(): {"pages": 7},
        })
    );
    assert_eq!(
        parent_results(&mut shards[shard], &j),
        Some(results),
        "the same object on the shard"
    );
    let stale = Token::new(j.id, "w", j.epoch + 1);
    assert_eq!(parent_results(&mut r, &stale), None, "another token: NULL");
    assert!(ok(calls::finish(&mut r, &j, None), "the child's finish"));
    assert_eq!(
        workflow(&mut r, join.id)
            .into_iter()
            .map(|(id, _, state, _)| (id, state))
            .collect::<Vec<_>>(),
        [
            (join.id, "done".to_string()),
            (extract, "done".to_string()),
            (fetch, "done".to_string()),
        ]
    );

    // A parent's final failure through the router cancels its waiting
    // child on the shard.
    let doomed = common::enqueue_new(&mut r, &Enqueue::new(&beside).key("doomed").max_attempts(1));
    let orphan = common::enqueue_new(&mut r, &Enqueue::new(queue).key("orphan").after(&[doomed]));
    let d = ok(
        calls::claim_key(&mut r, &beside, "doomed", "w", "1 minute"),
        "claiming doomed",
    )
    .expect("doomed is due")
    .token("w");
    assert!(ok(calls::fail(&mut r, &d, "boom", None), "work_fail"));
    assert_eq!(item_state(&mut shards[shard], doomed), "failed");
    assert_eq!(state(&mut r, orphan), "cancelled");
}

/// An `after` id on another shard than the queue's is refused by the router
/// (docs/scaling.md, *Workflows*): 22023 with the id and both shards in the
/// detail and a hint, before any shard is called, so nothing changes on any
/// shard (not a sequence); also when the key exists already (the router
/// cannot know), when one id of several is elsewhere, and in a
/// two-dimensional array. What is not another shard's goes on to the
/// queue's shard, which answers as the extension does: an id that names no
/// shard of the router is no item there (23503); a NULL element, or a NULL
/// queue, is 22004. An empty `after` is no parents. A call from another
/// role's definer function is refused (42501) before `after` is looked at.
#[test]
fn router_refuses_an_after_id_of_another_shard() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_after");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    let on_shard = one_queue_per_shard(&router, &mut r);
    let (home, away) = (QUEUES[0], QUEUES[1]);
    let (home_shard, away_shard) = (on_shard[0], on_shard[1]);
    let local = common::enqueue_new(&mut r, &Enqueue::new(home).key("local"));
    let remote = common::enqueue_new(&mut r, &Enqueue::new(away).key("remote"));
    assert_eq!(Router::shard_of_id(remote), away_shard);
    common::enqueue_new(&mut r, &Enqueue::new(home).key("exists"));
    let before = common::shards_snapshot(&mut shards);

    let refused = |r: &mut Client, item: Enqueue, what: &str| -> postgres::error::DbError {
        common::server_error(calls::enqueue(r, &item), "22023", what)
    };
    let err = refused(
        &mut r,
        Enqueue::new(home).key("child").after(&[remote]),
        "a parent on another shard",
    );
    assert!(
        err.message().contains("argument \"after\"") && err.message().contains(&remote.to_string()),
        "{}",
        err.message()
    );
    let detail = err.detail().expect("a DETAIL");
    for part in [
        format!("Item {remote} is on shard {away_shard}"),
        format!("queue \"{home}\" is on shard {home_shard}"),
        "N = 4".to_string(),
    ] {
        assert!(detail.contains(&part), "{part:?} in {detail:?}");
    }
    let hint = err.hint().expect("a HINT");
    assert!(hint.contains("one shard"), "{hint}");
    // The guide shows this very error (the first item of shard 1).
    assert_eq!(remote, 1 << 48);
    let shown = format!(
        "ERROR:  {}\nDETAIL:  {detail}\nHINT:  {hint}",
        err.message()
    );
    assert_eq!(shown, scaling_guide_after_error(), "docs/scaling.md");
    // One of several, the key of an existing item, a 2-D array.
    refused(
        &mut r,
        Enqueue::new(home).key("child").after(&[local, remote]),
        "one parent of two on another shard",
    );
    refused(
        &mut r,
        Enqueue::new(home).key("exists").after(&[remote]),
        "an existing key, a parent on another shard",
    );
    let flat = common::server_error(
        r.query(
            "SELECT * FROM workfence.work_enqueue($1, after => ARRAY[[$2::bigint, $3::bigint]])",
            &[&home, &local, &remote],
        ),
        "22023",
        "a 1x2 array",
    );
    assert!(
        flat.message().contains(&remote.to_string()),
        "{}",
        flat.message()
    );
    assert_eq!(
        common::shards_snapshot(&mut shards),
        before,
        "a refused enqueue changes nothing on any shard"
    );

    // What names no other shard goes on to the queue's shard.
    let nowhere = [-1_i64, 7 << 48];
    for id in nowhere {
        common::server_error(
            calls::enqueue(&mut r, &Enqueue::new(home).key("child").after(&[id])),
            "23503",
            "an id of no shard",
        );
    }
    common::server_error(
        r.query(
            "SELECT * FROM workfence.work_enqueue($1, after => ARRAY[NULL]::bigint[])",
            &[&home],
        ),
        "22004",
        "a NULL element",
    );
    common::server_error(
        r.query(
            "SELECT * FROM workfence.work_enqueue(NULL, after => ARRAY[$1::bigint])",
            &[&remote],
        ),
        "22004",
        "a NULL queue",
    );
    let empty: i64 = scalar(
        &mut r,
        "SELECT id FROM workfence.work_enqueue($1, key => 'no parents', after => '{}')",
        &[&home],
    );
    assert_eq!(Router::shard_of_id(empty), home_shard);
    assert_eq!(item_state(&mut shards[home_shard], empty), "pending");
    // On the queue's shard: accepted.
    let child = common::enqueue_new(&mut r, &Enqueue::new(home).key("child").after(&[local]));
    assert_eq!(item_state(&mut shards[home_shard], child), "waiting");

    // The role check comes first.
    ok(
        r.batch_execute(
            "CREATE ROLE router_after_owner NOLOGIN;
             GRANT USAGE ON SCHEMA workfence, workfence_router TO router_after_owner;
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence, workfence_router
                TO router_after_owner;
             CREATE FUNCTION public.enqueue_as_owner(parent bigint) RETURNS bigint
             LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
             $$ SELECT id FROM workfence.work_enqueue('mail', after => ARRAY[parent]) $$;
             ALTER FUNCTION public.enqueue_as_owner(bigint) OWNER TO router_after_owner;",
        ),
        "a definer function of another role",
    );
    let err = common::server_error(
        r.query("SELECT public.enqueue_as_owner($1)", &[&remote]),
        "42501",
        "a definer's enqueue with a parent on another shard",
    );
    assert!(
        err.message().contains("through the pg_workfence router"),
        "{}",
        err.message()
    );
}

/// Doubling the shards moves a queue away from the parents it has on its
/// old shard (docs/scaling.md, *Workflows*): a child enqueued through the
/// router after the doubling, with such a parent, is refused (22023); on
/// the old shard directly (the drain's worker) it is linked there, and its
/// parent's finish releases it. A queue that stayed keeps its workflows.
#[test]
fn router_refuses_a_child_whose_queue_moved_away_from_its_parent() {
    let cluster = cluster();
    let mut router = ok(
        Router::create(&cluster, "router_after_doubling", 2),
        "a router of two shards",
    );
    let mut r = ok(cluster.connect_to(&router.database), "the router");
    // "mail" is on shard 0 of two and moves to shard 2 of four; "sms" stays
    // on shard 0 (as in router_doubling_moves_queues_only_by_draining).
    let hash = |r: &mut Client, q: &str| -> i32 {
        scalar(r, "SELECT workfence_router.queue_shard($1)", &[&q])
    };
    let (mail, sms) = (hash(&mut r, "mail"), hash(&mut r, "sms"));
    assert_eq!((mail & 1, mail & 3, sms & 1, sms & 3), (0, 2, 0, 0));
    let mail_parent = common::enqueue_new(&mut r, &Enqueue::new("mail").key("parent"));
    let sms_parent = common::enqueue_new(&mut r, &Enqueue::new("sms").key("parent"));
    ok(router.double(&cluster), "doubling the shards");

    let err = common::server_error(
        calls::enqueue(
            &mut r,
            &Enqueue::new("mail").key("child").after(&[mail_parent]),
        ),
        "22023",
        "a moved queue's child of a parent left on the old shard",
    );
    let detail = err.detail().expect("a DETAIL");
    assert!(
        detail.contains(&format!("Item {mail_parent} is on shard 0"))
            && detail.contains("queue \"mail\" is on shard 2"),
        "{detail}"
    );
    // "sms" did not move: its workflow goes on through the router.
    let sms_child = common::enqueue_new(
        &mut r,
        &Enqueue::new("sms").key("child").after(&[sms_parent]),
    );
    assert_eq!(Router::shard_of_id(sms_child), 0);

    // On the old shard directly, with the drain: linked, and released by
    // its parent's finish there.
    let mut old = ok(cluster.connect_to(&router.shards[0]), "the old shard");
    let child = common::enqueue_new(
        &mut old,
        &Enqueue::new("mail").key("child").after(&[mail_parent]),
    );
    assert_eq!(item_state(&mut old, child), "waiting");
    let p = ok(
        calls::claim_key(&mut old, "mail", "parent", "w", "1 minute"),
        "the drain's claim",
    )
    .expect("the parent is due")
    .token("w");
    assert!(ok(calls::finish(&mut old, &p, None), "the drain's finish"));
    assert_eq!(item_state(&mut old, child), "pending");
}

#[test]
fn long_poll_through_the_router_waits_on_the_shard_and_wakes_on_an_enqueue() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_long_poll");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let queue = QUEUES[0];
    let shard = &router.shards[ok(router.shard_of_queue(&mut r, queue), "shard")];
    // The shard's sessions (PL/Proxy's) sleep the whole wait: without this
    // the long poll would return at workfence.long_poll_max (3 s), and a
    // wake-up could not be told from the cap.
    let mut admin = ok(cluster.connect(), "connecting as the superuser");
    ok(
        admin.batch_execute(&format!(
            "ALTER DATABASE {shard} SET workfence.long_poll_max = '1h'"
        )),
        "raising long_poll_max on the shard",
    );
    let mut observer = ok(cluster.connect_to(shard), "connecting to the shard");
    let mut poller = ok(cluster.connect_to(&router.database), "the poller");
    let started = Instant::now();
    let claims = thread::scope(|s| {
        let waiting = s.spawn(|| {
            ok(
                calls::claim(&mut poller, queue, "w", "1 minute", Some(1), Some("60 s")),
                "the long poll through the router",
            )
        });
        // PL/Proxy's session on the shard sleeps in the extension's wait.
        common::poll_until(
            &mut observer,
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                             WHERE datname = current_database() AND state = 'active'
                               AND wait_event_type = 'Extension')",
            &[],
            "the shard's session waiting in the long poll",
        );
        common::enqueued(&mut r, &Enqueue::new(queue).key("wake"));
        waiting.join().expect("the poller panicked")
    });
    let took = started.elapsed();
    assert_eq!(claims.len(), 1, "the long poll returns the item enqueued");
    assert_eq!(claims[0].key, "wake");
    assert!(
        took < Duration::from_secs(30),
        "woken by the enqueue, not at the end of its 60 s wait: {took:?}"
    );
    println!("router: a long poll through the router woke {took:.1?} after it started");
}

#[test]
fn notifications_through_the_router_are_heard_on_the_shard_not_the_router() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_notify");
    // The shards send work_enqueued (off by default from 0.12.0), as an
    // operator whose workers LISTEN turns it on; set before the router's
    // session, whose shard connections start after it.
    let mut admin = ok(cluster.connect(), "connecting as the superuser");
    for shard in &router.shards {
        ok(
            admin.batch_execute(&format!(
                "ALTER DATABASE {shard} SET workfence.notify_enqueued = on"
            )),
            "turning the notification on",
        );
    }
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let queue = QUEUES[1];
    let shard = &router.shards[ok(router.shard_of_queue(&mut r, queue), "shard")];
    let listen = |database: &str| {
        let mut c = ok(cluster.connect_to(database), "a listener");
        ok(
            c.batch_execute(&format!(
                "LISTEN work_enqueued; LISTEN work_lease_lost; LISTEN {MARKER};"
            )),
            "LISTEN",
        );
        c
    };
    let mut on_router = listen(&router.database);
    let mut on_shard = listen(shard);
    let mut marker_router = ok(cluster.connect_to(&router.database), "marker");
    let mut marker_shard = ok(cluster.connect_to(shard), "marker");

    // An enqueue of a due item, and a lapsed lease claimed anew, through the
    // router.
    let id = common::enqueue_new(&mut r, &Enqueue::new(queue).key("n1"));
    let first = ok(
        calls::claim_key(&mut r, queue, "n1", "w", "200 ms"),
        "claim",
    )
    .expect("the claim");
    common::wait_out_lease(&mut r, id);
    let second = ok(
        calls::claim_key(&mut r, queue, "n1", "w", "1 minute"),
        "re-claim",
    )
    .expect("the re-claim");
    assert!(second.epoch > first.epoch);

    let heard = |listener: &mut Client, marker: &mut Client| -> Vec<(String, String)> {
        ok(
            marker.execute("SELECT pg_catalog.pg_notify($1, 'end')", &[&MARKER]),
            "the marker",
        );
        let mut heard = Vec::new();
        let mut notifications = listener.notifications();
        let mut incoming = notifications.timeout_iter(DEADLINE);
        loop {
            match ok(incoming.next(), "receiving") {
                Some(n) if n.channel() == MARKER => return heard,
                Some(n) => heard.push((n.channel().to_string(), n.payload().to_string())),
                None => panic!("the marker did not arrive within {DEADLINE:?}: {heard:?}"),
            }
        }
    };
    let shard_heard = heard(&mut on_shard, &mut marker_shard);
    assert_eq!(shard_heard.len(), 2, "{shard_heard:?}");
    assert_eq!(shard_heard[0], ("work_enqueued".into(), queue.into()));
    assert_eq!(shard_heard[1].0, "work_lease_lost");
    assert!(
        shard_heard[1].1.contains(&first.epoch.to_string()),
        "the lost token's epoch: {}",
        shard_heard[1].1
    );
    assert_eq!(
        heard(&mut on_router, &mut marker_router),
        Vec::<(String, String)>::new(),
        "a listener on the router hears nothing: the notifications are the shard's"
    );
}

#[test]
fn work_assert_through_the_router_checks_the_token_but_holds_no_lock() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_assert");
    let mut admin = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    ok(
        admin.batch_execute("CREATE TABLE public.sent (item_id bigint, epoch bigint)"),
        "the job's table, in the router database",
    );
    let mut job = ok(cluster.connect_to(&router.database), "the job's connection");
    let mut other = ok(cluster.connect_to(&router.database), "another worker");
    let queue = QUEUES[2];
    let id = common::enqueue_new(&mut admin, &Enqueue::new(queue).key("a"));

    // Current: the assert passes and the job's write commits with it.
    let claim = ok(calls::claim_key(&mut job, queue, "a", "w", "1 s"), "claim").expect("claim");
    let token = claim.token("w");
    let mut tx = ok(job.transaction(), "BEGIN");
    ok(
        calls::assert(&mut tx, &token),
        "work_assert of a current token",
    );
    ok(
        tx.execute(
            "INSERT INTO public.sent VALUES ($1, $2)",
            &[&token.id, &token.epoch],
        ),
        "the job's write",
    );
    // The lease lapses while the job's transaction is open. Directly on a
    // shard, the assert's row lock would hold off the re-claim until this
    // transaction ends (races.rs); through the router the assert was a
    // transaction of its own on the shard, and nothing holds the item.
    common::wait_out_lease(&mut admin, id);
    let stolen = ok(
        calls::claim_key(&mut other, queue, "a", "w", "1 minute"),
        "re-claim",
    )
    .expect("the re-claim is not held off");
    assert!(stolen.epoch > token.epoch);
    // A second assert before the commit is what catches it (docs/scaling.md).
    let db = server_error(calls::assert(&mut tx, &token), "55000", "the second assert");
    assert!(db.message().starts_with("lease lost"), "{}", db.message());
    assert!(
        db.detail().is_some_and(|d| d.contains("superseded")),
        "{:?}",
        db.detail()
    );
    assert!(db.hint().is_some());
    ok(tx.rollback(), "ROLLBACK");
    let rows: i64 = scalar(&mut admin, "SELECT count(*) FROM public.sent", &[]);
    assert_eq!(rows, 0, "the stale job's write rolled back");
    // The new holder's assert passes.
    ok(
        calls::assert(&mut other, &stolen.token("w")),
        "the new holder's assert",
    );
}

#[test]
fn queue_grants_through_the_router_judge_the_calling_role() {
    let cluster = cluster();
    let router = common::router(&cluster, "router_grants");
    // The guide's function grants, the same SQL in the router and in every
    // shard (the router has the same functions and view).
    for database in std::iter::once(&router.database).chain(&router.shards) {
        let mut c = ok(cluster.connect_to(database), "connecting as the superuser");
        ok(
            c.batch_execute(guide("least-privilege-grants")),
            "the guide's function grants",
        );
    }
    // The guide's queue grants, made once, through the router (every shard).
    let mut admin = ok(
        cluster.connect_to(&router.database),
        "the router, as superuser",
    );
    ok(
        admin.batch_execute(guide("queue-grants")),
        "the guide's queue grants",
    );
    for shard in &router.shards {
        let mut c = ok(cluster.connect_to(shard), "a shard");
        let n: i64 = scalar(
            &mut c,
            "SELECT count(*) FROM workfence.work_queue_grants",
            &[],
        );
        assert_eq!(n, 7, "{shard} has every grant");
        let on: bool = scalar(
            &mut c,
            "SELECT count(*) = 1 FROM workfence.queue_grant_mode",
            &[],
        );
        assert!(on, "{shard} enforces them");
    }
    let as_role =
        |role: &str| common::connect_as(&cluster, &router.database, role, "router grants");

    // billing_app enqueues billing's queues, not search's: the shard judged
    // billing_app (PL/Proxy connected as the calling role).
    let mut app = as_role("billing_app");
    let billing = common::enqueue_new(&mut app, &Enqueue::new("billing.invoices").key("i1"));
    let db = server_error(
        calls::enqueue(&mut app, &Enqueue::new("search.reindex").key("r1")),
        "42501",
        "billing_app enqueueing into search.reindex",
    );
    assert!(db.message().contains("search.reindex"), "{}", db.message());
    let mut search_app = as_role("search_app");
    let search = common::enqueue_new(&mut search_app, &Enqueue::new("search.reindex").key("r1"));

    // billing_worker claims billing's item; search's queue is refused, and a
    // token of search's item is refused like a token of nothing.
    let mut worker = as_role("billing_worker");
    let claim = ok(
        calls::claim(
            &mut worker,
            "billing.invoices",
            "w",
            "1 minute",
            Some(1),
            None,
        ),
        "billing_worker's claim",
    );
    assert_eq!(claim.iter().map(|c| c.id).collect::<Vec<_>>(), [billing]);
    server_error(
        calls::claim(
            &mut worker,
            "search.reindex",
            "w",
            "1 minute",
            Some(1),
            None,
        ),
        "42501",
        "billing_worker claiming search.reindex",
    );
    let mut search_worker = as_role("search_worker");
    let search_claim = ok(
        calls::claim(
            &mut search_worker,
            "search.reindex",
            "w",
            "1 minute",
            Some(1),
            None,
        ),
        "search_worker's claim",
    );
    assert_eq!(search_claim.len(), 1);
    let stolen = Token::new(search, "w", search_claim[0].epoch);
    assert!(!ok(
        calls::finish(&mut worker, &stolen, None),
        "a foreign token's finish"
    ));
    assert!(ok(
        calls::finish(&mut worker, &claim[0].token("w"), None),
        "its own finish"
    ));

    // oncall (a monitor) sees both queues in the stats; the stats of a role
    // without read on search's queue leave it out.
    let mut oncall = as_role("oncall");
    let queues: Vec<String> = ok(calls::queue_stats(&mut oncall), "oncall's stats")
        .into_iter()
        .map(|s| s.queue)
        .collect();
    assert_eq!(queues, ["billing.invoices", "search.reindex"]);

    // A revoke through the router reaches every shard at once.
    assert!(ok(
        calls::revoke(&mut admin, "claim", "search.*", "search_worker"),
        "work_revoke"
    ));
    server_error(
        calls::claim(
            &mut search_worker,
            "search.reindex",
            "w",
            "1 minute",
            Some(1),
            None,
        ),
        "42501",
        "search_worker claiming after the revoke",
    );
    assert!(!ok(
        calls::finish(&mut search_worker, &search_claim[0].token("w"), None),
        "a revoked role's finish"
    ));
}

/// What the soak's workers saw, shared between their threads.
#[derive(Default)]
struct Seen {
    /// (id, epoch, worker) of every claim a worker received.
    claims: Vec<(i64, i64, usize)>,
    /// (id, epoch, worker) of every finish that returned true.
    acked: Vec<(i64, i64, usize)>,
    /// (id, epoch) of finishes whose outcome the worker could not learn (the
    /// call or the commit after it failed).
    unknown: Vec<(i64, i64)>,
    /// Tokens refused by work_assert (55000) or by work_finish (false).
    refusals: u64,
    /// Stalls past the lease.
    stalls: u64,
    /// Calls that failed with an error (terminations) and were retried.
    errors: u64,
}

/// The soak's chaos, as performed.
#[derive(Default, Debug)]
struct Chaos {
    router_terminations: u64,
    shard_terminations: u64,
    abandoned: u64,
}

/// The soak's settings.
const SOAK_WORKERS: usize = 6;
const SOAK_PER_QUEUE: i64 = 50;
const SOAK_OWNER: &str = "soak/router";
const SOAK_LEASE: &str = "1 second";
const SOAK_DEADLINE: Duration = Duration::from_secs(150);

/// One worker thread of the soak: claims batches of three from each queue in
/// turn; stalls on one item in eight until its lease has lapsed (on the
/// server's clock); for each item, in ONE router transaction,
/// `work_assert`, the effect row, `work_finish`, commit. Any error (its
/// router backend terminated, or PL/Proxy's on a shard) loses what is in
/// flight: a finish that failed or whose commit failed is recorded as of
/// unknown outcome. Told to abandon (`abandon` set to its index), it drops
/// its connection with its claims unsettled, as a killed process would.
fn soak_worker(
    cluster: &Cluster,
    database: &str,
    me: usize,
    seed: u64,
    stop: &AtomicBool,
    abandon: &AtomicUsize,
    seen: &Mutex<Seen>,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ ((me as u64) << 32));
    let connect = || {
        let mut c = ok(
            postgres::Config::new()
                .host(cluster.host())
                .port(cluster.port())
                .user("postgres")
                .dbname(database)
                .application_name("router soak worker")
                .connect(postgres::NoTls),
            "a soak worker's connection",
        );
        ok(
            c.batch_execute("SET statement_timeout = '30s'"),
            "statement_timeout",
        );
        c
    };
    let record =
        |f: &mut dyn FnMut(&mut Seen)| f(&mut seen.lock().unwrap_or_else(PoisonError::into_inner));
    let mut c = connect();
    let mut turn = me;
    while !stop.load(Ordering::Relaxed) {
        if c.is_closed() {
            c = connect();
        }
        let queue = QUEUES[turn % QUEUES.len()];
        turn += 1;
        let claims = match calls::claim(&mut c, queue, SOAK_OWNER, SOAK_LEASE, Some(3), None) {
            Ok(claims) => claims,
            Err(_) => {
                record(&mut |s| s.errors += 1);
                continue;
            }
        };
        record(&mut |s| {
            s.claims
                .extend(claims.iter().map(|cl| (cl.id, cl.epoch, me)))
        });
        for claim in claims {
            if abandon
                .compare_exchange(me, usize::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // Killed: the claims in hand lapse on their own.
                c = connect();
                break;
            }
            if rng.u32(0..8) == 0 {
                let stalled = c.execute(
                    "SELECT pg_catalog.pg_sleep_until($1::text::timestamptz + '300 ms')",
                    &[&claim.lease_until],
                );
                if stalled.is_err() {
                    record(&mut |s| s.errors += 1);
                    break;
                }
                record(&mut |s| s.stalls += 1);
            }
            let token = claim.token(SOAK_OWNER);
            let mut tx = match c.transaction() {
                Ok(tx) => tx,
                Err(_) => {
                    record(&mut |s| s.errors += 1);
                    break;
                }
            };
            match calls::assert(&mut tx, &token) {
                Ok(()) => {}
                Err(err) if err.code().map(|c| c.code()) == Some("55000") => {
                    record(&mut |s| s.refusals += 1);
                    continue;
                }
                Err(_) => {
                    record(&mut |s| s.errors += 1);
                    break;
                }
            }
            if tx
                .execute(
                    "INSERT INTO public.effects (item_id, epoch, worker) VALUES ($1, $2, $3)",
                    &[&token.id, &token.epoch, &(me as i32)],
                )
                .is_err()
            {
                record(&mut |s| s.errors += 1);
                break;
            }
            match calls::finish(&mut tx, &token, None) {
                Ok(true) => {
                    record(&mut |s| s.acked.push((token.id, token.epoch, me)));
                    if tx.commit().is_err() {
                        record(&mut |s| {
                            s.errors += 1;
                            s.unknown.push((token.id, token.epoch));
                        });
                        break;
                    }
                }
                Ok(false) => record(&mut |s| s.refusals += 1),
                Err(_) => {
                    record(&mut |s| {
                        s.errors += 1;
                        s.unknown.push((token.id, token.epoch));
                    });
                    break;
                }
            }
        }
    }
}

#[test]
fn soak_through_the_router() {
    let seed: u64 = std::env::var("WORKFENCE_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0009);
    let cluster = cluster();
    let router = common::router(&cluster, "router_soak");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    one_queue_per_shard(&router, &mut r);
    ok(
        r.batch_execute(
            "CREATE TABLE public.effects (item_id bigint NOT NULL, epoch bigint NOT NULL,
                                          worker int NOT NULL)",
        ),
        "the effects table (no unique constraint: a duplicate must show)",
    );
    for queue in QUEUES {
        ok(
            r.execute(
                "SELECT count(*) FROM pg_catalog.generate_series(1, $2::bigint) AS n,
                        LATERAL workfence.work_enqueue($1, '{}', 'item-' || n)",
                &[&queue, &SOAK_PER_QUEUE],
            ),
            "enqueueing",
        );
    }
    let total = SOAK_PER_QUEUE * QUEUES.len() as i64;
    let mut shards = common::shard_connections(&cluster, &router);
    let stop = AtomicBool::new(false);
    let abandon = AtomicUsize::new(usize::MAX);
    let seen = Mutex::new(Seen::default());
    let chaos = Mutex::new(Chaos::default());
    let started = Instant::now();
    let mut rng = fastrand::Rng::with_seed(seed);
    thread::scope(|s| {
        let workers: Vec<_> = (0..SOAK_WORKERS)
            .map(|me| {
                let (cluster, database) = (&cluster, router.database.as_str());
                let (stop, abandon, seen) = (&stop, &abandon, &seen);
                s.spawn(move || soak_worker(cluster, database, me, seed, stop, abandon, seen))
            })
            .collect();
        // Chaos, paced by progress: every 12 more done items, one of a
        // router backend terminated, a PL/Proxy session on a shard
        // terminated, a worker abandoning its claims.
        let mut next_chaos = 12;
        let mut chaos = chaos.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // Progress is read on the shards directly: the chaos may
            // terminate any PL/Proxy session, the test's own included.
            let done: i64 = shards
                .iter_mut()
                .map(|s| {
                    scalar::<i64>(
                        s,
                        "SELECT count(*) FROM workfence.items WHERE state = 'done'",
                        &[],
                    )
                })
                .sum();
            if done == total {
                break;
            }
            assert!(
                started.elapsed() < SOAK_DEADLINE,
                "{done} of {total} done after {SOAK_DEADLINE:?} (seed {seed})"
            );
            if done >= next_chaos {
                next_chaos += 12;
                match rng.u32(0..3) {
                    0 => {
                        let n: i64 = scalar(
                            &mut shards[0],
                            "SELECT count(pg_catalog.pg_terminate_backend(pid))::bigint FROM
                               (SELECT pid FROM pg_catalog.pg_stat_activity
                                 WHERE application_name = 'router soak worker'
                                 ORDER BY pg_catalog.random() LIMIT 1) AS victim",
                            &[],
                        );
                        chaos.router_terminations += n as u64;
                    }
                    1 => {
                        let shard = rng.usize(0..shards.len());
                        let n: i64 = scalar(
                            &mut shards[shard],
                            "SELECT count(pg_catalog.pg_terminate_backend(pid))::bigint FROM
                               (SELECT pid FROM pg_catalog.pg_stat_activity
                                 WHERE datname = current_database() AND pid <> pg_catalog.pg_backend_pid()
                                   AND backend_type = 'client backend'
                                 ORDER BY pg_catalog.random() LIMIT 1) AS victim",
                            &[],
                        );
                        chaos.shard_terminations += n as u64;
                    }
                    _ => {
                        abandon.store(rng.usize(0..SOAK_WORKERS), Ordering::Relaxed);
                        chaos.abandoned += 1;
                    }
                }
            }
            ok(
                shards[0].execute("SELECT pg_catalog.pg_sleep(0.02)", &[]),
                "pause between polls",
            );
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().expect("a soak worker panicked");
        }
    });
    let took = started.elapsed();
    // A fresh connection: the chaos may have terminated the PL/Proxy
    // sessions of the one that enqueued.
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let seen = seen.into_inner().unwrap_or_else(PoisonError::into_inner);
    let chaos = chaos.into_inner().unwrap_or_else(PoisonError::into_inner);

    // Every item done, under its final epoch.
    let finals: BTreeMap<i64, i64> = common::pairs::<i64, i64>(
        &mut r,
        "SELECT id, epoch FROM workfence.items WHERE state = 'done'",
    )
    .into_iter()
    .collect();
    assert_eq!(finals.len() as i64, total, "every item done (seed {seed})");
    // No token handed out twice (ids are unique across shards, epochs per
    // shard: the token is the pair).
    let tokens: BTreeSet<(i64, i64)> = seen.claims.iter().map(|&(id, e, _)| (id, e)).collect();
    assert_eq!(
        tokens.len(),
        seen.claims.len(),
        "a token was handed out twice"
    );
    let claimer: BTreeMap<(i64, i64), usize> =
        seen.claims.iter().map(|&(id, e, w)| ((id, e), w)).collect();
    // At most one acknowledged finish per item, by the claimer of the
    // item's final epoch.
    let mut acks: BTreeMap<i64, Vec<(i64, usize)>> = BTreeMap::new();
    for &(id, epoch, w) in &seen.acked {
        acks.entry(id).or_default().push((epoch, w));
    }
    for (id, list) in &acks {
        assert_eq!(list.len(), 1, "item {id} finished twice: {list:?}");
        let (epoch, w) = list[0];
        assert_eq!(
            Some(&epoch),
            finals.get(id),
            "item {id} acked under a stale epoch"
        );
        assert_eq!(
            claimer.get(&(*id, epoch)),
            Some(&w),
            "item {id} acked by a non-claimer"
        );
    }
    // At most one effect per item, under its final epoch, by the worker
    // whose finish was acknowledged; an item without an effect is one
    // whose finish's outcome its worker could not learn.
    let effects: Vec<(i64, i64, i32)> = ok(
        r.query("SELECT item_id, epoch, worker FROM public.effects", &[]),
        "effects",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    let mut effect_of: BTreeMap<i64, (i64, i32)> = BTreeMap::new();
    for &(id, epoch, w) in &effects {
        assert!(
            effect_of.insert(id, (epoch, w)).is_none(),
            "item {id} has two effects (seed {seed})"
        );
        assert_eq!(
            Some(&epoch),
            finals.get(&id),
            "item {id}'s effect under a stale epoch"
        );
        assert_eq!(
            acks.get(&id).map(|l| l[0]),
            Some((epoch, w as usize)),
            "item {id}'s effect without its acknowledged finish"
        );
    }
    let unknown: BTreeSet<i64> = seen.unknown.iter().map(|&(id, _)| id).collect();
    let without: Vec<i64> = finals
        .keys()
        .filter(|id| !effect_of.contains_key(id))
        .copied()
        .collect();
    for id in &without {
        assert!(
            unknown.contains(id),
            "item {id} is done with no effect, and no worker lost a finish of it (seed {seed})"
        );
    }
    // The chaos happened, and the stalls were fenced.
    assert!(
        chaos.router_terminations > 0 && chaos.shard_terminations > 0 && chaos.abandoned > 0,
        "{chaos:?} (seed {seed})"
    );
    assert!(
        seen.stalls > 0 && seen.refusals > 0,
        "stalls {} refusals {}",
        seen.stalls,
        seen.refusals
    );
    println!(
        "router soak: {total} items over {} shards by {SOAK_WORKERS} workers sharing owner \
         {SOAK_OWNER:?} in {took:.1?}: claims={} acked={} effects={} refusals={} stalls={} \
         errors={} finishes of unknown outcome={} (items done without effect: {}); \
         chaos {chaos:?}; duplicates=0 lost=0 (seed {seed})",
        router.shards.len(),
        seen.claims.len(),
        seen.acked.len(),
        effects.len(),
        seen.refusals,
        seen.stalls,
        seen.errors,
        seen.unknown.len(),
        without.len(),
    );
}
