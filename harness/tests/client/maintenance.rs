//! The optional maintenance background workers (`shared_preload_libraries`).
//!
//! What it proves, on a cluster started with the library preloaded,
//! `workfence.maintenance_naptime = 1` (second), `workfence.retention = 1h`
//! and no database configured yet:
//! - the settings are there in a normal backend (`SHOW`, with their units);
//! - the launcher runs connected to no database, and no round runs until
//!   `ALTER SYSTEM SET workfence.maintenance_database` and `pg_reload_conf()`
//!   name one (the SIGHUP path);
//! - a round, within a bounded number of rounds: a done item and a cancelled
//!   item finished longer ago than the retention are deleted; a done item
//!   finished just now, a pending item, a live claim and a lapsed claim with
//!   attempts left are untouched; a lapsed claim on its final attempt becomes
//!   `failed` with `last_error` 'lease expired on the final attempt', and its
//!   old token's finish is refused;
//! - an ERROR in a round (a trigger that refuses the purge's DELETE) is
//!   logged as a WARNING with its SQLSTATE, and the next round, once the
//!   cause is gone, purges;
//! - a naptime lowered by a reload takes effect at once, not when a long nap
//!   ends;
//! - a database without the extension is logged once (LOG), is not held
//!   between rounds (`DROP DATABASE` succeeds), and once dropped is logged
//!   once more, with no FATAL every few seconds;
//! - `pg_cancel_backend` leaves the launcher running;
//! - a change of database moves the rounds to the new one;
//! - a fast shutdown with the workers running completes promptly (printed).
//!
//! And without preloading (the default cluster every other test uses): no
//! such worker runs, and the settings and `work_purge` work once a session
//! has loaded the library.
//!
//! Waiting is polling with a deadline (for "a round has done it"), never a
//! sleep taken as proof. Needs the extension installed (`scripts/test.sh`).

use crate::common;

use std::time::{Duration, Instant};

use common::ok;
use postgres::Client;
use workfence_harness::calls::{self, Token};
use workfence_harness::Cluster;

/// `pg_stat_activity.backend_type` of a round worker (its `bgw_type`).
const WORKER_TYPE: &str = "pg_workfence maintenance";

/// `pg_stat_activity.backend_type` of the launcher.
const LAUNCHER_TYPE: &str = "pg_workfence maintenance launcher";

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

/// The launcher's pid and whether it is connected to no database.
fn launcher(client: &mut Client) -> Option<(i32, bool)> {
    ok(
        client.query_opt(
            "SELECT pid, datname IS NULL FROM pg_stat_activity WHERE backend_type = $1",
            &[&LAUNCHER_TYPE],
        ),
        "reading pg_stat_activity",
    )
    .map(|row| (row.get(0), row.get(1)))
}

/// How many round workers run in the cluster right now.
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

/// The server log's lines that contain every one of `parts`.
fn log_lines(cluster: &Cluster, parts: &[&str]) -> usize {
    std::fs::read_to_string(cluster.log_file())
        .unwrap_or_default()
        .lines()
        .filter(|line| parts.iter().all(|p| line.contains(p)))
        .count()
}

/// An ALTER SYSTEM of `name` to `value`, then a reload (SIGHUP).
fn alter_system(admin: &mut Client, name: &str, value: &str) {
    // ALTER SYSTEM takes no parameters; the server quotes the value.
    let alter: String = ok(
        admin.query_one(
            "SELECT format('ALTER SYSTEM SET %I = %L', $1::text, $2::text)",
            &[&name, &value],
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

/// A done item `key` in queue 'q' of `client`'s database, finished `ago`
/// (an interval) ago.
fn done_item(client: &mut Client, key: &str, ago: &str) {
    let token = common::enqueued_and_claimed(client, "q", key, "w", "1 hour");
    ok(calls::finish(client, &token, None), "finish");
    ok(
        client.execute(
            "UPDATE workfence.items SET finished_at = clock_timestamp() - $2::text::interval
              WHERE key = $1",
            &[&key, &ago],
        ),
        "finished in the past",
    );
}

/// A done item `key`, finished two hours ago (older than the retention).
fn old_done_item(client: &mut Client, key: &str) {
    done_item(client, key, "2 hours");
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

/// Points the maintenance at `database` the way an operator would: ALTER
/// SYSTEM and a reload (SIGHUP).
fn set_database(admin: &mut Client, database: &str) {
    alter_system(admin, "workfence.maintenance_database", database);
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

    // No database yet: the launcher runs, connected to none, and no round.
    let (launcher_pid, no_database) = wait_for("the launcher", || launcher(&mut admin));
    assert!(no_database, "the launcher holds no database");
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
    let final_token: Token = {
        let row = ok(
            client.query_one(
                "SELECT id, epoch FROM workfence.items WHERE key = 'lapsed_final'",
                &[],
            ),
            "reading the final attempt's token",
        );
        Token::new(row.get(0), "w", row.get(1))
    };

    set_database(&mut admin, db);

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
    let finished = ok(
        calls::finish(&mut client, &final_token, None),
        "work_finish",
    );
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
    wait_for(
        "the round's WARNING, with its SQLSTATE, in the server log",
        || {
            (log_lines(
                &cluster,
                &[
                    "WARNING:",
                    WORKER_TYPE,
                    "maintenance test: delete refused",
                    "(SQLSTATE P0001)",
                ],
            ) > 0)
                .then_some(())
        },
    );
    assert_eq!(state_of(&mut client, "new_done").as_deref(), Some("done"));
    ok(
        client.batch_execute("DROP TRIGGER refuse ON workfence.items"),
        "dropping the trigger",
    );
    wait_for("the next round to purge", || {
        state_of(&mut client, "new_done").is_none().then_some(())
    });

    // A naptime lowered by a reload takes effect at once: with a day's nap
    // under way, a purge would otherwise wait a day.
    alter_system(&mut admin, "workfence.maintenance_naptime", "1d");
    wait_for("the launcher to take the day-long naptime", || {
        (log_lines(&cluster, &[LAUNCHER_TYPE, "naptime is now 86400 s"]) > 0).then_some(())
    });
    // One round that sees the long naptime, then an item to purge.
    old_done_item(&mut client, "after_long_nap");
    alter_system(&mut admin, "workfence.maintenance_naptime", "1");
    wait_for("a round soon after the naptime is lowered", || {
        state_of(&mut client, "after_long_nap")
            .is_none()
            .then_some(())
    });

    // pg_cancel_backend leaves the launcher running.
    ok(
        admin.execute("SELECT pg_cancel_backend($1)", &[&launcher_pid]),
        "pg_cancel_backend",
    );
    old_done_item(&mut client, "after_cancel");
    wait_for("a round after the cancel", || {
        state_of(&mut client, "after_cancel")
            .is_none()
            .then_some(())
    });
    assert_eq!(
        launcher(&mut admin).map(|l| l.0),
        Some(launcher_pid),
        "the launcher survived pg_cancel_backend"
    );

    // A database without the extension: logged once, and not held between
    // rounds, so it can be dropped; dropped, it is logged once more.
    ok(
        admin.batch_execute("CREATE DATABASE plain"),
        "CREATE DATABASE",
    );
    set_database(&mut admin, "plain");
    let not_installed = [
        "LOG:",
        "extension pg_workfence is not installed in database \"plain\"",
    ];
    wait_for("the not-installed LOG line", || {
        (log_lines(&cluster, &not_installed) > 0).then_some(())
    });
    // A round may be under way at the instant of the DROP (55006); the
    // next attempt meets none.
    wait_for("DROP DATABASE plain", || {
        match admin.batch_execute("DROP DATABASE plain") {
            Ok(()) => Some(()),
            Err(e) if e.code().map(|c| c.code()) == Some("55006") => None,
            Err(e) => panic!("DROP DATABASE plain: {e}"),
        }
    });
    let missing = ["LOG:", "database \"plain\" does not exist"];
    wait_for("the missing-database LOG line", || {
        (log_lines(&cluster, &missing) > 0).then_some(())
    });
    // Rounds go on meanwhile (naptime 1 s): point them back and wait for one
    // to purge, then count the lines.
    set_database(&mut admin, db);
    old_done_item(&mut client, "after_plain");
    wait_for("a round back in the maintained database", || {
        state_of(&mut client, "after_plain").is_none().then_some(())
    });
    assert_eq!(log_lines(&cluster, &not_installed), 1, "logged once");
    assert_eq!(log_lines(&cluster, &missing), 1, "logged once");
    assert_eq!(log_lines(&cluster, &["FATAL:", "plain"]), 0);

    // A change of database: the rounds move to the new one.
    let other = "maintained_too";
    ok(
        cluster.create_database(other),
        "creating the second database",
    );
    let mut other_client = ok(cluster.connect_to(other), "connecting");
    old_done_item(&mut other_client, "elsewhere");
    set_database(&mut admin, other);
    wait_for("a round in the new database", || {
        state_of(&mut other_client, "elsewhere")
            .is_none()
            .then_some(())
    });
    drop(other_client);

    // A fast shutdown is not held up by the worker.
    drop(client);
    drop(admin);
    let start = Instant::now();
    ok(cluster.stop(), "pg_ctl -m fast stop");
    let took = start.elapsed();
    println!("fast shutdown with the maintenance worker running took {took:?}");
    println!("the workers' lines in the server log:");
    let text = ok(
        std::fs::read_to_string(cluster.log_file()),
        "reading the server log",
    );
    for line in text.lines().filter(|line| line.contains(WORKER_TYPE)) {
        println!("  {line}");
    }
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
}

#[test]
fn without_preloading_no_worker_runs_and_purge_works() {
    let db = "unmaintained";
    let (_cluster, mut client) = common::own_cluster_with_database(db);

    done_item(&mut client, "a", "8 days");
    assert_eq!(
        workers(&mut client),
        0,
        "no maintenance worker without preloading"
    );
    // This session has loaded the library: the settings are defined.
    assert_eq!(show(&mut client, "workfence.retention"), "7d");
    let purged = ok(calls::purge(&mut client, None, None), "work_purge");
    assert_eq!(purged, 1);
}
