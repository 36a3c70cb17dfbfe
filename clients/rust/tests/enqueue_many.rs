//! `enqueue_many` (`work_enqueue_many`, from 0.12.0) against a real database: one `Enqueued`
//! per item in the items' order, existing and repeated keys, the shared options, claimability,
//! one statement's atomicity, and the server's refusals as `workfence::Error` variants.

mod common;

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio_postgres::Client;
use workfence::{EnqueueItem, EnqueueManyOptions, EnqueueOptions, Enqueued, Error, OnConflict};

/// How many items `queue` has.
async fn count(c: &Client, queue: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM workfence.items WHERE queue = $1",
        &[&queue],
    )
    .await
    .expect("count")
    .get(0)
}

/// Claims up to `max` items of `queue`: their ids.
async fn claim(c: &Client, queue: &str, max: i32) -> HashSet<i64> {
    c.query(
        "SELECT id FROM workfence.work_claim($1, 'bulk-test', interval '30 s', $2)",
        &[&queue, &max],
    )
    .await
    .expect("claim")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test]
async fn enqueue_many_returns_one_row_per_item_in_order_with_existing_and_repeated_keys() {
    let c = common::connect().await;
    let queue = common::unique("many_order");
    let existing = workfence::enqueue(
        &c,
        &queue,
        &json!({"n": "old"}),
        &EnqueueOptions::default().key("b"),
    )
    .await
    .expect("enqueue b");
    let items = [
        EnqueueItem::new(json!({"n": 1})).key("a"),
        EnqueueItem::new(json!({"n": 2})).key("b"), // the queue has it: returned, kept
        EnqueueItem::new(json!({"n": 3, "list": [1, 2]})), // no key: a UUIDv7
        EnqueueItem::new(json!({"n": 4})).key("a"), // repeats the first item's key
    ];
    let options = EnqueueManyOptions::default().priority(2).max_attempts(3);
    let rows = workfence::enqueue_many(&c, &queue, &items, &options)
        .await
        .expect("enqueue_many");
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows.iter().map(|r| r.inserted).collect::<Vec<_>>(),
        [true, false, true, false]
    );
    assert_eq!((rows[0].key.as_str(), rows[3].key.as_str()), ("a", "a"));
    assert_eq!(
        rows[1],
        Enqueued {
            id: existing.id,
            key: "b".to_owned(),
            inserted: false
        }
    );
    assert_eq!(
        rows[3].id, rows[0].id,
        "a repeated key finds the first item"
    );
    assert_eq!(rows[2].key.len(), 36, "a generated UUIDv7: {}", rows[2].key);
    let ids: HashSet<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(count(&c, &queue).await, 3);

    let kept = workfence::item(&c, &queue, "b")
        .await
        .expect("item")
        .expect("b");
    assert_eq!(kept.payload, json!({"n": "old"}), "keep: unchanged");
    assert_eq!((kept.priority, kept.max_attempts), (0, 25));
    let first = workfence::item(&c, &queue, "a")
        .await
        .expect("item")
        .expect("a");
    assert_eq!(first.payload, json!({"n": 1}), "the first of the call wins");
    assert_eq!(
        (first.priority, first.max_attempts, first.state.as_str()),
        (2, 3, "pending")
    );
    let generated = workfence::item_by_id(&c, rows[2].id)
        .await
        .expect("item_by_id")
        .expect("generated");
    assert_eq!(generated.key, rows[2].key);
    assert_eq!(generated.payload, json!({"n": 3, "list": [1, 2]}));
}

#[tokio::test]
async fn enqueue_many_items_are_claimable_and_take_their_run_at_and_group() {
    let c = common::connect().await;
    let queue = common::unique("many_claim");
    let later = SystemTime::now() + Duration::from_secs(3600);
    let odd = r#"odd "key", {3} \ ü"#;
    let items = [
        EnqueueItem::new(json!({"i": 0})).key("now-0"),
        EnqueueItem::new(json!({"i": 1})).key("later").run_at(later),
        EnqueueItem::new(json!({"i": 2}))
            .key("grouped")
            .group_key("customer-7"),
        EnqueueItem::new(json!({"s": r#"a "b", {c} \ d"#})).key(odd),
    ];
    let rows = workfence::enqueue_many(&c, &queue, &items, &EnqueueManyOptions::default())
        .await
        .expect("enqueue_many");
    assert_eq!(
        rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["now-0", "later", "grouped", odd]
    );
    assert!(rows.iter().all(|r| r.inserted));
    assert_eq!(
        claim(&c, &queue, 10).await,
        HashSet::from([rows[0].id, rows[2].id, rows[3].id]),
        "every due item is claimed, the later one not yet"
    );
    let pending = workfence::item(&c, &queue, "later")
        .await
        .expect("item")
        .expect("later");
    assert_eq!(pending.state, "pending");
    let off = pending
        .run_at
        .duration_since(later)
        .unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_millis(1), "run_at off by {off:?}");
    let group: Option<String> = c
        .query_one(
            "SELECT group_key FROM workfence.items WHERE id = $1",
            &[&rows[2].id],
        )
        .await
        .expect("group_key")
        .get(0);
    assert_eq!(group.as_deref(), Some("customer-7"));
    let odd_item = workfence::item(&c, &queue, odd)
        .await
        .expect("item")
        .expect("odd key");
    assert_eq!(odd_item.payload, json!({"s": r#"a "b", {c} \ d"#}));
}

#[tokio::test]
async fn enqueue_many_with_on_conflict_replace_changes_the_existing_item() {
    let c = common::connect().await;
    let queue = common::unique("many_replace");
    let existing = workfence::enqueue(
        &c,
        &queue,
        &json!({"v": 1}),
        &EnqueueOptions::default().key("debounced"),
    )
    .await
    .expect("enqueue");
    let items = [
        EnqueueItem::new(json!({"v": 2})).key("debounced"),
        EnqueueItem::new(json!({"v": 9})).key("fresh"),
    ];
    let replace = EnqueueManyOptions::default().on_conflict(OnConflict::Replace);
    let rows = workfence::enqueue_many(&c, &queue, &items, &replace)
        .await
        .expect("enqueue_many");
    assert_eq!((rows[0].id, rows[0].inserted), (existing.id, false));
    assert_eq!((rows[1].key.as_str(), rows[1].inserted), ("fresh", true));
    let item = workfence::item(&c, &queue, "debounced")
        .await
        .expect("item")
        .expect("debounced");
    assert_eq!(item.payload, json!({"v": 2}));
}

#[tokio::test]
async fn enqueue_many_commits_with_the_callers_transaction() {
    let mut c = common::connect().await;
    let queue = common::unique("many_tx");
    let items = [
        EnqueueItem::new(json!({})).key("t1"),
        EnqueueItem::new(json!({})),
    ];
    let tx = c.transaction().await.expect("BEGIN");
    let rows = workfence::enqueue_many(&tx, &queue, &items, &EnqueueManyOptions::default())
        .await
        .expect("enqueue_many");
    tx.rollback().await.expect("ROLLBACK");
    assert!(rows.iter().all(|r| r.inserted));
    assert_eq!(count(&c, &queue).await, 0, "rolled back with the caller");
    let none = workfence::enqueue_many(&c, &queue, &[], &EnqueueManyOptions::default())
        .await
        .expect("no items");
    assert!(none.is_empty());
}

#[tokio::test]
async fn enqueue_many_refusals_are_named_variants_and_enqueue_nothing() {
    let c = common::connect().await;
    let queue = common::unique("many_errors");
    let defaults = EnqueueManyOptions::default();
    // One bad item refuses the whole call: the statement enqueues all its items or none.
    let bad_key = [
        EnqueueItem::new(json!({})).key("fine"),
        EnqueueItem::new(json!({})).key(""),
    ];
    match workfence::enqueue_many(&c, &queue, &bad_key, &defaults).await {
        Err(e @ Error::InvalidArgument(..)) => {
            let server = e.server().expect("server error");
            assert_eq!(server.code, "22023");
            assert!(server.message.contains("key"), "{server}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let zero = EnqueueManyOptions::default().max_attempts(0);
    assert!(matches!(
        workfence::enqueue_many(&c, &queue, &[EnqueueItem::new(json!({}))], &zero).await,
        Err(Error::InvalidArgument(..))
    ));
    // Over 10,000 items: 22023, nothing enqueued.
    let too_many: Vec<EnqueueItem> = (0..10_001)
        .map(|i| EnqueueItem::new(json!({ "i": i })))
        .collect();
    match workfence::enqueue_many(&c, &queue, &too_many, &defaults).await {
        Err(e @ Error::InvalidArgument(..)) => {
            assert!(e.server().expect("server").message.contains("payloads"));
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(count(&c, &queue).await, 0);
    let no_group = [EnqueueItem::new(json!({})).group_key("")];
    assert!(matches!(
        workfence::enqueue_many(&c, &queue, &no_group, &defaults).await,
        Err(Error::InvalidArgument(..))
    ));
}

#[tokio::test]
async fn unequal_arrays_of_work_enqueue_many_are_invalid_argument() {
    // enqueue_many sends one element per item in every array, so it cannot send arrays of
    // unequal lengths; the server's refusal of them (22023) is the same InvalidArgument.
    let c = common::connect().await;
    let queue = common::unique("many_unequal");
    let refused = c
        .query(
            "SELECT * FROM workfence.work_enqueue_many($1, '{\"{}\",\"{}\"}'::jsonb[], \
             keys => ARRAY['only-one'])",
            &[&queue],
        )
        .await
        .expect_err("2 payloads and 1 key");
    match Error::from(refused) {
        e @ Error::InvalidArgument(..) => {
            let server = e.server().expect("server error");
            assert_eq!(server.code, "22023");
            assert!(server.message.contains("keys"), "{server}");
            assert!(server.detail.is_some() && server.hint.is_some());
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
