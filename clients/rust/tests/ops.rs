//! The enqueue helpers and the operator's calls against a real database, and the mapping of
//! the server's SQLSTATEs to `workfence::Error`.

mod common;

use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio_postgres::NoTls;
use workfence::{EnqueueOptions, Error, Limits};

#[tokio::test]
async fn enqueue_returns_the_item_and_repeating_a_key_changes_nothing() {
    let c = common::connect().await;
    let queue = common::unique("ops_enqueue");
    let first = workfence::enqueue(
        &c,
        &queue,
        &json!({"n": 1}),
        &EnqueueOptions::default().key("k1"),
    )
    .await
    .expect("enqueue");
    assert!(first.inserted);
    assert_eq!(first.key, "k1");
    let again = workfence::enqueue(
        &c,
        &queue,
        &json!({"n": 2}),
        &EnqueueOptions::default().key("k1"),
    )
    .await
    .expect("enqueue again");
    assert_eq!((again.id, again.inserted), (first.id, false));
    let item = workfence::item(&c, &queue, "k1")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!(item.payload, json!({"n": 1}), "the first payload is kept");
    assert_eq!(
        (item.state.as_str(), item.attempts, item.max_attempts),
        ("pending", 0, 25)
    );

    // No key: the server generates one (a UUIDv7), different each time.
    let a = workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default())
        .await
        .expect("a");
    let b = workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default())
        .await
        .expect("b");
    assert!(a.inserted && b.inserted && a.key != b.key && a.id != b.id);
    let by_id = workfence::item_by_id(&c, b.id)
        .await
        .expect("item_by_id")
        .expect("exists");
    assert_eq!(by_id.key, b.key);
    assert_eq!(workfence::item_by_id(&c, -1).await.expect("missing"), None);
    assert_eq!(
        workfence::item(&c, &queue, "nope").await.expect("missing"),
        None
    );
}

#[tokio::test]
async fn enqueue_options_reach_the_item_and_can_join_the_callers_transaction() {
    let mut c = common::connect().await;
    let queue = common::unique("ops_options");
    let later = SystemTime::now() + Duration::from_secs(3600);
    let options = EnqueueOptions::default()
        .key("later")
        .run_at(later)
        .priority(-5)
        .max_attempts(3)
        .max_run(Duration::from_secs(90));
    let tx = c.transaction().await.expect("BEGIN");
    workfence::enqueue(&tx, &queue, &json!({"x": true}), &options)
        .await
        .expect("enqueue");
    tx.rollback().await.expect("ROLLBACK");
    assert_eq!(
        workfence::item(&c, &queue, "later").await.expect("item"),
        None,
        "rolled back with the caller"
    );

    workfence::enqueue(&c, &queue, &json!({"x": true}), &options)
        .await
        .expect("enqueue");
    let item = workfence::item(&c, &queue, "later")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!((item.priority, item.max_attempts), (-5, 3));
    assert_eq!(item.max_run, Some(Duration::from_secs(90)));
    let off = item
        .run_at
        .duration_since(later)
        .unwrap_or_else(|e| e.duration());
    assert!(
        off < Duration::from_millis(1),
        "run_at {:?} vs {later:?}",
        item.run_at
    );
    // Not due: a claim takes nothing.
    let claimed = c
        .query(
            "SELECT id FROM workfence.work_claim($1, 'me', interval '30 s')",
            &[&queue],
        )
        .await
        .expect("claim");
    assert!(claimed.is_empty());
}

#[tokio::test]
async fn the_operators_calls_change_what_they_say() {
    let c = common::connect().await;
    let queue = common::unique("ops_operate");
    workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default().key("k"))
        .await
        .expect("enqueue");
    assert!(workfence::pause(&c, &queue).await.expect("pause"));
    assert!(
        !workfence::pause(&c, &queue).await.expect("pause again"),
        "already paused"
    );
    let claimed = c
        .query(
            "SELECT id FROM workfence.work_claim($1, 'me', interval '30 s')",
            &[&queue],
        )
        .await
        .expect("claim");
    assert!(claimed.is_empty(), "a paused queue hands nothing out");
    assert!(workfence::resume(&c, &queue).await.expect("resume"));
    assert!(!workfence::resume(&c, &queue).await.expect("resume again"));

    let soon = SystemTime::now() + Duration::from_secs(600);
    assert!(workfence::reschedule(&c, &queue, "k", soon)
        .await
        .expect("reschedule"));
    // By the server's clock: an hour after the server's now(), whatever this machine's says.
    assert!(
        workfence::reschedule_in(&c, &queue, "k", Duration::from_secs(3600))
            .await
            .expect("reschedule_in")
    );
    let hours_ahead: f64 = c
        .query_one(
            "SELECT (extract(epoch FROM i.run_at - now()) / 3600)::float8 \
               FROM workfence.work_item($1, 'k') AS i",
            &[&queue],
        )
        .await
        .expect("run_at")
        .get(0);
    assert!(
        (0.99..=1.0).contains(&hours_ahead),
        "reschedule_in(1 h) set run_at {hours_ahead} h after the server's now()"
    );
    assert!(workfence::cancel(&c, &queue, "k").await.expect("cancel"));
    assert!(!workfence::cancel(&c, &queue, "k")
        .await
        .expect("cancel again"));
    assert!(!workfence::reschedule(&c, &queue, "k", soon)
        .await
        .expect("reschedule cancelled"));
    assert_eq!(
        workfence::item(&c, &queue, "k")
            .await
            .expect("item")
            .expect("exists")
            .state,
        "cancelled"
    );
    assert!(workfence::retry(&c, &queue, "k", None)
        .await
        .expect("retry"));
    assert_eq!(
        workfence::item(&c, &queue, "k")
            .await
            .expect("item")
            .expect("exists")
            .state,
        "pending"
    );
    assert!(!workfence::retry(&c, &queue, "missing", None)
        .await
        .expect("retry missing"));
}

#[tokio::test]
async fn server_errors_become_their_named_variants_with_message_and_detail() {
    let c = common::connect().await;
    // 22023: an empty queue name.
    match workfence::enqueue(&c, "", &json!({}), &EnqueueOptions::default()).await {
        Err(e @ Error::InvalidArgument(..)) => {
            let server = e.server().expect("server error");
            assert_eq!(server.code, "22023");
            assert!(!server.message.is_empty());
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // 22023: max_attempts out of 1..1000.
    let queue = common::unique("ops_errors");
    let zero = EnqueueOptions::default().max_attempts(0);
    assert!(matches!(
        workfence::enqueue(&c, &queue, &json!({}), &zero).await,
        Err(Error::InvalidArgument(..))
    ));
    // 22004: a NULL argument.
    let null = c
        .query("SELECT workfence.work_pause(NULL)", &[])
        .await
        .expect_err("NULL queue");
    assert!(matches!(Error::from(null), Error::NullArgument(..)));
    // 25P01: work_assert of a current token outside a transaction block.
    let claimed = {
        workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default())
            .await
            .expect("enqueue");
        c.query_one(
            "SELECT id, epoch FROM workfence.work_claim($1, 'me', interval '30 s')",
            &[&queue],
        )
        .await
        .expect("claim")
    };
    let (id, epoch): (i64, i64) = (claimed.get(0), claimed.get(1));
    let outside = c
        .query("SELECT workfence.work_assert($1, 'me', $2)", &[&id, &epoch])
        .await
        .expect_err("assert outside a transaction");
    assert!(matches!(Error::from(outside), Error::NoTransaction(..)));
    // 55000: work_assert of a token that is not current, with DETAIL.
    let stale = epoch - 1;
    c.batch_execute("BEGIN").await.expect("BEGIN");
    let e = Error::from(
        c.query("SELECT workfence.work_assert($1, 'me', $2)", &[&id, &stale])
            .await
            .expect_err("stale token"),
    );
    c.batch_execute("ROLLBACK").await.expect("ROLLBACK");
    assert!(e.is_lease_lost(), "{e:?}");
    assert!(
        e.server().and_then(|s| s.detail.as_ref()).is_some(),
        "55000 carries a DETAIL"
    );
    // 57014: a cancelled statement.
    c.batch_execute("SET statement_timeout = '20ms'")
        .await
        .expect("SET");
    let cancelled = c
        .query("SELECT pg_sleep(5)", &[])
        .await
        .expect_err("timed out");
    c.batch_execute("RESET statement_timeout")
        .await
        .expect("RESET");
    assert!(matches!(Error::from(cancelled), Error::Cancelled(..)));
}

#[tokio::test]
async fn enqueue_with_a_group_key_puts_the_item_in_that_group() {
    let c = common::connect().await;
    let queue = common::unique("ops_group");
    let grouped = EnqueueOptions::default().key("d1").group_key("customer-42");
    workfence::enqueue(&c, &queue, &json!({"op": "debit"}), &grouped)
        .await
        .expect("grouped");
    workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default().key("d2"))
        .await
        .expect("plain");
    let rows: Vec<(String, Option<String>)> = c
        .query(
            "SELECT key, group_key FROM workfence.items WHERE queue = $1 ORDER BY id",
            &[&queue],
        )
        .await
        .expect("items")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("d1".to_owned(), Some("customer-42".to_owned())),
            ("d2".to_owned(), None)
        ]
    );
    let empty = EnqueueOptions::default().group_key("");
    assert!(matches!(
        workfence::enqueue(&c, &queue, &json!({}), &empty).await,
        Err(Error::InvalidArgument(..))
    ));
}

/// The queue's (concurrency, rate, per in seconds) in `workfence.queues`, if it has a row.
async fn limits_of(
    c: &tokio_postgres::Client,
    queue: &str,
) -> Option<(Option<i32>, Option<i32>, Option<f64>)> {
    c.query_opt(
        "SELECT concurrency, rate, extract(epoch FROM per)::float8 FROM workfence.queues \
         WHERE queue = $1",
        &[&queue],
    )
    .await
    .expect("queues")
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

#[tokio::test]
async fn limit_sets_replaces_and_lifts_the_queues_limits() {
    let c = common::connect().await;
    let queue = common::unique("ops_limit");
    let both = Limits::default()
        .concurrency(5)
        .rate(100, Duration::from_secs(60));
    workfence::limit(&c, &queue, &both).await.expect("limit");
    assert_eq!(
        limits_of(&c, &queue).await,
        Some((Some(5), Some(100), Some(60.0)))
    );
    let rate = Limits::default().rate(3, Duration::from_millis(500));
    workfence::limit(&c, &queue, &rate).await.expect("rate");
    assert_eq!(
        limits_of(&c, &queue).await,
        Some((None, Some(3), Some(0.5)))
    );
    workfence::limit(&c, &queue, &Limits::default().concurrency(2))
        .await
        .expect("concurrency");
    workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default())
        .await
        .expect("enqueue");
    let stats = c
        .query_one(
            "SELECT concurrency, rate FROM workfence.work_queue_stats WHERE queue = $1",
            &[&queue],
        )
        .await
        .expect("stats");
    assert_eq!(
        (
            stats.get::<_, Option<i32>>(0),
            stats.get::<_, Option<i32>>(1)
        ),
        (Some(2), None)
    );
    workfence::limit(&c, &queue, &Limits::default())
        .await
        .expect("lift");
    let lifted = limits_of(&c, &queue).await;
    assert!(
        lifted.is_none_or(|(concurrency, rate, _)| concurrency.is_none() && rate.is_none()),
        "{lifted:?}"
    );
    match workfence::limit(&c, &queue, &Limits::default().concurrency(0)).await {
        Err(e @ Error::InvalidArgument(..)) => {
            assert!(e.server().expect("server").message.contains("concurrency"));
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let zero_per = Limits::default().rate(1, Duration::ZERO);
    assert!(matches!(
        workfence::limit(&c, &queue, &zero_per).await,
        Err(Error::InvalidArgument(..))
    ));
}

#[tokio::test]
async fn without_a_group_key_enqueue_works_against_a_0_9_0_database() {
    let c = common::connect().await;
    let name = common::unique("workfence_rs_090");
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("CREATE DATABASE");
    let mut config: tokio_postgres::Config = common::dsn().parse().expect("dsn");
    config.dbname(&name);
    let (old, connection) = config.connect(NoTls).await.expect("connect");
    let connection = tokio::spawn(connection);
    old.batch_execute("CREATE EXTENSION pg_workfence VERSION '0.9.0'")
        .await
        .expect("0.9.0");
    let queue = common::unique("ops_090");
    let options = EnqueueOptions::default()
        .key("k")
        .priority(1)
        .max_attempts(3)
        .max_run(Duration::from_secs(60));
    let made = workfence::enqueue(&old, &queue, &json!({"n": 1}), &options).await;
    let grouped = workfence::enqueue(
        &old,
        &queue,
        &json!({}),
        &EnqueueOptions::default().group_key("g"),
    )
    .await;
    drop(old);
    let _ = connection.await;
    c.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .expect("DROP DATABASE");
    assert!(made.expect("enqueue into 0.9.0").inserted);
    // 0.9.0's work_enqueue has no group_key: 42883, undefined function.
    let e = grouped.expect_err("group_key on 0.9.0");
    assert_eq!(e.code(), Some("42883"), "{e:?}");
}

/// The queue's `per_group` as `work_queue_stats` shows it (`None`: no row, or not set).
async fn per_group_of(c: &tokio_postgres::Client, queue: &str) -> Option<i32> {
    c.query_opt(
        "SELECT per_group FROM workfence.work_queue_stats WHERE queue = $1",
        &[&queue],
    )
    .await
    .expect("work_queue_stats")
    .and_then(|r| r.get(0))
}

#[tokio::test]
async fn limit_sets_per_group_and_a_call_without_it_resets_it() {
    let c = common::connect().await;
    let queue = common::unique("ops_per_group");
    let grouped = Limits::default().concurrency(5).per_group(3);
    workfence::limit(&c, &queue, &grouped)
        .await
        .expect("per_group");
    assert_eq!(per_group_of(&c, &queue).await, Some(3));
    assert_eq!(limits_of(&c, &queue).await, Some((Some(5), None, None)));
    // A call sets every limit: without per_group, the groups are serial again.
    workfence::limit(&c, &queue, &Limits::default().concurrency(5))
        .await
        .expect("concurrency alone");
    assert_eq!(per_group_of(&c, &queue).await, None);
    workfence::limit(&c, &queue, &Limits::default().per_group(10000))
        .await
        .expect("the largest per_group");
    assert_eq!(per_group_of(&c, &queue).await, Some(10000));
    for bad in [0, 10001] {
        match workfence::limit(&c, &queue, &Limits::default().per_group(bad)).await {
            Err(e @ Error::InvalidArgument(..)) => {
                assert!(e.server().expect("server").message.contains("per_group"));
            }
            other => panic!("per_group {bad}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(per_group_of(&c, &queue).await, Some(10000));
    workfence::limit(&c, &queue, &Limits::default())
        .await
        .expect("lift");
    assert_eq!(per_group_of(&c, &queue).await, None);
}

#[tokio::test]
async fn without_per_group_limit_works_against_a_0_11_0_database() {
    let c = common::connect().await;
    let name = common::unique("workfence_rs_0110");
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("CREATE DATABASE");
    let mut config: tokio_postgres::Config = common::dsn().parse().expect("dsn");
    config.dbname(&name);
    let (old, connection) = config.connect(NoTls).await.expect("connect");
    let connection = tokio::spawn(connection);
    old.batch_execute("CREATE EXTENSION pg_workfence VERSION '0.11.0'")
        .await
        .expect("0.11.0");
    let queue = common::unique("ops_0110");
    let limits = Limits::default()
        .concurrency(2)
        .rate(10, Duration::from_secs(60));
    let set = workfence::limit(&old, &queue, &limits).await;
    let shown = limits_of(&old, &queue).await;
    let grouped = workfence::limit(&old, &queue, &Limits::default().per_group(2)).await;
    drop(old);
    let _ = connection.await;
    c.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .expect("DROP DATABASE");
    set.expect("a limit without per_group on 0.11.0");
    assert_eq!(shown, Some((Some(2), Some(10), Some(60.0))));
    // 0.11.0's work_limit has no per_group: 42883, undefined function.
    let e = grouped.expect_err("per_group on 0.11.0");
    assert_eq!(e.code(), Some("42883"), "{e:?}");
}
