//! `pg_dump` of a database using pg_workfence, restored into a new database:
//! the items, their states and both sequences come back, so a claim after
//! the restore gets an epoch above every epoch handed out before, and an
//! enqueue gets a fresh id (docs/contract.md, promise 7).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{ok, scalar};
use postgres::Client;
use workfence_harness::calls::{self, Enqueue};
use workfence_harness::Cluster;

/// Every item as one line of text, in id order: what a restore must keep.
fn items(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT concat_ws(' ', id, key, state, owner, epoch) FROM workfence.items ORDER BY id",
            &[],
        )
        .expect("reading the items")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Run a client program of the cluster's PostgreSQL against `database`.
fn run_client(cluster: &Cluster, program: &str, database: &str, args: &[&str], file: &Path) {
    let status = Command::new(cluster.bin_dir().join(program))
        .args(["-h", cluster.host(), "-p", &cluster.port().to_string()])
        .args(["-U", "postgres", "-d", database])
        .args(args)
        .arg(file)
        .status()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(status.success(), "{program} {database} failed: {status}");
}

#[test]
fn dump_and_restore_keeps_items_states_and_the_epoch_sequence() {
    let (cluster, mut src) = common::own_cluster_with_database("source");

    // Items in several states (done, claimed, pending), and epochs handed out.
    for key in ["a", "b", "c", "d"] {
        ok(
            calls::enqueue(&mut src, &Enqueue::new("q").key(key)),
            "enqueue",
        );
    }
    let claimed = ok(
        calls::claim(&mut src, "q", "w", "1 hour", Some(3), None),
        "claim",
    );
    assert_eq!(claimed.len(), 3);
    let done = claimed[0].token("w");
    let held = claimed[1].token("w");
    assert!(ok(calls::finish(&mut src, &done, None), "finish"));
    let max_epoch: i64 = scalar(&mut src, "SELECT max(epoch) FROM workfence.items", &[]);
    let max_id: i64 = scalar(&mut src, "SELECT max(id) FROM workfence.items", &[]);
    let before = items(&mut src);

    // pg_dump | psql into a new, empty database.
    let dump = cluster.data_dir().with_extension("dump.sql");
    run_client(&cluster, "pg_dump", "source", &["-f"], &dump);
    let mut admin = ok(cluster.connect(), "connecting");
    admin.batch_execute("CREATE DATABASE restored").unwrap();
    let restore = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"];
    run_client(&cluster, "psql", "restored", &restore, &dump);
    std::fs::remove_file(&dump).ok();

    let mut dst = ok(cluster.connect_to("restored"), "connecting to restored");
    assert_eq!(items(&mut dst), before, "items and states restored");

    // The held lease is still honoured, the finished token still answers.
    assert!(ok(calls::renew(&mut dst, &held, "1 hour"), "renew"));
    assert!(ok(calls::finish(&mut dst, &done, None), "finish"));
    // A new enqueue gets a new id; the next claim an epoch above all before.
    let new_id = ok(
        calls::enqueue(&mut dst, &Enqueue::new("q").key("e")),
        "enqueue",
    )
    .id;
    assert!(
        new_id > max_id,
        "id {new_id} reissued after restore (max was {max_id})"
    );
    let epoch = ok(
        calls::claim(&mut dst, "q", "w", "1 hour", None, None),
        "claim",
    )
    .first()
    .expect("a claim after the restore")
    .epoch;
    assert!(
        epoch > max_epoch,
        "epoch {epoch} not above {max_epoch} after restore"
    );
}

#[test]
fn a_restore_of_the_items_table_alone_lifts_both_sequences() {
    let (cluster, mut src) = common::own_cluster_with_database("only_items");
    // Epochs well above 1: 50 claims and releases of one item, then items in
    // several states.
    ok(
        src.batch_execute(
            "SELECT workfence.work_enqueue('q', '{}', 'hot');
             DO $$ DECLARE r record; BEGIN
               FOR n IN 1..50 LOOP
                 SELECT * INTO r FROM workfence.work_claim_key('q', 'hot', 'w', '1 hour');
                 PERFORM workfence.work_release(r.id, 'w', r.epoch);
               END LOOP; END $$;
             SELECT workfence.work_enqueue('q', '{}', k) FROM unnest(ARRAY['a', 'b', 'c']) k;
             SELECT * FROM workfence.work_claim('q', 'w', '1 hour', 2);",
        ),
        "items with epochs",
    );
    let max_epoch: i64 = scalar(&mut src, "SELECT max(epoch) FROM workfence.items", &[]);
    let max_id: i64 = scalar(&mut src, "SELECT max(id) FROM workfence.items", &[]);
    assert!(max_epoch > 50);

    // The table's rows only (no sequences), into a fresh install.
    let dump = cluster.data_dir().with_extension("items.sql");
    run_client(
        &cluster,
        "pg_dump",
        "only_items",
        &["--data-only", "-t", "workfence.items", "-f"],
        &dump,
    );
    ok(cluster.create_database("fresh"), "fresh install");
    let restore = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"];
    run_client(&cluster, "psql", "fresh", &restore, &dump);
    std::fs::remove_file(&dump).ok();

    let mut dst = ok(cluster.connect_to("fresh"), "connecting to fresh");
    let restored: i64 = scalar(&mut dst, "SELECT count(*) FROM workfence.items", &[]);
    assert_eq!(restored, 4);
    let new_id = ok(
        calls::enqueue(&mut dst, &Enqueue::new("q").key("after")),
        "enqueue",
    )
    .id;
    assert!(new_id > max_id, "id {new_id} at or below {max_id}");
    let epochs: Vec<i64> = ok(
        calls::claim(&mut dst, "q", "w", "1 hour", Some(10), None),
        "claim after the restore",
    )
    .iter()
    .map(|c| c.epoch)
    .collect();
    assert!(!epochs.is_empty());
    assert!(
        epochs.iter().all(|e| *e > max_epoch),
        "epochs {epochs:?} not above {max_epoch}"
    );
}

/// A database updated from 0.11.0, whose monitoring role was granted
/// `work_item`, dumped and restored in one transaction that stops at the
/// first error (issue 30's adversarial review: the update left the grants
/// on the renamed `work_item_retired_0_11_0`, which a restore's `CREATE
/// EXTENSION` does not make, so the restore failed on them). The restored
/// monitor still reads an item through the new `work_item`. Its submitting
/// role, granted 0.11.0's `work_enqueue`, got `work_enqueue_many` (0.12.0)
/// from the update, and keeps it in the restored database; the monitor,
/// which could not enqueue, still cannot.
#[test]
fn a_dump_of_a_database_updated_from_0_11_0_restores_with_its_grants() {
    let (cluster, mut src) = common::own_cluster_with_database("prior");
    ok(
        src.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.11.0';
             CREATE ROLE dump_monitor LOGIN;
             CREATE ROLE dump_submitter LOGIN;
             GRANT USAGE ON SCHEMA workfence TO dump_monitor, dump_submitter;
             GRANT EXECUTE ON FUNCTION workfence.work_item(text, text), workfence.work_item(bigint)
                TO dump_monitor;
             GRANT EXECUTE ON FUNCTION workfence.work_enqueue TO dump_submitter;
             ALTER EXTENSION pg_workfence UPDATE;",
        ),
        "0.11.0 with a monitor's and a submitter's grants, updated",
    );
    ok(
        calls::enqueue(&mut src, &Enqueue::new("q").key("k").group_key("g")),
        "enqueue",
    );
    let dump = cluster.data_dir().with_extension("updated.dump");
    run_client(&cluster, "pg_dump", "prior", &["-Fc", "-f"], &dump);
    let mut admin = ok(cluster.connect(), "connecting");
    ok(
        admin.batch_execute("CREATE DATABASE after"),
        "create database",
    );
    run_client(
        &cluster,
        "pg_restore",
        "after",
        &["--single-transaction", "--exit-on-error"],
        &dump,
    );
    std::fs::remove_file(&dump).ok();
    let mut monitor = common::connect_as(&cluster, "after", "dump_monitor", "monitor");
    let item = ok(
        calls::item(&mut monitor, "q", "k"),
        "work_item as the monitor",
    )
    .expect("the restored item");
    assert_eq!(item.group_key.as_deref(), Some("g"));

    let enqueue_many = |c: &mut Client| {
        calls::generated::work_enqueue_many(
            c,
            "q",
            &[serde_json::json!({"n": 1}), serde_json::json!({"n": 2})],
            Some(&[Some("k"), Some("k2")]),
            None,
            None,
            None,
            None,
            None,
        )
        .map(|rows| {
            rows.into_iter()
                .map(|r| (r.key.unwrap_or_default(), r.inserted == Some(true)))
                .collect::<Vec<_>>()
        })
    };
    let refused = enqueue_many(&mut monitor).expect_err("the monitor cannot enqueue");
    assert_eq!(refused.code().map(|c| c.code()), Some("42501"), "{refused}");
    let mut submitter = common::connect_as(&cluster, "after", "dump_submitter", "submitter");
    assert_eq!(
        ok(
            enqueue_many(&mut submitter),
            "work_enqueue_many as the submitter"
        ),
        [("k".to_owned(), false), ("k2".to_owned(), true)],
        "the restored item kept, the new one added"
    );
}

/// Schedules (0.12.0) are dumped with the database. An older copy of the
/// schedules restored over a newer history (`pg_dump --data-only -t
/// workfence.schedules`, from before four slots fired) does not fire those
/// slots again: their items are still there, and a fire whose key exists
/// enqueues nothing. A whole dump restored into a new database keeps the
/// schedule, paused or not, with its next slot.
#[test]
fn an_older_copy_of_the_schedules_restored_fires_no_slot_whose_item_exists() {
    let (cluster, mut src) = common::own_cluster_with_database("scheduled");
    assert!(ok(
        calls::schedule(&mut src, "hourly", "0 * * * *", "reports", "UTC", "all"),
        "work_schedule"
    ));
    ok(
        src.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) - interval '3 hours'",
        ),
        "four slots due",
    );
    let older = cluster.data_dir().with_extension("schedules.sql");
    run_client(
        &cluster,
        "pg_dump",
        "scheduled",
        &["--data-only", "-t", "workfence.schedules", "-f"],
        &older,
    );
    assert_eq!(
        ok(calls::fire_schedules(&mut src), "work_fire_schedules"),
        4
    );
    let fired = items(&mut src);

    // The whole database, restored into a new one: the schedule and its items.
    let dump = cluster.data_dir().with_extension("scheduled.sql");
    run_client(&cluster, "pg_dump", "scheduled", &["-f"], &dump);
    let mut admin = ok(cluster.connect(), "connecting");
    admin
        .batch_execute("CREATE DATABASE scheduled_copy")
        .unwrap();
    let restore = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"];
    run_client(&cluster, "psql", "scheduled_copy", &restore, &dump);
    let mut copy = ok(
        cluster.connect_to("scheduled_copy"),
        "connecting to the copy",
    );
    assert_eq!(items(&mut copy), fired);
    let kept: bool = scalar(
        &mut copy,
        "SELECT next_slot = date_trunc('hour', clock_timestamp()) + interval '1 hour' \
           FROM workfence.work_schedules WHERE name = 'hourly'",
        &[],
    );
    assert!(kept, "the schedule's next slot came with it");
    assert_eq!(
        ok(calls::fire_schedules(&mut copy), "work_fire_schedules"),
        0
    );

    // The older schedules over the newer history: next_slot goes back three
    // hours, and the four slots it names again enqueue nothing.
    ok(
        src.batch_execute("TRUNCATE workfence.schedules"),
        "emptying the schedules",
    );
    run_client(&cluster, "psql", "scheduled", &restore, &older);
    std::fs::remove_file(&older).ok();
    std::fs::remove_file(&dump).ok();
    assert_eq!(
        ok(calls::fire_schedules(&mut src), "work_fire_schedules"),
        0
    );
    assert_eq!(items(&mut src), fired, "no slot fired twice");
    let caught_up: bool = scalar(
        &mut src,
        "SELECT next_slot > clock_timestamp() AND last_item_id = (SELECT max(id) FROM workfence.items) \
           FROM workfence.work_schedules WHERE name = 'hourly'",
        &[],
    );
    assert!(
        caught_up,
        "the schedule moved on, recording the existing items"
    );
}

/// Workflows (0.12.0) as a restore must keep them: every item's workflow
/// columns and every edge, in id order.
fn workflows(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT concat_ws(' ', i.id, i.key, i.state, i.waiting_on, i.on_parent_failure,
                              i.has_children, i.last_error)
               FROM workfence.items AS i
             UNION ALL
             SELECT concat_ws(' ', 'edge', e.parent, e.child, e.resolved, e.cancelled)
               FROM workfence.item_edges AS e
             ORDER BY 1",
            &[],
        )
        .expect("reading the workflows")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A workflow dumped with its database and restored into a new one goes on
/// where it was (issue 37): the waiting children, their counts and every
/// edge (resolved, cancelled) come back, `work_workflow` draws the same
/// graph, and after the restore a parent's finish releases its child, the
/// child reads its parent's result, and a retry of a failed parent brings
/// back the child its failure cancelled. The state counts count the
/// restored waiting items (`work_queue_stats` as `work_queue_stats_exact`).
#[test]
fn a_workflow_survives_pg_dump_and_restore() {
    let (cluster, mut src) = common::own_cluster_with_database("workflow_source");
    let enqueue = |c: &mut Client, item: Enqueue| common::enqueue_new(c, &item);
    let extract = enqueue(&mut src, Enqueue::new("etl").key("extract"));
    let audit = enqueue(&mut src, Enqueue::new("etl").key("audit").max_attempts(1));
    let transform = enqueue(
        &mut src,
        Enqueue::new("etl").key("transform").after(&[extract]),
    );
    let load = enqueue(
        &mut src,
        Enqueue::new("etl").key("load").after(&[transform, extract]),
    );
    let report = enqueue(&mut src, Enqueue::new("etl").key("report").after(&[audit]));
    // extract claimed (its token kept across the restore), audit failed
    // for good: report is cancelled.
    let extracting = common::claimed_one(&mut src, "etl", "w", "1 hour");
    assert_eq!(extracting.id, extract);
    let auditing = ok(
        calls::claim_key(&mut src, "etl", "audit", "w", "1 hour"),
        "claim",
    )
    .expect("audit")
    .token("w");
    assert!(ok(calls::fail(&mut src, &auditing, "boom", None), "fail"));
    let before = workflows(&mut src);
    assert!(
        before
            .iter()
            .any(|l| l.starts_with(&format!("{load} load waiting 2")))
            && before
                .iter()
                .any(|l| l.starts_with(&format!("{report} report cancelled"))),
        "{before:#?}"
    );
    let graph =
        |c: &mut Client, id: i64| ok(calls::generated::work_workflow(c, id), "work_workflow");
    let drawn = graph(&mut src, transform);
    assert_eq!(drawn.len(), 3, "{drawn:?}");

    let dump = cluster.data_dir().with_extension("workflow.sql");
    run_client(&cluster, "pg_dump", "workflow_source", &["-f"], &dump);
    let mut admin = ok(cluster.connect(), "connecting");
    ok(
        admin.batch_execute("CREATE DATABASE workflow_restored"),
        "create database",
    );
    let restore = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"];
    run_client(&cluster, "psql", "workflow_restored", &restore, &dump);
    std::fs::remove_file(&dump).ok();
    let mut dst = ok(cluster.connect_to("workflow_restored"), "connecting");
    assert_eq!(workflows(&mut dst), before, "items and edges restored");
    assert_eq!(graph(&mut dst, transform), drawn, "the same graph");
    let counts = "SELECT ARRAY[s.waiting, s.cancelled, s.failed, s.claimed + s.expired]
                    FROM workfence.work_queue_stats AS s WHERE s.queue = 'etl'";
    let kept: Vec<i64> = scalar(&mut dst, counts, &[]);
    let exact: Vec<i64> = scalar(
        &mut dst,
        &counts.replace("work_queue_stats", "work_queue_stats_exact"),
        &[],
    );
    assert_eq!((kept.clone(), exact), (vec![2, 1, 1, 1], vec![2, 1, 1, 1]));

    // The workflow goes on: extract's kept token finishes it, transform is
    // released and reads its result; transform's finish releases load.
    let extracted = serde_json::json!({"rows": 7});
    assert!(ok(
        calls::finish(&mut dst, &extracting.token("w"), Some(&extracted)),
        "finish extract after the restore"
    ));
    let next = common::claimed_one(&mut dst, "etl", "w", "1 hour");
    assert_eq!(next.id, transform, "the released child");
    let results = ok(
        calls::generated::work_parent_results(&mut dst, transform, "w", next.epoch),
        "work_parent_results",
    );
    assert_eq!(
        results,
        serde_json::json!({ extract.to_string(): {"rows": 7} })
    );
    assert!(ok(
        calls::finish(&mut dst, &next.token("w"), None),
        "finish"
    ));
    let last = common::claimed_one(&mut dst, "etl", "w", "1 hour");
    assert_eq!(last.id, load, "load, released by its last parent");
    // audit retried: report, which its failure cancelled, waits again.
    assert!(ok(calls::retry(&mut dst, "etl", "audit", None), "retry"));
    let report_state: String = scalar(
        &mut dst,
        "SELECT state::text FROM workfence.items WHERE id = $1",
        &[&report],
    );
    assert_eq!(report_state, "waiting");
}
