//! The optional maintenance background worker (`shared_preload_libraries`).
//!
//! What it proves, on a cluster started with the library preloaded,
//! `workfence.maintenance_naptime = 1` (second), `workfence.retention = 1h`
//! and no database configured yet:
//! - the settings are there in a normal backend (`SHOW`, with their units);
//! - the worker idles, connected to no database, until `ALTER SYSTEM SET
//!   workfence.maintenance_database` and `pg_reload_conf()` name one (the
//!   SIGHUP path), then shows in `pg_stat_activity` with its `backend_type`
//!   in that database;
//! - a round, within a bounded number of rounds: a done item and a cancelled
//!   item finished longer ago than the retention are deleted; a done item
//!   finished just now, a pending item, a live claim and a lapsed claim with
//!   attempts left are untouched; a lapsed claim on its final attempt becomes
//!   `failed` with `last_error` 'lease expired on the final attempt', and its
//!   old token's finish is refused;
//! - an ERROR in a round (a trigger that refuses the purge's DELETE) is
//!   logged as a WARNING and the same worker process carries on; once the
//!   cause is gone the next round purges;
//! - changing the database restarts the worker, connected to the new one;
//! - a fast shutdown with the worker running completes promptly (printed).
//!
//! And without preloading (the default cluster every other test uses): no
//! such worker runs, and the settings and `work_purge` work once a session
//! has loaded the library.
//!
//! Waiting is polling with a deadline (for "the worker has done its round"),
//! never a sleep taken as proof. Needs the extension installed
//! (`scripts/test.sh`). Runs in about 10 seconds (5 of them the restart
//! delay of the database change).

mod common;

use std::time::{Duration, Instant};

use common::ok;
use pg_workfence_client::Cluster;
use postgres::Client;

/// `pg_stat_activity.backend_type` of the worker (its `bgw_type`).
const WORKER_TYPE: &str = "pg_workfence maintenance";

/// How long any awaited effect of the worker may take: many rounds of one
/// second, plus the restart delay (5 s) where the database changes.
const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `check` every 50 ms until it returns `Some`, failing the test with
/// `what` after [`DEADLINE`].
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "gave up after {DEADLINE:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pid of the maintenance worker connected to `database`, if one is.
fn worker_pid(client: &mut Client, database: &str) -> Option<i32> {
    ok(
        client.query_opt(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = $1 AND datname = $2",
            &[&WORKER_TYPE, &database],
        ),
        "reading pg_stat_activity",
    )
    .map(|row| row.get(0))
}

/// How many maintenance workers run in the cluster, in any database or none.
fn workers(client: &mut Client) -> i64 {
    ok(
        client.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = $1",
            &[&WORKER_TYPE],
        ),
        "reading pg_stat_activity",
    )
    .get(0)
}

/// The state of item `key` of queue 'q', if it still exists.
fn state_of(client: &mut Client, key: &str) -> Option<String> {
    ok(
        client.query_opt(
            "SELECT state::text FROM workfence.items WHERE queue = 'q' AND key = $1",
            &[&key],
        ),
        "reading an item",
    )
    .map(|row| row.get(0))
}

/// `SHOW name` on `client`.
fn show(client: &mut Client, name: &str) -> String {
    ok(
        client.query_one("SELECT current_setting($1)", &[&name]),
        "current_setting",
    )
    .get(0)
}

/// Points the worker at `database` the way an operator would: ALTER SYSTEM
/// and a reload (SIGHUP).
fn set_database(admin: &mut Client, database: &str) {
    // ALTER SYSTEM takes no parameters; the server quotes the value.
    let alter: String = ok(
        admin.query_one(
            "SELECT format('ALTER SYSTEM SET workfence.maintenance_database = %L', $1::text)",
            &[&database],
        ),
        "format",
    )
    .get(0);
    ok(admin.batch_execute(&alter), "ALTER SYSTEM");
    ok(
        admin.batch_execute("SELECT pg_reload_conf()"),
        "pg_reload_conf",
    );
}

#[test]
fn the_preloaded_worker_dead_letters_and_purges() {
    let mut cluster = ok(
        Cluster::builder(common::scratch_base())
            .setting("shared_preload_libraries", "pg_workfence")
            .setting("workfence.maintenance_naptime", "1")
            .setting("workfence.retention", "1h")
            .setting("workfence.maintenance_database", "")
            .start(),
        "starting a throwaway PostgreSQL 15 cluster with the library preloaded",
    );
    let db = "maintained";
    ok(cluster.create_database(db), "creating the database");
    let mut admin = ok(cluster.connect(), "connecting to postgres");

    // Preloaded: the settings exist in every backend, with their units.
    assert_eq!(show(&mut admin, "workfence.retention"), "1h");
    assert_eq!(show(&mut admin, "workfence.maintenance_naptime"), "1s");
    assert_eq!(show(&mut admin, "workfence.maintenance_database"), "");

    // Idle (no database yet), the worker has not connected, and a process
    // that has not connected is not in pg_stat_activity.
    assert_eq!(workers(&mut admin), 0);

    // Every case, set up and committed in one transaction, before the worker
    // may touch the database.
    let mut client = ok(cluster.connect_to(db), "connecting");
    let setup = "BEGIN;
        SELECT workfence.work_enqueue('q', '{}', k)
          FROM unnest('{old_done,new_done,old_cancelled,pending,live,lapsed_retry}'::text[]) AS k;
        SELECT workfence.work_enqueue('q', '{}', 'lapsed_final', max_attempts => 1);
        SELECT workfence.work_finish(c.id, 'w', c.epoch)
          FROM unnest('{old_done,new_done}'::text[]) AS k,
               LATERAL workfence.work_claim_key('q', k, 'w', '1 hour') AS c;
        SELECT workfence.work_cancel('q', 'old_cancelled');
        SELECT workfence.work_claim_key('q', k, 'w', '1 hour')
          FROM unnest('{live,lapsed_retry,lapsed_final}'::text[]) AS k;
        -- As the superuser: finished two hours ago (retention is one hour);
        -- leases that lapsed a minute ago.
        UPDATE workfence.items SET finished_at = clock_timestamp() - interval '2 hours'
         WHERE key IN ('old_done', 'old_cancelled');
        UPDATE workfence.items SET lease_until = clock_timestamp() - interval '1 minute'
         WHERE key IN ('lapsed_retry', 'lapsed_final');
        COMMIT;";
    ok(client.batch_execute(setup), "setting up the items");
    let final_token: (i64, i64) = {
        let row = ok(
            client.query_one(
                "SELECT id, epoch FROM workfence.items WHERE key = 'lapsed_final'",
                &[],
            ),
            "reading the final attempt's token",
        );
        (row.get(0), row.get(1))
    };

    set_database(&mut admin, db);
    let pid = wait_for("the worker to connect to the database", || {
        worker_pid(&mut admin, db)
    });

    // One round does both, in one transaction: wait until it has.
    wait_for("a round to dead-letter and purge", || {
        let failed = state_of(&mut client, "lapsed_final").as_deref() == Some("failed");
        let purged = state_of(&mut client, "old_done").is_none();
        (failed && purged).then_some(())
    });
    assert_eq!(state_of(&mut client, "old_cancelled"), None);
    for (key, state) in [
        ("new_done", "done"),
        ("pending", "pending"),
        ("live", "claimed"),
        ("lapsed_retry", "claimed"),
    ] {
        assert_eq!(state_of(&mut client, key).as_deref(), Some(state), "{key}");
    }
    let row = ok(
        client.query_one(
            "SELECT last_error, lease_until IS NULL, finished_at IS NOT NULL
               FROM workfence.items WHERE key = 'lapsed_final'",
            &[],
        ),
        "reading the dead letter",
    );
    assert_eq!(
        row.get::<_, Option<String>>(0).as_deref(),
        Some("lease expired on the final attempt")
    );
    assert!(row.get::<_, bool>(1), "lease_until is cleared");
    assert!(row.get::<_, bool>(2), "finished_at is set");
    let finished: bool = ok(
        client.query_one(
            "SELECT workfence.work_finish($1, 'w', $2)",
            &[&final_token.0, &final_token.1],
        ),
        "work_finish",
    )
    .get(0);
    assert!(!finished, "the dead-lettered token's finish is refused");

    // An ERROR in a round: a trigger refuses the purge's DELETE. The round
    // is logged as a WARNING and the same worker goes on.
    ok(
        client.batch_execute(
            "CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'maintenance test: delete refused'; END $$;
             CREATE TRIGGER refuse BEFORE DELETE ON workfence.items
               FOR EACH ROW EXECUTE FUNCTION public.refuse();
             UPDATE workfence.items SET finished_at = clock_timestamp() - interval '2 hours'
              WHERE key = 'new_done';",
        ),
        "installing the refusing trigger",
    );
    let log = cluster.log_file();
    wait_for("the round's WARNING in the server log", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .any(|line| {
                line.contains("WARNING:")
                    && line.contains(WORKER_TYPE)
                    && line.contains("maintenance test: delete refused")
            })
            .then_some(())
    });
    assert_eq!(state_of(&mut client, "new_done").as_deref(), Some("done"));
    ok(
        client.batch_execute("DROP TRIGGER refuse ON workfence.items"),
        "dropping the trigger",
    );
    wait_for("the next round to purge", || {
        state_of(&mut client, "new_done").is_none().then_some(())
    });
    assert_eq!(
        worker_pid(&mut admin, db),
        Some(pid),
        "the worker survived the failed round"
    );

    // A change of database: the worker restarts, connected to the new one.
    let other = "maintained_too";
    ok(
        cluster.create_database(other),
        "creating the second database",
    );
    set_database(&mut admin, other);
    let new_pid = wait_for("the worker to restart in the new database", || {
        worker_pid(&mut admin, other)
    });
    assert_ne!(new_pid, pid);
    assert_eq!(worker_pid(&mut admin, db), None);
    assert_eq!(workers(&mut admin), 1);

    // A fast shutdown is not held up by the worker.
    drop(client);
    drop(admin);
    let start = Instant::now();
    ok(cluster.stop(), "pg_ctl -m fast stop");
    let took = start.elapsed();
    println!("fast shutdown with the maintenance worker running took {took:?}");
    println!("the worker's lines in the server log:");
    let text = ok(std::fs::read_to_string(&log), "reading the server log");
    for line in text.lines().filter(|line| line.contains(WORKER_TYPE)) {
        println!("  {line}");
    }
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
}

#[test]
fn without_preloading_no_worker_runs_and_purge_works() {
    let cluster = ok(
        Cluster::start(common::scratch_base()),
        "starting a throwaway PostgreSQL 15 cluster",
    );
    let db = "unmaintained";
    ok(cluster.create_database(db), "creating the database");
    let mut client = ok(cluster.connect_to(db), "connecting");

    ok(
        client.batch_execute(
            "SELECT workfence.work_enqueue('q', '{}', 'a');
             SELECT workfence.work_finish(c.id, 'w', c.epoch)
               FROM workfence.work_claim_key('q', 'a', 'w', '1 hour') AS c;
             UPDATE workfence.items SET finished_at = clock_timestamp() - interval '8 days';",
        ),
        "finishing an item eight days ago",
    );
    assert_eq!(
        workers(&mut client),
        0,
        "no maintenance worker without preloading"
    );
    // This session has loaded the library: the settings are defined.
    assert_eq!(show(&mut client, "workfence.retention"), "7d");
    let purged: i64 = ok(
        client.query_one("SELECT workfence.work_purge()", &[]),
        "work_purge",
    )
    .get(0);
    assert_eq!(purged, 1);
}
