//! `work_enqueue_many` (from 0.12.0, issue 38), the bulk enqueue, from real
//! client connections: what a producer that hands many items over in one
//! call relies on (docs/contract.md, `work_enqueue_many`).
//!
//! What it proves, each through both of the server's paths (items without a
//! group under `on_conflict => 'keep'` are one `INSERT ... SELECT`; with a
//! group, or another `on_conflict`, each item goes through `work_enqueue`'s
//! own path):
//! - a row per payload, in input order, each what `work_enqueue` of that
//!   element would return after the elements before it: a new key inserted
//!   (ids growing in input order), an existing key and a key repeated in the
//!   call returned with `inserted = false` and left as they were, a NULL key
//!   a new UUIDv7; priority, max_attempts, run_at and groups as given;
//! - a group's items are claimed in their order, one at a time, as if each
//!   had been enqueued with `work_enqueue`;
//! - `on_conflict => 'replace'` debounces (the last element of a key wins),
//!   `preserve_run_at` keeps the run_at, and a finished item runs again;
//! - two sessions enqueueing overlapping keys at once: the second waits on
//!   the first's uncommitted keys (ordered by a held transaction and
//!   `pg_locks`, no sleeps), and each key ends with exactly one item, each
//!   call's rows saying who inserted it (the first's commit), or the second
//!   inserting them all (its rollback);
//! - a long poll waiting on the queue is woken by the call's commit, one
//!   waiter per inserted item, long before its wait ends;
//! - one `work_enqueued` notification per call that inserted a due item,
//!   at its commit, none for a call that inserted none;
//! - `work_queue_counters` counts the items inserted (not the existing or
//!   repeated keys, nothing for a rolled-back call) and `work_queue_stats`
//!   their states;
//! - a call refused with 42501 changes nothing in the database (no item, no
//!   id drawn): without an `enqueue` grant, and when an element would run a
//!   cancelled item again (`on_conflict`) without an `operate` grant, even
//!   after elements that were new keys.
//!
//! Needs the extension installed (`scripts/test.sh`).

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::ok;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, GenericClient};
use serde_json::{json, Value};
use workfence_harness::calls::{self, generated, Enqueue};
use workfence_harness::Cluster;

/// A `run_at` long past, and two far ahead (as the server renders them in
/// UTC, which the tests' sessions use).
const PAST: &str = "2000-01-01 00:00:00+00";
const LATER: &str = "2100-01-01 00:00:00+00";
const LATER_STILL: &str = "2100-01-02 00:00:00+00";

/// A long poll's `wait`, far longer than any wake-up may take, and the bound
/// on a wake-up (a waiter that was not woken returns after the whole wait).
const LONG_WAIT: &str = "60 seconds";
const PROMPT: Duration = Duration::from_secs(20);

/// One cluster for this file's tests, with the library preloaded: the
/// counters live in shared memory.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_built(
        |builder| builder.setting("shared_preload_libraries", "pg_workfence"),
        |_| {},
    )
}

/// A fresh database `name` with the extension, and a connection to it (in
/// UTC, so that times read back as [`PAST`] and [`LATER`] are written).
fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    connect(cluster, name)
}

fn connect(cluster: &Cluster, name: &str) -> Client {
    let mut c = ok(cluster.connect_to(name), "connecting");
    ok(c.batch_execute("SET TimeZone = 'UTC'"), "SET TimeZone");
    c
}

/// The two paths of the server, which every behaviour here must share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// No group, `keep`: one `INSERT ... SELECT`.
    AtOnce,
    /// Every element in a group: item by item.
    Grouped,
}

/// A `work_enqueue_many` call: its arguments, `None` for the defaults.
#[derive(Clone, Default)]
struct Many<'a> {
    queue: &'a str,
    payloads: Vec<Value>,
    keys: Option<Vec<Option<&'a str>>>,
    run_at: Option<Vec<Option<&'a str>>>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    groups: Option<Vec<Option<&'a str>>>,
    on_conflict: Option<&'a str>,
}

impl<'a> Many<'a> {
    /// The items of `keys` (a NULL element: a new key), payloads
    /// `{"n": <element>}`.
    fn new(queue: &'a str, keys: &[Option<&'a str>]) -> Many<'a> {
        Many {
            queue,
            payloads: (0..keys.len()).map(|n| json!({ "n": n })).collect(),
            keys: Some(keys.to_vec()),
            ..Many::default()
        }
    }

    /// Every element in group `group` ([`Path::Grouped`]), or none.
    fn on(mut self, path: Path, group: &'a str) -> Many<'a> {
        if path == Path::Grouped {
            self.groups = Some(vec![Some(group); self.payloads.len()]);
        }
        self
    }

    fn payloads(mut self, payloads: Vec<Value>) -> Many<'a> {
        self.payloads = payloads;
        self
    }

    fn run_at(mut self, run_at: &[Option<&'a str>]) -> Many<'a> {
        self.run_at = Some(run_at.to_vec());
        self
    }

    fn on_conflict(mut self, on_conflict: &'a str) -> Many<'a> {
        self.on_conflict = Some(on_conflict);
        self
    }

    /// The call's rows: (id, key, inserted).
    fn call(
        &self,
        c: &mut impl GenericClient,
    ) -> Result<Vec<(i64, String, bool)>, postgres::Error> {
        let rows = generated::work_enqueue_many(
            c,
            self.queue,
            &self.payloads,
            self.keys.as_deref(),
            self.run_at.as_deref(),
            self.priority,
            self.max_attempts,
            self.groups.as_deref(),
            self.on_conflict,
        )?;
        Ok(rows
            .into_iter()
            .map(|r| {
                (
                    r.id.expect("an id"),
                    r.key.expect("a key"),
                    r.inserted.expect("inserted"),
                )
            })
            .collect())
    }

    /// [`Many::call`], failing the test on an error.
    fn rows(&self, c: &mut impl GenericClient) -> Vec<(i64, String, bool)> {
        ok(self.call(c), "work_enqueue_many")
    }
}

/// An item as the table has it.
#[derive(Debug, PartialEq)]
struct Row {
    id: i64,
    payload: Value,
    state: String,
    attempts: i32,
    priority: i32,
    max_attempts: i32,
    run_at: String,
    group: Option<String>,
}

/// The item `key` of `queue`, read from the table.
fn row(c: &mut Client, queue: &str, key: &str) -> Row {
    let r = ok(
        c.query_one(
            "SELECT id, payload, state::text, attempts, priority, max_attempts, run_at::text, \
                    group_key
               FROM workfence.items WHERE queue = $1 AND key = $2",
            &[&queue, &key],
        ),
        "the item",
    );
    Row {
        id: r.get(0),
        payload: r.get(1),
        state: r.get(2),
        attempts: r.get(3),
        priority: r.get(4),
        max_attempts: r.get(5),
        run_at: r.get(6),
        group: r.get(7),
    }
}

/// The queue's items: (key, id), by key.
fn keys_and_ids(c: &mut Client, queue: &str) -> Vec<(String, i64)> {
    ok(
        c.query(
            "SELECT key, id FROM workfence.items WHERE queue = $1 ORDER BY key",
            &[&queue],
        ),
        "the queue's items",
    )
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Whether `run_at` (as read back) is due on the server's clock.
fn due(c: &mut Client, run_at: &str) -> bool {
    common::scalar(
        c,
        "SELECT $1::text::timestamptz <= pg_catalog.clock_timestamp()",
        &[&run_at],
    )
}

#[test]
fn rows_come_in_input_order_each_as_work_enqueue_would_return_it() {
    let cluster = cluster();
    let mut c = database(&cluster, "bulk_rows");
    for (path, q) in [(Path::AtOnce, "rows"), (Path::Grouped, "rows_grouped")] {
        let b = common::enqueue_new(&mut c, &Enqueue::new(q).key("b").payload(json!("old")));
        let mut call = Many::new(q, &[Some("a"), Some("b"), None, Some("a"), Some("c")])
            .on(path, "g")
            .run_at(&[None, None, Some(LATER), Some(LATER_STILL), Some(PAST)]);
        call.priority = Some(5);
        call.max_attempts = Some(3);
        let rows = call.rows(&mut c);
        let keys: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
        let inserted: Vec<bool> = rows.iter().map(|r| r.2).collect();
        assert_eq!(rows.len(), 5, "{path:?}: a row per payload: {rows:?}");
        assert_eq!(
            inserted,
            [true, false, true, false, true],
            "{path:?}: a, the existing b, a new key, a again, c: {rows:?}"
        );
        assert_eq!(
            [keys[0], keys[1], keys[3], keys[4]],
            ["a", "b", "a", "c"],
            "{path:?}: the keys in input order"
        );
        // A NULL key: a new UUIDv7, as work_enqueue gives.
        let uuid = keys[2];
        assert!(
            uuid.len() == 36 && uuid.as_bytes()[14] == b'7',
            "{path:?}: a NULL key is a UUIDv7: {uuid:?}"
        );
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(ids[1], b, "{path:?}: the existing item's id");
        assert_eq!(ids[3], ids[0], "{path:?}: a repeated key: the first's item");
        assert!(
            b < ids[0] && ids[0] < ids[2] && ids[2] < ids[4],
            "{path:?}: the new ids grow in input order: {ids:?}"
        );

        let group = (path == Path::Grouped).then(|| "g".to_string());
        // The first element of a key made the item; the later one changed
        // nothing (not the payload, not the run_at).
        let a = row(&mut c, q, "a");
        assert_eq!(
            (
                &a.payload,
                &a.state,
                a.attempts,
                a.priority,
                a.max_attempts,
                &a.group
            ),
            (&json!({"n": 0}), &"pending".to_string(), 0, 5, 3, &group),
            "{path:?}: a is the first element's"
        );
        assert!(due(&mut c, &a.run_at), "{path:?}: a NULL run_at is now");
        // The existing item is as it was.
        let old = row(&mut c, q, "b");
        assert_eq!(
            (&old.payload, old.priority, old.max_attempts, &old.group),
            (&json!("old"), 0, 25, &None),
            "{path:?}: b is left as it was"
        );
        let new = row(&mut c, q, uuid);
        assert_eq!(
            (&new.payload, new.run_at.as_str()),
            (&json!({"n": 2}), LATER),
            "{path:?}"
        );
        let past = row(&mut c, q, "c");
        assert_eq!(
            (&past.payload, past.run_at.as_str()),
            (&json!({"n": 4}), PAST),
            "{path:?}"
        );
        assert_eq!(keys_and_ids(&mut c, q).len(), 4, "{path:?}: four items");

        // No payloads: no rows, nothing added.
        let none = Many::new(q, &[]).on(path, "g").rows(&mut c);
        assert_eq!(none, vec![], "{path:?}: no payloads, no rows");
        assert_eq!(keys_and_ids(&mut c, q).len(), 4, "{path:?}");
    }
}

#[test]
fn a_groups_items_are_claimed_in_their_order_one_at_a_time() {
    let cluster = cluster();
    let mut c = database(&cluster, "bulk_groups");
    let q = "groups";
    // One item of group g enqueued before, then the call's: g's order is
    // g0, g1, g2, g3; h1 has a group of its own.
    common::enqueue_new(&mut c, &Enqueue::new(q).key("g0").group_key("g"));
    let mut call = Many::new(q, &[Some("g1"), Some("h1"), Some("g2"), Some("g3")]);
    call.groups = Some(vec![Some("g"), Some("h"), Some("g"), Some("g")]);
    assert!(call.rows(&mut c).iter().all(|r| r.2), "all inserted");

    let claim = |c: &mut Client| -> Vec<calls::Claim> {
        ok(
            calls::claim(c, q, "w", "1 hour", Some(10), None),
            "work_claim",
        )
    };
    let keys = |claims: &[calls::Claim]| -> Vec<String> {
        let mut keys: Vec<String> = claims.iter().map(|c| c.key.clone()).collect();
        keys.sort();
        keys
    };
    // One item per group at a time: g's first, and h's.
    let first = claim(&mut c);
    assert_eq!(keys(&first), ["g0", "h1"], "a batch takes one per group");
    assert_eq!(keys(&claim(&mut c)), Vec::<String>::new(), "g is held");
    let mut held = first.into_iter().find(|c| c.key == "g0").expect("g0");
    for next in ["g1", "g2", "g3"] {
        assert!(ok(calls::finish(&mut c, &held.token("w"), None), "finish"));
        let claimed = claim(&mut c);
        assert_eq!(keys(&claimed), [next], "g's next in order");
        assert_eq!(keys(&claim(&mut c)), Vec::<String>::new(), "g is held");
        held = claimed.into_iter().next().expect("one");
    }
}

#[test]
fn on_conflict_replace_debounces_and_preserve_run_at_keeps_the_time() {
    let cluster = cluster();
    let mut c = database(&cluster, "bulk_replace");
    for (path, q) in [
        (Path::AtOnce, "debounce"),
        (Path::Grouped, "debounce_grouped"),
    ] {
        let first = Many::new(q, &[Some("a"), Some("b")])
            .on(path, "g")
            .run_at(&[Some(LATER), Some(LATER)])
            .rows(&mut c);
        let (a, b) = (first[0].0, first[1].0);
        // Replace: the last element of a key wins, payload and run_at; the
        // keys keep their items.
        let replaced = Many::new(q, &[Some("a"), Some("a"), Some("b")])
            .on(path, "g")
            .payloads(vec![json!("a1"), json!("a2"), json!("b1")])
            .run_at(&[Some(LATER), Some(LATER_STILL), None])
            .on_conflict("replace")
            .rows(&mut c);
        assert_eq!(
            replaced,
            [
                (a, "a".into(), false),
                (a, "a".into(), false),
                (b, "b".into(), false)
            ],
            "{path:?}"
        );
        let item = row(&mut c, q, "a");
        assert_eq!(
            (&item.payload, item.run_at.as_str(), item.state.as_str()),
            (&json!("a2"), LATER_STILL, "pending"),
            "{path:?}: a debounced to its last element"
        );
        let item = row(&mut c, q, "b");
        assert_eq!(item.payload, json!("b1"), "{path:?}");
        assert!(due(&mut c, &item.run_at), "{path:?}: b due now");
        // Preserve the run_at: the payload only.
        Many::new(q, &[Some("a")])
            .on(path, "g")
            .payloads(vec![json!("a3")])
            .on_conflict("preserve_run_at")
            .rows(&mut c);
        let item = row(&mut c, q, "a");
        assert_eq!(
            (&item.payload, item.run_at.as_str()),
            (&json!("a3"), LATER_STILL),
            "{path:?}: preserve_run_at"
        );
        // Keep: nothing changes.
        Many::new(q, &[Some("a")])
            .on(path, "g")
            .payloads(vec![json!("a4")])
            .rows(&mut c);
        assert_eq!(row(&mut c, q, "a").payload, json!("a3"), "{path:?}: keep");
        // A finished item runs again, attempts afresh.
        let token = ok(calls::claim_key(&mut c, q, "b", "w", "1 hour"), "claim b")
            .expect("b is due")
            .token("w");
        assert!(ok(calls::finish(&mut c, &token, None), "finish b"));
        let again = Many::new(q, &[Some("b")])
            .on(path, "g")
            .payloads(vec![json!("b2")])
            .on_conflict("replace")
            .rows(&mut c);
        assert_eq!(again, [(b, "b".into(), false)], "{path:?}");
        let item = row(&mut c, q, "b");
        assert_eq!(
            (&item.payload, item.state.as_str(), item.attempts),
            (&json!("b2"), "pending", 0),
            "{path:?}: b runs again"
        );
        assert_eq!(keys_and_ids(&mut c, q), [("a".into(), a), ("b".into(), b)]);
    }
}

/// How the first of two overlapping calls ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Commit,
    Rollback,
}

#[test]
fn two_sessions_with_overlapping_keys_end_with_one_item_per_key() {
    let cluster = cluster();
    let db = "bulk_race";
    let mut observer = database(&cluster, db);
    let modes = [
        (Path::AtOnce, None),
        (Path::Grouped, None),
        (Path::AtOnce, Some("replace")),
    ];
    for (n, (path, on_conflict)) in modes.into_iter().enumerate() {
        for end in [End::Commit, End::Rollback] {
            let q = format!("race{n}_{end:?}");
            let q = q.as_str();
            let call = |keys: &[Option<&'static str>], who: &str| {
                let mut call = Many::new(q, keys)
                    .on(path, "g")
                    .payloads(vec![json!(who); keys.len()]);
                call.on_conflict = on_conflict;
                call
            };
            let mut first = connect(&cluster, db);
            let mut second = connect(&cluster, db);
            let (first_pid, second_pid) = (
                common::backend_pid(&mut first),
                common::backend_pid(&mut second),
            );
            // The first call's transaction stays open: its keys are
            // inserted, not committed.
            ok(first.batch_execute("BEGIN"), "BEGIN");
            let mine = call(&[Some("x"), Some("y"), Some("z")], "first").rows(&mut first);
            assert!(mine.iter().all(|r| r.2), "the first inserts x, y, z");
            let theirs = thread::scope(|s| {
                let racing = call(&[Some("z"), Some("w"), Some("x")], "second");
                let second = s.spawn(move || racing.call(&mut second));
                // The second waits for the first's transaction, on a key
                // the first inserted.
                common::wait_until_blocked(&mut observer, second_pid, first_pid);
                let on_a_key: bool = common::scalar(
                    &mut observer,
                    "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks
                                     WHERE pid = $1 AND NOT granted
                                       AND locktype = 'transactionid')",
                    &[&second_pid],
                );
                assert!(on_a_key, "the second waits on the first's row");
                let finish = match end {
                    End::Commit => "COMMIT",
                    End::Rollback => "ROLLBACK",
                };
                ok(first.batch_execute(finish), finish);
                ok(second.join().expect("second thread"), "the second call")
            });
            let what = format!("{path:?}, {on_conflict:?}, the first's {end:?}");
            let id = |rows: &[(i64, String, bool)], key: &str| {
                rows.iter().find(|r| r.1 == key).expect("a row").0
            };
            let items = keys_and_ids(&mut observer, q);
            match end {
                End::Commit => {
                    // x and z are the first's; the second inserted w alone.
                    let inserted: Vec<bool> = theirs.iter().map(|r| r.2).collect();
                    assert_eq!(inserted, [false, true, false], "{what}: {theirs:?}");
                    assert_eq!(id(&theirs, "z"), id(&mine, "z"), "{what}");
                    assert_eq!(id(&theirs, "x"), id(&mine, "x"), "{what}");
                    assert_eq!(
                        items,
                        [
                            ("w".into(), id(&theirs, "w")),
                            ("x".into(), id(&mine, "x")),
                            ("y".into(), id(&mine, "y")),
                            ("z".into(), id(&mine, "z")),
                        ],
                        "{what}: one item per key"
                    );
                    // Kept, the first's payload; replaced, the second's.
                    let payload = if on_conflict.is_some() {
                        "second"
                    } else {
                        "first"
                    };
                    for key in ["x", "z"] {
                        let item = row(&mut observer, q, key);
                        assert_eq!(item.payload, json!(payload), "{what}: {key}");
                    }
                }
                End::Rollback => {
                    // Nothing of the first's is left: the second inserted
                    // every key.
                    assert!(theirs.iter().all(|r| r.2), "{what}: {theirs:?}");
                    assert_eq!(
                        items,
                        [
                            ("w".into(), id(&theirs, "w")),
                            ("x".into(), id(&theirs, "x")),
                            ("z".into(), id(&theirs, "z")),
                        ],
                        "{what}: one item per key"
                    );
                }
            }
        }
    }
}

#[test]
fn a_long_poll_is_woken_by_the_calls_commit() {
    let cluster = cluster();
    let db = "bulk_wake";
    let mut main = database(&cluster, db);
    for (path, q) in [(Path::AtOnce, "wake"), (Path::Grouped, "wake_grouped")] {
        thread::scope(|s| {
            // Two claimers, each taking one item, asleep on the empty queue.
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let mut c = common::connect_long_poller(&cluster, db);
                    let pid = common::backend_pid(&mut c);
                    let waiter = s.spawn(move || {
                        let claims =
                            calls::claim(&mut c, q, "w", "1 hour", Some(1), Some(LONG_WAIT));
                        (claims, Instant::now())
                    });
                    common::wait_until_waiting(&mut main, pid);
                    (pid, waiter)
                })
                .collect();
            // Two items (in two groups: both claimable at once), not
            // committed: both claimers sleep on.
            let mut tx = ok(main.transaction(), "BEGIN");
            let mut call = Many::new(q, &[Some("a"), Some("b")]);
            if path == Path::Grouped {
                call.groups = Some(vec![Some("g"), Some("h")]);
            }
            let rows = call.rows(&mut tx);
            ok(tx.commit(), "COMMIT");
            let committed = Instant::now();
            let mut got: Vec<i64> = Vec::new();
            for (pid, waiter) in waiters {
                let (claims, at) = waiter.join().expect("claimer thread");
                let claims = ok(claims, "the waiting claim");
                let latency = at.saturating_duration_since(committed);
                println!("bulk: {path:?}: call's commit -> claim of backend {pid} in {latency:?}");
                assert_eq!(claims.len(), 1, "{path:?}: each waiter gets an item");
                assert!(latency < PROMPT, "{path:?}: woken after {latency:?}");
                got.push(claims[0].id);
            }
            got.sort_unstable();
            let mut ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
            ids.sort_unstable();
            assert_eq!(got, ids, "{path:?}: the call's two items, one each");
        });
    }
}

#[test]
fn one_notification_per_call_that_inserted_a_due_item() {
    const CHANNEL: &str = "work_enqueued";
    const MARKER: &str = "bulk_marker";
    let cluster = cluster();
    let db = "bulk_notify";
    let mut c = database(&cluster, db);
    ok(
        c.batch_execute(&format!(
            "ALTER DATABASE {db} SET workfence.notify_enqueued = on"
        )),
        "turning the notification on",
    );
    let mut enqueuer = connect(&cluster, db);
    let mut listener = connect(&cluster, db);
    ok(
        listener.batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {MARKER};")),
        "LISTEN",
    );
    // What the listener heard on the channel since the last time: a marker
    // committed after the calls arrives after everything they sent (the
    // server delivers in commit order), so no sleep decides "nothing".
    let mut markers = 0;
    let mut heard = |listener: &mut Client, marker: &mut Client| -> Vec<String> {
        markers += 1;
        let tag = markers.to_string();
        ok(
            marker.execute("SELECT pg_notify($1, $2)", &[&MARKER, &tag]),
            "the marker",
        );
        let mut heard = Vec::new();
        let mut notifications = listener.notifications();
        let mut incoming = notifications.timeout_iter(Duration::from_secs(30));
        loop {
            let n = ok(incoming.next(), "receiving").expect("the marker within 30 s");
            if n.channel() == MARKER {
                assert_eq!(n.payload(), tag);
                return heard;
            }
            assert_eq!(n.channel(), CHANNEL);
            heard.push(n.payload().to_string());
        }
    };
    for (path, q) in [(Path::AtOnce, "mail"), (Path::Grouped, "sms")] {
        let many = |keys: &[Option<&'static str>]| Many::new(q, keys).on(path, "g");
        // Three due items: one notification, at the commit.
        let mut tx = ok(enqueuer.transaction(), "BEGIN");
        many(&[Some("a"), Some("b"), Some("c")]).rows(&mut tx);
        assert_eq!(
            heard(&mut listener, &mut c),
            Vec::<String>::new(),
            "{path:?}: open"
        );
        ok(tx.commit(), "COMMIT");
        assert_eq!(heard(&mut listener, &mut c), [q], "{path:?}: one at commit");
        // Existing keys only, or only items not due: nothing.
        many(&[Some("a"), Some("b")]).rows(&mut enqueuer);
        assert_eq!(
            heard(&mut listener, &mut c),
            Vec::<String>::new(),
            "{path:?}: existing"
        );
        many(&[Some("d"), Some("e")])
            .run_at(&[Some(LATER), Some(LATER)])
            .rows(&mut enqueuer);
        assert_eq!(
            heard(&mut listener, &mut c),
            Vec::<String>::new(),
            "{path:?}: later"
        );
        // One due item among others: one.
        many(&[Some("a"), Some("f"), Some("g")])
            .run_at(&[None, Some(LATER), Some(PAST)])
            .rows(&mut enqueuer);
        assert_eq!(heard(&mut listener, &mut c), [q], "{path:?}: one due");
    }
}

#[test]
fn counters_count_the_items_inserted() {
    let cluster = cluster();
    let mut c = database(&cluster, "bulk_counters");
    let q = "counted";
    // (enqueued, claimed, done) of work_queue_counters.
    let counted = |c: &mut Client| -> [i64; 3] {
        let rows = ok(generated::queue_counter_rows(c), "queue_counter_rows");
        let row = rows
            .iter()
            .find(|r| r.queue.as_deref() == Some(q))
            .expect("the queue's counters");
        [row.enqueued, row.claimed, row.done].map(|n| n.expect("a count"))
    };
    // work_queue_stats' pending (due) and scheduled, and the same counted
    // from the items (work_queue_stats_exact).
    let stats = |c: &mut Client| -> [(i64, i64); 2] {
        ["work_queue_stats", "work_queue_stats_exact"].map(|view| {
            let r = ok(
                c.query_one(
                    &format!("SELECT pending, scheduled FROM workfence.{view} WHERE queue = $1"),
                    &[&q],
                ),
                view,
            );
            (r.get(0), r.get(1))
        })
    };
    common::enqueue_new(&mut c, &Enqueue::new(q).key("x"));
    // a, b and a new key inserted; x existed, a repeats.
    Many::new(q, &[Some("a"), Some("x"), Some("b"), Some("a"), None])
        .run_at(&[None, None, Some(LATER), None, None])
        .rows(&mut c);
    assert_eq!(counted(&mut c), [4, 0, 0]);
    assert_eq!(stats(&mut c), [(3, 1); 2]);
    // A rolled-back call counts nothing.
    let mut tx = ok(c.transaction(), "BEGIN");
    Many::new(q, &[Some("c"), Some("d")]).rows(&mut tx);
    ok(tx.rollback(), "ROLLBACK");
    assert_eq!(counted(&mut c), [4, 0, 0]);
    assert_eq!(stats(&mut c), [(3, 1); 2]);
    // Item by item (a group): e inserted, x and e again not.
    Many::new(q, &[Some("e"), Some("x"), Some("e")])
        .on(Path::Grouped, "g")
        .rows(&mut c);
    assert_eq!(counted(&mut c), [5, 0, 0]);
    assert_eq!(stats(&mut c), [(4, 1); 2]);
    // A pending item replaced is no enqueue; a finished one run again is.
    let token = ok(calls::claim_key(&mut c, q, "a", "w", "1 hour"), "claim a")
        .expect("a is due")
        .token("w");
    assert!(ok(calls::finish(&mut c, &token, None), "finish a"));
    Many::new(q, &[Some("x"), Some("a")])
        .on_conflict("replace")
        .rows(&mut c);
    assert_eq!(counted(&mut c), [6, 1, 1]);
    assert_eq!(stats(&mut c), [(4, 1); 2]);
}

#[test]
fn a_refused_call_changes_nothing() {
    const PRODUCER: &str = "bulk_producer";
    let cluster = cluster();
    let db = "bulk_refused";
    let mut admin = database(&cluster, db);
    ok(
        admin.batch_execute(&format!(
            "CREATE ROLE {PRODUCER} LOGIN;
             GRANT USAGE ON SCHEMA workfence TO {PRODUCER};
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO {PRODUCER}"
        )),
        "a producer role",
    );
    let q = "jobs";
    assert!(ok(
        calls::grant(&mut admin, "enqueue", q, PRODUCER),
        "work_grant"
    ));
    assert!(ok(
        calls::enforce_grants(&mut admin, true),
        "work_enforce_grants"
    ));
    let k = common::enqueue_new(&mut admin, &Enqueue::new(q).key("k"));
    assert!(ok(calls::cancel(&mut admin, q, "k"), "work_cancel"));
    let mut producer = common::connect_as(&cluster, db, PRODUCER, "bulk producer");
    let refused = |result: Result<Vec<(i64, String, bool)>, postgres::Error>, what: &str| {
        let e = result.expect_err(what);
        assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{what}: {e:?}");
    };

    // No enqueue grant covering the queue.
    let before = common::snapshot(&mut admin);
    refused(
        Many::new("other", &[Some("a"), None]).call(&mut producer),
        "a queue without a grant",
    );
    assert_eq!(common::snapshot(&mut admin), before, "a refused call");

    // Kept, the cancelled item is returned as it is: no operate needed.
    let rows = Many::new(q, &[Some("a"), Some("k")]).rows(&mut producer);
    assert_eq!(rows[1], (k, "k".into(), false));
    assert!(rows[0].2);
    assert_eq!(row(&mut admin, q, "k").state, "cancelled");

    // Running it again needs operate: the whole call is refused, also the
    // new key before it, and no id is drawn for it (as work_enqueue draws
    // none before its refusal).
    let before = common::snapshot(&mut admin);
    refused(
        Many::new(q, &[Some("b"), Some("k")])
            .on_conflict("replace")
            .call(&mut producer),
        "a cancelled item run again without operate",
    );
    assert_eq!(row(&mut admin, q, "k").state, "cancelled");
    assert_eq!(
        common::snapshot(&mut admin),
        before,
        "a call refused with 42501 changed the database (items_id_seq?)"
    );
}
