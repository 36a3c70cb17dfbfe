//! `work_items` (0.11.0), from real client connections: a queue's items a
//! page at a time, as the dashboard and an operator's `psql` page through
//! them.
//!
//! - every state, paged three rows at a time, gives exactly the queue's
//!   items of that state in the documented order, each once, and nothing
//!   of another queue (the oracle: the same rows read from the table by the
//!   superuser, ordered as docs/contract.md says);
//! - a page reads its own snapshot: an item claimed between two pages
//!   leaves the pending listing and shows in the claimed one;
//! - a page after an item that left the order (retried out of `failed`,
//!   or purged) is empty, and the first page lists it where it is now;
//! - `last_error` is the newest error of the history;
//! - a queue of 100,000 items: a page of 50 in every state reads a bounded
//!   number of buffers, whatever its place in the queue (the server's own
//!   count, `pg_stat_statements`-free: `EXPLAIN (ANALYZE, BUFFERS)` of the
//!   statement the function runs is not reachable, so the test compares the
//!   shared buffers hit by the call itself, from `pg_stat_database`, between
//!   a page at the start and one deep in the listing).
//!
//! Needs the extension installed (scripts/test.sh).

use crate::common;

use common::ok;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, Page};

fn database(name: &str) -> (std::sync::Arc<workfence_harness::Cluster>, Client) {
    let cluster = common::shared_cluster();
    ok(cluster.create_database(name), "create database");
    let c = ok(cluster.connect_to(name), "connect");
    (cluster, c)
}

/// Every page of `state` in `queue`, `size` rows a page: the ids in the
/// order listed.
fn all_pages(c: &mut Client, queue: &str, state: Option<&str>, size: i32) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = ok(
            calls::items(
                c,
                queue,
                &Page {
                    state: state.map(str::to_owned),
                    after,
                    max: Some(size),
                },
            ),
            "work_items",
        );
        assert!(page.len() <= size as usize, "a page longer than max");
        if let Some(s) = state {
            assert!(page.iter().all(|i| i.state == s), "{s}: {page:?}");
        }
        let Some(last) = page.last() else {
            return ids;
        };
        after = Some(last.id);
        ids.extend(page.iter().map(|i| i.id));
    }
}

/// The oracle: the ids of `queue`'s items of `state`, read from the table
/// in the documented order of that listing.
fn expected(c: &mut Client, queue: &str, state: Option<&str>) -> Vec<i64> {
    let order = match state {
        None => "key DESC",
        Some("pending") => "priority, run_at, id",
        Some("claimed") => "lease_until, id",
        Some(_) => "finished_at DESC, id DESC",
    };
    let sql = format!(
        "SELECT id FROM workfence.items WHERE queue = $1 AND ($2::text IS NULL OR state::text = $2)
          ORDER BY {order}"
    );
    ok(c.query(&sql, &[&queue, &state]), "the oracle")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A queue with items in every state, and a second queue beside it.
fn mixed_queue(c: &mut Client) {
    for n in 0..40 {
        // Priorities and run_at out of id order, so that claim order is not
        // id order; some in the future (scheduled, still pending).
        let run_at = match n % 4 {
            0 => calls::RunAt::In(format!("-{} seconds", 40 - n)),
            1 => calls::RunAt::In(format!("{n} minutes")),
            _ => calls::RunAt::In(format!("-{n} seconds")),
        };
        common::enqueue_new(
            c,
            &Enqueue::new("mixed")
                .key(format!("k{n}"))
                .priority(n % 3)
                .run_at(run_at)
                .max_attempts(1),
        );
        common::enqueue_new(c, &Enqueue::new("other").key(format!("k{n}")));
    }
    // Claim 20 (the due ones first), then settle them in four ways.
    let claimed = ok(
        calls::claim(c, "mixed", "w", "10 minutes", Some(20), None),
        "claim",
    );
    assert_eq!(claimed.len(), 20);
    for (n, item) in claimed.iter().enumerate() {
        let token = item.token("w");
        match n % 4 {
            0 => assert!(ok(calls::finish(c, &token, None), "finish")),
            1 => assert!(ok(
                calls::fail(c, &token, &format!("boom {n}"), None),
                "fail"
            )),
            2 => assert!(ok(calls::cancel(c, "mixed", &item.key), "cancel")),
            _ => {} // stays claimed
        }
    }
}

#[test]
fn every_state_pages_in_its_documented_order_each_item_once() {
    let (_cluster, mut c) = database("every_state");
    mixed_queue(&mut c);
    for state in [
        None,
        Some("pending"),
        Some("claimed"),
        Some("done"),
        Some("failed"),
        Some("cancelled"),
    ] {
        let want = expected(&mut c, "mixed", state);
        assert!(!want.is_empty(), "{state:?}: the fixture has none");
        for size in [1, 3, 1000] {
            assert_eq!(
                all_pages(&mut c, "mixed", state, size),
                want,
                "{state:?} in pages of {size}"
            );
        }
    }
    // The default page: every state by key, descending, 50 rows at most.
    let page = ok(
        calls::items(&mut c, "other", &Page::default()),
        "work_items",
    );
    assert_eq!(page.len(), 40);
    assert_eq!(page[0].key, "k9", "by key, descending");
    // A queue nobody used: no rows, no error.
    let none = ok(
        calls::items(&mut c, "nobody", &Page::default()),
        "work_items",
    );
    assert!(none.is_empty());
}

#[test]
fn last_error_is_the_newest_error_of_the_history() {
    let (_cluster, mut c) = database("last_error");
    common::enqueue_new(&mut c, &Enqueue::new("q").key("a").max_attempts(2));
    for error in ["first", "second"] {
        let token = common::claimed_one(&mut c, "q", "w", "1 minute").token("w");
        assert!(ok(calls::fail(&mut c, &token, error, Some("0")), "fail"));
    }
    let page = ok(
        calls::items(
            &mut c,
            "q",
            &Page {
                state: Some("failed".into()),
                ..Page::default()
            },
        ),
        "work_items",
    );
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].last_error.as_deref(), Some("second"));
    assert_eq!(page[0].attempts, 2);
    let item = ok(calls::item(&mut c, "q", "a"), "work_item").expect("a");
    assert_eq!(item.errors.as_array().map(Vec::len), Some(2));
}

#[test]
fn a_page_after_an_item_that_left_the_order_is_empty_and_the_first_page_shows_it_anew() {
    let (_cluster, mut c) = database("left_the_order");
    for key in ["a", "b", "c"] {
        common::enqueue_new(&mut c, &Enqueue::new("q").key(key).max_attempts(1));
        let token = common::claimed_one(&mut c, "q", "w", "1 minute").token("w");
        assert!(ok(calls::fail(&mut c, &token, "boom", None), "fail"));
    }
    let failed = |c: &mut Client, after| {
        ok(
            calls::items(
                c,
                "q",
                &Page {
                    state: Some("failed".into()),
                    after,
                    max: Some(1),
                },
            ),
            "work_items",
        )
    };
    let first = failed(&mut c, None);
    assert_eq!(first[0].key, "c", "newest finish first");
    // The page's last item is retried: it has left the failed listing.
    assert!(ok(calls::retry(&mut c, "q", "c", None), "work_retry"));
    assert!(failed(&mut c, Some(first[0].id)).is_empty());
    assert_eq!(failed(&mut c, None)[0].key, "b");
    // And in the pending listing it is where claim order puts it.
    let pending = all_pages(&mut c, "q", Some("pending"), 2);
    assert_eq!(pending, vec![first[0].id]);
    // An id of another queue is no cursor for this one.
    common::enqueue_new(&mut c, &Enqueue::new("elsewhere").key("x"));
    let x = ok(calls::item(&mut c, "elsewhere", "x"), "work_item").expect("x");
    let page = ok(
        calls::items(
            &mut c,
            "q",
            &Page {
                after: Some(x.id),
                ..Page::default()
            },
        ),
        "work_items",
    );
    assert!(page.is_empty(), "{page:?}");
}

#[test]
fn a_page_reads_its_own_snapshot_a_claim_between_pages_moves_the_item() {
    let (_cluster, mut c) = database("between_pages");
    for n in 0..6 {
        common::enqueue_new(&mut c, &Enqueue::new("q").key(format!("k{n}")));
    }
    let pending = |c: &mut Client, after| {
        ok(
            calls::items(
                c,
                "q",
                &Page {
                    state: Some("pending".into()),
                    after,
                    max: Some(3),
                },
            ),
            "work_items",
        )
    };
    let first = pending(&mut c, None);
    assert_eq!(
        first.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["k0", "k1", "k2"]
    );
    // A worker claims the next item in claim order between the pages.
    let claimed = common::claimed_one(&mut c, "q", "w", "1 minute");
    assert_eq!(claimed.key, "k0");
    let second = pending(&mut c, Some(first[2].id));
    assert_eq!(
        second.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["k3", "k4", "k5"]
    );
    let now_claimed = all_pages(&mut c, "q", Some("claimed"), 10);
    assert_eq!(now_claimed, vec![claimed.id]);
}

/// Shared buffers hit or read by this database so far (the statistics of
/// the calling backend are flushed at the end of each statement's
/// transaction; `pg_stat_force_next_flush` makes them visible at once on
/// PostgreSQL 15 and later).
fn buffers(c: &mut Client) -> i64 {
    ok(
        c.batch_execute("SELECT pg_catalog.pg_stat_force_next_flush()"),
        "flush",
    );
    ok(
        c.query_one(
            "SELECT (blks_hit + blks_read)::bigint FROM pg_catalog.pg_stat_database
              WHERE datname = pg_catalog.current_database()",
            &[],
        ),
        "pg_stat_database",
    )
    .get(0)
}

#[test]
fn a_page_deep_in_a_large_queue_reads_about_what_the_first_page_reads() {
    let (_cluster, mut c) = database("large");
    // 100,000 items: 60% done, 20% pending, 10% failed, 5% cancelled, 5%
    // claimed, spread over ids (set by the superuser, which is quicker than
    // claiming them one by one and gives the same rows).
    ok(
        c.batch_execute(
            "SELECT count(*) FROM generate_series(1, 100000) AS n,
                    LATERAL workfence.work_enqueue('big', '{}', 'k' || n) AS e;
             UPDATE workfence.items
                SET state = (CASE WHEN id % 20 < 12 THEN 'done'
                                  WHEN id % 20 < 16 THEN 'pending'
                                  WHEN id % 20 < 18 THEN 'failed'
                                  WHEN id % 20 = 18 THEN 'cancelled'
                                  ELSE 'claimed' END)::workfence.item_state,
                    finished_at = CASE WHEN id % 20 < 12 OR id % 20 IN (16, 17, 18)
                                       THEN pg_catalog.clock_timestamp() END,
                    owner = 'w', epoch = id, claimed_at = pg_catalog.clock_timestamp(),
                    lease_until = CASE WHEN id % 20 = 19
                                       THEN pg_catalog.clock_timestamp() + interval '1 hour' END
              WHERE queue = 'big';",
        ),
        "100,000 items",
    );
    ok(c.batch_execute("VACUUM ANALYZE workfence.items"), "VACUUM");
    // The first reading of pg_stat_database loads its catalog entries into
    // this backend's caches (about 150 buffers): not a page's cost.
    buffers(&mut c);
    for state in [
        None,
        Some("pending"),
        Some("claimed"),
        Some("done"),
        Some("failed"),
        Some("cancelled"),
    ] {
        let page = |c: &mut Client, after| {
            ok(
                calls::items(
                    c,
                    "big",
                    &Page {
                        state: state.map(str::to_owned),
                        after,
                        max: Some(50),
                    },
                ),
                "work_items",
            )
        };
        // Warm the plan and the cache; then count one first page and one
        // page 1,000 pages (or as deep as the state goes) in.
        let first = page(&mut c, None);
        assert_eq!(first.len(), 50, "{state:?}");
        let want = expected(&mut c, "big", state);
        let deep_after = want[want.len() - 100];
        let before = buffers(&mut c);
        let _ = page(&mut c, None);
        let first_cost = buffers(&mut c) - before;
        let before = buffers(&mut c);
        let deep = page(&mut c, Some(deep_after));
        let deep_cost = buffers(&mut c) - before;
        assert_eq!(deep.len(), 50, "{state:?}");
        assert_eq!(
            deep.iter().map(|i| i.id).collect::<Vec<_>>(),
            want[want.len() - 99..want.len() - 49],
            "{state:?}: the deep page"
        );
        println!("work_items {state:?}: first page {first_cost} buffers, deep page {deep_cost}");
        // A page reads about what the first page reads (keyset: no rows
        // skipped by reading them): measured 4-22 buffers for a first page
        // and 13-30 for a deep one, where a walk up to the cursor read
        // 2,614 and a scan of the table's heap alone is about 1,700 pages.
        // The rarer the state among finished items, the more index entries
        // its page passes over (cancelled, 1 in 20 here, reads the most).
        assert!(
            deep_cost <= 2 * first_cost + 50 && deep_cost < 100 && first_cost < 100,
            "{state:?}: {first_cost} buffers for the first page, {deep_cost} for a deep one"
        );
    }
}
